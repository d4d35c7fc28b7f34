"""Nothing of a process pool outlives it: its workers, its executor's manager thread, its semaphores' names.

How an executor's workers are reaped and its :mod:`multiprocessing` semaphores unlinked once they are gone,
the pools still open at interpreter exit (:func:`_close_process_pools`, run before ``concurrent.futures``'
own exit hook) and, in a child made by ``os.fork``, the parent's pools forgotten (:func:`_forget_pools_in_child`).
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref

# imported before the exit hook below is registered: concurrent.futures.process registers its own at import
from concurrent.futures.process import ProcessPoolExecutor

__all__: list[str] = []


#: How long :func:`_join_manager` waits for a killed executor's manager thread (it takes milliseconds).
MANAGER_JOIN_TIMEOUT = 5.0


def _join_manager(ex: ProcessPoolExecutor, timeout: float = MANAGER_JOIN_TIMEOUT) -> bool:
    """Wait until the manager thread of an executor whose workers are dead has ended; whether it has.

    Once its workers are gone the thread fails the pending futures, closes the
    queues and closes its wakeup pipe under the executor's shutdown lock. At
    interpreter exit ``concurrent.futures``' own hook writes to every such pipe
    without that lock: a thread still closing its pipe then made it print an
    ``OSError: [Errno 9] Bad file descriptor`` traceback (now and then, in a
    script that killed a worker and exited). Our exit hook runs before that one
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
