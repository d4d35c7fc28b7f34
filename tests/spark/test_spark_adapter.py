"""The Spark adapter against Spark's own answers, on the shared local[2] session.

Count windows: ``agg(v) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN r-1 PRECEDING
AND CURRENT ROW)`` filtered to the spec's window ends (row ``r + j*s``); time
windows: ``groupBy(k, window(ts, r, s, offset))``. Keys are skewed, several
partitions are empty, ``r % s != 0``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from oracle import assert_results_equal, count_windows, time_windows

import pba_runtime as pr
import spark_integration as si
from spark_integration import python_worker as rt

pytestmark = pytest.mark.spark

SIZES = [1500, 400, 90, 17, 3, 1]  # skewed keys
EXACT = {"max", "min", "count", "argmax"}


def _pdf(seed: int = 0, sizes=SIZES) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    parts = []
    for i, n in enumerate(sizes):
        t = np.cumsum(rng.integers(1, 900, n)) + 1_700_000_000_000 + int(rng.integers(0, 5000))
        v = np.round(rng.normal(0, 10, n), 1)  # one decimal: some ties, for argmax
        parts.append(pd.DataFrame({"k": f"key{i}", "t": t.astype(np.int64), "v": v}))
    pdf = pd.concat(parts, ignore_index=True)
    return pdf.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # arrival order is not sorted


@pytest.fixture(scope="module")
def df(spark):
    from pyspark.sql import functions as F

    d = spark.createDataFrame(_pdf(0)).withColumn("ts", F.timestamp_millis("t"))
    return d.cache()


def _native_count(df, r: int, s: int, agg: str, keys=("k",)):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*keys).orderBy("t")
    frame = w.rowsBetween(-(r - 1), 0)
    d = df.withColumn("rn", F.row_number().over(w))
    if agg == "argmax":  # largest value, oldest position on ties: max of (v, -position)
        res = -(F.max(F.struct(F.col("v"), (1 - F.col("rn")).alias("neg"))).over(frame)["neg"])
    else:
        res = {"max": F.max, "min": F.min, "sum": F.sum, "mean": F.avg, "count": F.count}[agg]("v").over(frame)
    d = d.select(*keys, "rn", res.alias("result"))
    d = d.where((F.col("rn") >= r) & ((F.col("rn") - r) % s == 0))
    return d.select(*keys, F.col("rn").cast("long").alias("window_end"), "result")


def _native_time(df, r: int, s: int, agg: str, offset: int = 0, ts: str = "ts"):
    from pyspark.sql import functions as F

    win = F.window(ts, f"{r} milliseconds", f"{s} milliseconds", f"{offset} milliseconds")
    if agg == "argmax":
        res = -(F.max(F.struct(F.col("v"), (-F.unix_millis(ts)).alias("neg")))["neg"])
    else:
        res = {"max": F.max, "min": F.min, "sum": F.sum, "mean": F.avg, "count": F.count}[agg]("v")
    return (df.groupBy("k", win.alias("w")).agg(res.alias("result"))
            .select("k", F.unix_millis(F.col("w.end")).alias("window_end"), "result"))


def _as_dict(rows, nkeys: int = 1) -> dict:
    return {tuple(r[:nkeys]) + (r[nkeys],): r[nkeys + 1] for r in rows}


def _assert_same(got_df, want_df, agg: str, nkeys: int = 1) -> int:
    got = _as_dict(got_df.collect(), nkeys)
    want = _as_dict(want_df.collect(), nkeys)
    assert set(got) == set(want), (
        f"windows differ: {len(got)} vs {len(want)}; only ours: {sorted(set(got) - set(want))[:5]}, "
        f"only Spark's: {sorted(set(want) - set(got))[:5]}"
    )
    for k, w in want.items():
        g = got[k]
        if agg in EXACT:
            assert g == w, f"{k}: {g!r} != {w!r}"
        else:
            assert math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9), f"{k}: {g!r} != {w!r}"
    return len(want)


@pytest.mark.parametrize("agg", ["max", "sum", "mean", "argmax"])
def test_count_windows_match_spark_window_function(spark, df, agg):
    metrics = si.algorithm_metrics(spark)
    out = si.sliding_window_aggregate(df, key="k", order_by="t", value="v", window=pr.CountWindow(range=50, slide=7),
                                      agg=agg, num_partitions=8, metrics=metrics)  # 6 keys, 8 partitions: some empty
    assert out.columns == ["k", "window_end", "result"]
    assert dict(out.dtypes)["window_end"] == "bigint"
    assert dict(out.dtypes)["result"] == ("bigint" if agg == "argmax" else "double")
    n = _assert_same(out, _native_count(df, 50, 7, agg), agg)
    assert n == sum(pr.CountWindow(range=50, slide=7).windows_for(m) for m in SIZES)
    assert metrics.algorithms() == {"sba": len(SIZES)} and metrics.reasons() == {"small_window": len(SIZES)}
    assert metrics.value["windows"] == n and metrics.value["rows.sba"] == sum(SIZES)


@pytest.mark.parametrize("preaggregate", [True, False], ids=["preagg", "rows"])
@pytest.mark.parametrize("agg", ["max", "sum", "mean", "argmax"])
def test_time_windows_match_spark_window_grouping(spark, df, agg, preaggregate):
    metrics = si.algorithm_metrics(spark)
    out = si.sliding_window_aggregate(df, key="k", order_by="ts", value="v", window=("10 seconds", "3 seconds"),
                                      agg=agg, preaggregate=preaggregate, metrics=metrics)
    _assert_same(out, _native_time(df, 10_000, 3_000, agg), agg)
    assert metrics.value["rows.sba"] == sum(SIZES)  # pre-aggregated or not, every input row is counted


@pytest.mark.parametrize("preaggregate", [True, False], ids=["preagg", "rows"])
@pytest.mark.parametrize("agg", ["count", "min", "argmax"])
def test_time_windows_with_offset_and_long_order(df, agg, preaggregate):
    from pyspark.sql import functions as F

    win = pr.TimeWindow(range=7_000, slide=2_000, offset=500)  # order_by t is a long: the window is in its unit (ms)
    out = si.sliding_window_aggregate(df, key="k", order_by="t", value="v", window=win, agg=agg,
                                      preaggregate=preaggregate)
    assert dict(out.dtypes)["result"] == ("double" if agg == "min" else "bigint")
    _assert_same(out, _native_time(df.withColumn("tts", F.timestamp_millis("t")), 7_000, 2_000, agg, 500,
                                   ts="tts"), agg)


@pytest.mark.parametrize("preaggregate", [True, False], ids=["preagg", "rows"])
@pytest.mark.parametrize("agg", ["max", "argmax"])
def test_sub_millisecond_timestamps_floor_to_the_millisecond_before_and_after_1970(spark, agg, preaggregate):
    from pyspark.sql import functions as F

    rng = np.random.default_rng(7)
    us = np.sort(rng.integers(-40_000, 40_000, 600))  # microseconds around the epoch: -0.5 ms is in ms -1
    pdf = pd.DataFrame({"k": rng.integers(0, 3, us.size), "us": us, "v": np.round(rng.normal(0, 5, us.size))})
    d = spark.createDataFrame(pdf).withColumn("ts", F.timestamp_micros("us"))
    out = si.sliding_window_aggregate(d, key="k", order_by="ts", value="v", window=pr.TimeWindow(range=10, slide=3),
                                      agg=agg, preaggregate=preaggregate)
    _assert_same(out, _native_time(d, 10, 3, agg), agg)


@pytest.mark.parametrize("transport,preaggregate", [("mapInArrow", True), ("applyInPandas", False),
                                                    ("mapInArrow", False), ("applyInArrow", False)],
                         ids=["preagg", "rows-applyInPandas", "rows-mapInArrow", "rows-applyInArrow"])
def test_timestamp_ntz_order_is_its_wall_clock_as_utc_epoch_ms(spark, transport, preaggregate):
    """A TimestampNTZ order_by: its wall clock read as UTC epoch ms (floored), as Spark's window() groups it.

    The session time zone is not UTC and the data straddle the epoch (sub-millisecond, before 1970) and
    New York's 2024 spring-forward gap (wall-clock times that do not exist there), so reading the wall
    clock in the session zone would move windows; the windows are checked against Spark's window() and
    the oracle on the micros floored to ms.
    """
    import datetime as dt

    rng = np.random.default_rng(11)
    gap_us = int((dt.datetime(2024, 3, 10, 2, 0) - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000
    us = np.sort(np.concatenate([rng.integers(-40_000, 40_000, 300), gap_us + rng.integers(-1_000_000, 1_000_000, 300)]))
    keys = rng.integers(0, 3, us.size)
    vals = np.round(rng.normal(0, 5, us.size))
    rows = [(f"k{k}", dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(u)), float(v))
            for k, u, v in zip(keys, us, vals)]
    d = spark.createDataFrame(rows, "k string, ts timestamp_ntz, v double")
    win = pr.TimeWindow(range=10, slide=3)
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        for agg in ("max", "argmax"):
            out = si.sliding_window_aggregate(d, key="k", order_by="ts", value="v", window=win, agg=agg,
                                              transport=transport, preaggregate=preaggregate)
            got = _as_dict(out.collect())
            _assert_same(out, _native_time(d, win.range, win.slide, agg), agg)
            nwin = 0
            for k in np.unique(keys):  # per key and per cluster of times (the oracle walks every slide between)
                for cluster in (us < gap_us // 2, us >= gap_us // 2):
                    sel = (keys == k) & cluster
                    ends, want = time_windows(vals[sel], np.floor_divide(us[sel], 1000), win.range, win.slide, agg)
                    assert [got.get((f"k{k}", e)) for e in ends] == want
                    nwin += len(ends)
            assert len(got) == nwin
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_tumbling_time_window_one_hour(df):
    out = si.sliding_window_aggregate(df, key="k", order_by="ts", value="v", window=("1 hour", "1 hour"), agg="max")
    _assert_same(out, _native_time(df, 3_600_000, 3_600_000, "max"), "max")


def test_window_durations_in_every_spelling_are_spark_windows(df):
    """One duration is a tumbling window (Spark's ``window(col, "1 minute")``); pandas' spellings, timedeltas and
    an offset as a duration give the windows of Spark's own grouping (the core's one parser)."""
    import datetime as dt

    out = si.sliding_window_aggregate(df, key="k", order_by="ts", value="v", window="5s", agg="max")
    _assert_same(out, _native_time(df, 5_000, 5_000, "max"), "max")
    win = ("7s", dt.timedelta(seconds=2), "500ms")
    out = si.sliding_window_aggregate(df, key="k", order_by="ts", value="v", window=win, agg="sum")
    _assert_same(out, _native_time(df, 7_000, 2_000, "sum", 500), "sum")
    with pytest.raises(ValueError, match=r"slide '2500us' is not a whole number of milliseconds"):
        si.sliding_window_aggregate(df, key="k", order_by="ts", value="v", window=("7s", "2500us"), agg="sum")


def test_multiple_key_columns(spark):
    from pyspark.sql import functions as F

    pdf = _pdf(5, sizes=[300, 120, 40])
    d = spark.createDataFrame(pdf).withColumn("g", (F.col("t") % 2).cast("int"))
    out = si.sliding_window_aggregate(d, key=["k", "g"], order_by="t", value="v",
                                      window=pr.CountWindow(range=9, slide=4), agg="min")
    assert out.columns == ["k", "g", "window_end", "result"]
    assert dict(out.dtypes)["g"] == "int"
    _assert_same(out, _native_count(d, 9, 4, "min", keys=("k", "g")), "min", nkeys=2)


def test_empty_dataframe(spark, df):
    empty = df.where("v > 1e9")
    out = si.sliding_window_aggregate(empty, key="k", order_by="ts", value="v", window=("10 seconds", "5 seconds"),
                                      agg="max", num_partitions=3)
    assert out.collect() == []
    assert out.columns == ["k", "window_end", "result"]


def test_vector_and_list_results(spark):
    pdf = _pdf(3, sizes=[40, 7])
    pdf["v"] = pdf["v"].abs() + 1.0
    d = spark.createDataFrame(pdf)
    for agg in ("collect", "moment_sketch"):
        out = si.sliding_window_aggregate(d, key="k", order_by="t", value="v", window=pr.CountWindow(range=5, slide=2),
                                          agg=agg)
        assert dict(out.dtypes)["result"] == "array<double>"
        got = {(r.k, r.window_end): r.result for r in out.collect()}
        for k, g in pdf.sort_values("t").groupby("k"):
            ends, res = count_windows(g["v"].to_numpy(), 5, 2, agg)
            for e, want in zip(ends, res):
                np.testing.assert_allclose(got[(k, e)], want, rtol=1e-9)


def test_rdd_function_matches_dataframe_api(spark, df):
    """Keys interleave in each partition (sorted by time only); each key's records are in order."""
    for window, agg in ((pr.CountWindow(range=20, slide=3), "argmax"), (si.time_window("5 seconds", "2 seconds"), "sum")):
        metrics = si.algorithm_metrics(spark)
        f = si.pba_partition_function(window, agg, key="k", order="ts", value="v", batch_size=64, metrics=metrics)
        rdd = df.select("k", "ts", "v").repartition(2, "k").sortWithinPartitions("ts").rdd.mapPartitions(f)
        got = {(k, e): r for k, e, r in rdd.collect()}
        want_df = si.sliding_window_aggregate(df, key="k", order_by="ts", value="v", window=window, agg=agg)
        want = {(r.k, r.window_end): r.result for r in want_df.collect()}
        assert got.keys() == want.keys()
        for key, w in want.items():
            assert math.isclose(got[key], w, rel_tol=1e-12), key
        assert sum(metrics.algorithms().values()) == len(SIZES)
        assert f.split_keys() == 0  # each key in one partition: nothing flagged


def test_rdd_not_partitioned_by_key_gives_right_windows_or_a_warning_never_silently_wrong_ones(spark, df):
    """The README's RDD form on an RDD ordered by time (keys spread over every partition).

    ``sliding_window_rdd`` partitions by key itself: the DataFrame API's windows. The bare partition
    function cannot see other partitions: the driver warns as soon as a key was in two of them.
    """
    window = si.time_window("5 seconds", "2 seconds")
    rdd = df.select("k", "ts", "v").repartitionByRange(3, "ts").sortWithinPartitions("ts").rdd  # keys split
    assert rdd.getNumPartitions() > 1
    want_df = si.sliding_window_aggregate(df, key="k", order_by="ts", value="v", window=window, agg="sum")
    want = {(r.k, r.window_end): r.result for r in want_df.collect()}
    got = {(k, e): r for k, e, r in si.sliding_window_rdd(rdd, window, "sum", key="k", order="ts", value="v",
                                                           num_partitions=3).collect()}
    assert got.keys() == want.keys()
    for key, w in want.items():
        assert math.isclose(got[key], w, rel_tol=1e-12, abs_tol=1e-9), key

    f = si.pba_partition_function(window, "sum", key="k", order="ts", value="v")
    with pytest.warns(si.KeyPartitionWarning, match=r"key\(s\) had records in more than one partition"):
        wrong = rdd.mapPartitions(f).collect()
    assert len(wrong) != len(want)  # what the warning is about: one operator per piece of a key
    assert f.split_keys() >= 2


def test_rdd_helper_sorts_by_order_and_keeps_unorderable_keys(spark):
    rows = [(None, 3, 1.0), (("t", 1), 2, 4.0), (None, 1, 5.0), (1, 2, 3.0), (("t", 1), 1, 2.0), (None, 2, 2.0),
            (1.0, 1, 6.0)]  # keys of mixed types (1 and 1.0 are one key, as in a dict); arrival order shuffled
    rdd = spark.sparkContext.parallelize(rows, 3)
    out = si.sliding_window_rdd(rdd, pr.CountWindow(range=2, slide=1), "collect", key=0, order=1, value=2)
    got = sorted(out.collect(), key=repr)
    assert got == sorted([(None, 2, [5.0, 2.0]), (None, 3, [2.0, 1.0]), (("t", 1), 2, [2.0, 4.0]),
                          (1.0, 2, [6.0, 3.0])], key=repr) or got == sorted(
        [(None, 2, [5.0, 2.0]), (None, 3, [2.0, 1.0]), (("t", 1), 2, [2.0, 4.0]), (1, 2, [6.0, 3.0])], key=repr)
    with pytest.raises(ValueError, match="order is required"):
        si.sliding_window_rdd(rdd, pr.CountWindow(range=2, slide=1), "max", key=0, order=None, value=2)
    with pytest.raises(ValueError, match="num_partitions must be a positive integer"):
        si.sliding_window_rdd(rdd, pr.CountWindow(range=2, slide=1), "max", key=0, order=1, value=2, num_partitions=0)


def test_rdd_function_unsorted_order_is_a_clear_error(df):
    f = si.pba_partition_function(pr.CountWindow(range=5, slide=1), "max", key="k", order="t", value="v")
    rdd = df.select("k", "t", "v").repartition(2, "k").sortWithinPartitions(df.t.desc()).rdd.mapPartitions(f)
    with pytest.raises(Exception, match="order column 't' is not sorted within key"):
        rdd.collect()


# --------------------------------------------------------------------------- SBA fallback, PBA, visibility
@pytest.mark.parametrize("case", ["small_window", "one_core", "pool_unavailable"])
def test_sba_fallback_is_chosen_and_equal(spark, df, case):
    kwargs = {"algorithm_column": True}
    window = pr.CountWindow(range=64, slide=5)
    if case == "one_core":
        kwargs["cores_per_task"] = 1
        kwargs["min_slices"] = 1  # the window alone would run PBA
    elif case == "pool_unavailable":
        def cannot_start(workers):  # nested: pickled by value to the workers
            raise OSError("no threads for you")

        kwargs["algorithm"] = "pba"
        kwargs["pool_factory"] = cannot_start
    metrics = si.algorithm_metrics(spark)
    out = si.sliding_window_aggregate(df, key="k", order_by="t", value="v", window=window, agg="max",
                                      metrics=metrics, **kwargs).cache()
    try:
        assert {r.algorithm for r in out.select("algorithm").distinct().collect()} == {"sba"}
        _assert_same(out.drop("algorithm"), _native_count(df, 64, 5, "max"), "max")
        assert metrics.reasons() == {case: len(SIZES)}
    finally:
        out.unpersist()


def test_pba_runs_for_a_large_window_and_key(spark):
    """auto: PBA for the key with enough slices to use the pool, SBA (small_key) for the small ones."""
    from pyspark.sql import functions as F

    big = rt.PBA_MIN_KEY_SLICES + 5000
    d = spark.range(big + 9000).select(
        F.when(F.col("id") < big, F.lit("big")).otherwise(F.concat(F.lit("small"), (F.col("id") % 3).cast("string"))).alias("k"),
        F.col("id").alias("t"), (F.rand(11) * 100).alias("v"))
    d = d.cache()
    metrics = si.algorithm_metrics(spark)
    out = si.sliding_window_aggregate(d, key="k", order_by="t", value="v", window=pr.CountWindow(range=2048, slide=1),
                                      agg="max", metrics=metrics, algorithm_column=True, cores_per_task=2)
    try:
        spark.conf.set("spark.sql.window.segmentTree.enabled", "true")
        _assert_same(out.drop("algorithm"), _native_count(d, 2048, 1, "max"), "max")
    finally:
        spark.conf.unset("spark.sql.window.segmentTree.enabled")
    assert metrics.algorithms() == {"pba": 1, "sba": 3}
    assert metrics.reasons() == {"large_window": 1, "small_key": 3}
    algs = {(r.k, r.algorithm) for r in out.select("k", "algorithm").distinct().collect()}
    assert algs == {("big", "pba"), ("small0", "sba"), ("small1", "sba"), ("small2", "sba")}
    d.unpersist()


# --------------------------------------------------------------------------- bad input
def test_bad_input_on_the_driver(spark, df):
    from pyspark.sql import functions as F

    kw = {"key": "k", "order_by": "t", "value": "v", "window": pr.CountWindow(range=3, slide=1), "agg": "max"}
    with pytest.raises(ValueError, match="value column 'load' is not in the DataFrame"):
        si.sliding_window_aggregate(df, **{**kw, "value": "load"})
    with pytest.raises(ValueError, match="key column 'plug' is not in the DataFrame"):
        si.sliding_window_aggregate(df, **{**kw, "key": "plug"})
    with pytest.raises(TypeError, match="value column 'k' must be numeric"):
        si.sliding_window_aggregate(df.withColumn("kk", F.col("k")), **{**kw, "value": "k", "key": "kk"})
    with pytest.raises(TypeError, match="order_by column 'k' must be integral, a timestamp or a date"):
        si.sliding_window_aggregate(df.withColumn("kk", F.col("k")), **{**kw, "key": "kk", "order_by": "k",
                                                                        "window": ("1 second", "1 second")})
    with pytest.raises(ValueError, match="unknown aggregation|aggregation"):
        si.sliding_window_aggregate(df, **{**kw, "agg": "mode"})
    with pytest.raises(ValueError, match="unknown algorithm 'fast'"):
        si.sliding_window_aggregate(df, **{**kw, "algorithm": "fast"})
    with pytest.raises(ValueError, match="nulls must be one of"):
        si.sliding_window_aggregate(df, **{**kw, "nulls": "zero"})


@pytest.mark.parametrize("preaggregate", [True, False], ids=["preagg", "rows"])
def test_null_values_fail_or_skip(spark, df, preaggregate):
    from pyspark.sql import functions as F

    with_nulls = df.withColumn("v", F.when(F.col("t") % 5 == 0, F.lit(None)).otherwise(F.col("v")))
    kw = {"key": "k", "order_by": "ts", "value": "v", "window": ("4 seconds", "1 second"), "agg": "max", "preaggregate": preaggregate}
    with pytest.raises(Exception, match="value column 'v' holds nulls"):
        si.sliding_window_aggregate(with_nulls, **kw).collect()
    out = si.sliding_window_aggregate(with_nulls, nulls="skip", **kw)
    _assert_same(out, _native_time(with_nulls.where("v IS NOT NULL"), 4_000, 1_000, "max"), "max")
    # a time window needs a timestamp for every row
    no_ts = df.withColumn("ts", F.when(F.col("t") % 7 == 0, F.lit(None)).otherwise(F.col("ts")))
    with pytest.raises(Exception, match="order_by column 'ts' holds nulls"):
        si.sliding_window_aggregate(no_ts, **kw).collect()
    out = si.sliding_window_aggregate(no_ts, nulls="skip", **kw)
    _assert_same(out, _native_time(no_ts.where("ts IS NOT NULL"), 4_000, 1_000, "max"), "max")


def test_count_window_nulls_fail_names_the_column(df):
    from pyspark.sql import functions as F

    with_nulls = df.withColumn("load", F.when(F.col("t") % 7 == 0, F.lit(None)).otherwise(F.col("v")))
    with pytest.raises(Exception, match="value column 'load' holds nulls"):
        si.sliding_window_aggregate(with_nulls, key="k", order_by="t", value="load",
                                    window=pr.CountWindow(range=3, slide=1), agg="sum").collect()


@pytest.mark.parametrize("transport", ["mapInArrow", "applyInArrow", "applyInPandas"])
def test_every_transport_gives_the_same_windows(df, transport):
    for window, agg, order in ((pr.CountWindow(range=30, slide=4), "argmax", "t"),
                               (si.time_window("6 seconds", "4 seconds"), "mean", "ts")):
        want = si.sliding_window_aggregate(df, key="k", order_by=order, value="v", window=window, agg=agg)
        got = si.sliding_window_aggregate(df, key="k", order_by=order, value="v", window=window, agg=agg,
                                          transport=transport)
        assert got.schema == want.schema
        _assert_same(got, want, agg)



# one aggregation per transport in the default run (each a Spark job per window kind: ~4 s loaded); min and
# argmax, the same transports' null handling again, with the slow tests
@pytest.mark.parametrize("agg", ["max", *(pytest.param(a, marks=pytest.mark.slow) for a in ("min", "argmax"))])
@pytest.mark.parametrize("transport", ["mapInArrow", "applyInArrow", "applyInPandas"])
def test_nan_is_a_value_and_null_is_not_on_every_transport(spark, transport, agg):
    """A NaN value propagates as numpy's (the spec); a null is dropped (``skip``) or fails the job.

    pandas turns a null into NaN, and Spark's own ``min`` skips NaN: neither may leak into the windows.
    """
    rng = np.random.default_rng(5)
    rows = []
    for k, n in (("a", 70), ("b", 30)):
        t = np.cumsum(rng.integers(1, 700, n))
        v = np.round(rng.normal(0, 5, n), 1)
        kind = rng.integers(0, 6, n)  # 0: NaN, 1: null, else a number
        rows += [(k, int(ti), math.nan if c == 0 else None if c == 1 else float(vi)) for ti, vi, c in zip(t, v, kind)]
    d = spark.createDataFrame(rows, "k string, t long, v double")
    tw = pr.TimeWindow(range=2500, slide=1000)
    for window, preaggregate in ((pr.CountWindow(range=4, slide=3), None), (tw, False), (tw, True)):
        kw = {"key": "k", "order_by": "t", "value": "v", "window": window, "transport": transport}
        if preaggregate is not None:
            kw["preaggregate"] = preaggregate
        got = {(r[0], r[1]): r[2] for r in si.sliding_window_aggregate(d, agg=agg, nulls="skip", **kw).collect()}
        nwin = 0
        for key in ("a", "b"):
            t, v = zip(*[(ti, vi) for kk, ti, vi in rows if kk == key and vi is not None])
            ends, want = (count_windows(v, 4, 3, agg) if preaggregate is None
                          else time_windows(v, t, tw.range, tw.slide, agg))
            assert_results_equal(agg, [got.get((key, e)) for e in ends], want)
            nwin += len(ends)
        assert len(got) == nwin
        with pytest.raises(Exception, match="value column 'v' holds nulls"):
            si.sliding_window_aggregate(d, agg=agg, nulls="fail", **kw).collect()


def test_auto_transport_is_applyInPandas_unless_the_rows_are_preaggregated(spark, df, capsys):
    for window, order, node in ((pr.CountWindow(range=5, slide=1), "t", "FlatMapGroupsInPandas"),
                                (si.time_window("6 seconds", "2 seconds"), "ts", "MapInArrow")):
        si.sliding_window_aggregate(df, key="k", order_by=order, value="v", window=window, agg="max").explain()
        assert node in capsys.readouterr().out
    # a null order comes first in both plans, as Spark's ascending sort puts it
    rows = [("a", None, 9.0), ("a", 3, 1.0), ("a", 1, 2.0), ("b", 2, 5.0), ("b", None, 4.0), ("b", 1, 3.0)]
    small = spark.createDataFrame(rows, "k string, o long, v double")
    got = {tr: sorted(tuple(r) for r in si.sliding_window_aggregate(
        small, key="k", order_by="o", value="v", window=pr.CountWindow(range=2, slide=1), agg="collect",
        transport=tr).collect()) for tr in ("applyInPandas", "mapInArrow")}
    assert got["applyInPandas"] == got["mapInArrow"] == [
        ("a", 2, [9.0, 2.0]), ("a", 3, [2.0, 1.0]), ("b", 2, [4.0, 3.0]), ("b", 3, [3.0, 5.0])]
