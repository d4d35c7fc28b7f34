"""A streaming job for the kill-and-restart test (run as a script in its own process).

``python stream_job.py SRC SINK CHECKPOINT run|finish [window|query]``: event-time
windows of ``SRC`` (parquet files, one per micro-batch) appended to the parquet file
sink ``SINK``; ``run`` triggers every 0.5 s until killed, ``finish`` processes what
is left (``availableNow``) and exits. ``window`` (the default) is one
``sliding_window_aggregate``; ``query`` is ``QUERY``, an ``si.aggregate`` of two
aggregations over two windows.
"""

from __future__ import annotations

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable


def query():
    """The query the ``query`` form runs (the test builds its batch answer from the same object)."""
    import pba_runtime as pr

    return pr.Query(by="plug", on="t", windows=[pr.TimeWindow("5s", "2s"), pr.TimeWindow("9s", "2s")],
                    aggs={"load": ["max", "mean"]})


def main(src: str, sink: str, checkpoint: str, mode: str, what: str = "window") -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_integration as si

    spark = (SparkSession.builder.master("local[2]").appName("pba-kill-test")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.schema("plug string, ts long, load double").option("maxFilesPerTrigger", 1)
          .parquet(src).withColumn("t", F.timestamp_millis("ts")).withWatermark("t", "3 seconds"))
    if what == "query":
        out = si.aggregate(df, query(), state_chunk_rows=3)
    else:
        out = si.sliding_window_aggregate(df, key="plug", order_by="t", value="load",
                                          window=("5 seconds", "2 seconds"), agg="max", state_chunk_rows=3)
    w = out.writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
    w = w.trigger(availableNow=True) if mode == "finish" else w.trigger(processingTime="500 milliseconds")
    q = w.start()
    q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
