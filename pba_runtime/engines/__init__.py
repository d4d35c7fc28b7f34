"""PBA's batch engines: each batch path of the operator, chosen once when it is built.

:mod:`.plan` picks the engine from the window, the aggregation and the kernel engine and builds the
runner the operator holds; :mod:`.count_batch` holds the count windows' engines (lean, from values, from
slices), :mod:`.time_batch` the time windows' (fused, episodes), :mod:`.history` the slice history they
read and leave; :mod:`.keyed` the window output of many keys at once (not an operator's batch). The
arithmetic they call is in :mod:`pba_runtime.kernels` and :mod:`pba_runtime.merge`; the operator and its
per-tuple merger in :mod:`pba_runtime.algorithms.pba`.
"""

from __future__ import annotations

from . import count_batch, history, keyed, time_batch, tuple_path
from .plan import ENGINES, BatchEngine, BatchPlan, Runner

__all__ = ["BatchEngine", "BatchPlan", "Runner", "ENGINES", "count_batch", "history", "keyed", "time_batch",
           "tuple_path"]
