"""The ``std`` merge: power sums shifted by a slice inside each part, merged by Chan et al.'s update; its lift,
its lower and the slide-1 merge from values."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..lean_load import lean_loads
from .common import _JIT, _fill_ends


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
def lower_std(parts, out):
    """``sqrt(M2 / (n - 1))`` where ``n > 1`` and the mean is finite, else NaN (``StdKernel.lower``)."""
    for i in range(parts.shape[0]):
        n = parts[i, 0]
        mu = parts[i, 1]
        if n > 1.0 and mu - mu == 0.0:
            out[i] = np.sqrt(parts[i, 2] / (n - 1.0))
        else:
            out[i] = np.nan


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


# Loading from the disk cache without numba's compiler set-up (lean_load.py).
lean_loads(globals())
