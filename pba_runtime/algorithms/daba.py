"""DABA, the De-Amortized Banker's Aggregator: worst-case O(1) FIFO aggregation.

Tangwongsan, Hirzel, Schneider, *Low-Latency Sliding-Window Aggregation in Worst-Case Constant Time*,
DEBS'17 (Fig. 8-10): two parallel queues of slice partials and partial aggregates, cut by six pointers
into sublists, and one step of an incremental reversal after every insert and evict, so an insert makes
at most 4 combines, an evict at most 3, a query 1, with no periodic rebuild (no latency spikes, unlike
Two-Stacks). :class:`DABA` says how.

Examples
--------
>>> from pba_runtime import CountWindow
>>> op = DABA(CountWindow(range=3, slide=1), "collect")
>>> [op.insert(v) for v in "abcde"][2:]
[[(3, ['a', 'b', 'c'])], [(4, ['b', 'c', 'd'])], [(5, ['c', 'd', 'e'])]]
"""

from __future__ import annotations

from typing import Any

from .base import SlideOneInsert, sizeof
from .ring import RingAggregator

__all__ = ["DABA"]


class DABA(SlideOneInsert, RingAggregator):
    """De-Amortized Banker's Aggregator over slice partials: any associative aggregation.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation

    Notes
    -----
    Two parallel queues, ``vals``
    (the slice partials) and ``aggs`` (partial aggregates), with six pointers
    ``F <= L <= R <= A <= B <= E`` cutting the window into sublists:

    * ``l_F = [F, B)``, the front, whose first part ``[F, L)`` is aggregated to the
      right end of the front: ``aggs[p] = vals[p] (+) ... (+) vals[B-1]``;
    * ``l_L = [L, R)``: ``aggs[p] = vals[p] (+) ... (+) vals[R-1]``;
    * ``l_R = [R, A)``: ``aggs[p] = vals[R] (+) ... (+) vals[p]``;
    * ``l_A = [A, B)``: ``aggs[p] = vals[p] (+) ... (+) vals[B-1]``;
    * ``l_B = [B, E)``, the back: ``aggs[p] = vals[B] (+) ... (+) vals[p]``.

    Every insert and evict ends with ``fixup``, one step of an incremental
    reversal of the back into the front (cases *singleton*, *flip*, *shift*,
    *shrink*), keeping the size invariants ``|l_L| + |l_R| + |l_A| + 1 = |l_F| - |l_B|``
    and ``|l_L| = |l_R|`` (or an empty window). So an insert makes at most 4
    combines, an evict at most 3, a query 1 (Theorem 4.3), with no periodic
    rebuild: the latency has no spikes, unlike Two-Stacks.

    The queues are two rings of Python lists (no object per element) indexed by
    absolute positions; a ring is preallocated for the window (up to 4096 slices)
    and doubles while a larger window fills, which is the only non-constant step.

    Examples
    --------
    >>> import pba_runtime as pr
    >>> pr.sliding_aggregate([3, 1, 4, 1, 5], window=pr.CountWindow(range=2, slide=1), agg="sum",
    ...                      algorithm="daba")[1].tolist()
    [4.0, 5.0, 5.0, 6.0]
    """

    name = "daba"
    _rings = (("_vals", None), ("_aggs", None))

    def __init__(self, window, agg):
        super().__init__(window, agg)
        self._flips = 0

    def _reset_merger(self) -> None:
        self._F = self._L = self._R = self._A = self._B = self._E = 0

    # ------------------------------------------------------------------ SWAG operations
    def _push(self, p: Any) -> None:
        E = self._E
        if E - self._F == self._cap:
            self._grow_rings(self._F, E)
        mask = self._cap - 1
        self._vals[E & mask] = p
        # aggs[E] = Sigma_B (+) v
        self._aggs[E & mask] = p if self._B == E else self._combine(self._aggs[(E - 1) & mask], p)
        self._E = E + 1
        self._fixup()

    def _pop(self) -> None:
        mask = self._cap - 1
        F = self._F
        self._vals[F & mask] = None
        self._aggs[F & mask] = None
        self._F = F + 1
        self._fixup()

    def _query(self) -> Any:
        mask = self._cap - 1
        F, B, E = self._F, self._B, self._E
        if F == B:
            return self._aggs[(E - 1) & mask] if B != E else self._ident
        if B == E:
            return self._aggs[F & mask]
        return self._combine(self._aggs[F & mask], self._aggs[(E - 1) & mask])

    def _fixup(self) -> None:
        F, B = self._F, self._B
        if F == B:  # singleton (or empty): l_F is empty, l_B holds at most one value
            self._L = self._R = self._A = self._B = self._E
            return
        L = self._L
        if L == B:  # flip: l_F becomes l_L, l_B becomes l_R
            self._flips += 1
            L = self._L = F
            self._A = self._B = self._E
            B = self._E
        R, A = self._R, self._A
        if L == R:  # shift: l_L and l_R are empty, l_A loses its first element to the front part
            self._A = A + 1
            self._R = R + 1
            self._L = L + 1
            return
        # shrink: l_L and l_R lose one element each
        aggs, combine, mask = self._aggs, self._combine, self._cap - 1
        acc = combine(aggs[L & mask], aggs[(A - 1) & mask])  # Sigma_L (+) Sigma_R
        if A != B:
            sa = aggs[A & mask]  # Sigma_A
            aggs[L & mask] = combine(acc, sa)
            aggs[(A - 1) & mask] = combine(self._vals[(A - 1) & mask], sa)
        else:
            aggs[L & mask] = acc
            aggs[(A - 1) & mask] = self._vals[(A - 1) & mask]
        self._L = L + 1
        self._A = A - 1

    # ------------------------------------------------------------------ checks and bookkeeping
    def check_invariants(self) -> None:
        """Assert the pointer order, the size invariants and (for value-comparable partials) the aggs invariants."""
        F, L, R, A, B, E = self._F, self._L, self._R, self._A, self._B, self._E
        assert F <= L <= R <= A <= B <= E, (F, L, R, A, B, E)
        assert E - F <= self._cap
        nF, nB = B - F, E - B
        if nF or nB:
            assert (R - L) + (A - R) + (B - A) + 1 == nF - nB, ("size invariant", F, L, R, A, B, E)
            assert R - L == A - R, ("|l_L| == |l_R|", F, L, R, A, B, E)
        vals = self._ring_items(self._vals, F, E)
        aggs = self._ring_items(self._aggs, F, E)
        combine = self._combine

        def fold(lo: int, hi: int) -> Any:  # vals[lo] (+) ... (+) vals[hi], absolute, inclusive
            acc = vals[lo - F]
            for i in range(lo + 1, hi + 1):
                acc = combine(acc, vals[i - F])
            return acc

        for p in range(F, L):
            assert aggs[p - F] == fold(p, B - 1), ("l_F front", p)
        for p in range(L, R):
            assert aggs[p - F] == fold(p, R - 1), ("l_L", p)
        for p in range(R, A):
            assert aggs[p - F] == fold(R, p), ("l_R", p)
        for p in range(A, B):
            assert aggs[p - F] == fold(p, B - 1), ("l_A", p)
        for p in range(B, E):
            assert aggs[p - F] == fold(B, p), ("l_B", p)

    def held(self) -> list:
        """Slice partials held, oldest first."""
        return self._ring_items(self._vals, self._F, self._E)

    def _get_state(self) -> dict[str, Any]:
        st = super()._get_state()
        st["daba"] = {
            "ptr": (self._F, self._L, self._R, self._A, self._B, self._E),
            "vals": self.held(),
            "aggs": self._ring_items(self._aggs, self._F, self._E),
            "flips": self._flips,
        }
        return st

    def _set_state(self, st: dict[str, Any]) -> None:
        super()._set_state(st)
        d = st["daba"]
        F, L, R, A, B, E = d["ptr"]
        self._new_rings(E - F)
        self._put_items(self._vals, F, d["vals"])
        self._put_items(self._aggs, F, d["aggs"])
        self._F, self._L, self._R, self._A, self._B, self._E = F, L, R, A, B, E
        self._flips = d["flips"]

    def stats(self) -> dict[str, Any]:
        st = super().stats()
        st.update(flips=self._flips, held=self._E - self._F, capacity=self._cap)
        return st

    def state_bytes(self) -> int:
        n = self._E - self._F
        return 16 * self._cap + (2 * n * sizeof(self._vals[self._F & (self._cap - 1)]) if n else 0)
