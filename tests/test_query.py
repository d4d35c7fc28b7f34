"""Queries over frames (docs/semantics.md, *Queries over frames*): the spec's recompute, peers, bad input.

The differential test builds random frames (keys of ints, strings and nulls; NaN, inf, -0.0, 1e12 beside
1e-3; ties in ``on``; several windows; both alignments and missing policies), runs the query on each frame
kind and compares with tests/query_oracle.py, which enumerates every window from the spec and recomputes it.
"""

from __future__ import annotations

import datetime as dt
import math
import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from query_oracle import _groups, _norm, close, expected

import pba_runtime as pr

KINDS = ("pandas", "polars", "pyarrow", "dict")
KEYED = ("max", "min", "sum", "count", "mean", "std", "var", "argmax", "argmin")
#: a user's aggregation: no keyed engine has it, so it takes the per-key path (sliding_aggregate, Two-Stacks)
def _nan_max(a: float, b: float) -> float:  # Python's max is not associative with NaN: this one propagates it
    return a if (a != a or a >= b) else b


ABSMAX = pr.Aggregation(lift=abs, combine=_nan_max, lower=float, identity=0.0, name="absmax")


def as_kind(df: pd.DataFrame, kind: str):
    if kind == "pandas":
        return df
    if kind == "polars":
        pl = pytest.importorskip("polars")
        return pl.from_pandas(df)
    if kind == "pyarrow":
        return pa.Table.from_pandas(df, preserve_index=False)
    return {c: df[c].to_numpy() for c in df.columns}


def to_pandas(res) -> pd.DataFrame:
    if isinstance(res, pd.DataFrame):
        return res.reset_index(drop=True)
    if isinstance(res, pa.Table):
        return res.to_pandas()
    if isinstance(res, dict):
        return pd.DataFrame({k: (list(v) if getattr(v, "dtype", None) is np.dtype(object) else v) for k, v in res.items()})
    return res.to_pandas()


def assert_frame_matches(got: pd.DataFrame, want: pd.DataFrame, aggs: dict[str, str]) -> None:
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want), (len(got), len(want))
    for c in want.columns:
        g, w = got[c].tolist(), want[c].tolist()
        a = aggs.get(c)
        if a is None:  # keys and window bounds: exact
            for i, (x, y) in enumerate(zip(g, w)):
                if y is None or (isinstance(y, float) and math.isnan(y)):
                    assert x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)), (c, i, x, y)
                else:
                    assert x == y, (c, i, x, y)
            continue
        bad = [(i, x, y) for i, (x, y) in enumerate(zip(g, w)) if not close(None if x is pd.NA else x, y, a)]
        assert not bad, f"{c}: first (row, got, want): {bad[:5]}"


# ---------------------------------------------------------------------- the differential test
VALUES = st.sampled_from([0.0, -0.0, 1.0, -2.5, 3.0, 1e12, 1e12 + 0.5, 1e-3, 2e-3, math.nan, math.inf, -math.inf])
FINITE = st.sampled_from([0.0, -0.0, 1.0, -2.5, 3.0, 1e12, 1e12 + 0.5, 1e-3, 2e-3, 7.0])


@st.composite
def cases(draw):
    n = draw(st.integers(0, 40))
    key_kind = draw(st.sampled_from(["int", "str", "none", "two"]))
    keys = {"int": st.sampled_from([1, 2, 3]), "str": st.sampled_from(["a", "b", None]),
            "none": st.just(0), "two": st.sampled_from([1, 2])}[key_kind]
    finite = draw(st.booleans())
    df = pd.DataFrame({
        "k": pd.Series([draw(keys) for _ in range(n)], dtype=object if key_kind == "str" else "int64"),
        "t": pd.Series(sorted(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)))
                       if draw(st.booleans()) else draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)),
                       dtype="int64"),
        "v": pd.Series(draw(st.lists(FINITE if finite else VALUES, min_size=n, max_size=n)), dtype="float64"),
    })
    if key_kind == "two":
        df["k2"] = pd.Series([draw(st.sampled_from(["x", "y"])) for _ in range(n)], dtype=object)
    by = {"int": ["k"], "str": ["k"], "none": [], "two": ["k", "k2"]}[key_kind]
    align = draw(st.sampled_from(["windows", "rows"]))
    timed = draw(st.booleans())
    nwin = draw(st.integers(1, 2))
    windows = []
    for _ in range(nwin):
        r = draw(st.integers(1, 7))
        if timed:
            if align == "rows":
                windows.append(pr.TimeWindow(r))
            else:
                s = draw(st.integers(1, r))
                windows.append(pr.TimeWindow(r, s, draw(st.integers(0, s - 1))))
        else:
            s = 1 if align == "rows" else draw(st.integers(1, r))
            windows.append(pr.CountWindow(r, s))
    if len({w.range for w in windows}) < len(windows):  # one label per window
        windows = windows[:1]
    aggs = draw(st.lists(st.sampled_from(KEYED + (ABSMAX,)), min_size=1, max_size=3, unique=True))
    missing = draw(st.sampled_from(["skip", "propagate"]))
    min_periods = draw(st.sampled_from([None, 0, 1, 2, 3]))
    closed = draw(st.sampled_from(["right", "left", "both", "neither"])) if (timed and align == "rows") else "right"
    on = "t" if (timed or draw(st.booleans())) else None
    kind = draw(st.sampled_from(KINDS))
    return df, dict(by=by, on=on, windows=windows, aggs={"v": aggs}, align=align, missing=missing,
                    min_periods=min_periods, closed=closed), kind


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_query_matches_the_spec_recompute(case):
    df, q, kind = case
    query = pr.Query(**q)
    got = to_pandas(query.run(as_kind(df, kind)))
    outputs = [(o.name, o.column, o.agg if o.agg is ABSMAX else o.agg.name, o.window) for o in query.outputs]
    want = expected(df, by=q["by"], on=q["on"], windows=list(query.windows), outputs=outputs, align=q["align"],
                    missing=q["missing"], min_periods=q["min_periods"], closed=q["closed"])
    if q["align"] == "rows":
        want = want.reset_index(drop=True)
    assert_frame_matches(got, want, {o[0]: o[2] for o in outputs})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_window_output_is_the_per_key_sliding_aggregate_loop(case):
    """Each (column, aggregation, window) of window output is what ``sliding_aggregate`` gives over that
    key's values ordered by ``on`` (the spec's sentence, checked as written)."""
    df, q, kind = case
    assume(q["align"] == "windows" and (q["missing"] == "skip" or (q["min_periods"] or 1) <= 1))
    query = pr.Query(**q)
    got = to_pandas(query.run(as_kind(df, kind)))
    row_keys = [tuple(_norm(got[b].iloc[i]) for b in q["by"]) for i in range(len(got))]
    for key, rows in _groups(df, q["by"]):
        if q["on"] is not None:
            rows = rows[np.argsort(df["t"].to_numpy()[rows], kind="stable")]
        mine = np.array([rk == key for rk in row_keys], dtype=bool)
        ends_got = got["window_end"].to_numpy()[mine]
        v = df["v"].to_numpy()[rows]
        for o in query.outputs:
            w = query.windows[o.window]
            ts = df["t"].to_numpy()[rows] if isinstance(w, pr.TimeWindow) else None
            opts = {"missing": "skip", "min_periods": 1 if q["min_periods"] is None else q["min_periods"]} \
                if q["missing"] == "skip" else {}
            ends, res = pr.sliding_aggregate(v, window=w, agg=o.agg, timestamps=ts, **opts)
            col = got[o.name].to_numpy()[mine]
            at = np.searchsorted(ends_got, ends)
            assert np.array_equal(ends_got[at], ends), (o.name, key)
            for g, r in zip(col[at].tolist(), np.asarray(res, dtype=object).tolist()):
                assert close(None if g is pd.NA else g, None if (r is None or r != r) else r,
                             o.agg if o.agg is ABSMAX else o.agg.name), (o.name, key, g, r)


def test_query_is_the_loop_of_sliding_aggregate_calls():
    rng = np.random.default_rng(7)
    n = 3000
    k = np.sort(rng.integers(0, 5, n))
    v = rng.normal(size=n)
    windows = [pr.CountWindow(16), pr.CountWindow(64, 4), pr.CountWindow(50, 7)]
    out = pr.aggregate({"k": k, "v": v}, by="k", windows=windows, aggs={"v": ["max", "mean", "std", "argmin"]})
    for w, lab in zip(windows, ["16", "64", "50"]):
        for a in ("max", "mean", "std", "argmin"):
            col = out[f"v_{a}_{lab}"]
            for key in range(5):
                ends, res = pr.sliding_aggregate(v[k == key], window=w, agg=a)
                sel = (out["k"] == key) & np.isin(out["window_end"], ends)
                got = np.asarray(col)[sel]
                np.testing.assert_allclose(got.astype(float), np.asarray(res, dtype=float), rtol=1e-9, atol=0)


# ---------------------------------------------------------------------- frames in, the same kind out
@pytest.mark.parametrize("kind", KINDS)
def test_result_is_of_the_input_kind(kind):
    df = pd.DataFrame({"k": [1, 1, 2], "v": [1.0, 2.0, 3.0]})
    res = pr.aggregate(as_kind(df, kind), by="k", windows=pr.CountWindow(1), aggs={"v": "sum"})
    mod = {"pandas": "pandas", "polars": "polars", "pyarrow": "pyarrow", "dict": "builtins"}[kind]
    assert type(res).__module__.split(".")[0] == mod
    assert to_pandas(res)["v_sum"].tolist() == [1.0, 2.0, 3.0]


def test_row_output_keeps_the_pandas_index_and_input_order():
    df = pd.DataFrame({"k": [2, 1, 2, 1], "v": [1.0, 5.0, 3.0, 4.0]}, index=[10, 11, 12, 13])
    out = pr.aggregate(df, by="k", windows=pr.CountWindow(2), aggs={"v": "max"}, align="rows", min_periods=1)
    assert out.index.tolist() == [10, 11, 12, 13]
    assert out["v_max"].tolist() == [1.0, 5.0, 3.0, 5.0]


def test_empty_input_gives_the_full_schema():
    df = pd.DataFrame({"k": pd.Series([], dtype="int64"), "v": pd.Series([], dtype="float64")})
    out = pr.aggregate(df, by="k", windows=[pr.CountWindow(2), pr.CountWindow(3)], aggs={"v": ["max", "count"]})
    assert list(out.columns) == ["k", "window_end", "v_max_2", "v_count_2", "v_max_3", "v_count_3"]
    assert len(out) == 0


def test_query_is_frozen_and_picklable():
    q = pr.Query(by=["a", "b"], on="t", windows={"short": pr.TimeWindow("1min", "10s"), "long": pr.TimeWindow("5min", "10s")},
                 aggs={"v": ["max", "std"], "peak": ("w", "max")})
    assert pickle.loads(pickle.dumps(q)) == q
    assert [o.name for o in q.outputs] == ["v_max_short", "v_std_short", "peak_short", "v_max_long", "v_std_long",
                                           "peak_long"]
    with pytest.raises(AttributeError):
        q.by = ("c",)


# ---------------------------------------------------------------------- datetimes and durations
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_datetime_on_of_any_unit(unit):
    ts = pd.to_datetime(["2026-01-01 00:00:00", "2026-01-01 00:00:20", "2026-01-01 00:01:05"]).as_unit(unit)
    df = pd.DataFrame({"ts": ts, "v": [1.0, 2.0, 4.0]})
    out = pr.aggregate(df, on="ts", windows=pr.TimeWindow("1min", "30s"), aggs={"v": "sum"})
    assert out["window_end"].tolist() == [pd.Timestamp("2026-01-01 00:00:30"), pd.Timestamp("2026-01-01 00:01:00"),
                                          pd.Timestamp("2026-01-01 00:01:30"), pd.Timestamp("2026-01-01 00:02:00")]
    assert out["v_sum"].tolist() == [3.0, 3.0, 4.0, 4.0]
    assert str(out["window_end"].dtype) == f"datetime64[{unit}]"


def test_tz_aware_on_is_an_instant_and_the_output_keeps_the_zone():
    ts = pd.date_range("2026-03-29 00:30", periods=6, freq="30min", tz="Europe/Paris")  # across the DST change
    df = pd.DataFrame({"ts": ts, "v": np.arange(6.0)})
    out = pr.aggregate(df, on="ts", windows=pr.TimeWindow("1h"), aggs={"v": "count"})
    assert str(out["window_end"].dt.tz) == "Europe/Paris"
    assert out["v_count"].tolist() == [1, 2, 2, 1]  # instants: 30 min apart, whatever the wall clock says


def test_tz_aware_datetimes_as_objects_of_one_zone_or_refused_when_mixed():
    paris = pd.Series([pd.Timestamp("2026-01-01 00:10", tz="Europe/Paris"),
                       pd.Timestamp("2026-01-01 01:20", tz="Europe/Paris")], dtype=object)
    out = pr.aggregate(pd.DataFrame({"ts": paris, "v": [1.0, 2.0]}), on="ts", windows=pr.TimeWindow("1h"),
                       aggs={"v": "sum"})
    assert out["window_end"].tolist() == [pd.Timestamp("2026-01-01 01:00", tz="Europe/Paris"),
                                          pd.Timestamp("2026-01-01 02:00", tz="Europe/Paris")]
    mixed = pd.Series([pd.Timestamp("2026-01-01", tz="UTC"), pd.Timestamp("2026-01-01", tz="Europe/Paris")],
                      dtype=object)
    with pytest.raises(ValueError, match="on: column 'ts' mixes time zones"):
        pr.aggregate(pd.DataFrame({"ts": mixed, "v": [1.0, 2.0]}), on="ts", windows=pr.TimeWindow("1h"),
                     aggs={"v": "sum"})


def test_dates_as_on():
    days = [dt.date(2026, 1, 1), dt.date(2026, 1, 2), dt.date(2026, 1, 4)]
    out = pr.aggregate({"d": np.array(days, dtype="datetime64[D]"), "v": np.array([1.0, 2.0, 3.0])}, on="d",
                       windows=pr.TimeWindow("2d"), aggs={"v": "sum"}, align="rows")
    assert list(out["v_sum"]) == [1.0, 3.0, 3.0]


def test_integer_on_means_milliseconds_for_durations():
    out = pr.aggregate({"t": np.array([0, 500, 1500]), "v": np.array([1.0, 2.0, 3.0])}, on="t",
                       windows=pr.TimeWindow("1s"), aggs={"v": "sum"})
    assert out["window_end"].tolist() == [1000, 2000]
    assert out["v_sum"].tolist() == [3.0, 3.0]


# ---------------------------------------------------------------------- missing values
def test_missing_skip_is_pandas_rolling():
    v = pd.Series([1.0, np.nan, 3.0, np.nan, np.nan, 6.0, 2.0])
    df = pd.DataFrame({"v": v})
    for mp in (1, 2):
        out = pr.aggregate(df, windows=pr.CountWindow(3), aggs={"v": ["max", "mean", "sum", "count"]}, align="rows",
                           min_periods=mp)
        r = v.rolling(3, min_periods=mp)
        pd.testing.assert_series_equal(out["v_max"], r.max(), check_names=False)
        pd.testing.assert_series_equal(out["v_mean"], r.mean(), check_names=False)
        pd.testing.assert_series_equal(out["v_sum"], r.sum(), check_names=False)


def test_null_on_is_refused_unless_skipped():
    df = pd.DataFrame({"t": pd.array([1, None, 3], dtype="Int64"), "v": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="on"):
        pr.aggregate(df, on="t", windows=pr.TimeWindow(2), aggs={"v": "sum"}, missing="propagate")
    out = pr.aggregate(df, on="t", windows=pr.TimeWindow(2), aggs={"v": "sum"})
    assert out["v_sum"].tolist() == [1.0, 3.0]


# ---------------------------------------------------------------------- peers
def test_rows_match_pandas_groupby_rolling_time():
    rng = np.random.default_rng(3)
    n = 2000
    ts = pd.to_datetime("2026-01-01") + pd.to_timedelta(np.sort(rng.integers(0, 600_000, n)), unit="ms")
    df = pd.DataFrame({"k": rng.integers(0, 4, n), "ts": ts, "v": rng.normal(size=n)})
    df.loc[rng.random(n) < 0.05, "v"] = np.nan
    for closed in ("right", "left", "both", "neither"):
        out = pr.aggregate(df, by="k", on="ts", windows=pr.TimeWindow("60s"), aggs={"v": ["max", "mean", "std", "count"]},
                           align="rows", closed=closed)
        for a in ("max", "mean", "std", "count"):
            want = df.groupby("k").rolling("60s", on="ts", closed=closed)["v"].agg(a).reset_index(level=0, drop=True)
            want = want.sort_index()
            got = out[f"v_{a}"].sort_index()
            if a == "count":  # pandas counts with min_periods 0 (NaN on an empty window); ours: null below 1
                got, want = got.fillna(0), want.fillna(0)
            np.testing.assert_allclose(got.to_numpy(dtype=float), want.to_numpy(dtype=float), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{a} closed={closed}")


def test_rows_match_polars_rolling_over():
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(4)
    n = 3000
    df = pl.DataFrame({"k": rng.integers(0, 6, n), "v": rng.normal(size=n)})
    out = pr.aggregate(df, by="k", windows=pr.CountWindow(32), aggs={"v": ["max", "min", "mean", "std", "sum"]},
                       align="rows")
    want = df.with_columns(pl.col("v").rolling_max(32).over("k").alias("v_max"),
                           pl.col("v").rolling_min(32).over("k").alias("v_min"),
                           pl.col("v").rolling_mean(32).over("k").alias("v_mean"),
                           pl.col("v").rolling_std(32).over("k").alias("v_std"),
                           pl.col("v").rolling_sum(32).over("k").alias("v_sum"))
    for c in ("v_max", "v_min", "v_mean", "v_std", "v_sum"):
        g = out[c].to_numpy().astype(float)
        w = want[c].to_numpy().astype(float)
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12, err_msg=c)


def test_time_windows_match_polars_group_by_dynamic():
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(5)
    n = 4000
    ts = np.datetime64("2026-01-01", "ms") + np.sort(rng.integers(0, 3_600_000, n)).astype("timedelta64[ms]")
    df = pl.DataFrame({"k": rng.integers(0, 3, n), "ts": ts, "v": rng.normal(size=n)}).sort("k", "ts")
    out = pr.aggregate(df, by="k", on="ts", windows=pr.TimeWindow("5min", "1min"), aggs={"v": ["max", "mean"]})
    want = (df.group_by_dynamic("ts", every="1m", period="5m", group_by="k", closed="left", label="right",
                                start_by="window")
              .agg(pl.col("v").max().alias("v_max"), pl.col("v").mean().alias("v_mean"))
              .sort("k", "ts"))
    got = out.sort("k", "window_end")
    # polars' first windows start at the first row's slide; ours also emit the windows that began before it
    got = got.join(want.select("k", pl.col("ts").alias("window_end")), on=["k", "window_end"], how="semi")
    assert got.height == want.height
    np.testing.assert_array_equal(got["v_max"].to_numpy(), want["v_max"].to_numpy())
    np.testing.assert_allclose(got["v_mean"].to_numpy(), want["v_mean"].to_numpy(), rtol=1e-9)


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, param", [
    (dict(by="nope", windows=pr.CountWindow(2), aggs={"v": "max"}), "by"),
    (dict(on="nope", windows=pr.TimeWindow(2), aggs={"v": "max"}), "on"),
    (dict(windows=pr.CountWindow(2), aggs={"nope": "max"}), "aggs"),
    (dict(windows=pr.CountWindow(2), aggs={"s": "max"}), "aggs"),  # not numeric
])
def test_bad_columns_name_the_parameter(kwargs, param):
    df = pd.DataFrame({"v": [1.0, 2.0], "s": ["a", "b"]})
    with pytest.raises((ValueError, TypeError), match=param):
        pr.aggregate(df, **kwargs)


@pytest.mark.parametrize("kwargs, param", [
    (dict(windows=pr.CountWindow(2), aggs={"v": "median2"}), "aggs"),
    (dict(windows=pr.CountWindow(2), aggs={"v": ["max", "max"]}), "aggs"),
    (dict(windows=pr.CountWindow(2), aggs={"v_max": ("v", "min"), "v": "max"}), "aggs"),
    (dict(windows=pr.CountWindow(2), aggs={}), "aggs"),
    (dict(windows=[], aggs={"v": "max"}), "windows"),
    (dict(windows=3, aggs={"v": "max"}), "windows"),
    (dict(windows=pr.CountWindow(2, 2), aggs={"v": "max"}, align="rows"), "windows"),
    (dict(on="t", windows=pr.TimeWindow("1min", "10s"), aggs={"v": "max"}, align="rows"), "windows"),
    (dict(windows=pr.TimeWindow(2), aggs={"v": "max"}), "on"),
    (dict(windows=pr.CountWindow(2), aggs={"v": "max"}, align="cols"), "align"),
    (dict(windows=pr.CountWindow(2), aggs={"v": "max"}, missing="drop"), "missing"),
    (dict(windows=pr.CountWindow(2), aggs={"v": "max"}, min_periods=-1), "min_periods"),
    (dict(on="t", windows=pr.TimeWindow(2), aggs={"v": "max"}, align="rows", closed="open"), "closed"),
    (dict(windows=pr.CountWindow(2), aggs={"v": "max"}, align="rows", closed="left"), "closed"),
    (dict(by=3, windows=pr.CountWindow(2), aggs={"v": "max"}), "by"),
    (dict(windows=[pr.CountWindow(2), pr.CountWindow(2)], aggs={"v": "max"}), "labels"),
])
def test_bad_queries_are_refused_before_any_frame(kwargs, param):
    with pytest.raises((ValueError, TypeError), match=param):
        pr.Query(**kwargs)


def test_a_duration_not_whole_in_the_column_unit_is_refused():
    df = pd.DataFrame({"ts": pd.to_datetime(["2026-01-01", "2026-01-02"]).as_unit("s"), "v": [1.0, 2.0]})
    with pytest.raises(ValueError, match="range"):
        pr.aggregate(df, on="ts", windows=pr.TimeWindow("1500ms"), aggs={"v": "max"})
