"""Throughput experiments of the PBA paper (KDD'21, section 5.1.1, Fig. 4-6), in Python, on this machine.

Sliding ``max``, float64 values. Two paths:

* **per tuple** (the paper's setting): one ``op.insert(v[, t])`` call per tuple,
  tuples per second after a warm-up that fills the window (garbage collector
  off while timing), for recal (count ranges <= 2^10 only, on a tenth of the
  tuples: O(range) per window), two_stacks, daba, slick_deque, flatfat (on a
  quarter of the tuples: it runs at ~0.2M tuples/s), sba and pba (its lcs
  built by the default worker thread);
* **batch**: ``pr.sliding_aggregate`` (``insert_many`` for time windows) with pba / sba (numpy) beside
  ``bottleneck.move_max`` and pandas ``rolling().max()`` on the same array
  (values per second).

Workloads (``--smoke`` shrinks every size):

* ``count_range`` (Fig. 4): count windows, slide 1, range 2^3 ... 2^20; per-tuple
  points time ``max(300k, range)`` tuples after ``range + 1000`` warm-up tuples
  (so Two-Stacks flips and PBA closes chunks inside the timed part); the
  batch path (``bench_core.bench_batch``) runs over 10M values, the size of
  ``bench_core``'s own batch benchmark (on fewer values the per-call costs
  that do not shrink with the batch, page faults of fresh outputs on this VM
  above all, weigh more and vary from run to run);
* ``count_slide`` (Fig. 5): range 2^17, slide 1 ... 10; 300k timed tuples after
  ``range + 1000``; batch over 10M values (bottleneck: ``move_max`` then every
  ``slide``-th window; pandas: ``rolling(step=slide)``);
* ``time_range`` (Fig. 6a): time windows over a DEBS'12-like series (one sensor,
  a record every 10 ms), range 6, 12, 24, 36, 48, 60 min, slide 10 ms; 200k
  timed tuples after one window of warm-up (inserted with ``insert_many``:
  the same state, faster for PBA/SBA); batch over 2M records with pandas'
  time-based ``rolling("<range>ms")`` beside (one window per record, which is
  exactly the slide of 10 ms here). The batch path of time windows is timed
  on ``insert_many`` alone: ``sliding_aggregate`` adds ``flush()``, which
  emits the ``range / slide`` windows still open at the end of the stream (a cost
  of the stream's end, not of its throughput); its time is recorded once per point;
* ``time_slide`` (Fig. 6b): range 1 h, slide 10, 20, 40, 60, 80, 100 ms; as above
  (no pandas: it has no slide for time windows).

Both count workloads run on uniform synthetic data and on the DEBS'12-like
series. Algorithms are interleaved in a shuffled order per repetition (3
repetitions, median and min-max spread); the load average is logged at each
section. Output: ``exp_throughput.json`` and ``exp_throughput_fig{4,5,6}*.png``
in ``--out-dir`` (default ``bench/results``).

    python bench/exp_throughput.py             # ~12-15 min on the 2 shared cores
    python bench/exp_throughput.py --smoke     # a few seconds
    python bench/exp_throughput.py --sections count_range time_range
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_baselines  # noqa: E402
import bench_core  # noqa: E402
import exp_common as C  # noqa: E402
import numpy as np  # noqa: E402

import pba_runtime as pr  # noqa: E402
from pba_runtime.runtime import Debs12Source  # noqa: E402

PER_TUPLE = ["recal", "two_stacks", "daba", "slick_deque", "flatfat", "sba", "pba"]
#: share of the timed tuples an algorithm gets (the slow ones; their rate does not depend on the stream length)
FRACTION = {"recal": 0.1, "flatfat": 0.25}
RECAL_MAX = 1 << 10
SECTIONS = ["count_range", "count_slide", "time_range", "time_slide"]

SIZES = {
    "full": {"count_exps": list(range(3, 21)), "n": 300_000, "slide_range": 1 << 17, "slides": list(range(1, 11)),
             "time_ranges_ms": [m * 60_000 for m in (6, 12, 24, 36, 48, 60)], "time_slide_ms": 10,
             "time_range_ms": 3_600_000, "time_slides_ms": [10, 20, 40, 60, 80, 100], "time_n": 200_000,
             "batch_n": 10_000_000, "time_batch_n": 2_000_000, "reps": 3},
    "smoke": {"count_exps": [3, 6, 10], "n": 3_000, "slide_range": 1 << 8, "slides": [1, 3],
              "time_ranges_ms": [3_000, 6_000], "time_slide_ms": 10, "time_range_ms": 6_000,
              "time_slides_ms": [10, 30], "time_n": 2_000, "batch_n": 5_000, "time_batch_n": 5_000, "reps": 1},
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


# --------------------------------------------------------------------------- count windows
def count_range(data: np.ndarray, cfg: dict, reps: int, label: str) -> dict:
    """Fig. 4, per tuple: every algorithm at W[2^e, 1] (``bench_baselines.throughput``)."""
    xs_axis, series = [], {a: [] for a in PER_TUPLE}
    for e in cfg["count_exps"]:
        w = 1 << e
        n = max(cfg["n"], w)
        warm = data[: w + 1000].tolist()
        timed = data[w + 1000: w + 1000 + n].tolist()
        algs = [a for a in PER_TUPLE if a != "recal" or w <= RECAL_MAX]
        cases = {a: (lambda a=a: bench_baselines.throughput(a, w, warm, timed[: int(n * FRACTION.get(a, 1))], False))
                 for a in algs}
        res = C.interleave(cases, reps, seed=e, progress=_progress(f"{label} W[2^{e},1]"))
        xs_axis.append(w)
        for a in PER_TUPLE:
            series[a].append(C.spread(res[a]) if a in res else None)
    return {"x": xs_axis, "timed_tuples": [max(cfg["n"], w) for w in xs_axis], "per_tuple": series}


def count_range_batch(data: np.ndarray, cfg: dict, reps: int, pool: pr.WorkerPool) -> dict:
    """Fig. 4, batch path: ``bench_core.bench_batch`` (pba, sba, bottleneck, pandas), rates as spreads."""
    x = data[: cfg["batch_n"]]
    rows = bench_core.bench_batch(x, cfg["count_exps"], max(reps, 3), pool)
    xs_axis = [r["range"] for r in rows]
    series: dict[str, list] = {}
    for r in rows:
        for m, med in r["median_s"].items():
            lo, hi = r["spread_s"][m]
            series.setdefault(m, []).append({"median": r["n"] / med, "min": r["n"] / hi, "max": r["n"] / lo,
                                             "n": max(reps, 3)})
    ratio = {m: [r.get("ratio_vs_bottleneck", {}).get(m) for r in rows] for m in series}
    return {"x": xs_axis, "values": len(x), "batch": {_batch_name(m): s for m, s in series.items()},
            "ratio_vs_bottleneck": {_batch_name(m): v for m, v in ratio.items()}}


def _batch_name(m: str) -> str:
    return f"batch_{m}" if m in ("pba", "sba") else m


def count_slide(data: np.ndarray, cfg: dict, reps: int, label: str) -> dict:
    """Fig. 5, per tuple: W[2^17, s] for s = 1 ... 10."""
    w = cfg["slide_range"]
    warm = (data[: w + 1000].tolist(), None)
    n = cfg["n"]
    timed = data[w + 1000: w + 1000 + n].tolist()
    algs = [a for a in PER_TUPLE if a != "recal"]
    series: dict[str, list] = {a: [] for a in algs}
    for s in cfg["slides"]:
        win = pr.CountWindow(range=w, slide=s)
        cases = {a: (lambda a=a: C.per_tuple_rate(lambda: pr.create(a, win, "max"), warm,
                                                  (timed[: int(n * FRACTION.get(a, 1))], None)))
                 for a in algs}
        res = C.interleave(cases, reps, seed=s, progress=_progress(f"{label} W[{w},{s}]"))
        for a in algs:
            series[a].append(C.spread(res[a]))
    return {"x": list(cfg["slides"]), "range": w, "timed_tuples": n, "per_tuple": series}


def count_slide_batch(data: np.ndarray, cfg: dict, reps: int, pool: pr.WorkerPool, label: str) -> dict:
    """Fig. 5, batch path: pba / sba ``sliding_aggregate`` beside bottleneck and pandas with a slide."""
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
    return {"x": list(cfg["slides"]), "range": w, "values": len(x), "batch": series}


# --------------------------------------------------------------------------- time windows
def _time_per_tuple(vals: np.ndarray, ts: np.ndarray, r: int, s: int, n: int, reps: int, seed: int,
                    label: str) -> dict:
    algs = [a for a in PER_TUPLE if a != "recal"]
    k = r // Debs12Source.RECORD_MS + 100  # one window of records, and a second
    warm = (vals[:k].tolist(), ts[:k].tolist())
    tv, tt = vals[k: k + n].tolist(), ts[k: k + n].tolist()
    win = pr.TimeWindow(range=r, slide=s)
    cases = {a: (lambda a=a: C.per_tuple_rate(lambda: pr.create(a, win, "max"), warm,
                                              (tv[: int(n * FRACTION.get(a, 1))], tt[: int(n * FRACTION.get(a, 1))]),
                                              warm_batch=True))
             for a in algs}
    res = C.interleave(cases, reps, seed=seed, progress=_progress(label))
    return {a: C.spread(v) for a, v in res.items()}


def _time_batch(vals: np.ndarray, ts: np.ndarray, r: int, s: int, reps: int, pool: pr.WorkerPool, seed: int,
                label: str, with_pandas: bool) -> tuple[dict, dict]:
    """Batch rates of ``insert_many`` (pba, sba; steady state) and pandas; and, once, the end-of-stream flush time.

    ``sliding_aggregate`` would add ``flush()``, which emits the ``range / slide``
    windows still open at the end of the stream (one vectorised pass since issue 17:
    ~2 ms for a 1 h range and a 10 ms slide; it was one Python step per window, 0.4-1 s),
    a cost of the stream's end rather than of its throughput: it is recorded apart.
    """
    win = pr.TimeWindow(range=r, slide=s)
    flush_s: dict[str, float] = {}

    def batch(alg: str, **opts):
        def case() -> float:
            op = pr.create(alg, win, "max", **opts)
            try:
                t0 = time.perf_counter()
                op.insert_many(vals, ts)
                rate = len(vals) / (time.perf_counter() - t0)
                if alg not in flush_s:
                    t0 = time.perf_counter()
                    op.flush()
                    flush_s[alg] = time.perf_counter() - t0
            finally:
                op.close()
            return rate
        return case

    cases = {"batch_pba": batch("pba", pool=pool), "batch_sba": batch("sba")}
    if with_pandas:
        import pandas as pd

        ser = pd.Series(vals, index=pd.to_datetime(ts, unit="ms"))
        cases["pandas"] = _timed_rate(lambda: ser.rolling(f"{r}ms").max(), len(vals))
    res = C.interleave(cases, max(reps, 3), seed=seed, progress=_progress(label))
    return {k: C.spread(v) for k, v in res.items()}, flush_s


def time_sweep(vals: np.ndarray, ts: np.ndarray, cfg: dict, reps: int, pool: pr.WorkerPool, which: str) -> dict:
    """Fig. 6: ``which`` is ``"range"`` (slide 10 ms, ranges 6-60 min) or ``"slide"`` (range 1 h, slides 10-100 ms)."""
    if which == "range":
        points = [(r, cfg["time_slide_ms"]) for r in cfg["time_ranges_ms"]]
    else:
        points = [(cfg["time_range_ms"], s) for s in cfg["time_slides_ms"]]
    per: dict[str, list] = {}
    batch: dict[str, list] = {}
    flush: dict[str, list] = {}
    bn_vals, bn_ts = vals[: cfg["time_batch_n"]], ts[: cfg["time_batch_n"]]
    for i, (r, s) in enumerate(points):
        label = f"time W[{r / 60_000:g}min,{s}ms]"
        for a, sp in _time_per_tuple(vals, ts, r, s, cfg["time_n"], reps, i, label).items():
            per.setdefault(a, []).append(sp)
        rates, flush_s = _time_batch(bn_vals, bn_ts, r, s, reps, pool, i, label + " batch", which == "range")
        for k, sp in rates.items():
            batch.setdefault(k, []).append(sp)
        for k, f in flush_s.items():
            flush.setdefault(k, []).append(f)
    x = [r for r, _ in points] if which == "range" else [s for _, s in points]
    return {"x": x, "unit": "ms", "fixed": points[0][1] if which == "range" else points[0][0],
            "timed_tuples": cfg["time_n"], "batch_values": len(bn_vals), "per_tuple": per, "batch": batch,
            "batch_is": "insert_many without the end-of-stream flush", "flush_s": flush}


# --------------------------------------------------------------------------- plots
def plots(res: dict, out: Path) -> list[str]:
    """Fig. 4, 5, 6 (per tuple) and their batch-path counterparts."""
    files = []
    names = {"debs12": "DEBS'12-like series", "uniform": "uniform synthetic"}
    for key, fig, xlabel, logx in (("count_range", "fig4", "range (tuples), slide 1", True),
                                   ("count_slide", "fig5", "slide (tuples), range 2^17", False)):
        if key not in res:
            continue
        for path_kind, field, unit in (("", "per_tuple", "tuples/s (per-tuple insert)"),
                                       ("_batch", "batch", "values/s (batch path)")):
            panels = [{"title": f"{names[d]}", "x": res[key][d]["x"], "xlabel": xlabel, "ylabel": unit,
                       "logx": logx, "logy": True, "series": res[key][d][field]}
                      for d in ("debs12", "uniform") if d in res[key] and field in res[key][d]]
            if panels:
                f = C.plot_lines(out / f"exp_throughput_{fig}{path_kind}.png", panels,
                                 f"{'Fig. 4' if fig == 'fig4' else 'Fig. 5'}-like: sliding max over count windows "
                                 f"({'per tuple' if not path_kind else 'batch path'})")
                files += [f] if f else []
    for path_kind, field, unit in (("", "per_tuple", "tuples/s (per-tuple insert)"),
                                   ("_batch", "batch", "values/s (batch path)")):
        panels = []
        if "time_range" in res:
            t = res["time_range"]
            panels.append({"title": "(a) slide 10 ms, range varies", "x": t["x"], "xlabel": "range (min)",
                           "ylabel": unit, "logy": True, "xticklabels": [f"{r / 60_000:g}" for r in t["x"]],
                           "series": t[field]})
        if "time_slide" in res:
            t = res["time_slide"]
            panels.append({"title": "(b) range 1 h, slide varies", "x": t["x"], "xlabel": "slide (ms)",
                           "ylabel": unit, "logy": True, "series": t[field]})
        if panels:
            f = C.plot_lines(out / f"exp_throughput_fig6{path_kind}.png", panels,
                             "Fig. 6-like: sliding max over time windows, DEBS'12-like series "
                             f"({'per tuple' if not path_kind else 'batch path'})")
            files += [f] if f else []
    return files


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict:
    """Run the chosen sections; write ``exp_throughput.json`` and the PNGs; return the JSON object."""
    def extra(ap):
        ap.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS, help="which workloads to run")
        ap.add_argument("--merge", action="store_true",
                        help="keep the other sections of an existing exp_throughput.json (re-run some only)")

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
    big = max([1 << e for e in cfg["count_exps"]] + [cfg["slide_range"]])
    n_data = max(2 * big + 1000 + cfg["n"], cfg["batch_n"])
    data = {"uniform": C.uniform_values(n_data, seed=0)}
    debs_vals, debs_ts = C.debs12_series(max(n_data, cfg["time_ranges_ms"][-1] // 10 + 200 + cfg["time_n"],
                                             cfg["time_batch_n"]))
    data["debs12"] = debs_vals[:n_data]
    res: dict = {"experiment": "throughput", "agg": "max", "sizes": cfg, "reps": reps, "smoke": args.smoke,
                 "fractions_of_timed_tuples": FRACTION, "recal_max_range": RECAL_MAX}
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        if "count_range" in args.sections:
            res["count_range"] = {}
            for d in ("uniform", "debs12"):
                print(f"== count windows, slide 1, {d}", flush=True)
                row = count_range(data[d], cfg, reps, d)
                load.mark(f"count_range {d} per tuple")
                row.update(count_range_batch(data[d], cfg, reps, pool))
                load.mark(f"count_range {d} batch")
                res["count_range"][d] = row
        if "count_slide" in args.sections:
            res["count_slide"] = {}
            for d in ("uniform", "debs12"):
                print(f"== count windows, range {cfg['slide_range']}, slides, {d}", flush=True)
                row = count_slide(data[d], cfg, reps, d)
                row.update(count_slide_batch(data[d], cfg, reps, pool, d))
                load.mark(f"count_slide {d}")
                res["count_slide"][d] = row
        for which in ("range", "slide"):
            if f"time_{which}" in args.sections:
                print(f"== time windows, varying {which}, DEBS'12-like", flush=True)
                res[f"time_{which}"] = time_sweep(debs_vals, debs_ts, cfg, reps, pool, which)
                load.mark(f"time_{which}")
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
