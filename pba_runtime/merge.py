"""Merge arithmetic: the lcs, the csa and the batch window-merge kernels, written once.

Everything here is one thread's arithmetic over slice partials; which thread or
process runs it is decided above (:mod:`pba_runtime.batch` splits a batch across
a pool, :mod:`pba_runtime.tasks` runs it in worker processes, PBA's per-tuple path
builds one chunk's lcs). Every caller gets the same arithmetic, so a worker, a
thread or the main thread (a fallback) give the same bits.

Depends only on :mod:`pba_runtime.aggregations` (numpy kernels and Python
``combine``): this is where compiled kernels will sit beside the numpy ones.

The lcs of ``n`` partials is ``lcs[j] = saa[j] (+) ... (+) saa[n-1]`` (a reverse
``accumulate``, or a Python loop of ``combine`` from the right), the csa its
mirror image from the left. A batch window starting at column ``j > 0`` of row
``c`` (rows of ``q`` slices) is ``lcs[c, j] (+) csa[c+1, j-1]``, and one starting
at column 0 the whole chunk ``lcs[c, 0]`` (:func:`merge_rows`).

Examples
--------
>>> from array import array
>>> from pba_runtime import get_aggregation
>>> build_lcs(get_aggregation("max"), array("d", [3.0, 1.0, 2.0])).tolist()
[3.0, 2.0, 2.0]
>>> suffix_combine(max, [3.0, 1.0, 2.0])
[3.0, 2.0, 2.0]
"""

from __future__ import annotations

import itertools
import threading
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from .aggregations import Aggregation, Kernel

__all__ = ["build_lcs", "lcs_into", "suffix_combine", "merge_rows", "scan", "fill_ends", "RowEnds", "MIN_ROWS_PER_CALL",
           "MIN_ELEMENTS_PER_CALL", "ROW_MODE_MIN_Q", "THREADED_ROW_MODE_MIN_Q"]


# ----------------------------------------------------------------------------- one chunk's lcs
def suffix_combine(combine: Callable[[Any, Any], Any], parts: list) -> list:
    """``parts[j] = parts[j] (+) ... (+) parts[-1]`` in place, by a Python loop of ``combine`` from the right."""
    acc = parts[-1]
    for j in range(len(parts) - 2, -1, -1):
        acc = combine(parts[j], acc)
        parts[j] = acc
    return parts


def build_lcs(agg: Aggregation, saa: Any) -> Any:
    """The lcs of one chunk: ``lcs[j] = saa[j] (+) ... (+) saa[b-1]``.

    Kernel aggregations keep a chunk's partials in a flat ``array('d')`` (one
    row of ``k`` floats per slice): numpy reads and writes it in place, so the
    worker holds the GIL only to set up the call. Others keep a list of
    Python partials and build the lcs in a Python loop.
    """
    kernel = agg.kernel
    if kernel is None:
        return suffix_combine(agg.combine, list(saa))
    out = array("d", bytes(8 * len(saa)))
    shape = (-1,) + kernel.shape
    kernel.accumulate(np.frombuffer(saa, dtype=np.float64).reshape(shape), axis=0, reverse=True,
                      out=np.frombuffer(out, dtype=np.float64).reshape(shape))
    return out


def lcs_into(agg: Aggregation, saa: Any, lcs: Any, n: int, width: int) -> None:
    """Write the lcs of ``n`` partials (flat float buffer ``saa``) into ``lcs``: ``saa[j] (+) ... (+) saa[n-1]``.

    :func:`build_lcs` for fixed-size partials stored as floats in place (a
    shared-memory slot): ``width`` floats per partial, 0 for a scalar.

    >>> from array import array
    >>> from pba_runtime import get_aggregation
    >>> saa, lcs = array("d", [3.0, 1.0, 2.0]), array("d", bytes(24))
    >>> lcs_into(get_aggregation("max"), saa, lcs, 3, 0); lcs.tolist()
    [3.0, 2.0, 2.0]
    """
    if n <= 0:
        return
    kernel = agg.kernel
    k = max(width, 1)
    if kernel is not None:
        shape = (n,) + kernel.shape
        src = np.frombuffer(saa, dtype=np.float64, count=n * k).reshape(shape)
        dst = np.frombuffer(lcs, dtype=np.float64, count=n * k).reshape(shape)
        kernel.accumulate(src, axis=0, reverse=True, out=dst)
        return
    flat = memoryview(saa).cast("B").cast("d")[: n * k].tolist()
    if width:
        out = [tuple(flat[i : i + width]) for i in range(0, n * width, width)]
    else:
        out = flat
    suffix_combine(agg.combine, out)
    if width:
        out = list(itertools.chain.from_iterable(out))
    memoryview(lcs).cast("B").cast("d")[: n * k] = array("d", out)


# ----------------------------------------------------------------------------- batch window merge
def fill_ends(dst: np.ndarray, first: int, step: int) -> None:
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


class RowEnds:
    """The window ends of full rows, filled row range by row range by the thread merging those rows."""

    def __init__(self, flat: np.ndarray, q: int, first: int, step: int):
        self.flat, self.q, self.first, self.step = flat, q, first, step

    def fill(self, c0: int, c1: int) -> None:
        q = self.q
        fill_ends(self.flat[c0 * q : c1 * q], self.first + c0 * q * self.step, self.step)



def scan(kernel: Kernel, row: np.ndarray, reverse: bool, out: np.ndarray | None = None) -> np.ndarray:
    """One row's lcs (``reverse``) or csa, with the NaN-free loop when the row allows it (as ``merge_rows``)."""
    return _acc(kernel, row, 0, reverse, out, kernel.nan_free_rows(row))



# Short rows are merged in 2-D accumulate calls of at least this many rows and elements:
# numpy releases the GIL in a 2-D accumulate only past a few hundred rows (its threshold is
# on the iterations outside the scanned axis). From ROW_MODE_MIN_Q slices a row (where one
# 1-D call per row beats the 2-D calls: bench/bench_kernels.py), or when a thread has too
# few rows for such calls, rows go one 1-D call each (always released).
MIN_ROWS_PER_CALL = 512
MIN_ELEMENTS_PER_CALL = 1 << 20
ROW_MODE_MIN_Q = 8192
# Below this many slices a row, threads merging row by row lose to one thread (each row's
# few calls hand the GIL back and forth): such batches split only into 2-D calls.
THREADED_ROW_MODE_MIN_Q = 2048


def merge_rows(kernel: Kernel, body: np.ndarray, outv: np.ndarray, c0: int, c1: int,
                rend: RowEnds | None = None, threaded: bool = False) -> None:
    """Windows starting in rows ``[c0, c1)`` of ``body`` into ``outv``: lcs of those rows, csa of the next ones.

    numpy releases the GIL in a 2-D ``accumulate`` only when it has many rows (a few
    hundred per call), while a 1-D one always releases it. So
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
        # one contiguous combine over the flattened block (faster than over the (k, q-1)
        # strided views); it also pairs each row's column 0 with the previous row's last csa,
        # so column 0 (the whole chunk, lcs alone) is put back afterwards
        col0 = acc[:, 0].copy()
        flat = (k * q,) + body.shape[2:]
        kernel.combine(acc.reshape(flat)[1:], csa[:k].reshape(flat)[:-1], out=o.reshape(flat)[1:])
        o[:, 0] = col0


# Each thread keeps its merge scratch (the csa rows, and the lcs rows of kernels that cannot
# combine in place) between calls, up to SCRATCH_KEEP float64s a buffer: fresh pages cost a
# fault each, and two threads faulting at once stalled a merge to several times its time.
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

