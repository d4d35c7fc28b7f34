"""For RDD jobs: :func:`sliding_window_rdd`, and the ``mapPartitions`` function under it.

:func:`sliding_window_rdd` is the RDD form: it partitions the records by key
and sorts each partition by (key hash, order) itself, then runs
:func:`pba_partition_function` over each partition, so every key's records
are in one partition and in order, whatever the RDD's partitioning.

:func:`pba_partition_function` is the step under it, for an RDD that already
is partitioned by key (``rdd.keyBy(key).partitionBy(n).values()``, or a
DataFrame's ``repartition(key).sortWithinPartitions(order).rdd``) and for any
iterator of records. It keeps **one operator per key** of the partition, like
Flink's keyed state: records of different keys may interleave, each key's
records must arrive in order. Each key's records are buffered and fed to the
operator through the batch path (``insert_many``) ``batch_size`` at a time; at
the end of the partition every key is flushed (time windows still holding
tuples are emitted) and closed. It yields ``(key, window_end, result)``
tuples, key by key as their buffers fill, not in input order.

A key whose records are in two partitions would get two operators, each with
part of its stream: wrong windows. The function cannot see other partitions,
so when it is built on a driver with a SparkContext it reports the keys each
partition saw to the driver (an accumulator), and the driver warns
(:class:`KeyPartitionWarning`, and an ERROR log line) as soon as one key is seen
in two partitions of one stage; ``f.split_keys()`` counts them after an action.

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
import hashlib
import logging
import numbers
import operator
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

import pba_runtime as pr
from pba_runtime.host import validate

from . import python_worker as rt
from .arrow_runner import NULL_POLICIES
from .intervals import as_window
from .session import ensure_worker_python

__all__ = ["KeyPartitionWarning", "pba_partition_function", "sliding_window_rdd"]

log = logging.getLogger("spark_integration")

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
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


class KeyPartitionWarning(RuntimeWarning):
    """A key's records were in more than one partition: :func:`pba_partition_function` gave it wrong windows."""


def _fingerprint(key: Any) -> int:
    """A 64-bit fingerprint of a key, the same in every process (equal reprs of one type, equal prints)."""
    text = f"{type(key).__qualname__}:{key!r}".encode("utf-8", "backslashreplace")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


class _KeyOwners:
    """Which partition saw each key (by fingerprint), per stage; and how many keys more than one did."""

    __slots__ = ("example", "owners", "split")

    def __init__(self) -> None:
        self.owners: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # stage -> (sorted fps, partition of each)
        self.split = 0
        self.example: tuple[int, int] | None = None  # two partitions that shared a key

    @classmethod
    def of(cls, stage: int, partition: int, fps: np.ndarray) -> _KeyOwners:
        v = cls()
        fps = np.unique(fps)
        v.owners[stage] = (fps, np.full(fps.size, partition, dtype=np.int64))
        return v

    def merge(self, other: _KeyOwners) -> list[tuple[int, int, int]]:
        """Add ``other``; return the new splits as (count, partition a, partition b) per merged piece."""
        found = []
        self.split += other.split
        for stage, (fps, parts) in other.owners.items():
            if stage not in self.owners:
                self.owners[stage] = (fps, parts)
                continue
            have, owner = self.owners[stage]
            idx = np.searchsorted(have, fps)
            hit = idx < have.size
            hit[hit] = have[idx[hit]] == fps[hit]
            clash = np.flatnonzero(hit)[owner[idx[hit]] != parts[hit]]
            if clash.size:
                i = int(clash[0])
                found.append((int(clash.size), int(owner[idx[i]]), int(parts[i])))
                self.split += int(clash.size)
            new = ~hit
            self.owners[stage] = (np.insert(have, idx[new], fps[new]), np.insert(owner, idx[new], parts[new]))
        return found


class _KeyOwnersParam:
    """Spark ``AccumulatorParam`` of :class:`_KeyOwners`; merging on the driver warns at once of a split key."""

    def __init__(self, hint: str):
        self.hint = hint

    def zero(self, value: _KeyOwners) -> _KeyOwners:
        return _KeyOwners()

    def addInPlace(self, value1: _KeyOwners, value2: _KeyOwners) -> _KeyOwners:
        for n, a, b in value1.merge(value2):
            if value1.example is None:
                value1.example = (a, b)
            msg = (f"spark_integration: {n} key(s) had records in more than one partition (e.g. partitions {a} "
                   f"and {b}), so pba_partition_function ran one operator per piece of each: their windows are "
                   f"wrong. Each key's records must be in one partition: use {self.hint}")
            log.error(msg)
            warnings.warn(msg, KeyPartitionWarning, stacklevel=2)
        return value1


def _active_context() -> Any:
    """The driver's active SparkContext, or ``None`` (no PySpark imported, none started, or in a worker)."""
    if "pyspark" not in sys.modules:
        return None
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    return SparkContext._active_spark_context


_PARTITION_HINT = ("si.sliding_window_rdd(rdd, window, agg, key=..., order=..., value=...), which partitions "
                   "by key itself, or partition first: rdd.keyBy(key).partitionBy(n).values(), or a DataFrame's "
                   "repartition(key).sortWithinPartitions(order).rdd")


class _Key:
    """One key's records of the partition not yet fed to its operator."""

    __slots__ = ("kop", "last", "rows", "ts", "vals")

    def __init__(self) -> None:
        self.kop: rt.KeyOperator | None = None
        self.vals: list[Any] = []
        self.ts: list[int] = []
        self.last: Any = None
        self.rows = 0


class _Reader:
    """How :func:`pba_partition_function` reads a record: its key, value and order, with the null policy."""

    def __init__(self, key: Any, value: Any, order: Any, is_time: bool, nulls: str):
        self.get_key, _ = _getter(key, "key")
        self.get_value, self.vlabel = _getter(value, "value")
        self.get_order, self.olabel = _getter(order, "order") if order is not None else (None, "")
        self.is_time, self.skip_nulls = is_time, nulls == "skip"

    def order_of(self, rec: Any, k: Any, st: _Key) -> Any:
        """The record's order value (epoch ms for a time window), checked non-decreasing within the key.

        ``None``: a null order to skip.
        """
        t = self.get_order(rec)
        if t is None:
            if self.skip_nulls:
                return None
            raise ValueError(f"order column {self.olabel} is null for key {k!r}; "
                             "pass nulls='skip' to drop such records")
        if self.is_time:
            t = _to_ms(t, self.olabel)
        if st.last is not None and t < st.last:
            raise ValueError(
                f"order column {self.olabel} is not sorted within key {k!r}: {t!r} after {st.last!r} "
                "(each key's records must arrive in order)"
            )
        st.last = t
        return t

    def null_value(self, k: Any) -> None:
        """A null value: fine to skip with ``nulls="skip"``, else the error."""
        if not self.skip_nulls:
            raise ValueError(f"value column {self.vlabel} is null for key {k!r}; nulls='fail' is the policy: "
                             "pass nulls='skip' to drop records whose value is null")


class _Partition:
    """One partition's run: each key's buffer, the keys' operators (a :class:`~pba_runtime.host.KeyedHost`)."""

    def __init__(self, reader: _Reader, window: Any, agg: pr.Aggregation, algorithm: str, batch_size: int,
                 cores_per_task: int | None, min_slices: int | None, pool_workers: int,
                 pool_factory: Callable[[int], pr.WorkerPool] | None, engine: str = "auto"):
        local = rt.local_cores()
        self.reader, self.agg, self.batch_size = reader, agg, batch_size
        self.is_time, self.slide = isinstance(window, pr.TimeWindow), window.slide
        self.host = rt.key_host(algorithm, window, agg, cores=1 if local == 1 else cores_per_task,
                                min_slices=min_slices, pool_workers=pool_workers, pool_factory=pool_factory,
                                engine=engine)
        self.keys: dict[Any, _Key] = {}
        self.counts: dict[str, int] = {}

    def consume(self, records: Iterable[Any]) -> Iterator[tuple[Any, int, Any]]:
        """Buffer each record under its key; feed a key's operator when its buffer is full."""
        reader, keys, is_time, batch_size = self.reader, self.keys, self.is_time, self.batch_size
        get_key, get_value, has_order = reader.get_key, reader.get_value, reader.get_order is not None
        t = None
        for rec in records:
            k = get_key(rec)
            v = get_value(rec)
            st = keys.get(k)
            if st is None:
                st = keys[k] = _Key()
            if has_order:
                t = reader.order_of(rec, k, st)
                if t is None:
                    continue
            if v is None:
                reader.null_value(k)
                continue
            st.vals.append(v)
            if is_time:
                st.ts.append(t)
            st.rows += 1
            if len(st.vals) >= batch_size:
                yield from self.feed(k, st, final=False)

    def _open(self, k: Any, st: _Key) -> rt.KeyOperator:
        # slices per insert_many call: PBA's batch path uses its pool only for pieces it splits
        # (batch.splits_rows), so a key fed in small pieces gains nothing from it (reason small_key)
        n = len(st.vals)
        key_slices = (n // self.slide) if not self.is_time else ((st.ts[-1] - st.ts[0]) // self.slide + 1 if n else 0)
        st.kop = rt.KeyOperator.of(self.host.open(key_slices))
        self.host.add(k, st.kop)
        return st.kop

    def feed(self, k: Any, st: _Key, final: bool) -> Iterator[tuple[Any, int, Any]]:
        """Feed ``k``'s buffer to its operator (opened at the first feed); ``final``: flush and close it."""
        kop = st.kop if st.kop is not None else self._open(k, st)
        op = kop.op
        if st.vals:
            vals = _as_values(st.vals, self.reader.vlabel, self.agg.name)
            ts = np.asarray(st.ts, dtype=np.int64) if self.is_time else None
            st.vals, st.ts = [], []
            ends, res = op.insert_many(vals, ts)
            yield from _rows(k, ends, res)
        if final:
            if self.is_time:
                ends, res = op.flush()
                yield from _rows(k, ends, res)
            self.host.pop(k)
            kop.close(self.counts, st.rows)

    def finish(self) -> Iterator[tuple[Any, int, Any]]:
        """The end of the partition: feed, flush and close every key."""
        for k, st in self.keys.items():
            yield from self.feed(k, st, final=True)

    def close(self, metrics: rt.AlgorithmMetrics | None) -> None:
        """Close what a failure left open; count the partition in ``metrics`` and the log."""
        self.host.close()
        if metrics is not None and self.counts:
            metrics.add(self.counts)
        if self.counts:
            log.info("spark_integration: partition done: %s",
                     ", ".join(f"{n}={c}" for n, c in sorted(self.counts.items())))


def _check_partition_args(window: Any, agg: Any, algorithm: str, nulls: str, batch_size: Any,
                          order: Any, engine: str = "auto") -> tuple[Any, pr.Aggregation]:
    """The window and the aggregation of :func:`pba_partition_function`, its arguments checked on the driver."""
    win = as_window(window)
    win, aggregation, _ = validate(win, agg, algorithm, engine=engine)
    if nulls not in NULL_POLICIES:
        raise ValueError(f"nulls must be one of {', '.join(map(repr, NULL_POLICIES))}, got {nulls!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if isinstance(win, pr.TimeWindow) and order is None:
        raise ValueError("order (the timestamp field) is required for a time window")
    return win, aggregation


def _key_check(check_partitioning: bool) -> Any:
    """On a driver with a SparkContext: the accumulator the partitions report their keys to (else ``None``)."""
    sc = _active_context() if check_partitioning else None
    if sc is None:
        return None
    ensure_worker_python(sc)  # the workers must import this package
    return sc.accumulator(_KeyOwners(), _KeyOwnersParam(_PARTITION_HINT))


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
    check_partitioning: bool = True,
    engine: str = "auto",
) -> Callable[[Iterable[Any]], Iterator[tuple[Any, int, Any]]]:
    """A ``mapPartitions`` function: per-key sliding windows over interleaved keyed records.

    Each key's records must all be in one partition, in order: on an RDD that is
    not partitioned by key use :func:`sliding_window_rdd`, which does that step.

    Parameters
    ----------
    window : CountWindow, TimeWindow or tuple of intervals
        As in :func:`spark_integration.sliding_window_aggregate`. Time windows
        take integer order values in the window's unit, or datetimes/dates
        (epoch milliseconds; a naive datetime is local time, as PySpark's Rows
        give a ``TimestampType`` column; a ``TimestampNTZType`` column's Rows hold
        its wall clock, naive too: convert it first, e.g. ``F.unix_millis(ts)``,
        for UTC windows as ``window()`` and the DataFrame API give).
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
        at least :data:`spark_integration.python_worker.PBA_MIN_KEY_SLICES` slices, ~1M for
        windows under 2^11 slices): smaller ones run SBA (``small_key``).
    metrics : AlgorithmMetrics, optional
        Counts which algorithm ran (a Spark accumulator; see :func:`spark_integration.algorithm_metrics`).
    cores_per_task : int, optional
        Cores one task may use (below 2, ``"auto"`` runs SBA: reason ``one_core``); default: unknown.
    pool_workers, pool_factory, min_slices, engine
        As in :func:`spark_integration.sliding_window_aggregate`.
    check_partitioning : bool
        Built on a driver with an active SparkContext: each partition reports the
        keys it saw (64-bit fingerprints, an accumulator) and the driver warns
        (:class:`KeyPartitionWarning`) as soon as a key was in two partitions of
        one stage (its windows are then wrong). ``False`` skips the check.
    engine : str
        What runs each key's window merge (:mod:`pba_runtime.kernels`; default ``"auto"``).

    Returns
    -------
    callable
        ``f(records) -> iterator of (key, window_end, result)``; ``result`` is a
        float (an int for count and argmax, a list for moment_sketch and collect).
        ``f.split_keys()`` (on the driver, after an action): how many keys were
        seen in more than one partition (0 when checked and right; ``None``
        when not checked).

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

    In Spark, each key's records in one partition and in order first
    (:func:`sliding_window_rdd` does this step itself):

    >>> from pyspark.rdd import portable_hash  # doctest: +SKIP
    >>> from pyspark.sql import SparkSession  # doctest: +SKIP
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
    >>> rdd = spark.sparkContext.parallelize([("a", 6_000, 4.0), ("b", 2_000, 5.0), ("a", 1_000, 1.0)], 2)  # doctest: +SKIP
    >>> by_key = (rdd.keyBy(lambda r: (r[0], r[1]))  # (key, order): partitioned by key, sorted by both
    ...           .repartitionAndSortWithinPartitions(2, partitionFunc=lambda kt: portable_hash(kt[0]))
    ...           .values())  # doctest: +SKIP
    >>> sorted(by_key.mapPartitions(f).collect())  # doctest: +SKIP
    [('a', 5000, 1.0), ('a', 10000, 4.0), ('a', 15000, 4.0), ('b', 5000, 5.0), ('b', 10000, 5.0)]
    >>> f.split_keys()  # doctest: +SKIP
    0
    """
    win, aggregation = _check_partition_args(window, agg, algorithm, nulls, batch_size, order, engine)
    reader = _Reader(key, value, order, isinstance(win, pr.TimeWindow), nulls)
    key_check = _key_check(check_partitioning)

    def partition(records: Iterable[Any]) -> Iterator[tuple[Any, int, Any]]:
        run = _Partition(reader, win, aggregation, algorithm, batch_size, cores_per_task, min_slices,
                         pool_workers, pool_factory, engine)
        try:
            yield from run.consume(records)
            yield from run.finish()
            if key_check is not None:
                _report_keys(key_check, run.keys)
        finally:
            run.close(metrics)

    def split_keys() -> int | None:
        return None if key_check is None else key_check.value.split

    partition.split_keys = split_keys  # type: ignore[attr-defined]
    return partition


def sliding_window_rdd(
    rdd: Any,
    window: Any,
    agg: str | pr.Aggregation,
    *,
    key: Any,
    value: Any,
    order: Any,
    num_partitions: int | None = None,
    algorithm: str = "auto",
    nulls: str = "fail",
    batch_size: int = 4096,
    metrics: rt.AlgorithmMetrics | None = None,
    cores_per_task: int | None = None,
    pool_workers: int = 1,
    pool_factory: Callable[[int], pr.WorkerPool] | None = None,
    min_slices: int | None = None,
    engine: str = "auto",
) -> Any:
    """Per-key sliding windows over an RDD of records, partitioned however: the RDD form of the adapter.

    Shuffles the records by key (``portable_hash``, as ``partitionBy``) and sorts
    each partition by (key hash, order) (``repartitionAndSortWithinPartitions``),
    so every key's records are in one partition and in order, then runs
    :func:`pba_partition_function` over each partition. The same windows as
    :func:`~spark_integration.sliding_window_aggregate` (ties in ``order``: the
    shuffle's order, not deterministic). Keys need not be comparable, only
    hashable; a ``None`` order sorts first and meets ``nulls``.

    Parameters
    ----------
    rdd : pyspark.RDD
        Records (``Row``, dict or tuple), in any partitioning and order.
    window, agg, key, value
        As in :func:`pba_partition_function`.
    order : str, int, tuple or callable
        Orders each key's records (a timestamp for time windows); required: after
        the shuffle a key's records arrive in no defined order.
    num_partitions : int, optional
        Partitions of the shuffle by key (default: the RDD's).
    algorithm, nulls, batch_size, metrics, cores_per_task, pool_workers, pool_factory, min_slices, engine
        As in :func:`pba_partition_function`.

    Returns
    -------
    pyspark.RDD
        Of ``(key, window_end, result)``.

    Raises
    ------
    ValueError, TypeError
        As :func:`pba_partition_function`; ``order`` missing; a bad ``num_partitions``.

    Examples
    --------
    >>> import pba_runtime as pr, spark_integration as si  # doctest: +SKIP
    >>> from pyspark.sql import SparkSession  # doctest: +SKIP
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
    >>> rdd = spark.sparkContext.parallelize(  # doctest: +SKIP
    ...     [("a", 3, 1.0), ("b", 1, 7.0), ("a", 1, 5.0), ("b", 2, 3.0), ("a", 2, 2.0)], 3)
    >>> out = si.sliding_window_rdd(rdd, pr.CountWindow(range=2, slide=1), "max", key=0, order=1, value=2)  # doctest: +SKIP
    >>> sorted(out.collect())  # doctest: +SKIP
    [('a', 2, 5.0), ('a', 3, 2.0), ('b', 2, 7.0)]
    """
    if order is None:
        raise ValueError("order is required: after the shuffle by key a key's records arrive in no defined order; "
                         "pass the field (or function) that orders them, e.g. a timestamp or a sequence number")
    if num_partitions is not None and (isinstance(num_partitions, bool) or not isinstance(num_partitions, int)
                                       or num_partitions < 1):
        raise ValueError(f"num_partitions must be a positive integer or None, got {num_partitions!r}")
    f = pba_partition_function(window, agg, key=key, value=value, order=order, algorithm=algorithm, nulls=nulls,
                               batch_size=batch_size, metrics=metrics, cores_per_task=cores_per_task,
                               pool_workers=pool_workers, pool_factory=pool_factory, min_slices=min_slices,
                               check_partitioning=False, engine=engine)  # partitioned by key here
    ensure_worker_python(rdd.context)
    from pyspark.rdd import portable_hash

    get_key, _ = _getter(key, "key")
    get_order, _ = _getter(order, "order")

    def shuffle_key(rec: Any) -> tuple[int, tuple[int, Any]]:
        t = get_order(rec)
        return portable_hash(get_key(rec)), ((0, 0) if t is None else (1, t))

    n = num_partitions or rdd.getNumPartitions()
    by_key = (rdd.keyBy(shuffle_key)
              .repartitionAndSortWithinPartitions(n, partitionFunc=operator.itemgetter(0))
              .values())
    return by_key.mapPartitions(f)


def _report_keys(key_check: Any, keys: dict[Any, Any]) -> None:
    """In a task: add this partition's key fingerprints to ``key_check`` (nothing outside a Spark task)."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None or not keys:
        return
    fps = np.fromiter((_fingerprint(k) for k in keys), dtype=np.uint64, count=len(keys))
    key_check.add(_KeyOwners.of(tc.stageId(), tc.partitionId(), fps))


def _as_values(vals: list[Any], label: str, agg_name: str) -> np.ndarray:
    """The buffered values as float64, refusing anything that is not a real number (naming the column)."""
    arr = np.asarray(vals)
    if arr.dtype.kind in "biuf":
        return arr.astype(np.float64, copy=False)
    for v in vals:
        if isinstance(v, (bool, numbers.Real, decimal.Decimal)):
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
