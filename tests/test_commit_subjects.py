"""Commit subjects stay short: at most 72 characters, figures in the body.

Checked for the commits made after a fixed base, ``56956de`` (the start of the work of issue 41; the
earlier history is left as it was written). Skipped outside a git checkout, without ``git``, or where
the base commit is not in the history (a shallow clone, a source archive).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASE = "56956de"
LIMIT = 72


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=False, capture_output=True, text=True, timeout=60)


def test_commit_subjects_after_the_base_are_short() -> None:
    if shutil.which("git") is None:
        pytest.skip("no git")
    if _git("rev-parse", "--is-inside-work-tree").returncode != 0:
        pytest.skip("not a git checkout")
    if _git("cat-file", "-e", f"{BASE}^{{commit}}").returncode != 0:
        pytest.skip(f"the base commit {BASE} is not in this history (a shallow clone?)")
    log = _git("log", "--format=%h %s", f"{BASE}..HEAD")
    assert log.returncode == 0, log.stderr
    long = [line for line in log.stdout.splitlines() if len(line.split(" ", 1)[-1]) > LIMIT]
    assert not long, f"commit subjects over {LIMIT} characters (put the detail in the body):\n" + "\n".join(long)
