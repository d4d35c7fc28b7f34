"""Shared-memory storage for the process worker pool: blocks, chunk slots, batch scratch, workers' mappings.

A process pool never ships a chunk's data to a worker. The main loop writes
each chunk's slice partials (``saa``) straight into a slot of a POSIX
shared-memory block; a task names the block, the byte offsets of the slot's
``saa`` and ``lcs`` regions, the row count and width, and the aggregation
(see :func:`aggregation_ref`). The worker maps the block (once, then cached),
builds the lcs into the slot's ``lcs`` region, and returns its pid. The main
loop reads the lcs in place. The tasks themselves (and how they name an
aggregation) are in :mod:`pba_runtime.tasks`; this module only stores.

Every block is unlinked by ``close()`` of its owner (an aggregator's :class:`ChunkSlots` or the pool's
:class:`PoolMemory`), by a weakref finalizer when its owner is collected, and at interpreter exit
(:func:`unlink_all`, registered with :mod:`atexit`); the memory itself is unmapped when the last view of it
goes away, so unlinking never invalidates a buffer still in use.

Partials must be fixed-size numeric: a kernel (numpy) aggregation, or a
Python-callable one whose ``identity`` is a float or a non-empty tuple of floats
(:func:`partial_width`). Anything else (for example ``collect``) is built in
the pool's thread workers instead.

Examples
--------
>>> import numpy as np
>>> blk = ShmBlock.create(64)
>>> blk.name.startswith("pba_")
True
>>> a = blk.ndarray(0, (4,))
>>> a[:] = [1.0, 2.0, 3.0, 4.0]
>>> other = ShmBlock.attach(blk.name)  # what a worker does
>>> other.floats(8, 2).tolist()
[2.0, 3.0]
>>> del a, other
>>> blk.unlink()
>>> from pba_runtime import get_aggregation
>>> partial_width(get_aggregation("mean")), partial_width(get_aggregation("collect"))
(2, None)
"""

from __future__ import annotations

import atexit
import itertools
import logging
import mmap
import os
import secrets
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .aggregations import Aggregation
from .merge import lcs_into

try:  # POSIX shared memory, as multiprocessing.shared_memory uses it
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

__all__ = [
    "SHM_PREFIX",
    "ShmBlock",
    "ChunkSlots",
    "Slot",
    "PoolMemory",
    "partial_width",
    "aligned",
    "attached",
    "live_blocks",
    "unlink_all",
]

log = logging.getLogger("pba_runtime")

#: Every block this project creates is named ``SHM_PREFIX + ...`` (``/dev/shm/pba_...``).
SHM_PREFIX = "pba_"
_ALIGN = 64  # byte alignment of slot regions (a cache line)

# names created by this process and not yet unlinked: name -> creator pid
_live: dict[str, int] = {}
_live_lock = threading.Lock()
_counter = itertools.count()


def _require_posix() -> None:
    if _posixshmem is None:  # pragma: no cover
        raise NotImplementedError("shared-memory buffers need POSIX shared memory (_posixshmem)")


def _tracker(op: str, name: str) -> None:
    """Register/unregister ``/name`` with multiprocessing's resource tracker (crash safety net)."""
    try:
        from multiprocessing import resource_tracker

        getattr(resource_tracker, op)("/" + name, "shared_memory")
    except Exception:  # pragma: no cover - the tracker is a safety net only
        pass


def _unlink_name(name: str, pid: int) -> bool:
    """Unlink block ``name`` if this process created it and has not unlinked it yet."""
    if pid != os.getpid():  # a forked child never unlinks its parent's blocks
        return False
    with _live_lock:
        if _live.pop(name, None) is None:
            return False
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass
    _tracker("unregister", name)
    return True


def live_blocks() -> list[str]:
    """Names of the blocks this process created and has not unlinked yet.

    >>> isinstance(live_blocks(), list)
    True
    """
    pid = os.getpid()
    with _live_lock:
        return [n for n, p in _live.items() if p == pid]


@atexit.register
def unlink_all() -> int:
    """Unlink every block this process still owns (also run at interpreter exit); returns how many."""
    return sum(_unlink_name(n, os.getpid()) for n in live_blocks())


def _map(fd: int, nbytes: int, populate: bool) -> mmap.mmap:
    """Map ``nbytes`` of ``fd`` shared. ``populate`` (Linux; elsewhere ignored): every page's entry is made now
    (``MAP_POPULATE``), in one call, instead of at each page's first touch. A block's pages exist from its
    creation (``posix_fallocate``), yet each process's first touch of each 4 KB page still faults, one page at a
    time; populating a large block (a byte ring) at once costs far less."""
    flag = getattr(mmap, "MAP_POPULATE", 0) if populate else 0
    if not flag:
        return mmap.mmap(fd, nbytes)
    return mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED | flag)


class ShmBlock:
    """One POSIX shared-memory block, mapped in this process.

    Use :meth:`create` (owner: registers, unlinks) or :meth:`attach` (a worker:
    maps by name, never unlinks). :meth:`create` makes
    ``/dev/shm/pba_<pid>_<n>_<random>`` with ``_posixshmem`` (what
    :mod:`multiprocessing.shared_memory` uses), reserves its pages with
    ``posix_fallocate`` (a full ``/dev/shm`` is an ``OSError`` here, not a
    ``SIGBUS`` later), maps it and closes the descriptor, so many keys do not
    hold many file descriptors. Only the creating process registers a block
    with :mod:`multiprocessing.resource_tracker` (the safety net if it is
    SIGKILLed) and unregisters it when it unlinks it. Workers attach without
    registering: Python 3.11's ``SharedMemory(name)`` registers on attach too,
    which with spawn workers (they share the parent's tracker) races the
    parent's unregister and ends in "leaked shared_memory" warnings and double
    unlinks.
    """

    __slots__ = ("name", "size", "mm", "owner", "_finalizer", "__weakref__")

    def __init__(self, name: str, mm: mmap.mmap, owner: bool):
        self.name = name
        self.mm = mm
        self.size = len(mm)
        self.owner = owner
        self._finalizer = weakref.finalize(self, _unlink_name, name, os.getpid()) if owner else None

    @classmethod
    def create(cls, nbytes: int, populate: bool = False) -> ShmBlock:
        """A new block of at least ``nbytes`` bytes (zero-filled), named ``pba_<pid>_<n>_<random>``;
        ``populate``: map every page now (:func:`_map`)."""
        _require_posix()
        nbytes = max(int(nbytes), 1)
        while True:
            name = f"{SHM_PREFIX}{os.getpid()}_{next(_counter)}_{secrets.token_hex(4)}"
            with _live_lock:  # known before it exists: an interrupt right after shm_open cannot leak it
                _live[name] = os.getpid()
            try:
                fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
            except BaseException as exc:
                with _live_lock:
                    _live.pop(name, None)
                if isinstance(exc, FileExistsError):  # pragma: no cover
                    continue
                raise
            break
        try:
            try:
                os.posix_fallocate(fd, 0, nbytes)  # a full /dev/shm fails here, not with SIGBUS on a write
            except (AttributeError, OSError) as exc:
                if isinstance(exc, OSError) and exc.errno not in (95, 22):  # EOPNOTSUPP, EINVAL: no fallocate
                    raise
                os.ftruncate(fd, nbytes)
            mm = _map(fd, nbytes, populate)
        except BaseException:
            os.close(fd)
            _unlink_name(name, os.getpid())
            raise
        os.close(fd)
        _tracker("register", name)
        return cls(name, mm, owner=True)

    @classmethod
    def anonymous(cls, nbytes: int) -> ShmBlock:
        """Private memory with the same interface (``name`` is ``None``): used when /dev/shm is full or closed."""
        return cls(None, mmap.mmap(-1, max(int(nbytes), 1)), owner=False)

    @classmethod
    def attach(cls, name: str, populate: bool = False) -> ShmBlock:
        """Map an existing block by name (no resource-tracker registration, never unlinked here);
        ``populate``: map every page now (:func:`_map`)."""
        _require_posix()
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            mm = _map(fd, os.fstat(fd).st_size, populate)
        finally:
            os.close(fd)
        return cls(name, mm, owner=False)

    def floats(self, offset: int, count: int) -> memoryview:
        """``count`` float64 items from byte ``offset`` as a ``memoryview`` (item access gives Python floats)."""
        return memoryview(self.mm)[offset : offset + 8 * count].cast("d")

    def ndarray(self, offset: int, shape: tuple) -> np.ndarray:
        """A float64 numpy view of the block from byte ``offset``."""
        return np.ndarray(shape, dtype=np.float64, buffer=self.mm, offset=offset)

    @property
    def unlinked(self) -> bool:
        return not self.owner or self.name not in _live

    def unlink(self) -> None:
        """Remove the name (owner only; idempotent). Mapped views stay valid until dropped."""
        if self._finalizer is not None:
            self._finalizer()

    def close(self) -> None:
        """Unlink (owner) and unmap if no view is left; otherwise the mapping goes with its last view."""
        self.unlink()
        try:
            self.mm.close()
        except BufferError:
            pass

    def __repr__(self) -> str:
        return f"ShmBlock({self.name!r}, {self.size} bytes{', owner' if self.owner else ''})"


# ----------------------------------------------------------------------------- main side: chunk slots
def partial_width(agg: Aggregation) -> int | None:
    """Floats per partial if ``agg``'s partials are fixed-size numeric: 0 for a scalar, ``k`` for a k-tuple.

    Kernel aggregations use their kernel's shape; Python-callable ones are
    inferred from ``identity`` (a float, or a non-empty tuple of floats), and
    their ``lift``/``combine`` must then return floats (tuples of ``k`` floats).
    ``None``: not storable in shared memory (the thread pool builds its lcs).
    """
    kernel = agg.kernel
    if kernel is not None:
        return kernel.shape[0] if kernel.shape else 0
    ident = agg.identity
    if type(ident) is float:
        return 0
    if type(ident) is tuple and ident and all(type(x) is float for x in ident):
        return len(ident)
    return None


class Slot:
    """One chunk's ``saa`` and ``lcs`` regions in a block (``memoryview`` of floats each)."""

    __slots__ = ("block", "saa_off", "lcs_off", "saa", "lcs", "fut")

    def __init__(self, block: ShmBlock, saa_off: int, lcs_off: int, floats: int):
        self.block = block
        self.saa_off = saa_off
        self.lcs_off = lcs_off
        self.saa = block.floats(saa_off, floats)
        self.lcs = block.floats(lcs_off, floats)
        self.fut = None


def aligned(n: int) -> int:
    """``n`` rounded up to a cache line (the alignment of slot regions)."""
    return -(-n // _ALIGN) * _ALIGN


class ChunkSlots:
    """Shared-memory chunk slots of one aggregator (made by :func:`pba_runtime.tasks.open_chunk_slots`).

    Fixed-size slots (``saa`` and ``lcs`` of one chunk, ``rows x max(width, 1)``
    floats each) carved from a few blocks. A slot whose lcs task is still
    running is only reused once the task is over (or its worker is dead).

    Parameters
    ----------
    agg : Aggregation
    ref : tuple
        :func:`pba_runtime.tasks.aggregation_ref` of ``agg``.
    rows : int
        Partials per chunk (the chunk size ``b``).
    width : int
        Floats per partial, 0 for a scalar (:func:`partial_width`).
    run_task : callable
        The worker side of an lcs task (module-level, picklable): called with :meth:`task`'s message.
    submit : callable
        ``submit(fn, task) -> Future``: runs a task in a worker process.
    thread_submit : callable
        ``thread_submit(fn, *args) -> Future``: runs a function in a thread worker
        (slots in private memory, or an aggregation the workers cannot rebuild).
    slots_per_block : int
        Slots carved from each block (more blocks are added when all are busy).
    on_release : callable, optional
        Called with a finished task's Future before its slot is reused (the pool
        makes sure a dead or hung worker's generation is gone).
    """

    def __init__(self, agg: Aggregation, ref: tuple, rows: int, width: int, run_task: Callable, submit: Callable,
                 thread_submit: Callable, slots_per_block: int = 4, on_release: Callable | None = None,
                 log_config: Callable = lambda: None):
        self.agg = agg
        self.ref = ref
        self.rows = rows
        self.width = width
        self.floats = rows * max(width, 1)
        self.slots_per_block = max(1, slots_per_block)
        self._run_task = run_task
        self._submit = submit
        self._thread_submit = thread_submit
        self.venue = "process"
        self._on_release = on_release
        self._log_config = log_config
        self._blocks: list[ShmBlock] = []
        self._free: list[Slot] = []
        self._busy: list[Slot] = []  # released while their task may still run
        self._closed = False
        self._lock = threading.Lock()

    # -- slots
    def reserve(self) -> None:
        """Map the first block now, so the first chunk of the stream does not pay for it."""
        with self._lock:
            if not self._blocks:
                self._grow()

    def acquire(self) -> Slot:
        """A slot for a new chunk (its ``saa`` is written by the main loop, ``lcs`` by a worker)."""
        with self._lock:
            if not self._free and self._busy:
                still = []
                for slot in self._busy:
                    if slot.fut is None or slot.fut.done():
                        self._settle(slot)
                        self._free.append(slot)
                    else:
                        still.append(slot)
                self._busy = still
            if not self._free:
                self._grow()
            return self._free.pop()

    def _settle(self, slot: Slot) -> None:
        fut, slot.fut = slot.fut, None
        if fut is not None and self._on_release is not None:
            self._on_release(fut)

    def _grow(self) -> None:
        region = aligned(8 * self.floats)
        nbytes = 2 * region * self.slots_per_block
        blk = None
        if not self._closed:
            try:
                blk = ShmBlock.create(nbytes)
            except OSError as exc:  # /dev/shm full: private memory, lcs in the thread workers
                log.warning("no shared memory for %d bytes (%s); chunks of %s use private memory and threads",
                            nbytes, exc, self.agg.name)
        if blk is None:  # closed (the pool is gone): the aggregator goes on with main-thread lcs
            blk = ShmBlock.anonymous(nbytes)
        self._blocks.append(blk)
        for i in range(self.slots_per_block):
            off = 2 * region * i
            self._free.append(Slot(blk, off, off + region, self.floats))

    def release(self, slot: Slot | None, fut: Any = None) -> None:
        """Give a slot back; if its lcs task (``fut``) may still run, reuse waits for it."""
        if slot is None:
            return
        from concurrent.futures import Future

        slot.fut = fut if isinstance(fut, Future) else None
        with self._lock:
            if slot.fut is None or slot.fut.done():
                self._settle(slot)
                self._free.append(slot)
            else:
                self._busy.append(slot)

    # -- lcs
    def task(self, slot: Slot, n: int) -> tuple:
        """The message of one lcs task: names and offsets only."""
        return ("lcs", slot.block.name, slot.saa_off, slot.lcs_off, n, self.width, self.ref, self._log_config())

    def submit(self, slot: Slot, n: int):
        """Build the lcs of the ``n`` partials in ``slot`` in a worker process; returns a Future.

        Slots in private memory, and aggregations the workers could not rebuild
        (:meth:`use_threads`), go to the pool's thread workers instead.
        """
        if self.venue != "process" or slot.block.name is None:
            return self._thread_submit(lcs_into, self.agg, slot.saa, slot.lcs, n, self.width)
        return self._submit(self._run_task, self.task(slot, n))

    def use_threads(self, why: str) -> None:
        """From now on build this store's lcs in thread workers (the worker processes cannot)."""
        if self.venue != "thread":
            self.venue = "thread"
            log.warning("lcs of aggregation %r moves to thread workers: %s", self.agg.name, why)

    def build_here(self, slot: Slot, n: int) -> memoryview:
        """Build the lcs on the calling thread (SBA fallback) and return it."""
        lcs_into(self.agg, slot.saa, slot.lcs, n, self.width)
        return slot.lcs

    # -- bookkeeping
    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self._blocks if b.name is not None)

    @property
    def block_names(self) -> list[str]:
        return [b.name for b in self._blocks if b.name is not None and not b.unlinked]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Unlink every block (idempotent).

        Only the names go: slots in use stay valid (an aggregator whose pool
        was closed goes on, building its lcs on the main thread) and the memory
        is unmapped when the last view of it is dropped. New slots then come
        from private memory.
        """
        with self._lock:
            self._closed = True
            blocks, self._blocks = self._blocks, []
            self._free = []
            self._busy = []
        for blk in blocks:
            blk.unlink()

    def __repr__(self) -> str:
        return f"ChunkSlots({self.agg.name!r}, rows={self.rows}, width={self.width}, blocks={len(self._blocks)})"


# ----------------------------------------------------------------------------- a pool's shared memory
class PoolMemory:
    """The shared memory one process pool hands out: its aggregators' chunk slots and the batch scratch blocks.

    The pool closes it with itself (every name unlinked) and reports it in
    ``WorkerPool.stats()``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._stores: weakref.WeakSet = weakref.WeakSet()
        self._scratch: list[ShmBlock] = []  # free blocks for batch merges
        self._scratch_all: weakref.WeakSet = weakref.WeakSet()

    def add_store(self, store: ChunkSlots) -> None:
        """Close ``store`` with this memory."""
        self._stores.add(store)

    def lease_scratch(self, nbytes: int) -> ShmBlock:
        """A block of at least ``nbytes`` for one batch merge; give it back with :meth:`return_scratch`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("WorkerPool is closed")
            fits = [b for b in self._scratch if b.size >= nbytes]
            if fits:
                blk = min(fits, key=lambda b: b.size)
                self._scratch.remove(blk)
                return blk
        blk = ShmBlock.create(nbytes)
        self._scratch_all.add(blk)
        return blk

    def return_scratch(self, blk: ShmBlock) -> None:
        """Keep a scratch block for the next batch (at most two are kept; the smallest is unlinked)."""
        with self._lock:
            if self._closed or blk.unlinked:
                blk.unlink()
                return
            self._scratch.append(blk)
            self._scratch.sort(key=lambda b: b.size)
            while len(self._scratch) > 2:
                self._scratch.pop(0).unlink()

    def stats(self) -> dict[str, int]:
        """``shm_blocks`` and ``shm_bytes`` held by the chunk slots and the free scratch blocks."""
        stores = list(self._stores)
        return {"shm_blocks": sum(len(s.block_names) for s in stores) + len(self._scratch),
                "shm_bytes": sum(s.nbytes for s in stores) + sum(b.size for b in self._scratch)}

    def close(self) -> None:
        """Unlink every block handed out (buffers still referenced stay readable; only their names go)."""
        with self._lock:
            self._closed = True
        for store in list(self._stores):
            store.close()
        for blk in list(self._scratch_all):
            blk.unlink()
        self._scratch = []


# ----------------------------------------------------------------------------- worker side: mappings
_ATTACH_MAX = 64  # blocks a worker keeps mapped
_SWEEP_EVERY = 64  # tasks between checks for blocks the main process unlinked
_attached: OrderedDict[str, ShmBlock] = OrderedDict()
_attached_lock = threading.Lock()  # a degraded pool runs tasks in threads
_tasks_seen = itertools.count(1)


def attached(name: str) -> ShmBlock:
    """A worker's mapping of block ``name`` (cached; mappings of unlinked blocks are dropped now and then).

    Tasks run in a degraded pool's threads too, hence the lock.
    """
    with _attached_lock:
        return _block_locked(name)


def _block_locked(name: str) -> ShmBlock:
    if next(_tasks_seen) % _SWEEP_EVERY == 0:
        for other in list(_attached):
            if other != name and not os.path.exists("/dev/shm/" + other):  # unlinked: free its memory
                _attached.pop(other).close()
    blk = _attached.get(name)
    if blk is not None:
        _attached.move_to_end(name)
        return blk
    blk = _attached[name] = ShmBlock.attach(name)
    while len(_attached) > _ATTACH_MAX:
        _, old = _attached.popitem(last=False)
        old.close()
    return blk
