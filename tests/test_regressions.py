"""The reproducers of issue 15's wrong results, each as it was reported (the differential tests in
test_differential.py hold the classes of bugs: user aggregations with a faster form, non-finite values,
ill-conditioned data, restore bit for bit)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

import pba_runtime as pr

W = pr.CountWindow
T = pr.TimeWindow
SA = pr.sliding_aggregate


def _absmax():
    return pr.Aggregation(lift=lambda v: abs(v), combine=max, lower=float, identity=0.0, name="absmax",
                          ufunc=np.maximum)


@pytest.mark.parametrize("alg", ["auto", "pba", "sba", "two_stacks", "daba", "flatfat", "recal", "fiba"])
def test_ufunc_form_applies_the_users_lift(alg):
    """Item 1: the README's absmax gave [1, 1] on the batch path; the per-tuple path gave [5, 3]."""
    ends, res = SA(np.array([-5.0, 1, -3]), window=W(range=2, slide=1), agg=_absmax(), algorithm=alg)
    assert res.tolist() == [5.0, 3.0]
    with pr.create("pba" if alg == "auto" else alg, W(range=2, slide=1), _absmax()) as op:
        assert op.insert_many(np.array([-5.0, 1, -3]))[1].tolist() == [5.0, 3.0]


@pytest.mark.parametrize("alg", [a for a in pr.ALGORITHMS if a != "slick_deque"])
def test_std_of_a_window_holding_inf_is_nan_as_numpy(alg):
    """Item 4: pba/sba gave NaN (numpy's), the others inf."""
    ends, res = SA(np.array([1.0, 1, np.inf, 2, 3]), window=W(range=3, slide=2), agg="std", algorithm=alg)
    with np.errstate(invalid="ignore"):
        assert math.isnan(np.std([1, 1, np.inf], ddof=1))  # numpy's result, the contract
    assert math.isnan(res[0]) and math.isnan(res[1])
    ends, res = SA(np.array([1.0, np.inf, 2, 3, 4]), window=W(range=2, slide=1), agg="std", algorithm=alg)
    assert np.isnan(res[:2]).all() and res[2:].tolist() == pytest.approx([np.std([2, 3], ddof=1)] * 2)


def test_restore_refuses_a_different_combine():
    """Item 6: a custom combine=max snapshot restored into a combine=min one gave min([5, 1, 2]) = 2."""
    mx = pr.Aggregation(lift=float, combine=max, lower=float, identity=-np.inf)
    mn = pr.Aggregation(lift=float, combine=min, lower=float, identity=np.inf)
    op = pr.create("sba", W(range=3, slide=1), mx)
    op.insert(5.0)
    state = pickle.loads(pickle.dumps(op.snapshot()))
    with pytest.raises(ValueError, match="another aggregation"):
        pr.create("sba", W(range=3, slide=1), mn).restore(state)


@pytest.mark.parametrize("alg", ["pba", "sba", "recal", "fiba", "two_stacks"])
@pytest.mark.parametrize("ts", [
    np.array([-2**63, -2**63 + 5]),                        # window starts before int64's minimum
    np.array([2**63 - 10, 2**63 - 5]),                     # window ends past int64's maximum
    np.array([2**63, 2**63 + 5], dtype=np.uint64),         # uint64 beyond int64 (wrapped to negative before)
    [0, 2**70],                                            # a Python integer beyond int64
])
def test_timestamps_that_do_not_fit_int64_are_refused(alg, ts):
    """Item 7: 20 windows with duplicated ends, wrapped uint64, bare OverflowErrors."""
    with pytest.raises(ValueError, match="timestamps"):
        SA(np.array([1.0, 2.0]), window=T(range=100, slide=10), agg="count", timestamps=ts, algorithm=alg)
    with pr.create(alg, T(range=100, slide=10), "count") as op:
        with pytest.raises(ValueError, match="timestamps"):
            for t in (ts.tolist() if isinstance(ts, np.ndarray) else ts):
                op.insert(1.0, int(t))
        # nothing emitted or changed by the refused timestamp: the stream goes on
        accepted = 1 if isinstance(ts, list) else 0  # [0, 2**70]: 0 went in before 2**70 was refused
        assert op.insert(1.0, 0) == []
        assert op.flush()[1].tolist() == [accepted + 1] * 10  # the ten windows holding timestamp 0


@pytest.mark.parametrize("alg", ["pba", "sba", "recal", "fiba", "two_stacks", "soe"])
def test_timestamps_near_int64_ends_that_fit_give_the_per_tuple_windows(alg):
    """Batch == per tuple right up to the accepted edge."""
    win = T(range=100, slide=10)
    lo, hi = win.timestamp_range
    for ts in (np.array([lo, lo + 5, lo + 50]), np.array([hi - 50, hi - 5, hi])):
        ends, res = SA(np.ones(3), window=win, agg="count", timestamps=ts, algorithm=alg)
        per = []
        with pr.create(alg, win, "count") as op:
            for t in ts.tolist():
                per += op.insert(1.0, t)
            fe, fr = op.flush()
        assert ends.tolist() == [e for e, _ in per] + fe.tolist()
        assert res.tolist() == [r for _, r in per] + fr.tolist()
        assert len(set(ends.tolist())) == len(ends) and (np.diff(ends) > 0).all()


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("alg", sorted(pr.ALGORITHMS))
def test_timestamps_with_a_count_window_are_refused(alg, engine):
    """Item 8: timestamps= with a CountWindow was ignored, even decreasing ones (issue 40: two_stacks' and
    slick_deque's per-tuple fast path still ignored them). Every registered algorithm, each engine."""
    agg, want = ("max", 2.0) if alg == "slick_deque" else ("sum", 3.0)  # slick_deque: selective only
    msg = r"timestamps apply to time windows \(TimeWindow\) only; CountWindow\(range=2, slide=1\) orders tuples"
    with pytest.raises(ValueError, match=msg):
        SA(np.array([1.0, 2, 3]), window=W(range=2, slide=1), agg=agg, timestamps=np.array([3, 2, 1]),
           algorithm=alg, engine=engine)
    with pr.create(alg, W(range=2, slide=1), agg, engine=engine) as op:
        with pytest.raises(ValueError, match=msg):
            op.insert(1.0, 5)
        assert op.insert(1.0) == []
        with pytest.raises(ValueError, match=msg):  # after a tuple, decreasing: refused all the same
            op.insert(1.0, 0)
        assert op.insert(2.0) == [(2, want)]


@pytest.mark.parametrize("agg", ["moment_sketch", "geomean"])
def test_log_aggregations_refuse_negative_values_alike(agg):
    """Item 9: moment_sketch accepted negatives and gave 10 NaN components; geomean refused them."""
    with pytest.raises(ValueError, match=f"value must be >= 0 for aggregation '{agg}'"):
        SA(np.array([1.0, -2, 3]), window=W(range=2, slide=1), agg=agg)
    with pr.create("sba", W(range=2, slide=1), agg) as op:
        op.insert(1.0)
        with pytest.raises(ValueError, match=">= 0"):
            op.insert(-2.0)
        assert len(op.insert(3.0)) == 1  # nothing changed by the refused value


def test_the_oracle_allows_only_rounding_on_subnormal_squares_and_through_a_lower():
    """Found by hypothesis under the relative oracle: a std of values near 1e-159 (their squares are
    subnormal) and SoE's sqrt of an evicted sum of squares near 0 are off by rounding alone; the oracle's
    floor says how much, and nothing more passes."""
    import math
    import operator

    from oracle import Want, assert_results_equal, count_windows

    vals = [0.0, 0.0, 0.0, 3.081505831270265e-159]
    _, want = count_windows(vals, 4, 1, "std")
    got = pr.sliding_aggregate(np.array(vals), window=pr.CountWindow(4), agg="std", algorithm="sba")[1]
    assert_results_equal("std", got, want)
    with pytest.raises(AssertionError):
        assert_results_equal("std", [want[0] * (1 + 1e-4)], want)
    rss = pr.Aggregation(lift=lambda v: v * v, combine=operator.add, lower=math.sqrt, identity=0.0,
                         inverse=operator.sub, name="rss", result="float")
    stream = [0.6, 0.7, 1e-6]
    want = [Want(1e-6, 0.0, partial=1e-12)]
    assert_results_equal(rss, [1.0000444493033002e-06], want, values=stream)  # 1e-16 left in 1e-12: 4e-11
    with pytest.raises(AssertionError):
        assert_results_equal(rss, [1.0001e-06], want, values=stream)
