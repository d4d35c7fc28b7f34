"""Where a fused time-window batch may be cut, and its timestamps' one-pass check, compiled.

A long batch is cut at an episode's end near its middle and run as two calls of
:mod:`.time_fused` side by side (episodes share no state): :func:`episode_cut` finds the cut,
:func:`part_windows` counts the first part's windows so that the second part's go right after them
(:func:`pba_runtime.engines.time_batch.fused_halves` runs the parts, from ``SPLIT_MIN`` records);
:func:`timestamps_ok` checks a batch's timestamps in one pass. Blocks of ``_BLOCK`` timestamps without
a gap of ``r - s + 1`` are passed over in a vectorised test. Re-exported by :mod:`.time_fused`.
"""

from __future__ import annotations

from numba import njit

from .compiled import _JIT
from .lean_load import lean_loads
from .stepwise.index import uidx

__all__ = ["timestamps_ok", "episode_cut", "part_windows", "SPLIT_MIN"]

_HELPER = {**_JIT, "_nrt": False}  # as time_fused's helpers: no reference counting


@njit(**_JIT)
def timestamps_ok(ts, lo, hi, first):
    """Whether ``ts`` is non-decreasing, from ``first`` on, within ``[lo, hi]``: one pass, no branch per
    timestamp (:func:`pba_runtime.algorithms.base.validate_timestamps` in three numpy passes and a
    temporary; the caller runs that one when this says no, for its error message)."""
    bad = False
    prev = first
    for i in range(ts.shape[0]):
        t = ts[i]
        bad |= (t < prev) | (t < lo) | (t > hi)
        prev = t
    return not bad


# batches of at least this many records are cut in two at an episode's end, the second part run by a
# pool thread (:func:`episode_cut`; the caller reads it here: a test lowers it, 2**62 runs one call)
SPLIT_MIN = 1 << 18


_BLOCK = 512  # timestamps tested for a gap in one vectorised loop


@njit(**_HELPER)
def _any_gap(a, gap):
    """Whether two neighbours of ``a`` are ``gap`` or more apart (a loop that vectorises: no exit)."""
    hit = False
    for u in range(a.shape[0] - 1):
        hit |= a[uidx(u + 1)] - a[uidx(u)] >= gap
    return hit


@njit(**_JIT)
def episode_cut(ts, off, s, r, i0, i1):
    """The first ``i`` in ``[max(i0, 1), i1)`` whose tuple starts an episode (its first window begins after
    the slice of tuple ``i - 1``: every window holding an older tuple is complete), or ``-1``. Such a tuple
    is at least ``r - s + 1`` after the one before it: blocks without such a gap are passed over in a
    vectorised test, and the division runs only at the gaps."""
    gap = r - s + 1
    i1 = min(i1, ts.shape[0])
    for b0 in range(max(i0, 1), i1, _BLOCK):
        b1 = min(b0 + _BLOCK, i1)
        if not _any_gap(ts[b0 - 1 : b1], gap):
            continue
        for i in range(b0, b1):
            if ts[i] - ts[i - 1] >= gap and ts[i] - off >= ((ts[i - 1] - off) // s) * s + r:
                return i
    return -1


@njit(**_JIT)
def part_windows(ts, off, s, r, n, have, S, next_k):
    """How many windows a call over the tuples ``ts[:n]`` emits when it drains its last episode (``flush``),
    from the state ``have``, ``S`` (the open slice) and ``next_k`` (the first pending window). An episode
    emits every window from its first (``next_k`` for the one carried in, else the first holding its
    first tuple) to the last holding its last tuple (each of those holds a tuple: a window between two
    tuples of an episode that held none would make the later one start an episode). Blocks without a
    gap of ``r - s + 1`` are passed over as in :func:`episode_cut`."""
    gap = r - s + 1
    t = ts[0] - off
    w = 0
    first = (t - r) // s + 1
    if have:
        if t >= S * s + r:  # the carried episode ends: its windows up to its last slice
            w += max(0, S - next_k + 1)
        else:
            first = next_k
    for b0 in range(1, n, _BLOCK):
        b1 = min(b0 + _BLOCK, n)
        if not _any_gap(ts[b0 - 1 : b1], gap):
            continue
        for i in range(b0, b1):
            if ts[i] - ts[i - 1] >= gap:
                tp = ts[i - 1] - off
                ti = ts[i] - off
                if ti >= (tp // s) * s + r:
                    w += tp // s - first + 1
                    first = (ti - r) // s + 1
    return w + (ts[n - 1] - off) // s - first + 1


# Loading from the disk cache without numba's compiler set-up (lean_load.py).
lean_loads(globals())
