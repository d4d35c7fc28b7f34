"""The job of the standalone-cluster test, run with ``spark-submit --master spark://... --py-files pba.zip``.

``cluster_job.py WORK``: the batch adapter over generated rows, a query of several outputs over them
(``si.aggregate``), and a streaming
query over the same rows as parquet files (file source, file sink,
checkpoint), each compared with the answer computed here, on the driver,
without Spark. Prints ``OK <windows>`` and exits 0 when both agree.
"""

from __future__ import annotations

import os
import sys
import time


def main(work: str) -> None:
    import numpy as np
    import pandas as pd
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import pba_runtime as pr
    import spark_integration as si

    spark = SparkSession.builder.appName("pba-cluster-test").getOrCreate()
    rng = np.random.default_rng(5)
    frames = []
    for f in range(3):
        n = 300
        frames.append(pd.DataFrame({"plug": rng.choice(["a", "b", "c"], n), "ms": f * 30_000 + np.sort(rng.integers(0, 30_000, n)),
                                    "load": rng.random(n).round(4)}))
    frames.append(pd.DataFrame({"plug": ["zz"], "ms": [10**9], "load": [0.0]}))
    src = os.path.join(work, "in")
    os.makedirs(src, exist_ok=True)
    t0 = time.time()
    for i, f in enumerate(frames):  # the file source reads by modification time (ms): one each, in order
        f.to_parquet(os.path.join(src, f"part-{i}.parquet"), index=False)
        os.utime(os.path.join(src, f"part-{i}.parquet"), (t0 + i, t0 + i))
    allrows = pd.concat(frames[:-1])
    window = ("10 seconds", "2 seconds")
    win = si.time_window(*window)
    want = set()
    for plug, g in allrows.sort_values("ms", kind="stable").groupby("plug"):
        op = pr.create("sba", win, "max")
        e1, r1 = op.insert_many(g["load"].to_numpy(), g["ms"].to_numpy())
        e2, r2 = op.flush()
        want |= {(plug, int(e), float(r)) for e, r in zip(list(e1) + list(e2), list(r1) + list(r2))}

    df = spark.createDataFrame(allrows).withColumn("ts", F.timestamp_millis("ms"))
    batch = si.sliding_window_aggregate(df, key="plug", order_by="ts", value="load", window=window, agg="max")
    got_batch = {(r.plug, r.window_end, r.result) for r in batch.collect()}
    assert got_batch == want, ("batch", sorted(got_batch ^ want)[:5])

    # a query of several outputs (2 windows x max, mean) in one shuffle, against the same query run here
    query = pr.Query(by="plug", on="ts", windows={"10s": pr.TimeWindow("10s", "2s"), "20s": pr.TimeWindow("20s", "2s")},
                     aggs={"load": ["max", "mean"]})
    local = allrows.assign(ts=pd.to_datetime(allrows["ms"], unit="ms").astype("datetime64[us]"))
    want_q = query.run(local[["plug", "ts", "load"]]).sort_values(["plug", "window_end"]).reset_index(drop=True)
    got_q = si.aggregate(df, query).toPandas().sort_values(["plug", "window_end"]).reset_index(drop=True)
    assert got_q["plug"].tolist() == want_q["plug"].tolist(), "query: keys"
    for o in query.outputs:
        assert np.allclose(got_q[o.name].to_numpy(dtype=float), want_q[o.name].to_numpy(dtype=float), rtol=1e-12,
                           equal_nan=True), ("query", o.name)

    sdf = (spark.readStream.schema("plug string, ms long, load double").option("maxFilesPerTrigger", 1).parquet(src)
           .withColumn("ts", F.timestamp_millis("ms")).withWatermark("ts", "5 seconds"))
    out = si.sliding_window_aggregate(sdf, key="plug", order_by="ts", value="load", window=window, agg="max")
    q = (out.writeStream.format("parquet").option("path", os.path.join(work, "out"))
         .option("checkpointLocation", os.path.join(work, "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    got = {(r.plug, r.window_end, r.result) for r in spark.read.parquet(os.path.join(work, "out")).collect()
           if r.plug != "zz"}
    assert got == want, ("streaming", sorted(got ^ want)[:5])
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver

    def where(_):  # where the executors' Python found the package: the shipped zip
        import spark_integration as mine

        yield mine.__file__

    files = set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(where).collect())
    assert all(".zip" in f for f in files), files
    print(f"OK {len(want)} windows on {executors} executors; package from {sorted(files)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
