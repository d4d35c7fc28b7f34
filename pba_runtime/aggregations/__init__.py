"""Aggregations as monoids over partials, one module per family (the built-ins register here).

Each family module holds every form of its aggregations: the Python reference (``lift``/``combine``/
``lower`` on floats and tuples, the per-tuple path and the oracle of the others), the numpy
:class:`Kernel` (slice reductions, csa and lcs by ``accumulate``, bulk merges) and the
:class:`CompiledForms` that say which compiled merge, lift, lower and per-tuple monoid the engines
may run. A new built-in is a module here (or a few lines in its family's) and nothing else.

Examples
--------
>>> agg = get_aggregation("mean")
>>> agg.lower(agg.combine(agg.lift(1.0), agg.lift(3.0)))
2.0
>>> import numpy as np
>>> get_aggregation("max").kernel.accumulate(np.array([1.0, 3.0, 2.0]), axis=0, reverse=True).tolist()
[3.0, 3.0, 2.0]
"""

from __future__ import annotations

from . import collect, extrema, moments, products, sums  # noqa: F401  (each registers its built-ins)
from .base import (  # noqa: F401  (WrappedKernel: for the engines' kernels)
    BUILTIN_AGGREGATIONS,
    Aggregation,
    CompiledForms,
    Kernel,
    UfuncKernel,
    WrappedKernel,
    as_float_array,
    get_aggregation,
    quiet_non_finite,
)
from .extrema import ArgmaxKernel, ArgminKernel, _argmax2, _max2, _min2  # noqa: F401  (the tests' references)
from .moments import moment_sketch
from .skipping import check_min_periods, skip_missing
from .sums import StdKernel, VarKernel, _chan, _chan_inverse  # noqa: F401  (the tests' references)

__all__ = [
    "Aggregation",
    "CompiledForms",
    "Kernel",
    "UfuncKernel",
    "BUILTIN_AGGREGATIONS",
    "get_aggregation",
    "moment_sketch",
    "skip_missing",
    "check_min_periods",
    "as_float_array",
    "quiet_non_finite",
]
