"""On the driver: make sure Spark's Python workers can import this package before a job needs them.

PySpark starts its Python workers with ``SparkContext.pythonExec``, which it
reads once from ``PYSPARK_PYTHON`` and otherwise sets to ``python3``, found on
``PATH``. A script run as ``.venv/bin/python script.py`` without activating the
venv therefore has workers on some other ``python3``, which cannot import
``spark_integration`` (``ModuleNotFoundError`` in every task). The conf
``spark.pyspark.python`` does not change it for a script started with ``python``
(PySpark 4.3 reads it only through ``spark-submit``, which exports it as
``PYSPARK_PYTHON``).

:func:`ensure_worker_python` runs once per SparkContext and Python before the
adapter's first job:

* the workers' Python is this driver's own (``sys.executable``, or the same
  ``bin`` directory): nothing to check;
* otherwise a one-task job imports the package in a worker. If that fails and
  nobody chose the workers' Python (no ``PYSPARK_PYTHON``, no
  ``spark.pyspark.python``, ``pythonExec`` left at ``python3``) and the master
  is local (the workers run on this machine), the workers are switched to
  ``sys.executable`` (``sc.pythonExec``, which PySpark reads each time it sends
  a function to the workers) and one WARNING says so;
* in every other case it raises :class:`WorkerPythonError` on the driver, with
  one message that says what to set.

A ``spark.pyspark.python`` given to the session builder, which PySpark itself
ignores there, is applied (``sc.pythonExec``) as ``spark-submit`` would.

Examples
--------
>>> from pyspark.sql import SparkSession  # doctest: +SKIP
>>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
>>> ensure_worker_python(spark)  # doctest: +SKIP
>>> spark.sparkContext.pythonExec == sys.executable or "PYSPARK_PYTHON" in os.environ  # doctest: +SKIP
True
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from typing import Any

__all__ = ["WorkerPythonError", "ensure_worker_python"]

log = logging.getLogger("spark_integration")

#: PySpark's default ``pythonExec`` when ``PYSPARK_PYTHON`` is not set.
DEFAULT_EXEC = "python3"

_lock = threading.Lock()
# (application id, start time, python exec) already known to import the package
_good: set[tuple[str, int, str]] = set()


class WorkerPythonError(RuntimeError):
    """Spark's Python workers cannot import ``spark_integration`` (raised on the driver, before the job)."""


def _same_python(exe: str) -> bool:
    """``exe`` (a name on PATH or a path) is this interpreter, or its twin in the same ``bin`` directory."""
    found = shutil.which(exe)
    if found is None:
        return False
    a, b = os.path.abspath(found), os.path.abspath(sys.executable)
    if a == b:
        return True
    # a venv's bin/python and bin/python3 are the same environment; a symlink is not resolved: a venv's
    # python links to the base interpreter, which does not see the venv's packages
    return os.path.dirname(a) == os.path.dirname(b) and os.path.basename(a).startswith("python")


def _probe_workers(sc: Any) -> tuple[str | None, str | None]:
    """Import the package in one worker: ``(worker's sys.executable, None)`` or ``(exe or None, error)``."""

    def probe(_: Any) -> Any:  # nested: pickled by value, so the worker needs nothing of ours to run it
        import sys as wsys

        try:
            import spark_integration  # noqa: F401
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which raises or switches
            return [(wsys.executable, f"{type(exc).__name__}: {exc}")]
        return [(wsys.executable, None)]

    old = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription("spark_integration: can the Python workers import spark_integration?")
    try:
        return sc.parallelize([0], 1).mapPartitions(probe).collect()[0]
    except Exception as exc:  # noqa: BLE001 - the worker could not even start (no such python, wrong version)
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        hint = next((ln for ln in lines if "Error" in ln or "error" in ln), lines[0] if lines else "")
        return None, f"{type(exc).__name__}: {hint[:300]}"
    finally:
        sc.setLocalProperty("spark.job.description", old)


def ensure_worker_python(spark: Any) -> None:
    """Make sure the Python workers of ``spark`` can import ``spark_integration`` (once per context and Python).

    Parameters
    ----------
    spark : SparkSession or SparkContext
        Spark Connect sessions (no SparkContext) are not checked.

    Raises
    ------
    WorkerPythonError
        The workers' Python cannot import the package and the adapter may not
        switch it (a Python was chosen explicitly, or the master is not local).
    """
    try:
        sc = getattr(spark, "sparkContext", spark)
        jid = (sc.applicationId, sc.startTime)  # one SparkContext (an id() could be reused)
        exe = sc.pythonExec
    except Exception:  # noqa: BLE001 - Spark Connect, or not a Spark object: nothing to check here
        return
    env_python = os.environ.get("PYSPARK_PYTHON") or None
    conf_python = sc.getConf().get("spark.pyspark.python")
    with _lock:
        if exe == DEFAULT_EXEC and env_python is None and conf_python:
            # PySpark applies spark.pyspark.python only under spark-submit; the user asked for it
            log.info("spark_integration: Python workers run %s (spark.pyspark.python)", conf_python)
            sc.pythonExec = exe = conf_python
        source = ("PYSPARK_PYTHON" if env_python is not None and exe == env_python else
                  "spark.pyspark.python" if conf_python is not None and exe == conf_python else
                  "the default: python3 on PATH" if exe == DEFAULT_EXEC else "SparkContext.pythonExec")
        if (*jid, exe) in _good:
            return
        if _same_python(exe):
            _good.add((*jid, exe))
            return
        worker_exe, error = _probe_workers(sc)
        if error is None:
            _good.add((*jid, exe))
            return
        ran = f"{exe!r}" + (f" ({worker_exe})" if worker_exe and worker_exe != exe else "")
        if (sc.master or "").startswith("local") and source.startswith("the default"):
            log.warning(
                "spark_integration: Spark's Python workers would run %s, which cannot import spark_integration "
                "(%s); in local mode they now run this driver's Python, %s. To choose it yourself, set "
                "PYSPARK_PYTHON=%s before the SparkSession starts.", ran, error, sys.executable, sys.executable)
            sc.pythonExec = sys.executable
            _good.add((*jid, sys.executable))
            return
    raise WorkerPythonError(
        f"Spark's Python workers run {ran} (from {source}), which cannot import spark_integration: {error}. "
        f"Set PYSPARK_PYTHON to a Python that has pba-runtime installed on every worker machine (in local mode "
        f"this driver's: PYSPARK_PYTHON={sys.executable}) before the SparkSession starts; with spark-submit, "
        "--conf spark.pyspark.python=... does the same."
    )
