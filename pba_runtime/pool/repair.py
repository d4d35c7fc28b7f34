"""The one repair of a failed pool task: its result, or the same result computed on the calling thread.

A worker killed (``BrokenProcessPool``) or hung past the pool's ``task_timeout`` is noticed when its result
is needed; the pool kills that generation of workers, waits for them to exit and starts new ones
(:meth:`~pba_runtime.pool.WorkerPool.recover`), and the caller computes the result itself (counted in its
``fallbacks``), so no result is lost or duplicated. A task that *raises* leaves its worker healthy: the result
is computed here, without a restart. PBA's chunks and the batch merge both repair through
:func:`result_or_repair`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from typing import Any

__all__ = ["result_or_repair"]

log = logging.getLogger("pba_runtime")


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
    >>> from pba_runtime.pool import WorkerPool
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
