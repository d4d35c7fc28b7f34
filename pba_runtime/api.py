"""One-shot entry point: aggregate a whole array over sliding windows.

Examples
--------
>>> import numpy as np
>>> import pba_runtime as pr
>>> ends, res = pr.sliding_aggregate(np.arange(6.0), window=pr.CountWindow(range=3, slide=2), agg="max")
>>> ends.tolist(), res.tolist()
([3, 5], [2.0, 4.0])
>>> ts = np.array([0, 400, 1_200, 5_000])
>>> pr.sliding_aggregate([1, 2, 3, 4], window=pr.TimeWindow(range=1_000, slide=1_000), agg="count", timestamps=ts)[1].tolist()
[2, 1, 1]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .aggregations import Aggregation
from .algorithms import create
from .pool import WorkerPool
from .windows import CountWindow, TimeWindow

__all__ = ["sliding_aggregate"]


def sliding_aggregate(
    values: Any,
    *,
    window: CountWindow | TimeWindow,
    agg: str | Aggregation,
    algorithm: str = "auto",
    timestamps: Any = None,
    pool: WorkerPool | None = None,
    engine: str = "auto",
) -> tuple[np.ndarray, Any]:
    """Every window result over ``values`` (end of stream included): ``(ends, results)``.

    Parameters
    ----------
    values : array-like
        The stream, oldest first.
    window : CountWindow or TimeWindow
    agg : str or Aggregation
    algorithm : str
        A name in ``pba_runtime.ALGORITHMS`` or ``"auto"``: the batch policy
        (:func:`pba_runtime.algorithms.choose_batch_algorithm`), PBA's split between the main
        thread and the pool's worker for a batch of ``AUTO_BATCH_SPLIT_MIN`` windows and up
        with a free worker, SBA otherwise.
    timestamps : array-like of int, optional
        Required for time windows; non-decreasing.
    pool : WorkerPool, optional
        Worker pool for PBA (default: the shared thread pool).
    engine : {"auto", "compiled", "numpy", "python"}
        What runs the window merge (:mod:`pba_runtime.kernels`): ``"auto"`` takes the
        compiled kernels where the aggregation has them.
    """
    options: dict[str, Any] = {"pool": pool} if pool is not None else {}
    options["engine"] = engine
    op = create(algorithm, window, agg, **options)
    op._input_borrowed = True  # closed below, before `values` can change
    try:
        return op._insert_and_flush(values, timestamps)
    finally:
        op.close()
