"""Products: ``geomean``, the geometric mean, kept as ``(sum of ln x, count)`` (values ``>= 0``).

Examples
--------
>>> from pba_runtime.aggregations import get_aggregation
>>> g = get_aggregation("geomean")
>>> round(g.lower(g.combine(g.lift(2.0), g.lift(8.0))), 12)
4.0
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
from .sums import _pair_add, _pair_sub


def _geo_lift(v):
    return (_log(_non_negative(_real(v, "geomean"), "geomean")), 1.0)


def _geo_kl(v):
    _non_negative_array(v, "geomean")
    with np.errstate(divide="ignore"):
        return np.stack([np.log(v), np.ones(len(v))], axis=-1)


def _geo_lower(p):
    return math.exp(p[0] / p[1])


def _geo_klower(a):
    return np.exp(a[..., 0] / a[..., 1])


register_builtin(Aggregation(
    name="geomean", lift=_geo_lift, combine=_pair_add, lower=_geo_lower, identity=(0.0, 0.0), inverse=_pair_sub,
    commutative=True, result="float", count_column=1,
    kernel=UfuncKernel([(np.add, 2)], (0.0, 0.0), lift=_geo_kl, lower=_geo_klower),
    compiled=CompiledForms(exact="pair", stepwise="geomean"),
))
