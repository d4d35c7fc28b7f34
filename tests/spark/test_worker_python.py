"""Spark's Python workers from a venv that is not activated (issue 15, "Spark from a venv").

Run for real: a script started with this venv's Python, no ``PYSPARK_PYTHON``, and on ``PATH`` a
``python3`` that cannot import the package (the base interpreter of this venv). In local mode the adapter
runs the workers on the driver's Python; with a Python chosen explicitly it fails at once on the driver
with one message naming what to set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = textwrap.dedent("""
    import sys
    import pba_runtime as pr, spark_integration as si
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    if sys.argv[2:]:  # spark.pyspark.python given to the builder (PySpark itself applies it only via spark-submit)
        builder = builder.config("spark.pyspark.python", sys.argv[2])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    try:
        df = spark.createDataFrame([("a", i, float(i % 4)) for i in range(8)], "k string, t long, v double")
        if sys.argv[1] == "rdd":
            rdd = df.rdd
            out = si.sliding_window_rdd(rdd, pr.CountWindow(range=3, slide=2), "max", key="k", order="t", value="v")
            print("RESULT", sorted(out.collect()))
        else:
            out = si.sliding_window_aggregate(df, key="k", order_by="t", value="v",
                                              window=pr.CountWindow(range=3, slide=2), agg="max")
            print("RESULT", sorted(tuple(r) for r in out.collect()))
        print("WORKERS", spark.sparkContext.pythonExec)
    except si.WorkerPythonError as exc:
        print("REFUSED", exc)
    finally:
        spark.stop()
""")


@pytest.fixture(scope="module")
def foreign_python3(tmp_path_factory):
    """A directory whose ``python3`` is this venv's base interpreter, which cannot import the package."""
    base = getattr(sys, "_base_executable", None)
    if not base or os.path.abspath(base) == os.path.abspath(sys.executable):
        pytest.skip("the tests do not run from a venv")
    probe = subprocess.run([base, "-c", "import spark_integration"], capture_output=True, env={"PATH": os.defpath},
                           check=False)
    if probe.returncode == 0:
        pytest.skip(f"{base} can import spark_integration too")
    d = tmp_path_factory.mktemp("foreign-bin")
    os.symlink(base, d / "python3")
    return d


def _run(foreign_python3, tmp_path, mode: str, *args: str, **env_extra: str) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{foreign_python3}{os.pathsep}{env.get('PATH', os.defpath)}"
    env.update(env_extra)
    return subprocess.run([sys.executable, str(script), mode, *args], capture_output=True, text=True, env=env, check=False,
                          cwd=tmp_path, timeout=100)


@pytest.mark.parametrize("mode", ["dataframe", "rdd"])
def test_unactivated_venv_runs_the_workers_on_the_drivers_python(foreign_python3, tmp_path, mode):
    p = _run(foreign_python3, tmp_path, mode)
    assert "RESULT" in p.stdout, p.stdout + p.stderr[-3000:]
    want = [("a", 3, 2.0), ("a", 5, 3.0), ("a", 7, 2.0)]
    assert p.stdout.split("RESULT ", 1)[1].splitlines()[0] == repr(want)
    assert f"WORKERS {sys.executable}" in p.stdout
    assert "in local mode they now run this driver's Python" in p.stderr  # the one WARNING
    assert "ModuleNotFoundError" not in p.stderr.replace("(ModuleNotFoundError", "")  # no task failed


def test_an_explicit_python_that_lacks_the_package_fails_at_once_with_one_message(foreign_python3, tmp_path):
    p = _run(foreign_python3, tmp_path, "dataframe", PYSPARK_PYTHON=str(foreign_python3 / "python3"))
    assert "REFUSED" in p.stdout, p.stdout + p.stderr[-3000:]
    msg = p.stdout.split("REFUSED ", 1)[1]
    assert "cannot import spark_integration" in msg and "(from PYSPARK_PYTHON)" in msg
    assert f"PYSPARK_PYTHON={sys.executable}" in msg


def test_spark_pyspark_python_given_to_the_builder_is_applied(foreign_python3, tmp_path):
    p = _run(foreign_python3, tmp_path, "dataframe", sys.executable)
    assert "RESULT" in p.stdout, p.stdout + p.stderr[-3000:]
    assert f"WORKERS {sys.executable}" in p.stdout
    assert "they now run this driver's Python" not in p.stderr  # the user's choice, not a switch
