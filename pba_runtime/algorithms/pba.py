"""PBA (Parallel Boundary Aggregator) and SBA, its one-thread version: the per-tuple merger.

Zhang, Akbarinia, Toumani, *Efficient Incremental Computation of Aggregations over Sliding Windows*,
KDD'21. Slices are grouped into chunks of ``b``. The main loop keeps ``csa``, the cumulative aggregation
from the open chunk's first slice; a closed chunk's slice aggregations (``saa``) go to a worker that
builds ``lcs``, the cumulative aggregation from the right (SBA builds it here: the same arithmetic, so
PBA's results equal SBA's bit for bit). A window over slices ``[f, g)`` is ``lcs[f] (+) ca... (+)
csa[g-1]``, at most three parts when ``b > q/2`` (:mod:`pba_runtime.chunking`); one whose lcs is late is
a *stall* (:meth:`PBA._lcs`). Where chunks live (here, or a process pool's shared memory) is
:mod:`pba_runtime.algorithms.chunks`'s; the batch paths and the inlined per-tuple path are engines
(:mod:`pba_runtime.engines`), chosen once in ``__init__``, each leaving the same merger state.

Examples
--------
>>> from pba_runtime import CountWindow
>>> with SBA(CountWindow(range=4, slide=1), "max") as op:
...     ends, res = op.insert_many([3, 1, 4, 1, 5, 9, 2, 6])
>>> ends.tolist(), res.tolist()
([4, 5, 6, 7, 8], [4.0, 5.0, 9.0, 9.0, 9.0])
"""

from __future__ import annotations

import time
from array import array
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..aggregations import quiet_non_finite
from ..chunking import plan_chunk_size
from ..engines import BatchPlan, count_batch, history, tuple_path
from ..kernels import resolve_engine
from ..merge import build_lcs
from ..pool import WorkerPool, default_pool
from .base import SlicedAggregator, no_timestamps, sizeof, validate_timestamps
from .chunks import Chunk, open_store, row

__all__ = ["PBA", "SBA", "build_lcs"]


class PBA(SlicedAggregator):
    """Parallel Boundary Aggregator.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
    pool : WorkerPool, optional
        Builds the lcs; ``None`` uses the process-wide default thread pool. A process pool keeps chunks
        in shared memory when the partials are fixed-size numeric, else uses its thread workers.
    chunk_size : int, optional
        Slices per chunk, ``1 <= chunk_size <= range // slide``; default from
        :func:`pba_runtime.chunking.plan_chunk_size`.
    engine : {"auto", "compiled", "numpy", "python"}
        What runs the batch path's window merge (:mod:`pba_runtime.kernels`); ``stats()["engine"]``
        reports the one chosen.
    """

    name = "pba"
    parallel = True
    engines = ("compiled", "numpy", "python")
    #: Who chose the algorithm (``stats()["chosen_by"]``: ``"request"``, or ``"auto"``), and why
    #: (``stats()["why"]``: a sentence, a function giving it, or ``None`` when requested).
    chosen_by = "request"
    _why: Any = None
    #: Set by ``pr.create("auto")``: ``n_values -> (algorithm, why)``, the batch policy a fresh operator's
    #: first ``insert_many`` asks (``algorithms.choose_batch_algorithm``).
    _auto_batch: Any = None

    # the engines' functions the operator calls (pba_runtime.engines), bound as its methods
    _build_deferred, _insert_each = history.build_deferred, SlicedAggregator.insert_many  # (per-tuple engine's)
    lean_plan, lean_finish, _finish_lean = count_batch.lean_plan, count_batch.lean_finish, count_batch.finish_lean
    _enter_tuple_mode, _leave_tuple_mode = tuple_path.enter_tuple_mode, tuple_path.leave_tuple_mode
    _tuple_insert, _front_mid = tuple_path.tuple_insert, tuple_path.front_mid
    _check_timestamps, _no_timestamps = staticmethod(validate_timestamps), staticmethod(no_timestamps)

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
        self._open_store()
        self._chunks_closed = self._lcs_tasks = self._stalls = self._fallbacks = 0
        self._stall_time = 0.0
        # lcs not ready when a window needed it (each a stall too): its task taken back, or built beside it
        self._worker_late = self._lcs_taken_back = self._lcs_built_inline = 0
        self._reset_merger()
        # the per-tuple path for count windows with slide 1 (the paper's main experiment)
        self._fast = not self._is_time and self._s == 1 and not self.agg.positional
        self._lower_float = self.agg.lower is float
        self._float_passthrough = self.agg.float_passthrough  # built-in max/min/sum lift a float to itself
        self._combine, self._lower = self.agg.combine, self.agg.lower
        kernel = self.agg.kernel  # the per-tuple path's vectorised lcs (+) ca_middle (scalar kernel partials)
        self._mid_combine = kernel.combine if kernel is not None and not kernel.shape else None
        self._tuple_mode = False
        self._plan_batches()

    def _plan_batches(self, fused: bool = True) -> None:
        """The batch engine, chosen once: the plan (:class:`pba_runtime.engines.BatchPlan`) and its runner."""
        self._plan = BatchPlan.of(self, fused)
        self._batch = self._plan.build(self)

    _fused_time = property(lambda self: self._plan.engine == "time_fused", _plan_batches)  # set False: its reference

    # ------------------------------------------------------------------ merger
    def _reset_merger(self, f: int = 0, g: int = 0) -> None:
        """An empty merger whose next slice is ``g`` (and front ``f``), relative to the last reset."""
        self._drop_all()
        self._pushed, self._popped = g, f  # slices pushed and popped since the last reset
        self._chunks: dict[int, Chunk] = {}
        self._open: Chunk | None = None  # the chunk being filled
        self._csa = self.agg.identity
        # after a batch: slices [f, g) as one array, cut into chunks only if a per-tuple call needs them
        self._deferred: tuple[np.ndarray, int, int] | None = None
        self._cursor()

    def _cursor(self) -> None:
        """Where the next push writes: ``_open_base``, the open chunk's first slice (``g - b``: none open, the
        next push opens one), and ``_open_rows``, its rows; kept by :meth:`_start_chunk` afterwards."""
        g, b = self._pushed, self._b
        if g % b:
            self._open_base = g - g % b
            self._open_rows = self._open.saa if self._open is not None else None
        else:
            self._open_base, self._open_rows = g - b, None

    def _drop_all(self) -> None:
        for rec in getattr(self, "_chunks", {}).values():
            self._store.drop(rec)

    def _push(self, p: Any) -> None:
        """Append slice partial ``p``: the one push (the per-tuple path inlines its middle, see the module doc)."""
        if self._deferred is not None:
            self._build_deferred()
        g = self._pushed
        b = self._b
        i = g - self._open_base
        if i == b:
            csa = self._start_chunk(g, p)
            i = 0
        else:
            self._store.put(self._open, i, p)  # first: a partial the store refuses changes nothing
            csa = self._csa = self._combine(self._csa, p)
        if i == b - 1:
            self._end_chunk(csa)
        self._pushed = g + 1

    def _start_chunk(self, g: int, p: Any) -> Any:
        """Open chunk ``g // b`` with ``p`` as its first slice; returns the csa (``p``)."""
        rec = self._store.start(p)  # a partial the store refuses changes nothing
        self._chunks[g // self._b] = self._open = rec
        self._open_base = g
        self._open_rows = rec.saa
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

        A late task a thread worker has not started is taken back and built here; one it is building is
        built here too, into a buffer of its own (the lcs is a pure function of partials nobody writes any
        more), the worker's result dropped. A worker *process*'s task is waited for: that wait notices a
        dead or hung process (``task_timeout``), and taking its tasks back would leave the processes idle.
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
        f = self._popped = self._popped + 1
        if f % self._b == 0:
            self._store.drop(self._chunks.pop(f // self._b - 1, None))

    def _query(self) -> Any:
        if self._deferred is not None:
            self._build_deferred()
        f, g, b, w = self._popped, self._pushed, self._b, self._width
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

    # ------------------------------------- entry points (count windows, slide 1: engines/tuple_path.py)
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

    def _front_lcs(self, c: int) -> Any:
        """The lcs of front chunk ``c``, indexable by row (tuples of floats for vector partials), kept in ``_front_lcs_rows``."""
        lcs = self._lcs(c)
        w = self._width
        if w:
            lcs = [row(lcs, j, w) for j in range(self._b)]
        self._front_lcs_rows = lcs
        return lcs

    def insert_many(self, values, timestamps=None):
        if self._auto_batch is not None:
            self._decide_batch(values)
        return self._batch.insert_many(values, timestamps)

    def _decide_batch(self, values: Any, final: bool = False) -> None:
        """An ``"auto"`` operator's first batch into a fresh stream: the batch policy decides (once). SBA
        becomes PBA, with its pool, when the policy splits this batch; PBA becomes SBA when the policy says
        so of the whole stream (``final``); otherwise the per-tuple choice stays."""
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
        self._open_store()

    def _open_store(self) -> None:
        """Where the chunks live and who builds their lcs, chosen once for the pool (see chunks)."""
        q, b = self._q, self._b
        self._store = open_store(self._pool, self.agg, b, slots=max(4, -(-q // b) + 2), kernel=self._kernel)
        self._shm = self._store.shm  # its shared-memory slots (shm.ChunkSlots), if any
        self._width = self._store.width  # floats per partial in a flat row, 0 for a scalar

    # ------------------------------------------------------------------ bookkeeping
    # (a state's "_g" and "_f" are _pushed and _popped: checkpoints keep their keys, engines/history.py)
    _STATE_FIELDS = SlicedAggregator._STATE_FIELDS + ("_csa", "_chunks_closed", "_lcs_tasks", "_stalls",
                                                      "_stall_time", "_fallbacks", "_worker_late",
                                                      "_lcs_taken_back", "_lcs_built_inline")

    def _get_state(self) -> dict[str, Any]:
        self._leave_tuple_mode()
        if self._deferred is not None and not self._store.flat:
            self._build_deferred()  # Python partials in the state: any engine restores it
        return history.snapshot(self, super()._get_state())

    def _insert_and_flush(self, values, timestamps=None):
        """The batch and the end of stream in one call where the engine has one (fused), else in two."""
        if self._auto_batch is not None:
            self._decide_batch(values, final=True)
        insert_and_flush = self._batch.insert_and_flush
        if insert_and_flush is None:
            return super()._insert_and_flush(values, timestamps)
        return insert_and_flush(values, timestamps)

    @quiet_non_finite
    def flush(self):
        self._leave_tuple_mode()
        flush_time = self._batch.flush  # time windows' batch engines: the open windows in one pass
        if flush_time is None or self._slice is None or self._flushed or self._closed:
            return super().flush()
        ends, results = flush_time()
        self._flushed = True
        return ends, results

    def _set_state(self, st: dict[str, Any]) -> None:
        self._leave_tuple_mode()
        if st["chunk_size"] != self._b:
            raise ValueError(f"state was taken with chunk_size {st['chunk_size']}, this operator has {self._b}")
        st = {"_worker_late": 0, "_lcs_taken_back": 0, "_lcs_built_inline": 0, **st}  # older states: zero
        super()._set_state(st)
        history.restore(self, st)

    @property
    def emitted(self) -> int:
        self._leave_tuple_mode()
        return self._emitted

    def stats(self) -> dict[str, Any]:
        self._leave_tuple_mode()
        st = super().stats()
        st.update(
            chunk_size=self._b, chunks=self._chunks_closed, lcs_tasks=self._lcs_tasks, stalls=self._stalls,
            stall_time=self._stall_time, fallbacks=self._fallbacks, worker_late=self._worker_late,
            lcs_taken_back=self._lcs_taken_back, lcs_built_inline=self._lcs_built_inline,
            pool=None if self._pool is None else self._pool.kind, shared_memory=self._store.shared,
            chosen_by=self.chosen_by, why=self._why() if callable(self._why) else self._why,
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
            self._chunks, self._open, self._deferred = {}, None, None
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
