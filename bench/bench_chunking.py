"""Measure the chunk manager's costs: T_m (main loop per tuple), T_w (worker per lcs element), L (hand-off).

These back the constants of ``pba_runtime.chunking.DEFAULT_COSTS`` and print the chunk sizes the
generalised Theorem 1 gives beside the paper's ``b*``.

    python bench/bench_chunking.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from array import array
from pathlib import Path

import numpy as np

import pba_runtime as pr
from pba_runtime.algorithms.pba import build_lcs
from pba_runtime.chunking import CostModel, generalized_chunk_size

RESULTS = Path(__file__).resolve().parent / "results"


def main_loop_cost(agg: str, n: int = 200_000) -> float:
    values = np.random.default_rng(0).uniform(1, 2, n).tolist()
    best = float("inf")
    for _ in range(3):
        with pr.create("sba", pr.CountWindow(range=1 << 13, slide=1), agg) as op:
            ins = op.insert
            t0 = time.perf_counter()
            for v in values:
                ins(v)
            best = min(best, (time.perf_counter() - t0) / n)
    return best


def worker_cost(agg_name: str, b: int = 8192) -> float:
    agg = pr.get_aggregation(agg_name)
    lift = (lambda v: agg.lift(v, 0)) if agg.positional else agg.lift
    parts = [lift(v) for v in np.random.default_rng(1).uniform(1, 2, b).tolist()]
    saa = array("d", np.asarray(parts, dtype=float).ravel()) if agg.kernel is not None else parts
    best = float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        build_lcs(agg, saa)
        best = min(best, (time.perf_counter() - t0) / b)
    return best


def handoff_latency(busy_s: float = 0.02, trials: int = 30) -> float:
    """Submit a trivial task while the main thread is busy in Python; time until it has run."""
    lat = []
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        for _ in range(trials):
            done = []
            t0 = time.perf_counter()
            pool.submit(lambda: done.append(time.perf_counter()))
            x = 0
            while not done and time.perf_counter() - t0 < busy_s:
                x += 1  # busy Python main loop holding the GIL
            if done:
                lat.append(done[0] - t0)
    return statistics.median(lat)


def main() -> int:
    report = {"switch_interval_s": None, "aggs": {}}
    L = handoff_latency()
    report["switch_interval_s"] = sys.getswitchinterval()
    report["handoff_s"] = L
    print(f"thread hand-off while the main loop is busy: {L * 1e6:.0f} us (switch interval {sys.getswitchinterval()})")
    for agg in ("max", "sum", "mean", "std", "argmax", "moment_sketch"):
        tm = main_loop_cost(agg)
        tw = worker_cost(agg)
        report["aggs"][agg] = {"T_m_s": tm, "T_w_s": tw, "T_w_over_T_m": tw / tm, "L_over_T_m": L / tm}
        print(f"{agg:14s} T_m {tm * 1e9:7.0f} ns/tuple   T_w {tw * 1e9:6.1f} ns/element   "
              f"T_w/T_m {tw / tm:.3f}   L/T_m {L / tm:.0f}")
    print("chunk sizes, W[r, 1]: paper's b*  vs  generalised with measured max costs  vs  the constants in use")
    m = report["aggs"]["max"]
    measured = CostModel(worker=m["T_w_over_T_m"], launch=m["L_over_T_m"])
    for e in (10, 13, 17):
        r = 1 << e
        print(f"  r=2^{e}: b*={pr.theorem1(r, 1)}  measured={generalized_chunk_size(r, 1, measured)}  "
              f"in use={pr.plan_chunk_size(pr.CountWindow(range=r, slide=1))}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "chunking.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
