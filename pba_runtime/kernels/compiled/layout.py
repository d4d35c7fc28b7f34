"""Where a query's result rows go: the union of several windows' ``(key, end)`` rows, and results placed in it.

A query of several windows answers one row per (key, window end) emitted by any of them, ordered by key then
end (``docs/semantics.md``, *Queries over frames*). Each window's rows come ordered that way already, so their
union is a merge of sorted runs, linear in the rows (:func:`union_rows`; its plain reference is
:func:`union_rows_reference`, a sort of the concatenated rows); :func:`place` writes one window's results at
their rows of the union (the reference: ``out[pos] = values``), in one pass of increasing positions.

Examples
--------
>>> import numpy as np
>>> k, e, pos = union_rows([np.array([0, 0, 1]), np.array([0, 1])], [np.array([2, 3, 2]), np.array([3, 3])])
>>> k.tolist(), e.tolist(), [p.tolist() for p in pos]
([0, 0, 1, 1], [2, 3, 2, 3], [[0, 1, 2], [1, 3]])
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..lean_load import lean_loads
from .common import _JIT

__all__ = ["place", "union_rows", "union_rows_reference"]


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


lean_loads(globals())
