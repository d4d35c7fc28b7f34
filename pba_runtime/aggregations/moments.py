"""Moments: the moment sketch of Gan et al. (``moment_sketch``, ``moment_sketch(k)``).

Examples
--------
>>> from pba_runtime.aggregations import moment_sketch
>>> moment_sketch(2).name
'moment_sketch[2]'
"""

from __future__ import annotations

import math

import numpy as np

from .base import (
    Aggregation,
    CompiledForms,
    UfuncKernel,
    _log,
    _non_negative,
    _non_negative_array,
    _real,
    register_builtin,
)

_INF = math.inf


def moment_sketch(k: int = 10) -> Aggregation:
    """The moment sketch of Gan et al.: ``(min, max, count, sum x^1..x^k, sum ln(x)^1..ln(x)^k)``.

    Values must be ``>= 0`` (the ``ln`` terms; a negative value raises ``ValueError``, as for
    ``geomean``); a zero gives ``ln`` terms of ``-inf``, as numpy does.

    Examples
    --------
    >>> ms = moment_sketch(2)
    >>> ms.lower(ms.combine(ms.lift(1.0), ms.lift(2.0))).tolist()[:5]
    [1.0, 2.0, 2.0, 3.0, 5.0]
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    width = 3 + 2 * k
    name = "moment_sketch" if k == 10 else f"moment_sketch[{k}]"

    def lift(v):
        x = _non_negative(_real(v, name), name)
        out = [x, x, 1.0]
        p = 1.0
        for _ in range(k):
            p *= x
            out.append(p)
        lx = _log(x)
        p = 1.0
        for _ in range(k):
            p *= lx
            out.append(p)
        return tuple(out)

    def combine(a, b):
        lo = a[0] if (a[0] <= b[0] or a[0] != a[0]) else b[0]
        hi = a[1] if (a[1] >= b[1] or a[1] != a[1]) else b[1]
        return (lo, hi, *[x + y for x, y in zip(a[2:], b[2:])])

    def klift(v):
        _non_negative_array(v, name)
        out = np.empty((len(v), width))
        out[:, 0] = v
        out[:, 1] = v
        out[:, 2] = 1.0
        p = np.ones(len(v))
        for j in range(k):
            p = p * v
            out[:, 3 + j] = p
        with np.errstate(divide="ignore", invalid="ignore"):
            lx = np.log(v)
        p = np.ones(len(v))
        for j in range(k):
            p = p * lx
            out[:, 3 + k + j] = p
        return out

    identity = (_INF, -_INF) + (0.0,) * (width - 2)
    return Aggregation(
        name=name, lift=lift, combine=combine, lower=lambda p: np.asarray(p, dtype=np.float64),
        identity=identity, commutative=True, result="vector", count_column=2,
        compiled=CompiledForms(lift="lift_moments", lift_refuses_negative=True,
                               stepwise="moment_sketch" if k == 10 else None),
        kernel=UfuncKernel([(np.minimum, 1), (np.maximum, 1), (np.add, width - 2)], identity, lift=klift,
                           lower=lambda a: np.array(a, dtype=np.float64)),
    )


register_builtin(moment_sketch(10))
