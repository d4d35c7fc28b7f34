"""Throughput experiments of the PBA paper (KDD'21, section 5.1.1, Fig. 4-6) on this machine.

Sliding ``max``, float64 values, per tuple (the paper's setting). Two tables:

* **compiled** (the main one): ``pr.replay``, every tuple through the algorithm's compiled per-tuple
  loop one at a time (:mod:`pba_runtime.kernels.stepwise`), tuples per second over the whole stream
  (the loop only: compile and output allocation excluded), for every algorithm ``pr.replay``'s registry
  holds (``REPLAY_ALGORITHMS``; an algorithm that cannot run an aggregation, SlickDeque without a
  selective one, is left out of that point); PBA's lcs built on the thread of a one-thread pool;
* **interpreter** (the second one): one Python ``op.insert(v)`` per tuple, as issue 7 measured it
  (``bench_baselines.throughput``: after a warm-up that fills the window, garbage collector off), for
  recal (ranges <= 2^10, a tenth of the tuples), two_stacks, daba, slick_deque, flatfat (a quarter of
  the tuples), sba and pba, at a few count ranges of Fig. 4 only: the interpreter's floor (0.5-2 us per
  ``insert`` whatever the algorithm) makes its figures flat, and a full sweep takes 12-15 minutes.

Workloads of the compiled table (``--smoke``/``--quick`` shrinks every size):

* ``count_range`` (Fig. 4): count windows, slide 1, range 2^3 ... 2^20, over 4M values;
* ``count_slide`` (Fig. 5): range 2^17, slide 1 ... 10, over 4M values;
* ``time_range`` (Fig. 6a): time windows over a DEBS'12-like series (one sensor, a record every
  10 ms), range 6, 12, 24, 36, 48, 60 min, slide 10 ms, over 2M records;
* ``time_slide`` (Fig. 6b): range 1 h, slide 10, 20, 40, 60, 80, 100 ms; as above.

Both count workloads run on uniform synthetic data and on the DEBS'12-like series. ``--batch`` adds
the batch path of issue 7 (``sliding_aggregate`` beside bottleneck and pandas; several minutes more).
Algorithms are interleaved in a shuffled order per repetition (3 repetitions, median and min-max
spread); the load average is logged at each section. The machine has 2 cores shared with other
engineers: PBA's worker thread has a free core only when they are idle, which the load log shows.
Output: ``exp_throughput.json`` and ``exp_throughput_fig{4,5,6}.png`` in ``--out-dir`` (default
``bench/results``).

    python bench/exp_throughput.py             # ~2-3 min on the 2 shared cores
    python bench/exp_throughput.py --quick     # a few seconds (the smoke tests)
    python bench/exp_throughput.py --sections count_range interpreter --merge
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_baselines  # noqa: E402
import bench_core  # noqa: E402
import exp_common as C  # noqa: E402
import noise_floor  # noqa: E402
import numpy as np  # noqa: E402

import pba_runtime as pr  # noqa: E402

#: the interpreter table's algorithms (Python ``insert``)
INTERPRETER = ["recal", "two_stacks", "daba", "slick_deque", "flatfat", "sba", "pba"]
#: share of the timed tuples an algorithm gets (the slow ones; their rate does not depend on the stream length)
FRACTION = {"recal": 0.1, "flatfat": 0.25}
RECAL_MAX = 1 << 10
SECTIONS = ["count_range", "count_slide", "time_range", "time_slide", "interpreter"]

SIZES = {
    "full": {"count_exps": list(range(3, 21)), "n": 4_000_000, "slide_range": 1 << 17, "slides": list(range(1, 11)),
             "time_ranges_ms": [m * 60_000 for m in (6, 12, 24, 36, 48, 60)], "time_slide_ms": 10,
             "time_range_ms": 3_600_000, "time_slides_ms": [10, 20, 40, 60, 80, 100], "time_n": 2_000_000,
             "interp_exps": [10, 14, 17], "interp_n": 100_000,
             "batch_n": 10_000_000, "time_batch_n": 2_000_000, "reps": 3},
    "smoke": {"count_exps": [3, 6, 10], "n": 20_000, "slide_range": 1 << 8, "slides": [1, 3],
              "time_ranges_ms": [3_000, 6_000], "time_slide_ms": 10, "time_range_ms": 6_000,
              "time_slides_ms": [10, 30], "time_n": 20_000, "interp_exps": [3, 6], "interp_n": 2_000,
              "batch_n": 5_000, "time_batch_n": 5_000, "reps": 1},
}


def _progress(label: str):
    def report(name: str, rep: int, res: float) -> None:
        print(f"  {label:28s} rep {rep + 1}  {name:12s} {C.fmt_rate(res)}/s", flush=True)
    return report


def _timed_rate(fn, n: int):
    """A case for :func:`exp_common.interleave`: ``n / seconds`` of one call of ``fn``."""
    def case() -> float:
        t0 = time.perf_counter()
        fn()
        return n / (time.perf_counter() - t0)
    return case


def _compiled_point(win, values: np.ndarray, ts: np.ndarray | None, reps: int, pool: pr.WorkerPool, seed: int,
                    label: str, pba_stats: list) -> dict:
    """Every algorithm of ``pr.replay``'s registry that runs ``max`` over ``win``, interleaved: ``{alg: spread}``."""
    algs = [a for a in C.replay_algorithms() if C.replay_runs(a, win, "max", values, ts)]
    st: dict = {}
    cases = {a: (lambda a=a: C.compiled_rate(a, win, "max", values, ts, pool, st if a == "pba" else None))
             for a in algs}
    res = C.interleave(cases, reps, seed=seed, progress=_progress(label))
    pba_stats.append({k: st.get(k) for k in ("chunk_size", "lcs_tasks", "stalls", "stall_ns", "lcs_on", "why")
                      if k in st})
    return {a: C.spread(v) for a, v in res.items()}


def _add(series: dict, row: dict, i: int) -> None:
    """Append ``row``'s cells as the ``i``-th point of ``series`` (an algorithm missing earlier gets ``None``s)."""
    for a, cell in row.items():
        series.setdefault(a, [None] * i).append(cell)
    for cells in series.values():
        if len(cells) <= i:
            cells.append(None)


# --------------------------------------------------------------------------- count windows
def count_range(data: np.ndarray, cfg: dict, reps: int, pool: pr.WorkerPool, label: str) -> dict:
    """Fig. 4, compiled per tuple: every algorithm at W[2^e, 1] over ``cfg["n"]`` values."""
    x = data[: cfg["n"]]
    xs_axis, series, pba = [], {}, []
    for i, e in enumerate(cfg["count_exps"]):
        w = 1 << e
        _add(series, _compiled_point(pr.CountWindow(range=w, slide=1), x, None, reps, pool, e,
                                     f"{label} W[2^{e},1]", pba), i)
        xs_axis.append(w)
    return {"x": xs_axis, "tuples": len(x), "per_tuple": series, "pba_stats": pba}


def count_range_batch(data: np.ndarray, cfg: dict, reps: int, pool: pr.WorkerPool) -> dict:
    """Fig. 4, batch path (``--batch``): ``bench_core.bench_batch`` (pba, sba, bottleneck, pandas), rates as spreads."""
    x = data[: cfg["batch_n"]]
    rows = bench_core.bench_batch(x, cfg["count_exps"], max(reps, 3), pool)
    series: dict[str, list] = {}
    for r in rows:
        for m, med in r["median_s"].items():
            lo, hi = r["spread_s"][m]
            series.setdefault(m, []).append({"median": r["n"] / med, "min": r["n"] / hi, "max": r["n"] / lo,
                                             "n": max(reps, 3)})
    ratio = {m: [r.get("ratio_vs_bottleneck", {}).get(m) for r in rows] for m in series}
    return {"values": len(x), "batch": {_batch_name(m): s for m, s in series.items()},
            "ratio_vs_bottleneck": {_batch_name(m): v for m, v in ratio.items()}}


def _batch_name(m: str) -> str:
    return f"batch_{m}" if m in ("pba", "sba") else m


def count_slide(data: np.ndarray, cfg: dict, reps: int, pool: pr.WorkerPool, label: str) -> dict:
    """Fig. 5, compiled per tuple: W[2^17, s] for s = 1 ... 10."""
    w = cfg["slide_range"]
    x = data[: cfg["n"]]
    series: dict = {}
    pba: list = []
    for i, s in enumerate(cfg["slides"]):
        _add(series, _compiled_point(pr.CountWindow(range=w, slide=s), x, None, reps, pool, s,
                                     f"{label} W[{w},{s}]", pba), i)
    return {"x": list(cfg["slides"]), "range": w, "tuples": len(x), "per_tuple": series, "pba_stats": pba}


def count_slide_batch(data: np.ndarray, cfg: dict, reps: int, pool: pr.WorkerPool, label: str) -> dict:
    """Fig. 5, batch path (``--batch``): pba / sba ``sliding_aggregate`` beside bottleneck and pandas with a slide."""
    import pandas as pd

    w = cfg["slide_range"]
    x = data[: cfg["batch_n"]]
    ser = pd.Series(x)
    series: dict[str, list] = {}
    for s in cfg["slides"]:
        win = pr.CountWindow(range=w, slide=s)
        cases = {"batch_pba": lambda: pr.sliding_aggregate(x, window=win, agg="max", algorithm="pba", pool=pool),
                 "batch_sba": lambda: pr.sliding_aggregate(x, window=win, agg="max", algorithm="sba"),
                 "pandas": lambda: ser.rolling(w, step=s).max()}
        try:
            import bottleneck as bn

            cases["bottleneck"] = lambda: bn.move_max(x, w)[w - 1:: s].copy()
        except ImportError:
            pass
        res = C.interleave({k: _timed_rate(f, len(x)) for k, f in cases.items()}, max(reps, 3), seed=s,
                           progress=_progress(f"{label} batch W[{w},{s}]"))
        for k, v in res.items():
            series.setdefault(k, []).append(C.spread(v))
    return {"values": len(x), "batch": series}


# --------------------------------------------------------------------------- time windows
def _time_batch(vals: np.ndarray, ts: np.ndarray, r: int, s: int, reps: int, pool: pr.WorkerPool, seed: int,
                label: str, with_pandas: bool) -> dict:
    """Batch rates (``--batch``) of ``insert_many`` (pba, sba; steady state, without the end-of-stream flush) and
    pandas."""
    win = pr.TimeWindow(range=r, slide=s)

    def batch(alg: str, **opts):
        def case() -> float:
            op = pr.create(alg, win, "max", **opts)
            try:
                t0 = time.perf_counter()
                op.insert_many(vals, ts)
                return len(vals) / (time.perf_counter() - t0)
            finally:
                op.close()
        return case

    cases = {"batch_pba": batch("pba", pool=pool), "batch_sba": batch("sba")}
    if with_pandas:
        import pandas as pd

        ser = pd.Series(vals, index=pd.to_datetime(ts, unit="ms"))
        cases["pandas"] = _timed_rate(lambda: ser.rolling(f"{r}ms").max(), len(vals))
    res = C.interleave(cases, max(reps, 3), seed=seed, progress=_progress(label))
    return {k: C.spread(v) for k, v in res.items()}


def time_sweep(vals: np.ndarray, ts: np.ndarray, cfg: dict, reps: int, pool: pr.WorkerPool, which: str,
               with_batch: bool) -> dict:
    """Fig. 6: ``which`` is ``"range"`` (slide 10 ms, ranges 6-60 min) or ``"slide"`` (range 1 h, slides 10-100 ms)."""
    if which == "range":
        points = [(r, cfg["time_slide_ms"]) for r in cfg["time_ranges_ms"]]
    else:
        points = [(cfg["time_range_ms"], s) for s in cfg["time_slides_ms"]]
    per: dict = {}
    batch: dict[str, list] = {}
    pba: list = []
    tv, tt = vals[: cfg["time_n"]], ts[: cfg["time_n"]]
    bn_vals, bn_ts = vals[: cfg["time_batch_n"]], ts[: cfg["time_batch_n"]]
    for i, (r, s) in enumerate(points):
        label = f"time W[{r / 60_000:g}min,{s}ms]"
        _add(per, _compiled_point(pr.TimeWindow(range=r, slide=s), tv, tt, reps, pool, i, label, pba), i)
        if with_batch:
            for k, sp in _time_batch(bn_vals, bn_ts, r, s, reps, pool, i, label + " batch", which == "range").items():
                batch.setdefault(k, []).append(sp)
    x = [r for r, _ in points] if which == "range" else [s for _, s in points]
    out = {"x": x, "unit": "ms", "fixed": points[0][1] if which == "range" else points[0][0],
           "tuples": len(tv), "per_tuple": per, "pba_stats": pba}
    if with_batch:
        out.update(batch=batch, batch_values=len(bn_vals), batch_is="insert_many without the end-of-stream flush")
    return out


# --------------------------------------------------------------------------- the interpreter's table
def interpreter(data: dict[str, np.ndarray], cfg: dict, reps: int) -> dict:
    """Python ``insert`` per tuple (issue 7's measurement) at a few ranges of Fig. 4, uniform data."""
    x = data["uniform"]
    n = cfg["interp_n"]
    xs_axis, series = [], {a: [] for a in INTERPRETER}
    for e in cfg["interp_exps"]:
        w = 1 << e
        warm = x[: w + 1000].tolist()
        timed = x[w + 1000: w + 1000 + n].tolist()
        algs = [a for a in INTERPRETER if a != "recal" or w <= RECAL_MAX]
        cases = {a: (lambda a=a: bench_baselines.throughput(a, w, warm, timed[: int(n * FRACTION.get(a, 1))], False))
                 for a in algs}
        res = C.interleave(cases, reps, seed=e, progress=_progress(f"interpreter W[2^{e},1]"))
        xs_axis.append(w)
        for a in INTERPRETER:
            series[a].append(C.spread(res[a]) if a in res else None)
    return {"uniform": {"x": xs_axis, "timed_tuples": n, "per_tuple": series,
                        "fractions_of_timed_tuples": FRACTION, "recal_max_range": RECAL_MAX}}


# --------------------------------------------------------------------------- plots
def plots(res: dict, out: Path) -> list[str]:
    """Fig. 4, 5, 6 (compiled, per tuple) and, with ``--batch``, their batch-path counterparts."""
    files = []
    names = {"debs12": "DEBS'12-like series", "uniform": "uniform synthetic"}
    for key, fig, xlabel, logx in (("count_range", "fig4", "range (tuples), slide 1", True),
                                   ("count_slide", "fig5", "slide (tuples), range 2^17", False)):
        if key not in res:
            continue
        for path_kind, field, unit in (("", "per_tuple", "tuples/s (compiled, per tuple)"),
                                       ("_batch", "batch", "values/s (batch path)")):
            panels = [{"title": f"{names[d]}", "x": res[key][d]["x"], "xlabel": xlabel, "ylabel": unit,
                       "logx": logx, "logy": True, "series": res[key][d][field]}
                      for d in ("debs12", "uniform") if d in res[key] and field in res[key][d]]
            if panels:
                f = C.plot_lines(out / f"exp_throughput_{fig}{path_kind}.png", panels,
                                 f"{'Fig. 4' if fig == 'fig4' else 'Fig. 5'}-like: sliding max over count windows "
                                 f"({'compiled, per tuple' if not path_kind else 'batch path'})")
                files += [f] if f else []
    for path_kind, field, unit in (("", "per_tuple", "tuples/s (compiled, per tuple)"),
                                   ("_batch", "batch", "values/s (batch path)")):
        panels = []
        if "time_range" in res and field in res["time_range"]:
            t = res["time_range"]
            panels.append({"title": "(a) slide 10 ms, range varies", "x": t["x"], "xlabel": "range (min)",
                           "ylabel": unit, "logy": True, "xticklabels": [f"{r / 60_000:g}" for r in t["x"]],
                           "series": t[field]})
        if "time_slide" in res and field in res["time_slide"]:
            t = res["time_slide"]
            panels.append({"title": "(b) range 1 h, slide varies", "x": t["x"], "xlabel": "slide (ms)",
                           "ylabel": unit, "logy": True, "series": t[field]})
        if panels:
            f = C.plot_lines(out / f"exp_throughput_fig6{path_kind}.png", panels,
                             "Fig. 6-like: sliding max over time windows, DEBS'12-like series "
                             f"({'compiled, per tuple' if not path_kind else 'batch path'})")
            files += [f] if f else []
    return files


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict:
    """Run the chosen sections; write ``exp_throughput.json`` and the PNGs; return the JSON object."""
    def extra(ap):
        ap.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS, help="which workloads to run")
        ap.add_argument("--merge", action="store_true",
                        help="keep the other sections of an existing exp_throughput.json (re-run some only)")
        ap.add_argument("--batch", action="store_true",
                        help="also the batch path (sliding_aggregate, bottleneck, pandas): several minutes more")
        ap.add_argument("--rt", action="store_true",
                        help="the compiled sections with the measuring threads on SCHED_FIFO where permitted: "
                             "no other process takes their cores (PBA's worker gets a free core)")

    args = C.parse_args(__doc__, argv, extra)
    cfg = dict(SIZES["smoke" if args.smoke else "full"])
    reps = args.reps or cfg["reps"]
    old = C.read_json(args.out_dir / "exp_throughput.json") if args.merge else None
    load = C.LoadLog()
    if old:
        load.marks = [dict(m, what=f"{m['what']} (earlier run)") for m in old["machine"]["load"]["marks"]
                      if not any(m["what"].startswith(sec) for sec in args.sections)]
    load.mark("start")
    code = C.code_state()
    t_start = time.time()
    big = max([1 << e for e in cfg["count_exps"] + cfg["interp_exps"]] + [cfg["slide_range"]])
    n_data = max(cfg["n"], 2 * big + 1000 + cfg["interp_n"], cfg["batch_n"] if args.batch else 0)
    data = {"uniform": C.uniform_values(n_data, seed=0)}
    debs_vals, debs_ts = C.debs12_series(max(n_data, cfg["time_n"], cfg["time_batch_n"]))
    data["debs12"] = debs_vals[:n_data]
    res: dict = {"experiment": "throughput", "engine": "compiled", "agg": "max", "sizes": cfg, "reps": reps,
                 "smoke": args.smoke, "algorithms": C.replay_algorithms(), "batch": args.batch,
                 "cpus_available": len(os.sched_getaffinity(0))}
    with noise_floor.realtime(args.rt) as policy, pr.WorkerPool(kind="thread", workers=1) as pool:
        res["policy"] = policy
        res["cross_core_ns"] = [round(noise_floor.cross_core_ns(), 1)]
        print(f"== measuring threads: {policy}; a cache line's round trip between the cores "
              f"{res['cross_core_ns'][0]:.0f} ns", flush=True)
        if "count_range" in args.sections:
            res["count_range"] = {}
            for d in ("uniform", "debs12"):
                print(f"== count windows, slide 1, {d}", flush=True)
                row = count_range(data[d], cfg, reps, pool, d)
                load.mark(f"count_range {d}")
                if args.batch:
                    row.update(count_range_batch(data[d], cfg, reps, pool))
                    load.mark(f"count_range {d} batch")
                res["count_range"][d] = row
        if "count_slide" in args.sections:
            res["count_slide"] = {}
            for d in ("uniform", "debs12"):
                print(f"== count windows, range {cfg['slide_range']}, slides, {d}", flush=True)
                row = count_slide(data[d], cfg, reps, pool, d)
                if args.batch:
                    row.update(count_slide_batch(data[d], cfg, reps, pool, d))
                load.mark(f"count_slide {d}")
                res["count_slide"][d] = row
        for which in ("range", "slide"):
            if f"time_{which}" in args.sections:
                print(f"== time windows, varying {which}, DEBS'12-like", flush=True)
                res[f"time_{which}"] = time_sweep(debs_vals, debs_ts, cfg, reps, pool, which, args.batch)
                load.mark(f"time_{which}")
        res["cross_core_ns"].append(round(noise_floor.cross_core_ns(), 1))
    if "interpreter" in args.sections:
        print("== the interpreter (Python insert per tuple), count windows, slide 1", flush=True)
        res["interpreter"] = interpreter(data, cfg, reps)
        load.mark("interpreter")
    res["wall_s"] = round(time.time() - t_start, 1)
    if old:
        for sec in SECTIONS:
            if sec not in args.sections and sec in old:
                res[sec] = old[sec]
        res["sections_rerun"] = {"sections": args.sections, "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "wall_s": res["wall_s"]}
        res["wall_s"] = old.get("wall_s", res["wall_s"])  # the duration of a full run
    res["machine"] = C.machine(load, code)
    res["plots"] = plots(res, args.out_dir)
    C.write_json(args.out_dir / "exp_throughput.json", res)
    took = res.get("sections_rerun", {}).get("wall_s", res["wall_s"])
    print(f"wrote {args.out_dir / 'exp_throughput.json'} ({took} s; max 1-min load {res['machine']['load']['load1_max']})")
    return res


if __name__ == "__main__":
    main()
