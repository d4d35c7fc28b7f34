"""The DataFrame API: ``sliding_window_aggregate``.

Plan: project the key columns, the order and the value (cast to double); drop
rows with a null value when ``nulls="skip"``; then bring each key's rows, in
order, to :func:`spark_integration.arrow_runner.run_keyed_batches` in a Python
worker: Arrow batches in, Arrow batches out, no Python row objects on the way.
Either ``groupBy(key).applyInPandas`` (Spark groups by key; the worker sorts
each key by order) or ``repartition`` by the key and
``sortWithinPartitions(key, order)``, then ``mapInArrow`` over each partition
(each key's rows contiguous and in order; for count windows the order column
is dropped after the sort: only the order matters, and it is one column less
to move).

Which Arrow transport moves the rows (``transport=``) was chosen by measurement
(``bench/bench_spark.py``, 10M rows, 84 keys, local[2]; figures in the README's
Spark section):

* ``groupBy(key).applyInPandas``: Spark only groups by key (a one-column sort,
  16% cheaper than sorting by key and order), each key's rows arrive as one
  pandas DataFrame and are sorted there (already nearly in order, so cheap).
  Where every row crosses it took 0.75-1.12x ``mapInArrow``'s time over the
  full runs (1.33-1.60x the bare ``repartition + sortWithinPartitions`` in the
  three since each key's columns reach the operator as numpy arrays,
  :func:`~spark_integration.arrow_runner.run_key_frame`). Its costs: a key's
  rows are in one worker's memory at once, as with any ``applyInPandas``; and
  pandas makes NaN of a null, so nulls are rejected or dropped in Spark first.
* ``mapInArrow`` (over partitions repartitioned and sorted by key and order):
  one Python call per partition, and a key of any size streams through with
  bounded memory. Equal to ``applyInPandas`` on pre-aggregated time windows
  (0.47x vs 0.50x the ceiling), where each key holds only its sub-slices.
* ``groupBy(key).applyInArrow`` (iterator form over the same sorted partitions
  as ``mapInArrow``): 1.0-1.45x ``applyInPandas``' time.

``"auto"`` (the default) takes ``applyInPandas`` when rows cross one by one and
``mapInArrow`` for pre-aggregated time windows. Pass ``transport="mapInArrow"``
when a single key may not fit in a Python worker's memory.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

import pba_runtime as pr
from pba_runtime.host import validate

from . import python_worker as rt
from .arrow_runner import (
    COUNT_COL,
    NULL_POLICIES,
    NULLS_COL,
    ORDER_COL,
    PREAGGREGATABLE,
    VALUE_COL,
    RunnerConfig,
    result_arrow_type,
    run_key_frame,
    run_keyed_batches,
)
from .columns import distribute, no_nulls, order_integers, require_watermark
from .intervals import as_window
from .session import ensure_worker_python
from .stream_key import PREAGGREGATED, KeyWindows, StepConfig
from .streaming import LATE_POLICIES, StreamConfig, new_namespace, stream_windows

__all__ = ["cores_per_task_of", "executor_cores_of", "sliding_window_aggregate"]

log = logging.getLogger("spark_integration")

TRANSPORTS = ("auto", "mapInArrow", "applyInArrow", "applyInPandas")


def executor_cores_of(spark: Any) -> int | None:
    """Cores of one executor of ``spark`` (from the master URL or ``spark.executor.cores``); ``None`` if unknown.

    Examples
    --------
    >>> from pyspark.sql import SparkSession  # doctest: +SKIP
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
    >>> executor_cores_of(spark)  # doctest: +SKIP
    2
    """
    sc = getattr(spark, "sparkContext", spark)
    master = sc.master or ""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?", master)
    if m:
        n = m.group(1)
        if n is None:
            return 1
        return (os.cpu_count() or 1) if n == "*" else int(n)
    m = re.fullmatch(r"local-cluster\[\s*\d+\s*,\s*(\d+)\s*,\s*\d+\s*\]", master)
    if m:
        return int(m.group(1))
    conf = sc.getConf().get("spark.executor.cores")
    return int(conf) if conf else None


def cores_per_task_of(spark: Any) -> int | None:
    """Cores one task of ``spark`` may use: ``spark.task.cpus`` (default 1), at most an executor's cores.

    Examples
    --------
    >>> from pyspark.sql import SparkSession  # doctest: +SKIP
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
    >>> cores_per_task_of(spark)  # spark.task.cpus is 1 unless set  # doctest: +SKIP
    1
    """
    try:  # Spark Connect has no SparkContext: unknown
        sc = getattr(spark, "sparkContext", spark)
        task = int(sc.getConf().get("spark.task.cpus", "1") or 1)
        ex = executor_cores_of(sc)
    except Exception:  # noqa: BLE001 - Spark Connect (no SparkContext) or any odd conf: unknown
        return None
    return task if ex is None else min(task, ex)


def _resolve(df: Any, name: Any, what: str) -> str:
    """The DataFrame's own spelling of column ``name`` (exact, else case-insensitive), or a clear error."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a column name (str), got {type(name).__name__} {name!r}")
    cols = df.columns
    if name in cols:
        return name
    matches = [c for c in cols if c.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0]
    raise ValueError(f"{what} column {name!r} is not in the DataFrame; its columns are {cols}")


def _spark_result_type(agg: pr.Aggregation) -> Any:
    from pyspark.sql import types as T

    at = result_arrow_type(agg)
    if at == pa.int64():
        return T.LongType()
    if pa.types.is_list(at):
        return T.ArrayType(T.DoubleType(), containsNull=True)
    return T.DoubleType()


def _preaggregated(src: Any, keys: tuple[str, ...], order_name: str, otype: Any, value_name: str,
                   win: pr.TimeWindow, kind: str, nulls: str) -> Any:
    """One row per key and sub-slice: its partial (VALUE_COL), rows (COUNT_COL), nulls, representative time.

    ``kind`` is what the aggregation declares (``Aggregation.preaggregate``): the SQL
    aggregate that gives a sub-slice's partial.

    Sub-slice of time ``o``: its slide starts at ``o - pmod(o - offset, slide)``; with
    ``m = range % slide`` the slide is cut in two at ``m`` (units below ``m`` are the
    *head* a window borrows from the next slide). The representative time is the
    sub-slice's start, or for argmax the time of its largest value (the oldest on ties).
    """
    from pyspark.sql import functions as F

    o = order_integers(F.col(order_name), otype)
    unit = F.pmod(o - F.lit(win.offset), F.lit(win.slide))
    sub = o - unit
    m = win.range % win.slide
    if m:
        sub = sub + F.when(unit >= F.lit(m), F.lit(m)).otherwise(F.lit(0))
    # One projection, and an aggregation whose output already is the runner's input: every DataFrame step
    # costs the driver an analysis. Two steps fewer took building and planning from 0.14 s to 0.10 s
    # (medians of 17), of a W[60 s, 1 s] job over 10M generated rows that takes ~1 s in all.
    t_col = "__pba_t"
    d = src.select(*[F.col(k) for k in keys], o.alias(t_col), sub.alias(ORDER_COL),
                   F.col(value_name).cast("double").alias(VALUE_COL))
    v = F.col(VALUE_COL)
    aggs = []
    if kind == "argmax":  # largest value, oldest time on ties
        aggs.append(F.max(F.struct(v.alias("v"), (-F.col(t_col)).alias("neg_t"))).alias("__pba_best"))
    elif kind == "min":  # Spark's min skips NaN (NaN sorts above every number); numpy's, the spec's, keeps it
        aggs.append(F.when(F.max(F.isnan(v)), F.lit(float("nan"))).otherwise(F.min(v)).alias(VALUE_COL))
    elif kind in ("max", "sum", "mean"):  # Spark's max, sum and mean propagate NaN as numpy's do
        fn = {"max": F.max, "sum": F.sum, "mean": F.sum}[kind]
        aggs.append(fn(v).alias(VALUE_COL))
    aggs.append(F.count(F.lit(1)).alias(COUNT_COL))
    if nulls == "fail":
        aggs.append((F.count(F.lit(1)) - F.count(v)).alias(NULLS_COL))
    g = d.groupBy(*keys, ORDER_COL).agg(*aggs)  # the representative time: the sub-slice's start ...
    if kind == "argmax":  # ... or for argmax the time of its largest value
        g = g.select(*keys, (-F.col("__pba_best.neg_t")).alias(ORDER_COL), F.col("__pba_best.v").alias(VALUE_COL),
                     COUNT_COL, *([NULLS_COL] if nulls == "fail" else []))
    return g


def _arrow_udf(cfg: RunnerConfig) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def pba_windows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return run_keyed_batches(cfg, batches)

    return pba_windows


def _pandas_udf(cfg: RunnerConfig) -> Callable[[Any], Any]:
    def pba_windows_pandas(pdf: Any) -> Any:
        # one key's rows, in order (ties: arrival order; nulls first, as Spark sorts them); rows that
        # arrive in order (often: Spark's shuffle keeps each map task's order) are only checked
        if not pdf[ORDER_COL].is_monotonic_increasing or pdf[ORDER_COL].hasnans:
            pdf = pdf.sort_values(ORDER_COL, kind="stable", na_position="first")
        return run_key_frame(cfg, pdf)

    return pba_windows_pandas


def sliding_window_aggregate(
    df: Any,
    *,
    key: str | Sequence[str],
    order_by: str,
    value: str,
    window: Any,
    agg: str | pr.Aggregation,
    algorithm: str = "auto",
    nulls: str = "fail",
    num_partitions: int | None = None,
    metrics: rt.AlgorithmMetrics | None = None,
    algorithm_column: bool = False,
    batch_rows: int = 1 << 17,
    cores_per_task: int | None = None,
    pool_workers: int = 1,
    pool_factory: Callable[[int], pr.WorkerPool] | None = None,
    min_slices: int | None = None,
    log_level: str | int | None = None,
    transport: str = "auto",
    preaggregate: bool | None = None,
    engine: str = "auto",
    late_rows: str = "count",
    state_chunk_rows: int = 4096,
) -> Any:
    """Sliding-window aggregation per key: one row per window, exactly as ``docs/semantics.md``.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
    key : str or sequence of str
        Key column(s); output under their own names. A null key is a key.
    order_by : str
        Orders each key's rows. For a :class:`~pba_runtime.CountWindow` any
        sortable column (ties: Spark's sort order, not deterministic). For a
        time window: an integral column (the window is in its unit), or a
        ``TimestampType``/``TimestampNTZType``/``DateType`` column (the window
        is in milliseconds; timestamps are floored to the millisecond).
    value : str
        Numeric (or boolean) column; cast to double.
    window : CountWindow, TimeWindow or tuple
        ``pr.CountWindow(range=, slide=)``; ``pr.TimeWindow(range=, slide=, offset=)``;
        ``(range, slide[, offset])`` of durations: Spark interval strings such as
        ``("1 hour", "1 second")``, ``"5min"``, timedeltas (milliseconds; see
        :mod:`spark_integration.intervals`); or one duration, ``"1 minute"``: a tumbling window.
    agg : str or pba_runtime.Aggregation
        ``max``, ``min``, ``sum``, ``count``, ``mean``, ``std``, ``geomean``,
        ``argmax`` (a count window's 0-based position in the key's stream; a time
        window's timestamp, in ms for timestamps), ``moment_sketch`` and
        ``collect`` (array<double>), or your own (double results).
    algorithm : str
        ``"auto"`` (PBA or SBA per key, see :mod:`spark_integration.python_worker`) or a
        name in ``pba_runtime.ALGORITHMS``.
    nulls : {"fail", "skip"}
        ``"fail"`` (default): a null value (or a null timestamp of a time
        window) fails the job with an error naming the column. ``"skip"``: such
        rows are dropped before windowing, so they take no position in a count
        window (unlike a SQL ``ROWS`` frame, which keeps the row and ignores its
        null) and a time window holding only nulls is not emitted.
    num_partitions : int, optional
        Partitions of the shuffle by key (default ``spark.sql.shuffle.partitions``,
        coalesced by adaptive execution).
    metrics : AlgorithmMetrics, optional
        From :func:`spark_integration.algorithm_metrics`: counts which algorithm
        ran for how many keys and rows, and why (read after an action).
    algorithm_column : bool
        Add a string column ``algorithm`` (the algorithm that computed each row).
    batch_rows : int
        A key's rows go to ``insert_many`` in pieces of at least this many.
    cores_per_task : int, optional
        Cores one task may use; default :func:`cores_per_task_of` (``spark.task.cpus``,
        at most the executor's cores). Below 2, ``"auto"`` runs SBA (reason ``one_core``).
    pool_workers : int
        Threads of the per-process worker pool.
    pool_factory : callable, optional
        ``factory(workers) -> pba_runtime.WorkerPool`` for the per-process pool.
    min_slices : int, optional
        ``auto`` runs PBA from this many slices per window (default
        :data:`spark_integration.python_worker.SPARK_PBA_MIN_SLICES`).
    engine : {"auto", "compiled", "numpy", "python"}
        What runs each key's window merge in the workers (:mod:`pba_runtime.kernels`):
        ``"auto"`` takes the compiled kernels (numba, cached on disk) where the
        aggregation has them.
    log_level : str or int, optional
        Log level of the ``spark_integration`` logger in the Python workers (stderr,
        i.e. the executor log); INFO prints one line per partition (per key with
        ``applyInPandas``) with the counts.
    transport : {"auto", "mapInArrow", "applyInArrow", "applyInPandas"}
        How data reaches Python (see the module docstring). ``auto``:
        ``applyInPandas`` (measured faster or level; it holds each key's rows
        in a worker's memory at once) unless the time window is pre-aggregated,
        then ``mapInArrow`` (streams a key of any size with bounded memory).
    preaggregate : bool, optional
        Time windows with ``max``, ``min``, ``sum``, ``count``, ``mean`` or
        ``argmax``: let Spark aggregate each key's rows per *sub-slice* first
        (a slide, cut at ``range % slide``; every window boundary is a sub-slice
        boundary, so the windows and results are the same), with its partial
        aggregation before the shuffle, and run PBA/SBA over the sub-slice
        partials. ``None`` (default): on where it applies. ``False``: every row
        goes to Python.
    late_rows : {"count", "emit"}
        A streaming DataFrame only (see :mod:`spark_integration.streaming`): rows
        behind the watermark (time windows) or ordered before what their key
        already consumed (count windows) are counted (``late`` in ``metrics``);
        ``"emit"`` also outputs them, as rows with ``late = true``, ``late_order``,
        ``late_value`` (``window_end`` and ``result`` null), beside the windows
        (``late = false``).
    state_chunk_rows : int
        A streaming DataFrame only: rows per chunk of a key's stored tail
        (:mod:`spark_integration.stream_state`).

    Returns
    -------
    pyspark.sql.DataFrame
        ``key columns..., window_end: long, result`` (``double``; ``long`` for
        count and argmax; ``array<double>`` for moment_sketch and collect),
        plus ``algorithm: string`` when asked. ``window_end`` is the window's
        exclusive end: the number of the key's values seen for count windows,
        ``k*slide + offset + range`` for time windows (epoch ms for timestamps).
        On a streaming DataFrame, when the session has no
        ``spark.sql.execution.arrow.maxBytesPerBatch`` set, it is set to
        ``2**31 - 1`` (Spark then skips a per-row size check of its Arrow
        batches: :func:`spark_integration.streaming.uncap_arrow_batch_bytes`).

    Raises
    ------
    ValueError, TypeError
        A missing column, a non-numeric value column, a bad window, aggregation,
        algorithm or null policy (on the driver, before any job); null values
        with ``nulls="fail"`` (when the job runs).

    Examples
    --------
    >>> import pba_runtime as pr, spark_integration as si  # doctest: +SKIP
    >>> from pyspark.sql import SparkSession, functions as F  # doctest: +SKIP
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
    >>> df = (spark.createDataFrame([("p1", 0, 3.0), ("p1", 1000, 5.0), ("p1", 2500, 4.0), ("p2", 500, 1.0)],
    ...                             "plug string, ms long, load double")
    ...       .withColumn("ts", F.timestamp_millis("ms")))  # doctest: +SKIP
    >>> metrics = si.algorithm_metrics(spark)  # optional: which algorithm ran, per key  # doctest: +SKIP
    >>> out = si.sliding_window_aggregate(df, key="plug", order_by="ts", value="load",
    ...                                   window=("2 seconds", "1 second"), agg="max", metrics=metrics)  # doctest: +SKIP
    >>> out.columns  # doctest: +SKIP
    ['plug', 'window_end', 'result']
    >>> sorted(tuple(r) for r in out.collect())  # window_end: epoch ms  # doctest: +SKIP
    [('p1', 1000, 3.0), ('p1', 2000, 5.0), ('p1', 3000, 5.0), ('p1', 4000, 4.0), ('p2', 1000, 1.0), ('p2', 2000, 1.0)]
    >>> metrics.algorithms(), metrics.reasons()  # counted by the action (collect) above  # doctest: +SKIP
    ({'sba': 2}, {'small_window': 2})
    """
    keys, order_name, value_name, fields = _check_columns(df, key, order_by, value)
    win = as_window(window)
    is_time = isinstance(win, pr.TimeWindow)
    otype = fields[order_name].dataType
    aggregation = _check_options(win, otype, order_name, agg, algorithm, nulls, transport, batch_rows,
                                 num_partitions, engine)
    if late_rows not in LATE_POLICIES:
        raise ValueError(f"late_rows must be one of {', '.join(map(repr, LATE_POLICIES))}, got {late_rows!r}")
    if isinstance(state_chunk_rows, bool) or not isinstance(state_chunk_rows, int) or state_chunk_rows < 1:
        raise ValueError(f"state_chunk_rows must be a positive integer, got {state_chunk_rows!r}")
    streaming = bool(df.isStreaming)
    if streaming:
        _check_streaming(fields, order_name, otype, win, transport, preaggregate, num_partitions)
        if preaggregate and not (is_time and aggregation.preaggregate in PREAGGREGATED):
            raise ValueError(f"preaggregate=True on a streaming DataFrame needs a time window and one of "
                             f"{sorted(PREAGGREGATED)}; got {win!r} with {aggregation.name!r}")
    elif late_rows != "count":
        raise ValueError("late_rows='emit' is for a streaming DataFrame (a batch DataFrame has no late rows)")
    ensure_worker_python(df.sparkSession)  # before the UDF is wrapped: it takes the workers' Python then
    if streaming:
        cores = cores_per_task if cores_per_task is not None else cores_per_task_of(df.sparkSession)
        step = StepConfig(win, agg, algorithm, engine=engine, min_slices=min_slices,
                          cores=1 if rt.local_cores() == 1 else cores, chunk_rows=state_chunk_rows,
                          namespace=new_namespace(), preaggregate=preaggregate is not False)
        KeyWindows(step)  # the driver refuses what the workers would (a positional count-window aggregation)
        scfg = StreamConfig(keys, step, late_rows=late_rows, algorithm_column=algorithm_column, metrics=metrics,
                            log_level=log_level)
        d = _stream_input(df, keys, order_name, otype, value_name, win, nulls)
        schema = _output_schema(fields, keys, aggregation, algorithm_column, late=late_rows == "emit")
        return stream_windows(d, scfg, schema)

    use_preagg = _use_preaggregation(preaggregate, win, otype, aggregation)
    if transport == "auto":
        transport = "mapInArrow" if use_preagg else "applyInPandas"
    cfg = RunnerConfig(
        key_names=keys,
        window=win,
        agg=agg,
        algorithm=algorithm,
        nulls=nulls,
        value_label=value_name,
        order_label=order_name,
        batch_rows=batch_rows,
        cores_per_task=cores_per_task if cores_per_task is not None else cores_per_task_of(df.sparkSession),
        pool_workers=pool_workers,
        pool_factory=pool_factory,
        metrics=metrics,
        algorithm_column=algorithm_column,
        min_slices=min_slices,
        engine=engine,
        log_level=log_level,
        preaggregated=use_preagg,
    )
    d = _runner_input(df, keys, order_name, otype, value_name, win, aggregation, nulls, transport, use_preagg)
    d = _distribute(d, keys, transport, num_partitions, is_time)
    _log_plan(cfg, aggregation, transport)
    schema = _output_schema(fields, keys, aggregation, algorithm_column)
    if transport == "applyInPandas":
        return d.groupBy(*keys).applyInPandas(_pandas_udf(cfg), schema)
    udf = _arrow_udf(cfg)
    if transport == "mapInArrow":
        return d.mapInArrow(udf, schema)
    return d.groupBy(*keys).applyInArrow(udf, schema)


# --------------------------------------------------------------------------- the steps of sliding_window_aggregate
def _check_columns(df: Any, key: Any, order_by: Any, value: Any) -> tuple[tuple[str, ...], str, str, dict]:
    """The key, order and value columns as the DataFrame spells them, checked; and its fields by name."""
    from pyspark.sql import types as T

    keys = (key,) if isinstance(key, str) else tuple(key)
    if not keys:
        raise ValueError("key must name at least one column")
    keys = tuple(_resolve(df, k, "key") for k in keys)
    order_name = _resolve(df, order_by, "order_by")
    value_name = _resolve(df, value, "value")
    if len(set(keys)) != len(keys):
        raise ValueError(f"key columns must be distinct, got {list(keys)}")
    for k in keys:
        if k in (order_name, value_name):
            raise ValueError(f"key column {k!r} cannot also be the order_by or value column")
        if k in ("window_end", "result", "algorithm"):
            raise ValueError(f"key column {k!r} clashes with an output column (window_end, result, algorithm); "
                             "rename it")
    fields = {f.name: f for f in df.schema.fields}
    vtype = fields[value_name].dataType
    if not isinstance(vtype, (T.NumericType, T.BooleanType)):
        raise TypeError(f"value column {value_name!r} must be numeric (or boolean), got {vtype.simpleString()}")
    return keys, order_name, value_name, fields


def _check_options(win: Any, otype: Any, order_name: str, agg: Any, algorithm: str, nulls: str, transport: str,
                   batch_rows: Any, num_partitions: Any, engine: str = "auto") -> pr.Aggregation:
    """Check the order column's type against the window and the options (the operator: :func:`validate`)."""
    from pyspark.sql import types as T

    if isinstance(win, pr.TimeWindow) and not isinstance(otype, (T.IntegralType, T.TimestampType,
                                                                  T.TimestampNTZType, T.DateType)):
        raise TypeError(
            f"order_by column {order_name!r} must be integral, a timestamp or a date for a time window, "
            f"got {otype.simpleString()}"
        )
    _, aggregation, _ = validate(win, agg, algorithm, engine=engine)  # capability checks, no operator built
    if nulls not in NULL_POLICIES:
        raise ValueError(f"nulls must be one of {', '.join(map(repr, NULL_POLICIES))}, got {nulls!r}")
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"batch_rows must be a positive integer, got {batch_rows!r}")
    if num_partitions is not None and (isinstance(num_partitions, bool) or not isinstance(num_partitions, int)
                                       or num_partitions < 1):
        raise ValueError(f"num_partitions must be a positive integer or None, got {num_partitions!r}")
    return aggregation


def _use_preaggregation(preaggregate: bool | None, win: Any, otype: Any, aggregation: pr.Aggregation) -> bool:
    """Whether Spark pre-aggregates sub-slices: a time window and an aggregation that declares ``preaggregate``."""
    can_preagg = isinstance(win, pr.TimeWindow) and aggregation.preaggregate is not None
    if preaggregate and not can_preagg:
        raise ValueError(
            "preaggregate=True needs a time window, an order_by that is integral, a timestamp or a date, and "
            f"one of {sorted(PREAGGREGATABLE)}; got {win!r} over {otype.simpleString()} with {aggregation.name!r}"
        )
    return can_preagg if preaggregate is None else bool(preaggregate)


def _runner_input(df: Any, keys: tuple[str, ...], order_name: str, otype: Any, value_name: str, win: Any,
                  aggregation: pr.Aggregation, nulls: str, transport: str, use_preagg: bool) -> Any:
    """The rows the runner reads: the keys, ORDER_COL and VALUE_COL (or sub-slice partials), nulls handled."""
    from pyspark.sql import functions as F

    is_time = isinstance(win, pr.TimeWindow)
    src = df
    if nulls == "skip":
        cond = F.col(value_name).isNotNull()
        if is_time:
            cond = cond & F.col(order_name).isNotNull()
        src = src.where(cond)
    if use_preagg:
        return _preaggregated(src, keys, order_name, otype, value_name, win, aggregation.preaggregate, nulls)
    if transport == "applyInPandas":  # pandas makes NaN of a null: no null may reach the UDF
        order = order_integers(F.col(order_name), otype) if is_time else F.col(order_name)
        val = F.col(value_name).cast("double")
        if nulls == "fail":
            val = no_nulls(val, "value", value_name, keys)
            if is_time:
                order = no_nulls(order, "order_by", order_name, keys)
        return src.select(*[F.col(k) for k in keys], order.alias(ORDER_COL), val.alias(VALUE_COL))
    return src.select(*[F.col(k) for k in keys], F.col(order_name).alias(ORDER_COL),
                      F.col(value_name).cast("double").alias(VALUE_COL))


def _distribute(d: Any, keys: tuple[str, ...], transport: str, num_partitions: int | None, is_time: bool) -> Any:
    """Each key's rows together (and, but for ``applyInPandas``, in order within their partition)."""
    if transport == "applyInPandas":  # Spark groups by key; the UDF sorts each key by order
        return d.repartition(num_partitions, *keys) if num_partitions else d
    d = distribute(d, keys, ORDER_COL, num_partitions)
    if not is_time:  # count windows: only the order matters, one column less to move
        d = d.select(*keys, VALUE_COL)
    return d


def _log_plan(cfg: RunnerConfig, aggregation: pr.Aggregation, transport: str) -> None:
    """One INFO line on the driver: the plan and the algorithm keys will run unless too small or the pool fails."""
    planned, why = rt.choose_algorithm(cfg.algorithm, cfg.window, cores=cfg.cores_per_task, min_slices=cfg.min_slices)
    log.info(
        "spark_integration: %s over %s per key %s via %s%s: %s (%s) unless a key is too small for PBA's pool "
        "or the pool fails; per-key choices are counted in metrics=%s",
        aggregation.name, cfg.window, list(cfg.key_names), transport,
        " on sub-slice partials" if cfg.preaggregated else "",
        planned, why, "an AlgorithmMetrics" if cfg.metrics is not None else "None",
    )


def _output_schema(fields: dict, keys: tuple[str, ...], aggregation: pr.Aggregation, algorithm_column: bool,
                   late: bool = False) -> Any:
    """``key columns..., window_end, result`` (and ``algorithm``; and ``late, late_order, late_value``)."""
    from pyspark.sql import types as T

    out_fields = [fields[k] for k in keys] + [
        T.StructField("window_end", T.LongType(), late),
        T.StructField("result", _spark_result_type(aggregation), True),
    ]
    if algorithm_column:
        out_fields.append(T.StructField("algorithm", T.StringType(), False))
    if late:
        out_fields += [T.StructField("late", T.BooleanType(), False),
                       T.StructField("late_order", T.LongType(), True),
                       T.StructField("late_value", T.DoubleType(), True)]
    return T.StructType(out_fields)


# --------------------------------------------------------------------------- a streaming DataFrame
def _check_streaming(fields: dict, order_name: str, otype: Any, win: Any, transport: str,
                     preaggregate: bool | None, num_partitions: int | None) -> None:
    """What a streaming DataFrame needs: an integral or time order, a watermark on it for a time window."""
    from pyspark.sql import types as T

    if transport != "auto" or num_partitions is not None:
        raise ValueError("transport and num_partitions are for a batch DataFrame; a streaming one runs "
                         "transformWithStateInPandas over spark.sql.shuffle.partitions state partitions")
    if not isinstance(otype, (T.IntegralType, T.TimestampType, T.TimestampNTZType, T.DateType)):
        raise TypeError(f"order_by column {order_name!r} must be integral, a timestamp or a date for a streaming "
                        f"DataFrame, got {otype.simpleString()}")
    if isinstance(win, pr.TimeWindow):
        require_watermark(fields, order_name, "order_by")


def _stream_input(df: Any, keys: tuple[str, ...], order_name: str, otype: Any, value_name: str, win: Any,
                  nulls: str) -> Any:
    """The processor's input: keys, ORDER_COL (int64; ms for timestamps and dates), VALUE_COL (double), no null."""
    from pyspark.sql import functions as F

    src = df
    if nulls == "skip":
        src = src.where(F.col(value_name).isNotNull() & F.col(order_name).isNotNull())
    order = order_integers(F.col(order_name), otype)
    val = F.col(value_name).cast("double")
    if nulls == "fail":  # pandas makes NaN of a null: none may reach the processor
        val = no_nulls(val, "value", value_name, keys)
        order = no_nulls(order, "order_by", order_name, keys)
    # the order leaves under another name, without the watermark's mark: Spark would drop the rows behind
    # the watermark before the processor could count them
    return src.select(*[F.col(k) for k in keys], order.alias(ORDER_COL), val.alias(VALUE_COL))
