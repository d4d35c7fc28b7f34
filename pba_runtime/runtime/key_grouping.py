"""Partitioning and grouping a batch in one pass: each slot's tuples, already grouped by key.

The coordinator used to split each batch by slot (a gather per slot of the keys
and the values) and every slot then sorted its share by key (a stable radix
sort and a gather), and the keys crossed the queues. When the keys are small
non-negative integers (the generated sources' plugs and sensors; at most
:data:`~pba_runtime.runtime.partitioning.TABLE_KEYS` of them), one counting sort
does both: each key has a *rank*, its place in the order ``(slot, key)``; the
batch is counted per rank and each value (and timestamp) is written straight to
its place, in arrival order within its key (a stable sort). Slot ``i`` then
gets one contiguous run of values, its distinct keys in increasing order and
where each key's run starts: what :func:`~pba_runtime.runtime.partitioning.group_runs`
gave it, without the keys themselves.

The compiled pass (numba, cached on disk) has a readable numpy reference,
:func:`group_reference` (a stable ``argsort`` of the ranks), and a test checks
they agree; without numba the reference runs.

Examples
--------
>>> import numpy as np
>>> g = SlotGrouper(2)
>>> out = g(np.array([3, 0, 2, 3, 1, 0]), np.array([1.0, 2, 3, 4, 5, 6]), None)
>>> [(s.keys, s.bounds, s.values.tolist()) for s in out]
[([0, 2, 3], [0, 2, 3, 5], [2.0, 6.0, 3.0, 1.0, 4.0]), ([1], [0, 1], [5.0])]
>>> g(np.array(["a"]), np.array([1.0]), None) is None   # not small integer keys: the caller's general path
True
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .compiled_once import CompiledOnce
from .partitioning import TABLE_KEYS, slot_of

__all__ = ["SlotGroup", "SlotGrouper", "group_reference", "warm_in_background"]


@dataclass
class SlotGroup:
    """One slot's share of a batch, grouped by key.

    Attributes
    ----------
    keys : list of int
        The slot's distinct keys in the batch, increasing.
    bounds : list of int
        ``len(keys) + 1`` offsets: key ``keys[j]``'s tuples are ``values[bounds[j] : bounds[j + 1]]``,
        in arrival order.
    values : numpy.ndarray
        float64.
    timestamps : numpy.ndarray or None
        int64, in the same order as ``values``.
    """

    keys: list
    bounds: list
    values: np.ndarray
    timestamps: np.ndarray | None


def group_reference(ranks: np.ndarray, n_ranks: int, values: np.ndarray,
                    timestamps: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """``(values, timestamps, counts)`` sorted stably by rank, and the tuples of each rank: the slow
    reference of the compiled pass (a stable ``argsort``).

    Examples
    --------
    >>> import numpy as np
    >>> v, t, c = group_reference(np.array([1, 0, 1]), 3, np.array([5.0, 6.0, 7.0]), None)
    >>> v.tolist(), t, c.tolist()
    ([6.0, 5.0, 7.0], None, [1, 2, 0])
    """
    order = np.argsort(ranks, kind="stable")
    return (values[order], None if timestamps is None else timestamps[order],
            np.bincount(ranks, minlength=n_ranks).astype(np.int64))


def _build(njit):
    """The compiled counting sort (see :class:`SlotGrouper`)."""

    @njit(cache=True, nogil=True)
    def scatter(keys, rank, values, timestamps, has_ts, counts, out_v, out_t):  # pragma: no cover
        # False (nothing written) at a key without a rank: the caller checks the keys and grows the table
        size = rank.shape[0]
        counts[:] = 0
        for i in range(keys.shape[0]):
            k = keys[i]
            if k < 0 or k >= size:
                return False
            counts[rank[k]] += 1
        cursor = np.empty(counts.shape[0], np.int64)
        s = 0
        for j in range(counts.shape[0]):
            cursor[j] = s
            s += counts[j]
        if has_ts:
            for i in range(keys.shape[0]):
                r = rank[keys[i]]
                c = cursor[r]
                out_v[c] = values[i]
                out_t[c] = timestamps[i]
                cursor[r] = c + 1
        else:
            for i in range(keys.shape[0]):
                r = rank[keys[i]]
                c = cursor[r]
                out_v[c] = values[i]
                cursor[r] = c + 1
        return True

    return scatter


_kernel = CompiledOnce(_build).get  # the counting sort (numba imported at the first call), None without numba


_NO_TS = np.empty(0, dtype=np.int64)


class SlotGrouper:
    """Split a batch by slot and group each slot's share by key in one pass (see the module doc).

    Parameters
    ----------
    parallelism : int
        Task slots; a key's slot is :func:`~pba_runtime.runtime.partitioning.slot_of`'s.
    compiled : bool
        Run the compiled pass (when numba is there); ``False``: the numpy reference.
    """

    def __init__(self, parallelism: int, compiled: bool = True):
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"parallelism must be a positive integer, got {parallelism!r}")
        self.parallelism = parallelism
        self.compiled = compiled
        self._size = 0  # keys [0, _size) have a rank
        self._rank = np.empty(0, dtype=np.int64)
        self._key_of_rank = np.empty(0, dtype=np.int64)
        self._slot_end = np.zeros(parallelism, dtype=np.int64)  # ranks of slot i: [_slot_end[i-1], _slot_end[i])

    def _table(self, size: int) -> None:
        keys = np.arange(size, dtype=np.int64)
        slots = slot_of(keys, self.parallelism)
        order = np.lexsort((keys, slots))  # by slot, then key
        rank = np.empty(size, dtype=np.int64)
        rank[order] = np.arange(size, dtype=np.int64)
        self._rank, self._key_of_rank, self._size = rank, keys[order], size
        self._slot_end = np.cumsum(np.bincount(slots, minlength=self.parallelism)).astype(np.int64)

    def __call__(self, keys: np.ndarray, values: np.ndarray,
                 timestamps: np.ndarray | None) -> list[SlotGroup | None] | None:
        """Each slot's :class:`SlotGroup` (``None`` for a slot with no tuple here), or ``None`` when the keys
        are not integers in ``[0, TABLE_KEYS)`` (the caller then takes its general path)."""
        n = len(keys)
        if keys.dtype.kind not in "iu" or not n:
            return None
        values = np.ascontiguousarray(values, dtype=np.float64)
        kernel = _kernel() if self.compiled else None
        if kernel is not None:
            counts = np.empty(self._size, dtype=np.int64)
            out_v = np.empty(n, dtype=np.float64)
            has_ts = timestamps is not None
            out_t = np.empty(n, dtype=np.int64) if has_ts else _NO_TS
            args = (np.ascontiguousarray(keys), values,
                    np.ascontiguousarray(timestamps, dtype=np.int64) if has_ts else _NO_TS, has_ts)
            if not kernel(args[0], self._rank, *args[1:], counts, out_v, out_t):  # a key without a rank
                if not self._cover(keys):
                    return None
                counts = np.empty(self._size, dtype=np.int64)
                kernel(args[0], self._rank, *args[1:], counts, out_v, out_t)
            if not has_ts:
                out_t = None
        else:
            if not self._cover(keys):
                return None
            # 8 or 16 bits: numpy's stable sort is then a radix sort (one pass or two)
            ranks = self._rank.take(keys).astype(np.uint8 if self._size <= 256 else np.uint16)
            out_v, out_t, counts = group_reference(ranks, self._size, values, timestamps)
        return self._split(counts, out_v, out_t)

    def _cover(self, keys: np.ndarray) -> bool:
        """Give every key of ``keys`` a rank (the table grown); ``False`` when some key is not in
        ``[0, TABLE_KEYS)``."""
        lo, hi = int(keys.min()), int(keys.max())
        if lo < 0 or hi >= TABLE_KEYS:
            return False
        if hi >= self._size:
            self._table(max(hi + 1, min(TABLE_KEYS, 2 * self._size)))
        return True

    def _split(self, counts: np.ndarray, out_v: np.ndarray, out_t: np.ndarray | None) -> list[SlotGroup | None]:
        starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        present = np.flatnonzero(counts)
        out: list[SlotGroup | None] = []
        lo_rank = 0
        for end_rank in self._slot_end.tolist():
            a, b = np.searchsorted(present, [lo_rank, end_rank]).tolist()
            if a == b:
                out.append(None)
            else:
                ranks = present[a:b]
                base = int(starts[ranks[0]])
                last = int(starts[ranks[-1] + 1])
                bounds = (starts[ranks] - base).tolist()
                bounds.append(last - base)
                out.append(SlotGroup(self._key_of_rank[ranks].tolist(), bounds, out_v[base:last],
                                     None if out_t is None else out_t[base:last]))
            lo_rank = end_rank
        return out


def warm_in_background() -> threading.Thread:
    """Import numba and load the compiled pass (disk cache) on a thread: the coordinator's start-up, while
    its slots start. Join it before the stream."""

    def warm() -> None:
        try:
            SlotGrouper(2)(np.array([0, 1, 2], dtype=np.int64), np.zeros(3), None)
            SlotGrouper(2)(np.array([0, 1, 2], dtype=np.int64), np.zeros(3), np.zeros(3, dtype=np.int64))
        except Exception:  # pragma: no cover - the stream then compiles it, or reports the failure
            pass

    t = threading.Thread(target=warm, name="pba-grouping-warm", daemon=True)
    t.start()
    return t
