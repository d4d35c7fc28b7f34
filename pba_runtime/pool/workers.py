"""What every worker of a pool runs first: numpy's non-finite warnings off, Ctrl-C ignored, logging as in the
main process, and an exit as soon as the parent dies (:func:`exit_with_parent`, also used by the runtime's
task slots).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading

import numpy as np

from .. import logs

__all__ = ["ORPHAN_EXIT_CODE", "exit_with_parent", "quiet_worker_thread"]

log = logging.getLogger("pba_runtime")


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
