"""The batch engines of count windows: the lean one, the one from values, the one from slices.

:func:`insert_slices` is the general batch (slices by ``reduceat``, then the vectorised merge of
:mod:`pba_runtime.batch`); :func:`insert_values` its case of slide 1 with an engine that merges straight
from values (compiled ``std``, ``mean``, ``argmax``); :func:`insert_lean` the keyed runtime's common case
with its Python trimmed (:func:`lean_plan`, :func:`lean_finish`, :func:`finish_lean`, also called by
:func:`pba_runtime.algorithms.keyed_batch.insert_many_keyed` for many keys at once). Each takes the
operator (``op``, a :class:`~pba_runtime.algorithms.pba.PBA`) whose merger state it reads and leaves, as
:mod:`.history` does; :mod:`.plan` picks the engine once. Their reference is the per-tuple operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..aggregations import as_float_array, quiet_non_finite
from ..batch import COMPILED_SPLIT_MIN, _results, windows_from_values, windows_with_ends
from ..kernels import merge_range
from .history import finish_batch, held_slices, pop_to

__all__ = ["insert_lean", "insert_slices", "insert_values", "lean_plan", "lean_finish", "finish_lean"]


def insert_lean(op, values, timestamps=None):
    """The lean engine's batch: the keyed runtime's common case, its Python trimmed (count windows, slide 1,
    the compiled merge of scalar partials, windows that fit in one block: no pool hand-off).

    The same steps as :func:`insert_slices` for that case (the lift, the merge of the history and
    the batch in rows of ``q`` from the first window, the lower, the history kept), called
    directly: each key of a slot pays this per batch, and the layers between would cost more than the
    merge of a few hundred values. A batch that is not that case (see :func:`lean_plan`) runs
    :func:`insert_slices`. Numba's loops raise no floating-point warnings, so no ``errstate`` is needed.
    """
    if (timestamps is None and values.__class__ is np.ndarray
            and values.dtype == np.float64 and values.ndim == 1 and values.flags.c_contiguous
            and not op._tuple_mode
            and not op._flushed and not op._closed):
        plan = op.lean_plan(len(values))
        if plan is not None:
            k_lo, nwin, hist = plan
            P = op._kernel.lift(values, None)
            X = P if hist is None else np.concatenate([hist, P])
            out, ends = _results(nwin, (), np.float64, True)
            merge_range(op.engine, X, op._q, 0, nwin, out, ends, k_lo + op._r, 1)
            return ends, op.lean_finish(X, k_lo, nwin, len(values), out)
    return insert_slices(op, values, timestamps)


def lean_plan(op, N: int) -> tuple[int, int, np.ndarray | None] | None:
    """Whether a batch of ``N`` values takes the lean path (:func:`insert_lean`, or several keys in one
    compiled call, :func:`pba_runtime.algorithms.keyed_batch.insert_many_keyed`): ``(k_lo, nwin, history)``,
    the batch's first window, its windows and the slices before the batch that they hold (``None``:
    none); ``None`` when it does not: not this case, no window completes, a batch large enough for the
    pool, or a history that does not start at the first window."""
    if not op._batch.lean or op._tuple_mode or op._flushed or op._closed:
        return None
    n0, r = op._n, op._r
    k_lo = n0 + 1 - r if n0 + 1 > r else 0
    nwin = n0 + N - r - k_lo + 1
    if N == 0 or nwin <= 0 or nwin >= COMPILED_SPLIT_MIN or op._front != k_lo:
        return None
    hist = held_slices(op) if op._back > op._front else None
    return k_lo, nwin, (hist if hist is not None and len(hist) else None)


def lean_finish(op, X: np.ndarray, k_lo: int, nwin: int, N: int, out: np.ndarray) -> Any:
    """After the lean path's merge of ``X`` (history and batch) into ``out``: the lowered results, and
    the history kept, as :func:`insert_slices` keeps it."""
    results = op._kernel.lower(out)
    op._emitted += nwin
    k_hi = k_lo + nwin - 1
    op._next_k = k_hi + 1
    op._finish_lean(X, k_lo, op._back + N, N, k_hi + 1)
    if op.agg.result == "int":
        results = np.asarray(results, dtype=np.int64)
    return results


def finish_lean(op, X, x0, g1, N, front) -> None:
    """``finish_batch(op, X, x0, g1, N, 0, identity, front=front)``, its calls inlined
    (:func:`~.history.defer_history`, ``PBA._reset_merger``, ``PBA._cursor``: the same state, a test checks
    it): the lean path runs it for every key of every batch."""
    front = min(front, g1)
    keep = X[front - x0 :]
    if op._chunks:  # _reset_merger(front, g1)
        op._drop_all()
    op._pushed = g1
    op._popped = front
    op._chunks = {}
    op._open = None
    identity = op.agg.identity
    op._csa = identity
    b = op._b
    if g1 % b:  # _cursor, with no chunk open
        op._open_base, op._open_rows = g1 - g1 % b, None
    else:
        op._open_base, op._open_rows = g1 - b, None
    keep = keep[: max(g1 - front, 0)]  # _defer_history
    op._deferred = (keep if op._input_borrowed else keep.copy(), front, g1)
    op._front = front
    op._back = g1
    op._n += N
    op._fill = 0
    op._cur = identity


@quiet_non_finite
def insert_slices(op, values, timestamps=None):
    """The count engine's batch: slices by ``reduceat``, the history and the new slices merged in rows of
    ``q`` (:func:`pba_runtime.batch.windows_with_ends`), the heads of ``r % s`` added, the history kept."""
    op._leave_tuple_mode()
    kernel = op._kernel
    op._check_open()
    if not hasattr(values, "__len__"):
        values = list(values)
    op._no_timestamps(timestamps, op.window)
    vals = as_float_array(values, agg_name=op.agg.name, missing=op.agg.missing)
    N = len(vals)
    if N == 0:
        return op._pack([], [])
    n0 = op._n
    s, r, q, m = op._s, op._r, op._q, op._m
    if s == 1 and q > 1 and op.engine.from_values is not None and N >= q:
        return insert_values(op, vals)
    P = kernel.lift(vals, np.arange(n0, n0 + N) if op.agg.positional else None)
    # 1. close slices: finish the open one, cut the rest every s tuples
    fill0 = op._fill
    need = (s - fill0) % s
    cur_row = kernel.to_array([op._cur])
    pieces = []
    if s == 1:
        new_slices = P
        fill, cur = 0, op.agg.identity
    else:
        if fill0 and N >= need:
            pieces.append(kernel.combine(cur_row, kernel.reduce_segments(P[:need], np.array([0]))))
            start = need
        else:
            start = 0 if fill0 == 0 else N
        nfull = (N - start) // s
        if nfull:
            pieces.append(kernel.reduce_segments(P[start : start + nfull * s], np.arange(0, nfull * s, s)))
        rest = P[start + nfull * s :]
        if fill0 and N < need:
            cur = kernel.to_partials(kernel.combine(cur_row, kernel.reduce_segments(P, np.array([0]))))[0]
            fill = fill0 + N
        elif len(rest):
            cur = kernel.to_partials(kernel.reduce_segments(rest, np.array([0])))[0]
            fill = len(rest)
        else:
            cur, fill = op.agg.identity, 0
        new_slices = np.concatenate(pieces) if len(pieces) > 1 else (pieces[0] if pieces else P[:0])
    # 2. windows ending in this batch: end n = k*s + r, n0 < n <= n0 + N
    k_lo = max(0, -((n0 + 1 - r) // -s))
    k_hi = (n0 + N - r) // s
    g0 = op._back
    g1 = g0 + len(new_slices)
    if k_hi < k_lo:
        X = np.concatenate([held_slices(op), new_slices]) if op._pushed > op._popped else new_slices
        finish_batch(op, X, op._front, g1, N, fill, cur)
        return op._pack([], [])
    nwin = k_hi - k_lo + 1
    # slices [k_lo, g1) as one array: history, then the new slices
    if op._front < k_lo:
        pop_to(op, k_lo)
    hist = held_slices(op) if g0 > op._front else None
    X = new_slices if hist is None or not len(hist) else np.concatenate([hist, new_slices])
    ends, full = windows_with_ends(kernel, X, q, nwin, k_lo * s + r, s, op._pool, agg=op.agg,
                                  engine=op.engine, lowered=not m)
    if m:
        # head of slice k+q: its first m tuples, at batch offsets (k+q)*s - n0 ...
        h0 = (np.arange(k_lo, k_hi + 1) + q) * s - n0
        heads = np.empty_like(full)
        inside = h0 >= 0
        if not inside.all():  # the open slice began before this batch
            heads[~inside] = kernel.combine(cur_row, kernel.reduce_segments(P[: m - fill0], np.array([0])))
        hs = h0[inside]
        if len(hs):
            # segments [h, h+m) interleaved with the gaps [h+m, next h): heads are the even ones
            bounds = np.empty(2 * len(hs) - 1, dtype=np.intp)
            bounds[0::2] = hs
            bounds[1::2] = hs[:-1] + m
            heads[inside] = kernel.reduce_segments(P[: hs[-1] + m], bounds)[0::2]
        full = kernel.combine(full, heads, out=full if kernel.combine_in_place else None)
    results = kernel.lower(full) if m else full
    op._emitted += nwin
    op._next_k = k_hi + 1
    finish_batch(op, X, k_lo, g1, N, fill, cur, front=k_hi + 1)
    if op.agg.result == "int":
        results = np.asarray(results, dtype=np.int64)
    return ends, results


def insert_values(op, vals: np.ndarray) -> tuple[np.ndarray, Any]:
    """Count windows, slide 1, an engine that merges straight from values (compiled std, mean, argmax).

    Every slice is one value, so the history's values (one column of its partials) and the
    batch's values make the merge's input, and the merge writes lowered results: no partial
    array for the batch, only for the ``q - 1`` slices kept as history.
    """
    kernel, engine = op._kernel, op.engine
    N, n0, r, q = len(vals), op._n, op._r, op._q
    k_lo = max(0, n0 + 1 - r)
    k_hi = n0 + N - r  # >= k_lo: N >= q
    g1 = op._back + N
    if op._front < k_lo:
        pop_to(op, k_lo)
    hist = held_slices(op) if op._back > op._front else None
    if hist is not None and len(hist):
        old = hist if hist.ndim == 1 else hist[:, engine.value_column]
        V = np.concatenate([old, vals])
    else:
        V = vals
    nwin = k_hi - k_lo + 1
    ends, results = windows_from_values(engine, V, q, nwin, k_lo + r, 1, op._pool, pos0=k_lo)
    op._emitted += nwin
    op._next_k = k_hi + 1
    front = k_hi + 1
    tail = V[front - k_lo :]
    pos = np.arange(front, front + len(tail)) if op.agg.positional else None
    finish_batch(op, kernel.lift(tail, pos), front, g1, N, 0, op.agg.identity, front=front)
    if op.agg.result == "int":
        results = np.asarray(results, dtype=np.int64)
    return ends, results
