"""A query job's rows: the outputs of a :class:`pba_runtime.Query` as a job computes them, joined into one row
per (key, window end), and written so.

A job given ``query=`` (:class:`~pba_runtime.runtime.Job`) runs one operator per output and key in its task
slots, all fed by one pass over each batch (the source, the shuffle of tuples to slots and the grouping by key
are paid once). :class:`QueryOutputs` is what the slots are told: each output's name, window and
aggregation. :func:`join` puts a batch's outputs side by side: one row per (key, window end) that any output's
window emitted, ordered by key then end, every output in its own column, absent where its window has no end
on that row (the frames' window output, ``docs/semantics.md``). The sinks write those rows as
:func:`columns` say: ``key``, ``start`` (only when the query has one window), ``end``, then one column per
output.

Examples
--------
>>> import numpy as np, pba_runtime as pr
>>> q = pr.Query(windows=[pr.CountWindow(2), pr.CountWindow(3)], aggs={"load": ["max", "count"]},
...              missing="propagate")
>>> outs = QueryOutputs.of(q)
>>> outs.columns()
('key', 'end', 'load_max_2', 'load_count_2', 'load_max_3', 'load_count_3')
>>> e2, e3 = np.array([2, 3]), np.array([3])
>>> parts = join(["a"], [[(e2, np.array([5.0, 6.0]))], [(e2, np.array([2, 2]))],
...                      [(e3, np.array([6.0]))], [(e3, np.array([3]))]])
>>> parts.columns[0], parts.columns[1].tolist(), parts.absent.tolist()
(array([2, 3]), [[5.0, 2.0, nan, nan], [6.0, 2.0, 6.0, 3.0]], [[False, False, True, True], [False, False, False, False]])
>>> print(format_query(outs, "csv", parts).decode(), end="")
a,2,5.0,2,,
a,3,6.0,2,6.0,3
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

import pba_runtime as pr

from ..aggregations import BUILTIN_AGGREGATIONS
from ..aggregations.skipping import skip_missing
from ..kernels.compiled.layout import place, union_rows
from ..quantiles import Quantile, QuantileSketch
from ..query import Query
from .errors import UserError
from .sinks import ResultParts

__all__ = ["QueryOutputs", "QueryParts", "join", "format_query", "query_table"]


@dataclass(frozen=True)
class QueryOutputs:
    """What a job's slots compute for its query (picklable): per output its name, window (milliseconds for time
    windows) and aggregation (a built-in's name, else the :class:`pba_runtime.Aggregation`), and the missing-value
    policy.

    Parameters
    ----------
    names : tuple of str
    windows : tuple of CountWindow or TimeWindow
        One per output (outputs of one window share it).
    aggs : tuple
        One per output.
    missing : {"skip", "propagate"}
    min_periods : int
        ``missing="skip"``: fewest values a result needs.
    ints : tuple of bool
        Which outputs are integers (``count``, ``argmax``, ``argmin`` under ``missing="propagate"``).
    one_window : bool
        The query has one window: its rows have a ``start``.
    """

    names: tuple[str, ...]
    windows: tuple[Any, ...]
    aggs: tuple[Any, ...]
    missing: str
    min_periods: int
    ints: tuple[bool, ...]
    one_window: bool

    @classmethod
    def of(cls, query: Any) -> QueryOutputs:
        """The outputs of ``query`` as a job runs them; a query a job cannot run raises :class:`UserError`
        naming the parameter (row output, several value columns, windows of both kinds, results that are not
        numbers)."""
        if not isinstance(query, Query):
            raise UserError(f"query must be a pba_runtime.Query, got {type(query).__name__}")
        if query.align != "windows":
            raise UserError('query: a job emits window output; align="rows" is for frames (pr.aggregate)')
        columns = tuple(dict.fromkeys(o.column for o in query.outputs))
        if len(columns) != 1:
            raise UserError(f"query: aggs name the stream's one value column; these name {len(columns)}: "
                            f"{list(columns)}")
        if len({isinstance(w, pr.TimeWindow) for w in query.windows}) != 1:
            raise UserError("query: windows must all be count windows or all time windows in a job")
        mp = 1 if query.min_periods is None else query.min_periods
        if query.missing == "propagate" and mp > 1:
            raise UserError('query: min_periods applies with missing="skip" in a job (a full count window always '
                            'has its range of values)')
        windows, aggs, ints = [], [], []
        for o in query.outputs:
            w = query.windows[o.window]
            windows.append(w.in_unit("ms") if isinstance(w, pr.TimeWindow) else w)
            if o.agg.result not in ("float", "int"):
                raise UserError(f"query: output {o.name!r}: a job's outputs are numbers; {o.agg.name!r} gives "
                                f"{o.agg.result} results")
            aggs.append(o.agg.name if BUILTIN_AGGREGATIONS.get(o.agg.name) is o.agg else o.agg)
            ints.append(o.agg.result == "int" and query.missing == "propagate")
        return cls(tuple(o.name for o in query.outputs), tuple(windows), tuple(aggs), query.missing, mp,
                   tuple(ints), len(query.windows) == 1)

    def aggregation(self, i: int) -> Any:
        """Output ``i``'s aggregation as its operators run it: under ``missing="skip"``, the one that skips
        missing values (:func:`pba_runtime.aggregations.skipping.skip_missing`)."""
        agg = self.aggs[i]
        if self.missing != "skip":
            return agg
        if isinstance(agg, Quantile | QuantileSketch):
            return agg.skipping(self.min_periods)
        return skip_missing(agg, self.min_periods)

    @property
    def window_of(self) -> list[int]:
        """Per output, the index of its window among the distinct windows (outputs of one window share ends)."""
        distinct: dict[Any, int] = {}
        return [distinct.setdefault(w, len(distinct)) for w in self.windows]

    @property
    def range(self) -> int | None:
        """The one window's range (a row's ``start`` is ``end - range``), ``None`` with several windows."""
        return self.windows[0].range if self.one_window else None

    def columns(self) -> tuple[str, ...]:
        """The sink's columns: ``key``, ``start`` (one window), ``end``, one per output."""
        return ("key", *(("start",) if self.one_window else ()), "end", *self.names)

    def describe(self) -> list[list[str]]:
        """What defines the outputs (a checkpoint is resumed only by a job with the same)."""
        return [[n, repr(w), a if isinstance(a, str) else a.name] for n, w, a in zip(self.names, self.windows,
                                                                                       self.aggs)] + [
            [self.missing, str(self.min_periods)]]


class QueryParts(ResultParts):
    """A batch's query rows: ``[(key, ends, values), ...]`` per key, ``values`` of shape ``(rows, outputs)``;
    ``columns``: ``(ends, values)`` of every part end to end; ``absent``: where an output's window has no end
    on the row (``None``: none)."""

    absent: np.ndarray | None = None


def _concat(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    if not arrays:
        return np.empty(0, dtype)
    return arrays[0].astype(dtype, copy=False) if len(arrays) == 1 else np.concatenate(arrays).astype(dtype,
                                                                                                      copy=False)


def join(keys: list, outs: list[list[tuple[np.ndarray, Any]]], window_of: list[int] | None = None,
         columns: list[tuple[np.ndarray, np.ndarray] | None] | None = None) -> QueryParts:
    """The rows of a batch: ``outs[i][j]`` is output ``i``'s ``(ends, results)`` for key ``keys[j]``, each ordered
    by end. One row per (key, end) of any output, ordered as ``keys`` then by end; an output without that end is
    NaN there and ``absent``.

    ``window_of[i]``: output ``i``'s window (outputs of one window have the same ends: they are taken once);
    ``columns[i]``: output ``i``'s ends and results of every key end to end, when its merge returned them so
    (:func:`~pba_runtime.algorithms.keyed_batch.insert_many_keyed`), else ``None``."""
    n_out = len(outs)
    window_of = list(range(n_out)) if window_of is None else window_of
    counts: dict[int, np.ndarray] = {}
    ends: dict[int, np.ndarray] = {}
    vals = []
    for i, o in enumerate(outs):
        w = window_of[i]
        col = None if columns is None else columns[i]
        if w not in counts:
            counts[w] = np.fromiter((len(e) for e, _ in o), np.int64, len(keys))
            ends[w] = col[0] if col is not None else _concat([e for e, _ in o if len(e)], np.int64)
        vals.append(col[1] if col is not None else _concat([np.asarray(r) for e, r in o if len(e)], np.float64))
    first = window_of[0]
    same = all(np.array_equal(counts[w], counts[first]) and np.array_equal(ends[w], ends[first]) for w in counts)
    absent = None
    if same:  # every output emitted the same windows' ends (one slide, past the longest range's warm-up)
        end, per_key = ends[first], counts[first]
        values = np.empty((len(end), n_out), np.float64)
        for i, v in enumerate(vals):
            values[:, i] = v
    else:
        order = list(counts)
        kidx = [np.repeat(np.arange(len(keys), dtype=np.int64), counts[w]) for w in order]
        key_of, end, pos = union_rows(kidx, [ends[w] for w in order])
        where = dict(zip(order, pos))
        m = len(end)
        values = np.empty((m, n_out), np.float64)
        absent = np.empty((m, n_out), np.bool_)
        for i, v in enumerate(vals):
            p = where[window_of[i]]
            out, ok = place(v, None, np.arange(m) if p is None else p, m)
            values[:, i] = out
            absent[:, i] = ~ok
        per_key = np.bincount(key_of, minlength=len(keys))
    parts = QueryParts()
    lo = 0
    for key, n in zip(keys, per_key.tolist()):
        if n:
            parts.append((key, end[lo : lo + n], values[lo : lo + n]))
            lo += n
    parts.columns = (end, values)
    parts.absent = absent
    return parts


def _names_text(outputs: QueryOutputs, fmt: str) -> list[bytes]:
    if fmt == "csv":
        return [b","] * len(outputs.names)
    return [(", " + json.dumps(n) + ": ").encode() for n in outputs.names]


def format_query(outputs: QueryOutputs, fmt: str, parts: QueryParts, ring: Any = None) -> bytes | tuple[int, int]:
    """CSV or JSON lines of a batch's query rows in one compiled pass
    (:func:`~pba_runtime.runtime.text_lines.column_lines_into`): CSV ``key,[start,]end,out1,out2,...`` (an
    absent output an empty field), JSON ``{"key": ..., ["start": ...,] "end": ..., "out1": ..., ...}`` (absent:
    ``null``). With ``ring``, written into it and its region returned, as
    :func:`~pba_runtime.runtime.sinks.format_batch` does."""
    if not parts:
        return b""
    from .sinks import _csv_field
    from .text_lines import CSV, JSONL, column_lines_into

    if fmt == "csv":
        prefixes = [(_csv_field(k) + ",").encode() for k, _, _ in parts]
        layout, null = CSV, b""
    else:
        first = '"start": ' if outputs.one_window else '"end": '
        prefixes = [('{"key": ' + json.dumps(k) + ", " + first).encode() for k, _, _ in parts]
        layout, null = JSONL, b"null"
    counts = np.fromiter((len(e) for _, e, _ in parts), np.int64, len(parts))
    ends, values = parts.columns
    args = (prefixes, counts, ends, outputs.range, values, parts.absent, np.array(outputs.ints, np.bool_),
            _names_text(outputs, fmt), null, layout)
    if ring is None:
        buf: list[np.ndarray] = []

        def alloc(n: int) -> np.ndarray:
            buf.append(np.empty(n, np.uint8))
            return buf[0]

        n = column_lines_into(alloc, *args)
        return buf[0][:n].tobytes()
    last: list = [None]

    def ring_alloc(n: int) -> np.ndarray:
        got = ring.reserve(n)
        last[0] = np.empty(n, np.uint8) if got is None else None  # larger than the ring: private memory
        return got if got is not None else last[0]

    n = column_lines_into(ring_alloc, *args)
    if last[0] is None:
        return ring.commit(n)
    ring.cancel()
    return last[0][:n].tobytes()


def query_table(outputs: QueryOutputs, parts: QueryParts) -> Any:
    """A batch's query rows as a pyarrow Table of :meth:`QueryOutputs.columns`: ``key`` (int64 or string),
    ``start`` and ``end`` int64, each output float64 (int64 where an integer), null where absent."""
    import pyarrow as pa

    from .sinks import _arrow_numbers, _key_column

    ends, values = parts.columns if parts.columns is not None else (np.empty(0, np.int64),
                                                                   np.empty((0, len(outputs.names))))
    arrays = [_key_column([k for k, _, _ in parts], [len(e) for _, e, _ in parts])]
    if outputs.one_window:
        arrays.append(_arrow_numbers(ends - outputs.range))
    arrays.append(_arrow_numbers(ends))
    for i, is_int in enumerate(outputs.ints):
        col = values[:, i]
        mask = None if parts.absent is None else parts.absent[:, i]
        if is_int:
            col = np.where(mask, 0, col).astype(np.int64) if mask is not None else col.astype(np.int64)
        arrays.append(pa.array(col, mask=mask) if mask is not None and mask.any() else _arrow_numbers(
            np.ascontiguousarray(col)))
    fields = [pa.field("key", arrays[0].type, nullable=False)]
    fields += [pa.field(c, pa.int64(), nullable=False) for c in (("start", "end") if outputs.one_window else ("end",))]
    fields += [pa.field(n, pa.int64() if is_int else pa.float64()) for n, is_int in zip(outputs.names, outputs.ints)]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
