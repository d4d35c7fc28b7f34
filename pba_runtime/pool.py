"""Worker pools that build lcs buffers beside the main loop.

One pool serves many aggregators (one per key), as the paper's Flink
integration runs one pool per task slot. A thread pool works in parallel with
the main loop for kernel (numpy) aggregations, whose accumulate loops release
the GIL; a Python-callable aggregation holds the GIL, so its lcs only overlaps
the main loop in a process pool.

Examples
--------
>>> with WorkerPool(kind="thread", workers=1) as pool:
...     pool.submit(sum, [1, 2, 3]).result()
6
"""

from __future__ import annotations

import atexit
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

__all__ = ["WorkerPool", "default_pool"]

POOL_KINDS = ("thread", "process")

#: GIL switch interval a thread pool sets (seconds). CPython's default, 5 ms, lets a
#: busy main loop keep the GIL for 5 ms before a woken worker may run, longer than
#: the slack PBA leaves between a chunk boundary and the first window needing its lcs.
THREAD_SWITCH_INTERVAL = 1e-4


class WorkerPool:
    """A pool of workers that run lcs tasks.

    Parameters
    ----------
    kind : {"thread", "process"}
        Threads share memory with the main loop; processes share numpy buffers
        through shared memory.
    workers : int
        Number of workers (>= 1).
    """

    def __init__(self, kind: str = "thread", workers: int = 1):
        if kind not in POOL_KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, POOL_KINDS))}, got {kind!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        if kind == "process":
            raise NotImplementedError("the process worker pool is not available yet; use kind='thread'")
        self.kind = kind
        self.workers = workers
        # process-wide: documented in the README ("Threads and the GIL")
        if sys.getswitchinterval() > THREAD_SWITCH_INTERVAL:
            sys.setswitchinterval(THREAD_SWITCH_INTERVAL)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pba-lcs")
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on a worker; returns a :class:`concurrent.futures.Future`."""
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        return self._executor.submit(fn, *args)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, wait: bool = True) -> None:
        """Stop the workers; queued tasks still run when ``wait`` is true."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._executor.shutdown(wait=wait, cancel_futures=not wait)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"WorkerPool(kind={self.kind!r}, workers={self.workers}, {state})"


_default: WorkerPool | None = None
_default_lock = threading.Lock()


def default_pool() -> WorkerPool:
    """The process-wide thread pool used when an aggregator is given ``pool=None``.

    It has one worker (PBA's one extra thread) and is closed at interpreter exit.
    """
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = WorkerPool(kind="thread", workers=1)
        return _default


@atexit.register
def _close_default() -> None:
    if _default is not None:
        _default.close(wait=False)
