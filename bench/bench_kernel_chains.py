"""The compiled merges alone, one thread: this tree's kernels against another version's, side by side.

Calls the merges of :mod:`pba_runtime.kernels.compiled` directly (no operator, no pool) on the same
values, interleaved with bottleneck's ``move_*`` and ``np.copyto``; M windows/s, median [min-max]
over repeats of CPU time (``time.thread_time``: a run preempted by another process on a loaded
machine is not charged for the wait). ``--old FILE``: a copy of an older ``compiled.py`` (e.g. from ``git show``) timed beside.

    git show HEAD~3:pba_runtime/kernels/compiled.py > /tmp/old/old_compiled.py
    python bench/bench_kernel_chains.py --old /tmp/old/old_compiled.py
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time

import numpy as np

from pba_runtime.kernels import compiled as new


def _load(path):
    """Import the file at ``path`` as a top-level module (numba's disk cache needs an importable name)."""
    folder, name = os.path.split(os.path.abspath(path))
    sys.path.insert(0, folder)
    return importlib.import_module(os.path.splitext(name)[0])


def _calls(C, agg, x, q):
    """A function running ``agg``'s slide-1 merge of module ``C`` over ``x`` (windows of ``q`` values)."""
    n = len(x)
    nwin = n - q + 1
    ends = np.empty(0, dtype=np.int64)
    m = 2 * q if hasattr(C, "_argmax_lcs_csa2") else q  # argmax's scratch: two rows since the pairs
    ls = 2 * q if hasattr(C, "_sum_rows") and agg == "sum" else q  # the one-loop sum: two rows of lcs
    if agg in ("sum", "max"):
        out = np.empty(nwin)
        op = new.ADD if agg == "sum" else new.MAX
        return lambda: C.merge_scalar(x, q, 0, nwin, out, ends, 0, 1, op, np.empty(ls), np.empty(q))
    if agg == "mean":
        out = np.empty(nwin)
        return lambda: C.mean_from_values(x, q, 0, nwin, out, ends, 0, 1, np.empty(ls), np.empty(q))
    if agg == "std":
        out = np.empty(nwin)
        shape = (2, q) if m == 2 * q else (q, 2)
        return lambda: C.std_from_values(x, q, 0, nwin, out, ends, 0, 1, np.empty(shape), np.empty(shape))
    if agg == "argmax":
        out = np.empty(nwin, dtype=np.int64)
        if hasattr(C, "_lcs_records"):  # the records' kernel: (position, value) scratch of q for each part
            return lambda: C.argmax_from_values(x, q, 0, nwin, out, ends, 0, 1, np.empty(q, dtype=np.int64),
                                                np.empty(q), np.empty(q, dtype=np.int64), np.empty(q), 0)
        if m == q:
            return lambda: C.argmax_from_values(x, q, 0, nwin, out, ends, 0, 1, np.empty(q, dtype=np.int64),
                                                np.empty(q, dtype=np.int64), 0)
        return lambda: C.argmax_from_values(x, q, 0, nwin, out, ends, 0, 1, np.empty(m, dtype=np.int64),
                                            np.empty(m, dtype=np.int64), np.empty(m), np.empty(m), 0)
    raise ValueError(f"agg must be sum, max, mean, std or argmax, got {agg!r}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", help="path of an older compiled.py to time beside this tree's")
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--aggs", default="sum,max,mean,std,argmax")
    p.add_argument("--exps", default="10,13,17")
    a = p.parse_args(argv)
    import bottleneck as bn

    mods = {"new": new}
    if a.old:
        mods = {"old": _load(a.old), "new": new}
    x = np.random.default_rng(0).normal(size=a.n)
    peer = {"sum": bn.move_sum, "max": bn.move_max, "mean": bn.move_mean, "argmax": bn.move_argmax,
            "std": lambda v, w: bn.move_std(v, w, ddof=1)}
    cp = np.empty_like(x)
    for agg in a.aggs.split(","):
        for e in map(int, a.exps.split(",")):
            q = 1 << e
            fs = {k: _calls(C, agg, x, q) for k, C in mods.items()}
            fs["bottleneck"] = lambda q=q, agg=agg: peer[agg](x, q)
            fs["copyto"] = lambda: np.copyto(cp, x)
            for f in fs.values():
                f()
            t = {k: [] for k in fs}
            for _ in range(a.repeat):
                for k, f in fs.items():
                    t0 = time.thread_time()
                    f()
                    t[k].append(time.thread_time() - t0)
            cells = []
            for k, v in t.items():
                r = sorted(a.n / s / 1e6 for s in v)
                cells.append(f"{k} {statistics.median(r):.0f} [{r[0]:.0f}-{r[-1]:.0f}]")
            ratio = statistics.median(t["bottleneck"]) / statistics.median(t["new"])
            print(f"{agg:>6} 2^{e:<2} " + "  ".join(cells) + f"  new/bottleneck x{ratio:.2f}", flush=True)


if __name__ == "__main__":
    main()
