"""Per-thread scratch buffers for the compiled merges: allocated once per thread, reused by every call.

A merge's lcs and csa scratch is ``q`` partials per chain (8 MB each at ``q = 2^20``). Allocated at every call,
it came as fresh pages whenever glibc served it from a new mapping (always for the first call, and often in a
pool thread, whose arena gives freed memory back): the kernel zeroes them page by page, which cost as much as
the merge itself at ``2^20``. Each thread keeps its buffers, by slot name, for its next call; a thread keeps at
most ``KEEP_BYTES`` this way (larger requests are allocated and dropped), freed when the thread ends.

Examples
--------
>>> a = scratch("doc", (4, 3))
>>> a.shape, scratch("doc", (2, 3)).base is a.base
((4, 3), True)
"""

from __future__ import annotations

import math
import threading

import numpy as np

__all__ = ["scratch", "KEEP_BYTES"]

#: the most scratch memory one thread keeps between calls (bytes)
KEEP_BYTES = 64 << 20

_local = threading.local()


def scratch(slot: str, shape: int | tuple, dtype=np.float64) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype``, the calling thread's buffer for ``slot``.

    The buffer is reused by the thread's next request for ``slot`` (its contents are then
    overwritten): a caller uses it only until its merge returns, and two arrays needed at
    once take two slots.
    """
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    size = int(math.prod(shape))  # not np.prod: its overhead would be paid by every merge
    nbytes = size * dtype.itemsize
    kept = getattr(_local, "buffers", None)
    if kept is None:
        kept = _local.buffers = {}
    buf = kept.get(slot)
    if buf is None or buf.nbytes < nbytes:
        if buf is not None:
            del kept[slot]
        held = sum(b.nbytes for b in kept.values())
        buf = np.empty(max(nbytes, 8), dtype=np.uint8)
        if held + buf.nbytes <= KEEP_BYTES:
            kept[slot] = buf
    return buf[:nbytes].view(dtype).reshape(shape)
