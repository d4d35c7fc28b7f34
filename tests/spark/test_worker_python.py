"""Spark's Python workers from a venv that is not activated (issue 15, "Spark from a venv").

Run for real: a script started with this venv's Python, without ``PYSPARK_PYTHON``, and on ``PATH`` a
``python3`` that cannot import the package (the base interpreter of this venv). In local mode the adapter
runs the workers on the driver's Python (DataFrame and RDD forms); a ``spark.pyspark.python`` given to the
builder is applied; a Python chosen explicitly that lacks the package fails at once on the driver with
one message naming what to set. One script runs the four cases, each on a new SparkContext (one JVM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = textwrap.dedent("""
    import json, logging, os, sys
    import pba_runtime as pr, spark_integration as si
    from pyspark.sql import SparkSession

    class Catch(logging.Handler):
        def emit(self, record):
            warned.append(record.getMessage())

    logging.getLogger("spark_integration").addHandler(Catch(logging.WARNING))
    foreign = sys.argv[1]
    for case in ("dataframe", "rdd", "builder_conf", "explicit_env"):
        warned = []
        builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
        if case == "builder_conf":  # PySpark itself applies it only through spark-submit
            builder = builder.config("spark.pyspark.python", sys.executable)
        if case == "explicit_env":
            os.environ["PYSPARK_PYTHON"] = foreign
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("OFF")
        res = {"case": case}
        try:
            df = spark.createDataFrame([("a", i, float(i % 4)) for i in range(8)], "k string, t long, v double")
            w = pr.CountWindow(range=3, slide=2)
            if case == "rdd":
                out = si.sliding_window_rdd(df.rdd, w, "max", key="k", order="t", value="v").collect()
            else:
                out = [tuple(r) for r in si.sliding_window_aggregate(df, key="k", order_by="t", value="v",
                                                                     window=w, agg="max").collect()]
            res["result"] = sorted(out)
            res["workers"] = spark.sparkContext.pythonExec
        except si.WorkerPythonError as exc:
            res["refused"] = str(exc)
        except Exception as exc:
            res["error"] = f"{type(exc).__name__}: {exc}"[:3000]
        res["warned"] = warned
        spark.stop()
        os.environ.pop("PYSPARK_PYTHON", None)
        print("CASE " + json.dumps(res), flush=True)
""")


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """The four cases' outcomes, from one script run with a foreign ``python3`` first on ``PATH``."""
    base = getattr(sys, "_base_executable", None)
    if not base or os.path.abspath(base) == os.path.abspath(sys.executable):
        pytest.skip("the tests do not run from a venv")
    probe = subprocess.run([base, "-c", "import spark_integration"], capture_output=True, env={"PATH": os.defpath},
                           check=False)
    if probe.returncode == 0:
        pytest.skip(f"{base} can import spark_integration too")
    d = tmp_path_factory.mktemp("worker-python")
    (d / "bin").mkdir()
    os.symlink(base, d / "bin" / "python3")
    script = d / "job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{d / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    p = subprocess.run([sys.executable, str(script), str(d / "bin" / "python3")], capture_output=True, text=True,
                       env=env, cwd=d, timeout=110, check=False)
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith("CASE "):
            c = json.loads(line[5:])
            out[c["case"]] = c
    assert len(out) == 4, p.stdout + p.stderr[-3000:]
    return out


WANT = [["a", 3, 2.0], ["a", 5, 3.0], ["a", 7, 2.0]]


@pytest.mark.parametrize("case", ["dataframe", "rdd"])
def test_unactivated_venv_runs_the_workers_on_the_drivers_python(cases, case):
    c = cases[case]
    assert c.get("result") == WANT, c
    assert c["workers"] == sys.executable
    assert len(c["warned"]) == 1 and "in local mode they now run this driver's Python" in c["warned"][0]


def test_spark_pyspark_python_given_to_the_builder_is_applied(cases):
    c = cases["builder_conf"]
    assert c.get("result") == WANT, c
    assert c["workers"] == sys.executable and c["warned"] == []  # the user's choice, not a switch


def test_an_explicit_python_that_lacks_the_package_fails_at_once_with_one_message(cases):
    c = cases["explicit_env"]
    assert "refused" in c, c
    msg = c["refused"]
    assert "cannot import spark_integration" in msg and "(from PYSPARK_PYTHON)" in msg
    assert f"PYSPARK_PYTHON={sys.executable}" in msg
