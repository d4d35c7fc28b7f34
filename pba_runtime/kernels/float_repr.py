"""Python's ``repr`` of a double, compiled: the shortest decimal that reads back to it, in ``repr``'s layout.

``repr(v)`` spells a finite double with the fewest significant digits that parse back to ``v`` (of those,
the one nearest ``v``), in fixed notation when its decimal point falls 4 places left of the first digit to 16
right of it (``0.0001``, ``9999999999999998.0``), in exponent notation otherwise (``1e-05``, ``1e+16``,
``5e-324``). Results of aggregations (a mean, a standard deviation, a sum of fractions) need 15-17 digits on
most rows; Python's ``repr`` costs ~500 ns each through the interpreter (numpy's ``astype(str)`` ~880,
pyarrow's cast to string ~750, and neither spells every value as ``repr``), so the text sinks' writer
(:mod:`pba_runtime.runtime.text_lines`) finds the digits here, in machine code with the GIL released.

The digits come from Schubfach (R. Giulietti, "The Schubfach way to render doubles", 2020; the algorithm of
Java's ``Double.toString`` since JDK 19): for ``v = c * 2**q`` it takes ``k = floor(log10(2**q))`` (of ``3/4 *
2**q`` at a power of two, whose lower neighbour is nearer), multiplies ``c`` and the ends of its rounding
interval by a 126-bit over-approximation ``g`` of ``10**-k`` (:data:`G`, built here from exact integers), and
keeps the one of the two decimals one digit shorter around ``v`` that falls inside the interval, if only one
does, or else the nearer of the two decimals around ``v`` at full length; trailing zeros are then dropped. Each
64 x 64 -> 128-bit product is one machine multiply (:func:`mul_hi`, LLVM's ``i128``). Exact integers (``c >>
mq``) are taken directly. Java's ``toString`` asks for two digits at least, so its Schubfach tries the shorter
decimals only from three digits on and scales subnormals below ``c = 3`` by ten; ``repr`` asks for no such thing
(``5e-324``), so here the shorter decimals are tried from two digits on and no subnormal is scaled. The tests
check every spelling against ``repr`` and the arithmetic against exact integers (``tests/test_float_repr.py``).

Examples
--------
>>> import numpy as np
>>> reprs(np.array([0.1 + 0.2, 2.9501740983680365, 1e16, 1e-05, 5e-324, 123.0, -0.0, float("nan")]))
['0.30000000000000004', '2.9501740983680365', '1e+16', '1e-05', '5e-324', '123.0', '-0.0', 'nan']
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .unaligned import load2, store2

__all__ = ["G", "K_MIN", "POW10U", "DIGITS2", "REPR_BYTES", "flog10pow2", "flog10_three_quarters_pow2", "flog2pow10",
           "mul_hi", "shortest", "digit_count", "put_digits", "put_repr", "reprs"]

#: ``POW10U[n] == 10**n`` as uint64
POW10U = np.array([10**n for n in range(20)], dtype=np.uint64)
#: ``"00" ... "99"``: two digits a division
DIGITS2 = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), np.uint8).copy()
#: most bytes ``repr`` of a double takes (``-2.2250738585072014e-308``: 24)
REPR_BYTES = 24

_P = 53  # significand bits, the hidden one included
_Q_MIN = -1074  # the exponent of the least subnormal: v = c * 2**q
_C_MIN = 1 << 52
K_MIN, _K_MAX = -324, 292  # the range of k = floor(log10(2**q)) over every q


@njit(cache=True, nogil=True)
def flog10pow2(q: int) -> int:
    """``floor(log10(2**q))`` for ``|q| <= 5456721``, by a multiply and a shift (exact there; the tests check it
    over every exponent a double has)."""
    return (q * 661_971_961_083) >> 41


@njit(cache=True, nogil=True)
def flog10_three_quarters_pow2(q: int) -> int:
    """``floor(log10(3/4 * 2**q))``, as :func:`flog10pow2`."""
    return (q * 661_971_961_083 - 274_743_187_321) >> 41


@njit(cache=True, nogil=True)
def flog2pow10(e: int) -> int:
    """``floor(log2(10**e))`` for ``|e| <= 122684``, as :func:`flog10pow2`."""
    return (e * 913_124_641_741) >> 38


def _g(k: int) -> int:
    """``g = floor(10**-k * 2**-r) + 1`` with ``r = flog2pow10(-k) - 125``: ``2**125 <= g < 2**126``. In Python
    integers (an import calls no compiled code): ``floor(log2(10**e))`` is ``(10**e).bit_length() - 1``, and for
    ``e < 0`` minus the bits of ``10**-e - 1`` (no power of ten below 1 is a power of two)."""
    e = -k
    r = ((10**e).bit_length() - 1 if e >= 0 else -(10**-e - 1).bit_length()) - 125
    num, den = 10 ** max(e, 0) * 2 ** max(-r, 0), 10 ** max(-e, 0) * 2 ** max(r, 0)
    return num // den + 1


#: ``G[k - K_MIN] = (g >> 63, g & (2**63 - 1))``: :func:`_g` of every ``k``, two 63-bit halves
G = np.array([(_g(k) >> 63, _g(k) & ((1 << 63) - 1)) for k in range(K_MIN, _K_MAX + 1)], dtype=np.uint64)

_ZERO_STEPS = (16, 8, 4, 2, 1)
_MASK63 = np.uint64((1 << 63) - 1)
_U63 = np.uint64(63)


@intrinsic
def mul_hi(typingctx, a, b):
    """The high 64 bits of the 128-bit product of uint64 ``a`` and ``b``: one machine multiply (LLVM's
    ``i128`` product; numba has no 128-bit integer). The reference is Python's ``(a * b) >> 64``."""
    if a != types.uint64 or b != types.uint64:
        return None

    def codegen(context, builder, signature, args):  # pragma: no cover - compiled
        i128 = ir.IntType(128)
        p = builder.mul(builder.zext(args[0], i128), builder.zext(args[1], i128))
        return builder.trunc(builder.lshr(p, ir.Constant(i128, 64)), ir.IntType(64))

    return types.uint64(types.uint64, types.uint64), codegen


@njit(cache=True, nogil=True, inline="always")
def _rop(g1, g0, cp):  # pragma: no cover - compiled
    """``g * cp / 2**127`` rounded to odd (``g = g1 * 2**63 + g0``): its integer part, its last bit set when
    the fraction is not zero, so comparisons with the interval's ends stay exact."""
    x1 = mul_hi(g0, cp)
    y0 = g1 * cp  # (mod 2**64)
    y1 = mul_hi(g1, cp)
    z = (y0 >> np.uint64(1)) + x1
    vbp = y1 + (z >> _U63)
    return vbp | (((z & _MASK63) + _MASK63) >> _U63)


@njit(cache=True, nogil=True, inline="always")
def _to_decimal(q, c, g):  # pragma: no cover - compiled
    """The shortest decimal ``(f, e)`` (``f * 10**e``, ``f`` maybe with trailing zeros) in the rounding interval
    of ``c * 2**q`` (``c`` uint64), of those the nearest."""
    out = c & np.uint64(1)  # an even c's interval holds its ends (round half to even reads them back to c)
    cb = c << np.uint64(2)
    cbr = cb + np.uint64(2)
    if c != np.uint64(_C_MIN) or q == _Q_MIN:
        cbl = cb - np.uint64(2)
        k = flog10pow2(q)
    else:  # a power of two: its lower neighbour is half as far
        cbl = cb - np.uint64(1)
        k = flog10_three_quarters_pow2(q)
    h = np.uint64(q + flog2pow10(-k) + 2)
    g1 = g[k - K_MIN, 0]
    g0 = g[k - K_MIN, 1]
    vb = _rop(g1, g0, cb << h)
    vbl = _rop(g1, g0, cbl << h)
    vbr = _rop(g1, g0, cbr << h)
    s = vb >> np.uint64(2)
    if s >= np.uint64(10):  # one digit fewer, if a decimal of that length is inside the interval (from two
        # digits on: see the module doc)
        sp10 = (s // np.uint64(10)) * np.uint64(10)
        tp10 = sp10 + np.uint64(10)
        upin = vbl + out <= sp10 << np.uint64(2)
        wpin = (tp10 << np.uint64(2)) + out <= vbr
        if upin != wpin:
            return (sp10 if upin else tp10), k
    t = s + np.uint64(1)
    uin = vbl + out <= s << np.uint64(2)
    win = (t << np.uint64(2)) + out <= vbr
    if uin != win:
        return (s if uin else t), k
    cmp = np.int64(vb) - np.int64((s + t) << np.uint64(1))  # the nearer of s and t (a tie: the even one)
    return (s if (cmp < 0 or (cmp == 0 and (s & np.uint64(1)) == np.uint64(0))) else t), k


@njit(cache=True, nogil=True, inline="always")
def shortest(bits, g):  # pragma: no cover - compiled
    """``(f, e)``, ``f`` uint64 without trailing zeros: the digits and exponent of ``repr`` of the finite,
    non-zero double whose bits (uint64) are ``bits``, its sign left out (``|v| = f * 10**e``). ``g``:
    :data:`G`."""
    t = bits & np.uint64((1 << 52) - 1)
    bq = np.int64((bits >> np.uint64(52)) & np.uint64(0x7FF))
    if bq != 0:
        mq = 1075 - bq  # -Q_MIN + 1 - bq
        c = t | np.uint64(_C_MIN)
        if 0 < mq < _P:
            f = c >> np.uint64(mq)
            if f << np.uint64(mq) == c:  # an integer: its digits
                f, e = f, 0
            else:
                f, e = _to_decimal(-mq, c, g)
        else:
            f, e = _to_decimal(-mq, c, g)
    else:  # a subnormal
        f, e = _to_decimal(_Q_MIN, t, g)
    # its trailing zeros (f < 10**17: at most 16), 16, 8, 4, 2 and 1 at a time
    for z in _ZERO_STEPS:
        p = POW10U[z]
        if f % p == np.uint64(0):
            f //= p
            e += z
    return f, e


@njit(cache=True, nogil=True, inline="always")
def digit_count(u, pow10u):  # pragma: no cover - compiled
    """Decimal digits of ``u`` (uint64): two comparisons a digit below 10**8, few branches."""
    if u < pow10u[4]:
        return 1 + (u >= pow10u[1]) + (u >= pow10u[2]) + (u >= pow10u[3])
    if u < pow10u[8]:
        return 5 + (u >= pow10u[5]) + (u >= pow10u[6]) + (u >= pow10u[7])
    if u < pow10u[16]:
        return (9 + (u >= pow10u[9]) + (u >= pow10u[10]) + (u >= pow10u[11]) + (u >= pow10u[12])
                + (u >= pow10u[13]) + (u >= pow10u[14]) + (u >= pow10u[15]))
    return 17 + (u >= pow10u[17]) + (u >= pow10u[18]) + (u >= pow10u[19])


@njit(cache=True, nogil=True, inline="always")
def put_digits(buf, end, u, n, digits2):  # pragma: no cover - compiled
    """Write the ``n`` lowest decimal digits of ``u`` (uint64, zero-padded) ending before ``end``."""
    j = end
    hundred = np.uint64(100)
    while n >= 2:
        q = u // hundred
        r = np.int64(u - q * hundred) * 2
        buf[j - 2] = digits2[r]
        buf[j - 1] = digits2[r + 1]
        u = q
        j -= 2
        n -= 2
    if n == 1:
        buf[j - 1] = np.uint8(48 + np.int64(u % np.uint64(10)))


@njit(cache=True, nogil=True, inline="always")
def _put_wide(buf, end, u, n, digits2):  # pragma: no cover - compiled
    """:func:`put_digits` of up to 17 digits as two independent chains of divisions: the last 8 digits and
    the ones before them."""
    if n <= 8:
        put_digits(buf, end, u, n, digits2)
        return
    e8 = np.uint64(100_000_000)
    hi = u // e8
    _put8(buf, end, u - hi * e8, digits2)
    put_digits(buf, end - 8, hi, n - 8, digits2)


@njit(cache=True, nogil=True, inline="always")
def _put8(buf, end, u, digits2):  # pragma: no cover - compiled
    """The 8 digits of ``u < 10**8`` ending before ``end``: two halves of four, each two pairs (two divisions
    deep, not four)."""
    e4 = np.uint64(10_000)
    h = np.uint64(100)
    a = u // e4
    b = u - a * e4
    a1 = a // h
    b1 = b // h
    store2(buf, end - 8, load2(digits2, np.int64(a1) * 2))
    store2(buf, end - 6, load2(digits2, np.int64(a - a1 * h) * 2))
    store2(buf, end - 4, load2(digits2, np.int64(b1) * 2))
    store2(buf, end - 2, load2(digits2, np.int64(b - b1 * h) * 2))


@njit(cache=True, nogil=True)
def _put_word(buf, pos, w):  # pragma: no cover - compiled
    """``nan``, ``inf``, ``-inf``, ``0.0`` or ``-0.0`` (``w`` 0-4) at ``pos``; returns the position after it."""
    if w == 0:
        buf[pos], buf[pos + 1], buf[pos + 2] = 110, 97, 110
        return pos + 3
    if w == 2:
        buf[pos] = 45
        pos += 1
    if w <= 2:
        buf[pos], buf[pos + 1], buf[pos + 2] = 105, 110, 102
        return pos + 3
    if w == 4:
        buf[pos] = 45
        pos += 1
    buf[pos], buf[pos + 1], buf[pos + 2] = 48, 46, 48
    return pos + 3


@njit(cache=True, nogil=True)
def put_repr(buf, pos, bits, g, pow10u, digits2):  # pragma: no cover - compiled
    """Write ``repr`` of the double whose bits are ``bits`` (uint64) at ``pos`` (at most :data:`REPR_BYTES`
    bytes); returns the position after it."""
    neg = (bits >> _U63) != np.uint64(0)
    mag = bits & _MASK63
    if mag >= np.uint64(0x7FF << 52):  # nan, inf
        return _put_word(buf, pos, 0 if mag > np.uint64(0x7FF << 52) else (2 if neg else 1))
    if mag == np.uint64(0):
        return _put_word(buf, pos, 4 if neg else 3)
    f, e = shortest(mag, g)
    if neg:
        buf[pos] = 45  # '-'
        pos += 1
    n = digit_count(f, pow10u)
    dp = n + e  # the decimal point's place: |v| = 0.DIGITS * 10**dp
    if -4 < dp <= 16:  # fixed
        if dp <= 0:  # 0.000DIGITS
            buf[pos] = 48
            buf[pos + 1] = 46
            pos += 2
            for _ in range(-dp):
                buf[pos] = 48
                pos += 1
            _put_wide(buf, pos + n, f, n, digits2)
            return pos + n
        if dp >= n:  # DIGITS000.0
            _put_wide(buf, pos + n, f, n, digits2)
            pos += n
            for _ in range(dp - n):
                buf[pos] = 48
                pos += 1
            buf[pos] = 46
            buf[pos + 1] = 48
            return pos + 2
        # DIG.ITS: the digits one place right, then the first dp moved back (no division by 10**d)
        _put_wide(buf, pos + n + 1, f, n, digits2)
        for j in range(dp):
            buf[pos + j] = buf[pos + j + 1]
        buf[pos + dp] = 46
        return pos + n + 1
    # D.IGITSe+XX
    _put_wide(buf, pos + n + 1, f, n, digits2)  # the digits one place right, then the first moved back
    buf[pos] = buf[pos + 1]
    if n > 1:
        buf[pos + 1] = 46
        pos += n + 1
    else:
        pos += 1
    x = dp - 1
    buf[pos] = 101  # 'e'
    buf[pos + 1] = 45 if x < 0 else 43
    pos += 2
    x = -x if x < 0 else x
    nx = 3 if x >= 100 else 2
    put_digits(buf, pos + nx, np.uint64(x), nx, digits2)
    return pos + nx


@njit(cache=True, nogil=True)
def _reprs(bits, g, pow10u, digits2, buf, ends):  # pragma: no cover - compiled
    pos = 0
    for i in range(bits.shape[0]):
        pos = put_repr(buf, pos, bits[i], g, pow10u, digits2)
        ends[i] = pos


def reprs(values: np.ndarray) -> list[str]:
    """``[repr(float(x)) for x in values]`` through :func:`put_repr`: what the tests check against ``repr``."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    buf = np.empty(len(values) * REPR_BYTES, np.uint8)
    ends = np.empty(len(values), np.int64)
    _reprs(values.view(np.uint64), G, POW10U, DIGITS2, buf, ends)
    if not len(values):
        return []
    text = buf[: ends[-1]].tobytes().decode("ascii")
    starts = [0, *ends[:-1].tolist()]
    return [text[a:b] for a, b in zip(starts, ends.tolist())]
