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
import threading
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from .aggregations import Aggregation, Kernel, quiet_non_finite
from .pool import WorkerPool

log = logging.getLogger("pba_runtime")

__all__ = ["window_merge", "windows_with_ends", "splits_rows", "PARALLEL_BATCH_MIN", "MIN_ROWS_PER_CALL", "MIN_ELEMENTS_PER_CALL",
           "ROW_MODE_MIN_Q", "THREADED_ROW_MODE_MIN_Q"]

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

    With a ``pool``, its worker takes the first rows and the main thread the
    rest (and the last, partial row), each building the lcs and csa of its own
    rows: every window gets the same arithmetic whatever the split, so the
    result is the one-thread (SBA) result bit for bit.

    With a process pool the worker's rows (and the row after them) are copied
    into a shared-memory scratch block, the task names the block, the shapes
    and ``agg`` (the aggregation whose ``kernel`` this is), and the worker's
    windows are copied back: two memcpy of the worker's part, against the
    three ``accumulate``/``combine`` passes it saves. Without a nameable
    ``agg`` (or without shared memory) the pool's threads take the part. If
    the worker dies, hangs or raises, the main thread merges its rows too.
    """
    return _merge(kernel, X, q, nwin, pool, agg, None)[1]


def windows_with_ends(kernel: Kernel, X: np.ndarray, q: int, nwin: int, first_end: int, step: int,
                      pool: WorkerPool | None = None, *, agg: Aggregation | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`window_merge` plus the windows' ends ``first_end + a*step`` (int64), filled by the same threads.

    Writing the ends is a pass over as many bytes as the results: done row by
    row beside the merge, it costs each thread half of it instead of the main
    thread all of it.

    Examples
    --------
    >>> import numpy as np
    >>> from pba_runtime import get_aggregation
    >>> ends, res = windows_with_ends(get_aggregation("sum").kernel, np.arange(5.0), 2, 4, first_end=2, step=1)
    >>> ends.tolist(), res.tolist()
    ([2, 3, 4, 5], [1.0, 3.0, 5.0, 7.0])
    """
    return _merge(kernel, X, q, nwin, pool, agg, (first_end, step))


def _merge(kernel: Kernel, X: np.ndarray, q: int, nwin: int, pool: WorkerPool | None, agg: Aggregation | None,
           ends_spec: tuple[int, int] | None) -> tuple[np.ndarray | None, np.ndarray]:
    shape = X.shape[1:]
    nwin = max(nwin, 0)
    out = np.empty((nwin,) + shape)
    ends = None
    if ends_spec is not None:
        ends = np.empty(nwin, dtype=np.int64)
        first_end, step = ends_spec
    if nwin == 0:
        return ends, out
    if q == 1:
        out[:] = X[:nwin]
        if ends is not None:
            _fill_ends(ends, first_end, step)
        return ends, out
    L = nwin + q - 1
    rows = L // q
    body = X[: rows * q].reshape((rows, q) + shape)
    R = rows - 1  # rows whose q windows all end inside a full row
    n_tail = nwin - R * q  # windows starting in the last full row (== len(tail) + 1)
    rend = None if ends is None else _RowEnds(ends[: R * q], q, first_end, step)
    last = np.empty(body.shape[1:])  # lcs of the last full row: its windows end in the partial row after it
    last_done = False
    if R > 0:
        outv = out[: R * q].reshape((R, q) + shape)
        if pool is not None and not pool.closed and splits_rows(q, L, pool.kind):
            # in rows of work (2 accumulates + combine + ends): the worker also builds `last`
            # (~0.45 row), the main thread the tail's csa and windows (~0.55 row per row of tail)
            h = min(R - 1, max(1, round((R + 0.55 * n_tail / q - 0.45) / 2)))
            if pool.kind == "thread" and h < MIN_ROWS_PER_CALL < R and q < ROW_MODE_MIN_Q:
                # the worker's rows in 2-D calls (GIL released throughout), not row by row beside the
                # main thread's: row-by-row threads trade the GIL at every call
                h = MIN_ROWS_PER_CALL
            # a worker process also costs the main thread a copy of its rows: give it 3/5 of them
            if not (pool.kind == "process" and _merge_in_process(kernel, agg, body, outv, (3 * R) // 5, R, pool,
                                                                 rend)):
                _merge_in_threads(kernel, body, outv, h, R, pool, rend, last)
                last_done = True
        else:
            _merge_rows(kernel, body, outv, 0, R, rend)
    o = out[R * q : nwin]
    if n_tail > 1:
        tail = _scan(kernel, X[rows * q : L], False)
    if not last_done:
        _scan(kernel, body[R], True, last)
    o[0] = last[0]
    if n_tail > 1:
        kernel.combine(last[1:n_tail], tail, out=o[1:])
    if ends is not None:
        _fill_ends(ends[R * q :], first_end + R * q * step, step)
    return ends, out


def splits_rows(q: int, n_slices: int, kind: str = "thread") -> bool:
    """Whether a batch merge of ``n_slices`` slice partials in rows of ``q`` gives rows to a ``kind`` pool.

    From ``PARALLEL_BATCH_MIN`` slices and two full rows; for a thread pool, rows
    shorter than ``THREADED_ROW_MODE_MIN_Q`` also need 2-D calls on both threads.

    Examples
    --------
    >>> splits_rows(1024, 1 << 21), splits_rows(1024, 1 << 18), splits_rows(4096, 1 << 18)
    (True, False, True)
    """
    R = n_slices // q - 1 if q > 0 else 0
    return (R >= 2 and R * q >= PARALLEL_BATCH_MIN
            and (kind == "process" or q >= THREADED_ROW_MODE_MIN_Q or R >= 2 * MIN_ROWS_PER_CALL))


def _fill_ends(dst: np.ndarray, first: int, step: int) -> None:
    """``dst[i] = first + i*step``, as one broadcast ``np.add`` over blocks of ``_ENDS_BLOCK`` (which, unlike
    ``np.arange``, releases the GIL and runs at memory speed)."""
    n = len(dst)
    base = np.arange(0, min(n, _ENDS_BLOCK) * step, step, dtype=np.int64)
    m = n // _ENDS_BLOCK
    if m:
        starts = first + np.arange(m, dtype=np.int64)[:, None] * (_ENDS_BLOCK * step)
        np.add(base, starts, out=dst[: m * _ENDS_BLOCK].reshape(m, _ENDS_BLOCK))
    rest = n - m * _ENDS_BLOCK
    if rest:
        np.add(base[:rest], first + m * _ENDS_BLOCK * step, out=dst[m * _ENDS_BLOCK :])


_ENDS_BLOCK = 4096


class _RowEnds:
    """The window ends of full rows, filled row range by row range by the thread merging those rows."""

    def __init__(self, flat: np.ndarray, q: int, first: int, step: int):
        self.flat, self.q, self.first, self.step = flat, q, first, step

    def fill(self, c0: int, c1: int) -> None:
        q = self.q
        _fill_ends(self.flat[c0 * q : c1 * q], self.first + c0 * q * self.step, self.step)


def _merge_in_threads(kernel: Kernel, body: np.ndarray, outv: np.ndarray, half: int, R: int,
                      pool: WorkerPool, rend: _RowEnds | None, last: np.ndarray) -> None:
    """A thread worker merges rows ``[0, half)`` and builds ``last`` (the lcs of row ``R``), the main
    thread merges ``[half, R)``: threads share the arrays."""
    submit = pool.submit if pool.kind == "thread" else pool.submit_thread
    try:
        fut = submit(_worker_rows, kernel, body, outv, half, rend, last)
    except RuntimeError:
        fut = None
    if fut is None:
        _worker_rows(kernel, body, outv, R, rend, last)
        return
    _merge_rows(kernel, body, outv, half, R, rend, threaded=True)
    try:
        fut.result()
    except Exception as exc:  # a worker fault never loses a window: merge its rows here
        log.warning("batch merge task failed (%s: %s); merging its rows on the main thread", type(exc).__name__, exc)
        _worker_rows(kernel, body, outv, half, rend, last)


@quiet_non_finite
def _worker_rows(kernel: Kernel, body: np.ndarray, outv: np.ndarray, c1: int, rend: _RowEnds | None,
                 last: np.ndarray) -> None:
    _merge_rows(kernel, body, outv, 0, c1, rend, threaded=True)
    _scan(kernel, body[-1], True, last)


def _scan(kernel: Kernel, row: np.ndarray, reverse: bool, out: np.ndarray | None = None) -> np.ndarray:
    """One row's lcs (``reverse``) or csa, with the NaN-free loop when the row allows it (as ``_merge_rows``)."""
    return _acc(kernel, row, 0, reverse, out, kernel.nan_free_rows(row))


def _merge_in_process(kernel: Kernel, agg: Aggregation | None, body: np.ndarray, outv: np.ndarray, half: int,
                      R: int, pool: WorkerPool, rend: _RowEnds | None) -> bool:
    """A worker process merges rows ``[0, half)`` from shared memory; ``False`` if it cannot take them.

    The main thread fills every row's ends (the worker's while it waits).
    """
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
        _merge_rows(kernel, body, outv, half if fut is not None else 0, R, rend)
        if fut is None:
            return True
        if rend is not None:
            rend.fill(0, half)
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
# numpy 2.4 releases the GIL in a 2-D accumulate only past 500 rows (its threshold is on
# the iterations outside the scanned axis; measured: 256 x 1024 held it, 512 x 1024
# released it). From ROW_MODE_MIN_Q slices a row (measured: 2-D calls win up to 2^12,
# one 1-D call per row from 2^13), or when a thread has too few rows for such calls,
# rows go one 1-D call each (always released).
MIN_ROWS_PER_CALL = 512
MIN_ELEMENTS_PER_CALL = 1 << 20
ROW_MODE_MIN_Q = 8192
# Below this many slices a row, threads merging row by row lose to one thread (each row's
# few calls hand the GIL back and forth; measured: 1M values at 2^10 took 13 ms on two
# threads, 9.4 ms on one; break-even at 2^11): such batches split only into 2-D calls.
THREADED_ROW_MODE_MIN_Q = 2048


def _merge_rows(kernel: Kernel, body: np.ndarray, outv: np.ndarray, c0: int, c1: int,
                rend: _RowEnds | None = None, threaded: bool = False) -> None:
    """Windows starting in rows ``[c0, c1)`` of ``body`` into ``outv``: lcs of those rows, csa of the next ones.

    numpy releases the GIL in a 2-D ``accumulate`` only when it has many rows (~600
    or more per call, measured with numpy 2.4), while a 1-D one always releases it. So
    long rows (``q >= ROW_MODE_MIN_Q``) are merged one row at a time, and short rows in
    2-D calls of at least ``MIN_ROWS_PER_CALL`` rows (when another thread of this
    process merges too, ``threaded``, fewer rows go one at a time): either way a worker
    thread really runs beside the main thread. Same arithmetic per element in both modes.

    The lcs is built straight into the output rows and combined there with the
    csa (for kernels whose ``combine`` may write over its first operand): one
    scratch buffer, not two. Each row's scans take the kernel's NaN-free loop when
    that row holds no NaN (``Kernel.nan_free_rows``): a rule of the row alone, so
    any split of the rows between threads gives the same bits. ``rend`` also fills
    those rows' window ends.
    """
    if c1 <= c0:
        return
    if rend is not None:
        rend.fill(c0, c1)
    q = body.shape[1]
    inplace = kernel.combine_in_place
    if q >= ROW_MODE_MIN_Q or (threaded and c1 - c0 < MIN_ROWS_PER_CALL and q >= THREADED_ROW_MODE_MIN_Q):
        csa = _scratch(body.shape[1:], 0)
        lcs = None if inplace else _scratch(body.shape[1:], 1)
        _merge_each_row(kernel, body, outv, c0, c1, csa, lcs, _EACH_ROW)
        return
    step = max(MIN_ROWS_PER_CALL, MIN_ELEMENTS_PER_CALL // q)
    calls = max(1, (c1 - c0) // step)  # rows spread evenly: no small remainder call
    cuts = [c0 + (c1 - c0) * i // calls for i in range(calls + 1)]
    n = max(b - a for a, b in zip(cuts, cuts[1:]))
    csa = _scratch((n,) + body.shape[1:], 0)
    lcs = None if inplace else _scratch((n,) + body.shape[1:], 1)
    for b0, b1 in zip(cuts, cuts[1:]):
        k = b1 - b0
        clean = kernel.nan_free_rows(body[b0 : b1 + 1])
        if clean is not None and not (_uniform(clean[:-1]) and _uniform(clean[1:])):  # NaN in some rows only
            _merge_each_row(kernel, body, outv, b0, b1, csa[0], None if lcs is None else lcs[0], clean)
            continue
        o = outv[b0:b1]
        acc = _acc(kernel, body[b0:b1], 1, True, o if inplace else lcs[:k], None if clean is None else clean[0])
        _acc(kernel, body[b0 + 1 : b1 + 1], 1, False, csa[:k], None if clean is None else clean[-1])
        # one contiguous combine over the flattened block (2.5x faster than over the (k, q-1)
        # strided views); it also pairs each row's column 0 with the previous row's last csa,
        # so column 0 (the whole chunk, lcs alone) is put back afterwards
        col0 = acc[:, 0].copy()
        flat = (k * q,) + body.shape[2:]
        kernel.combine(acc.reshape(flat)[1:], csa[:k].reshape(flat)[:-1], out=o.reshape(flat)[1:])
        o[:, 0] = col0


# Each thread keeps its merge scratch (the csa rows, and the lcs rows of kernels that cannot
# combine in place) between calls, up to SCRATCH_KEEP float64s a buffer: fresh pages cost a
# fault each, and two threads faulting at once stalled a 4M-value merge to several times its
# time (measured: 20-100 ms instead of 19 ms at 2^10-2^11, varying with the heap's history).
SCRATCH_KEEP = 1 << 21
_scratch_bufs = threading.local()


def _scratch(shape: tuple, slot: int) -> np.ndarray:
    """An uninitialised float64 array of ``shape``: this thread's buffer ``slot``, reused across calls."""
    n = 1
    for d in shape:
        n *= d
    if n > SCRATCH_KEEP:
        return np.empty(shape)
    bufs = getattr(_scratch_bufs, "bufs", None)
    if bufs is None:
        bufs = _scratch_bufs.bufs = [None, None]
    buf = bufs[slot]
    if buf is None or len(buf) < n:
        buf = bufs[slot] = np.empty(n)
    return buf[:n].reshape(shape)


def _uniform(flags: np.ndarray) -> bool:
    return bool(flags.all() or not flags.any())


_EACH_ROW = object()  # _merge_each_row: check each row for NaN as it goes (1-D calls, which release the GIL)


def _merge_each_row(kernel: Kernel, body: np.ndarray, outv: np.ndarray, c0: int, c1: int, csa: np.ndarray,
                    lcs: np.ndarray | None, clean: Any) -> None:
    """Rows ``[c0, c1)`` one 1-D call each. ``clean[i]``: row ``c0 + i`` holds no NaN (rows ``c0 .. c1``),
    or ``_EACH_ROW``: ask the kernel row by row."""
    if clean is _EACH_ROW:
        def flag(c: int) -> Any:
            return kernel.nan_free_rows(body[c])
    else:
        def flag(c: int) -> Any:
            return clean[c - c0]
    nxt = flag(c0)
    for c in range(c0, c1):
        here, nxt = nxt, flag(c + 1)
        o = outv[c]
        acc = _acc(kernel, body[c], 0, True, o if lcs is None else lcs, here)
        _acc(kernel, body[c + 1], 0, False, csa, nxt)
        if lcs is not None:
            o[0] = acc[0]
        kernel.combine(acc[1:], csa[:-1], out=o[1:])


def _acc(kernel: Kernel, parts: np.ndarray, axis: int, reverse: bool, out: np.ndarray | None, clean: Any
         ) -> np.ndarray:
    """``kernel.accumulate``, on its NaN-free loop when ``clean`` (``None``: the kernel has none)."""
    if clean is None:
        return kernel.accumulate(parts, axis=axis, reverse=reverse, out=out)
    return kernel.accumulate(parts, axis=axis, reverse=reverse, out=out, nan_free=bool(clean))
