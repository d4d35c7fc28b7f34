"""The batch engines of time windows: the fused one (one compiled call a batch) and the episode one.

:func:`insert_fused` runs a batch, its gaps, slice folds, lcs/csa and windows in one call of
:mod:`pba_runtime.kernels.time_fused` (the built-in layouts: scalar, two sums, ``argmax``, ``std``), cut in
two side by side for a long batch (:func:`fused_halves`); :func:`insert_episodes` is its reference, and the
engine of every other aggregation: the batch cut into *episodes* where the slicing layer would reset, each
merged like count windows (:mod:`pba_runtime.batch`). Each takes the operator (``op``, a
:class:`~pba_runtime.algorithms.pba.PBA`) whose merger state it reads and leaves; :mod:`.plan` picks the
engine once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..aggregations import as_float_array, quiet_non_finite
from ..batch import _results, windows_with_ends
from ..kernels.read_only import read_only
from .history import defer_history, held_slices

__all__ = ["insert_fused", "insert_and_flush_fused", "flush_fused", "insert_episodes", "flush_episodes",
           "fused_layout", "fused_timestamps", "time_fused", "fused_halves", "episode"]


def fused_layout(engine) -> bool:
    """Whether a compiled engine's time-window batches run fused (:func:`pba_runtime.kernels.time_fused.runner`:
    scalar, two-sum, argmax and std partials; not moment_sketch's 23 columns nor user aggregations).
    Decided without importing numba (the codes are :mod:`pba_runtime.kernels.compiled`'s; 0 adds)."""
    return engine.layout in ("scalar", "argmax", "std") or (engine.layout == "columns" and engine.ops == (0, 0))


@quiet_non_finite
def insert_fused(op, values, timestamps=None, flush: bool = False) -> tuple[np.ndarray, Any]:
    """The fused engine's batch (with ``flush``, and the end of stream): its timestamps checked in one
    compiled pass (:func:`fused_timestamps`), then one compiled call (:func:`time_fused`)."""
    op._leave_tuple_mode()
    op._check_open()
    if not hasattr(values, "__len__"):
        values = list(values)
    vals = as_float_array(values, agg_name=op.agg.name, missing=op.agg.missing)
    ts = fused_timestamps(op, timestamps, len(vals))
    if ts is None:
        ts = op._check_timestamps(timestamps, len(vals), op._t_last, op.window)
    if len(vals) == 0:
        return op._pack([], [])
    return time_fused(op, vals, ts, flush)


def insert_and_flush_fused(op, values, timestamps=None) -> tuple[np.ndarray, Any]:
    """The batch and the end of stream in one compiled call (no second call, and no copy of the results
    to join them)."""
    ends, results = insert_fused(op, values, timestamps, True)
    if op._flushed:
        return ends, results
    tail_ends, tail_results = op.flush()  # an empty batch: no compiled call ran
    if not len(tail_ends):
        return ends, results
    return np.concatenate([ends, tail_ends]), np.concatenate([results, tail_results])


def flush_fused(op) -> tuple[np.ndarray, Any]:
    """End of stream: every window still holding a tuple, drained in the compiled loop."""
    none = np.empty(0, dtype=np.int64)
    return time_fused(op, np.empty(0), none, flush=True)


def flush_episodes(op) -> tuple[np.ndarray, Any]:
    """End of stream: every window still holding a tuple, merged in one vectorised pass (an episode with
    no new tuple), not one query per window."""
    none = np.empty(0, dtype=np.int64)
    P = op._kernel.lift(np.empty(0), none if op.agg.positional else None)
    return episode(op, P, none, none, last=False)


def fused_timestamps(op, timestamps: Any, n: int) -> np.ndarray | None:
    """A batch's int64 timestamps checked in one compiled pass (non-decreasing, from the last one
    seen, in range), or ``None``: not an int64 array of ``n``, or a check failed, and
    ``validate_timestamps`` (the reference, with its error messages) decides."""
    ts = timestamps
    if not (isinstance(ts, np.ndarray) and ts.dtype == np.int64 and ts.ndim == 1 and len(ts) == n and n
            and ts.flags.c_contiguous):
        return None
    from ..kernels import time_fused as TF

    lo, hi = op.window.timestamp_range
    first = lo if op._t_last is None else max(lo, op._t_last)
    return ts if TF.timestamps_ok(read_only(ts), lo, hi, first) else None


def time_fused(op, vals: np.ndarray, ts: np.ndarray, flush: bool) -> tuple[np.ndarray, Any]:
    """A time-window batch of values ``vals`` (or, with ``flush``, the end of stream) in one compiled
    call (:mod:`pba_runtime.kernels.time_fused`); more only when its result array fills up. The
    compiled lifts of ``std`` and ``mean`` run inside the kernel (``time_fused.LIFTED``).

    The state goes in and comes out in the operator's own form (the slices of the pending
    windows as a deferred history, the open slice's head and rest), so per-tuple inserts,
    snapshots and the other paths carry on from it.
    """
    from ..kernels import time_fused as TF

    kernel, engine = op._kernel, op.engine
    shape = kernel.shape
    K = int(np.prod(shape, dtype=np.int64)) if shape else 1
    s, r, q, m, off = op._s, op._r, op._q, op._m, op._off
    N = len(ts)
    row = (K,) if shape else ()  # the kernels take scalar partials as 1-D arrays
    lowered = getattr(kernel, "_lower_name", None) in TF.LOWERED and getattr(kernel, "_lift_name", None) in TF.LIFTED
    if getattr(kernel, "_lift_name", None) in TF.LIFTED:
        P2 = np.ascontiguousarray(vals, dtype=np.float64)
    else:
        P = kernel.lift(vals, ts if op.agg.positional else None)
        P2 = np.ascontiguousarray(P, dtype=np.float64).reshape((N,) + row)
    # the kernel only reads the partials and timestamps: read-only views, whether the caller's arrays are
    # writable or Arrow's buffers, so each kernel compiles once (kernels/read_only.py)
    P2, ts = read_only(P2), read_only(ts)
    ident = kernel.identity_array(1).reshape((1,) + row)
    st = np.zeros(TF.STATE, dtype=np.int64)
    st[TF.LANES] = TF.LANES_MIN
    st[TF.FUSE] = 1 if TF.FUSE_ROWS else 0
    cur, head = ident.copy(), ident.copy()
    hist = np.empty((0,) + row)
    if op._slice is not None:
        S, next_k, front = op._slice, op._next_k, op._front
        x0 = min(next_k, front)
        pieces = [kernel.identity_array(front - x0).reshape((-1,) + row)] if front > x0 else []
        if op._pushed > op._popped:
            pieces.append(held_slices(op).reshape((-1,) + row))
        X = np.concatenate(pieces) if len(pieces) > 1 else (pieces[0] if pieces else hist)
        hist = np.ascontiguousarray(X[next_k - x0 : S - x0])
        cur[0] = kernel.to_array([op._cur]).reshape(row)
        head[0] = kernel.to_array([op._head]).reshape(row)
        st[TF.HAVE], st[TF.SLICE], st[TF.NEXT_K] = 1, S, next_k
        first_k = next_k
    else:
        first_k = (int(ts[0]) - off - r) // s + 1 if N else 0
    # every window emitted here starts in [first_k, last slice]: that many, at most, and at most
    # q + 1 per tuple; beyond 4 per tuple, the array grows when it fills
    bound = ((int(ts[-1]) - off) // s - first_k + 1 if N else 0) + q + 2
    # the kernel stops when fewer than 2q + 2 rows are left (an event computes at most 2q windows)
    cap = max(2 * q + 4, min(bound, N * (q + 1) + q + 2, 4 * N + 2 * q + 4))
    run = TF.runner(engine.layout, engine.ops)
    ops = engine._ops_array if engine.layout in ("scalar", "columns") else np.zeros(2, dtype=np.int64)
    pool = op._pool
    halves = None
    if N >= TF.SPLIT_MIN and pool is not None and pool.kind == "thread":  # a long batch: two threads
        halves = fused_halves(op, TF, run, ops, P2, ts, flush, hist, ident, st, cur, head, first_k, row,
                                    () if lowered else row)
    if halves is not None:
        out, ends, st, cur, head, hist_out = halves
    else:
        ring, lcs, hd = np.empty((2 * q,) + row), np.empty((2 * q,) + row), np.empty((q,) + row)
        hist_out = np.empty((q + 1,) + row)
        outs, ends_parts = [], []
        while True:
            out, ends = _results(cap, () if lowered else row, np.float64, True)
            run(P2, ts, s, off, r, q, m, hist, flush, ident, st, cur, head, ring, lcs, hd, out, ends,
                hist_out, ops)
            w = int(st[TF.WINDOWS])
            outs.append(out[:w])
            ends_parts.append(ends[:w])
            if st[TF.DONE]:
                break
            cap *= 2
        out = outs[0] if len(outs) == 1 else np.concatenate(outs)
        ends = ends_parts[0] if len(ends_parts) == 1 else np.concatenate(ends_parts)
    nwin = len(ends)
    results = out if lowered else kernel.lower(out.reshape((nwin,) + shape))
    if op.agg.result == "int":
        results = np.asarray(results, dtype=np.int64)
    op._emitted += nwin
    op._n += N
    if N:
        op._t_last = int(ts[-1])
    if flush:
        op._flushed = True
    if st[TF.HAVE]:
        S, next_k, L = int(st[TF.SLICE]), int(st[TF.NEXT_K]), int(st[TF.HIST])
        defer_history(op, hist_out[:L].reshape((L,) + shape), 0, L)
        op._front, op._back, op._slice, op._next_k = next_k, S, S, next_k
        op._cur = kernel.to_partials(cur.reshape((1,) + shape))[0]
        op._head = kernel.to_partials(head.reshape((1,) + shape))[0]
    else:
        op._reset_merger()
        op._slice = None
    return ends, results


def fused_halves(op, TF, run, ops, P2, ts, flush, hist, ident, st, cur, head, first_k, row, res_row):
    """:func:`time_fused`'s call as two, side by side: the batch cut at an episode's end near its middle
    (:func:`~pba_runtime.kernels.time_fused.episode_cut`: episodes share no state), the first part with
    the operator's state and the end of its last episode drained (what the tuple that starts the next
    one does in one call), the second from a fresh state, on a pool thread. Each part's windows are
    the one call's, bit for bit. The pool thread counts the first part's windows
    (:func:`~pba_runtime.kernels.time_fused.part_windows`, one pass over its timestamps) and writes the
    second part's right after them, so nothing is moved. A second part that has not started when the
    first ends is cancelled and run here.

    Returns ``(out, ends, st, cur, head, hist_out)`` as the one call leaves them, or ``None``: no cut
    (no episode ends near the middle, or the records are sparse: the one call grows its array), or
    a count that missed or a part that ran out of room (neither expected: the one call then runs;
    ``st``, ``cur`` and ``head`` are as they came).
    """
    s, r, q, m, off = op._s, op._r, op._q, op._m, op._off
    N = len(ts)
    cut = TF.episode_cut(ts, off, s, r, N // 2, N - N // 8)
    if cut < 0:
        cut = TF.episode_cut(ts, off, s, r, N // 4, N // 2)
    if cut < 0:
        return None
    # each part's windows start in [its first window, its last slice] (as the one call's bound), and the
    # kernel stops with fewer than 2q + 2 rows left: with 3q + 6 more, it never does
    cap1 = (int(ts[cut - 1]) - off) // s - first_k + 1 + 3 * q + 6
    cap2 = (int(ts[-1]) - off) // s - ((int(ts[cut]) - off - r) // s + 1) + 1 + 3 * q + 6
    if cap1 + cap2 > 4 * N + 6 * q + 12:  # sparse records: the one call
        return None
    saved = st.copy(), cur.copy(), head.copy()
    st2, cur2, head2 = np.zeros_like(st), ident.copy(), ident.copy()
    st2[TF.LANES], st2[TF.FUSE] = st[TF.LANES], st[TF.FUSE]
    scratch = [(np.empty((2 * q,) + row), np.empty((2 * q,) + row), np.empty((q,) + row),
                np.empty((q + 1,) + row)) for _ in range(2)]
    out, ends = _results(cap1 + cap2, res_row, np.float64, True)
    P_2, ts_2, none = P2[cut:], ts[cut:], hist[:0]
    ring2, lcs2, hd2, hist2 = scratch[1]
    have, S, next_k = bool(st[TF.HAVE]), int(st[TF.SLICE]), int(st[TF.NEXT_K])

    def second(o: int) -> int:
        """The second part's windows from ``out[o]``; ``o < 0``: right after the first part's, counted."""
        if o < 0:
            o = TF.part_windows(ts, off, s, r, cut, have, S, next_k)
        run(P_2, ts_2, s, off, r, q, m, none, flush, ident, st2, cur2, head2, ring2, lcs2, hd2, out[o:],
            ends[o:], hist2, ops)
        return o

    try:
        fut = op._pool.submit_thread(second, -1)
    except RuntimeError:  # the pool closed: both parts here
        fut = None
    ring, lcs, hd, hist1 = scratch[0]
    run(P2[:cut], ts[:cut], s, off, r, q, m, hist, True, ident, st, cur, head, ring, lcs, hd, out[:cap1],
        ends[:cap1], hist1, ops)
    w1 = int(st[TF.WINDOWS])
    if fut is None or fut.cancel():  # not started: here, after the first part's windows
        o = second(w1)
    else:
        o = fut.result()
    # (a count that missed would have had the two parts write over each other: both are dropped)
    if o != w1 or not (st[TF.DONE] and st2[TF.DONE]):  # pragma: no cover (each part counted and bounded)
        st[:], cur[:], head[:] = saved
        return None
    w = w1 + int(st2[TF.WINDOWS])
    return out[:w], ends[:w], st2, cur2, head2, hist2


@quiet_non_finite
def insert_episodes(op, values, timestamps=None) -> tuple[np.ndarray, Any]:
    """The episode engine's batch (the reference of the fused one; user aggregations always take it).

    The batch is cut into *episodes* where the slicing layer would reset: a
    tuple whose first window starts after the previous tuple's slice, so
    every window holding an older tuple is complete. Within an episode every
    pending window holds a tuple, slices are laid out densely (empty ones are
    the identity) and merged like count windows.
    """
    op._leave_tuple_mode()
    op._check_open()
    if not hasattr(values, "__len__"):
        values = list(values)
    vals = as_float_array(values, agg_name=op.agg.name, missing=op.agg.missing)
    ts = op._check_timestamps(timestamps, len(vals), op._t_last, op.window)
    kernel = op._kernel
    N = len(vals)
    if N == 0:
        return op._pack([], [])
    s, r, off = op._s, op._r, op._off
    P = kernel.lift(vals, ts if op.agg.positional else None)
    if op._plan.compiled_slicing:
        from ..kernels import time_slicing as slicing  # numba's import waits for the first compiled batch

        op._slicing = slicing  # (fold_slices reads it)
        time_slices = slicing.time_slices
    else:
        from ..windows import time_slices
    has_last = op._slice is not None
    G, starts = time_slices(ts, s, off, r, op._slice if has_last else 0, has_last)
    # episodes: [0, first start) continues the slicing before the batch; each start begins afresh
    first_fresh = len(starts) > 0 and starts[0] == 0
    bounds = starts.tolist() + [N]
    if not first_fresh:
        bounds.insert(0, 0)
    all_ends, all_res = [], []
    for e, (i0, i1) in enumerate(zip(bounds[:-1], bounds[1:])):
        if e > 0 or first_fresh:
            if op._slice is not None:  # windows holding older tuples were all completed by ts[i0]
                e, res = drain_before(op, int(ts[i0]))
                all_ends.append(e)
                all_res.append(res)
            op._start(int(ts[i0]), int(G[i0]))
        e, res = episode(op, P[i0:i1], ts[i0:i1], G[i0:i1], last=i1 == N)
        all_ends.append(e)
        all_res.append(res)
    op._n += N
    op._t_last = int(ts[-1])
    ends = np.concatenate(all_ends)
    if op.agg.result == "list":
        return ends, [x for part in all_res for x in part]
    results = np.concatenate(all_res) if len(all_res) > 1 else all_res[0]
    return ends, results


def drain_before(op, t: int) -> tuple[np.ndarray, Any]:
    """Emit the windows a tuple at ``t`` completes when it starts a new episode."""
    out: list = []
    op._advance(None, None, out)  # emits every window holding an old tuple, then resets
    return op._pack([e for e, _ in out], [res for _, res in out])


def episode(op, P: np.ndarray, ts: np.ndarray, G: np.ndarray, last: bool) -> tuple[np.ndarray, Any]:
    """One episode's tuples (``P`` at ``ts``, in slices ``G``) folded into dense slices and merged; ``last``: the
    batch ends in it (its slices stay as the history), else its windows are all emitted and the merger resets."""
    kernel = op._kernel
    s, r, q, m, off = op._s, op._r, op._q, op._m, op._off
    S0 = op._slice
    g_last = int(G[-1]) if len(G) else S0  # no tuples: drain the open slice (end of stream)
    next_k = op._next_k
    K = (int(ts[-1]) - off - r) // s if last else g_last  # last window this episode completes
    S_end = max(g_last + 1, K + q + 1)
    width = S_end - S0
    tail = kernel.identity_array(width)
    if m:
        head = kernel.identity_array(width)
        in_head = (ts - off - G * s) < m
        groups = ((head, in_head), (tail, ~in_head))
    else:
        groups = ((tail, slice(None)),)
    for dense, sel in groups:
        fold_slices(op, P[sel], G[sel], S0, dense)
    # the open slice carried in from before the batch is older than the batch's tuples
    tail[:1] = kernel.combine(kernel.to_array([op._cur]), tail[:1])
    if m:
        head[:1] = kernel.combine(kernel.to_array([op._head]), head[:1])
    full = kernel.combine(head, tail) if m else tail
    base = op._back - op._pushed  # absolute index of the merger's slice 0
    front = op._front
    x0 = min(next_k, front)
    pieces = []
    if front > x0:
        pieces.append(kernel.identity_array(front - x0))
    if op._pushed > op._popped:
        pieces.append(held_slices(op))
    pieces.append(full)
    X = np.concatenate(pieces) if len(pieces) > 1 else full
    nwin = K - next_k + 1
    if nwin > 0:
        ends, agg_full = windows_with_ends(kernel, X[next_k - x0 :], q, nwin, next_k * s + off + r, s,
                                           op._pool, agg=op.agg, engine=op.engine, lowered=not m)
        if m:
            agg_full = kernel.combine(agg_full, head[next_k + q - S0 : K + q + 1 - S0])
        results = kernel.lower(agg_full) if m else agg_full
        if op.agg.result == "int":
            results = np.asarray(results, dtype=np.int64)
        op._emitted += nwin
        op._next_k = K + 1
    else:
        ends, results = op._pack([], [])
    if last:
        new_front = max(front, op._next_k)
        keep = X[new_front - x0 : g_last - x0]
        defer_history(op, keep, new_front - base, g_last - base)
        op._front, op._back, op._slice = new_front, g_last, g_last
        op._head = kernel.to_partials(head[g_last - S0 : g_last - S0 + 1])[0] if m else op.agg.identity
        op._cur = kernel.to_partials(tail[g_last - S0 : g_last - S0 + 1])[0]
    else:
        op._reset_merger()
        op._slice = None
    return ends, results


def fold_slices(op, P: np.ndarray, G: np.ndarray, S0: int, dense: np.ndarray) -> None:
    """``dense[g - S0]`` = the partial of the tuples of slice ``g`` (``G`` sorted; other slices untouched)."""
    if not len(G):
        return
    if op._plan.compiled_fold:
        slicing = op._slicing
        if dense.ndim == 1:
            slicing.fold_scalar(read_only(np.ascontiguousarray(P)), G, S0, dense, op.engine.ops[0])
        else:
            slicing.fold_columns(read_only(np.ascontiguousarray(P)), G, S0, dense, op.engine._ops_array)
        return
    starts = np.flatnonzero(np.diff(G)) + 1
    starts = np.insert(starts, 0, 0)
    dense[G[starts] - S0] = op._kernel.reduce_segments(P, starts)
