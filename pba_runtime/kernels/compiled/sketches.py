"""The quantile sketch over windows given by their bounds: a running histogram of bucket keys.

A batch of windows over values in memory needs no partials: bucket counts are integers, so the window's
histogram moves from one window to the next by adding the keys that came and subtracting those that left
(the sketch's counts are invertible even though its collapse is not). A Fenwick tree over each sign's keys
finds the bucket of a rank in ``O(log keys)``; the window's top key per sign (what the sketch's collapse is
relative to) is the largest key whose count is not zero. The result of every window is the one the monoid of
:mod:`pba_runtime.aggregations.sketches` gives for the same values, merged in any order: the tests assert
it against :func:`~pba_runtime.aggregations.sketches.lower_parts` over the combined lifts.

Windows are ``[S[i], E[i])`` with both ends non-decreasing (as :func:`pba_runtime.windows.window_spans` gives
them); several quantiles share one pass (``qs``, one output column each).

Examples
--------
>>> import math
>>> import numpy as np
>>> v = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0])
>>> S = np.arange(5); E = S + 3
>>> out = np.empty((5, 1))
>>> ln_gamma = math.log(1.02 / 0.98)
>>> window_sketch_quantiles(v, S, E, np.array([0.5]), ln_gamma, 2048, False, 1, 0, 5, out)
>>> out[:, 0].round(2).tolist()  # within 2% of the exact lower medians 3, 1, 4, 5, 5
[3.0, 0.98, 3.97, 5.05, 5.05]
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...aggregations.sketches import _rep, bucket_keys
from .common import _JIT

__all__ = ["window_sketch_quantiles"]


@njit(inline="always", cache=True)
def _fen_add(tree, i, d):
    i += 1
    n = len(tree)
    while i < n:
        tree[i] += d
        i += i & (-i)


@njit(inline="always", cache=True)
def _fen_find(tree, r, top_bit):
    """The smallest index whose prefix count exceeds ``r`` (counts ``>= 0``)."""
    pos = 0
    b = top_bit
    while b:
        nxt = pos + b
        if nxt < len(tree) and tree[nxt] <= r:
            pos = nxt
            r -= tree[nxt]
        b >>= 1
    return pos


@njit(**_JIT)
def window_sketch_quantiles(v, S, E, qs, ln_gamma, K, skip, min_periods, i0, i1, out):
    """``out[i, j]`` := the sketch's ``qs[j]`` result over ``v[S[i]:E[i]]``, for ``i0 <= i < i1``.

    ``skip``: NaN is not a value and a window needs ``min_periods`` (at least one) others; else a window
    holding NaN is NaN.
    """
    if i1 <= i0:
        return
    lo, hi = S[i0], E[i1 - 1]
    kind = np.empty(max(hi - lo, 1), dtype=np.int8)
    key = np.zeros(max(hi - lo, 1), dtype=np.int64)
    bucket_keys(v[lo:hi], ln_gamma, kind, key)
    kmin = np.zeros(2, dtype=np.int64)
    kmax = np.zeros(2, dtype=np.int64)
    seen = np.zeros(2, dtype=np.bool_)
    for i in range(hi - lo):
        s = kind[i] - 4
        if s >= 0:
            if not seen[s] or key[i] < kmin[s]:
                kmin[s] = key[i]
            if not seen[s] or key[i] > kmax[s]:
                kmax[s] = key[i]
            seen[s] = True
    size = np.empty(2, dtype=np.int64)
    top_bit = np.empty(2, dtype=np.int64)
    for s in range(2):
        size[s] = kmax[s] - kmin[s] + 1 if seen[s] else 1
        b = 1
        while b * 2 <= size[s]:
            b *= 2
        top_bit[s] = b
    hist_p = np.zeros(size[0], dtype=np.int64)
    hist_n = np.zeros(size[1], dtype=np.int64)
    tree_p = np.zeros(size[0] + 1, dtype=np.int64)
    tree_n = np.zeros(size[1] + 1, dtype=np.int64)
    other = np.zeros(4, dtype=np.int64)  # NaN, -inf, +inf, zeros in the window
    n_sign = np.zeros(2, dtype=np.int64)
    top = np.full(2, -1, dtype=np.int64)  # the window's largest key per sign, as an index (-1: none)
    scale = np.log(2.0 / (np.exp(ln_gamma) + 1.0))
    a = b = lo  # the histogram holds v[a:b]
    for w in range(i0, i1):
        s0, e0 = S[w], E[w]
        while b < e0:  # arrivals
            c = kind[b - lo]
            if c >= 4:
                j = key[b - lo] - kmin[c - 4]
                if c == 4:
                    hist_p[j] += 1
                    _fen_add(tree_p, j, 1)
                else:
                    hist_n[j] += 1
                    _fen_add(tree_n, j, 1)
                n_sign[c - 4] += 1
                if j > top[c - 4]:
                    top[c - 4] = j
            else:
                other[c] += 1
            b += 1
        while a < s0:  # departures
            c = kind[a - lo]
            if c >= 4:
                j = key[a - lo] - kmin[c - 4]
                hist = hist_p if c == 4 else hist_n
                hist[j] -= 1
                _fen_add(tree_p if c == 4 else tree_n, j, -1)
                n_sign[c - 4] -= 1
                t = top[c - 4]
                if n_sign[c - 4] == 0:
                    top[c - 4] = -1
                else:
                    while hist[t] == 0:
                        t -= 1
                    top[c - 4] = t
            else:
                other[c] -= 1
            a += 1
        cnt = other[1] + other[2] + other[3] + n_sign[0] + n_sign[1]
        if (not skip and other[0] > 0) or cnt == 0 or (skip and cnt < min_periods):
            for j in range(len(qs)):
                out[w, j] = np.nan
            continue
        for qi in range(len(qs)):
            r = np.int64(min(max(np.floor((cnt - 1) * qs[qi]), 0.0), cnt - 1.0))
            if r < other[1]:
                out[w, qi] = -np.inf
                continue
            r -= other[1]
            if r < n_sign[1]:  # negatives, largest magnitude first: the (n - 1 - r)-th smallest key
                j = _fen_find(tree_n, n_sign[1] - 1 - r, top_bit[1])
                j = max(j, top[1] - K + 1)  # below the top's range: the collapsed lowest bucket
                out[w, qi] = -_rep(j + kmin[1], ln_gamma, scale)
                continue
            r -= n_sign[1]
            if r < other[3]:
                out[w, qi] = 0.0
                continue
            r -= other[3]
            if r < n_sign[0]:
                j = _fen_find(tree_p, r, top_bit[0])
                j = max(j, top[0] - K + 1)
                out[w, qi] = _rep(j + kmin[0], ln_gamma, scale)
                continue
            out[w, qi] = np.inf
