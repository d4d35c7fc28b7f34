"""Two-Stacks: amortised O(1) FIFO aggregation with two stacks (the "lite" variant), on flat buffers.

The window's slice partials live in one preallocated ring (a Python list,
no object per element) split in two stacks: the *front* ``[F, B)`` keeps, for
each position, the aggregate from it to the end of the front
(``aggs[i] = vals[i] (+) ... (+) vals[B-1]``); the *back* ``[B, E)`` keeps only
its running aggregate. A push is one combine, a query one. A pop from an empty
front first *flips* the back onto the front, rebuilding its suffix aggregates
with ``n`` combines: amortised O(1), but a periodic O(n) latency spike, which
is what the paper's latency experiment shows (Tangwongsan et al., DEBS'17,
Fig. 1; Hammer Slide, Theodorakis et al., for the flat layout).

Examples
--------
>>> from pba_runtime import CountWindow
>>> op = TwoStacks(CountWindow(range=3, slide=1), "collect")
>>> [op.insert(v) for v in "abcd"]
[[], [], [(3, ['a', 'b', 'c'])], [(4, ['b', 'c', 'd'])]]
>>> op.stats()["flips"]
1
"""

from __future__ import annotations

from typing import Any

from .base import sizeof
from .ring import RingAggregator

__all__ = ["TwoStacks"]


class TwoStacks(RingAggregator):
    """Two-Stacks over slice partials: any associative aggregation, amortised O(1).

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation

    Examples
    --------
    >>> import pba_runtime as pr
    >>> ends, res = pr.sliding_aggregate([3, 1, 4, 1, 5], window=pr.CountWindow(range=2, slide=1),
    ...                                  agg="max", algorithm="two_stacks")
    >>> res.tolist()
    [3.0, 4.0, 4.0, 5.0]
    """

    name = "two_stacks"
    _rings = (("_vals", None), ("_aggs", None))

    def __init__(self, window, agg):
        super().__init__(window, agg)
        self._flips = 0

    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        if not self._fast or self._flushed or self._closed or timestamp is not None:  # the slicing layer refuses
            return super().insert(value, timestamp)  # timestamps on a count window
        # count window, slide 1: push, pop, query inlined (the same steps as the slicing layer)
        p = value if self._passthrough and value.__class__ is float else self.agg.lift(value)
        e = self._e
        if e - self._f == self._cap:
            self._grow()
        mask = self._cap - 1
        self._vals[e & mask] = p
        self._bagg = p if e == self._b else self._combine(self._bagg, p)
        e = self._e = e + 1
        n = self._n = self._n + 1
        self._back = self._back + 1
        k = n - self._r
        if k < 0:
            return []
        while self._front < k:
            if self._f == self._b:
                self._flip()
            self._f += 1
            self._front += 1
        f, b = self._f, self._b
        if f == b:
            res = self._bagg
        else:
            res = self._aggs[f & mask]
            if b != e:
                res = self._combine(res, self._bagg)
        self._next_k = k + 1
        self._emitted += 1
        return [(n, res if self._lower_float and res.__class__ is float else self.agg.lower(res))]

    # ------------------------------------------------------------------ merger
    def _reset_merger(self) -> None:
        self._f = self._b = self._e = 0  # front [f, b), back [b, e): absolute positions
        self._bagg = self._ident  # aggregate of the back

    def _push(self, p: Any) -> None:
        e = self._e
        if e - self._f == self._cap:
            self._grow()
        self._vals[e & (self._cap - 1)] = p
        self._bagg = p if e == self._b else self._combine(self._bagg, p)
        self._e = e + 1

    def _pop(self) -> None:
        if self._f == self._b:
            self._flip()
        self._f += 1

    def _query(self) -> Any:
        f, b = self._f, self._b
        if f == b:
            return self._bagg
        front = self._aggs[f & (self._cap - 1)]
        return front if b == self._e else self._combine(front, self._bagg)

    def _flip(self) -> None:
        """Move the back onto the front: ``aggs[i] = vals[i] (+) ... (+) vals[E-1]``, newest first."""
        vals, aggs, combine = self._vals, self._aggs, self._combine
        mask = self._cap - 1
        b, e = self._b, self._e
        i = e - 1
        acc = aggs[i & mask] = vals[i & mask]
        for i in range(e - 2, b - 1, -1):
            j = i & mask
            acc = aggs[j] = combine(vals[j], acc)
        self._b = e
        self._bagg = self._ident
        self._flips += 1

    def _grow(self) -> None:
        self._grow_rings(self._f, self._e)

    # ------------------------------------------------------------------ bookkeeping
    def held(self) -> list:
        """Slice partials held, oldest first (for tests and snapshots)."""
        return self._ring_items(self._vals, self._f, self._e)

    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        st["ring"] = {
            "f": self._f, "b": self._b, "e": self._e, "bagg": self._bagg, "flips": self._flips,
            "vals": self.held(),
            "aggs": self._ring_items(self._aggs, self._f, self._b),
        }
        return st

    def _set_state(self, st: dict[str, Any]) -> None:
        super()._set_state(st)
        ring = st["ring"]
        f, b, e = ring["f"], ring["b"], ring["e"]
        self._new_rings(e - f)
        self._put_items(self._vals, f, ring["vals"])
        self._put_items(self._aggs, f, ring["aggs"])
        self._f, self._b, self._e = f, b, e
        self._bagg = ring["bagg"]
        self._flips = ring["flips"]

    def stats(self) -> dict[str, Any]:
        st = super().stats()
        st.update(flips=self._flips, held=self._e - self._f, capacity=self._cap)
        return st

    def state_bytes(self) -> int:
        n = self._e - self._f
        if not n:
            return 0
        return 2 * 8 * self._cap + n * sizeof(self._vals[self._f & (self._cap - 1)])
