"""Metrics of a job: throughput, windows, latency percentiles, lcs stalls, late tuples, where time goes.

* **Latency** of a window is the time from the *arrival* of the tuple that
  completes it (when the source read the batch holding that tuple,
  ``time.monotonic()``, a clock shared by all processes) to the moment its
  result is handed to the sink (written to the file or stdout, or counted by
  the ``none`` sink). Results of one batch share one latency, so the figures
  include the batching delay. They are kept in a log-scale histogram (2 %
  buckets), so memory stays bounded on endless streams.
* **Where the time goes**: every stage times its phases (source read,
  partitioning, putting on a queue; receiving, grouping by key, aggregation,
  formatting, emitting; writing) in wall-clock *and* thread CPU seconds
  (:class:`PhaseClock`); a process's CPU beyond its timed threads is its
  queue feeder threads (pickling) and, in a slot, the lcs worker pool.

Examples
--------
>>> h = LatencyHistogram()
>>> for ms in (1, 2, 3, 4, 100):
...     h.record(ms / 1000, 1)
>>> round(h.percentile(50) * 1000, 1), round(h.percentile(100) * 1000)
(3.0, 100)
>>> h.count
5
"""

from __future__ import annotations

import math
import resource
import time
from collections import Counter
from typing import Any

__all__ = ["LatencyHistogram", "PhaseClock", "JobMetrics", "format_count", "REASON_TEXT", "where_lcs", "Rusage"]

#: How the summary spells each reason of the per-key algorithm choice (``pba_runtime.algorithms.REASONS``).
REASON_TEXT = {
    "requested": "requested",
    "large_window": "window of enough slices, cores to spare",
    "small_window": "window too small for PBA to pay",
    "one_core": "one core per slot: a worker would take turns with the main loop",
    "small_key": "a key's pieces too short for PBA's batch merge to split",
    "pool_unavailable": "no worker pool",
    "pool_died": "the worker pool died",
    "restored": "restored from the checkpoint",
    "order_statistic": "an order statistic: each window kept sorted, no algorithm of partials",
    # the batch policy's (pr.sliding_aggregate, an "auto" operator's first batch; not the keyed runtime's)
    "batch_split": "a batch large enough to split with a free worker",
    "small_batch": "a batch too small for PBA's split to pay",
    "busy_pool": "the pool's worker was busy",
    "one_thread_batch": "a batch that runs on one thread whatever the pool",
}

_BASE = 1.02
_LOG_BASE = math.log(_BASE)
_FLOOR = 1e-6  # 1 microsecond


class LatencyHistogram:
    """Weighted latencies (seconds) in logarithmic buckets 2 % wide.

    :meth:`percentile` returns the upper bound of the bucket holding the
    percentile (at most 2 % above the true value), and never more than the
    largest latency recorded.
    """

    def __init__(self) -> None:
        self._buckets: Counter[int] = Counter()
        self.count = 0
        self.max = 0.0
        self.total = 0.0

    def record(self, seconds: float, weight: int = 1) -> None:
        """Record ``weight`` windows that waited ``seconds``."""
        if weight <= 0:
            return
        s = max(seconds, _FLOOR)
        self._buckets[int(math.log(s / _FLOOR) / _LOG_BASE)] += weight
        self.count += weight
        self.total += s * weight
        if s > self.max:
            self.max = s

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile (0-100) in seconds; NaN when nothing was recorded."""
        if not self.count:
            return math.nan
        rank = max(1, math.ceil(self.count * p / 100.0))
        seen = 0
        for b in sorted(self._buckets):
            seen += self._buckets[b]
            if seen >= rank:
                return min(self.max, _FLOOR * _BASE ** (b + 1))
        return self.max

    def summary(self) -> dict[str, float]:
        """p50, p90, p99, p99.9, max and mean, in milliseconds."""
        out = {f"p{p:g}": self.percentile(p) * 1000 for p in (50, 90, 99, 99.9)}
        out["max"] = self.max * 1000 if self.count else math.nan
        out["mean"] = self.total / self.count * 1000 if self.count else math.nan
        return out


class Rusage:
    """What the kernel did for a thread (or a process) since this was made: system CPU seconds, minor page
    faults (first touches of fresh pages), voluntary and involuntary context switches.

    ``who``: ``"thread"`` (the calling thread: make and read it on that thread) or ``"process"``. Where the
    system has no per-thread figures, :meth:`delta` reports zeros.

    Examples
    --------
    >>> r = Rusage("thread"); sorted(r.delta())
    ['minflt', 'nivcsw', 'nvcsw', 'sys_s']
    """

    _WHO = {"thread": getattr(resource, "RUSAGE_THREAD", None), "process": resource.RUSAGE_SELF}

    def __init__(self, who: str = "thread") -> None:
        self._who = self._WHO[who]
        self._base = self._now()

    def _now(self) -> tuple[float, int, int, int]:
        if self._who is None:
            return (0.0, 0, 0, 0)
        r = resource.getrusage(self._who)
        return (r.ru_stime, r.ru_minflt, r.ru_nvcsw, r.ru_nivcsw)

    def delta(self) -> dict[str, float]:
        """``{"sys_s", "minflt", "nvcsw", "nivcsw"}`` since this was made."""
        now = self._now()
        return dict(zip(("sys_s", "minflt", "nvcsw", "nivcsw"), (a - b for a, b in zip(now, self._base))))


class PhaseClock:
    """Wall-clock and CPU seconds per named phase of one thread.

    ``mark()`` starts a timed region, ``lap(phase)`` ends it and charges the
    interval to ``phase``; CPU time is the calling thread's
    (``time.thread_time``), so a thread that waits (for a queue, or for the
    CPU on a busy machine) is charged wall time but no CPU time.

    Examples
    --------
    >>> c = PhaseClock()
    >>> c.mark(); x = sum(range(10_000)); c.lap("work")
    >>> sorted(c.wall), c.cpu["work"] >= 0.0
    (['work'], True)
    """

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._cpu0 = time.thread_time()
        self.rusage = Rusage("thread")
        self.mark()

    def mark(self) -> None:
        self._w = time.perf_counter()
        self._c = time.thread_time()

    def lap(self, phase: str) -> None:
        w, c = time.perf_counter(), time.thread_time()
        self.wall[phase] = self.wall.get(phase, 0.0) + (w - self._w)
        self.cpu[phase] = self.cpu.get(phase, 0.0) + (c - self._c)
        self._w, self._c = w, c

    def thread_cpu(self) -> float:
        """CPU seconds of this thread since the clock was made."""
        return time.thread_time() - self._cpu0

    def report(self) -> dict[str, Any]:
        """Phases, the thread's CPU seconds and its :class:`Rusage` (call on the clock's thread)."""
        return {"wall": dict(self.wall), "cpu": dict(self.cpu), "thread_cpu": self.thread_cpu(),
                "rusage": self.rusage.delta()}


def _merge(dicts: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _malformed(n: int) -> str:
    """The summary's note of malformed source entries (a log source's), or nothing."""
    if not n:
        return ""
    return f"; {n:,} malformed {'entry' if n == 1 else 'entries'} (to the source's side stream)"


def _shares(cpu: dict[str, float], total: float) -> str:
    items = sorted(cpu.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v / total:.0%}" for k, v in items if total > 0 and v / total >= 0.005)


def _reasons(reasons: dict[str, int]) -> str:
    """``{"sba:small_window": 84}`` -> ``'sba x84: window too small for PBA to pay'``."""
    out = []
    for key, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        alg, _, why = key.partition(":")
        out.append(f"{alg} x{n}: {REASON_TEXT.get(why, why)}")
    return "; ".join(out)


def where_lcs(summary: dict[str, Any], split_min: dict[str, int] | None = None) -> str:
    """Where the lcs of a job were built, and why, from the slots' statistics (operators' ``stats()``,
    the slots' worker-pool task counts and the largest per-key merge).

    Examples
    --------
    >>> where_lcs({"algorithms": {"sba": 84}, "worker_tasks": 0, "lcs_tasks": 0, "merges": 9000,
    ...            "largest_merge": 420, "engines": {"compiled": 84}})
    "inline on the slots' main loops (SBA builds every lcs itself, by design)"
    >>> text = where_lcs({"algorithms": {"pba": 84}, "worker_tasks": 0, "lcs_tasks": 0, "merges": 9000,
    ...                   "largest_merge": 420, "engines": {"compiled": 84}}, {"compiled_windows": 32768})
    >>> text.split("; ")[0]
    "0 worker tasks: every merge ran inline on the slots' main loops (a key's share of a batch was at most 420 windows"
    >>> text.split("; ")[1]
    "PBA's batch merge gives its worker half a merge from 32,768 windows)"
    """
    algs = summary.get("algorithms", {})
    if not algs:
        return "no keys"
    tasks = int(summary.get("worker_tasks", 0)) + int(summary.get("lcs_tasks", 0))
    merges = int(summary.get("merges", 0))
    if "pba" not in algs:
        what = "SBA builds every lcs itself, by design" if "sba" in algs else "no lcs: the algorithm has none"
        if set(algs) - {"sba"} and "sba" in algs:
            what = "SBA builds every lcs itself; the other algorithms have none"
        return f"inline on the slots' main loops ({what})"
    if tasks:
        return (f"{tasks:,} worker tasks (lcs and merge halves) over {merges:,} per-key merges "
                f"of {algs['pba']} PBA keys")
    split = split_min or {}
    engines = summary.get("engines", {})
    if "compiled" in engines and "compiled_windows" in split:
        rule = f"PBA's batch merge gives its worker half a merge from {split['compiled_windows']:,} windows"
    elif "numpy" in engines and "numpy_slices" in split:
        rule = f"PBA's batch merge gives its worker rows from {split['numpy_slices']:,} slice partials"
    else:
        rule = "PBA's batch path splits no merge this small"
    return (f"0 worker tasks: every merge ran inline on the slots' main loops (a key's share of a batch was at "
            f"most {int(summary.get('largest_merge', 0)):,} windows; {rule})")


def format_count(n: float) -> str:
    """``1234567`` -> ``'1.23M'``.

    Examples
    --------
    >>> format_count(950), format_count(12_345), format_count(4_000_000)
    ('950', '12.3k', '4.00M')
    """
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            v = n / div
            return f"{v:.{2 if v < 10 else 1 if v < 100 else 0}f}{unit}"
    return f"{n:.0f}"


class JobMetrics:
    """Counters of a running job, kept by the coordinator.

    Slot statistics arrive as dicts (see :meth:`pba_runtime.runtime.slot.TaskSlot.stats`)
    and replace the previous report of the same slot; counters restored from
    a checkpoint are added to the totals.
    """

    def __init__(self, parallelism: int) -> None:
        self.parallelism = parallelism
        self.started = time.monotonic()
        self.finished: float | None = None
        self.startup = 0.0  # seconds from Job.run() to the stream's start (processes, kernels)
        self._cpu0 = time.process_time()
        self._rusage = Rusage("process")
        self.coordinator_cpu: float | None = None
        self.coordinator_rusage: dict[str, float] = {}
        self.tuples = 0  # read from the source in this run
        self.windows = 0  # results handed to the sink in this run
        self.late = 0  # late tuples written to the side output in this run
        self.malformed = 0  # source entries that could not be read, sent to the source's side stream
        self.restored = {"tuples": 0, "windows": 0, "late": 0}
        self.latency = LatencyHistogram()
        self.coordinator: dict[str, Any] = {}  # PhaseClock.report() of the source loop
        self.sink: dict[str, Any] = {}  # PhaseClock.report() of the sink thread
        self.slots: dict[int, dict[str, Any]] = {}
        self.checkpoints = 0
        self.checkpoint_seconds = 0.0
        self.last_checkpoint: int | None = None

    # ------------------------------------------------------------------ updates
    def slot_report(self, slot: int, stats: dict[str, Any]) -> None:
        self.slots[slot] = stats

    def start(self, startup: float = 0.0) -> None:
        """The stream starts now (after the task slots are up); ``startup``: seconds it took to get here."""
        self.startup = startup
        self.started = time.monotonic()
        self._cpu0 = time.process_time()
        self._rusage = Rusage("process")

    def finish(self) -> None:
        self.finished = time.monotonic()
        self.coordinator_cpu = time.process_time() - self._cpu0
        self.coordinator_rusage = self._rusage.delta()

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    # ------------------------------------------------------------------ views
    def _slot_sum(self, field: str) -> float:
        return sum(s.get(field, 0) for s in self.slots.values())

    def _slot_merge(self, field: str) -> dict[str, int]:
        out: Counter[str] = Counter()
        for s in self.slots.values():
            out.update(s.get(field, {}))
        return dict(out)

    def algorithms(self) -> dict[str, int]:
        """Keys per algorithm, over all slots."""
        out: Counter[str] = Counter()
        for s in self.slots.values():
            out.update(s.get("algorithms", {}))
        return dict(out)

    def outputs(self) -> dict[str, dict[str, Any]]:
        """A query job's outputs, over all slots: per name, the windows it emitted in this run and its keys'
        algorithms (empty for a job of one output)."""
        out: dict[str, dict[str, Any]] = {}
        for s in self.slots.values():
            for name, o in s.get("outputs", {}).items():
                mine = out.setdefault(name, {"windows": 0, "algorithms": Counter()})
                mine["windows"] += o["windows"]
                mine["algorithms"].update(o["algorithms"])
        return {n: {"windows": o["windows"], "algorithms": dict(o["algorithms"])} for n, o in out.items()}

    def time_shares(self) -> dict[str, Any]:
        """Wall and CPU seconds per phase, per stage (coordinator loop, sink thread, slots summed).

        ``other_threads_cpu`` is the CPU of a stage's processes beyond their
        timed threads: queue feeder threads (pickling) and, in the slots, the
        worker-pool threads that build lcs.
        """
        clocks = [s.get("clock", {}) for s in self.slots.values()]
        slot_cpu = self._slot_sum("cpu_s")
        coord_cpu = self.coordinator_cpu if self.coordinator_cpu is not None else time.process_time() - self._cpu0
        c, k = self.coordinator, self.sink
        return {
            "coordinator": {"wall": c.get("wall", {}), "cpu": c.get("cpu", {}), "process_cpu": coord_cpu,
                            "other_threads_cpu": max(0.0, coord_cpu - c.get("thread_cpu", 0.0)
                                                     - k.get("thread_cpu", 0.0))},
            "sink_thread": {"wall": k.get("wall", {}), "cpu": k.get("cpu", {}),
                            "thread_cpu": k.get("thread_cpu", 0.0)},
            "slots": {"wall": _merge([x.get("wall", {}) for x in clocks]),
                      "cpu": _merge([x.get("cpu", {}) for x in clocks]), "process_cpu": slot_cpu,
                      "other_threads_cpu": max(0.0, slot_cpu - sum(x.get("thread_cpu", 0.0) for x in clocks))},
        }

    def rusage(self) -> dict[str, Any]:
        """What the kernel did during the stream (:class:`Rusage`: system CPU, minor faults, context
        switches): the coordinator's process, its source loop and its sink thread; each slot's process,
        main thread and output stage (empty where not reported)."""
        return {"coordinator": {"process": self.coordinator_rusage, "main": self.coordinator.get("rusage", {}),
                                "sink_thread": self.sink.get("rusage", {})},
                "slots": {str(i): s.get("rusage", {}) for i, s in sorted(self.slots.items())}}

    def summary(self) -> dict[str, Any]:
        """Everything, as a JSON-serialisable dict."""
        el = self.elapsed
        return {
            "elapsed_s": el,
            "startup_s": self.startup,
            "parallelism": self.parallelism,
            "tuples": self.tuples,
            "tuples_per_s": self.tuples / el if el > 0 else math.nan,
            "windows": self.windows,
            "late": self.late,
            "malformed": self.malformed,
            "total": {k: self.restored[k] + getattr(self, k) for k in ("tuples", "windows", "late")},
            "latency_ms": self.latency.summary(),
            "keys": int(self._slot_sum("keys")),
            "algorithms": self.algorithms(),
            "lcs_tasks": int(self._slot_sum("lcs_tasks")),
            "worker_tasks": int(self._slot_sum("pool_tasks")),
            "merges": int(self._slot_sum("calls")),
            "largest_merge": max((int(s.get("largest_piece", 0)) for s in self.slots.values()), default=0),
            "reasons": self._slot_merge("reasons"),
            "outputs": self.outputs(),
            "engines": self._slot_merge("engines"),
            "lcs_stalls": int(self._slot_sum("stalls")),
            "lcs_stall_s": self._slot_sum("stall_time"),
            "checkpoints": self.checkpoints,
            "checkpoint_s": self.checkpoint_seconds,
            "time_s": self.time_shares(),
            "rusage": self.rusage(),
            "slots": {str(i): {k: v for k, v in s.items() if k not in ("clock", "rusage")} for i, s in sorted(self.slots.items())},
        }

    def _split_min(self) -> dict[str, int]:
        for s in self.slots.values():
            if "split_min" in s:
                return s["split_min"]
        return {}

    def line(self) -> str:
        """One progress line (periodic metrics, SIGUSR1)."""
        el = self.elapsed
        lat = self.latency
        return (f"[{el:6.1f}s] {format_count(self.tuples)} tuples ({format_count(self.tuples / max(el, 1e-9))}/s), "
                f"{format_count(self.windows)} windows, {self.late} late, "
                + (f"{self.malformed} malformed, " if self.malformed else "")
                + (f"latency p50 {lat.percentile(50) * 1000:.1f} ms p99 {lat.percentile(99) * 1000:.1f} ms, "
                   if lat.count else "latency - (no windows yet), ")
                + f"lcs stalls {int(self._slot_sum('stalls'))}, checkpoints {self.checkpoints}")

    def text(self) -> str:
        """The end-of-job summary, for people."""
        s = self.summary()
        lat = s["latency_ms"]
        algs = ", ".join(f"{a} x{n}" for a, n in sorted(s["algorithms"].items())) or "-"
        lines = [
            f"tuples       {s['tuples']:,} in {s['elapsed_s']:.2f} s = {format_count(s['tuples_per_s'])} tuples/s "
            f"(parallelism {self.parallelism}; {s['startup_s']:.2f} s start-up before: processes, kernels)",
            f"windows      {s['windows']:,} emitted" + (f" (rows of {len(s['outputs'])} outputs each)"
                                                        if s["outputs"] else ""),
            f"late tuples  {s['late']:,}" + _malformed(s["malformed"]),
            (f"latency      p50 {lat['p50']:.2f} ms, p90 {lat['p90']:.2f} ms, p99 {lat['p99']:.2f} ms, "
             f"max {lat['max']:.2f} ms (arrival of the completing tuple -> result at the sink)"
             if self.latency.count else "latency      - (no windows)"),
            f"lcs          {where_lcs(s, self._split_min())}; {s['lcs_stalls']:,} stalls "
            f"({s['lcs_stall_s'] * 1000:.1f} ms waited)",
            f"keys         {s['keys']:,} ({_reasons(s['reasons']) or algs})",
        ]
        for name, o in s["outputs"].items():
            algs = ", ".join(f"{a} x{n}" for a, n in sorted(o["algorithms"].items())) or "-"
            lines.append(f"output       {name}: {o['windows']:,} windows ({algs})")
        if any(s["total"][k] != s[k] for k in ("tuples", "windows", "late")):
            t = s["total"]
            lines.append(f"since start  {t['tuples']:,} tuples, {t['windows']:,} windows, {t['late']:,} late "
                         "(this run resumed from a checkpoint)")
        if self.checkpoints:
            lines.append(f"checkpoints  {self.checkpoints} written ({self.checkpoint_seconds * 1000:.0f} ms in total)")
        sh = s["time_s"]
        sl, co, sk = sh["slots"], sh["coordinator"], sh["sink_thread"]
        if sl["process_cpu"] > 0:
            cpu = dict(sl["cpu"], lcs_pool_and_queue_threads=sl["other_threads_cpu"])
            lines.append(f"slots cpu    {sl['process_cpu']:.2f} s: {_shares(cpu, sl['process_cpu'])}")
        if co["process_cpu"] > 0:
            cpu = dict(co["cpu"], queue_threads=co["other_threads_cpu"], sink=sk["thread_cpu"])
            lines.append(f"coordinator  {co['process_cpu']:.2f} s cpu: {_shares(cpu, co['process_cpu'])}")
        return "\n".join(lines)
