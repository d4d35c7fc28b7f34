"""The compiled per-tuple engine (issue 18): throughput and latency of each algorithm stepped in machine code.

``pr.replay`` runs every tuple through one algorithm's compiled loop (the slicing layer, then the
algorithm's push/pop/query, one tuple at a time: not the vectorised batch path), over count windows
with slide 1 and float64 values, as the paper's harness does:

* **throughput** (tuples/s) of SBA, PBA (its lcs on a pool thread), Two-Stacks, SlickDeque (max only), DABA,
  FlatFAT and SoE (invertible aggregations only: sum and std here) at W[2^10, 1], W[2^13, 1], W[2^14, 1],
  W[2^17, 1] for max, and at 2^10 and 2^14 for sum and std (``--short``: max and sum at 2^10 and 2^14 only);
  algorithms interleaved, shuffled per round, repeated; the median with min and max of the repeats;
* **latency** at W[2^14, 1] max: the time of each window-completing tuple measured inside the
  compiled loop (the TSC, calibrated to ns), per repeat its Max, p99, Std and mean, then the median
  over repeats, for PBA, Two-Stacks and DABA; and PBA/Two-Stacks ratios of Max and Std (the paper's Table 2 asks Max <= 1/5 and
  Std <= 1/3). Wall clock: on a shared machine a Max is often a preemption (milliseconds), whatever
  the algorithm, so the 10th and 100th largest latencies, the Std of the samples below 1 ms and the
  number of windows above 5 us are reported beside them (Two-Stacks flips once per range: 305 flips
  at W[2^14, 1] over 5M values).

The machine's load average is recorded before and after (the project machine has 2 cores shared
with other work: ratios in one run matter more than absolute figures).

    python bench/bench_stepwise.py            # 5M values, 5 repeats
    python bench/bench_stepwise.py --quick    # 1M values, 3 repeats
    python bench/bench_stepwise.py --short    # 2M values, 5 repeats, W[2^10,1] and W[2^14,1] only
    python bench/bench_stepwise.py --smoke --out-dir /tmp/x   # tiny, for tests/test_bench_stepwise.py
    python bench/bench_stepwise.py --insert   # per-tuple ``op.insert`` beside numba's call floor

``--insert`` asks whether a compiled step would make a *per-tuple* ``op.insert`` faster (issue 18: use it
"where that is faster than today's Python step"): each algorithm's Python ``insert`` (W[2^10, 1], float
values, the call included) beside what calling any numba function from Python costs before it does any
work: a call with one float, and with a float and ``k`` state arrays (a step's state: the operator's
buffers and counters), one call per tuple. The compiled step itself is a few ns (``pr.replay``); the
call is what a per-tuple ``insert`` pays. Then DABA, FlatFAT and SoE's ``op.insert`` on the Python step
beside their compiled step (``engine="compiled"``, :mod:`pba_runtime.algorithms.compiled_step`), count and
time windows, the two interleaved per repeat (``insert_steps``). Written to ``stepwise_insert.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import pba_runtime as pr

RESULTS = Path(__file__).resolve().parent / "results"
ALGS = ["sba", "pba", "two_stacks", "slick_deque", "daba", "flatfat", "soe"]
LAT_ALGS = ["pba", "two_stacks", "daba"]
#: SlickDeque needs a selective aggregation, SoE an invertible one
ONLY = {"slick_deque": ("max", "min", "argmax"), "soe": ("sum", "count", "mean", "std", "geomean")}


def machine() -> dict:
    return {"python": sys.version.split()[0], "numpy": np.__version__, "cpus": os.cpu_count(),
            "platform": platform.platform(), "loadavg": list(os.getloadavg()), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def algs_for(agg: str) -> list[str]:
    """The algorithms that run ``agg`` (SlickDeque: max here; SoE: sum and std)."""
    return [a for a in ALGS if agg in ONLY.get(a, (agg,))]


def run(alg: str, r: int, agg: str, values: np.ndarray, pool: pr.WorkerPool, latency: bool = False) -> pr.Replay:
    return pr.replay(alg, pr.CountWindow(range=r, slide=1), agg, values, latency=latency,
                     pool=pool if alg == "pba" else None)


def _per_call_ns(fn, values: list, repeats: int, *first) -> dict:
    """ns per call of ``fn(*first, v)`` over ``values``: the median and spread of ``repeats`` timed passes."""
    fn(*first, values[0])
    per = []
    for _ in range(repeats):
        t = time.perf_counter()
        if first:  # the state in one argument, as a compiled insert would take it
            st = first[0]
            for v in values:
                fn(st, v)
        else:
            for v in values:
                fn(v)
        per.append((time.perf_counter() - t) / len(values) * 1e9)
    return spread(per)


def insert_floor(n: int, repeats: int, state_arrays: tuple[int, ...] = (1, 3, 8)) -> dict:
    """Each algorithm's Python ``op.insert`` beside numba's call floor, ns per tuple (see ``--insert``)."""
    import numba

    @numba.njit(nogil=True)
    def step_scalar(v):  # the least a compiled call does: a float in, a float out
        return v + 1.0

    @numba.njit(nogil=True)
    def step_state(st, v):  # a running max over a state held in arrays, one of them touched
        st[0][0] = max(st[0][0], v)
        return st[0][0]

    values = np.random.default_rng(0).random(n).tolist()
    out: dict = {"tuples": n, "repeats": repeats, "window": "CountWindow(1024, 1)", "numba": {}, "insert": {}}
    out["numba"]["call(float)"] = _per_call_ns(step_scalar, values, repeats)
    for k in state_arrays:
        # a homogeneous tuple of k arrays, one argument: numba types each array on every call
        st = tuple(np.zeros(16) for _ in range(k))
        out["numba"][f"call({k} arrays, float)"] = _per_call_ns(step_state, values, repeats, st)
    for alg in ALGS:
        op = pr.create(alg, pr.CountWindow(range=1024, slide=1), "sum" if alg == "soe" else "max", engine="python")
        out["insert"][alg] = _per_call_ns(op.insert, values, repeats)
    floor = out["numba"][f"call({state_arrays[-1]} arrays, float)"]["median"]
    out["insert_over_floor"] = {alg: row["median"] / floor for alg, row in out["insert"].items()}
    for name, row in [*out["numba"].items(), *((f"{a} op.insert", r) for a, r in out["insert"].items())]:
        print(f"{name:>28}: {row['median']:7.0f} ns [{row['min']:.0f}-{row['max']:.0f}]", flush=True)
    return out


#: (algorithm, aggregation, window) the compiled-step ``insert`` is timed at beside the Python one
STEP_CASES = [(alg, agg, kind) for kind in ("count", "time") for alg, agg in
              (("daba", "max"), ("daba", "sum"), ("daba", "std"), ("flatfat", "max"), ("flatfat", "sum"),
               ("soe", "sum"), ("soe", "count"), ("soe", "mean"))]


def insert_steps(n: int, repeats: int, cases: list = STEP_CASES) -> dict:
    """``op.insert`` on the Python step (``engine="python"``) beside the compiled step
    (:mod:`pba_runtime.algorithms.compiled_step`), ns per tuple, W[2^10, 1] (count) and
    TimeWindow(1024, 1) with a new timestamp per tuple (time): per repeat one pass of ``n`` tuples
    through every operator, in a shuffled order, so both steps of a case see the same load."""
    values = np.random.default_rng(0).random(n).tolist()
    ops = {}
    for alg, agg, kind in cases:
        w = pr.CountWindow(range=1024, slide=1) if kind == "count" else pr.TimeWindow(range=1024, slide=1)
        for step in ("python", "compiled"):
            op = pr.create(alg, w, agg, engine=step)
            assert op.stats()["step"] == step, (alg, agg, kind, op.stats())
            ops[(alg, agg, kind, step)] = op
    clock = {key: 0 for key in ops}  # time windows: the next timestamp of each operator

    def one_pass(key, vals) -> float:
        op = ops[key]
        ins = op.insert
        t = time.perf_counter()
        if key[2] == "count":
            for v in vals:
                ins(v)
        else:
            t0 = clock[key]
            for i, v in enumerate(vals, t0):
                ins(v, i)
            clock[key] = t0 + len(vals)
        return (time.perf_counter() - t) / len(vals) * 1e9

    for key in ops:  # warm up: compile (or load) every loop, fill every window
        one_pass(key, values[: min(n, 4096)])
    per = {key: [] for key in ops}
    rnd = random.Random(1)
    for _ in range(repeats):
        for key in rnd.sample(list(ops), len(ops)):
            per[key].append(one_pass(key, values))
    out = {}
    for alg, agg, kind in cases:
        py, co = spread(per[(alg, agg, kind, "python")]), spread(per[(alg, agg, kind, "compiled")])
        out[f"{alg} {agg} {kind}"] = {"python": py, "compiled": co, "speedup": py["median"] / co["median"]}
        print(f"{alg:>8} {agg:>6} {kind:>5}: python {py['median']:6.0f} ns [{py['min']:.0f}-{py['max']:.0f}]  "
              f"compiled {co['median']:5.0f} ns [{co['min']:.0f}-{co['max']:.0f}]  "
              f"{py['median'] / co['median']:.2f}x", flush=True)
    for op in ops.values():
        op.close()
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--short", action="store_true")
    ap.add_argument("--insert", action="store_true", help="per-tuple op.insert beside numba's call floor")
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args(argv)
    if args.insert:
        n, repeats = (2_000, 1) if args.smoke else (300_000, 5)
        res = {"machine": machine(), **insert_floor(n, repeats)}
        res["step"] = insert_steps(n // 3, repeats, STEP_CASES[:2] if args.smoke else STEP_CASES)
        res["machine"]["loadavg_end"] = list(os.getloadavg())
        d = Path(args.out_dir)
        d.mkdir(parents=True, exist_ok=True)
        (d / ("stepwise_insert_smoke.json" if args.smoke else "stepwise_insert.json")).write_text(json.dumps(res, indent=1))
        return res
    if args.smoke:
        n, repeats, lat_repeats = 20_000, 1, 1
        points = [(16, "max"), (64, "max"), (64, "std")]
        lat_range = 64
    elif args.short:
        n, repeats, lat_repeats = 2_000_000, 5, 3
        points = [(r, a) for a in ("max", "sum") for r in (1 << 10, 1 << 14)]
        lat_range = 1 << 14
    else:
        n, repeats, lat_repeats = (1_000_000, 3, 3) if args.quick else (5_000_000, 5, 5)
        points = [(1 << k, "max") for k in (10, 13, 14, 17)] + [(r, a) for r in (1 << 10, 1 << 14)
                                                                  for a in ("sum", "std")]
        lat_range = 1 << 14
    values = np.random.default_rng(0).random(n)
    out: dict = {"machine": machine(), "tuples": n, "repeats": repeats, "smoke": args.smoke, "short": args.short,
                 "throughput": {}, "latency": {}}
    with pr.WorkerPool("thread", 1) as pool:
        # compile (or load from the disk cache) every loop first
        for r, agg in points:
            for alg in algs_for(agg):
                run(alg, r, agg, values[: 2 * r], pool)
        for alg in LAT_ALGS:
            run(alg, lat_range, "max", values[: 2 * lat_range], pool, latency=True)
        samples: dict = {f"{agg} W[{r},1]": {alg: [] for alg in algs_for(agg)} for r, agg in points}
        stats: dict = {key: {} for key in samples}
        rnd = random.Random(0)
        for _ in range(repeats):
            order = [(r, agg, alg) for r, agg in points for alg in algs_for(agg)]
            rnd.shuffle(order)
            for r, agg, alg in order:
                res = run(alg, r, agg, values, pool)
                key = f"{agg} W[{r},1]"
                samples[key][alg].append(res.throughput)
                stats[key][alg] = res.stats
        for key, by_alg in samples.items():
            row = {alg: spread(xs) for alg, xs in by_alg.items()}
            row["pba_over_sba"] = row["pba"]["median"] / row["sba"]["median"]
            row["sba_over_two_stacks"] = row["sba"]["median"] / row["two_stacks"]["median"]
            for alg in ("daba", "flatfat", "soe"):
                if alg in row:
                    row[f"{alg}_over_sba"] = row[alg]["median"] / row["sba"]["median"]
                    row[f"{alg}_over_two_stacks"] = row[alg]["median"] / row["two_stacks"]["median"]
            row["stats_last_repeat"] = stats[key]
            out["throughput"][key] = row
            print(f"{key:>16}: " + "  ".join(f"{alg} {row[alg]['median'] / 1e6:6.1f}M/s "
                                             f"[{row[alg]['min'] / 1e6:.1f}-{row[alg]['max'] / 1e6:.1f}]"
                                             for alg in by_alg), flush=True)
        keys = ("max", "top10", "top100", "p99", "std", "std_below_1ms", "over_5us", "mean", "stalls")
        lat: dict = {alg: {k: [] for k in keys} for alg in LAT_ALGS}
        for _ in range(lat_repeats):
            for alg in rnd.sample(LAT_ALGS, len(LAT_ALGS)):
                res = run(alg, lat_range, "max", values, pool, latency=True)
                ns = res.latency_ns[lat_range:]  # after the first window's warm-up
                lat[alg]["max"].append(float(ns.max()))
                lat[alg]["p99"].append(float(np.percentile(ns, 99)))
                lat[alg]["std"].append(float(ns.std()))
                top = np.sort(ns)[::-1]
                lat[alg]["top10"].append(float(top[min(9, len(top) - 1)]))
                lat[alg]["top100"].append(float(top[min(99, len(top) - 1)]))
                lat[alg]["std_below_1ms"].append(float(ns[ns < 1_000_000].std()))
                lat[alg]["over_5us"].append(int((ns > 5_000).sum()))
                lat[alg]["mean"].append(float(ns.mean()))
                lat[alg]["stalls"].append(res.stats.get("stalls", 0))
        row = {alg: {k: spread(v) for k, v in d.items()} for alg, d in lat.items()}
        row["pba_over_two_stacks"] = {k: row["pba"][k]["median"] / row["two_stacks"][k]["median"]
                                      for k in ("max", "top10", "top100", "p99", "std", "std_below_1ms", "mean")}
        row["daba_over_two_stacks"] = {k: row["daba"][k]["median"] / row["two_stacks"][k]["median"]
                                       for k in ("max", "top10", "top100", "p99", "std", "std_below_1ms", "mean")}
        out["latency"][f"max W[{lat_range},1]"] = row
        print(f"latency max W[{lat_range},1] (ns, median of {lat_repeats}): " + "  ".join(
            f"{alg}: max {row[alg]['max']['median']:.0f} p99 {row[alg]['p99']['median']:.0f} "
            f"std {row[alg]['std']['median']:.0f} 10th largest {row[alg]['top10']['median']:.0f} "
            f"100th largest {row[alg]['top100']['median']:.0f} std<1ms {row[alg]['std_below_1ms']['median']:.0f} "
            f">5us {row[alg]['over_5us']['median']:.0f}" for alg in LAT_ALGS)
            + "  PBA/TS " + " ".join(f"{k} {v:.2f}" for k, v in row["pba_over_two_stacks"].items()))
    out["machine"]["loadavg_end"] = list(os.getloadavg())
    d = Path(args.out_dir)
    d.mkdir(parents=True, exist_ok=True)
    name = "stepwise_smoke.json" if args.smoke else ("stepwise_quick.json" if args.quick else "stepwise.json")
    (d / name).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
