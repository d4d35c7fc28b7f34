"""Old commit against new, side by side: run one benchmark on two checkouts, alternately, and compare.

Each round runs the benchmark once on the old tree, then once on the new one (each a fresh
process with the tree first on ``sys.path``), so a change in the machine's load hits both
sides of a pair alike. Every throughput figure of the benchmark's JSON (keys ending in
``per_s``) is then reported as the median over rounds of the paired ratios new / old, with
their spread.

    git worktree add /tmp/old <rev>
    python bench/ab.py --old /tmp/old bench_core.py --quick
    python bench/ab.py --old /tmp/old --rounds 3 bench_baselines.py --quick

Arguments after the benchmark's name go to the benchmark (it must accept ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def throughputs(doc, path: str = "", rate: bool = False) -> dict[str, float]:
    """Every number under a ``...per_s`` key of a benchmark's JSON, keyed by a readable path (list items by
    their range)."""
    out: dict[str, float] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("machine", "args"):
                continue
            out.update(throughputs(v, f"{path}/{k}" if path else str(k), rate or str(k).endswith("per_s")))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            label = v.get("range", i) if isinstance(v, dict) else i
            out.update(throughputs(v, f"{path}[{label}]", rate))
    elif rate and isinstance(doc, (int, float)) and not isinstance(doc, bool):
        out[path] = float(doc)
    return out


def run_once(tree: Path, bench: str, args: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ, PYTHONPATH=str(tree))
        cmd = [sys.executable, str(HERE / bench), *args, "--out", out]
        subprocess.run(cmd, check=True, env=env, cwd=tmp, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return throughputs(json.load(f))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, type=Path, help="checkout of the old commit")
    ap.add_argument("--new", default=HERE.parent, type=Path, help="checkout of the new commit (default: this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("bench", help="a script in bench/, e.g. bench_core.py")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    old: list[dict[str, float]] = []
    new: list[dict[str, float]] = []
    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
        old.append(run_once(a.old.resolve(), a.bench, a.args))
        new.append(run_once(a.new.resolve(), a.bench, a.args))
    keys = [k for k in old[0] if all(k in d for d in old + new)]
    width = max((len(k) for k in keys), default=10)
    print(f"{'figure':{width}s}  {'old':>12s}  {'new':>12s}  new/old: median of paired ratios (min-max)")
    for k in keys:
        ratios = [n[k] / o[k] for o, n in zip(old, new) if o[k]]
        if not ratios:
            continue
        print(f"{k:{width}s}  {statistics.median(d[k] for d in old):12.4g}  {statistics.median(d[k] for d in new):12.4g}"
              f"  {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
