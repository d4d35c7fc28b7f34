"""Throughput of the standalone runtime's default job at parallelism 1 and 2, and where the time goes.

The default job of ``pba-run``: a DEBS'14-like stream over 84 plugs, count
window W[1024, 1], ``max``, PBA, sink ``none``. Configurations are interleaved
and repeated; medians are reported (the machine is shared and noisy).

Where the time goes is measured in CPU seconds per phase, by every process's
own :class:`pba_runtime.runtime.metrics.PhaseClock` (thread CPU time), grouped:

* aggregation: the slots' ``insert_many`` calls plus their lcs worker-pool threads
* grouping: the slots' stable sort of each batch by key
* source: generating the batches
* partitioning: hashing keys to slots and splitting each batch
* queues: putting on / getting from the bounded queues (pickling, pipe I/O)
  on both sides, the coordinator's queue feeder threads included
* sink: formatting results (in the slots) and writing them (sink thread)

One more run per parallelism is profiled with cProfile (every process) and
the top functions by own time are kept in the JSON.

``--sinks`` measures the sinks instead: the default job (``--algorithm auto``, which
runs SBA at W[1024, 1]; parallelism 2) with no sink, ``csv:``, ``parquet:`` and
``arrow:`` interleaved in a shuffled order per repetition, each run a fresh ``pba-run``
process of this tree (``python -m pba_runtime``, as users run it; ``--in-process`` runs
them in this process instead); per configuration the median and min-max of tuples/s, each sink's
ratio to the run without a sink *of the same repetition* (median and min-max
over the repetitions), CPU seconds per category, and one cProfile run of each
sink (``bench/results/runtime_sinks.json``).

    python bench/bench_runtime.py            # 6M tuples, 5 repeats
    python bench/bench_runtime.py --quick    # 2M tuples, 2 repeats
    python bench/bench_runtime.py --sinks    # no sink vs csv vs parquet vs arrow, 6M tuples, 7 repeats
    python bench/bench_runtime.py --stages   # the default job's CPU per stage and process (runtime_stages.json)

Jobs run in this process (all but ``--sinks``'s; their coordinator's source loop and sink thread) tune its
allocator as ``pba-run`` tunes its own (:mod:`pba_runtime.runtime.malloc_tuning`; ``--glibc-malloc`` leaves
glibc's thresholds: then the source loop's batch arrays are fresh pages, ~3 faults per 1,000 tuples, and it
costs ~4-5 ns a tuple more). ``--sinks`` also reports each sink's CPU per stage and process, the CPU ratio to
the run without a sink of the same repetition, and what the kernel did per thread (minor faults, context
switches, from ``getrusage``); ``--which`` runs a subset of the sinks, ``--no-profile`` skips the cProfile runs.

``--stages`` profiles the default job as ``pba-run`` runs it (``--algorithm auto``, no sink), at the
default batch size and at 4x it, interleaved: CPU ns a tuple of each stage, the coordinator's apart from
the slots' (medians over the repetitions), and the tuples/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pstats
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_runtime_versions import run_summary

import pba_runtime as pr
from pba_runtime.runtime import Debs14Source, Job

RESULTS = Path(__file__).resolve().parent / "results"
TREE = Path(__file__).resolve().parent.parent
WINDOW = pr.CountWindow(range=1024, slide=1)


def run(tuples: int, parallelism: int, *, algorithm: str = "pba", sink: str = "none", batch_size: int = 65_536,
        profile_dir: str | None = None) -> dict:
    job = Job(Debs14Source(plugs=84, tuples=tuples), WINDOW, "max", algorithm, parallelism=parallelism,
              sink=sink, batch_size=batch_size, profile_dir=profile_dir)
    return job.run()


def run_fresh(tuples: int, sink: str, tmp: str, profile_dir: str | None = None) -> dict:
    """The default job as a fresh ``pba-run`` process of this tree (``python -m pba_runtime``, as users run it):
    its summary, with the command's wall time (``command_wall_s``; :func:`bench_runtime_versions.run_summary`)."""
    args = ["--sink", sink] + (["--profile", profile_dir] if profile_dir else [])
    return run_summary(str(TREE), args, tuples, tmp)


def categories(summary: dict) -> dict[str, float]:
    """CPU seconds per category (see the module doc)."""
    t = summary["time_s"]
    sl, co, sk = t["slots"], t["coordinator"], t["sink_thread"]
    cpu, ccpu = sl["cpu"], co["cpu"]
    cats = {
        "aggregation": cpu.get("aggregate", 0.0) + sl["other_threads_cpu"],
        "grouping": cpu.get("group", 0.0),
        "source": ccpu.get("source", 0.0),
        "partitioning": ccpu.get("partition", 0.0),
        "queues": ccpu.get("queue_put", 0.0) + co["other_threads_cpu"] + cpu.get("receive", 0.0)
        + cpu.get("emit", 0.0),
        "sink": cpu.get("format", 0.0) + sk["thread_cpu"],
    }
    total = sl["process_cpu"] + co["process_cpu"]
    cats["other"] = max(0.0, total - sum(cats.values()))
    return cats


def top_functions(path: str, n: int = 12) -> list[str]:
    st = pstats.Stats(path)
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:n]
    total = sum(v[2] for v in st.stats.values()) or 1.0
    out = []
    for (file, line, fn), (_, ncalls, tt, _ct, _) in rows:
        where = fn if file == "~" else f"{Path(file).parent.name}/{Path(file).name}:{line}({fn})"
        out.append(f"{tt:7.3f} s {tt / total:5.1%}  {ncalls:>7} calls  {where}")
    return out


def spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs), "all": xs}


SINKS = ("none", "csv", "parquet", "arrow")


def kernel_counts(summary: dict, tuples: int) -> dict[str, float]:
    """What the kernel did per thread (the summary's ``rusage``), per tuple: system CPU ns, minor page faults
    and voluntary / involuntary context switches per 1,000 tuples; slots summed over the slots."""
    ru = summary.get("rusage", {})
    out: dict[str, float] = {}

    def add(where: str, d: dict) -> None:
        for k, v in d.items():
            name = f"{where}.{k}"
            out[name] = out.get(name, 0.0) + (v * 1e9 / tuples if k == "sys_s" else v * 1e3 / tuples)

    for where, d in ru.get("coordinator", {}).items():
        add(f"coordinator.{where}", d)
    for slot in ru.get("slots", {}).values():
        for where, d in slot.items():
            add(f"slots.{where}", d)
    return out


def sinks_main(args: argparse.Namespace) -> None:
    """The default job with no sink, a CSV, a Parquet and an Arrow sink, interleaved (see the module doc)."""
    sinks = tuple(args.which.split(",")) if args.which else SINKS
    runs: dict[str, list[dict]] = {k: [] for k in sinks}
    load = [list(os.getloadavg())]
    order = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        def spec(name: str) -> str:
            return "none" if name == "none" else f"{name}:{os.path.join(tmp, 'out.' + name)}"

        def job(name: str, tuples: int, profile_dir: str | None = None) -> dict:
            if args.in_process:
                return run(tuples, 2, algorithm="auto", sink=spec(name), profile_dir=profile_dir)
            return run_fresh(tuples, spec(name), tmp, profile_dir)

        for name in sinks:  # warm-up: each sink's modules and compiled loops (numba's cache), the page cache
            job(name, 200_000)
        for rep in range(args.repeats):
            names = list(sinks)
            order.shuffle(names)
            for name in names:
                s = job(name, args.tuples)
                runs[name].append(s)
                print(f"[{rep + 1}/{args.repeats}] {name:8s} {s['tuples_per_s'] / 1e6:6.2f} M tuples/s", flush=True)
            load.append(list(os.getloadavg()))
        profiles = {}
        for name in (n for n in sinks if n != "none" and not args.no_profile):
            d = os.path.join(tmp, f"prof-{name}")
            job(name, args.tuples, profile_dir=d)
            profiles[name] = {f[:-5]: top_functions(os.path.join(d, f)) for f in sorted(os.listdir(d))
                              if f.endswith(".prof")}
    results = {}
    for name, rs in runs.items():
        cats = [categories(s) for s in rs]
        results[name] = {
            "tuples_per_s": spread([s["tuples_per_s"] for s in rs]),
            "ratio_to_no_sink": None if name == "none" or "none" not in runs else spread(
                [s["tuples_per_s"] / n["tuples_per_s"] for s, n in zip(rs, runs["none"])]),
            "cpu_ratio_to_no_sink": None if name == "none" or "none" not in runs else spread(
                [_cpu(n) / _cpu(s) for s, n in zip(rs, runs["none"])]),
            "stages_ns_per_tuple_median": _median_nested([stages(s, args.tuples) for s in rs]),
            "kernel_per_tuple_median": _median_nested([kernel_counts(s, args.tuples) for s in rs]),
            "cpu_s_median": {k: statistics.median(c[k] for c in cats) for k in cats[0]},
            "cpu_ns_per_tuple_median": {k: 1e9 * statistics.median(c[k] for c in cats) / args.tuples
                                        for k in cats[0]},
            "cpu_total_s_median": statistics.median(sum(c.values()) for c in cats),
            "slot_format_cpu_s_median": statistics.median(s["time_s"]["slots"]["cpu"].get("format", 0.0) for s in rs),
            "sink_thread_cpu_s_median": statistics.median(s["time_s"]["sink_thread"]["thread_cpu"] for s in rs),
        }
    out = {"what": "pba-run default job (DEBS'14-like, 84 plugs, count W[1024, 1], max, algorithm auto (SBA), "
                   "parallelism 2): "
                   "no sink vs csv vs parquet vs arrow, interleaved, "
                   + ("in this process" if args.in_process else "each run a fresh pba-run process"),
           "how": "in-process" if args.in_process else "fresh pba-run processes",
           "tuples": args.tuples, "repeats": args.repeats, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
                       "loadavg_per_repetition": load,
                       "note": "2 cores shared with other engineers' jobs: compare ratios within one repetition"},
           "results": results, "profiles_top_tottime": profiles}
    path = Path(args.out if args.out != str(RESULTS / "runtime.json") else RESULTS / "runtime_sinks.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"\n{'sink':8s} {'M tuples/s median [min-max]':>28s} {'/ no sink, same rep: median [min-max]':>40s} "
          f"{'CPU s':>6s}")
    for name, r in results.items():
        t, q = r["tuples_per_s"], r["ratio_to_no_sink"]
        print(f"{name:8s} {t['median'] / 1e6:12.2f} [{t['min'] / 1e6:.2f}-{t['max'] / 1e6:.2f}] "
              + (f"{q['median']:22.2f}x [{q['min']:.2f}-{q['max']:.2f}]" if q else f"{'':33s}")
              + f" {r['cpu_total_s_median']:6.2f}")
    for name, r in results.items():
        print(f"\n{name}: CPU ratio {r['cpu_ratio_to_no_sink']}; CPU ns a tuple (medians):")
        for proc, st in r["stages_ns_per_tuple_median"].items():
            print(f"  {proc:12s} " + ", ".join(f"{k} {v:.1f}" for k, v in st.items()))
        print("  kernel (sys ns a tuple; faults, switches per 1K tuples): " + ", ".join(
            f"{k} {v:.2f}" for k, v in r["kernel_per_tuple_median"].items()))
    print(f"load average per repetition: {load}\nwritten to {path}")


def _cpu(summary: dict) -> float:
    t = summary["time_s"]
    return t["slots"]["process_cpu"] + t["coordinator"]["process_cpu"]


def _median_nested(xs: list[dict]) -> dict:
    """Medians key by key of dicts of numbers (or of dicts of numbers)."""
    out: dict = {}
    for k, v in xs[0].items():
        if isinstance(v, dict):
            out[k] = _median_nested([x[k] for x in xs])
        else:
            out[k] = statistics.median(x.get(k, 0.0) for x in xs)
    return out


def stages(summary: dict, tuples: int) -> dict[str, dict[str, float]]:
    """CPU ns a tuple per stage, ``{"coordinator": {...}, "slots": {...}}`` (slots: both together)."""
    t = summary["time_s"]
    co, sl, sk = t["coordinator"], t["slots"], t["sink_thread"]
    ns = 1e9 / tuples
    coord = {k: v * ns for k, v in co["cpu"].items()}
    coord["sink_thread"] = sk["thread_cpu"] * ns
    coord["queue_feeder_threads"] = max(0.0, co["other_threads_cpu"] - sk["thread_cpu"]) * ns
    coord["total"] = co["process_cpu"] * ns
    slots = {k: v * ns for k, v in sl["cpu"].items()}
    slots["other_threads"] = sl["other_threads_cpu"] * ns
    slots["total"] = sl["process_cpu"] * ns
    return {"coordinator": coord, "slots": slots}


def stages_main(args: argparse.Namespace) -> None:
    """The default job's CPU per stage and process, at two batch sizes (see the module doc)."""
    configs = {"batch 65,536 (default)": 65_536, "batch 262,144": 262_144}
    runs: dict[str, list[dict]] = {k: [] for k in configs}
    load = [list(os.getloadavg())]
    run(200_000, 2, algorithm="auto")  # warm-up: forkserver, imports
    for rep in range(args.repeats):
        for name, bs in configs.items():
            s = run(args.tuples, 2, algorithm="auto", batch_size=bs)
            runs[name].append(s)
            print(f"[{rep + 1}/{args.repeats}] {name:24s} {s['tuples_per_s'] / 1e6:6.2f} M tuples/s", flush=True)
        load.append(list(os.getloadavg()))
    results = {}
    for name, rs in runs.items():
        st = [stages(s, args.tuples) for s in rs]
        results[name] = {
            "tuples_per_s": spread([s["tuples_per_s"] for s in rs]),
            "latency_ms_p50_median": statistics.median(s["latency_ms"]["p50"] for s in rs),
            "cpu_ns_per_tuple_median": {proc: {k: statistics.median(x[proc].get(k, 0.0) for x in st)
                                               for k in st[0][proc]} for proc in ("coordinator", "slots")},
        }
    out = {"what": "pba-run default job (DEBS'14-like, 84 plugs, count W[1024, 1], max, algorithm auto (SBA), "
                   "parallelism 2, no sink), in-process: CPU ns a tuple per stage and process",
           "tuples": args.tuples, "repeats": args.repeats, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
                       "loadavg_per_repetition": load},
           "results": results}
    path = Path(args.out if args.out != str(RESULTS / "runtime.json") else RESULTS / "runtime_stages.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=str))
    for name, r in results.items():
        t = r["tuples_per_s"]
        print(f"\n{name}: {t['median'] / 1e6:.2f}M tuples/s [{t['min'] / 1e6:.2f}-{t['max'] / 1e6:.2f}], "
              f"p50 latency {r['latency_ms_p50_median']:.1f} ms; CPU ns a tuple (medians):")
        for proc, st in r["cpu_ns_per_tuple_median"].items():
            print(f"  {proc:12s} " + ", ".join(f"{k} {v:.1f}" for k, v in st.items()))
    print(f"load average per repetition: {[round(x[0], 1) for x in load]}\nwritten to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=6_000_000)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sinks", action="store_true", help="no sink vs csv vs parquet vs arrow (runtime_sinks.json)")
    ap.add_argument("--stages", action="store_true", help="the default job's CPU per stage (runtime_stages.json)")
    ap.add_argument("--out", default=str(RESULTS / "runtime.json"))
    ap.add_argument("--which", default=None, help="--sinks: a comma-separated subset of none,csv,parquet,arrow")
    ap.add_argument("--glibc-malloc", action="store_true",
                    help="leave this process's allocator (the in-process coordinator's) as glibc sets it; by default "
                         "it is tuned as pba-run tunes its own (runtime/malloc_tuning.py)")
    ap.add_argument("--no-profile", action="store_true", help="--sinks: skip the cProfile run of each sink")
    ap.add_argument("--in-process", action="store_true",
                    help="--sinks: run the jobs in this process (their coordinator here, their slots from one "
                         "forkserver) instead of as fresh pba-run processes")
    args = ap.parse_args()
    if not args.glibc_malloc:  # the coordinator runs in this process: its allocator as pba-run's
        from pba_runtime.runtime.malloc_tuning import keep_freed_memory

        keep_freed_memory()
    if args.stages:
        args.repeats = args.repeats or (2 if args.quick else 7)
        stages_main(args)
        return
    if args.sinks:
        args.repeats = args.repeats or (3 if args.quick else 7)
        if args.quick:
            args.tuples = 2_000_000
        sinks_main(args)
        return
    args.repeats = args.repeats or 5
    if args.quick:
        args.tuples, args.repeats = 2_000_000, 2
    configs = {
        "pba_p1": dict(parallelism=1),
        "pba_p2": dict(parallelism=2),
        "sba_p1": dict(parallelism=1, algorithm="sba"),
        "sba_p2": dict(parallelism=2, algorithm="sba"),
        "pba_p2_csv_sink": dict(parallelism=2, sink="csv"),
        "pba_p2_batch_8k": dict(parallelism=2, batch_size=8_192),
        "pba_p2_batch_256k": dict(parallelism=2, batch_size=262_144),
    }
    runs: dict[str, list[dict]] = {k: [] for k in configs}
    load_before = os.getloadavg()
    run(200_000, 2)  # warm-up: forkserver, imports
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for name, cfg in configs.items():
                cfg = dict(cfg)
                if cfg.get("sink") == "csv":
                    cfg["sink"] = f"csv:{os.path.join(tmp, 'out.csv')}"
                s = run(args.tuples, **cfg)
                runs[name].append(s)
                print(f"[{rep + 1}/{args.repeats}] {name:18s} {s['tuples_per_s'] / 1e6:6.2f} M tuples/s  "
                      f"p50 {s['latency_ms']['p50']:6.1f} ms  p99 {s['latency_ms']['p99']:6.1f} ms", flush=True)
        profiles = {}
        for P in (1, 2):
            d = os.path.join(tmp, f"prof{P}")
            run(args.tuples, P, profile_dir=d)
            profiles[f"pba_p{P}"] = {name[:-5]: top_functions(os.path.join(d, name))
                                     for name in sorted(os.listdir(d)) if name.endswith(".prof")}

    results = {}
    for name, rs in runs.items():
        cats = [categories(s) for s in rs]
        med_cats = {k: statistics.median(c[k] for c in cats) for k in cats[0]}
        total = sum(med_cats.values())
        results[name] = {
            "config": {k: (v if k != "sink" else v.split(":")[0]) for k, v in configs[name].items()},
            "tuples_per_s_median": statistics.median(s["tuples_per_s"] for s in rs),
            "tuples_per_s_best": max(s["tuples_per_s"] for s in rs),
            "tuples_per_s_all": [round(s["tuples_per_s"]) for s in rs],
            "latency_ms_p50_median": statistics.median(s["latency_ms"]["p50"] for s in rs),
            "latency_ms_p99_median": statistics.median(s["latency_ms"]["p99"] for s in rs),
            "lcs_stalls_median": statistics.median(s["lcs_stalls"] for s in rs),
            "cpu_s_median": med_cats,
            "cpu_share": {k: v / total for k, v in med_cats.items()} if total else {},
            "cpu_total_s_median": total,
            "last_summary": rs[-1],
        }
    out = {
        "what": "pba-run default job: DEBS'14-like, 84 plugs, count W[1024, 1], max, sink none unless stated",
        "tuples": args.tuples,
        "repeats": args.repeats,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg(),
                    "note": "shared machine: other engineers' jobs run beside; compare configurations within one run"},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "results": results,
        "profiles_top_tottime": profiles,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2, default=str))
    print()
    print(f"{'config':18s} {'M tuples/s':>10s} {'best':>6s} {'p50 ms':>7s} {'p99 ms':>7s}  cpu share")
    for name, r in results.items():
        shares = ", ".join(f"{k} {v:.0%}" for k, v in sorted(r["cpu_share"].items(), key=lambda kv: -kv[1])
                           if v >= 0.005)
        print(f"{name:18s} {r['tuples_per_s_median'] / 1e6:10.2f} {r['tuples_per_s_best'] / 1e6:6.2f} "
              f"{r['latency_ms_p50_median']:7.1f} {r['latency_ms_p99_median']:7.1f}  {shares}")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
