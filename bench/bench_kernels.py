"""Compiled kernels against their peers (issue 17): every built-in, side by side in one run.

For each aggregation and range (slide 1, float64 values), interleaved repeats of:
``sliding_aggregate`` on the compiled engine (PBA with a thread pool, and SBA), on the numpy
engine, bottleneck's ``move_*``, pandas' ``rolling``, polars' ``rolling_*``, and ``np.copyto``
of the same values (one read, one write: the machine's limit). Medians with their spread
(min-max over repeats); ratios of medians taken in the same run.

Also: the relative error of sum/mean/std against an exact recompute on runs of 1e12 beside runs
of 1e-3; user aggregations (compiled from plain Python) against pandas'
``rolling.apply(engine="numba")`` and our built-in max; time windows with gaps, the compiled engine
(its fused kernel) against its previous episode path, numpy and Python; the end-of-stream flush of a
long time window.

    python bench/bench_kernels.py             # 10M values, ranges 2^10 2^13 2^17 2^20
    python bench/bench_kernels.py --quick     # 2M values, ranges 2^10 2^13 2^17
    python bench/bench_kernels.py --smoke     # seconds: the harness only
    python bench/bench_kernels.py --time-only # the time-window case alone, into kernels.json's `time`
    python bench/bench_kernels.py --n 5000000 --aggs max,min,argmax,sum,mean,std --builtins-only
        # those rows (and the accuracy) re-measured into the existing JSON; its other parts kept
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import threading
import time
from pathlib import Path

import numpy as np
from bench_baselines import machine_info  # bench/ is on sys.path

import pba_runtime as pr

RESULTS = Path(__file__).resolve().parent / "results"
AGGS = ["max", "min", "argmax", "sum", "mean", "std", "count", "geomean", "moment_sketch"]


def _peers(agg: str):
    """``{name: fn(x, w)}`` of the peers that have ``agg``."""
    peers = {}
    try:
        import bottleneck as bn

        f = {"max": bn.move_max, "min": bn.move_min, "argmax": bn.move_argmax, "sum": bn.move_sum,
             "mean": bn.move_mean, "std": lambda x, w: bn.move_std(x, w, ddof=1)}.get(agg)
        if f is not None:
            peers["bottleneck"] = f
    except ImportError:
        pass
    try:
        import pandas as pd

        m = {"max": "max", "min": "min", "sum": "sum", "mean": "mean", "std": "std", "count": "count"}.get(agg)
        if m is not None:
            peers["pandas"] = lambda x, w, m=m: getattr(pd.Series(x).rolling(w), m)().to_numpy()
    except ImportError:
        pass
    try:
        import polars as pl

        m = {"max": "rolling_max", "min": "rolling_min", "sum": "rolling_sum", "mean": "rolling_mean",
             "std": "rolling_std"}.get(agg)
        if m is not None:
            peers["polars"] = lambda x, w, m=m: getattr(pl.Series(x), m)(w).to_numpy()
    except ImportError:
        pass
    return peers


def _values(n: int, agg: str, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=n)
    return np.abs(x) + 0.5 if agg in ("geomean", "moment_sketch") else x


def _stats(times: list[float], n: int) -> dict:
    rates = sorted(n / t for t in times)
    return {"per_s": statistics.median(rates), "min_per_s": rates[0], "max_per_s": rates[-1]}


def _own_cpu() -> float:
    """CPU seconds of this thread and of our pools' threads (``pba-lcs*``): the work of the calls we measure,
    without the threads other libraries leave running (polars' ``jemalloc_bg_thd`` purging the memory of its
    last call while the next method runs: 5-14 ms of a 35 ms call, measured)."""
    total = time.thread_time()
    for t in threading.enumerate():
        if t.name.startswith("pba-lcs") and t.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (OSError, AttributeError):  # the thread just ended, or no per-thread clocks here
                pass
    return total


def _interleaved(methods: dict, repeat: int, cpu: dict | None = None,
                 own: dict | None = None) -> dict[str, list[float]]:
    """Each method once untimed (compile or load kernels, fault pages in), then ``repeat`` interleaved timed
    rounds: ``{name: [seconds, ...]}``; ``cpu`` (if given) gets the CPU seconds of each call, every thread of
    this process (``time.process_time``: the work, which the load of other processes changes little), ``own``
    the CPU seconds of this thread and our pools' threads alone (:func:`_own_cpu`).

    Round ``r`` starts at method ``r % len(methods)``: a method's figure then does not depend on which one
    ran before it. (With a fixed order the call after the numpy engine's paid for the memory that one had
    just given back: 2-5 ms more CPU at ``std`` 2^20 whichever method it was, measured.)
    """
    for f in methods.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in methods}
    if cpu is not None:
        cpu.update({k: [] for k in methods})
    if own is not None:
        own.update({k: [] for k in methods})
    names = list(methods)
    for r in range(repeat):
        for k in names[r % len(names):] + names[: r % len(names)]:
            f = methods[k]
            o0 = _own_cpu() if own is not None else 0.0
            c0 = time.process_time()
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
            if cpu is not None:
                cpu[k].append(time.process_time() - c0)
            if own is not None:
                own[k].append(_own_cpu() - o0)
    return times


def bench_builtins(n: int, exps: list[int], repeat: int, pool: pr.WorkerPool, aggs: list[str] = AGGS) -> list[dict]:
    rows = []
    for agg in aggs:
        x = _values(n, agg)
        peers = _peers(agg)
        for e in exps:
            w = 1 << e
            if w * 2 > n:
                continue
            win = pr.CountWindow(range=w, slide=1)
            out = np.empty_like(x)
            methods = {
                "compiled_pba": lambda: pr.sliding_aggregate(x, window=win, agg=agg, algorithm="pba", pool=pool,
                                                             engine="compiled"),
                "compiled_sba": lambda: pr.sliding_aggregate(x, window=win, agg=agg, algorithm="sba",
                                                             engine="compiled"),
                "numpy_pba": lambda: pr.sliding_aggregate(x, window=win, agg=agg, algorithm="pba", pool=pool,
                                                          engine="numpy"),
                "copyto": lambda: np.copyto(out, x),
            }
            for name, f in peers.items():
                methods[name] = lambda f=f: f(x, w)
            cpu: dict[str, list[float]] = {}
            own: dict[str, list[float]] = {}
            times = _interleaved(methods, repeat, cpu, own)
            row = {"agg": agg, "range": w, "loadavg": list(__import__("os").getloadavg()),
                   "methods": {k: _stats(v, n) for k, v in times.items()}}
            for k, v in cpu.items():
                row["methods"][k].update(cpu_ms=statistics.median(v) * 1e3, cpu_min_ms=min(v) * 1e3,
                                         cpu_max_ms=max(v) * 1e3)
            for k, v in own.items():
                row["methods"][k].update(own_cpu_ms=statistics.median(v) * 1e3, own_cpu_min_ms=min(v) * 1e3,
                                         own_cpu_max_ms=max(v) * 1e3)
            med = {k: statistics.median(v) for k, v in times.items()}
            c = med["compiled_pba"]
            row["ratios"] = {f"compiled_vs_{k}": med[k] / c for k in med if k != "compiled_pba"}
            cmed = {k: statistics.median(v) for k, v in cpu.items()}
            row["cpu_ratios"] = {f"compiled_vs_{k}": cmed[k] / cmed["compiled_pba"] for k in cmed
                                 if k != "compiled_pba" and cmed["compiled_pba"] > 0}
            row["fraction_of_copyto"] = med["copyto"] / c
            rows.append(row)
            print_row(row)
    return rows


def print_row(row: dict) -> None:
    m = row["methods"]
    cells = "  ".join(f"{k} {v['per_s'] / 1e6:.0f}M [{v['min_per_s'] / 1e6:.0f}-{v['max_per_s'] / 1e6:.0f}]"
                      for k, v in m.items())
    r = row["ratios"]
    peers = "  ".join(f"x{k[len('compiled_vs_'):]} {v:.2f}" for k, v in r.items()
                      if k[len("compiled_vs_"):] in ("bottleneck", "pandas", "polars"))
    cpu = "  ".join(f"{k} {v['cpu_ms']:.1f}" for k, v in m.items() if "cpu_ms" in v)
    own = "  ".join(f"{k} {v['own_cpu_ms']:.1f} [{v['own_cpu_min_ms']:.1f}-{v['own_cpu_max_ms']:.1f}]"
                    for k, v in m.items() if "own_cpu_ms" in v and k.startswith("compiled"))
    print(f"{row['agg']:>13} 2^{int(math.log2(row['range'])):<2} {cells}")
    print(f"{'':>17} compiled_pba: {peers}  copyto fraction {row['fraction_of_copyto']:.2f}", flush=True)
    print(f"{'':>17} CPU ms (all threads): {cpu}  load {row.get('loadavg', [0])[0]:.1f}", flush=True)
    if own:
        print(f"{'':>17} CPU ms (this thread and the pool's): {own}", flush=True)


def bench_accuracy(n: int) -> dict:
    """Max relative error against an exact recompute (math.fsum) on runs of 1e12 beside runs of 1e-3, W[2^8, 1]."""
    block = 1000
    reps = max(2, n // (2 * block))
    x = np.concatenate([np.concatenate([np.full(block, 1e12), 1e-3 * (1 + np.arange(block) % 7)])
                        for _ in range(reps)])[:n]
    w = 1 << 8  # shorter than a run: some windows hold only 1e-3s, after 1e12s left them
    idx = np.arange(0, len(x) - w + 1, max(1, (len(x) - w + 1) // 2000))
    xs = x.tolist()
    exact_sum = np.array([math.fsum(xs[k : k + w]) for k in idx])
    exact_mean = exact_sum / w

    def exact_std(k):
        m = exact_mean[k]
        d = [v - m for v in xs[idx[k] : idx[k] + w]]
        return math.sqrt(math.fsum(t * t for t in d) / (w - 1))

    exact = {"sum": exact_sum, "mean": exact_mean, "std": np.array([exact_std(k) for k in range(len(idx))])}
    res: dict = {}
    win = pr.CountWindow(range=w, slide=1)
    for agg in ("sum", "mean", "std"):
        got = {"compiled": pr.sliding_aggregate(x, window=win, agg=agg, engine="compiled")[1][idx]}
        peers = _peers(agg)
        for name in ("bottleneck", "pandas"):
            if name in peers:
                got[name] = peers[name](x, w)[idx + w - 1]
        want = exact[agg]
        nz = want != 0  # a window of equal values has std 0: compared absolutely (scaled by its values)
        res[agg] = {k: float(max(np.max(np.abs(v[nz] - want[nz]) / np.abs(want[nz]), initial=0.0),
                                 np.max(np.abs(v[~nz]) / 1e12, initial=0.0)))
                    for k, v in got.items()}
        print(f"accuracy {agg:>5}: " + "  ".join(f"{k} {v:.1e}" for k, v in res[agg].items()), flush=True)
    return res


# user aggregations, plain Python: numba compiles them
def _abs(v):
    return abs(v)


def _max_nan(a, b):
    return a if (a >= b or a != a) else b


def _same(p):
    return p


def _pair(v):
    return (v, v)


def _pair_combine(a, b):
    lo = a[0] if (a[0] <= b[0] or a[0] != a[0]) else b[0]
    hi = a[1] if (a[1] >= b[1] or a[1] != a[1]) else b[1]
    return (lo, hi)


def _spread(p):
    return p[1] - p[0]


ABSMAX = pr.Aggregation(lift=_abs, combine=_max_nan, lower=_same, identity=0.0, name="absmax")
SPREAD = pr.Aggregation(lift=_pair, combine=_pair_combine, lower=_spread, identity=(math.inf, -math.inf),
                        name="spread")


def bench_user(n: int, n_pandas: int, repeat: int, pool: pr.WorkerPool) -> dict:
    import pandas as pd

    w = 1 << 10
    x = _values(n, "max", 1)
    win = pr.CountWindow(range=w, slide=1)
    with pr.create("pba", win, ABSMAX) as op:
        engine = op.stats()["engine"]
    methods = {
        "absmax": lambda: pr.sliding_aggregate(x, window=win, agg=ABSMAX, algorithm="pba", pool=pool),
        "spread": lambda: pr.sliding_aggregate(x, window=win, agg=SPREAD, algorithm="pba", pool=pool),
        "builtin_max": lambda: pr.sliding_aggregate(x, window=win, agg="max", algorithm="pba", pool=pool),
    }
    s = pd.Series(x[:n_pandas])

    def absmax_np(a):
        return np.max(np.abs(a))

    t0 = time.perf_counter()
    s.rolling(w).apply(absmax_np, raw=True, engine="numba")
    first_pandas = time.perf_counter() - t0
    for f in methods.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in (*methods, "pandas_numba_apply")}
    for _ in range(repeat):
        for k, f in methods.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        s.rolling(w).apply(absmax_np, raw=True, engine="numba")
        times["pandas_numba_apply"].append(time.perf_counter() - t0)
    st = {k: _stats(v, n_pandas if k == "pandas_numba_apply" else n) for k, v in times.items()}
    res = {"range": w, "engine": engine, "methods": st, "pandas_first_call_s": first_pandas,
           "absmax_vs_pandas": st["absmax"]["per_s"] / st["pandas_numba_apply"]["per_s"],
           "absmax_vs_builtin_max": st["absmax"]["per_s"] / st["builtin_max"]["per_s"],
           "spread_vs_builtin_max": st["spread"]["per_s"] / st["builtin_max"]["per_s"]}
    print(f"user aggregations ({engine}): " + "  ".join(f"{k} {v['per_s'] / 1e6:.1f}M" for k, v in st.items()))
    print(f"  absmax: x{res['absmax_vs_pandas']:.0f} pandas numba apply, {res['absmax_vs_builtin_max']:.2f} of "
          f"built-in max; spread {res['spread_vs_builtin_max']:.2f} of built-in max", flush=True)
    return res


def _time_stream(n: int, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    steps = rng.integers(1, 4, size=n)
    gaps = rng.random(n) < 1e-4
    steps[gaps] = rng.integers(2_000, 120_000, size=int(gaps.sum()))  # 2 s to 2 min: some reset the windows
    return rng.normal(size=n), np.cumsum(steps).astype(np.int64)


def _episode_path(x, ts, win, agg, pool):
    """``sliding_aggregate`` on the compiled engine's previous time-window path (the episode path: a
    compiled merge per episode, Python between them), which the fused kernel replaces."""
    op = pr.create("pba", win, agg, pool=pool, engine="compiled")
    op._input_borrowed = True
    op._fused_time = False
    try:
        ends, res = op.insert_many(x, ts)
        tail_ends, tail_res = op.flush()
    finally:
        op.close()
    return np.concatenate([ends, tail_ends]), np.concatenate([res, tail_res])


def bench_time(n: int, repeat: int, pool: pr.WorkerPool, python_n: int) -> dict:
    """``TimeWindow(60 s, 10 ms)`` over ``n`` records with gaps: the compiled engine (the fused kernel,
    ``kernels/time_fused.py``), its previous episode path and the numpy engine, interleaved."""
    x, ts = _time_stream(n)
    win = pr.TimeWindow(range=60_000, slide=10)
    res: dict = {"window": "TimeWindow(60 s, 10 ms)", "records": n, "repeat": repeat,
                 "loadavg": list(__import__("os").getloadavg()), "aggs": {}}
    # the machine's limit: np.copyto of the records' bytes (values and timestamps: one read, one write)
    xc, tc = np.empty_like(x), np.empty_like(ts)

    def copyto():
        np.copyto(xc, x)
        np.copyto(tc, ts)

    for agg in ("max", "sum", "std"):
        methods = {
            "compiled_pba": lambda: pr.sliding_aggregate(x, window=win, agg=agg, timestamps=ts, algorithm="pba",
                                                         pool=pool, engine="compiled"),
            "compiled_episodes": lambda: _episode_path(x, ts, win, agg, pool),
            "numpy_pba": lambda: pr.sliding_aggregate(x, window=win, agg=agg, timestamps=ts, algorithm="pba",
                                                      pool=pool, engine="numpy"),
            "copyto": copyto,
        }
        cpu: dict[str, list[float]] = {}
        times = _interleaved(methods, repeat, cpu=cpu)
        st = {k: _stats(v, n) for k, v in times.items()}
        for k, c in cpu.items():  # CPU time per call, every thread of this process (the work: steadier under load)
            st[k]["cpu_ms"] = {"median": statistics.median(c) * 1e3, "min": min(c) * 1e3, "max": max(c) * 1e3}
        st["compiled_vs_numpy_cpu"] = st["numpy_pba"]["cpu_ms"]["median"] / st["compiled_pba"]["cpu_ms"]["median"]
        # the Python engine on a prefix (its per-tuple loop): a rate, compared as a rate
        xp, tp = x[:python_n], ts[:python_n]
        t0 = time.perf_counter()
        pr.sliding_aggregate(xp, window=win, agg=agg, timestamps=tp, algorithm="sba", engine="python")
        st["python_sba"] = {"per_s": python_n / (time.perf_counter() - t0)}
        st["compiled_vs_numpy"] = st["compiled_pba"]["per_s"] / st["numpy_pba"]["per_s"]
        st["compiled_vs_episodes"] = st["compiled_pba"]["per_s"] / st["compiled_episodes"]["per_s"]
        st["compiled_vs_python"] = st["compiled_pba"]["per_s"] / st["python_sba"]["per_s"]
        st["compiled_share_of_copyto"] = st["compiled_pba"]["per_s"] / st["copyto"]["per_s"]
        res["aggs"][agg] = st
        print(f"time windows {agg}: " + "  ".join(
            f"{k} {v['per_s'] / 1e6:.1f}M [{v['min_per_s'] / 1e6:.1f}-{v['max_per_s'] / 1e6:.1f}]"
            for k, v in st.items() if isinstance(v, dict) and "min_per_s" in v)
            + f"  python {st['python_sba']['per_s'] / 1e6:.2f}M; compiled x{st['compiled_vs_numpy']:.1f} numpy, "
            f"x{st['compiled_vs_episodes']:.1f} episode path; CPU ms per call " + "  ".join(
                f"{k} {v['cpu_ms']['median']:.2f} [{v['cpu_ms']['min']:.2f}-{v['cpu_ms']['max']:.2f}]"
                for k, v in st.items() if isinstance(v, dict) and "cpu_ms" in v)
            + f" (compiled x{st['compiled_vs_numpy_cpu']:.1f} numpy)", flush=True)
    # a compiled user aggregation: its time windows take the episode path, as there is no fused kernel for it
    # (compiled per process, it would cost seconds: docs/kernels.md), beside the built-in fused max on the same
    # |x| and beside its own count windows
    xa = np.abs(x)
    cw = pr.CountWindow(range=6_000, slide=1)
    user_methods = {
        "builtin_max_time": lambda: pr.sliding_aggregate(xa, window=win, agg="max", timestamps=ts, algorithm="pba",
                                                         pool=pool, engine="compiled"),
        "user_absmax_time": lambda: pr.sliding_aggregate(x, window=win, agg=ABSMAX, timestamps=ts, algorithm="pba",
                                                         pool=pool, engine="compiled"),
        "builtin_max_count": lambda: pr.sliding_aggregate(xa, window=cw, agg="max", algorithm="pba", pool=pool,
                                                          engine="compiled"),
        "user_absmax_count": lambda: pr.sliding_aggregate(x, window=cw, agg=ABSMAX, algorithm="pba", pool=pool,
                                                          engine="compiled"),
    }
    cpu = {}
    times = _interleaved(user_methods, repeat, cpu=cpu)
    user = {k: {**_stats(v, n), "cpu_ms": {"median": statistics.median(cpu[k]) * 1e3, "min": min(cpu[k]) * 1e3,
                                           "max": max(cpu[k]) * 1e3}} for k, v in times.items()}
    res["user"] = {"agg": "absmax", "count_window": "CountWindow(6000, 1)", **user}
    print("user absmax against built-in max on |x|, CPU ms per call: " + "  ".join(
        f"{k} {v['cpu_ms']['median']:.1f} [{v['cpu_ms']['min']:.1f}-{v['cpu_ms']['max']:.1f}]" for k, v in user.items()),
        flush=True)
    # dense records without gaps, one per slice (where the fused kernel once trailed the episode path)
    n_d = max(n // 2, 1000)
    xd, td = np.random.default_rng(4).normal(size=n_d), np.arange(n_d, dtype=np.int64) * 10
    wd = pr.TimeWindow(range=3_600_000, slide=10)

    def fused_dense():
        with pr.create("pba", wd, "max", pool=pool, engine="compiled") as op:
            op.insert_many(xd, td)
            op.flush()

    times = _interleaved({"compiled_pba": fused_dense, "compiled_episodes": lambda: _episode_path(xd, td, wd, "max", pool)},
                         repeat)
    dense = {k: _stats(v, n_d) for k, v in times.items()}
    dense["compiled_vs_episodes"] = dense["compiled_pba"]["per_s"] / dense["compiled_episodes"]["per_s"]
    res["dense"] = {"window": "TimeWindow(1 h, 10 ms)", "records": n_d, "agg": "max", **dense}
    print(f"dense, one record per slice, {n_d} records: " + "  ".join(
        f"{k} {v['per_s'] / 1e6:.1f}M [{v['min_per_s'] / 1e6:.1f}-{v['max_per_s'] / 1e6:.1f}]"
        for k, v in dense.items() if isinstance(v, dict)) + f"; fused x{dense['compiled_vs_episodes']:.2f} episode path")
    # the end-of-stream flush of a long window: one compiled call
    n_f = max(n // 2, 1000)
    xf, tf = _time_stream(n_f, 3)
    with pr.create("pba", pr.TimeWindow(range=3_600_000, slide=10), "max", pool=pool) as op:
        t0 = time.perf_counter()
        op.insert_many(xf, tf)
        t1 = time.perf_counter()
        op.flush()
        t2 = time.perf_counter()
    res["flush"] = {"window": "TimeWindow(1 h, 10 ms)", "records": n_f, "insert_many_s": t1 - t0, "flush_s": t2 - t1}
    print(f"flush at TimeWindow(1 h, 10 ms), {n_f} records: insert_many {t1 - t0:.3f} s, flush {t2 - t1:.3f} s")
    return res


def _merged(old: dict, new: dict, aggs: list[str]) -> dict:
    """``old`` with the rows of ``aggs`` and the accuracy replaced by ``new``'s; the run that measured them is
    recorded under ``reruns`` (its machine, arguments and aggregations), the rest keeps ``old``'s machine.
    A run of every built-in replaces the whole table: it is recorded as ``builtins_run``, earlier reruns dropped."""
    out = dict(old)
    rows = [r for r in old.get("builtins", []) if r["agg"] not in aggs] + new["builtins"]
    order = {a: i for i, a in enumerate(AGGS)}
    out["builtins"] = sorted(rows, key=lambda r: (order.get(r["agg"], len(order)), r["range"]))
    out["accuracy"] = new["accuracy"]
    if set(AGGS) <= set(aggs):  # every built-in in this run: the table is this run's alone
        out["builtins_run"] = {"machine": new["machine"], "args": new["args"]}
        out["reruns"] = []
    else:
        out["reruns"] = [*old.get("reruns", []), {"aggs": aggs, "machine": new["machine"], "args": new["args"]}]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="values per aggregation")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2M values, ranges up to 2^17, 3 repeats")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the harness only")
    ap.add_argument("--out", type=Path, default=RESULTS / "kernels.json")
    ap.add_argument("--time-only", action="store_true",
                    help="only the time-window case (2M records, 7 repeats); replaces the `time` entry of --out")
    ap.add_argument("--aggs", default=",".join(AGGS), help="built-in aggregations to measure (comma-separated)")
    ap.add_argument("--builtins-only", action="store_true",
                    help="measure only the built-ins and the accuracy; replace their rows in --out, keep the rest")
    args = ap.parse_args(argv)
    if args.time_only:
        doc = json.loads(args.out.read_text()) if args.out.exists() else {"machine": machine_info()}
        with pr.WorkerPool("thread", workers=1) as pool:
            doc["time"] = bench_time(2_000_000 if not args.smoke else 20_000, 7 if not args.smoke else 1, pool,
                                     200_000 if not args.smoke else 2_000)
        doc["time"]["loadavg_end"] = list(__import__("os").getloadavg())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1))
        print(f"wrote the time entry of {args.out}")
        return 0
    aggs = args.aggs.split(",")
    unknown = set(aggs) - set(AGGS)
    if unknown:
        ap.error(f"--aggs: unknown {sorted(unknown)}; accepted: {','.join(AGGS)}")
    n, repeat, exps = args.n, args.repeat, [10, 13, 17, 20]
    if args.quick:
        n, repeat = 2_000_000, 3
    if args.smoke:
        n, repeat, exps = 20_000, 1, [4, 8]
    exps = [e for e in exps if (1 << e) * 4 <= n or e <= 17]
    doc: dict = {"machine": machine_info(), "args": {"n": n, "repeat": repeat, "ranges": [1 << e for e in exps]}}
    with pr.WorkerPool("thread", workers=1) as pool:
        doc["builtins"] = bench_builtins(n, exps, repeat, pool, aggs)
        doc["accuracy"] = bench_accuracy(min(n, 200_000))
        if not args.builtins_only:
            doc["user"] = bench_user(min(n, 2_000_000), min(n, 100_000), repeat, pool)
            doc["time"] = bench_time(min(n, 2_000_000), repeat, pool, min(n, 200_000))
    doc["machine"]["loadavg_end"] = list(__import__("os").getloadavg())
    if args.builtins_only and args.out.exists():
        doc = _merged(json.loads(args.out.read_text()), doc, aggs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
