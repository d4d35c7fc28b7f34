"""Shared test configuration: hypothesis profiles and a /dev/shm leak check."""

from __future__ import annotations

import os

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
