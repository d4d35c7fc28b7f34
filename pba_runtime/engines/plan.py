"""Which batch engine an operator runs, chosen once when it is built: a frozen plan and the runner it builds.

:meth:`BatchPlan.of` reads the window, the aggregation and the kernel engine (``engine=``) and names one
engine of :data:`ENGINES`; :meth:`BatchPlan.build` binds that engine's functions to the operator, giving
the :class:`Runner` the operator holds (``PBA._batch``), whose methods its ``insert_many``, ``flush`` and
``sliding_aggregate`` call directly. Every fast engine names its reference, the engine its results
equal (``tests/test_engines.py`` checks each against it).

Examples
--------
>>> import pba_runtime as pr
>>> with pr.create("sba", pr.CountWindow(range=4, slide=1), "max", engine="compiled") as op:
...     op._plan.engine, ENGINES[op._plan.engine].reference
('count_lean', 'count_slices')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MethodType
from typing import Any

from ..aggregations import quiet_non_finite
from . import count_batch, time_batch

__all__ = ["BatchEngine", "BatchPlan", "Runner", "ENGINES"]


@quiet_non_finite
def insert_per_tuple(op, values, timestamps=None):
    """The per-tuple engine's batch: the slicing layer's ``insert_many``, one tuple at a time (the
    ``"python"`` engine, and aggregations without a kernel)."""
    op._leave_tuple_mode()
    return op._insert_each(values, timestamps)


@dataclass(frozen=True)
class BatchEngine:
    """One batch engine: its functions of the operator, and the engine its results equal (``reference``)."""

    name: str
    reference: str  # an engine of ENGINES, or "per_tuple" itself: the Python per-tuple operator
    insert_many: Callable
    flush: Callable | None = None  # time windows: the end of stream
    insert_and_flush: Callable | None = None  # a batch and the end of stream in one call


ENGINES: dict[str, BatchEngine] = {e.name: e for e in (
    BatchEngine("per_tuple", "per_tuple", insert_per_tuple),
    BatchEngine("count_lean", "count_slices", count_batch.insert_lean),
    BatchEngine("count_slices", "per_tuple", count_batch.insert_slices),
    BatchEngine("time_fused", "time_episodes", time_batch.insert_fused, time_batch.flush_fused,
                time_batch.insert_and_flush_fused),
    BatchEngine("time_episodes", "per_tuple", time_batch.insert_episodes, time_batch.flush_episodes),
)}


class Runner:
    """A plan's engine bound to one operator: ``insert_many(values, timestamps)``, ``flush()`` (``None``
    on count windows and the per-tuple engine) and ``insert_and_flush`` (``None``: ``insert_many`` then
    ``flush``); ``lean``: the lean engine (``PBA.lean_plan`` asks)."""

    __slots__ = ("insert_many", "flush", "insert_and_flush", "lean")

    def __init__(self, engine: BatchEngine, op: Any):
        self.insert_many = MethodType(engine.insert_many, op)
        self.flush = None if engine.flush is None else MethodType(engine.flush, op)
        self.insert_and_flush = None if engine.insert_and_flush is None else MethodType(engine.insert_and_flush, op)
        self.lean = engine.name == "count_lean"


@dataclass(frozen=True)
class BatchPlan:
    """The batch engine of one operator (``engine``, a key of :data:`ENGINES`) and how the episode engine
    slices and folds (``compiled_slicing``: slices in compiled passes, ``kernels/time_slicing.py``;
    ``compiled_fold``: scalar and column partials folded there too)."""

    engine: str
    compiled_slicing: bool = False
    compiled_fold: bool = False

    @classmethod
    def of(cls, op: Any, fused: bool = True) -> BatchPlan:
        """The plan of operator ``op`` (its window, aggregation, kernel and ``engine``); ``fused=False``
        runs a time window's episode engine even where the fused one applies (its reference)."""
        engine = op.engine
        if op._kernel is None or engine.name == "python":
            return cls("per_tuple")
        if op._is_time:
            compiled_slicing = engine.compiled
            compiled_fold = compiled_slicing and engine.layout in ("scalar", "columns")
            name = "time_fused" if fused and engine.compiled and time_batch.fused_layout(engine) else "time_episodes"
            return cls(name, compiled_slicing, compiled_fold)
        # count windows, slide 1, the compiled merge of scalar partials: the lean engine's case
        agg = op.agg
        lean = (op._s == 1 and op._q > 1 and engine.compiled and engine.layout == "scalar"
                and engine.from_values is None and not agg.positional and agg.float_passthrough)
        return cls("count_lean" if lean else "count_slices")

    def build(self, op: Any) -> Runner:
        """The runner operator ``op`` holds: this plan's engine bound to it."""
        return Runner(ENGINES[self.engine], op)
