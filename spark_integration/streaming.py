"""A streaming DataFrame's sliding windows: one PBA/SBA operator per key in Spark's state store.

:func:`spark_integration.sliding_window_aggregate` sends a streaming DataFrame
(``df.isStreaming``) here, after the same checks and projection as a batch one:
``groupBy(key).transformWithStateInPandas`` (PySpark >= 4.0, the ``protobuf``
package needed) with :class:`PBAProcessor`, append mode. Per key, the state
lives in Spark's state store (any provider; RocksDB is the one for large
state), so it survives micro-batches, restarts from a checkpoint and the loss
of an executor. What is stored, and the one or two state calls a key makes per
micro-batch: :mod:`spark_integration.stream_state`; the per-key step, late rows
and event-time timers: :mod:`spark_integration.stream_key`.

* **Count windows** (time mode ``None``): a key's rows of a micro-batch are
  ordered by ``order_by``; a row ordered before what the key already consumed is
  late. A window is emitted in the micro-batch that completes it.
* **Time windows** (time mode ``EventTime``; ``order_by`` must be the column of
  ``df.withWatermark``): a window is emitted once the watermark reaches its end,
  as Spark's own ``window()`` in append mode; rows at or behind the watermark are
  late.

Late rows are never dropped silently: they are counted (``late`` in the
metrics, and in the log), and with ``late_rows="emit"`` they come out too, as
rows with ``late = true``, their ``late_order`` and ``late_value`` (and a null
``window_end`` and ``result``); split them off in ``foreachBatch``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

import pba_runtime as pr

from . import runtime as rt
from .arrow_runner import result_arrow_type, results_array
from .stream_key import KeyOutput, KeyWindows, StateAccess, StepConfig
from .stream_state import CHUNK_KEY_SCHEMA, CHUNK_VALUE_SCHEMA, HEADER_SCHEMA

__all__ = ["LATE_POLICIES", "PBAProcessor", "StreamConfig", "stream_windows"]

log = logging.getLogger("spark_integration")

#: ``late_rows=``: ``"count"`` (metrics and log) or ``"emit"`` (also output rows with ``late = true``).
LATE_POLICIES = ("count", "emit")


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
    """The current key's state through Spark's handles."""

    def __init__(self, handle: Any, header: Any, chunks: Any):
        self.handle, self.header, self.chunk_state = handle, header, chunks

    def get_header(self) -> tuple | None:
        return self.header.get()

    def put_header(self, row: tuple) -> None:
        self.header.update(row)

    def chunks(self) -> Iterator[tuple[int, bytes]]:
        return ((k[0], v[0]) for k, v in self.chunk_state.iterator())

    def put_chunk(self, cid: int, blob: bytes) -> None:
        self.chunk_state.updateValue((cid,), (blob,))

    def remove_chunk(self, cid: int) -> None:
        self.chunk_state.removeKey((cid,))

    def register_timer(self, t: int) -> None:
        self.handle.registerTimer(t)

    def delete_timer(self, t: int) -> None:
        self.handle.deleteTimer(t)


class PBAProcessor(StatefulProcessor):
    """The ``StatefulProcessor`` of :func:`stream_windows`: one :class:`~spark_integration.stream_key.KeyWindows` step per call."""

    def __init__(self, cfg: StreamConfig):
        self.cfg = cfg

    def init(self, handle: Any) -> None:
        rt.configure_worker_logging(self.cfg.log_level)
        header = handle.getValueState("pba_header", HEADER_SCHEMA)
        chunks = handle.getMapState("pba_chunks", CHUNK_KEY_SCHEMA, CHUNK_VALUE_SCHEMA)
        self._state = _SparkState(handle, header, chunks)
        self._step = KeyWindows(self.cfg.step)
        self._counts: dict[str, int] = {}

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        order, values = [], []
        nk = len(self.cfg.key_names)
        for frame in rows:  # keys..., ORDER_COL, VALUE_COL: by position (PySpark renames '__'-prefixed columns)
            order.append(frame.iloc[:, nk].to_numpy(dtype=np.int64))
            values.append(frame.iloc[:, nk + 1].to_numpy(dtype=np.float64))
        o = np.concatenate(order) if len(order) != 1 else order[0]
        v = np.concatenate(values) if len(values) != 1 else values[0]
        wm = timerValues.getCurrentWatermarkInMs() if self._step.is_time else None
        yield from self._emit(key, self._step.process(self._state, key, o, v, wm))

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        wm = timerValues.getCurrentWatermarkInMs()
        out = self._step.process(self._state, key, np.empty(0, np.int64), np.empty(0, np.float64), wm,
                                 fired=expiredTimerInfo.getExpiryTimeInMs())
        yield from self._emit(key, out)

    def close(self) -> None:
        counts = getattr(self, "_counts", None)
        if counts:
            if self.cfg.metrics is not None:
                self.cfg.metrics.add(counts)
            log.info("spark_integration: streaming task done: %s", dict(sorted(counts.items())))

    # ------------------------------------------------------------------ output
    def _count(self, out: KeyOutput) -> None:
        c = self._counts
        for name, n in ((f"rows.{out.algorithm}", out.rows), ("windows", len(out.ends)),
                        ("late", len(out.late_order)), ("state.rebuilt" if out.rebuilt else "state.kept", 1)):
            if n:
                c[name] = c.get(name, 0) + n

    def _emit(self, key: Any, out: KeyOutput) -> Iterator[Any]:
        import pandas as pd

        self._count(out)
        cfg = self.cfg
        m = len(out.ends)
        late = cfg.late_rows == "emit" and len(out.late_order)
        n_late = len(out.late_order) if late else 0
        if not m and not n_late:
            return
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
        yield pd.DataFrame(data)


def stream_windows(d: Any, cfg: StreamConfig, schema: Any) -> Any:
    """``d`` (key columns, ORDER_COL as int64, VALUE_COL as double; streaming) to its windows, append mode.

    ``schema``: the output schema (with the late columns when ``cfg.late_rows == "emit"``).
    """
    time_mode = "EventTime" if isinstance(cfg.step.window, pr.TimeWindow) else "None"
    return d.groupBy(*cfg.key_names).transformWithStateInPandas(PBAProcessor(cfg), schema, "Append", time_mode)


def new_namespace() -> str:
    """A name for one streaming query's operators in the workers' caches."""
    return uuid.uuid4().hex
