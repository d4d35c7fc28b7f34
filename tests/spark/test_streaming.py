"""Streaming DataFrames through ``sliding_window_aggregate`` on real streaming queries.

File sources (one file per micro-batch), memory and file sinks, RocksDB state
store; every query runs ``trigger(availableNow=True)`` over a few small files.
The streaming answer is compared with the batch adapter's on the same rows.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import pba_runtime as pr
import spark_integration as si

pytestmark = pytest.mark.spark

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.fixture(scope="module")
def sspark(spark):
    """The shared session with the RocksDB state store provider (restored afterwards)."""
    key = "spark.sql.streaming.stateStore.providerClass"
    old = spark.conf.get(key, None)
    spark.conf.set(key, ROCKSDB)
    yield spark
    if old is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, old)


def write_files(folder, frames):
    """One parquet file per micro-batch (a file source with maxFilesPerTrigger=1 reads them in order)."""
    os.makedirs(folder, exist_ok=True)
    start = len([f for f in os.listdir(folder) if f.endswith(".parquet")])
    for i, f in enumerate(frames):
        f.to_parquet(os.path.join(folder, f"part-{start + i:04d}.parquet"), index=False)


SCHEMA = "plug string, ts long, load double"


def stream_of(spark, folder, time=False, delay="5 seconds"):
    from pyspark.sql import functions as F

    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(folder)
    if time:
        df = df.withColumn("t", F.timestamp_millis("ts")).withWatermark("t", delay)
    return df


def batch_of(spark, frames, time=False):
    from pyspark.sql import functions as F

    df = spark.createDataFrame(pd.concat(frames, ignore_index=True), SCHEMA)
    return df.withColumn("t", F.timestamp_millis("ts")) if time else df


def run_memory(out, name, checkpoint):
    q = (out.writeStream.format("memory").queryName(name).outputMode("append")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        q.awaitTermination(240)
    finally:
        q.stop()
    return q


def rows(df):
    return sorted((tuple(r) for r in df.collect()), key=repr)


def frames_count(rng, n_files=3, keys=("a", "b", "c", "d")):
    """Rows of some keys per file (key 'd' only in the last file), ts increasing per key across files."""
    frames = []
    for f in range(n_files):
        present = [k for k in keys if k != "d" or f == n_files - 1]
        parts = []
        for k in present:
            m = int(rng.integers(1, 9))
            ts = f * 1000 + np.sort(rng.choice(1000, m, replace=False))
            parts.append(pd.DataFrame({"plug": k, "ts": ts, "load": rng.normal(size=m).round(3)}))
        frames.append(pd.concat(parts).sample(frac=1, random_state=f).reset_index(drop=True))
    return frames


def test_count_windows_stream_equals_batch(sspark, tmp_path):
    rng = np.random.default_rng(1)
    frames = frames_count(rng)
    write_files(str(tmp_path / "in"), frames)
    win = pr.CountWindow(range=3, slide=2)
    metrics = si.algorithm_metrics(sspark)
    out = si.sliding_window_aggregate(stream_of(sspark, str(tmp_path / "in")), key="plug", order_by="ts",
                                      value="load", window=win, agg="max", metrics=metrics, state_chunk_rows=2)
    assert out.isStreaming and out.columns == ["plug", "window_end", "result"]
    run_memory(out, "count_stream", str(tmp_path / "ck"))
    got = rows(sspark.table("count_stream"))
    want = rows(si.sliding_window_aggregate(batch_of(sspark, frames), key="plug", order_by="ts", value="load",
                                            window=win, agg="max"))
    assert got == want and len(got) > 5
    assert metrics.value.get("late", 0) == 0 and metrics.value.get("windows") == len(got)
