r"""The chunk manager: how many slices make one PBA chunk, from the paper's theorems (Zhang, Akbarinia,
Toumani, KDD'21) and :func:`generalized_chunk_size`'s extension of Theorem 1 to a main loop and a worker of
unequal costs (:func:`plan_chunk_size`, the default of SBA and PBA). With ``q = r // s`` and ``m = r % s``:

* **Theorem 1** (count windows): ``b* = q`` if ``q <= s + m + 1``, otherwise
  ``b* = (s*(q + 1) + m + 1) // (s + 1)``; then ``k = q // b* == 1``.
* **Theorem 2** (time windows, ``T_u`` = cost of one combine in time units):
  ``b* = q`` if ``q <= (s + 2*T_u + C) / T_u``, otherwise
  ``b* = (q*(s + T_u) + s + 2*T_u + C) // (s + 2*T_u)``, with ``C = 0`` if
  ``m == 0`` else ``C = s*m + T_u``.

Examples
--------
>>> from pba_runtime.windows import CountWindow
>>> theorem1(32, 1), theorem1(1000, 1), theorem1(10, 2)
(17, 501, 4)
>>> optimal_chunk_size(CountWindow(range=32, slide=1))
17
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cache

from .windows import CountWindow, TimeWindow, validate_window

__all__ = [
    "theorem1",
    "theorem2",
    "generalized_chunk_size",
    "optimal_chunk_size",
    "plan_chunk_size",
    "calibrate_combine_cost",
    "CostModel",
    "DEFAULT_COSTS",
    "PYTHON_LOOP_COSTS",
    "MIN_WORKER_CHUNK",
]


def theorem1(r: int, s: int) -> int:
    """Optimal chunk size ``b*`` for a count-based ``W[r, s]`` (Theorem 1, verbatim)."""
    q, m = divmod(r, s)
    if q <= s + m + 1:
        return q
    return (s * (q + 1) + m + 1) // (s + 1)


def theorem2(r: int, s: int, t_u: float) -> int:
    """Optimal chunk size ``b*`` for a time-based ``W[r, s]`` (Theorem 2, verbatim).

    ``t_u`` is the cost of one combine, in the window's time units.
    """
    if not t_u > 0:
        raise ValueError(f"combine_cost must be > 0 (time units per combine), got {t_u!r}")
    q, m = divmod(r, s)
    c = 0.0 if m == 0 else s * m + t_u
    if q <= (s + 2 * t_u + c) / t_u:
        return q
    return max(1, min(q, int(math.floor((q * (s + t_u) + s + 2 * t_u + c) / (s + 2 * t_u)))))


@dataclass(frozen=True)
class CostModel:
    """Costs in units of one main-loop tuple (``T_m = 1``).

    worker: ``T_w / T_m``, the worker's cost per lcs element.
    launch: ``L / T_m``, the hand-off latency of one lcs task.
    """

    worker: float = 1.0
    launch: float = 0.0


# numpy's lcs element against a Python insert, and a thread hand-off there and back in inserts, rounded up
# from bench/bench_chunking.py.
DEFAULT_COSTS = CostModel(worker=0.03, launch=600.0)

#: Chunk planning costs for aggregations without a kernel. Their lcs is a Python loop of ``combine``, not
#: numpy, so an lcs element costs a good share of a main-loop insert and the hand-off goes to a worker process
#: (``bench/bench_process_pool.py`` measures both): with :data:`DEFAULT_COSTS` a large chunk would leave too
#: little slack for a Python lcs and every chunk would stall. SBA and PBA plan alike, so they still get the
#: same chunks (and the same bits) for a given window and aggregation.
PYTHON_LOOP_COSTS = CostModel(worker=0.3, launch=2000.0)


#: The smallest chunk whose lcs the compiled PBA (``pr.replay``) hands to its worker; smaller chunks'
#: lcs are built on the main loop, as SBA does (same chunks: the same bits).
#:
#: Why: Theorem 1's chunk leaves ``b - 1`` tuples between a chunk's close and the first window that
#: needs its lcs, a few nanoseconds each in the compiled main loop; against that slack the worker pays the
#: hand-off (the queue's, ``saa``'s and ``lcs``' cache lines cross cores, and on a loaded machine the
#: worker must first be scheduled) and ``b - 2`` combines of its own. Below this many slices the slack
#: cannot hold a hand-off, and the whole lcs costs the main loop less than one stall (PBA would stall on
#: most chunks: ``bench/bench_stepwise.py``). Theorem 1/2's chunk itself is kept (a larger minimum chunk,
#: b = q, still stalls on every chunk: it leaves no slack at all), so SBA and PBA keep their chunks and
#: their bits for every window.
MIN_WORKER_CHUNK = 512


def generalized_chunk_size(r: int, s: int, costs: CostModel = CostModel()) -> int:
    """Largest stall-free chunk size for unequal main-loop/worker costs.

    Theorem 1 assumes that the main loop and the worker pay the same ``T_u`` per
    combine. Here the main loop is Python (``T_m``: the cost of one tuple through
    ``insert``) and the worker is numpy (``T_w``: the cost of one lcs element), with
    a fixed latency ``L`` to hand a chunk to the worker and get it back.

    When chunk ``c`` closes, the worker starts its lcs from the right: ``lcs[j]`` is
    ready ``L + (b - 1 - j) * T_w`` after the boundary. The first window that needs
    it starts at slice ``j = 1`` of chunk ``c`` (``j = 0`` uses the chunk aggregation
    ``ca`` that the main loop already has) and ends ``r - (b - 1)*s`` tuples after the
    boundary, i.e. after ``r - (b - 1)*s - 1`` more main-loop combines. Later ``j``
    are easier (the worker needs less, the main loop gives more), so there is no
    stall iff::

        L + (b - 2) * T_w  <=  (r - (b - 1)*s - 1) * T_m
        <=>  b  <=  ((r + s - 1) * T_m + 2*T_w - L) / (T_w + s*T_m)

    With ``T_w = T_m`` and ``L = 0`` the bound is ``(r + s + 1) / (s + 1)``, exactly
    Theorem 1 (``min(q, floor(.))`` is its two cases). We take the largest ``b``
    that avoids stalls, clamped to ``[q // 2 + 1, q]``: above ``q`` a window would
    need a range inside one chunk, below ``q // 2 + 1`` it would span more than three
    chunks (``k > 1``), i.e. more merges. Fewer, larger chunks also mean fewer
    3-part windows: a window spans three chunks for about ``q - b`` of every ``b``
    window starts.

    The costs are fixed constants (:data:`DEFAULT_COSTS`, :data:`PYTHON_LOOP_COSTS`; ``bench/bench_chunking.py``
    measures them), not calibrated at run time, so that a given window always gets the same chunks (and so
    bit-identical floating-point results across runs, machines, SBA and PBA).

    With equal costs and no launch latency it equals :func:`theorem1`.

    >>> all(generalized_chunk_size(r, s) == theorem1(r, s) for r in range(1, 200) for s in range(1, r + 1))
    True
    """
    q = r // s
    if q <= 2:
        return max(1, q)
    bound = ((r + s - 1) + 2 * costs.worker - costs.launch) / (costs.worker + s)
    b = int(math.floor(bound + 1e-9))
    return max(q // 2 + 1, min(q, b))


def optimal_chunk_size(window: CountWindow | TimeWindow, combine_cost: float | None = None) -> int:
    """The paper's ``b*`` for ``window``: Theorem 1 (count) or Theorem 2 (time).

    ``combine_cost`` is ``T_u`` in the window's time units; for time windows it
    is calibrated on this machine when not given, assuming millisecond timestamps.
    """
    window = validate_window(window)
    if isinstance(window, CountWindow):
        return theorem1(window.range, window.slide)
    if combine_cost is None:
        combine_cost = calibrate_combine_cost() * 1e3  # seconds -> milliseconds
    return theorem2(window.range, window.slide, combine_cost)


def plan_chunk_size(window: CountWindow | TimeWindow, agg=None, costs: CostModel | None = None) -> int:
    """The chunk size SBA and PBA use by default: deterministic for a window and aggregation.

    Count windows use :func:`generalized_chunk_size` with the fixed cost model:
    :data:`DEFAULT_COSTS` when the aggregation has a numpy kernel (or ``agg`` is
    None), :data:`PYTHON_LOOP_COSTS` when its lcs is a Python loop. Time windows
    are planned as the count window ``W[q, 1]`` over their ``q = r // s`` slices
    (Theorem 2 in the main loop's time, below).

    Theorem 2 measures a slice by the stream's clock: at the stream's own pace a slice lasts ``s`` (a second,
    say), far longer than any lcs takes, so it gives ``b* = q``, a chunk of a whole window's slices, whose lcs
    is needed one slice after the chunk closes. A replay, or a runtime catching up on a backlog, runs faster
    than that clock: a slice then lasts as long as the main loop takes over its tuples, at least one tuple's
    step. Counted in that time, one tuple per slice (the least a slice with data costs; more tuples only add
    slack), a time window is the count window ``W[q, 1]`` over slices, and its chunk is planned as one:
    :func:`plan_chunk_size` uses ``generalized_chunk_size(q, 1)``, and ``pr.replay`` (both loops compiled, equal
    costs) Theorem 1 over slices, ``theorem1(q, 1) = (q + 2) // 2``: with ``b = q`` the main loop would wait
    for the lcs at every chunk.

    >>> from pba_runtime import CountWindow, TimeWindow, get_aggregation
    >>> plan_chunk_size(CountWindow(range=8192, slide=1))
    7370
    >>> plan_chunk_size(CountWindow(range=8192, slide=1), get_aggregation("collect"))
    4763
    >>> plan_chunk_size(TimeWindow(range=3_600_000, slide=1_000)), plan_chunk_size(TimeWindow(range=60, slide=1))
    (2912, 31)
    """
    if costs is None:
        costs = DEFAULT_COSTS if agg is None or agg.kernel is not None else PYTHON_LOOP_COSTS
    if isinstance(window, CountWindow):
        return generalized_chunk_size(window.range, window.slide, costs)
    return generalized_chunk_size(window.range // window.slide, 1, costs)


@cache
def calibrate_combine_cost(repeat: int = 5, n: int = 20_000) -> float:
    """Seconds per Python ``combine`` of two floats (the paper's ``T_u``), best of ``repeat``."""
    from .aggregations import _max2

    xs = [float(i % 97) for i in range(n)]
    best = math.inf
    for _ in range(repeat):
        acc = -math.inf
        t0 = time.perf_counter()
        for x in xs:
            acc = _max2(acc, x)
        best = min(best, time.perf_counter() - t0)
    return best / n
