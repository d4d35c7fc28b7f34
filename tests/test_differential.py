"""Lockstep differential tests: every algorithm x every aggregation it accepts x count and time windows.

Each case is checked against the spec oracle (tests/oracle.py), per tuple and
through random batch splits (mid-slice, mid-chunk), with flush at the end.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pba_runtime as pr
from oracle import assert_results_equal, count_windows, time_windows
from streams import run_batches, run_per_tuple

AGGS = sorted(pr.BUILTIN_AGGREGATIONS)


def _accepts(alg: str, agg: str) -> bool:
    try:
        pr.create(alg, pr.CountWindow(range=2, slide=1), agg).close()
        return True
    except ValueError:
        return False


MATRIX = [(alg, agg) for alg in pr.ALGORITHMS for agg in AGGS if _accepts(alg, agg)]


def value_strategy(agg: str):
    if agg in ("geomean", "moment_sketch"):
        return st.floats(min_value=0.125, max_value=8.0, allow_nan=False, allow_subnormal=False)
    # small integers make ties (argmax: oldest wins) and exact sums likely; floats cover the rest
    return st.one_of(
        st.integers(min_value=-5, max_value=5).map(float),
        st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_subnormal=False),
    )


@st.composite
def count_case(draw, agg: str):
    r = draw(st.integers(1, 24))
    s = draw(st.sampled_from([1, 1, r, max(1, r // 2), draw(st.integers(1, r))]))
    values = draw(st.lists(value_strategy(agg), max_size=90))
    return r, s, values


@st.composite
def time_case(draw, agg: str):
    r = draw(st.integers(1, 30))
    s = draw(st.sampled_from([1, r, max(1, r // 3), draw(st.integers(1, r))]))
    offset = draw(st.integers(0, s - 1))
    values = draw(st.lists(value_strategy(agg), max_size=70))
    # repeated timestamps, small steps, gaps around and beyond the range
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, s, r - 1, r, r + 1, 3 * r + 7]),
                         min_size=len(values), max_size=len(values)))
    t0 = draw(st.integers(-50, 50))
    ts = (t0 + np.cumsum(gaps)).astype(np.int64) if values else np.zeros(0, dtype=np.int64)
    return r, s, offset, values, ts


def _splits(draw, n: int) -> list[int]:
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return [0] + cuts + [n]


@pytest.mark.parametrize("alg,agg", MATRIX)
@given(data=st.data())
def test_count_windows_match_oracle(alg, agg, data):
    r, s, values = data.draw(count_case(agg))
    want_ends, want = count_windows(values, r, s, agg)
    win = pr.CountWindow(range=r, slide=s)
    with pr.create(alg, win, agg) as op:
        ends, got = run_per_tuple(op, values)
    assert ends == want_ends
    assert_results_equal(agg, got, want, values)
    with pr.create(alg, win, agg) as op:
        ends, got = run_batches(op, values, _splits(data.draw, len(values)))
    assert ends == want_ends
    assert_results_equal(agg, got, want, values)


@pytest.mark.parametrize("alg,agg", MATRIX)
@given(data=st.data())
def test_time_windows_match_oracle(alg, agg, data):
    r, s, offset, values, ts = data.draw(time_case(agg))
    want_ends, want = time_windows(values, ts, r, s, agg, offset)
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    with pr.create(alg, win, agg) as op:
        ends, got = run_per_tuple(op, values, ts)
    assert ends == want_ends
    assert_results_equal(agg, got, want, values)
    with pr.create(alg, win, agg) as op:
        ends, got = run_batches(op, values, _splits(data.draw, len(values)), ts)
    assert ends == want_ends
    assert_results_equal(agg, got, want, values)


@pytest.mark.parametrize("alg,agg", [(a, g) for a, g in MATRIX if g in ("sum", "collect", "argmax", "std")])
@given(data=st.data())
def test_snapshot_restore_mid_stream(alg, agg, data):
    """A snapshot, pickled and restored into a fresh operator, goes on exactly like the original."""
    r, s, offset, values, ts = data.draw(time_case(agg))
    cut = data.draw(st.integers(0, len(values)))
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    with pr.create(alg, win, agg) as op:
        full = run_per_tuple(op, values, ts)
    with pr.create(alg, win, agg) as op:
        e1, r1 = op.insert_many(values[:cut], ts[:cut])
        state = pickle.loads(pickle.dumps(op.snapshot()))
    with pr.create(alg, win, agg) as op2:
        op2.restore(state)
        e2, r2 = run_per_tuple(op2, values[cut:], ts[cut:])
    assert e1.tolist() + e2 == full[0]
    assert_results_equal(agg, list(r1) + r2, full[1], values)


@pytest.mark.parametrize("agg", ["max", "min", "argmax"])
def test_nan_propagates_like_numpy(agg):
    values = [1.0, math.nan, 3.0, 2.0, 5.0, 1.0]
    want_ends, want = count_windows(values, 3, 1, agg)
    for alg in pr.ALGORITHMS:
        if not _accepts(alg, agg):
            continue
        with pr.create(alg, pr.CountWindow(range=3, slide=1), agg) as op:
            ends, got = run_per_tuple(op, values)
        assert ends == want_ends
        assert_results_equal(agg, got, want)
        ends, got = pr.sliding_aggregate(values, window=pr.CountWindow(range=3, slide=1), agg=agg, algorithm=alg)
        assert_results_equal(agg, list(got), want)


@pytest.mark.parametrize("alg,agg", [(a, g) for a, g in MATRIX if g in ("max", "sum")])
def test_range_longer_than_stream_yields_nothing(alg, agg):
    for win in (pr.CountWindow(range=5, slide=1), pr.CountWindow(range=5, slide=5)):
        ends, res = pr.sliding_aggregate([1.0, 2.0], window=win, agg=agg, algorithm=alg)
        assert ends.tolist() == [] and len(res) == 0
