"""A naive recompute of a query over a pandas frame, written from docs/semantics.md (Queries over frames).

Nothing here calls pba_runtime's engines: rows are grouped with plain Python, each key's rows ordered by
``on`` (stable), every window enumerated from the spec's definition and every result recomputed with numpy
over that window's values. ``expected(df, ...)`` returns a pandas DataFrame in the query's output shape, with
NaN for nulls (float outputs) and ``pd.NA`` for null integer outputs.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from oracle import RTOL, _agg

import pba_runtime as pr


def _sort_key(v):
    null = v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT
    return (1, 0) if null else (0, v)


def _groups(df: pd.DataFrame, by: list[str]) -> list[tuple[tuple, np.ndarray]]:
    """(key values, input row numbers in input order) per key, keys in sorted order, a null key last."""
    groups: dict[tuple, list[int]] = {}
    for i in range(len(df)):
        key = tuple(_norm(df[b].iloc[i]) for b in by)
        groups.setdefault(key, []).append(i)
    keys = sorted(groups, key=lambda k: tuple(_sort_key(v) for v in k))
    return [(k, np.array(groups[k], dtype=np.int64)) for k in keys]


def _norm(v):
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    return v.item() if hasattr(v, "item") else v


def agg_value(name: str, vals: np.ndarray, where: np.ndarray, missing: str, mp: int):
    """The aggregation ``name`` over ``vals`` (a window's values, oldest first) by the project oracle's
    recompute (:func:`oracle._agg`, which carries each float's rounding floor); ``where``: each value's position
    (count windows) or timestamp (time windows). Under ``"skip"`` NaN is dropped first. None: null."""
    if missing == "skip":
        keep = ~np.isnan(vals)
        vals, where = vals[keep], where[keep]
    m = len(vals)
    if m < mp:
        return None
    if m == 0:  # min_periods 0 and no value left: the empty sum and count, as pandas; a user's aggregation
        # lowers its identity; no other built-in has a value
        return name.lower(name.identity) if not isinstance(name, str) else {"sum": 0.0, "count": 0}.get(name)
    return _agg(name, vals, np.asarray(where))


def _windows_of(w, t: np.ndarray | None, n: int):
    """(start, end, rows) of each window of one key, in end order (rows: positions into the key's rows)."""
    if isinstance(w, pr.CountWindow):
        for k in range(max(0, (n - w.range) // w.slide + 1)):
            yield k * w.slide, k * w.slide + w.range, np.arange(k * w.slide, k * w.slide + w.range)
        return
    if n == 0:
        return
    ks = set()
    for x in t:
        hi = (int(x) - w.offset) // w.slide
        lo = (int(x) - w.offset - w.range) // w.slide + 1
        ks.update(range(lo, hi + 1))
    for k in sorted(ks):
        s = k * w.slide + w.offset
        rows = np.flatnonzero((t >= s) & (t < s + w.range))
        if len(rows):
            yield s, s + w.range, rows


def _row_window(w, t: np.ndarray | None, i: int, closed: str) -> np.ndarray:
    if isinstance(w, pr.CountWindow):
        return np.arange(max(0, i - w.range + 1), i + 1)
    right = closed in ("right", "both")
    left = closed in ("left", "both")
    ti = int(t[i])
    # pandas' bounds on ties: a closed right end stops at the row itself (its later ties are out), an open
    # one before every row at ti
    rows = [j for j in range(i + 1 if right else i) if (t[j] >= ti - w.range if left else t[j] > ti - w.range)
            and (right or t[j] < ti)]
    return np.array(rows, dtype=np.int64)


def expected(df: pd.DataFrame, *, by=(), on=None, windows, outputs, align="windows", missing="skip",
             min_periods=None, closed="right", unit=None) -> pd.DataFrame:
    """The query's result; ``outputs``: list of (name, column, agg name, window index); ``windows`` in ``on``'s
    integer unit (``unit`` given: ``on`` is a datetime column read as int64 of that unit)."""
    by = list(by)
    n = len(df)
    if on is not None:
        col = df[on]
        if unit is not None:
            tall = col.to_numpy(dtype=f"datetime64[{unit}]").astype(np.int64)
            tnull = col.isna().to_numpy()
        else:
            tnull = col.isna().to_numpy()
            tall = np.where(tnull, 0, col.fillna(0).to_numpy()).astype(np.int64)
    else:
        tall, tnull = None, np.zeros(n, dtype=bool)
    vals = {c: pd.to_numeric(df[c]).astype("float64").to_numpy(na_value=np.nan) for _, c, _, _ in outputs}
    if align == "rows":
        res = {name: [None] * n for name, *_ in outputs}
    else:
        out_rows: dict[tuple, dict] = {}
    for key, rows in _groups(df, by):
        rows = rows[~tnull[rows]]
        if tall is not None:
            rows = rows[np.argsort(tall[rows], kind="stable")]
        t = tall[rows] if tall is not None else None
        for name, c, a, wi in outputs:
            w = windows[wi]
            v = vals[c][rows]
            if align == "rows":
                mp = min_periods if min_periods is not None else (w.range if isinstance(w, pr.CountWindow) else 1)
                for i in range(len(rows)):
                    win = _row_window(w, t, i, closed)
                    where = win if isinstance(w, pr.CountWindow) else t[win]
                    rows_in = len(win)
                    r = agg_value(a, v[win], where, missing, mp if missing == "skip" else 0)
                    if missing != "skip" and rows_in < mp:
                        r = None
                    res[name][rows[i]] = r
            else:
                mp = 1 if min_periods is None else min_periods
                for s, e, win in _windows_of(w, t, len(rows)):
                    where = win if isinstance(w, pr.CountWindow) else t[win]
                    r = agg_value(a, v[win], where, missing, mp if missing == "skip" else 0)
                    if missing != "skip" and len(win) < mp:
                        r = None
                    row = out_rows.setdefault((tuple(_sort_key(x) for x in key), e), {"_key": key, "_s": s})
                    row[name] = r
    if align == "rows":
        return pd.DataFrame({name: res[name] for name, *_ in outputs}, index=df.index)
    recs = []
    for (_, e), row in sorted(out_rows.items(), key=lambda kv: kv[0]):
        rec = dict(zip(by, row["_key"]))
        if len(windows) == 1:
            rec["window_start"] = row["_s"]
        rec["window_end"] = e
        for name, *_ in outputs:
            rec[name] = row.get(name)
        recs.append(rec)
    cols = by + (["window_start"] if len(windows) == 1 else []) + ["window_end"] + [o[0] for o in outputs]
    return pd.DataFrame(recs, columns=cols)


def close(got, want, agg: str) -> bool:
    """Equal as the spec asks: max/min/count/argmax exact, the rest to 1e-9 relative plus the oracle's floor
    (the rounding another order of the same additions may leave); NaN == NaN; None: null."""
    if want is None:
        return got is None or got is pd.NA or (isinstance(got, float) and math.isnan(got))
    if got is None or got is pd.NA:
        return False
    if isinstance(want, list):
        return list(got) == want
    g, w = float(got), float(want)
    if math.isnan(w) or math.isnan(g):
        return math.isnan(w) and math.isnan(g)
    if agg in ("max", "min", "count", "argmax", "argmin") or math.isinf(w):
        return g == w
    return abs(g - w) <= RTOL * abs(w) + getattr(want, "floor", 0.0)
