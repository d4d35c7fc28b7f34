"""Where a query's result rows go: the union of several windows' ``(key, end)`` rows, and results placed in it.

A query of several windows answers one row per (key, window end) emitted by any of them, ordered by key then
end (``docs/semantics.md``, *Queries over frames*). Each window's rows come ordered that way already, so their
union is a merge of sorted runs, linear in the rows (:func:`union_rows`; its plain reference is
:func:`union_rows_reference`, a sort of the concatenated rows); :func:`place` writes one window's results at
their rows of the union (the reference: ``out[pos] = values``), in one pass of increasing positions.
Where one window's rows of each key are one run of consecutive union rows (count windows of one slide),
:func:`place_runs` copies them run by run (reference: :func:`place_runs_reference`).

Examples
--------
>>> import numpy as np
>>> k, e, pos = union_rows([np.array([0, 0, 1]), np.array([0, 1])], [np.array([2, 3, 2]), np.array([3, 3])])
>>> k.tolist(), e.tolist(), [p.tolist() for p in pos]
([0, 0, 1, 1], [2, 3, 2, 3], [[0, 1, 2], [1, 3]])
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from ..lean_load import lean_loads
from .common import _JIT

__all__ = ["Runs", "place", "place_runs", "place_runs_reference", "union_rows", "union_rows_reference"]


@njit(**_JIT)
def _union2(ka, ea, kb, eb, k, e, pa, pb):
    """Merge two runs of ``(key, end)`` rows, each strictly increasing; returns the union's length."""
    i = j = m = 0
    na, nb = ka.shape[0], kb.shape[0]
    while i < na or j < nb:
        if j >= nb or (i < na and (ka[i] < kb[j] or (ka[i] == kb[j] and ea[i] < eb[j]))):
            k[m] = ka[i]
            e[m] = ea[i]
            pa[i] = m
            i += 1
        elif i >= na or ka[i] != kb[j] or ea[i] != eb[j]:
            k[m] = kb[j]
            e[m] = eb[j]
            pb[j] = m
            j += 1
        else:
            k[m] = ka[i]
            e[m] = ea[i]
            pa[i] = m
            pb[j] = m
            i += 1
            j += 1
        m += 1
    return m


@njit(**_JIT)
def _compose(p, through):
    for i in range(p.shape[0]):
        p[i] = through[p[i]]


def union_rows(keys: list[np.ndarray], ends: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The union of several windows' rows (each ``(keys[i], ends[i])`` strictly increasing by key then end):
    ``(key, end, positions)``, ``positions[i]`` the row of the union of each of window ``i``'s rows."""
    k = np.ascontiguousarray(keys[0], dtype=np.int64)
    e = np.ascontiguousarray(ends[0], dtype=np.int64)
    pos = [np.arange(len(k), dtype=np.int64)]
    for kb, eb in zip(keys[1:], ends[1:]):
        kb = np.ascontiguousarray(kb, dtype=np.int64)
        eb = np.ascontiguousarray(eb, dtype=np.int64)
        size = len(k) + len(kb)
        nk, ne = np.empty(size, np.int64), np.empty(size, np.int64)
        pa, pb = np.empty(len(k), np.int64), np.empty(len(kb), np.int64)
        m = _union2(k, e, kb, eb, nk, ne, pa, pb)
        for p in pos:
            _compose(p, pa)
        pos.append(pb)
        k, e = nk[:m], ne[:m]
    return k, e, pos


def union_rows_reference(keys: list[np.ndarray], ends: list[np.ndarray]):
    """:func:`union_rows` by sorting the concatenated rows (numpy only)."""
    allk = np.concatenate(keys).astype(np.int64)
    alle = np.concatenate(ends).astype(np.int64)
    both = np.unique(np.stack([allk, alle], axis=1), axis=0)
    k, e = both[:, 0], both[:, 1]
    pos = []
    for kk, ee in zip(keys, ends):
        lookup = {(a, b): i for i, (a, b) in enumerate(zip(k.tolist(), e.tolist()))}
        pos.append(np.array([lookup[(a, b)] for a, b in zip(kk.tolist(), ee.tolist())], dtype=np.int64))
    return k, e, pos


@njit(**_JIT)
def _place(values, pos, out, ok, valid, has_valid):
    for i in range(pos.shape[0]):
        out[pos[i]] = values[i]
        ok[pos[i]] = valid[i] if has_valid else True


def place(values: np.ndarray, valid: np.ndarray | None, pos: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (and their validity) at rows ``pos`` of ``m`` rows: ``(out, ok)``; other rows are not valid
    (``ok`` False; ``out`` NaN there for floats, 0 for integers). Object arrays (lists, vectors) are placed by
    numpy."""
    ok = np.zeros(m, dtype=bool)
    if values.dtype == object or values.ndim != 1:
        out = np.empty((m,) + values.shape[1:], dtype=values.dtype)
        out[pos] = values
        ok[pos] = True if valid is None else valid
        return out, ok
    out = np.full(m, np.nan) if values.dtype == np.float64 else np.zeros(m, dtype=values.dtype)
    has = valid is not None
    _place(values, pos, out, ok, valid if has else ok[:0], has)
    return out, ok


class Runs(NamedTuple):
    """Rows ``src[j] : src[j] + length[j]`` of a window's results go to union rows ``dst[j] :``, ``dst``
    increasing; the union has ``m`` rows."""

    src: np.ndarray
    dst: np.ndarray
    length: np.ndarray
    m: int


@njit(**_JIT)
def _place_runs(values, valid, has_valid, src, dst, length, out, ok, fill, j0, j1):
    """Runs ``[j0, j1)`` and the rows without a result before each (after the last one too, if ``j1`` is
    the last run): disjoint rows for disjoint run ranges."""
    pos = 0 if j0 == 0 else dst[j0 - 1] + length[j0 - 1]
    for j in range(j0, j1):
        d = dst[j]
        while pos < d:
            out[pos] = fill
            ok[pos] = False
            pos += 1
        s = src[j]
        for t in range(length[j]):
            out[d + t] = values[s + t]
            ok[d + t] = valid[s + t] if has_valid else True
        pos = d + length[j]
    if j1 == src.shape[0]:
        while pos < out.shape[0]:
            out[pos] = fill
            ok[pos] = False
            pos += 1


def place_runs(values: np.ndarray, valid: np.ndarray | None, runs: Runs, split: Any = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`place` for results that go to the union in runs (:class:`Runs`): ``(out, ok)``, NaN (floats)
    or 0 (integers) where no result goes. ``split(fn, bounds)``, if given, calls ``fn(j0, j1)`` over ranges
    of runs covering them all (the engines' :func:`~pba_runtime.engines.key_split.run_split`, which runs
    them beside each other), ``bounds`` the runs' first rows and the union's length; default: one call.

    Examples
    --------
    >>> import numpy as np
    >>> out, ok = place_runs(np.array([1.0, 2.0, 3.0]), None, Runs(np.array([0, 2]), np.array([1, 4]),
    ...                                                            np.array([2, 1]), 5))
    >>> out.tolist(), ok.tolist()
    ([nan, 1.0, 2.0, nan, 3.0], [False, True, True, False, True])
    """
    if values.dtype == object or values.ndim != 1:
        return place_runs_reference(values, valid, runs)
    out = np.empty(runs.m, dtype=values.dtype)
    ok = np.empty(runs.m, dtype=bool)
    has = valid is not None
    fill = values.dtype.type(np.nan if values.dtype.kind == "f" else 0)
    vv = valid if has else ok[:0]
    nruns = len(runs.src)
    if nruns == 0:
        out[:] = fill
        ok[:] = False
        return out, ok
    def fn(j0: int, j1: int) -> None:
        _place_runs(values, vv, has, runs.src, runs.dst, runs.length, out, ok, fill, j0, j1)

    if split is None:
        fn(0, nruns)
    else:
        split(fn, np.append(runs.dst, runs.m))
    return out, ok


def place_runs_reference(values: np.ndarray, valid: np.ndarray | None, runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    """The plain form of :func:`place_runs`: the runs as positions, then :func:`place`'s reference."""
    pos = np.concatenate([np.arange(d, d + n) for d, n in zip(runs.dst.tolist(), runs.length.tolist())]
                         + [np.zeros(0, dtype=np.int64)]).astype(np.int64)
    rows = np.concatenate([np.arange(s, s + n) for s, n in zip(runs.src.tolist(), runs.length.tolist())]
                          + [np.zeros(0, dtype=np.int64)]).astype(np.int64)
    if values.dtype == object or values.ndim != 1:
        out = np.empty((runs.m,) + values.shape[1:], dtype=values.dtype)
    else:
        out = np.full(runs.m, np.nan) if values.dtype.kind == "f" else np.zeros(runs.m, dtype=values.dtype)
    ok = np.zeros(runs.m, dtype=bool)
    out[pos] = values[rows]
    ok[pos] = True if valid is None else valid[rows]
    return out, ok


lean_loads(globals())
