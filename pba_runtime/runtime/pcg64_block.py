"""The DEBS'14 generator's compiled block loop: numpy's PCG64 draws made in four lanes, used as numpy uses them.

Imported only by :func:`pba_runtime.runtime.generated_blocks.load` (it imports numba). Numpy's
``PCG64`` (not ``PCG64DXSM``) steps a 128-bit LCG, ``s = s * MULT + inc`` (mod 2**128), and
outputs ``rotr64(hi(s) ^ lo(s), hi(s) >> 58)`` of each new state. One generator's steps are a
chain of 128-bit multiplies; ``random_raw`` walks it one output at a time (~2.5 ns an output
here). Four lanes, lane ``j`` on outputs ``j, j + 4, j + 8, ...`` (each steps by ``MULT**4``,
adding ``inc * (MULT**3 + MULT**2 + MULT + 1)``), make the same outputs with four independent
chains, and the loop consumes them as they come instead of through a buffer:

* outputs ``0 .. n/4 - 1``: four 16-bit draws each, low half first (numpy's buffered
  ``integers(0, 65536, dtype=uint16)``), each a key through the table;
* outputs ``n/4 .. n/4 + n - 1``: one double each, ``(x >> 11) * 2**-53`` (``random()``), the
  load ``round(base[key] * (0.8 + 0.4 * u), 3)`` computed as numpy does (``rint(v * 1000) / 1000``).

The bits are numpy's; ``tests/test_generated_blocks.py`` checks them against the numpy passes.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["MULT", "debs14_lanes"]

#: numpy's PCG64 multiplier (``PCG_DEFAULT_MULTIPLIER_128``).
MULT = (2549297995355413924 << 64) + 4865540595714422341


@intrinsic
def _lcg128(typingctx, hi, lo, mhi, mlo, chi, clo):  # pragma: no cover - compiled
    """``(hi, lo) * (mhi, mlo) + (chi, clo)`` mod 2**128, as two uint64 halves (LLVM's i128)."""
    u = types.uint64
    sig = types.UniTuple(u, 2)(u, u, u, u, u, u)

    def codegen(context, builder, signature, args):
        i128, i64 = ir.IntType(128), ir.IntType(64)

        def wide(h, l):
            return builder.or_(builder.shl(builder.zext(h, i128), ir.Constant(i128, 64)), builder.zext(l, i128))

        r = builder.add(builder.mul(wide(args[0], args[1]), wide(args[2], args[3])), wide(args[4], args[5]))
        return context.make_tuple(builder, signature.return_type,
                                  [builder.trunc(builder.lshr(r, ir.Constant(i128, 64)), i64), builder.trunc(r, i64)])

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _output(hi, lo):  # pragma: no cover - compiled
    """PCG's XSL-RR output of a state."""
    x = hi ^ lo
    rot = hi >> np.uint64(58)
    return (x >> rot) | (x << ((np.uint64(64) - rot) & np.uint64(63)))


@njit(cache=True, nogil=True, inline="always")
def _four_keys(r, table, keys, j):  # pragma: no cover - compiled
    m = np.uint64(0xFFFF)
    keys[j] = table[r & m]
    keys[j + 1] = table[(r >> np.uint64(16)) & m]
    keys[j + 2] = table[(r >> np.uint64(32)) & m]
    keys[j + 3] = table[r >> np.uint64(48)]


@njit(cache=True, nogil=True, inline="always")
def _load(r, base, k):  # pragma: no cover - compiled
    level = np.float64(r >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # random()
    level = level * 0.4
    level = level + 0.8
    v = base[k] * level
    return np.rint(v * 1000.0) / 1000.0  # np.round(v, 3)


@njit(cache=True, nogil=True)
def debs14_lanes(lanes, step, table, base, keys, values):  # pragma: no cover - compiled
    """Keys and values of ``len(keys)`` tuples (a multiple of 16) from four lanes: ``lanes`` the (hi, lo)
    halves of the states after 1, 2, 3 and 4 steps, ``step`` those of ``MULT**4`` and its increment."""
    h0, l0, h1, l1, h2, l2, h3, l3 = lanes[0], lanes[1], lanes[2], lanes[3], lanes[4], lanes[5], lanes[6], lanes[7]
    mhi, mlo, chi, clo = step[0], step[1], step[2], step[3]
    n = keys.shape[0]
    for j in range(0, n, 16):  # n / 4 outputs: four keys each
        _four_keys(_output(h0, l0), table, keys, j)
        _four_keys(_output(h1, l1), table, keys, j + 4)
        _four_keys(_output(h2, l2), table, keys, j + 8)
        _four_keys(_output(h3, l3), table, keys, j + 12)
        h0, l0 = _lcg128(h0, l0, mhi, mlo, chi, clo)
        h1, l1 = _lcg128(h1, l1, mhi, mlo, chi, clo)
        h2, l2 = _lcg128(h2, l2, mhi, mlo, chi, clo)
        h3, l3 = _lcg128(h3, l3, mhi, mlo, chi, clo)
    for i in range(0, n, 4):  # n outputs (n / 4 is a multiple of 4: lane j goes on with output n/4 + j)
        values[i] = _load(_output(h0, l0), base, keys[i])
        values[i + 1] = _load(_output(h1, l1), base, keys[i + 1])
        values[i + 2] = _load(_output(h2, l2), base, keys[i + 2])
        values[i + 3] = _load(_output(h3, l3), base, keys[i + 3])
        h0, l0 = _lcg128(h0, l0, mhi, mlo, chi, clo)
        h1, l1 = _lcg128(h1, l1, mhi, mlo, chi, clo)
        h2, l2 = _lcg128(h2, l2, mhi, mlo, chi, clo)
        h3, l3 = _lcg128(h3, l3, mhi, mlo, chi, clo)
