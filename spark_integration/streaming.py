"""A streaming DataFrame's sliding windows: one PBA/SBA operator per key in Spark's state store.

:func:`spark_integration.sliding_window_aggregate` sends a streaming DataFrame
(``df.isStreaming``) here, after the same checks and projection as a batch one:
``groupBy(key).transformWithStateInPandas`` (PySpark >= 4.0, the ``protobuf``
package needed) with :class:`PBAProcessor`, append mode. Per key, the state
lives in Spark's state store (RocksDB's, the one transformWithState runs on:
:func:`use_rocksdb_state_store` sets it on a session that has Spark's default), so
it survives micro-batches, restarts from a checkpoint and the loss of an executor.
What is stored, and the one or two state calls a key makes per micro-batch:
:mod:`spark_integration.stream_state`; the per-key step, late rows
and event-time timers: :mod:`spark_integration.stream_key`.

* **Count windows** (time mode ``None``): a key's rows of a micro-batch are
  ordered by ``order_by``; a row ordered before what the key already consumed is
  late. A window is emitted in the micro-batch that completes it.
* **Time windows** (time mode ``EventTime``; ``order_by`` must be the column of
  ``df.withWatermark``): a window is emitted once the watermark reaches its end,
  as Spark's own ``window()`` in append mode; rows at or behind the watermark are
  late.

**Rows travel packed.** PySpark's ``transformWithStateInPandas`` walks its input
row by row in Python (``itertuples``: ~10 us a row, measured), so a stateless
``mapInArrow`` first packs a task's rows per key into one row (up to :data:`PACK_ROWS` rows at a time)
(:func:`pack_batches`: the key, the row count, and the rows as bytes), and the
processor unpacks them: a few rows per key and partition cross the shuffle and
that loop instead of every row.

**Arrow batches without a byte cap.** Spark 4 checks each Arrow batch it sends
to a Python worker against ``spark.sql.execution.arrow.maxBytesPerBatch`` after
every row, and that check (the batch's size, summed over the struct's child
vectors) took ~40% of the JVM's CPU time in the packing stage (profiled with
Java Flight Recorder). With the value ``2**31 - 1`` Spark skips it and bounds a
batch by ``spark.sql.execution.arrow.maxRecordsPerBatch`` alone, as Spark 3 did;
:func:`stream_windows` sets that value on the session when it is not set
(:func:`uncap_arrow_batch_bytes`; a value the user set is kept).

Late rows are never dropped silently: they are counted (``late`` in the
metrics, and in the log), and with ``late_rows="emit"`` they come out too, as
rows with ``late = true``, their ``late_order`` and ``late_value`` (and a null
``window_end`` and ``result``); split them off in ``foreachBatch``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

import pba_runtime as pr

from . import python_worker as rt
from .arrow_runner import ORDER_COL, VALUE_COL, _change_points, result_arrow_type, results_array
from .stream_fold import FoldPlan
from .stream_key import KeyOutput, KeyWindows, StateAccess, StepConfig
from .stream_state import HEADER_ID, STATE_KEY_SCHEMA, STATE_VALUE_SCHEMA, pack_rows, unpack_rows

__all__ = ["ARROW_BYTES_CONF", "LATE_POLICIES", "PACKED_COUNT", "PACKED_ROWS", "PACK_ROWS", "PBAProcessor",
           "QueryProcessor", "QueryStreamConfig", "StreamConfig", "UNCAPPED_ARROW_BYTES", "pack_batches",
           "stream_query", "stream_windows", "uncap_arrow_batch_bytes"]

log = logging.getLogger("spark_integration")

#: ``late_rows=``: ``"count"`` (metrics and log) or ``"emit"`` (also output rows with ``late = true``).
LATE_POLICIES = ("count", "emit")


#: The packed input's columns after the keys: rows in the pack, and the rows as :func:`pack_rows` bytes.
PACKED_COUNT = "pba_rows_n"
PACKED_ROWS = "pba_rows"


#: Rows :func:`pack_batches` gathers (over Arrow batches) before it packs them: a key's rows of a task travel as
#: one packed row per this many input rows (24 MB of int64 and float64 at most), not one per Arrow batch.
PACK_ROWS = 1 << 20


#: The session setting that caps the bytes of an Arrow batch sent to a Python worker (Spark >= 4.0).
ARROW_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"
#: Its "no cap" value: Spark then skips the per-row size check (batches stay bounded by maxRecordsPerBatch).
UNCAPPED_ARROW_BYTES = 2**31 - 1


def uncap_arrow_batch_bytes(spark: Any) -> bool:
    """Set :data:`ARROW_BYTES_CONF` to :data:`UNCAPPED_ARROW_BYTES` on ``spark`` unless it is set already.

    Spark checks an Arrow batch's size in bytes after each row it writes, unless the cap is
    ``2**31 - 1``; the check cost ~40% of the JVM's CPU in the packing ``mapInArrow`` stage (a 10M-row
    micro-batch: 3.4-4.0 s of CPU time with it, 1.8-1.9 s without). Batches then hold at most
    ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000 by default), as in Spark 3. A session
    setting: it applies to the session's other Arrow exchanges too. Returns whether it set it.
    """
    if spark.conf.get(ARROW_BYTES_CONF, None) is not None:
        return False
    spark.conf.set(ARROW_BYTES_CONF, str(UNCAPPED_ARROW_BYTES))
    log.info("spark_integration: set %s=%d (no per-row Arrow batch size check; set it to keep another value)",
             ARROW_BYTES_CONF, UNCAPPED_ARROW_BYTES)
    return True


STATE_STORE_CONF = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: Spark's default provider: transformWithState refuses it (STORE_BACKEND_NOT_SUPPORTED_FOR_TWS)
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def use_rocksdb_state_store(spark: Any) -> bool:
    """Set :data:`STATE_STORE_CONF` to RocksDB's provider on ``spark`` when it has none or Spark's default.

    ``transformWithStateInPandas`` runs on RocksDB's state store only: with Spark's default provider a
    streaming query fails at its first micro-batch (``STORE_BACKEND_NOT_SUPPORTED_FOR_TWS``). Another
    provider the user set is refused here, on the driver, with the setting to change. Returns whether it
    set the provider (logged).
    """
    have = spark.conf.get(STATE_STORE_CONF, None)
    if have == ROCKSDB_PROVIDER:
        return False
    if have not in (None, "", HDFS_PROVIDER):
        raise ValueError(f"{STATE_STORE_CONF} is {have}: the streaming adapter keeps each key's windows with "
                         f"transformWithStateInPandas, which needs {ROCKSDB_PROVIDER}")
    spark.conf.set(STATE_STORE_CONF, ROCKSDB_PROVIDER)
    log.info("spark_integration: set %s=%s (transformWithState needs RocksDB's state store)", STATE_STORE_CONF,
             ROCKSDB_PROVIDER)
    return True


def pack_batches(key_names: tuple[str, ...], batches: Iterator[pa.RecordBatch],
                 max_rows: int = PACK_ROWS) -> Iterator[pa.RecordBatch]:
    """Input batches' rows (keys, ORDER_COL int64, VALUE_COL double) packed per key.

    Batches are gathered until they hold ``max_rows`` rows (or the input ends), then packed: one
    row per key (the keys, the row count, the rows as :func:`pack_rows` bytes). Rows of a key keep
    their input order (a stable sort by key).

    Examples
    --------
    >>> b = pa.RecordBatch.from_pydict({"k": ["b", "a", "b"], ORDER_COL: [5, 1, 3], VALUE_COL: [0.5, 1.0, 3.0]})
    >>> out = list(pack_batches(("k",), iter([b, b])))
    >>> len(out), out[0].column("k").to_pylist(), out[0].column(PACKED_COUNT).to_pylist()
    (1, ['a', 'b'], [2, 4])
    >>> [t.tolist() for t in unpack_rows(out[0].column(PACKED_ROWS)[1].as_py())]
    [[5, 3, 5, 3], [0.5, 3.0, 0.5, 3.0]]
    >>> len(list(pack_batches(("k",), iter([b, b]), max_rows=3)))  # one pack per 3 rows or more
    2
    """
    held: list[pa.RecordBatch] = []
    n = 0
    for batch in batches:
        if batch.num_rows:
            held.append(batch)
            n += batch.num_rows
        if n >= max_rows:
            yield _pack(key_names, held, n)
            held, n = [], 0
    if held:
        yield _pack(key_names, held, n)


def _pack(key_names: tuple[str, ...], batches: list[pa.RecordBatch], n: int) -> pa.RecordBatch:
    """The rows of ``batches`` (``n`` in all) packed per key."""
    tbl = pa.Table.from_batches(batches)
    tbl = tbl.take(pc.sort_indices(tbl, sort_keys=[(k, "ascending") for k in key_names]))  # stable
    keys = [tbl.column(k).combine_chunks() for k in key_names]
    cps = _change_points(keys)
    starts = np.concatenate([[0], cps]).astype(np.int64)
    stops = np.concatenate([cps, [n]]).astype(np.int64)
    order = tbl.column(ORDER_COL).combine_chunks().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    vals = tbl.column(VALUE_COL).combine_chunks().to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    blobs = [pack_rows(order[a:b], vals[a:b]) for a, b in zip(starts.tolist(), stops.tolist())]
    first = pa.array(starts)
    arrays = [k.take(first) for k in keys] + [pa.array(stops - starts, pa.int64()), pa.array(blobs, pa.binary())]
    return pa.RecordBatch.from_arrays(arrays, names=[*key_names, PACKED_COUNT, PACKED_ROWS])


@dataclass
class StreamConfig:
    """What the processor needs on the workers (pickled with it)."""

    key_names: tuple[str, ...]
    step: StepConfig
    late_rows: str = "count"
    algorithm_column: bool = False
    metrics: Any = None
    log_level: Any = None
    _rtype: Any = field(default=None, repr=False, compare=False)

    @property
    def rtype(self) -> pa.DataType:
        if self._rtype is None:
            self._rtype = result_arrow_type(pr.get_aggregation(self.step.agg))
        return self._rtype

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st["_rtype"] = None
        return st


class _SparkState(StateAccess):
    """The current key's state through Spark's handles: one ``MapState`` (header and sealed chunks) and timers.

    Each call is a round trip to the JVM: counted in ``counts`` (``stream.calls.<kind>``, and the
    microseconds they took in ``stream.state_us``).
    """

    _HEADER = (HEADER_ID,)

    def __init__(self, handle: Any, parts: Any, counts: dict[str, int]):
        self.handle, self.parts, self.counts = handle, parts, counts

    def _call(self, kind: str, f: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return f(*args)
        finally:
            c = self.counts
            name = "stream.calls." + kind
            c[name] = c.get(name, 0) + 1
            us = int((time.perf_counter() - t0) * 1e6)
            c["stream.state_us"] = c.get("stream.state_us", 0) + us
            c["stream.state_us." + kind] = c.get("stream.state_us." + kind, 0) + us

    def get_header(self) -> bytes | None:
        row = self._call("get_header", self.parts.getValue, self._HEADER)
        return None if row is None else row[0]

    def put_header(self, blob: bytes) -> None:
        self._call("put_header", self.parts.updateValue, self._HEADER, (blob,))

    def chunks(self) -> Iterator[tuple[int, bytes]]:
        pairs = self._call("chunks", lambda: list(self.parts.iterator()))
        return iter([(k[0], v[0]) for k, v in pairs if k[0] != HEADER_ID])

    def put_chunk(self, cid: int, blob: bytes) -> None:
        self._call("put_chunk", self.parts.updateValue, (cid,), (blob,))

    def remove_chunk(self, cid: int) -> None:
        self._call("remove_chunk", self.parts.removeKey, (cid,))

    def register_timer(self, t: int) -> None:
        self._call("register_timer", self.handle.registerTimer, t)

    def delete_timer(self, t: int) -> None:
        self._call("delete_timer", self.handle.deleteTimer, t)


class _CountingProcessor(StatefulProcessor):
    """What both processors share: their packed input rows unpacked, and their counters (``self._counts``),
    timed per step and handed to ``cfg.metrics`` (and the log) when the task ends."""

    _done = "streaming task"

    def _unpacked(self, rows: Any) -> tuple[np.ndarray, np.ndarray]:
        """A key's packed rows (keys..., PACKED_COUNT, PACKED_ROWS; by position: PySpark renames some columns)."""
        order, values = [], []
        nk = len(self.cfg.key_names)
        for frame in rows:
            for blob in frame.iloc[:, nk + 1]:
                t, v = unpack_rows(blob)
                order.append(t)
                values.append(v)
        o = np.concatenate(order) if len(order) != 1 else order[0]
        v = np.concatenate(values) if len(values) != 1 else values[0]
        return o, v

    def _took(self, t0: float) -> None:
        """A key's step done: counted (``stream.steps``) with its time (``stream.step_us``, state calls included)."""
        c = self._counts
        c["stream.steps"] = c.get("stream.steps", 0) + 1
        c["stream.step_us"] = c.get("stream.step_us", 0) + int((time.perf_counter() - t0) * 1e6)

    def close(self) -> None:
        counts = getattr(self, "_counts", None)
        if counts:
            if self.cfg.metrics is not None:
                self.cfg.metrics.add(counts)
            log.info("spark_integration: %s done: %s", self._done, dict(sorted(counts.items())))


class PBAProcessor(_CountingProcessor):
    """The ``StatefulProcessor`` of :func:`stream_windows`: one :class:`~spark_integration.stream_key.KeyWindows` step per call."""

    def __init__(self, cfg: StreamConfig):
        self.cfg = cfg

    def init(self, handle: Any) -> None:
        t0 = time.perf_counter()
        rt.configure_worker_logging(self.cfg.log_level)
        self._counts: dict[str, int] = {}
        self._state = _SparkState(handle, handle.getMapState("pba_state", STATE_KEY_SCHEMA, STATE_VALUE_SCHEMA),
                                  self._counts)
        self._step = KeyWindows(self.cfg.step)
        self._counts["stream.tasks"] = 1
        self._counts["stream.init_us"] = int((time.perf_counter() - t0) * 1e6)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        t0 = time.perf_counter()
        o, v = self._unpacked(rows)
        self._counts["stream.input_us"] = self._counts.get("stream.input_us", 0) + int((time.perf_counter() - t0) * 1e6)
        wm = timerValues.getCurrentWatermarkInMs() if self._step.is_time else None
        out = self._frame(key, self._step.process(self._state, key, o, v, wm))
        self._took(t0)
        if out is not None:
            yield out

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        t0 = time.perf_counter()
        wm = timerValues.getCurrentWatermarkInMs()
        out = self._frame(key, self._step.process(self._state, key, np.empty(0, np.int64), np.empty(0, np.float64),
                                                  wm, fired=expiredTimerInfo.getExpiryTimeInMs()))
        self._took(t0)
        if out is not None:
            yield out

    # ------------------------------------------------------------------ output
    def _count(self, out: KeyOutput) -> None:
        c = self._counts
        for name, n in ((f"rows.{out.algorithm}", out.rows), ("windows", len(out.ends)),
                        ("late", len(out.late_order)), ("state.rebuilt" if out.rebuilt else "state.kept", 1)):
            if n:
                c[name] = c.get(name, 0) + n

    def _frame(self, key: Any, out: KeyOutput) -> Any:
        """The output rows of a key's step (a pandas DataFrame), or ``None`` for none."""
        import pandas as pd

        self._count(out)
        cfg = self.cfg
        m = len(out.ends)
        late = cfg.late_rows == "emit" and len(out.late_order)
        n_late = len(out.late_order) if late else 0
        if not m and not n_late:
            return None
        data: dict[str, Any] = {name: [key[i]] * (m + n_late) for i, name in enumerate(cfg.key_names)}
        # Arrow-backed columns: PySpark converts them as they are (a numpy NaN would become a null)
        ends = pa.array(out.ends, type=pa.int64())
        res = results_array(cfg.rtype, out.parts) if m else pa.array([], type=cfg.rtype)
        if n_late:
            ends = pa.concat_arrays([ends, pa.nulls(n_late, pa.int64())])
            res = pa.concat_arrays([res, pa.nulls(n_late, cfg.rtype)])
        data["window_end"] = pd.arrays.ArrowExtensionArray(ends)
        data["result"] = pd.arrays.ArrowExtensionArray(res)
        if cfg.algorithm_column:
            data["algorithm"] = [out.algorithm] * (m + n_late)
        if cfg.late_rows == "emit":
            data["late"] = pd.arrays.ArrowExtensionArray(pa.array([False] * m + [True] * n_late, pa.bool_()))
            data["late_order"] = pd.arrays.ArrowExtensionArray(pa.concat_arrays(
                [pa.nulls(m, pa.int64()), pa.array(out.late_order[:n_late], pa.int64())]))
            data["late_value"] = pd.arrays.ArrowExtensionArray(pa.concat_arrays(
                [pa.nulls(m, pa.float64()), pa.array(out.late_value[:n_late], pa.float64())]))
        return pd.DataFrame(data)


@dataclass
class QueryStreamConfig:
    """What :class:`QueryProcessor` needs on the workers (pickled with it): per output its name and step
    (``steps[i].namespace`` distinct per output: each output's operators have their own cache), which window
    it belongs to (``window_of``: outputs of one window emit the same ends), whether it is an integer
    (``ints``), and the one window's range when the rows carry ``window_start`` (``start_range``)."""

    key_names: tuple[str, ...]
    names: tuple[str, ...]
    steps: tuple[StepConfig, ...]
    window_of: tuple[int, ...]
    ints: tuple[bool, ...]
    start_range: int | None = None
    metrics: Any = None
    log_level: Any = None
    fold: FoldPlan | None = None  # time windows of max, min, sum, count, mean: steps are fold.primitives'

    @property
    def is_time(self) -> bool:
        return isinstance(self.steps[0].window, pr.TimeWindow)


class _KeptTimers(StateAccess):
    """A key's state through :class:`_SparkState` for one output of a query, its timers never deleted.

    The outputs of a key share its event-time timers (one set per key in Spark): an output moving its timer
    must not delete one another output registered at the same time. A timer left behind fires once and brings
    the key back for nothing more than a step at the watermark (each output emits what the watermark passed,
    whatever brought it).
    """

    def __init__(self, inner: _SparkState):
        self.inner = inner

    def get_header(self) -> bytes | None:
        return self.inner.get_header()

    def put_header(self, blob: bytes) -> None:
        self.inner.put_header(blob)

    def chunks(self) -> Iterator[tuple[int, bytes]]:
        return self.inner.chunks()

    def put_chunk(self, cid: int, blob: bytes) -> None:
        self.inner.put_chunk(cid, blob)

    def remove_chunk(self, cid: int) -> None:
        self.inner.remove_chunk(cid)

    def register_timer(self, t: int) -> None:
        self.inner.register_timer(t)

    def delete_timer(self, t: int) -> None:
        pass


class QueryProcessor(_CountingProcessor):
    """The ``StatefulProcessor`` of a streaming :func:`spark_integration.aggregate`: per key, one
    :class:`~spark_integration.stream_key.KeyWindows` step per output over the same rows (each output's state
    in a ``MapState`` of its own), their windows joined into one row per (key, window end).

    Time windows: the rows ahead of the watermark wait once for all outputs, in a ``MapState`` of the query's
    (``pba_pending``), and are handed to every output's step as the watermark passes them (a row at or
    behind the watermark when it arrives is late, counted once); an event-time timer at the oldest waiting
    row brings the key back when no row does."""

    _done = "streaming query task"

    def __init__(self, cfg: QueryStreamConfig):
        self.cfg = cfg

    def init(self, handle: Any) -> None:
        t0 = time.perf_counter()
        rt.configure_worker_logging(self.cfg.log_level)
        self._counts: dict[str, int] = {}
        self._states = [_KeptTimers(_SparkState(handle, handle.getMapState(f"pba_state_{i}", STATE_KEY_SCHEMA,
                                                                           STATE_VALUE_SCHEMA), self._counts))
                        for i in range(len(self.cfg.steps))]
        self._steps = [KeyWindows(s) for s in self.cfg.steps]
        self._pending = _SparkState(handle, handle.getMapState("pba_pending", STATE_KEY_SCHEMA, STATE_VALUE_SCHEMA),
                                    self._counts) if self.cfg.is_time else None
        self._counts["stream.tasks"] = 1
        self._counts["stream.init_us"] = int((time.perf_counter() - t0) * 1e6)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        t0 = time.perf_counter()
        o, v = self._unpacked(rows)
        if not self.cfg.is_time:
            out = self._rows(key, [step.process(st, key, o, v, None) for step, st in zip(self._steps, self._states)])
        else:
            wm = timerValues.getCurrentWatermarkInMs()
            out = self._release(key, o, v, wm, None)
        self._took(t0)
        if out is not None:
            yield out

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        t0 = time.perf_counter()
        out = self._release(key, np.empty(0, np.int64), np.empty(0, np.float64), timerValues.getCurrentWatermarkInMs(),
                            expiredTimerInfo.getExpiryTimeInMs())
        self._took(t0)
        if out is not None:
            yield out

    def _release(self, key: Any, t: np.ndarray, v: np.ndarray, wm: int, fired: int | None) -> Any:
        """Time windows: new rows join the key's waiting rows (late ones counted); the rows the watermark passed
        go to every output's step, the others wait (a timer at the oldest)."""
        st = self._pending
        on = wm is not None and wm > 0  # before Spark's first watermark rows only wait
        late = t <= wm if on else np.zeros(len(t), bool)
        if late.any():
            self._counts["late"] = self._counts.get("late", 0) + int(late.sum())
            t, v = t[~late], v[~late]
        plan = self.cfg.fold
        if plan is not None:  # the rows wait as partials per cell
            cells = plan.unpack(st.get_header())
            if len(t):
                cells = plan.merge(cells, plan.fold(t, v))
            ready = cells[0] <= wm if on else np.zeros(len(cells[0]), bool)
            go = plan.take(cells, ready)
            if ready.any() or len(t):
                rest = plan.take(cells, ~ready)
                st.put_header(plan.pack(rest))
                if len(rest[0]):
                    st.register_timer(int(rest[0].min()))  # never deleted (see _KeptTimers): fires once
            outs = [step.process(s, key, go[0], go[1][kind], wm, fired=fired, released=True)
                    for (_, kind), step, s in zip(plan.primitives, self._steps, self._states)]
            return self._folded_rows(key, plan, outs)
        pend_t, pend_v = unpack_rows(st.get_header())
        if len(t):
            pend_t, pend_v = np.concatenate([pend_t, t]), np.concatenate([pend_v, v])
        ready = pend_t <= wm if on else np.zeros(len(pend_t), bool)
        go_t, go_v = pend_t[ready], pend_v[ready]
        if len(go_t) and (go_t[1:] < go_t[:-1]).any():
            o = np.argsort(go_t, kind="stable")
            go_t, go_v = go_t[o], go_v[o]
        if ready.any() or len(t):
            pend_t, pend_v = pend_t[~ready], pend_v[~ready]
            st.put_header(pack_rows(pend_t, pend_v))
            if len(pend_t):
                st.register_timer(int(pend_t.min()))  # never deleted (see _KeptTimers): fires once
        return self._rows(key, [step.process(s, key, go_t, go_v, wm, fired=fired, released=True)
                                for step, s in zip(self._steps, self._states)])

    def _count_outs(self, outs: list[KeyOutput], windows: int) -> None:
        c = self._counts
        first = outs[0]
        for name, n in (("windows", windows), ("late", len(first.late_order)),
                        (f"rows.{first.algorithm}", first.rows)):  # late: count windows' (time: _release's)
            if n:
                c[name] = c.get(name, 0) + n

    def _folded_rows(self, key: Any, plan: FoldPlan, outs: list[KeyOutput]) -> Any:
        """:meth:`_rows` of a folded plan: each output read from its window's primitives."""
        ends = {wi: o.ends for (wi, _), o in zip(plan.primitives, outs)}
        results = {p: np.asarray(o.results, np.float64) for p, o in zip(plan.primitives, outs)}
        values = plan.output_values(results)
        per_output = [(ends[wi], val) for (wi, _), val in zip(plan.outputs, values)]
        self._count_outs(outs, sum(len(e) for e, _ in per_output))
        return self._frame(key, per_output)

    def _rows(self, key: Any, outs: list[KeyOutput]) -> Any:
        """The key's rows of this step (a pandas DataFrame), or ``None`` for none: every output in its column,
        null where its window has no end on the row (and where its result is null: NaN)."""
        self._count_outs(outs, sum(len(o.ends) for o in outs))
        return self._frame(key, [(o.ends, np.asarray(o.results, np.float64)) for o in outs])

    def _frame(self, key: Any, per_output: list[tuple[np.ndarray, np.ndarray]]) -> Any:
        """Each output's ``(ends, values)`` of a key joined into its rows (``None`` for none)."""
        import pandas as pd

        from pba_runtime.runtime.query_rows import join

        if not any(len(e) for e, _ in per_output):
            return None
        cfg = self.cfg
        parts = join([key], [[ev] for ev in per_output], list(cfg.window_of))
        ends, values = parts.columns
        m = len(ends)
        data: dict[str, Any] = {name: [key[i]] * m for i, name in enumerate(cfg.key_names)}
        if cfg.start_range is not None:
            data["window_start"] = ends - cfg.start_range
        data["window_end"] = ends
        for i, name in enumerate(cfg.names):
            col = values[:, i]
            null = np.isnan(col) if parts.absent is None else (parts.absent[:, i] | np.isnan(col))
            if cfg.ints[i]:
                data[name] = pd.arrays.IntegerArray(np.where(null, 0, col).astype(np.int64), null)
            else:
                data[name] = col  # NaN: null, as the batch query's
        return pd.DataFrame(data)


def _run_processor(d: Any, keys: tuple[str, ...], processor: StatefulProcessor, schema: Any, is_time: bool) -> Any:
    """``d``'s rows packed per key (one ``mapInArrow``), then ``groupBy(keys).transformWithStateInPandas`` of
    ``processor`` in append mode (event time for time windows), on a session set up for it."""
    from pyspark.sql import types as T

    packed_schema = T.StructType([d.schema[k] for k in keys] + [T.StructField(PACKED_COUNT, T.LongType(), False),
                                                                T.StructField(PACKED_ROWS, T.BinaryType(), False)])

    def pack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return pack_batches(keys, batches)

    uncap_arrow_batch_bytes(d.sparkSession)
    use_rocksdb_state_store(d.sparkSession)
    packed = d.mapInArrow(pack, packed_schema)
    return packed.groupBy(*keys).transformWithStateInPandas(processor, schema, "Append",
                                                            "EventTime" if is_time else "None")


def stream_query(d: Any, cfg: QueryStreamConfig, schema: Any) -> Any:
    """``d`` (key columns, ORDER_COL int64 ms, VALUE_COL double; streaming) to the query's rows, append mode."""
    return _run_processor(d, cfg.key_names, QueryProcessor(cfg), schema, cfg.is_time)


def stream_windows(d: Any, cfg: StreamConfig, schema: Any) -> Any:
    """``d`` (key columns, ORDER_COL as int64, VALUE_COL as double; streaming) to its windows, append mode.

    ``schema``: the output schema (with the late columns when ``cfg.late_rows == "emit"``).
    """
    return _run_processor(d, cfg.key_names, PBAProcessor(cfg), schema, isinstance(cfg.step.window, pr.TimeWindow))


def new_namespace() -> str:
    """A name for one streaming query's operators in the workers' caches."""
    return uuid.uuid4().hex
