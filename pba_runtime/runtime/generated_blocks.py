"""The DEBS'14 generator's keys and values of a block in one compiled pass, the same bits as numpy's.

:class:`~pba_runtime.runtime.sources.Debs14Source` draws a block's keys and loads
with numpy (:func:`debs14_reference`): 16-bit uniform integers (``rng.integers``),
a table lookup, uniform doubles (``rng.random``), a scale, a gather of the plugs'
base loads, a product and ``np.round(..., 3)``: nine passes over the block, in the
coordinator of the default job. :func:`debs14_compiled` draws the same
random numbers in one call (``bit_generator.random_raw``: the 64-bit outputs numpy
turns into them) and does the rest in one compiled loop (numba), with numpy's
operations in numpy's order, so the keys and values are the same, bit for bit (a
test checks it over seeds, blocks and plug counts):

* ``integers(0, 65536, dtype=uint16)`` takes every 64-bit output as four 16-bit
  draws, low half first (numpy's buffered ``uint16`` over PCG64's buffered
  ``uint32``; a full 16-bit range needs no rejection);
* ``random()`` is ``(x >> 11) * 2**-53`` of one 64-bit output ``x``;
* ``np.round(v, 3)`` is ``rint(v * 1000.0) / 1000.0``.

Both leave the generator in the same state (``n / 4 + n`` outputs drawn), so the
draws after them (the disorder's) are the same too.

The compiled loop is used once loaded (:func:`load`; a job loads it on a thread
while its task slots start, as it does the grouping's pass); until then, and without
numba, the reference runs.

Examples
--------
>>> import numpy as np
>>> table, base = np.array([0, 1, 1, 2] * 16384), np.array([10.0, 20.0, 30.0])
>>> k, v = debs14_reference(np.random.default_rng(5), table, base, 8)
>>> k2, v2 = debs14_compiled(np.random.default_rng(5), table, base, 8, load())
>>> k.tolist() == k2.tolist() and v.tobytes() == v2.tobytes()
True
"""

from __future__ import annotations

import threading

import numpy as np

from .compiled_once import CompiledOnce

__all__ = ["debs14_reference", "debs14_compiled", "compact_table", "load", "loaded"]


def debs14_reference(rng: np.random.Generator, table: np.ndarray, base: np.ndarray,
                     n: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys and values of ``n`` tuples: ``table[u16]`` and ``round(base[key] * (0.8 + 0.4 * u), 3)`` of
    uniform draws (the readable form, and the definition of the stream).

    Parameters
    ----------
    rng : numpy.random.Generator
        The block's generator (its state advances by the draws).
    table : numpy.ndarray
        65,536 entries: the key of each 16-bit draw (int64 here; :func:`compact_table`'s for the
        compiled loop).
    base : numpy.ndarray
        float64: each key's base load.
    n : int
        Tuples.
    """
    keys = table.take(rng.integers(0, 1 << 16, size=n, dtype=np.uint16))  # take: faster than a [] gather
    # in place (the same operations, the same bits): each temporary array is fresh memory the
    # kernel zeroes page by page
    level = rng.random(n)
    level *= 0.4
    level += 0.8  # +-20 % around the plug's level
    values = base.take(keys)
    values *= level
    np.round(values, 3, out=values)
    return keys, values


def debs14_compiled(rng: np.random.Generator, table: np.ndarray, base: np.ndarray, n: int,
                    kernel) -> tuple[np.ndarray, np.ndarray]:
    """:func:`debs14_reference`'s keys and values (the same bits, the same draws) with ``kernel``
    (:func:`load`'s); ``n`` a multiple of 4."""
    if n % 4:
        raise ValueError(f"n must be a multiple of 4 (four 16-bit draws a 64-bit output), got {n}")
    raw = rng.bit_generator.random_raw(n // 4 + n)
    keys = np.empty(n, dtype=np.int64)
    values = np.empty(n, dtype=np.float64)
    if table.dtype != np.int64 and table.dtype != np.uint8 and table.dtype != np.uint16:
        table = table.astype(np.int64)
    kernel(raw[: n // 4].view(np.uint16), raw[n // 4 :], np.ascontiguousarray(table),
           np.ascontiguousarray(base, dtype=np.float64), keys, values)
    return keys, values


def compact_table(table: np.ndarray) -> np.ndarray:
    """``table`` in the narrowest of uint8, uint16, int64 that holds its keys (the same keys): the compiled
    loop's lookups then stay in the L2 cache (64 KB at up to 256 keys, against 512 KB).

    Examples
    --------
    >>> compact_table(np.array([0, 3, 255])).dtype.name, compact_table(np.array([0, 256])).dtype.name
    ('uint8', 'uint16')
    """
    top = int(table.max()) if len(table) else 0
    if int(table.min(initial=0)) < 0:
        return table.astype(np.int64)
    return table.astype(np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.int64)


def _build(njit):
    @njit(cache=True, nogil=True)
    def debs14_loop(draws16, draws64, table, base, keys, values):  # pragma: no cover - compiled
        for i in range(keys.shape[0]):
            k = table[draws16[i]]
            keys[i] = k
            level = np.float64(draws64[i] >> np.uint64(11)) * (1.0 / 9007199254740992.0)
            level = level * 0.4
            level = level + 0.8
            v = base[k] * level
            values[i] = np.rint(v * 1000.0) / 1000.0

    # the first call of each table type compiles or loads from the cache: only then is the loop "loaded"
    for dtype in (np.uint8, np.uint16, np.int64):
        debs14_compiled(np.random.default_rng(0), np.zeros(1 << 16, dtype=dtype), np.ones(1), 4, debs14_loop)
    return debs14_loop


_loop = CompiledOnce(_build)


def loaded():
    """The compiled loop if :func:`load` has loaded it, else ``None`` (never waits, never imports numba)."""
    return _loop.loaded()


def load():
    """Import numba and compile (or load from numba's disk cache) the loop; ``None`` without numba."""
    return _loop.get()


def warm_in_background() -> threading.Thread:
    """:func:`load` on a thread (a job's start-up, while its task slots start). Join it before the stream."""

    def warm() -> None:
        try:
            load()
        except Exception:  # pragma: no cover - the stream then runs the reference
            pass

    t = threading.Thread(target=warm, name="pba-generator-warm", daemon=True)
    t.start()
    return t
