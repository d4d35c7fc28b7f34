"""Scaling experiment of the PBA paper (KDD'21, section 5.2, Fig. 8a: throughput against parallelism), here.

The paper runs FPBA (PBA in Flink) against Flink's own windows at parallelism
1 ... 6 on a 6-core machine, sliding ``max`` over count windows ``W[2^10, 1]`` on
the DEBS'14 smart-plug data. This machine has 2 cores (shared), so parallelism
1 and 2, measured with the existing benchmarks' functions:

* **Spark adapter** (``bench_spark``): ``local[1]`` and ``local[2]``; 84 keys,
  ``W[1024, 1]`` max; our ``sliding_window_aggregate`` (``ours``) beside Spark's
  window function ``ROWS BETWEEN 1023 PRECEDING`` with the segment tree on
  (``native_segtree``; Spark's default is O(range) per row) and the shuffle+sort
  ceiling every adapter pays (``ceiling``), all to the ``noop`` sink. The two
  masters alternate in rounds (local[1], local[2], then local[2], local[1]) so a
  drifting load does not favour one; each round starts a fresh session and warms
  it up; 2 repetitions per round, interleaved in ``bench_spark.Bench.measure``.
* **Standalone runtime** (``bench_runtime.run``): the default job of ``pba-run``
  (DEBS'14-like, 84 plugs, ``W[1024, 1]``, max, sink ``none``) at parallelism 1
  and 2, with PBA and with SBA, interleaved, 3 repetitions.

Output: ``exp_scaling.json`` and ``exp_scaling_fig8.png`` in ``--out-dir``.

    python bench/exp_scaling.py                # ~5 min
    python bench/exp_scaling.py --smoke        # tiny sizes (~30 s: two Spark sessions)
    python bench/exp_scaling.py --no-spark     # the runtime only
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_runtime  # noqa: E402
import exp_common as C  # noqa: E402

SIZES = {
    "full": {"runtime_tuples": 4_000_000, "runtime_reps": 3, "spark_rows": 2_000_000, "spark_rounds": 2,
             "spark_reps_per_round": 2, "warm_up": True},
    "smoke": {"runtime_tuples": 30_000, "runtime_reps": 1, "spark_rows": 20_000, "spark_rounds": 1,
              "spark_reps_per_round": 1, "warm_up": False},
}
PARALLELISM = (1, 2)


def runtime_scaling(cfg: dict, reps: int) -> dict:
    """PBA and SBA jobs at parallelism 1 and 2 (``bench_runtime.run``), interleaved."""
    bench_runtime.run(min(cfg["runtime_tuples"], 200_000), 2)  # warm-up: forkserver, imports
    cases = {f"{a}_p{p}": (lambda a=a, p=p: bench_runtime.run(cfg["runtime_tuples"], p, algorithm=a))
             for a in ("pba", "sba") for p in PARALLELISM}
    runs = C.interleave(cases, reps, seed=8,
                        progress=lambda n, rep, s: print(f"  runtime {n:7s} rep {rep + 1}: "
                                                         f"{s['tuples_per_s'] / 1e6:5.2f} M tuples/s", flush=True))
    out = {}
    for name, summaries in runs.items():
        out[name] = {"tuples_per_s": C.spread(s["tuples_per_s"] for s in summaries),
                     "latency_ms_p50": C.spread(s["latency_ms"]["p50"] for s in summaries),
                     "latency_ms_p99": C.spread(s["latency_ms"]["p99"] for s in summaries),
                     "lcs_stalls": [s.get("lcs_stalls") for s in summaries]}
    return {"tuples": cfg["runtime_tuples"], "reps": reps, "job": "Debs14Source(plugs=84), W[1024,1], max, sink none",
            "configs": out}


def spark_scaling(cfg: dict) -> dict:
    """Our adapter, Spark's window function (segment tree) and the ceiling at local[1] and local[2]."""
    import bench_spark

    import pba_runtime as pr
    import spark_integration as si

    n = cfg["spark_rows"]
    win = pr.CountWindow(range=1024, slide=1)
    times: dict[str, dict[str, list[float]]] = {}
    order = [m for rnd in range(cfg["spark_rounds"])
             for m in (("local[1]", "local[2]") if rnd % 2 == 0 else ("local[2]", "local[1]"))]
    for master in order:
        print(f"== Spark {master}, {n:,} rows, {bench_spark.KEYS} keys", flush=True)
        spark = bench_spark.session(master)
        try:
            src = bench_spark.source(spark, n)

            def ours():
                return si.sliding_window_aggregate(src, key="k", order_by="t", value="v", window=win, agg="max")

            cases = {"ceiling": lambda: src.select("k", "t", "v").repartition("k").sortWithinPartitions("k", "t"),
                     "ours": ours,
                     "native_segtree": lambda: bench_spark.native_count(src, 1024)}
            for build in cases.values() if cfg["warm_up"] else ():  # warm-up: JIT, Python workers
                bench_spark.noop(build())
            b = bench_spark.Bench(spark, cfg["spark_reps_per_round"])
            b.measure(cases, {k: n for k in cases},
                      confs={"native_segtree": {"spark.sql.window.segmentTree.enabled": "true"}})
            for name, rec in b.results.items():
                times.setdefault(master, {}).setdefault(name, []).extend(rec["times_s"])
        finally:
            spark.stop()
    out = {m: {name: {"rows_per_s": C.spread(n / t for t in ts), "times_s": ts} for name, ts in cases_.items()}
           for m, cases_ in times.items()}
    return {"rows": n, "keys": bench_spark.KEYS, "window": "W[1024,1] count, max", "order": order,
            "masters": out}


def speedups(res: dict) -> dict:
    """Throughput at parallelism 2 over parallelism 1 (medians), per system."""
    s = {}
    rt = res.get("runtime", {}).get("configs", {})
    for a in ("pba", "sba"):
        if f"{a}_p1" in rt and f"{a}_p2" in rt:
            s[f"runtime_{a}"] = rt[f"{a}_p2"]["tuples_per_s"]["median"] / rt[f"{a}_p1"]["tuples_per_s"]["median"]
    sp = res.get("spark", {}).get("masters", {})
    if "local[1]" in sp and "local[2]" in sp:
        for name in sp["local[2]"]:
            s[f"spark_{name}"] = (sp["local[2]"][name]["rows_per_s"]["median"]
                                  / sp["local[1]"][name]["rows_per_s"]["median"])
    return s


def plots(res: dict, out: Path) -> list[str]:
    """Fig. 8a-like: throughput against parallelism, Spark and the standalone runtime side by side."""
    panels = []
    sp = res.get("spark", {}).get("masters", {})
    if sp:
        series = {name: [sp.get(f"local[{p}]", {}).get(name, {}).get("rows_per_s") for p in PARALLELISM]
                  for name in ("ours", "native_segtree", "ceiling")}
        panels.append({"title": "Spark adapter, local[1] / local[2]", "x": list(PARALLELISM),
                       "xlabel": "parallelism (local[n])", "ylabel": "rows/s", "ymin0": True,
                       "xticklabels": ["1", "2"], "series": series})
    rt = res.get("runtime", {}).get("configs", {})
    if rt:
        series = {a: [rt.get(f"{a}_p{p}", {}).get("tuples_per_s") for p in PARALLELISM] for a in ("pba", "sba")}
        panels.append({"title": "standalone runtime (pba-run)", "x": list(PARALLELISM), "xlabel": "parallelism",
                       "ylabel": "tuples/s", "ymin0": True, "xticklabels": ["1", "2"], "series": series})
    if not panels:
        return []
    f = C.plot_lines(out / "exp_scaling_fig8.png", panels,
                     "Fig. 8a-like: sliding max over W[1024,1], 84 keys, DEBS'14-like (2 shared cores)")
    return [f] if f else []


def main(argv: list[str] | None = None) -> dict:
    """Run the runtime and Spark parts; write ``exp_scaling.json`` and the PNG; return the JSON object."""
    def extra(ap):
        ap.add_argument("--no-spark", action="store_true", help="skip the Spark part")
        ap.add_argument("--no-runtime", action="store_true", help="skip the standalone-runtime part")

    args = C.parse_args(__doc__, argv, extra)
    cfg = dict(SIZES["smoke" if args.smoke else "full"])
    load = C.LoadLog()
    load.mark("start")
    code = C.code_state()
    t0 = time.time()
    res: dict = {"experiment": "scaling", "sizes": cfg, "smoke": args.smoke}
    if not args.no_runtime:
        print("== standalone runtime", flush=True)
        res["runtime"] = runtime_scaling(cfg, args.reps or cfg["runtime_reps"])
        load.mark("runtime")
    if not args.no_spark:
        res["spark"] = spark_scaling(cfg)
        load.mark("spark")
    res["speedup_p2_over_p1"] = speedups(res)
    res["wall_s"] = round(time.time() - t0, 1)
    res["machine"] = C.machine(load, code)
    res["plots"] = plots(res, args.out_dir)
    C.write_json(args.out_dir / "exp_scaling.json", res)
    print("speed-up p2/p1: " + ", ".join(f"{k} {v:.2f}x" for k, v in res["speedup_p2_over_p1"].items()))
    print(f"wrote {args.out_dir / 'exp_scaling.json'} ({res['wall_s']} s; load {res['machine']['load']['load1_max']})")
    return res


if __name__ == "__main__":
    main()
