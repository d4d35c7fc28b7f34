"""The batch path's default against its two candidates: ``algorithm="auto"`` vs ``"pba"`` vs ``"sba"`` (issue 40).

``pr.sliding_aggregate(x, window=pr.CountWindow(range=r, slide=1), agg=a)`` for every size x range x
built-in: the default (``auto``, whose batch policy is ``pba_runtime.algorithms.choose_batch_algorithm``),
``pba`` (its batch split between the main thread and the pool's worker) and ``sba`` (one thread),
interleaved in a shuffled order per repetition (``exp_common.interleave``) after one warm-up call each.
Wall time per call (the split is two threads); M values/s as median [min-max]; ``ratio``: the default's
median time over the faster candidate's (the goal: <= 1.05 in every cell at 4M and 10M values).

``moment_sketch`` (23 floats a window: 0.7-1.8 GB of results at these sizes) and ``collect`` (a list a
window) are left out of the default grid; ``--aggs moment_sketch --sizes 1000000`` runs one.

    python bench/bench_auto.py              # 4M and 10M values, ranges 2^4, 2^6, ..., 2^20, 8 built-ins
    python bench/bench_auto.py --quick      # tiny sizes, a few seconds (the test suite runs this)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import exp_common as C

import pba_runtime as pr
from pba_runtime.algorithms import choose_batch_algorithm

AGGS = ("max", "min", "sum", "count", "mean", "std", "geomean", "argmax")
SIZES = (4_000_000, 10_000_000)
RANGES = tuple(1 << e for e in range(4, 21, 2))  # powers of 4 from 2^4 to 2^20 (2^10 among them)
QUICK = {"sizes": (100_000,), "ranges": (16, 1024), "reps": 2}
ALGS = ("auto", "pba", "sba")
GOAL = 1.05


def measure(values, window, agg: str, reps: int, seed: int) -> dict:
    """One cell: the three algorithms interleaved, ``reps`` timed calls each after a warm-up call."""

    def case(alg: str):
        def run() -> float:
            t0 = time.perf_counter()
            pr.sliding_aggregate(values, window=window, agg=agg, algorithm=alg)
            return time.perf_counter() - t0
        return run

    cases = {alg: case(alg) for alg in ALGS}
    for run in cases.values():
        run()
    times = C.interleave(cases, reps, seed=seed)
    n = len(values)
    picked, reason = choose_batch_algorithm(window, agg, n)
    cell = {"values": n, "range": window.range, "agg": agg, "picked": picked, "reason": reason}
    for alg, ts in times.items():
        s = C.spread(ts)
        cell[alg] = {"seconds": s, "per_s": n / s["median"], "min_per_s": n / s["max"], "max_per_s": n / s["min"]}
    best = min(cell["pba"]["seconds"]["median"], cell["sba"]["seconds"]["median"])
    cell["ratio"] = cell["auto"]["seconds"]["median"] / best
    cell["faster"] = "pba" if cell["pba"]["seconds"]["median"] <= cell["sba"]["seconds"]["median"] else "sba"
    return cell


def _rate(m: dict) -> str:
    return f"{m['per_s'] / 1e6:6.0f} [{m['min_per_s'] / 1e6:.0f}-{m['max_per_s'] / 1e6:.0f}]"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, two ranges, 2 repetitions")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help=f"values per call (default {SIZES})")
    ap.add_argument("--ranges", type=int, nargs="+", default=None, help="window ranges (default 2^4, 2^6, ..., 2^20)")
    ap.add_argument("--aggs", nargs="+", default=list(AGGS), help="aggregations (default: the 8 built-ins)")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per algorithm and cell (default 7)")
    ap.add_argument("--out", type=Path, default=C.RESULTS / "auto.json", help="JSON (default bench/results/auto.json)")
    args = ap.parse_args(argv)
    sizes = args.sizes or (QUICK["sizes"] if args.quick else SIZES)
    ranges = args.ranges or (QUICK["ranges"] if args.quick else RANGES)
    reps = args.reps or (QUICK["reps"] if args.quick else 7)
    load = C.LoadLog()
    load.mark("start")
    code = C.code_state()
    cells = []
    print(f"{'values':>10} {'range':>8} {'agg':8} {'auto M/s':>18} {'pba M/s':>18} {'sba M/s':>18} ratio picked")
    for n in sizes:
        values = C.uniform_values(n) + 0.5  # positive: geomean's logs
        for r in ranges:
            if r > n:
                continue
            window = pr.CountWindow(range=r, slide=1)
            for i, agg in enumerate(args.aggs):
                cell = measure(values, window, agg, reps, seed=len(cells) + i)
                cells.append(cell)
                flag = "" if cell["ratio"] <= GOAL else f"  > {GOAL} (faster: {cell['faster']})"
                print(f"{n:>10,} {r:>8,} {agg:8} {_rate(cell['auto']):>18} {_rate(cell['pba']):>18} "
                      f"{_rate(cell['sba']):>18} {cell['ratio']:.2f}  {cell['picked']} ({cell['reason']}){flag}",
                      flush=True)
        load.mark(f"{n:,} values")
        del values
    ratios = [c["ratio"] for c in cells]
    summary = {"cells": len(cells), "within_goal": sum(x <= GOAL for x in ratios), "goal": GOAL,
               "worst_ratio": max(ratios) if ratios else None,
               "worst": max(cells, key=lambda c: c["ratio"], default=None) and
               {k: v for k, v in max(cells, key=lambda c: c["ratio"]).items() if k in ("values", "range", "agg")}}
    res = {"bench": "bench_auto", "quick": bool(args.quick), "reps": reps, "sizes": list(sizes),
           "ranges": list(ranges), "aggs": list(args.aggs), "threshold_windows": pr.algorithms.AUTO_BATCH_SPLIT_MIN,
           "cells": cells, "summary": summary, "machine": C.machine(load, code)}
    C.write_json(args.out, res)
    print(f"{summary['within_goal']}/{summary['cells']} cells within {GOAL:.2f}x of the faster; "
          f"worst {summary['worst_ratio']:.2f} at {summary['worst']}; load {load.summary()['load1_max']}")
    print(f"wrote {args.out}")
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
