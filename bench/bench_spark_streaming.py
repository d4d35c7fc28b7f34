"""Streaming benchmark: ``sliding_window_aggregate`` on a streaming DataFrame vs Spark's streaming ``window()``.

Workload: ``K`` keys, each at 100 rows/s of event time (timestamps 10 ms apart),
float64 values; ``F`` parquet files of ``M`` rows each (one file per
micro-batch: ``maxFilesPerTrigger=1``); watermark 2 s; local[2], RocksDB state
store with changelog checkpointing (``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled``,
which Spark's guide and Databricks recommend for stateful queries: a commit writes the changed
keys rather than a snapshot), 4 state partitions; the same session for both queries, which write
to Spark's ``noop`` sink with ``trigger(availableNow=True)``. Our adapter sets
``spark.sql.execution.arrow.maxBytesPerBatch`` to ``2**31 - 1`` on the session when it is unset (Spark then
skips a per-row Arrow batch size check; ``window()`` exchanges no Arrow batches, so it is not touched), so the
queries after the first ``ours`` (the warm-up: also ``--floor``'s parts) run with it; the JSON's
``session_conf_at_end`` shows it.

* ``ours_60s``/``ours_1h``: ``si.sliding_window_aggregate(df, ..., window=(r, "1 second"), agg="max")``
  (``transformWithStateInPandas``, one operator per key in the state store);
* ``native_60s``/``native_1h``: ``df.groupBy(k, window(t, r, "1 second")).agg(max(v))``, append
  mode, which copies every row into r/s windows and keeps every open window in the state store.
  ``native_1h`` runs one micro-batch under a time limit (``--limit``): it does not keep up.

Per run: rows/s over the data micro-batches (rows / sum of their ``triggerExecution``; query
start-up excluded), the micro-batch durations (median, p99 over every data batch of every
run), and the state Spark reports after the last batch (``numRowsTotal``, ``memoryUsedBytes``,
RocksDB's SST bytes), per key. Where a micro-batch's time goes: Spark's ``durationMs``
(``queryPlanning``, ``addBatch``, ...) and state operator times (``allUpdatesTimeMs``,
``commitTimeMs``: summed over the state partitions' tasks) per data batch, the last batch
without data (only watermark and timers: the fixed cost of a micro-batch), and for ours the
processor's own counters (``stream.*`` in the metrics: Python time in the per-key steps and in
their state calls, and the calls by kind). Runs are interleaved (ours, native, ours, ...); the summary
gives the median of paired ratios (native time / ours time, back to back) with min and max, over
all data micro-batches and over those after the first (whose ``queryPlanning`` starts the query:
for ours it includes a Python process on the driver running the processor's ``init``).

``--floor`` measures instead what Spark's own parts of our plan cost on the same input (written to
``spark_streaming_floor.json``): the read and projection alone, with the packing ``mapInArrow``, and
with a no-op ``transformWithStateInPandas`` processor after it (it declares the same ``MapState``,
reads its input and returns nothing: no state call, no timer), interleaved with ours.

Usage::

    python bench/bench_spark.py --streaming            # this file's main
    python bench/bench_spark_streaming.py --quick      # fewer rows, 2 runs
    python bench/bench_spark_streaming.py --floor      # Spark's parts of the plan, beside ours
    python bench/bench_spark_streaming.py --sweep      # W[60 s, 1 s] by rows per micro-batch, fixed + per-row fit
    python bench/bench_spark_streaming.py --rate --rows 1000000 --files 4 --interval 8 --limit 45  # fixed input rate
    python bench/bench_spark_streaming.py --query --sizes 4000000,10000000 --native-sizes 1000000,4000000
        # the 2-aggregation x 2-window query: si.aggregate vs window() + groupBy().agg() per window
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("pba-bench-streaming")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_files(folder: str, keys: int, rows: int, files: int) -> None:
    """Row ``i``: key ``i % keys``, ts ``(i // keys) * 10`` ms, value pseudo-random."""
    import numpy as np
    import pandas as pd

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    t0 = time.time()
    for f in range(files):
        i = np.arange(f * rows, (f + 1) * rows)
        path = os.path.join(folder, f"part-{f:04d}.parquet")
        pd.DataFrame({"k": (i % keys).astype(np.int64), "ts": (i // keys) * 10, "v": rng.random(rows)}).to_parquet(
            path, index=False)
        os.utime(path, (t0 + f, t0 + f))  # the file source reads by modification time (ms): one each, in order


def stream(spark, folder: str):
    from pyspark.sql import functions as F

    return (spark.readStream.schema("k long, ts long, v double").option("maxFilesPerTrigger", 1).parquet(folder)
            .withColumn("t", F.timestamp_millis("ts")).withWatermark("t", "2 seconds"))


#: The session settings recorded with the results (the same session runs both queries).
SHOWN_CONF = ("spark.master", "spark.sql.shuffle.partitions", "spark.sql.streaming.stateStore.providerClass",
              "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
              "spark.sql.execution.arrow.maxRecordsPerBatch", "spark.sql.execution.arrow.maxBytesPerBatch")

METRICS: list = []


def ours(df, r: str):
    import spark_integration as si

    metrics = si.algorithm_metrics(df.sparkSession)
    METRICS.append(metrics)
    return si.sliding_window_aggregate(df, key="k", order_by="t", value="v", window=(r, "1 second"), agg="max",
                                       metrics=metrics)


def native(df, r: str):
    from pyspark.sql import functions as F

    return df.groupBy("k", F.window("t", r, "1 second")).agg(F.max("v").alias("result"))


QUERY_WINDOWS = ("10 seconds", "60 seconds")


def ours_query(df):
    """The 2-aggregation x 2-window query, one ``si.aggregate`` (one state per key for all four outputs)."""
    import pba_runtime as pr
    import spark_integration as si

    windows = [pr.TimeWindow(r.replace(" seconds", "s"), "1s") for r in QUERY_WINDOWS]
    return si.aggregate(df, by="k", on="t", windows=windows, aggs={"v": ["max", "mean"]})


def native_query(df, r: str):
    """Spark's form of one window of the query: ``window()`` + ``groupBy().agg()`` of both aggregations."""
    from pyspark.sql import functions as F

    return df.groupBy("k", F.window("t", r, "1 second")).agg(F.max("v").alias("max"), F.avg("v").alias("mean"))


def query_bench(args) -> int:
    """``--query``: the 2-aggregation x 2-window query (max, mean over W[10 s, 1 s] and W[60 s, 1 s]), ours as
    one streaming query against Spark's ``window()`` + ``groupBy().agg()``, one streaming query per window
    (Spark's window() groups by one window a query): their data micro-batch times summed. Each system at the
    micro-batch sizes given (``--sizes`` ours, ``--native-sizes`` Spark's), interleaved per repetition; rows/s
    = rows / the summed ``triggerExecution`` of the data micro-batches after each run's first."""
    sizes = [int(float(x)) for x in args.sizes.split(",") if x]
    native_sizes = [int(float(x)) for x in args.native_sizes.split(",") if x]
    files = args.files or 3
    reps = args.reps or 2
    spark = session()
    tmp = tempfile.mkdtemp(prefix="pba-bench-stream-query-")
    out: dict = {"keys": args.keys, "files": files, "reps": reps, "sizes": sizes, "native_sizes": native_sizes,
                 "query": "max, mean over W[10 s, 1 s] and W[60 s, 1 s]", "runs": {},
                 "session_conf": {k: spark.conf.get(k, None) for k in SHOWN_CONF}}
    n = 0

    def once(name: str, size: int, builds: list) -> None:
        nonlocal n
        per_run = []
        for build in builds:
            n += 1
            res = run_query(build(stream(spark, os.path.join(tmp, f"in-{size}"))), os.path.join(tmp, f"ck{n}"))
            per_run.append(res)
        rows = per_run[0]["rows"]
        later = [sum(r["batches_ms"][1:]) for r in per_run]
        later_rows = rows - rows // files  # the first micro-batch starts the query (planning, workers)
        rate = later_rows / (sum(later) / 1000) if sum(later) else float("nan")
        if name != "warmup":
            out["runs"].setdefault(name, {}).setdefault(str(size), []).append(
                {"rows_per_s_after_first": rate, "queries": per_run})
        print(f"{name:14s} {size:>9,} {rate / 1e6:.3f}M rows/s batches_ms={[r['batches_ms'] for r in per_run]}",
              flush=True)

    try:
        for size in sorted(set(sizes) | set(native_sizes)):
            write_files(os.path.join(tmp, f"in-{size}"), args.keys, size, files)
        small = min(sizes + native_sizes)
        once("warmup", small, [ours_query])
        once("warmup", small, [lambda d, r=r: native_query(d, r) for r in QUERY_WINDOWS])
        for _ in range(reps):
            for size in sizes:
                once("ours_query", size, [ours_query])
            for size in native_sizes:
                once("native_query", size, [lambda d, r=r: native_query(d, r) for r in QUERY_WINDOWS])
    finally:
        out["session_conf_at_end"] = {k: spark.conf.get(k, None) for k in SHOWN_CONF}
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    best = {}
    for name, by_size in out["runs"].items():
        med = {s: statistics.median(r["rows_per_s_after_first"] for r in runs) for s, runs in by_size.items()}
        spread = {s: [min(r["rows_per_s_after_first"] for r in runs), max(r["rows_per_s_after_first"] for r in runs)]
                  for s, runs in by_size.items()}
        top = max(med, key=med.get)
        best[name] = {"best_size": int(top), "rows_per_s": med[top], "min_max": spread[top], "by_size": med}
    summary = {"best": best}
    if "ours_query" in best and "native_query" in best:
        summary["ratio_at_best_sizes"] = best["ours_query"]["rows_per_s"] / best["native_query"]["rows_per_s"]
    return _write(out, summary, args.out, "spark_streaming_query.json")


def floor_cases() -> dict:
    """The plan's parts on their own (see the module docstring): name -> streaming DataFrame builder."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    from spark_integration import streaming as S
    from spark_integration.arrow_runner import ORDER_COL, VALUE_COL
    from spark_integration.stream_state import STATE_KEY_SCHEMA, STATE_VALUE_SCHEMA

    class Noop(StatefulProcessor):
        def init(self, handle):
            self.parts = handle.getMapState("pba_state", STATE_KEY_SCHEMA, STATE_VALUE_SCHEMA)

        def handleInputRows(self, key, rows, timerValues):
            for _ in rows:
                pass
            return iter([])

        def close(self):
            pass

    packed_schema = T.StructType([T.StructField("k", T.LongType()), T.StructField(S.PACKED_COUNT, T.LongType(), False),
                                  T.StructField(S.PACKED_ROWS, T.BinaryType(), False)])

    def read(d):
        return d.select("k", F.col("ts").alias(ORDER_COL), F.col("v").alias(VALUE_COL))

    def packed(d):
        return read(d).mapInArrow(lambda it: S.pack_batches(("k",), it), packed_schema)

    return {"read": read, "read_pack": packed,
            "read_pack_noop_tws": lambda d: packed(d).groupBy("k").transformWithStateInPandas(
                Noop(), "k long, window_end long, result double", "Append", "EventTime"),
            "ours_60s": lambda d: ours(d, "60 seconds")}


def run_at_rate(out, checkpoint: str, interval_s: float, rows: int, limit: float) -> dict:
    """Run with ``trigger(processingTime=interval_s)`` and one file a trigger: a fixed input rate of
    ``rows / interval_s`` rows/s while the query keeps up. Stops when every row was read or after ``limit`` s."""
    load = os.getloadavg()[0]
    q = (out.writeStream.format("noop").outputMode("append").option("checkpointLocation", checkpoint)
         .trigger(processingTime=f"{interval_s} seconds").start())
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        if sum(p["numInputRows"] for p in q.recentProgress) >= rows:
            break
        time.sleep(0.5)
    while q.status["isTriggerActive"] and time.perf_counter() - t0 < limit:
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    progress = q.recentProgress
    q.stop()
    data = [p for p in progress if p["numInputRows"]]
    return {"wall_s": wall, "load_1min_at_start": load, "interval_s": interval_s,
            "batches_ms": [p["durationMs"]["triggerExecution"] for p in data],
            "rows": sum(p["numInputRows"] for p in data), "rows_expected": rows}


def run_query(out, checkpoint: str, limit: float | None = None) -> dict:
    """Run to the end of the files (or ``limit`` seconds); the data batches' durations and the last state."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    q = (out.writeStream.format("noop").outputMode("append").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    finished = q.awaitTermination(limit) if limit else (q.awaitTermination() or True)
    wall = time.perf_counter() - t0
    progress = q.recentProgress
    q.stop()
    data = [p for p in progress if p["numInputRows"]]
    idle = [p for p in progress if not p["numInputRows"]]
    state = progress[-1]["stateOperators"][0] if progress and progress[-1]["stateOperators"] else {}
    custom = state.get("customMetrics", {})
    return {
        "finished": bool(finished), "wall_s": wall, "load_1min_at_start": load,
        "batches_ms": [p["durationMs"]["triggerExecution"] for p in data],
        "breakdown_ms": [breakdown(p) for p in data],
        "idle_batch_ms": [breakdown(p) for p in idle],
        "rows": sum(p["numInputRows"] for p in data),
        "state_rows": state.get("numRowsTotal"), "state_memory_bytes": state.get("memoryUsedBytes"),
        "state_sst_bytes": custom.get("rocksdbSstFileSize"),
    }


def breakdown(p: dict) -> dict:
    """One micro-batch's times (ms): Spark's ``durationMs`` and the state operator's (summed over its tasks)."""
    d = p["durationMs"]
    so = p["stateOperators"][0] if p.get("stateOperators") else {}
    return {"total": d.get("triggerExecution"), "planning": d.get("queryPlanning"), "add_batch": d.get("addBatch"),
            "wal_and_offsets": d.get("walCommit", 0) + d.get("commitOffsets", 0) + d.get("latestOffset", 0)
            + d.get("getBatch", 0),
            "state_updates_tasks": so.get("allUpdatesTimeMs"), "state_removals_tasks": so.get("allRemovalsTimeMs"),
            "state_commit_tasks": so.get("commitTimeMs")}


def logical_state(folder: str, keys: int, range_ms: int) -> dict:
    """The bytes one key stores after the last micro-batch (header row and chunks), replaying its rows
    through the same per-key step as the query, micro-batch by micro-batch (no Spark)."""
    import glob

    import numpy as np
    import pandas as pd

    import pba_runtime as pr
    from spark_integration.stream_key import DictState, KeyWindows, StepConfig

    step = KeyWindows(StepConfig(pr.TimeWindow(range=range_ms, slide=1000), "max", namespace=f"bench{range_ms}"))
    st = DictState()
    wm = 0
    for f in sorted(glob.glob(os.path.join(folder, "*.parquet"))):
        d = pd.read_parquet(f)
        d = d[d.k == 0]
        step.process(st, 0, d.ts.to_numpy(), d.v.to_numpy(), wm)
        wm = max(wm, int(d.ts.max()) - 2000)
    step.process(st, 0, np.empty(0, np.int64), np.empty(0), wm)  # the next (no-data) batch's watermark
    header = len(st.header)
    chunks = sum(len(b) + 8 for b in st.chunk_map.values())
    return {"header_bytes": header, "chunk_bytes": chunks, "chunks": len(st.chunk_map)}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keys", type=int, default=16)
    ap.add_argument("--rows", type=int, default=None, help="rows per file (micro-batch)")
    ap.add_argument("--files", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds native_1h may run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--floor", action="store_true", help="Spark's parts of our plan, beside ours")
    ap.add_argument("--sweep", action="store_true", help="W[60 s, 1 s] by rows per micro-batch (fixed and per-row cost)")
    ap.add_argument("--sizes", default="250000,1000000,4000000,10000000", help="--sweep: rows per micro-batch, ours")
    ap.add_argument("--native-sizes", default="250000,1000000,4000000", help="--sweep: rows per micro-batch, window()")
    ap.add_argument("--floor-sizes", default="", help="--sweep: sizes at which Spark's parts of our plan run too")
    ap.add_argument("--rate", action="store_true", help="a fixed input rate: one file every --interval seconds")
    ap.add_argument("--query", action="store_true",
                    help="the 2-aggregation x 2-window query (si.aggregate) vs window() + groupBy().agg() per window")
    ap.add_argument("--interval", type=float, default=5.0, help="--rate: seconds between triggers")
    args = ap.parse_args(argv)
    if args.sweep:
        return sweep(args)
    if args.rate:
        return fixed_rate(args)
    if args.query:
        return query_bench(args)
    rows = args.rows or (200_000 if args.quick else 1_000_000)
    files = args.files or 3
    reps = args.reps or (2 if args.quick else 3)
    spark = session()
    tmp = tempfile.mkdtemp(prefix="pba-bench-stream-")
    out: dict = {"keys": args.keys, "rows_per_batch": rows, "files": files, "reps": reps,
                 "event_time_per_batch_s": rows // args.keys * 10 / 1000, "runs": {},
                 "session_conf": {k: spark.conf.get(k, None) for k in SHOWN_CONF}}
    try:
        src = os.path.join(tmp, "in")
        write_files(src, args.keys, rows, files)
        n = 0

        def once(name, build, limit=None):
            nonlocal n
            n += 1
            METRICS.clear()
            res = run_query(build(stream(spark, src)), os.path.join(tmp, f"ck{n}"), limit)
            if METRICS:
                res["metrics"] = dict(METRICS[0].value)
            out["runs"].setdefault(name, []).append(res)
            ms = res["batches_ms"]
            print(f"{name:12s} finished={res['finished']} rows={res['rows']} batches_ms={ms} "
                  f"state_rows={res['state_rows']} mem={res['state_memory_bytes']} sst={res['state_sst_bytes']} "
                  f"{res.get('metrics', '')}",
                  flush=True)
            return res

        if args.floor:
            cases = floor_cases()
            once("warmup", cases["read_pack_noop_tws"])
            once("warmup", cases["ours_60s"])
            for _ in range(reps):
                for name, build in cases.items():
                    once(name, build)
            return _write(out, floor_summary(out), args.out, "spark_streaming_floor.json")
        once("warmup", lambda d: ours(d, "60 seconds"))
        for _ in range(reps):
            once("ours_60s", lambda d: ours(d, "60 seconds"))
            once("native_60s", lambda d: native(d, "60 seconds"))
        for _ in range(reps):
            once("ours_1h", lambda d: ours(d, "1 hour"))
        once("native_1h", lambda d: native(d, "1 hour"), limit=args.limit)
        # transformWithState runs on RocksDB only (the HDFS-backed provider is refused), whose byte counts
        # include old versions and caches: our state per key is also given as the bytes stored (logical)
        out["ours_logical_state_bytes_per_key"] = {r: logical_state(src, args.keys, r) for r in (60_000, 3_600_000)}
    finally:
        out["session_conf_at_end"] = {k: spark.conf.get(k, None) for k in SHOWN_CONF}  # the adapter sets one
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return _write(out, summarise(out), args.out, "spark_streaming_quick.json" if args.quick else "spark_streaming.json")


def fixed_rate(args) -> int:
    """Micro-batch durations at a fixed input rate: ``trigger(processingTime=interval)``, one file of ``rows``
    rows a trigger (``rows / interval`` rows/s). A query keeps up while its micro-batches take less than the
    interval; one that does not falls behind (its micro-batches then start back to back and the rate it
    reads at drops). Ours and ``window()`` at W[60 s, 1 s] (interleaved), then at W[1 h, 1 s]; each query
    stops when it has read every file or after ``--limit`` s."""
    rows = args.rows or 1_000_000
    files = args.files or 6
    reps = args.reps or 1
    spark = session()
    tmp = tempfile.mkdtemp(prefix="pba-bench-stream-")
    out: dict = {"keys": args.keys, "rows_per_batch": rows, "files": files, "reps": reps, "interval_s": args.interval,
                 "input_rows_per_s": rows / args.interval, "limit_s": args.limit, "runs": {},
                 "session_conf": {k: spark.conf.get(k, None) for k in SHOWN_CONF}}
    try:
        src = os.path.join(tmp, "in")
        write_files(src, args.keys, rows, files)
        n = 0

        def once(name, build):
            nonlocal n
            n += 1
            res = run_at_rate(build(stream(spark, src)), os.path.join(tmp, f"ck{n}"), args.interval, rows * files,
                              args.limit)
            if name != "warmup":
                out["runs"].setdefault(name, []).append(res)
            print(f"{name:12s} load={res['load_1min_at_start']:.1f} rows={res['rows']} batches_ms={res['batches_ms']}",
                  flush=True)

        once("warmup", lambda d: ours(d, "60 seconds"))
        for _ in range(reps):
            once("ours_60s", lambda d: ours(d, "60 seconds"))
            once("native_60s", lambda d: native(d, "60 seconds"))
            once("ours_1h", lambda d: ours(d, "1 hour"))
            once("native_1h", lambda d: native(d, "1 hour"))
    finally:
        out["session_conf_at_end"] = {k: spark.conf.get(k, None) for k in SHOWN_CONF}  # the adapter sets one
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    s: dict = {}
    for name, rs in out["runs"].items():
        ms = [b for r in rs for b in r["batches_ms"]]
        later = [b for r in rs for b in r["batches_ms"][1:]]
        s[name] = {"batch_ms_median": statistics.median(ms) if ms else None, "batch_ms_p99": pct(ms, 0.99) if ms else None,
                   "after_first_ms_median": statistics.median(later) if later else None,
                   "after_first_ms_p99": pct(later, 0.99) if later else None,
                   "n": len(ms), "read_all": all(r["rows"] >= r["rows_expected"] for r in rs),
                   "kept_up_after_first": bool(later) and max(later) <= args.interval * 1000,
                   "rows_read": [r["rows"] for r in rs], "wall_s": [r["wall_s"] for r in rs]}
    return _write(out, s, args.out, "spark_streaming_rate.json")


def sweep(args) -> int:
    """Micro-batch time against rows per micro-batch, ours and ``window()`` at W[60 s, 1 s], interleaved.

    Each size has its own input (``files`` files of that many rows, the same rows for both systems); per
    repetition and size, ours then ``window()`` (where measured), each a fresh query on a fresh checkpoint.
    The fit per system: micro-batch ms = fixed + per_row * rows, least squares over every data micro-batch
    after a run's first (whose planning starts the query); sustainable rows/s at a size = rows / that
    size's median micro-batch time, and 1 / per_row as the size grows.
    """
    sizes = [int(float(x)) for x in args.sizes.split(",") if x]
    native_sizes = {int(float(x)) for x in args.native_sizes.split(",") if x}
    floor_sizes = {int(float(x)) for x in args.floor_sizes.split(",") if x}
    files = args.files or 3
    reps = args.reps or 2
    spark = session()
    tmp = tempfile.mkdtemp(prefix="pba-bench-stream-")
    out: dict = {"keys": args.keys, "files": files, "reps": reps, "sizes": sizes, "native_sizes": sorted(native_sizes),
                 "floor_sizes": sorted(floor_sizes), "window": "W[60 s, 1 s] max", "runs": {},
                 "session_conf": {k: spark.conf.get(k, None) for k in SHOWN_CONF}}
    cases = floor_cases() if floor_sizes else {}
    try:
        for size in sizes:
            write_files(os.path.join(tmp, f"in-{size}"), args.keys, size, files)
        n = 0

        def once(name, size, build):
            nonlocal n
            n += 1
            METRICS.clear()
            res = run_query(build(stream(spark, os.path.join(tmp, f"in-{size}"))), os.path.join(tmp, f"ck{n}"))
            res["rows_per_batch"] = size
            if METRICS:
                res["metrics"] = dict(METRICS[0].value)
            if name != "warmup":
                out["runs"].setdefault(name, {}).setdefault(str(size), []).append(res)
            print(f"{name:20s} {size:>9,} load={res['load_1min_at_start']:.1f} batches_ms={res['batches_ms']} "
                  f"{res.get('metrics', '')}", flush=True)

        once("warmup", sizes[0], lambda d: ours(d, "60 seconds"))
        once("warmup", sizes[0], lambda d: native(d, "60 seconds"))
        for _ in range(reps):
            for size in sizes:
                once("ours_60s", size, lambda d: ours(d, "60 seconds"))
                if size in native_sizes:
                    once("native_60s", size, lambda d: native(d, "60 seconds"))
                if size in floor_sizes:
                    for name in ("read", "read_pack", "read_pack_noop_tws"):
                        once(name, size, cases[name])
    finally:
        out["session_conf_at_end"] = {k: spark.conf.get(k, None) for k in SHOWN_CONF}  # the adapter sets one
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return _write(out, sweep_summary(out), args.out, "spark_streaming_sweep.json")


def sweep_summary(out: dict) -> dict:
    """Per system and size: micro-batch ms after the first (median, min-max), rows/s; the fit; paired ratios."""
    import numpy as np

    s: dict = {}
    for name, by_size in out["runs"].items():
        cell: dict = {"by_size": {}}
        xs, ys = [], []
        for size, rs in by_size.items():
            ms = [b for r in rs for b in r["batches_ms"][1:]]
            if not ms:
                continue
            xs += [int(size)] * len(ms)
            ys += ms
            med_ms = statistics.median(ms)
            cell["by_size"][size] = {"batch_ms_median": med_ms, "batch_ms_min_max": [min(ms), max(ms)], "n": len(ms),
                                     "rows_per_s": int(size) / (med_ms / 1000),
                                     "load_min_max": [min(r["load_1min_at_start"] for r in rs),
                                                      max(r["load_1min_at_start"] for r in rs)]}
            m = [r["metrics"] for r in rs if r.get("metrics", {}).get("stream.steps")]
            if m:
                cell["by_size"][size]["processor_per_run"] = {
                    k: statistics.median(x.get(k, 0) for x in m) for k in sorted(set().union(*m))
                    if k.startswith("stream.") and (k.endswith("_us") or k == "stream.steps")}
        if len(set(xs)) >= 2:
            b, a = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
            cell["fit"] = {"fixed_ms": float(a), "per_row_us": float(b) * 1e3,
                           "rows_per_s_limit": float(1e3 / b) if b > 0 else None}
        best = max(cell["by_size"].items(), key=lambda kv: kv[1]["rows_per_s"], default=None)
        if best:
            cell["peak"] = {"rows_per_batch": int(best[0]), "rows_per_s": best[1]["rows_per_s"]}
        s[name] = cell
    ours_runs, nat_runs = out["runs"].get("ours_60s", {}), out["runs"].get("native_60s", {})
    s["paired_ratio_native_over_ours"] = {}
    for size in nat_runs:
        q = [sum(a["batches_ms"][1:]) / sum(b["batches_ms"][1:]) for a, b in zip(nat_runs[size], ours_runs.get(size, []))
             if len(a["batches_ms"]) > 1 and len(b["batches_ms"]) > 1]
        if q:
            s["paired_ratio_native_over_ours"][size] = {"median": statistics.median(q), "min": min(q), "max": max(q),
                                                        "n": len(q)}
    if s.get("ours_60s", {}).get("peak") and s.get("native_60s", {}).get("peak"):
        s["peak_ratio_ours_over_native"] = s["ours_60s"]["peak"]["rows_per_s"] / s["native_60s"]["peak"]["rows_per_s"]
    return s


def _write(out: dict, summary: dict, dest: str | None, default: str) -> int:
    out["summary"] = summary
    print(json.dumps(summary, indent=1))
    path = Path(dest) if dest else HERE / "results" / default
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    return 0


def floor_summary(out: dict) -> dict:
    """Per case: the data micro-batches' median (min-max) and the idle micro-batch's median, in ms."""
    s = {}
    for name, rs in out["runs"].items():
        if name == "warmup":
            continue
        ms = [b for r in rs for b in r["batches_ms"]]
        later = [b for r in rs for b in r["batches_ms"][1:]]
        idle = [b["total"] for r in rs for b in r.get("idle_batch_ms", [])]
        s[name] = {"batch_ms_median": statistics.median(ms), "batch_ms_min_max": [min(ms), max(ms)],
                   "after_first_ms_median": statistics.median(later) if later else None,
                   "idle_batch_ms_median": statistics.median(idle) if idle else None}
    return s


def summarise(out: dict) -> dict:
    runs = out["runs"]
    s: dict = {}
    for name, rs in runs.items():
        if name == "warmup":
            continue
        ms = [b for r in rs for b in r["batches_ms"]]
        rates = [r["rows"] / (sum(r["batches_ms"]) / 1000) for r in rs if r["batches_ms"] and r["finished"]]
        per = out["rows_per_batch"]  # after the first micro-batch (whose planning starts the query)
        later = [per * (len(r["batches_ms"]) - 1) / (sum(r["batches_ms"][1:]) / 1000) for r in rs
                 if len(r["batches_ms"]) > 1 and r["finished"]]
        last = rs[-1]
        parts = [b for r in rs for b in r.get("breakdown_ms", [])]
        idle = [b for r in rs for b in r.get("idle_batch_ms", [])]
        s[name] = {
            "rows_per_s_median": statistics.median(rates) if rates else None,
            "rows_per_s_min_max": [min(rates), max(rates)] if rates else None,
            "rows_per_s_after_first_median": statistics.median(later) if later else None,
            "rows_per_s_after_first_min_max": [min(later), max(later)] if later else None,
            "batch_ms_median": statistics.median(ms) if ms else None,
            "batch_ms_p99": pct(ms, 0.99) if ms else None,
            "finished": all(r["finished"] for r in rs),
            "state_rows_per_key": (last["state_rows"] or 0) / out["keys"],
            "state_memory_bytes_per_key": (last["state_memory_bytes"] or 0) / out["keys"],
            "state_sst_bytes_per_key": (last["state_sst_bytes"] or 0) / out["keys"],
            "breakdown_ms_median": {k: statistics.median(b[k] for b in parts if b.get(k) is not None)
                                    for k in (parts[0] if parts else {})},
            "idle_batch_ms_median": statistics.median(b["total"] for b in idle) if idle else None,
        }
        m = [r["metrics"] for r in rs if r.get("metrics", {}).get("stream.steps")]
        if m:  # the processor's own counters, per micro-batch (data and idle batches of a run together)
            per = [len(r["batches_ms"]) + len(r.get("idle_batch_ms", [])) for r in rs if r.get("metrics")]
            s[name]["processor_per_batch"] = {
                k: statistics.median(x.get(k, 0) / n for x, n in zip(m, per))
                for k in sorted(set().union(*m)) if k.startswith("stream.")}
    pairs = list(zip(runs.get("native_60s", []), runs.get("ours_60s", [])))
    for name, first in (("speedup_60s_native_over_ours", 0), ("speedup_60s_after_first_native_over_ours", 1)):
        ratios = [sum(a["batches_ms"][first:]) / sum(b["batches_ms"][first:]) for a, b in pairs
                  if len(a["batches_ms"]) > first and len(b["batches_ms"]) > first]
        if ratios:
            s[name] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}
    return s


if __name__ == "__main__":
    raise SystemExit(main())
