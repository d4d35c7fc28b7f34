"""PBA (Parallel Boundary Aggregator) and SBA, its one-thread version.

(Over 500 lines: one operator whose per-tuple path, generic slicing-layer
path, deferred batch history and vectorised batch path share one merger
state. Where the chunks live is :mod:`pba_runtime.algorithms.chunk_store`.)

Zhang, Akbarinia, Toumani, *Efficient Incremental Computation of Aggregations
over Sliding Windows*, KDD'21.

Slices are grouped into chunks of ``b`` slices. Within the open chunk the main
loop keeps ``csa``, the cumulative aggregation from the chunk's first slice;
when a chunk closes, its slice aggregations (``saa``) go to a worker that builds
``lcs``, the cumulative aggregation from the right. A window holding slices
``[f, g)`` is then ``lcs[f] (+) ca... (+) csa[g-1]``: at most three parts when
``b > q/2`` (``q`` slices per window), and two for most windows when ``b`` is
close to ``q`` (see :mod:`pba_runtime.chunking`). A window that needs an lcs that is not
ready is a *stall* (counted): the main loop takes a task a thread worker has not started back,
builds one it is late with beside it (:meth:`PBA._lcs`), and waits only for worker processes.

SBA builds each lcs on the main thread at the chunk boundary: same chunks, same
arithmetic, so PBA's results equal SBA's bit for bit.

Where the chunks live is chosen once, in ``__init__``
(:func:`pba_runtime.algorithms.chunk_store.open_store`): in this process, their
lcs built by the pool's thread workers, or, with a process pool
(``WorkerPool(kind="process")``), in shared-memory slots: the main loop writes
every slice partial straight into its slot, a worker process builds the lcs in
place from a task that only names the slot, and the main loop reads the lcs
where the worker left it. That covers kernel aggregations and Python-callable
ones with fixed-size numeric partials (a float or a tuple of floats, as their
``identity``), whose Python ``combine`` loop then runs beside the main loop
instead of holding its GIL. Other partials (``collect``) use the pool's thread
workers. A worker that dies, hangs past the pool's ``task_timeout`` or raises
costs one lcs built on the main thread (counted in ``stats()["fallbacks"]``):
nothing is lost or duplicated. Whether a closed chunk's lcs is submitted (PBA)
or built here (SBA) is chosen by the class (``_close_chunk``).

One push (:meth:`PBA._push`): a chunk opens with :meth:`PBA._start_chunk`, each
partial is written as row ``i`` of the open chunk's rows (both stores allocate
them when the chunk opens) and combined into ``csa``, and the chunk closes with
:meth:`PBA._end_chunk`. The per-tuple path of count windows with slide 1 (the
paper's main experiment, :meth:`PBA._tuple_insert`) inlines the three lines
between those calls instead of calling ``_push``: the call and the attribute
reads it repeats cost 1-19% of a tuple (medians of 7 interleaved pairs, see
``docs/internals/code-map.md``, "PBA's structure"). That path keeps only ``_g``, ``_f``, ``_csa``
and its chunk bookkeeping up to date per tuple; every other entry point calls
``_leave_tuple_mode()`` first, which derives the slicing layer's counters.

Both also have a vectorised batch path (``insert_many``): slice aggregations by
``reduceat``, then csa and lcs of chunk-shaped 2-D arrays by ``accumulate``
(the lcs in the pool, in parallel with the csa on the main thread) and every
window by one vectorised merge. Batches use chunks of exactly ``q`` slices
(two parts per window, the fewest merges); the state they leave behind is the
same slice history the per-tuple path uses, so batches and single inserts can
be mixed freely.

Examples
--------
>>> from pba_runtime import CountWindow
>>> with SBA(CountWindow(range=4, slide=1), "max") as op:
...     ends, res = op.insert_many([3, 1, 4, 1, 5, 9, 2, 6])
>>> ends.tolist(), res.tolist()
([4, 5, 6, 7, 8], [4.0, 5.0, 9.0, 9.0, 9.0])
"""

from __future__ import annotations

import logging
import time
from array import array
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..aggregations import as_float_array, quiet_non_finite
from ..batch import COMPILED_SPLIT_MIN, _results, windows_from_values, windows_with_ends
from ..chunking import plan_chunk_size
from ..kernels import merge_range, resolve_engine
from ..kernels.read_only import read_only
from ..merge import build_lcs
from ..pool import WorkerPool, default_pool
from .base import SlicedAggregator, no_timestamps, sizeof, validate_timestamps
from .chunk_store import Chunk, open_store, row

__all__ = ["PBA", "SBA", "build_lcs"]

log = logging.getLogger("pba_runtime")


def _fused_layout(engine) -> bool:
    """Whether a compiled engine's time-window batches run fused (:func:`pba_runtime.kernels.time_fused.runner`:
    scalar, two-sum, argmax and std partials; not moment_sketch's 23 columns nor user aggregations).
    Decided without importing numba (the codes are :mod:`pba_runtime.kernels.compiled`'s; 0 adds)."""
    return engine.layout in ("scalar", "argmax", "std") or (engine.layout == "columns" and engine.ops == (0, 0))


class PBA(SlicedAggregator):
    """Parallel Boundary Aggregator.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
    pool : WorkerPool, optional
        Builds the lcs; ``None`` uses the process-wide default thread pool. A
        process pool keeps chunks in shared memory when the partials are
        fixed-size numeric (see the module doc), else uses its thread workers.
    chunk_size : int, optional
        Slices per chunk, ``1 <= chunk_size <= range // slide``; default from
        :func:`pba_runtime.chunking.plan_chunk_size` (numpy or Python-loop
        lcs costs, depending on the aggregation).
    engine : {"auto", "compiled", "numpy", "python"}
        What runs the batch path's window merge (:mod:`pba_runtime.kernels`);
        ``stats()["engine"]`` reports the one chosen.
    """

    name = "pba"
    parallel = True
    engines = ("compiled", "numpy", "python")
    #: Who chose the algorithm (``stats()["chosen_by"]``): ``"request"``, or ``"auto"`` (``pr.create``,
    #: ``pr.sliding_aggregate``), and why (``stats()["why"]``, a sentence, or a function giving it; ``None``
    #: when requested).
    chosen_by = "request"
    _why: Any = None
    #: Set by ``pr.create("auto")``: ``n_values -> (algorithm, why)``, the batch policy the operator's first
    #: ``insert_many`` asks when nothing was inserted before (``algorithms.choose_batch_algorithm``).
    _auto_batch: Any = None

    def __init__(self, window, agg, *, pool: WorkerPool | None = None, chunk_size: int | None = None,
                 engine: str = "auto"):
        super().__init__(window, agg)
        self.engine = resolve_engine(self.agg, engine)
        self._kernel = self.engine.kernel or self.agg.kernel  # what the batch path calls
        q = self._q
        if chunk_size is None:
            chunk_size = plan_chunk_size(self.window, self.agg)
        elif isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 1 <= chunk_size <= q:
            raise ValueError(f"chunk_size must be an integer in [1, range // slide = {q}], got {chunk_size!r}")
        if pool is not None and not isinstance(pool, WorkerPool):
            raise TypeError(f"pool must be a pba_runtime.WorkerPool or None, got {type(pool).__name__}")
        self.chunk_size = self._b = chunk_size
        self._pool = (pool if pool is not None else default_pool()) if self.parallel else None
        # where the chunks live and who builds their lcs, chosen once (see chunk_store)
        self._store = open_store(self._pool, self.agg, chunk_size, slots=max(4, -(-q // chunk_size) + 2),
                                 kernel=self._kernel)
        self._shm = self._store.shm  # its shared-memory slots (shm.ChunkStore), if any
        self._width = self._store.width  # floats per partial in a flat row, 0 for a scalar
        self._chunks_closed = 0
        self._lcs_tasks = 0
        self._stalls = 0
        self._stall_time = 0.0
        self._fallbacks = 0
        self._worker_late = 0  # lcs not ready when a window needed it (each counted once in stalls too)
        self._lcs_taken_back = 0  # ... whose task had not started: cancelled, built here
        self._lcs_built_inline = 0  # ... that a thread worker was building: built here beside it
        self._reset_merger()
        # the per-tuple path for count windows with slide 1 (the paper's main experiment)
        self._fast = not self._is_time and self._s == 1 and not self.agg.positional
        self._lower_float = self.agg.lower is float
        # built-in max/min/sum lift a float to itself
        self._float_passthrough = self.agg.float_passthrough
        self._combine, self._lower = self.agg.combine, self.agg.lower
        # the per-tuple path's vectorised lcs (+) ca_middle (scalar kernel partials only)
        kernel = self.agg.kernel
        self._mid_combine = kernel.combine if kernel is not None and not kernel.shape else None
        self._tuple_mode = False
        # time-window batches: the compiled engine slices in compiled passes (kernels/time_slicing.py), and
        # folds scalar/column partials into their slices there too; the numpy engine runs the reference
        self._compiled_slicing = self._is_time and self.engine.compiled
        self._compiled_fold = self._compiled_slicing and self.engine.layout in ("scalar", "columns")
        # ... and runs the whole batch (slicing, gaps, folds, lcs/csa, windows) and the end-of-stream
        # flush in one compiled call per batch (kernels/time_fused.py) for the built-in layouts; False
        # runs the episode path above (the reference; user aggregations always take it)
        self._fused_time = self._is_time and self.engine.compiled and _fused_layout(self.engine)
        self._flush_in_batch = False  # set by _insert_and_flush: the fused batch drains the stream too
        # count windows, slide 1, the compiled merge of scalar partials: _insert_lean's case
        self._lean_batch = (not self._is_time and self._s == 1 and self._q > 1 and self.engine.compiled
                            and self.engine.layout == "scalar" and self.engine.from_values is None
                            and not self.agg.positional and self.agg.float_passthrough)

    # ------------------------------------------------------------------ merger
    def _reset_merger(self, f: int = 0, g: int = 0) -> None:
        """An empty merger whose next slice is ``g`` (and front ``f``), relative to the last reset."""
        self._drop_all()
        self._g = g  # slices pushed since the last reset
        self._f = f  # slices popped since the last reset
        self._chunks: dict[int, Chunk] = {}
        self._open: Chunk | None = None  # the chunk being filled
        self._csa = self.agg.identity
        # after a batch: slices [f, g) as one array, cut into chunks only if a per-tuple call needs them
        self._deferred: tuple[np.ndarray, int, int] | None = None
        self._cursor()

    def _cursor(self) -> None:
        """Where the next push writes: ``_ob``, the open chunk's first slice, and ``_osaa``, its rows.

        Derived from ``_g`` and ``_open`` after a reset, a load or a restore; kept
        by :meth:`_start_chunk` afterwards. ``_ob = g - b``: no chunk open (the
        next push opens one).
        """
        g, b = self._g, self._b
        if g % b:
            self._ob = g - g % b
            self._osaa = self._open.saa if self._open is not None else None
        else:
            self._ob, self._osaa = g - b, None

    def _drop_all(self) -> None:
        for rec in getattr(self, "_chunks", {}).values():
            self._store.drop(rec)

    def _push(self, p: Any) -> None:
        """Append slice partial ``p``: the one push (the per-tuple path inlines its middle, see the module doc)."""
        if self._deferred is not None:
            self._build_deferred()
        g = self._g
        b = self._b
        i = g - self._ob
        if i == b:
            csa = self._start_chunk(g, p)
            i = 0
        else:
            self._store.put(self._open, i, p)  # first: a partial the store refuses changes nothing
            csa = self._csa = self._combine(self._csa, p)
        if i == b - 1:
            self._end_chunk(csa)
        self._g = g + 1

    def _start_chunk(self, g: int, p: Any) -> Any:
        """Open chunk ``g // b`` with ``p`` as its first slice; returns the csa (``p``)."""
        rec = self._store.start(p)  # a partial the store refuses changes nothing
        self._chunks[g // self._b] = self._open = rec
        self._ob = g
        self._osaa = rec.saa
        self._csa = p
        return p

    def _end_chunk(self, csa: Any) -> None:
        """The open chunk is full: its total is ``csa``; its lcs is submitted or built (``_close_chunk``)."""
        rec = self._open
        rec.ca = csa
        self._close_chunk(rec)

    def _close_chunk(self, rec: Chunk) -> None:
        """PBA: the lcs is built in the pool (here if the pool is closed, counted); SBA overrides it."""
        self._chunks_closed += 1
        try:
            rec.lcs = self._store.submit(rec)
            self._lcs_tasks += 1
        except RuntimeError:  # pool closed: fall back to SBA for this chunk
            self._fallbacks += 1
            rec.lcs = self._store.build(rec)

    def _lcs(self, c: int) -> Any:
        """The lcs of closed chunk ``c``: built here if nobody did; if its task is late, helped (a stall).

        A late task a thread worker has not started is taken back (cancelled) and built here; one it is
        building is built here too, into a buffer of its own (the lcs is a pure function of the chunk's
        partials, which nobody writes any more), and the worker's result is dropped: the main loop never
        waits for a thread worker longer than one build. A task of the worker *processes* (chunks in
        shared memory) is waited for, as before: that wait is what notices a dead or hung process
        (``task_timeout``, ``BrokenProcessPool``), and taking their tasks back would leave the
        processes idle whenever a chunk's slack is shorter than a round trip to them.
        """
        rec = self._chunks[c]
        lcs = rec.lcs
        if lcs is None:
            lcs = rec.lcs = self._store.build(rec)
        elif isinstance(lcs, Future):
            done = True
            if not lcs.done():
                self._stalls += 1
                self._worker_late += 1
                t0 = time.perf_counter()
                if not self._store.shared and lcs.cancel():  # not started: taken back
                    self._lcs_taken_back += 1
                    with np.errstate(invalid="ignore", over="ignore"):  # quiet as the worker would be
                        lcs = rec.lcs = self._store.build(rec)
                    self._stall_time += time.perf_counter() - t0
                    return lcs
                if not self._store.shared:  # a thread is building it: built here beside it
                    rec.task, rec.lcs = lcs, None
                    with np.errstate(invalid="ignore", over="ignore"):
                        lcs = rec.lcs = self._store.build(rec)
                    self._lcs_built_inline += 1
                    self._stall_time += time.perf_counter() - t0
                    return lcs
                done = self._pool.wait_for(lcs)
                self._stall_time += time.perf_counter() - t0
            lcs, repaired = self._store.result(self._pool, lcs, rec, done)
            self._fallbacks += repaired
            rec.lcs = lcs
        return lcs

    def _pop(self) -> None:
        if self._deferred is not None:
            self._build_deferred()
        f = self._f = self._f + 1
        if f % self._b == 0:
            self._store.drop(self._chunks.pop(f // self._b - 1, None))

    def _query(self) -> Any:
        if self._deferred is not None:
            self._build_deferred()
        f, g, b, w = self._f, self._g, self._b, self._width
        if f >= g:
            return self.agg.identity
        cf = f // b
        cl = (g - 1) // b
        last = self._csa if g % b else self._chunks[cl].ca
        combine = self.agg.combine
        if cf == cl:
            if f % b == 0:
                return last
            saa = self._chunks[cf].saa
            acc = row(saa, f % b, w)
            for j in range(f % b + 1, (g - 1) % b + 1):
                acc = combine(acc, row(saa, j, w))
            return acc
        j = f % b
        first = self._chunks[cf].ca if j == 0 else row(self._lcs(cf), j, w)
        for c in range(cf + 1, cl):
            first = combine(first, self._chunks[c].ca)
        return combine(first, last)

    # ------------------------------------------------------------------ per-tuple path
    # Count windows, slide 1, any store: push (inlined), pop one, query, per tuple. While
    # ``_tuple_mode`` is set only _g, _f, _csa and the chunk bookkeeping are kept up to
    # date; every other entry point calls _leave_tuple_mode() first, which derives the
    # slicing layer's counters (_n, _back, _front, _next_k, _emitted).
    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        if self._tuple_mode:
            if timestamp is None:
                return self._tuple_insert(value)
            self._leave_tuple_mode()  # a timestamp for a count window: the generic path refuses it
        if self._deferred is not None:
            self._build_deferred()
        if not self._fast or self._flushed or self._closed or timestamp is not None:
            return super().insert(value, timestamp)
        self._enter_tuple_mode()
        return self._tuple_insert(value)

    def _enter_tuple_mode(self) -> None:
        f, b = self._f, self._b
        self._fb = f - f % b  # first slice of the front chunk
        self._flcs = None  # the front chunk's lcs as rows, once resolved
        self._fmid = None  # lcs (+) ca of the one middle chunk, once a window spans three chunks
        self._tuple_w0 = max(0, self._g - self._r + 1)
        self._tuple_e0 = self._emitted
        self._tuple_mode = True

    def _leave_tuple_mode(self) -> None:
        if not self._tuple_mode:
            return
        self._tuple_mode = False
        g, f = self._g, self._f
        self._n = self._back = g
        self._front = f
        windows = max(0, g - self._r + 1)
        self._emitted = self._tuple_e0 + windows - self._tuple_w0
        if windows:
            self._next_k = g - self._r + 1

    def _tuple_insert(self, value: Any) -> list[tuple[int, Any]]:
        p = value if value.__class__ is float and self._float_passthrough else self.agg.lift(value)
        g = self._g
        b = self._b
        # push: _push's middle, inlined (see the module doc)
        i = g - self._ob
        if i == b:
            csa = self._start_chunk(g, p)
            i = 0
        else:
            saa = self._osaa
            w = self._width
            try:  # first: a partial the store refuses changes nothing
                if w:
                    saa[i * w : i * w + w] = array("d", p)
                else:
                    saa[i] = p
            except (TypeError, ValueError, OverflowError):
                self._store.refuse(p)
            csa = self._csa = self._combine(self._csa, p)
        if i == b - 1:
            self._end_chunk(csa)
        g += 1
        self._g = g
        k = g - self._r
        if k < 0:
            return []
        # pop one slice
        fb = self._fb
        j = k - fb
        if j == b:  # the window left the front chunk
            self._store.drop(self._chunks.pop(fb // b, None))
            fb = self._fb = fb + b
            self._flcs = self._fmid = None
            j = 0
        self._f = k
        # query
        ob = self._ob
        if fb == ob:  # the window lies in one chunk
            res = self._query() if j else csa
        elif j and ob - fb == 2 * b and self._mid_combine is not None:
            # three parts: lcs[j] (+) ca_mid is one numpy combine per front chunk, not one per tuple
            fm = self._fmid
            if fm is None:
                fm = self._fmid = self._front_mid(fb // b)
            res = self._combine(fm[j], csa)
        else:
            if j:
                lcs = self._flcs
                if lcs is None:
                    lcs = self._front_lcs(fb // b)
                first = lcs[j]
            else:
                first = self._chunks[fb // b].ca
            if ob - fb > b:  # a middle chunk: its ca (several only for user chunk sizes below q/2)
                if ob - fb == 2 * b:
                    first = self._combine(first, self._chunks[fb // b + 1].ca)
                else:
                    for c in range(fb // b + 1, ob // b):
                        first = self._combine(first, self._chunks[c].ca)
            res = self._combine(first, csa)
        return [(g, res if self._lower_float else self._lower(res))]

    def _front_lcs(self, c: int) -> Any:
        """The lcs of front chunk ``c``, indexable by row (tuples of floats for vector partials), kept in ``_flcs``."""
        lcs = self._lcs(c)
        w = self._width
        if w:
            lcs = [row(lcs, j, w) for j in range(self._b)]
        self._flcs = lcs
        return lcs

    def _front_mid(self, c: int) -> array:
        """``lcs[j] (+) ca_{c+1}`` for every ``j`` of front chunk ``c``: the per-tuple combines, element for
        element, in one numpy call (~0.5 ns a slice: no latency spike next to the lcs the chunk needed anyway)."""
        lcs = self._flcs
        if lcs is None:
            lcs = self._front_lcs(c)
        out = array("d")
        out.frombytes(self._mid_combine(np.asarray(lcs, dtype=np.float64), self._chunks[c + 1].ca).tobytes())
        return out

    # ------------------------------------------------------------------ slice history <-> arrays
    def _history(self) -> np.ndarray:
        """Slice partials ``[f, g)`` held by the merger, as a kernel array (read only)."""
        if self._deferred is not None:
            return self._deferred[0]
        kernel = self._kernel
        f, g, b = self._f, self._g, self._b
        parts = []
        for c in range(f // b, (g - 1) // b + 1) if g > f else ():
            lo = f - c * b if c == f // b else 0
            hi = min(b, g - c * b)
            parts.append(self._store.as_array(self._chunks[c], lo, hi))
        if not parts:
            return np.empty((0,) + kernel.shape)
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

    def _defer_history(self, X: np.ndarray, f: int, g: int) -> None:
        """Hold slice partials ``X`` = slices ``[f, g)`` (relative indices) as one owned array.

        A batch that follows reads them as they are (``_history``); only a
        per-tuple call cuts them into chunks (``_build_deferred``), so a run of
        batches never pays for chunk records, their ``ca`` or copies to ``array('d')``.
        """
        self._reset_merger(f, g)
        keep = X[: max(g - f, 0)]
        self._deferred = (keep if self._input_borrowed else keep.copy(), f, g)  # X may be the caller's array

    def _build_deferred(self) -> None:
        X, f, g = self._deferred
        self._deferred = None
        self._load_history(X, f, g)

    def _load_history(self, X: np.ndarray, f: int, g: int) -> None:
        """Rebuild chunks from slice partials ``X`` = slices ``[f, g)`` (relative indices)."""
        kernel = self._kernel
        b = self._b
        self._reset_merger(f, g)
        if g <= f:
            # nothing held: the next push opens chunk g // b at its slice g % b
            if g % b:
                self._start_open_chunk(np.empty((0,) + kernel.shape), g)
            return
        for c in range(f // b, (g - 1) // b + 1):
            lo = max(f, c * b)
            hi = min(g, (c + 1) * b)
            rows = X[lo - f : hi - f]
            if lo > c * b:  # evicted slices of the first chunk: identity, never read
                rows = np.concatenate([kernel.identity_array(lo - c * b), rows])
            if hi == (c + 1) * b:  # complete chunk
                ca = kernel.to_partials(kernel.accumulate(rows, axis=0)[-1:])[0]
                # lcs left to build on demand: a batch never reads it, and the next
                # per-tuple window needing it builds it once (_lcs)
                self._chunks[c] = self._store.from_rows(rows, ca)
            else:
                self._start_open_chunk(rows, g, c)

    def _start_open_chunk(self, rows: np.ndarray, g: int, c: int | None = None) -> None:
        kernel = self._kernel
        b = self._b
        if c is None:
            c = g // b
            rows = kernel.identity_array(g - c * b)
        rec = self._store.from_rows(rows, None)
        self._chunks[c] = rec
        self._open = rec
        self._csa = kernel.to_partials(kernel.accumulate(rows, axis=0)[-1:])[0] if len(rows) else self.agg.identity
        self._cursor()

    # ------------------------------------------------------------------ batch path
    def insert_many(self, values, timestamps=None):
        if self._auto_batch is not None:
            self._decide_batch(values)
        if (self._lean_batch and timestamps is None and values.__class__ is np.ndarray
                and values.dtype == np.float64 and values.ndim == 1 and values.flags.c_contiguous
                and not self._tuple_mode
                and not self._flushed and not self._closed):
            out = self._insert_lean(values)
            if out is not None:
                return out
        return self._insert_many(values, timestamps)

    def _decide_batch(self, values: Any, final: bool = False) -> None:
        """An ``"auto"`` operator's first batch into a fresh stream: the batch policy decides (once).

        SBA becomes PBA, with its pool, when the policy splits this batch; otherwise the
        per-tuple choice stays (a PBA over a large window keeps its worker for the
        tuples to come), unless the batch is the whole stream (``final``,
        ``sliding_aggregate``): then PBA becomes SBA, whose batch runs the same
        merge without starting a pool. ``stats()["why"]`` then says the batch's reason.
        """
        if not hasattr(values, "__len__") or not len(values):
            return  # an empty batch leaves the stream fresh: the next one decides
        decide, self._auto_batch = self._auto_batch, None
        if self._n or self._tuple_mode or self._flushed or self._closed or type(self) not in (PBA, SBA):
            return
        algorithm, why, pool = decide(len(values))
        if algorithm == "pba" and not self.parallel:
            self._become(PBA, pool if pool is not None else default_pool())
        elif algorithm == "sba" and self.parallel and final:
            self._become(SBA, None)
        if algorithm == self.name:
            self._why = why

    def _become(self, cls: type, pool: WorkerPool | None) -> None:
        """A fresh SBA becomes PBA with ``pool``, or a fresh PBA SBA (``pool=None``): the class, the pool
        and the chunk store change; nothing else differs between them (SBA only overrides ``_close_chunk``)."""
        self._store.close()
        self.__class__ = cls
        self._pool = pool
        q, b = self._q, self._b
        self._store = open_store(self._pool, self.agg, b, slots=max(4, -(-q // b) + 2), kernel=self._kernel)
        self._shm = self._store.shm
        self._width = self._store.width

    def _insert_lean(self, vals: np.ndarray) -> tuple[np.ndarray, Any] | None:
        """The batch path of the keyed runtime's common case, its Python trimmed: count windows, slide 1,
        the compiled merge of scalar partials, windows that fit in one block (no pool hand-off).

        The same steps as :meth:`_insert_many` for that case (the lift, the merge of the history and
        the batch in rows of ``q`` from the first window, the lower, the history kept), called
        directly: each key of a slot pays this per batch, and the layers between cost 5-10x the
        merge of a few hundred values. ``None``: not that case (see :meth:`lean_plan`); the general
        path then runs. Numba's loops raise no floating-point warnings, so no ``errstate`` is needed.
        """
        plan = self.lean_plan(len(vals))
        if plan is None:
            return None
        k_lo, nwin, hist = plan
        P = self._kernel.lift(vals, None)
        X = P if hist is None else np.concatenate([hist, P])
        out, ends = _results(nwin, (), np.float64, True)
        merge_range(self.engine, X, self._q, 0, nwin, out, ends, k_lo + self._r, 1)
        return ends, self.lean_finish(X, k_lo, nwin, len(vals), out)

    def lean_plan(self, N: int) -> tuple[int, int, np.ndarray | None] | None:
        """Whether a batch of ``N`` values takes the lean path (:meth:`_insert_lean`, or several keys in one
        compiled call, :func:`pba_runtime.algorithms.keyed_batch.insert_many_keyed`): ``(k_lo, nwin, history)``,
        the batch's first window, its windows and the slices before the batch that they hold (``None``:
        none); ``None`` when it does not: not this case, no window completes, a batch large enough for the
        pool, or a history that does not start at the first window."""
        if not self._lean_batch or self._tuple_mode or self._flushed or self._closed:
            return None
        n0, r = self._n, self._r
        k_lo = n0 + 1 - r if n0 + 1 > r else 0
        nwin = n0 + N - r - k_lo + 1
        if N == 0 or nwin <= 0 or nwin >= COMPILED_SPLIT_MIN or self._front != k_lo:
            return None
        hist = self._history() if self._back > self._front else None
        return k_lo, nwin, (hist if hist is not None and len(hist) else None)

    def lean_finish(self, X: np.ndarray, k_lo: int, nwin: int, N: int, out: np.ndarray) -> Any:
        """After the lean path's merge of ``X`` (history and batch) into ``out``: the lowered results, and
        the history kept, as :meth:`_insert_many` keeps it."""
        results = self._kernel.lower(out)
        self._emitted += nwin
        k_hi = k_lo + nwin - 1
        self._next_k = k_hi + 1
        self._finish_lean(X, k_lo, self._back + N, N, k_hi + 1)
        if self.agg.result == "int":
            results = np.asarray(results, dtype=np.int64)
        return results

    def _finish_lean(self, X, x0, g1, N, front) -> None:
        """``_finish_batch(X, x0, g1, N, 0, identity, front=front)``, its calls inlined
        (:meth:`_defer_history`, :meth:`_reset_merger`, :meth:`_cursor`: the same state, a test checks it):
        the lean path runs it for every key of every batch, ~1 us of calls each."""
        front = min(front, g1)
        keep = X[front - x0 :]
        if self._chunks:  # _reset_merger(front, g1)
            self._drop_all()
        self._g = g1
        self._f = front
        self._chunks = {}
        self._open = None
        identity = self.agg.identity
        self._csa = identity
        b = self._b
        if g1 % b:  # _cursor, with no chunk open
            self._ob, self._osaa = g1 - g1 % b, None
        else:
            self._ob, self._osaa = g1 - b, None
        keep = keep[: max(g1 - front, 0)]  # _defer_history
        self._deferred = (keep if self._input_borrowed else keep.copy(), front, g1)
        self._front = front
        self._back = g1
        self._n += N
        self._fill = 0
        self._cur = identity

    @quiet_non_finite
    def _insert_many(self, values, timestamps=None):
        self._leave_tuple_mode()
        kernel = self._kernel
        if kernel is None or self.engine.name == "python":
            return super().insert_many(values, timestamps)
        self._check_open()
        if not hasattr(values, "__len__"):
            values = list(values)
        if self._is_time:
            vals = as_float_array(values, agg_name=self.agg.name)
            ts = self._fused_timestamps(timestamps, len(vals)) if self._fused_time else None
            if ts is None:
                ts = validate_timestamps(timestamps, len(vals), self._t_last, self.window)
            return self._insert_many_time(vals, ts)
        no_timestamps(timestamps, self.window)
        vals = as_float_array(values, agg_name=self.agg.name)
        N = len(vals)
        if N == 0:
            return self._pack([], [])
        n0 = self._n
        s, r, q, m = self._s, self._r, self._q, self._m
        if s == 1 and q > 1 and self.engine.from_values is not None and N >= q:
            return self._insert_values(vals)
        P = kernel.lift(vals, np.arange(n0, n0 + N) if self.agg.positional else None)
        # 1. close slices: finish the open one, cut the rest every s tuples
        fill0 = self._fill
        need = (s - fill0) % s
        cur_row = kernel.to_array([self._cur])
        pieces = []
        if s == 1:
            new_slices = P
            fill, cur = 0, self.agg.identity
        else:
            if fill0 and N >= need:
                pieces.append(kernel.combine(cur_row, kernel.reduce_segments(P[:need], np.array([0]))))
                start = need
            else:
                start = 0 if fill0 == 0 else N
            nfull = (N - start) // s
            if nfull:
                pieces.append(kernel.reduce_segments(P[start : start + nfull * s], np.arange(0, nfull * s, s)))
            rest = P[start + nfull * s :]
            if fill0 and N < need:
                cur = kernel.to_partials(kernel.combine(cur_row, kernel.reduce_segments(P, np.array([0]))))[0]
                fill = fill0 + N
            elif len(rest):
                cur = kernel.to_partials(kernel.reduce_segments(rest, np.array([0])))[0]
                fill = len(rest)
            else:
                cur, fill = self.agg.identity, 0
            new_slices = np.concatenate(pieces) if len(pieces) > 1 else (pieces[0] if pieces else P[:0])
        # 2. windows ending in this batch: end n = k*s + r, n0 < n <= n0 + N
        k_lo = max(0, -((n0 + 1 - r) // -s))
        k_hi = (n0 + N - r) // s
        g0 = self._back
        g1 = g0 + len(new_slices)
        if k_hi < k_lo:
            X = np.concatenate([self._history(), new_slices]) if self._g > self._f else new_slices
            self._finish_batch(X, self._front, g1, N, fill, cur)
            return self._pack([], [])
        nwin = k_hi - k_lo + 1
        # slices [k_lo, g1) as one array: history, then the new slices
        if self._front < k_lo:
            self._pop_to(k_lo)
        hist = self._history() if g0 > self._front else None
        X = new_slices if hist is None or not len(hist) else np.concatenate([hist, new_slices])
        ends, full = windows_with_ends(kernel, X, q, nwin, k_lo * s + r, s, self._pool, agg=self.agg,
                                      engine=self.engine, lowered=not m)
        if m:
            # head of slice k+q: its first m tuples, at batch offsets (k+q)*s - n0 ...
            h0 = (np.arange(k_lo, k_hi + 1) + q) * s - n0
            heads = np.empty_like(full)
            inside = h0 >= 0
            if not inside.all():  # the open slice began before this batch
                heads[~inside] = kernel.combine(cur_row, kernel.reduce_segments(P[: m - fill0], np.array([0])))
            hs = h0[inside]
            if len(hs):
                # segments [h, h+m) interleaved with the gaps [h+m, next h): heads are the even ones
                bounds = np.empty(2 * len(hs) - 1, dtype=np.intp)
                bounds[0::2] = hs
                bounds[1::2] = hs[:-1] + m
                heads[inside] = kernel.reduce_segments(P[: hs[-1] + m], bounds)[0::2]
            full = kernel.combine(full, heads, out=full if kernel.combine_in_place else None)
        results = kernel.lower(full) if m else full
        self._emitted += nwin
        self._next_k = k_hi + 1
        self._finish_batch(X, k_lo, g1, N, fill, cur, front=k_hi + 1)
        if self.agg.result == "int":
            results = np.asarray(results, dtype=np.int64)
        return ends, results

    def _insert_values(self, vals: np.ndarray) -> tuple[np.ndarray, Any]:
        """Count windows, slide 1, an engine that merges straight from values (compiled std, mean, argmax).

        Every slice is one value, so the history's values (one column of its partials) and the
        batch's values make the merge's input, and the merge writes lowered results: no partial
        array for the batch, only for the ``q - 1`` slices kept as history.
        """
        kernel, engine = self._kernel, self.engine
        N, n0, r, q = len(vals), self._n, self._r, self._q
        k_lo = max(0, n0 + 1 - r)
        k_hi = n0 + N - r  # >= k_lo: N >= q
        g1 = self._back + N
        if self._front < k_lo:
            self._pop_to(k_lo)
        hist = self._history() if self._back > self._front else None
        if hist is not None and len(hist):
            old = hist if hist.ndim == 1 else hist[:, engine.value_column]
            V = np.concatenate([old, vals])
        else:
            V = vals
        nwin = k_hi - k_lo + 1
        ends, results = windows_from_values(engine, V, q, nwin, k_lo + r, 1, self._pool, pos0=k_lo)
        self._emitted += nwin
        self._next_k = k_hi + 1
        front = k_hi + 1
        tail = V[front - k_lo :]
        pos = np.arange(front, front + len(tail)) if self.agg.positional else None
        self._finish_batch(kernel.lift(tail, pos), front, g1, N, 0, self.agg.identity, front=front)
        if self.agg.result == "int":
            results = np.asarray(results, dtype=np.int64)
        return ends, results

    def _insert_many_time(self, vals: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, Any]:
        """Vectorised batch for time windows.

        The batch is cut into *episodes* where the slicing layer would reset: a
        tuple whose first window starts after the previous tuple's slice, so
        every window holding an older tuple is complete. Within an episode every
        pending window holds a tuple, slices are laid out densely (empty ones are
        the identity) and merged like count windows.
        """
        kernel = self._kernel
        N = len(vals)
        if N == 0:
            return self._pack([], [])
        s, r, off = self._s, self._r, self._off
        if self._fused_time:  # (it lifts the values, or its kernel does)
            return self._time_fused(vals, ts, flush=self._flush_in_batch)
        P = kernel.lift(vals, ts if self.agg.positional else None)
        if self._compiled_slicing:
            from ..kernels import time_slicing as slicing  # numba's import waits for the first compiled batch

            self._slicing = slicing
            time_slices = slicing.time_slices
        else:
            from ..windows import time_slices
        has_last = self._slice is not None
        G, starts = time_slices(ts, s, off, r, self._slice if has_last else 0, has_last)
        # episodes: [0, first start) continues the slicing before the batch; each start begins afresh
        first_fresh = len(starts) > 0 and starts[0] == 0
        bounds = starts.tolist() + [N]
        if not first_fresh:
            bounds.insert(0, 0)
        all_ends, all_res = [], []
        for e, (i0, i1) in enumerate(zip(bounds[:-1], bounds[1:])):
            if e > 0 or first_fresh:
                if self._slice is not None:  # windows holding older tuples were all completed by ts[i0]
                    e, res = self._drain_before(int(ts[i0]))
                    all_ends.append(e)
                    all_res.append(res)
                self._start(int(ts[i0]), int(G[i0]))
            e, res = self._episode(P[i0:i1], ts[i0:i1], G[i0:i1], last=i1 == N)
            all_ends.append(e)
            all_res.append(res)
        self._n += N
        self._t_last = int(ts[-1])
        ends = np.concatenate(all_ends)
        if self.agg.result == "list":
            return ends, [x for part in all_res for x in part]
        results = np.concatenate(all_res) if len(all_res) > 1 else all_res[0]
        return ends, results

    def _fused_timestamps(self, timestamps: Any, n: int) -> np.ndarray | None:
        """A batch's int64 timestamps checked in one compiled pass (non-decreasing, from the last one
        seen, in range), or ``None``: not an int64 array of ``n``, or a check failed, and
        ``validate_timestamps`` (the reference, with its error messages) decides."""
        ts = timestamps
        if not (isinstance(ts, np.ndarray) and ts.dtype == np.int64 and ts.ndim == 1 and len(ts) == n and n
                and ts.flags.c_contiguous):
            return None
        from ..kernels import time_fused as TF

        lo, hi = self.window.timestamp_range
        first = lo if self._t_last is None else max(lo, self._t_last)
        return ts if TF.timestamps_ok(read_only(ts), lo, hi, first) else None

    def _time_fused(self, vals: np.ndarray, ts: np.ndarray, flush: bool) -> tuple[np.ndarray, Any]:
        """A time-window batch of values ``vals`` (or, with ``flush``, the end of stream) in one compiled
        call (:mod:`pba_runtime.kernels.time_fused`); more only when its result array fills up. The
        compiled lifts of ``std`` and ``mean`` run inside the kernel (``time_fused.LIFTED``).

        The state goes in and comes out in the operator's own form (the slices of the pending
        windows as a deferred history, the open slice's head and rest), so per-tuple inserts,
        snapshots and the other paths carry on from it.
        """
        from ..batch import _results
        from ..kernels import time_fused as TF

        kernel, engine = self._kernel, self.engine
        shape = kernel.shape
        K = int(np.prod(shape, dtype=np.int64)) if shape else 1
        s, r, q, m, off = self._s, self._r, self._q, self._m, self._off
        N = len(ts)
        row = (K,) if shape else ()  # the kernels take scalar partials as 1-D arrays
        lowered = getattr(kernel, "_lower_name", None) in TF.LOWERED and getattr(kernel, "_lift_name", None) in TF.LIFTED
        if getattr(kernel, "_lift_name", None) in TF.LIFTED:
            P2 = np.ascontiguousarray(vals, dtype=np.float64)
        else:
            P = kernel.lift(vals, ts if self.agg.positional else None)
            P2 = np.ascontiguousarray(P, dtype=np.float64).reshape((N,) + row)
        # the kernel only reads the partials and timestamps: read-only views, whether the caller's arrays are
        # writable or Arrow's buffers, so each kernel compiles once (kernels/read_only.py)
        P2, ts = read_only(P2), read_only(ts)
        ident = kernel.identity_array(1).reshape((1,) + row)
        st = np.zeros(TF.STATE, dtype=np.int64)
        st[TF.LANES] = TF.LANES_MIN
        st[TF.FUSE] = 1 if TF.FUSE_ROWS else 0
        cur, head = ident.copy(), ident.copy()
        hist = np.empty((0,) + row)
        if self._slice is not None:
            S, next_k, front = self._slice, self._next_k, self._front
            x0 = min(next_k, front)
            pieces = [kernel.identity_array(front - x0).reshape((-1,) + row)] if front > x0 else []
            if self._g > self._f:
                pieces.append(self._history().reshape((-1,) + row))
            X = np.concatenate(pieces) if len(pieces) > 1 else (pieces[0] if pieces else hist)
            hist = np.ascontiguousarray(X[next_k - x0 : S - x0])
            cur[0] = kernel.to_array([self._cur]).reshape(row)
            head[0] = kernel.to_array([self._head]).reshape(row)
            st[TF.HAVE], st[TF.SLICE], st[TF.NEXT_K] = 1, S, next_k
            first_k = next_k
        else:
            first_k = (int(ts[0]) - off - r) // s + 1 if N else 0
        # every window emitted here starts in [first_k, last slice]: that many, at most, and at most
        # q + 1 per tuple; beyond 4 per tuple, the array grows when it fills
        bound = ((int(ts[-1]) - off) // s - first_k + 1 if N else 0) + q + 2
        # the kernel stops when fewer than 2q + 2 rows are left (an event computes at most 2q windows)
        cap = max(2 * q + 4, min(bound, N * (q + 1) + q + 2, 4 * N + 2 * q + 4))
        run = TF.runner(engine.layout, engine.ops)
        ops = engine._ops_array if engine.layout in ("scalar", "columns") else np.zeros(2, dtype=np.int64)
        pool = self._pool
        halves = None
        if N >= TF.SPLIT_MIN and pool is not None and pool.kind == "thread":  # a long batch: two threads
            halves = self._fused_halves(TF, run, ops, P2, ts, flush, hist, ident, st, cur, head, first_k, row,
                                        () if lowered else row)
        if halves is not None:
            out, ends, st, cur, head, hist_out = halves
        else:
            ring, lcs, hd = np.empty((2 * q,) + row), np.empty((2 * q,) + row), np.empty((q,) + row)
            hist_out = np.empty((q + 1,) + row)
            outs, ends_parts = [], []
            while True:
                out, ends = _results(cap, () if lowered else row, np.float64, True)
                run(P2, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends,
                    hist_out, ops)
                w = int(st[TF.WINDOWS])
                outs.append(out[:w])
                ends_parts.append(ends[:w])
                if st[TF.DONE]:
                    break
                cap *= 2
            out = outs[0] if len(outs) == 1 else np.concatenate(outs)
            ends = ends_parts[0] if len(ends_parts) == 1 else np.concatenate(ends_parts)
        nwin = len(ends)
        results = out if lowered else kernel.lower(out.reshape((nwin,) + shape))
        if self.agg.result == "int":
            results = np.asarray(results, dtype=np.int64)
        self._emitted += nwin
        self._n += N
        if N:
            self._t_last = int(ts[-1])
        if flush:
            self._flushed = True
        if st[TF.HAVE]:
            S, next_k, L = int(st[TF.SLICE]), int(st[TF.NEXT_K]), int(st[TF.HIST])
            self._defer_history(hist_out[:L].reshape((L,) + shape), 0, L)
            self._front, self._back, self._slice, self._next_k = next_k, S, S, next_k
            self._cur = kernel.to_partials(cur.reshape((1,) + shape))[0]
            self._head = kernel.to_partials(head.reshape((1,) + shape))[0]
        else:
            self._reset_merger()
            self._slice = None
        return ends, results

    def _fused_halves(self, TF, run, ops, P2, ts, flush, hist, ident, st, cur, head, first_k, row, res_row):
        """:meth:`_time_fused`'s call as two, side by side: the batch cut at an episode's end near its middle
        (:func:`~pba_runtime.kernels.time_fused.episode_cut`: episodes share no state), the first part with
        the operator's state and the end of its last episode drained (what the tuple that starts the next
        one does in one call), the second from a fresh state, on a pool thread. Each part's windows are
        the one call's, bit for bit. The pool thread counts the first part's windows
        (:func:`~pba_runtime.kernels.time_fused.part_windows`, one pass over its timestamps) and writes the
        second part's right after them, so nothing is moved. A second part that has not started when the
        first ends is cancelled and run here.

        Returns ``(out, ends, st, cur, head, hist_out)`` as the one call leaves them, or ``None``: no cut
        (no episode ends near the middle, or the records are sparse: the one call grows its array), or
        a count that missed or a part that ran out of room (neither expected: the one call then runs;
        ``st``, ``cur`` and ``head`` are as they came).
        """
        from ..batch import _results

        s, r, q, m, off = self._s, self._r, self._q, self._m, self._off
        N = len(ts)
        cut = TF.episode_cut(ts, off, s, r, N // 2, N - N // 8)
        if cut < 0:
            cut = TF.episode_cut(ts, off, s, r, N // 4, N // 2)
        if cut < 0:
            return None
        # each part's windows start in [its first window, its last slice] (as the one call's bound), and the
        # kernel stops with fewer than 2q + 2 rows left: with 3q + 6 more, it never does
        cap1 = (int(ts[cut - 1]) - off) // s - first_k + 1 + 3 * q + 6
        cap2 = (int(ts[-1]) - off) // s - ((int(ts[cut]) - off - r) // s + 1) + 1 + 3 * q + 6
        if cap1 + cap2 > 4 * N + 6 * q + 12:  # sparse records: the one call
            return None
        saved = st.copy(), cur.copy(), head.copy()
        st2, cur2, head2 = np.zeros_like(st), ident.copy(), ident.copy()
        st2[TF.LANES], st2[TF.FUSE] = st[TF.LANES], st[TF.FUSE]
        scratch = [(np.empty((2 * q,) + row), np.empty((2 * q,) + row), np.empty((q,) + row),
                    np.empty((q + 1,) + row)) for _ in range(2)]
        out, ends = _results(cap1 + cap2, res_row, np.float64, True)
        P_2, ts_2, none = P2[cut:], ts[cut:], hist[:0]
        ring2, lcs2, hd2, hist2 = scratch[1]
        have, S, next_k = bool(st[TF.HAVE]), int(st[TF.SLICE]), int(st[TF.NEXT_K])

        def second(o: int) -> int:
            """The second part's windows from ``out[o]``; ``o < 0``: right after the first part's, counted."""
            if o < 0:
                o = TF.part_windows(ts, off, s, r, cut, have, S, next_k)
            run(P_2, ts_2, s, off, r, q, m, none, flush, ident, st2, cur2, head2, ring2, lcs2, hd2, out[o:],
                ends[o:], hist2, ops)
            return o

        try:
            fut = self._pool.submit_thread(second, -1)
        except RuntimeError:  # the pool closed: both parts here
            fut = None
        ring, lcs, hd, hist1 = scratch[0]
        run(P2[:cut], ts[:cut], s, off, r, q, m, hist, True, ident, st, cur, head, ring, lcs, hd, out[:cap1],
            ends[:cap1], hist1, ops)
        w1 = int(st[TF.WINDOWS])
        if fut is None or fut.cancel():  # not started: here, after the first part's windows
            o = second(w1)
        else:
            o = fut.result()
        # (a count that missed would have had the two parts write over each other: both are dropped)
        if o != w1 or not (st[TF.DONE] and st2[TF.DONE]):  # pragma: no cover (each part counted and bounded)
            st[:], cur[:], head[:] = saved
            return None
        w = w1 + int(st2[TF.WINDOWS])
        return out[:w], ends[:w], st2, cur2, head2, hist2

    def _drain_before(self, t: int) -> tuple[np.ndarray, Any]:
        """Emit the windows a tuple at ``t`` completes when it starts a new episode."""
        out: list = []
        self._advance(None, None, out)  # emits every window holding an old tuple, then resets
        return self._pack([e for e, _ in out], [res for _, res in out])

    def _episode(self, P: np.ndarray, ts: np.ndarray, G: np.ndarray, last: bool) -> tuple[np.ndarray, Any]:
        kernel = self._kernel
        s, r, q, m, off = self._s, self._r, self._q, self._m, self._off
        S0 = self._slice
        g_last = int(G[-1]) if len(G) else S0  # no tuples: drain the open slice (end of stream)
        next_k = self._next_k
        K = (int(ts[-1]) - off - r) // s if last else g_last  # last window this episode completes
        S_end = max(g_last + 1, K + q + 1)
        width = S_end - S0
        tail = kernel.identity_array(width)
        if m:
            head = kernel.identity_array(width)
            in_head = (ts - off - G * s) < m
            groups = ((head, in_head), (tail, ~in_head))
        else:
            groups = ((tail, slice(None)),)
        for dense, sel in groups:
            self._fold_slices(P[sel], G[sel], S0, dense)
        # the open slice carried in from before the batch is older than the batch's tuples
        tail[:1] = kernel.combine(kernel.to_array([self._cur]), tail[:1])
        if m:
            head[:1] = kernel.combine(kernel.to_array([self._head]), head[:1])
        full = kernel.combine(head, tail) if m else tail
        base = self._back - self._g  # absolute index of the merger's slice 0
        front = self._front
        x0 = min(next_k, front)
        pieces = []
        if front > x0:
            pieces.append(kernel.identity_array(front - x0))
        if self._g > self._f:
            pieces.append(self._history())
        pieces.append(full)
        X = np.concatenate(pieces) if len(pieces) > 1 else full
        nwin = K - next_k + 1
        if nwin > 0:
            ends, agg_full = windows_with_ends(kernel, X[next_k - x0 :], q, nwin, next_k * s + off + r, s,
                                               self._pool, agg=self.agg, engine=self.engine, lowered=not m)
            if m:
                agg_full = kernel.combine(agg_full, head[next_k + q - S0 : K + q + 1 - S0])
            results = kernel.lower(agg_full) if m else agg_full
            if self.agg.result == "int":
                results = np.asarray(results, dtype=np.int64)
            self._emitted += nwin
            self._next_k = K + 1
        else:
            ends, results = self._pack([], [])
        if last:
            new_front = max(front, self._next_k)
            keep = X[new_front - x0 : g_last - x0]
            self._defer_history(keep, new_front - base, g_last - base)
            self._front, self._back, self._slice = new_front, g_last, g_last
            self._head = kernel.to_partials(head[g_last - S0 : g_last - S0 + 1])[0] if m else self.agg.identity
            self._cur = kernel.to_partials(tail[g_last - S0 : g_last - S0 + 1])[0]
        else:
            self._reset_merger()
            self._slice = None
        return ends, results

    def _fold_slices(self, P: np.ndarray, G: np.ndarray, S0: int, dense: np.ndarray) -> None:
        """``dense[g - S0]`` = the partial of the tuples of slice ``g`` (``G`` sorted; other slices untouched)."""
        if not len(G):
            return
        if self._compiled_fold:
            slicing = self._slicing
            if dense.ndim == 1:
                slicing.fold_scalar(read_only(np.ascontiguousarray(P)), G, S0, dense, self.engine.ops[0])
            else:
                slicing.fold_columns(read_only(np.ascontiguousarray(P)), G, S0, dense, self.engine._ops_array)
            return
        starts = np.flatnonzero(np.diff(G)) + 1
        starts = np.insert(starts, 0, 0)
        dense[G[starts] - S0] = self._kernel.reduce_segments(P, starts)

    def _pop_to(self, k: int) -> None:
        while self._front < k:
            self._pop()
            self._front += 1

    def _finish_batch(self, X, x0, g1, N, fill, cur, front=None) -> None:
        """Keep slices ``[front, g1)`` of ``X`` (which starts at slice ``x0``) as the new history."""
        front = self._front if front is None else front
        front = min(front, g1)
        keep = X[front - x0 :]
        self._defer_history(keep, front, g1)
        self._front = front
        self._back = g1
        self._n += N
        self._fill = fill
        self._cur = cur

    # ------------------------------------------------------------------ bookkeeping
    _STATE_FIELDS = SlicedAggregator._STATE_FIELDS + ("_g", "_f", "_csa", "_chunks_closed", "_lcs_tasks",
                                                      "_stalls", "_stall_time", "_fallbacks", "_worker_late",
                                                      "_lcs_taken_back", "_lcs_built_inline")

    def _get_state(self) -> dict[str, Any]:
        self._leave_tuple_mode()
        if self._deferred is not None and not self._store.flat:
            self._build_deferred()  # Python partials in the state: any engine restores it
        st = super()._get_state()
        if self._deferred is not None:  # after a batch: the slices as one array, as they are
            X, f, g = self._deferred
            st["deferred"] = (np.array(X), f, g)
            st["chunks"], st["open"], st["chunk_size"] = {}, None, self._b
            return st
        chunks = {}
        for c in list(self._chunks):
            rec = self._chunks[c]
            lcs = self._lcs(c) if rec.lcs is not None else None
            n = self._g - c * self._b if rec is self._open else self._b  # rows written
            chunks[c] = self._store.snapshot(rec, n, lcs)  # copies: a snapshot never points into the store
        st["chunks"] = chunks
        st["open"] = next((c for c, rec in self._chunks.items() if rec is self._open), None)
        st["chunk_size"] = self._b
        return st

    def _insert_and_flush(self, values, timestamps=None):
        """Fused time windows: the batch and the end of stream in one compiled call (no second call,
        and no copy of the results to join them); otherwise ``insert_many`` then ``flush``."""
        if self._auto_batch is not None:
            self._decide_batch(values, final=True)
        if not self._fused_time:
            return super()._insert_and_flush(values, timestamps)
        self._flush_in_batch = True
        try:
            ends, results = self.insert_many(values, timestamps)
        finally:
            self._flush_in_batch = False
        if self._flushed:
            return ends, results
        tail_ends, tail_results = self.flush()  # an empty batch: no compiled call ran
        if not len(tail_ends):
            return ends, results
        return np.concatenate([ends, tail_ends]), np.concatenate([results, tail_results])

    @quiet_non_finite
    def flush(self):
        self._leave_tuple_mode()
        kernel = self._kernel
        if not self._is_time or kernel is None or self.engine.name == "python" or self._slice is None or self._flushed or self._closed:
            return super().flush()
        # End of stream for time windows: every window still holding a tuple, merged in one
        # vectorised pass (an episode with no new tuple), not one query per window.
        none = np.empty(0, dtype=np.int64)
        if self._fused_time:
            ends, results = self._time_fused(np.empty(0), none, flush=True)
        else:
            P = kernel.lift(np.empty(0), none if self.agg.positional else None)
            ends, results = self._episode(P, none, none, last=False)
        self._flushed = True
        return ends, results

    def _set_state(self, st: dict[str, Any]) -> None:
        self._leave_tuple_mode()
        if st["chunk_size"] != self._b:
            raise ValueError(f"state was taken with chunk_size {st['chunk_size']}, this operator has {self._b}")
        # counters a state taken before the late-worker help had not: zero
        st = {"_worker_late": 0, "_lcs_taken_back": 0, "_lcs_built_inline": 0, **st}
        super()._set_state(st)
        self._drop_all()
        self._deferred = None
        if st.get("deferred") is not None:
            X, f, g = st["deferred"]
            self._reset_merger(f, g)
            self._deferred = (X, f, g)
            return
        self._chunks = {c: self._store.restore(saa, lcs, ca) for c, (saa, lcs, ca) in st["chunks"].items()}
        self._open = self._chunks.get(st["open"]) if st["open"] is not None else None
        self._cursor()

    @property
    def emitted(self) -> int:
        self._leave_tuple_mode()
        return self._emitted

    def stats(self) -> dict[str, Any]:
        self._leave_tuple_mode()
        st = super().stats()
        st.update(
            chunk_size=self._b,
            chunks=self._chunks_closed,
            lcs_tasks=self._lcs_tasks,
            stalls=self._stalls,
            stall_time=self._stall_time,
            fallbacks=self._fallbacks,
            worker_late=self._worker_late,
            lcs_taken_back=self._lcs_taken_back,
            lcs_built_inline=self._lcs_built_inline,
            pool=None if self._pool is None else self._pool.kind,
            shared_memory=self._store.shared,
            chosen_by=self.chosen_by,
            why=self._why() if callable(self._why) else self._why,
        )
        return st

    def state_bytes(self) -> int:
        self._leave_tuple_mode()
        total = 0 if self._deferred is None else self._deferred[0].nbytes
        for rec in self._chunks.values():
            for part in (rec.saa, rec.lcs):
                if isinstance(part, (array, memoryview)):
                    total += part.nbytes if isinstance(part, memoryview) else part.itemsize * len(part)
                elif isinstance(part, list):
                    total += sizeof(part)
        return total

    def close(self) -> None:
        self._leave_tuple_mode()
        if not self._closed:
            for rec in self._chunks.values():
                if isinstance(rec.lcs, Future):
                    rec.lcs.cancel()
            self._drop_all()
            self._chunks = {}
            self._open = None
            self._deferred = None
            self._store.close()  # shared memory: unlinks its blocks
        super().close()


class SBA(PBA):
    """Sequential Boundary Aggregator: PBA with every lcs built on the main thread."""

    name = "sba"
    parallel = False

    def _close_chunk(self, rec: Chunk) -> None:
        """The lcs is built on the main thread, at the chunk boundary."""
        self._chunks_closed += 1
        rec.lcs = self._store.build(rec)
