"""The compiled per-tuple engine: each algorithm stepped one tuple at a time, in machine code.

Not the vectorised batch path: every tuple goes through the slicing layer and the algorithm's
``push``/``pop``/``query`` exactly as the Python operators do (:mod:`.loop_template`, written once, and one
module per algorithm: :mod:`.sba` for SBA and PBA, :mod:`.two_stacks`, :mod:`.slick_deque`, :mod:`.daba`,
:mod:`.flatfat`, :mod:`.soe`; FiBA has none, see ``docs/stepwise.md``), over the built-in
aggregations and the user aggregations numba compiles (:mod:`.monoids`). PBA's lcs are built by
``lcs_worker`` on a pool thread, compiled with the GIL released, while the main loop goes on.

:class:`Stepper` holds one stream's state and drives the compiled loop; the loops are compiled once
per (algorithm, aggregation, latency or not) and cached: in memory, and for built-ins on disk (the
generated source is written to a cache directory and imported, so numba caches its machine code
beside it: a second process pays no compile).

Code generation
---------------
Why strings: numba compiles a loop once per set of argument types, but it cannot inline a merger
into a generic loop or specialise a loop to a partial's width (a float, or a tuple of ``w`` floats
held in scalars, not an array: no allocation per tuple). So each loop is written as Python source,
once per (algorithm, aggregation, latency timing, window kind), and compiled as one function in
which LLVM inlines ``lift``/``combine``/``lower`` and the merger. The pieces: the slicing layer's
template (:mod:`.loop_template`, with its macros ``@PUSH``/``@POP``/``@QUERY``/``@RESET``/``@EMIT``
...), each algorithm's snippets (an :class:`~.loop_template.Algorithm`), and
:func:`pba_runtime.kernels.codegen.expand`'s ``@L``/``@S`` partial loads and stores, written out for
one width. What a snippet may contain: statements in numba's nopython subset over the names the
template gives it (``P``, ``RES``, ``ident``, ``combine``, the algorithm's own ``ints``, ``parts``,
``arrays`` and ``params``), ``@L``/``@S``, and calls of its ``helpers``; it must not assign one of the
template's locals (:func:`~.loop_template.check_names` refuses it). Where the files go: a built-in's (or
a user aggregation made of importable module-level functions) loop is written to
``$PBA_STEPWISE_CACHE``, else ``$XDG_CACHE_HOME/pba_runtime/stepwise`` (``~/.cache/...``), as
``loop_<algorithm>_<aggregation>_<count|time>_<latency>_<digest>.py`` and imported from there, so
numba's ``cache=True`` keeps its machine code in that folder's ``__pycache__``; any other loop
(closures, a read-only cache folder) is ``exec``'d in memory and compiled per process. How the cache
is keyed: in memory by ``(algorithm, monoid key, latency, time)``; on disk by the file name, whose
digest is the sha256 of the generated text plus the bytes of the modules it imports
(:func:`_deps_digest`): a changed template, snippet or monoid writes a new file, never reuses a stale one.

Examples
--------
>>> import numpy as np
>>> import pba_runtime as pr
>>> st = Stepper("sba", pr.CountWindow(range=3, slide=1), "max", chunk_size=2)
>>> ends, res, _ = st.run(np.array([3.0, 1.0, 4.0, 1.0, 5.0]))
>>> ends.tolist(), res.tolist()
([3, 4, 5], [4.0, 4.0, 5.0])
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import re
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from ...aggregations import Aggregation, get_aggregation
from ...windows import TimeWindow
from . import daba, flatfat, loop_template, sba, slick_deque, soe, two_stacks
from .clock import ns_per_tick
from .monoids import Monoid, monoid_of

__all__ = ["ALGORITHMS", "Stepper", "loop_module", "monoid_of"]

#: name -> (the merger's template snippets, whether the lcs go to a worker)
ALGORITHMS: dict[str, tuple[loop_template.Algorithm, bool]] = {
    "sba": (sba.ALGORITHM, False),
    "pba": (sba.ALGORITHM, True),
    "two_stacks": (two_stacks.ALGORITHM, False),
    "slick_deque": (slick_deque.ALGORITHM, False),
    "daba": (daba.ALGORITHM, False),
    "flatfat": (flatfat.ALGORITHM, False),
    "soe": (soe.ALGORITHM, False),  # the merger is chosen by the aggregation: soe.EXACT for the built-in sums
}

#: what the Python SoE asks of an aggregation (its error message, word for word)
SOE_NEEDS = "an invertible aggregation (sum, count, mean, std, geomean)"

_modules: dict[tuple, Any] = {}
_lock = threading.Lock()
_SPIN_LIMIT_NS = 2e9  # the longest the main loop waits to reuse a slot a started worker has not finished with
#: hex digits of the sha256 in a generated file's name: collisions are out of reach, names stay short
DIGEST_CHARS = 16
#: 8-byte words in a 4 KiB page: :meth:`Stepper.outputs` writes one word per page to map it
PAGE_WORDS = 512
#: output rows beyond the windows due: one step of the loop may emit up to ``q + 3`` windows before it
#: checks for room again (the template's ``no + q + 3 > cap``)
OUTPUT_SLACK = 8
#: chunk slots beyond the ``q // b`` chunks a window spans: the open chunk and the closed ones whose lcs
#: may still be in flight
SPARE_CHUNK_SLOTS = 3
#: FlatFAT's first tree, as the Python aggregator sizes it (``algorithms.ring.ring_capacity``): a power of
#: two from this many slots ...
FLATFAT_FIRST_MIN = 4
#: ... up to this many (``ring.PREALLOC_MAX``); it doubles when full
FLATFAT_FIRST_MAX = 4096
N_PARALLEL = loop_template.N_PARAMS + 2  # pr_[N_PARALLEL]: whether a worker builds the lcs
#: PBA's worker spins (sched_yield) this long after its last task before it naps: far longer than a chunk's
#: period and a nap's wake-up on a virtual machine, so it never naps mid-stream, and idles once the stream ends
WORKER_SPIN_NS = 2e6
#: PBA: the share of a chunk's slack (``q - b + 1`` slices from its close to the first window needing its
#: lcs) the worker gets before the main loop helps (:mod:`.sba`)
HELP_AFTER = 0.5


def help_schedule(q: int, b: int) -> tuple[int, int]:
    """PBA's help for a late worker: ``(hdelay, hstep)``, the slices after a chunk closed at which the main
    loop starts building its lcs and the rows it builds a push, so that it is done before the first window
    needs it (``q - b + 1`` slices after the close; ``b == q``: at the close, all of it, as SBA).

    >>> help_schedule(16384, 8193)
    (4096, 3)
    >>> help_schedule(4, 4)
    (0, 4)
    """
    slack = q - b + 1
    hdelay = int(slack * HELP_AFTER) if slack > 2 else 0
    left = max(1, slack - hdelay - 1)
    return hdelay, -(-b // left)


def ring_capacity(q: int) -> int:
    """The slots of a merger's rings (Two-Stacks, DABA, SlickDeque, SoE): a power of two (so a position is
    ``& (cap - 1)``) above ``2 * q + 3``, at least 4.

    >>> ring_capacity(1), ring_capacity(16)
    (8, 64)
    """
    return 1 << max(2, (2 * q + 4 - 1).bit_length())


def _cache_dir() -> Path | None:
    base = os.environ.get("PBA_STEPWISE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "pba_runtime", "stepwise")
    try:
        Path(base).mkdir(parents=True, exist_ok=True)
        return Path(base) if os.access(base, os.W_OK) else None
    except OSError:
        return None


def loop_module(alg: loop_template.Algorithm, mono: Monoid, latency: bool, time: bool) -> Any:
    """The compiled loop of ``alg`` over ``mono`` for count (``time=False``) or time windows (a module or
    namespace with ``run`` and the helpers)."""
    key = (alg.name, mono.key, latency, time)
    with _lock:
        hit = _modules.get(key)
    if hit is not None:
        return hit
    body = loop_template.source(alg, mono.width, positional=mono.positional, latency=latency,
                          vector=mono.result == "vector", time=time)
    names = ("run",) + tuple(dict.fromkeys(n for n in ("build_lcs", "lcs_worker", "worker_loop", "wait_slot", "kept")
                                           + alg.helper_names if f"def {n}(" in body))
    inverse = "inverse(" in body
    cached = (mono.names is not None or mono.source is not None) and (
        not inverse or mono.inverse_name is not None or mono.inverse_source is not None)
    tail = "\n".join(f'{n} = numba.njit(nogil=True, error_model="numpy", cache={cached}'
                     + (', inline="always"' if n in alg.inline else "") + f')({n})' for n in names)
    mod: Any = None
    d = _cache_dir() if cached else None
    if d is not None:
        head = ("import math\nimport numba\nimport numpy as np\n"
                "from pba_runtime.kernels.stepwise.clock import ticks, fence, relax, nap\n"
                "from pba_runtime.kernels.stepwise.index import uidx\n"
                "from pba_runtime.kernels.stepwise.cache_hints import evict, prefetch\n")
        if mono.names is not None:
            lift, combine, lower = mono.names
            head += (f"from pba_runtime.kernels.stepwise.monoids import {lift} as lift, {combine} as combine, "
                     f"{lower} as lower\n")
            if inverse:
                head += f"from pba_runtime.kernels.stepwise.monoids import {mono.inverse_name} as inverse\n"
        else:  # a user aggregation's module-level functions, by name; its fingerprint names the file
            head += f"# aggregation {mono.key}\n"
            roles = tuple(zip(("lift", "combine", "lower"), mono.source))
            for role, (module, name) in roles + ((("inverse", mono.inverse_source),) if inverse else ()):
                head += f"from {module} import {name} as _{role}_py\n{role} = numba.njit(_{role}_py)\n"
        text = head + body + "\n" + tail + "\n"
        digest = hashlib.sha256((text + _deps_digest()).encode()).hexdigest()[:DIGEST_CHARS]
        kind = "time" if time else "count"
        stem = re.sub(r"\W", "_", f"loop_{alg.name}_{mono.name}_{kind}_{int(latency)}_{digest}")
        path = d / f"{stem}.py"
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(f"_pba_stepwise_{stem}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    if mod is None:
        import types

        import numba

        from .cache_hints import evict, prefetch
        from .clock import fence, nap, relax, ticks
        from .index import uidx

        mod = types.SimpleNamespace()
        ns = {"numba": numba, "np": np, "math": math, "lift": mono.lift, "combine": mono.combine,
              "lower": mono.lower, "inverse": mono.inverse, "ticks": ticks, "fence": fence, "relax": relax,
              "nap": nap, "uidx": uidx, "prefetch": prefetch, "evict": evict}
        exec(compile(body + "\n" + tail.replace("cache=True", "cache=False"),
                     f"<pba_runtime stepwise {alg.name} {mono.name}>", "exec"), ns)
        for n in names:
            setattr(mod, n, ns[n])
    with _lock:
        _modules.setdefault(key, mod)
        return _modules[key]


def _deps_digest() -> str:
    """What the generated loops depend on besides their own text (a changed monoid re-generates them)."""
    here = Path(__file__).parent
    return "".join(hashlib.sha256((here / f).read_bytes()).hexdigest() for f in ("monoids.py", "clock.py", "index.py",
                                                                                "cache_hints.py"))


class Stepper:
    """One stream through a compiled per-tuple algorithm: :meth:`run` feeds values (and timestamps).

    Parameters
    ----------
    algorithm : {"sba", "pba", "two_stacks", "slick_deque", "daba", "flatfat", "soe"}
    window : CountWindow or TimeWindow
    agg : str or Aggregation
    latency : bool
        Time each tuple that completes a window (ticks of :func:`.clock.ticks`).
    chunk_size : int
        SBA/PBA: slices per chunk (the caller plans it: :mod:`pba_runtime.chunking` is not below this layer).
    pool : WorkerPool, optional
        PBA: the pool whose thread builds the lcs; ``None``: the lcs are built on the main loop.
    """

    def __init__(self, algorithm: str, window: Any, agg: str | Aggregation, *, latency: bool = False,
                 chunk_size: int | None = None, pool: Any = None):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))} for the compiled "
                             f"per-tuple engine, got {algorithm!r}")
        self.algorithm = algorithm
        self.window = window
        self.agg = get_aggregation(agg)
        self.mono = monoid_of(self.agg)
        self.alg, parallel = ALGORITHMS[algorithm]
        if algorithm == "soe":
            self.alg = self._soe_merger()
        self.latency = latency
        self._is_time = isinstance(window, TimeWindow)
        self._mod = loop_module(self.alg, self.mono, latency, self._is_time)
        r, s = window.range, window.slide
        q, m = divmod(r, s)
        self.q = q
        off = window.offset if self._is_time else 0
        w = self.mono.width
        self._shape = (w,) if w else ()
        ident = self.mono.identity_array()
        self._ida = ident
        self.si = np.zeros(len(loop_template.COMMON_INTS) + len(self.alg.ints), dtype=np.int64)
        self.sp = np.repeat(ident, len(loop_template.COMMON_PARTS) + len(self.alg.parts), axis=0)
        params = [r, s, q, m, off, int(self._is_time)]
        self.pool = pool if parallel else None
        self.chunk_size = None
        if self.alg is sba.ALGORITHM:
            b = chunk_size
            if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 1 <= b <= q:
                raise ValueError(f"chunk_size must be an integer in [1, range // slide = {q}], got {chunk_size!r}")
            b = int(b)
            self.chunk_size = b
            K = q // b + SPARE_CHUNK_SLOTS
            self.K = K
            for name, v in (("known", -1), ("lc", -1), ("li", b - 1), ("lsl", K - 1), ("hj", b)):
                self.si[self._int(name)] = v
            arrays = [np.empty((K * b,) + self._shape), np.empty((K * b,) + self._shape),
                      np.empty((K,) + self._shape), np.full(K, -1, dtype=np.int64), np.full(K, -1, dtype=np.int64),
                      np.zeros(K, dtype=np.int64), np.zeros(4, dtype=np.int64), np.empty((K * b,) + self._shape)]
            arrays += [np.full(K, -1, dtype=np.int64) for _ in range(5)]  # alt, claim, wst, fin, own
            spin = int(_SPIN_LIMIT_NS / ns_per_tick())
            hdelay, hstep = help_schedule(q, b)
            params += [b, K, int(self.pool is not None), spin, hdelay, hstep]
        elif self.alg is slick_deque.ALGORITHM:
            if not self.agg.selective:
                raise ValueError(f"algorithm 'slick_deque' needs a selective aggregation (max, min, argmax: combine "
                                 f"returns one of its operands); aggregation {self.agg.name!r} is not selective")
            cap = ring_capacity(q)
            arrays = [np.empty((cap,) + self._shape), np.zeros(cap, dtype=np.int64)]
            params += [cap - 1]
        elif self.alg is flatfat.ALGORITHM:
            # the Python aggregator's first tree (ring_capacity(q + 2)); it doubles when full, so it
            # holds at most q + 3 slices in fewer than 2 * pow2(q + 3) slots
            init = FLATFAT_FIRST_MIN
            while init < q + 2 and init < FLATFAT_FIRST_MAX:
                init <<= 1
            most = max(init, 2 * (1 << (q + 3 - 1).bit_length()), flatfat.MIN_CAPACITY)
            arrays = [np.empty((2 * most,) + self._shape), np.zeros(2 * most, dtype=np.uint8),
                      np.empty((most,) + self._shape)]
            for name, v in (("fcap", init), ("d0", -1), ("d1", -1)):
                self.si[self._int(name)] = v
        elif algorithm == "soe":
            cap = ring_capacity(q)
            arrays = [np.empty((cap,) + self._shape)]
            if self.alg is not soe.ALGORITHM:  # the exact accumulators and their scratch
                # xs: the limbs in use (lo1, hi1, lo2, hi2), the NaN, +inf and -inf held, the count
                arrays += [np.zeros(soe.N_LIMBS1, dtype=np.int64), np.zeros(soe.N_LIMBS2, dtype=np.int64),
                           np.zeros(soe.N_TMP, dtype=np.int64), np.zeros(soe.N_TMP, dtype=np.int64),
                           np.zeros(32, dtype=np.int64), np.array([1 << 30, -1, 1 << 30, -1, 0, 0, 0, 0])]
            params += [cap - 1]
        else:  # two_stacks, daba: two rings of slice partials
            cap = ring_capacity(q)
            arrays = [np.empty((cap,) + self._shape), np.empty((cap,) + self._shape)]
            params += [cap - 1]
        self.arrays = arrays
        self.params = np.asarray(params, dtype=np.int64)
        self._worker: Future | None = None
        self.lcs_tasks = 0
        self.why = ""

    def _soe_merger(self) -> loop_template.Algorithm:
        """SoE's merger for this aggregation: exact accumulators for the built-in sums (as the Python SoE),
        the two-part total with the compiled ``inverse`` otherwise; the Python SoE's error if not invertible."""
        if not self.agg.invertible:
            raise ValueError(f"algorithm 'soe' needs {SOE_NEEDS}; aggregation {self.agg.name!r} is not invertible")
        if self.mono.names is not None and self.agg.compiled.exact in soe.EXACT:
            return soe.EXACT[self.agg.compiled.exact]
        if self.mono.names is None:  # a user aggregation: its inverse must compile (and agree with Python's)
            ident = self.mono.identity
            if self.mono.inverse is None:
                raise ValueError(f"aggregation {self.agg.name!r} has no compiled subtract-on-evict: "
                                 f"{self.mono.inverse_why}")
            try:
                got = self.mono.inverse(ident, ident)
            except Exception as e:
                raise ValueError(f"aggregation {self.agg.name!r} has no compiled subtract-on-evict: numba cannot "
                                 f"compile its inverse ({type(e).__name__}: {str(e).splitlines()[0]})") from None
            want = self.agg.inverse(self.agg.identity, self.agg.identity)
            w = self.mono.width
            if not (isinstance(got, float) if not w else isinstance(got, tuple) and len(got) == w):
                raise ValueError(f"aggregation {self.agg.name!r}: its inverse must return a partial like its identity "
                                 f"(a float or a tuple of {w} floats), got {got!r}")
            if not np.array_equal(np.asarray(got, dtype=float), np.asarray(want, dtype=float), equal_nan=True):
                raise ValueError(f"aggregation {self.agg.name!r}: its compiled inverse gives {got!r} on the identity, "
                                 f"its Python inverse {want!r}")
        return soe.ALGORITHM

    def _int(self, name: str) -> int:
        return (loop_template.COMMON_INTS + self.alg.ints).index(name)

    def counter(self, name: str) -> int:
        """One of the loop's scalars (``stalls``, ``flips``, ...)."""
        return int(self.si[self._int(name)])

    def outputs(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Output buffers for :meth:`run` over ``n`` more values (their pages touched: a caller that
        times the loop allocates them first, so the first write to each page is not in its timing)."""
        if self._is_time:
            cap = n + self.q + OUTPUT_SLACK
        else:
            cap = max(0, (int(self.si[0]) + n - self.window.range) // self.window.slide + 1) + self.q + OUTPUT_SLACK
        out_ends = np.zeros(cap, dtype=np.int64)
        out_res = np.zeros((cap,) + (self._shape if self.mono.result == "vector" else ()))
        lat = np.zeros(cap if self.latency else 0, dtype=np.int64)
        for a in (out_ends, out_res, lat):
            a.reshape(-1)[::PAGE_WORDS] = 0  # np.zeros maps zero pages lazily: write one word per page
        return out_ends, out_res, lat

    def run(self, values: np.ndarray, timestamps: np.ndarray | None = None, *, final: bool = False,
            out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step ``values`` (float64, and int64 ``timestamps`` for a time window, checked by the caller);
        with ``final``, end the stream. Returns ``(ends, lowered results, latency ticks)``, views of
        ``out`` (from :meth:`outputs`; grown if a time window emits more) or of fresh buffers."""
        n = len(values)
        ts = timestamps if timestamps is not None else np.zeros(0, dtype=np.int64)
        out_ends, out_res, lat = out if out is not None else self.outputs(n)
        run = self._mod.run
        i = no = 0
        todo = [(n, False)] + ([(n, True)] if final else [])
        self._start_worker()
        try:
            for hi, fin in todo:
                while True:
                    args = (values, ts, i, hi, self.si, self.sp, self._ida, *self.arrays, out_ends, out_res, lat, no,
                            fin, self.params)
                    i, no, ev = run(*args)
                    if ev == 0:
                        break
                    # ev == 1: the output is full
                    out_ends = np.concatenate([out_ends, np.empty_like(out_ends)])
                    out_res = np.concatenate([out_res, np.empty_like(out_res)])
                    if self.latency:
                        lat = np.concatenate([lat, np.zeros_like(lat)])
        finally:
            self._stop_worker()
        return out_ends[:no], out_res[:no], lat[:no]

    def _start_worker(self) -> None:
        """PBA: start the compiled worker loop on a pool thread (it builds every lcs the main loop posts)."""
        if self.pool is None or self._worker is not None:
            return
        saa, lcs, _ca, done, _sub, wq, ctl, _lcs2, _alt, claim, wst, fin, _own = self.arrays
        args = (saa, lcs, done, wq, ctl, self.chunk_size, self.K, claim, wst, fin, int(WORKER_SPIN_NS / ns_per_tick()))
        # dispatched once here, told to stop at once: the pool thread's first call would otherwise load the
        # compiled loop (numba's type dispatch and cache, with the GIL) while the first chunk's lcs is due
        stop = np.array([0, 0, 1, 0], dtype=np.int64)
        self._mod.worker_loop(*args[:4], stop, *args[5:])
        ctl[2] = 0
        try:
            self._worker = self.pool.submit_thread(self._mod.worker_loop, *args)
            self.params[N_PARALLEL] = 1
        except RuntimeError:  # the pool is closed: the lcs are built on the main loop
            self.params[N_PARALLEL] = 0
            self.why = "the pool is closed: the lcs are built on the main loop"

    def _stop_worker(self) -> None:
        """Tell the worker to finish what was posted and return; wait for it (it writes into our buffers)."""
        if self._worker is None:
            return
        ctl = self.arrays[6]
        ctl[2] = 1
        fut, self._worker = self._worker, None
        fut.result()
        self.lcs_tasks = int(ctl[1] - ctl[3])  # the tasks it built (skipped ones were taken back)

    def close(self) -> None:
        """Stop the worker, if it runs (:meth:`run` stops it before it returns)."""
        self._stop_worker()

    def stats(self) -> dict[str, Any]:
        """The algorithm's counters (PBA: chunks, stalls and their time; Two-Stacks: flips)."""
        st: dict[str, Any] = {"algorithm": self.algorithm, "tuples": int(self.si[0])}
        if self.alg is sba.ALGORITHM:
            st.update(chunk_size=self.chunk_size, lcs_tasks=self.lcs_tasks,
                      lcs_built_on_main_loop=self.counter("lcs_built") + self.counter("lcs_built_inline"),
                      inline_builds=self.counter("inline_builds"), stalls=self.counter("stalls"),
                      stall_ns=int(self.counter("stall_ticks") * ns_per_tick()),
                      fallbacks=self.counter("fallbacks"), worker_late=self.counter("worker_late"),
                      lcs_built_inline=self.counter("lcs_built_inline"),
                      lcs_taken_back=self.counter("lcs_taken_back"), slot_waits=self.counter("slot_waits"),
                      queue_full=self.counter("queue_full"))
            if self.why:
                st["why"] = self.why
        elif self.alg is two_stacks.ALGORITHM:
            st.update(flips=self.counter("flips"))
        elif self.alg is slick_deque.ALGORITHM:
            st.update(deque=self.counter("dt") - self.counter("dh"))
        elif self.alg is daba.ALGORITHM:
            st.update(flips=self.counter("flips"))
        elif self.alg is flatfat.ALGORITHM:
            st.update(capacity=self.counter("fcap"), resizes=self.counter("resizes"))
        elif self.alg is soe.ALGORITHM:
            st.update(held=self.counter("e") - self.counter("f"), refreshes=self.counter("refreshes"))
        elif self.algorithm == "soe":
            st.update(held=self.counter("e") - self.counter("f"), exact=True)
        return st


def warm_all() -> None:  # pragma: no cover - a convenience for the benchmarks
    """Compile every built-in loop now (they are cached on disk)."""
    from ...aggregations import BUILTIN_AGGREGATIONS

    for name in ALGORITHMS:
        for agg in BUILTIN_AGGREGATIONS:
            if agg != "collect":
                loop_module(ALGORITHMS[name][0], monoid_of(BUILTIN_AGGREGATIONS[agg]), False, False)

