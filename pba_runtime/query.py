"""Queries: keys, an order, windows and aggregations over a frame, answered in one pass per key.

A :class:`Query` names the key columns ``by``, the order column ``on``, one or more windows and the
aggregations of each value column (pandas' named forms). It is frozen, picklable and validated once, when it
is built; :meth:`Query.run` answers it over a pandas or polars DataFrame, a pyarrow Table or a dict of arrays,
and returns a result of the same kind. :func:`aggregate` is the one-call form (``docs/query.md``; the contract
is ``docs/semantics.md``, *Queries over frames*).

How it runs: rows are grouped by key and ordered by ``on`` (stable) once; each value column is read once
(no copy when it is contiguous float64 and already in key order); the built-in aggregations of a window go to
the keyed engines (:mod:`pba_runtime.engines.keyed` for window output, :mod:`pba_runtime.engines.rows` for
row output), which slice every key's stream once per window slide and lift each slice once per aggregation
family, all keys in one compiled call split between this thread and the pool's worker. Other aggregations
(user-defined, ``geomean``, ``moment_sketch``, ``collect``) run :func:`pba_runtime.sliding_aggregate` per key
(window output) or a Two-Stacks per key (row output): the same results, slower.

Examples
--------
>>> import pandas as pd
>>> import pba_runtime as pr
>>> df = pd.DataFrame({"plug": [1, 1, 1, 2, 2], "load": [3.0, 1.0, 2.0, 5.0, 4.0]})
>>> pr.aggregate(df, by="plug", windows=pr.CountWindow(2), aggs={"load": ["max", "mean"]})
   plug  window_start  window_end  load_max  load_mean
0     1             0           2       3.0        2.0
1     1             1           3       2.0        1.5
2     2             0           2       5.0        4.5
>>> q = pr.Query(by="plug", windows=pr.CountWindow(2), aggs={"top": ("load", "max")}, align="rows")
>>> q.run(df)["top"].tolist()
[nan, 3.0, 2.0, nan, 5.0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import frames
from .aggregations import Aggregation, get_aggregation
from .api import sliding_aggregate
from .engines.key_split import run_split
from .engines.keyed import KEYED_AGGS, WindowResult, window_results
from .engines.rows import KEYED_ROW_AGGS, row_results
from .kernels.compiled.layout import Runs, place, place_runs, union_rows
from .quantiles import Quantile, QuantileSketch, as_quantile, keyed_quantile_rows, keyed_quantile_windows
from .windows import CountWindow, TimeWindow, Window

__all__ = ["Query", "aggregate", "ALIGNS", "MISSING", "CLOSED"]

ALIGNS = ("windows", "rows")
MISSING = ("skip", "propagate")
CLOSED = ("right", "left", "both", "neither")


@dataclass(frozen=True)
class Output:
    """One result column: ``name``, over value ``column``, by ``agg`` (an :class:`Aggregation`, or an order
    statistic: a :class:`~pba_runtime.quantiles.Quantile` or ``QuantileSketch``), of window ``window`` (an index into
    :attr:`Query.windows`)."""

    name: str
    column: str
    agg: Aggregation | Quantile | QuantileSketch
    window: int

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # a built-in aggregation pickles by its name (its functions are lambdas); a user's one as itself
        from .aggregations import BUILTIN_AGGREGATIONS

        agg = self.agg.name if BUILTIN_AGGREGATIONS.get(getattr(self.agg, "name", None)) is self.agg else self.agg
        return _output, (self.name, self.column, agg, self.window)


def _output(name: str, column: str, agg: str | Aggregation | Quantile | QuantileSketch, window: int) -> Output:
    return Output(name, column, get_aggregation(agg) if isinstance(agg, str) else agg, window)


def _names(value: Any, param: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError(f"{param} must be a column name or a list of column names, got {value!r}")


def _window_label(window: Window) -> str:
    return window.label if isinstance(window, TimeWindow) else str(window.range)


def _windows(windows: Any, labels: Any) -> tuple[tuple[Window, ...], tuple[str, ...]]:
    if isinstance(windows, Mapping):
        if labels is not None:
            raise ValueError("labels: give the labels either as the keys of windows= or as labels=, not both")
        labels = [str(k) for k in windows]
        windows = list(windows.values())
    elif isinstance(windows, CountWindow | TimeWindow):
        windows = [windows]
    if not isinstance(windows, Sequence) or isinstance(windows, str) or not windows:
        raise TypeError("windows must be a CountWindow or TimeWindow, a non-empty list of them, or a dict "
                        f"label -> window; got {windows!r}")
    for w in windows:
        if not isinstance(w, CountWindow | TimeWindow):
            raise TypeError(f"windows: each window must be a pba_runtime.CountWindow or TimeWindow, got {w!r}")
    if labels is None:
        labels = [_window_label(w) for w in windows]
    else:
        labels = list(_names(labels, "labels"))
        if len(labels) != len(windows):
            raise ValueError(f"labels: {len(labels)} labels for {len(windows)} windows")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels: two windows have one label ({labels}); give labels= or windows as a dict")
    return tuple(windows), tuple(labels)


def _agg_spec(spec: Any) -> Aggregation | Quantile | QuantileSketch:
    q = as_quantile(spec)
    if q is not None:
        return q
    if isinstance(spec, str | Aggregation):
        try:
            return get_aggregation(spec)
        except ValueError as exc:
            raise ValueError(f"aggs: {exc}") from None
    raise TypeError("aggs: an aggregation is a name (str), a pba_runtime.Aggregation or pr.quantile(q), got "
                    f"{spec!r}")


def _aggs(aggs: Any) -> tuple[tuple[str, str, Aggregation], ...]:
    """``(stem, column, aggregation)`` per output: pandas' named forms, in the order given."""
    if not isinstance(aggs, Mapping) or not aggs:
        raise TypeError('aggs must be a non-empty dict: {"load": ["max", "mean"], "volt": "min"} or '
                        f'{{"out_name": ("load", "max")}}; got {aggs!r}')
    out = []
    for key, spec in aggs.items():
        if not isinstance(key, str):
            raise TypeError(f"aggs: keys are column or output names (str), got {key!r}")
        if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
            out.append((key, spec[0], _agg_spec(spec[1])))  # {"out_name": ("load", "max")}
            continue
        specs = spec if isinstance(spec, list) else [spec]
        if not specs:
            raise ValueError(f"aggs: no aggregation for column {key!r}")
        for s in specs:
            agg = _agg_spec(s)
            out.append((f"{key}_{agg.name}", key, agg))
    return tuple(out)


def _check_choice(value: Any, param: str, accepted: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in accepted:
        raise ValueError(f"{param} must be one of {', '.join(map(repr, accepted))}; got {value!r}")
    return value


def _slide_given(w: TimeWindow) -> bool:
    d = w._durations
    return d is not None and d[1] is not d[0]


@dataclass(frozen=True, init=False)
class Query:
    """A query over a frame: per key ``by``, ordered by ``on``, the aggregations ``aggs`` over ``windows``.

    Parameters
    ----------
    by : str or list of str, optional
        Key columns (any dtype; a null key is a key of its own). None: the whole frame is one key.
    on : str, optional
        Order column: integers, datetimes (any unit, tz-aware ones as instants) or dates. Required by time
        windows; with count windows and no ``on``, the input order.
    windows : CountWindow, TimeWindow, a list of them, or a dict label -> window
        ``TimeWindow("5min", "10s")``: durations are exact in ``on``'s unit (milliseconds against integers).
    aggs : dict
        pandas' named forms: ``{"load": ["max", "mean"], "volt": "min"}`` (outputs ``load_max``, ...) or
        ``{"peak": ("load", "max")}``; aggregation names of ``pr.BUILTIN_AGGREGATIONS`` or
        :class:`pba_runtime.Aggregation` objects.
    align : {"windows", "rows"}
        ``"windows"``: one row per (key, window end); ``"rows"``: one row per input row, in input order, each
        output over the window ending at that row (count windows: the key's last ``range`` rows; time windows:
        the key's rows with ``on`` in ``(t - range, t]``). Row output takes no slide.
    missing : {"skip", "propagate"}
        ``"skip"``: nulls and NaN are not values (pandas' rolling, SQL); ``"propagate"``: numpy's result.
    min_periods : int, optional
        Fewest values a result needs, else null. Default 1; in row output of a count window, its range.
    closed : {"right", "left", "both", "neither"}
        Row output of time windows: which ends of ``(t - range, t]`` are in (pandas' ``closed``).
    labels : list of str, optional
        The windows' labels in output names (default: the range as written, ``"5min"``, ``"1024"``).

    Examples
    --------
    >>> import pba_runtime as pr
    >>> q = pr.Query(by="plug", windows=[pr.CountWindow(2), pr.CountWindow(3)], aggs={"load": "max"})
    >>> [o.name for o in q.outputs]
    ['load_max_2', 'load_max_3']
    >>> pr.Query(windows=pr.CountWindow(4, slide=2), aggs={"load": "max"}, align="rows")
    Traceback (most recent call last):
    ...
    ValueError: windows: row output (align="rows") takes no slide; CountWindow(range=4, slide=2) has slide 2
    """

    by: tuple[str, ...]
    on: str | None
    windows: tuple[Window, ...]
    labels: tuple[str, ...]
    outputs: tuple[Output, ...]
    align: str
    missing: str
    min_periods: int | None
    closed: str
    _columns: tuple[str, ...] = field(repr=False, compare=False)

    def __init__(self, *, by: str | Sequence[str] | None = None, on: str | None = None, windows: Any,
                 aggs: Mapping[str, Any], align: str = "windows", missing: str = "skip",
                 min_periods: int | None = None, closed: str = "right", labels: Sequence[str] | None = None
                 ) -> None:
        by_ = _names(by, "by")
        if on is not None and not isinstance(on, str):
            raise TypeError(f"on must be a column name (str) or None, got {on!r}")
        wins, labs = _windows(windows, labels)
        align = _check_choice(align, "align", ALIGNS)
        missing = _check_choice(missing, "missing", MISSING)
        closed = _check_choice(closed, "closed", CLOSED)
        if min_periods is not None:
            if isinstance(min_periods, bool) or not isinstance(min_periods, int) or min_periods < 0:
                raise ValueError(f"min_periods must be a non-negative integer or None, got {min_periods!r}")
        for w in wins:
            if isinstance(w, TimeWindow) and on is None:
                raise ValueError(f"on: the time window {w!r} needs an order column (on=...)")
            if align == "rows":
                if isinstance(w, CountWindow) and w.slide != 1:
                    raise ValueError(f'windows: row output (align="rows") takes no slide; {w!r} has slide {w.slide}')
                if isinstance(w, TimeWindow) and _slide_given(w):
                    raise ValueError(f'windows: row output (align="rows") takes no slide; give TimeWindow(range) '
                                     f'alone, not {w!r}')
        if closed != "right" and (align != "rows" or any(isinstance(w, CountWindow) for w in wins)):
            raise ValueError(f'closed={closed!r} applies to row output (align="rows") of time windows only')
        stems = _aggs(aggs)
        outputs = []
        for i, lab in enumerate(labs):
            for stem, col, agg in stems:
                outputs.append(Output(stem if len(wins) == 1 else f"{stem}_{lab}", col, agg, i))
        names = [o.name for o in outputs]
        taken = set(by_) | ({on} if on else set())
        if align == "windows":
            taken |= {"window_end"} | ({"window_start"} if len(wins) == 1 else set())
        seen: set[str] = set()
        for n in names:
            if n in seen or n in taken:
                raise ValueError(f"aggs: two outputs are named {n!r}; name them with {{'out_name': (column, agg)}}")
            seen.add(n)
        set_ = object.__setattr__
        for k, v in (("by", by_), ("on", on), ("windows", wins), ("labels", labs), ("outputs", tuple(outputs)),
                     ("align", align), ("missing", missing), ("min_periods", min_periods), ("closed", closed),
                     ("_columns", tuple(dict.fromkeys(o.column for o in outputs)))):
            set_(self, k, v)

    # ------------------------------------------------------------------ run
    def run(self, frame: Any, *, pool: Any = None) -> Any:
        """The query's result over ``frame`` (pandas, polars, pyarrow or a dict of arrays), of ``frame``'s kind.

        ``pool``: the :class:`pba_runtime.WorkerPool` whose thread worker takes part of the keys (default:
        the shared pool). Every column is checked before anything is computed.
        """
        fr = frames.read_frame(frame)
        for param, cols in (("by", self.by), ("on", (self.on,) if self.on else ()), ("aggs", self._columns)):
            for c in cols:
                if not fr.has(c):
                    raise ValueError(f"{param}: no column {c!r} in the frame; its columns: {list(fr.columns)}")
        values = {c: fr.values(c, param="aggs") for c in self._columns}
        t = otype = None
        keep = None
        if self.on is not None:
            t, otype, tnull = fr.order(self.on, param="on")
            if tnull is not None and tnull.any():
                if self.missing != "skip":
                    raise ValueError(f"on: column {self.on!r} holds a null at row {int(np.flatnonzero(tnull)[0])}; "
                                     'missing="skip" drops such rows')
                keep = ~tnull
        unit = None if otype is None else otype.unit
        wins = tuple(w.in_unit(unit or "ms") if isinstance(w, TimeWindow) else w for w in self.windows)
        codes, first_rows, grouped = fr.keys(list(self.by), param="by")
        plan = _Layout.build(codes, t, keep, first_rows if grouped else None, len(first_rows))
        cols = {c: (plan.gather(v), has) for c, (v, has) in values.items()}
        T = plan.gather(t) if t is not None else None
        if self.align == "rows":
            return self._rows(fr, plan, cols, T, wins, pool)
        return self._windows(fr, plan, cols, T, wins, first_rows, otype, pool)

    # ------------------------------------------------------------------ window output
    def _windows(self, fr, plan, cols, T, wins, first_rows, otype, pool):
        per_window, rows = self._window_results(plan, cols, T, wins, pool)
        key, end, where = _union(rows, wins)
        del rows  # each window's own (key, end) rows, no longer needed: their memory goes now
        spec: list[tuple[str, Any]] = [(b, frames.Take(b, first_rows[key])) for b in self.by]
        count_ends = isinstance(wins[0], CountWindow)
        if len(wins) == 1:
            start = end - wins[0].range
            spec.append(("window_start", frames.Array(start, None) if count_ends or otype.unit is None
                         else frames.Order(otype, start)))
        spec.append(("window_end", frames.Array(end, None) if count_ends or otype.unit is None
                     else frames.Order(otype, end)))
        m = len(key)
        placed = {}
        for wi in range(len(wins)):  # window by window, each one's engine results let go once placed
            mine = per_window[wi]
            outputs = len(mine)
            for name in list(mine):
                vals, valid = mine.pop(name)
                placed[name] = _placed(vals, valid, where[wi], m, outputs, pool)
                del vals, valid
        spec += [(o.name, placed[o.name]) for o in self.outputs]
        return fr.build(spec)

    def _window_results(self, plan, cols, T, wins, pool):
        """Per window, each output's ``(values, valid)`` and the window's (key, end) rows."""
        mp = 1 if self.min_periods is None else self.min_periods
        per_window: list[dict[str, tuple[np.ndarray, np.ndarray | None]]] = [{} for _ in wins]
        rows: list[WindowResult | None] = [None] * len(wins)
        for col in self._columns:
            V, has_missing = cols[col]
            missing = self.missing if has_missing else "propagate"
            mine = [o for o in self.outputs if o.column == col]
            keyed = tuple(dict.fromkeys(o.agg.name for o in mine if _keyed(o.agg)))
            if keyed:
                # every window of the column in one call per window kind: the engine slices each key's stream
                # once per slide and lifts each slice once per aggregation family for all of them
                extra = ("count",) if (missing == "propagate" and mp > 1 and "count" not in keyed) else ()
                for kind in (CountWindow, TimeWindow):
                    idx = [i for i, w in enumerate(wins) if isinstance(w, kind)]
                    if not idx:
                        continue
                    got = window_results(V, T if kind is TimeWindow else None, plan.bounds, [wins[i] for i in idx],
                                         keyed + extra, missing=missing, min_periods=mp, pool=pool)
                    for i, res in zip(idx, got):
                        rows[i] = _same_rows(rows[i], res)
                        valid_rows = res.values["count"] >= mp if (missing == "propagate" and mp > 1) else None
                        for o in mine:
                            if o.window == i and _keyed(o.agg):
                                per_window[i][o.name] = (res.values[o.agg.name],
                                                         _and(res.valid.get(o.agg.name), valid_rows))
            # sketches of one column, window and accuracy: one pass of the histogram answers all their quantiles
            groups: dict[tuple, list[Output]] = {}
            for o in mine:
                if isinstance(o.agg, QuantileSketch):
                    groups.setdefault((o.window, o.agg.relative_error, o.agg.max_buckets), []).append(o)
            for (wi, _, _), outs in groups.items():
                key, end, vals, valid = keyed_quantile_windows(V, T, plan.bounds, wins[wi], tuple(o.agg for o in outs),
                                                               missing=missing, min_periods=mp, pool=pool)
                res = WindowResult(key, end, {o.agg.name: vals[:, j] for j, o in enumerate(outs)},
                                   {o.agg.name: valid for o in outs})
                rows[wi] = _same_rows(rows[wi], res)
                for j, o in enumerate(outs):
                    per_window[wi][o.name] = (vals[:, j], valid)
            for o in mine:
                if _keyed(o.agg) or isinstance(o.agg, QuantileSketch):
                    continue
                if isinstance(o.agg, Quantile):  # an order statistic: every key in one sorted-window call
                    key, end, vals, valid = keyed_quantile_windows(V, T, plan.bounds, wins[o.window], o.agg,
                                                                   missing=missing, min_periods=mp, pool=pool)
                    res = WindowResult(key, end, {o.agg.name: vals}, {o.agg.name: valid})
                    rows[o.window] = _same_rows(rows[o.window], res)
                    per_window[o.window][o.name] = (vals, valid)
                    continue
                res = _per_key_windows(V, T, plan.bounds, wins[o.window], o.agg, missing, mp)
                rows[o.window] = _same_rows(rows[o.window], res)
                per_window[o.window][o.name] = (res.values[o.agg.name], res.valid.get(o.agg.name))
        return per_window, rows

    # ------------------------------------------------------------------ row output
    def _rows(self, fr, plan, cols, T, wins, pool):
        n = fr.n_rows
        spec: list[tuple[str, Any]] = []
        for wi, w in enumerate(wins):
            mp = self.min_periods if self.min_periods is not None else (w.range if isinstance(w, CountWindow) else 1)
            outs = [o for o in self.outputs if o.window == wi]
            for col in dict.fromkeys(o.column for o in outs):
                V, has_missing = cols[col]
                missing = self.missing if has_missing else "propagate"
                mine = [o for o in outs if o.column == col]
                keyed = tuple(dict.fromkeys(o.agg.name for o in mine if _keyed(o.agg, KEYED_ROW_AGGS)))
                got = row_results(V, T if isinstance(w, TimeWindow) else None, plan.bounds, w, keyed, missing=missing, min_periods=mp,
                                  closed=self.closed, pool=pool) if keyed else {}
                for o in mine:
                    if o.agg.name in got and _keyed(o.agg, KEYED_ROW_AGGS):
                        vals, valid = got[o.agg.name]
                    elif isinstance(o.agg, Quantile | QuantileSketch):
                        vals, valid = keyed_quantile_rows(V, T, plan.bounds, w, o.agg, missing=missing,
                                                          min_periods=mp, closed=self.closed, pool=pool)
                    else:
                        vals, valid = _per_key_rows(V, T, plan.bounds, w, o.agg, missing, mp, self.closed)
                    spec.append((o.name, plan.scatter(vals, valid, n)))
        return fr.build(spec, like_rows=True)


def aggregate(frame: Any, *, pool: Any = None, **query: Any) -> Any:
    """``Query(**query).run(frame)``: the query's result over ``frame``, of ``frame``'s kind.

    Parameters
    ----------
    frame : pandas.DataFrame, polars.DataFrame, pyarrow.Table or dict of arrays
    pool : WorkerPool, optional
        Whose thread worker takes part of the keys (default: the shared pool).
    **query
        :class:`Query`'s parameters: ``by``, ``on``, ``windows``, ``aggs``, ``align``, ``missing``,
        ``min_periods``, ``closed``, ``labels``.

    Examples
    --------
    >>> import numpy as np
    >>> import pba_runtime as pr
    >>> ts = np.array(["2026-01-01T00:00:00", "2026-01-01T00:00:30", "2026-01-01T00:01:10"], dtype="datetime64[ms]")
    >>> out = pr.aggregate({"ts": ts, "v": np.array([1.0, 4.0, 2.0])}, on="ts",
    ...                    windows=pr.TimeWindow("1min"), aggs={"v": ["max", "count"]})
    >>> out["window_end"].tolist(), out["v_max"].tolist(), out["v_count"].tolist()
    ([datetime.datetime(2026, 1, 1, 0, 1), datetime.datetime(2026, 1, 1, 0, 2)], [4.0, 2.0], [2, 1])
    """
    return Query(**query).run(frame, pool=pool)


# ---------------------------------------------------------------------- the layout of rows by key
@dataclass(frozen=True)
class _Layout:
    """Where the input's rows go: ``order`` (input row of each laid-out row; None: the input order, all
    rows kept) and ``bounds`` (key ``k``'s rows are ``bounds[k] : bounds[k + 1]`` of the layout)."""

    order: np.ndarray | None
    bounds: np.ndarray

    @staticmethod
    def build(codes: np.ndarray, t: np.ndarray | None, keep: np.ndarray | None, starts: np.ndarray | None,
              n_groups: int) -> _Layout:
        """``starts``: the first row of each group when the rows come grouped in key order (else None)."""
        codes = np.asarray(codes, dtype=np.int64)
        if keep is None and starts is not None and _in_key_order(t, starts):
            return _Layout(None, np.append(starts, len(codes)).astype(np.int64))
        rows = np.arange(len(codes), dtype=np.int64) if keep is not None else None
        if keep is not None:
            rows = rows[keep]
            codes = codes[keep]
            t = t[keep] if t is not None else None
        if _in_order(codes, t):
            order = rows
        else:
            if t is None:
                o = np.argsort(codes, kind="stable")
            else:
                o = np.argsort(t, kind="stable")
                o = o[np.argsort(codes[o], kind="stable")]
            order = o if rows is None else rows[o]
            codes = codes[o]
        counts = np.bincount(codes, minlength=n_groups) if len(codes) else np.zeros(n_groups, dtype=np.int64)
        bounds = np.zeros(n_groups + 1, dtype=np.int64)
        np.cumsum(counts, out=bounds[1:])
        return _Layout(order, bounds)

    def gather(self, a: np.ndarray) -> np.ndarray:
        return a if self.order is None else np.ascontiguousarray(a[self.order])

    def scatter(self, vals: np.ndarray, valid: np.ndarray | None, n: int) -> frames.Array:
        if self.order is None:
            return frames.Array(vals, valid)
        out = np.zeros(n, dtype=vals.dtype) if vals.dtype != object else np.empty(n, dtype=object)
        ok = np.zeros(n, dtype=bool)
        out[self.order] = vals
        ok[self.order] = True if valid is None else valid
        return frames.Array(out, None if ok.all() else ok)


def _in_key_order(t: np.ndarray | None, starts: np.ndarray) -> bool:
    """Whether ``t`` is non-decreasing within each group of rows grouped from ``starts``."""
    if t is None or len(t) < 2:
        return True
    down = np.flatnonzero(t[1:] < t[:-1]) + 1  # rows below their predecessor: each must start a group
    return bool(np.isin(down, starts).all()) if len(down) else True


def _in_order(codes: np.ndarray, t: np.ndarray | None) -> bool:
    if len(codes) < 2:
        return True
    dc = np.diff(codes)
    if (dc < 0).any():
        return False
    if t is None:
        return True
    return bool(((np.diff(t) >= 0) | (dc > 0)).all())


def _keyed(agg: Aggregation | Quantile | QuantileSketch, engine_aggs: tuple[str, ...] = KEYED_AGGS) -> bool:
    """Whether a keyed engine answers ``agg``: a built-in it names (not a user's aggregation of that name)."""
    from .aggregations import BUILTIN_AGGREGATIONS

    return agg.name in engine_aggs and BUILTIN_AGGREGATIONS.get(agg.name) is agg


def _and(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    return a if b is None else a & b


def _same_rows(have: WindowResult | None, res: WindowResult) -> WindowResult:
    return res if have is None else have


def _union(results: list[WindowResult], wins: tuple[Window, ...]) -> tuple[np.ndarray, np.ndarray,
                                                                          list[np.ndarray | Runs | None]]:
    """The (key, end) rows of every window, ordered by key then end, and where each window's rows are in them
    (None: all of them, in order)."""
    if len(results) == 1:
        r = results[0]
        return r.key, r.end, [None]
    slides = {w.slide for w in wins}
    if all(isinstance(w, CountWindow) for w in wins) and len(slides) == 1:
        s = slides.pop()
        lo = min(range(len(wins)), key=lambda i: wins[i].range)
        r0 = wins[lo].range
        if all((w.range - r0) % s == 0 for w in wins):
            # count windows of one slide: the shortest one's ends hold every other's (key k's ends r0 + j*s)
            # and each one's rows of a key are one run of the union's (a copy per key, not an index per row)
            base = results[lo]
            nkeys = int(max((int(r.key[-1]) for r in results if len(r.key)), default=-1)) + 1
            everyone = np.arange(nkeys + 1, dtype=np.int64)
            ustart = np.searchsorted(base.key, everyone)  # rows are ordered by key: each key's first row
            where: list[Runs | None] = []
            for i, r in enumerate(results):
                if i == lo:
                    where.append(None)
                    continue
                first = np.searchsorted(r.key, everyone)
                src, n = first[:-1], np.diff(first)
                has = n > 0
                gap = (wins[i].range - r0) // s
                where.append(Runs(src[has], ustart[:-1][has] + gap, n[has], len(base.key)))
            return base.key, base.end, where
    key, end, pos = union_rows([r.key for r in results], [r.end for r in results])
    return key, end, pos


def _placed(vals: np.ndarray, valid: np.ndarray | None, idx: np.ndarray | Runs | None, m: int,
            outputs: int, pool: Any) -> frames.Array:
    """One output at its rows of the union (``idx`` None: they are the union's). ``outputs``: its window's
    outputs, what of the engine's result array the result frame may keep."""
    if idx is None:
        if vals.base is not None and vals.base.nbytes > 2 * outputs * vals.nbytes:
            vals = vals.copy()  # a row of a result array holding other windows: the frame must not keep it all
        return frames.Array(vals, valid)
    out, ok = (place_runs(vals, valid, idx, lambda fn, b: run_split(fn, b, pool=pool)) if isinstance(idx, Runs)
               else place(vals, valid, idx, m))
    return frames.Array(out, None if ok.all() else ok)


# ---------------------------------------------------------------------- aggregations without a keyed engine
def _result_array(results: Any, agg: Aggregation) -> np.ndarray:
    if isinstance(results, np.ndarray) and results.ndim == 1 and results.dtype != object:
        return results
    if all(r is None or isinstance(r, float | int | np.floating | np.integer) for r in results):
        # a user aggregation's scalars (None where null under skip): a float column
        return np.array([math.nan if r is None else r for r in results], dtype=np.float64)
    out = np.empty(len(results), dtype=object)  # vectors (moment_sketch) and lists (collect): one per row
    for i, r in enumerate(results):
        out[i] = r if r is None or isinstance(r, list) else list(np.asarray(r).tolist())
    return out


def _per_key_windows(V, T, bounds, w, agg: Aggregation, missing: str, mp: int) -> WindowResult:
    """:func:`pba_runtime.sliding_aggregate` on each key's rows (the aggregations without a keyed engine)."""
    keys, ends, vals, counts = [], [], [], []
    options = {"missing": missing, "min_periods": mp} if missing == "skip" else {}
    timed = isinstance(w, TimeWindow)
    for k in range(len(bounds) - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        if a == b:
            continue
        ts = T[a:b] if timed else None
        e, r = sliding_aggregate(V[a:b], window=w, agg=agg, timestamps=ts, **options)
        keys.append(np.full(len(e), k, dtype=np.int64))
        ends.append(np.asarray(e, dtype=np.int64))
        vals.append(_result_array(r, agg))
        if missing == "propagate" and mp > 1:  # rows per window
            counts.append(np.asarray(sliding_aggregate(V[a:b], window=w, agg="count", timestamps=ts)[1]))
    if not keys:
        empty = np.zeros(0, dtype=np.int64)
        return WindowResult(empty, empty, {agg.name: np.zeros(0)}, {agg.name: None})
    out = np.concatenate(vals) if all(v.dtype != object for v in vals) else _concat_objects(vals)
    valid = np.concatenate(counts) >= mp if counts else None
    if missing == "skip":  # sliding_aggregate's null under skip: NaN (None for lists)
        valid = (np.array([x is not None for x in out], dtype=bool) if out.dtype == object
                 else ~np.isnan(out) if out.ndim == 1 else None)
        valid = None if valid is not None and valid.all() else valid
    return WindowResult(np.concatenate(keys), np.concatenate(ends), {agg.name: out}, {agg.name: valid})


def _concat_objects(parts: list[np.ndarray]) -> np.ndarray:
    out = np.empty(sum(len(p) for p in parts), dtype=object)
    i = 0
    for p in parts:
        out[i : i + len(p)] = list(p)
        i += len(p)
    return out


def _per_key_rows(V, T, bounds, w, agg: Aggregation, missing: str, mp: int, closed: str):
    """Row output of an aggregation without a keyed engine: a Two-Stacks per key in Python (the
    aggregation's lift, combine and lower; no inverse needed). Row ``i``'s window is rows
    ``[start, end)`` of its key as pandas bounds them: ``end`` is ``i + 1`` (when the right end is open, the
    first row at row ``i``'s timestamp), ``start`` the first row inside the range (count windows: ``range``
    rows back)."""
    n = len(V)
    out = np.empty(n, dtype=object)
    ok = np.zeros(n, dtype=bool)
    r = w.range
    cw = isinstance(w, CountWindow)
    right = closed in ("right", "both")
    left = closed in ("left", "both")
    for k in range(len(bounds) - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        front: list[tuple[Any, int]] = []  # suffix aggregates of the oldest rows, the oldest on top
        back_agg, back_n = agg.identity, 0
        back: list[int] = []  # rows pushed since the front was last filled
        lo = hi = a
        tie = a  # the first row of row i's run of equal timestamps
        for i in range(a, b):
            if not cw and i > a and T[i] != T[i - 1]:
                tie = i
            end = i + 1 if (right or cw) else tie  # pandas: an open right end excludes every row at t
            while hi < end:
                x = float(V[hi])
                if not (missing == "skip" and math.isnan(x)):
                    back_agg = agg.combine(back_agg, _lift(agg, x, hi - a if cw else int(T[hi])))
                    back_n += 1
                back.append(hi)
                hi += 1
            if cw:
                start = max(a, i - r + 1)
            else:
                t = int(T[i])
                start = lo
                while start < end and (int(T[start]) < t - r if left else int(T[start]) <= t - r):
                    start += 1
            while lo < start:
                if not front:  # the back rows become the front, as suffix aggregates
                    acc, cnt = agg.identity, 0
                    for j in reversed(back):
                        x = float(V[j])
                        if not (missing == "skip" and math.isnan(x)):
                            acc = agg.combine(_lift(agg, x, j - a if cw else int(T[j])), acc)
                            cnt += 1
                        front.append((acc, cnt))
                    back, back_agg, back_n = [], agg.identity, 0
                front.pop()
                lo += 1
            fa, fn = front[-1] if front else (agg.identity, 0)
            have = fn + back_n if missing == "skip" else end - start
            if have > 0 and have >= mp:
                out[i] = agg.lower(agg.combine(fa, back_agg))
                ok[i] = True
            elif have == 0 and mp == 0:  # no value, none needed: the aggregation's empty result, if it has one
                try:
                    out[i] = agg.lower(agg.identity)
                    ok[i] = True
                except (ZeroDivisionError, ValueError):  # geomean of nothing: null
                    pass
    if ok.all():
        try:
            return out.astype(np.float64), None
        except (TypeError, ValueError):
            return out, None
    return _floats_or_objects(out, ok), ok


def _floats_or_objects(out: np.ndarray, ok: np.ndarray) -> np.ndarray:
    try:
        f = np.zeros(len(out))
        f[ok] = out[ok].astype(np.float64)
        return f
    except (TypeError, ValueError):
        return out


def _lift(agg: Aggregation, x: float, pos: int) -> Any:
    return agg.lift(x, pos) if agg.positional else agg.lift(x)
