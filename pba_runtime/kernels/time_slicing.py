"""Compiled slicing of a time-window batch: each tuple's slice, where the slicing restarts, each slice's partial.

A batch of ``n`` tuples for a time window is cut into slices (slice = slide) before PBA merges them. In numpy
that is a dozen passes over the batch (the slice of each tuple, the first window holding it, the tuples that
restart the slicing, the segment starts, ``reduceat``, the scatter into the dense slice array), each with its
temporaries, which cost far more than the window merge. Here it is two compiled passes: :func:`time_slices` over
the timestamps, then :func:`fold_scalar` / :func:`fold_columns` over each episode's partials, straight into the
dense slice array.

The slow references are :func:`pba_runtime.windows.time_slices` and the kernel's ``reduce_segments``
(the numpy engine's path in ``pba_runtime/algorithms/pba.py``); ``tests/test_kernels.py``
checks fast == slow. A slice's partial is the left fold of its tuples' partials, oldest first,
as the per-tuple path builds it (``max``/``min`` bit for bit; sums to rounding: numpy's
``reduceat`` adds long segments pairwise).

Examples
--------
>>> import numpy as np
>>> ts = np.array([0, 3, 12, 15, 200], dtype=np.int64)
>>> G, starts = time_slices(ts, 10, 0, 30, 0, False)
>>> G.tolist(), starts.tolist()       # a tuple at 200 starts a new episode: every older window is complete
([0, 0, 1, 1, 20], [0, 4])
>>> dense = np.zeros(2)
>>> fold_scalar(np.array([1.0, 2.0, 3.0, 4.0]), G[:4], 0, dense, 0)   # code 0: add
>>> dense.tolist()
[3.0, 7.0]
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .compiled import _JIT, ADD, COLUMNS_ROW_MIN, FMAX, MAX, MIN, MUL, c_add, c_fmax, c_fmin, c_max, c_min, c_mul
from .lean_load import lean_loads
from .read_only import read_only

__all__ = ["time_slices", "fold_scalar", "fold_columns"]


@njit(**_JIT)
def _time_slices(ts, s, off, r, last_slice, has_last, G, starts):
    """``G[i] = (ts[i] - off) // s``; ``starts`` gets the tuples whose first window begins after the
    previous tuple's slice (the slicing restarts there); returns how many.

    Timestamps are sorted, so a 64-bit division is paid only when a tuple
    leaves the current slice; the first window holding ``t`` begins after slice ``p`` iff
    ``t - off >= p*s + r`` (no division; in int64 by the window's timestamp range).
    """
    nf = 0
    have = has_last
    g = last_slice
    lo = g * s if have else 0  # the current slice is [lo, lo + s) (relative to off)
    hi = lo + s if have else 0
    for i in range(ts.shape[0]):
        t = ts[i] - off
        fresh = not have or t >= lo + r  # lo: the start of the previous tuple's slice
        if t >= hi or not have:
            g = t // s  # floor division, as Python's, for negative timestamps too
            lo = g * s
            hi = lo + s
            have = True
        if fresh:
            starts[nf] = i
            nf += 1
        G[i] = g
    return nf


def time_slices(ts: np.ndarray, s: int, off: int, r: int, last_slice: int, has_last: bool
                ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pba_runtime.windows.time_slices` in one compiled pass: ``(G, starts)``."""
    G = np.empty(len(ts), dtype=np.int64)
    starts = np.empty(len(ts), dtype=np.int64)
    nf = _time_slices(read_only(np.ascontiguousarray(ts, dtype=np.int64)), s, off, r, last_slice, has_last, G,
                      starts)
    return G, starts[:nf]


@njit(inline="always", cache=True)
def _fold(P, G, S0, dense, comb):
    """``dense[g - S0]`` = the left fold of the partials of the tuples in slice ``g`` (``G`` sorted)."""
    n = P.shape[0]
    i = 0
    while i < n:
        g = G[i]
        acc = P[i]
        i += 1
        while i < n and G[i] == g:
            acc = comb(acc, P[i])
            i += 1
        dense[g - S0] = acc


@njit(inline="always", cache=True)
def _fold_op(P, G, S0, dense, op):
    if op == ADD:
        _fold(P, G, S0, dense, c_add)
    elif op == MAX:
        _fold(P, G, S0, dense, c_max)
    elif op == MIN:
        _fold(P, G, S0, dense, c_min)
    elif op == MUL:
        _fold(P, G, S0, dense, c_mul)
    elif op == FMAX:
        _fold(P, G, S0, dense, c_fmax)
    else:
        _fold(P, G, S0, dense, c_fmin)


@njit(**_JIT)
def fold_scalar(P, G, S0, dense, op):
    """Scalar partials ``P`` of tuples in slices ``G`` (sorted) folded into ``dense`` (slice ``S0`` first)
    by the combine of code ``op`` (:mod:`.compiled`'s codes); slices without a tuple keep their value."""
    _fold_op(P, G, S0, dense, op)


@njit(**_JIT)
def fold_columns(P, G, S0, dense, ops):
    """:func:`fold_scalar` for vector partials whose column ``k`` combines by ``ops[k]``.

    Narrow partials (``mean``'s two sums) are folded a column at a time, a strided pass each. From
    :data:`~.compiled.COLUMNS_ROW_MIN` columns a pass per column would read every cache line of ``P``
    once per column (``moment_sketch``: 23), so the tuples are walked once instead, and in each tuple
    every run of columns with one combine (as :func:`~.compiled.merge_columns` walks its rows). Each
    value is folded in the same order either way (the same bits). The runs are found once per call,
    not at each tuple.
    """
    K = P.shape[1]
    if K < COLUMNS_ROW_MIN:
        for k in range(K):
            _fold_op(P[:, k], G, S0, dense[:, k], ops[k])
        return
    bounds = np.empty(K + 1, dtype=np.int64)  # the runs of columns with one combine: [bounds[j], bounds[j + 1])
    runs = 0
    for k in range(K):
        if k == 0 or ops[k] != ops[k - 1]:
            bounds[runs] = k
            runs += 1
    bounds[runs] = K
    n = P.shape[0]
    i = 0
    while i < n:
        g = G[i]
        row = g - S0
        for k in range(K):
            dense[row, k] = P[i, k]
        i += 1
        while i < n and G[i] == g:
            for j in range(runs):
                k0 = bounds[j]
                _fold_row_op(P, i, dense, row, k0, bounds[j + 1], ops[k0])
            i += 1


@njit(inline="always", cache=True)
def _fold_row(P, i, dense, row, k0, k1, comb):
    """``dense[row, k] = comb(dense[row, k], P[i, k])`` for the columns ``[k0, k1)`` (2-D indexing: a row
    view would cost numba a reference count)."""
    for k in range(k0, k1):
        dense[row, k] = comb(dense[row, k], P[i, k])


@njit(inline="always", cache=True)
def _fold_row_op(P, i, dense, row, k0, k1, op):
    if op == ADD:
        _fold_row(P, i, dense, row, k0, k1, c_add)
    elif op == MAX:
        _fold_row(P, i, dense, row, k0, k1, c_max)
    elif op == MIN:
        _fold_row(P, i, dense, row, k0, k1, c_min)
    elif op == MUL:
        _fold_row(P, i, dense, row, k0, k1, c_mul)
    elif op == FMAX:
        _fold_row(P, i, dense, row, k0, k1, c_fmax)
    else:
        _fold_row(P, i, dense, row, k0, k1, c_fmin)


# Loading from the disk cache without numba's compiler set-up (lean_load.py).
lean_loads(globals())
