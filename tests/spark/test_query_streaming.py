"""A query over a streaming DataFrame: ``si.aggregate`` on real streaming queries (file sources, one file per
micro-batch, RocksDB state store) against the same query over the same rows as a batch DataFrame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_streaming import (
    SENTINEL,
    batch_of,
    frames_count,
    frames_time,
    kill_mid_stream_then_finish,
    rows,
    run_files,
    run_memory,
    stream_of,
    write_files,
)

import pba_runtime as pr
import spark_integration as si

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


def assert_rows_close(got: list[tuple], want: list[tuple], float_cols: list[int]) -> None:
    """Same rows (key, window bounds, integer outputs exact); float outputs to 1e-12 (micro-batches cut the
    stream elsewhere than one batch), nulls in the same places."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for i, (a, b) in enumerate(zip(g, w)):
            if i in float_cols and a is not None and b is not None:
                assert a == pytest.approx(b, rel=1e-12, abs=1e-15), (g, w)
            else:
                assert a == b, (g, w)


@pytest.mark.parametrize("aggs, nulls", [(["max", "mean", "count"], False), (["max", "mean", "count"], True),
                                         (["max", "std", "count"], False)], ids=["folded", "folded-nulls", "rows"])
def test_time_windows_query_stream_equals_batch(sspark, tmp_path, aggs, nulls):
    """``folded``: the rows wait as partials per cell (max, mean, count); ``rows``: as rows (std); ``nulls``:
    null and NaN values skipped, min_periods=2."""
    rng = np.random.default_rng(7)
    frames = frames_time(rng)
    if nulls:
        for f in frames:
            f.loc[rng.random(len(f)) < 0.25, "load"] = np.nan
            f.loc[rng.random(len(f)) < 0.1, "load"] = None
    write_files(str(tmp_path / "in"), frames + [SENTINEL])
    q = pr.Query(by="plug", on="t", windows=[pr.TimeWindow("4s", "1500ms"), pr.TimeWindow("9s", "1500ms")],
                 aggs={"load": aggs}, min_periods=2 if nulls else None)
    metrics = si.algorithm_metrics(sspark)
    out = si.aggregate(stream_of(sspark, str(tmp_path / "in"), time=True, delay="3 seconds"), q, state_chunk_rows=4,
                       metrics=metrics)
    assert out.isStreaming
    assert out.columns == ["plug", "window_end", *[o.name for o in q.outputs]]
    assert dict(out.dtypes)["window_end"] == "timestamp" and dict(out.dtypes)["load_count_4s"] == "bigint"
    name = f"query_time_stream_{aggs[1]}_{int(nulls)}"
    run_memory(out, name, str(tmp_path / "ck"))
    got = [r for r in rows(sspark.table(name)) if r[0] != "zz"]
    want = rows(si.aggregate(batch_of(sspark, frames, time=True), q))
    assert_rows_close(got, want, float_cols=[3, 6])
    assert len(got) > 20 and any(r[5] is None for r in got)  # the windows' ends differ (4 % 1.5 != 9 % 1.5)
    assert metrics.value.get("late", 0) == 0 and metrics.value["windows"] > 0


def test_count_windows_query_stream_equals_batch(sspark, tmp_path):
    rng = np.random.default_rng(8)
    frames = frames_count(rng)
    write_files(str(tmp_path / "in"), frames)
    q = pr.Query(by="plug", on="ts", windows=[pr.CountWindow(3, 2), pr.CountWindow(4)], aggs={"load": ["min", "sum"]})
    out = si.aggregate(stream_of(sspark, str(tmp_path / "in")), q, state_chunk_rows=2)
    run_memory(out, "query_count_stream", str(tmp_path / "ck"))
    got = rows(sspark.table("query_count_stream"))
    want = rows(si.aggregate(batch_of(sspark, frames), q))
    assert_rows_close(got, want, float_cols=[3, 5])
    assert len(got) > 5


def test_query_stream_restarted_from_its_checkpoint_gives_every_row_once(sspark, tmp_path):
    """Stop after two files, restart on the same checkpoint with two more: the file sink holds the batch answer,
    each row once (the state of every output survives the restart)."""
    rng = np.random.default_rng(9)
    keys = [f"k{i:02d}" for i in range(20)]
    frames = frames_time(rng, n_files=4, keys=keys)
    src, sink, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    q = pr.Query(by="plug", on="t", windows=[pr.TimeWindow("5s", "2s"), pr.TimeWindow("10s", "2s")],
                 aggs={"load": ["sum", "max"]})

    def query():
        return si.aggregate(stream_of(sspark, src, time=True, delay="3 seconds"), q, state_chunk_rows=3)

    write_files(src, frames[:2])
    run_files(query(), sink, ck)
    first = sspark.read.parquet(sink).count()
    write_files(src, frames[2:] + [SENTINEL])
    run_files(query(), sink, ck)
    got = [r for r in rows(sspark.read.parquet(sink)) if r[0] != "zz"]
    want = rows(si.aggregate(batch_of(sspark, frames, time=True), q))
    assert 0 < first < len(got)
    assert_rows_close(got, want, float_cols=[2, 4])
    assert len({r[0] for r in got}) == 20


def test_a_streaming_median_and_p90_equal_the_batch_query(sspark, tmp_path):
    """Order statistics (exact and sketched) over a stream: each key's rows wait in the state store, the
    sorted-window operator answers the windows the watermark passed; the batch query's rows, to the bit (NaN
    skipped)."""
    rng = np.random.default_rng(12)
    frames = frames_time(rng)
    for f in frames:
        f.loc[rng.random(len(f)) < 0.2, "load"] = np.nan
    write_files(str(tmp_path / "in"), frames + [SENTINEL])
    q = pr.Query(by="plug", on="t", windows=[pr.TimeWindow("4s", "1500ms"), pr.TimeWindow("9s", "1500ms")],
                 aggs={"load": ["median", pr.quantile(0.9), "max", pr.quantile(0.9, relative_error=0.01)]})
    out = si.aggregate(stream_of(sspark, str(tmp_path / "in"), time=True, delay="3 seconds"), q, state_chunk_rows=4)
    run_memory(out, "query_median_stream", str(tmp_path / "ck"))
    got = [r for r in rows(sspark.table("query_median_stream")) if r[0] != "zz"]
    want = rows(si.aggregate(batch_of(sspark, frames, time=True), q))
    assert got == want and len(got) > 20


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_query_stream_driver_killed_then_restarted_gives_every_row_once(sspark, tmp_path):
    """SIGKILL of the driver running a 2-aggregation x 2-window query after two committed micro-batches, then a
    restart on its checkpoint: the file sink holds the batch answer, each (key, window end) once."""
    from stream_job import query

    rng = np.random.default_rng(14)
    frames = frames_time(rng, n_files=8, keys=[f"k{i}" for i in range(12)])
    sink = kill_mid_stream_then_finish(frames, tmp_path, what="query")
    got = [r for r in rows(sspark.read.parquet(sink)) if r[0] != "zz"]
    want = rows(si.aggregate(batch_of(sspark, frames, time=True), query()))
    assert_rows_close(got, want, float_cols=[3, 5])
    assert len({r[:2] for r in got}) == len(got) and len(got) > 50


@pytest.mark.parametrize("make, message", [
    (lambda df: dict(by="plug", on="t", windows=pr.TimeWindow("4s"), aggs={"load": "max"}),
     "need a watermark on column 't'"),
    (lambda df: dict(by="plug", on="ts", windows=pr.CountWindow(4), aggs={"load": "max", "ts": "min"}),
     "aggregates one value column"),
    (lambda df: dict(by="plug", on="ts", windows=pr.CountWindow(4), aggs={"load": "max"}, align="rows"),
     'row output (align="rows") is for a batch DataFrame'),
    (lambda df: dict(on="ts", windows=pr.CountWindow(4), aggs={"load": "max"}), "by: a streaming query"),
    (lambda df: dict(by="plug", on="ts", windows=pr.CountWindow(4), aggs={"load": "collect"}), "are not"),
    (lambda df: dict(by="plug", on="nope", windows=pr.CountWindow(4), aggs={"load": "max"}), "on: no column 'nope'"),
])
def test_a_streaming_query_is_refused_on_the_driver_in_one_line(sspark, tmp_path, make, message):
    write_files(str(tmp_path / "in"), [pd.DataFrame({"plug": ["a"], "ts": [1], "load": [1.0]})])
    from pyspark.sql import functions as F

    df = stream_of(sspark, str(tmp_path / "in")).withColumn("t", F.timestamp_millis("ts"))
    with pytest.raises((ValueError, TypeError)) as err:
        si.aggregate(df, **make(df))
    assert message in str(err.value) and "\n" not in str(err.value)
