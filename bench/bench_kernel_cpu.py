"""Where the CPU time of a one-thread ``sliding_aggregate`` of ``sum`` goes, beside bottleneck (docs/kernels.md).

CPU time (``time.thread_time``: a call preempted by another process is not charged for the wait),
median [min-max] of ``--repeat`` calls, 10M float64 values, one thread: ``sliding_aggregate`` (SBA)
with its results in blocks earlier calls dropped and with fresh pages at every call; its merge with
and without the ends into mapped pages; the two-pass merge (the one-loop sum's reference);
bottleneck's ``move_sum``; ``mean`` and ``std`` beside bottleneck's; ``np.copyto`` and two fills of
80 MB (the bytes' pace).

    python bench/bench_kernel_cpu.py [--n 10000000] [--repeat 9] [--exps 10,13,20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pba_runtime as pr
from pba_runtime.kernels import compiled as C
from pba_runtime.kernels import result_memory as RM


def _cpu(f, repeat: int, before=None) -> str:
    f()
    ts = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.thread_time()
        f()
        ts.append((time.thread_time() - t0) * 1e3)
    ts.sort()
    return f"{statistics.median(ts):.1f} [{ts[0]:.1f}-{ts[-1]:.1f}] ms"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--exps", default="10,13,20")
    a = p.parse_args(argv)
    import bottleneck as bn

    n = a.n
    x = np.random.default_rng(0).normal(size=n)
    dst = np.zeros(n)
    print("np.copyto (mapped pages):", _cpu(lambda: np.copyto(dst, x), a.repeat),
          " two fills:", _cpu(lambda: (dst.fill(1.0), dst.fill(2.0)), a.repeat))
    none = np.empty(0, dtype=np.int64)
    for e in map(int, a.exps.split(",")):
        q = 1 << e
        nwin = n - q + 1
        win = pr.CountWindow(range=q, slide=1)
        out, ends = np.zeros(nwin), np.zeros(nwin, dtype=np.int64)
        lcs = np.empty(2 * q if q >= C.SUM_ONE_LOOP_MIN else q)
        csa, lcs1 = np.empty(q), np.empty(q)

        def agg(name):
            return lambda: pr.sliding_aggregate(x, window=win, agg=name, algorithm="sba", engine="compiled")

        rows = {
            "sum, SBA, results in dropped blocks": _cpu(agg("sum"), a.repeat),
            "sum, SBA, fresh pages": _cpu(agg("sum"), a.repeat, RM.release_cached),
            "merge + ends (mapped pages)": _cpu(lambda: C.merge_scalar(x, q, 0, nwin, out, ends, q, 1, C.ADD, lcs, csa),
                                                a.repeat),
            "merge alone": _cpu(lambda: C.merge_scalar(x, q, 0, nwin, out, none, q, 1, C.ADD, lcs, csa), a.repeat),
            "two-pass merge alone": _cpu(lambda: C.merge_scalar_two_pass(x, q, 0, nwin, out, none, q, 1, C.ADD, lcs1,
                                                                         csa), a.repeat),
            "bottleneck move_sum": _cpu(lambda: bn.move_sum(x, q), a.repeat),
            "mean, SBA": _cpu(agg("mean"), a.repeat),
            "bottleneck move_mean": _cpu(lambda: bn.move_mean(x, q), a.repeat),
            "std, SBA": _cpu(agg("std"), a.repeat),
            "bottleneck move_std": _cpu(lambda: bn.move_std(x, q, ddof=1), a.repeat),
        }
        print(f"W[2^{e}, 1]")
        for k, v in rows.items():
            print(f"  {k}: {v}", flush=True)


if __name__ == "__main__":
    main()
