"""A query job of ``pba-run`` against its one-output job and against one job per output, side by side.

Each repetition runs, in a shuffled order, fresh ``pba-run`` processes of this tree (``python -m pba_runtime``,
as users run it; the default stream: DEBS'14-like, 84 plugs, parallelism 2, ``--algorithm auto``):

* ``one``: the default job, ``--agg max --range 1024``;
* ``query``: ``--agg max,mean,std --range 256,1024,4096`` (9 outputs, one row per (key, window end));
* ``per_output``: the 9 outputs as 9 jobs of one output each (what a user ran before ``--agg a,b``): their
  stream seconds summed.

Reported per configuration: the tuples/s of the stream (after start-up, from ``--metrics-json``), median and
min-max over the repetitions, and the ratios of the same repetition: ``query / one`` and
``query / per_output``. ``--sink csv`` writes each job's results to a CSV file in a temporary directory.

    python bench/bench_runtime_query.py               # 6M tuples, 5 repetitions
    python bench/bench_runtime_query.py --quick       # 1M tuples, 2 repetitions
    python bench/bench_runtime_query.py --sink csv
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
AGGS = ("max", "mean", "std")
RANGES = ("256", "1024", "4096")


def job(tuples: int, aggs: str, ranges: str, sink: str, tmp: str, name: str) -> float:
    """Stream seconds of one fresh ``pba-run`` (start-up excluded)."""
    metrics = os.path.join(tmp, f"{name}.json")
    spec = "none" if sink == "none" else f"{sink}:{os.path.join(tmp, name + '.' + sink)}"
    subprocess.run([sys.executable, "-m", "pba_runtime", "--quiet", "--no-progress", "--tuples", str(tuples),
                    "--agg", aggs, "--range", ranges, "--sink", spec, "--metrics-json", metrics],
                   check=True, timeout=1800)
    with open(metrics) as f:
        return json.load(f)["elapsed_s"]


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=6_000_000)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sink", default="none", choices=("none", "csv"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tuples = 1_000_000 if args.quick else args.tuples
    repeats = args.repeats or (2 if args.quick else 5)
    rng = random.Random(7)
    rates: dict[str, list[float]] = {"one": [], "query": [], "per_output": []}
    ratios: dict[str, list[float]] = {"query/one": [], "query/per_output": []}
    with tempfile.TemporaryDirectory() as tmp:
        job(100_000, "max", "1024", args.sink, tmp, "warm")  # numba's cache, the forkserver's first start
        job(100_000, ",".join(AGGS), ",".join(RANGES), args.sink, tmp, "warm")
        for rep in range(repeats):
            order = ["one", "query", "per_output"]
            rng.shuffle(order)
            got = {}
            for what in order:
                if what == "one":
                    got[what] = job(tuples, "max", "1024", args.sink, tmp, "one")
                elif what == "query":
                    got[what] = job(tuples, ",".join(AGGS), ",".join(RANGES), args.sink, tmp, "query")
                else:
                    got[what] = sum(job(tuples, a, r, args.sink, tmp, f"{a}_{r}") for r in RANGES for a in AGGS)
            for what, seconds in got.items():
                rates[what].append(tuples / seconds)
            ratios["query/one"].append(got["one"] / got["query"])
            ratios["query/per_output"].append(got["per_output"] / got["query"])
            print(f"rep {rep}: " + ", ".join(f"{w} {tuples / s / 1e6:.2f}M tuples/s" for w, s in got.items()),
                  flush=True)
    result = {
        "what": "pba-run default stream: one output (max W[1024]) vs a 9-output query (max,mean,std x "
                "W[256], W[1024], W[4096]) vs the 9 outputs as 9 jobs; tuples/s of the stream (start-up excluded)",
        "command": " ".join(["python", "bench/bench_runtime_query.py", *sys.argv[1:]]),
        "tuples": tuples, "repeats": repeats, "sink": args.sink, "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "tuples_per_s": {w: spread(xs) for w, xs in rates.items()},
        "ratios": {w: spread(xs) for w, xs in ratios.items()},
    }
    out = Path(args.out) if args.out else RESULTS / ("runtime_query.json" if args.sink == "none"
                                                     else f"runtime_query_{args.sink}.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    for w, s in result["tuples_per_s"].items():
        print(f"{w:11s} {s['median'] / 1e6:6.2f}M tuples/s ({s['min'] / 1e6:.2f}-{s['max'] / 1e6:.2f})")
    for w, s in result["ratios"].items():
        print(f"{w:17s} {s['median']:.3f}x ({s['min']:.3f}-{s['max']:.3f})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
