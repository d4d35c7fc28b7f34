"""One session-scoped local[2] SparkSession for the Spark adapter's tests.

Small shuffle partitions, no UI, UTC session time zone, and Python workers on
this interpreter (``PYSPARK_PYTHON = sys.executable``). At the end of the
session the SparkContext is stopped and the JVM is shut down and waited for,
so no Spark or Python worker process outlives the tests. Tests that need the
session are marked ``spark``; without Java they are skipped.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

# tests/oracle.py (the spec's naive oracle) is shared with the core tests
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin", "java"))))


@pytest.fixture(scope="session")
def spark():
    """The tests' SparkSession: local[2], 4 shuffle partitions, UI off."""
    pytest.importorskip("pyspark")
    if not _java_available():
        pytest.skip("Spark tests need Java (JDK 17)")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pba-runtime-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        gateway = SparkContext._gateway
        if gateway is not None:
            proc = getattr(gateway, "proc", None)
            try:
                gateway.shutdown()
            except Exception:  # noqa: BLE001, S110 - already down; the JVM is waited for below
                pass
            if proc is not None:  # the JVM exits when its stdin closes; make sure it did
                try:
                    if proc.stdin is not None:
                        proc.stdin.close()
                    proc.wait(timeout=30)
                except Exception:  # noqa: BLE001 - whatever failed, the JVM is killed
                    proc.kill()
                    proc.wait(timeout=10)
            SparkContext._gateway = None
            SparkContext._jvm = None


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
