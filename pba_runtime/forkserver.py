"""The forkserver a job's task slots are forked from: what it preloads, its environment, and starting it early.

A job started with ``forkserver`` (the default where the platform has one) forks every task slot from one
server process, which imported the slot's modules once: numpy, numba and the compiled kernels, the slot's
code, the sink's writer (pyarrow, the compiled CSV writer), and, through :mod:`pba_runtime.runtime.preload`,
the job's compiled merge from numba's disk cache. That server is the longest part of a job's start-up, so
the ``pba-run`` command starts it first (:func:`start_early`, from :mod:`pba_runtime.__main__`), before it
imports anything else of the package, and the server's imports run on another core beside the command's
own; the job then forks its slots from the server already running. This module imports only the standard
library, for that reason (``bench/bench_runtime_versions.py --job`` times the command).

Examples
--------
>>> preload_modules(True, "parquet")
['pba_runtime.runtime.slot', 'pyarrow', 'pyarrow.compute', 'pyarrow.parquet', 'pba_runtime.kernels.compiled', 'pba_runtime.runtime.preload']
>>> early_job_options(["--agg", "sum", "--sink=csv:out.csv", "--tuples", "10"])
('sum', 'auto', 'csv')
>>> early_job_options(["--help"]) is None
True
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator, Sequence

__all__ = ["WARM_ENV", "sink_modules", "preload_modules", "path_env", "environ", "early_job_options", "start_early",
           "stop"]

#: ``"AGGREGATION:ENGINE"`` of the merge the forkserver loads (read by :mod:`pba_runtime.runtime.preload`).
WARM_ENV = "PBA_RUNTIME_PRELOAD_WARM"
#: The aggregation whose merge the command's early forkserver loads when ``--agg`` is not given: the default
#: job's (any compiled merge would do: loading ``sum``'s for a ``max`` job gave the same start-up).
DEFAULT_WARM_AGG = "max"


def sink_modules(fmt: str | None) -> list[str]:
    """The modules a task slot of a sink in format ``fmt`` imports to write it (pyarrow's, and numba's for the
    compiled CSV writer, take a noticeable part of start-up: a job's forkserver preloads them, and a slot imports them, and
    loads the CSV writer's compiled loops, before it says it is ready).

    Examples
    --------
    >>> sink_modules("parquet"), sink_modules("jsonl"), sink_modules(None)
    (['pyarrow', 'pyarrow.compute', 'pyarrow.parquet'], ['pba_runtime.runtime.text_lines'], [])
    """
    arrow = ["pyarrow", "pyarrow.compute"]
    text = ["pba_runtime.runtime.text_lines"]
    return {"csv": text, "jsonl": text, "parquet": [*arrow, "pyarrow.parquet"],
            "arrow": arrow}.get(fmt or "", [])


def preload_modules(compiled: bool, sink_format: str | None) -> list[str]:
    """What a job's forkserver imports: the slot's modules, the sink's, and, for a job on the compiled engine,
    numba's kernels and its merge (:mod:`pba_runtime.runtime.preload`): once in the server,
    not in every slot."""
    modules = ["pba_runtime.runtime.slot", *sink_modules(sink_format)]
    if compiled:
        modules += ["pba_runtime.kernels.compiled", "pba_runtime.runtime.preload"]
    return modules


def path_env() -> dict[str, str]:
    """The environment under which a forkserver started now imports what it preloads (the slot's modules)
    from where this process imports them.

    A forkserver is a new interpreter (``python -c``), whose ``sys.path`` begins with the working directory,
    and Python 3.11's forkserver does not apply the parent's path it is given. A ``pba_runtime`` in the
    working directory (another checkout) would then be the slots' code while the coordinator runs the one it
    imported (a job run from a checkout with another tree on ``PYTHONPATH`` ran that checkout's
    slots; a decoy package there killed them). ``PYTHONSAFEPATH`` (Python 3.11+) leaves the working directory
    out, and ``PYTHONPATH`` puts this process's path first, in its order (the working directory still in it
    where this process has it).

    >>> env = path_env(); env["PYTHONSAFEPATH"], env["PYTHONPATH"].split(os.pathsep)[0] == os.path.abspath(sys.path[0])
    ('1', True)
    """
    return {"PYTHONSAFEPATH": "1",
            "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in sys.path if isinstance(p, str))}


def early_job_options(argv: Sequence[str]) -> tuple[str, str, str | None] | None:
    """``(aggregation, engine, sink format)`` of the job the ``pba-run`` arguments ``argv`` describe, read
    before the command's own parser (:func:`pba_runtime.cli.build_parser`, whose help lists what the package
    defines, so that building it imports the package); ``None`` for help. The full parser still checks every
    argument: what this reads only chooses what the forkserver preloads (a wrong guess costs the slots an
    import after their fork, never a result).
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("-h", "--help", action="store_true")
    for option in ("--agg", "--engine", "--sink"):
        parser.add_argument(option)
    try:
        args, _ = parser.parse_known_args(list(argv))
    except argparse.ArgumentError:
        args = argparse.Namespace(help=False, agg=None, engine=None, sink=None)
    if args.help:
        return None
    fmt = args.sink.partition(":")[0] if args.sink else None
    return args.agg or DEFAULT_WARM_AGG, args.engine or "auto", fmt


def start_early(argv: Sequence[str]) -> bool:
    """Start this process's forkserver for the job ``pba-run argv`` runs (see the module doc); whether it
    started one (not where the platform has no forkserver, nor for help, nor when one runs already, nor when
    it cannot be started: the job tries again and says why).
    :func:`stop` ends it."""
    options = early_job_options(argv)
    if options is None or "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    from multiprocessing import forkserver

    if getattr(forkserver._forkserver, "_forkserver_pid", None) is not None:
        return False
    agg, engine, fmt = options
    multiprocessing.get_context("forkserver").set_forkserver_preload(
        preload_modules(engine not in ("numpy", "python"), fmt))
    try:
        with environ({**path_env(), WARM_ENV: f"{agg}:{engine}"}):
            forkserver.ensure_running()  # returns at once: the server imports its modules on its own
    except OSError:  # no server now: the job starts one when it starts its slots, and reports what fails then
        return False
    return True


@contextlib.contextmanager
def environ(env: dict[str, str]) -> Iterator[None]:
    """This process's environment with ``env`` set, as it was again afterwards: what a process started
    meanwhile (a forkserver) inherits.

    >>> with environ({"PBA_EXAMPLE": "1"}):
    ...     os.environ["PBA_EXAMPLE"]
    '1'
    >>> "PBA_EXAMPLE" in os.environ
    False
    """
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def stop() -> None:
    """End this process's forkserver and wait for it, even in the middle of its imports (a command that ends
    without a job, ``--help`` or a user error, does not leave it importing behind): its slots, if any, are gone
    by then (a job joins them)."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    server._stop()  # closes the pipe that keeps it alive, reaps it (multiprocessing's own test helper)
