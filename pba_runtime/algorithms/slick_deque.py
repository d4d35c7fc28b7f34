"""SlickDeque (non-invertible variant): a monotonic deque for selective aggregations, on flat buffers.

For an aggregation whose ``combine`` always returns one of its operands (``max``,
``min``, ``argmax``), a slice that loses to a newer one can never be a window's
answer again. The deque keeps only the slices that still can, oldest first,
each one beating every newer one (``combine(older, newer) is older``): a push
drops the losers from the back, a pop drops the front if it is the slice
leaving, and the query is the front, with no combine at all. Amortised O(1)
per push (each slice is dropped at most once), worst case O(n) for a push that
beats the whole window; O(1) pop and query (Shein, Chrysanthis, Labrinidis,
*SlickDeque*, EDBT'18; the deque lives in one preallocated ring, as Hammer
Slide argues for Two-Stacks).

Ties keep the older slice, exactly as ``combine`` decides (argmax: the oldest
position), and NaN wins like numpy's ``max``.

Examples
--------
>>> from pba_runtime import CountWindow
>>> op = SlickDeque(CountWindow(range=3, slide=1), "argmax")
>>> [op.insert(v) for v in (5, 1, 5, 2, 0)]
[[], [], [(3, 0)], [(4, 2)], [(5, 2)]]
>>> SlickDeque(CountWindow(range=3, slide=1), "sum")
Traceback (most recent call last):
...
ValueError: algorithm 'slick_deque' needs a selective aggregation (max, min, argmax: ...); aggregation 'sum' is not selective
"""

from __future__ import annotations

from typing import Any

from .base import sizeof
from .ring import RingAggregator

__all__ = ["SlickDeque"]


class SlickDeque(RingAggregator):
    """Monotonic-deque aggregator for selective aggregations.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
        Must be selective (``combine(a, b)`` returns ``a`` or ``b`` itself).

    Examples
    --------
    >>> import pba_runtime as pr
    >>> pr.sliding_aggregate([3, 1, 4, 1, 5], window=pr.CountWindow(range=3, slide=1), agg="min",
    ...                      algorithm="slick_deque")[1].tolist()
    [1.0, 1.0, 1.0]
    """

    name = "slick_deque"
    requires = (("selective", "a selective aggregation (max, min, argmax: combine returns one of its operands)"),)
    _rings = (("_vals", None), ("_idx", 0))  # deque of candidate partials, their slice numbers

    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        if not self._fast or self._flushed or self._closed or timestamp is not None:  # the slicing layer refuses
            return super().insert(value, timestamp)  # timestamps on a count window
        # count window, slide 1: push, pop, query inlined (the same steps as the slicing layer)
        p = value if self._passthrough and value.__class__ is float else self.agg.lift(value)
        self._push(p)
        n = self._n = self._n + 1
        self._back = self._back + 1
        k = n - self._r
        if k < 0:
            return []
        mask = self._cap - 1
        while self._front < k:
            h = self._h
            if h < self._t and self._idx[h & mask] == self._popped:
                self._vals[h & mask] = None
                self._h = h + 1
            self._popped += 1
            self._front += 1
        res = self._vals[self._h & mask] if self._h < self._t else self._ident
        self._next_k = k + 1
        self._emitted += 1
        return [(n, res if self._lower_float and res.__class__ is float else self.agg.lower(res))]

    def _reset_merger(self) -> None:
        self._h = self._t = 0  # deque = ring positions [h, t)
        self._pushed = 0  # slices pushed since the reset
        self._popped = 0  # slices popped since the reset

    def _push(self, p: Any) -> None:
        vals, combine = self._vals, self._combine
        h, t = self._h, self._t
        mask = self._cap - 1
        while t > h:
            back = vals[(t - 1) & mask]
            if combine(back, p) is back:
                break
            t -= 1
        if t - h == self._cap:
            self._grow_rings(h, t)
            vals, mask = self._vals, self._cap - 1
        vals[t & mask] = p
        self._idx[t & mask] = self._pushed
        self._t = t + 1
        self._pushed += 1

    def _pop(self) -> None:
        h = self._h
        if h < self._t and self._idx[h & (self._cap - 1)] == self._popped:
            self._vals[h & (self._cap - 1)] = None
            self._h = h + 1
        self._popped += 1

    def _query(self) -> Any:
        h = self._h
        return self._vals[h & (self._cap - 1)] if h < self._t else self._ident

    # ------------------------------------------------------------------ bookkeeping
    def deque(self) -> list[tuple[int, Any]]:
        """The candidates, oldest first, as ``(slice number since the last reset, partial)``."""
        mask = self._cap - 1
        return [(self._idx[i & mask], self._vals[i & mask]) for i in range(self._h, self._t)]

    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        st["deque"] = {"items": self.deque(), "pushed": self._pushed, "popped": self._popped}
        return st

    def _set_state(self, st: dict[str, Any]) -> None:
        super()._set_state(st)
        d = st["deque"]
        items = d["items"]
        self._new_rings(len(items))
        for i, (k, p) in enumerate(items):
            self._vals[i] = p
            self._idx[i] = k
        self._h, self._t = 0, len(items)
        self._pushed, self._popped = d["pushed"], d["popped"]

    def stats(self) -> dict[str, Any]:
        st = super().stats()
        st.update(deque=self._t - self._h, capacity=self._cap)
        return st

    def state_bytes(self) -> int:
        n = self._t - self._h
        return 16 * self._cap + (n * sizeof(self._vals[self._h & (self._cap - 1)]) if n else 0)
