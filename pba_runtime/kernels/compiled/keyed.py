"""Window output of many keys, several windows and several built-in aggregations of one value column, one pass.

Keys are laid out one after another (key ``k``'s rows are ``bounds[k] : bounds[k + 1]``). Per key, the
windows of one slide share one slicing: slices of the gcd grid ``g`` of their ranges, slide (and, for time
windows, offsets), each slice's partials lifted once per family (``max``/``argmax``; ``min``/``argmin``;
``count``/``sum``/``mean``/``std``/``var`` share ``(n, sum, mean, M2, lo)``, the last three Chan et al.'s
partial with a compensated mean, :func:`.std._chan`), and every window of that slide answered from the same
slices. A window of ``q`` slices is the combine of a suffix of one block of ``q`` slices and a prefix of the
next (van Herk / Gil-Werman): per window range, every slice is read twice, whatever ``q``. Count windows
whose grid is one value (``g == 1``: slide 1, say) read the values themselves, with no slice array; other
slices are lifted a segment of block starts at a time, so the scratch is bounded whatever a key's length.

Time windows are cut per key into *episodes* at gaps of at least ``Q`` slices (``Q`` the group's longest
window in slices): no window holds tuples of two episodes, so no slice of a gap is ever visited. A time
window is written only if it holds a tuple, as the spec says; :func:`time_window_counts` counts them first
(so the caller can place every key's results before the fill), and the fill checks that it wrote as many.

A partial is a tuple ``(n, rows, sum, mean, M2, lo, max, maxpos, min, minpos)``: ``n`` the values (rows in
``missing="propagate"``, non-NaN rows with ``skip``), ``rows`` the tuples, ``maxpos``/``minpos`` a
position (count windows) or timestamp (time windows), ``EMPTY`` for none. The plain reference of these
kernels is :func:`pba_runtime.engines.keyed.window_results_reference`; the tests check fast == slow.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..lean_load import lean_loads
from .argmax import argmax_from_values, pick_max_at
from .common import _JIT, ADD, MAX, MIN, SUM_ONE_LOOP_MIN, c_max, c_min
from .std import _chan, std_from_values
from .ufuncs import mean_from_values, merge_scalar

# Codes of KEYED_AGGS (pba_runtime.engines.keyed), in order: codes[A] is the row of F (float results) or FI
# (int results) the aggregation A goes to, -1 when not asked.
A_MAX, A_MIN, A_SUM, A_COUNT, A_MEAN, A_STD, A_VAR, A_ARGMAX, A_ARGMIN = range(9)
EMPTY = np.int64(-(2**63))  # no position: an empty partial of argmax/argmin
# fl: what the partials carry, a tuple of flags (sum, chan, max, maxpos, min, minpos, skip)
F_SUM, F_CHAN, F_MAX, F_MAXP, F_MIN, F_MINP, F_SKIP = range(7)


@njit(inline="always", cache=True)
def _identity():
    return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -np.inf, EMPTY, np.inf, EMPTY)


@njit(inline="always", cache=True)
def _pick_min(av, ap, bv, bp):
    """The smaller of two (value, position) partials, NaN smallest (as ``np.argmin``), the older on ties."""
    if bp == EMPTY:
        return av, ap
    if ap == EMPTY:
        return bv, bp
    if bv < av or (bv != bv and av == av):
        return bv, bp
    return av, ap


@njit(inline="always", cache=True)
def _comb(a, b, fl):
    """``a (+) b``, ``a`` the older."""
    n = a[0] + b[0]
    rows = a[1] + b[1]
    sm = a[2] + b[2] if fl[F_SUM] else 0.0
    cm = a[3]
    cM = a[4]
    cl = a[5]
    if fl[F_CHAN]:
        _n, cm, cM, cl = _chan(a[0], a[3], a[4], a[5], b[0], b[3], b[4], b[5])
    mx = a[6]
    mxp = a[7]
    if fl[F_MAXP]:
        mx, mxp = pick_max_at(a[6], a[7], b[6], b[7], EMPTY)
    elif fl[F_MAX]:
        mx = c_max(a[6], b[6])
    mn = a[8]
    mnp = a[9]
    if fl[F_MINP]:
        mn, mnp = _pick_min(a[8], a[9], b[8], b[9])
    elif fl[F_MIN]:
        mn = c_min(a[8], b[8])
    return (n, rows, sm, cm, cM, cl, mx, mxp, mn, mnp)


@njit(inline="always", cache=True)
def _lift(v, pos, fl):
    """One tuple's partial; with ``skip`` a NaN is a tuple but no value."""
    if fl[F_SKIP] and v != v:
        return (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, -np.inf, EMPTY, np.inf, EMPTY)
    return (1.0, 1.0, v, v, 0.0, 0.0, v, pos, v, pos)


@njit(inline="always", cache=True)
def _get(P, PI, j):
    return (P[0, j], P[1, j], P[2, j], P[3, j], P[4, j], P[5, j], P[6, j], PI[0, j], P[7, j], PI[1, j])


@njit(inline="always", cache=True)
def _put(P, PI, j, t):
    P[0, j] = t[0]
    P[1, j] = t[1]
    P[2, j] = t[2]
    P[3, j] = t[3]
    P[4, j] = t[4]
    P[5, j] = t[5]
    P[6, j] = t[6]
    PI[0, j] = t[7]
    P[7, j] = t[8]
    PI[1, j] = t[9]


@njit(inline="always", cache=True)
def _slice(P, PI, V, a, j, direct, fl):
    """Slice ``j``'s partial: from the slice array, or (``direct``: slices of one value) lifted from
    ``V[a + j]``, its position ``j``."""
    if direct:
        return _lift(V[a + j], np.int64(j), fl)
    return _get(P, PI, j)


@njit(inline="always", cache=True)
def _emit(t, row, key, end, F, FI, ends, keys, codes, skip, min_periods):
    """Lower partial ``t`` into result row ``row``; with ``skip``, a float result of fewer than
    ``min_periods`` values (``max``/``min``/``argmax``/``argmin``: of none) is NaN (0 for an int)."""
    n = t[0]
    keys[row] = key
    ends[row] = end
    short = skip and n < min_periods
    none = n == 0.0
    c = codes[A_MAX]
    if c >= 0:
        F[c, row] = np.nan if (short or none) else t[6]
    c = codes[A_MIN]
    if c >= 0:
        F[c, row] = np.nan if (short or none) else t[8]
    c = codes[A_SUM]
    if c >= 0:
        F[c, row] = np.nan if short else t[2]
    c = codes[A_MEAN]
    if c >= 0:
        F[c, row] = np.nan if (short or none) else t[2] / n
    var = np.nan
    if n > 1.0 and t[3] - t[3] == 0.0:
        var = t[4] / (n - 1.0)
    c = codes[A_VAR]
    if c >= 0:
        F[c, row] = np.nan if short else var
    c = codes[A_STD]
    if c >= 0:
        F[c, row] = np.nan if short else np.sqrt(var)
    c = codes[A_COUNT]
    if c >= 0:
        FI[c, row] = np.int64(n)
    c = codes[A_ARGMAX]
    if c >= 0:
        FI[c, row] = 0 if (short or t[7] == EMPTY) else t[7]
    c = codes[A_ARGMIN]
    if c >= 0:
        FI[c, row] = 0 if (short or t[9] == EMPTY) else t[9]


@njit(inline="always", cache=True)
def _cdiv(x, y):
    """``ceil(x / y)`` for ``y > 0``, ``x`` of either sign."""
    return -((-x) // y)


@njit(inline="always", cache=True)
def _slide(P, PI, V, a, direct, off, fl, L, LI, q, p, x_first, w0, w1, end0, step, is_time, row, key, F, FI, ends,
           keys, codes, min_periods):
    """Windows ``[w0, w1)`` of ``q`` slices, ``p`` apart, window ``w`` starting at slice ``x_first + w p``
    (``P``'s column ``x - off`` holds slice ``x``), written from row ``row`` (time windows: only those holding
    a tuple); returns the next row. ``w0`` is the first window of its block.

    Blocks of ``q`` slices from ``x_first``: a window starting at offset ``u`` of a block is the block's
    suffix from ``u`` (``L``, built from the block's end) combined with the next block's first ``u``
    slices (grown as ``u`` grows)."""
    skip = fl[F_SKIP]
    w = w0
    while w < w1:
        b = (w * p) // q
        bs = x_first + b * q - off
        u_min = w * p - b * q
        acc = _slice(P, PI, V, a, bs + q - 1, direct, fl)
        _put(L, LI, q - 1, acc)
        for u in range(q - 2, u_min - 1, -1):
            acc = _comb(_slice(P, PI, V, a, bs + u, direct, fl), acc, fl)
            _put(L, LI, u, acc)
        pre = _identity()
        plen = 0
        lim = (b + 1) * q
        while w < w1 and w * p < lim:
            u = w * p - b * q
            while plen < u:
                pre = _comb(pre, _slice(P, PI, V, a, bs + q + plen, direct, fl), fl)
                plen += 1
            res = _get(L, LI, u)
            if u > 0:
                res = _comb(res, pre, fl)
            if not is_time or res[1] > 0.0:
                _emit(res, row, key, end0 + w * step, F, FI, ends, keys, codes, skip, min_periods)
                row += 1
            w += 1
    return row


@njit(inline="always", cache=True)
def _segment_windows(S, C, x_first, q, p, nk):
    """The windows ``[w0, w1)`` whose blocks start in slices ``[S, S + C)``."""
    b0 = max(0, _cdiv(S - x_first, q))
    b1 = _cdiv(S + C - x_first, q)
    if b1 <= b0:
        return 0, 0
    return min(nk, _cdiv(b0 * q, p)), min(nk, _cdiv(b1 * q, p))


@njit(inline="always", cache=True)
def _flags(codes, skip):
    return (codes[A_SUM] >= 0 or codes[A_MEAN] >= 0,
            codes[A_STD] >= 0 or codes[A_VAR] >= 0,
            codes[A_MAX] >= 0 or codes[A_ARGMAX] >= 0,
            codes[A_ARGMAX] >= 0,
            codes[A_MIN] >= 0 or codes[A_ARGMIN] >= 0,
            codes[A_ARGMIN] >= 0,
            skip)


@njit(**_JIT)
def count_group(V, bounds, k0, k1, g, wr, ws, wq, wp, wstart, F, FI, ends, keys, codes, skip, min_periods, seg, bad):
    """Count windows of one slide over keys ``[k0, k1)``: window ``i`` (range ``wr[i]``, slide ``ws[i]``;
    ``wq[i]``, ``wp[i]`` in slices of ``g`` values) writes key ``k``'s rows from ``wstart[i, k]``.

    ``g == 1``: the slices are the values, read from ``V``. Else the slices are lifted ``seg`` block starts
    at a time (with the ``2 Q`` after them that those blocks read): memory of ``seg + 2 Q`` slices
    whatever the key's length. ``bad[0]`` is set when a key's rows do not end at ``wstart[i, k + 1]``."""
    fl = _flags(codes, skip)
    direct = g == 1
    nw = wq.shape[0]
    Q = 1
    for i in range(nw):
        Q = max(Q, wq[i])
    L = np.empty((8, Q))
    LI = np.empty((2, Q), dtype=np.int64)
    cap = 0 if direct else seg + 2 * Q
    P = np.empty((8, cap))
    PI = np.empty((2, cap), dtype=np.int64)
    rows = np.empty(nw, dtype=np.int64)
    nks = np.empty(nw, dtype=np.int64)
    for k in range(k0, k1):
        a = bounds[k]
        N = bounds[k + 1] - a
        need = 0  # slices the windows read
        for i in range(nw):
            rows[i] = wstart[i, k]
            nks[i] = (N - wr[i]) // ws[i] + 1 if N >= wr[i] else 0
            if nks[i] > 0:
                need = max(need, (nks[i] - 1) * wp[i] + wq[i])
        if direct:
            for i in range(nw):
                if nks[i] > 0:
                    rows[i] = _slide(P, PI, V, a, True, 0, fl, L, LI, wq[i], wp[i], 0, 0, nks[i], wr[i], ws[i],
                                     False, rows[i], k, F, FI, ends, keys, codes, min_periods)
        else:
            S = 0
            while S < need:
                E = min(need, S + seg + 2 * Q)
                for j in range(S, E):
                    acc = _identity()
                    for t in range(j * g, (j + 1) * g):
                        acc = _comb(acc, _lift(V[a + t], np.int64(t), fl), fl)
                    _put(P, PI, j - S, acc)
                for i in range(nw):
                    w0, w1 = _segment_windows(S, seg, 0, wq[i], wp[i], nks[i])
                    if w1 > w0:
                        rows[i] = _slide(P, PI, V, a, False, S, fl, L, LI, wq[i], wp[i], 0, w0, w1, wr[i], ws[i],
                                         False, rows[i], k, F, FI, ends, keys, codes, min_periods)
                S += seg
        for i in range(nw):
            if rows[i] != wstart[i, k + 1]:
                bad[0] = 1


@njit(**_JIT)
def time_group(V, T, bounds, k0, k1, g, base, ws, wq, wp, wc, wstart, F, FI, ends, keys, codes, skip, min_periods,
               seg, bad):
    """Time windows of one slide over keys ``[k0, k1)``: slices ``[base + j g, base + (j + 1) g)``; window
    ``i`` (slide ``ws[i]``) is ``wq[i]`` slices, ``wp[i]`` apart, window ``k`` starting at slice
    ``k wp[i] + wc[i]``; key ``k``'s rows from ``wstart[i, k]``, only windows holding a tuple.

    Per episode (tuples less than ``Q`` slices apart), the slices are folded ``seg`` block starts at a time
    (with the ``2 Q`` after them). ``bad[0]`` is set when a key's rows do not end at ``wstart[i, k + 1]``."""
    fl = _flags(codes, skip)
    nw = wq.shape[0]
    Q = 1
    for i in range(nw):
        Q = max(Q, wq[i])
    L = np.empty((8, Q))
    LI = np.empty((2, Q), dtype=np.int64)
    cap = seg + 2 * Q
    P = np.empty((8, cap))
    PI = np.empty((2, cap), dtype=np.int64)
    ident = _identity()
    rows = np.empty(nw, dtype=np.int64)
    xf = np.empty(nw, dtype=np.int64)
    nks = np.empty(nw, dtype=np.int64)
    e0 = np.empty(nw, dtype=np.int64)
    for k in range(k0, k1):
        a = bounds[k]
        b = bounds[k + 1]
        for i in range(nw):
            rows[i] = wstart[i, k]
        i0 = a
        while i0 < b:
            # an episode: tuples [i0, i1), consecutive slices less than Q apart
            G_first = (T[i0] - base) // g
            G_last = G_first
            i1 = i0 + 1
            while i1 < b:
                G = (T[i1] - base) // g
                if G - G_last >= Q:
                    break
                G_last = G
                i1 += 1
            S_lo = G_first - Q + 1
            nsl = G_last - S_lo + Q  # slices [S_lo, G_last + Q) relative to S_lo
            for i in range(nw):
                q = wq[i]
                p = wp[i]
                c = wc[i]
                k_lo = _cdiv(G_first - q + 1 - c, p)  # the first window holding slice G_first
                k_hi = (G_last - c) // p
                nks[i] = max(0, k_hi - k_lo + 1)
                xf[i] = k_lo * p + c - S_lo
                e0[i] = base + g * (k_lo * p + c + q)
            tp = i0
            S = 0
            while S < nsl:
                E = min(nsl, S + seg + 2 * Q)
                for j in range(E - S):
                    _put(P, PI, j, ident)
                while tp < i1 and (T[tp] - base) // g - S_lo < S:
                    tp += 1
                t = tp
                while t < i1:
                    j = (T[t] - base) // g - S_lo
                    if j >= E:
                        break
                    _put(P, PI, j - S, _comb(_get(P, PI, j - S), _lift(V[t], T[t], fl), fl))
                    t += 1
                for i in range(nw):
                    w0, w1 = _segment_windows(S, seg, xf[i], wq[i], wp[i], nks[i])
                    if w1 > w0:
                        rows[i] = _slide(P, PI, V, 0, False, S, fl, L, LI, wq[i], wp[i], xf[i], w0, w1, e0[i], ws[i],
                                         True, rows[i], k, F, FI, ends, keys, codes, min_periods)
                S += seg
            i0 = i1
        for i in range(nw):
            if rows[i] != wstart[i, k + 1]:
                bad[0] = 1


@njit(**_JIT)
def time_window_counts(T, bounds, k0, k1, s, off, r, out):
    """``out[k]``: the windows ``[k s + off, k s + off + r)`` holding one of key ``k``'s timestamps (sorted),
    for keys ``[k0, k1)``."""
    for k in range(k0, k1):
        n = 0
        last = np.int64(0)
        have = False
        for t in range(bounds[k], bounds[k + 1]):
            x = T[t] - off
            kmin = (x - r) // s + 1
            kmax = x // s
            if have and kmin <= last:
                kmin = last + 1
            if kmax >= kmin:
                n += kmax - kmin + 1
            last = kmax
            have = True
        out[k] = n


@njit(**_JIT)
def count_slide1_values(V, bounds, k0, k1, q, wstart, aggs, rows, F, FI, ends, keys):
    """One count window of ``q > 1`` values, slide 1, over keys ``[k0, k1)`` by the single-stream kernels
    ``sliding_aggregate`` runs (``missing="propagate"``): per key, aggregation ``aggs[j]`` (a code ``A_*``:
    max, min, sum, mean, std, argmax or count) into row ``rows[j]`` of ``F`` (float) or ``FI`` (int), key
    ``k``'s windows from ``wstart[k]``, with their ``ends`` (``q``, ``q + 1``, ..., the key's length) and
    ``keys``.

    Each key gets what :func:`pba_runtime.kernels.merge_range` (``max``/``min``/``sum`` over the values,
    which are their partials) or :func:`pba_runtime.kernels.values_range` (``mean``, ``std``, ``argmax``
    from position 0, ``count``) gives on its values as one batch: the same kernel, scratch of the same
    sizes, rows of ``q`` from the key's first window, so the same bits. The scratch is this call's."""
    one_loop = q >= SUM_ONE_LOOP_MIN  # the lcs of two rows, no csa (_sum_rows), as merge_range/values_range
    lcs = np.empty(2 * q)
    csa = np.empty(q)
    lcs2 = np.empty((2, q))
    csa2 = np.empty((2, q))
    lcp = np.empty(q, dtype=np.int64)
    csp = np.empty(q, dtype=np.int64)
    lcv = np.empty(q)
    csv = np.empty(q)
    none = np.empty(0, dtype=np.int64)
    for k in range(k0, k1):
        a = bounds[k]
        N = bounds[k + 1] - a
        if N < q:
            continue
        n = N - q + 1
        o0 = wstart[k]
        x = V[a : a + N]
        e = ends[o0 : o0 + n]
        kk = keys[o0 : o0 + n]
        for t in range(n):
            e[t] = q + t
            kk[t] = k
        for j in range(aggs.shape[0]):
            A = aggs[j]
            r = rows[j]
            if A == A_MAX or A == A_MIN:
                merge_scalar(x, q, 0, n, F[r, o0 : o0 + n], none, 0, 1, MAX if A == A_MAX else MIN, lcs[:q], csa)
            elif A == A_SUM:
                if one_loop:
                    merge_scalar(x, q, 0, n, F[r, o0 : o0 + n], none, 0, 1, ADD, lcs, csa[:1])
                else:
                    merge_scalar(x, q, 0, n, F[r, o0 : o0 + n], none, 0, 1, ADD, lcs[:q], csa)
            elif A == A_MEAN:
                if one_loop:
                    mean_from_values(x, q, 0, n, F[r, o0 : o0 + n], none, 0, 1, lcs, csa[:1])
                else:
                    mean_from_values(x, q, 0, n, F[r, o0 : o0 + n], none, 0, 1, lcs[:q], csa)
            elif A == A_STD:
                std_from_values(x, q, 0, n, F[r, o0 : o0 + n], none, 0, 1, lcs2, csa2)
            elif A == A_ARGMAX:
                argmax_from_values(x, q, 0, n, FI[r, o0 : o0 + n], none, 0, 1, lcp, lcv, csp, csv, 0)
            elif A == A_COUNT:
                c = FI[r, o0 : o0 + n]
                for t in range(n):
                    c[t] = q


# Loading from the disk cache without numba's compiler set-up (lean_load.py).
lean_loads(globals())
