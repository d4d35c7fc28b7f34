"""Shared helpers of the paper-reproduction experiments (issue 7): ``exp_throughput``, ``exp_latency``, ``exp_scaling``.

What lives here is what the other ``bench/bench_*.py`` files do not offer
(their functions are imported where they fit, see each experiment):

* :class:`LoadLog`: the machine's load average at named points of a run (the
  machine has 2 cores shared with other engineers' runs);
* :func:`interleave`: run named cases in a shuffled order per repetition, so
  every case sees the same noise; :func:`spread`: median, quartiles, extremes;
* :func:`per_tuple_rate`: per-tuple ``insert`` throughput of any operator
  (count or time windows, any slide); :func:`timed_inserts`: latency of chosen
  inserts (the ones that complete a window). ``bench_baselines.throughput`` and
  ``bench_baselines.latencies`` measure the same for count windows with slide 1
  and ``max`` only; they could switch to these two;
* data: uniform synthetic values and a DEBS'12-like series (one sensor of
  :class:`pba_runtime.runtime.Debs12Source`, 100 records per second);
* plotting (matplotlib, Agg backend; skipped with a note when matplotlib is
  missing) and JSON output.

Importing this module puts ``bench/`` on ``sys.path`` so the experiments can
``import bench_baselines`` etc. whether run as scripts or imported by the tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from bench_baselines import machine_info  # noqa: E402

RESULTS = HERE / "results"

__all__ = [
    "RESULTS", "LoadLog", "code_state", "machine", "spread", "interleave", "per_tuple_rate", "timed_inserts", "binned_max",
    "periodic_spike", "spike_height", "uniform_values", "debs12_series", "write_json", "read_json", "plot_lines", "plot_traces",
    "parse_args", "fmt_rate", "replay_algorithms", "compiled_rate",
]


# --------------------------------------------------------------------------- machine and load
class LoadLog:
    """The load average (1, 5, 15 min) at named points of a run.

    Examples
    --------
    >>> log = LoadLog()
    >>> log.mark("start")
    >>> sorted(log.summary())
    ['busy', 'cpus', 'load1_max', 'load1_mean', 'marks']
    """

    def __init__(self) -> None:
        self.marks: list[dict[str, Any]] = []

    def mark(self, what: str) -> None:
        """Record the load average now, labelled ``what``."""
        self.marks.append({"what": what, "time": time.strftime("%H:%M:%S"),
                           "loadavg": [round(x, 2) for x in os.getloadavg()]})

    def summary(self) -> dict[str, Any]:
        """Marks, the largest and mean 1-minute load, and ``busy``: the 1-minute load exceeded the core count."""
        cpus = os.cpu_count() or 1
        ones = [m["loadavg"][0] for m in self.marks] or [os.getloadavg()[0]]
        return {"marks": self.marks, "cpus": cpus, "load1_max": max(ones),
                "load1_mean": round(statistics.fmean(ones), 2), "busy": max(ones) > cpus}


def code_state() -> dict[str, Any]:
    """The commit measured and the library files modified in the working tree (others edit it concurrently)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=HERE.parent, capture_output=True, text=True,
                                  timeout=10).stdout.rstrip("\n")  # porcelain lines start with a space
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = git("status", "--porcelain", "--", "pba_runtime", "spark_integration", "bench")
    return {"commit": git("rev-parse", "--short", "HEAD"), "time": time.strftime("%H:%M:%S"),
            "modified": [line[3:] for line in dirty.splitlines() if line[:2].strip() and not line.startswith("??")]}


def machine(load: LoadLog, code_at_start: dict[str, Any] | None = None) -> dict[str, Any]:
    """Machine description (``bench_baselines.machine_info``), the run's load log, the code at start and end."""
    info = machine_info()
    info["load"] = load.summary()
    info["code"] = {"start": code_at_start, "end": code_state()}
    return info


# --------------------------------------------------------------------------- repetition
def spread(xs: Iterable[float]) -> dict[str, Any]:
    """Median, quartiles, min and max of repeated measurements (and the raw values).

    Examples
    --------
    >>> s = spread([3.0, 1.0, 2.0])
    >>> s["median"], s["min"], s["max"], s["n"]
    (2.0, 1.0, 3.0, 3)
    """
    xs = [float(x) for x in xs]
    if not xs:
        return {"median": None, "min": None, "max": None, "q1": None, "q3": None, "n": 0, "all": []}
    q1, q3 = np.percentile(xs, [25, 75]) if len(xs) > 1 else (xs[0], xs[0])
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "q1": float(q1), "q3": float(q3),
            "n": len(xs), "all": xs}


def interleave(cases: dict[str, Callable[[], Any]], reps: int, seed: int = 0,
               progress: Callable[[str, int, Any], None] | None = None) -> dict[str, list[Any]]:
    """Run every case ``reps`` times in a freshly shuffled order per repetition.

    Parameters
    ----------
    cases : dict of str to callable
        ``name -> fn()``; ``fn`` returns the measurement.
    reps : int
    seed : int
        Seed of the shuffles (the run is reproducible in its order).
    progress : callable, optional
        ``progress(name, rep, result)`` after each run.

    Returns
    -------
    dict of str to list
        The measurements of each case, in repetition order.
    """
    order = random.Random(seed)
    out: dict[str, list[Any]] = {name: [] for name in cases}
    for rep in range(reps):
        names = list(cases)
        order.shuffle(names)
        for name in names:
            res = cases[name]()
            out[name].append(res)
            if progress is not None:
                progress(name, rep, res)
    return out


# --------------------------------------------------------------------------- per-tuple measurements
def per_tuple_rate(make_op: Callable[[], Any], warm: tuple[list, list | None], timed: tuple[list, list | None],
                   warm_batch: bool = False) -> float:
    """Tuples per second of one ``insert`` call per tuple, after a warm-up, garbage collector off.

    Parameters
    ----------
    make_op : callable
        Builds a fresh operator (closed afterwards).
    warm, timed : (values, timestamps or None)
        Python lists; the warm-up fills the window before timing starts.
    warm_batch : bool
        Warm up with one ``insert_many`` call (same state, faster for PBA/SBA).
    """
    op = make_op()
    try:
        wv, wt = warm
        if warm_batch and len(wv):
            op.insert_many(np.asarray(wv, dtype=float), None if wt is None else np.asarray(wt, dtype=np.int64))
        else:
            for i, v in enumerate(wv):
                op.insert(v, None if wt is None else wt[i])
        values, stamps = timed
        ins = op.insert
        gc.disable()
        try:
            if stamps is None:
                t0 = time.perf_counter()
                for v in values:
                    ins(v)
            else:
                t0 = time.perf_counter()
                for v, t in zip(values, stamps):
                    ins(v, t)
            dt = time.perf_counter() - t0
        finally:
            gc.enable()
    finally:
        op.close()
    return len(values) / dt


def timed_inserts(op: Any, values: list, stamps: list | None, timed: np.ndarray,
                  clock: Callable[[], int] = time.perf_counter_ns, drop_preempted: bool = False
                  ) -> tuple[np.ndarray, int, int]:
    """Latency (``clock`` units) of the inserts at the positions ``timed``; the others run untimed.

    Returns the latencies, how many timed inserts completed no window (0 when
    ``timed`` marks exactly the window-completing inserts) and how many were
    dropped as preempted: with ``drop_preempted`` a sample is kept only if the
    thread's involuntary context switches (``getrusage(RUSAGE_THREAD)``, read
    outside the timed span) did not move, the *undisturbed* mode of
    ``bench_baselines.latencies``. The garbage collector is off for the loop.
    """
    import resource

    usage, me = resource.getrusage, resource.RUSAGE_THREAD
    out = np.empty(len(timed), dtype=np.int64)
    keep = np.ones(len(timed), dtype=bool)
    ins = op.insert
    missed = 0
    pos = 0
    c0 = 0
    gc.disable()
    try:
        for j, i in enumerate(timed.tolist()):
            if stamps is None:
                for v in values[pos:i]:
                    ins(v)
                args = (values[i],)
            else:
                for v, t in zip(values[pos:i], stamps[pos:i]):
                    ins(v, t)
                args = (values[i], stamps[i])
            if drop_preempted:
                c0 = usage(me).ru_nivcsw
            t0 = clock()
            got = ins(*args)
            out[j] = clock() - t0
            if drop_preempted:
                keep[j] = usage(me).ru_nivcsw == c0
            missed += not got
            pos = i + 1
    finally:
        gc.enable()
    return out[keep], missed, int((~keep).sum())


def binned_max(lat: np.ndarray, bins: int) -> tuple[int, list[int]]:
    """``(bin width, largest latency of each bin)``: a Fig. 7-like trace small enough for JSON."""
    width = max(1, -(-len(lat) // bins))
    n = len(lat) // width * width
    head = lat[:n].reshape(-1, width).max(axis=1).tolist()
    if n < len(lat):
        head.append(int(lat[n:].max()))
    return width, head


def periodic_spike(lat: np.ndarray, period: int, jitter: int = 2) -> float:
    """Height of a spike recurring every ``period`` samples at the same phase (Two-Stacks' flip, a chunk boundary).

    The samples are folded by ``p`` (one row per period), the median is taken
    over the periods for every phase, and the largest of those medians is
    kept; the result is the largest over ``p`` in ``period +- jitter`` (Two-Stacks
    flips every ``range + 1`` windows, not every ``range``). A random preemption
    or interrupt does not survive the median, a spike at the same phase of
    every period does. With fewer than 3 full periods it is only as robust as
    the few periods it has.

    Examples
    --------
    >>> lat = np.full(4000, 100)
    >>> lat[7::1000] = 5000  # periodic
    >>> lat[123] = 10**6      # one-off
    >>> periodic_spike(lat, 1000)
    5000.0
    """
    lat = np.asarray(lat)
    best = None
    for p in range(max(1, period - jitter), period + jitter + 1):
        m = len(lat) // p
        h = float(np.max(lat)) if m == 0 else float(np.median(lat[: m * p].reshape(m, p), axis=0).max())
        best = h if best is None else max(best, h)
    return best


def spike_height(lat: np.ndarray, period: int) -> float:
    """Typical height of a spike recurring every ``period`` samples: median of the ``len/period`` largest.

    Robust to a few preemptions (they are fewer than the periodic spikes);
    for an algorithm without periodic spikes it is just a high percentile.
    """
    k = max(1, len(lat) // max(1, period))
    return float(np.median(np.partition(lat, len(lat) - k)[len(lat) - k:]))


# --------------------------------------------------------------------------- the compiled per-tuple engine
#: display order of the compiled engine's algorithms; any other ``pr.replay`` supports comes after, sorted
REPLAY_ORDER = ("two_stacks", "daba", "slick_deque", "flatfat", "soe", "fiba", "sba", "pba")


def replay_algorithms() -> list[str]:
    """The algorithms ``pr.replay`` runs, read from its registry (others are added there in parallel).

    Examples
    --------
    >>> {"sba", "pba"} <= set(replay_algorithms())
    True
    """
    import importlib

    names = list(importlib.import_module("pba_runtime.replay").REPLAY_ALGORITHMS)
    return [a for a in REPLAY_ORDER if a in names] + sorted(a for a in names if a not in REPLAY_ORDER)


def replay_runs(alg: str, window: Any, agg: str, values: np.ndarray, timestamps: np.ndarray | None = None) -> bool:
    """Whether ``pr.replay`` runs ``alg`` over ``window`` and ``agg`` (SlickDeque needs a selective aggregation,
    SoE an invertible one); the probe also compiles the loop (or loads it from numba's cache)."""
    import pba_runtime as pr

    n = min(len(values), 2 * window.range // (1 if isinstance(window, pr.CountWindow) else 10) + 8)
    try:
        pr.replay(alg, window, agg, values[:n], None if timestamps is None else timestamps[:n])
    except ValueError:
        return False
    return True


def compiled_rate(alg: str, window: Any, agg: str, values: np.ndarray, timestamps: np.ndarray | None = None,
                  pool: Any = None, stats: dict | None = None) -> float:
    """Tuples per second of ``pr.replay`` (the compiled per-tuple loop, one tuple at a time) over the whole stream.

    ``pool``: PBA's worker pool (its lcs on a thread of it); ``stats``: filled with the run's counters.
    """
    import pba_runtime as pr

    out = pr.replay(alg, window, agg, values, timestamps, pool=pool if alg == "pba" else None)
    if stats is not None:
        stats.clear()
        stats.update(out.stats)
    return out.throughput


# --------------------------------------------------------------------------- data
def uniform_values(n: int, seed: int = 0) -> np.ndarray:
    """Uniform synthetic float64 values in [0, 1) (the paper's synthetic data set)."""
    return np.random.default_rng(seed).random(n)


def debs12_series(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A DEBS'12-like series: one energy sensor, 100 records per second; ``(values, timestamps in ms)``."""
    from pba_runtime.runtime import Debs12Source

    _, values, ts = Debs12Source(sensors=1, tuples=None).take(0, n)
    return np.ascontiguousarray(values, dtype=np.float64), np.ascontiguousarray(ts, dtype=np.int64)


# --------------------------------------------------------------------------- output
def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON atomically (a ``.tmp`` file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """The JSON at ``path``, or ``None`` when the file does not exist."""
    return json.loads(path.read_text()) if path.exists() else None


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


STYLE = {"recal": ("tab:gray", ":"), "two_stacks": ("tab:red", "-"), "daba": ("tab:purple", "-"),
         "slick_deque": ("tab:orange", "-"), "flatfat": ("tab:brown", "-"), "sba": ("tab:blue", "--"),
         "pba": ("tab:green", "-"), "batch_pba": ("tab:green", "-."), "batch_sba": ("tab:blue", "-."),
         "bottleneck": ("black", "-."), "pandas": ("tab:olive", "-.")}


def plot_lines(path: Path, panels: list[dict[str, Any]], title: str) -> str | None:
    """One PNG of side-by-side panels of lines with their spread; returns the file name or ``None``.

    Each panel: ``{"title", "x" (list), "xlabel", "ylabel", "logx", "logy", "ymin0", "xticklabels" (optional),
    "series": {name: [spread dict or None per x]}}``; a line is drawn through the medians
    and a band from min to max.
    """
    plt = _pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
    for ax, p in zip(axes[0], panels):
        for name, cells in p["series"].items():
            pts = [(x, c) for x, c in zip(p["x"], cells) if c and c.get("median")]
            if not pts:
                continue
            xs = [x for x, _ in pts]
            color, ls = STYLE.get(name, (None, "-"))
            ax.plot(xs, [c["median"] for _, c in pts], ls, color=color, marker="o", ms=3, label=name)
            ax.fill_between(xs, [c["min"] for _, c in pts], [c["max"] for _, c in pts], color=color, alpha=0.15)
        if p.get("logx"):
            ax.set_xscale("log", base=2)
        if p.get("logy"):
            ax.set_yscale("log")
        elif p.get("ymin0"):
            ax.set_ylim(bottom=0)
        if p.get("xticklabels"):
            ax.set_xticks(p["x"], p["xticklabels"])
        ax.set_xlabel(p["xlabel"])
        ax.set_ylabel(p["ylabel"])
        ax.set_title(p["title"], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def plot_traces(path: Path, panels: list[dict[str, Any]], title: str) -> str | None:
    """Fig. 7-like PNG: per panel, latency (log scale) against window index, one line per algorithm.

    Each panel: ``{"title", "ylabel", "traces": {name: (bin width, [values])}}``.
    """
    plt = _pyplot()
    if plt is None:
        return None
    cols = 2
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(12, 3.6 * rows), squeeze=False)
    for ax, p in zip(axes.ravel(), panels):
        for name, (width, ys) in p["traces"].items():
            color, _ = STYLE.get(name, (None, "-"))
            ax.plot(np.arange(len(ys)) * width, ys, lw=0.7, color=color, label=name)
        ax.set_yscale("log")
        ax.set_xlabel("window index (measured windows)")
        ax.set_ylabel(p["ylabel"])
        ax.set_title(p["title"], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


# --------------------------------------------------------------------------- command line
def parse_args(doc: str, argv: list[str] | None, extra: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    """The experiments' common options: ``--smoke``, ``--out-dir``, ``--reps``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", "--quick", dest="smoke", action="store_true",
                    help="tiny sizes, a few seconds (the test suite runs this)")
    ap.add_argument("--out-dir", type=Path, default=RESULTS, help="where JSON and PNG go (default bench/results)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default: 3, smoke 1)")
    if extra is not None:
        extra(ap)
    return ap.parse_args(argv)


def fmt_rate(x: float | None) -> str:
    """``1.23M`` style; ``-`` for missing."""
    if x is None:
        return "-"
    return f"{x / 1e6:.2f}M" if x >= 1e5 else f"{x / 1e3:.0f}k"
