"""Out-of-order input: ``allowed_lateness`` (reorder buffer for FIFO algorithms, native in fiba).

The reference: a tuple is late iff its timestamp is below ``max(earlier timestamps) - L``;
the windows are those of the non-late tuples stably sorted by timestamp (spec oracle).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pba_runtime as pr
from oracle import assert_results_equal, time_windows
from pba_runtime.reorder import ReorderBuffer

AGGS = ["sum", "max", "collect", "argmax", "std"]


def _accepts(alg: str, agg: str) -> bool:
    try:
        pr.create(alg, pr.CountWindow(range=2, slide=1), agg).close()
        return True
    except ValueError:
        return False


MATRIX = [(alg, agg) for alg in pr.ALGORITHMS for agg in AGGS if _accepts(alg, agg)]


def _agg_for(alg: str, *choices: str) -> str:
    return next(a for a in choices if _accepts(alg, a))


def reference(values, ts, lateness):
    """(late tuples, in-order values, in-order timestamps) of an out-of-order stream."""
    late, keep = [], []
    mx = None
    for i, (v, t) in enumerate(zip(values, ts)):
        if mx is not None and t < mx - lateness:
            late.append((v, t))
            continue
        keep.append((t, i, v))
        mx = t if mx is None else max(mx, t)
    keep.sort()
    return late, [v for _, _, v in keep], np.array([t for t, _, _ in keep], dtype=np.int64)


@st.composite
def ooo_case(draw, agg):
    r = draw(st.integers(1, 24))
    s = draw(st.sampled_from([1, r, max(1, r // 3), draw(st.integers(1, r))]))
    offset = draw(st.integers(0, s - 1))
    n = draw(st.integers(0, 60))
    if agg in ("geomean",):
        vals = st.floats(0.125, 8.0)
    else:
        vals = st.one_of(st.integers(-5, 5).map(float), st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False))
    values = draw(st.lists(vals, min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, s, r, r + 1, 3 * r + 7]), min_size=n, max_size=n))
    jitter = draw(st.lists(st.integers(0, 2 * r + 3), min_size=n, max_size=n))
    base = draw(st.integers(-40, 40)) + np.cumsum(gaps) if n else np.zeros(0, dtype=np.int64)
    ts = (np.asarray(base, dtype=np.int64) - np.asarray(jitter, dtype=np.int64)) if n else base.astype(np.int64)
    lateness = draw(st.sampled_from([0, 1, 2, r // 2, r, 2 * r + 3, 1000]))
    return r, s, offset, values, ts.astype(np.int64), lateness


def run_per_tuple(op, values, ts):
    ends, results = [], []
    for v, t in zip(values, ts.tolist()):
        for e, res in op.insert(v, t):
            ends.append(e)
            results.append(res)
    fe, fr = op.flush()
    return ends + fe.tolist(), results + list(fr)


def run_batches(op, values, ts, bounds):
    ends, results = [], []
    for lo, hi in zip(bounds, bounds[1:]):
        e, r = op.insert_many(values[lo:hi], ts[lo:hi])
        assert e.dtype == np.int64
        ends += e.tolist()
        results += list(r)
    fe, fr = op.flush()
    return ends + fe.tolist(), results + list(fr)


@pytest.mark.parametrize("alg,agg", MATRIX)
@given(data=st.data())
def test_out_of_order_matches_sorted_recompute(alg, agg, data):
    r, s, offset, values, ts, lateness = data.draw(ooo_case(agg))
    late, v_sorted, t_sorted = reference(values, ts.tolist(), lateness)
    want_ends, want = time_windows(v_sorted, t_sorted, r, s, agg, offset)
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    with pr.create(alg, win, agg, allowed_lateness=lateness) as op:
        ends, got = run_per_tuple(op, values, ts)
        assert op.take_late() == late
        assert op.take_late() == []
        assert op.stats()["late"] == len(late)
    assert ends == want_ends
    assert_results_equal(agg, got, want, values)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(values)), max_size=4)))
    with pr.create(alg, win, agg, allowed_lateness=lateness) as op:
        ends, got = run_batches(op, values, ts, [0] + cuts + [len(values)])
        assert op.take_late() == late
        assert op.stats()["late"] == len(late)
    assert ends == want_ends
    assert_results_equal(agg, got, want, values)


@pytest.mark.parametrize("alg", pr.ALGORITHMS)
@given(data=st.data())
def test_snapshot_restore_keeps_the_buffer(alg, data):
    agg = _agg_for(alg, "collect", "max", "sum")
    r, s, offset, values, ts, lateness = data.draw(ooo_case(agg))
    cut = data.draw(st.integers(0, len(values)))
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    with pr.create(alg, win, agg, allowed_lateness=lateness) as op:
        full = run_per_tuple(op, values, ts)
        late_full = op.take_late()
    with pr.create(alg, win, agg, allowed_lateness=lateness) as op:
        e1, r1 = op.insert_many(values[:cut], ts[:cut])
        state = pickle.loads(pickle.dumps(op.snapshot()))
        op.insert_many(values[cut:], ts[cut:])  # the snapshot is a copy: going on does not change it
    with pr.create(alg, win, agg, allowed_lateness=lateness) as op2:
        op2.restore(state)
        e2, r2 = run_per_tuple(op2, values[cut:], ts[cut:])
        assert op2.take_late() == late_full
        assert op2.stats()["late"] == len(late_full)
    assert e1.tolist() + e2 == full[0]
    assert_results_equal(agg, list(r1) + r2, full[1], values)


@pytest.mark.parametrize("alg", pr.ALGORITHMS)
def test_in_order_stream_is_unchanged_by_the_buffer(alg):
    rng = np.random.default_rng(7)
    ts = np.cumsum(rng.integers(0, 4, 300))
    values = rng.normal(size=300)
    win = pr.TimeWindow(range=20, slide=5)
    agg = _agg_for(alg, "max", "sum")
    plain = pr.sliding_aggregate(values, window=win, agg=agg, algorithm=alg, timestamps=ts)
    for lateness in (0, 7):
        with pr.create(alg, win, agg, allowed_lateness=lateness) as op:
            e, res = op.insert_many(values, ts)
            fe, fr = op.flush()
            assert op.stats()["late"] == 0
        assert np.concatenate([e, fe]).tolist() == plain[0].tolist()
        assert np.concatenate([res, fr]).tolist() == plain[1].tolist()


@pytest.mark.parametrize("alg", [a for a in pr.ALGORITHMS if a != "fiba"])
def test_fifo_algorithms_reject_decreasing_timestamps_without_lateness(alg):
    with pr.create(alg, pr.TimeWindow(range=10, slide=5), _agg_for(alg, "max", "sum")) as op:
        op.insert(1.0, 10)
        with pytest.raises(ValueError, match="allowed_lateness"):
            op.insert(2.0, 9)
        with pytest.raises(ValueError, match="non-decreasing"):
            op.insert_many([1.0, 2.0], [12, 11])


def test_late_tuples_never_raise_and_are_returned_in_arrival_order():
    op = pr.create("sba", pr.TimeWindow(range=10, slide=10), "sum", allowed_lateness=2)
    assert op.insert(1.0, 100) == []
    assert op.insert(2.0, 97) == []  # 97 < 98: late
    e, _ = op.insert_many(np.array([3.0, 4.0, 5.0]), [50, 99, 60])
    assert e.tolist() == []
    assert op.take_late() == [(2.0, 97), (3.0, 50), (5.0, 60)]
    assert op.stats()["late"] == 3
    assert op.stats()["buffered"] == 2
    assert op.flush()[1].tolist() == [4.0, 1.0]
    assert op.stats()["late"] == 3  # the count is a total; take_late only clears the list


def test_equal_timestamps_keep_arrival_order():
    op = pr.create("recal", pr.TimeWindow(range=4, slide=4), "collect", allowed_lateness=10)
    op.insert_many([1, 2, 3, 4], [5, 2, 5, 2])
    assert op.flush()[1] == [[2, 4], [1, 3]]


def test_bad_input():
    win = pr.TimeWindow(range=10, slide=5)
    with pytest.raises(ValueError, match="allowed_lateness applies to time windows"):
        pr.create("sba", pr.CountWindow(range=10, slide=5), "max", allowed_lateness=3)
    with pytest.raises(ValueError, match="allowed_lateness must be an integer >= 0"):
        pr.create("sba", win, "max", allowed_lateness=-1)
    with pytest.raises(TypeError, match="allowed_lateness must be an integer"):
        pr.create("sba", win, "max", allowed_lateness=1.5)
    with pytest.raises(TypeError, match="allowed_lateness must be an integer"):
        pr.create("sba", win, "max", allowed_lateness=True)
    op = pr.create("sba", win, "max", allowed_lateness=3)
    with pytest.raises(TypeError, match="timestamp must be an integer"):
        op.insert(1.0, 2.5)
    with pytest.raises(ValueError, match="timestamp is required"):
        op.insert(1.0)
    with pytest.raises(TypeError, match="real number"):
        op.insert("x", 3)
    with pytest.raises(ValueError, match="one timestamp per value"):
        op.insert_many([1.0, 2.0], [1])
    with pytest.raises(TypeError):
        op.insert_many(["x", 1.0], [1, 2])
    assert op.stats()["received"] == 0  # nothing was taken in by the refused calls
    op.flush()
    with pytest.raises(ValueError, match="flushed"):
        op.insert(1.0, 5)


def test_restore_checks_the_lateness():
    win = pr.TimeWindow(range=10, slide=5)
    op = pr.create("sba", win, "max", allowed_lateness=3)
    op.insert(1.0, 4)
    st3 = op.snapshot()
    with pytest.raises(ValueError, match="allowed_lateness 3"):
        pr.create("sba", win, "max", allowed_lateness=4).restore(st3)
    plain = pr.create("sba", win, "max").snapshot()
    with pytest.raises(ValueError, match="without allowed_lateness"):
        pr.create("sba", win, "max", allowed_lateness=3).restore(plain)


def test_reorder_buffer_wraps_only_fresh_fifo_operators():
    win = pr.TimeWindow(range=10, slide=5)
    with pytest.raises(TypeError):
        ReorderBuffer("sba", 3)
    rb = pr.create("recal", win, "max", allowed_lateness=1)
    assert isinstance(rb, ReorderBuffer) and rb.name == "recal" and rb.allowed_lateness == 1
    with pytest.raises(TypeError, match="already"):
        ReorderBuffer(rb, 2)
    assert rb.watermark is None
    rb.insert(1.0, 10)
    assert rb.watermark == 9
    assert "allowed_lateness=1" in repr(rb)
