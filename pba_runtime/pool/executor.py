"""The worker pool: its threads or its generations of worker processes, the tasks it runs, and the default pool.

``WorkerPool(kind="process", workers=N)`` runs ``N`` worker processes (``spawn`` or ``forkserver``; never
``fork``: a forked child of a threaded parent, such as a Spark Python worker, can deadlock). Chunk partials and
lcs live in shared memory (:mod:`pba_runtime.shm`, held by the pool's :attr:`~WorkerPool.memory`): an
aggregator gets shared chunk slots (:func:`pba_runtime.tasks.open_chunk_slots`), its main loop writes each
chunk's partials into a slot, and a task names the slot (block name, offsets, rows) and the aggregation, never
the data. Aggregations whose partials are not fixed-size numeric (for example ``collect``), or that a worker
could not import (a lambda, a closure), run in the pool's thread workers instead
(:meth:`~WorkerPool.submit_thread`). A worker that died or hung is replaced by a new generation
(:meth:`~WorkerPool.recover`, :mod:`pba_runtime.pool.repair`); after :data:`MAX_RESTARTS` restarts within
:data:`RESTART_WINDOW` seconds the pool gives up on processes and runs its tasks in threads
(``stats()["degraded"]``).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor
from typing import Any

from .. import logs
from ..shm import PoolMemory
from .cleanup import _join_manager, _live_pools, _release_semaphores, _semaphores
from .workers import _ping, _worker_init, quiet_worker_thread

__all__ = ["WorkerPool", "default_pool", "default_pool_free", "DEFAULT_TASK_TIMEOUT", "START_METHODS"]

POOL_KINDS = ("thread", "process")
START_METHODS = ("spawn", "forkserver")

#: GIL switch interval a pool sets (seconds). CPython's default, 5 ms, lets a
#: busy main loop keep the GIL for 5 ms before a woken worker may run, longer than
#: the slack PBA leaves between a chunk boundary and the first window needing its lcs.
THREAD_SWITCH_INTERVAL = 1e-4

#: A process pool's default ``task_timeout`` (seconds): how long the main loop
#: waits for one result it needs before it declares the worker hung.
DEFAULT_TASK_TIMEOUT = 60.0
#: How long a new generation of worker processes may take to start (import numpy...).
BOOT_TIMEOUT = 120.0
#: More restarts than this within :data:`RESTART_WINDOW` seconds and the pool stops
#: restarting (workers that cannot even start would otherwise be respawned at every
#: chunk): it is then *degraded* and runs its tasks in its thread workers.
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0

log = logging.getLogger("pba_runtime")

_UNSET: Any = object()

class _SwitchInterval:
    """The GIL switch interval, lowered to :data:`THREAD_SWITCH_INTERVAL` while at least one pool is open.

    A reference count: the first pool that finds the interval above the target
    saves it and lowers it; when the last such pool closes the saved value is
    put back (unless someone else changed the interval meanwhile: theirs is
    kept). A pool that found it already low enough holds nothing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._saved: float | None = None
        self._lowered: float | None = None  # as read back (CPython keeps whole microseconds)

    def acquire(self) -> bool:
        with self._lock:
            if self._holders == 0:
                current = sys.getswitchinterval()
                if current <= THREAD_SWITCH_INTERVAL:
                    return False
                self._saved = current
                sys.setswitchinterval(THREAD_SWITCH_INTERVAL)
                self._lowered = sys.getswitchinterval()
            self._holders += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._saved is not None:
                if sys.getswitchinterval() == self._lowered:
                    sys.setswitchinterval(self._saved)
                self._saved = None


_switch_interval = _SwitchInterval()

class WorkerPool:
    """A pool of workers that run lcs tasks.

    Parameters
    ----------
    kind : {"thread", "process"}
        Threads share memory with the main loop; processes share numpy buffers
        through shared memory (see the module doc).
    workers : int
        Number of workers (>= 1).
    start_method : {"spawn", "forkserver"}, optional
        Process pools only (default ``"spawn"``); ``"fork"`` is refused.
    task_timeout : float or None, optional
        Seconds the main loop waits for a result it needs before declaring the
        worker hung (then: restart, and the lcs is built on the main thread).
        Default: :data:`DEFAULT_TASK_TIMEOUT` for process pools, none for thread
        pools (a thread cannot be killed; a timed-out thread task is only
        bypassed). ``None``: wait forever. The time counts from when the main
        loop starts to wait, not from the submit (queueing on a shared pool is
        not a hang), and not while a new generation of processes is starting.

    Examples
    --------
    >>> import pba_runtime as pr
    >>> with WorkerPool(kind="thread", workers=2) as pool:
    ...     with pr.create("pba", pr.CountWindow(range=3, slide=1), "max", pool=pool) as op:
    ...         op.insert_many([1, 5, 2, 0, 3])[1].tolist()
    [5.0, 5.0, 3.0]

    One process pool serves many keys; each PBA keeps its chunks in shared memory:

    >>> with WorkerPool(kind="process", workers=1, task_timeout=30) as pool:  # doctest: +SKIP
    ...     ops = {key: pr.create("pba", pr.CountWindow(range=8192, slide=1), "max", pool=pool)
    ...            for key in ("a", "b")}
    ...     ops["a"].stats()["shared_memory"], pool.stats()["restarts"]
    (True, 0)
    """

    def __init__(self, kind: str = "thread", workers: int = 1, *, start_method: str | None = None,
                 task_timeout: float | None = _UNSET):
        if kind not in POOL_KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, POOL_KINDS))}, got {kind!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        if kind == "process":
            start_method = "spawn" if start_method is None else start_method
            if start_method not in START_METHODS:
                why = " (fork is unsafe in threaded parents such as Spark workers)" if start_method == "fork" else ""
                raise ValueError(f"start_method must be one of {', '.join(map(repr, START_METHODS))}, "
                                 f"got {start_method!r}{why}")
        elif start_method is not None:
            raise ValueError(f"start_method only applies to kind='process', got {start_method!r}")
        if task_timeout is _UNSET:
            task_timeout = DEFAULT_TASK_TIMEOUT if kind == "process" else None
        if task_timeout is not None and (isinstance(task_timeout, bool) or not isinstance(task_timeout, (int, float))
                                         or not task_timeout > 0):
            raise ValueError(f"task_timeout must be a positive number of seconds or None, got {task_timeout!r}")
        self.kind = kind
        self.workers = workers
        self.start_method = start_method
        self.task_timeout = None if task_timeout is None else float(task_timeout)
        self._closed = False
        self._lock = threading.Lock()
        # process-wide: documented in the README ("Threads and the GIL"); restored when the last pool closes
        self._switch_held = _switch_interval.acquire()
        #: The pool's shared memory (process pools; ``None`` for threads): chunk stores and batch scratch.
        self.memory: PoolMemory | None = None
        if kind == "thread":
            self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pba-lcs",
                                                initializer=quiet_worker_thread)
            return
        # ---- process pool
        self._ctx = multiprocessing.get_context(start_method)
        self._gen = 0
        self._restarts = 0
        self._restart_times: list[float] = []
        self._degraded = False
        self._timeouts = 0
        self._broken = 0
        self._threads: ThreadPoolExecutor | None = None
        self.memory = PoolMemory()
        self._owner = os.getpid()  # a copy of this pool in a forked child owns none of its processes
        self._executor, self._boot = self._start()
        _live_pools.add(self)

    # ------------------------------------------------------------------ running tasks
    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on a worker; returns a :class:`concurrent.futures.Future`.

        In a process pool ``fn`` and ``args`` are pickled: pass names of shared
        data, not the data (PBA does this for you). A broken process pool is
        restarted and the task resubmitted once.
        """
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        if self.kind == "thread":
            return self._executor.submit(fn, *args)
        if self._degraded:  # tasks only name shared memory: a thread can run them as well
            fut = self.submit_thread(fn, *args)
            fut.pba_gen = -1
            return fut
        for attempt in (0, 1):
            with self._lock:
                if self._closed:
                    raise RuntimeError("WorkerPool is closed")
                ex, gen = self._executor, self._gen
            try:
                fut = ex.submit(fn, *args)
            except BrokenProcessPool:
                self._broken += attempt == 0
                self.recover(gen, "a worker process died")
                continue
            except RuntimeError:
                if self._closed:
                    raise RuntimeError("WorkerPool is closed") from None
                if attempt:
                    raise
                self.recover(gen, "the executor shut down")
                continue
            fut.pba_gen = gen
            return fut
        raise RuntimeError("process pool could not be restarted")  # pragma: no cover

    def submit_thread(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on a thread worker (a process pool keeps ``workers`` threads for this).

        Used for aggregations a worker process cannot take: partials that are
        not fixed-size numeric, or an aggregation it cannot import.
        """
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        if self.kind == "thread":
            return self._executor.submit(fn, *args)
        with self._lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="pba-lcs",
                                                   initializer=quiet_worker_thread)
            threads = self._threads
        return threads.submit(fn, *args)

    def wait_for(self, fut: Future) -> bool:
        """Wait until ``fut`` is done; ``False`` if ``task_timeout`` passed first (the worker is deemed hung).

        For a process pool the clock starts once the future's generation of
        workers has started.
        """
        if fut.done():
            return True
        if self.kind == "process":
            boot = self._boot if getattr(fut, "pba_gen", -1) == self._gen else None
            if boot is not None and not all(b.done() for b in boot):
                wait(boot + [fut], timeout=BOOT_TIMEOUT, return_when="FIRST_COMPLETED")
                if not fut.done():
                    wait(boot, timeout=BOOT_TIMEOUT)
        if self.task_timeout is None:
            wait([fut])
            return True
        deadline = time.monotonic() + self.task_timeout
        while not fut.done():  # short waits: a future cancelled meanwhile never wakes wait()
            left = deadline - time.monotonic()
            if left <= 0:
                self._timeouts += 1
                return False
            wait([fut], timeout=min(left, 1.0))
        return True

    def recover(self, fut_or_gen: Future | int, reason: str = "a task failed") -> bool:
        """Make sure no worker of the generation that ran ``fut`` is alive any more; restart if needed.

        Called after a worker died (``BrokenProcessPool``) or hung. Kills every
        process of that generation (a hung one cannot be told apart from a busy
        one), waits for them to exit, and starts a new generation. A no-op if
        the generation was already replaced, and for thread pools (a thread
        cannot be killed). Returns whether this call restarted the pool.
        """
        if self.kind != "process":
            return False
        gen = fut_or_gen if isinstance(fut_or_gen, int) else getattr(fut_or_gen, "pba_gen", None)
        with self._lock:
            if gen != self._gen or self._closed:
                return False
            old = self._executor
            self._kill(old)
            self._gen += 1
            self._restarts += 1
            now = time.monotonic()
            self._restart_times = [t for t in self._restart_times if now - t < RESTART_WINDOW] + [now]
            if len(self._restart_times) > MAX_RESTARTS:
                self._degraded = True
                self._boot = []
            else:
                self._executor, self._boot = self._start()
        if self._degraded:
            log.error("process pool: %d restarts within %.0f s (last: %s); running its tasks in threads from now on",
                      len(self._restart_times), RESTART_WINDOW, reason)
            return False
        log.warning("process pool restarted (generation %d -> %d): %s", gen, gen + 1, reason)
        return True

    def settle(self, fut: Future) -> None:
        """Before a slot whose task failed is reused: no worker of that generation may still write to it."""
        if fut.cancelled():
            return
        exc = fut.exception()
        if isinstance(exc, BrokenProcessPool):
            self.recover(fut, "a worker process died")

    # ------------------------------------------------------------------ processes
    def _start(self) -> tuple[ProcessPoolExecutor, list[Future]]:
        ex = ProcessPoolExecutor(max_workers=self.workers, mp_context=self._ctx, initializer=_worker_init,
                                 initargs=(logs.current_config(),))
        # spawning is on demand: one ping per worker starts them all now, not at the first chunk
        boot = [ex.submit(_ping) for _ in range(self.workers)]
        return ex, boot

    @staticmethod
    def _procs(ex: ProcessPoolExecutor) -> list:
        return list((getattr(ex, "_processes", None) or {}).values())  # None once shut down

    @classmethod
    def _kill(cls, ex: ProcessPoolExecutor, procs: list | None = None) -> None:
        """SIGKILL the executor's workers and reap them.

        The executor then fails every pending future with ``BrokenProcessPool``
        (which wakes its waiters). Never ``cancel_futures``: a future cancelled
        by ``shutdown`` is not notified, and ``wait()`` on it would block.
        """
        procs = cls._procs(ex) if procs is None else procs
        locks = _semaphores(ex)  # before shutdown() drops the executor's queues
        for p in procs:
            try:
                p.kill()
            except Exception:  # pragma: no cover - already gone
                pass
        for p in procs:
            p.join(timeout=10)
        try:
            ex.shutdown(wait=False)
        except Exception:  # pragma: no cover
            pass
        _join_manager(ex)
        _release_semaphores(locks)

    def pids(self) -> list[int]:
        """Process ids of the current workers (process pools; ``[]`` for threads)."""
        if self.kind != "process":
            return []
        with self._lock:
            procs = getattr(self._executor, "_processes", None) or {}
            return [p.pid for p in list(procs.values()) if p.pid is not None]

    def ready(self, timeout: float | None = BOOT_TIMEOUT) -> bool:
        """Wait until every worker process of the current generation has started."""
        if self.kind != "process":
            return True
        done, pending = wait(list(self._boot), timeout=timeout)
        return not pending

    def free_worker(self) -> bool:
        """Whether a thread worker would start a task submitted now at once (no task queued, one idle).

        What ``"auto"`` asks before splitting a batch with the pool
        (:func:`pba_runtime.algorithms.choose_batch_algorithm`): a batch merge's thread
        tasks run on the thread workers, for a process pool too. A snapshot: another
        thread may take the worker a moment later (the merge then does not wait for it).

        >>> with WorkerPool(kind="thread", workers=1) as pool:
        ...     pool.free_worker()
        True
        """
        if self._closed:
            return False
        ex = self._executor if self.kind == "thread" else self._threads
        if ex is None:
            return True
        try:  # ThreadPoolExecutor's own counts: its queue, its threads, the idle ones among them
            if ex._work_queue.qsize():
                return False
            return len(ex._threads) < ex._max_workers or ex._idle_semaphore._value > 0
        except AttributeError:  # pragma: no cover - another executor: assume a worker
            return True

    def stats(self) -> dict[str, Any]:
        """Kind, workers and, for process pools, restarts, timeouts and shared memory held."""
        st: dict[str, Any] = {"kind": self.kind, "workers": self.workers, "closed": self._closed}
        if self.kind == "process":
            st.update(start_method=self.start_method, generation=self._gen, restarts=self._restarts,
                      timeouts=self._timeouts, task_timeout=self.task_timeout, degraded=self._degraded,
                      **self.memory.stats())
        return st

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, wait: bool = True) -> None:
        """Stop the workers; queued tasks still run when ``wait`` is true.

        A process pool also unlinks every shared-memory block it handed out
        (buffers still referenced stay readable; only their names go) and, if
        ``wait`` is false or a worker does not finish within ``task_timeout``,
        kills its workers.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._switch_held:
            self._switch_held = False
            _switch_interval.release()
        if self.kind == "thread":
            self._executor.shutdown(wait=wait, cancel_futures=not wait)
            return
        if self._owner != os.getpid():  # a forked child's copy: the workers and their semaphores are the parent's
            _live_pools.discard(self)
            return
        ex = self._executor
        procs = self._procs(ex)
        locks = _semaphores(ex)  # before shutdown() drops the executor's queues
        try:
            if wait:  # queued tasks run, then the workers exit
                ex.shutdown(wait=False)
                deadline = time.monotonic() + (self.task_timeout or DEFAULT_TASK_TIMEOUT)
                for p in procs:
                    p.join(timeout=max(0.0, deadline - time.monotonic()))
            self._kill(ex, procs)
            _release_semaphores(locks)  # now, not whenever the executor is collected
            if self._threads is not None:
                self._threads.shutdown(wait=wait, cancel_futures=not wait)
        finally:
            self.memory.close()
            _live_pools.discard(self)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        extra = f", start_method={self.start_method!r}" if self.kind == "process" else ""
        return f"WorkerPool(kind={self.kind!r}, workers={self.workers}{extra}, {state})"


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


def default_pool_free() -> bool:
    """Whether the default pool (:func:`default_pool`) would start a task at once; ``True`` before it exists.

    >>> isinstance(default_pool_free(), bool)
    True
    """
    pool = _default
    return pool is None or pool.closed or pool.free_worker()


@atexit.register
def _close_default() -> None:
    if _default is not None:
        _default.close(wait=False)
