"""The merges of partials combined by numpy's ufuncs: ``sum``, ``count``, ``mean``, ``max``, ``min``, ``prod``,
``geomean`` (scalar partials, one combine code) and the column partials (``mean``'s two sums,
``moment_sketch``), one combine code per column; their lifts and lowers, and the slide-1 merges from values."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..lean_load import lean_loads
from .common import (
    _JIT,
    ADD,
    COLUMNS_ROW_MIN,
    FMAX,
    MAX,
    MIN,
    MUL,
    SUM_CHUNK,
    _exact_inverse,
    _fill_ends,
    _over,
    _scale,
    c_add,
    c_fmax,
    c_fmin,
    c_max,
    c_min,
    c_mul,
)


@njit(inline="always", cache=True)
def _scalar_rows(X, q, a0, a1, out, comb, lcs, csa, div=1.0):
    """Windows ``[a0, a1)`` over scalar partials (1-D views, any stride).

    Per row: the row's lcs (from its end) and the next row's csa (from its start) in one
    loop, two independent chains, then every window of the row in a loop that vectorises.
    Every loop walks forward over views (the lcs over reversed ones): numba then knows no
    index is negative and drops the wraparound test of each access.
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

    Used from ``SUM_ONE_LOOP_MIN`` slices a row, where the two-pass scratch (16 bytes a slice) no
    longer fits a core's L1 and this one loop beats :func:`_scalar_rows` (``bench/bench_kernel_cpu.py``).
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
    (:func:`_columns_row`; ``bench/bench_kernels.py`` times ``moment_sketch``).
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


# ----------------------------------------------------------------------------- lift and lower
# The numpy forms build temporaries (np.stack, np.where over several arrays); these write
# each output once. Same arithmetic per element as the numpy forms they replace.


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
def lower_ratio(parts, out):
    """``parts[:, 0] / parts[:, 1]`` (``mean``'s lower)."""
    for i in range(parts.shape[0]):
        out[i] = parts[i, 0] / parts[i, 1]


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


# Loading from the disk cache without numba's compiler set-up (lean_load.py).
lean_loads(globals())
