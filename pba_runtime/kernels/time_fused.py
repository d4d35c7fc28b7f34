"""The fused time-window batch: slicing, gaps, slice folds, PBA's lcs/csa and every window, in one compiled call.

The per-tuple slicing layer (:meth:`pba_runtime.algorithms.base.SlicedAggregator._step_time` and
``_advance``) run as one loop in machine code over a batch of ``(timestamp, partial)``: each
tuple folds into its slice (its head, units ``< m``, or the rest), a tuple in a later slice
closes the slices up to it, and a tuple whose first window begins after the last tuple's slice
ends the *episode* (every window holding an older tuple is emitted, then the slicing restarts).
A closed slice is pushed into PBA's rows of ``q`` slices, aligned at the episode's first window:
the row's csa grows as it goes, and when the row is full its lcs is built (from its end) into a
buffer of ``q`` partials. Windows are emitted in lockstep with the pushes (window ``k`` when the
slices ``k .. k+q-1`` are pushed and, for ``r % s != 0``, a tuple at or past its end has come),
so a window is ``lcs[j] (+) csa`` (``lcs[0]`` for column 0), ``(+) head`` of slice ``k+q``: the
csa is one running partial, and the scratch (``2q`` slices and ``q`` lcs) stays in cache.

Between batches the operator keeps its usual state (the slices ``[next_k, S)`` of the pending
windows, the open slice's head and rest, ``S``, ``next_k``); a batch re-aligns its rows at its
first pending window, so any split gives the per-tuple windows, with ``max``/``min``/``count``/
``argmax`` bit for bit and float sums to rounding (the spec's rule). The end-of-stream flush is
the same call with no tuple: the open windows are drained in the loop.

A call stops early, between two tuples, when fewer than ``q + 2`` result rows are left (one tuple
emits at most ``q + 1`` windows); the caller gives it a larger result array and calls again.

Partials are rows of ``K`` floats. Layouts: ``"columns"`` (column ``k`` combined by code
``ops[k]`` of :mod:`.compiled`; a scalar aggregation is one column), ``"argmax"`` and ``"std"``
(Chan et al.'s merge, as ``aggregations._chan``). The slow reference is the operator's episode
path (``PBA._episode``, numpy or compiled merge); ``tests/test_time_fused.py`` checks fast == slow.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .compiled import _JIT, ADD, FMAX, MAX, MIN, MUL, _argmax, _chan, c_fmax, c_fmin, c_max, c_min

__all__ = ["run_columns", "run_argmax", "run_std", "STATE", "HAVE", "SLICE", "NEXT_K", "BASE", "WINDOWS",
           "NEXT_TUPLE", "HIST"]

# the int64 state vector a call reads and writes
HAVE, SLICE, NEXT_K, BASE, COL, WINDOWS, NEXT_TUPLE, HIST = range(8)
STATE = 8


@njit(inline="always", cache=True)
def _op(code, a, b):
    if code == ADD:
        return a + b
    if code == MAX:
        return c_max(a, b)
    if code == MIN:
        return c_min(a, b)
    if code == MUL:
        return a * b
    if code == FMAX:
        return c_fmax(a, b)
    return c_fmin(a, b)


@njit(inline="always", cache=True)
def comb_columns(D, di, A, ai, B, bi, ops):
    """``D[di] = A[ai] (+) B[bi]``, column by column (``D`` may be ``A`` or ``B``: elementwise)."""
    for k in range(D.shape[1]):
        D[di, k] = _op(ops[k], A[ai, k], B[bi, k])


@njit(inline="always", cache=True)
def comb_argmax(D, di, A, ai, B, bi, ops):
    v, p = _argmax(A[ai, 0], A[ai, 1], B[bi, 0], B[bi, 1])
    D[di, 0] = v
    D[di, 1] = p


@njit(inline="always", cache=True)
def comb_std(D, di, A, ai, B, bi, ops):
    n, mu, m2 = _chan(A[ai, 0], A[ai, 1], A[ai, 2], B[bi, 0], B[bi, 1], B[bi, 2])
    D[di, 0] = n
    D[di, 1] = mu
    D[di, 2] = m2


@njit(inline="always", cache=True)
def _copy(D, di, A, ai):
    for k in range(D.shape[1]):
        D[di, k] = A[ai, k]


@njit(inline="always", cache=True)
def _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, csa, ring, lcs, out, ends, hist_out,
           comb, ops):
    """The loop (see the module doc). ``st``: the state vector (``HAVE``, ``SLICE``, ...); ``cur``/``head``:
    the open slice's rest and head (one row each); ``csa``: the current row's running csa; ``ring``:
    the last ``2q`` slices pushed (slice ``x`` at ``(x - base) % 2q``); ``lcs``: the last full row's lcs.
    ``hist`` (rows: slices ``next_k ..``) is pushed first when ``st[NEXT_TUPLE] == 0``."""
    cap = out.shape[0]
    have = st[HAVE] != 0
    S = st[SLICE]
    next_k = st[NEXT_K]
    base = st[BASE]
    col = st[COL]
    w = 0
    q2 = 2 * q
    n = ts.shape[0]
    i = st[NEXT_TUPLE]
    if i == 0 and have:  # a new batch: rows re-aligned at the first pending window
        base = next_k
        col = 0
        for j in range(hist.shape[0]):
            x = base + j
            # push hist[j]: no window can complete (the pending ones need the open slice)
            ri = (x - base) % q2
            _copy(ring, ri, hist, j)
            if col == 0:
                _copy(csa, 0, hist, j)
            else:
                comb(csa, 0, csa, 0, hist, j, ops)
            col += 1
            if col == q:
                r0 = ri - (q - 1)
                _copy(lcs, q - 1, ring, ri)
                for jj in range(q - 2, -1, -1):
                    comb(lcs, jj, ring, r0 + jj, lcs, jj + 1, ops)
                col = 0
    lo = S * s  # the open slice is [lo, lo + s) (relative to off)
    hi = lo + s
    while True:
        if i < n:
            if cap - w < q + 2:
                break
            t = ts[i] - off
            advance = False
            fresh = False
            if not have:
                fresh = True
            elif t >= hi:
                advance = True
                fresh = t >= lo + r
        elif flush and have:
            if cap - w < q + 2:
                break
            advance = True
            fresh = True
            t = 0
        else:
            break
        if advance:
            # close slices from S on, emitting windows as they complete: up to t's slice, or (fresh:
            # the episode ends) until every window holding the last tuple is out
            last = S
            g = t // s
            while True:
                if m and next_k == S - q:
                    wi = w
                    if col == 0:
                        _copy(out, wi, lcs, 0)
                    else:
                        comb(out, wi, lcs, col, csa, 0, ops)
                    comb(out, wi, out, wi, head, 0, ops)
                    ends[wi] = next_k * s + off + r
                    w += 1
                    next_k += 1
                # push the slice S: head (+) rest
                ri = (S - base) % q2
                if m:
                    comb(ring, ri, head, 0, cur, 0, ops)
                else:
                    _copy(ring, ri, cur, 0)
                _copy(head, 0, ident, 0)
                _copy(cur, 0, ident, 0)
                if col == 0:
                    _copy(csa, 0, ring, ri)
                else:
                    comb(csa, 0, csa, 0, ring, ri, ops)
                col += 1
                if col == q:
                    r0 = ri - (q - 1)
                    _copy(lcs, q - 1, ring, ri)
                    for jj in range(q - 2, -1, -1):
                        comb(lcs, jj, ring, r0 + jj, lcs, jj + 1, ops)
                    col = 0
                S += 1
                if not m and next_k == S - q:
                    wi = w
                    if col == 0:
                        _copy(out, wi, lcs, 0)
                    else:
                        comb(out, wi, lcs, col, csa, 0, ops)
                    ends[wi] = next_k * s + off + r
                    w += 1
                    next_k += 1
                if fresh:
                    if next_k > last:
                        have = False
                        break
                elif S == g:
                    break
        if i >= n:  # the flush's drain
            break
        if not have:  # the first tuple of an episode: its first window starts the rows
            g = t // s
            S = g
            next_k = (t - r) // s + 1
            base = next_k
            col = 0
            _copy(head, 0, ident, 0)
            _copy(cur, 0, ident, 0)
            for x in range(next_k, g):  # slices before the tuple's: empty (at most q of them)
                ri = (x - base) % q2
                _copy(ring, ri, ident, 0)
                if col == 0:
                    _copy(csa, 0, ident, 0)
                else:
                    comb(csa, 0, csa, 0, ident, 0, ops)
                col += 1
                if col == q:
                    _copy(lcs, q - 1, ring, ri)
                    for jj in range(q - 2, -1, -1):
                        comb(lcs, jj, ring, ri - (q - 1) + jj, lcs, jj + 1, ops)
                    col = 0
            have = True
        lo = S * s
        hi = lo + s
        unit = t - lo
        if m:
            if next_k == S - q and unit >= m:  # window S-q ends inside slice S, at or before t
                wi = w
                if col == 0:
                    _copy(out, wi, lcs, 0)
                else:
                    comb(out, wi, lcs, col, csa, 0, ops)
                comb(out, wi, out, wi, head, 0, ops)
                ends[wi] = next_k * s + off + r
                w += 1
                next_k += 1
            if unit < m:
                comb(head, 0, head, 0, P, i, ops)
            else:
                comb(cur, 0, cur, 0, P, i, ops)
        else:
            comb(cur, 0, cur, 0, P, i, ops)
        i += 1
    st[HAVE] = 1 if have else 0
    st[SLICE] = S
    st[NEXT_K] = next_k
    st[BASE] = base
    st[COL] = col
    st[WINDOWS] = w
    st[NEXT_TUPLE] = i
    L = 0
    if have:  # the slices of the pending windows, [next_k, S), for the operator's state
        for x in range(next_k, S):
            _copy(hist_out, L, ring, (x - base) % q2)
            L += 1
    st[HIST] = L


@njit(**_JIT)
def run_columns(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, csa, ring, lcs, out, ends, hist_out, ops):
    """Column partials (column ``k`` combined by code ``ops[k]``): see :func:`_drive`."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, csa, ring, lcs, out, ends, hist_out,
           comb_columns, ops)


@njit(**_JIT)
def run_argmax(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, csa, ring, lcs, out, ends, hist_out, ops):
    """``argmax`` partials ``(value, position)``: see :func:`_drive`."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, csa, ring, lcs, out, ends, hist_out,
           comb_argmax, ops)


@njit(**_JIT)
def run_std(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, csa, ring, lcs, out, ends, hist_out, ops):
    """``std`` partials ``(n, mean, M2)``, merged by Chan et al.'s update: see :func:`_drive`."""
    _drive(P, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, csa, ring, lcs, out, ends, hist_out,
           comb_std, ops)
