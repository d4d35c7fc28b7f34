"""The compiled ``repr`` of a double (``pba_runtime/runtime/float_repr.py``) against Python's ``repr``, the slow
reference, and its arithmetic against exact integers."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numba
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pba_runtime.runtime import float_repr as fr


def _same_as_repr(values: np.ndarray) -> None:
    """Both forms of ``put_repr`` (words on a little-endian machine, bytes on any) spell each value as ``repr``."""
    want = [repr(x) for x in values.tolist()]
    for little in (True, False):
        got = fr.reprs(values, little=little)
        bad = [(x, g, w) for x, g, w in zip(values.tolist(), got, want) if g != w]
        assert not bad, (little, bad[:10])


@numba.njit
def _ascii8_mismatches(stop):
    """How many ``x < stop`` whose :func:`fr.ascii8` word is not their eight digits, read digit by digit."""
    bad = 0
    for x in range(stop):
        w = fr.ascii8(np.uint64(x))
        y = x
        for i in range(7, -1, -1):  # the last digit is the highest byte
            if (w >> np.uint64(8 * i)) & np.uint64(0xFF) != np.uint64(48 + y % 10):
                bad += 1
                break
            y //= 10
    return bad


def test_ascii8_spells_every_eight_digit_number():
    assert _ascii8_mismatches(100_000_000) == 0


@numba.njit
def _digits_at(values, little, buf, ends):
    pos = 0
    for i in range(values.shape[0]):
        n = fr.digit_count(values[i], fr.POW10U)
        fr.put_digits_at(buf, pos, values[i], n, fr.DIGITS2, little)
        pos += n
        ends[i] = pos


def test_put_digits_at_writes_each_length_in_place():
    """Every length 1-17 (and numbers just under and at each power of ten), side by side in one buffer: the word
    stores' bytes past a number's digits are overwritten by the next one's."""
    rng = np.random.default_rng(4)
    values = [10**n - 1 for n in range(1, 18)] + [10**n for n in range(17)] + [0]
    values += [int(rng.integers(10 ** (n - 1), 10**n)) for n in range(1, 18) for _ in range(200)]
    rng.shuffle(values)
    arr = np.array(values, np.uint64)
    want = "".join(str(v) for v in values)
    for little in (True, False):
        buf = np.zeros(len(want) + fr.REPR_SLACK, np.uint8)
        ends = np.empty(len(values), np.int64)
        _digits_at(arr, little, buf, ends)
        assert buf[: ends[-1]].tobytes().decode() == want


def test_the_log_formulas_are_exact_over_every_exponent_used():
    """``flog10pow2``, ``flog10_three_quarters_pow2`` and ``flog2pow10`` (a multiply and a shift) against exact
    integer arithmetic, over every binary exponent a double has and every decimal one its table holds."""
    for q in range(-1080, 980):
        k = fr.flog10pow2(q)
        assert Fraction(10) ** k <= Fraction(2) ** q < Fraction(10) ** (k + 1)
        k = fr.flog10_three_quarters_pow2(q)
        assert Fraction(10) ** k <= Fraction(3, 4) * Fraction(2) ** q < Fraction(10) ** (k + 1)
    for e in range(-400, 400):
        r = fr.flog2pow10(e)
        assert Fraction(2) ** r <= Fraction(10) ** e < Fraction(2) ** (r + 1)


def test_the_table_over_approximates_each_power_of_ten_in_126_bits():
    """``g = floor(10**-k * 2**-r) + 1``, ``2**125 <= g < 2**126``: its two halves put back together."""
    assert fr.G.shape == (292 - fr.K_MIN + 1, 2) and fr.G.dtype == np.uint64
    for i, k in enumerate(range(fr.K_MIN, 293)):
        g = (int(fr.G[i, 0]) << 63) | int(fr.G[i, 1])
        assert int(fr.G[i, 1]) < 2**63 and 2**125 <= g < 2**126
        exact = Fraction(10) ** -k * Fraction(2) ** -(fr.flog2pow10(-k) - 125)
        assert g - 1 <= exact < g


@numba.njit
def _mul_hi_all(a, b, out):
    for i in range(a.shape[0]):
        out[i] = fr.mul_hi(a[i], b[i])


def test_mul_hi_is_the_high_half_of_the_exact_product():
    rng = random.Random(3)
    pairs = [(0, 0), (1, 1), (2**64 - 1, 2**64 - 1), (2**63, 2), (2**32, 2**32), (2**64 - 1, 1)]
    pairs += [(rng.getrandbits(64), rng.getrandbits(64)) for _ in range(20_000)]
    a = np.array([p[0] for p in pairs], np.uint64)
    b = np.array([p[1] for p in pairs], np.uint64)
    out = np.empty(len(pairs), np.uint64)
    _mul_hi_all(a, b, out)
    assert out.tolist() == [(x * y) >> 64 for x, y in pairs]


def test_repr_of_edge_values():
    edges = [0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, -5e-324, 1e-323, 2.225073858507201e-308,
             2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
             # repr's switch between its layouts: fixed from 1e-4 up to 16 digits before the point
             1e16, 9999999999999998.0, 1e-4, 9.999999999999999e-05, 1e-5, 1.5e-5, 123456789012345.67,
             0.1, 0.2, 0.3, 0.1 + 0.2, 1 / 3, 2 / 3, 123.0, 100.0, 1e15, 1e22, 1e23, 2.0**52, 2.0**53, 2.0**53 + 2,
             2.0**63, 2.0**64, 30.505, 5977587022847.288, 1.5e300, -1.5e-300, 4.35, 2.9501740983680365]
    _same_as_repr(np.array(edges))


def test_repr_of_random_bit_patterns():
    rng = np.random.default_rng(11)
    v = rng.integers(0, 2**64 - 1, size=300_000, dtype=np.uint64, endpoint=True).view(np.float64)
    _same_as_repr(v[np.isfinite(v)])


def test_repr_of_powers_of_two_and_ten_and_their_neighbours():
    """A power of two's lower neighbour is half as far as its upper one (the asymmetric interval)."""
    p2 = np.array([math.ldexp(1.0, e) for e in range(-1074, 1024)])
    p10 = np.array([10.0**e for e in range(-323, 309)])
    for v in (p2, p10):
        near = np.concatenate([v, np.nextafter(v, np.inf), np.nextafter(v, -np.inf), -v])
        _same_as_repr(near[np.isfinite(near)])


def test_repr_of_subnormals_and_integers():
    rng = np.random.default_rng(12)
    _same_as_repr(np.arange(1, 50_000, dtype=np.uint64).view(np.float64))  # the smallest subnormals
    _same_as_repr(rng.integers(1, 2**52, size=50_000, dtype=np.uint64).view(np.float64))
    _same_as_repr(rng.integers(-(2**53), 2**53, size=50_000).astype(np.float64))
    _same_as_repr(np.arange(2**53 - 1000, 2**53 + 1000, dtype=np.int64).astype(np.float64))


def test_repr_of_aggregation_results():
    """What a sink writes: means and deviations (15-17 digits), sensor readings with few decimals, and magnitudes
    1e12 beside 1e-3 (the spec's ill-conditioned streams)."""
    rng = np.random.default_rng(13)
    readings = np.round(rng.random(50_000) * 100, 3)
    means = np.convolve(readings, np.ones(7) / 7, mode="valid")
    _same_as_repr(np.concatenate([readings, means, np.sqrt(readings), readings * 1e12, readings * 1e-3]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=50))
def test_repr_of_any_doubles(values):
    _same_as_repr(np.array(values, dtype=np.float64))
