"""The ``pba-run`` command (and ``python -m pba_runtime``): start the job's forkserver, run
:func:`pba_runtime.cli.main`, exit with its code.

The command starts its job's forkserver before it imports anything of the package but
:mod:`pba_runtime.forkserver` (``import pba_runtime`` is lazy), so the server's imports run beside the
command's own (see that module), and ends it on the way out.
"""

from __future__ import annotations

import gc
import sys

from . import forkserver

__all__ = ["entry"]


def entry() -> None:
    """The ``pba-run`` command: :func:`pba_runtime.cli.main` on ``sys.argv``, then exit with its code.

    Before the interpreter exits, every object left is handed to the garbage collector's permanent
    generation (``gc.freeze()``), so the collection that interpreter shutdown runs does not walk the
    modules' objects (numba's, llvmlite's, pyarrow's, numpy's), a visible share of a short command's time
    (``bench/bench_runtime_versions.py --job`` times the whole command). The job is over by then: its files are closed and
    its processes, queues and shared memory released by :meth:`pba_runtime.runtime.Job.run`; ``atexit``
    handlers (logging's flush) still run. Only the command does this: ``main`` called in a process (tests,
    notebooks) leaves its collector alone.
    """
    started = forkserver.start_early(sys.argv[1:])
    try:
        from .cli import main

        code = main()
    finally:
        if started:
            forkserver.stop()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
