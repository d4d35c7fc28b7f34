"""FlatFAT and the Reactive Aggregator: a flat array binary tree of partial aggregates.

Tangwongsan, Hirzel, Schneider, Wu, *General Incremental Sliding-Window Aggregation*, VLDB'15 (Sections
4-5): :class:`FlatFAT`, a complete binary tree of partial aggregates in one array, and
:class:`FlatFATAggregator` (``"flatfat"``), the Reactive Aggregator over slice partials on it: pushes and
pops write leaves, a query repairs the changed paths in one bulk update, amortised O(1) structure work and
O(log n) combines per window, for any associative aggregation.

Examples
--------
>>> import operator
>>> fat = FlatFAT(operator.add, [1, 2, 3, 4, 5])
>>> fat.capacity, fat.aggregate(), fat.prefix(1), fat.suffix(3)
(8, 15, 3, 9)
>>> fat.update([(0, EMPTY), (6, 10)])
>>> fat.aggregate(), fat.compact(), fat.leaves()
(24, 5, [2, 3, 4, 5, 10])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .base import SlicedAggregator, sizeof
from .ring import ring_capacity

__all__ = ["FlatFAT", "FlatFATAggregator", "EMPTY"]


class _Empty:
    """The empty-slot marker: ``EMPTY (+) x == x (+) EMPTY == x``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EMPTY"

    def __reduce__(self) -> str:
        return "EMPTY"


#: Marker of an empty leaf slot (the paper's bottom).
EMPTY = _Empty()

#: Smallest capacity a FlatFAT is shrunk to.
MIN_CAPACITY = 8


def _pow2(n: int) -> int:
    cap = 2
    while cap < n:
        cap <<= 1
    return cap


class FlatFAT:
    """Flat fixed-size aggregator over ``capacity`` slots (a power of two).

    Parameters
    ----------
    combine : callable
        Associative ``combine(older, newer)``.
    values : iterable, optional
        Initial contents of slots ``0, 1, ...`` (:data:`EMPTY` for a hole).
    capacity : int, optional
        At least ``len(values)``; rounded up to a power of two (>= 2).

    Notes
    -----
    :class:`FlatFAT` is a complete binary tree over ``capacity`` leaf slots stored
    in one array with heap numbering (root at 1, children of ``v`` at ``2v`` and
    ``2v+1``, leaf ``i`` at ``capacity + i``); every internal node holds the
    combination of its two children. Empty slots hold the marker :data:`EMPTY`
    (the paper's bottom), which combines as a neutral element. Bulk ``update``
    repairs the changed leaf-to-root paths level by level (Algorithm 2, ``m``
    writes cost ``O(m + m log(n/m))`` combines); ``prefix``/``suffix`` fold at most
    ``log2 n`` nodes (Algorithm 3); ``compact`` closes holes, ``resized`` copies
    the contents into a tree of another capacity (Algorithm 1).

    Examples
    --------
    >>> fat = FlatFAT(lambda a, b: a + b, ["a", "b", "c"])
    >>> fat.aggregate(), fat.prefix(1), fat.suffix(1)
    ('abc', 'ab', 'bc')
    """

    __slots__ = ("_combine", "_cap", "_t", "combines")

    def __init__(self, combine: Callable[[Any, Any], Any], values: Iterable[Any] = (), capacity: int | None = None):
        values = list(values)
        need = max(len(values), capacity or 0, 2)
        self._combine = combine
        self._cap = cap = _pow2(need)
        self._t: list = [EMPTY] * (2 * cap)
        self._t[cap : cap + len(values)] = values
        self.combines = 0
        self._build()

    # ------------------------------------------------------------------ Algorithm 1: new
    def _build(self) -> None:
        t, c = self._t, self._combine
        n = 0
        for v in range(self._cap - 1, 0, -1):
            a, b = t[2 * v], t[2 * v + 1]
            if a is EMPTY:
                t[v] = b
            elif b is EMPTY:
                t[v] = a
            else:
                t[v] = c(a, b)
                n += 1
        self.combines += n

    @property
    def capacity(self) -> int:
        return self._cap

    def __len__(self) -> int:
        return self._cap

    def __getitem__(self, i: int) -> Any:
        return self._t[self._cap + i]

    def leaves(self) -> list:
        """The non-empty slot values, in slot order."""
        return [x for x in self._t[self._cap :] if x is not EMPTY]

    # ------------------------------------------------------------------ Algorithm 2: update
    def write(self, i: int, value: Any) -> None:
        """Set slot ``i`` without repairing the tree (call :meth:`repair` with the slots written)."""
        self._t[self._cap + i] = value

    def update(self, changes: Iterable[tuple[int, Any]]) -> None:
        """Write ``(slot, value)`` pairs (``EMPTY`` clears a slot) and repair the tree bottom-up."""
        slots = []
        for i, v in changes:
            self._t[self._cap + i] = v
            slots.append(i)
        self.repair(slots)

    def repair(self, slots: Iterable[int]) -> None:
        """Recompute the ancestors of the written ``slots``, one level at a time (each node once)."""
        t, c, cap = self._t, self._combine, self._cap
        if not isinstance(slots, (list, tuple)):
            slots = list(slots)
        if len(slots) <= 2:  # the per-tuple case (one push, one pop): two paths that meet at their LCA
            self._repair_paths(slots)
            return
        level = {(cap + i) >> 1 for i in slots}
        n = 0
        while level:
            nxt = set()
            for v in level:
                a, b = t[2 * v], t[2 * v + 1]
                if a is EMPTY:
                    t[v] = b
                elif b is EMPTY:
                    t[v] = a
                else:
                    t[v] = c(a, b)
                    n += 1
                if v > 1:
                    nxt.add(v >> 1)
            level = nxt
        self.combines += n

    def _repair_paths(self, slots) -> None:
        t, c, cap = self._t, self._combine, self._cap
        it = iter(slots)
        u = next(it, None)
        if u is None:
            return
        u = (cap + u) >> 1
        v = next(it, None)
        v = u if v is None else (cap + v) >> 1
        n = 0
        while u:
            for w in ((u,) if u == v else (u, v)):
                a, b = t[2 * w], t[2 * w + 1]
                if a is EMPTY:
                    t[w] = b
                elif b is EMPTY:
                    t[w] = a
                else:
                    t[w] = c(a, b)
                    n += 1
            u >>= 1
            v >>= 1
        self.combines += n

    # ------------------------------------------------------------------ queries
    def aggregate(self) -> Any:
        """Combination of every slot, in slot order (``EMPTY`` if all are empty)."""
        return self._t[1]

    def prefix(self, i: int) -> Any:
        """Slots ``0 .. i`` (inclusive), by one leaf-to-root walk (Algorithm 3)."""
        t, c = self._t, self._combine
        v = self._cap + i
        acc = t[v]
        while v > 1:
            if v & 1:  # right child: the left sibling extends the prefix
                s = t[v - 1]
                if s is not EMPTY:
                    acc = s if acc is EMPTY else c(s, acc)
                    self.combines += acc is not s
            v >>= 1
        return acc

    def suffix(self, j: int) -> Any:
        """Slots ``j .. capacity-1``, by one leaf-to-root walk."""
        t, c = self._t, self._combine
        v = self._cap + j
        acc = t[v]
        while v > 1:
            if not v & 1:  # left child: the right sibling extends the suffix
                s = t[v + 1]
                if s is not EMPTY:
                    acc = s if acc is EMPTY else c(acc, s)
                    self.combines += acc is not s
            v >>= 1
        return acc

    # ------------------------------------------------------------------ compact and resize
    def compact(self) -> int:
        """Shift the non-empty slots to the front, keeping their order; return how many there are."""
        cap = self._cap
        t = self._t
        items = [x for x in t[cap:] if x is not EMPTY]
        changed = [i for i in range(cap) if (t[cap + i] is not (items[i] if i < len(items) else EMPTY))]
        t[cap : cap + len(items)] = items
        t[cap + len(items) :] = [EMPTY] * (cap - len(items))
        self.repair(changed)
        return len(items)

    def resized(self, capacity: int, values: Iterable[Any] | None = None) -> FlatFAT:
        """A new FlatFAT of ``capacity`` holding ``values`` (default: the non-empty slots, in order)."""
        new = FlatFAT(self._combine, self.leaves() if values is None else values, capacity)
        new.combines += self.combines
        return new

    def state(self) -> dict[str, Any]:
        """Every node as it is (internal ones included): :meth:`from_state` continues bit for bit."""
        return {"nodes": list(self._t), "combines": self.combines}

    @classmethod
    def from_state(cls, combine: Callable[[Any, Any], Any], state: dict[str, Any]) -> FlatFAT:
        """The FlatFAT a :meth:`state` describes, nothing recomputed (a rebuilt tree could group differently)."""
        fat = cls.__new__(cls)
        fat._combine = combine
        fat._t = list(state["nodes"])
        fat._cap = len(fat._t) // 2
        fat.combines = state["combines"]
        return fat

    def check(self) -> None:
        """Assert that every internal node is the combination of its children (tree consistency)."""
        t, c = self._t, self._combine
        for v in range(self._cap - 1, 0, -1):
            a, b = t[2 * v], t[2 * v + 1]
            want = b if a is EMPTY else (a if b is EMPTY else c(a, b))
            assert t[v] == want, f"node {v}: {t[v]!r} != {want!r}"


class FlatFATAggregator(SlicedAggregator):
    """Reactive Aggregator over a FlatFAT of slice partials: any associative aggregation, O(log n).

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation

    Notes
    -----
    :class:`FlatFATAggregator` (``"flatfat"``) is the Reactive Aggregator over slice
    partials: the window is a circular buffer in the leaves, pushes and pops only
    write leaves, and the internal nodes are repaired in one bulk update when a
    window is queried. An *inverted* buffer (wrapped past the end of the array)
    is answered as ``suffix(front) (+) prefix(back)`` so order is kept for
    non-commutative aggregations. The capacity doubles when the buffer is full
    (or the buffer is compacted, if at most 3/4 of it is in use) and halves when
    fewer than 1/4 of the slots are used: amortised O(1) structure work and
    O(log n) combines per window.

    Examples
    --------
    >>> import pba_runtime as pr
    >>> pr.sliding_aggregate(list("abcde"), window=pr.CountWindow(range=3, slide=2), agg="collect",
    ...                      algorithm="flatfat")[1]
    [['a', 'b', 'c'], ['c', 'd', 'e']]
    """

    name = "flatfat"

    def __init__(self, window, agg):
        super().__init__(window, agg)
        self._combine = self.agg.combine
        self._ident = self.agg.identity
        self._initial_cap = ring_capacity(self._q + 2)
        self._resizes = 0
        self._compacts = 0
        self._fat: FlatFAT | None = None
        self._reset_merger()

    def _reset_merger(self) -> None:
        # a time gap emptied the window: start over small (the capacity grows back as needed)
        self._fat = FlatFAT(self._combine, capacity=self._initial_cap if self._fat is None else MIN_CAPACITY)
        self._slot0 = 0  # front: slot of the oldest slice
        self._span = 0  # slots from the front to the back (holes included)
        self._count = 0  # slices held
        self._dirty: list[int] = []  # slots written since the last repair

    def _push(self, p: Any) -> None:
        fat = self._fat
        if self._span == fat.capacity:
            self._grow()
            fat = self._fat
        slot = (self._slot0 + self._span) & (fat.capacity - 1)
        fat.write(slot, p)
        self._dirty.append(slot)
        self._span += 1
        self._count += 1

    def _pop(self) -> None:
        self._remove_slot(self._slot0)

    def _remove(self, i: int) -> None:
        """Evict the ``i``-th oldest slice held (non-FIFO eviction leaves a hole)."""
        fat = self._fat
        mask = fat.capacity - 1
        for j in range(self._span):
            slot = (self._slot0 + j) & mask
            if fat[slot] is not EMPTY:
                if i == 0:
                    self._remove_slot(slot)
                    return
                i -= 1
        raise IndexError("no such slice")

    def _remove_slot(self, slot: int) -> None:
        fat = self._fat
        fat.write(slot, EMPTY)
        self._dirty.append(slot)
        self._count -= 1
        mask = fat.capacity - 1
        while self._span and fat[self._slot0] is EMPTY:  # the front moves past the holes
            self._slot0 = (self._slot0 + 1) & mask
            self._span -= 1
        if self._count < fat.capacity // 4 and fat.capacity > MIN_CAPACITY:
            self._resize(fat.capacity // 2)

    def _query(self) -> Any:
        fat = self._fat
        if self._dirty:
            fat.repair(self._dirty)
            self._dirty = []
        if not self._count:
            return self._ident
        front = self._slot0
        last = (front + self._span - 1) & (fat.capacity - 1)
        if front <= last:
            return fat.aggregate()
        return self._combine(fat.suffix(front), fat.prefix(last))  # inverted buffer

    def _grow(self) -> None:
        """The buffer is full: compact it if at most 3/4 is in use (holes), else double the capacity."""
        fat = self._fat
        if self._count <= 3 * fat.capacity // 4:
            self._compact()
        else:
            self._resize(2 * fat.capacity)

    def _window_order(self) -> list:
        fat = self._fat
        mask = fat.capacity - 1
        out = [fat[(self._slot0 + i) & mask] for i in range(self._span)]
        return out if self._span == self._count else [x for x in out if x is not EMPTY]

    def _resize(self, capacity: int) -> None:
        self._fat = self._fat.resized(capacity, self._window_order())
        self._slot0 = 0
        self._span = self._count
        self._dirty = []
        self._resizes += 1

    def _compact(self) -> None:
        fat = self._fat
        if self._slot0:  # the window wraps around: copy it back in order (linear, like compact)
            self._fat = fat.resized(fat.capacity, self._window_order())
            self._slot0 = 0
            self._dirty = []
        else:
            if self._dirty:
                fat.repair(self._dirty)
                self._dirty = []
            fat.compact()
        self._span = self._count
        self._compacts += 1

    # ------------------------------------------------------------------ checks and bookkeeping
    def check_invariants(self) -> None:
        """Assert tree consistency, and that the slices held are the non-empty slots from the front to the back."""
        fat = self._fat
        if self._dirty:
            fat.repair(self._dirty)
            self._dirty = []
        fat.check()
        cap = fat.capacity
        span = set((self._slot0 + i) & (cap - 1) for i in range(self._span))
        assert self._span <= cap
        assert sum(fat[i] is not EMPTY for i in span) == self._count
        assert all(fat[i] is EMPTY for i in range(cap) if i not in span), "slots outside the buffer are empty"
        assert not self._span or fat[self._slot0] is not EMPTY, "the front holds the oldest slice"

    def held(self) -> list:
        """Slice partials held, oldest first."""
        return self._window_order()

    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        # the tree as it is, slots and internal nodes: a tree rebuilt from the items would
        # group the combines differently and change float results after restore
        st["flatfat"] = {"tree": self._fat.state(), "slot0": self._slot0, "span": self._span, "count": self._count,
                         "dirty": list(self._dirty), "resizes": self._resizes, "compacts": self._compacts}
        return st

    def _set_state(self, st: dict[str, Any]) -> None:
        super()._set_state(st)
        d = st["flatfat"]
        self._fat = FlatFAT.from_state(self._combine, d["tree"])
        self._slot0, self._span, self._count = d["slot0"], d["span"], d["count"]
        self._dirty = list(d["dirty"])
        self._resizes, self._compacts = d["resizes"], d["compacts"]

    def stats(self) -> dict[str, Any]:
        st = super().stats()
        st.update(held=self._count, capacity=self._fat.capacity, resizes=self._resizes, compacts=self._compacts,
                  combines=self._fat.combines)
        return st

    def state_bytes(self) -> int:
        n = self._count
        cap = self._fat.capacity
        return 16 * cap + (2 * n * sizeof(self._fat[self._slot0]) if n else 0)
