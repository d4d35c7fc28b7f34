"""pba-runtime inside Spark: sliding-window aggregation per key with PBA (SBA as the fallback).

Entry points:

* :func:`aggregate` (DataFrame API): a :class:`pba_runtime.Query` (keys, several windows, aggregations per
  value column, window or row output) over a batch DataFrame, one shuffle and one sort for every output;
* :func:`sliding_window_aggregate` (DataFrame API): bring each key's rows, in
  order, to one PBA/SBA operator per key over Arrow data (``applyInPandas`` or
  ``mapInArrow``) through the vectorised batch path ``insert_many``;
* :func:`sliding_window_rdd` (RDD API): ``sliding_window_rdd(rdd, window, agg,
  key=..., order=..., value=...)`` partitions the records by key, sorts them by
  order and yields ``(key, window_end, result)``; under it,
  :func:`pba_partition_function` (``rdd.mapPartitions(f)`` on an RDD already
  partitioned by key) keeps one operator per key of the partition (keyed
  state; keys may interleave) and warns when a key was in two partitions.

A streaming DataFrame (``df.isStreaming``) goes to
:mod:`spark_integration.streaming`: ``transformWithStateInPandas`` with one
operator per key whose state lives in Spark's state store (docs/spark-streaming.md).

Spark's Python workers must import this package: a script run from a venv that
is not activated gets workers on ``python3`` from ``PATH``; see
:func:`ensure_worker_python` (local mode switches them to the driver's Python,
otherwise one error names ``PYSPARK_PYTHON``).

Which algorithm ran is counted by :class:`AlgorithmMetrics` (a Spark
accumulator, :func:`algorithm_metrics`) and logged by the ``spark_integration``
logger; see :mod:`spark_integration.python_worker` for the rules.

Examples
--------
>>> time_window("1 hour", "1 second")
TimeWindow(range=3600000, slide=1000, offset=0)
"""

from .arrow_runner import RunnerConfig, run_keyed_batches
from .dataframe import cores_per_task_of, executor_cores_of, sliding_window_aggregate
from .intervals import parse_interval, time_window
from .python_worker import (
    PBA_MIN_KEY_SLICES,
    SPARK_PBA_MIN_SLICES,
    AlgorithmMetrics,
    MetricsParam,
    algorithm_metrics,
    choose_algorithm,
    close_worker_pool,
    worker_pool,
)
from .query import aggregate
from .rdd import KeyPartitionWarning, pba_partition_function, sliding_window_rdd
from .session import WorkerPythonError, ensure_worker_python

__all__ = [
    "PBA_MIN_KEY_SLICES",
    "SPARK_PBA_MIN_SLICES",
    "AlgorithmMetrics",
    "KeyPartitionWarning",
    "MetricsParam",
    "RunnerConfig",
    "WorkerPythonError",
    "aggregate",
    "algorithm_metrics",
    "choose_algorithm",
    "close_worker_pool",
    "cores_per_task_of",
    "ensure_worker_python",
    "executor_cores_of",
    "parse_interval",
    "pba_partition_function",
    "run_keyed_batches",
    "sliding_window_aggregate",
    "sliding_window_rdd",
    "time_window",
    "worker_pool",
]
