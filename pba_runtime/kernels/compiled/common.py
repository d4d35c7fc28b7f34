"""What every compiled merge shares: the combine codes, the tuning thresholds, numba's options and the
scalar combines as numpy's ufuncs compute them (each inlined into its own copy of a merge)."""

from __future__ import annotations

import math

from numba import njit

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
    fraction of a division (``mean`` over ``2^k`` values)."""
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
def _fill_ends(ends, a0, a1, first_end, step):
    """``ends[a] = first_end + a*step`` for ``a`` in ``[a0, a1)`` (nothing when ``ends`` is empty)."""
    if ends.shape[0] > 0:
        e = ends[a0:a1]
        start = first_end + a0 * step
        for i in range(a1 - a0):
            e[i] = start + i * step
