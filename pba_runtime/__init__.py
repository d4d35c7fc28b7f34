"""pba-runtime: sliding-window aggregation with PBA (Parallel Boundary Aggregator).

Examples
--------
>>> import pba_runtime as pr
>>> win = pr.CountWindow(range=3, slide=1)
>>> with pr.create("pba", win, "max") as op:
...     op.insert(5.0), op.insert(1.0), op.insert(2.0), op.insert(0.0)
([], [], [(3, 5.0)], [(4, 2.0)])
"""

from .aggregations import BUILTIN_AGGREGATIONS, Aggregation, Kernel, UfuncKernel, get_aggregation, moment_sketch
from .algorithms import ALGORITHMS, AUTO_PBA_MIN_SLICES, create, register, resolve_auto
from .algorithms.base import SlicedAggregator, WindowOperator
from .api import sliding_aggregate
from .chunking import generalized_chunk_size, optimal_chunk_size, plan_chunk_size, theorem1, theorem2
from .logs import configure_logging
from .pool import WorkerPool, default_pool
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
    "SlicedAggregator",
    "TimeWindow",
    "UfuncKernel",
    "WindowOperator",
    "WorkerPool",
    "configure_logging",
    "create",
    "default_pool",
    "generalized_chunk_size",
    "get_aggregation",
    "moment_sketch",
    "optimal_chunk_size",
    "plan_chunk_size",
    "register",
    "replay",
    "Replay",
    "resolve_auto",
    "sliding_aggregate",
    "theorem1",
    "theorem2",
]
