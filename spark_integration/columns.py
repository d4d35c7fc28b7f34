"""What both DataFrame forms do to columns on the driver, written once.

:func:`spark_integration.aggregate` (a query) and :func:`spark_integration.sliding_window_aggregate` (its
one-output form) read a DataFrame the same way: the order column becomes integers of a unit and the window
bounds come back in its type (:func:`order_integers`, :func:`from_integers`), a null that may not pass fails
the job naming the column and key (:func:`no_nulls`), a streaming DataFrame's time windows need a watermark on
the order column (:func:`require_watermark`), and each key's rows meet in one partition in order
(:func:`distribute`).

A ``TimestampNTZType`` (a wall clock without a zone) is read as if UTC, as Spark's ``window()`` groups it:
its windows fall on the wall clock's hours and days whatever the session's time zone. A
``TimestampType`` is an instant (epoch-aligned windows, as ``window()``); a ``DateType`` is its midnight.

Examples
--------
>>> kind_of("timestamp_ntz"), kind_of("date"), kind_of("bigint"), kind_of("decimal(10,2)"), kind_of("string")
('timestamp', 'date', 'int', 'numeric', 'other')
"""

from __future__ import annotations

from typing import Any

from .arrow_runner import NULL_ORDER_HINT, NULL_VALUE_HINT

__all__ = ["WATERMARK_KEY", "distribute", "from_integers", "kind_of", "no_nulls", "order_integers",
           "require_watermark"]

#: Where Spark marks the column of ``withWatermark`` (its metadata).
WATERMARK_KEY = "spark.watermarkDelayMs"

#: integers of one unit in a day, and Spark's functions from such integers back to an instant
_PER_DAY = {"ms": 86_400_000, "us": 86_400_000_000}
_UNIX = {"ms": "unix_millis", "us": "unix_micros"}
_ADD_UNIT = {"ms": "MILLISECOND", "us": "MICROSECOND"}
_FROM = {"ms": "timestamp_millis", "us": "timestamp_micros"}


def kind_of(spark_type: str) -> str:
    """``"timestamp"``, ``"date"``, ``"int"``, ``"numeric"`` or ``"other"`` of a Spark simple type string."""
    if spark_type in ("timestamp", "timestamp_ntz"):
        return "timestamp"
    if spark_type == "date":
        return "date"
    if spark_type in ("tinyint", "smallint", "int", "bigint"):
        return "int"
    if spark_type in ("float", "double") or spark_type.startswith("decimal"):
        return "numeric"
    return "other"


def _simple(spark_type: Any) -> str:
    return spark_type if isinstance(spark_type, str) else spark_type.simpleString()


def order_integers(col: Any, spark_type: Any, unit: str = "ms") -> Any:
    """``col`` as a long Spark expression: a timestamp or date in ``unit`` (``"ms"`` or ``"us"``) since the epoch
    (floored: a microsecond before 1970 is -1 ms), an integer as it is.

    ``spark_type``: the column's Spark type or its simple string. A ``timestamp_ntz`` is read without a zone
    (``unix_millis`` reads its stored value; a cast to ``timestamp`` would read it in the session's zone).
    """
    from pyspark.sql import functions as F

    kind = kind_of(_simple(spark_type))
    if kind == "timestamp":
        return getattr(F, _UNIX[unit])(col)
    if kind == "date":
        return F.unix_date(col).cast("long") * F.lit(_PER_DAY[unit])
    return col.cast("long")


def from_integers(col: Any, spark_type: Any, unit: str = "ms") -> Any:
    """The inverse of :func:`order_integers` for a result column: integers of ``unit`` back to ``spark_type``
    (a ``timestamp_ntz`` without a zone; a ``date`` floored to its day; other types unchanged)."""
    from pyspark.sql import functions as F

    t = _simple(spark_type)
    if t == "timestamp":
        return getattr(F, _FROM[unit])(col)
    if t == "timestamp_ntz":
        return F.timestamp_add(_ADD_UNIT[unit], col, F.lit("1970-01-01 00:00:00").cast("timestamp_ntz"))
    if t == "date":
        return F.date_from_unix_date(F.floor(col / F.lit(_PER_DAY[unit])).cast("int"))
    return col


def no_nulls(col: Any, what: str, label: str, keys: tuple[str, ...], hint: str | None = None) -> Any:
    """``col``, failing the job at its first null with an error that names the parameter ``what``, the column
    ``label`` and the key, then ``hint`` (by default what ``nulls="skip"`` does for a value or an order).

    Where a null would become NaN on its way to pandas, and the policy refuses it.
    """
    from pyspark.sql import functions as F

    parts: list[Any] = [F.lit(f"{what} column {label!r} holds nulls (first at key ")]
    for i, k in enumerate(keys):
        parts += [F.lit(f"{', ' if i else ''}{k}="), F.coalesce(F.col(k).cast("string"), F.lit("null"))]
    if hint is None:
        hint = NULL_VALUE_HINT if what == "value" else NULL_ORDER_HINT
    parts.append(F.lit(f"); {hint}"))
    return F.when(col.isNull(), F.raise_error(F.concat(*parts))).otherwise(col)


def require_watermark(schema: Any, on: str, param: str) -> None:
    """Refuse time windows over a streaming DataFrame whose column ``on`` carries no watermark (``param``: the
    parameter that names it, ``"on"`` or ``"order_by"``)."""
    field = schema[on]
    if WATERMARK_KEY not in (field.metadata or {}):
        raise ValueError(f"{param}: time windows over a streaming DataFrame need a watermark on column {on!r}: "
                         f"df.withWatermark({on!r}, '10 seconds') (a window is emitted once it passes its end)")


def distribute(d: Any, keys: list[Any] | tuple[Any, ...], order: Any, num_partitions: int | None = None) -> Any:
    """``d`` repartitioned by ``keys`` (one partition when there are none) and sorted within partitions by the
    keys and ``order``: each key's rows contiguous and in order, one ``Exchange`` and one sort."""
    if keys:
        d = d.repartition(num_partitions, *keys) if num_partitions else d.repartition(*keys)
    else:
        d = d.repartition(1)
    return d.sortWithinPartitions(*keys, order)
