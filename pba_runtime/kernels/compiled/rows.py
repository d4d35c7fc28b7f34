"""Row output: one result per row, over the window that ends at that row, for many keys in one call.

Rows are laid out key after key (key ``k``'s rows are ``bounds[k] : bounds[k + 1]``). Each kernel walks keys
``[k0, k1)`` and writes only those keys' rows, so calls on disjoint key ranges run at once (``nogil``).

:func:`row_bounds` gives each row's window as absolute row indices ``[S[i], E[i])``, pandas' bounds (count
windows: ``FixedWindowIndexer``; time windows: ``VariableWindowIndexer``, ties included); both ends never
decrease along a key, so every window is a FIFO step from the one before. The aggregating kernels are
Two-Stacks over those bounds (the offline form of Hammer et al.'s baseline): a *front* of suffix partials
``F[j] = agg(V[j:mid])``, rebuilt from the values when the window's start reaches ``mid`` ("flip"), and a
*back* partial of ``V[mid:e]`` grown as rows enter; a window is ``F[s] (+) back``. Every value enters the
back once and is in at most one flip, so a key costs ``O(rows)``; nothing is ever subtracted, so a value
(a NaN, an inf, a 1e12) that has left the window affects no later result, and each result carries only the
rounding of its own window's values: the sums are Neumaier-compensated partials, the variances Chan et
al.'s ``(n, mean, M2, lo)`` partials (:func:`.std._chan`, the house's merge, the mean kept as ``mean + lo``).

``skip`` (``missing="skip"``): a NaN is not lifted (the partial of no value); else NaN is a value, numpy's
result. Each kernel's plain-Python form is its ``py_func`` (the same loop, run by the interpreter);
:func:`pba_runtime.engines.rows.row_results_reference` recomputes every row from its definition, and
``tests/test_rows_engine.py`` checks both against the kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..lean_load import lean_loads
from .argmax import pick_max_at
from .common import _JIT, c_fmax, c_max
from .std import _chan

__all__ = ["CLOSED", "row_bounds", "row_nobs", "rows_max", "rows_argmax", "rows_sum", "rows_var"]

#: ``closed`` as a code: bit 0 the left end is closed, bit 1 the right end.
CLOSED = {"neither": 0, "left": 1, "right": 2, "both": 3}


@njit(**_JIT)
def row_bounds(T, bounds, k0, k1, r, closed, timed, S, E):
    """Each row's window ``[S[i], E[i])`` (absolute rows), as pandas bounds it.

    Count windows (``timed`` false; ``T`` unused): ``E = i + 1`` when the right end is closed, else ``i``;
    ``S = i + 1 - r`` (one earlier when the left end is closed), not before the key's first row.
    Time windows: the first row with ``T > T[i] - r`` (``>=`` when the left end is closed), not after
    ``i``; ``E = i + 1`` when the right end is closed (rows tied with ``T[i]`` after ``i`` are out), else
    the first row of ``i``'s ties (the rows with ``T < T[i]``).
    """
    left = closed & 1
    right = closed & 2
    for k in range(k0, k1):
        a = bounds[k]
        b = bounds[k + 1]
        if not timed:
            for i in range(a, b):
                s = i + 1 - r - (1 if left else 0)
                S[i] = s if s > a else a
                E[i] = i + 1 if right else i
            continue
        s = a
        g = a
        for i in range(a, b):
            lo = T[i] - r
            if left:
                while s < i and T[s] < lo:
                    s += 1
            else:
                while s < i and T[s] <= lo:
                    s += 1
            if T[i] != T[g]:
                g = i
            S[i] = s
            E[i] = i + 1 if right else g


@njit(**_JIT)
def row_nobs(V, bounds, k0, k1, S, E, skip, out):
    """The number of values in each row's window: its rows, or (``skip``) its non-NaN rows (a running
    count of integers: exact)."""
    for k in range(k0, k1):
        a = bounds[k]
        b = bounds[k + 1]
        if not skip:
            for i in range(a, b):
                out[i] = E[i] - S[i]
            continue
        n = 0
        top = a
        low = a
        for i in range(a, b):
            while top < E[i]:
                if V[top] == V[top]:
                    n += 1
                top += 1
            while low < S[i]:
                if V[low] == V[low]:
                    n -= 1
                low += 1
            out[i] = n


@njit(inline="always", cache=True)
def _longest(bounds, k0, k1):
    w = 0
    for k in range(k0, k1):
        w = max(w, bounds[k + 1] - bounds[k])
    return w


@njit(**_JIT)
def rows_max(V, bounds, k0, k1, S, E, neg, skip, out):
    """``max`` of each row's window (``neg``: ``-max(-V)``, the ``min``); NaN propagates as ``np.max``
    (``skip``: ignored, as ``np.fmax``); ``-inf`` (``inf`` for ``min``) over no value."""
    F = np.empty(_longest(bounds, k0, k1))
    ninf = -np.inf
    for k in range(k0, k1):
        a = bounds[k]
        b = bounds[k + 1]
        mid = a
        top = a
        back = ninf
        for i in range(a, b):
            s = S[i]
            e = E[i]
            while top < e:
                x = -V[top] if neg else V[top]
                back = c_fmax(back, x) if skip else c_max(back, x)
                top += 1
            if s >= mid:  # the front is spent: rebuild it from the window's values
                acc = ninf
                for j in range(e - 1, s - 1, -1):
                    x = -V[j] if neg else V[j]
                    acc = c_fmax(x, acc) if skip else c_max(x, acc)
                    F[j - a] = acc
                mid = e
                back = ninf
            res = F[s - a] if s < mid else ninf
            res = c_fmax(res, back) if skip else c_max(res, back)
            out[i] = -res if neg else res


@njit(**_JIT)
def rows_argmax(V, T, bounds, k0, k1, S, E, neg, skip, timed, out):
    """``argmax`` of each row's window (``neg``: of ``-V``, the ``argmin``): the oldest row holding the
    largest value (NaN counting as largest, as ``np.argmax``; ``skip``: NaN is no value), as its position
    in the key (count windows) or its timestamp ``T`` (``timed``); 0 over no value."""
    w = _longest(bounds, k0, k1)
    Fv = np.empty(w)
    Fp = np.empty(w, dtype=np.int64)
    ninf = -np.inf
    for k in range(k0, k1):
        a = bounds[k]
        b = bounds[k + 1]
        mid = a
        top = a
        bv = ninf
        bp = -1
        for i in range(a, b):
            s = S[i]
            e = E[i]
            while top < e:
                x = -V[top] if neg else V[top]
                if not skip or x == x:
                    bv, bp = pick_max_at(bv, bp, x, top, -1)
                top += 1
            if s >= mid:
                av = ninf
                ap = -1
                for j in range(e - 1, s - 1, -1):
                    x = -V[j] if neg else V[j]
                    if not skip or x == x:
                        av, ap = pick_max_at(x, j, av, ap, -1)
                    Fv[j - a] = av
                    Fp[j - a] = ap
                mid = e
                bv = ninf
                bp = -1
            rp = pick_max_at(Fv[s - a], Fp[s - a], bv, bp, -1)[1] if s < mid else bp
            if rp < 0:
                out[i] = 0
            else:
                out[i] = T[rp] if timed else rp - a


@njit(inline="always", cache=True)
def _nadd(s, c, x):
    """Neumaier's step: ``s + x`` and the compensation ``c`` grown by its rounding; once the sum is not
    finite (an inf, a NaN, an overflow) the compensation is left alone: the sum is numpy's then."""
    t = s + x
    if t - t == 0.0:
        if abs(s) >= abs(x):
            c += (s - t) + x
        else:
            c += (x - t) + s
    return t, c


@njit(**_JIT)
def rows_sum(V, bounds, k0, k1, S, E, skip, out):
    """``sum`` of each row's window from compensated partials ``(s, c)``: ``s + c`` (``s`` where it is not
    finite: numpy's inf or NaN); ``-0.0`` over no value (``skip``: a NaN is no value)."""
    w = _longest(bounds, k0, k1)
    Fs = np.empty(w)
    Fc = np.empty(w)
    for k in range(k0, k1):
        a = bounds[k]
        b = bounds[k + 1]
        mid = a
        top = a
        bs = -0.0
        bc = 0.0
        for i in range(a, b):
            s = S[i]
            e = E[i]
            while top < e:
                x = V[top]
                if not skip or x == x:
                    bs, bc = _nadd(bs, bc, x)
                top += 1
            if s >= mid:
                As = -0.0
                Ac = 0.0
                for j in range(e - 1, s - 1, -1):
                    x = V[j]
                    if not skip or x == x:
                        As, Ac = _nadd(As, Ac, x)
                    Fs[j - a] = As
                    Fc[j - a] = Ac
                mid = e
                bs = -0.0
                bc = 0.0
            if s < mid:
                rs, rc = _nadd(Fs[s - a], Fc[s - a] + bc, bs)
            else:
                rs, rc = bs, bc
            out[i] = rs + rc if rs - rs == 0.0 else rs


@njit(**_JIT)
def rows_var(V, bounds, k0, k1, S, E, skip, out):
    """Sample variance (ddof=1) of each row's window from Chan et al.'s ``(n, mean, M2, lo)`` partials:
    ``M2 / (n - 1)`` where ``n > 1`` and the mean is finite, else NaN (a window holding NaN or inf, as
    ``np.var(ddof=1)``; ``skip``: a NaN is no value)."""
    w = _longest(bounds, k0, k1)
    F0 = np.empty(w)
    F1 = np.empty(w)
    F2 = np.empty(w)
    F3 = np.empty(w)
    for k in range(k0, k1):
        a = bounds[k]
        b = bounds[k + 1]
        mid = a
        top = a
        b0 = 0.0
        b1 = 0.0
        b2 = 0.0
        b3 = 0.0
        for i in range(a, b):
            s = S[i]
            e = E[i]
            while top < e:
                x = V[top]
                if not skip or x == x:
                    b0, b1, b2, b3 = _chan(b0, b1, b2, b3, 1.0, x, 0.0, 0.0)
                top += 1
            if s >= mid:
                a0 = 0.0
                a1 = 0.0
                a2 = 0.0
                a3 = 0.0
                for j in range(e - 1, s - 1, -1):
                    x = V[j]
                    if not skip or x == x:
                        a0, a1, a2, a3 = _chan(1.0, x, 0.0, 0.0, a0, a1, a2, a3)
                    F0[j - a] = a0
                    F1[j - a] = a1
                    F2[j - a] = a2
                    F3[j - a] = a3
                mid = e
                b0 = 0.0
                b1 = 0.0
                b2 = 0.0
                b3 = 0.0
            if s < mid:
                n, m, M2, _ = _chan(F0[s - a], F1[s - a], F2[s - a], F3[s - a], b0, b1, b2, b3)
            else:
                n, m, M2 = b0, b1, b2
            out[i] = M2 / (n - 1.0) if (n > 1.0 and m - m == 0.0) else np.nan


# Loading from the disk cache without numba's compiler set-up (lean_load.py).
lean_loads(globals())
