"""Keep freed memory in a task slot's heap: its batch arrays are then not fresh pages at every batch.

A slot allocates a few arrays of 100 KB to 1 MB per batch (the batch unpickled, its values sorted
by key, the keys' histories and batch laid end to end, the results and their ends) and frees them
by the next batch. glibc serves allocations from 128 KB up (a threshold it raises, up to 32 MB,
as it sees such blocks freed) with ``mmap`` and gives the memory back when they are freed, and it
trims the top of its heaps beyond twice that threshold: either way the next batch's arrays are
fresh pages, which the kernel zeroes one 4 KB page at a time at their first write, inside the
compiled merge and the copies, a large share of a slot's aggregation time in the default job.

:func:`keep_freed_memory` sets both thresholds for the calling process: each slot process, and
``pba-run``'s own process (its source's batches; a :class:`~pba_runtime.runtime.Job` run from a
user's process leaves that process's allocator alone): blocks below 32 MB come
from the heap, and up to 256 MB of freed memory at its top stays mapped. A slot's memory then stays
at its high-water mark (a few batches' arrays), not more. glibc only: elsewhere it does nothing.

Examples
--------
>>> keep_freed_memory() in (True, False)
True
"""

from __future__ import annotations

import ctypes
import logging

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

log = logging.getLogger("pba_runtime")

#: glibc's ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks below this come from the heap (glibc's largest mmap threshold on 64-bit: 32 MB)
MMAP_THRESHOLD = 32 << 20
#: free memory at the top of a heap beyond this is given back
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for this process (see the module doc); ``False`` when the C
    library is not glibc or refuses them (nothing changed then)."""
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols, the C library's among them: no ldconfig subprocess
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not ok:
        log.debug("mallopt refused the slot's thresholds; batches keep glibc's defaults")
    return ok
