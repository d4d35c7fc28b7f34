"""Worker pools that build lcs buffers beside the main loop.

(Over 500 lines: a process pool's life cycle, that is starting, restarting a
generation, degrading to threads, closing, the executor's semaphores and the
exit hooks, is one piece of state under one lock; split, its invariants would
span modules.)

One pool serves many aggregators (one per key), as the paper's Flink
integration runs one pool per task slot. A thread pool works in parallel with
the main loop for kernel (numpy) aggregations, whose accumulate loops release
the GIL; a Python-callable aggregation holds the GIL, so its lcs only overlaps
the main loop in a process pool.

Process pools
-------------
``WorkerPool(kind="process", workers=N)`` runs ``N`` worker processes
(``spawn`` or ``forkserver``; never ``fork``: a forked child of a threaded
parent, such as a Spark Python worker, can deadlock). Chunk partials and lcs
live in shared memory (:mod:`pba_runtime.shm`, held by the pool's
:attr:`~WorkerPool.memory`): an aggregator gets a chunk store
(:func:`pba_runtime.tasks.open_chunk_store`), its main loop writes each chunk's
partials into a slot, and a task names the slot (block name, offsets, rows) and
the aggregation, never the data. Aggregations whose partials are not fixed-size
numeric (for example ``collect``), or that a worker could not import (a
lambda, a closure), run in the pool's thread workers instead
(:meth:`~WorkerPool.submit_thread`).

Faults: a worker killed (``BrokenProcessPool``) or hung past ``task_timeout``
is noticed when its result is needed (or at the next submit); the pool kills
that generation of workers, waits for them to exit and starts new ones
(:meth:`~WorkerPool.recover`), and the aggregator builds the affected lcs on
the main thread (counted in its ``fallbacks``), so no result is lost or
duplicated: :func:`result_or_repair` is that one repair, used by PBA and the
batch merge. A task that *raises* leaves its worker healthy: the lcs is built
on the main thread, no restart. After :data:`MAX_RESTARTS` restarts within
:data:`RESTART_WINDOW` seconds the pool gives up on processes and runs its
tasks in threads (``stats()["degraded"]``).

Examples
--------
>>> with WorkerPool(kind="thread", workers=1) as pool:
...     pool.submit(sum, [1, 2, 3]).result()
6
>>> with WorkerPool(kind="process", workers=1, task_timeout=30) as pool:  # doctest: +SKIP
...     pool.submit(sum, [1, 2, 3]).result()
6
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor
from typing import Any

import numpy as np

from . import logs
from .shm import PoolMemory

__all__ = ["WorkerPool", "default_pool", "default_pool_free", "exit_with_parent", "quiet_worker_thread", "result_or_repair",
           "DEFAULT_TASK_TIMEOUT", "START_METHODS"]

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


def result_or_repair(pool: Any, fut: Future, fallback: Callable[[], Any], *, task: str, repair: str,
                     done: bool | None = None, timed: bool = True,
                     on_error: Callable[[BaseException, str], None] | None = None) -> tuple[Any, bool]:
    """The result of a pool task, or ``fallback()`` run on this thread if the task failed: the one repair.

    Every task the project submits is a pure function of its arguments that
    writes only its own output, so running it again here gives the same result.
    A worker that died (``BrokenProcessPool``) or hung past the pool's
    ``task_timeout`` may still hold or write the task's memory: its whole
    generation is killed and replaced first (:meth:`WorkerPool.recover`). A task
    that raised leaves its worker healthy: no restart.

    Parameters
    ----------
    pool : WorkerPool
        The pool that ran ``fut``.
    fut : Future
    fallback : callable
        Computes the result on this thread.
    task, repair : str
        For the warning: ``"<task> failed (<why>); <repair>"``.
    done : bool, optional
        Whether ``fut`` finished in time, if the caller already waited
        (:meth:`WorkerPool.wait_for`); ``None``: wait here.
    timed : bool
        Wait with the pool's ``task_timeout`` (``False``: until the task ends,
        for thread tasks that share the caller's arrays).
    on_error : callable, optional
        ``on_error(exc, why)`` when the task raised, before the repair.

    Returns
    -------
    (result, repaired) : tuple
        ``repaired`` is true when ``fallback`` gave the result (callers count it).

    Examples
    --------
    >>> with WorkerPool(kind="thread", workers=1) as pool:
    ...     fut = pool.submit(lambda: 1 / 0)
    ...     result_or_repair(pool, fut, lambda: "here", task="demo task", repair="computing it here")
    ('here', True)
    """
    if done is None:
        done = pool.wait_for(fut) if timed else True
    if done:
        try:
            return fut.result(), False
        except Exception as exc:  # a worker fault never loses a result: compute it here
            why = f"{type(exc).__name__}: {exc}"
            restart = isinstance(exc, BrokenProcessPool)
            if on_error is not None:
                on_error(exc, why)
    else:
        why = f"no result after task_timeout={pool.task_timeout}s: worker hung"
        restart = True
    log.warning("%s failed (%s); %s", task, why, repair)
    if restart:  # no worker of that generation may still write into the task's memory (or hog the pool)
        pool.recover(fut, why)
    return fallback(), True


#: Exit status of a process that ended because its parent died (:func:`exit_with_parent`).
ORPHAN_EXIT_CODE = 3


def exit_with_parent(code: int = ORPHAN_EXIT_CODE) -> threading.Thread | None:
    """End this process as soon as its :mod:`multiprocessing` parent dies, whatever its threads are doing.

    A daemon thread waits on the parent's sentinel (a pipe the parent holds
    open; it reads end-of-file when the parent is gone, even after
    ``kill -9``) and then calls ``os._exit(code)``. A check between blocking
    calls is not enough: a child can be blocked for good in ``read()`` of a
    message its parent was killed while writing. ``prctl(PR_SET_PDEATHSIG)``
    is no substitute either: under ``forkserver`` the parent is the fork
    server, not the process that started the child, and it fires when the
    *thread* that started the child ends.

    Returns the thread, or ``None`` in a process that has no
    :mod:`multiprocessing` parent (nothing to watch).

    Parameters
    ----------
    code : int
        Exit status when the parent is gone.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return None

    def watch() -> None:
        parent.join()
        os._exit(code)

    thread = threading.Thread(target=watch, name="pba-parent-watch", daemon=True)
    thread.start()
    return thread


def quiet_worker_thread() -> None:
    """Initializer of every worker thread (and of every worker process, through :func:`_worker_init`): numpy's
    warnings for non-finite arithmetic (``inf - inf``, overflow) off for the rest of this thread.

    A window holding NaN or infinities gives numpy's result silently on the batch entry points
    (:func:`~pba_runtime.aggregations.quiet_non_finite`), but their ``np.errstate`` holds only on the calling
    thread: a PBA chunk's lcs built by a worker warned (``invalid value encountered in accumulate``). Here it
    costs nothing a task; numpy 2 keeps this setting per thread, so the user's own threads keep theirs.

    >>> from concurrent.futures import ThreadPoolExecutor
    >>> import numpy as np
    >>> with ThreadPoolExecutor(1, initializer=quiet_worker_thread) as ex:
    ...     ex.submit(np.add.accumulate, np.array([np.inf, -np.inf])).result()
    array([inf, nan])
    >>> np.geterr()["invalid"]  # this thread's is unchanged
    'warn'
    """
    np.seterr(invalid="ignore", over="ignore")


def _worker_init(log_cfg: tuple | None) -> None:
    """Initializer of every worker process.

    Logging as in the main process; Ctrl-C is the parent's business; the worker
    exits when its parent dies (its blocks are then reclaimed by the resource
    tracker, which outlives the last worker holding its pipe); numpy's
    non-finite warnings off, as in the worker threads (:func:`quiet_worker_thread`).
    """
    quiet_worker_thread()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):  # pragma: no cover
        pass
    exit_with_parent()
    logs.apply_config(log_cfg)
    log.debug("worker pid %d started (parent %d)", os.getpid(), os.getppid())


def _ping() -> int:
    return os.getpid()


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


#: How long :func:`_join_manager` waits for a killed executor's manager thread (it takes milliseconds).
MANAGER_JOIN_TIMEOUT = 5.0


def _join_manager(ex: ProcessPoolExecutor, timeout: float = MANAGER_JOIN_TIMEOUT) -> bool:
    """Wait until the manager thread of an executor whose workers are dead has ended; whether it has.

    Once its workers are gone the thread fails the pending futures, closes the
    queues and closes its wakeup pipe under the executor's shutdown lock. At
    interpreter exit ``concurrent.futures``' own hook writes to every such pipe
    without that lock: a thread still closing its pipe then made it print an
    ``OSError: [Errno 9] Bad file descriptor`` traceback (a script that killed a
    worker and exited, 1 run in 15 here). Our exit hook runs before that one
    (:func:`_close_process_pools`), and every kill joins the thread, so the
    pipe is closed, and marked closed, before the hook looks at it.
    """
    thread = getattr(ex, "_executor_manager_thread", None)
    if thread is None or thread is threading.current_thread():
        return True
    thread.join(timeout)
    return not thread.is_alive()


def _semaphores(ex: ProcessPoolExecutor) -> list:
    """The :mod:`multiprocessing` locks and semaphores of an executor's queues (named ``/dev/shm/sem.mp-*``)."""
    locks = []
    for q in (getattr(ex, "_call_queue", None), getattr(ex, "_result_queue", None)):
        for attr in ("_rlock", "_wlock", "_sem"):
            lock = getattr(q, attr, None)
            if lock is not None and hasattr(lock, "_semlock"):
                locks.append(lock)
    return locks


def _release_semaphores(locks: list) -> int:
    """Unlink the names of an executor's semaphores (:func:`_semaphores`) once its workers are gone.

    Each :mod:`multiprocessing` lock or semaphore unlinks its name when the
    object is collected, or at interpreter exit. A broken executor can stay
    referenced long after its restart (its manager thread, a traceback), so its
    names would stay until exit, where a late unregister could also reach a
    resource tracker that no longer knows them (``KeyError`` tracebacks).
    Running each lock's own finalizer now unlinks and unregisters it exactly
    once (a finalizer runs at most once); a process that still holds the
    semaphore keeps using it, as with an unlinked file. Returns how many were
    released.
    """
    from multiprocessing import util

    if not locks:
        return 0
    done = 0
    registry = getattr(util, "_finalizer_registry", {})
    for fin in list(registry.values()):
        ref = getattr(fin, "_weakref", None)
        obj = ref() if ref is not None else None
        if obj is not None and any(obj is lock for lock in locks):
            try:
                fin()
                done += 1
            except OSError:  # pragma: no cover - already unlinked
                pass
    return done


_live_pools: weakref.WeakSet = weakref.WeakSet()


def _close_process_pools() -> None:
    """At exit: kill the workers of pools never closed (a hung one would block the interpreter's exit)."""
    for pool in list(_live_pools):
        try:
            pool.close(wait=False)
        except Exception:  # pragma: no cover
            pass


def _forget_pools_in_child() -> None:
    """In a child forked by ``os.fork`` (not by :mod:`multiprocessing`, which clears them itself): the
    parent's pools are not the child's to close.

    Without this, a forked child that ended normally killed the parent's workers (through the exit hook
    below, on its copy of the pool) and, through :mod:`multiprocessing`'s exit finalizers on its copy of the
    executor's locks, unlinked the names of the semaphores the parent still uses (a worker the parent spawns
    later opens them by name) and unregistered them from the tracker the two processes share. The copies
    are dropped from the exit hook, those finalizers from the child's registry and the workers from its
    children (``multiprocessing``'s exit joined them: ``AssertionError: can only join a child process``);
    :meth:`WorkerPool.close` in the child leaves the processes alone.
    """
    pools = list(_live_pools)
    if not pools:
        return
    _live_pools.clear()
    from multiprocessing import process, util

    children = getattr(process, "_children", set())  # not the child's: its exit would try to join them
    for pool in pools:
        for p in pool._procs(pool._executor):
            children.discard(p)
    locks = [lock for pool in pools for lock in _semaphores(pool._executor)]
    registry = getattr(util, "_finalizer_registry", {})
    for key, fin in list(registry.items()):
        ref = getattr(fin, "_weakref", None)
        obj = ref() if ref is not None else None
        if obj is not None and any(obj is lock for lock in locks):
            registry.pop(key, None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


# concurrent.futures joins its process pools in a threading-exit hook that runs before
# atexit; register ours the same way, later, so it runs first (hooks run newest first).
# Why not only the public atexit: threading's shutdown joins concurrent.futures' manager
# threads (which wait for the workers) *before* atexit handlers run, so a hung worker would
# block the exit before our handler could kill it. The public alternative, a non-daemon
# thread that joins the main thread and then kills the workers, runs *concurrently* with
# concurrent.futures' own exit hook (two shutdowns of one executor racing) rather than
# before it. So the private hook stays where it exists, with atexit as the fallback where
# it does not (close() is idempotent, the second call is a no-op).
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_close_process_pools)
atexit.register(_close_process_pools)


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
