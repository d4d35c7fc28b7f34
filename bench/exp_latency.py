"""Latency experiments of the PBA paper (KDD'21, section 5.1.2, Fig. 7, Tables 2-3) on this machine.

Two tables:

* **compiled** (the main one): ``pr.replay(..., latency=True)``, every tuple through the algorithm's
  compiled per-tuple loop; the latency of a window is the time spent on the tuple that completed it,
  read from the TSC *inside* the compiled loop (``latency_ns``), as the paper's harness does, for every
  algorithm ``pr.replay``'s registry holds (``REPLAY_ALGORITHMS``; SlickDeque needs a selective
  aggregation and sits out Table 3). One clock: wall (a preemption of the thread by the other jobs on
  the 2 shared cores is in the sample: Max and Std are often set by the machine, hence the *periodic*
  column below and ``top100``/``std_below_1ms``);
* **interpreter** (the second one): Table 2 with one Python ``insert`` per tuple timed around the call
  (``bench_baselines.latencies``), clocks ``wall`` and ``cpu`` (``thread_time_ns``), fewer windows: the
  figures issue 7 reported, where the interpreter's 0.5-2 us per ``insert`` is most of every sample.

Statistics as Tables 2-3: Min, Max, Avg, Std, LQ, Med, HQ (ns), plus p99, p99.9, ``top100`` (the 100th
largest), ``std_below_1ms`` (Std of the samples under 1 ms: preemptions left out), the typical *spike
height* (median of the ``windows / q`` largest latencies, ``q`` slices per window: Two-Stacks flips once
per ``q`` windows) and the *periodic spike* (the series folded by the algorithm's own period: PBA/SBA's
chunk size, else ``q``; the largest per-phase median over the periods: what recurs at the same phase, a
flip or a chunk boundary, without the one-off preemptions), per repetition, then the median of each
statistic over the repetitions.

Beside them, the same statistics of the **per-window minimum over the repetitions** (``per_window_min``): every
repetition replays the same tuples through the same algorithm, so a window's own cost (a flip, a merge, a chunk
boundary) recurs at that window in each, while a gap of the machine (the hypervisor taking the vCPU, an
interrupt: the noise floor below) lands on a different window each time; each window's smallest sample is its
cost without them. PBA's main loop never waits for its worker: when the worker is late it builds the lcs
itself, a few slices a tuple (``worker_late``: chunks it helped; a *stall* is a window that found the lcs not
ready and finished it at once); both are recorded per repetition (``stalls_per_rep``,
``worker_late_per_rep``), so a minimum that hides them shows.

* **count** (Table 2): ``max`` over ``W[2^13, 1]`` and ``W[2^14, 1]``, uniform values; 1M windows, the
  first 30k dropped (the paper's setting);
* **time** (Table 3): ``moment_sketch`` (k = 10) over time windows of 1 h and 2 h with a 1 s slide:
  uniform values in [1, 1000) at the DEBS'12 rate (a tuple every 10 ms, so 100 tuples per slide and
  one window-completing tuple in 100); 100k windows after one window of warm-up, the first 3k dropped.

Algorithms run in a shuffled order per repetition (3). Output: ``exp_latency.json`` and
``exp_latency_fig7_wall.png`` (compiled: latency against window index, largest value per bin of windows,
log scale) in ``--out-dir``.

Beside the tables, the machine's own *noise floor* (:mod:`noise_floor`: a compiled loop that only reads the
same clock, its largest gaps and how often a gap exceeds 5 and 20 us), measured before and after the compiled
tables under the same scheduling policy: a Max at or below it says nothing about the algorithm. With ``--rt``
the compiled tables (and the noise floor) run with the measuring threads on ``SCHED_FIFO`` where the process
may (root or ``CAP_SYS_NICE``; PBA's worker inherits it), so other processes cannot preempt them, as latency
benchmarks on shared machines do; the policy used is recorded (``policy``).

    python bench/exp_latency.py           # ~1-2 min on the 2 shared cores
    python bench/exp_latency.py --rt      # the same, measuring threads on SCHED_FIFO where permitted
    python bench/exp_latency.py --quick   # a few seconds (the smoke tests)
"""

from __future__ import annotations

import inspect
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_baselines  # noqa: E402
import exp_common as C  # noqa: E402
import noise_floor  # noqa: E402
import numpy as np  # noqa: E402

import pba_runtime as pr  # noqa: E402
from pba_runtime.runtime import Debs12Source  # noqa: E402

#: the interpreter table's algorithms (Python ``insert``)
INTERPRETER = ["two_stacks", "slick_deque", "daba", "sba", "pba"]
STATS = ("min", "max", "avg", "std", "lq", "med", "hq", "p99", "p999", "top100", "std_below_1ms", "spike",
         "periodic")
#: the interpreter table's clocks, as ``bench_baselines.latencies``: wall clock; the thread's CPU time
INTERPRETER_MODES = ("wall", "cpu")
if list(inspect.signature(bench_baselines.latencies).parameters)[-1] != "mode":  # it changed once already
    raise ImportError("bench_baselines.latencies no longer takes a mode: update exp_latency.interpreter_latency")
TRACE_BINS = 800

SIZES = {
    "full": {"count_ranges": [1 << 13, 1 << 14], "count_windows": 1_000_000, "count_drop": 30_000, "count_reps": 3,
             "time_ranges_ms": [3_600_000, 7_200_000], "time_slide_ms": 1_000, "time_windows": 100_000,
             "time_drop": 3_000, "time_reps": 3, "interp_windows": 100_000, "interp_drop": 3_000, "interp_reps": 1},
    "smoke": {"count_ranges": [1 << 6, 1 << 7], "count_windows": 3_000, "count_drop": 100, "count_reps": 1,
              "time_ranges_ms": [3_000, 6_000], "time_slide_ms": 1_000, "time_windows": 30, "time_drop": 2,
              "time_reps": 1, "interp_windows": 1_000, "interp_drop": 10, "interp_reps": 1},
}


def period_of(alg: str, window: pr.CountWindow | pr.TimeWindow, agg: str, run_stats: dict | None = None) -> int:
    """Windows between two of the algorithm's periodic costs: PBA/SBA's chunk size (the one the run used, from
    its ``stats``, else the operators' plan), else the slices per window."""
    if alg in ("pba", "sba"):
        if run_stats and run_stats.get("chunk_size"):
            return int(run_stats["chunk_size"])
        return pr.plan_chunk_size(window, pr.get_aggregation(agg))
    return window.range // window.slide


def stats(lat: np.ndarray, q: int, period: int, aligned: bool = True) -> dict:
    """Table 2-3 statistics (``bench_baselines.table2``) plus p99, p99.9, top100, std_below_1ms, spike and
    periodic-spike heights.

    ``spike``: median of the ``len / q`` largest latencies (``q`` slices per
    window: Two-Stacks flips once per ``q`` windows); ``periodic``: the largest
    per-phase median when the series is folded by the algorithm's own
    ``period`` (:func:`exp_common.periodic_spike`), which keeps spikes that
    recur at the same phase and drops one-off preemptions; ``None`` when samples
    were dropped (``aligned`` false: the phases no longer line up).
    """
    s = bench_baselines.table2(lat)
    p99, p999 = np.percentile(lat, [99, 99.9])
    top = np.partition(lat, max(0, len(lat) - 100))[max(0, len(lat) - 100)]
    below = lat[lat < 1_000_000]
    s.update(p99=float(p99), p999=float(p999), top100=float(top),
             std_below_1ms=float(below.std()) if len(below) else None, spike=C.spike_height(lat, q),
             periodic=C.periodic_spike(lat, period) if aligned else None)
    return s


def _median_stats(rows: list[dict]) -> dict:
    return {k: (None if any(r.get(k) is None for r in rows) else statistics.median(r[k] for r in rows))
            for k in STATS}


def _compiled_table(win, agg: str, values: np.ndarray, ts: np.ndarray | None, drop: int, reps: int,
                    pool: pr.WorkerPool, seed: int, label: str) -> tuple[dict, dict]:
    """Every registered algorithm that runs ``agg`` over ``win``: ``{alg: {stats, reps, extra}}`` and the traces."""
    algs = [a for a in C.replay_algorithms() if C.replay_runs(a, win, agg, values, ts)]
    last = len(values) if ts is None else int(ts[-1])  # windows completed by a tuple (not by the stream's end)
    per: dict[str, list] = {a: [] for a in algs}
    extra: dict[str, list] = {a: [] for a in algs}
    floor: dict[str, np.ndarray] = {}  # each window's smallest latency over the repetitions so far
    periods: dict[str, int] = {}
    trace: dict = {}

    def case(a):
        def run():
            out = pr.replay(a, win, agg, values, ts, latency=True, pool=pool if a == "pba" else None)
            lat = out.latency_ns[out.ends <= last][drop:]
            periods[a] = period_of(a, win, agg, out.stats)
            floor[a] = lat.copy() if a not in floor else np.minimum(floor[a], lat)
            per[a].append(stats(lat, win.range // win.slide, periods[a]))
            extra[a].append({k: out.stats[k] for k in ("chunk_size", "stalls", "stall_ns", "flips", "lcs_tasks",
                                                       "worker_late", "lcs_built_inline", "lcs_taken_back",
                                                       "slot_waits", "queue_full")
                             if k in out.stats} | ({"lcs_on": out.stats["lcs_on"]} if "lcs_on" in out.stats else {}))
            trace.setdefault(a, list(C.binned_max(lat, TRACE_BINS)))
            return per[a][-1]["max"]
        return run

    C.interleave({a: case(a) for a in algs}, reps, seed=seed,
                 progress=lambda a, rep, mx: print(f"  {label} rep {rep + 1} {a:12s} med {per[a][rep]['med']:7.0f} ns  "
                                                   f"periodic {per[a][rep]['periodic']:8.0f} ns  max {mx / 1e3:9.1f} us",
                                                   flush=True))
    row = {a: {"stats": _median_stats(per[a]), "reps": per[a], "extra": _sum_extra(extra[a]),
               "per_window_min": stats(floor[a], win.range // win.slide, periods[a]),
               "stalls_per_rep": [e.get("stalls") for e in extra[a]],
               "worker_late_per_rep": [e.get("worker_late") for e in extra[a]]} for a in algs}
    if "slick_deque" not in row:
        row["slick_deque"] = {"stats": None, "note": f"not run: slick_deque needs a selective aggregation "
                                                     f"(max, min, argmax); {agg} is not"}
    return row, trace


def _sum_extra(rows: list[dict]) -> dict:
    """Counters summed over the repetitions (the chunk size and where the lcs ran: the last repetition's)."""
    out: dict = {}
    for r in rows:
        for k, v in r.items():
            out[k] = v if k in ("chunk_size", "lcs_on") else out.get(k, 0) + v
    return out


def count_latency(cfg: dict, reps: int, pool: pr.WorkerPool) -> tuple[dict, dict]:
    """Table 2, compiled: max over W[2^13, 1] and W[2^14, 1]; every tuple after the first window completes one."""
    rng = np.random.default_rng(7)
    out: dict = {}
    traces: dict = {}
    for w in cfg["count_ranges"]:
        data = rng.random(w - 1 + cfg["count_windows"])
        row, trace = _compiled_table(pr.CountWindow(range=w, slide=1), "max", data, None, cfg["count_drop"], reps,
                                     pool, w, f"count W[{w},1]")
        out[str(w)] = {"wall": row}
        traces[str(w)] = {"wall": trace}
    return out, traces


def time_latency(cfg: dict, reps: int, pool: pr.WorkerPool) -> tuple[dict, dict]:
    """Table 3, compiled: moment_sketch over time windows of 1 h and 2 h, slide 1 s, 100 tuples per second."""
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
        row, trace = _compiled_table(pr.TimeWindow(range=r, slide=s), "moment_sketch", vals, ts, cfg["time_drop"],
                                     reps, pool, r // 1000, f"time W[{r / 60_000:g}min,{s}ms]")
        out[str(r)] = {"wall": row}
        traces[str(r)] = {"wall": trace}
    return out, traces


def interpreter_latency(cfg: dict, reps: int) -> dict:
    """Table 2 with Python ``insert`` (``bench_baselines.latencies``), wall and CPU clocks, fewer windows."""
    rng = np.random.default_rng(7)
    out: dict = {}
    n, drop = cfg["interp_windows"], cfg["interp_drop"]
    for w in cfg["count_ranges"]:
        data = rng.random(w - 1 + n).tolist()
        warm, xs = data[: w - 1], data[w - 1:]
        for kind in INTERPRETER_MODES:
            per: dict[str, list] = {a: [] for a in INTERPRETER}
            extra: dict[str, list] = {a: [] for a in INTERPRETER}

            def case(a):
                def run():
                    lat, ext = bench_baselines.latencies(a, w, warm, xs, False, kind)
                    per[a].append(stats(lat[drop:], w, period_of(a, pr.CountWindow(range=w, slide=1), "max")))
                    extra[a].append(ext)
                    return per[a][-1]["max"]
                return run

            C.interleave({a: case(a) for a in INTERPRETER}, reps, seed=w,
                         progress=lambda a, rep, mx: print(f"  interpreter W[{w},1] {kind:4s} rep {rep + 1} {a:12s} "
                                                           f"med {per[a][rep]['med']:7.0f} ns  max {mx / 1e3:9.1f} us",
                                                           flush=True))
            out.setdefault(str(w), {})[kind] = {
                a: {"stats": _median_stats(per[a]), "reps": per[a],
                    "extra": {k: sum(e[k] for e in extra[a]) for k in (extra[a][0] if extra[a] else {})}}
                for a in INTERPRETER}
    return out


def ratios(table: dict) -> dict:
    """Every algorithm's Max, Std, top100, std_below_1ms, spike and periodic over Two-Stacks', per range and clock;
    with the suffix ``_pwmin`` the same of the per-window minimum over the repetitions (``per_window_min``)."""
    out: dict = {}
    keys = ("max", "std", "top100", "std_below_1ms", "spike", "periodic")

    def over(mine: dict | None, theirs: dict | None, k: str) -> float | None:
        if not mine or not theirs or mine.get(k) is None or not theirs.get(k):
            return None
        return mine[k] / theirs[k]

    for rng_key, kinds in table.items():
        for kind, row in kinds.items():
            ts = row["two_stacks"]
            cell: dict = {}
            for a in row:
                if a == "two_stacks":
                    continue
                for k in keys:
                    cell[f"{a}_{k}_over_two_stacks"] = over(row[a].get("stats"), ts["stats"], k)
                    if "per_window_min" in row[a]:
                        cell[f"{a}_{k}_over_two_stacks_pwmin"] = over(row[a]["per_window_min"], ts["per_window_min"], k)
            out.setdefault(rng_key, {})[kind] = cell
    return out


def plots(res: dict, out: Path) -> list[str]:
    """Fig. 7-like: latency against window index per algorithm (compiled, wall clock inside the loop)."""
    panels = []
    for group, label in (("count", "max, W[{r},1]"), ("time", "moment_sketch, W[{r},1 s]")):
        for r, tr in res.get("traces", {}).get(group, {}).items():
            shown = f"2^{int(r).bit_length() - 1}" if group == "count" else f"{int(r) // 3_600_000} h"
            if group == "time" and int(r) < 3_600_000:
                shown = f"{int(r) // 1000} s"
            panels.append({"title": label.format(r=shown), "traces": tr["wall"],
                           "ylabel": "latency (ns), max per bin"})
    if not panels:
        return []
    f = C.plot_traces(out / "exp_latency_fig7_wall.png", panels,
                      "Fig. 7-like: per-window latency, compiled per-tuple loop, wall clock read inside the loop; "
                      "each point is the largest of a bin of consecutive windows")
    return [f] if f else []


def main(argv: list[str] | None = None) -> dict:
    """Run both tables (and the interpreter's); write ``exp_latency.json`` and the Fig. 7-like PNG."""
    def extra(ap):
        ap.add_argument("--no-interpreter", action="store_true", help="skip the interpreter's table")
        ap.add_argument("--rt", action="store_true",
                        help="run the compiled tables with the measuring threads on SCHED_FIFO where permitted")

    args = C.parse_args(__doc__, argv, extra)
    cfg = dict(SIZES["smoke" if args.smoke else "full"])
    load = C.LoadLog()
    load.mark("start")
    code = C.code_state()
    t0 = time.time()
    res: dict = {"experiment": "latency", "engine": "compiled", "clock": "wall (TSC read inside the compiled loop)",
                 "sizes": cfg, "smoke": args.smoke, "algorithms": C.replay_algorithms(), "stat_keys": STATS,
                 "unit": "ns", "traces": {}, "cpus_available": len(os.sched_getaffinity(0))}
    floor_s = 0.05 if args.smoke else 0.5
    with noise_floor.realtime(args.rt) as policy, pr.WorkerPool(kind="thread", workers=1) as pool:
        res["policy"] = policy
        print(f"== scheduling policy of the measuring threads: {policy}", flush=True)
        res["noise_floor"] = [noise_floor.measure(floor_s)]
        res["cross_core_ns"] = [round(noise_floor.cross_core_ns(), 1)]
        print("== Table 2: max over count windows (compiled)", flush=True)
        res["count"], res["traces"]["count"] = count_latency(cfg, args.reps or cfg["count_reps"], pool)
        load.mark("count")
        print("== Table 3: moment_sketch over time windows (compiled)", flush=True)
        res["time"], res["traces"]["time"] = time_latency(cfg, args.reps or cfg["time_reps"], pool)
        load.mark("time")
        res["noise_floor"].append(noise_floor.measure(floor_s))
        res["cross_core_ns"].append(round(noise_floor.cross_core_ns(), 1))
    for nf in res["noise_floor"]:
        print(f"  noise floor: max {nf['max_ns'] / 1e3:.1f} us, > 5 us {nf['over_5us_per_s']:.0f}/s, "
              f"> 20 us {nf['over_20us_per_s']:.0f}/s", flush=True)
    res["ratios"] = {"count": ratios(res["count"]), "time": ratios(res["time"])}
    if not args.no_interpreter:
        print("== Table 2 with the interpreter (Python insert)", flush=True)
        it = interpreter_latency(cfg, args.reps or cfg["interp_reps"])
        res["interpreter"] = {"count": it, "ratios": ratios(it), "algorithms": INTERPRETER,
                              "modes": INTERPRETER_MODES}
        load.mark("interpreter")
    res["wall_s"] = round(time.time() - t0, 1)
    res["machine"] = C.machine(load, code)
    res["plots"] = plots(res, args.out_dir)
    C.write_json(args.out_dir / "exp_latency.json", res)
    print(f"wrote {args.out_dir / 'exp_latency.json'} ({res['wall_s']} s; load {res['machine']['load']['load1_max']})")
    return res


if __name__ == "__main__":
    main()
