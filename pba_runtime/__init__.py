"""pba-runtime: sliding-window aggregation with PBA (Parallel Boundary Aggregator).

Examples
--------
>>> import pba_runtime as pr
>>> win = pr.CountWindow(range=3, slide=1)
>>> with pr.create("pba", win, "max") as op:
...     op.insert(5.0), op.insert(1.0), op.insert(2.0), op.insert(0.0)
([], [], [(3, 5.0)], [(4, 2.0)])
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and editors; at run time each name is imported when first used
    from .aggregations import BUILTIN_AGGREGATIONS, Aggregation, Kernel, UfuncKernel, get_aggregation, moment_sketch
    from .algorithms import ALGORITHMS, AUTO_PBA_MIN_SLICES, create, register, resolve_auto
    from .algorithms.base import SlicedAggregator, WindowOperator
    from .api import sliding_aggregate
    from .chunking import generalized_chunk_size, optimal_chunk_size, plan_chunk_size, theorem1, theorem2
    from .logs import configure_logging
    from .pool import WorkerPool, default_pool
    from .quantiles import Quantile, QuantileSketch, quantile
    from .query import Query, aggregate
    from .replay import Replay, replay
    from .windows import CountWindow, TimeWindow

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS",
    "AUTO_PBA_MIN_SLICES",
    "Aggregation",
    "BUILTIN_AGGREGATIONS",
    "CountWindow",
    "Kernel",
    "Query",
    "SlicedAggregator",
    "TimeWindow",
    "UfuncKernel",
    "WindowOperator",
    "WorkerPool",
    "aggregate",
    "configure_logging",
    "create",
    "default_pool",
    "generalized_chunk_size",
    "get_aggregation",
    "moment_sketch",
    "optimal_chunk_size",
    "plan_chunk_size",
    "quantile",
    "Quantile",
    "QuantileSketch",
    "register",
    "replay",
    "Replay",
    "resolve_auto",
    "sliding_aggregate",
    "theorem1",
    "theorem2",
]

#: Where each public name is defined. ``import pba_runtime`` imports none of them (nor numpy): the first
#: use of a name imports its module (PEP 562), so the ``pba-run`` command can start its job's forkserver
#: before it imports the rest (:mod:`pba_runtime.forkserver`), and a process that needs one module does
#: not pay for all of them.
_WHERE = {
    "aggregations": ("BUILTIN_AGGREGATIONS", "Aggregation", "Kernel", "UfuncKernel", "get_aggregation",
                     "moment_sketch"),
    "algorithms": ("ALGORITHMS", "AUTO_PBA_MIN_SLICES", "create", "register", "resolve_auto"),
    "algorithms.base": ("SlicedAggregator", "WindowOperator"),
    "api": ("sliding_aggregate",),
    "chunking": ("generalized_chunk_size", "optimal_chunk_size", "plan_chunk_size", "theorem1", "theorem2"),
    "logs": ("configure_logging",),
    "pool": ("WorkerPool", "default_pool"),
    "quantiles": ("Quantile", "QuantileSketch", "quantile"),
    "query": ("Query", "aggregate"),
    "replay": ("Replay", "replay"),
    "windows": ("CountWindow", "TimeWindow"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:  # a submodule (``pr.kernels``), imported on first use as the names are
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package's module type. Importing a submodule sets the package's attribute of that name to it:
    ``pr.replay`` stays the function of :mod:`pba_runtime.replay` (reach the module through
    ``importlib.import_module``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "replay" and isinstance(value, types.ModuleType):
            value = value.replay
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
