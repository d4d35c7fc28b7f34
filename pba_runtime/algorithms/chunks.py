"""Where PBA keeps its chunks: in this process, or in shared-memory slots a process pool reads.

PBA (:mod:`pba_runtime.algorithms.pba`) cuts its slices into chunks of ``b``
slices; each chunk holds its slice partials (``saa``), their lcs and, once
closed, its total ``ca`` (a :class:`Chunk`). How they are stored and who builds
the lcs depends on the pool, so it is chosen once per operator
(:func:`open_store`) and the operator calls the store without asking which one
it has:

:class:`LocalChunks`
    ``saa`` is an ``array('d')`` of ``b`` rows of ``width`` floats (kernel
    aggregations, ``width`` 0 for a scalar) or a list of ``b`` Python partials;
    the lcs is built by ``build_lcs`` in a thread worker (thread pools; process
    pools for partials that are not fixed-size numeric) or on the main thread.
:class:`SharedChunks`
    ``saa`` and ``lcs`` are ``memoryview`` regions of a shared-memory slot
    (:class:`pba_runtime.shm.ChunkSlots`): the main loop writes each partial in
    place and a worker process builds the lcs in place from a task that only
    names the slot.

Both allocate a chunk's ``b`` rows when it opens, so the operator writes row
``i`` of the open chunk the same way in both (``saa[i] = p``, or a slice of
``width`` floats): one push, and the per-tuple loop inlines that one line
(:meth:`LocalChunks.put` is its readable form). A row the store cannot hold
(only shared memory refuses partials: they must be floats) raises in
:meth:`refuse` before the operator changed anything.

Snapshots never point into shared memory: :meth:`snapshot` gives a chunk as
``[saa, lcs, ca]`` with ``n`` rows of ``saa`` (``array('d')`` or a list), the
format both stores :meth:`restore`.

Examples
--------
>>> from pba_runtime import get_aggregation
>>> store = LocalChunks(get_aggregation("max"), rows=3)
>>> rec = store.start(3.0)
>>> store.put(rec, 1, 1.0); store.put(rec, 2, 2.0)
>>> store.build(rec).tolist()
[3.0, 2.0, 2.0]
>>> store.snapshot(rec, 2, None)
[array('d', [3.0, 1.0]), None, None]
"""

from __future__ import annotations

from array import array
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..aggregations import Aggregation, Kernel
from ..merge import build_lcs
from ..pool import result_or_repair
from ..shm import ChunkSlots
from ..tasks import open_chunk_slots

__all__ = ["Chunk", "LocalChunks", "SharedChunks", "open_store", "row"]

# build_lcs is looked up in this module when a chunk's lcs task is submitted (tests replace it with a
# faulty one); the main thread's own builder, used when a task fails, is this one:
_build_lcs_here = build_lcs


class Chunk:
    """One chunk: its slice partials, their lcs, their total and, in shared memory, its slot.

    ``saa``: ``b`` rows (``array('d')``, a list of partials, or a slot's
    ``memoryview``), of which the operator has written the first ones; ``lcs``:
    ``None`` (not built yet), a ``Future`` (being built) or the built buffer;
    ``ca``: the aggregate of the whole chunk, once it is closed; ``slot``: its
    :class:`pba_runtime.shm.Slot` (shared memory); ``task``: a late lcs task whose result was dropped (the
    main loop built the lcs itself, in a buffer of its own), still running.
    """

    __slots__ = ("saa", "lcs", "ca", "slot", "task")

    def __init__(self, saa: Any, ca: Any = None, slot: Any = None, lcs: Any = None):
        self.saa = saa
        self.lcs = lcs
        self.ca = ca
        self.slot = slot
        self.task = None


def row(buf: Any, j: int, width: int) -> Any:
    """Partial ``j`` of a chunk buffer (saa or lcs): a float, a tuple of ``width`` floats, or a Python partial."""
    if width:
        return tuple(buf[j * width : (j + 1) * width])
    return buf[j]


class LocalChunks:
    """Chunks in this process's memory; their lcs built by ``submit`` (a pool's threads) or here.

    Parameters
    ----------
    agg : Aggregation
    rows : int
        Slices per chunk (``b``).
    submit : callable, optional
        ``submit(fn, *args) -> Future`` running an lcs task in a thread worker.
    kernel : Kernel, optional
        The batch path's kernel: the shape of its rows, and how they become the
        Python partials of an aggregation without a numpy kernel
        (:meth:`from_rows`, :meth:`as_array`).
    """

    shared = False
    shm = None  # no shared-memory slots

    def __init__(self, agg: Aggregation, rows: int, submit: Any = None, kernel: Kernel | None = None):
        self.agg = agg
        self.rows = rows
        self.kernel = kernel
        self.flat = agg.kernel is not None  # kernel partials as floats in array('d'); else a list
        self.width = (agg.kernel.shape[0] if agg.kernel.shape else 0) if self.flat else 0
        self._blank_rows: array | None = None  # a zeroed chunk, built on first use (see _blank)
        self._submit = submit

    @property
    def _blank(self) -> array | None:
        """A zeroed chunk's floats (``None`` unless ``flat``), built when a chunk is first needed: a batch
        that keeps its slices as one deferred array never needs one (``sliding_aggregate`` with ``b`` of
        ``q = 2^20`` slices would zero a buffer of megabytes per call for nothing)."""
        if self._blank_rows is None and self.flat:
            self._blank_rows = array("d", bytes(8 * self.rows * max(self.width, 1)))
        return self._blank_rows

    def new(self) -> Chunk:
        """An empty chunk of ``rows`` rows."""
        return Chunk(self._blank[:] if self.flat else [None] * self.rows)

    def put(self, rec: Chunk, i: int, p: Any) -> None:
        """Write partial ``p`` as row ``i`` of ``rec`` (what the per-tuple loop inlines)."""
        saa, w = rec.saa, self.width
        try:
            if w:
                saa[i * w : i * w + w] = array("d", p)
            else:
                saa[i] = p
        except (TypeError, ValueError, OverflowError):
            self.refuse(p)

    def refuse(self, p: Any) -> None:
        """Called while a write of ``p`` fails: raise why (here, the write's own error)."""
        raise

    def start(self, p: Any) -> Chunk:
        """A new chunk holding ``p`` as its first row (nothing allocated stays behind if ``p`` is refused)."""
        rec = self.new()
        try:
            self.put(rec, 0, p)
        except BaseException:
            self.drop(rec)
            raise
        return rec

    def from_rows(self, rows: np.ndarray, ca: Any) -> Chunk:
        """A chunk holding kernel rows ``rows`` (its first ``len(rows)`` slices)."""
        n = len(rows)
        if not self.flat:  # the per-tuple path keeps Python partials: a user aggregation's compiled rows
            return Chunk(self.kernel.to_partials(rows) + [None] * (self.rows - n), ca)
        saa = array("d", np.ascontiguousarray(rows, dtype=np.float64).tobytes())
        saa.extend(self._blank[len(saa) :])
        return Chunk(saa, ca)

    def drop(self, rec: Chunk | None) -> None:
        """A chunk leaves the operator (nothing to give back here)."""

    def as_array(self, rec: Chunk, lo: int, hi: int) -> np.ndarray:
        """Rows ``[lo, hi)`` of ``rec`` as a kernel array (a view of float rows; read only)."""
        if self.flat:
            return np.frombuffer(rec.saa, dtype=np.float64).reshape((-1,) + self.kernel.shape)[lo:hi]
        return self.kernel.to_array(rec.saa[lo:hi])  # Python partials (a user aggregation on the compiled engine)

    # -- lcs
    def submit(self, rec: Chunk) -> Future:
        """Build ``rec``'s lcs in a worker; ``RuntimeError`` if the pool is closed."""
        return self._submit(build_lcs, self.agg, rec.saa)

    def build(self, rec: Chunk) -> Any:
        """Build ``rec``'s lcs on this thread (SBA, or a fallback)."""
        return _build_lcs_here(self.agg, rec.saa)

    def result(self, pool: Any, fut: Future, rec: Chunk, done: bool) -> tuple[Any, bool]:
        """The lcs a task built, or built here if the task failed: ``(lcs, repaired)``."""
        return result_or_repair(pool, fut, lambda: self.build(rec), done=done, task="lcs task",
                                repair="building it on the main thread")

    # -- snapshots
    def snapshot(self, rec: Chunk, n: int, lcs: Any) -> list:
        """``[saa, lcs, ca]`` with the first ``n`` rows of ``saa`` (copies of what the store holds)."""
        return [rec.saa[: n * max(self.width, 1)], lcs, rec.ca]

    def restore(self, saa: Any, lcs: Any, ca: Any) -> Chunk:
        """A chunk from a :meth:`snapshot` (of either store)."""
        if isinstance(saa, list):
            saa = saa + [None] * (self.rows - len(saa))
        else:
            saa = array("d", memoryview(saa).cast("B").tobytes()) if isinstance(saa, memoryview) else saa
            saa.extend(self._blank[len(saa) :])
        return Chunk(saa, ca, None, lcs)

    def close(self) -> None:
        """Nothing to release."""


class SharedChunks(LocalChunks):
    """Chunks in shared-memory slots (:class:`pba_runtime.shm.ChunkSlots`), their lcs built by worker processes.

    A slot goes back to the store when its chunk leaves the operator, and is
    reused once its lcs task is over. Partials must be floats (tuples of
    ``width`` floats), like the aggregation's identity: :meth:`refuse`.
    """

    shared = True

    def __init__(self, agg: Aggregation, rows: int, shm: ChunkSlots, kernel: Kernel | None = None):
        self.agg = agg
        self.rows = rows
        self.shm = shm
        self.kernel = kernel
        self.flat = True
        self.width = shm.width

    def new(self) -> Chunk:
        slot = self.shm.acquire()
        return Chunk(slot.saa, None, slot)

    def refuse(self, p: Any) -> None:
        w = self.width
        want = f"a tuple of {w} floats" if w else "a float"
        raise TypeError(f"aggregation {self.agg.name!r} gave the partial {p!r}; with chunks in shared memory "
                        f"(process pool) each partial must be {want}, like its identity") from None

    def from_rows(self, rows: np.ndarray, ca: Any) -> Chunk:
        rec = self.new()
        n = rows.size
        if n:
            np.frombuffer(rec.saa, dtype=np.float64, count=n)[:] = np.asarray(rows, dtype=np.float64).reshape(-1)
        rec.ca = ca
        return rec

    def drop(self, rec: Chunk | None) -> None:
        if rec is not None and rec.slot is not None:  # a dropped task still running: reuse waits for it
            self.shm.release(rec.slot, rec.task if rec.task is not None else rec.lcs)

    def submit(self, rec: Chunk) -> Future:
        return self.shm.submit(rec.slot, self.rows)  # the task names the slot; the worker writes the lcs into it

    def build(self, rec: Chunk) -> Any:
        return self.shm.build_here(rec.slot, self.rows)

    def result(self, pool: Any, fut: Future, rec: Chunk, done: bool) -> tuple[Any, bool]:
        res, repaired = result_or_repair(pool, fut, lambda: self.build(rec), done=done, on_error=self._task_raised,
                                         task="lcs task", repair="building it on the main thread")
        return (res if repaired else rec.slot.lcs), repaired

    def _task_raised(self, exc: BaseException, why: str) -> None:
        if type(exc).__name__ == "AggregationUnavailable":  # the workers cannot rebuild it: threads from now on
            self.shm.use_threads(why)

    def snapshot(self, rec: Chunk, n: int, lcs: Any) -> list:
        """In the local store's format: a snapshot never points into shared memory."""
        return [self._export(rec.saa, n), None if lcs is None else self._export(lcs, self.rows), rec.ca]

    def restore(self, saa: Any, lcs: Any, ca: Any) -> Chunk:
        rec = self.new()
        self._import(saa, rec.saa)
        if lcs is not None:
            self._import(lcs, rec.slot.lcs)
            rec.lcs = rec.slot.lcs
        rec.ca = ca
        return rec

    def _export(self, buf: Any, n: int) -> Any:
        """``n`` rows of a slot's buffer as ``array('d')`` (kernel aggregations) or a list of partials."""
        if self.agg.kernel is not None:
            return array("d", buf[: n * max(self.width, 1)].tobytes())
        return [row(buf, j, self.width) for j in range(n)]

    def _import(self, src: Any, dst: memoryview) -> None:
        """Copy a snapshot buffer (``array('d')`` or a list of partials) into a slot's buffer."""
        if isinstance(src, (array, memoryview)):
            flat = array("d", memoryview(src).cast("B").tobytes()) if isinstance(src, memoryview) else src
        elif self.width:
            flat = array("d", [x for r in src for x in r])
        else:
            flat = array("d", src)
        dst[: len(flat)] = flat

    def close(self) -> None:
        self.shm.close()  # unlinks its blocks


def open_store(pool: Any, agg: Aggregation, rows: int, slots: int, kernel: Kernel | None = None) -> LocalChunks:
    """The chunk store of one operator, chosen once.

    Shared-memory slots with a process pool when the partials are fixed-size
    numeric and the workers can rebuild the aggregation
    (:func:`pba_runtime.tasks.open_chunk_slots`); otherwise local chunks whose lcs
    a thread pool (or a process pool's thread workers) builds, or, without a
    pool (SBA), the main thread.
    """
    if pool is None:
        return LocalChunks(agg, rows, None, kernel)
    if pool.kind == "process":
        shm = open_chunk_slots(pool, agg, rows, slots=slots)
        if shm is not None:
            return SharedChunks(agg, rows, shm, kernel)
        return LocalChunks(agg, rows, pool.submit_thread, kernel)
    return LocalChunks(agg, rows, pool.submit, kernel)
