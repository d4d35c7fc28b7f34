"""Subtract-on-evict (SoE): a running total, ``inverse`` on eviction. O(1) worst case, invertible only.

Keeps the slice partials in a flat ring and one running aggregate: a push
combines the new slice in, a pop takes the oldest out with the aggregation's
``inverse(total, oldest)``. One combine per push, one inverse per pop, no
combine per query. It needs an invertible aggregation (``sum``, ``count``,
``mean``, ``std``, ``geomean``) and refuses the others (``max`` cannot be
"subtracted").

Floating point: an inverse does not undo a rounding, so a total maintained
with inverses carries the rounding of tuples already evicted. The total is kept
in two parts: the *old* part (slices pushed before a checkpoint), which only
shrinks, by inverses, and the *new* part (slices pushed since), which only
grows, by combines; a query combines the two. When the old part empties it is
the identity again, exactly, and the new part becomes the old one at a new
checkpoint: so the rounding never reaches back more than two window lengths,
at no extra cost (one combine per push, one inverse per pop, one combine per
query, all worst case). Within that span it remains: for ``sum`` and ``mean``
an absolute error of about ``1e-16`` times the values that left.

The built-in ``std`` cannot afford that: the standard deviation of equal values
is 0, and ``sqrt`` turns a cancelled sum of squares of ``1e-17`` into ``3e-9``,
beyond the spec's tolerance. For it, SoE subtracts exactly: each slice partial
``(n, mean, M2)`` is turned into exact power sums ``(n, sum x, sum x**2)`` held
as Python integers scaled by ``2**2148`` (every finite float and its square is
an integer multiple of ``2**-2148``), so eviction is an exact integer
subtraction and a query rounds once. Non-finite partials are counted aside
(the result is NaN while one is in the window, as numpy's ``std``).

Examples
--------
>>> from pba_runtime import CountWindow
>>> op = SubtractOnEvict(CountWindow(range=3, slide=1), "sum")
>>> [op.insert(v) for v in (1, 2, 3, 4)]
[[], [], [(3, 6.0)], [(4, 9.0)]]
>>> SubtractOnEvict(CountWindow(range=3, slide=1), "max")
Traceback (most recent call last):
...
ValueError: algorithm 'soe' needs an invertible aggregation (sum, count, mean, std, geomean); aggregation 'max' is not invertible
"""

from __future__ import annotations

import math
from typing import Any

from ..aggregations import BUILTIN_AGGREGATIONS
from .base import SlicedAggregator, SlideOneInsert, sizeof
from .ring import fast_path_flags, grow_ring, ring_capacity

__all__ = ["SubtractOnEvict"]

_D = 1 << 2148  # scale of the exact power sums: 2**-1074 squared


class SubtractOnEvict(SlideOneInsert, SlicedAggregator):
    """Running total with ``inverse`` on eviction.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
        Must be invertible (declare ``inverse``).
    pool : ignored

    Examples
    --------
    >>> import pba_runtime as pr
    >>> pr.sliding_aggregate([2.0, 4.0, 8.0], window=pr.CountWindow(range=2, slide=1), agg="mean",
    ...                      algorithm="soe")[1].tolist()
    [3.0, 6.0]
    """

    name = "soe"
    requires = (("invertible", "an invertible aggregation (sum, count, mean, std, geomean)"),)

    def __init__(self, window, agg, *, pool: Any = None):
        super().__init__(window, agg)
        self._combine = self.agg.combine
        self._inverse = self.agg.inverse
        self._ident = self.agg.identity
        self._cap = ring_capacity(self._q + 2)
        self._vals: list = [None] * self._cap
        self._refreshes = 0
        self._exact = self.agg is BUILTIN_AGGREGATIONS["std"]
        if self._exact:  # exact power sums (see the module doc)
            self._push = self._push_exact
            self._pop = self._pop_exact
            self._query = self._query_exact
        self._fast, self._passthrough, self._lower_float = fast_path_flags(self)
        self._reset_merger()

    def _reset_merger(self) -> None:
        self._f = self._e = 0
        self._mark = 0  # checkpoint: old part = slices [f, mark), new part = [mark, e)
        self._old = self._ident  # maintained with inverses only
        self._new = self._ident  # maintained with combines only
        self._sums = [0, 0, 0, 0]  # exact std: n, D * sum x, D * sum x**2, non-finite slices

    def _append(self, p: Any) -> None:
        """Slice ``p`` into the ring (grown when full)."""
        e = self._e
        if e - self._f == self._cap:
            bufs = [self._vals]
            self._cap = grow_ring(bufs, self._f, e, self._cap)
            self._vals = bufs[0]
        self._vals[e & (self._cap - 1)] = p
        self._e = e + 1

    def _push(self, p: Any) -> None:
        self._append(p)
        self._new = self._combine(self._new, p)

    def _pop(self) -> None:
        f = self._f
        j = f & (self._cap - 1)
        old = self._vals[j]
        self._vals[j] = None
        f = self._f = f + 1
        mark = self._mark
        if f < mark:
            # one slice left in the old part: take it as it is, no rounding carried over
            self._old = self._vals[f & (self._cap - 1)] if f == mark - 1 else self._inverse(self._old, old)
            return
        if f == mark:  # the old part is empty: exactly the identity again
            self._old = self._ident
        else:  # the oldest slice was in the new part: it becomes the old part, minus that slice
            self._old = self._inverse(self._new, old) if f < self._e else self._ident
            self._new = self._ident
            self._mark = self._e
            self._refreshes += 1

    def _query(self) -> Any:
        if self._f == self._mark:
            return self._new
        if self._mark == self._e:
            return self._old
        return self._combine(self._old, self._new)

    # ------------------------------------------------------------------ exact std
    def _add_exact(self, p: Any, sign: int) -> None:
        n, mean, m2 = p
        sums = self._sums
        if not (math.isfinite(mean) and math.isfinite(m2)):
            sums[3] += sign
            sums[0] += sign * int(n)
            return
        if n == 0.0:
            return
        k = int(n)
        a, b = mean.as_integer_ratio()  # b is a power of two <= 2**1074
        c, d = m2.as_integer_ratio()
        sums[0] += sign * k
        sums[1] += sign * (k * a * (_D // b))
        sums[2] += sign * (c * (_D // d) + k * a * a * (_D // (b * b)))

    def _push_exact(self, p: Any) -> None:
        self._append(p)
        self._add_exact(p, 1)

    def _pop_exact(self) -> None:
        j = self._f & (self._cap - 1)
        p = self._vals[j]
        self._vals[j] = None
        self._f += 1
        if self._f == self._e:
            self._sums = [0, 0, 0, 0]
        else:
            self._add_exact(p, -1)

    def _query_exact(self) -> Any:
        n, s1, s2, bad = self._sums
        if n == 0:
            return self._ident
        if bad:
            return (float(n), math.nan, math.nan)
        # mean = s1 / (n D); M2 = sum x**2 - (sum x)**2 / n = (n s2 D - s1**2) / (n D**2): each rounded once
        return (float(n), s1 / (n * _D), (n * s2 * _D - s1 * s1) / (n * _D * _D))

    # ------------------------------------------------------------------ bookkeeping
    def held(self) -> list:
        """Slice partials held, oldest first."""
        mask = self._cap - 1
        return [self._vals[i & mask] for i in range(self._f, self._e)]

    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        st["soe"] = {"f": self._f, "e": self._e, "old": self._old, "mark": self._mark,
                     "new": self._new, "refreshes": self._refreshes, "vals": self.held(),
                     "sums": list(self._sums)}
        return st

    def _set_state(self, st: dict[str, Any]) -> None:
        super()._set_state(st)
        s = st["soe"]
        f, e = s["f"], s["e"]
        cap = ring_capacity(self._q + 2)
        while cap < e - f:
            cap <<= 1
        self._cap = cap
        self._vals = [None] * cap
        for k, i in enumerate(range(f, e)):
            self._vals[i & (cap - 1)] = s["vals"][k]
        self._f, self._e = f, e
        self._old, self._mark, self._new = s["old"], s["mark"], s["new"]
        self._refreshes = s["refreshes"]
        self._sums = list(s["sums"])

    def stats(self) -> dict[str, Any]:
        st = super().stats()
        st.update(held=self._e - self._f, refreshes=self._refreshes)
        return st

    def state_bytes(self) -> int:
        n = self._e - self._f
        return 8 * self._cap + (n * sizeof(self._vals[self._f & (self._cap - 1)]) if n else 0)
