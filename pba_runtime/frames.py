"""Frames: reading a query's columns from pandas, polars, pyarrow or a dict of arrays, and building its result.

:func:`read_frame` wraps a frame in a :class:`Frame` that gives what a query needs, whatever the kind: the
value columns as float64 (no copy when a column is already contiguous float64 without nulls), the order
column as int64 with its type (integers, datetimes of any unit, tz-aware ones as UTC instants, dates), the
key columns as dense group codes, and :meth:`Frame.build`, which makes the result of the input's kind.
pandas, polars and pyarrow are read through narwhals (``docs/dependencies.md``); a dict's values may be
numpy arrays, lists, or any of those libraries' series.

Nulls: a pandas ``<NA>``/``NaN``/``NaT``, an Arrow or polars null. In the result a null is what the kind
uses: ``NaN`` (floats) or ``NaT`` in pandas and in a dict's numpy arrays, a null in polars and pyarrow.

Examples
--------
>>> import numpy as np
>>> fr = read_frame({"k": np.array(["b", "a", "b"]), "v": np.array([1.0, 2.0, 3.0])})
>>> fr.kind, fr.n_rows, fr.columns
('dict', 3, ('k', 'v'))
>>> codes, first, grouped = fr.keys(["k"])
>>> codes.tolist(), first.tolist()
([1, 0, 1], [1, 0])
>>> out = fr.build([("k", Take("k", first)), ("total", Array(np.array([2.0, 4.0]), np.array([True, False])))])
>>> out["k"].tolist(), out["total"].tolist()
(['a', 'b'], [2.0, nan])
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Array", "Frame", "Order", "OrderType", "Take", "read_frame", "KINDS"]

#: The kinds of frame a query reads and returns.
KINDS = ("pandas", "polars", "polars-lazy", "pyarrow", "dict")
_UNITS = ("s", "ms", "us", "ns")
_NAT = np.iinfo(np.int64).min


# ---------------------------------------------------------------------- what a result column is made of
@dataclass(frozen=True)
class Take:
    """The input column ``source`` at ``rows`` (key columns of window output keep their dtype)."""

    source: str
    rows: np.ndarray


@dataclass(frozen=True)
class Array:
    """``values`` (a numpy array; object for lists and vectors), null where ``valid`` is False (None: none).

    The result owns ``values``: where a kind writes nulls as NaN (pandas, a dict), a float array gets them in
    place."""

    values: np.ndarray
    valid: np.ndarray | None


@dataclass(frozen=True)
class OrderType:
    """The type of an order column: ``unit`` (None: plain integers; ``"s"`` ... ``"ns"``; ``"D"``: dates) and
    ``tz`` (the zone of tz-aware datetimes, whose integers are UTC instants)."""

    unit: str | None
    tz: str | None = None


@dataclass(frozen=True)
class Order:
    """Integers of the order column's type ``otype`` (window ends and starts), null where ``valid`` is False."""

    otype: OrderType
    values: np.ndarray


# ---------------------------------------------------------------------- reading
def read_frame(frame: Any) -> Frame:
    """``frame`` (pandas or polars DataFrame, polars LazyFrame, pyarrow Table, dict of arrays) as a :class:`Frame`.

    Anything else raises a ``TypeError`` naming ``frame``.
    """
    if isinstance(frame, Mapping):
        return _DictFrame(frame)
    nw = _narwhals()
    lazy = False
    pl = sys.modules.get("polars")
    if pl is not None and isinstance(frame, pl.LazyFrame):
        frame, lazy = frame.collect(), True
    try:
        f = nw.from_native(frame, eager_only=True)
    except TypeError:
        raise TypeError("frame must be a pandas or polars DataFrame, a polars LazyFrame, a pyarrow Table or a dict "
                        f"of equal-length arrays; got {type(frame).__name__}") from None
    mod = type(frame).__module__.split(".")[0]
    if mod not in ("pandas", "polars", "pyarrow"):
        raise TypeError(f"frame: a {type(frame).__name__} is not supported; give a pandas or polars DataFrame, a "
                        "pyarrow Table or a dict of arrays")
    return _NarwhalsFrame(frame, f, "polars-lazy" if lazy else mod)


def _narwhals() -> Any:
    import narwhals.stable.v1 as nw

    return nw


class Frame:
    """The columns of one input frame, as a query reads them (see the module)."""

    kind: str
    n_rows: int
    columns: tuple[str, ...]

    def has(self, name: str) -> bool:
        return name in self.columns

    # -- per kind: a column as numpy with its null mask, its dtype's family, and the result builders
    def _column(self, name: str) -> tuple[np.ndarray, np.ndarray | None, str]:
        """``(values, null mask or None, family)``; family: "float", "int", "bool", "datetime", "date",
        "other"."""
        raise NotImplementedError

    def values(self, name: str, param: str = "aggs") -> tuple[np.ndarray, bool]:
        """Column ``name`` as float64 (nulls as NaN) and whether it holds a missing value (a null or NaN).

        A column that is not numeric raises a ``TypeError`` naming ``param``.
        """
        a, null, family = self._column(name)
        if family not in ("float", "int", "bool"):
            raise TypeError(f"{param}: column {name!r} is not numeric ({a.dtype}); a value column holds numbers")
        if a.dtype != np.float64:
            a = a.astype(np.float64)
        elif not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        if null is not None and null.any():
            a = a.copy()  # the frame's own memory may be under it: the NaN go into a copy
            a[null] = np.nan
            return a, True
        if family != "float":
            return a, False
        with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf: NaN, then the exact check below
            if not np.isnan(a.sum()):  # a NaN makes the sum NaN: one fast pass when there is none
                return a, False
        return a, bool(np.isnan(a).any())

    def order(self, name: str, param: str = "on") -> tuple[np.ndarray, OrderType, np.ndarray | None]:
        """Column ``name`` as int64 order values, its :class:`OrderType` and its null mask (None: no null).

        Datetimes give integers of their unit (tz-aware ones as UTC instants), dates days since the epoch.
        Other dtypes raise a ``TypeError`` naming ``param``.
        """
        a, null, family = self._column(name)
        tz = self._tz(name)
        if family == "int":
            if a.dtype == np.uint64 and len(a) and int(a.max()) > np.iinfo(np.int64).max:
                raise ValueError(f"{param}: column {name!r} holds integers beyond int64")
            return a.astype(np.int64, copy=False), OrderType(None), null
        if family in ("datetime", "date"):
            unit, _ = np.datetime_data(a.dtype)
            if family == "date" or unit in ("D", "W", "M", "Y"):
                a = a.astype("datetime64[D]")
                unit = "D"
            elif unit not in _UNITS:
                a = a.astype("datetime64[s]" if unit in ("h", "m") else "datetime64[ns]")
                unit = np.datetime_data(a.dtype)[0]
            ints = a.view(np.int64)
            nat = ints == _NAT
            if nat.any():
                null = nat if null is None else (null | nat)
            return ints, OrderType(unit, tz), null
        if family == "mixed-tz":
            raise ValueError(f"{param}: column {name!r} mixes time zones ({tz}); give instants of one zone, e.g. "
                             "pandas.to_datetime(column, utc=True)")
        raise TypeError(f"{param}: column {name!r} ({a.dtype}) is not an order column; give integers, datetimes or "
                        "dates")

    def keys(self, by: Sequence[str], param: str = "by") -> tuple[np.ndarray, np.ndarray, bool]:
        """Dense group codes of the key columns ``by`` (ordered by key value, a null key last, as its own
        group), the first input row of each group, and whether the rows come grouped in key order already
        (codes non-decreasing; then group ``k``'s rows are ``first[k]`` up to ``first[k + 1]``). No key
        column: one group of every row."""
        n = self.n_rows
        if not by:
            return np.zeros(n, dtype=np.int64), np.zeros(1 if n else 0, dtype=np.int64), True
        if len(by) == 1:
            a, null, family = self._column(by[0])
            if family == "int" and null is None and len(a) and bool((a[1:] >= a[:-1]).all()):
                # sorted integer keys (a frame sorted by key): the groups are the runs, no hashing
                starts = np.flatnonzero(a[1:] != a[:-1]) + 1
                first = np.concatenate([[0], starts]).astype(np.int64)
                codes = np.repeat(np.arange(len(first), dtype=np.int64), np.diff(np.append(first, len(a))))
                return codes, first, True
        codes = None
        for name in by:
            c, g = self._codes(name, param)
            codes = c if codes is None else _combine(codes, c, g)
        assert codes is not None
        return (*_first_rows(codes), False)

    def _codes(self, name: str, param: str) -> tuple[np.ndarray, int]:
        a, null, family = self._column(name)
        import pandas as pd

        if family in ("datetime", "date"):
            a = a.view(np.int64)
        try:
            codes, uniques = pd.factorize(a, sort=True, use_na_sentinel=True)
        except TypeError as exc:
            raise TypeError(f"{param}: the values of key column {name!r} cannot be ordered ({exc})") from None
        codes = codes.astype(np.int64, copy=False)
        g = len(uniques)
        if null is not None:
            codes = np.where(null, -1, codes)
        if (codes < 0).any():  # a null key: a group of its own, after the others
            codes = np.where(codes < 0, g, codes)
            g += 1
        return codes, g

    def _tz(self, name: str) -> str | None:
        return None

    # -- building the result
    def build(self, spec: Sequence[tuple[str, Any]], like_rows: bool = False) -> Any:
        """The result frame of this frame's kind: one column per ``(name, Take | Array | Order)`` of ``spec``.

        ``like_rows``: the result has this frame's rows (row output); a pandas index is kept.
        """
        raise NotImplementedError


def _combine(codes: np.ndarray, more: np.ndarray, g: int) -> np.ndarray:
    """Dense codes of the pairs ``(codes, more)`` in lexicographic order (``more`` has ``g`` groups)."""
    import pandas as pd

    pair = codes * g + more
    c, _ = pd.factorize(pair, sort=True)
    return c.astype(np.int64, copy=False)


def _first_rows(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(codes)
    if not n:
        return codes.astype(np.int64), np.zeros(0, dtype=np.int64)
    g = int(codes.max()) + 1
    first = np.full(g, n, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(n, dtype=np.int64))
    return codes, first


def _family(dtype: np.dtype) -> str:
    k = dtype.kind
    if k == "f":
        return "float"
    if k in "iu":
        return "int"
    if k == "b":
        return "bool"
    if k == "M":
        return "datetime"
    return "other"


def _object_family(a: np.ndarray) -> tuple[np.ndarray, str, str | None]:
    """An object column of dates or datetimes (pandas keeps ``datetime.date`` so, and tz-aware datetimes of
    several zones) as datetime64, its family and zone: ``"mixed-tz"`` (the zones, joined) when its datetimes
    are not all of one zone."""
    sample = next((x for x in a if x is not None and x == x), None)
    if isinstance(sample, _dt.datetime):
        zones = {str(x.tzinfo) if x.tzinfo is not None else None for x in a if x is not None and x == x}
        if len(zones) > 1:
            return a, "mixed-tz", ", ".join(sorted(str(z) for z in zones))
        import pandas as pd

        zone = zones.pop()
        stamps = pd.to_datetime(pd.Series(a), utc=zone is not None)
        if zone is not None:
            stamps = stamps.dt.tz_localize(None)  # UTC instants
        return stamps.to_numpy(), "datetime", zone
    if isinstance(sample, _dt.date):
        days = np.array([np.datetime64("NaT") if x is None or x != x else x for x in a], dtype="datetime64[D]")
        return days, "date", None
    return a, "other", None


# ---------------------------------------------------------------------- pandas, polars, pyarrow
class _NarwhalsFrame(Frame):
    def __init__(self, native: Any, f: Any, kind: str) -> None:
        self.native = native
        self.f = f
        self.kind = kind
        self.n_rows = len(f)
        self.columns = tuple(str(c) for c in f.columns)
        self._schema = f.schema
        self._zones: dict[str, str | None] = {}

    def _series(self, name: str) -> Any:
        return self.f.get_column(name)

    def _tz(self, name: str) -> str | None:
        if self._zones.get(name) is not None:  # an object column of tz-aware datetimes
            return self._zones[name]
        return getattr(self._schema[name], "time_zone", None)

    def _column(self, name: str) -> tuple[np.ndarray, np.ndarray | None, str]:
        nw = _narwhals()
        s = self._series(name)
        dtype = self._schema[name]
        null = s.is_null().to_numpy() if s.null_count() else None
        if isinstance(dtype, nw.Datetime):
            a = s.to_numpy()
            if a.dtype.kind != "M":  # tz-aware pandas: instants in UTC
                a = s.dt.convert_time_zone("UTC").dt.replace_time_zone(None).to_numpy()
            return a, null, "datetime"
        if isinstance(dtype, nw.Date):
            a = s.to_numpy()
            if a.dtype.kind != "M":
                a, _, _ = _object_family(a)
            return a.astype("datetime64[D]"), null, "date"
        if dtype.is_numeric():
            a = s.to_numpy()
            if a.dtype == object:
                a = np.array([np.nan if x is None else x for x in a], dtype=np.float64)
            if null is not None and dtype.is_integer():
                return s.fill_null(0).to_numpy(), null, "int"  # exact integers; the mask says where nulls are
            return a, null, "bool" if a.dtype.kind == "b" else _family(a.dtype)
        if isinstance(dtype, nw.Boolean):
            a = s.to_numpy()
            if a.dtype == object:
                a = np.array([np.nan if x is None else float(x) for x in a])
            return a, null, "bool"
        a = s.to_numpy()
        if a.dtype == object:
            a, fam, zone = _object_family(a)
            self._zones[name] = zone
            return a, null, fam
        return a, null, _family(a.dtype) if a.dtype.kind in "M" else "other"

    def _codes(self, name: str, param: str) -> tuple[np.ndarray, int]:
        nw = _narwhals()
        dtype = self._schema[name]
        if self.kind != "pandas" and not (dtype.is_numeric() or isinstance(dtype, nw.Datetime | nw.Date)):
            # strings, categoricals, ...: pandas' factorize over numpy objects
            s = self._series(name)
            a = s.to_numpy()
            null = s.is_null().to_numpy() if s.null_count() else None
            return _factorize(a, null, name, param)
        if self.kind == "pandas" and not (dtype.is_numeric() or isinstance(dtype, nw.Datetime | nw.Date)):
            return _factorize(self.native[name], None, name, param)
        return super()._codes(name, param)

    def build(self, spec: Sequence[tuple[str, Any]], like_rows: bool = False) -> Any:
        if self.kind == "pandas":
            return self._build_pandas(spec, like_rows)
        if self.kind in ("polars", "polars-lazy"):
            out = self._build_polars(spec)
            return out.lazy() if self.kind == "polars-lazy" else out
        return self._build_arrow(spec)

    def _take(self, name: str, rows: np.ndarray) -> Any:
        if self.kind == "pandas":
            col = self.native[name]
            if isinstance(col.dtype, np.dtype):  # numpy-backed: a numpy gather (pandas' iloc builds an index too)
                import pandas as pd

                return pd.Series(col.to_numpy()[rows], name=name, copy=False)
            return col.iloc[rows].reset_index(drop=True)
        if self.kind in ("polars", "polars-lazy"):
            return self.native.get_column(name).gather(rows)
        return self.native.column(name).take(rows)

    def _build_pandas(self, spec, like_rows):
        import pandas as pd

        cols = {}
        for name, item in spec:
            if isinstance(item, Take):
                cols[name] = self._take(item.source, item.rows)
            elif isinstance(item, Order):
                cols[name] = _pandas_order(pd, item)
            else:
                cols[name] = pd.Series(_numpy_nulls(item), copy=False)
        index = self.native.index if like_rows else None
        if index is not None:
            cols = {k: (v.set_axis(index) if isinstance(v, pd.Series) else v) for k, v in cols.items()}
            return pd.DataFrame(cols, index=index, copy=False) if cols else pd.DataFrame(index=index)
        n = _length(spec)
        return pd.DataFrame(cols, copy=False) if cols else pd.DataFrame(index=pd.RangeIndex(n))

    def _build_polars(self, spec):
        import polars as pl

        cols = []
        for name, item in spec:
            if isinstance(item, Take):
                s = self._take(item.source, item.rows).alias(name)
            elif isinstance(item, Order):
                s = _polars_order(pl, name, item)
            else:
                s = _polars_array(pl, name, item)
            cols.append(s)
        return pl.DataFrame(cols)

    def _build_arrow(self, spec):
        import pyarrow as pa

        names, arrays = [], []
        for name, item in spec:
            names.append(name)
            if isinstance(item, Take):
                arrays.append(self._take(item.source, item.rows))
            elif isinstance(item, Order):
                arrays.append(_arrow_order(pa, item))
            else:
                arrays.append(_arrow_array(pa, item))
        return pa.table(arrays, names=names) if names else pa.table({})


def _factorize(a: Any, null: np.ndarray | None, name: str, param: str) -> tuple[np.ndarray, int]:
    import pandas as pd

    try:
        codes, uniques = pd.factorize(a, sort=True, use_na_sentinel=True)
    except TypeError as exc:
        raise TypeError(f"{param}: the values of key column {name!r} cannot be ordered ({exc})") from None
    codes = np.asarray(codes, dtype=np.int64)
    g = len(uniques)
    if null is not None:
        codes = np.where(null, -1, codes)
    if (codes < 0).any():
        codes = np.where(codes < 0, g, codes)
        g += 1
    return codes, g


def _length(spec: Sequence[tuple[str, Any]]) -> int:
    for _, item in spec:
        return len(item.rows if isinstance(item, Take) else item.values)
    return 0


# ---------------------------------------------------------------------- a dict of arrays
class _DictFrame(Frame):
    kind = "dict"

    def __init__(self, frame: Mapping[str, Any]) -> None:
        self.native = frame
        self.columns = tuple(str(c) for c in frame)
        lengths = {c: len(v) for c, v in frame.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"frame: the dict's arrays differ in length ({lengths})")
        self.n_rows = next(iter(lengths.values()), 0)
        self._cache: dict[str, tuple[np.ndarray, np.ndarray | None, str, str | None]] = {}

    def _read(self, name: str) -> tuple[np.ndarray, np.ndarray | None, str, str | None]:
        if name not in self._cache:
            v = self.native[name]
            if _is_series(v):
                one = read_frame_series(v)
                self._cache[name] = (*one._column("x"), one._tz("x"))
            else:
                a = np.asarray(v)
                fam = _family(a.dtype)
                null = None
                zone = None
                if a.dtype == object:
                    a, fam, zone = _object_family(a)
                    if fam == "other":
                        null = np.array([x is None for x in a]) if any(x is None for x in a) else None
                self._cache[name] = (a, null, fam, zone)
        return self._cache[name]

    def _column(self, name: str) -> tuple[np.ndarray, np.ndarray | None, str]:
        a, null, fam, _ = self._read(name)
        return a, null, fam

    def _tz(self, name: str) -> str | None:
        return self._read(name)[3]

    def _codes(self, name: str, param: str) -> tuple[np.ndarray, int]:
        a, null, fam = self._column(name)
        if fam == "other":
            return _factorize(a, null, name, param)
        return super()._codes(name, param)

    def build(self, spec: Sequence[tuple[str, Any]], like_rows: bool = False) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, item in spec:
            if isinstance(item, Take):
                out[name] = np.asarray(self._read(item.source)[0])[item.rows]
            elif isinstance(item, Order):
                out[name] = _numpy_order(item)
            else:
                out[name] = _numpy_nulls(item)
        return out


def _is_series(v: Any) -> bool:
    mod = type(v).__module__.split(".")[0]
    return mod in ("pandas", "polars", "pyarrow") and not isinstance(v, np.ndarray)


def read_frame_series(v: Any) -> _NarwhalsFrame:
    """A pandas/polars/pyarrow series (a dict's value) as a one-column frame named ``"x"``."""
    mod = type(v).__module__.split(".")[0]
    if mod == "pandas":
        import pandas as pd

        native = pd.DataFrame({"x": pd.Series(v).reset_index(drop=True)})
    elif mod == "polars":
        native = v.to_frame("x")
    else:
        import pyarrow as pa

        native = pa.table({"x": v})
    return _NarwhalsFrame(native, _narwhals().from_native(native, eager_only=True), mod)


# ---------------------------------------------------------------------- nulls and order types per kind
def _numpy_nulls(item: Array) -> np.ndarray:
    """numpy with nulls as NaN (integers become floats), None (objects) or NaT."""
    v, ok = item.values, item.valid
    if ok is None or ok.all():
        return v
    if v.dtype == object:
        out = v.copy()
        out[~ok] = None
        return out
    if v.dtype.kind == "M":
        out = v.copy()
        out[~ok] = np.datetime64("NaT")
        return out
    if v.dtype.kind == "f" and v.flags.writeable:
        np.putmask(v, ~ok, np.nan)  # the query's own result array: no copy of a column of millions of rows
        return v
    out = v.astype(np.float64)
    out[~ok] = np.nan
    return out


def _datetime64(item: Order) -> np.ndarray:
    return item.values.astype(np.int64, copy=False).view(f"datetime64[{item.otype.unit}]")


def _numpy_order(item: Order) -> np.ndarray:
    return _datetime64(item)


def _pandas_order(pd: Any, item: Order) -> Any:
    ot = item.otype
    if ot.unit == "D":  # pandas keeps dates as datetime.date objects
        return pd.Series(_datetime64(item).astype(object))
    s = pd.Series(_datetime64(item), copy=False)
    if ot.tz is not None:
        s = s.dt.tz_localize("UTC").dt.tz_convert(ot.tz)
    return s


def _polars_order(pl: Any, name: str, item: Order) -> Any:
    ot = item.otype
    if ot.unit == "D":
        return pl.Series(name, item.values.astype(np.int32)).cast(pl.Date)
    s = pl.Series(name, item.values).cast(pl.Datetime(ot.unit))  # polars' own units: ms, us, ns
    if ot.tz is not None:
        s = s.dt.replace_time_zone("UTC").dt.convert_time_zone(ot.tz)
    return s


def _arrow_order(pa: Any, item: Order) -> Any:
    ot = item.otype
    if ot.unit == "D":
        return pa.array(item.values.astype(np.int32), type=pa.date32())
    return pa.array(item.values, type=pa.timestamp(ot.unit, tz=ot.tz))


def _polars_array(pl: Any, name: str, item: Array) -> Any:
    v, ok = item.values, item.valid
    if v.dtype == object:
        vals = [x if (ok is None or ok[i]) else None for i, x in enumerate(v)]
        return pl.Series(name, vals)
    s = pl.Series(name, v)
    if ok is not None and not ok.all():
        s = s.scatter(np.flatnonzero(~ok), None)
    return s


def _arrow_array(pa: Any, item: Array) -> Any:
    v, ok = item.values, item.valid
    if v.dtype == object:
        return pa.array([x if (ok is None or ok[i]) else None for i, x in enumerate(v)])
    return pa.array(v, mask=None if ok is None or ok.all() else ~ok)
