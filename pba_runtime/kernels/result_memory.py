"""Memory for large batch results, recycled once the caller drops them: written without fresh pages.

A batch's results and ends are new arrays at every call. Below 32 MB glibc hands a freed block
back at the next request of that size, its pages already mapped; above it every array is a fresh
mapping, which the kernel zeroes page by page at the first write: for a ``sum`` over 10M values
(160 MB of results and ends) that costs about as much CPU time as the merge itself
(``bench/bench_kernel_cpu.py``). :func:`result_block` serves requests of ``MIN_BYTES`` and more from
blocks the callers have dropped: each block it hands out is owned by a small buffer object whose end (the last
array over it gone) puts the block back here, up to ``KEEP_BYTES`` kept in all (the oldest
dropped first). A caller that keeps its results keeps its block; nothing changes for it.

Examples
--------
>>> a = result_block(MIN_BYTES)
>>> a.dtype, a.nbytes == MIN_BYTES
(dtype('uint8'), True)
>>> del a  # its block is kept for the next request of about that size
>>> cached_bytes() >= MIN_BYTES
True
>>> release_cached(); cached_bytes()
0
"""

from __future__ import annotations

import os
import threading
import weakref

import numpy as np

__all__ = ["result_block", "cached_bytes", "release_cached", "MIN_BYTES", "KEEP_BYTES"]

#: requests from this size up come from dropped blocks (glibc recycles smaller ones itself)
MIN_BYTES = 32 << 20
#: the most memory kept in dropped blocks (bytes)
KEEP_BYTES = 512 << 20
#: a dropped block serves a request of at least this share of its size (no 1 GB block for 40 MB)
FIT = 0.5

_lock = threading.Lock()
_free: list[np.ndarray] = []  # dropped blocks, oldest first


def result_block(nbytes: int) -> np.ndarray:
    """An uninitialised writable ``uint8`` array of ``nbytes`` (a dropped block when one fits).

    Views of it (``.view(np.float64)``, slices, reshapes) keep its block in use; when the last
    of them is gone the block is kept for a later request.
    """
    nbytes = int(nbytes)
    if nbytes < MIN_BYTES:
        return np.empty(nbytes, dtype=np.uint8)
    block = None
    with _lock:
        best = -1
        for i, b in enumerate(_free):
            if nbytes <= b.nbytes and nbytes >= FIT * b.nbytes and (best < 0 or b.nbytes < _free[best].nbytes):
                best = i
        if best >= 0:
            block = _free.pop(best)
    if block is None:
        block = np.empty(nbytes, dtype=np.uint8)
    arr = np.frombuffer(memoryview(block), dtype=np.uint8, count=nbytes)
    # arr's base is a buffer object numpy made for it: views of arr keep it alive, so it ends with the last
    fin = weakref.finalize(arr.base, _give_back, block)
    fin.atexit = False
    return arr


def _give_back(block: np.ndarray) -> None:
    with _lock:
        _free.append(block)
        total = sum(b.nbytes for b in _free)
        while total > KEEP_BYTES and _free:
            total -= _free.pop(0).nbytes


def cached_bytes() -> int:
    """Bytes held in dropped blocks."""
    with _lock:
        return sum(b.nbytes for b in _free)


def release_cached() -> None:
    """Give every dropped block back to the system."""
    with _lock:
        _free.clear()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a fork while another thread held it leaves it held in the child
    _free.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
