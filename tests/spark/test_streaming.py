"""Streaming DataFrames through ``sliding_window_aggregate`` on real streaming queries.

File sources (one file per micro-batch) and the rate source, memory and file
sinks, RocksDB state store; the file-source queries run
``trigger(availableNow=True)`` over a few small files.
The streaming answer is compared with the batch adapter's on the same rows.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
import pytest

import pba_runtime as pr
import spark_integration as si

# a streaming query takes seconds per micro-batch on a shared 2-core machine: more than the default 120 s
pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def write_files(folder, frames):
    """One parquet file per micro-batch, read in this order by a file source with maxFilesPerTrigger=1.

    The file source takes files by modification time (in ms) and files of the same millisecond in
    directory-listing order, which is not the name order: small files written in a loop often share a
    millisecond, and a file read before an earlier one moves the watermark past the earlier one's rows
    (then late). So each file gets its own modification time, 10 ms after the previous file's.
    """
    os.makedirs(folder, exist_ok=True)
    old = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".parquet")]
    last = max([time.time()] + [os.stat(p).st_mtime for p in old])
    for i, f in enumerate(frames):
        path = os.path.join(folder, f"part-{len(old) + i:04d}.parquet")
        f.to_parquet(path, index=False)
        os.utime(path, (last + 0.01 * (i + 1),) * 2)


def files_read_in_order(checkpoint):
    """The source files' names in the order the query's micro-batches read them (the checkpoint's source log)."""
    import json

    log = os.path.join(checkpoint, "sources", "0")
    read = {}
    for name in os.listdir(log):
        if name.split(".")[0].isdigit() and not name.endswith(".crc"):  # "7", and "9.compact" after compaction
            with open(os.path.join(log, name)) as fh:
                for line in fh.read().splitlines()[1:]:  # after the version line
                    entry = json.loads(line)
                    read[entry["path"]] = entry["batchId"]
    return [os.path.basename(p) for p in sorted(read, key=read.get)]


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


def frames_time(rng, n_files=4, keys=("a", "b", "c")):
    """Event-time rows: each file moves time on by ~10 s; rows within 3 s out of order; key 'c' skips files."""
    frames = []
    for f in range(n_files):
        parts = []
        for k in keys:
            if k == "c" and f % 2:
                continue
            m = int(rng.integers(2, 12))
            ts = f * 10_000 + rng.integers(3_000, 10_000, m)
            parts.append(pd.DataFrame({"plug": k, "ts": ts, "load": rng.normal(size=m).round(3)}))
        frames.append(pd.concat(parts).reset_index(drop=True))
    return frames


SENTINEL = pd.DataFrame({"plug": ["zz"], "ts": [10**9], "load": [0.0]})  # moves the watermark past every window


# mean takes the same streaming path as max (its own JVM job, 15-20 s loaded): with the slow tests
@pytest.mark.parametrize("agg", ["max", pytest.param("mean", marks=pytest.mark.slow)])
def test_time_windows_stream_equals_batch(sspark, tmp_path, agg):
    rng = np.random.default_rng(2)
    frames = frames_time(rng)
    write_files(str(tmp_path / "in"), frames + [SENTINEL])
    win = ("4 seconds", "1500 milliseconds")
    metrics = si.algorithm_metrics(sspark)
    out = si.sliding_window_aggregate(stream_of(sspark, str(tmp_path / "in"), time=True, delay="3 seconds"),
                                      key="plug", order_by="t", value="load", window=win, agg=agg,
                                      metrics=metrics, state_chunk_rows=4)
    name = f"time_stream_{agg}"
    run_memory(out, name, str(tmp_path / "ck"))
    got = [r for r in rows(sspark.table(name)) if r[0] != "zz"]
    want = rows(si.sliding_window_aggregate(batch_of(sspark, frames, time=True), key="plug", order_by="t",
                                            value="load", window=win, agg=agg))
    assert [r[:2] for r in got] == [r[:2] for r in want] and len(got) > 20
    if agg == "max":
        assert got == want
    else:  # micro-batches split the stream elsewhere than one batch: float sums agree to rounding (the spec)
        np.testing.assert_allclose([r[2] for r in got], [r[2] for r in want], rtol=1e-12, atol=1e-15)
    assert metrics.value.get("late", 0) == 0


def test_late_rows_are_counted_and_emitted(sspark, tmp_path):
    frames = [
        pd.DataFrame({"plug": ["a", "a", "b"], "ts": [1_000, 2_000, 1_500], "load": [1.0, 2.0, 3.0]}),
        pd.DataFrame({"plug": ["a", "b"], "ts": [20_000, 21_000], "load": [4.0, 5.0]}),  # watermark -> 19 s
        pd.DataFrame({"plug": ["a", "b", "a"], "ts": [500, 19_000, 30_000], "load": [9.0, 8.0, 6.0]}),  # 2 late
        SENTINEL,
    ]
    write_files(str(tmp_path / "in"), frames)
    metrics = si.algorithm_metrics(sspark)
    out = si.sliding_window_aggregate(stream_of(sspark, str(tmp_path / "in"), time=True, delay="1 second"),
                                      key="plug", order_by="t", value="load", window=("10 seconds", "10 seconds"),
                                      agg="sum", metrics=metrics, late_rows="emit")
    assert out.columns == ["plug", "window_end", "result", "late", "late_order", "late_value"]
    run_memory(out, "late_stream", str(tmp_path / "ck"))
    got = [r for r in rows(sspark.table("late_stream")) if r[0] != "zz"]
    late = sorted((r[0], r[4], r[5]) for r in got if r[3])
    windows = sorted((r[0], r[1], r[2]) for r in got if not r[3])
    assert late == [("a", 500, 9.0), ("b", 19_000, 8.0)]
    assert windows == [("a", 10_000, 3.0), ("a", 30_000, 4.0), ("a", 40_000, 6.0),
                       ("b", 10_000, 3.0), ("b", 30_000, 5.0)]
    assert metrics.value["late"] == 2


def run_files(out, folder, checkpoint):
    """Append ``out`` to a parquet file sink (exactly once: the sink's log names the files of each batch)."""
    q = (out.writeStream.format("parquet").option("path", folder).option("checkpointLocation", checkpoint)
         .outputMode("append").trigger(availableNow=True).start())
    try:
        q.awaitTermination(240)
    finally:
        q.stop()


def test_restart_from_checkpoint_many_keys(sspark, tmp_path):
    """Stop after two files, restart on the same checkpoint with two more: the file sink holds the batch answer."""
    rng = np.random.default_rng(3)
    keys = [f"k{i:03d}" for i in range(60)]
    frames = frames_time(rng, n_files=4, keys=keys)
    src, sink, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    win = pr.TimeWindow(range=5_000, slide=2_000)

    def query():
        return si.sliding_window_aggregate(stream_of(sspark, src, time=True, delay="3 seconds"), key="plug",
                                           order_by="t", value="load", window=win, agg="sum", state_chunk_rows=3)

    write_files(src, frames[:2])
    run_files(query(), sink, ck)
    first = sspark.read.parquet(sink).count()
    write_files(src, frames[2:] + [SENTINEL])
    run_files(query(), sink, ck)  # a new query (new operators, new caches) on the same checkpoint
    got = [r for r in rows(sspark.read.parquet(sink)) if r[0] != "zz"]
    want = rows(si.sliding_window_aggregate(batch_of(sspark, frames, time=True), key="plug", order_by="t",
                                            value="load", window=win, agg="sum"))
    assert 0 < first < len(got)
    assert [(k, e) for k, e, _ in got] == [(k, e) for k, e, _ in want]
    np.testing.assert_allclose([r for _, _, r in got], [r for _, _, r in want], rtol=1e-12)
    assert len({r[0] for r in got}) == 60


def kill_mid_stream_then_finish(frames, tmp_path, what="window"):
    """Run ``stream_job.py`` over ``frames`` (and SENTINEL), SIGKILL its whole process group (its Python, the JVM,
    the workers) after two committed micro-batches, then finish on the same checkpoint; the sink's folder."""
    import signal
    import subprocess
    import sys

    src, sink, ck = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ck")
    write_files(src, frames + [SENTINEL])
    job = os.path.join(os.path.dirname(__file__), "stream_job.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, job, src, sink, ck, "run", what], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        commits = os.path.join(ck, "commits")
        while time.monotonic() < deadline and proc.poll() is None:
            done = [f for f in os.listdir(commits) if f.isdigit()] if os.path.isdir(commits) else []
            if len(done) >= 2:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the job ended before it was killed"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    done = sorted(int(f) for f in os.listdir(os.path.join(ck, "commits")) if f.isdigit())
    assert 2 <= len(done) < len(frames) + 1, done  # killed mid-stream
    fin = subprocess.run([sys.executable, job, src, sink, ck, "finish", what], env=env, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=400, check=False)
    assert fin.returncode == 0, fin.stderr.decode()[-3000:]
    # the queries read one file per micro-batch, in the files' order (else rows would be late: see write_files)
    assert files_read_in_order(ck) == sorted(f for f in os.listdir(src) if f.endswith(".parquet"))
    return sink


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_driver_killed_mid_stream_then_restarted_gives_the_same_sink(sspark, tmp_path):
    """SIGKILL of the driver after two committed micro-batches, then a restart on the checkpoint: the file sink
    holds exactly the uninterrupted answer."""
    rng = np.random.default_rng(4)
    frames = frames_time(rng, n_files=8, keys=[f"k{i}" for i in range(12)])
    sink = kill_mid_stream_then_finish(frames, tmp_path)
    got = [r for r in rows(sspark.read.parquet(sink)) if r[0] != "zz"]
    want = rows(si.sliding_window_aggregate(batch_of(sspark, frames, time=True), key="plug", order_by="t",
                                            value="load", window=("5 seconds", "2 seconds"), agg="max"))
    assert got == want and len(got) > 50


def test_streaming_errors_on_the_driver(sspark, tmp_path):
    write_files(str(tmp_path / "in"), [pd.DataFrame({"plug": ["a"], "ts": [1], "load": [1.0]})])
    plain = stream_of(sspark, str(tmp_path / "in"))
    kw = dict(key="plug", value="load", agg="max")
    with pytest.raises(ValueError, match="order_by: time windows over a streaming DataFrame need a watermark on column 'ts'"):
        si.sliding_window_aggregate(plain, order_by="ts", window=pr.TimeWindow(range=10, slide=5), **kw)
    with pytest.raises(ValueError, match="transport and num_partitions are for a batch DataFrame"):
        si.sliding_window_aggregate(plain, order_by="ts", window=pr.CountWindow(range=2, slide=1),
                                    transport="mapInArrow", **kw)
    with pytest.raises(ValueError, match="late_rows must be one of 'count', 'emit'"):
        si.sliding_window_aggregate(plain, order_by="ts", window=pr.CountWindow(range=2, slide=1), late_rows="x", **kw)
    with pytest.raises(ValueError, match="late_rows='emit' is for a streaming DataFrame"):
        si.sliding_window_aggregate(batch_of(sspark, [pd.DataFrame({"plug": ["a"], "ts": [1], "load": [1.0]})]),
                                    order_by="ts", window=pr.CountWindow(range=2, slide=1), late_rows="emit", **kw)
    with pytest.raises(ValueError, match="preaggregate=True on a streaming DataFrame"):
        si.sliding_window_aggregate(stream_of(sspark, str(tmp_path / "in"), time=True), order_by="t",
                                    window=pr.TimeWindow(range=10, slide=5), preaggregate=True,
                                    **{**kw, "agg": "std"})


def test_arrow_batch_byte_cap_is_lifted_unless_the_user_set_one(sspark, tmp_path):
    """The adapter sets maxBytesPerBatch to Spark's no-cap value (no per-row size check) only when it is unset."""
    from spark_integration.streaming import ARROW_BYTES_CONF, UNCAPPED_ARROW_BYTES

    write_files(str(tmp_path / "in"), [pd.DataFrame({"plug": ["a"], "ts": [1], "load": [1.0]})])
    old = sspark.conf.get(ARROW_BYTES_CONF, None)
    kw = dict(key="plug", order_by="ts", value="load", window=pr.CountWindow(range=2, slide=1), agg="max")
    try:
        sspark.conf.unset(ARROW_BYTES_CONF)
        si.sliding_window_aggregate(stream_of(sspark, str(tmp_path / "in")), **kw)
        assert sspark.conf.get(ARROW_BYTES_CONF, None) == str(UNCAPPED_ARROW_BYTES)
        sspark.conf.set(ARROW_BYTES_CONF, "1000000")
        si.sliding_window_aggregate(stream_of(sspark, str(tmp_path / "in")), **kw)
        assert sspark.conf.get(ARROW_BYTES_CONF, None) == "1000000"
    finally:
        if old is None:
            sspark.conf.unset(ARROW_BYTES_CONF)
        else:
            sspark.conf.set(ARROW_BYTES_CONF, old)


def test_rate_source_count_windows_are_a_prefix_of_the_batch_answer(sspark, tmp_path):
    """The rate source (value 0, 1, 2, ... at a steady rate): key = value % 3, order = value. Whatever the
    micro-batches, each key's windows are the first windows of the batch answer over its values."""
    import time

    from pyspark.sql import functions as F

    df = (sspark.readStream.format("rate").option("rowsPerSecond", 40).load()
          .select((F.col("value") % 3).alias("plug"), F.col("value").alias("n"),
                  (F.col("value") % 11).cast("double").alias("load")))
    out = si.sliding_window_aggregate(df, key="plug", order_by="n", value="load",
                                      window=pr.CountWindow(range=5, slide=2), agg="sum")
    q = (out.writeStream.format("memory").queryName("rate_stream").outputMode("append")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len([p for p in q.recentProgress if p["numInputRows"]]) < 3:
            time.sleep(0.5)
    finally:
        q.stop()
    got = rows(sspark.table("rate_stream"))
    assert len({r[0] for r in got}) == 3
    for plug in range(3):
        mine = sorted((e, r) for p, e, r in got if p == plug)
        values = [float(v % 11) for v in range(plug, 100_000, 3)][: mine[-1][0]]
        op = pr.create("sba", pr.CountWindow(range=5, slide=2), "sum")
        ends, res = op.insert_many(values)
        assert mine == list(zip(ends.tolist(), res.tolist()))


def test_a_session_without_rocksdb_gets_it_and_another_provider_is_refused(spark):
    from spark_integration.streaming import HDFS_PROVIDER, STATE_STORE_CONF, use_rocksdb_state_store

    old = spark.conf.get(STATE_STORE_CONF, None)
    try:
        spark.conf.unset(STATE_STORE_CONF)
        assert use_rocksdb_state_store(spark) is True
        assert spark.conf.get(STATE_STORE_CONF) == ROCKSDB
        assert use_rocksdb_state_store(spark) is False  # kept
        spark.conf.set(STATE_STORE_CONF, HDFS_PROVIDER)  # Spark's default, set explicitly
        assert use_rocksdb_state_store(spark) is True and spark.conf.get(STATE_STORE_CONF) == ROCKSDB
        spark.conf.set(STATE_STORE_CONF, "com.example.MyStateStoreProvider")
        with pytest.raises(ValueError, match="spark.sql.streaming.stateStore.providerClass is com.example"):
            use_rocksdb_state_store(spark)
    finally:
        if old is None:
            spark.conf.unset(STATE_STORE_CONF)
        else:
            spark.conf.set(STATE_STORE_CONF, old)
