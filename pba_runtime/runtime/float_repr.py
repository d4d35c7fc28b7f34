"""Python's ``repr`` of a double, compiled: the shortest decimal that reads back to it, in ``repr``'s layout.

``repr(v)`` spells a finite double with the fewest significant digits that parse back to ``v`` (of those,
the one nearest ``v``), in fixed notation when its decimal point falls 4 places left of the first digit to 16
right of it (``0.0001``, ``9999999999999998.0``), in exponent notation otherwise (``1e-05``, ``1e+16``,
``5e-324``). Results of aggregations (a mean, a standard deviation, a sum of fractions) need 15-17 digits on
most rows; Python's ``repr`` pays the interpreter for each (numpy's ``astype(str)`` and pyarrow's cast to
string are no faster, and neither spells every value as ``repr``), so the text sinks' writer
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

import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .unaligned import load2, load8, store2, store8

__all__ = ["G", "K_MIN", "POW10U", "DIGITS2", "REPR_BYTES", "REPR_SLACK", "LITTLE", "flog10pow2",
           "flog10_three_quarters_pow2", "flog2pow10", "mul_hi", "shortest", "digit_count", "put_digits", "ascii8",
           "put_digits_at", "put_repr", "reprs"]

#: ``POW10U[n] == 10**n`` as uint64
POW10U = np.array([10**n for n in range(20)], dtype=np.uint64)
#: ``"00" ... "99"``: two digits a division
DIGITS2 = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), np.uint8).copy()
#: most bytes ``repr`` of a double takes (``-2.2250738585072014e-308``: 24)
REPR_BYTES = 24
#: the machine's byte order is little-endian: a word's first byte is its lowest (:func:`put_repr`'s words)
LITTLE = sys.byteorder == "little"
#: bytes past a value's text that :func:`put_repr` may write (and its next text overwrites) on a little-endian
#: machine
REPR_SLACK = 8

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

_MASK63 = np.uint64((1 << 63) - 1)
_ZEROS = np.uint64(0x3030303030303030)  # "00000000"
_ZERO_POINT = np.uint64(0x3030303030302E30)  # "0.000000" (little-endian)
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
    return _drop_trailing_zeros(f, e)


@njit(cache=True, nogil=True, inline="always")
def _drop_trailing_zeros(f, e):  # pragma: no cover - compiled
    """``(f, e)`` with ``f``'s trailing zeros (``f < 10**17``: at most 16) moved into ``e``: none on most values
    (one test), else 16, 8, 4, 2 and 1 at a time. Each divisor is a constant, so each test is a multiply, not a
    division (a loop over a table of them would divide)."""
    if f % np.uint64(10) != np.uint64(0):
        return f, e
    if f % np.uint64(10**16) == np.uint64(0):
        f //= np.uint64(10**16)
        e += 16
    if f % np.uint64(10**8) == np.uint64(0):
        f //= np.uint64(10**8)
        e += 8
    if f % np.uint64(10**4) == np.uint64(0):
        f //= np.uint64(10**4)
        e += 4
    if f % np.uint64(100) == np.uint64(0):
        f //= np.uint64(100)
        e += 2
    if f % np.uint64(10) == np.uint64(0):
        f //= np.uint64(10)
        e += 1
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


@njit(cache=True, nogil=True, inline="always")
def ascii8(x):  # pragma: no cover - compiled
    """The eight decimal digits of ``x < 10**8`` (zero-padded) as ASCII in one word, the first digit in its lowest
    byte (a little-endian store writes them in order): split in two halves of four, each in two pairs, each in
    two digits, every lane of the word at once (multiplies by reciprocals; the tests check every ``x``)."""
    hi = x // np.uint64(10_000)
    v = hi | ((x - hi * np.uint64(10_000)) << np.uint64(32))  # two 32-bit lanes of < 10**4
    q = ((v * np.uint64(10_486)) >> np.uint64(20)) & np.uint64(0x0000007F0000007F)  # each lane // 100
    v = q | ((v - q * np.uint64(100)) << np.uint64(16))  # four 16-bit lanes of < 100
    q = ((v * np.uint64(103)) >> np.uint64(10)) & np.uint64(0x000F000F000F000F)  # each lane // 10
    v = q | ((v - q * np.uint64(10)) << np.uint64(8))  # eight bytes of < 10
    return v + _ZEROS


@njit(cache=True, nogil=True, inline="always")
def put_digits_at(buf, pos, u, n, digits2, little):  # pragma: no cover - compiled
    """Write the ``n`` digits of ``u`` (uint64 below ``10**17``, ``n`` its :func:`digit_count`) from ``pos``.
    ``little`` (a little-endian machine): as two or three stores of :func:`ascii8` words, which may write up
    to 8 bytes past the digits (the caller keeps room); else :func:`put_digits`' byte by byte."""
    if not little:
        _put_wide(buf, pos + n, u, n, digits2)
        return
    if n <= 8:
        store8(buf, pos, ascii8(u) >> (np.uint64(8 - n) << np.uint64(3)))  # the leading zeros shifted out
        return
    e8 = np.uint64(100_000_000)
    hi = u // e8
    if n == 17:
        top = hi // e8
        buf[pos] = np.uint8(48 + np.int64(top))
        store8(buf, pos + 1, ascii8(hi - top * e8))
    else:
        store8(buf, pos, ascii8(hi) >> (np.uint64(16 - n) << np.uint64(3)))
    store8(buf, pos + n - 8, ascii8(u - hi * e8))


@njit(cache=True, nogil=True, inline="always")
def put_repr(buf, pos, bits, g, pow10u, digits2, little):  # pragma: no cover - compiled
    """Write ``repr`` of the double whose bits are ``bits`` (uint64) at ``pos`` (at most :data:`REPR_BYTES`
    bytes); returns the position after it. ``little`` (a little-endian machine): the digits, zeros and the
    shift that makes room for the point go as words (:func:`put_digits_at`), so up to :data:`REPR_SLACK` bytes
    after the returned position may be written too; else byte by byte, nothing past it (the readable form of
    the same text: the tests check both against ``repr``). Byte by byte, the digits of a mean (16-17 of them)
    spend their time in mispredicted loop exits (the count of pairs varies from value to value); words have
    none (``bench/bench_sink_floor.py`` times the writers)."""
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
            if little:
                store8(buf, pos, _ZERO_POINT)  # "0." and six zeros, of which -dp stay
            else:
                buf[pos] = 48
                buf[pos + 1] = 46
                for j in range(-dp):
                    buf[pos + 2 + j] = 48
            put_digits_at(buf, pos + 2 - dp, f, n, digits2, little)
            return pos + 2 - dp + n
        put_digits_at(buf, pos + (0 if dp >= n else 1), f, n, digits2, little)
        if dp >= n:  # DIGITS000.0
            if little:
                store8(buf, pos + n, _ZEROS)
                if dp - n > 8:
                    store8(buf, pos + n + 8, _ZEROS)
            else:
                for j in range(n, dp):
                    buf[pos + j] = 48
            buf[pos + dp] = 46
            buf[pos + dp + 1] = 48
            return pos + dp + 2
        # DIG.ITS: the digits went one place right; the first dp move back, and the point goes after them
        _shift_left(buf, pos, dp, little)
        buf[pos + dp] = 46
        return pos + n + 1
    # D.IGITSe+XX
    put_digits_at(buf, pos + 1, f, n, digits2, little)  # the digits one place right, then the first moved back
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


@njit(cache=True, nogil=True, inline="always")
def _shift_left(buf, pos, k, little):  # pragma: no cover - compiled
    """Move the ``k`` bytes after ``pos`` one place left (``buf[pos:pos + k] = buf[pos + 1:pos + k + 1]``):
    ``little``, eight at a time, then the rest merged into the word at their place; else byte by byte."""
    if not little:
        for j in range(k):
            buf[pos + j] = buf[pos + j + 1]
        return
    while k >= 8:
        store8(buf, pos, load8(buf, pos + 1))
        pos += 8
        k -= 8
    w = load8(buf, pos)  # its byte j + 1 goes to j (j < k); the bytes from k on stay
    m = (np.uint64(1) << (np.uint64(k) << np.uint64(3))) - np.uint64(1)
    store8(buf, pos, ((w >> np.uint64(8)) & m) | (w & ~m))


@njit(cache=True, nogil=True)
def _reprs(bits, g, pow10u, digits2, buf, ends, little):  # pragma: no cover - compiled
    pos = 0
    for i in range(bits.shape[0]):
        pos = put_repr(buf, pos, bits[i], g, pow10u, digits2, little)
        ends[i] = pos


def reprs(values: np.ndarray, little: bool = LITTLE) -> list[str]:
    """``[repr(float(x)) for x in values]`` through :func:`put_repr`: what the tests check against ``repr``
    (``little=False``: its byte-by-byte form, which big-endian machines take)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    buf = np.empty(len(values) * REPR_BYTES + REPR_SLACK, np.uint8)
    ends = np.empty(len(values), np.int64)
    _reprs(values.view(np.uint64), G, POW10U, DIGITS2, buf, ends, bool(little))
    if not len(values):
        return []
    text = buf[: ends[-1]].tobytes().decode("ascii")
    starts = [0, *ends[:-1].tolist()]
    return [text[a:b] for a, b in zip(starts, ends.tolist())]
