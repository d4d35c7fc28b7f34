"""Plain-Python aggregation functions the compiled engines compile (numba), shared by the test modules.

Module-level, so the engines can name them (the stepwise engine caches their loops on disk by name).
"""

from __future__ import annotations


def nan_max(a, b):
    """max that propagates NaN as numpy does (associative over NaN, unlike Python's ``max``)."""
    return a if (a >= b or a != a) else b


def absolute(v):
    return abs(v)


def same(p):
    return p


def pair(v):
    return (v, v)


def pair_min_max(a, b):
    """(min, max) of two (min, max) pairs, NaN-propagating."""
    lo = a[0] if (a[0] <= b[0] or a[0] != a[0]) else b[0]
    hi = a[1] if (a[1] >= b[1] or a[1] != a[1]) else b[1]
    return (lo, hi)


def spread(p):
    return p[1] - p[0]


def pair_add(a, b):
    return (a[0] + b[0], a[1] + b[1])


def pair_sub(t, a):
    return (t[0] - a[0], t[1] - a[1])


def ratio(p):
    return p[0] / p[1] if p[1] else float("nan")


def value_one(v):
    return (v, 1.0)
