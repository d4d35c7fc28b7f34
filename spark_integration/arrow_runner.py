"""Per-key sliding-window aggregation over a stream of Arrow record batches (no Spark needed).

This is what runs inside ``mapInArrow``: the input is one Spark partition as
record batches, **sorted by key, then by order** (so each key's rows are
contiguous and in order, possibly spanning many batches); the output is record
batches of ``(key columns..., window_end, result)``.

Each key gets one operator (``pba_runtime.create``). Its rows are buffered as
numpy arrays and fed through the vectorised batch path
``op.insert_many(values, timestamps)`` in pieces of ``batch_rows`` or more,
so a key larger than any batch streams through the same operator with bounded
memory. When the key ends, time windows are flushed (the key's final
watermark: every row of the key is in this partition) and the operator is
closed. The algorithm is chosen per key by
:func:`spark_integration.python_worker.choose_algorithm`.

Inside ``applyInPandas`` each call holds one whole key as a pandas DataFrame:
:func:`run_key_frame` runs the same per-key steps on its numpy columns and
returns a DataFrame, with no trip through Arrow in between.

Input columns: the key columns under their own names, the value as
:data:`VALUE_COL` (numeric; cast to float64), and for time windows the order
as :data:`ORDER_COL` (integers in the window's unit, or Arrow timestamps or
dates, which become epoch milliseconds, floored).

Examples
--------
>>> import pyarrow as pa, pba_runtime as pr
>>> cfg = RunnerConfig(key_names=("k",), window=pr.CountWindow(range=2, slide=1), agg="max")
>>> batch = pa.RecordBatch.from_pydict({"k": ["a", "a", "a", "b", "b"], VALUE_COL: [1.0, 3.0, 2.0, 5.0, 4.0]})
>>> out = pa.Table.from_batches(list(run_keyed_batches(cfg, [batch])))
>>> out.to_pydict()
{'k': ['a', 'a', 'b'], 'window_end': [2, 3, 2], 'result': [3.0, 3.0, 5.0]}
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import pba_runtime as pr
from pba_runtime.quantiles import as_quantile

from . import python_worker as rt

__all__ = [
    "COUNT_COL",
    "NULLS_COL",
    "NULL_ORDER_HINT",
    "NULL_VALUE_HINT",
    "ORDER_COL",
    "PREAGGREGATABLE",
    "VALUE_COL",
    "RunnerConfig",
    "order_to_int64",
    "result_arrow_type",
    "results_array",
    "run_key_frame",
    "run_keyed_batches",
]

log = logging.getLogger("spark_integration")

VALUE_COL = "__pba_value"
ORDER_COL = "__pba_order"
COUNT_COL = "__pba_count"
NULLS_COL = "__pba_nulls"
NULL_POLICIES = ("fail", "skip")
#: What a null value / a null time-window timestamp error says after naming the column (and key).
NULL_VALUE_HINT = "nulls='fail' is the policy: pass nulls='skip' to drop rows whose value is null"
NULL_ORDER_HINT = "a time window needs a timestamp for every row; pass nulls='skip' to drop them"

#: How Spark pre-aggregates a time window's rows per key and sub-slice (a slide, cut at
#: ``range % slide`` when it is not 0, so every window boundary is a sub-slice boundary),
#: by what the aggregation declares (``Aggregation.preaggregate``): kind ->
#: [(core aggregation, input column)] channels, one operator each. ``mean`` runs two
#: (sum of sums, sum of counts), ``count`` sums counts.
PREAGGREGATABLE: dict[str, list[tuple[str, str]]] = {
    "max": [("max", VALUE_COL)],
    "min": [("min", VALUE_COL)],
    "sum": [("sum", VALUE_COL)],
    "argmax": [("argmax", VALUE_COL)],
    "count": [("sum", COUNT_COL)],
    "mean": [("sum", VALUE_COL), ("sum", COUNT_COL)],
}


@dataclass
class RunnerConfig:
    """Everything a worker needs (pickled into the Spark closure).

    Parameters
    ----------
    key_names : tuple of str
        Key columns, output under the same names.
    window : CountWindow or TimeWindow
    agg : str or Aggregation
    algorithm : str
        ``"auto"`` or a name in ``pba_runtime.ALGORITHMS``.
    nulls : {"fail", "skip"}
        What a null value (or a null time-window timestamp) does.
    value_label, order_label : str
        The user's column names, for error messages.
    batch_rows : int
        A key's rows are fed to ``insert_many`` in pieces of at least this many.
    cores_per_task : int, optional
        Cores one task may use, from the driver (``None``: unknown).
    pool_workers : int
    pool_factory : callable, optional
        ``factory(workers) -> pba_runtime.WorkerPool`` (default: a thread pool).
    metrics : AlgorithmMetrics, optional
    algorithm_column : bool
        Add a string column ``algorithm`` (which algorithm computed the row).
    min_slices : int, optional
        Overrides :data:`spark_integration.python_worker.SPARK_PBA_MIN_SLICES`.
    engine : str
        What runs each key's window merge (:mod:`pba_runtime.kernels`).
    log_level : str or int, optional
        Configure the ``spark_integration`` logger in the worker (to stderr).
    out_rows : int
        Rows per output batch (about).
    preaggregated : bool
        The input holds one row per key and *sub-slice* (see :data:`PREAGGREGATABLE`):
        :data:`VALUE_COL` the sub-slice's partial, :data:`COUNT_COL` its row count,
        :data:`NULLS_COL` (``nulls="fail"``) its null values, :data:`ORDER_COL` its
        representative timestamp (integers).
    """

    key_names: tuple[str, ...]
    window: pr.CountWindow | pr.TimeWindow
    agg: Any
    algorithm: str = "auto"
    nulls: str = "fail"
    value_label: str = "value"
    order_label: str = "order_by"
    batch_rows: int = 1 << 17
    cores_per_task: int | None = None
    pool_workers: int = 1
    pool_factory: Callable[[int], pr.WorkerPool] | None = None
    metrics: Any = None
    algorithm_column: bool = False
    min_slices: int | None = None
    engine: str = "auto"
    log_level: Any = None
    out_rows: int = 1 << 16
    preaggregated: bool = False
    _agg_obj: Any = field(default=None, repr=False, compare=False)

    @property
    def aggregation(self) -> pr.Aggregation:
        if self._agg_obj is None:
            self._agg_obj = as_quantile(self.agg) or pr.get_aggregation(self.agg)
        return self._agg_obj

    @property
    def is_time(self) -> bool:
        return isinstance(self.window, pr.TimeWindow)

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st["_agg_obj"] = None
        return st


def result_arrow_type(agg: pr.Aggregation) -> pa.DataType:
    """The Arrow type of the ``result`` column: float64, int64 (count, argmax) or list<float64>.

    Examples
    --------
    >>> result_arrow_type(pr.get_aggregation("argmax")), result_arrow_type(pr.get_aggregation("moment_sketch"))
    (DataType(int64), ListType(list<item: double>))
    """
    if agg.result == "int":
        return pa.int64()
    if agg.result in ("vector", "list"):
        return pa.list_(pa.float64())
    return pa.float64()


def order_to_int64(col: pa.Array, label: str = "order_by") -> np.ndarray:
    """Order values as int64: integers unchanged, timestamps and dates as epoch milliseconds (floored).

    Examples
    --------
    >>> import datetime as dt
    >>> order_to_int64(pa.array([dt.datetime(1970, 1, 1, 0, 0, 1, 999)], pa.timestamp("us"))).tolist()
    [1000]
    >>> order_to_int64(pa.array([-1], pa.timestamp("us"))).tolist()  # floored, as Spark's window()
    [-1]
    """
    t = col.type
    if pa.types.is_timestamp(t):
        raw = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
        per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[t.unit]
        return raw * 1000 if per_ms is None else np.floor_divide(raw, per_ms)
    if pa.types.is_date32(t):
        return col.cast(pa.int32()).to_numpy(zero_copy_only=False).astype(np.int64) * 86_400_000
    if pa.types.is_date64(t):
        return col.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_integer(t):
        return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    raise TypeError(
        f"order_by column {label!r} must be integers, a timestamp or a date for time windows, got {t}"
    )


# --------------------------------------------------------------------------- key boundaries
def _ne(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Element-wise "a differs from b", with null == null and NaN == NaN (Spark's grouping)."""
    t = a.type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t)
    if numeric and a.null_count == 0 and b.null_count == 0:
        x = a.to_numpy(zero_copy_only=False)
        y = b.to_numpy(zero_copy_only=False)
        ne = x != y
        if pa.types.is_floating(t):
            ne &= ~(np.isnan(x) & np.isnan(y))
        return ne
    neq = pc.fill_null(pc.not_equal(a, b), False)
    one_null = pc.xor(pc.is_null(a), pc.is_null(b))
    res = pc.or_(neq, one_null).to_numpy(zero_copy_only=False)
    if pa.types.is_floating(t):
        res &= ~(pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False).to_numpy(zero_copy_only=False))
    return res


def _change_points(cols: list[pa.Array]) -> np.ndarray:
    """Row indices where the key differs from the previous row."""
    n = len(cols[0])
    if n < 2:
        return np.empty(0, dtype=np.int64)
    mask = None
    for c in cols:
        ne = _ne(c.slice(1), c.slice(0, n - 1))
        mask = ne if mask is None else (mask | ne)
    return np.flatnonzero(mask) + 1


def _same_key(a: list[pa.Array], b: list[pa.Array]) -> bool:
    return not any(bool(_ne(x, y)[0]) for x, y in zip(a, b))


def _key_repr(key_row: list[Any], names: tuple[str, ...]) -> str:
    """``k=3, m='a'`` from one-row key columns (Arrow arrays, or lists on the pandas path)."""
    vals = [c[0].as_py() if isinstance(c, pa.Array) else c[0] for c in key_row]
    return ", ".join(f"{n}={v!r}" for n, v in zip(names, vals))


def _cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """``parts`` end to end; a lone part as it is (no copy), none as an empty ``dtype`` array."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype)



def results_array(rtype: pa.DataType, parts: list[Any]) -> pa.Array:
    """Operator results (pieces from ``insert_many``/``flush``) as one Arrow array of ``rtype``.

    Examples
    --------
    >>> results_array(pa.float64(), [np.array([1.0, float("nan")]), np.array([2.0])]).to_pylist()
    [1.0, nan, 2.0]
    """
    if pa.types.is_list(rtype):
        rows: list[Any] = []
        for p in parts:
            if isinstance(p, np.ndarray) and p.ndim == 2:
                offsets = pa.array(np.arange(p.shape[0] + 1, dtype=np.int32) * p.shape[1])
                rows.append(pa.ListArray.from_arrays(offsets, pa.array(p.reshape(-1), type=pa.float64())))
            else:
                rows.append(pa.array([list(map(float, x)) for x in p], type=rtype))
        return pa.concat_arrays(rows) if len(rows) > 1 else rows[0] if rows else pa.array([], type=rtype)
    dtype = np.int64 if rtype == pa.int64() else np.float64
    return pa.array(_cat([np.asarray(p, dtype=dtype) for p in parts], dtype), type=rtype)

# --------------------------------------------------------------------------- the runner
class _KeyState:
    __slots__ = ("buffered", "key_row", "kops", "last_t", "rows", "ts", "vals")

    def __init__(self, key_row: list[pa.Array]):
        self.key_row = key_row
        self.kops: list[rt.KeyOperator] = []  # one per channel
        self.vals: list[list[np.ndarray]] = []  # pieces, each one array per channel
        self.ts: list[np.ndarray] = []
        self.buffered = 0
        self.rows = 0
        self.last_t: int | None = None


class _Runner:
    def __init__(self, cfg: RunnerConfig):
        self.cfg = cfg
        self.agg = cfg.aggregation
        self.rtype = result_arrow_type(self.agg)
        self.preaggregate = self.agg.preaggregate if cfg.preaggregated else None
        if cfg.preaggregated:
            if not cfg.is_time or self.preaggregate is None:
                raise ValueError("pre-aggregated input needs a time window and an aggregation that declares "
                                 f"preaggregate (one of {sorted(PREAGGREGATABLE)})")
            self.channels = PREAGGREGATABLE[self.preaggregate]
        else:
            self.channels = [(cfg.agg, VALUE_COL)]
        self.slide = cfg.window.slide
        local = rt.local_cores()  # a worker pinned to one CPU has one core whatever the conf says
        self.cores = 1 if local == 1 else cfg.cores_per_task
        # one host per channel: the algorithm policy, the validation and the process's pool (keys come one at
        # a time, sorted, so each key's operators are opened and closed here rather than kept in the hosts)
        self.hosts = [rt.key_host(cfg.algorithm, cfg.window, agg, cores=self.cores, min_slices=cfg.min_slices,
                                  pool_workers=cfg.pool_workers, pool_factory=cfg.pool_factory, engine=cfg.engine)
                      for agg, _ in self.channels]
        self.min_piece = max(int(cfg.batch_rows), 1)
        self.cur: _KeyState | None = None
        self.pending: list[tuple[list[pa.Array], np.ndarray, Any, str]] = []
        self.pending_rows = 0
        self.counts: dict[str, int] = {}

    # ---------------------------------------------------------------- algorithm and operator
    def _open(self, st: _KeyState, key_slices: int | None) -> None:
        cfg = self.cfg
        for host in self.hosts:
            st.kops.append(rt.KeyOperator.of(host.open(key_slices)))
        log.debug("spark_integration: key %s runs %s (%s)", _key_repr(st.key_row, cfg.key_names),
                  st.kops[0].algorithm, st.kops[0].reason)

    def _feed(self, st: _KeyState, final: bool) -> None:
        if not st.buffered:
            if final and not st.kops:
                self._open(st, 0)
            return
        nch = len(self.channels)
        if len(st.vals) == 1:
            vs = st.vals[0]
        else:
            vs = [np.concatenate([piece[c] for piece in st.vals]) for c in range(nch)]
        t = None
        if self.cfg.is_time:
            t = st.ts[0] if len(st.ts) == 1 else np.concatenate(st.ts)
        st.vals, st.ts, st.buffered = [], [], 0
        if not st.kops:
            key_slices = None
            if final:  # the whole key is here: its size is known
                key_slices = len(vs[0]) // self.slide if t is None else int((t[-1] - t[0]) // self.slide) + 1
            self._open(st, key_slices)
        outs = [k.op.insert_many(v, t) for k, v in zip(st.kops, vs)]
        self._emit(st, outs)

    def _emit(self, st: _KeyState, outs: list[tuple[np.ndarray, Any]]) -> None:
        ends, res = outs[0]
        if not len(ends):
            return
        if self.preaggregate == "mean":
            res = res / outs[1][1]
        elif self.preaggregate == "count":
            res = res.astype(np.int64)
        self.pending.append((st.key_row, ends, res, st.kops[0].algorithm))
        self.pending_rows += len(ends)

    def _finish(self, st: _KeyState) -> None:
        try:
            self._feed(st, final=True)
            if self.cfg.is_time:
                self._emit(st, [k.op.flush() for k in st.kops])
        finally:
            for i, k in enumerate(st.kops):  # the key counts once, whatever its channels
                k.close(self.counts if i == 0 else {}, st.rows)

    # ---------------------------------------------------------------- input
    def _columns(self, batch: pa.RecordBatch) -> tuple[list[pa.Array], list[np.ndarray], np.ndarray | None,
                                                        np.ndarray | None, np.ndarray | None]:
        """Key columns; one float64 array per channel; timestamps; rows to keep; rows each row stands for."""
        cfg = self.cfg
        names = batch.schema.names
        self._require(names, "batch")
        keys = [batch.column(k) for k in cfg.key_names]
        keep = None
        weights = None
        if cfg.preaggregated:
            weights = batch.column(COUNT_COL).to_numpy(zero_copy_only=False)
            if cfg.nulls == "fail" and NULLS_COL in names:
                nn = batch.column(NULLS_COL).to_numpy(zero_copy_only=False)
                if nn.any():
                    i = int(np.flatnonzero(nn)[0])
                    self._null_error([c.slice(i, 1) for c in keys])
        vs = []
        for _, col in self.channels:
            vcol = batch.column(col)
            t = pa.types
            if not (t.is_integer(vcol.type) or t.is_floating(vcol.type) or t.is_boolean(vcol.type)
                    or t.is_decimal(vcol.type) or t.is_null(vcol.type)):
                raise TypeError(f"value column {cfg.value_label!r} must be numeric, got Arrow type {vcol.type}")
            if vcol.null_count:
                if cfg.nulls == "fail" and not cfg.preaggregated:
                    i = int(np.flatnonzero(vcol.is_null().to_numpy(zero_copy_only=False))[0])
                    self._null_error([c.slice(i, 1) for c in keys])
                valid = vcol.is_valid().to_numpy(zero_copy_only=False)
                keep = valid if keep is None else keep & valid
                vcol = vcol.fill_null(0)
            if vcol.type != pa.float64():
                vcol = vcol.cast(pa.float64())
            vs.append(vcol.to_numpy(zero_copy_only=False))
        ts = None
        if cfg.is_time:
            ocol = batch.column(ORDER_COL)
            if ocol.null_count:
                if cfg.nulls == "fail":
                    raise ValueError(f"order_by column {cfg.order_label!r} holds nulls: {NULL_ORDER_HINT}")
                valid = ocol.is_valid().to_numpy(zero_copy_only=False)
                keep = valid if keep is None else keep & valid
                ocol = ocol.fill_null(pa.scalar(0, ocol.type))
            ts = order_to_int64(ocol, cfg.order_label)
        return keys, vs, ts, keep, weights

    def _require(self, names: list[str], where: str) -> None:
        """Every key column, and the columns the channels (and a time window) read, are in ``names``."""
        for k in self.cfg.key_names:
            if k not in names:
                raise ValueError(f"key column {k!r} is not in the {where} (columns: {names})")
        for col in {col for _, col in self.channels} | ({ORDER_COL} if self.cfg.is_time else set()):
            if col not in names:
                raise ValueError(f"column {col!r} is not in the {where} (columns: {names})")

    def _null_error(self, key_row: list[Any]) -> None:
        raise ValueError(
            f"value column {self.cfg.value_label!r} holds nulls (first at key {_key_repr(key_row, self.cfg.key_names)}); "
            + NULL_VALUE_HINT
        )

    def process(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cfg = self.cfg
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            keys, vs, ts, keep, weights = self._columns(batch)
            cps = _change_points(keys)
            starts = np.concatenate([[0], cps]).astype(np.int64)
            stops = np.concatenate([cps, [n]]).astype(np.int64)
            for j, (a, b) in enumerate(zip(starts.tolist(), stops.tolist())):
                row = [c.slice(a, 1) for c in keys]
                if self.cur is None or not (j == 0 and _same_key(self.cur.key_row, row)):
                    if self.cur is not None:
                        self._finish(self.cur)
                    self.cur = _KeyState(row)
                self._add(self.cur, vs, ts, keep, weights, a, b)
            if self.pending_rows >= cfg.out_rows:
                yield self._drain()
        if self.cur is not None:
            self._finish(self.cur)
            self.cur = None
        if self.pending_rows:
            yield self._drain()

    def _add(self, st: _KeyState, vs: list[np.ndarray], ts: np.ndarray | None, keep: np.ndarray | None,
             weights: np.ndarray | None, a: int, b: int) -> None:
        """Rows ``a:b`` of the columns (all of ``st``'s key): buffered, and fed once ``batch_rows`` are."""
        m = keep[a:b] if keep is not None else None

        def cut(x: np.ndarray) -> np.ndarray:
            return x[a:b] if m is None else x[a:b][m]

        piece = [cut(v) for v in vs]
        tt = cut(ts) if ts is not None else None
        w = cut(weights) if weights is not None else None
        rows = len(piece[0])
        if not rows:
            return
        if tt is not None:
            self._check_sorted(st, tt)
            st.ts.append(tt)
        st.vals.append(piece)
        st.buffered += rows
        st.rows += int(w.sum()) if w is not None else rows
        if st.buffered >= self.min_piece:
            self._feed(st, final=False)

    def process_frame(self, frame: Any) -> Any:
        """One key's rows, a pandas DataFrame in order, to its windows as a pandas DataFrame.

        No null may be in ``frame`` (through pandas a null and a NaN are both NaN, so every NaN
        here is a value); the key is ``frame``'s first row.
        """
        import pandas as pd

        cfg = self.cfg
        self._require(list(frame.columns), "frame")
        n = len(frame)
        key_row = [[frame[k].iloc[0] if n else None] for k in cfg.key_names]
        vs = [frame[col].to_numpy(dtype=np.float64) for _, col in self.channels]
        ts = weights = None
        if cfg.is_time:
            o = frame[ORDER_COL]
            if o.dtype.kind not in "iu":  # pandas made a float column of an integer one with nulls
                raise ValueError(f"order_by column {cfg.order_label!r} holds nulls, or is not integral")
            ts = o.to_numpy(dtype=np.int64)
        if cfg.preaggregated:
            weights = frame[COUNT_COL].to_numpy()
            if cfg.nulls == "fail" and NULLS_COL in frame.columns and frame[NULLS_COL].to_numpy().any():
                self._null_error(key_row)
        self.cur = st = _KeyState(key_row)
        self._add(st, vs, ts, None, weights, 0, n)
        self.cur = None
        self._finish(st)
        pend, self.pending, self.pending_rows = self.pending, [], 0
        counts = [len(p[1]) for p in pend]
        m = sum(counts)
        data: dict[str, Any] = {k: frame[k].array[:1].repeat(m) if m else frame[k].array[:0] for k in cfg.key_names}
        # Arrow-backed columns: PySpark converts them to Arrow as they are, where a numpy-backed
        # column's NaN would become a null (it masks ``isnull()``)
        ends = _cat([p[1] for p in pend], np.int64)
        data["window_end"] = pd.arrays.ArrowExtensionArray(pa.array(ends, type=pa.int64()))
        data["result"] = pd.arrays.ArrowExtensionArray(self._results([p[2] for p in pend]))
        if cfg.algorithm_column:
            data["algorithm"] = np.repeat(np.array([p[3] for p in pend], dtype=object), counts)
        return pd.DataFrame(data)

    def _check_sorted(self, st: _KeyState, tt: np.ndarray) -> None:
        last = st.last_t
        if last is not None and tt[0] < last:
            bad, prev = int(tt[0]), last
        else:
            down = np.flatnonzero(tt[1:] < tt[:-1])
            if not len(down):
                st.last_t = int(tt[-1])
                return
            bad, prev = int(tt[down[0] + 1]), int(tt[down[0]])
        raise ValueError(
            f"order_by column {self.cfg.order_label!r} is not sorted within key "
            f"{_key_repr(st.key_row, self.cfg.key_names)}: {bad} after {prev}"
        )

    # ---------------------------------------------------------------- output
    def _drain(self) -> pa.RecordBatch:
        pend, self.pending, self.pending_rows = self.pending, [], 0
        counts = np.fromiter((len(p[1]) for p in pend), dtype=np.int64, count=len(pend))
        idx = pa.array(np.repeat(np.arange(len(pend), dtype=np.int64), counts))
        arrays: list[pa.Array] = []
        for j in range(len(self.cfg.key_names)):
            col = pa.concat_arrays([p[0][j] for p in pend])
            arrays.append(col.take(idx))
        arrays.append(pa.array(_cat([p[1] for p in pend], np.int64), type=pa.int64()))
        arrays.append(self._results([p[2] for p in pend]))
        names = list(self.cfg.key_names) + ["window_end", "result"]
        if self.cfg.algorithm_column:
            algs = sorted({p[3] for p in pend})
            codes = np.repeat(np.array([algs.index(p[3]) for p in pend], dtype=np.int32), counts)
            arrays.append(pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(algs)).cast(pa.string()))
            names.append("algorithm")
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _results(self, parts: list[Any]) -> pa.Array:
        return results_array(self.rtype, parts)

    def summary(self) -> str:
        c = self.counts
        algs = sorted(k.split(".", 1)[1] for k in c if k.startswith("keys."))
        parts = [f"{c[f'keys.{a}']} key(s) {a} ({c.get(f'rows.{a}', 0)} rows)" for a in algs]
        reasons = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in sorted(c.items()) if k.startswith("reason."))
        return f"{'; '.join(parts) or 'no keys'}; reasons: {reasons or '-'}; windows: {c.get('windows', 0)}"


def run_keyed_batches(cfg: RunnerConfig, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Aggregate a partition's record batches (sorted by key, then order) key by key.

    Parameters
    ----------
    cfg : RunnerConfig
    batches : iterable of pyarrow.RecordBatch
        Key columns, :data:`VALUE_COL` and, for time windows, :data:`ORDER_COL`.

    Yields
    ------
    pyarrow.RecordBatch
        ``key columns..., window_end (int64), result`` (and ``algorithm`` when asked).

    Raises
    ------
    ValueError
        A null value with ``nulls="fail"``, or a decreasing timestamp within a key.
    """
    rt.configure_worker_logging(cfg.log_level)
    runner = _Runner(cfg)
    try:
        yield from runner.process(batches)
    finally:
        _wrap_up(runner, "partition")


def run_key_frame(cfg: RunnerConfig, frame: Any) -> Any:
    """Aggregate one key's rows, a pandas DataFrame in order: what runs inside ``applyInPandas``.

    The pandas twin of :func:`run_keyed_batches`, without a trip through Arrow: the
    columns go to the operator as numpy arrays and the windows come back as a
    DataFrame. Through pandas a null and a NaN are both NaN, so ``frame`` must hold
    no null (:func:`~spark_integration.sliding_window_aggregate` drops or rejects them
    in Spark first) and every NaN in it is a value.

    Parameters
    ----------
    cfg : RunnerConfig
    frame : pandas.DataFrame
        One key's rows in order: the key columns, :data:`VALUE_COL` and, for time
        windows, :data:`ORDER_COL` (integers).

    Returns
    -------
    pandas.DataFrame
        ``key columns..., window_end (int64), result`` (and ``algorithm`` when asked),
        typed even when empty.

    Examples
    --------
    >>> import pandas as pd
    >>> cfg = RunnerConfig(key_names=("k",), window=pr.CountWindow(range=2, slide=1), agg="max")
    >>> run_key_frame(cfg, pd.DataFrame({"k": ["a"] * 3, VALUE_COL: [1.0, float("nan"), 2.0]}))
       k  window_end  result
    0  a           2     NaN
    1  a           3     NaN
    """
    rt.configure_worker_logging(cfg.log_level)
    runner = _Runner(cfg)
    try:
        return runner.process_frame(frame)
    finally:
        _wrap_up(runner, "key")


def _wrap_up(runner: _Runner, what: str) -> None:
    """Close what a failure left open; count the run in the metrics and the log."""
    if runner.cur is not None:
        for k in runner.cur.kops:
            k.op.close()
    if runner.cfg.metrics is not None and runner.counts:
        runner.cfg.metrics.add(runner.counts)
    if runner.counts:
        log.info("spark_integration: %s done: %s", what, runner.summary())
