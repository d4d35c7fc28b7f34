"""The merger's slice history as arrays, and back: what every batch engine reads and leaves, and snapshots.

A batch reads the slices ``[front, back)`` its windows still need as one array (:func:`held_slices`), and
leaves the ones the next windows need as one array again (:func:`finish_batch`, :func:`defer_history`);
only a per-tuple call cuts them into PBA's chunks (:func:`build_deferred`, :func:`load_history`), so a
run of batches never builds chunk records. Each function takes the operator (``op``: a
:class:`~pba_runtime.algorithms.pba.PBA`, whose merger state it reads and writes) and is bound as one of
its methods where the operator calls it (``PBA._build_deferred``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["held_slices", "defer_history", "build_deferred", "load_history", "start_open_chunk", "pop_to",
           "finish_batch", "snapshot", "restore"]


def held_slices(op) -> np.ndarray:
    """Slice partials ``[f, g)`` held by the merger, as a kernel array (read only)."""
    if op._deferred is not None:
        return op._deferred[0]
    kernel = op._kernel
    f, g, b = op._popped, op._pushed, op._b
    parts = []
    for c in range(f // b, (g - 1) // b + 1) if g > f else ():
        lo = f - c * b if c == f // b else 0
        hi = min(b, g - c * b)
        parts.append(op._store.as_array(op._chunks[c], lo, hi))
    if not parts:
        return np.empty((0,) + kernel.shape)
    return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()


def defer_history(op, X: np.ndarray, f: int, g: int) -> None:
    """Hold slice partials ``X`` = slices ``[f, g)`` (relative indices) as one owned array.

    A batch that follows reads them as they are (:func:`held_slices`); only a
    per-tuple call cuts them into chunks (:func:`build_deferred`), so a run of
    batches never pays for chunk records, their ``ca`` or copies to ``array('d')``.
    """
    op._reset_merger(f, g)
    keep = X[: max(g - f, 0)]
    op._deferred = (keep if op._input_borrowed else keep.copy(), f, g)  # X may be the caller's array


def build_deferred(op) -> None:
    """Cut the history a batch left as one array into chunks (a per-tuple call needs them)."""
    X, f, g = op._deferred
    op._deferred = None
    load_history(op, X, f, g)


def load_history(op, X: np.ndarray, f: int, g: int) -> None:
    """Rebuild chunks from slice partials ``X`` = slices ``[f, g)`` (relative indices)."""
    kernel = op._kernel
    b = op._b
    op._reset_merger(f, g)
    if g <= f:
        # nothing held: the next push opens chunk g // b at its slice g % b
        if g % b:
            start_open_chunk(op, np.empty((0,) + kernel.shape), g)
        return
    for c in range(f // b, (g - 1) // b + 1):
        lo = max(f, c * b)
        hi = min(g, (c + 1) * b)
        rows = X[lo - f : hi - f]
        if lo > c * b:  # evicted slices of the first chunk: identity, never read
            rows = np.concatenate([kernel.identity_array(lo - c * b), rows])
        if hi == (c + 1) * b:  # complete chunk
            ca = kernel.to_partials(kernel.accumulate(rows, axis=0)[-1:])[0]
            # lcs left to build on demand: a batch never reads it, and the next
            # per-tuple window needing it builds it once (_lcs)
            op._chunks[c] = op._store.from_rows(rows, ca)
        else:
            start_open_chunk(op, rows, g, c)


def start_open_chunk(op, rows: np.ndarray, g: int, c: int | None = None) -> None:
    """Open chunk ``c`` (default ``g // b``) on ``rows``, its slices before ``g`` (identity if not given)."""
    kernel = op._kernel
    b = op._b
    if c is None:
        c = g // b
        rows = kernel.identity_array(g - c * b)
    rec = op._store.from_rows(rows, None)
    op._chunks[c] = rec
    op._open = rec
    op._csa = kernel.to_partials(kernel.accumulate(rows, axis=0)[-1:])[0] if len(rows) else op.agg.identity
    op._cursor()


def pop_to(op, k: int) -> None:
    """Pop slices until the front is slice ``k``."""
    while op._front < k:
        op._pop()
        op._front += 1


def finish_batch(op, X, x0, g1, N, fill, cur, front=None) -> None:
    """Keep slices ``[front, g1)`` of ``X`` (which starts at slice ``x0``) as the new history."""
    front = op._front if front is None else front
    front = min(front, g1)
    keep = X[front - x0 :]
    defer_history(op, keep, front, g1)
    op._front = front
    op._back = g1
    op._n += N
    op._fill = fill
    op._cur = cur


def snapshot(op, st: dict) -> dict:
    """``st`` (the slicing layer's state) with the merger's: the slices as one array after a batch, else
    every chunk's rows, lcs and total (copies: a snapshot never points into the store)."""
    st["_g"], st["_f"] = op._pushed, op._popped  # a checkpoint's keys, kept
    if op._deferred is not None:  # after a batch: the slices as one array, as they are
        X, f, g = op._deferred
        st["deferred"] = (np.array(X), f, g)
        st["chunks"], st["open"], st["chunk_size"] = {}, None, op._b
        return st
    chunks = {}
    for c in list(op._chunks):
        rec = op._chunks[c]
        lcs = op._lcs(c) if rec.lcs is not None else None
        n = op._pushed - c * op._b if rec is op._open else op._b  # rows written
        chunks[c] = op._store.snapshot(rec, n, lcs)  # copies: a snapshot never points into the store
    st["chunks"] = chunks
    st["open"] = next((c for c, rec in op._chunks.items() if rec is op._open), None)
    st["chunk_size"] = op._b
    return st


def restore(op, st: dict) -> None:
    """The merger as :func:`snapshot` left it in ``st`` (the slicing layer's part already restored)."""
    op._pushed, op._popped = st["_g"], st["_f"]
    op._drop_all()
    op._deferred = None
    if st.get("deferred") is not None:
        X, f, g = st["deferred"]
        op._reset_merger(f, g)
        op._deferred = (X, f, g)
        return
    op._chunks = {c: op._store.restore(saa, lcs, ca) for c, (saa, lcs, ca) in st["chunks"].items()}
    op._open = op._chunks.get(st["open"]) if st["open"] is not None else None
    op._cursor()
