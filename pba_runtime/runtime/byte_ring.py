"""A byte ring in shared memory: a task slot's result bytes handed to the coordinator without a pipe.

The CSV sink writes one file, so every slot's result lines go through the
coordinator, which writes them in the order checkpoint alignment requires.
Sent over the slot's output queue, each batch's bytes would be pickled by the
slot's queue feeder, pushed through a pipe in small reads and unpickled by the
coordinator's sink thread, which shares the coordinator's GIL with the source
loop, and the slots' output stages stalled on a full output queue. Here
a slot writes its lines straight into its ring (the compiled CSV writer's
buffer *is* the ring), sends only ``(position, length)`` on the queue, and
the sink thread writes that region of the ring to the file (one ``write``,
the GIL released) and then releases it.

One producer (the slot's output stage thread) and one consumer (the
coordinator's sink thread), each region released in the order it was
written. A slot's *input* ring runs the other way, with the same code: the
coordinator's source loop writes each batch's grouped values there
(:mod:`~pba_runtime.runtime.key_grouping`) and the slot copies them out and
releases them. Positions are absolute byte counts; region ``(p, n)`` lies at
``p % capacity``, never across the end (a region that would is placed at the
start, and the bytes skipped count as used). The consumer publishes how far
it has released in the block's first 8 bytes; the producer waits, polling,
while its next region would overlap bytes not yet released (backpressure, as a full
queue), and a region larger than the ring is not placed at all (the caller
sends those bytes inline). The coordinator creates the ring (it owns the
block: :class:`pba_runtime.shm.ShmBlock`, registered with the resource
tracker) and unlinks its name as soon as its slot has mapped it, so nothing
is left in ``/dev/shm`` whatever happens to the processes afterwards. Both sides map every page of the
ring when they map it (``populate``: :class:`~pba_runtime.shm.ShmBlock`), not at each page's first touch
in the stream (a fault a page a side in the ring's first lap).

Examples
--------
>>> ring = ByteRing.create(64)
>>> slot_side = ByteRing.attach(ring.name)
>>> buf = slot_side.reserve(10)
>>> buf[:5] = np.frombuffer(b"7,0,3", np.uint8)
>>> ref = slot_side.commit(5); ref
(0, 5)
>>> bytes(ring.view(ref))
b'7,0,3'
>>> ring.release(ref)
>>> slot_side.put(b"x" * 100) is None  # larger than the ring: sent inline instead
True
>>> slot_side.close(); ring.close()
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..shm import ShmBlock

__all__ = ["ByteRing", "ring_capacity", "input_ring_capacity"]

_HEADER = 64  # the released position (int64) in its own cache line
_SLEEP_MIN, _SLEEP_MAX = 0.0002, 0.005


def ring_capacity(batch_size: int, queue_size: int, row_bytes: int = 48) -> int:
    """Bytes of a slot's ring: room for every result message its output queue can hold, and the next batch's
    bound (the writer reserves ~90 B a CSV row, uses ~25; a JSON line ~110 and ~60: ``row_bytes`` 96), at least
    4 MiB, at most 64 MiB (the pages are reserved up front; a batch whose lines may not fit goes through the
    queue as before).

    >>> ring_capacity(65_536, 4) // 2**20, ring_capacity(65_536, 4, 96) // 2**20, ring_capacity(3_000_000, 4) // 2**20
    (18, 36, 64)
    """
    return int(min(64 << 20, max(4 << 20, batch_size * (queue_size + 2) * row_bytes)))


def input_ring_capacity(batch_size: int, queue_size: int, timestamps: bool) -> int:
    """Bytes of a slot's input ring: a whole batch's values (and timestamps) for every message its input queue
    can hold, the one the slot is reading and the one being written, at least 1 MiB, at most 64 MiB (a
    share that does not fit goes through the queue as before).

    >>> input_ring_capacity(65_536, 4, False) // 2**20, input_ring_capacity(65_536, 4, True) // 2**20
    (3, 6)
    """
    per_tuple = 16 if timestamps else 8
    return int(min(64 << 20, max(1 << 20, batch_size * (queue_size + 2) * per_tuple)))


class ByteRing:
    """One slot's byte ring (see the module doc). :meth:`create` (the coordinator, owner) or :meth:`attach`.

    Parameters
    ----------
    block : ShmBlock
    on_wait : callable, optional
        Called by the producer between polls while the ring is full (may raise to stop waiting).
    """

    def __init__(self, block: ShmBlock, on_wait: Callable[[], None] | None = None):
        self.block = block
        self.name = block.name
        self.capacity = block.size - _HEADER
        self._released = np.ndarray((1,), np.int64, buffer=block.mm, offset=0)
        self._data = np.ndarray((self.capacity,), np.uint8, buffer=block.mm, offset=_HEADER)
        self._on_wait = on_wait
        self._head = 0  # producer: where the next region goes
        self._reserved: int | None = None
        self.waits = 0  # producer: times it found the ring full

    @classmethod
    def create(cls, capacity: int, on_wait: Callable[[], None] | None = None) -> ByteRing:
        """A new ring of ``capacity`` bytes, in a shared-memory block this process owns (``on_wait``: when this
        process is the producer, as it is of a slot's input ring)."""
        if capacity < 1:
            raise ValueError(f"capacity must be a positive number of bytes, got {capacity!r}")
        return cls(ShmBlock.create(_HEADER + int(capacity), populate=True), on_wait)

    @classmethod
    def attach(cls, name: str, on_wait: Callable[[], None] | None = None) -> ByteRing:
        """Map the ring ``name`` (the other process's side)."""
        return cls(ShmBlock.attach(name, populate=True), on_wait)

    # ------------------------------------------------------------------ producer
    def reserve(self, nbytes: int) -> np.ndarray | None:
        """A writable region of ``nbytes`` (waits while the ring is full), or ``None`` if it can never fit."""
        nbytes = int(nbytes)
        if nbytes > self.capacity:
            return None
        pos = self._head
        off = pos % self.capacity
        if off + nbytes > self.capacity:  # not across the end: start over at 0
            pos += self.capacity - off
            off = 0
        sleep = _SLEEP_MIN
        while True:
            released = int(self._released[0])
            if released == self._head or pos + nbytes - released <= self.capacity:
                break  # everything released (a skipped end included), or the region clear of what is not
            self.waits += 1
            if self._on_wait is not None:
                self._on_wait()
            time.sleep(sleep)
            sleep = min(2 * sleep, _SLEEP_MAX)
        self._reserved = pos
        return self._data[off:off + nbytes]

    def commit(self, nbytes: int) -> tuple[int, int]:
        """The first ``nbytes`` of the reserved region are written: its reference ``(position, length)``."""
        pos, self._reserved = self._reserved, None
        if pos is None:
            raise RuntimeError("commit without a reserved region")
        self._head = pos + int(nbytes)
        return pos, int(nbytes)

    def cancel(self) -> None:
        """Drop the reserved region, if any (nothing of it is sent)."""
        self._reserved = None

    def put(self, data: bytes) -> tuple[int, int] | None:
        """Copy ``data`` into the ring: its reference, or ``None`` if it can never fit."""
        buf = self.reserve(len(data))
        if buf is None:
            return None
        buf[:] = np.frombuffer(data, np.uint8)
        return self.commit(len(data))

    # ------------------------------------------------------------------ consumer
    def view(self, ref: tuple[int, int]) -> memoryview:
        """The bytes of region ``ref`` (valid until :meth:`release`)."""
        pos, n = ref
        off = pos % self.capacity
        return memoryview(self._data[off:off + n])

    def release(self, ref: tuple[int, int]) -> None:
        """Region ``ref`` (and every region before it) may be written again."""
        self._released[0] = ref[0] + ref[1]

    # ------------------------------------------------------------------ life
    def unlink(self) -> None:
        """Remove the block's name (owner; the mappings stay valid): once every slot has mapped it."""
        self.block.unlink()

    def close(self) -> None:
        """Unmap (and, for the owner, unlink)."""
        self._released = self._data = None
        self.block.close()
