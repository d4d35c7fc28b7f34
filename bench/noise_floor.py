"""The machine's own latency noise, measured the way the latency experiment measures an algorithm.

Two measurements, both things no algorithm can avoid and both read the way the experiments read theirs.

A per-tuple latency's *Max* over a million windows is the largest of a million samples, so it is set by
the rarest event in the run: on a shared or virtual machine that is often not the algorithm but the
machine (a preemption by another process, an interrupt, the hypervisor taking the vCPU away). To tell the
two apart, :func:`measure` runs a compiled loop that does nothing but read the same clock the replay loop
reads (the TSC, :func:`pba_runtime.kernels.stepwise.clock.ticks`) and records every gap between two reads:
whatever gap it sees, no algorithm can have avoided. This is the idea of Linux's ``hwlatdetect`` and of
cyclictest's idle loop, in a few lines of numba.

PBA's main loop reads every lcs the worker wrote on the other core and writes slice partials the worker
reads: each of those cache lines crosses cores. :func:`cross_core_ns` times that crossing with a ping-pong
of one cache line between two threads (the round trip of a store seen by the other core and answered). On
this project's 2-vCPU machine it is not one number: the hypervisor places the vCPUs, and the same PBA run
is several times slower when the crossing is slow, so the experiments record it before and after.

:func:`realtime` runs a block with the calling thread on ``SCHED_FIFO`` (threads it starts inherit it),
where the process may (root or ``CAP_SYS_NICE``): other processes then cannot preempt the measured
threads, so what is left in the gaps is the machine below the scheduler. It restores the policy after.
The kernel keeps 5% of each second for other tasks (``sched_rt_runtime_us``), so a spinning SCHED_FIFO
thread cannot lock the machine.

    python bench/noise_floor.py            # 3 x 0.5 s and the ping-pong, under SCHED_FIFO where permitted

Examples
--------
>>> r = measure(0.01)
>>> r["max_ns"] >= r["p99_ns"] >= 0 and r["seconds"] > 0
True
>>> cross_core_ns(1000) > 0
True
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pba_runtime.kernels.stepwise.clock import fence, ns_per_tick, ticks  # noqa: E402

#: gaps above these are counted (per second of loop)
THRESHOLDS_NS = (5_000, 20_000)


@njit(nogil=True, cache=True)
def _gaps(n: int) -> np.ndarray:
    out = np.empty(n, np.int64)
    t = ticks()
    for i in range(n):
        u = ticks()
        out[i] = u - t
        t = u
    return out


def measure(seconds: float = 0.5) -> dict:
    """Gaps between consecutive clock reads in a loop that does nothing else, for about ``seconds``.

    Returns max, p99.9, p99 (ns), the count of gaps above each of :data:`THRESHOLDS_NS` and their
    rate per second, and the loop's wall seconds.
    """
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    _gaps(16)  # compiled (or loaded) before the clock starts
    k = ns_per_tick()
    n = max(1000, int(seconds * 1e9 / 25))  # ~25 ns a read-and-store
    t0 = time.perf_counter()
    g = _gaps(n) * k
    dt = time.perf_counter() - t0
    out = {"seconds": round(dt, 4), "reads": n, "max_ns": float(g.max()),
           "p999_ns": float(np.percentile(g, 99.9)), "p99_ns": float(np.percentile(g, 99))}
    for th in THRESHOLDS_NS:
        c = int((g > th).sum())
        out[f"over_{th // 1000}us"] = c
        out[f"over_{th // 1000}us_per_s"] = round(c / dt, 1)
    return out


@njit(nogil=True, cache=True)
def _player(flag: np.ndarray, me: int, n: int) -> None:
    # wait for 2k + me, answer 2k + me + 1: two crossings of the line per round
    for k in range(n):
        want = 2 * k + me
        while True:
            fence()
            if flag[0] == want:
                break
        flag[0] = want + 1
        fence()


def cross_core_ns(rounds: int = 100_000) -> float:
    """Round trip of one cache line between this thread and another (ns; median of 3 runs of ``rounds``).

    The other thread runs on another core if one is free: with one core the two take turns and the figure
    is the scheduler's, hence ``inf`` when the process has a single CPU.
    """
    import threading

    if len(os.sched_getaffinity(0)) < 2:
        return float("inf")
    _player(np.zeros(1, np.int64), 0, 0)
    runs = []
    for _ in range(3):
        buf = np.zeros(32, np.int64)
        flag = buf[8:9]  # its own cache line (and the next): nothing else on it
        t = threading.Thread(target=_player, args=(flag, 1, rounds))
        t.start()
        t0 = time.perf_counter()
        _player(flag, 0, rounds)
        t.join()
        runs.append((time.perf_counter() - t0) / rounds * 1e9)
    return float(np.median(runs))


@contextlib.contextmanager
def realtime(enabled: bool = True, priority: int = 10) -> Iterator[str]:
    """Run the block with this thread on ``SCHED_FIFO`` if ``enabled`` and permitted; yields the policy.

    Threads started inside the block inherit the policy (start pools inside it). Restores the previous
    policy on exit. Without permission (not root, no ``CAP_SYS_NICE``) it runs as is and says so.
    """
    if not enabled or not hasattr(os, "SCHED_FIFO"):
        yield "SCHED_OTHER"
        return
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError as e:
        yield f"SCHED_OTHER (SCHED_FIFO not permitted: {e.strerror})"
        return
    try:
        yield f"SCHED_FIFO priority {priority}"
    finally:
        os.sched_setscheduler(0, before[0], before[1])


def main() -> None:
    with realtime() as policy:
        runs = [measure(0.5) for _ in range(3)]
        rt = cross_core_ns()
    print(f"policy: {policy}; a cache line's round trip between two cores: {rt:.0f} ns")
    for r in runs:
        print(f"  {r['seconds']:.2f} s: max {r['max_ns'] / 1e3:.1f} us, p99.9 {r['p999_ns']:.0f} ns, "
              f"> 5 us {r['over_5us_per_s']:.0f}/s, > 20 us {r['over_20us_per_s']:.0f}/s")


if __name__ == "__main__":
    main()
