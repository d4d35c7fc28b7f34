"""Keys split between the main thread and the pool's worker: the keyed engines' one parallel step.

A keyed engine's compiled kernel walks keys ``[k0, k1)`` of rows laid out key after key (key ``k``'s rows
are ``bounds[k] : bounds[k + 1]``) and writes each key's results at offsets fixed before it starts, so two
calls on disjoint key ranges write disjoint memory. :func:`run_split` cuts the keys into contiguous ranges
of about equal rows, runs the first on the calling thread and the others on the pool's thread workers (PBA's
habit: the worker runs beside the main loop), and returns when all are done. The kernels release the GIL
(``nogil``), so the ranges really run at once.

Examples
--------
>>> import numpy as np
>>> split_keys(np.array([0, 10, 11, 12, 30]), 2)
[(0, 3), (3, 4)]
>>> seen = []
>>> run_split(lambda k0, k1: seen.append((k0, k1)), np.array([0, 5, 10]), parts=1)
>>> seen
[(0, 2)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["SPLIT_MIN_ROWS", "run_split", "split_keys"]

#: Below this many rows a second thread costs more than it saves: the keys run on the calling thread.
SPLIT_MIN_ROWS = 1 << 16


def split_keys(bounds: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous key ranges ``(k0, k1)``, at most ``parts`` of them, of about equal rows each (a key is
    never cut); empty ranges are left out."""
    bounds = np.asarray(bounds, dtype=np.int64)
    nkeys = len(bounds) - 1
    if nkeys <= 0:
        return []
    parts = max(1, min(int(parts), nkeys))
    total = int(bounds[-1] - bounds[0])
    targets = bounds[0] + (np.arange(1, parts, dtype=np.int64) * total) // parts
    hi = np.clip(np.searchsorted(bounds, targets, side="left"), 1, nkeys)
    lo = hi - 1
    cuts = np.where(bounds[hi] - targets < targets - bounds[lo], hi, lo)  # the key boundary nearest each target
    edges = sorted({0, nkeys, *(int(c) for c in cuts)})
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def run_split(fn: Callable[[int, int], Any], bounds: np.ndarray, *, pool: Any = None, parts: int | None = None,
              min_rows: int = SPLIT_MIN_ROWS) -> None:
    """Call ``fn(k0, k1)`` over contiguous key ranges covering every key, the first range on this thread and
    the others on ``pool``'s thread workers (default: the shared pool, :func:`pba_runtime.pool.default_pool`).

    ``parts`` defaults to the pool's workers plus this thread; input of fewer than ``min_rows`` rows runs in
    one call here. An exception of any range is raised after every range has finished.
    """
    bounds = np.asarray(bounds, dtype=np.int64)
    nkeys = len(bounds) - 1
    if nkeys <= 0:
        return
    rows = int(bounds[-1] - bounds[0])
    if parts is None:
        if rows < min_rows:
            parts = 1
        else:
            if pool is None:
                from ..pool import default_pool

                pool = default_pool()
            parts = 1 + int(getattr(pool, "workers", 1))
    ranges = split_keys(bounds, parts)
    if len(ranges) <= 1:
        fn(0, nkeys)
        return
    if pool is None:
        from ..pool import default_pool

        pool = default_pool()
    futures = [pool.submit_thread(fn, k0, k1) for k0, k1 in ranges[1:]]
    error: BaseException | None = None
    try:
        fn(*ranges[0])
    except BaseException as exc:  # wait for the workers before raising: they write into the caller's arrays
        error = exc
    for f in futures:
        try:
            f.result()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
