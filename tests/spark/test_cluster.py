"""A Spark standalone cluster on this machine: a master and two workers (PySpark's own launcher classes).

The batch and the streaming adapter run there with the package shipped to the
executors as a user ships it (``spark-submit --py-files pba.zip``); the job
(``cluster_job.py``) checks both against the answer computed on the driver, and
that the executors imported the package from the zip. Every process of the
cluster is started in its own process group and killed at the end. The recipe:
``docs/spark-cluster.md``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listens on port {port} after {seconds} s")


def package_zip(path: Path) -> Path:
    """pba_runtime and spark_integration as one zip, as ``--py-files`` takes them."""
    with zipfile.ZipFile(path, "w") as z:
        for pkg in ("pba_runtime", "spark_integration"):
            for f in (ROOT / pkg).rglob("*.py"):
                z.write(f, f.relative_to(ROOT))
    return path


def test_standalone_cluster_runs_batch_and_streaming(tmp_path):
    pyspark = pytest.importorskip("pyspark")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.skip("needs Java")
    home = Path(pyspark.__file__).parent
    spark_class, submit = str(home / "bin" / "spark-class"), str(home / "bin" / "spark-submit")
    port, ui = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_DRIVER_PYTHON")}
    env.update(SPARK_HOME=str(home), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(tmp_path / "logs"), SPARK_NO_DAEMONIZE="1")
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log: str) -> None:
        procs.append(subprocess.Popen(args, env=env, start_new_session=True, cwd=tmp_path,
                                      stdout=open(tmp_path / log, "wb"), stderr=subprocess.STDOUT))

    master = f"spark://127.0.0.1:{port}"
    try:
        start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
               "--webui-port", str(ui)], "master.log")
        wait_port(port, 120)
        for i in range(2):
            start([spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
                   "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                   "--work-dir", str(tmp_path / f"worker{i}")], f"worker{i}.log")
        pkg = str(package_zip(tmp_path / "pba.zip"))
        # transformWithStateInPandas starts a Python process of its own on the driver, from the JVM, without
        # --py-files: the zip goes on the driver's PYTHONPATH too (docs/spark-cluster.md)
        job_env = dict(env, PYTHONPATH=pkg)
        job = subprocess.run(
            [submit, "--master", master, "--py-files", pkg,
             "--conf", "spark.pyspark.python=" + sys.executable, "--conf", "spark.executor.memory=768m",
             "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.streaming.stateStore.providerClass="
                       "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
             str(Path(__file__).parent / "cluster_job.py"), str(tmp_path / "work")],
            env=job_env, cwd=tmp_path, capture_output=True, timeout=700, check=False)
        out = job.stdout.decode()
        err = [ln for ln in job.stderr.decode().splitlines() if "Error" in ln or "error" in ln or "Exception" in ln]
        assert job.returncode == 0, (out[-2000:], err[:30])
        assert "OK " in out and "on 2 executors" in out, out[-2000:]
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=60)
