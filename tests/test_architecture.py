"""The house rules, run with the tests (so CI enforces them): the import layers and the lint rules.

The layers are import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``), drawn in
``docs/architecture.md``; a new import cycle or an upward import fails here. ruff's rules are in
``[tool.ruff]``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_layers_hold():
    pytest.importorskip("importlinter")
    proc = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_ruff_is_clean():
    pytest.importorskip("ruff")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_importing_the_package_imports_none_of_it_until_a_name_is_used():
    """``import pba_runtime`` is lazy (PEP 562): numpy and the submodules come with the first name used, so the
    ``pba-run`` command starts its forkserver before them (pba_runtime/forkserver.py)."""
    code = ("import importlib, sys\n"
            "import pba_runtime as pr\n"
            "print(sorted(m for m in sys.modules if m.startswith('pba_runtime.')), 'numpy' in sys.modules)\n"
            "importlib.import_module('pba_runtime.replay')  # the submodule first: pr.replay stays the function\n"
            "print(callable(pr.replay), pr.CountWindow(range=2, slide=1).range, pr.kernels.__name__)\n"
            "from pba_runtime import create, Replay\n"
            "print(set(pr.__all__) <= set(dir(pr)), all(getattr(pr, n) is not None for n in pr.__all__))\n"
            "try:\n    pr.no_such_name\nexcept AttributeError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[] False", "True 2 pba_runtime.kernels", "True True",
                                        "module 'pba_runtime' has no attribute 'no_such_name'"]
