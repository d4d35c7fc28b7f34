"""A streaming job for the kill-and-restart test (run as a script in its own process).

``python stream_job.py SRC SINK CHECKPOINT run|finish``: event-time windows of
``SRC`` (parquet files, one per micro-batch) appended to the parquet file sink
``SINK``; ``run`` triggers every 0.5 s until killed, ``finish`` processes what
is left (``availableNow``) and exits.
"""

from __future__ import annotations

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable


def main(src: str, sink: str, checkpoint: str, mode: str) -> None:
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
    out = si.sliding_window_aggregate(df, key="plug", order_by="t", value="load", window=("5 seconds", "2 seconds"),
                                      agg="max", state_chunk_rows=3)
    w = out.writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
    w = w.trigger(availableNow=True) if mode == "finish" else w.trigger(processingTime="500 milliseconds")
    q = w.start()
    q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
