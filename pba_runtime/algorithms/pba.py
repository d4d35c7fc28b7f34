"""PBA (Parallel Boundary Aggregator) and SBA, its one-thread version.

(Over 500 lines: one operator whose per-tuple paths, generic, fused and lean,
the deferred batch history and the vectorised batch path share one merger
state; the planned split is a chunk store interface with a local and a
shared-memory implementation, chosen once in ``__init__``, see issue 16.)

Zhang, Akbarinia, Toumani, *Efficient Incremental Computation of Aggregations
over Sliding Windows*, KDD'21.

Slices are grouped into chunks of ``b`` slices. Within the open chunk the main
loop keeps ``csa``, the cumulative aggregation from the chunk's first slice;
when a chunk closes, its slice aggregations (``saa``) go to a worker that builds
``lcs``, the cumulative aggregation from the right. A window holding slices
``[f, g)`` is then ``lcs[f] (+) ca... (+) csa[g-1]``: at most three parts when
``b > q/2`` (``q`` slices per window), and two for most windows when ``b`` is
close to ``q`` (see :mod:`pba_runtime.chunking`). The main loop waits only when a
window needs an lcs that is not ready; those *stalls* are counted.

SBA builds each lcs on the main thread at the chunk boundary: same chunks, same
arithmetic, so PBA's results equal SBA's bit for bit.

With a process pool (``WorkerPool(kind="process")``) each chunk's ``saa`` and
``lcs`` live in a shared-memory slot (:mod:`pba_runtime.shm`): the main loop
writes every slice partial straight into it, a worker process builds the lcs
in place from a task that only names the slot, and the main loop reads the lcs
where the worker left it. That covers kernel aggregations and Python-callable
ones with fixed-size numeric partials (a float or a tuple of floats, as their
``identity``), whose Python ``combine`` loop then runs beside the main loop
instead of holding its GIL. Other partials (``collect``) use the pool's thread
workers. A worker that dies, hangs past the pool's ``task_timeout`` or raises
costs one lcs built on the main thread (counted in ``stats()["fallbacks"]``):
nothing is lost or duplicated.

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
from ..batch import windows_from_values, windows_with_ends
from ..chunking import plan_chunk_size
from ..kernels import resolve_engine
from ..merge import build_lcs
from ..pool import WorkerPool, default_pool, result_or_repair
from ..tasks import open_chunk_store
from .base import SlicedAggregator, no_timestamps, sizeof, validate_timestamps

__all__ = ["PBA", "SBA", "build_lcs"]

log = logging.getLogger("pba_runtime")


# build_lcs (from merge) is looked up in this module when a chunk's lcs task is submitted (tests replace it
# with a faulty one); the main thread's own builder, used when a worker fails, is this one:
_build_lcs_here = build_lcs


class _Chunk:
    """One chunk of the merger: its slice partials, their lcs, their total and, in shared memory, its slot.

    ``saa``: ``array('d')`` rows (kernel aggregations), a list of partials, or a
    slot's ``memoryview``; ``lcs``: ``None`` (not built yet), a ``Future`` (being
    built) or the built buffer; ``ca``: the aggregate of the whole chunk, once it
    is closed; ``slot``: its :class:`pba_runtime.shm.Slot` (process pools).
    Snapshots hold ``[saa, lcs, ca]`` lists, as before.
    """

    __slots__ = ("saa", "lcs", "ca", "slot")

    def __init__(self, saa: Any, ca: Any = None, slot: Any = None, lcs: Any = None):
        self.saa = saa
        self.lcs = lcs
        self.ca = ca
        self.slot = slot


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
        kernel = self.agg.kernel  # the per-tuple path keeps the aggregation's own partials, whatever the engine
        # partial storage: flat array('d') rows of `width` floats (0: a scalar per slice), or a list;
        # with a process pool, fixed-size slots in shared memory written in place (self._shm)
        self._flat = kernel is not None
        self._width = (kernel.shape[0] if kernel.shape else 0) if kernel is not None else 0
        self._shm = None
        self._submit = None
        if self._pool is not None:
            if self._pool.kind == "process":
                self._shm = open_chunk_store(self._pool, self.agg, chunk_size, slots=max(4, -(-q // chunk_size) + 2))
                self._submit = self._pool.submit_thread
            else:
                self._submit = self._pool.submit
        self._direct = self._shm is not None
        if self._direct:
            self._flat = True
            self._width = self._shm.width
        self._chunks_closed = 0
        self._lcs_tasks = 0
        self._stalls = 0
        self._stall_time = 0.0
        self._fallbacks = 0
        self._reset_merger()
        # fused per-tuple path for count windows with slide 1 (the paper's main experiment)
        self._fast = not self._is_time and self._s == 1 and not self.agg.positional
        self._lower_float = self.agg.lower is float
        # built-in max/min/sum lift a float to itself
        self._float_passthrough = self.agg.float_passthrough
        self._lift, self._combine, self._lower = self.agg.lift, self.agg.combine, self.agg.lower
        # the lean path's vectorised lcs (+) ca_middle (scalar kernel partials only)
        self._mid_combine = kernel.combine if kernel is not None and not kernel.shape else None
        self._lean = False
        # time-window batches: the compiled engine slices in compiled passes (kernels/slicing.py), and
        # folds scalar/column partials into their slices there too; the numpy engine runs the reference
        self._compiled_slicing = self._is_time and self.engine.compiled
        self._compiled_fold = self._compiled_slicing and self.engine.layout in ("scalar", "columns")

    # ------------------------------------------------------------------ merger
    def _reset_merger(self, f: int = 0, g: int = 0) -> None:
        """An empty merger whose next slice is ``g`` (and front ``f``), relative to the last reset."""
        self._drop_all()
        self._g = g  # slices pushed since the last reset
        self._f = f  # slices popped since the last reset
        self._chunks: dict[int, _Chunk] = {}
        self._open: _Chunk | None = None  # record of the chunk being filled
        self._csa = self.agg.identity
        # after a batch: slices [f, g) as one array, cut into chunks only if a per-tuple call needs them
        self._deferred: tuple[np.ndarray, int, int] | None = None

    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        if self._lean:
            if timestamp is None:
                return self._lean_insert(value)
            self._leave_lean()  # a timestamp for a count window: the generic path refuses it
        if self._deferred is not None:
            self._build_deferred()
        if not self._fast or self._flushed or self._closed or timestamp is not None:
            return super().insert(value, timestamp)
        if not self._direct and not self._width:
            self._enter_lean()
            return self._lean_insert(value)
        # one slice per tuple: push, pop one, query, with the attribute traffic inlined
        p = value if self._float_passthrough and type(value) is float else self.agg.lift(value)
        b = self._b
        g = self._g
        i = g % b
        if self._direct:  # shared-memory slot: store first, so a partial it refuses changes nothing
            rec = self._open if i else self._new_rec()
            w = self._width
            try:
                if w:
                    rec.saa[i * w : i * w + w] = array("d", p)
                else:
                    rec.saa[i] = p
            except (TypeError, ValueError, OverflowError):
                self._put(rec, i, p)  # raises the explanation
            if i:
                csa = self._csa = self.agg.combine(self._csa, p)
            else:
                self._open = rec
                self._chunks[g // b] = rec
                csa = self._csa = p
        else:
            if i:
                csa = self._csa = self.agg.combine(self._csa, p)
                rec = self._open
            else:
                rec = self._open = _Chunk(self._new_saa())
                self._chunks[g // b] = rec
                csa = self._csa = p
            if self._width:
                rec.saa.extend(p)
            else:
                rec.saa.append(p)
        if i == b - 1:
            rec.ca = csa
            self._close_chunk(rec)
        g += 1
        self._g = self._back = self._n = g
        k = g - self._r
        if k < 0:
            return []
        f = self._f
        while f < k:  # exactly one pop per tuple in steady state
            f += 1
            if f % b == 0:
                old = self._chunks.pop(f // b - 1, None)
                if self._direct and old is not None:
                    self._shm.release(old.slot, old.lcs)
        self._f = self._front = f
        self._next_k = k + 1
        self._emitted += 1
        cf = k // b
        j = k - cf * b
        if cf == (g - 1) // b:
            res = csa if j == 0 else self._query()
        else:
            chunks = self._chunks
            if j:
                lcs = chunks[cf].lcs
                if lcs.__class__ is Future or lcs is None:
                    lcs = self._lcs(cf)
                first = lcs[j] if not self._width else self._row(lcs, j)
            else:
                first = chunks[cf].ca
            combine = self.agg.combine
            for c in range(cf + 1, (g - 1) // b):
                first = combine(first, chunks[c].ca)
            res = combine(first, csa)
        return [(g, res if self._lower_float else self.agg.lower(res))]

    # ------------------------------------------------------------------ lean per-tuple path
    # Count windows, slide 1, scalar partials, thread pool or none: the paper's main
    # experiment. While ``_lean`` is set only _g, _f, _csa and the chunk bookkeeping
    # below are kept up to date per tuple; every other entry point calls _leave_lean()
    # first, which derives the slicing layer's counters.
    def _enter_lean(self) -> None:
        g, f, b = self._g, self._f, self._b
        self._ob = g - g % b if g % b else g - b  # first slice of the open chunk (g - b: none open)
        self._fb = f - f % b  # first slice of the front chunk
        self._flcs = None  # the front chunk's lcs, once resolved
        self._fmid = None  # lcs (+) ca of the one middle chunk, once a window spans three chunks
        self._app = self._open.saa.append if g % b else None
        self._lean_w0 = max(0, g - self._r + 1)
        self._lean_e0 = self._emitted
        self._lean = True

    def _leave_lean(self) -> None:
        if not self._lean:
            return
        self._lean = False
        g, f = self._g, self._f
        self._n = self._back = g
        self._front = f
        windows = max(0, g - self._r + 1)
        self._emitted = self._lean_e0 + windows - self._lean_w0
        if windows:
            self._next_k = g - self._r + 1

    def _lean_insert(self, value: Any) -> list[tuple[int, Any]]:
        p = value if value.__class__ is float and self._float_passthrough else self._lift(value)
        g = self._g
        b = self._b
        i = g - self._ob
        if i == b:  # open the next chunk
            rec = self._open = _Chunk(self._new_saa())
            self._chunks[g // b] = rec
            self._ob = g
            self._app = rec.saa.append
            csa = self._csa = p
            i = 0
        else:
            csa = self._csa = self._combine(self._csa, p)
        self._app(p)
        if i == b - 1:
            rec = self._open
            rec.ca = csa
            self._close_chunk(rec)
        g += 1
        self._g = g
        k = g - self._r
        if k < 0:
            return []
        fb = self._fb
        j = k - fb
        if j == b:  # the window left the front chunk
            self._chunks.pop(fb // b, None)
            fb = self._fb = fb + b
            self._flcs = self._fmid = None
            j = 0
        self._f = k
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
                    lcs = self._flcs = self._lcs(fb // b)
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

    def _front_mid(self, c: int) -> array:
        """``lcs[j] (+) ca_{c+1}`` for every ``j`` of front chunk ``c``: the per-tuple combines, element for
        element, in one numpy call (~0.5 ns a slice: no latency spike next to the lcs the chunk needed anyway)."""
        lcs = self._flcs
        if lcs is None:
            lcs = self._flcs = self._lcs(c)
        out = array("d")
        out.frombytes(self._mid_combine(np.asarray(lcs, dtype=np.float64), self._chunks[c + 1].ca).tobytes())
        return out

    def _new_saa(self) -> Any:
        return array("d") if self._flat else []

    # ------------------------------------------------------------------ shared-memory slots
    def _new_rec(self) -> _Chunk:
        """A chunk record; with chunks in shared memory, its ``saa`` is its slot's."""
        if self._direct:
            slot = self._shm.acquire()
            return _Chunk(slot.saa, None, slot)
        return _Chunk(self._new_saa())

    def _put(self, rec: _Chunk, i: int, p: Any) -> None:
        """Write partial ``p`` as row ``i`` of a shared-memory slot."""
        try:
            w = self._width
            if w:
                rec.saa[i * w : i * w + w] = array("d", p)
            else:
                rec.saa[i] = p
        except (TypeError, ValueError, OverflowError):
            if i == 0:
                self._shm.release(rec.slot)
            w = self._width
            want = f"a tuple of {w} floats" if w else "a float"
            raise TypeError(f"aggregation {self.agg.name!r} gave the partial {p!r}; with chunks in shared memory "
                            f"(process pool) each partial must be {want}, like its identity") from None

    def _drop(self, rec: _Chunk | None) -> None:
        """A chunk leaves the merger: its slot is reused once its lcs task is over."""
        if rec is not None and rec.slot is not None and self._shm is not None:
            self._shm.release(rec.slot, rec.lcs)

    def _drop_all(self) -> None:
        chunks = getattr(self, "_chunks", None)
        if chunks and self._shm is not None:
            for rec in chunks.values():
                self._drop(rec)

    def _rec_from_rows(self, rows: np.ndarray, ca: Any) -> _Chunk:
        """A chunk record holding kernel rows ``rows`` (its first ``len(rows)`` slices)."""
        if not self._direct:
            return _Chunk(self._store(rows), ca)
        rec = self._new_rec()
        n = rows.size
        if n:
            np.frombuffer(rec.saa, dtype=np.float64, count=n)[:] = np.asarray(rows, dtype=np.float64).reshape(-1)
        rec.ca = ca
        return rec

    def _export(self, buf: Any, n: int) -> Any:
        """``n`` rows of a shared-memory buffer in the thread path's format (snapshots never point into shm)."""
        if self.agg.kernel is not None:
            return array("d", buf[: n * max(self._width, 1)].tobytes())
        return [self._row(buf, j) for j in range(n)]

    def _import(self, src: Any, dst: memoryview) -> None:
        """Copy a snapshot buffer (``array('d')`` or a list of partials) into a shared-memory buffer."""
        if isinstance(src, (array, memoryview)):
            flat = array("d", memoryview(src).cast("B").tobytes()) if isinstance(src, memoryview) else src
        elif self._width:
            flat = array("d", [x for row in src for x in row])
        else:
            flat = array("d", src)
        dst[: len(flat)] = flat

    def _row(self, buf: Any, j: int) -> Any:
        """Partial ``j`` of a chunk buffer (saa or lcs)."""
        w = self._width
        if w:
            return tuple(buf[j * w : (j + 1) * w])
        return buf[j]

    def _push(self, p: Any) -> None:
        if self._deferred is not None:
            self._build_deferred()
        g = self._g
        b = self._b
        i = g % b
        if self._direct:
            rec = self._open if i else self._new_rec()
            self._put(rec, i, p)
            if i == 0:
                self._open = rec
                self._chunks[g // b] = rec
                self._csa = p
            else:
                self._csa = self.agg.combine(self._csa, p)
            self._g = g + 1
            if i == b - 1:
                rec.ca = self._csa
                self._close_chunk(rec)
            return
        if i == 0:
            rec = self._open = _Chunk(self._new_saa())
            self._chunks[g // b] = rec
            self._csa = p
        else:
            rec = self._open
            self._csa = self.agg.combine(self._csa, p)
        if self._width:
            rec.saa.extend(p)
        else:
            rec.saa.append(p)
        self._g = g + 1
        if i == b - 1:
            rec.ca = self._csa
            self._close_chunk(rec)

    def _close_chunk(self, rec: _Chunk) -> None:
        self._chunks_closed += 1
        if self.parallel:
            try:
                if self._direct:  # the task names the slot; the worker writes the lcs into it
                    rec.lcs = self._shm.submit(rec.slot, self._b)
                else:
                    rec.lcs = self._submit(build_lcs, self.agg, rec.saa)
                self._lcs_tasks += 1
                return
            except RuntimeError:  # pool closed: fall back to SBA for this chunk
                self._fallbacks += 1
        rec.lcs = self._shm.build_here(rec.slot, self._b) if self._direct else build_lcs(self.agg, rec.saa)

    def _lcs(self, c: int) -> Any:
        rec = self._chunks[c]
        lcs = rec.lcs
        if lcs is None:
            lcs = rec.lcs = self._shm.build_here(rec.slot, self._b) if self._direct else build_lcs(self.agg, rec.saa)
        elif isinstance(lcs, Future):
            done = True
            if not lcs.done():
                self._stalls += 1
                t0 = time.perf_counter()
                done = self._pool.wait_for(lcs)
                self._stall_time += time.perf_counter() - t0
            lcs = rec.lcs = self._future_result(lcs, rec, done)
        return lcs

    def _future_result(self, fut: Future, rec: _Chunk, done: bool = True) -> Any:
        """The lcs a task built, or built here (SBA fallback, counted) if the task failed."""
        if self._direct:
            res, repaired = result_or_repair(self._pool, fut, lambda: self._shm.build_here(rec.slot, self._b),
                                             done=done, on_error=self._task_raised, task="lcs task",
                                             repair="building it on the main thread")
            if not repaired:
                res = rec.slot.lcs
        else:
            res, repaired = result_or_repair(self._pool, fut, lambda: _build_lcs_here(self.agg, rec.saa), done=done,
                                             task="lcs task", repair="building it on the main thread")
        self._fallbacks += repaired
        return res

    def _task_raised(self, exc: BaseException, why: str) -> None:
        if type(exc).__name__ == "AggregationUnavailable":  # the workers cannot rebuild it: threads from now on
            self._shm.use_threads(why)

    def _pop(self) -> None:
        if self._deferred is not None:
            self._build_deferred()
        f = self._f = self._f + 1
        if f % self._b == 0:
            old = self._chunks.pop(f // self._b - 1, None)
            if self._direct:
                self._drop(old)

    def _query(self) -> Any:
        if self._deferred is not None:
            self._build_deferred()
        f, g, b = self._f, self._g, self._b
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
            acc = self._row(saa, f % b)
            for j in range(f % b + 1, (g - 1) % b + 1):
                acc = combine(acc, self._row(saa, j))
            return acc
        j = f % b
        first = self._chunks[cf].ca if j == 0 else self._row(self._lcs(cf), j)
        for c in range(cf + 1, cl):
            first = combine(first, self._chunks[c].ca)
        return combine(first, last)

    # ------------------------------------------------------------------ slice history <-> arrays
    def _history(self) -> np.ndarray:
        """Slice partials ``[f, g)`` held by the merger, as a kernel array (read only)."""
        if self._deferred is not None:
            return self._deferred[0]
        kernel = self._kernel
        f, g, b = self._f, self._g, self._b
        parts = []
        for c in range(f // b, (g - 1) // b + 1) if g > f else ():
            saa = self._chunks[c].saa
            lo = f - c * b if c == f // b else 0
            hi = min(b, g - c * b)
            if self._flat:
                parts.append(np.frombuffer(saa, dtype=np.float64).reshape((-1,) + kernel.shape)[lo:hi])
            else:  # Python partials (a user aggregation on the compiled engine)
                parts.append(kernel.to_array(saa[lo:hi]))
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
                self._chunks[c] = self._rec_from_rows(rows, ca)
            else:
                self._start_open_chunk(rows, g, c)

    def _start_open_chunk(self, rows: np.ndarray, g: int, c: int | None = None) -> None:
        kernel = self._kernel
        b = self._b
        if c is None:
            c = g // b
            rows = kernel.identity_array(g - c * b)
        rec = self._rec_from_rows(rows, None)
        self._chunks[c] = rec
        self._open = rec
        self._csa = kernel.to_partials(kernel.accumulate(rows, axis=0)[-1:])[0] if len(rows) else self.agg.identity

    def _store(self, rows: np.ndarray) -> Any:
        if not self._flat:  # the per-tuple path keeps Python partials: a user aggregation's compiled rows
            return self._kernel.to_partials(rows)
        return array("d", np.ascontiguousarray(rows, dtype=np.float64).tobytes())

    # ------------------------------------------------------------------ batch path
    @quiet_non_finite
    def insert_many(self, values, timestamps=None):
        self._leave_lean()
        kernel = self._kernel
        if kernel is None or self.engine.name == "python":
            return super().insert_many(values, timestamps)
        self._check_open()
        if not hasattr(values, "__len__"):
            values = list(values)
        if self._is_time:
            vals = as_float_array(values, agg_name=self.agg.name)
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
        P = kernel.lift(vals, ts if self.agg.positional else None)
        if self._compiled_slicing:
            from ..kernels import slicing  # numba's import waits for the first compiled batch

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
                slicing.fold_scalar(np.ascontiguousarray(P), G, S0, dense, self.engine.ops[0])
            else:
                slicing.fold_columns(np.ascontiguousarray(P), G, S0, dense, self.engine._ops_array)
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
                                                      "_stalls", "_stall_time", "_fallbacks")

    def _get_state(self) -> dict[str, Any]:
        self._leave_lean()
        if self._deferred is not None and not self._flat:
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
            if self._direct:  # copies in the thread path's format: a snapshot never points into shm
                n = self._g - c * self._b if rec is self._open else self._b
                chunks[c] = [self._export(rec.saa, n), None if lcs is None else self._export(lcs, self._b), rec.ca]
            else:
                chunks[c] = [rec.saa, lcs, rec.ca]
        st["chunks"] = chunks
        st["open"] = next((c for c, rec in self._chunks.items() if rec is self._open), None)
        st["chunk_size"] = self._b
        return st

    @quiet_non_finite
    def flush(self):
        self._leave_lean()
        kernel = self._kernel
        if not self._is_time or kernel is None or self.engine.name == "python" or self._slice is None or self._flushed or self._closed:
            return super().flush()
        # End of stream for time windows: every window still holding a tuple, merged in one
        # vectorised pass (an episode with no new tuple), not one query per window.
        none = np.empty(0, dtype=np.int64)
        P = kernel.lift(np.empty(0), none if self.agg.positional else None)
        ends, results = self._episode(P, none, none, last=False)
        self._flushed = True
        return ends, results

    def _set_state(self, st: dict[str, Any]) -> None:
        self._leave_lean()
        if st["chunk_size"] != self._b:
            raise ValueError(f"state was taken with chunk_size {st['chunk_size']}, this operator has {self._b}")
        super()._set_state(st)
        self._drop_all()
        self._deferred = None
        if st.get("deferred") is not None:
            X, f, g = st["deferred"]
            self._reset_merger(f, g)
            self._deferred = (X, f, g)
            return
        if self._direct:
            self._chunks = {}
            for c, (saa, lcs, ca) in st["chunks"].items():
                rec = self._new_rec()
                self._import(saa, rec.saa)
                if lcs is not None:
                    self._import(lcs, rec.slot.lcs)
                    rec.lcs = rec.slot.lcs
                rec.ca = ca
                self._chunks[c] = rec
        else:
            self._chunks = {c: _Chunk(saa, ca, None, lcs) for c, (saa, lcs, ca) in st["chunks"].items()}
        self._open = self._chunks.get(st["open"]) if st["open"] is not None else None

    @property
    def emitted(self) -> int:
        self._leave_lean()
        return self._emitted

    def stats(self) -> dict[str, Any]:
        self._leave_lean()
        st = super().stats()
        st.update(
            chunk_size=self._b,
            chunks=self._chunks_closed,
            lcs_tasks=self._lcs_tasks,
            stalls=self._stalls,
            stall_time=self._stall_time,
            fallbacks=self._fallbacks,
            pool=None if self._pool is None else self._pool.kind,
            shared_memory=self._direct,
        )
        return st

    def state_bytes(self) -> int:
        self._leave_lean()
        total = 0 if self._deferred is None else self._deferred[0].nbytes
        for rec in self._chunks.values():
            for part in (rec.saa, rec.lcs):
                if isinstance(part, (array, memoryview)):
                    total += part.nbytes if isinstance(part, memoryview) else part.itemsize * len(part)
                elif isinstance(part, list):
                    total += sizeof(part)
        return total

    def close(self) -> None:
        self._leave_lean()
        if not self._closed:
            for rec in self._chunks.values():
                if isinstance(rec.lcs, Future):
                    rec.lcs.cancel()
            self._drop_all()
            self._chunks = {}
            self._open = None
            self._deferred = None
            if self._shm is not None:
                self._shm.close()  # unlinks its blocks
        super().close()


class SBA(PBA):
    """Sequential Boundary Aggregator: PBA with every lcs built on the main thread."""

    name = "sba"
    parallel = False
