"""Vectorised PBA over a batch of slice partials: the merge behind ``insert_many``.

The window starting at slice ``a`` covers slices ``a .. a+q-1``. Cut the slices
into rows (chunks) of ``q``; then a window starting at column ``j > 0`` of row
``c`` is ``lcs[c, j] (+) csa[c+1, j-1]``, and one starting at column 0 is the
whole chunk ``lcs[c, 0]``: one combine per window, all of them vectorised
(``ufunc.accumulate`` along rows, one elementwise combine).

Examples
--------
>>> import numpy as np
>>> from pba_runtime import get_aggregation
>>> window_merge(get_aggregation("max").kernel, np.array([3., 1, 4, 1, 5, 9, 2, 6]), q=3, nwin=6).tolist()
[4.0, 4.0, 5.0, 9.0, 9.0, 9.0]
"""

from __future__ import annotations

import logging
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from .aggregations import Aggregation, Kernel
from .pool import WorkerPool

log = logging.getLogger("pba_runtime")

__all__ = ["window_merge", "PARALLEL_BATCH_MIN", "MIN_ROWS_PER_CALL", "MIN_ELEMENTS_PER_CALL", "ROW_MODE_MIN_Q"]

# Below this many slice partials, a batch builds its lcs on the main thread:
# a pool hand-off costs more than it saves.
PARALLEL_BATCH_MIN = 1 << 16


def window_merge(kernel: Kernel, X: np.ndarray, q: int, nwin: int, pool: WorkerPool | None = None, *,
                 agg: Aggregation | None = None) -> np.ndarray:
    """Aggregate of ``X[a:a+q]`` for ``a = 0 .. nwin-1``: vectorised PBA with chunks of ``q`` slices.

    ``X`` holds slice partials (``len(X) >= nwin + q - 1``), cut into rows of
    ``q``. The window starting at column ``j`` of row ``c`` is ``lcs[c, j] (+)
    csa[c+1, j-1]`` (the suffix of its first chunk and the prefix of the next),
    or the whole chunk ``lcs[c, 0]`` when ``j == 0``: two parts, one combine.

    Rows are processed in cache-sized blocks with reused scratch buffers. With
    a ``pool``, its worker takes the first half of the rows and the main thread
    the second half, each building the lcs and csa of its own rows: every
    window gets the same arithmetic whatever the split, so the result is the
    one-thread (SBA) result bit for bit.

    With a process pool the worker's rows (and the row after them) are copied
    into a shared-memory scratch block, the task names the block, the shapes
    and ``agg`` (the aggregation whose ``kernel`` this is), and the worker's
    windows are copied back: two memcpy of the worker's half, against the
    three ``accumulate``/``combine`` passes it saves. Without a nameable
    ``agg`` (or without shared memory) the pool's threads take the half. If
    the worker dies, hangs or raises, the main thread merges its rows too.
    """
    shape = X.shape[1:]
    out = np.empty((max(nwin, 0),) + shape)
    if nwin <= 0:
        return out
    if q == 1:
        out[:] = X[:nwin]
        return out
    L = nwin + q - 1
    rows = L // q
    body = X[: rows * q].reshape((rows, q) + shape)
    R = rows - 1  # rows whose q windows all end inside a full row
    if R > 0:
        outv = out[: R * q].reshape((R, q) + shape)
        if pool is not None and not pool.closed and R >= 2 and R * q >= PARALLEL_BATCH_MIN:
            half = (R + 1) // 2
            # a worker process also costs the main thread a copy of its rows: give it 3/5 of them
            if not (pool.kind == "process" and _merge_in_process(kernel, agg, body, outv, (3 * R) // 5, R, pool)):
                _merge_in_threads(kernel, body, outv, half, R, pool)
        else:
            _merge_rows(kernel, body, outv, 0, R)
    # the last full row: its windows end in the partial row that follows it
    last = kernel.accumulate(body[R], axis=0, reverse=True)
    tail = kernel.accumulate(X[rows * q : L], axis=0)
    n_tail = nwin - R * q  # == len(tail) + 1
    out[R * q] = last[0]
    if n_tail > 1:
        kernel.combine(last[1:n_tail], tail, out=out[R * q + 1 : nwin])
    return out


def _merge_in_threads(kernel: Kernel, body: np.ndarray, outv: np.ndarray, half: int, R: int,
                      pool: WorkerPool) -> None:
    """A thread worker merges rows ``[0, half)``, the main thread ``[half, R)``: threads share the arrays."""
    submit = pool.submit if pool.kind == "thread" else pool.submit_thread
    try:
        fut = submit(_merge_rows, kernel, body, outv, 0, half)
    except RuntimeError:
        fut = None
    if fut is None:
        _merge_rows(kernel, body, outv, 0, R)
        return
    _merge_rows(kernel, body, outv, half, R)
    try:
        fut.result()
    except Exception as exc:  # a worker fault never loses a window: merge its rows here
        log.warning("batch merge task failed (%s: %s); merging its rows on the main thread", type(exc).__name__, exc)
        _merge_rows(kernel, body, outv, 0, half)


def _merge_in_process(kernel: Kernel, agg: Aggregation | None, body: np.ndarray, outv: np.ndarray, half: int,
                      R: int, pool: WorkerPool) -> bool:
    """A worker process merges rows ``[0, half)`` from shared memory; ``False`` if it cannot take them."""
    from . import logs
    from .shm import _aligned, aggregation_ref, run_merge_task

    ref = aggregation_ref(agg) if agg is not None and agg.kernel is kernel else None
    if ref is None:
        return False
    in_shape = (half + 1,) + body.shape[1:]
    out_shape = (half,) + outv.shape[1:]
    in_bytes = _aligned(8 * int(np.prod(in_shape)))
    try:
        blk = pool.lease_scratch(in_bytes + 8 * int(np.prod(out_shape)))
    except (RuntimeError, OSError):
        return False
    try:
        src = blk.ndarray(0, in_shape)
        src[...] = body[: half + 1]
        del src
        task = ("merge", blk.name, 0, in_shape, in_bytes, out_shape, half, ref, logs.current_config())
        try:
            fut = pool.submit(run_merge_task, task)
        except RuntimeError:
            fut = None
        _merge_rows(kernel, body, outv, half if fut is not None else 0, R)
        if fut is None:
            return True
        done = pool.wait_for(fut)
        err = None
        if done:
            try:
                fut.result()
            except Exception as exc:
                err = exc
        if done and err is None:
            outv[:half] = blk.ndarray(in_bytes, out_shape)
            return True
        what = f"{type(err).__name__}: {err}" if done else f"no result after task_timeout={pool.task_timeout}s"
        log.warning("batch merge task failed (%s); merging its rows on the main thread", what)
        if not done or isinstance(err, BrokenProcessPool):
            pool.recover(fut, what)  # no worker of that generation writes into the scratch any more
        _merge_rows(kernel, body, outv, 0, half)
        return True
    finally:
        pool.return_scratch(blk)


# Short rows are merged in 2-D accumulate calls of at least this many rows and elements:
# numpy 2.4 holds the GIL in calls with few rows (measured: 128 x 8192 and 256 x 1024
# held it; 512 x 1024 and 600 x 8192 released it). From ROW_MODE_MIN_Q slices a row,
# rows go one 1-D call each (always released).
MIN_ROWS_PER_CALL = 1024
MIN_ELEMENTS_PER_CALL = 1 << 20
ROW_MODE_MIN_Q = 4096


def _merge_rows(kernel: Kernel, body: np.ndarray, outv: np.ndarray, c0: int, c1: int) -> None:
    """Windows starting in rows ``[c0, c1)`` of ``body`` into ``outv``: lcs of those rows, csa of the next ones.

    numpy releases the GIL in a 2-D ``accumulate`` only when it has many rows (~600
    or more per call, measured with numpy 2.4), while a 1-D one always releases it. So
    long rows (``q >= ROW_MODE_MIN_Q``) are merged one row at a time, and short rows in
    2-D calls of at least ``MIN_ROWS_PER_CALL`` rows: either way a worker thread
    really runs beside the main thread. Same arithmetic per element in both modes.
    """
    if c1 <= c0:
        return
    q = body.shape[1]
    if q >= ROW_MODE_MIN_Q:
        lcs = np.empty(body.shape[1:])
        csa = np.empty(body.shape[1:])
        for c in range(c0, c1):
            kernel.accumulate(body[c], axis=0, reverse=True, out=lcs)
            kernel.accumulate(body[c + 1], axis=0, out=csa)
            o = outv[c]
            o[0] = lcs[0]
            kernel.combine(lcs[1:], csa[:-1], out=o[1:])
        return
    step = max(MIN_ROWS_PER_CALL, MIN_ELEMENTS_PER_CALL // q)
    calls = max(1, (c1 - c0) // step)  # rows spread evenly: no small remainder call
    cuts = [c0 + (c1 - c0) * i // calls for i in range(calls + 1)]
    n = max(b - a for a, b in zip(cuts, cuts[1:]))
    lcs = np.empty((n,) + body.shape[1:])
    csa = np.empty((n,) + body.shape[1:])
    for b0, b1 in zip(cuts, cuts[1:]):
        k = b1 - b0
        kernel.accumulate(body[b0:b1], axis=1, reverse=True, out=lcs[:k])
        kernel.accumulate(body[b0 + 1 : b1 + 1], axis=1, out=csa[:k])
        o = outv[b0:b1]
        o[:, 0] = lcs[:k, 0]
        kernel.combine(lcs[:k, 1:], csa[:k, :-1], out=o[:, 1:])


