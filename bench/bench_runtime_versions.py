"""``pba-run``'s default job, with and without sinks, in this tree against an older one, side by side.

Each configuration runs the tree's command in a fresh process (``python -m pba_runtime``, as ``pba-run``
runs it; ``python -m pba_runtime.cli`` in trees before ``pba_runtime/__main__.py``)
(``--metrics-json``), interleaved over rounds, each round in its own shuffled order (the machine is shared
and noisy, and a fixed order would favour whichever runs first or second); medians and the spread (min-max)
are reported, for

* the stream's tuples/s from the summary (in this tree the stream starts
  when every slot is ready; in older trees it included the slots' kernel
  warm-up, so the command's wall time is reported too), and
* the wall time of the whole command (start-up, stream and exit), and
* the CPU seconds of the coordinator and the slots during the stream (the
  figure a loaded machine disturbs least).

One untimed run of each configuration comes first (numba's disk cache of
each tree, the page cache).

``--sinks`` compares the sinks instead: no sink, CSV, Parquet and Arrow in each
tree, each sink also as a ratio to the same tree's run without a sink in the
same round (median [min-max] over the rounds).

    python bench/bench_runtime_versions.py --old /tmp/h18r-old            # 6M tuples, 3 rounds
    python bench/bench_runtime_versions.py --old /tmp/h18r-old --tuples 2000000 --rounds 2
    python bench/bench_runtime_versions.py --old /tmp/before-sinks --sinks --rounds 4
    python bench/bench_runtime_versions.py --old /tmp/main --sinks --agg std --rounds 6   # another aggregation
    python bench/bench_runtime_versions.py --old /tmp/main --sinks --formats csv,jsonl --rounds 6
    python bench/bench_runtime_versions.py --old /tmp/main --job --rounds 5 --json bench/results/runtime_job_versions.json
    python bench/bench_runtime_versions.py --old /tmp/main --base /tmp/issue-base --job --rounds 5

``--job`` compares the default job only (no sink, and with a CSV sink), each new run also as a ratio to
the old tree's run of the same round; ``--base <tree>`` adds a third, older tree to it (no sink: the issue's
baseline beside the current main), each new run also as a ratio to the base tree's of the same round.
``--json`` writes the raw runs with the 1-min load average of each round and each tree's commit
(``{"tuples", "rounds", "configs", "commits", "loadavg_per_round", "runs"}``). An old tree at the new
tree's commit is the pairing's own spread: what "new over old" reads when nothing changed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

CONFIGS = [  # (name, tree, extra arguments); {tmp} is a scratch directory
    ("old default (pba), no sink", "old", []),
    ("new default (auto -> sba), no sink", "new", []),
    ("new --algorithm pba, no sink", "new", ["--algorithm", "pba"]),
    ("old default, csv sink", "old", ["--sink", "csv:{tmp}/old.csv"]),
    ("new default, csv sink", "new", ["--sink", "csv:{tmp}/new.csv"]),
    ("new default, parquet sink", "new", ["--sink", "parquet:{tmp}/new-parquet"]),
    ("new default, arrow sink", "new", ["--sink", "arrow:{tmp}/new-arrow"]),
]
JOB_CONFIGS = [
    ("old default, no sink", "old", []),
    ("new default, no sink", "new", []),
    ("old default, csv sink", "old", ["--sink", "csv:{tmp}/old.csv"]),
    ("new default, csv sink", "new", ["--sink", "csv:{tmp}/new.csv"]),
]
BASE_CONFIG = ("base default, no sink", "base", [])
SINK_FORMATS = "csv,parquet,arrow"


def sink_configs(formats: str) -> list[tuple[str, str, list[str]]]:
    """``--sinks``: no sink and each of ``formats`` (comma-separated) in each tree."""
    return [(f"{tree} {sink}", tree, [] if sink == "no sink" else ["--sink", f"{sink}:{{tmp}}/{tree}-{sink}"])
            for tree in ("old", "new") for sink in ("no sink", *formats.split(","))]


def run_summary(tree: str, args: list[str], tuples: int, tmp: str) -> dict:
    """The default job with ``args`` as a fresh process of ``tree``'s command, in ``tmp``: its summary
    (``--metrics-json``), with the command's wall time added (``command_wall_s``)."""
    metrics = os.path.join(tmp, "m.json")
    env = dict(os.environ, PYTHONPATH=tree)
    command = "pba_runtime" if os.path.exists(os.path.join(tree, "pba_runtime", "__main__.py")) else "pba_runtime.cli"
    cmd = [sys.executable, "-m", command, "--no-progress", "-q", "--tuples", str(tuples),
           "--metrics-json", metrics] + args
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr}")
    return {**json.loads(Path(metrics).read_text()), "command_wall_s": wall}


def run_once(tree: str, args: list[str], tuples: int, tmp: str) -> dict:
    m = run_summary(tree, [a.format(tmp=tmp) for a in args], tuples, tmp)
    t, wall = m["time_s"], m["command_wall_s"]
    return {"rate": m["tuples_per_s"], "elapsed": m["elapsed_s"], "startup": m.get("startup_s"), "wall": wall,
            "coordinator_cpu": t["coordinator"]["process_cpu"], "slots_cpu": t["slots"]["process_cpu"],
            "stages_ns": stages_ns(t, tuples), "rusage": m.get("rusage")}


def tree_commit(tree: str) -> str | None:
    """The commit a tree (a checkout or worktree) is at, abbreviated, with ``+`` if its runtime code
    (``pba_runtime/``, what the runs measure) has changes; ``None`` outside git."""
    try:
        head = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", tree, "status", "--porcelain", "--untracked-files=no", "--", "pba_runtime"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def stages_ns(t: dict, tuples: int) -> dict[str, float]:
    """CPU ns a tuple of each stage, from a summary's ``time_s`` (slots: both together): the coordinator's
    source loop phases, its sink thread and its other threads (queue feeders), the slots' phases (their
    output stages' ``format`` and ``emit`` included) and other threads (queue feeders, pools), and each
    process's CPU outside those."""
    ns = 1e9 / tuples
    co, sk, sl = t["coordinator"], t["sink_thread"], t["slots"]
    out = {f"coordinator.{k}": v * ns for k, v in co["cpu"].items()}
    out["coordinator.sink_thread"] = sk["thread_cpu"] * ns
    out["coordinator.other_threads"] = co["other_threads_cpu"] * ns
    out["coordinator.untimed"] = max(0.0, co["process_cpu"] - sum(co["cpu"].values()) - sk["thread_cpu"]
                                     - co["other_threads_cpu"]) * ns
    out.update({f"slots.{k}": v * ns for k, v in sl["cpu"].items()})
    out["slots.other_threads"] = sl["other_threads_cpu"] * ns
    out["slots.untimed"] = max(0.0, sl["process_cpu"] - sum(sl["cpu"].values()) - sl["other_threads_cpu"]) * ns
    out["stream"] = (co["process_cpu"] + sl["process_cpu"]) * ns
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="a worktree of the older commit")
    p.add_argument("--tuples", type=int, default=6_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None, help="also write the raw runs here")
    p.add_argument("--sinks", action="store_true", help="no sink, csv, parquet, arrow in each tree")
    p.add_argument("--formats", default=SINK_FORMATS, help=f"with --sinks: the sinks (default {SINK_FORMATS})")
    p.add_argument("--job", action="store_true", help="the default job only, no sink and csv, old against new")
    p.add_argument("--base", default=None, help="with --job: a third, older tree (no sink)")
    p.add_argument("--agg", default=None, help="the job's aggregation (default: the default job's, max)")
    a = p.parse_args(argv)
    configs = sink_configs(a.formats) if a.sinks else JOB_CONFIGS if a.job else CONFIGS
    if a.job and a.base:
        configs = [BASE_CONFIG, *configs]
    if a.agg:
        configs = [(name, tree, [*args, "--agg", a.agg]) for name, tree, args in configs]
    loads = [list(os.getloadavg())]
    trees = {"old": str(Path(a.old).resolve()), "new": str(HERE)}
    if a.base:
        trees["base"] = str(Path(a.base).resolve())
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for _, tree, args in configs:  # untimed: numba's cache of each tree, the page cache
            run_once(trees[tree], args, min(a.tuples, 200_000), tmp)
        for r in range(a.rounds):  # each round in its own shuffled order: no configuration always runs first
            for name, tree, args in random.Random(r).sample(configs, len(configs)):
                runs[name].append(run_once(trees[tree], args, a.tuples, tmp))
                print(f"round {r + 1}: {name}: {runs[name][-1]['rate'] / 1e6:.2f}M tuples/s", file=sys.stderr)
            loads.append(list(os.getloadavg()))
    print(f"{a.tuples:,} tuples, {a.rounds} rounds interleaved; median [min-max]")
    print(f"{'configuration':38s} {'stream tuples/s':>26s} {'command wall s':>22s} {'cpu s (coord+slots)':>20s}"
          + ("  / no sink, same tree and round" if a.sinks else ""))
    for name, tree, _ in configs:
        xs = runs[name]
        rate = [x["rate"] / 1e6 for x in xs]
        wall = [x["wall"] for x in xs]
        cpu = [x["coordinator_cpu"] + x["slots_cpu"] for x in xs]
        extra = ""
        if a.sinks and not name.endswith("no sink"):
            q = [x["rate"] / n["rate"] for x, n in zip(xs, runs[f"{tree} no sink"])]
            extra = f"  {statistics.median(q):.2f}x [{min(q):.2f}-{max(q):.2f}]"
        if a.job and tree == "new":
            old = runs[name.replace("new", "old", 1)]
            q = [x["rate"] / o["rate"] for x, o in zip(xs, old)]
            qc = [(o["coordinator_cpu"] + o["slots_cpu"]) / (x["coordinator_cpu"] + x["slots_cpu"])
                  for x, o in zip(xs, old)]
            extra = (f"  new/old rate {statistics.median(q):.2f}x [{min(q):.2f}-{max(q):.2f}],"
                     f" old/new CPU {statistics.median(qc):.2f}x [{min(qc):.2f}-{max(qc):.2f}]")
            base = runs.get(BASE_CONFIG[0]) if name.endswith("no sink") else None
            if base:
                qb = [x["rate"] / b["rate"] for x, b in zip(xs, base)]
                extra += f"; new/base rate {statistics.median(qb):.2f}x [{min(qb):.2f}-{max(qb):.2f}]"
        print(f"{name:38s} {statistics.median(rate):9.2f}M [{min(rate):5.2f}-{max(rate):5.2f}] "
              f"{statistics.median(wall):8.2f} [{min(wall):4.2f}-{max(wall):4.2f}] {statistics.median(cpu):12.2f}"
              + extra)
    if a.sinks:
        print("\nCPU of the stream: no sink over this sink, same tree and round, median [min-max]")
        for name, tree, _ in configs:
            if name.endswith("no sink"):
                continue
            q = [(n["coordinator_cpu"] + n["slots_cpu"]) / (x["coordinator_cpu"] + x["slots_cpu"])
                 for x, n in zip(runs[name], runs[f"{tree} no sink"])]
            print(f"  {name:20s} {statistics.median(q):.2f}x [{min(q):.2f}-{max(q):.2f}]")
        names = [c[0] for c in configs]
        stage_keys = sorted({k for n in names for x in runs[n] for k in x["stages_ns"]})
        print("\nCPU ns a tuple by stage (medians over the rounds)")
        print(f"{'stage':28s}" + "".join(f"{n:>15s}" for n in names))
        for k in stage_keys:
            print(f"{k:28s}" + "".join(f"{statistics.median(x['stages_ns'].get(k, 0.0) for x in runs[n]):15.1f}"
                                       for n in names))
    print(f"1-min load average per round: {[round(x[0], 1) for x in loads]}")
    if a.json:
        commits = {name: tree_commit(path) for name, path in trees.items()}
        Path(a.json).write_text(json.dumps({"tuples": a.tuples, "rounds": a.rounds, "agg": a.agg or "max",
                                            "configs": [c[0] for c in configs],
                                            "commits": commits, "loadavg_per_round": loads, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
