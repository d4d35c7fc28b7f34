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

from .aggregations import Aggregation
from .algorithms import create
from .algorithms.base import Results, UnsortedTimestampsError
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
    missing: str = "propagate",
    min_periods: int = 1,
) -> Results:
    """Every window result over ``values`` (end of stream included): ``(ends, results)``.

    ``ends`` is an int64 array of the windows' exclusive ends; ``results`` a float64 array (2-D for
    vector results, int64 for ``count`` and ``argmax``) or a list (``collect``). Both are positional:
    a pandas Series' index is not carried over. Under ``missing="skip"`` every numeric result is
    float64 with NaN where null (``count``, ``argmax``, ``argmin`` included), ``moment_sketch`` rows
    are NaN there, and ``collect`` gives a list of the windows' non-missing values, ``None`` where null.

    Parameters
    ----------
    values : array-like
        The stream, oldest first. A missing value (``None``, pandas' ``<NA>``, a masked entry, an
        Arrow or polars null) is refused under ``missing="propagate"``, where NaN is a value.
    window : CountWindow or TimeWindow
    agg : str, Aggregation or Quantile
        A built-in's name, your :class:`Aggregation`, or an order statistic: ``"median"`` or
        :func:`pba_runtime.quantile` (exact, numpy's results; :mod:`pba_runtime.quantiles`).
    algorithm : str
        A name in ``pba_runtime.ALGORITHMS`` or ``"auto"``: the batch policy
        (:func:`pba_runtime.algorithms.choose_batch_algorithm`), PBA's split between the main
        thread and the pool's worker for a batch of ``AUTO_BATCH_SPLIT_MIN`` windows and up
        with a free worker, SBA otherwise.
    timestamps : array-like of int, optional
        Required for time windows; non-decreasing (sort unsorted input first, e.g. with
        ``np.argsort(timestamps, kind="stable")``; a stream with late tuples: ``pr.create(...,
        allowed_lateness=)``).
    pool : WorkerPool, optional
        Worker pool for PBA (default: the shared thread pool).
    engine : {"auto", "compiled", "numpy", "python"}
        What runs the window merge (:mod:`pba_runtime.kernels`): ``"auto"`` takes the
        compiled kernels where the aggregation has them.
    missing : {"propagate", "skip"}
        ``"propagate"`` (default): numpy's result over each window's values (a window holding NaN is
        NaN for ``max``, ``sum``, ...), missing values refused. ``"skip"``: missing values and NaN
        are not values; each result is the aggregation over the window's other values, and null
        where fewer than ``min_periods`` remain (as pandas' ``rolling(..., min_periods=)``). The
        windows do not change: a count window still covers ``range`` positions, missing ones
        included; a time window is emitted when it holds a tuple, missing or not. With
        ``min_periods=0`` a window without values gives ``sum`` 0, ``count`` 0, ``collect`` ``[]``,
        and null for the others.
    min_periods : int
        Non-missing values a window needs for a result under ``missing="skip"`` (``>= 0``,
        default 1); unused under ``"propagate"``.

    Examples
    --------
    >>> import pba_runtime as pr
    >>> ends, res = pr.sliding_aggregate([1.0, 5.0, 2.0, 4.0], window=pr.CountWindow(2), agg="max")
    >>> ends.tolist(), res.tolist()
    ([2, 3, 4], [5.0, 5.0, 4.0])
    >>> v = [1.0, float("nan"), None, 4.0, 6.0]
    >>> pr.sliding_aggregate(v, window=pr.CountWindow(3), agg="mean", missing="skip")[1].tolist()
    [1.0, 4.0, 5.0]
    >>> pr.sliding_aggregate(v, window=pr.CountWindow(3), agg="count", missing="skip", min_periods=2)[1].tolist()
    [nan, nan, 2.0]
    >>> pr.sliding_aggregate([1.0, 2.0], window=pr.TimeWindow("1s"), agg="sum")
    Traceback (most recent call last):
    ...
    ValueError: timestamps are required for time windows (TimeWindow); pass sliding_aggregate(values, window=..., agg=..., timestamps=...)
    """
    if isinstance(window, TimeWindow) and timestamps is None:
        raise ValueError("timestamps are required for time windows (TimeWindow); "
                         "pass sliding_aggregate(values, window=..., agg=..., timestamps=...)")
    options: dict[str, Any] = {"pool": pool} if pool is not None else {}
    options["engine"] = engine
    op = create(algorithm, window, agg, missing=missing, min_periods=min_periods, **options)
    op._input_borrowed = True  # closed below, before `values` can change
    try:
        return op._insert_and_flush(values, timestamps)
    except UnsortedTimestampsError as exc:
        raise ValueError(
            f"timestamps must be non-decreasing; {exc.detail}: sort the input first "
            '(order = np.argsort(timestamps, kind="stable"), then sliding_aggregate(values[order], ..., '
            "timestamps=timestamps[order])); for a stream with late tuples, pr.create(..., allowed_lateness=L) "
            "reorders them"
        ) from None
    finally:
        op.close()
