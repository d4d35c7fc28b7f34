"""Batch and per-tuple throughput of PBA against bottleneck and pandas (issue 2's benchmark).

One run, the same float64 values for everyone, sliding max with slide 1.
Methods are interleaved and repeated; the median of each is reported, with
ratios to bottleneck measured side by side (the machine is shared and noisy).

    python bench/bench_core.py              # 10M values, ranges 2^10 2^13 2^17 2^20
    python bench/bench_core.py --quick      # 1M values, fewer repeats
    python bench/bench_core.py --auto       # also: per-tuple SBA vs PBA throughput and tail latency by range
                                            # (the "auto" threshold)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from bench_baselines import machine_info  # one machine description for every bench (bench/ is on sys.path)

import pba_runtime as pr

RESULTS = Path(__file__).resolve().parent / "results"


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def batch_methods(x: np.ndarray, w: int, pool: pr.WorkerPool) -> dict:
    win = pr.CountWindow(range=w, slide=1)
    methods = {
        "pba": lambda: pr.sliding_aggregate(x, window=win, agg="max", algorithm="pba", pool=pool),
        "sba": lambda: pr.sliding_aggregate(x, window=win, agg="max", algorithm="sba"),
    }
    try:
        import bottleneck as bn

        methods["bottleneck"] = lambda: bn.move_max(x, w)
    except ImportError:
        pass
    try:
        import pandas as pd

        s = pd.Series(x)
        methods["pandas"] = lambda: s.rolling(w).max()
    except ImportError:
        pass
    return methods


def check_equal(x: np.ndarray, w: int) -> None:
    """Sanity: PBA's windows are bottleneck's windows."""
    try:
        import bottleneck as bn
    except ImportError:
        return
    y = x[: 4 * w + 10]
    _, res = pr.sliding_aggregate(y, window=pr.CountWindow(range=w, slide=1), agg="max", algorithm="pba")
    want = bn.move_max(y, w)[w - 1 :]
    assert np.array_equal(res, want), "PBA and bottleneck disagree"


def bench_batch(x: np.ndarray, exps: list[int], repeat: int, pool: pr.WorkerPool) -> list[dict]:
    rows = []
    for e in exps:
        w = 1 << e
        if w * 2 > len(x):
            print(f"  r=2^{e}: skipped (needs more than {len(x):,} values)")
            continue
        check_equal(x, w)
        methods = batch_methods(x, w, pool)
        times: dict[str, list[float]] = {m: [] for m in methods}
        for fn in methods.values():  # warm-up, not timed: first-touch of the heap, the pool's thread
            fn()
        for _ in range(repeat):
            for name, fn in methods.items():  # interleaved: every method sees the same noise
                times[name].append(timed(fn))
        med = {m: statistics.median(t) for m, t in times.items()}
        row = {"range": w, "n": len(x), "median_s": med, "spread_s": {m: [min(t), max(t)] for m, t in times.items()},
               "values_per_s": {m: len(x) / t for m, t in med.items()}}
        if "bottleneck" in med:
            row["ratio_vs_bottleneck"] = {m: med["bottleneck"] / t for m, t in med.items()}
        rows.append(row)
        print_row(row)
    return rows


def print_row(row: dict) -> None:
    vps = row["values_per_s"]
    ratio = row.get("ratio_vs_bottleneck", {})
    parts = [f"{m} {vps[m] / 1e6:6.1f}M/s" + (f" ({ratio[m]:.2f}x)" if m in ratio else "") for m in vps]
    print(f"  r=2^{row['range'].bit_length() - 1:<2}  " + "  ".join(parts), flush=True)


def per_tuple(alg: str, w: int, values: list[float], pool: pr.WorkerPool) -> tuple[float, dict, np.ndarray]:
    """Tuples/s of ``insert()``, the operator's stats, and each insert's latency (ns)."""
    clock = time.perf_counter_ns
    lat = np.empty(len(values), dtype=np.int64)
    with pr.create(alg, pr.CountWindow(range=w, slide=1), "max", **({"pool": pool} if alg == "pba" else {})) as op:
        ins = op.insert
        t0 = time.perf_counter()
        for i, v in enumerate(values):
            a = clock()
            ins(v)
            lat[i] = clock() - a
        dt = time.perf_counter() - t0
        return len(values) / dt, op.stats(), lat


def bench_per_tuple(n: int, exps: list[int], repeat: int, pool: pr.WorkerPool) -> list[dict]:
    values = np.random.default_rng(1).random(n).tolist()
    rows = []
    for e in exps:
        w = 1 << e
        rates: dict[str, list[float]] = {"sba": [], "pba": []}
        tails: dict[str, list[tuple[float, float]]] = {"sba": [], "pba": []}
        stalls = {}
        for _ in range(repeat):
            for alg in rates:
                rate, st, lat = per_tuple(alg, w, values, pool)
                rates[alg].append(rate)
                steady = lat[min(len(lat) // 2, 2 * w):] / 1e3  # microseconds, after the first windows
                tails[alg].append((float(np.percentile(steady, 99.99)), float(steady.max())))
                stalls[alg] = (st["stalls"], st["chunks"])
        med = {a: statistics.median(r) for a, r in rates.items()}
        tail = {a: [statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)] for a, v in tails.items()}
        row = {"range": w, "n": n, "tuples_per_s": med, "stalls_chunks": stalls,
               "pba_over_sba": med["pba"] / med["sba"], "latency_us_p9999_max": tail}
        rows.append(row)
        print(f"  r=2^{e:<2}  sba {med['sba'] / 1e6:5.2f}M/s  pba {med['pba'] / 1e6:5.2f}M/s"
              f"  (pba/sba {row['pba_over_sba']:.2f}; pba stalls {stalls['pba'][0]}/{stalls['pba'][1]} chunks)"
              f"  p99.99/max us: sba {tail['sba'][0]:.0f}/{tail['sba'][1]:.0f}  pba {tail['pba'][0]:.0f}/{tail['pba'][1]:.0f}",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000, help="values in the batch benchmark")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1M values, 3 repeats")
    ap.add_argument("--auto", action="store_true", help="per-tuple SBA vs PBA over ranges 2^6..2^14")
    ap.add_argument("--out", type=Path, default=RESULTS / "core.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeat = 1_000_000, 3
    x = np.random.default_rng(0).random(args.n)
    report = {"machine": machine_info(), "args": {"n": args.n, "repeat": args.repeat}}
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        print(f"batch sliding max, slide 1, {args.n:,} float64 values, median of {args.repeat} (interleaved):")
        report["batch"] = bench_batch(x, [10, 13, 17, 20], args.repeat, pool)
        n_tuple = 200_000 if args.quick else 1_000_000
        print(f"per-tuple insert(), sliding max, slide 1, {n_tuple:,} values:")
        report["per_tuple"] = bench_per_tuple(n_tuple, [13], max(1, args.repeat // 2), pool)
        if args.auto:
            print("per-tuple SBA vs PBA by range (the 'auto' threshold):")
            report["auto"] = bench_per_tuple(n_tuple, [8, 10, 12, 13, 14, 15, 16], 3, pool)
    goal = [r["ratio_vs_bottleneck"]["pba"] for r in report["batch"] if "ratio_vs_bottleneck" in r]
    if goal:
        print(f"goal PBA >= 2x bottleneck at every range >= 2^10: min ratio {min(goal):.2f}x "
              f"({'met' if min(goal) >= 2 else 'not met'} on this run)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
