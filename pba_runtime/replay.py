"""``pr.replay``: a whole stream through one algorithm's compiled per-tuple loop, timed as the paper times it.

Every tuple goes through the algorithm one at a time (the slicing layer, then ``push``/``pop``/``query``),
as :meth:`pba_runtime.WindowOperator.insert` does, but in machine code
(:mod:`pba_runtime.kernels.stepwise`): this is the per-tuple cost of the algorithm itself, which the
Python operators hide behind the interpreter's cost of each ``insert`` call. PBA's lcs are built on a
pool thread with the GIL released while the main loop goes on.

Examples
--------
>>> import numpy as np
>>> import pba_runtime as pr
>>> out = pr.replay("sba", pr.CountWindow(range=3, slide=1), "max", [3.0, 1.0, 4.0, 1.0, 5.0])
>>> out.ends.tolist(), out.results.tolist()
([3, 4, 5], [4.0, 4.0, 5.0])
>>> out = pr.replay("two_stacks", pr.TimeWindow(range=10, slide=5), "sum", [1.0, 2.0, 4.0],
...                 timestamps=[0, 7, 12], latency=True)
>>> out.ends.tolist(), out.results.tolist(), out.latency_ns.shape
([5, 10, 15, 20], [1.0, 3.0, 6.0, 4.0], (4,))
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .aggregations import Aggregation, as_float_array, get_aggregation
from .algorithms.base import no_timestamps, validate_timestamps
from .chunking import MIN_WORKER_CHUNK, theorem1
from .pool import WorkerPool, default_pool
from .windows import CountWindow, TimeWindow, validate_window

__all__ = ["Replay", "replay", "REPLAY_ALGORITHMS"]

REPLAY_ALGORITHMS = ("sba", "pba", "two_stacks", "slick_deque", "daba", "flatfat", "soe")

@dataclass(frozen=True)
class Replay:
    """The windows, timings and counters of one :func:`replay` run.

    ``ends``/``results``: every window, as ``sliding_aggregate`` gives them (end of stream included);
    ``seconds``: wall time of the loop (compile and the output's allocation excluded); ``latency_ns`` (with ``latency=True``): for
    each window, the time spent on the tuple that completed it, timed inside the compiled loop (a
    tuple that went back to Python, PBA's hand-off of a chunk, includes that time; windows emitted at
    the end of the stream get the end's time); ``stats``: the algorithm's counters.
    """

    ends: np.ndarray
    results: Any
    seconds: float
    latency_ns: np.ndarray | None = None
    stats: dict = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        """Tuples per second."""
        return self.stats.get("tuples", 0) / self.seconds if self.seconds > 0 else float("inf")


def replay(algorithm: str, window: CountWindow | TimeWindow, agg: str | Aggregation, values: Any,
           timestamps: Any = None, *, latency: bool = False, pool: WorkerPool | None = None,
           chunk_size: int | None = None) -> Replay:
    """Run ``values`` through ``algorithm``'s compiled per-tuple loop; see :class:`Replay`.

    Parameters
    ----------
    algorithm : {"sba", "pba", "two_stacks", "slick_deque", "daba", "flatfat", "soe"}
        ``"fiba"`` raises a ``ValueError`` saying why it has no compiled loop.
    window : CountWindow or TimeWindow
    agg : str or Aggregation
        A built-in but ``collect``, or a user aggregation whose Python ``lift``/``combine``/``lower``
        numba compiles (a ``ValueError`` says why not otherwise). ``slick_deque`` needs a selective
        aggregation, ``soe`` an invertible one (for a user aggregation, an ``inverse`` numba compiles).
    values : array-like of real numbers
    timestamps : array-like of int, optional
        Time windows only; non-decreasing.
    latency : bool
        Also time each window's completing tuple (a separate compiled loop: ``False`` pays nothing).
    pool : WorkerPool, optional
        PBA: the pool whose thread builds the lcs (default: the shared thread pool; with one core
        available the lcs are built on the main loop, which ``stats["lcs_on"]`` says).
    chunk_size : int, optional
        SBA/PBA: slices per chunk; default Theorem 1 verbatim for count windows (the main loop and the
        worker are both compiled, so they pay the same per combine, Theorem 1's assumption, and the
        hand-off is a store and a fence), and Theorem 1 over a time window's ``range // slide`` slices
        (Theorem 2 in the main loop's time: :mod:`pba_runtime.chunking`). PBA
        hands a planned chunk to its worker only if it has at least
        :data:`pba_runtime.chunking.MIN_WORKER_CHUNK` slices (smaller: the main loop builds the lcs, and
        ``stats["why"]`` says so); an explicit ``chunk_size`` always goes to the worker.
    """
    if algorithm == "fiba":
        raise ValueError("algorithm 'fiba' has no compiled per-tuple loop: its finger B-tree (nodes of variable "
                         "arity with parent pointers and two fingers, split/merge/move repairs, out-of-order keys) is "
                         "not a merger behind the slicing layer (docs/stepwise.md); run the Python operator, "
                         "pr.create('fiba', window, agg), or pick one of "
                         + ", ".join(map(repr, REPLAY_ALGORITHMS)))
    if algorithm not in REPLAY_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, REPLAY_ALGORITHMS))} for replay, "
                         f"got {algorithm!r}")
    window = validate_window(window)
    agg = get_aggregation(agg)
    if not isinstance(latency, bool):
        raise TypeError(f"latency must be True or False, got {latency!r}")
    if pool is not None and not isinstance(pool, WorkerPool):
        raise TypeError(f"pool must be a pba_runtime.WorkerPool or None, got {type(pool).__name__}")
    from .kernels.stepwise import Stepper, monoid_of

    mono = monoid_of(agg)  # ValueError: no compiled form
    vals = as_float_array(values, agg_name=agg.name, missing=agg.missing)
    if mono.non_negative and (vals < 0).any():
        agg.lift(float(vals[np.argmax(vals < 0)]))  # the Python form's error
    if isinstance(window, TimeWindow):
        ts = validate_timestamps(timestamps, len(vals), None, window)
    else:
        no_timestamps(timestamps, window)
        ts = None
    b = None
    if algorithm in ("sba", "pba"):
        if chunk_size is None:
            # both loops compiled, equal costs a combine: Theorem 1, over a time window's slices (pba_runtime.chunking)
            b = (theorem1(window.range, window.slide) if isinstance(window, CountWindow)
                 else theorem1(window.range // window.slide, 1))
        else:
            b = chunk_size
    why = ""
    if algorithm == "pba":
        if chunk_size is None and b < MIN_WORKER_CHUNK:
            pool = None
            why = (f"chunks of {b} slices (< MIN_WORKER_CHUNK = {MIN_WORKER_CHUNK}): a hand-off to the worker costs "
                   "more than the lcs, which the main loop builds (that is SBA)")
        elif pool is None:
            if len(os.sched_getaffinity(0)) < 2:
                why = "one core available: the lcs are built on the main loop (that is SBA)"
            else:
                pool = default_pool()
    else:
        pool = None
    st = Stepper(algorithm, window, agg, latency=latency, chunk_size=b, pool=pool)
    empty_ts = None if ts is None else ts[:0]
    Stepper(algorithm, window, agg, latency=latency, chunk_size=b).run(vals[:0], empty_ts)  # compile first
    out = st.outputs(len(vals))  # allocated and touched before the clock starts
    try:
        t0 = time.perf_counter()
        ends, res, lat = st.run(vals, ts, final=True, out=out)
        st.close()
        seconds = time.perf_counter() - t0
    finally:
        st.close()
    stats = st.stats()
    if algorithm == "pba":
        stats["lcs_on"] = "worker thread" if pool is not None else "main loop"
        if why:
            stats["why"] = why
    lat_ns = None
    if latency:
        from .kernels.stepwise.clock import ns_per_tick

        lat_ns = np.rint(lat * ns_per_tick()).astype(np.int64)
    if mono.result == "int":
        res = res.astype(np.int64)
    return Replay(ends, res, seconds, lat_ns, stats)
