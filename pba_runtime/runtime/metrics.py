"""Metrics of a job: throughput, windows, latency percentiles, lcs stalls, late tuples, where time goes.

* **Latency** of a window is the time from the *arrival* of the tuple that
  completes it (when the source read the batch holding that tuple,
  ``time.monotonic()``, a clock shared by all processes) to the moment its
  result is handed to the sink (written to the file or stdout, or counted by
  the ``none`` sink). Results of one batch share one latency, so the figures
  include the batching delay. They are kept in a log-scale histogram (2 %
  buckets), so memory stays bounded on endless streams.
* **Time shares**: every stage times its phases (source read, partitioning,
  blocked on a full queue, waiting for input, grouping by key, aggregation,
  formatting, writing) so the summary says where the time goes.

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
import time
from collections import Counter
from typing import Any

__all__ = ["LatencyHistogram", "PhaseTimer", "JobMetrics", "format_count"]

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


class PhaseTimer:
    """Seconds spent per named phase.

    Examples
    --------
    >>> t = PhaseTimer()
    >>> t.add("aggregate", 0.5); t.add("aggregate", 0.25)
    >>> t.seconds
    {'aggregate': 0.75}
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def merge(self, other: dict[str, float]) -> None:
        for k, v in other.items():
            self.add(k, v)


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

    Slot statistics arrive as dicts (see :mod:`pba_runtime.runtime.slot`) and
    replace the previous report of the same slot; counters restored from a
    checkpoint are added to the totals.
    """

    def __init__(self, parallelism: int) -> None:
        self.parallelism = parallelism
        self.started = time.monotonic()
        self.finished: float | None = None
        self._cpu0 = time.process_time()
        self.coordinator_cpu: float | None = None
        self.tuples = 0  # read from the source in this run
        self.windows = 0  # results handed to the sink in this run
        self.late = 0  # late tuples written to the side output in this run
        self.restored = {"tuples": 0, "windows": 0, "late": 0}
        self.latency = LatencyHistogram()
        self.coordinator = PhaseTimer()  # source, partition, queue_put
        self.sink = PhaseTimer()  # write, checkpoint
        self.slots: dict[int, dict[str, Any]] = {}
        self.checkpoints = 0
        self.checkpoint_seconds = 0.0
        self.last_checkpoint: int | None = None

    # ------------------------------------------------------------------ updates
    def slot_report(self, slot: int, stats: dict[str, Any]) -> None:
        self.slots[slot] = stats

    def start(self) -> None:
        """The stream starts now (after the task slots are up)."""
        self.started = time.monotonic()
        self._cpu0 = time.process_time()

    def finish(self) -> None:
        self.finished = time.monotonic()
        self.coordinator_cpu = time.process_time() - self._cpu0

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    # ------------------------------------------------------------------ views
    def _slot_sum(self, field: str) -> float:
        return sum(s.get(field, 0) for s in self.slots.values())

    def algorithms(self) -> dict[str, int]:
        """Keys per algorithm, over all slots."""
        out: Counter[str] = Counter()
        for s in self.slots.values():
            out.update(s.get("algorithms", {}))
        return dict(out)

    def time_shares(self) -> dict[str, dict[str, float]]:
        """Seconds per phase, per stage (coordinator, slots summed, sink)."""
        slots = PhaseTimer()
        for s in self.slots.values():
            slots.merge(s.get("phases", {}))
        return {"coordinator": dict(self.coordinator.seconds), "slots": dict(slots.seconds),
                "sink": dict(self.sink.seconds)}

    def summary(self) -> dict[str, Any]:
        """Everything, as a JSON-serialisable dict."""
        el = self.elapsed
        return {
            "elapsed_s": el,
            "parallelism": self.parallelism,
            "tuples": self.tuples,
            "tuples_per_s": self.tuples / el if el > 0 else math.nan,
            "windows": self.windows,
            "late": self.late,
            "total": {k: self.restored[k] + getattr(self, k) for k in ("tuples", "windows", "late")},
            "latency_ms": self.latency.summary(),
            "keys": int(self._slot_sum("keys")),
            "algorithms": self.algorithms(),
            "lcs_tasks": int(self._slot_sum("lcs_tasks")),
            "lcs_stalls": int(self._slot_sum("stalls")),
            "lcs_stall_s": self._slot_sum("stall_time"),
            "checkpoints": self.checkpoints,
            "checkpoint_s": self.checkpoint_seconds,
            "time_s": self.time_shares(),
            "cpu_s": {"coordinator": self.coordinator_cpu if self.coordinator_cpu is not None
                      else time.process_time() - self._cpu0, "slots": self._slot_sum("cpu_s")},
            "slots": {str(i): {k: v for k, v in s.items() if k != "phases"} for i, s in sorted(self.slots.items())},
        }

    def line(self) -> str:
        """One progress line (periodic metrics, SIGUSR1)."""
        el = self.elapsed
        lat = self.latency
        return (f"[{el:6.1f}s] {format_count(self.tuples)} tuples ({format_count(self.tuples / max(el, 1e-9))}/s), "
                f"{format_count(self.windows)} windows, {self.late} late, "
                f"latency p50 {lat.percentile(50) * 1000:.1f} ms p99 {lat.percentile(99) * 1000:.1f} ms, "
                f"lcs stalls {int(self._slot_sum('stalls'))}, checkpoints {self.checkpoints}")

    def text(self) -> str:
        """The end-of-job summary, for people."""
        s = self.summary()
        lat = s["latency_ms"]
        algs = ", ".join(f"{a} x{n}" for a, n in sorted(s["algorithms"].items())) or "-"
        lines = [
            f"tuples       {s['tuples']:,} in {s['elapsed_s']:.2f} s = {format_count(s['tuples_per_s'])} tuples/s "
            f"(parallelism {self.parallelism})",
            f"windows      {s['windows']:,} emitted",
            f"late tuples  {s['late']:,}",
            f"latency      p50 {lat['p50']:.2f} ms, p90 {lat['p90']:.2f} ms, p99 {lat['p99']:.2f} ms, "
            f"max {lat['max']:.2f} ms (arrival of the completing tuple -> result at the sink)",
            f"lcs          {s['lcs_tasks']:,} tasks, {s['lcs_stalls']:,} stalls ({s['lcs_stall_s'] * 1000:.1f} ms waited)",
            f"keys         {s['keys']:,} ({algs})",
        ]
        if any(s["total"][k] != s[k] for k in ("tuples", "windows", "late")):
            t = s["total"]
            lines.append(f"since start  {t['tuples']:,} tuples, {t['windows']:,} windows, {t['late']:,} late "
                         "(this run resumed from a checkpoint)")
        if self.checkpoints:
            lines.append(f"checkpoints  {self.checkpoints} written ({self.checkpoint_seconds * 1000:.0f} ms in total)")
        shares = s["time_s"]
        slot_total = sum(shares["slots"].values())
        if slot_total > 0:
            parts = ", ".join(f"{k} {v / slot_total:.0%}" for k, v in
                              sorted(shares["slots"].items(), key=lambda kv: -kv[1]))
            lines.append(f"slot time    {parts}")
        cpu = s["cpu_s"]
        lines.append(f"cpu          coordinator {cpu['coordinator']:.2f} s (source, partitioning, queues, sink), "
                     f"slots {cpu['slots']:.2f} s (grouping, aggregation, formatting, queues)")
        coord = shares["coordinator"]
        if coord:
            parts = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(coord.items(), key=lambda kv: -kv[1]))
            lines.append(f"coordinator  {parts}")
        return "\n".join(lines)
