"""The DEBS'14 generator's keys and values of a block in one compiled pass, the same bits as numpy's.

:class:`~pba_runtime.runtime.sources.Debs14Source` draws a block's keys and loads
with numpy (:func:`debs14_reference`, the definition): 16-bit uniform integers
(``rng.integers``), a table lookup, uniform doubles (``rng.random``), a scale, a
gather of the plugs' base loads, a product and ``np.round(..., 3)``: nine passes
over the block, ~7-8 ns a tuple in the coordinator of the default job, ~3 of it the
draws (PCG64's 128-bit steps one after the other). :func:`debs14_compiled` makes
the same 64-bit outputs of the same PCG64 in four interleaved lanes and uses each as
numpy does, in one compiled loop (numba; :mod:`pba_runtime.runtime.pcg64_block`),
with numpy's operations in numpy's order, so the keys and values are the same, bit
for bit (a test checks it over seeds, blocks and plug counts), in ~3.4 ns a tuple:

* ``integers(0, 65536, dtype=uint16)`` takes every 64-bit output as four 16-bit
  draws, low half first (numpy's buffered ``uint16`` over PCG64's buffered
  ``uint32``; a full 16-bit range needs no rejection);
* ``random()`` is ``(x >> 11) * 2**-53`` of one 64-bit output ``x``;
* ``np.round(v, 3)`` is ``rint(v * 1000.0) / 1000.0``.

Both leave the generator in the same state (``n / 4 + n`` outputs drawn; the
compiled path through ``PCG64.advance``), so the draws after them (the disorder's)
are the same too.

The compiled loop is used once loaded (:func:`load`; a job loads it on a thread
while its task slots start, as it does the grouping's pass); until then, and without
numba, the reference runs.

Examples
--------
>>> import numpy as np
>>> table, base = np.array([0, 1, 1, 2] * 16384), np.array([10.0, 20.0, 30.0])
>>> k, v = debs14_reference(np.random.default_rng(5), table, base, 16)
>>> k2, v2 = debs14_compiled(np.random.default_rng(5), table, base, 16, load())
>>> k.tolist() == k2.tolist() and v.tobytes() == v2.tobytes()
True
"""

from __future__ import annotations

import threading

import numpy as np

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
    keys = table.take(rng.integers(0, 1 << 16, size=n, dtype=np.uint16))  # take: ~2x a [] gather
    # in place (the same operations, the same bits): each temporary array is fresh memory the
    # kernel zeroes page by page
    level = rng.random(n)
    level *= 0.4
    level += 0.8  # +-20 % around the plug's level
    values = base.take(keys)
    values *= level
    np.round(values, 3, out=values)
    return keys, values


_M64 = (1 << 64) - 1
_M128 = (1 << 128) - 1


def debs14_compiled(rng: np.random.Generator, table: np.ndarray, base: np.ndarray, n: int,
                    kernel) -> tuple[np.ndarray, np.ndarray]:
    """:func:`debs14_reference`'s keys and values (the same bits; the generator left in the same state)
    with ``kernel`` (:func:`load`'s); ``n`` a multiple of 16 and ``rng`` a ``PCG64`` generator (what
    ``default_rng`` makes)."""
    if n % 16:
        raise ValueError(f"n must be a multiple of 16 (four lanes of four 16-bit draws), got {n}")
    bitgen = rng.bit_generator
    if type(bitgen) is not np.random.PCG64:
        raise TypeError(f"rng must draw from numpy's PCG64, not {type(bitgen).__name__}")
    from .pcg64_block import MULT

    st = bitgen.state
    if st["has_uint32"]:  # a 32-bit half in its buffer: integers() would use it first
        raise ValueError("rng holds a buffered 32-bit draw; the compiled loop starts from whole outputs")
    s, inc = st["state"]["state"], st["state"]["inc"]
    lanes = []
    for _ in range(4):  # the states of outputs 0, 1, 2, 3
        s = (s * MULT + inc) & _M128
        lanes += [s >> 64, s & _M64]
    mult4 = pow(MULT, 4, 1 << 128)
    inc4 = inc * (1 + MULT + MULT**2 + MULT**3) & _M128
    keys = np.empty(n, dtype=np.int64)
    values = np.empty(n, dtype=np.float64)
    if table.dtype != np.int64 and table.dtype != np.uint8 and table.dtype != np.uint16:
        table = table.astype(np.int64)
    kernel(np.array(lanes, dtype=np.uint64), np.array([mult4 >> 64, mult4 & _M64, inc4 >> 64, inc4 & _M64],
                                                      dtype=np.uint64),
           np.ascontiguousarray(table), np.ascontiguousarray(base, dtype=np.float64), keys, values)
    bitgen.advance(n // 4 + n)  # as the draws left it
    return keys, values


def compact_table(table: np.ndarray) -> np.ndarray:
    """``table`` in the narrowest of uint8, uint16, int64 that holds its keys (the same keys): the compiled
    loop's lookups then stay in the L2 cache (64 KB at up to 256 keys, against 512 KB; ~0.4 ns a tuple).

    Examples
    --------
    >>> compact_table(np.array([0, 3, 255])).dtype.name, compact_table(np.array([0, 256])).dtype.name
    ('uint8', 'uint16')
    """
    top = int(table.max()) if len(table) else 0
    if int(table.min(initial=0)) < 0:
        return table.astype(np.int64)
    return table.astype(np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.int64)


_compiled = None  # None: not loaded yet; False: no numba
_lock = threading.Lock()


def loaded():
    """The compiled loop if :func:`load` has loaded it, else ``None`` (never waits, never imports numba)."""
    return _compiled or None


def load():
    """Import numba and compile (or load from numba's disk cache) the loop; ``None`` without numba."""
    global _compiled
    with _lock:
        if _compiled is None:
            try:
                from .pcg64_block import debs14_lanes
            except ImportError:  # pragma: no cover - numba is a dependency
                _compiled = False
                return None
            # the first call of each table type compiles or loads from the cache: only then is the loop "loaded"
            for dtype in (np.uint8, np.uint16, np.int64):
                debs14_compiled(np.random.default_rng(0), np.zeros(1 << 16, dtype=dtype), np.ones(1), 16,
                                debs14_lanes)
            _compiled = debs14_lanes
        return _compiled or None


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
