"""Vectorised PBA over a batch of slice partials: the merge behind ``insert_many``, split across a pool.

The window starting at slice ``a`` covers slices ``a .. a+q-1``. Cut the slices
into rows (chunks) of ``q``; then a window starting at column ``j > 0`` of row
``c`` is ``lcs[c, j] (+) csa[c+1, j-1]``, and one starting at column 0 is the
whole chunk ``lcs[c, 0]``: one combine per window, all of them vectorised
(``ufunc.accumulate`` along rows, one elementwise combine). The arithmetic is
:mod:`pba_runtime.merge`'s; this module decides which rows a pool's worker
takes, hands them over (shared arrays for threads, a shared-memory scratch
block for processes) and repairs a failed task (:func:`pba_runtime.pool.result_or_repair`).

Examples
--------
>>> import numpy as np
>>> from pba_runtime import get_aggregation
>>> window_merge(get_aggregation("max").kernel, np.array([3., 1, 4, 1, 5, 9, 2, 6]), q=3, nwin=6).tolist()
[4.0, 4.0, 5.0, 9.0, 9.0, 9.0]
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from . import logs, merge
from .aggregations import Aggregation, Kernel, quiet_non_finite
from .kernels import Engine, block_start_cost, merge_range, values_range
from .kernels.result_memory import result_block
from .merge import RowEnds, fill_ends, merge_rows, scan
from .pool import WorkerPool, result_or_repair
from .shm import aligned
from .tasks import aggregation_ref, run_merge_task

__all__ = ["window_merge", "windows_with_ends", "windows_from_values", "splits_rows", "PARALLEL_BATCH_MIN",
           "COMPILED_SPLIT_MIN", "COMPILED_BLOCKS", "compiled_blocks"]

# Below this many slice partials, a batch builds its lcs on the main thread:
# a pool hand-off costs more than it saves.
PARALLEL_BATCH_MIN = 1 << 16
# The compiled merge cuts a batch of this many windows and up into blocks of whole rows that the
# main thread and a pool's threads claim (below it a hand-off costs more than the merge it moves),
# about COMPILED_BLOCKS of them: small enough that a thread whose core is busy holds the others up
# by little, large enough that each call's fixed cost is noise (bench/bench_kernels.py).
COMPILED_SPLIT_MIN = 1 << 15
COMPILED_BLOCKS = 12


def window_merge(kernel: Kernel, X: np.ndarray, q: int, nwin: int, pool: WorkerPool | None = None, *,
                 agg: Aggregation | None = None, engine: Engine | None = None) -> np.ndarray:
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
                      pool: WorkerPool | None = None, *, agg: Aggregation | None = None,
                      engine: Engine | None = None, lowered: bool = False) -> tuple[np.ndarray, np.ndarray]:
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

    With ``lowered``, the results are lowered (``kernel.lower``); an engine that lowers in its
    merge (``Engine.lowers_in_merge``) then writes no partials at all.
    """
    if lowered and engine is not None and engine.lowers_in_merge and nwin > 0 and q > 1:
        run = lambda *args: merge_range(*args, True)  # noqa: E731
        return _merge_compiled(engine, X, q, nwin, pool, (first_end, step), run, ())
    ends, out = _merge(kernel, X, q, nwin, pool, agg, (first_end, step), engine)
    return ends, (kernel.lower(out) if lowered else out)


def _merge(kernel: Kernel, X: np.ndarray, q: int, nwin: int, pool: WorkerPool | None, agg: Aggregation | None,
           ends_spec: tuple[int, int] | None, engine: Engine | None = None) -> tuple[np.ndarray | None, np.ndarray]:
    if engine is not None and engine.compiled and nwin > 0 and q > 1:
        return _merge_compiled(engine, X, q, nwin, pool, ends_spec)
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
            fill_ends(ends, first_end, step)
        return ends, out
    L = nwin + q - 1
    rows = L // q
    body = X[: rows * q].reshape((rows, q) + shape)
    R = rows - 1  # rows whose q windows all end inside a full row
    n_tail = nwin - R * q  # windows starting in the last full row (== len(tail) + 1)
    rend = None if ends is None else RowEnds(ends[: R * q], q, first_end, step)
    last = np.empty(body.shape[1:])  # lcs of the last full row: its windows end in the partial row after it
    last_done = False
    if R > 0:
        outv = out[: R * q].reshape((R, q) + shape)
        if pool is not None and not pool.closed and splits_rows(q, L, pool.kind):
            # in rows of work (2 accumulates + combine + ends): the worker also builds `last`
            # (~0.45 row), the main thread the tail's csa and windows (~0.55 row per row of tail)
            h = min(R - 1, max(1, round((R + 0.55 * n_tail / q - 0.45) / 2)))
            if pool.kind == "thread" and h < merge.MIN_ROWS_PER_CALL < R and q < merge.ROW_MODE_MIN_Q:
                # the worker's rows in 2-D calls (GIL released throughout), not row by row beside the
                # main thread's: row-by-row threads trade the GIL at every call
                h = merge.MIN_ROWS_PER_CALL
            # a worker process also costs the main thread a copy of its rows: give it 3/5 of them
            if not (pool.kind == "process" and _merge_in_process(kernel, agg, body, outv, (3 * R) // 5, R, pool,
                                                                 rend)):
                _merge_in_threads(kernel, body, outv, h, R, pool, rend, last)
                last_done = True
        else:
            merge_rows(kernel, body, outv, 0, R, rend)
    o = out[R * q : nwin]
    if n_tail > 1:
        tail = scan(kernel, X[rows * q : L], False)
    if not last_done:
        scan(kernel, body[R], True, last)
    o[0] = last[0]
    if n_tail > 1:
        kernel.combine(last[1:n_tail], tail, out=o[1:])
    if ends is not None:
        fill_ends(ends[R * q :], first_end + R * q * step, step)
    return ends, out


def windows_from_values(engine: Engine, V: np.ndarray, q: int, nwin: int, first_end: int, step: int,
                        pool: WorkerPool | None = None, pos0: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ends and *lowered* results of ``nwin`` windows of ``q`` values each, read straight from the values
    (``engine.from_values``: count windows with slide 1; ``pos0``: the stream position of ``V[0]``),
    split across a pool thread as :func:`windows_with_ends`."""
    if q == 1 or nwin <= 0:
        raise ValueError("windows_from_values needs q > 1 and windows")  # the caller's guard
    positional = engine.from_values == "argmax_from_values"
    run = (lambda *a: values_range(*a, pos0)) if positional else values_range
    count = engine.from_values == "count_from_values"
    if count:
        # a fill is memory-bound on one thread: a pool thread preempted while it holds a block made the
        # batch wait for it, slower split than on one thread (bench/bench_kernels.py, count)
        pool = None
    return _merge_compiled(engine, V, q, nwin, pool, (first_end, step), run, (),
                           np.int64 if positional or count else np.float64)


def _merge_compiled(engine: Engine, X: np.ndarray, q: int, nwin: int, pool: WorkerPool | None,
                    ends_spec: tuple[int, int] | None, run=merge_range, out_shape: tuple | None = None,
                    out_dtype: type = np.float64) -> tuple[np.ndarray | None, np.ndarray]:
    """The compiled merge, its windows cut into blocks of whole rows (:func:`compiled_blocks`) that the
    main thread and the pool's threads claim one at a time until none is left.

    Nobody waits for a busy core: a pool thread that starts late (its core taken by another
    process) claims fewer blocks, or none, and the main thread merges the rest. Every block
    starts at a row, so its windows get the same arithmetic whoever claims it (one thread's bits).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    first_end, step = ends_spec if ends_spec is not None else (0, 0)
    out, ends = _results(nwin, X.shape[1:] if out_shape is None else out_shape, out_dtype, ends_spec is not None)
    blocks = compiled_blocks(q, nwin, block_start_cost(engine, q, run is not merge_range))
    if pool is None or pool.closed or len(blocks) < 2:
        run(engine, X, q, 0, nwin, out, ends, first_end, step)
        return (ends if ends_spec is not None else None), out
    # each thread faults in the fresh output pages of the blocks it claims, as it writes them: the
    # kernel zeroes a page at its first write (as much time as a sum merge), and two threads zero
    # theirs at once (per-VMA fault locks since Linux 6.4; a 2 MB page at a time, numpy asks for huge
    # pages): faster than faulting them all in on the main thread first (bench/bench_kernels.py).
    claim = itertools.count()  # next() is atomic: each block goes to one thread

    def claimer(taken: list[int]) -> None:
        while (b := next(claim)) < len(blocks):
            taken.append(b)  # before the merge: a repair redoes every block it claimed
            run(engine, X, q, *blocks[b], out, ends, first_end, step)

    submit = pool.submit if pool.kind == "thread" else pool.submit_thread
    tasks = []
    for _ in range(min(max(1, getattr(pool, "workers", 1)), len(blocks) - 1)):
        taken: list[int] = []
        try:
            tasks.append((submit(claimer, taken), taken))
        except RuntimeError:
            break
    claimer([])
    for fut, taken in tasks:
        if fut.cancel():  # never started: nothing claimed
            continue
        # untimed: the task writes into `out`, so it is never bypassed while it may still run
        result_or_repair(pool, fut, lambda taken=taken: [run(engine, X, q, *blocks[b], out, ends, first_end, step)
                                                         for b in taken],
                         timed=False, task="compiled merge task", repair="merging its windows on the main thread")
    return (ends if ends_spec is not None else None), out


def _results(nwin: int, shape: tuple, dtype: type, with_ends: bool) -> tuple[np.ndarray, np.ndarray]:
    """The results array ``(nwin,) + shape`` of ``dtype`` and the int64 ends (empty unless ``with_ends``),
    as two views of one allocation.

    glibc serves a freed block again without new pages only while a single allocation is
    alive at that size: two arrays of 16 MB each (2M windows) came fresh from the kernel at
    every batch, zeroed page by page (as much time as the sum merge itself), where one block of
    32 MB is served again. Larger blocks come from the ones earlier callers dropped
    (:func:`.kernels.result_memory.result_block`).
    """
    n_ends = nwin if with_ends else 0
    if np.dtype(dtype).itemsize != 8:  # not a float64/int64 result: two arrays
        return np.empty((nwin,) + tuple(shape), dtype=dtype), np.empty(n_ends, dtype=np.int64)
    n_out = nwin * int(math.prod(shape))  # not np.prod: its call costs more than this one
    buf = result_block(8 * (n_out + n_ends)).view(np.float64)
    out = buf[:n_out].view(dtype).reshape((nwin,) + tuple(shape))
    return out, buf[n_out:].view(np.int64)


def compiled_blocks(q: int, nwin: int, start_cost: bool = False) -> list[tuple[int, int]]:
    """The blocks ``[a0, a1)`` of windows a compiled merge of ``nwin`` windows in rows of ``q`` hands out:
    whole rows (two at least), ``COMPILED_SPLIT_MIN // 2`` windows and up, about ``COMPILED_BLOCKS`` of
    them (one block below ``COMPILED_SPLIT_MIN`` windows: a hand-off costs more than it saves).

    ``start_cost``: the merge builds a block's first row's lcs apart, a chain over ``q`` values that
    one thread builds beside the previous row's windows (the one-loop ``sum`` and ``mean``,
    ``kernels.block_start_cost``): about half a row's work per block, so such a merge gets one
    block per 11 rows at most (a few per cent more work than one thread), two at least.

    Examples
    --------
    >>> compiled_blocks(1000, 5000)
    [(0, 5000)]
    >>> b = compiled_blocks(1 << 10, 1 << 21)
    >>> len(b), b[0], b[-1][1]
    (12, (0, 175104), 2097152)
    >>> len(compiled_blocks(1 << 20, 9_000_000)), len(compiled_blocks(1 << 20, 9_000_000, start_cost=True))
    (5, 2)
    """
    if nwin < COMPILED_SPLIT_MIN or q < 1:
        return [(0, nwin)]
    rows = -(-nwin // q)
    # rows per block, two at least (one-row blocks of a large q cost more CPU than two-row ones)
    per = max(2, -(-max(nwin // COMPILED_BLOCKS, COMPILED_SPLIT_MIN // 2) // q))
    if start_cost:
        per = max(per, -(-rows // max(2, 1 + rows // 11)))
    return [(r * q, min(nwin, (r + per) * q)) for r in range(0, rows, per)]


def splits_rows(q: int, n_slices: int, kind: str = "thread") -> bool:
    """Whether a batch merge of ``n_slices`` slice partials in rows of ``q`` gives rows to a ``kind`` pool.

    From ``PARALLEL_BATCH_MIN`` slices and two full rows; for a thread pool, rows
    shorter than ``merge.THREADED_ROW_MODE_MIN_Q`` also need 2-D calls on both threads.

    Examples
    --------
    >>> splits_rows(1024, 1 << 21), splits_rows(1024, 1 << 18), splits_rows(4096, 1 << 18)
    (True, False, True)
    """
    R = n_slices // q - 1 if q > 0 else 0
    return (R >= 2 and R * q >= PARALLEL_BATCH_MIN
            and (kind == "process" or q >= merge.THREADED_ROW_MODE_MIN_Q or R >= 2 * merge.MIN_ROWS_PER_CALL))


def _merge_in_threads(kernel: Kernel, body: np.ndarray, outv: np.ndarray, half: int, R: int,
                      pool: WorkerPool, rend: RowEnds | None, last: np.ndarray) -> None:
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
    merge_rows(kernel, body, outv, half, R, rend, threaded=True)
    # untimed: a thread task shares these arrays, so it is never bypassed while it may still write them
    result_or_repair(pool, fut, lambda: _worker_rows(kernel, body, outv, half, rend, last), timed=False,
                     task="batch merge task", repair="merging its rows on the main thread")


@quiet_non_finite
def _worker_rows(kernel: Kernel, body: np.ndarray, outv: np.ndarray, c1: int, rend: RowEnds | None,
                 last: np.ndarray) -> None:
    merge_rows(kernel, body, outv, 0, c1, rend, threaded=True)
    scan(kernel, body[-1], True, last)


def _merge_in_process(kernel: Kernel, agg: Aggregation | None, body: np.ndarray, outv: np.ndarray, half: int,
                      R: int, pool: WorkerPool, rend: RowEnds | None) -> bool:
    """A worker process merges rows ``[0, half)`` from shared memory; ``False`` if it cannot take them.

    The main thread fills every row's ends (the worker's while it waits).
    """
    ref = aggregation_ref(agg) if agg is not None and agg.kernel is kernel else None
    if ref is None:
        return False
    in_shape = (half + 1,) + body.shape[1:]
    out_shape = (half,) + outv.shape[1:]
    in_bytes = aligned(8 * int(np.prod(in_shape)))
    memory = pool.memory
    try:
        blk = memory.lease_scratch(in_bytes + 8 * int(np.prod(out_shape)))
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
        merge_rows(kernel, body, outv, half if fut is not None else 0, R, rend)
        if fut is None:
            return True
        if rend is not None:
            rend.fill(0, half)
        _, repaired = result_or_repair(pool, fut, lambda: merge_rows(kernel, body, outv, 0, half),
                                       task="batch merge task", repair="merging its rows on the main thread")
        if not repaired:
            outv[:half] = blk.ndarray(in_bytes, out_shape)
        return True
    finally:
        memory.return_scratch(blk)


