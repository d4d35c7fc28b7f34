"""One batch of many keys in one compiled call: what a keyed driver (a task slot) feeds its keys per batch.

A task slot feeds each batch to every key's operator, a few hundred tuples a key:
one ``insert_many`` per key costs several times more Python around it than its merge. For
the common case, each key's batch on the lean path
(:meth:`pba_runtime.algorithms.pba.PBA.lean_plan`: count windows, slide 1, the
compiled merge of scalar partials such as ``max``, ``min`` and ``sum``),
:func:`insert_many_keyed` lays every such key's history and batch end to end in
one array and merges them all in one compiled call
(:func:`pba_runtime.kernels.merge_keyed`), which runs each key's merge exactly as
its own ``insert_many`` would (rows of ``q`` from its first window): the same
results, bit for bit. Each operator then keeps its history as after its own
``insert_many``, so snapshots, ``flush`` and later calls carry on as usual. Every
other key (another algorithm or aggregation, no window yet, a batch large enough
for the pool) gets its own ``insert_many``.

Examples
--------
>>> import numpy as np, pba_runtime as pr
>>> w = pr.CountWindow(range=3, slide=1)
>>> ops = [pr.create("sba", w, "max") for _ in range(2)]
>>> out = insert_many_keyed(ops, np.array([1.0, 5, 2, 7, 3, 4, 0, 9]), [0, 4, 8])
>>> [(e.tolist(), r.tolist()) for e, r in out]
[([3, 4], [5.0, 7.0]), ([3, 4], [4.0, 9.0])]
>>> [(e.tolist(), r.tolist()) for e, r in insert_many_keyed(ops, np.array([6.0, 1.0]), [0, 1, 2])]
[([5], [7.0]), ([5], [9.0])]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..batch import _results
from ..kernels import merge_keyed
from .base import WindowOperator
from .pba import PBA

__all__ = ["insert_many_keyed"]


def insert_many_keyed(ops: Sequence[WindowOperator], values: np.ndarray,
                      bounds: Sequence[int], columns: list | None = None) -> list[tuple[np.ndarray, Any]]:
    """``[op.insert_many(values[bounds[i] : bounds[i + 1]]) for i, op in enumerate(ops)]``, the keys on the
    lean path merged in one compiled call (see the module doc).

    Parameters
    ----------
    ops : sequence of WindowOperator
        One operator per key, each a different one, none with timestamps (count windows).
    values : numpy.ndarray
        The batch's values, grouped by key: ``ops[i]``'s are ``values[bounds[i] : bounds[i + 1]]``.
    bounds : sequence of int
        ``len(ops) + 1`` increasing offsets into ``values``.
    columns : list, optional
        When given, and every key the one compiled call merged returns its ends and results as views of
        that call's two arrays (as the lean aggregations do), ``(indices, ends, results)`` is appended to
        it: the indices of those keys with a window, in order, and all their windows end to end, the very
        arrays their views are cut from (a consumer of every key's windows needs no copy of them).

    Returns
    -------
    list of tuple
        ``(ends, results)`` of each operator, as its ``insert_many`` returns them (the lean keys' are
        views of one array).
    """
    if len(bounds) != len(ops) + 1:
        raise ValueError(f"bounds must have len(ops) + 1 = {len(ops) + 1} offsets, got {len(bounds)}")
    out: list[Any] = [None] * len(ops)
    lean = _lean_keys(ops, values, bounds)
    if len(lean) < 2:  # nothing to share: each key its own call
        lean = []
    leaned = {i for i, *_ in lean}
    for i, op in enumerate(ops):
        if i not in leaned:
            out[i] = op.insert_many(values[bounds[i] : bounds[i + 1]])
    if not lean:
        return out
    first = ops[lean[0][0]]
    q, r = first._q, first._r
    P = first._kernel.lift(values, None)  # the lean aggregations lift a float to itself: P is values
    pieces: list[np.ndarray] = []
    # Python lists while laying out (an item of a numpy array costs more to set or read than a list's), arrays
    # for the compiled call
    xstart: list[int] = []
    nwin: list[int] = []
    ostart: list[int] = []
    first_end: list[int] = []
    x = o = 0
    for i, k_lo, nw, hist in lean:
        xstart.append(x)
        nwin.append(nw)
        ostart.append(o)
        first_end.append(k_lo + r)
        if hist is not None:
            pieces.append(hist)
            x += len(hist)
        pieces.append(P[bounds[i] : bounds[i + 1]])
        x += bounds[i + 1] - bounds[i]
        o += nw
    X = np.concatenate(pieces)
    res, ends = _results(o, (), np.float64, True)
    merge_keyed(first.engine, X, np.array(xstart, dtype=np.int64), np.array(nwin, dtype=np.int64),
                np.array(ostart, dtype=np.int64), np.array(first_end, dtype=np.int64), q, res, ends)
    views = True  # every key's results the view of res it was given
    for (i, k_lo, nw, _), x0, o0 in zip(lean, xstart, ostart):
        Xk = X[x0 : x0 + nw + q - 1]
        o1 = o0 + nw
        rk = res[o0:o1]
        low = ops[i].lean_finish(Xk, k_lo, nw, bounds[i + 1] - bounds[i], rk)
        views = views and low is rk
        out[i] = (ends[o0:o1], low)
    if columns is not None and views:
        columns.append(([i for i, _, nw, _ in lean if nw], ends, res))
    return out


def _lean_keys(ops: Sequence[WindowOperator], values: np.ndarray,
               bounds: Sequence[int]) -> list[tuple[int, int, int, np.ndarray | None]]:
    """``(i, k_lo, nwin, history)`` of each operator whose batch takes the lean path, all with the first
    one's window and merge (the others: their own ``insert_many``)."""
    if not (values.__class__ is np.ndarray and values.dtype == np.float64 and values.ndim == 1
            and values.flags.c_contiguous):
        return []
    lean = []
    like = None
    for i, op in enumerate(ops):
        if not isinstance(op, PBA):
            continue
        plan = op.lean_plan(bounds[i + 1] - bounds[i])
        if plan is None:
            continue
        sig = (op.window, op.engine.ops, op._kernel)
        if like is None:
            like = sig
        elif sig != like:
            continue
        lean.append((i, *plan))
    return lean
