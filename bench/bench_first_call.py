"""The first ``sliding_aggregate`` of a process against its steady calls (issue 40), each in a fresh process.

Each measurement is a fresh Python process of this tree that imports numpy, then times its first
``pr.sliding_aggregate(values, window=pr.CountWindow(range, 1), agg=...)`` (``import pba_runtime`` and the
attribute's import included, so everything the call makes the process load: the package's modules, numba,
the kernels from numba's disk cache) and then the same call again, ``--steady`` times (their median is the
steady call). Peers, interleaved in a shuffled order per repetition so every one sees the same load:

* ``lean``: the package as it is (its kernels loaded from the cache without numba's compiler set-up,
  :mod:`pba_runtime.kernels.lean_load`);
* ``numba_load``: the same process with numba's own load put back on the package's kernels (the cost before
  lean_load: the target context's refresh and the entry-points scan in the first call);
* ``phases`` (not timed against the others): the first call taken apart, ``import pba_runtime.api``, then
  ``import numba``, then the kernels' module, then the call; with ``NUMBA_DEBUG_CACHE`` on, so it also counts
  what does not depend on the machine's load: the cache files loaded, the kernels (dispatchers) the call
  touched and their signatures, the modules imported (numba's among them), whether numba's compiler set-up
  ran.

The warm-cache runs start after one priming process per aggregation (which compiles what the cache lacks).
``--cold`` adds runs each with an empty numba cache of its own (``NUMBA_CACHE_DIR``, a temporary directory
removed after): the first call then compiles its kernels. The children run with bytecode caching on, as an
installed package has (``PYTHONDONTWRITEBYTECODE`` is dropped from their environment; the JSON says so).

Medians with [min-max] over the repetitions, of wall time and of the process's CPU time (all its threads;
less dependent on the machine's load than the wall time); JSON to ``bench/results/first_call.json``.

    python bench/bench_first_call.py                 # 1M values, max sum mean std, 9 repetitions
    python bench/bench_first_call.py --cold          # and 3 cold-cache runs per aggregation
    python bench/bench_first_call.py --time          # the same over time windows (the fused kernels)
    python bench/bench_first_call.py --quick         # a smoke run: 100k values, 1 repetition, max and mean
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
AGGS = ["max", "sum", "mean", "std"]
PEERS = ["lean", "numba_load"]


# --------------------------------------------------------------------------- the child process
def _child(agg: str, n: int, range_: int, steady: int, variant: str, kind: str = "count") -> dict:
    """One fresh process's measurement (run as ``bench_first_call.py --child ...``); stdlib imports only
    before the timer starts (this module imports nothing else at its top)."""
    T = time.perf_counter
    t0 = T()
    import numpy as np

    t_numpy = T() - t0
    values = np.random.default_rng(0).random(n)
    stamps = np.arange(n, dtype=np.int64) * 10 if kind == "time" else None  # ms, one value each 10 ms
    out: dict = {"agg": agg, "variant": variant, "numpy_import_s": t_numpy}
    if variant == "phases":
        t = T()
        import pba_runtime.api  # noqa: F401

        out["import_api_s"] = T() - t
        t = T()
        import numba.core.base

        out["import_numba_s"] = T() - t
        refreshes = []  # numba's compiler set-up (the target context's refresh): a compile runs it, a load need not
        _refresh = numba.core.base.BaseContext.refresh
        numba.core.base.BaseContext.refresh = lambda self: (refreshes.append(1), _refresh(self))[1]
        t = T()
        import pba_runtime.kernels.compiled  # noqa: F401

        out["import_kernels_s"] = T() - t
    t = T()
    c = time.process_time()
    import pba_runtime as pr

    if variant == "numba_load":  # numba's own load on the kernels (what lean_load replaces)
        import importlib

        for name in ("compiled", *(("time_slicing", "time_fused") if kind == "time" else ())):
            for obj in vars(importlib.import_module(f"pba_runtime.kernels.{name}")).values():
                if hasattr(obj, "_cache"):
                    obj._cache.__dict__.pop("load_overload", None)
                    obj.__dict__.pop("_compilation_chain_init_hook", None)
    window = pr.TimeWindow(range=10 * range_, slide=10) if kind == "time" else pr.CountWindow(range=range_, slide=1)
    first = pr.sliding_aggregate(values, window=window, agg=agg, timestamps=stamps)
    out["first_s"] = T() - t
    out["first_cpu_s"] = time.process_time() - c  # the process's CPU (every thread): less load-dependent
    times, cpu = [], []
    for _ in range(steady):
        t = T()
        c = time.process_time()
        again = pr.sliding_aggregate(values, window=window, agg=agg, timestamps=stamps)
        times.append(T() - t)
        cpu.append(time.process_time() - c)
    out["steady_s"] = statistics.median(times) if times else None
    out["steady_cpu_s"] = statistics.median(cpu) if cpu else None
    out["same_results"] = bool(np.array_equal(first[1], again[1], equal_nan=True)) if times else None
    out["windows"] = int(len(first[0]))
    if variant == "phases":
        from numba.core.dispatcher import Dispatcher

        kernels = [m for name, m in sorted(sys.modules.items()) if name.startswith("pba_runtime.kernels.")]
        touched = {f"{m.__name__.rsplit('.', 1)[1]}.{name}": len(obj.overloads) for m in kernels
                   for name, obj in vars(m).items() if isinstance(obj, Dispatcher) and obj.overloads}
        out["kernels_touched"] = touched
        out["signatures_loaded"] = sum(touched.values())
        out["modules"] = len(sys.modules)
        out["numba_modules"] = sum(1 for m in sys.modules if m == "numba" or m.startswith("numba."))
        out["numba_setup_ran"] = bool(refreshes)
    return out


def _run_child(agg: str, n: int, range_: int, steady: int, variant: str, cache_dir: str | None = None,
               timeout: float = 900, kind: str = "count") -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR",
                                                            "NUMBA_DEBUG_CACHE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    if variant == "phases":
        env["NUMBA_DEBUG_CACHE"] = "1"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", agg, str(n), str(range_), str(steady), variant,
           kind]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"child {agg} {variant} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stdout.splitlines()
    res = json.loads(lines[-1])
    res["process_s"] = wall
    if variant == "phases":
        res["cache_index_loads"] = sum("index loaded from" in line for line in lines)
        res["cache_data_loads"] = sum("data loaded from" in line for line in lines)
        res["cache_saves"] = sum("data saved to" in line for line in lines)
    return res


# --------------------------------------------------------------------------- the parent
def _spread(xs: list[float]) -> dict:
    xs = [float(x) for x in xs if x is not None]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _fmt(s: dict, scale: float = 1e3) -> str:
    if not s["n"]:
        return "-"
    return f"{s['median'] * scale:.0f} [{s['min'] * scale:.0f}-{s['max'] * scale:.0f}]"


def _summary(runs: list[dict]) -> dict:
    over = [r["first_s"] - r["steady_s"] for r in runs if r.get("steady_s") is not None]
    return {"first_s": _spread([r["first_s"] for r in runs]), "steady_s": _spread([r["steady_s"] for r in runs]),
            "first_minus_steady_s": _spread(over), "process_s": _spread([r["process_s"] for r in runs]),
            "first_cpu_s": _spread([r["first_cpu_s"] for r in runs]),
            "steady_cpu_s": _spread([r["steady_cpu_s"] for r in runs]),
            "same_results": all(r.get("same_results") is not False for r in runs)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="values per call (default 1M)")
    ap.add_argument("--range", type=int, default=1024, dest="range_", help="window range, slide 1 (default 1024)")
    ap.add_argument("--aggs", default=",".join(AGGS), help="built-ins, comma-separated (default max,sum,mean,std)")
    ap.add_argument("--repeats", type=int, default=9, help="fresh processes per aggregation and peer (default 9)")
    ap.add_argument("--steady", type=int, default=5, help="calls after the first in each process (default 5)")
    ap.add_argument("--cold", action="store_true", help="also runs with an empty numba cache each")
    ap.add_argument("--cold-repeats", type=int, default=3, help="cold runs per aggregation (default 3)")
    ap.add_argument("--time", action="store_true", help="time windows instead: TimeWindow(10*range, 10), one "
                    "value each 10 ms (the fused time-window kernels)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 100k values, 1 repetition, max and mean")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/first_call.json)")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeats, args.steady, args.cold_repeats = 100_000, 1, 2, 1
        if args.aggs == ",".join(AGGS):
            args.aggs = "max,mean"
    aggs = [a for a in args.aggs.split(",") if a]
    kind = "time" if args.time else "count"
    name = "first_call_time" if args.time else "first_call"
    out_path = args.out or RESULTS / (f"{name}_quick.json" if args.quick else f"{name}.json")

    load = [("start", os.getloadavg())]
    for agg in aggs:  # priming: whatever the cache lacks is compiled here, not in a measured run
        _run_child(agg, min(args.n, 100_000), args.range_, 0, "lean", kind=kind)
    load.append(("primed", os.getloadavg()))

    rng = random.Random(0)
    runs: dict[str, dict[str, list]] = {agg: {p: [] for p in (*PEERS, "phases")} for agg in aggs}
    for rep in range(args.repeats):
        cases = [(agg, p) for agg in aggs for p in (*PEERS, "phases")]
        rng.shuffle(cases)
        for agg, peer in cases:
            runs[agg][peer].append(_run_child(agg, args.n, args.range_, args.steady, peer, kind=kind))
        print(f"repetition {rep + 1}/{args.repeats}, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    load.append(("warm done", os.getloadavg()))

    cold: dict[str, list] = {}
    if args.cold:
        for _ in range(args.cold_repeats):
            for agg in aggs:
                d = tempfile.mkdtemp(prefix="pba-first-call-cold-")
                try:
                    cold.setdefault(agg, []).append(_run_child(agg, args.n, args.range_, args.steady, "lean", d,
                                                               kind=kind))
                finally:
                    shutil.rmtree(d, ignore_errors=True)
        load.append(("cold done", os.getloadavg()))

    result: dict = {
        "what": "first sliding_aggregate of a fresh process (imports included) against its steady calls",
        "n": args.n,
        "window": ({"kind": "time", "range_ms": 10 * args.range_, "slide_ms": 10, "value_every_ms": 10}
                   if args.time else {"kind": "count", "range": args.range_, "slide": 1}), "repeats": args.repeats, "steady": args.steady,
        "bytecode_cache": True, "parent_pythondontwritebytecode": os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "python": sys.version.split()[0], "cpus": os.cpu_count(),
        "loadavg": {k: v for k, v in load}, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "warm": {}, "cold": {},
    }
    try:
        result["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                          text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        result["commit"] = ""
    what = f"TimeWindow({10 * args.range_} ms, 10 ms)" if args.time else f"W[{args.range_}, 1]"
    print(f"{args.n:,} values, {what}, fresh processes, warm cache, ms: median [min-max]")
    for agg in aggs:
        row: dict = {p: _summary(runs[agg][p]) for p in PEERS}
        ph = runs[agg]["phases"]
        row["phases"] = {k: _spread([r[k] for r in ph]) for k in
                         ("numpy_import_s", "import_api_s", "import_numba_s", "import_kernels_s", "first_s",
                          "steady_s", "first_cpu_s")}
        last = ph[-1]
        row["counts"] = {k: last[k] for k in ("kernels_touched", "signatures_loaded", "cache_index_loads",
                                              "cache_data_loads", "cache_saves", "modules", "numba_modules",
                                              "numba_setup_ran")}
        row["runs"] = runs[agg]
        result["warm"][agg] = row
        lean, old = row["lean"], row["numba_load"]
        p = row["phases"]
        print(f"  {agg:5s} first {_fmt(lean['first_s'])} (numba's load {_fmt(old['first_s'])}), steady "
              f"{_fmt(lean['steady_s'])} ms; first - steady {_fmt(lean['first_minus_steady_s'])}; CPU: first "
              f"{_fmt(lean['first_cpu_s'])} (numba's load {_fmt(old['first_cpu_s'])}), steady "
              f"{_fmt(lean['steady_cpu_s'])}; phases: api "
              f"{_fmt(p['import_api_s'])}, numba {_fmt(p['import_numba_s'])}, kernels module "
              f"{_fmt(p['import_kernels_s'])}, call {_fmt(p['first_s'])}; {row['counts']['cache_data_loads']} "
              f"cache files, {row['counts']['signatures_loaded']} signatures, "
              f"{row['counts']['numba_modules']} numba modules")
    for agg, rs in cold.items():
        result["cold"][agg] = {**_summary(rs), "runs": rs}
        print(f"  {agg:5s} cold cache: first {_fmt(result['cold'][agg]['first_s'])} ms (CPU "
              f"{_fmt(result['cold'][agg]['first_cpu_s'])}), steady {_fmt(result['cold'][agg]['steady_s'])} ms")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(out_path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(out_path)
    print(f"wrote {out_path}")
    return result


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        a, n_, r_, s_, v_, k_ = sys.argv[2:8]
        print(json.dumps(_child(a, int(n_), int(r_), int(s_), v_, k_)))
    else:
        main()
