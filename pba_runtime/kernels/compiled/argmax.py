"""The ``argmax`` merge: ``(value, position)`` partials, the larger value (NaN counts as largest), the oldest on
ties; its lift and the slide-1 merge from values over the records of each row's suffix and prefix maxima."""

from __future__ import annotations

from numba import njit

from ..lean_load import lean_loads
from .common import _JIT, _fill_ends


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


@njit(inline="always", cache=True)
def pick_max_at(av, ap, bv, bp, empty):
    """:func:`_argmax` over integer positions (a row, a stream position or a timestamp), ``empty`` the
    position of a partial without a value: the keyed engines' combine of ``(value, position)``."""
    if bp == empty:
        return av, ap
    if ap == empty:
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


# Loading from the disk cache without numba's compiler set-up (lean_load.py).
lean_loads(globals())
