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
        return {n for n in os.listdir("/dev/shm") if n.startswith(("pba", "psm_"))}
    except FileNotFoundError:
        return set()


@pytest.fixture(scope="session", autouse=True)
def no_leaked_shared_memory():
    """Fail the session if it leaves shared-memory segments behind."""
    before = _shm()
    yield
    leaked = _shm() - before
    assert not leaked, f"shared-memory segments left in /dev/shm: {sorted(leaked)}"
