"""Exact quantiles over windows given by their bounds: the median and ``quantile(q, interpolation)``.

A quantile is not a monoid (two windows' medians do not give their union's), so no chunking applies: the
kernel keeps each window's values in sorted order and moves from one window to the next by removing the
values that left and adding the ones that came. Windows are ``[S[i], E[i])`` over the values, both ends
non-decreasing in ``i`` (count windows of any slide, time windows' row ranges: every window a FIFO step from
the one before).

**How** (Suomela's *sorted blocks*, "Median filtering is equivalent to sorting", 2014, generalised to
windows of any bounds): the windows are taken in *phases*. A phase starts at a window ``i0`` and cuts the
values at ``c = E[i0]``; it lasts while ``S[i] <= c``. Within it a window's values are ``A``, the values of
``[S[i], c)``, which only lose values, and ``B``, those of ``[c, E[i])``, which only gain them. Each part is
one sorted array of its range (sorted once per phase) threaded as a doubly linked list: a value leaves ``A``
by unlinking it, and ``B`` starts as its whole range unlinked in reverse order, so a value enters it by
relinking it where it was ("dancing links"). Two cursors, one per list, split the window's values into the
``t`` smallest and the rest; a removal or an insertion moves a cursor by at most one value, and the cursors
then step to the wanted rank, so a step costs ``O(1)`` beyond the sort. Ties are ordered by position, so the
order is total and the result deterministic.

NaN is never in the lists: ``skip`` drops it (a window with fewer than ``min_periods`` other values is NaN);
else a window holding one is NaN (numpy's ``quantile``). The interpolations are numpy's, to the bit:
``linear`` (numpy's virtual index and its two-sided ``_lerp``), ``lower``, ``higher``, ``nearest`` (half
to even), ``midpoint``; ``median`` is ``numpy.median`` (the mean of the two middle values).

:func:`window_quantiles_reference` recomputes each window with numpy; ``tests/test_quantiles.py`` checks the
kernel and its plain-Python form (``window_quantiles.py_func``) against it.

Examples
--------
>>> import numpy as np
>>> v = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0])
>>> S = np.arange(5); E = S + 3
>>> out = np.empty(5)
>>> window_quantiles(v, S, E, 0.5, METHODS["median"], False, 1, 0, 5, out)
>>> out.tolist()
[3.0, 1.0, 4.0, 5.0, 5.0]
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .common import _JIT

__all__ = ["METHODS", "window_quantiles", "window_quantiles_reference"]

#: interpolation (numpy's ``method=``) -> the kernel's code; ``median`` is ``numpy.median``
METHODS = {"linear": 0, "lower": 1, "higher": 2, "nearest": 3, "midpoint": 4, "median": 5}


@njit(inline="always", cache=True)
def _lerp(a, b, t):
    """numpy's ``_lerp``: ``a + (b - a) t``, from ``b`` when ``t >= 0.5``."""
    d = b - a
    if t >= 0.5:
        return b - d * (1.0 - t)
    return a + d * t


@njit(inline="always", cache=True)
def _result(n, q, method, x0, x1):
    """The quantile from ``x0``, ``x1``: the values of rank :func:`_rank` and the next (``x1`` = ``x0`` at the top)."""
    if method == 5:
        return x0 if n % 2 == 1 else (x0 + x1) / 2.0
    if method == 0:
        vi = (n - 1) * q
        if vi >= n - 1:
            return _lerp(x0, x0, 0.0)
        return _lerp(x0, x1, vi - np.floor(vi))
    if method == 4:
        h = (n - 1) * q
        vi = 0.5 * (np.floor(h) + np.ceil(h))
        if vi >= n - 1:
            return _lerp(x0, x0, 0.0)
        return _lerp(x0, x1, 0.0 if vi == np.floor(vi) else 0.5)
    return x0


@njit(inline="always", cache=True)
def _rank(n, q, method):
    """The 0-based rank of the window's ``n`` sorted values the result starts from."""
    if method == 5:
        return (n - 1) // 2
    h = (n - 1) * q
    if method == 2:
        k = int(np.ceil(h))
    elif method == 3:
        k = int(np.rint(h))
    else:
        k = int(np.floor(h))
    return min(max(k, 0), n - 1)


@njit(**_JIT)
def _merge(xv, xp, x, x1, yv, yp, y, y1, ov, op, z):
    """Merge the sorted runs ``xv[x:x1]`` and ``yv[y:y1]`` (with their positions) into ``ov[z:]``, the first
    run's values first on ties (they are the older); returns where the output ends."""
    while x < x1 and y < y1:
        if yv[y] < xv[x]:
            ov[z] = yv[y]
            op[z] = yp[y]
            y += 1
        else:
            ov[z] = xv[x]
            op[z] = xp[x]
            x += 1
        z += 1
    while x < x1:
        ov[z] = xv[x]
        op[z] = xp[x]
        x += 1
        z += 1
    while y < y1:
        ov[z] = yv[y]
        op[z] = yp[y]
        y += 1
        z += 1
    return z


@njit(**_JIT)
def _sort_run(val, pos, a, b, tv, tp):
    """Sort ``val[a:b]`` (and ``pos`` with it) by value, stably: insertion sort of runs of 16, then bottom-up
    merges through ``tv``/``tp``."""
    run = 16
    for r0 in range(a, b, run):
        r1 = min(r0 + run, b)
        for x in range(r0 + 1, r1):
            kv = val[x]
            kp = pos[x]
            y = x - 1
            while y >= r0 and val[y] > kv:
                val[y + 1] = val[y]
                pos[y + 1] = pos[y]
                y -= 1
            val[y + 1] = kv
            pos[y + 1] = kp
    width = run
    while width < b - a:
        for l0 in range(a, b, 2 * width):
            mid = min(l0 + width, b)
            r1 = min(l0 + 2 * width, b)
            if mid >= r1 or val[mid - 1] <= val[mid]:  # already in order
                continue
            z = _merge(val, pos, l0, mid, val, pos, mid, r1, tv, tp, 0)
            for u in range(z):
                val[l0 + u] = tv[u]
                pos[l0 + u] = tp[u]
        width *= 2


#: below this many values a run is sorted by insertion and merges, from it by radix (six passes of 11 bits)
RADIX_MIN = 384
_DIGIT = 11
_BUCKETS = 1 << _DIGIT


@njit(**_JIT)
def _radix_sort(v, val, pos, a, b, k1, k2, q1, q2, count):
    """Sort ``val[a:b]`` (and ``pos``) by value, stably, by least-significant-digit radix over the values'
    order-preserving bits (``-0.0`` read as ``0.0``, so equal values keep their order, as in the merge
    sort); a digit every key shares is skipped. The values are read back from ``v`` at their positions."""
    m = b - a
    bits = val[a:b].view(np.uint64)
    sign = np.uint64(1) << np.uint64(63)
    for x in range(m):
        u = bits[x]
        if u == sign:  # -0.0
            u = np.uint64(0)
        k1[x] = ~u if u & sign else u | sign
        q1[x] = pos[a + x]
    src_k, dst_k, src_q, dst_q = k1, k2, q1, q2
    mask = np.uint64(_BUCKETS - 1)
    for shift in range(0, 64, _DIGIT):
        sh = np.uint64(shift)
        count[:] = 0
        for x in range(m):
            count[(src_k[x] >> sh) & mask] += 1
        if count[(src_k[0] >> sh) & mask] == m:  # every key has this digit
            continue
        total = 0
        for d in range(_BUCKETS):
            c = count[d]
            count[d] = total
            total += c
        for x in range(m):
            d = (src_k[x] >> sh) & mask
            j = count[d]
            count[d] = j + 1
            dst_k[j] = src_k[x]
            dst_q[j] = src_q[x]
        src_k, dst_k = dst_k, src_k
        src_q, dst_q = dst_q, src_q
    for x in range(m):
        p = src_q[x]
        pos[a + x] = p
        val[a + x] = v[p]


@njit(**_JIT)
def _sort_values(v, val, pos, m, tv, tp, k1, k2, q1, q2, count):
    """Sort ``val[:m]`` (and ``pos``) by value, stably: by radix from :data:`RADIX_MIN` values, else by
    insertion and merges."""
    if m >= RADIX_MIN:
        _radix_sort(v, val, pos, 0, m, k1, k2, q1, q2, count)
    elif m > 1:
        _sort_run(val, pos, 0, m, tv, tp)


@njit(**_JIT)
def _link(pos, base, m, rank, nxt, prv):
    """Thread sorted nodes ``0..m-1`` as a list (head ``m``, tail ``m + 1``); ``rank[p - base]`` = node of ``p``."""
    for r in range(m):
        rank[pos[r] - base] = r
        nxt[r] = r + 1
        prv[r] = r - 1
    head = m
    tail = m + 1
    if m:
        prv[0] = head
        nxt[m - 1] = tail
        nxt[head] = 0
        prv[tail] = m - 1
    else:
        nxt[head] = tail
        prv[tail] = head
    prv[head] = head
    nxt[tail] = tail


@njit(**_JIT)
def _gather(v, valid, lo, a, b, val, pos, m):
    """Append the valid values of ``[a, b)`` (and their positions) at ``val[m:]``; returns the new length."""
    for p in range(a, b):
        if valid[p - lo]:
            val[m] = v[p]
            pos[m] = p
            m += 1
    return m


@njit(**_JIT)
def window_quantiles(v, S, E, q, method, skip, min_periods, i0, i1, out):
    """``out[i]`` = the quantile of windows ``i0 <= i < i1``, ``[S[i], E[i])`` of ``v`` (see the module).

    ``method``: a :data:`METHODS` code; ``skip``: NaN is not a value (else a window holding one is NaN);
    ``min_periods``: fewer values (after skipping) give NaN. Calls on disjoint window ranges run at once.
    """
    if i1 <= i0:
        return
    lo = S[i0]
    hi = E[i1 - 1]
    valid = np.empty(hi - lo, np.bool_)  # over the windows' span: a range of windows reads only its values
    nans = np.zeros(hi - lo + 1, np.int64)
    for p in range(lo, hi):
        ok = v[p] == v[p]
        valid[p - lo] = ok
        nans[p - lo + 1] = nans[p - lo] + (0 if ok else 1)
    longest = 1
    for i in range(i0, i1):
        if E[i] - S[i] > longest:
            longest = E[i] - S[i]
    cap = longest + 2  # a phase's parts are each at most a window long
    valA = np.empty(cap, np.float64)
    posA = np.empty(cap, np.int64)
    rankA = np.empty(cap, np.int32)
    nxtA = np.empty(cap + 2, np.int32)
    prvA = np.empty(cap + 2, np.int32)
    valB = np.empty(cap, np.float64)
    posB = np.empty(cap, np.int64)
    rankB = np.empty(cap, np.int32)
    nxtB = np.empty(cap + 2, np.int32)
    prvB = np.empty(cap + 2, np.int32)
    tv = np.empty(cap, np.float64)
    tp = np.empty(cap, np.int64)
    nv = np.empty(cap, np.float64)
    npos = np.empty(cap, np.int64)
    big = cap >= RADIX_MIN
    k1 = np.empty(cap if big else 1, np.uint64)
    k2 = np.empty(cap if big else 1, np.uint64)
    q1 = np.empty(cap if big else 1, np.int64)
    q2 = np.empty(cap if big else 1, np.int64)
    count = np.empty(_BUCKETS, np.int64)
    mB = 0  # the previous phase's B: its sorted values of [c, e_last)
    c = lo
    e_last = lo
    i = i0
    while i < i1:
        # a phase: windows i.. with S[j] <= c, cut at c = E[i]; A = [S[i], c) loses values, B = [c, e) gains
        a0 = S[i]
        c_new = E[i]
        j_end = i
        while j_end < i1 and S[j_end] <= c_new:
            j_end += 1
        # A: the previous B's sorted values from a0 on (its range ended at e_last <= c_new) merged in one
        # pass with the sorted values of [max(a0, e_last), c_new)
        nn = _gather(v, valid, lo, max(a0, e_last), c_new, nv, npos, 0)
        _sort_values(v, nv, npos, nn, tv, tp, k1, k2, q1, q2, count)
        kept = 0
        for x in range(mB):
            if posB[x] >= a0:
                tv[kept] = valB[x]
                tp[kept] = posB[x]
                kept += 1
        mA = _merge(tv, tp, 0, kept, nv, npos, 0, nn, valA, posA, 0)
        c = c_new
        e_last = E[j_end - 1]
        mB = _gather(v, valid, lo, c, e_last, valB, posB, 0)
        _sort_values(v, valB, posB, mB, tv, tp, k1, k2, q1, q2, count)
        _link(posA, a0, mA, rankA, nxtA, prvA)
        _link(posB, c, mB, rankB, nxtB, prvB)
        headA, tailA, headB, tailB = mA, mA + 1, mB, mB + 1
        for p in range(e_last - 1, c - 1, -1):  # B starts empty: its values unlinked, last first
            if valid[p - lo]:
                r = rankB[p - c]
                nxtB[prvB[r]] = nxtB[r]
                prvB[nxtB[r]] = prvB[r]
        pa = nxtA[headA]  # cursors: the first value of each list not among the t smallest
        pb = tailB
        sa = 0
        sb = 0
        s_at = a0
        e_at = c
        for w in range(i, j_end):
            s, e = S[w], E[w]
            for p in range(s_at, s):  # values leave A
                if valid[p - lo]:
                    r = rankA[p - a0]
                    if r == pa:
                        pa = nxtA[r]
                    elif r < pa:  # before the cursor (the tail is after every node)
                        sa -= 1
                    nxtA[prvA[r]] = nxtA[r]
                    prvA[nxtA[r]] = prvA[r]
            s_at = s
            for p in range(e_at, e):  # values enter B, where they were
                if valid[p - lo]:
                    r = rankB[p - c]
                    nxtB[prvB[r]] = r
                    prvB[nxtB[r]] = r
                    if r < pb:  # among B's values before its cursor ...
                        if pa == tailA or valB[r] < valA[pa]:  # ... and below A's: one more of the smallest
                            sb += 1
                        else:
                            pb = r
            e_at = e
            n = (e - s) - (nans[e - lo] - nans[s - lo])
            if (not skip and n != e - s) or n < min_periods or n == 0:
                out[w] = np.nan
                continue
            k = _rank(n, q, method)
            t = sa + sb
            while t < k:  # the smaller cursor value joins the t smallest (ties: A's position is first)
                if pb == tailB or (pa != tailA and valA[pa] <= valB[pb]):
                    pa = nxtA[pa]
                    sa += 1
                else:
                    pb = nxtB[pb]
                    sb += 1
                t += 1
            while t > k:  # the larger value before a cursor leaves them
                ra = prvA[pa]
                rb = prvB[pb]
                if rb == headB or (ra != headA and valA[ra] > valB[rb]):
                    pa = ra
                    sa -= 1
                else:
                    pb = rb
                    sb -= 1
                t -= 1
            # the value of rank k, and the next
            if pb == tailB or (pa != tailA and valA[pa] <= valB[pb]):
                x0 = valA[pa]
                na = nxtA[pa]
                if k + 1 >= n:
                    x1 = x0
                elif pb == tailB or (na != tailA and valA[na] <= valB[pb]):
                    x1 = valA[na]
                else:
                    x1 = valB[pb]
            else:
                x0 = valB[pb]
                nb = nxtB[pb]
                if k + 1 >= n:
                    x1 = x0
                elif nb == tailB or (pa != tailA and valA[pa] <= valB[nb]):
                    x1 = valA[pa]
                else:
                    x1 = valB[nb]
            out[w] = _result(n, q, method, x0, x1)
        i = j_end


def window_quantiles_reference(v, S, E, q, method, skip=False, min_periods=1):
    """Each window recomputed with numpy: ``numpy.quantile(..., method=)`` or ``numpy.median``."""
    v = np.asarray(v, dtype=np.float64)
    name = {c: m for m, c in METHODS.items()}[method] if isinstance(method, int) else method
    out = np.empty(len(S))
    for i, (s, e) in enumerate(zip(S, E)):
        x = v[s:e]
        if skip:
            x = x[~np.isnan(x)]
        if len(x) == 0 or len(x) < min_periods or (not skip and np.isnan(x).any()):
            out[i] = np.nan
            continue
        with np.errstate(invalid="ignore"):
            out[i] = np.median(x) if name == "median" else np.quantile(x, q, method=name)
    return out
