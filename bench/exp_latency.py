"""Latency experiments of the PBA paper (KDD'21, section 5.1.2, Fig. 7, Tables 2-3), in Python, on this machine.

The latency of a window is the time of the ``insert`` call that completes it,
taken around that call in three separate passes (the modes of
``bench_baselines.latencies``): ``wall``, ``time.perf_counter_ns`` as the paper;
``undisturbed``, the same without the samples during which the thread was
preempted (its involuntary context switches moved: other jobs on the 2 shared
cores), waits for PBA's worker kept; ``cpu``, ``time.thread_time_ns`` (the
thread's CPU time: preemptions and waits left out, so PBA's stalls are
reported beside; on this VM it still counts time the host took the vCPU
away). Statistics as Tables
2-3: Min, Max, Avg, Std, LQ, Med, HQ (ns), plus p99, p99.9, the typical
*spike height* (median of the ``windows / q`` largest latencies, ``q`` slices
per window: Two-Stacks flips once per ``q`` windows) and the *periodic spike*
(the series folded by the algorithm's own period: PBA/SBA's chunk size, else
``q``; the largest per-phase median over the periods: what recurs at the same
phase, such as a flip or a chunk boundary, without the one-off preemptions),
per repetition, then the median of each statistic over the repetitions.

* **count** (Table 2): ``max`` over ``W[2^13, 1]`` and ``W[2^14, 1]``, uniform
  values; 1M windows after ``range - 1`` warm-up tuples, the first 30k windows
  dropped (the paper's setting), via ``bench_baselines.latencies``;
* **time** (Table 3): ``moment_sketch`` (k = 10) over time windows of 1 h and 2 h
  with a 1 s slide: uniform values in [1, 1000) at the DEBS'12 rate (a tuple
  every 10 ms, so 100 tuples per slide and one window-completing insert in
  100). Scaled down: 30k windows (3M tuples per algorithm and range) after one
  window of warm-up (``insert_many``), the first 900 dropped (3 %, as the
  paper's 30k of 1M); every insert runs, only the window-completing ones are
  timed.

Algorithms: two_stacks, slick_deque, daba, sba, pba (per-tuple path, default
worker thread). ``slick_deque`` needs a selective aggregation and cannot run
``moment_sketch`` (recorded as such in Table 3). The garbage collector is off
while timing; algorithms run in a shuffled order per repetition (3 for count,
2 for time windows).

Output: ``exp_latency.json`` and ``exp_latency_fig7_{wall,undisturbed,cpu}.png`` (latency
against window index, largest value per bin of windows, log scale) in
``--out-dir``.

    python bench/exp_latency.py           # ~8-10 min on the 2 shared cores
    python bench/exp_latency.py --smoke   # a few seconds
"""

from __future__ import annotations

import inspect
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_baselines  # noqa: E402
import exp_common as C  # noqa: E402
import numpy as np  # noqa: E402

import pba_runtime as pr  # noqa: E402
from pba_runtime.runtime import Debs12Source  # noqa: E402

ALGS = ["two_stacks", "slick_deque", "daba", "sba", "pba"]
STATS = ("min", "max", "avg", "std", "lq", "med", "hq", "p99", "p999", "spike", "periodic")
#: measurement modes, as ``bench_baselines.latencies``: wall clock; wall clock without the samples during which
#: the thread was preempted (involuntary context switch); the thread's CPU time
MODES = ("wall", "undisturbed", "cpu")
if list(inspect.signature(bench_baselines.latencies).parameters)[-1] != "mode":  # it changed once already
    raise ImportError("bench_baselines.latencies no longer takes a mode: update exp_latency.count_latency")
TRACE_BINS = 800

SIZES = {
    "full": {"count_ranges": [1 << 13, 1 << 14], "count_windows": 1_000_000, "count_drop": 30_000, "count_reps": 3,
             "time_ranges_ms": [3_600_000, 7_200_000], "time_slide_ms": 1_000, "time_windows": 30_000,
             "time_drop": 900, "time_reps": 2},
    "smoke": {"count_ranges": [1 << 6, 1 << 7], "count_windows": 3_000, "count_drop": 100, "count_reps": 1,
              "time_ranges_ms": [3_000, 6_000], "time_slide_ms": 1_000, "time_windows": 30, "time_drop": 2,
              "time_reps": 1},
}


def period_of(alg: str, window: pr.CountWindow | pr.TimeWindow, agg: str) -> int:
    """Windows between two of the algorithm's periodic costs: PBA/SBA's chunk size, else the slices per window."""
    if alg in ("pba", "sba"):
        return pr.plan_chunk_size(window, pr.get_aggregation(agg))
    return window.range // window.slide


def stats(lat: np.ndarray, q: int, period: int, aligned: bool = True) -> dict:
    """Table 2-3 statistics (``bench_baselines.table2``) plus p99, p99.9, spike and periodic-spike heights.

    ``spike``: median of the ``len / q`` largest latencies (``q`` slices per
    window: Two-Stacks flips once per ``q`` windows); ``periodic``: the largest
    per-phase median when the series is folded by the algorithm's own
    ``period`` (:func:`exp_common.periodic_spike`), which keeps spikes that
    recur at the same phase and drops one-off preemptions; ``None`` when samples
    were dropped (``aligned`` false: the phases no longer line up).
    """
    s = bench_baselines.table2(lat)
    p99, p999 = np.percentile(lat, [99, 99.9])
    s.update(p99=float(p99), p999=float(p999), spike=C.spike_height(lat, q),
             periodic=C.periodic_spike(lat, period) if aligned else None)
    return s


def _median_stats(rows: list[dict]) -> dict:
    return {k: (None if any(r[k] is None for r in rows) else statistics.median(r[k] for r in rows)) for k in STATS}


def count_latency(cfg: dict, reps: int) -> tuple[dict, dict]:
    """Table 2: max over W[2^13, 1] and W[2^14, 1]; every insert after the warm-up completes a window."""
    rng = np.random.default_rng(7)
    out: dict = {}
    traces: dict = {}
    n, drop = cfg["count_windows"], cfg["count_drop"]
    for w in cfg["count_ranges"]:
        data = rng.random(w - 1 + n).tolist()
        warm, xs = data[: w - 1], data[w - 1:]
        for kind in MODES:
            per: dict[str, list] = {a: [] for a in ALGS}
            extra: dict[str, list] = {a: [] for a in ALGS}
            trace: dict[str, list] = {}

            def case(a):
                def run():
                    lat, ext = bench_baselines.latencies(a, w, warm, xs, False, kind)
                    lat = lat[drop:]  # (undisturbed: the first `drop` kept windows)
                    per[a].append(stats(lat, w, period_of(a, pr.CountWindow(range=w, slide=1), "max"),
                                        aligned=kind != "undisturbed"))
                    extra[a].append(ext)
                    trace.setdefault(a, list(C.binned_max(lat, TRACE_BINS)))
                    return per[a][-1]["max"]
                return run

            C.interleave({a: case(a) for a in ALGS}, reps, seed=w,
                         progress=lambda a, rep, mx: print(f"  count W[{w},1] {kind:4s} rep {rep + 1} {a:12s} "
                                                           f"med {per[a][rep]['med']:7.0f} ns  max {mx / 1e3:9.1f} us",
                                                           flush=True))
            out.setdefault(str(w), {})[kind] = {
                a: {"stats": _median_stats(per[a]), "reps": per[a],
                    "extra": {k: sum(e[k] for e in extra[a]) for k in (extra[a][0] if extra[a] else {})}}
                for a in ALGS}
            traces.setdefault(str(w), {})[kind] = trace
    return out, traces


def time_latency(cfg: dict, reps: int) -> tuple[dict, dict]:
    """Table 3: moment_sketch over time windows of 1 h and 2 h, slide 1 s, 100 tuples per second."""
    s = cfg["time_slide_ms"]
    per_slide = s // Debs12Source.RECORD_MS
    rng = np.random.default_rng(11)
    out: dict = {}
    traces: dict = {}
    for r in cfg["time_ranges_ms"]:
        k = r // Debs12Source.RECORD_MS  # warm-up: one window of tuples
        n = cfg["time_windows"] * per_slide
        _, ts = C.debs12_series(k + n)
        vals = rng.uniform(1.0, 1000.0, k + n)
        warm_v, warm_t = vals[:k], ts[:k]
        xs, xt = vals[k:].tolist(), ts[k:].tolist()
        starts = np.asarray(xt) // s
        timed = np.flatnonzero(np.diff(starts, prepend=ts[k - 1] // s) != 0)  # first tuple of each new slide
        win = pr.TimeWindow(range=r, slide=s)
        for kind in MODES:
            clock = time.thread_time_ns if kind == "cpu" else time.perf_counter_ns
            per: dict[str, list] = {a: [] for a in ALGS}
            extra: dict[str, list] = {a: [] for a in ALGS}
            trace: dict[str, list] = {}

            def case(a):
                def run():
                    op = pr.create(a, win, "moment_sketch")
                    try:
                        op.insert_many(warm_v, warm_t)
                        before = op.stats()
                        lat, missed, preempted = C.timed_inserts(op, xs, xt, timed, clock,
                                                                 drop_preempted=kind == "undisturbed")
                        after = op.stats()
                    finally:
                        op.close()
                    lat = lat[cfg["time_drop"]:]
                    per[a].append(stats(lat, r // s, period_of(a, win, "moment_sketch"), aligned=kind != "undisturbed"))
                    extra[a].append({"missed": missed, **({"preempted": preempted} if kind == "undisturbed" else {}),
                                     **{key: after[key] - before[key]
                                                          for key in ("stalls", "stall_time", "flips")
                                                          if key in after}})
                    trace.setdefault(a, list(C.binned_max(lat, TRACE_BINS)))
                    return per[a][-1]["max"]
                return run

            algs = [a for a in ALGS if a != "slick_deque"]
            C.interleave({a: case(a) for a in algs}, reps, seed=r // 1000,
                         progress=lambda a, rep, mx: print(f"  time W[{r / 60_000:g}min,{s}ms] {kind:4s} rep {rep + 1} "
                                                           f"{a:12s} med {per[a][rep]['med']:7.0f} ns  "
                                                           f"max {mx / 1e3:9.1f} us", flush=True))
            row = {a: {"stats": _median_stats(per[a]), "reps": per[a],
                       "extra": {key: sum(e[key] for e in extra[a]) for key in extra[a][0]}} for a in algs}
            row["slick_deque"] = {"stats": None, "note": "not run: slick_deque needs a selective aggregation "
                                                         "(max, min, argmax); moment_sketch is not"}
            out.setdefault(str(r), {})[kind] = row
            traces.setdefault(str(r), {})[kind] = trace
    return out, traces


def ratios(table: dict) -> dict:
    """PBA's (and SBA's, DABA's, SlickDeque's) Max and Std over Two-Stacks', per range and clock."""
    out: dict = {}
    for rng_key, kinds in table.items():
        for kind, row in kinds.items():
            ts = row["two_stacks"]["stats"]
            out.setdefault(rng_key, {})[kind] = {
                f"{a}_{k}_over_two_stacks": (row[a]["stats"][k] / ts[k] if row[a].get("stats") and row[a]["stats"][k]
                                             is not None and ts[k] else None)
                for a in ("pba", "sba", "daba", "slick_deque") for k in ("max", "std", "spike", "periodic")}
    return out


def plots(res: dict, out: Path) -> list[str]:
    """Fig. 7-like: latency against window index per algorithm, one PNG per clock."""
    files = []
    for kind, what in (("wall", "wall clock (perf_counter_ns)"), ("cpu", "CPU time (thread_time_ns)"),
                       ("undisturbed", "wall clock, preempted samples dropped")):
        panels = []
        for group, label in (("count", "max, W[{r},1]"), ("time", "moment_sketch, W[{r},1 s]")):
            for r, tr in res.get("traces", {}).get(group, {}).items():
                shown = f"2^{int(r).bit_length() - 1}" if group == "count" else f"{int(r) // 3_600_000} h"
                if group == "time" and int(r) < 3_600_000:
                    shown = f"{int(r) // 1000} s"
                panels.append({"title": label.format(r=shown), "traces": tr[kind],
                               "ylabel": "latency (ns), max per bin"})
        if panels:
            f = C.plot_traces(out / f"exp_latency_fig7_{kind}.png", panels,
                              f"Fig. 7-like: per-window latency, {what}; each point is the largest of "
                              "a bin of consecutive windows")
            files += [f] if f else []
    return files


def main(argv: list[str] | None = None) -> dict:
    """Run both tables; write ``exp_latency.json`` and the Fig. 7-like PNGs; return the JSON object."""
    args = C.parse_args(__doc__, argv)
    cfg = dict(SIZES["smoke" if args.smoke else "full"])
    load = C.LoadLog()
    load.mark("start")
    code = C.code_state()
    t0 = time.time()
    res: dict = {"experiment": "latency", "sizes": cfg, "smoke": args.smoke, "algorithms": ALGS,
                 "stat_keys": STATS, "unit": "ns", "traces": {}}
    print("== Table 2: max over count windows", flush=True)
    res["count"], res["traces"]["count"] = count_latency(cfg, args.reps or cfg["count_reps"])
    load.mark("count")
    print("== Table 3: moment_sketch over time windows", flush=True)
    res["time"], res["traces"]["time"] = time_latency(cfg, args.reps or cfg["time_reps"])
    load.mark("time")
    res["ratios"] = {"count": ratios(res["count"]), "time": ratios(res["time"])}
    res["wall_s"] = round(time.time() - t0, 1)
    res["machine"] = C.machine(load, code)
    res["plots"] = plots(res, args.out_dir)
    C.write_json(args.out_dir / "exp_latency.json", res)
    print(f"wrote {args.out_dir / 'exp_latency.json'} ({res['wall_s']} s; load {res['machine']['load']['load1_max']})")
    return res


if __name__ == "__main__":
    main()
