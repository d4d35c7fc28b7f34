"""Module-level aggregations for the process-pool tests (worker processes import them by reference).

The *faulty* ones behave normally except in a worker process after the test
*arms* them (a marker file in ``FAULT_DIR``): the first worker ``combine`` that
takes the marker then SIGKILLs its own process, hangs, or raises. The main
process never faults, so the SBA fallback always succeeds.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import time

import numpy as np

from pba_runtime import Aggregation, UfuncKernel

# set before any pool starts, so spawned and forkserver workers inherit it
FAULT_DIR = os.environ.setdefault("PBA_TEST_FAULT_DIR", tempfile.mkdtemp(prefix="faults_"))


def arm(kind: str) -> None:
    """The next worker task of a faulty aggregation will ``kind`` ("kill", "hang" or "raise")."""
    open(os.path.join(FAULT_DIR, kind), "w").close()


def disarm() -> None:
    for kind in ("kill", "hang", "raise"):
        try:
            os.remove(os.path.join(FAULT_DIR, kind))
        except FileNotFoundError:
            pass


def _take(kind: str) -> bool:
    if multiprocessing.parent_process() is None:  # the main process never faults
        return False
    try:
        os.remove(os.path.join(FAULT_DIR, kind))  # exactly one worker wins the marker
    except FileNotFoundError:
        return False
    return True


def _fault() -> None:
    if _take("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    if _take("hang"):
        time.sleep(3600)
    if _take("raise"):
        raise RuntimeError("worker fault for the test")


# --------------------------------------------------------------------------- healthy Python aggregations
def py_lift(v):
    return float(v)


def py_max2(a, b):
    return a if (a >= b or a != a) else b


def py_lower(p):
    return p


PY_MAX = Aggregation(lift=py_lift, combine=py_max2, lower=py_lower, identity=float("-inf"), name="py_max")


def pair_lift(v):
    return (float(v), 1.0)


def pair_add(a, b):
    return (a[0] + b[0], a[1] + b[1])


def pair_mean(p):
    return p[0] / p[1] if p[1] else float("nan")


PY_MEAN = Aggregation(lift=pair_lift, combine=pair_add, lower=pair_mean, identity=(0.0, 0.0), name="py_mean")


def first_lift(v):
    return float(v)


def first2(a, b):  # non-commutative: the oldest value (tests the order of the lcs)
    return b if a != a else a


PY_FIRST = Aggregation(lift=first_lift, combine=first2, lower=py_lower, identity=float("nan"), name="py_first")


# --------------------------------------------------------------------------- faulty ones
def faulty_max2(a, b):
    _fault()
    return a if (a >= b or a != a) else b


FAULTY_MAX = Aggregation(lift=py_lift, combine=faulty_max2, lower=py_lower, identity=float("-inf"),
                         name="faulty_max")


class FaultyKernel(UfuncKernel):
    """np.maximum kernel whose accumulate faults in an armed worker (for the batch path)."""

    def accumulate(self, parts, axis, reverse=False, out=None, nan_free=False):
        _fault()
        return super().accumulate(parts, axis, reverse=reverse, out=out, nan_free=nan_free)


def _np_lift(v):
    return np.asarray(v, dtype=np.float64)


def _np_lower(a):
    return a


FAULTY_KERNEL_MAX = Aggregation(lift=py_lift, combine=py_max2, lower=float, identity=float("-inf"),
                                name="faulty_kernel_max", result="float",
                                kernel=FaultyKernel(np.maximum, float("-inf"), lift=_np_lift, lower=_np_lower))
