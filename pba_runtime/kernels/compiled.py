"""The compiled window merge: PBA over a batch of slice partials in one pass per chunk, GIL released.

(Over 500 lines: one numba module so that every merge shares the inlined combines and
one on-disk cache; the layouts, scalar, columns, std, argmax and the slide-1 merges from
values, differ only in how a partial is loaded, combined and stored.)

Numba (``nogil=True``, cached on disk beside this file) compiles each function once per
partial layout; a second process loads the machine code from the cache. The slow
reference these must equal is :func:`pba_runtime.merge.merge_rows` (numpy) and, for every
aggregation, its Python ``combine``.

Every merge here takes the windows ``[a0, a1)`` of a batch (``a0`` a multiple of ``q``,
so a caller splits the windows between threads at row boundaries) over ``X``, the slice
partials, cut into rows of ``q``: for each row ``c`` it builds the row's lcs into a
scratch buffer of ``q`` partials (cache-sized for the ranges that matter), then walks the
next row once, growing its csa and writing ``lcs[j] (+) csa[j-1]`` for each window that
starts at column ``j`` (column 0 is the whole row, the lcs alone). Two passes over the
slices and one over the windows: the arithmetic per window is the numpy reference's,
element for element.

The combines are the built-ins' as numpy computes them: ``max``/``min`` propagate NaN as
``np.maximum``/``np.minimum``; ``std`` uses power sums shifted by a slice inside each part
(the last non-empty slice of the lcs, the first of the csa) merged by Chan et al.'s update,
as stable as the numpy reference's shifted prefix sums; ``argmax`` keeps the oldest of
equal values.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .lean_load import lean_loads

# Combine codes of the column kernel: one per numpy ufunc a UfuncKernel may use.
ADD, MAX, MIN, MUL, FMAX, FMIN = 0, 1, 2, 3, 4, 5
# merge_columns walks rows once (all columns of a slice together) from this many columns
COLUMNS_ROW_MIN = 8
# sum and mean from values run one loop per row (_sum_rows) from rows of this many slices
SUM_ONE_LOOP_MIN = 1 << 11
# _sum_rows writes a row's windows in chunks of this many (mean divides each chunk while it is in L1)
SUM_CHUNK = 2048

_JIT = {"nogil": True, "cache": True, "error_model": "numpy"}


# The scalar combines, as numpy's ufuncs compute them (each inlined into its own copy of the merge).
@njit(inline="always", cache=True)
def c_add(a, b):
    return a + b


@njit(inline="always", cache=True)
def c_max(a, b):
    return a if (a >= b or a != a) else b


@njit(inline="always", cache=True)
def c_min(a, b):
    return a if (a <= b or a != a) else b


@njit(inline="always", cache=True)
def c_mul(a, b):
    return a * b


@njit(inline="always", cache=True)
def c_fmax(a, b):
    return a if (a >= b or b != b) else b


@njit(inline="always", cache=True)
def c_fmin(a, b):
    return a if (a <= b or b != b) else b


@njit(inline="always", cache=True)
def _exact_inverse(div):
    """``1 / div`` where it is exact (``div`` a power of two: ``a * (1 / div)`` is ``a / div``, bit for bit,
    for every ``a``), else 0.0 (divide)."""
    return 1.0 / div if math.frexp(div)[0] == 0.5 else 0.0


@njit(inline="always", cache=True)
def _over(a, div, inv):
    """``a / div``, as a product where ``inv`` (:func:`_exact_inverse`) is exact: a multiply costs a
    fraction of a division (``mean`` over ``2^k`` values: ~4% of its merge, measured)."""
    return a * inv if inv != 0.0 else a / div


@njit(inline="always", cache=True)
def _scale(o, div, inv):
    """``o[t] = _over(o[t], div, inv)`` for every ``t``, the test outside the loop (which vectorises)."""
    if inv != 0.0:
        for t in range(o.shape[0]):
            o[t] = o[t] * inv
    else:
        for t in range(o.shape[0]):
            o[t] = o[t] / div


@njit(inline="always", cache=True)
def _scalar_rows(X, q, a0, a1, out, comb, lcs, csa, div=1.0):
    """Windows ``[a0, a1)`` over scalar partials (1-D views, any stride).

    Per row: the row's lcs (from its end) and the next row's csa (from its start) in one
    loop, two independent chains, then every window of the row in a loop that vectorises.
    Every loop walks forward over views (the lcs over reversed ones): numba then knows no
    index is negative and drops the wraparound test of each access (1.7x, measured).
    """
    c = a0 // q
    lr = lcs[::-1]
    inv = _exact_inverse(div)
    while c * q < a1:
        base = c * q
        n = min(q, a1 - base)
        xr = X[base : base + q][::-1]
        xn = X[base + q : base + q + n - 1]
        o = out[base : base + n]
        acc = xr[0]
        lr[0] = acc
        both = n - 1  # steps where the csa (n - 1 slices of the next row) grows too
        if both > 0:
            run = xn[0]
            csa[0] = run
            for i in range(1, both):
                acc = comb(xr[i], acc)
                lr[i] = acc
                run = comb(run, xn[i])
                csa[i] = run
        for i in range(max(both, 1), q):
            acc = comb(xr[i], acc)
            lr[i] = acc
        if div == 1.0:
            o[0] = lcs[0]
            for j in range(1, n):
                o[j] = comb(lcs[j], csa[j - 1])
        else:  # mean: the sum divided by the count, in the same pass
            o[0] = _over(lcs[0], div, inv)
            for j in range(1, n):
                o[j] = _over(comb(lcs[j], csa[j - 1]), div, inv)
        c += 1


@njit(inline="always", cache=True)
def _sum_rows(X, q, a0, a1, out, lcs, div=1.0):
    """:func:`_scalar_rows` with ``c_add`` (the same additions in the same order: the same bits but a
    NaN's sign, which the compiler's operand order picks), in one loop per row: the windows of row
    ``c`` (its lcs, built by the previous row's loop, plus the next row's csa, a running sum)
    written while the lcs of row ``c+1`` (which row ``c+1``'s windows need) is built from that
    row's end. Two chains, as before, without the csa's scratch and the second pass over the lcs.
    ``lcs``: ``2*q`` scratch (row ``c``'s lcs in one half, row ``c+1``'s in the other). ``div``
    (``mean``): each window's sum divided by it as it is written.

    Measured (the merge alone, one thread, CPU time, 10M values, ms, two-pass -> this): ``sum``
    2^9 11.5 -> 15.0, 2^10 15.9 -> 15.6, 2^11 18.8 -> 14.5, 2^13 18.9 -> 14.7, 2^17 15.0 -> 13.3,
    2^20 15.6 -> 12.9; ``mean`` 2^10 16.9 -> 17.6, 2^11 18.4 -> 16.7, 2^13 19.3 -> 17.7, 2^17
    14.8 -> 15.7, 2^20 18.1 -> 15.3. Used from ``SUM_ONE_LOOP_MIN`` (where the two-pass scratch,
    16 bytes a slice, no longer fits the 32 KB L1).
    """
    inv = _exact_inverse(div)
    c = a0 // q
    base = c * q
    xr = X[base : base + q][::-1]
    lr = lcs[:q][::-1]
    acc = xr[0]
    lr[0] = acc
    for i in range(1, q):
        acc = xr[i] + acc
        lr[i] = acc
    flip = False
    while c * q < a1:
        base = c * q
        n = min(q, a1 - base)
        cur = lcs[q : 2 * q] if flip else lcs[:q]
        nxt = lcs[:q] if flip else lcs[q : 2 * q]
        o = out[base : base + n]
        xn = X[base + q : base + q + n - 1]
        o[0] = _over(cur[0], div, inv)
        if (c + 1) * q < a1:  # row c+1 has windows here: its lcs in this loop
            yr = X[base + q : base + 2 * q][::-1]
            nr = nxt[::-1]
            acc = yr[0]
            nr[0] = acc
            run = 0.0
            if n > 1:
                run = xn[0]
                o[1] = _over(cur[1] + run, div, inv)
            i0 = 1
            while i0 < n - 1:  # in chunks: mean's division over each chunk in a loop that vectorises
                i1 = min(i0 + SUM_CHUNK, n - 1)
                yc = yr[i0:i1]
                nc = nr[i0:i1]
                xc = xn[i0:i1]
                cc = cur[i0 + 1 : i1 + 1]
                oc = o[i0 + 1 : i1 + 1]
                for t in range(i1 - i0):
                    acc = yc[t] + acc
                    nc[t] = acc
                    run = run + xc[t]
                    oc[t] = cc[t] + run
                if div != 1.0:
                    _scale(oc, div, inv)
                i0 = i1
            for i in range(max(n - 1, 1), q):
                acc = yr[i] + acc
                nr[i] = acc
        elif n > 1:
            run = xn[0]
            o[1] = _over(cur[1] + run, div, inv)
            for i in range(1, n - 1):
                run = run + xn[i]
                o[i + 1] = _over(cur[i + 1] + run, div, inv)
        flip = not flip
        c += 1


@njit(inline="always", cache=True)
def _fill_ends(ends, a0, a1, first_end, step):
    """``ends[a] = first_end + a*step`` for ``a`` in ``[a0, a1)`` (nothing when ``ends`` is empty)."""
    if ends.shape[0] > 0:
        e = ends[a0:a1]
        start = first_end + a0 * step
        for i in range(a1 - a0):
            e[i] = start + i * step


@njit(inline="always", cache=True)
def _scalar_op(x, q, a0, a1, o, op, lcs, csa):
    """:func:`_scalar_rows` with the combine of code ``op`` (one inlined copy per combine: a merge
    that took the combine as an argument could not be cached on disk)."""
    if op == ADD:
        _scalar_rows(x, q, a0, a1, o, c_add, lcs, csa)
    elif op == MAX:
        _scalar_rows(x, q, a0, a1, o, c_max, lcs, csa)
    elif op == MIN:
        _scalar_rows(x, q, a0, a1, o, c_min, lcs, csa)
    elif op == MUL:
        _scalar_rows(x, q, a0, a1, o, c_mul, lcs, csa)
    elif op == FMAX:
        _scalar_rows(x, q, a0, a1, o, c_fmax, lcs, csa)
    else:
        _scalar_rows(x, q, a0, a1, o, c_fmin, lcs, csa)


@njit(**_JIT)
def merge_scalar(X, q, a0, a1, out, ends, first_end, step, op, lcs, csa):
    """Scalar partials ``X`` (1-D) combined by the combine of code ``op``: windows ``[a0, a1)`` into
    ``out``; ``ends`` (unless empty) gets ``first_end + a*step``; ``lcs``, ``csa``: scratch
    buffers of ``q`` floats (``2*q`` for ``lcs`` where ``op`` is ``ADD``: :func:`_sum_rows`, which
    ``merge_range`` asks for from ``SUM_ONE_LOOP_MIN``)."""
    if op == ADD and lcs.shape[0] >= 2 * q:
        _sum_rows(X, q, a0, a1, out, lcs)
    else:
        _scalar_op(X, q, a0, a1, out, op, lcs, csa)
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def merge_scalar_two_pass(X, q, a0, a1, out, ends, first_end, step, op, lcs, csa):
    """:func:`merge_scalar` by :func:`_scalar_rows` for every combine (the readable reference of
    :func:`_sum_rows`, which must give its bits)."""
    _scalar_op(X, q, a0, a1, out, op, lcs, csa)
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def merge_scalar_keyed(X, xstart, nwin, ostart, first_end, q, op, out, ends, lcs, csa):
    """:func:`merge_scalar` of several keys in one call: key ``k``'s partials are
    ``X[xstart[k] : xstart[k] + nwin[k] + q - 1]`` (its history, then its batch), its ``nwin[k]``
    windows go to ``out`` and ``ends`` from ``ostart[k]``, ends ``first_end[k] + a`` (slide 1).

    Each key gets :func:`merge_scalar`'s operations on its own partials, in rows of ``q`` from its
    first window (the same bits as one call per key)."""
    for k in range(xstart.shape[0]):
        n = nwin[k]
        x0 = xstart[k]
        o0 = ostart[k]
        _scalar_op(X[x0 : x0 + n + q - 1], q, 0, n, out[o0 : o0 + n], op, lcs, csa)
        _fill_ends(ends[o0 : o0 + n], 0, n, first_end[k], 1)


@njit(**_JIT)
def merge_columns(X, q, a0, a1, out, ends, first_end, step, ops, lcs, csa):
    """Vector partials ``X`` (2-D, one row a slice) whose column ``k`` combines by ``ops[k]`` (a code
    above); ``lcs``, ``csa``: ``(q, X.shape[1])`` scratch.

    The columns never mix: each gets :func:`_scalar_rows`'s operations in the same order (the
    same bits). Narrow partials (``mean``, ``geomean``: 2 columns) are merged a column at a
    time, a strided pass each. From ``COLUMNS_ROW_MIN`` columns, a pass per column would read
    every cache line of ``X`` once per column (``moment_sketch``: 23), so the rows are walked
    once instead, and in each row every run of columns with one combine
    (:func:`_columns_row`). Measured (CPU time, one thread): 4 columns 54 vs 30 M windows/s,
    8 columns 15 vs 21, 23 columns 3 vs 9 (per column vs by rows).
    """
    K = X.shape[1]
    if K < COLUMNS_ROW_MIN:
        for k in range(K):
            _scalar_op(X[:, k], q, a0, a1, out[:, k], ops[k], lcs.ravel()[:q], csa.ravel()[:q])
        _fill_ends(ends, a0, a1, first_end, step)
        return
    c = a0 // q
    while c * q < a1:
        base = c * q
        n = min(q, a1 - base)
        k0 = 0
        while k0 < K:
            k1 = k0 + 1
            while k1 < K and ops[k1] == ops[k0]:
                k1 += 1
            op = ops[k0]
            if op == ADD:
                _columns_row(X, q, base, n, out, c_add, lcs, csa, k0, k1)
            elif op == MAX:
                _columns_row(X, q, base, n, out, c_max, lcs, csa, k0, k1)
            elif op == MIN:
                _columns_row(X, q, base, n, out, c_min, lcs, csa, k0, k1)
            elif op == MUL:
                _columns_row(X, q, base, n, out, c_mul, lcs, csa, k0, k1)
            elif op == FMAX:
                _columns_row(X, q, base, n, out, c_fmax, lcs, csa, k0, k1)
            else:
                _columns_row(X, q, base, n, out, c_fmin, lcs, csa, k0, k1)
            k0 = k1
        c += 1
    _fill_ends(ends, a0, a1, first_end, step)


@njit(inline="always", cache=True)
def _columns_row(X, q, base, n, out, comb, lcs, csa, k0, k1):
    """Windows ``[base, base + n)`` of one row, columns ``[k0, k1)``: the row's lcs (from its end), the
    next row's csa (from its start), then every window. The inner loops run along one slice's
    contiguous columns (2-D indexing: a row view per step would cost numba a reference count)."""
    for k in range(k0, k1):
        lcs[q - 1, k] = X[base + q - 1, k]
    for i in range(1, q):
        j = q - 1 - i
        for k in range(k0, k1):
            lcs[j, k] = comb(X[base + j, k], lcs[j + 1, k])
    if n > 1:
        nxt = base + q
        for k in range(k0, k1):
            csa[0, k] = X[nxt, k]
        for i in range(1, n - 1):
            for k in range(k0, k1):
                csa[i, k] = comb(csa[i - 1, k], X[nxt + i, k])
    for k in range(k0, k1):
        out[base, k] = lcs[0, k]
    for j in range(1, n):
        for k in range(k0, k1):
            out[base + j, k] = comb(lcs[j, k], csa[j - 1, k])


@njit(inline="always", cache=True)
def _chan(na, ma, Ma, la, nb, mb, Mb, lb):
    """Chan et al.'s merge of ``(n, mean, M2, lo)`` partials (the mean is ``mean + lo``), as
    ``aggregations._chan`` (the Python form), operation for operation."""
    if na == 0.0:
        return nb, mb, Mb, lb
    if nb == 0.0:
        return na, ma, Ma, la
    n = na + nb
    f = nb / n
    d = (mb - ma) + (lb - la)
    u = la + d * f
    m = ma + u
    return n, m, (Ma + Mb) + d * d * na * f, u - (m - ma)


@njit(inline="always", cache=True)
def _unshift(n, s, qq, ref):
    """``(n, mean, M2, lo)`` of a part kept as power sums shifted by ``ref``: ``s = sum n_i (m_i - ref)``,
    ``qq = sum M2_i + n_i (m_i - ref)^2`` (``m_i`` a part's mean with its ``lo``)."""
    if n == 0.0:
        return 0.0, 0.0, 0.0, 0.0
    mu = s / n
    m2 = qq - s * mu
    if m2 < 0.0:
        m2 = 0.0
    m = ref + mu
    return n, m, m2, mu - (m - ref)


@njit(**_JIT)
def merge_std(X, q, a0, a1, out, ends, first_end, step, lcs, csa):
    """``std`` partials ``(n, mean, M2, lo)``: each part as power sums shifted by a slice inside it.

    When a row's last slice is non-empty (always, for count windows), every window starting
    in the row holds it: the row's lcs and the next row's csa are both shifted by its mean,
    and a window is their plain sum (one division to unshift). Otherwise the lcs is shifted
    by the row's last non-empty slice (which every non-empty suffix holds), the csa by the
    next row's first non-empty slice (which every non-empty prefix holds), and the two meet
    in Chan's update. ``lcs``, ``csa``: ``(q, 3)`` scratch.
    """
    c = a0 // q
    while c * q < a1:
        base = c * q
        cnt = min(q, a1 - base)
        nxt = base + q
        if X[base + q - 1, 0] > 0.0:
            ref = X[base + q - 1, 1]
            n = 0.0
            s = 0.0
            qq = 0.0
            for j in range(q - 1, -1, -1):
                ni = X[base + j, 0]
                d = (X[base + j, 1] - ref) + X[base + j, 3] if ni > 0.0 else 0.0
                n += ni
                s += ni * d
                qq += X[base + j, 2] + ni * d * d
                lcs[j, 0] = n
                lcs[j, 1] = s
                lcs[j, 2] = qq
            n = 0.0
            s = 0.0
            qq = 0.0
            for j in range(cnt - 1):
                ni = X[nxt + j, 0]
                d = (X[nxt + j, 1] - ref) + X[nxt + j, 3] if ni > 0.0 else 0.0
                n += ni
                s += ni * d
                qq += X[nxt + j, 2] + ni * d * d
                csa[j, 0] = n
                csa[j, 1] = s
                csa[j, 2] = qq
            for j in range(cnt):
                n = lcs[j, 0]
                s = lcs[j, 1]
                qq = lcs[j, 2]
                if j:
                    n += csa[j - 1, 0]
                    s += csa[j - 1, 1]
                    qq += csa[j - 1, 2]
                mu = s / n
                m2 = qq - s * mu
                m = ref + mu
                out[base + j, 0] = n
                out[base + j, 1] = m
                out[base + j, 2] = m2 if m2 > 0.0 else (m2 if m2 != m2 else 0.0)
                out[base + j, 3] = mu - (m - ref)
        else:
            ref = 0.0
            for j in range(q - 1, -1, -1):
                if X[base + j, 0] > 0.0:
                    ref = X[base + j, 1]
                    break
            n = 0.0
            s = 0.0
            qq = 0.0
            for j in range(q - 1, -1, -1):
                ni = X[base + j, 0]
                if ni > 0.0:
                    d = (X[base + j, 1] - ref) + X[base + j, 3]
                    n += ni
                    s += ni * d
                    qq += X[base + j, 2] + ni * d * d
                lcs[j, 0] = n
                lcs[j, 1] = s
                lcs[j, 2] = qq
            n0, m0, M0, l0 = _unshift(lcs[0, 0], lcs[0, 1], lcs[0, 2], ref)
            out[base, 0] = n0
            out[base, 1] = m0
            out[base, 2] = M0
            out[base, 3] = l0
            ref_b = 0.0
            found = False
            nb = 0.0
            sb = 0.0
            qb = 0.0
            for j in range(1, cnt):
                ni = X[nxt + j - 1, 0]
                if ni > 0.0:
                    if not found:
                        ref_b = X[nxt + j - 1, 1]
                        found = True
                    d = (X[nxt + j - 1, 1] - ref_b) + X[nxt + j - 1, 3]
                    nb += ni
                    sb += ni * d
                    qb += X[nxt + j - 1, 2] + ni * d * d
                na, ma, Ma, la = _unshift(lcs[j, 0], lcs[j, 1], lcs[j, 2], ref)
                nc, mc, Mc, lc = _unshift(nb, sb, qb, ref_b)
                r0, r1, r2, r3 = _chan(na, ma, Ma, la, nc, mc, Mc, lc)
                out[base + j, 0] = r0
                out[base + j, 1] = r1
                out[base + j, 2] = r2
                out[base + j, 3] = r3
        c += 1
    _fill_ends(ends, a0, a1, first_end, step)


@njit(inline="always", cache=True)
def _argmax(av, ap, bv, bp):
    """``aggregations._argmax2``: the larger value (NaN counts as largest), the older one on ties."""
    if bp != bp:
        return av, ap
    if ap != ap:
        return bv, bp
    if bv > av or (bv != bv and av == av):
        return bv, bp
    return av, ap


@njit(**_JIT)
def merge_argmax(X, q, a0, a1, out, ends, first_end, step, lcs):
    """``argmax`` partials ``(value, position)`` (position NaN: no element)."""
    c = a0 // q
    while c * q < a1:
        base = c * q
        av = X[base + q - 1, 0]
        ap = X[base + q - 1, 1]
        lcs[q - 1, 0] = av
        lcs[q - 1, 1] = ap
        for j in range(q - 2, -1, -1):
            av, ap = _argmax(X[base + j, 0], X[base + j, 1], av, ap)
            lcs[j, 0] = av
            lcs[j, 1] = ap
        cnt = min(q, a1 - base)
        out[base, 0] = lcs[0, 0]
        out[base, 1] = lcs[0, 1]
        nxt = base + q
        cv = X[nxt, 0]
        cp = X[nxt, 1]
        for j in range(1, cnt):
            if j > 1:
                cv, cp = _argmax(cv, cp, X[nxt + j - 1, 0], X[nxt + j - 1, 1])
            rv, rp = _argmax(lcs[j, 0], lcs[j, 1], cv, cp)
            out[base + j, 0] = rv
            out[base + j, 1] = rp
        c += 1
    _fill_ends(ends, a0, a1, first_end, step)


# ----------------------------------------------------------------------------- lift and lower
# The numpy forms build temporaries (np.stack, np.where over several arrays); these write
# each output once. Same arithmetic per element as the numpy forms they replace.
@njit(**_JIT)
def lift_std(values, out):
    """``(1, x, 0, 0)`` per value (``StdKernel.lift``)."""
    for i in range(values.shape[0]):
        out[i, 0] = 1.0
        out[i, 1] = values[i]
        out[i, 2] = 0.0
        out[i, 3] = 0.0


@njit(**_JIT)
def lift_moments(values, out):
    """``moment_sketch``'s partial per value, one row at a time: ``(x, x, 1, x^1..x^k, ln(x)^1..ln(x)^k)``
    with ``k = (out.shape[1] - 3) // 2``, the powers by repeated products as its numpy lift
    computes them (the log is libm's, not numpy's: equal within an ulp)."""
    k = (out.shape[1] - 3) // 2
    for i in range(values.shape[0]):
        v = values[i]
        r = out[i]
        r[0] = v
        r[1] = v
        r[2] = 1.0
        p = 1.0
        for j in range(k):
            p = p * v
            r[3 + j] = p
        lx = np.log(v)
        p = 1.0
        for j in range(k):
            p = p * lx
            r[3 + k + j] = p


@njit(**_JIT)
def lift_pair(values, out):
    """``(x, 1)`` per value (``mean``'s lift)."""
    for i in range(values.shape[0]):
        out[i, 0] = values[i]
        out[i, 1] = 1.0


@njit(**_JIT)
def lower_std(parts, out):
    """``sqrt(M2 / (n - 1))`` where ``n > 1`` and the mean is finite, else NaN (``StdKernel.lower``)."""
    for i in range(parts.shape[0]):
        n = parts[i, 0]
        mu = parts[i, 1]
        if n > 1.0 and mu - mu == 0.0:
            out[i] = np.sqrt(parts[i, 2] / (n - 1.0))
        else:
            out[i] = np.nan


@njit(**_JIT)
def lower_ratio(parts, out):
    """``parts[:, 0] / parts[:, 1]`` (``mean``'s lower)."""
    for i in range(parts.shape[0]):
        out[i] = parts[i, 0] / parts[i, 1]


# ----------------------------------------------------------------------------- from values, lowered
# Count windows with slide 1: every slice is one value, so a std partial is (1, x, 0, 0) and every
# window holds q values. These merges read the values themselves and write the lowered result,
# with the arithmetic of merge_std + lower_std on those partials, operation for operation (1.0 * d
# is d, 0.0 + d * d is d * d): the same bits, without the (n, 3) partials in memory twice.
@njit(**_JIT)
def std_from_values(V, q, a0, a1, out, ends, first_end, step, lcs, csa):
    """``std`` (ddof=1) of windows ``[a0, a1)`` of ``q`` values each; ``lcs``, ``csa``: ``(2, q)`` scratch
    (the shifted sum and the shifted sum of squares).

    Per row: the lcs (from the row's end) and the next row's csa (from its start), both shifted
    by the row's last value, in one loop (four independent chains), then every window in a loop
    without branches (it vectorises: the divisions and square roots four or eight at a time).
    """
    c = a0 // q
    n = float(q)
    ok = n > 1.0
    while c * q < a1:
        base = c * q
        cnt = min(q, a1 - base)
        ref = V[base + q - 1]
        vr = V[base : base + q][::-1]
        vn = V[base + q : base + q + cnt - 1]
        ls = lcs[0][::-1]
        lq = lcs[1][::-1]
        cs = csa[0]
        cq = csa[1]
        s = 0.0
        qq = 0.0
        s2 = 0.0
        q2 = 0.0
        for i in range(cnt - 1):
            d = vr[i] - ref
            s += d
            qq += 0.0 + d * d
            ls[i] = s
            lq[i] = qq
            e = vn[i] - ref
            s2 += e
            q2 += 0.0 + e * e
            cs[i] = s2
            cq[i] = q2
        for i in range(cnt - 1, q):
            d = vr[i] - ref
            s += d
            qq += 0.0 + d * d
            ls[i] = s
            lq[i] = qq
        o = out[base : base + cnt]
        L0 = lcs[0]
        L1 = lcs[1]
        mu = L0[0] / n
        m2 = L1[0] - L0[0] * mu
        m2 = m2 if m2 > 0.0 else (m2 if m2 != m2 else 0.0)
        mean = ref + mu
        o[0] = np.sqrt(m2 / (n - 1.0)) if (ok and mean - mean == 0.0) else np.nan
        for j in range(1, cnt):
            sj = L0[j] + cs[j - 1]
            qj = L1[j] + cq[j - 1]
            mu = sj / n
            m2 = qj - sj * mu
            m2 = m2 if m2 > 0.0 else (m2 if m2 != m2 else 0.0)
            mean = ref + mu
            r = np.sqrt(m2 / (n - 1.0))
            o[j] = r if (ok and mean - mean == 0.0) else np.nan
        c += 1
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def mean_from_values(V, q, a0, a1, out, ends, first_end, step, lcs, csa):
    """``mean`` of windows ``[a0, a1)`` of ``q`` values each: the sum merge, divided by the count
    (:func:`_sum_rows` when ``lcs`` holds ``2*q``, else :func:`_scalar_rows`)."""
    if lcs.shape[0] >= 2 * q:
        _sum_rows(V, q, a0, a1, out, lcs, float(q))
    else:
        _scalar_rows(V, q, a0, a1, out, c_add, lcs, csa, float(q))
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def count_from_values(q, a0, a1, out, ends, first_end, step):
    """``count`` of windows ``[a0, a1)`` of ``q`` values each: ``q`` (int64), what the sum of their
    ``q`` lifted ones gives (exact below 2^53), without reading them."""
    o = out[a0:a1]
    for i in range(a1 - a0):
        o[i] = q
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def argmax_from_values(V, q, a0, a1, out, ends, first_end, step, lcp, lcv, csp, csv, pos0):
    """``argmax`` of windows ``[a0, a1)`` of ``q`` values each: the position ``pos0 + i`` of the
    largest value (NaN counts as largest, the oldest on ties), as ``merge_argmax`` picks it (every
    slice holds one value, so no position is NaN and the choice is ``c_max``'s, older first).
    ``lcp``, ``csp``: int64 scratch of ``q``; ``lcv``, ``csv``: float scratch of ``q``.

    A row's lcs (the suffix maxima, column ``j`` holding ``max V[j:q]``) is a step function: it
    changes only at its *records*, the values no newer value of the row exceeds (about ``ln q``
    of them in random data); so is the next row's csa (the prefix maxima). Per row: the lcs's
    records (a walk from the row's end, a branch per value that is almost never taken, so no
    chain of selects), the next row's csa's records (a walk from its start), then the windows
    as runs: between two consecutive records of either part a window's choice is one position,
    written by a fill. Two passes over the values, one over the windows, no scratch per window.
    (Sorted values make every value a record: a branch taken at every value, a run per window.)
    """
    big = 1 << 62
    c = a0 // q
    while c * q < a1:
        base = c * q
        cnt = min(q, a1 - base)
        kl = _lcs_records(V[base : base + q], lcp, lcv)
        lp = lcp[kl]
        lv = lcv[kl]
        o = out[base : base + cnt]
        o[0] = pos0 + base + lp
        if cnt > 1:
            mc = _csa_records(V[base + q : base + q + cnt - 1], csp, csv)
            kc = 0
            cp = csp[0]
            cv = csv[0]
            ncp = csp[1] if mc >= 1 else big  # where the csa next changes
            j = 1
            while j < cnt:  # windows [j, jend): one lcs record, one csa record
                if j > lp:
                    kl -= 1
                    lp = lcp[kl]
                    lv = lcv[kl]
                if j - 1 >= ncp:
                    kc += 1
                    cp = csp[kc]
                    cv = csv[kc]
                    ncp = csp[kc + 1] if kc < mc else big
                jend = min(lp + 1, ncp + 1, cnt)
                pick = pos0 + ((base + lp) if (lv >= cv or lv != lv) else (base + q + cp))
                run = o[j:jend]  # indexed from 0: a fill that vectorises
                for t in range(jend - j):
                    run[t] = pick
                j = jend
        c += 1
    _fill_ends(ends, a0, a1, first_end, step)


@njit(inline="always", cache=True)
def _lcs_records(R, rp, rv):
    """The records of row ``R``'s suffix maxima, from its end: ``rp[0] = len(R) - 1`` and each next one the
    newest older position whose value takes over (``x >= best``, or ``x`` NaN: older first, NaN largest),
    ``rv`` their values; returns the index of the last (the row's argmax)."""
    q = R.shape[0]
    bv = R[q - 1]
    m = 0
    rp[0] = q - 1
    rv[0] = bv
    i = q - 2
    if bv == bv:
        while i >= 0:
            x = R[i]
            if not (x < bv):  # x >= bv, or x NaN
                bv = x
                m += 1
                rp[m] = i
                rv[m] = x
                if x != x:
                    i -= 1
                    break
            i -= 1
    while i >= 0:  # the suffix maximum is NaN from here on: only an older NaN takes over
        x = R[i]
        if x != x:
            m += 1
            rp[m] = i
            rv[m] = x
        i -= 1
    return m


@njit(inline="always", cache=True)
def _csa_records(P, rp, rv):
    """The records of ``P``'s prefix maxima (``len(P) >= 1``), from its start: ``rp[0] = 0`` and each next one
    the first newer position whose value beats the run (``not (run >= y)``: ``y`` larger or NaN; the run
    keeps its position on ties and once it is NaN), ``rv`` their values; returns the index of the last."""
    cv = P[0]
    m = 0
    rp[0] = 0
    rv[0] = cv
    if cv == cv:
        for i in range(1, P.shape[0]):
            y = P[i]
            if not (cv >= y):
                cv = y
                m += 1
                rp[m] = i
                rv[m] = y
                if y != y:
                    break
    return m


@njit(**_JIT)
def lift_argmax(values, positions, out):
    """``(x, position)`` per value (``ArgmaxKernel.lift``)."""
    for i in range(values.shape[0]):
        out[i, 0] = values[i]
        out[i, 1] = positions[i]


# Loading from the disk cache without numba's compiler set-up (lean_load.py: most of a process's first call).
lean_loads(globals())
