"""Shared test configuration: hypothesis profiles, the parallel run's groups and a /dev/shm leak check.

The suite runs on pytest-xdist's workers (``-n auto --dist loadfile`` in ``pyproject.toml``): each test file
runs whole on one worker, so a file's compiled kernels and module fixtures are built once, and every test under
``tests/spark`` runs on one worker, so they share one session-scoped SparkSession (one JVM), as
``tests/spark/conftest.py`` builds it.
"""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=False
)
settings.register_profile("ci", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=True)
settings.register_profile("thorough", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with every test under ``tests/spark`` in one unit (one worker, one SparkSession).

    pytest-xdist's own ``loadgroup`` would do it by a mark, but it finds a test's group by rewriting the
    test's nodeid, which pytest 9.2 no longer honours (pytest-xdist issue 1386): the marks were silently
    ignored. The scheduler sees nodeids only, so the Spark tests are the ones under ``tests/spark``.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/spark" if nodeid.startswith("tests/spark/") else super()._split_scope(nodeid)

    return SparkTogether(config, log)


@pytest.fixture
def sigint_default():
    """A ``preexec_fn`` for a child that must take SIGINT as a foreground process does: at its default action,
    unblocked. A child inherits an ignored or blocked SIGINT (a shell's ``cmd &`` starts its command with SIGINT
    ignored); a test of Ctrl-C must not depend on how its runner was started."""
    def reset() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    return reset


def _shm() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("pba_")}
    except FileNotFoundError:
        return set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ours(name: str) -> bool:
    """Blocks are named pba_<creator pid>_...: ours, or left by a process that has died."""
    try:
        pid = int(name.split("_")[1])
    except (IndexError, ValueError):
        return True
    return pid == os.getpid() or not _alive(pid)


@pytest.fixture(scope="session", autouse=True)
def no_leaked_shared_memory():
    """Fail the session if it leaves shared-memory segments behind (other live sessions' are not ours)."""
    before = _shm()
    yield
    leaked = {n for n in _shm() - before if _ours(n)}
    assert not leaked, f"shared-memory segments left in /dev/shm: {sorted(leaked)}"
