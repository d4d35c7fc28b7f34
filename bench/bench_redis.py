"""``pba-run`` on a Redis stream (issue 45): throughput beside the generator and the producer, latency, kills.

A ``redis-server`` of the bench's own (Debian's package) on a loopback port, in a temporary directory, no
persistence. The tuples are the default job's (``debs14``: 84 plugs, ``--tuples``, default 6M), one entry a
tuple with fields ``key``, ``ts``, ``value``.

* **floor**: the rate one producer appends entries, with redis-py's pipeline of ``xadd`` calls in batches of
  10,000 (what a user writes), with the packed protocol ``pba_runtime`` uses (one write of the commands'
  bytes), and ``redis-benchmark`` (Redis's own C client, pipelined by 1,000).
* **backlog**: ``pba-run`` over the filled stream (the default job, ``--sink none``) beside the same job from
  the generator, interleaved, ``--reps`` times; tuples/s from each run's metrics (after start-up).
* **live**: ``pba-run`` started first on the empty stream, a producer (redis-py pipeline) appending the tuples:
  the job's rate beside the producer's, in the same run.
* **latency**: a producer paced at ``--rate`` (default 100k tuples/s) for ``--seconds``; the job (count
  ``W[1024, 100]`` max per plug, sink a Redis stream) writes each window as it completes. The latency of a
  window is its output entry's ID minus the ID of the tuple that completed it: both are the server's
  millisecond clock, so no clock of two processes is compared (1 ms resolution).
* **kills**: ``--kills`` SIGKILLs of the coordinator at random points (after 0.3-2 s of a run throttled to
  50k tuples/s over 1M tuples),
  each followed by ``--resume``, then a resume to the end; the output stream against an uninterrupted
  run's (count ``W[64, 8]`` max: exact), rows missing and duplicated, processes left.

Results go to ``bench/results/redis.json`` (``redis_quick.json`` with ``--quick``).

    python bench/bench_redis.py              # 6M tuples, 3 reps, 10 s of latency, 20 kills
    python bench/bench_redis.py --quick      # 300k tuples, 1 rep, 3 s, 3 kills: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import redis  # noqa: E402
from exp_common import LoadLog, code_state, machine, spread, write_json  # noqa: E402

from pba_runtime.runtime.redis_streams import xadd_rows  # noqa: E402
from pba_runtime.runtime.sources import Debs14Source  # noqa: E402

RESULTS = HERE / "results"
CLI = [sys.executable, "-m", "pba_runtime", "--no-progress", "--quiet"]


class Server:
    def __init__(self, directory: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                                      directory, "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def url(self, stream: str) -> str:
        return f"redis://127.0.0.1:{self.port}/{stream}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def tuples(n: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
    k, v, t = Debs14Source(tuples=n).take(0, n)
    return ([str(x).encode() for x in k.tolist()], [str(x).encode() for x in t.tolist()],
            [repr(x).encode() for x in v.tolist()])


def produce_pipeline(client: Any, stream: str, cols: tuple, lo: int, hi: int, batch: int = 10_000) -> None:
    """What a user writes: redis-py's pipeline of ``xadd`` calls, a batch at a time."""
    k, t, v = cols
    for a in range(lo, hi, batch):
        pipe = client.pipeline(transaction=False)
        for j in range(a, min(hi, a + batch)):
            pipe.xadd(stream, {"key": k[j], "ts": t[j], "value": v[j]})
        pipe.execute()


def produce_packed(client: Any, stream: str, cols: tuple, lo: int, hi: int, batch: int = 10_000) -> list[bytes]:
    """The same entries in one write of the protocol's bytes a batch; their IDs."""
    k, t, v = cols
    ids: list[bytes] = []
    for a in range(lo, hi, batch):
        b = min(hi, a + batch)
        ids += xadd_rows(client, stream.encode(), [b"key", b"ts", b"value"], [[k[j], t[j], v[j]] for j in range(a, b)])
    return ids


def redis_benchmark(port: int, n: int) -> float | None:
    if shutil.which("redis-benchmark") is None:
        return None
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-n", str(n), "-P", "1000", "-c", "1", "-q",
                          "XADD", "rb", "*", "key", "41", "ts", "1377993600000", "value", "56.789"],
                         capture_output=True, text=True, timeout=600).stdout
    for part in out.replace("\r", "\n").split("\n"):
        if "requests per second" in part:
            return float(part.split(":")[1].split("requests")[0].strip())
    return None


def job_rate(args: list[str], tmp: str) -> dict[str, Any]:
    path = os.path.join(tmp, "m.json")
    proc = subprocess.run(CLI + args + ["--metrics-json", path], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    with open(path) as f:
        return json.load(f)


def latency(server: Server, cols: tuple, rate: int, seconds: float, tmp: str) -> dict[str, Any]:
    c = server.client
    c.delete("live", "live-out")
    n = min(len(cols[0]), int(rate * seconds))
    job = ["--source", server.url("live"), "--tuples", str(n), "--range", "1024", "--slide", "100", "--agg",
           "max", "--sink", server.url("live-out")]
    proc = subprocess.Popen(CLI + job, stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)  # its processes and kernels up, blocked on an empty stream
    ids: list[bytes] = []
    step = 1000  # a batch every 10 ms at 100k/s
    t0 = time.perf_counter()
    for i, a in enumerate(range(0, n, step)):
        wait = t0 + i * step / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        ids += produce_packed(c, "live", cols, a, min(n, a + step), batch=step)
    produced = n / (time.perf_counter() - t0)
    if proc.wait(timeout=600) != 0:
        raise RuntimeError(proc.stderr.read())
    keys = cols[0]
    by_key: dict[bytes, list[int]] = {}
    for j in range(n):
        by_key.setdefault(keys[j], []).append(int(ids[j].split(b"-")[0]))
    lat = []
    for eid, f in c.xrange("live-out"):
        done = by_key[f[b"key"]][int(f[b"end"]) - 1]  # the key's tuple that completed the window
        lat.append(int(eid.split(b"-")[0]) - done)
    lat_a = np.array(lat, dtype=float)
    return {"tuples": n, "rate_asked": rate, "rate_produced": produced, "windows": len(lat),
            "latency_ms": {"p50": float(np.percentile(lat_a, 50)), "p90": float(np.percentile(lat_a, 90)),
                           "p99": float(np.percentile(lat_a, 99)), "max": float(lat_a.max())},
            "job": "count W[1024, 100] max per plug, sink a Redis stream"}


def kills(server: Server, cols: tuple, n_kills: int, n: int, tmp: str, seed: int = 0) -> dict[str, Any]:
    c = server.client
    c.delete("kin", "kref", "kout", "kout:late", "kref:late")
    produce_packed(c, "kin", cols, 0, n)
    base = ["--source", server.url("kin"), "--tuples", str(n), "--range", "64", "--slide", "8", "--agg", "max",
            "--batch-size", "5000"]
    subprocess.run(CLI + base + ["--sink", server.url("kref")], check=True, timeout=600)
    ck = os.path.join(tmp, "ck")
    shutil.rmtree(ck, ignore_errors=True)
    durable = base + ["--sink", server.url("kout"), "--checkpoint-dir", ck, "--checkpoint-every", "20000",
                      "--rate", "50000"]
    rng = random.Random(seed)
    done, left_running, first = 0, 0, True
    while done < n_kills:
        proc = subprocess.Popen(CLI + durable + ([] if first else ["--resume"]), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(0.3, 2.0))
        if proc.poll() is not None:  # it reached the end before this kill: the kills so far are the figure
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        first = first and not os.path.exists(os.path.join(ck, "checkpoint.pkl"))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
                time.sleep(0.05)
            except ProcessLookupError:
                break
        else:
            left_running += 1
            os.killpg(proc.pid, signal.SIGKILL)
        done += 1
    if proc.returncode != 0 or proc.poll() is None:
        subprocess.run(CLI + durable[:-2] + (["--resume"] if not first else []), check=True, timeout=600)

    def rows(stream: str) -> list[tuple]:
        return [(f[b"key"], f[b"start"], f[b"end"], f[b"value"]) for _, f in c.xrange(stream)]

    want, got = Counter(rows("kref")), Counter(rows("kout"))
    return {"kills": done, "tuples": n, "rows": sum(want.values()), "missing": sum((want - got).values()),
            "duplicated": sum((got - want).values()), "equal": want == got, "processes_left": left_running}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tuples", type=int, default=None, help="default 6M (--quick 300k)")
    p.add_argument("--reps", type=int, default=None, help="default 3 (--quick 1)")
    p.add_argument("--rate", type=int, default=100_000)
    p.add_argument("--seconds", type=float, default=None, help="default 10 (--quick 3)")
    p.add_argument("--kills", type=int, default=None, help="default 20 (--quick 3)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    for name, full, quick in (("tuples", 6_000_000, 300_000), ("reps", 3, 1), ("seconds", 10.0, 3.0),
                              ("kills", 20, 3)):
        if getattr(a, name) is None:
            setattr(a, name, quick if a.quick else full)
    load = LoadLog()
    code = code_state()
    tmp = tempfile.mkdtemp(prefix="bench_redis_")
    server = Server(tmp)
    res: dict[str, Any] = {"tuples": a.tuples, "reps": a.reps}
    try:
        cols = tuples(a.tuples)
        c = server.client
        sample = min(a.tuples, 1_000_000)
        pipe_r, packed_r = [], []
        for _ in range(a.reps):
            c.delete("floor")
            t0 = time.perf_counter()
            produce_pipeline(c, "floor", cols, 0, sample)
            pipe_r.append(sample / (time.perf_counter() - t0))
            c.delete("floor")
            t0 = time.perf_counter()
            produce_packed(c, "floor", cols, 0, sample)
            packed_r.append(sample / (time.perf_counter() - t0))
        c.delete("floor")
        res["floor"] = {"producer_pipeline": spread(pipe_r), "producer_packed": spread(packed_r),
                        "redis_benchmark": redis_benchmark(server.port, sample), "sample": sample}
        produce_packed(c, "plugs", cols, 0, a.tuples)
        gen, log_ = [], []
        for _ in range(a.reps):  # interleaved: the generator, then the stream
            gen.append(job_rate(["--tuples", str(a.tuples)], tmp)["tuples_per_s"])
            log_.append(job_rate(["--source", server.url("plugs"), "--tuples", str(a.tuples)], tmp)["tuples_per_s"])
        res["backlog"] = {"generator": spread(gen), "redis": spread(log_),
                          "ratio": float(np.median(log_) / np.median(gen)), "job": "the default job, --sink none"}
        c.delete("plugs")
        live_job, live_prod = [], []
        for _ in range(a.reps):
            c.delete("plugs-live")
            path = os.path.join(tmp, "live.json")
            proc = subprocess.Popen(CLI + ["--source", server.url("plugs-live"), "--tuples", str(a.tuples),
                                           "--metrics-json", path], stderr=subprocess.PIPE, text=True)
            time.sleep(3.0)
            t0 = time.perf_counter()
            produce_pipeline(c, "plugs-live", cols, 0, a.tuples)
            live_prod.append(a.tuples / (time.perf_counter() - t0))
            if proc.wait(timeout=1800) != 0:
                raise RuntimeError(proc.stderr.read())
            end = time.perf_counter()
            live_job.append(a.tuples / (end - t0))  # from the first append to the job's exit
        c.delete("plugs-live")
        res["live"] = {"producer": spread(live_prod), "job": spread(live_job),
                       "ratio": float(np.median(live_job) / np.median(live_prod))}
        res["latency"] = latency(server, cols, a.rate, a.seconds, tmp)
        res["kills"] = kills(server, tuples(1_000_000), a.kills, 1_000_000, tmp)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    res["machine"] = machine(load, code)
    out = Path(a.out) if a.out else RESULTS / ("redis_quick.json" if a.quick else "redis.json")
    write_json(out, res)
    print(json.dumps({k: v for k, v in res.items() if k != "machine"}, indent=1, default=str)[:3000])
    return res


if __name__ == "__main__":
    main()
