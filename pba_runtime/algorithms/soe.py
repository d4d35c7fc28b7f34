"""Subtract-on-evict (SoE): a running total, ``inverse`` on eviction. O(1) worst case, invertible only.

Keeps the slice partials in a flat ring and one running aggregate: a push
combines the new slice in, a pop takes the oldest out. One combine per push,
one inverse per pop, no combine per query. It needs an invertible aggregation
(``sum``, ``count``, ``mean``, ``std``, ``geomean``) and refuses the others
(``max`` cannot be "subtracted").

Floating point: an inverse does not undo a rounding, so a float total
maintained with inverses carries the rounding of tuples already evicted, and a
NaN or an infinity that entered it never leaves (``inf - inf`` is NaN). The
built-in ``sum``, ``mean``, ``geomean`` and ``std`` therefore keep **exact**
accumulators:

* every finite float is an integer multiple of ``2**-1074``, so a sum of
  floats is held exactly as a Python integer ``S`` scaled by ``2**E``
  (``E`` only as large as the values held need: raised when a finer value
  arrives and, above 128, lowered again as soon as the totals allow); a push
  adds the slice's integer, a pop subtracts it, both exactly, and a query
  rounds ``S * 2**-E`` once (``float(S)`` is correctly rounded; beyond the
  floats, Python's ``int / int`` is). A window of zeros is exactly ``0.0``;
  no evicted value leaves a trace. Finite sums beyond the largest float round
  to an infinity (numpy's overflow depends on its summation order).
* non-finite slice partials (NaN, +inf, -inf) are counted aside, so they
  leave the window with their slice; while one is in the window the result is
  numpy's: any NaN, or +inf beside -inf, gives NaN; otherwise the infinity.
* ``mean`` and ``geomean`` sum their first field (the values, their logs)
  exactly and their counts (integers) as floats; ``std`` turns each slice
  partial ``(n, mean, M2, lo)`` (the mean is ``mean + lo``) into the exact power sums ``sum x`` and
  ``sum x**2`` of the same scale (``sum x**2`` at ``2**(2E)``), and a query
  rounds the mean and ``M2 = (n sum x**2 - (sum x)**2) / n`` once each. Any
  non-finite value in the window gives NaN, as ``np.std``.

A window's result depends only on the exact totals, never on the order of the
pushes and pops that led to them, so any split of a stream into batches, the
per-tuple fast path and a restored snapshot all give the same bits. The head
of a partial slice (``range % slide != 0``) is added to the exact totals for
the query and taken out again. Slice partials themselves are built by the
slicing layer with the aggregation's ``combine``, as for every algorithm.

Other invertible aggregations (``count``, user aggregations) keep the total in
two parts: the *old* part (slices pushed before a checkpoint), which only
shrinks, by inverses, and the *new* part (slices pushed since), which only
grows, by combines; a query combines the two. When the old part empties it is
the identity again, exactly, and the new part becomes the old one at a new
checkpoint: so a rounding never reaches back more than two window lengths,
at no extra cost (one combine per push, one inverse per pop, one combine per
query, all worst case).

Examples
--------
>>> from pba_runtime import CountWindow
>>> op = SubtractOnEvict(CountWindow(range=3, slide=1), "sum")
>>> [op.insert(v) for v in (1, 2, 3, 4)]
[[], [], [(3, 6.0)], [(4, 9.0)]]
>>> [op.insert(v) for v in (float("nan"), 5, 6, 7)]
[[(5, nan)], [(6, nan)], [(7, nan)], [(8, 18.0)]]
>>> SubtractOnEvict(CountWindow(range=3, slide=1), "max")
Traceback (most recent call last):
...
ValueError: algorithm 'soe' needs an invertible aggregation (sum, count, mean, std, geomean); aggregation 'max' is not invertible
"""

from __future__ import annotations

import math
from typing import Any

from .base import SlicedAggregator, SlideOneInsert, sizeof
from .ring import fast_path_flags, grow_ring, ring_capacity

__all__ = ["SubtractOnEvict"]

_E_TIDY = 128  # above this scale a pop tries to lower it (the integers grow with it)
_NAN = math.nan
_INF = math.inf


class SubtractOnEvict(SlideOneInsert, SlicedAggregator):
    """Running total with ``inverse`` on eviction.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
        Must be invertible (declare ``inverse``).

    Examples
    --------
    >>> import pba_runtime as pr
    >>> pr.sliding_aggregate([2.0, 4.0, 8.0], window=pr.CountWindow(range=2, slide=1), agg="mean",
    ...                      algorithm="soe")[1].tolist()
    [3.0, 6.0]
    >>> pr.sliding_aggregate([1e12, 1e-3, 1e-3, 1e-3], window=pr.CountWindow(range=2, slide=1), agg="sum",
    ...                      algorithm="soe")[1].tolist()
    [1000000000000.001, 0.002, 0.002]
    """

    name = "soe"
    requires = (("invertible", "an invertible aggregation (sum, count, mean, std, geomean)"),)

    def __init__(self, window, agg):
        super().__init__(window, agg)
        self._combine = self.agg.combine
        self._inverse = self.agg.inverse
        self._ident = self.agg.identity
        self._cap = ring_capacity(self._q + 2)
        self._vals: list = [None] * self._cap
        self._refreshes = 0
        # exact accumulators (see the module doc) where the aggregation's family declares one
        self._exact = self.agg.compiled.exact
        if self._exact == "sum":
            self._push = self._push_sum
            self._pop = self._pop_sum
            self._query = self._query_sum
            self._take = self._take_sum
        elif self._exact == "std":
            self._push = self._push_exact
            self._pop = self._pop_exact
            self._query = self._query_std
            self._take = self._take_std
        elif self._exact == "pair":  # mean, geomean
            self._push = self._push_pair
            self._pop = self._pop_pair
            self._query = self._query_pair
            self._take = self._take_pair
        if self._exact is not None and self._m:
            self._emit = self._emit_head  # windows end inside a slice (range % slide != 0)
        self._fast, self._passthrough, self._lower_float = fast_path_flags(self)
        self._reset_merger()

    def _reset_merger(self) -> None:
        self._f = self._e = 0
        self._mark = 0  # checkpoint: old part = slices [f, mark), new part = [mark, e)
        self._old = self._ident  # maintained with inverses only
        self._new = self._ident  # maintained with combines only
        self._clear_exact()

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

    def _emit_head(self, k: int, head: Any) -> Any:
        """``_emit`` of the exact accumulators: the head of slice ``k+q`` joins the exact totals, then leaves."""
        while self._front < k:
            self._pop()
            self._front += 1
        self._take(head, 1)
        try:
            return SlicedAggregator._emit(self, k, None)
        finally:
            self._take(head, -1)

    # ------------------------------------------------------------------ exact accumulators
    def _clear_exact(self) -> None:
        self._S = 0  # sum of the finite values (sum, mean, geomean: of the first field) times 2**E
        self._S2 = 0  # std: sum of their squares times 2**(2E)
        self._cnt = 0.0  # mean, geomean, std: the count field (an integer, exact as a float)
        self._nan = self._pinf = self._ninf = 0  # non-finite partials held
        self._set_scale(0)

    def _set_scale(self, E: int) -> None:
        """Scale ``2**E`` (``0 <= E <= 1074``) and its float helpers.

        A float ``x`` with ``lo <= |x| < hi`` is exactly ``int(x * scale) / 2**E``:
        ``|x| >= 2**(52 - E)`` makes ``x * 2**E >= 2**52`` a float integer, and
        ``|x| < 2**(1024 - E)`` keeps it finite. Other floats take the slow path.
        """
        self._E = E
        self._scale = 2.0 ** E if E < 1024 else _INF
        self._inv = 2.0 ** -E  # a power of two down to 2**-1074: exact
        self._lo = 2.0 ** (52 - E)
        self._hi = _INF if E == 0 else 2.0 ** (1024 - E) if E < 1024 else 0.0

    def _rescale(self, d: int) -> None:
        """Raise the scale by ``d`` bits (exact)."""
        self._S <<= d
        self._S2 <<= 2 * d
        self._set_scale(self._E + d)

    def _tidy(self) -> None:
        """Lower the scale as far as the totals allow (exact): a smaller scale means smaller, faster integers."""
        S, S2 = self._S, self._S2
        d = self._E
        if S:
            d = min(d, (S & -S).bit_length() - 1)
        if S2:
            d = min(d, ((S2 & -S2).bit_length() - 1) // 2)
        if d:
            self._S = S >> d
            self._S2 = S2 >> (2 * d)
            self._set_scale(self._E - d)

    def _scaled(self, x: float) -> int:
        """``x * 2**E`` as an exact integer (finite ``x``), the scale raised first if ``x`` needs a finer one."""
        a, b = x.as_integer_ratio()  # b: a power of two, at most 2**1074
        k = b.bit_length() - 1
        if k > self._E:
            self._rescale(k - self._E)
        return a << (self._E - k)

    def _take_sum(self, x: float, sign: int) -> None:
        """Add (``sign`` 1) or subtract (-1) the float ``x`` exactly."""
        if self._lo <= (x if x >= 0.0 else -x) < self._hi:
            i = int(x * self._scale)
        elif x - x == 0.0:  # finite: zero, too fine for the scale or huge
            if not x:
                return
            i = self._scaled(x)
        else:
            if x > 0.0:
                self._pinf += sign
            elif x < 0.0:
                self._ninf += sign
            else:
                self._nan += sign
            return
        if sign > 0:
            self._S += i
        else:
            self._S -= i

    def _take_pair(self, p: Any, sign: int) -> None:
        """mean, geomean: ``(sum, count)``."""
        self._take_sum(p[0], sign)
        self._cnt += p[1] if sign > 0 else -p[1]

    def _take_std(self, p: Any, sign: int) -> None:
        """std: ``(n, mean, M2, lo)`` as the exact ``n``, ``sum x = n (mean + lo)`` and
        ``sum x**2 = M2 + n (mean + lo)**2``."""
        n, mean, m2, lo = p
        if not n:
            return
        self._cnt += n if sign > 0 else -n
        if not (mean - mean == 0.0 and m2 - m2 == 0.0 and lo - lo == 0.0):
            self._nan += sign  # np.std of a window holding NaN or an infinity is NaN
            return
        a, b = mean.as_integer_ratio()
        c, d = m2.as_integer_ratio()
        e, g = lo.as_integer_ratio()
        ka, kc, ke = b.bit_length() - 1, d.bit_length() - 1, g.bit_length() - 1
        need = max(ka, ke, (kc + 1) // 2)  # sum x at 2**E, sum x**2 at 2**(2E)
        if need > self._E:
            self._rescale(need - self._E)
        E = self._E
        x1 = (a << (E - ka)) + (e << (E - ke))  # (mean + lo) * 2**E
        s1 = int(n) * x1
        s2 = s1 * x1 + (c << (2 * E - kc))
        if sign > 0:
            self._S += s1
            self._S2 += s2
        else:
            self._S -= s1
            self._S2 -= s2

    def _nonfinite(self) -> float:
        """numpy's sum when non-finite values are held: a NaN, or +inf beside -inf, is NaN.

        A finite part that rounds beyond the floats counts as an infinity of its sign.
        """
        if self._nan:
            return _NAN
        pos, neg = self._pinf > 0, self._ninf > 0
        if self._S.bit_length() - self._E >= 1024:
            f = self._finite()
            pos, neg = pos or f == _INF, neg or f == -_INF
        return _NAN if pos and neg else _INF if pos else -_INF

    def _push_sum(self, p: float) -> None:
        # _append and _take_sum inlined: the per-tuple hot path
        e = self._e
        if e - self._f == self._cap:
            self._append(p)
        else:
            self._vals[e & (self._cap - 1)] = p
            self._e = e + 1
        if self._lo <= (p if p >= 0.0 else -p) < self._hi:
            self._S += int(p * self._scale)
        else:  # zero, too fine for the scale, huge, or not finite
            self._take_sum(p, 1)

    def _pop_sum(self) -> None:
        f = self._f
        j = f & (self._cap - 1)
        p = self._vals[j]
        self._vals[j] = None
        f = self._f = f + 1
        if f == self._e:
            self._clear_exact()
        elif self._lo <= (p if p >= 0.0 else -p) < self._hi:
            self._S -= int(p * self._scale)
        else:
            self._take_sum(p, -1)
            if self._E > _E_TIDY:
                self._tidy()

    def _query_sum(self) -> float:
        """The sum held, rounded once (numpy's sum when a non-finite value is held)."""
        if self._nan or self._pinf or self._ninf:
            return self._nonfinite()
        try:
            # float(S) rounds once and the power of two is exact unless the result is subnormal, and
            # then |S| < 2**52 converts exactly: one rounding either way
            return self._S * self._inv
        except OverflowError:  # S is beyond the floats
            return self._finite()

    def _finite(self) -> float:
        """The finite part, rounded once; beyond the largest float it rounds to an infinity."""
        try:
            return self._S / (1 << self._E)  # Python's int / int is correctly rounded
        except OverflowError:
            return _INF if self._S > 0 else -_INF

    def _push_exact(self, p: Any) -> None:
        self._append(p)
        self._take(p, 1)

    def _pop_exact(self) -> None:
        f = self._f
        j = f & (self._cap - 1)
        p = self._vals[j]
        self._vals[j] = None
        f = self._f = f + 1
        if f == self._e:
            self._clear_exact()
            return
        self._take(p, -1)
        if self._E > _E_TIDY:
            self._tidy()

    def _push_pair(self, p: Any) -> None:
        # mean, geomean: _append and _take_pair inlined
        e = self._e
        if e - self._f == self._cap:
            self._append(p)
        else:
            self._vals[e & (self._cap - 1)] = p
            self._e = e + 1
        x = p[0]
        if self._lo <= (x if x >= 0.0 else -x) < self._hi:
            self._S += int(x * self._scale)
        else:
            self._take_sum(x, 1)
        self._cnt += p[1]

    def _pop_pair(self) -> None:
        f = self._f
        j = f & (self._cap - 1)
        p = self._vals[j]
        self._vals[j] = None
        f = self._f = f + 1
        if f == self._e:
            self._clear_exact()
            return
        x = p[0]
        if self._lo <= (x if x >= 0.0 else -x) < self._hi:
            self._S -= int(x * self._scale)
        else:
            self._take_sum(x, -1)
            if self._E > _E_TIDY:
                self._tidy()
        self._cnt -= p[1]

    def _query_pair(self) -> Any:
        return (self._query_sum(), self._cnt)

    def _query_std(self) -> Any:
        n = self._cnt
        if not n:
            return self._ident
        if self._nan:
            return (n, _NAN, _NAN, 0.0)
        k = int(n)
        S = self._S
        D = 1 << self._E
        # mean = S / (n D); M2 = sum x**2 - (sum x)**2 / n = (n S2 - S**2) / (n D**2): each rounded once
        # (a query's partial is only lowered: the mean's lo is not formed)
        try:
            m2 = (k * self._S2 - S * S) / (k * D * D)
        except OverflowError:
            m2 = _INF
        return (n, S / (k * D), m2, 0.0)

    # ------------------------------------------------------------------ bookkeeping
    def held(self) -> list:
        """Slice partials held, oldest first."""
        mask = self._cap - 1
        return [self._vals[i & mask] for i in range(self._f, self._e)]

    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        st["soe"] = {"f": self._f, "e": self._e, "old": self._old, "mark": self._mark,
                     "new": self._new, "refreshes": self._refreshes, "vals": self.held()}
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
        # the exact totals are the exact sums of the slices held: rebuilt, they are the same numbers
        self._clear_exact()
        if self._exact is not None:
            for p in s["vals"]:
                self._take(p, 1)

    def stats(self) -> dict[str, Any]:
        st = super().stats()
        st.update(held=self._e - self._f, refreshes=self._refreshes)
        return st

    def state_bytes(self) -> int:
        n = self._e - self._f
        exact = (self._S.bit_length() + self._S2.bit_length()) // 8
        return 8 * self._cap + exact + (n * sizeof(self._vals[self._f & (self._cap - 1)]) if n else 0)
