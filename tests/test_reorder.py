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
from oracle import Want, _sum_floor, assert_results_equal, time_windows
from streams import run_batches, run_per_tuple

import pba_runtime as pr
from pba_runtime.algorithms.reorder import ReorderBuffer

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
        ends, got = run_batches(op, values, [0] + cuts + [len(values)], ts)
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


# ---------------------------------------------------------------- insert_many == insert, tuple by tuple
BATCH_MATRIX = [(alg, agg) for alg in ("sba", "pba", "two_stacks", "daba")
                for agg in ("max", "sum", "collect", "argmax") if _accepts(alg, agg)]


def spy(op):
    """Record what the buffer feeds its inner operator: ``(timestamp, lowered partial)`` in order."""
    inner, agg = op.inner, op.agg
    fed, busy = [], [False]
    step, many = inner._step, inner.insert_many

    def _step(p, t):
        if not busy[0]:  # not from inside the inner's own insert_many
            fed.append((t, agg.lower(p)))
        return step(p, t)

    def insert_many(values, timestamps):
        ts = np.asarray(timestamps).tolist()
        fed.extend((t, agg.lower(agg.lift(v, t) if agg.positional else agg.lift(v))) for v, t in zip(values, ts))
        busy[0] = True
        try:
            return many(values, timestamps)
        finally:
            busy[0] = False

    inner._step, inner.insert_many = _step, insert_many
    return fed


def buffer_state(op):
    """Everything the reorder buffer holds, and its counters. The waiting tuples in one sorted list
    ``(timestamp, seq, partial)``, whichever form (heap of partials, arrays of values) holds them."""
    st = dict(op.snapshot()["reorder"])
    pt, ps, pv = st.pop("pending")
    lift = op.agg.lift
    lifted = [(t, q, lift(v, t) if op.agg.positional else lift(v)) for t, q, v in zip(pt.tolist(), ps.tolist(),
                                                                                     pv.tolist())]
    st["heap"] = sorted(st["heap"] + lifted)
    stats = op.stats()
    return st, stats["buffered"], stats["late"], stats["received"], op.watermark


@pytest.mark.parametrize("alg,agg", BATCH_MATRIX)
@given(data=st.data())
def test_insert_many_is_insert_tuple_by_tuple(alg, agg, data):
    """Random batch splits, per-tuple stretches and a snapshot/restore against the stream tuple by tuple."""
    r, s, offset, values, ts, lateness = data.draw(ooo_case(agg))
    n = len(values)
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    bounds = sorted(set([0, n] + data.draw(st.lists(st.integers(0, n), max_size=6))))
    modes = data.draw(st.lists(st.sampled_from(["list", "array", "array", "tuples"]),
                               min_size=len(bounds), max_size=len(bounds)))
    restore_at = data.draw(st.sampled_from(bounds))

    ref = pr.create(alg, win, agg, allowed_lateness=lateness)
    ref_fed = spy(ref)
    want_ends, want, want_state, want_late = [], [], {}, []
    for i, (v, t) in enumerate(zip(values, ts.tolist())):
        if i in bounds:
            want_state[i] = buffer_state(ref)
            want_late.append(ref.take_late())
        for e, res in ref.insert(v, t):
            want_ends.append(e)
            want.append(res)
    want_state[n] = buffer_state(ref)
    want_late.append(ref.take_late())
    fe, fr = ref.flush()
    want_ends += fe.tolist()
    want += list(fr)
    ref.close()

    op = pr.create(alg, win, agg, allowed_lateness=lateness)
    fed = spy(op)
    ends, got, late = [], [], []
    for lo, hi, mode in zip(bounds, bounds[1:] + [None], modes):
        if lo == restore_at:  # go on in a fresh operator from a pickled snapshot
            state = pickle.loads(pickle.dumps(op.snapshot()))
            op.close()
            op = pr.create(alg, win, agg, allowed_lateness=lateness)
            op.restore(state)
            fed_before, fed = fed, spy(op)
            fed[:0] = fed_before
        assert buffer_state(op) == want_state[lo]
        late.append(op.take_late())
        if hi is None:
            break
        if mode == "tuples":
            for v, t in zip(values[lo:hi], ts[lo:hi].tolist()):
                for e, res in op.insert(v, t):
                    ends.append(e)
                    got.append(res)
        else:
            e, res = op.insert_many(values[lo:hi] if mode == "list" else np.asarray(values[lo:hi]), ts[lo:hi])
            assert e.dtype == np.int64 and len(e) == len(res)
            ends += e.tolist()
            got += list(res)
    fe, fr = op.flush()
    op.close()
    ends += fe.tolist()
    got += list(fr)

    assert [x for part in late for x in part] == [x for part in want_late for x in part]
    assert fed == ref_fed  # the inner operator received the same tuples in the same order
    assert ends == want_ends
    if agg in ("sum", "mean"):  # another order of the same additions: the spec's rounding floor (the oracle's)
        want = [Want(w, _sum_floor(values)) if isinstance(w, float) else w for w in want]
    assert_results_equal(agg, got, want, values)


@pytest.mark.parametrize("alg", ["sba", "two_stacks"])
def test_in_order_batches_go_to_the_inner_operator_in_one_call(alg):
    rng = np.random.default_rng(3)
    ts = np.cumsum(rng.integers(0, 3, 1000))
    values = rng.normal(size=1000)
    win = pr.TimeWindow(range=50, slide=10)
    for lateness in (0, 20):
        op = pr.create(alg, win, "max", allowed_lateness=lateness)
        calls = []
        many, step = op.inner.insert_many, op.inner._step
        op.inner.insert_many = lambda v, t: calls.append(len(v)) or many(v, t)
        op.inner._step = lambda p, t: pytest.fail("_step") if not calls else step(p, t)
        e1, r1 = op.insert_many(values[:500], ts[:500])
        e2, r2 = op.insert_many(values[500:], ts[500:])
        buffered = op.stats()["buffered"]
        fe, fr = op.flush()
        assert (lateness == 0) == (buffered == 0)
        assert len(calls) == 2 + (buffered > 0) and sum(calls) == 1000  # flush: one call for the buffer
        assert calls[2:] == ([buffered] if buffered else [])
        plain = pr.sliding_aggregate(values, window=win, agg="max", algorithm=alg, timestamps=ts)
        assert np.concatenate([e1, e2, fe]).tolist() == plain[0].tolist()
        assert np.concatenate([r1, r2, fr]).tolist() == plain[1].tolist()


def test_a_refused_batch_changes_nothing():
    win = pr.TimeWindow(range=10, slide=5)
    for agg, bad, err, match in (
        ("max", ["x", 1.0], TypeError, "real numbers"),
        ("max", [[1.0], [2.0]], ValueError, "one-dimensional"),
        ("geomean", [2.0, -1.0], ValueError, "value must be >= 0"),  # the per-tuple path's message
    ):
        op = pr.create("sba", win, agg, allowed_lateness=4)
        op.insert_many([1.0, 2.0, 3.0], [3, 9, 1])  # 9 waits, 1 is late
        before = buffer_state(op)
        with pytest.raises(err, match=match):
            op.insert_many(bad, [20, 21])
        with pytest.raises(TypeError, match="integers"):
            op.insert_many([1.0, 2.0], [20.0, 21.5])
        with pytest.raises(ValueError, match="one timestamp per value"):
            op.insert_many([1.0, 2.0], [20])
        assert buffer_state(op) == before
        assert op.take_late() == [(3.0, 1)]
        assert op.flush()[0].tolist() == [5, 10, 15]


def test_the_buffer_does_not_share_the_callers_arrays():
    values, ts = np.array([1.0, 2.0, 5.0]), np.array([1, 2, 4])
    op = pr.create("sba", pr.TimeWindow(range=4, slide=4), "sum", allowed_lateness=3)
    assert op.insert_many(values, ts)[0].tolist() == []  # in order; watermark 1: 2 and 4 wait
    values[:] = 100.0  # a source reusing its buffers
    ts[:] = 0
    assert op.flush()[1].tolist() == [3.0, 5.0]


def test_values_only_the_scalar_lift_accepts_and_huge_timestamps_go_tuple_by_tuple():
    top = pr.Aggregation(lift=float, combine=max, lower=float, identity=float("-inf"), ufunc=np.maximum, name="top")
    win = pr.TimeWindow(range=10, slide=10)
    op = pr.create("sba", win, top, allowed_lateness=5)
    assert op.insert_many([1.0, 2.0], [3, 12])[0].tolist() == []
    e, r = op.insert_many(["7.5", 4], [8, 30])  # strings: not for the vectorised path, fine for float()
    assert (e.tolist(), r.tolist()) == ([10], [7.5])
    assert op.flush()[1].tolist() == [2.0, 4.0]
    big = 2**63 - 100
    for lateness in (3, 10**30):
        op = pr.create("sba", win, "max", allowed_lateness=lateness)
        ref = pr.create("sba", win, "max", allowed_lateness=lateness)
        batch = ([1.0, 2.0, 3.0, 4.0], [big - 40, big - 20, big - 42, big - 30])
        e, r = op.insert_many(*batch)
        want = [x for v, t in zip(*batch) for x in ref.insert(v, t)]
        assert list(zip(e.tolist(), r.tolist())) == want
        assert op.take_late() == ref.take_late() and buffer_state(op) == buffer_state(ref)
        assert op.flush()[1].tolist() == ref.flush()[1].tolist()


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
