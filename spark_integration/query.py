"""A query over a Spark DataFrame: ``aggregate(df, query)``, one shuffle and one sort for every output.

The batch form of :class:`pba_runtime.Query` in Spark (``docs/spark.md``, *Queries*). The plan: project the
key columns, the order column as integers (a timestamp as epoch microseconds, a date as days) and the value
columns as doubles (row output keeps every input column); ``repartition`` by the keys and
``sortWithinPartitions`` by keys and order (the query's one ``Exchange`` and one sort); then, per partition,
one :meth:`pba_runtime.Query.run` over the partition's rows in the Python worker (``mapInPandas``): every
key of the partition, every window and every aggregation in the keyed engines' one compiled call. Window
ends come back as the order column's type (``TimestampType``, ``DateType`` or ``LongType``).

Spark rows have no order of their own, so a query needs ``on`` here, count windows included. A streaming
DataFrame is refused (its form is still to come); a single key's rows are in one worker's memory at once, as
with ``applyInPandas``.

Examples
--------
>>> import pba_runtime as pr
>>> q = pr.Query(by="plug", on="ts", windows=pr.CountWindow(2), aggs={"load": ["max", "mean"]})
>>> [f for f, _ in output_fields(q, {"plug": "bigint", "ts": "timestamp", "load": "double"})]
['plug', 'window_start', 'window_end', 'load_max', 'load_mean']
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pba_runtime as pr

from .columns import distribute, from_integers, kind_of, no_nulls, order_integers, require_watermark
from .session import ensure_worker_python

__all__ = ["aggregate", "output_fields"]

#: the integer order column's name in the worker's frames (the user's ``on`` column is kept beside it)
_ON = "__pba_on"
_INT_RESULTS = ("count", "argmax", "argmin")
_VECTOR_RESULTS = ("collect", "moment_sketch")


def _generated(query: pr.Query) -> set[str]:
    """The result columns the worker makes in the order column's type (sent as integers)."""
    names = {"window_start", "window_end"} if query.align == "windows" else set()
    return names | {o.name for o in query.outputs if o.agg.name in ("argmax", "argmin")
                    and isinstance(query.windows[o.window], pr.TimeWindow)}


def output_fields(query: pr.Query, types: dict[str, str]) -> list[tuple[str, str]]:
    """The result's ``(name, Spark type)`` of ``query`` over columns of Spark simple types ``types``.

    Window output: the key columns, ``window_start`` (one window) and ``window_end`` in the order column's
    type, then one column per output (``double``; ``bigint`` for count; ``array<double>`` for lists and
    vectors; argmax/argmin of time windows in the order column's type). Row output: every input column, then
    the outputs.
    """
    on_type = types[query.on] if query.on else "bigint"
    timed = any(isinstance(w, pr.TimeWindow) for w in query.windows)
    fields: list[tuple[str, str]] = []
    if query.align == "rows":
        fields += list(types.items())
    else:
        fields += [(b, types[b]) for b in query.by]
        bound = on_type if timed and kind_of(on_type) in ("timestamp", "date") else "bigint"
        if len(query.windows) == 1:
            fields.append(("window_start", bound))
        fields.append(("window_end", bound))
    for o in query.outputs:
        name = o.agg.name
        w = query.windows[o.window]
        if name in _VECTOR_RESULTS:
            t = "array<double>"
        elif name in _INT_RESULTS:
            t = on_type if (name != "count" and isinstance(w, pr.TimeWindow)
                            and kind_of(on_type) in ("timestamp", "date")) else "bigint"
        else:
            t = "double"
        fields.append((o.name, t))
    return fields


def aggregate(df: Any, query: pr.Query | None = None, *, state_chunk_rows: int = 4096, metrics: Any = None,
              **kwargs: Any) -> Any:
    """The result of ``query`` (or ``pr.Query(**kwargs)``) over the DataFrame ``df``, as a DataFrame.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A batch DataFrame, or a streaming one (window output of one value column; time windows need
        ``df.withWatermark(on, ...)``): its rows in append mode, each (key, window end) once, when the
        watermark passes the end (time windows) or when its last row arrives (count windows).
    query : pba_runtime.Query, optional
        The query; else its parameters as keywords: ``by``, ``on`` (required here), ``windows``, ``aggs``,
        ``align``, ``missing``, ``min_periods``, ``closed``, ``labels``.
    state_chunk_rows : int
        A streaming query: rows per sealed chunk of each key's tail in the state store.
    metrics : AlgorithmMetrics, optional
        A streaming query: :func:`spark_integration.algorithm_metrics`'s accumulator, given the processor's
        counters (windows, late rows, time in its steps and state calls) as each task ends.

    Every column is checked on the driver before any job starts: a missing column, a value column that is
    not numeric, an order column that is not a timestamp, date or integer raise a ``ValueError`` or
    ``TypeError`` naming the parameter.
    """
    if query is None:
        query = pr.Query(**kwargs)
    elif kwargs:
        raise TypeError(f"aggregate: give a query or its keywords, not both ({sorted(kwargs)})")
    if not isinstance(query, pr.Query):
        raise TypeError(f"query must be a pba_runtime.Query, got {type(query).__name__}")
    types = dict(df.dtypes)
    _check(query, types)
    if getattr(df, "isStreaming", False):
        return _stream(df, query, types, state_chunk_rows, metrics)
    from pyspark.sql import functions as F

    on = query.on
    as_int = order_integers(F.col(on), types[on], "us")
    values = list(dict.fromkeys(o.column for o in query.outputs))
    if query.align == "rows":
        cols = [F.col(c) for c in df.columns] + [as_int.alias(_ON)]
    else:
        cols = ([F.col(b) for b in query.by] + [as_int.alias(_ON)]
                + [F.col(v).cast("double").alias(v) for v in values if v not in query.by])
    fields = output_fields(query, types)
    made = _generated(query)
    wire = [(n, "bigint" if n in made and kind_of(t) in ("timestamp", "date") else t) for n, t in fields]
    schema = ", ".join(f"`{n}` {t}" for n, t in wire)
    src = distribute(df.select(*cols), [F.col(b) for b in query.by], F.col(_ON))
    ensure_worker_python(df.sparkSession)
    out = src.mapInPandas(_worker(query, kind_of(types[on]), wire), schema)
    return out.select(*[(from_integers(F.col(f"`{n}`"), t, "us") if t != w else F.col(f"`{n}`")).alias(n)
                        for (n, t), (_, w) in zip(fields, wire)])


def _check(query: pr.Query, types: dict[str, str]) -> None:
    if query.on is None:
        raise ValueError("on: Spark rows have no order of their own; name the order column (on=...), count "
                         "windows included")
    for param, cols in (("by", query.by), ("on", (query.on,)), ("aggs", [o.column for o in query.outputs])):
        for c in cols:
            if c not in types:
                raise ValueError(f"{param}: no column {c!r} in the DataFrame; its columns: {list(types)}")
    if kind_of(types[query.on]) not in ("timestamp", "date", "int"):
        raise TypeError(f"on: column {query.on!r} is {types[query.on]}; give a timestamp, date or integer column")
    for o in query.outputs:
        if kind_of(types[o.column]) not in ("int", "numeric"):
            raise TypeError(f"aggs: column {o.column!r} is {types[o.column]}, not numeric")
    if _ON in types:
        raise ValueError(f"by: the column name {_ON!r} is the adapter's own; rename that column")


def _worker(query: pr.Query, kind: str, wire: list[tuple[str, str]]):
    """The ``mapInPandas`` function: one query run over the partition's rows (every key of it).

    The order column arrives as epoch microseconds (timestamps and dates, :func:`order_integers`) or as the
    integers it is; instants the result holds (window bounds, time windows' argmax/argmin) leave as
    microseconds, nullable, for :func:`from_integers`.
    """
    on = query.on
    names = [n for n, _ in wire]
    made = _generated(query)
    ints = [n for n, t in wire if kind_of(t) == "int"]
    instants = kind in ("timestamp", "date")

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pandas as pd

        parts = list(batches)
        if not parts:
            return
        pdf = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
        if not len(pdf):
            return
        rows = query.align == "rows"
        frame = pdf.drop(columns=[on]) if rows else pdf
        t = pdf[_ON].to_numpy(dtype=np.int64)
        frame = frame.drop(columns=[_ON]).assign(**{on: t.astype("datetime64[us]") if instants else t})
        res = query.run(frame)
        if rows:
            res = pd.concat([pdf.drop(columns=[_ON]), res], axis=1)
        for n in names:
            if n in made and instants:
                res[n] = _micros(np, pd, res[n])
            if n in ints and res[n].dtype.kind == "f":
                res[n] = res[n].astype("Int64")  # nulls (too few values, a null key) stay nulls
        yield res[names]

    return run


def _micros(np: Any, pd: Any, col: Any) -> Any:
    """A result column of instants (datetimes, or argmax's integers of microseconds: floats where null) as
    nullable epoch microseconds."""
    a = col.to_numpy()
    null = pd.isna(col).to_numpy()
    if a.dtype.kind in "iuf":
        ints = np.where(null, 0, a).astype(np.int64)
    else:
        ints = a.astype("datetime64[us]").view(np.int64)
    return pd.Series(pd.arrays.IntegerArray(ints, null), index=col.index)


# --------------------------------------------------------------------------- a streaming DataFrame
def _stream(df: Any, query: pr.Query, types: dict[str, str], chunk_rows: int, metrics: Any) -> Any:
    """A streaming DataFrame's query: per key, one state-store operator per output over the same packed rows
    (:class:`~spark_integration.streaming.QueryProcessor`), every output of a (key, window end) in one row."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from .dataframe import cores_per_task_of
    from .python_worker import local_cores
    from .stream_fold import FoldPlan
    from .stream_key import KeyWindows, StepConfig
    from .streaming import ORDER_COL, VALUE_COL, QueryStreamConfig, new_namespace, stream_query

    if query.align != "windows":
        raise ValueError('align: a streaming DataFrame gets window output; row output (align="rows") is for a '
                         "batch DataFrame")
    values = list(dict.fromkeys(o.column for o in query.outputs))
    if len(values) != 1:
        raise ValueError(f"aggs: a streaming query aggregates one value column; these name {len(values)}: {values}")
    if not query.by:
        raise ValueError("by: a streaming query keeps its state per key; name the key columns (by=...)")
    timed = {isinstance(w, pr.TimeWindow) for w in query.windows}
    if len(timed) != 1:
        raise ValueError("windows: a streaming query's windows are all count windows or all time windows")
    is_time = timed.pop()
    on = query.on
    if is_time:
        require_watermark(df.schema, on, "on")
    if not_numbers := [o.name for o in query.outputs if o.agg.result not in ("float", "int")]:
        raise ValueError(f"aggs: a streaming query's outputs are numbers; {not_numbers} are not")
    mp = 1 if query.min_periods is None else query.min_periods
    if query.missing == "propagate" and mp > 1:
        raise ValueError('min_periods applies with missing="skip" on a streaming DataFrame')
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"state_chunk_rows must be a positive integer, got {chunk_rows!r}")
    ensure_worker_python(df.sparkSession)
    cores = 1 if local_cores() == 1 else cores_per_task_of(df.sparkSession)
    ns = new_namespace()
    wins = [w.in_unit("ms") if isinstance(w, pr.TimeWindow) else w for w in query.windows]
    builtin = all(pr.BUILTIN_AGGREGATIONS.get(o.agg.name) is o.agg for o in query.outputs)
    plan = FoldPlan.of(wins, [(o.window, o.agg.name) for o in query.outputs], query.missing, mp) if builtin else None
    steps, window_of = [], [o.window for o in query.outputs]
    if plan is not None:  # the rows wait folded per cell; an operator per (window, fold)
        for i, (wi, kind) in enumerate(plan.primitives):
            agg, missing = plan.step_agg(kind)
            steps.append(StepConfig(wins[wi], agg, "auto", cores=cores, chunk_rows=chunk_rows,
                                    namespace=f"{ns}-{i}", missing=missing))
    else:
        for i, o in enumerate(query.outputs):
            agg = o.agg.name if pr.BUILTIN_AGGREGATIONS.get(o.agg.name) is o.agg else o.agg
            steps.append(StepConfig(wins[o.window], agg, "auto", cores=cores, chunk_rows=chunk_rows,
                                    namespace=f"{ns}-{i}", missing=query.missing, min_periods=mp))
    for step in steps:
        KeyWindows(step)  # the driver refuses what the workers would
    one = len(query.windows) == 1
    cfg = QueryStreamConfig(tuple(query.by), tuple(o.name for o in query.outputs), tuple(steps), tuple(window_of),
                            tuple(o.agg.name in _INT_RESULTS for o in query.outputs),
                            steps[0].window.range if one else None, metrics=metrics, fold=plan)
    order = order_integers(F.col(on), types[on], "ms")
    src = df
    if query.missing == "skip":
        src = src.where(F.col(on).isNotNull())
    else:
        order = no_nulls(order, "on", on, tuple(query.by),
                         hint='a time or count window needs an order for every row; missing="skip" drops them')
    value = F.coalesce(F.col(values[0]).cast("double"), F.lit(float("nan")))  # a null: NaN, as frames read it
    d = src.select(*[F.col(b) for b in query.by], order.alias(ORDER_COL), value.alias(VALUE_COL))
    fields = output_fields(query, types)
    wire = T.StructType(
        [df.schema[b] for b in query.by]
        + [T.StructField(n, T.LongType()) for n in (("window_start",) if one else ()) + ("window_end",)]
        + [T.StructField(o.name, T.LongType() if o.agg.name in _INT_RESULTS else T.DoubleType())
           for o in query.outputs])
    out = stream_query(d, cfg, wire)
    return out.select(*[from_integers(F.col(f"`{n}`"), t, "ms").alias(n) for n, t in fields])
