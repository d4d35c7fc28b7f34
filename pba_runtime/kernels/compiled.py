"""The compiled window merge: PBA over a batch of slice partials in one pass per chunk, GIL released.

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

import numpy as np
from numba import njit

# Combine codes of the column kernel: one per numpy ufunc a UfuncKernel may use.
ADD, MAX, MIN, MUL, FMAX, FMIN = 0, 1, 2, 3, 4, 5

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
def _scalar_rows(X, q, a0, a1, out, comb, lcs, csa, div=1.0):
    """Windows ``[a0, a1)`` over scalar partials (1-D views, any stride).

    Per row: the row's lcs (from its end) and the next row's csa (from its start) in one
    loop, two independent chains, then every window of the row in a loop that vectorises.
    Every loop walks forward over views (the lcs over reversed ones): numba then knows no
    index is negative and drops the wraparound test of each access (1.7x, measured).
    """
    c = a0 // q
    lr = lcs[::-1]
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
            o[0] = lcs[0] / div
            for j in range(1, n):
                o[j] = comb(lcs[j], csa[j - 1]) / div
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
    buffers of ``q`` floats."""
    _scalar_op(X, q, a0, a1, out, op, lcs, csa)
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def merge_columns(X, q, a0, a1, out, ends, first_end, step, ops, lcs, csa):
    """Vector partials ``X`` (2-D, one row a slice) whose column ``k`` combines by ``ops[k]`` (a code
    above): each column merged on its own, as a scalar one (the columns never mix)."""
    for k in range(X.shape[1]):
        _scalar_op(X[:, k], q, a0, a1, out[:, k], ops[k], lcs, csa)
    _fill_ends(ends, a0, a1, first_end, step)


@njit(inline="always", cache=True)
def _chan(na, ma, Ma, nb, mb, Mb):
    """Chan et al.'s merge of ``(n, mean, M2)`` partials, as ``aggregations._chan`` (the Python form)."""
    n = na + nb
    if n == 0.0:
        return 0.0, 0.0, 0.0
    f = nb / n
    d = mb - ma
    return n, ma + d * f, (Ma + Mb) + d * d * na * f


@njit(inline="always", cache=True)
def _unshift(n, s, qq, ref):
    """``(n, mean, M2)`` of a part kept as power sums shifted by ``ref``: ``s = sum n_i (m_i - ref)``,
    ``qq = sum M2_i + n_i (m_i - ref)^2``."""
    if n == 0.0:
        return 0.0, 0.0, 0.0
    mu = s / n
    m2 = qq - s * mu
    if m2 < 0.0:
        m2 = 0.0
    return n, ref + mu, m2


@njit(**_JIT)
def merge_std(X, q, a0, a1, out, ends, first_end, step, lcs, csa):
    """``std`` partials ``(n, mean, M2)``: each part as power sums shifted by a slice inside it.

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
                d = X[base + j, 1] - ref if ni > 0.0 else 0.0
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
                d = X[nxt + j, 1] - ref if ni > 0.0 else 0.0
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
                out[base + j, 0] = n
                out[base + j, 1] = ref + mu
                out[base + j, 2] = m2 if m2 > 0.0 else (m2 if m2 != m2 else 0.0)
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
                    d = X[base + j, 1] - ref
                    n += ni
                    s += ni * d
                    qq += X[base + j, 2] + ni * d * d
                lcs[j, 0] = n
                lcs[j, 1] = s
                lcs[j, 2] = qq
            n0, m0, M0 = _unshift(lcs[0, 0], lcs[0, 1], lcs[0, 2], ref)
            out[base, 0] = n0
            out[base, 1] = m0
            out[base, 2] = M0
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
                    d = X[nxt + j - 1, 1] - ref_b
                    nb += ni
                    sb += ni * d
                    qb += X[nxt + j - 1, 2] + ni * d * d
                na, ma, Ma = _unshift(lcs[j, 0], lcs[j, 1], lcs[j, 2], ref)
                nc, mc, Mc = _unshift(nb, sb, qb, ref_b)
                r0, r1, r2 = _chan(na, ma, Ma, nc, mc, Mc)
                out[base + j, 0] = r0
                out[base + j, 1] = r1
                out[base + j, 2] = r2
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
    """``(1, x, 0)`` per value (``StdKernel.lift``)."""
    for i in range(values.shape[0]):
        out[i, 0] = 1.0
        out[i, 1] = values[i]
        out[i, 2] = 0.0


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
# Count windows with slide 1: every slice is one value, so a std partial is (1, x, 0) and every
# window holds q values. These merges read the values themselves and write the lowered result,
# with the arithmetic of merge_std + lower_std on those partials, operation for operation (1.0 * d
# is d, 0.0 + d * d is d * d): the same bits, without the (n, 3) partials in memory twice.
@njit(**_JIT)
def std_from_values(V, q, a0, a1, out, ends, first_end, step, lcs, csa):
    """``std`` (ddof=1) of windows ``[a0, a1)`` of ``q`` values each; ``lcs``, ``csa``: ``(q, 2)`` scratch."""
    c = a0 // q
    while c * q < a1:
        base = c * q
        cnt = min(q, a1 - base)
        nxt = base + q
        ref = V[base + q - 1]
        s = 0.0
        qq = 0.0
        for j in range(q - 1, -1, -1):
            d = V[base + j] - ref
            s += d
            qq += 0.0 + d * d
            lcs[j, 0] = s
            lcs[j, 1] = qq
        s = 0.0
        qq = 0.0
        for j in range(cnt - 1):
            d = V[nxt + j] - ref
            s += d
            qq += 0.0 + d * d
            csa[j, 0] = s
            csa[j, 1] = qq
        n = float(q)
        for j in range(cnt):
            s = lcs[j, 0]
            qq = lcs[j, 1]
            if j:
                s += csa[j - 1, 0]
                qq += csa[j - 1, 1]
            mu = s / n
            m2 = qq - s * mu
            m2 = m2 if m2 > 0.0 else (m2 if m2 != m2 else 0.0)
            mean = ref + mu
            if n > 1.0 and mean - mean == 0.0:
                out[base + j] = np.sqrt(m2 / (n - 1.0))
            else:
                out[base + j] = np.nan
        c += 1
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def mean_from_values(V, q, a0, a1, out, ends, first_end, step, lcs, csa):
    """``mean`` of windows ``[a0, a1)`` of ``q`` values each: the sum merge, divided by the count."""
    _scalar_rows(V, q, a0, a1, out, c_add, lcs, csa, float(q))
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def argmax_from_values(V, q, a0, a1, out, ends, first_end, step, lcs, csa, pos0):
    """``argmax`` of windows ``[a0, a1)`` of ``q`` values each: the position ``pos0 + i`` of the
    largest value (NaN counts as largest, the oldest on ties), as ``merge_argmax`` picks it (every
    slice holds one value, so no position is NaN and the choice is ``c_max``'s, older first).
    ``lcs``, ``csa``: int64 scratch of ``q``."""
    c = a0 // q
    while c * q < a1:
        base = c * q
        cnt = min(q, a1 - base)
        nxt = base + q
        best = base + q - 1
        lcs[q - 1] = best
        for j in range(q - 2, -1, -1):
            x = V[base + j]
            b = V[best]
            if x >= b or x != x:
                best = base + j
            lcs[j] = best
        if cnt > 1:
            run = nxt
            csa[0] = run
            for j in range(1, cnt - 1):
                a = V[run]
                if not (a >= V[nxt + j] or a != a):
                    run = nxt + j
                csa[j] = run
        out[base] = pos0 + lcs[0]
        for j in range(1, cnt):
            o = lcs[j]
            n = csa[j - 1]
            a = V[o]
            out[base + j] = pos0 + (o if (a >= V[n] or a != a) else n)
        c += 1
    _fill_ends(ends, a0, a1, first_end, step)


@njit(**_JIT)
def lift_argmax(values, positions, out):
    """``(x, position)`` per value (``ArgmaxKernel.lift``)."""
    for i in range(values.shape[0]):
        out[i, 0] = values[i]
        out[i, 1] = positions[i]
