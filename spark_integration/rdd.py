"""For RDD jobs: ``rdd.mapPartitions(pba_partition_function(window, agg, key=..., order=..., value=...))``.

The function keeps **one operator per key** of the partition, like Flink's
keyed state: records of different keys may interleave, each key's records
must arrive in order. Each key's records are buffered and fed to the operator
through the batch path (``insert_many``) ``batch_size`` at a time; at the end
of the partition every key is flushed (time windows still holding tuples are
emitted) and closed. It yields ``(key, window_end, result)`` tuples, key by
key as their buffers fill, not in input order.

It needs nothing from Spark, so it also runs on any iterator of records.

Examples
--------
>>> import pba_runtime as pr
>>> f = pba_partition_function(pr.CountWindow(range=2, slide=1), "sum", key="k", value="v")
>>> rows = [{"k": "a", "v": 1}, {"k": "b", "v": 10}, {"k": "a", "v": 2}, {"k": "b", "v": 20}, {"k": "a", "v": 3}]
>>> sorted(f(iter(rows)))
[('a', 2, 3.0), ('a', 3, 5.0), ('b', 2, 30.0)]
"""

from __future__ import annotations

import datetime as _dt
import decimal
import logging
import numbers
import operator
from typing import Any, Callable, Iterable, Iterator

import numpy as np

import pba_runtime as pr

from . import runtime as rt
from .arrow_runner import NULL_POLICIES
from .intervals import as_window

__all__ = ["pba_partition_function"]

log = logging.getLogger("spark_integration")

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MS = _dt.timedelta(milliseconds=1)


def _getter(field: Any, what: str) -> tuple[Callable[[Any], Any], str]:
    """A record accessor for ``field`` (a name, an index, a tuple of them, or a callable) and its label."""
    if field is None:
        raise ValueError(f"{what} is required")
    if callable(field):
        return field, getattr(field, "__name__", what)
    if isinstance(field, tuple):
        getters = [_getter(f, what)[0] for f in field]
        return (lambda rec: tuple(g(rec) for g in getters)), ", ".join(map(str, field))
    if isinstance(field, (str, int)) and not isinstance(field, bool):
        get = operator.itemgetter(field)

        def access(rec: Any) -> Any:
            try:
                return get(rec)
            except (KeyError, IndexError, ValueError, TypeError):
                if isinstance(field, str) and hasattr(rec, field):
                    return getattr(rec, field)
                raise KeyError(
                    f"{what} {field!r} is not a field of the record {rec!r} "
                    "(records must be Rows, dicts or tuples with that field, or pass a callable)"
                ) from None

        return access, repr(field)
    raise TypeError(f"{what} must be a field name, an index, a tuple of them or a callable, got {type(field).__name__}")


def _to_ms(t: Any, label: str) -> int:
    """A time-window order value as an integer: ints as they are, datetimes/dates as epoch milliseconds."""
    if isinstance(t, bool):
        raise TypeError(f"order column {label} must be integers, datetimes or dates, got bool {t!r}")
    if isinstance(t, numbers.Integral):
        return int(t)
    if isinstance(t, _dt.datetime):
        aware = t if t.tzinfo is not None else t.astimezone()  # naive: local time, as PySpark's Rows
        return (aware - _EPOCH) // _MS
    if isinstance(t, _dt.date):
        return (t - _dt.date(1970, 1, 1)).days * 86_400_000
    raise TypeError(f"order column {label} must be integers, datetimes or dates for a time window, "
                    f"got {type(t).__name__} {t!r}")


class _Key:
    __slots__ = ("kop", "vals", "ts", "last", "rows")

    def __init__(self) -> None:
        self.kop: rt.KeyOperator | None = None
        self.vals: list[Any] = []
        self.ts: list[int] = []
        self.last: Any = None
        self.rows = 0


def pba_partition_function(
    window: Any,
    agg: str | pr.Aggregation,
    *,
    key: Any,
    value: Any,
    order: Any = None,
    algorithm: str = "auto",
    nulls: str = "fail",
    batch_size: int = 4096,
    metrics: rt.AlgorithmMetrics | None = None,
    cores_per_task: int | None = None,
    pool_workers: int = 1,
    pool_factory: Callable[[int], pr.WorkerPool] | None = None,
    min_slices: int | None = None,
) -> Callable[[Iterable[Any]], Iterator[tuple[Any, int, Any]]]:
    """A ``mapPartitions`` function: per-key sliding windows over interleaved keyed records.

    Parameters
    ----------
    window : CountWindow, TimeWindow or tuple of intervals
        As in :func:`spark_integration.sliding_window_aggregate`. Time windows
        take integer order values in the window's unit, or datetimes/dates
        (epoch milliseconds; a naive datetime is local time, as PySpark's Rows).
    agg : str or pba_runtime.Aggregation
    key, value, order : str, int, tuple or callable
        How to read a record (``Row``, dict or tuple): a field name, an index,
        a tuple of them (the key becomes a tuple), or a function of the record.
        ``order`` is required for time windows (the timestamp); for count
        windows it is optional and, when given, checked to be non-decreasing.
    algorithm : str
        ``"auto"`` or a name in ``pba_runtime.ALGORITHMS``.
    nulls : {"fail", "skip"}
        A ``None`` value (or time-window timestamp) raises (``"fail"``) or the
        record is dropped (``"skip"``).
    batch_size : int
        Records buffered per key before ``insert_many``. Under ``"auto"``, PBA needs
        pieces its batch path splits with the pool (:func:`pba_runtime.batch.splits_rows`:
        at least :data:`spark_integration.runtime.PBA_MIN_KEY_SLICES` slices, ~1M for
        windows under 2^11 slices): smaller ones run SBA (``small_key``).
    metrics : AlgorithmMetrics, optional
        Counts which algorithm ran (a Spark accumulator; see :func:`spark_integration.algorithm_metrics`).
    cores_per_task : int, optional
        Cores one task may use (below 2, ``"auto"`` runs SBA: reason ``one_core``); default: unknown.
    pool_workers, pool_factory, min_slices
        As in :func:`spark_integration.sliding_window_aggregate`.

    Returns
    -------
    callable
        ``f(records) -> iterator of (key, window_end, result)``; ``result`` is a
        float (an int for count and argmax, a list for moment_sketch and collect).

    Raises
    ------
    ValueError
        (when iterated) An ``order`` that decreases within a key, naming the
        column; a null value with ``nulls="fail"``.
    TypeError
        A value that is not a number, naming the column.

    Examples
    --------
    >>> f = pba_partition_function(("10 seconds", "5 seconds"), "max", key=0, order=1, value=2)
    >>> list(f([("a", 1_000, 1.0), ("a", 6_000, 4.0), ("a", 12_000, 2.0)]))
    [('a', 5000, 1.0), ('a', 10000, 4.0), ('a', 15000, 4.0), ('a', 20000, 2.0)]
    """
    win = as_window(window)
    is_time = isinstance(win, pr.TimeWindow)
    aggregation = pr.get_aggregation(agg)
    if algorithm != "auto" and algorithm not in pr.ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; accepted: {', '.join(pr.ALGORITHMS)}, or 'auto'")
    pr.create("sba" if algorithm in ("auto", "pba") else algorithm, win, aggregation).close()
    if nulls not in NULL_POLICIES:
        raise ValueError(f"nulls must be one of {', '.join(map(repr, NULL_POLICIES))}, got {nulls!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if is_time and order is None:
        raise ValueError("order (the timestamp field) is required for a time window")
    get_key, _ = _getter(key, "key")
    get_value, vlabel = _getter(value, "value")
    get_order, olabel = _getter(order, "order") if order is not None else (None, "")
    slide = win.slide

    def feed(state: dict, k: Any, st: _Key, final: bool) -> Iterator[tuple[Any, int, Any]]:
        if st.kop is None:
            # slices per insert_many call: PBA's batch path uses its pool only for pieces it splits
            # (batch.splits_rows), so a key fed in small pieces gains nothing from it (reason small_key)
            n = len(st.vals)
            key_slices = (n // slide) if not is_time else ((st.ts[-1] - st.ts[0]) // slide + 1 if n else 0)
            st.kop = rt.KeyOperator.open(algorithm, win, aggregation, cores=state["cores"],
                                         key_slices=key_slices, min_slices=min_slices,
                                         pool_workers=pool_workers, pool_factory=pool_factory)
        op = st.kop.op
        if st.vals:
            vals = _as_values(st.vals, vlabel, aggregation.name)
            ts = np.asarray(st.ts, dtype=np.int64) if is_time else None
            st.vals, st.ts = [], []
            ends, res = op.insert_many(vals, ts)
            yield from _rows(k, ends, res)
        if final:
            if is_time:
                ends, res = op.flush()
                yield from _rows(k, ends, res)
            st.kop.close(state["counts"], st.rows)

    def partition(records: Iterable[Any]) -> Iterator[tuple[Any, int, Any]]:
        local = rt.local_cores()
        state = {"cores": 1 if local == 1 else cores_per_task,
                 "counts": {}}
        keys: dict[Any, _Key] = {}
        try:
            for rec in records:
                k = get_key(rec)
                v = get_value(rec)
                st = keys.get(k)
                if st is None:
                    st = keys[k] = _Key()
                if get_order is not None:
                    t = get_order(rec)
                    if t is None:
                        if nulls == "skip":
                            continue
                        raise ValueError(f"order column {olabel} is null for key {k!r}; pass nulls='skip' to drop such records")
                    if is_time:
                        t = _to_ms(t, olabel)
                    if st.last is not None and t < st.last:
                        raise ValueError(
                            f"order column {olabel} is not sorted within key {k!r}: {t!r} after {st.last!r} "
                            "(each key's records must arrive in order)"
                        )
                    st.last = t
                if v is None:
                    if nulls == "skip":
                        continue
                    raise ValueError(f"value column {vlabel} is null for key {k!r}; nulls='fail' is the policy: "
                                     "pass nulls='skip' to drop records whose value is null")
                st.vals.append(v)
                if is_time:
                    st.ts.append(t)
                st.rows += 1
                if len(st.vals) >= batch_size:
                    yield from feed(state, k, st, final=False)
            for k, st in keys.items():
                yield from feed(state, k, st, final=True)
        finally:
            for st in keys.values():
                if st.kop is not None:
                    st.kop.op.close()
            if metrics is not None and state["counts"]:
                metrics.add(state["counts"])
            if state["counts"]:
                log.info("spark_integration: partition done: %s",
                         ", ".join(f"{n}={c}" for n, c in sorted(state["counts"].items())))

    return partition


def _as_values(vals: list[Any], label: str, agg_name: str) -> np.ndarray:
    """The buffered values as float64, refusing anything that is not a real number (naming the column)."""
    arr = np.asarray(vals)
    if arr.dtype.kind in "biuf":
        return arr.astype(np.float64, copy=False)
    for v in vals:
        if isinstance(v, bool) or isinstance(v, (numbers.Real, decimal.Decimal)):
            continue
        raise TypeError(f"value column {label} must be numeric for aggregation {agg_name!r}, "
                        f"got {type(v).__name__} {v!r}")
    return np.asarray([float(v) for v in vals], dtype=np.float64)


def _rows(k: Any, ends: np.ndarray, res: Any) -> Iterator[tuple[Any, int, Any]]:
    if not len(ends):
        return
    out = res.tolist() if isinstance(res, np.ndarray) else [list(map(float, r)) for r in res]
    for e, r in zip(ends.tolist(), out):
        yield (k, e, r)
