"""Subtract-on-evict (``soe``): exact accumulators and non-finite values that leave the window (issue 15).

Item 2: a NaN or an infinity that left the window poisoned every later window.
Item 3: a float running total lost the contract's precision on ill-conditioned data
(1e12 beside 1e-3) and left ``+-1e-15`` in windows of exact zeros. Item 4 (soe):
``std`` of a window holding inf must be ``np.std(ddof=1)``, NaN.

The references here are exact (``fractions.Fraction``): with one tuple per slice
soe's ``sum`` must be the correctly rounded sum of the window, bit for bit; with
any window the finite results stay within relative 1e-9 of ``math.fsum`` and the
non-finite ones are numpy's. Every stream also runs through random batch splits
and a pickled snapshot restored into a fresh operator: both give the per-tuple
bits.
"""

from __future__ import annotations

import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from streams import run_batches, run_per_tuple

import pba_runtime as pr

W = pr.CountWindow
NAN, INF = math.nan, math.inf
EXACT_AGGS = ["sum", "mean", "std", "geomean"]


# --------------------------------------------------------------------------- references
def _round(f: Fraction) -> float:
    """``f`` rounded once to a float (beyond the largest float: an infinity, as IEEE rounding)."""
    try:
        return float(f)
    except OverflowError:
        return INF if f > 0 else -INF


def exact_sum(w) -> float:
    """The window's sum: the finite values summed exactly and rounded once, then numpy's rules for
    NaN and the infinities (any NaN, or +inf beside -inf, is NaN)."""
    fin = [x for x in w if math.isfinite(x)]
    rest = [x for x in w if not math.isfinite(x)]
    with np.errstate(invalid="ignore"):
        return float(np.sum(rest + [_round(sum(map(Fraction, fin), Fraction(0)))]))


def _log(x: float) -> float:
    return math.log(x) if x > 0 else (-INF if x == 0 else NAN)


def reference(agg: str, w) -> float:
    """What soe must give for window ``w`` (up to rounding, see :func:`close`)."""
    n = len(w)
    if agg == "count":
        return n
    if agg == "sum":
        return exact_sum(w)
    if agg == "mean":
        return exact_sum(w) / n
    if agg == "geomean":
        return math.exp(exact_sum([_log(x) for x in w]) / n)
    if agg == "std":
        if n < 2 or not all(math.isfinite(x) for x in w):
            return NAN  # np.std(ddof=1) of a window holding NaN or an infinity
        q = [Fraction(x) for x in w]
        mean = sum(q) / n
        return math.sqrt(_round(sum((x - mean) ** 2 for x in q) / (n - 1)))
    raise KeyError(agg)


def close(got, want, rel: float = 1e-9) -> bool:
    """Same NaN-ness and infinities; finite values within ``rel`` (relative only: a zero must be exact)."""
    if math.isnan(want):
        return math.isnan(got)
    if math.isinf(want) or want == 0:
        return got == want
    return math.isclose(got, want, rel_tol=rel, abs_tol=0.0)


def bits(results) -> list[str]:
    """Results as exact strings (``-0.0`` and ``0.0`` differ; every NaN is one)."""
    out = []
    for r in results:
        r = float(r)
        out.append("nan" if math.isnan(r) else r.hex())
    return out


def windows_of(values, ends, r: int, ts=None) -> list[list[float]]:
    """The values of each window, from its end: positions (count) or timestamps (time) in ``[end - r, end)``."""
    v = np.asarray(values, dtype=float)
    keys = np.arange(len(v)) if ts is None else np.asarray(ts)
    return [v[(keys >= e - r) & (keys < e)].tolist() for e in ends]


def soe_per_tuple(values, window, agg, ts=None):
    with pr.create("soe", window, agg) as op:
        return run_per_tuple(op, values, ts)


def soe_batches(values, window, agg, bounds, ts=None):
    with pr.create("soe", window, agg) as op:
        return run_batches(op, np.asarray(values, dtype=float), bounds, ts)


def soe_restored(values, window, agg, cut, ts=None):
    """Run to ``cut``, snapshot, pickle, restore into a fresh operator, run to the end."""
    with pr.create("soe", window, agg) as op:
        e1, r1 = op.insert_many(values[:cut], None if ts is None else ts[:cut])
        state = pickle.loads(pickle.dumps(op.snapshot()))
    with pr.create("soe", window, agg) as op2:
        op2.restore(state)
        e2, r2 = run_per_tuple(op2, values[cut:], None if ts is None else ts[cut:])
    return e1.tolist() + e2, list(r1) + r2


def sa(values, window, agg):
    return pr.sliding_aggregate(np.asarray(values, dtype=float), window=window, agg=agg, algorithm="soe")[1].tolist()


# --------------------------------------------------------------------------- item 2: non-finite values leave
@pytest.mark.parametrize("first,want", [(NAN, [NAN, 6.0, 9.0]), (INF, [INF, 6.0, 9.0]), (-INF, [-INF, 6.0, 9.0])])
def test_a_non_finite_sum_leaves_the_window(first, want):
    values = [first, 1.0, 2.0, 3.0, 4.0]
    assert bits(sa(values, W(range=3, slide=1), "sum")) == bits(want)
    assert bits(soe_per_tuple(values, W(range=3, slide=1), "sum")[1]) == bits(want)


def test_inf_beside_minus_inf_is_nan_and_both_leave():
    values = [INF, -INF, 1.0, 2.0, 3.0, NAN, 5.0, 6.0, 7.0]
    want = [NAN, -INF, 6.0, NAN, NAN, NAN, 18.0]
    assert bits(sa(values, W(range=3, slide=1), "sum")) == bits(want)
    assert bits(soe_per_tuple(values, W(range=3, slide=1), "sum")[1]) == bits(want)


@pytest.mark.parametrize("agg,first,want0", [
    ("mean", NAN, NAN), ("mean", INF, INF), ("mean", -INF, -INF),
    ("geomean", NAN, NAN), ("geomean", INF, INF), ("geomean", 0.0, 0.0),  # log(0) = -inf: a non-finite partial
])
def test_a_non_finite_mean_or_geomean_partial_leaves(agg, first, want0):
    values = [first, 1.0, 2.0, 3.0, 4.0]
    want = [want0, reference(agg, [1.0, 2.0, 3.0]), reference(agg, [2.0, 3.0, 4.0])]
    assert want[1:] == pytest.approx([2.0, 3.0] if agg == "mean" else [6 ** (1 / 3), 24 ** (1 / 3)], rel=1e-15)
    for got in (sa(values, W(range=3, slide=1), agg), soe_per_tuple(values, W(range=3, slide=1), agg)[1]):
        assert all(close(g, w, 1e-15) for g, w in zip(got, want)), (got, want)


@pytest.mark.parametrize("agg", ["sum", "mean", "std"])
def test_non_finite_values_leave_with_slides_and_heads(agg):
    """Slide 2 over range 3: the NaN sits in a slice partial, then in the head of a window."""
    values = [NAN, 1.0, 2.0, 3.0, 4.0, 5.0, INF, 6.0, 7.0, 8.0, 9.0]
    win = W(range=3, slide=2)
    ends, got = soe_per_tuple(values, win, agg)
    want = [reference(agg, w) for w in windows_of(values, ends, 3)]
    assert all(close(g, w) for g, w in zip(got, want)), (got, want)
    assert not math.isnan(got[1]) and not math.isnan(got[-1])


# --------------------------------------------------------------------------- item 3: precision
def test_small_values_after_a_large_one_are_exact():
    got = sa([1e12, 1e-3, 1e-3, 1e-3], W(range=2, slide=1), "sum")
    assert got == [math.fsum([1e12, 1e-3]), 0.002, 0.002]


def test_windows_of_zeros_are_exactly_zero():
    values = [0.1, 0.2, 0.3, 1e12, 1e-3, 7.0, 0.0, 0.0, -0.0, 0.0, 0.0]
    for agg in ("sum", "mean", "std"):
        got = sa(values, W(range=3, slide=1), agg)
        assert got[-3:] == [0.0, 0.0, 0.0], (agg, got)
    got = sa([3.0, 0.1, 0.0, 0.0, 0.0], W(range=2, slide=1), "geomean")
    assert got[-2:] == [0.0, 0.0]


def test_long_runs_of_1e12_and_1e_3_are_correctly_rounded():
    """The issue's case (runs of 1e12 and 1e-3, W[1000, 1]), with runs of -1e12 and of zeros too: every
    window is the correctly rounded sum, bit for bit, on both paths (the float total reached relative 2.5)."""
    rng = np.random.default_rng(15)
    levels = np.array([1e12, 1e-3, -1e12, 0.0])
    runs = rng.integers(1, 3000, size=120)
    kinds = rng.integers(0, 4, size=len(runs))
    values = np.repeat(levels[kinds], runs)
    r = 1000
    win = W(range=r, slide=1)
    # the exact window sums from the counts of each level in the window
    counts = np.stack([np.convolve(values == lv, np.ones(r, dtype=np.int64), "valid") for lv in levels[:3]], axis=1)
    cache: dict[tuple, float] = {}
    want = []
    for row in map(tuple, counts.tolist()):
        if row not in cache:
            cache[row] = float(sum(Fraction(lv) * c for lv, c in zip(levels[:3], row)))
        want.append(cache[row])
    got = sa(values, win, "sum")
    assert got == want
    assert soe_per_tuple(values.tolist(), win, "sum")[1] == want
    assert any(w == 0.0 for w in want) and any(0 < abs(w) < 10 for w in want)  # the hard windows are there


def test_overflowing_finite_sums_round_to_infinity_like_numpy():
    big = 1.7e308
    assert sa([big, big, 1.0, 2.0], W(range=2, slide=1), "sum") == [INF, big, 3.0]
    assert sa([-big, -big, 1.0, 2.0], W(range=2, slide=1), "sum") == [-INF, -big, 3.0]
    assert bits(sa([big, big, -INF, 1.0, 2.0, 3.0], W(range=3, slide=1), "sum")) == bits([NAN, -INF, -INF, 6.0])


def test_subnormals_and_huge_values_pass_through_exactly():
    """A subnormal forces the finest scale (2**1074); once it leaves, the scale comes down again."""
    tiny, huge = 5e-324, 1e300
    values = [1.0, tiny, huge, -huge, 3.0, 0.1, 0.2, 0.3, 0.4, 0.5] + [0.25] * 20
    win = W(range=3, slide=1)
    with pr.create("soe", win, "sum") as op:
        ends, got = run_per_tuple(op, values)
        assert op._E <= 128  # white box: a fine scale only while a fine value is held
    assert got == [exact_sum(w) for w in windows_of(values, ends, 3)]


# --------------------------------------------------------------------------- item 4: std of a window with inf
def test_std_of_a_window_holding_inf_is_nan():
    values = [1.0, 1.0, INF]
    with np.errstate(invalid="ignore"):
        want = np.std(values, ddof=1)
    assert math.isnan(want)
    assert bits(sa(values, W(range=3, slide=2), "std")) == ["nan"]
    assert bits(soe_per_tuple(values, W(range=3, slide=2), "std")[1]) == ["nan"]
    # the head of window 0 holds the inf; window 1 no longer does
    assert bits(sa([1.0, 1.0, INF, 2.0, 2.0, 2.0, 2.0], W(range=3, slide=2), "std")) == bits([NAN, NAN, 0.0])
    assert bits(sa([1.0, INF, 1.0, 2.0, -INF, 4.0], W(range=2, slide=1), "std")) == bits(
        [NAN, NAN, math.sqrt(0.5), NAN, NAN])


# --------------------------------------------------------------------------- property tests
SPECIALS = [NAN, INF, -INF, -0.0, 0.0, 1e12, 1e-3]


def any_float():
    """Every kind of float: specials, the issue's magnitudes with both signs, subnormals, huge values."""
    return st.one_of(
        st.sampled_from(SPECIALS + [-1e12, -1e-3, 5e-324, 1.7e308, -1.7e308]),
        st.integers(-5, 5).map(float),
        st.floats(allow_nan=False, allow_infinity=False),
    )


def no_cancellation_float():
    """Finite values of one sign beside NaN, +-inf and -0.0: a slice partial built in floats (as every
    algorithm builds it) is then within relative ~1e-15 of the exact slice sum."""
    return st.one_of(
        st.sampled_from(SPECIALS),
        st.integers(0, 5).map(float),
        st.floats(min_value=0.0, max_value=1e15, allow_subnormal=True),
    )


def value_list(agg: str, elements, max_size: int = 60):
    if agg == "geomean":  # values >= 0 (NaN and inf allowed)
        elements = elements.map(lambda x: abs(x) if not math.isnan(x) else x)
    if agg == "std":  # squares stay finite: std's own overflow is not what is tested here
        elements = elements.filter(lambda x: not math.isfinite(x) or abs(x) < 1e150)
    return st.lists(elements, max_size=max_size)


def _splits(draw, n: int) -> list[int]:
    return [0] + sorted(draw(st.lists(st.integers(0, n), max_size=5))) + [n]


def _check_paths(values, win, agg, data, ts=None):
    """Per tuple, random batch splits and a mid-stream restore give the same ends and the same bits."""
    ends, got = soe_per_tuple(values, win, agg, ts)
    b_ends, b_got = soe_batches(values, win, agg, _splits(data.draw, len(values)), ts)
    assert b_ends == ends
    assert bits(b_got) == bits(got)
    cut = data.draw(st.integers(0, len(values)))
    r_ends, r_got = soe_restored(values, win, agg, cut, ts)
    assert r_ends == ends
    assert bits(r_got) == bits(got)
    return ends, got


@pytest.mark.parametrize("agg", ["sum", "mean"])
@given(data=st.data())
def test_one_tuple_per_slice_is_correctly_rounded(agg, data):
    """Slide 1 (a slice per tuple): the exact accumulator gives the correctly rounded window sum, bit for bit,
    whatever the values (mean: that sum divided by the count)."""
    values = data.draw(value_list(agg, any_float()))
    r = data.draw(st.integers(1, 12))
    win = W(range=r, slide=1)
    ends, got = _check_paths(values, win, agg, data)
    want = [reference(agg, w) for w in windows_of(values, ends, r)]
    assert bits(got) == bits(want)


@pytest.mark.parametrize("agg", EXACT_AGGS + ["count"])
@given(data=st.data())
def test_count_windows_within_1e_9_of_fsum(agg, data):
    values = data.draw(value_list(agg, no_cancellation_float()))
    r = data.draw(st.integers(1, 16))
    s = data.draw(st.sampled_from([1, r, max(1, r // 2), data.draw(st.integers(1, r))]))
    win = W(range=r, slide=s)
    ends, got = _check_paths(values, win, agg, data)
    assert ends == list(range(r, len(values) + 1, s))
    for i, w in enumerate(windows_of(values, ends, r)):
        assert close(got[i], reference(agg, w)), (i, w, got[i], reference(agg, w))


@pytest.mark.parametrize("agg", EXACT_AGGS)
@given(data=st.data())
def test_time_windows_within_1e_9_of_fsum(agg, data):
    values = data.draw(value_list(agg, no_cancellation_float()))
    r = data.draw(st.integers(1, 20))
    s = data.draw(st.sampled_from([1, r, max(1, r // 3), data.draw(st.integers(1, r))]))
    offset = data.draw(st.integers(0, s - 1))
    gaps = data.draw(st.lists(st.sampled_from([0, 0, 1, 2, s, r, r + 1, 3 * r + 7]),
                              min_size=len(values), max_size=len(values)))
    ts = (data.draw(st.integers(-50, 50)) + np.cumsum(gaps)).astype(np.int64)
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    ends, got = _check_paths(values, win, agg, data, ts)
    for i, w in enumerate(windows_of(values, ends, r, ts)):
        assert w, "a time window is emitted only when it holds a tuple"
        assert close(got[i], reference(agg, w)), (i, w, got[i], reference(agg, w))


@given(data=st.data())
def test_zero_windows_stay_exactly_zero_after_anything(data):
    """Whatever passed through before (1e12, NaN, inf, subnormals), a window of zeros is exactly 0.0."""
    before = data.draw(st.lists(any_float(), max_size=30))
    r = data.draw(st.integers(1, 8))
    values = before + [data.draw(st.sampled_from([0.0, -0.0])) for _ in range(r + 3)]
    for agg in ("sum", "mean"):
        got = _check_paths(values, W(range=r, slide=1), agg, data)[1]
        assert got[-4:] == [0.0] * 4 and all(g == 0.0 for g in got[-4:])
