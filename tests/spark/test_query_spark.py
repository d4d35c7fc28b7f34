"""``spark_integration.aggregate``: a query over a batch DataFrame equals the query over the same rows in
pandas, and Spark SQL's window functions; one Exchange for every output."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import pba_runtime as pr
import spark_integration as si

pytestmark = pytest.mark.spark


def _pdf(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    plug = rng.integers(0, 5, n)
    t = np.sort(rng.integers(0, 600_000, n))  # ms, ties included
    load = rng.normal(10.0, 3.0, n)
    load[rng.random(n) < 0.03] = np.nan
    return pd.DataFrame({"plug": plug, "t": t, "load": load})


@pytest.fixture(scope="module")
def frames(spark):
    from pyspark.sql import functions as F

    pdf = _pdf()
    df = spark.createDataFrame(pdf).withColumn("ts", F.timestamp_millis("t"))
    local = pdf.assign(ts=pd.to_datetime(pdf["t"], unit="ms").astype("datetime64[us]"))
    return df, local


def _sorted(out: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return out.sort_values(by, kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("windows", [
    [pr.CountWindow(16)],
    [pr.CountWindow(8), pr.CountWindow(32, 4)],
    [pr.TimeWindow("1min", "10s"), pr.TimeWindow("5min", "10s")],
])
def test_window_output_is_the_query_over_the_same_rows(frames, windows):
    df, local = frames
    q = pr.Query(by="plug", on="ts", windows=windows, aggs={"load": ["max", "mean", "std", "count"]})
    got = _sorted(si.aggregate(df, q).toPandas(), ["plug", "window_end"])
    want = _sorted(q.run(local[["plug", "ts", "load"]]), ["plug", "window_end"])
    assert list(got.columns) == list(want.columns)
    assert got["plug"].tolist() == want["plug"].tolist()
    np.testing.assert_array_equal(got["window_end"].to_numpy(dtype="datetime64[us]")
                                  if isinstance(windows[0], pr.TimeWindow) else got["window_end"].to_numpy(),
                                  want["window_end"].to_numpy(dtype="datetime64[us]")
                                  if isinstance(windows[0], pr.TimeWindow) else want["window_end"].to_numpy())
    for o in q.outputs:
        np.testing.assert_allclose(got[o.name].to_numpy(dtype=float), want[o.name].to_numpy(dtype=float),
                                   rtol=1e-12, equal_nan=True, err_msg=o.name)


@pytest.fixture
def kolkata(spark):
    """The session in a zone 5.5 h from UTC: a wall clock read in it would move hour windows by half an hour."""
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", old)


def test_wall_clock_and_date_windows_fall_on_the_wall_clock_in_any_session_zone(kolkata):
    """A ``timestamp_ntz`` and a ``date`` order column: the query's windows are those of the same naive
    datetimes in pandas (Spark's ``window()`` groups a wall clock so too), and so are ``sliding_window_aggregate``'s."""
    import datetime as dt

    spark = kolkata
    base = dt.datetime(2024, 3, 30)
    rows = [("a" if i % 3 else "b", base + dt.timedelta(minutes=37 * i), float(i % 7)) for i in range(200)]
    df = spark.createDataFrame(rows, "k string, t timestamp_ntz, v double")
    pdf = pd.DataFrame(rows, columns=["k", "t", "v"]).astype({"t": "datetime64[us]"})
    q = pr.Query(by="k", on="t", windows=[pr.TimeWindow("1h"), pr.TimeWindow("6h", "1h")], aggs={"v": ["max", "sum"]})
    got = _sorted(si.aggregate(df, q).toPandas(), ["k", "window_end"])
    assert dict(si.aggregate(df, q).dtypes)["window_end"] == "timestamp_ntz"
    want = _sorted(q.run(pdf), ["k", "window_end"])
    np.testing.assert_array_equal(got["window_end"].to_numpy(dtype="datetime64[us]"),
                                  want["window_end"].to_numpy(dtype="datetime64[us]"))
    np.testing.assert_allclose(got["v_max_6h"].to_numpy(dtype=float), want["v_max_6h"].to_numpy(dtype=float),
                               equal_nan=True)
    one = si.sliding_window_aggregate(df, key="k", order_by="t", value="v", window="1 hour", agg="max").toPandas()
    want1 = want.dropna(subset=["v_max_1h"])
    assert sorted(zip(one["k"], one["window_end"])) == sorted(
        zip(want1["k"], want1["window_end"].to_numpy(dtype="datetime64[ms]").astype(np.int64).tolist()))

    days = [("a", (base + dt.timedelta(days=i // 2)).date(), float(i)) for i in range(40)]
    ddf = spark.createDataFrame(days, "k string, d date, v double")
    qd = pr.Query(by="k", on="d", windows=pr.TimeWindow("3D", "1D"), aggs={"v": ["max", "count"]})
    got = si.aggregate(ddf, qd).toPandas()
    assert dict(si.aggregate(ddf, qd).dtypes)["window_end"] == "date"
    pdays = pd.DataFrame(days, columns=["k", "d", "v"]).assign(d=lambda f: pd.to_datetime(f["d"]))
    want = qd.run(pdays)
    assert [d.isoformat() for d in got["window_end"]] == [str(t.date()) for t in want["window_end"]]
    assert got["v_count"].tolist() == want["v_count"].tolist() and got["v_count"].max() == 6


def test_count_windows_equal_spark_sql_window_functions(frames):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    df, _ = frames
    clean = df.where(F.col("load").isNotNull() & ~F.isnan("load"))
    q = pr.Query(by="plug", on="t", windows=pr.CountWindow(16), aggs={"load": ["max", "mean", "std"]},
                 align="rows")
    got = si.aggregate(clean, q)
    w = Window.partitionBy("plug").orderBy("t").rowsBetween(-15, 0)
    sql = (clean.withColumn("n", F.count("load").over(w))
           .withColumn("load_max", F.max("load").over(w)).withColumn("load_mean", F.avg("load").over(w))
           .withColumn("load_std", F.stddev_samp("load").over(w)))
    # ties in t: both sides order a key's rows by t; compare the rows whose t is unique within the key
    a = got.toPandas()
    b = sql.where(F.col("n") == 16).toPandas()
    uniq = a.groupby(["plug", "t"])["t"].transform("size") == 1
    a = a[uniq & a["load_max"].notna()].sort_values(["plug", "t"]).reset_index(drop=True)
    key = b.set_index(["plug", "t"])
    key = key[~key.index.duplicated(keep=False)]
    b = key.loc[pd.MultiIndex.from_frame(a[["plug", "t"]])].reset_index()
    np.testing.assert_array_equal(a["load_max"].to_numpy(), b["load_max"].to_numpy())
    for c in ("load_mean", "load_std"):
        np.testing.assert_allclose(a[c].to_numpy(), b[c].to_numpy(), rtol=1e-9, err_msg=c)


def test_row_output_keeps_every_input_column(frames):
    df, local = frames
    q = pr.Query(by="plug", on="ts", windows=pr.TimeWindow("60s"), aggs={"load": ["mean", "max"]}, align="rows")
    out = si.aggregate(df, q)
    assert out.columns == df.columns + ["load_mean", "load_max"]
    got = out.toPandas().sort_values(["plug", "t", "load"]).reset_index(drop=True)
    want = pd.concat([local, q.run(local)], axis=1).sort_values(["plug", "t", "load"]).reset_index(drop=True)
    assert len(got) == len(want) == len(local)
    np.testing.assert_allclose(got["load_mean"].to_numpy(dtype=float), want["load_mean"].to_numpy(dtype=float),
                               rtol=1e-12, equal_nan=True)


def test_the_plan_has_one_exchange_for_every_output(frames):
    df, _ = frames
    out = si.aggregate(df, by="plug", on="ts", windows=[pr.TimeWindow("1min", "10s"), pr.TimeWindow("5min", "10s")],
                       aggs={"load": ["max", "mean", "std"]})
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert plan.count("Exchange") == 1, plan
    assert dict(out.dtypes)["window_end"] == "timestamp"


@pytest.mark.parametrize("kwargs, param", [
    (dict(by="nope", on="ts", windows=pr.CountWindow(2), aggs={"load": "max"}), "by"),
    (dict(by="plug", on="ts", windows=pr.CountWindow(2), aggs={"nope": "max"}), "aggs"),
    (dict(by="plug", windows=pr.CountWindow(2), aggs={"load": "max"}), "on"),
    (dict(by="plug", on="load", windows=pr.CountWindow(2), aggs={"load": "max"}), "on"),
])
def test_bad_queries_are_refused_on_the_driver(frames, kwargs, param):
    df, _ = frames
    with pytest.raises((ValueError, TypeError), match=param):
        si.aggregate(df, **kwargs)


@pytest.mark.timeout(600)  # its own JVM, and on a cold numba cache the keyed kernels compile
def test_the_spark_query_bench_runs(tmp_path):
    """bench/bench_spark_query.py at a smoke size, in its own process (its own SparkSession and JVM)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_spark_query.py"
    out = tmp_path / "spark_query.json"
    proc = subprocess.run([sys.executable, str(bench), "--quick", "--rows", "30000", "--check-rows", "20000",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["cases"]) == {"ours_1", "ours_9", "sql_1", "sql_9"}
    assert all(res["agrees"].values()) and res["exchanges_in_the_query_plan"] == 1
    assert all(c["n"] == 1 and c["median"] > 0 for c in res["cases"].values())


def test_a_query_with_median_and_p99_equals_the_query_in_pandas(frames):
    """Order statistics in a Spark query (exact and sketched): the same kernels per partition, the results of
    the query over the same rows in pandas (to the bit)."""
    df, local = frames
    q = pr.Query(by="plug", on="ts", windows=[pr.CountWindow(32, 4), pr.TimeWindow("2min", "30s")],
                 aggs={"load": ["median", pr.quantile(0.99), "max", pr.quantile(0.99, relative_error=0.01)]})
    out = si.aggregate(df, q)
    assert dict(out.dtypes)["load_median_32"] == "double" and dict(out.dtypes)["load_p99_2min"] == "double"
    got = _sorted(out.toPandas(), ["plug", "window_end"])
    want = _sorted(q.run(local[["plug", "ts", "load"]]), ["plug", "window_end"])
    for o in q.outputs:
        np.testing.assert_array_equal(got[o.name].to_numpy(dtype=float), want[o.name].to_numpy(dtype=float),
                                      err_msg=o.name)


@pytest.mark.parametrize("window", [pr.CountWindow(16, 3), pr.TimeWindow("1min", "10s")], ids=["count", "time"])
def test_sliding_window_aggregate_takes_the_median_as_the_query_does(frames, window):
    """The one-output form runs every key on the sorted-window operator: the query's windows and bits."""
    df, _ = frames
    df = df.where("load = load")  # the one-output form's nulls="fail" reads NaN as a value; drop them here
    got = sorted(tuple(r) for r in si.sliding_window_aggregate(df, key="plug", order_by="ts", value="load",
                                                              window=window, agg="median").collect())
    q = pr.Query(by="plug", on="ts", windows=window, aggs={"load": "median"}, missing="propagate")
    res = si.aggregate(df, q).toPandas().dropna(subset=["load_median"])
    ends = (res["window_end"].astype("datetime64[ms]").astype("int64") if isinstance(window, pr.TimeWindow)
            else res["window_end"])
    want = sorted(zip(res["plug"].tolist(), ends.tolist(), res["load_median"].tolist()))
    assert got == want and len(got) > 100
