"""The streaming per-key step without Spark: micro-batches, rebuilt operators, chunks and watermarks.

Every run is compared bit for bit with one operator over the key's whole stream
(the batch path), whatever the cut into micro-batches, the chunk size, or
whether the worker kept the operator between micro-batches.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracle import EXACT, assert_results_equal  # tests/oracle.py (on the path: conftest)

import pba_runtime as pr
from spark_integration.stream_key import DictState, KeyWindows, StepConfig
from spark_integration.stream_state import Header, OperatorCache

AGGS = ["max", "sum", "mean", "std", "argmax", "collect", "count"]


def whole(window, agg, values, ts=None):
    """The batch answer: one operator over the whole (sorted) stream, flushed."""
    op = pr.create("sba", window, agg)
    e1, r1 = op.insert_many(values, ts)
    e2, r2 = op.flush()
    return list(e1) + list(e2), list(r1) + list(r2)


def as_list(res):
    if res is None:
        return []
    return [x.tolist() if isinstance(x, np.ndarray) else x for x in res]


def same(got, want, agg, values):
    """Bit for bit for the exact aggregations; the spec's rounding (relative 1e-9) for the others."""
    if agg not in EXACT:
        assert_results_equal(agg, got, want, values[np.isfinite(values)])
        return
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.tolist() if isinstance(g, np.ndarray) else g
        w = w.tolist() if isinstance(w, np.ndarray) else w
        assert np.array_equal(np.asarray(g, dtype=float), np.asarray(w, dtype=float), equal_nan=True), (g, w)


def values_of(rng, n):
    v = rng.normal(size=n) * 10
    v[rng.random(n) < 0.05] = np.nan
    v[rng.random(n) < 0.05] = 1e12
    v[rng.random(n) < 0.03] = -0.0
    return v


def cuts(rng, n, pieces):
    return np.unique(np.concatenate([[0, n], rng.integers(0, n + 1, pieces)]))


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("r,s", [(5, 2), (7, 7), (16, 1), (3, 2)])
def test_count_windows_equal_the_batch_run(agg, r, s):
    rng = np.random.default_rng(r * 100 + s)
    n = 200
    vals = values_of(rng, n)
    win = pr.CountWindow(range=r, slide=s)
    want_e, want_r = whole(win, agg, vals)
    for chunk_rows, forget in [(3, False), (3, True), (64, True), (1000, False)]:
        step = KeyWindows(StepConfig(win, agg, algorithm="sba", chunk_rows=chunk_rows, namespace=f"c{chunk_rows}{forget}"))
        st = DictState()
        ends, res = [], []
        b = cuts(rng, n, 12)
        for lo, hi in zip(b[:-1], b[1:]):
            if forget:
                step.cache.clear()  # another worker: the operator is rebuilt from the stored tail
            order = np.arange(lo, hi)
            perm = rng.permutation(hi - lo)  # a micro-batch's rows come in any order: sorted by order
            out = step.process(st, "k", order[perm], vals[lo:hi][perm], None)
            ends += out.ends.tolist()
            res += as_list(out.results)
            assert not len(out.late_order)
        assert ends == list(want_e)
        same(res, want_r, agg, vals)
        hdr = Header.from_blob(st.header)
        assert hdr.n == n and hdr.late == 0
        # only the tail is kept: less than a window's rows plus a chunk
        kept = (hdr.next_chunk - hdr.first_chunk) * chunk_rows + len(hdr.open_t)
        assert kept <= r + chunk_rows
        assert set(st.chunk_map) == set(range(hdr.first_chunk, hdr.next_chunk))


def test_count_windows_late_rows_are_counted_and_returned():
    step = KeyWindows(StepConfig(pr.CountWindow(range=2, slide=1), "sum", namespace="late"))
    st = DictState()
    step.process(st, "k", np.array([10, 20]), np.array([1.0, 2.0]), None)
    out = step.process(st, "k", np.array([15, 20, 30]), np.array([5.0, 3.0, 4.0]), None)
    assert out.late_order.tolist() == [15] and out.late_value.tolist() == [5.0]
    assert out.ends.tolist() == [3, 4] and out.results.tolist() == [5.0, 7.0]  # a tie (20) is not late
    assert Header.from_blob(st.header).late == 1


@pytest.mark.parametrize("pre", [True, False])
@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("r,s,offset", [(10, 3, 0), (6, 6, 2), (25, 5, -3), (9, 1, 0)])
def test_time_windows_equal_the_batch_run(agg, r, s, offset, pre):
    rng = np.random.default_rng(r * 7 + s)
    n = 300
    ts = np.sort(rng.integers(1, 1500, n))  # repeated timestamps, gaps
    ts[100:120] = ts[100]
    vals = values_of(rng, n)
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    want_e, want_r = whole(win, agg, vals, ts)
    delay = 40
    for chunk_rows, forget in [(4, False), (4, True), (1000, True)]:
        step = KeyWindows(StepConfig(win, agg, algorithm="sba", chunk_rows=chunk_rows, preaggregate=pre,
                                     namespace=f"t{chunk_rows}{forget}"))
        st = DictState()
        ends, res = [], []
        b = cuts(rng, n, 25)
        wm = 0
        for lo, hi in zip(b[:-1], b[1:]):
            if forget:
                step.cache.clear()
            # ties in event time have no order in a stream: collect (which shows the order) gets them in order
            perm = np.arange(hi - lo) if agg == "collect" else rng.permutation(hi - lo)
            # rows arrive out of order within the delay: only rows above the watermark come
            out = step.process(st, "k", ts[lo:hi][perm], vals[lo:hi][perm], wm)
            assert not len(out.late_order)
            ends += out.ends.tolist()
            res += as_list(out.results)
            wm = max(wm, int(ts[lo:hi].max()) - delay) if hi > lo else wm
            wm = min(wm, int(ts[hi]) - 1) if hi < n else wm  # no later row behind it
            assert ends == sorted(ends)
        for final in (10**6, 10**6 + 5):  # the final watermark: a timer or an idle micro-batch
            out = step.process(st, "k", np.empty(0, np.int64), np.empty(0), final, fired=None)
            ends += out.ends.tolist()
            res += as_list(out.results)
        assert ends == list(want_e)
        same(res, want_r, agg, vals)
        hdr = Header.from_blob(st.header)
        assert hdr.timer == -(1 << 63) and not st.timers  # nothing left to emit: no timer
        assert len(hdr.pend_t) == 0 and hdr.next_chunk - hdr.first_chunk <= r // 1 + 2


def test_preaggregated_tail_holds_a_row_per_sub_slice():
    """W[100, 10] max, 50 rows per slide, one micro-batch per slide: the tail keeps ~11 partials, not 500 rows."""
    win = pr.TimeWindow(range=100, slide=10)
    step = KeyWindows(StepConfig(win, "max", chunk_rows=4, namespace="pre"))
    raw = KeyWindows(StepConfig(win, "max", chunk_rows=4, namespace="raw", preaggregate=False))
    a, b = DictState(), DictState()
    for i in range(40):
        t = np.arange(i * 10, i * 10 + 10, 0.2).astype(np.int64)
        v = np.sin(t + 0.5 * i)
        ea = step.process(a, "k", t, v, i * 10 - 1)
        eb = raw.process(b, "k", t, v, i * 10 - 1)
        assert ea.ends.tolist() == eb.ends.tolist() and ea.results.tolist() == eb.results.tolist()
    rows_of = [Header.from_blob(x.header) for x in (a, b)]
    kept = [(h.next_chunk - h.first_chunk) * 4 + len(h.open_t) for h in rows_of]
    assert kept[0] <= 16 and kept[1] >= 500
    big = KeyWindows(StepConfig(win, "max", chunk_rows=4096, namespace="pre-big"))  # one open chunk, trimmed
    c = DictState()
    for i in range(40):
        t = np.arange(i * 10, i * 10 + 10, 0.2).astype(np.int64)
        big.process(c, "k", t, np.sin(t + 0.5 * i), i * 10 - 1)
    h = Header.from_blob(c.header)
    assert not c.chunk_map and len(h.open_t) <= 12


def test_time_windows_late_rows_and_the_timer():
    win = pr.TimeWindow(range=10, slide=5)
    step = KeyWindows(StepConfig(win, "max", namespace="tl"))
    st = DictState()
    out = step.process(st, "k", np.array([12, 3]), np.array([1.0, 2.0]), 0)  # no watermark yet: both wait
    assert not len(out.ends) and st.timers == {5}  # the window [-5, 5) holding 3 ends first
    out = step.process(st, "k", np.array([20]), np.array([5.0]), 11)  # [-5, 5) and [0, 10) hold only 3
    assert out.ends.tolist() == [5, 10] and out.results.tolist() == [2.0, 2.0]
    assert st.timers == {15}  # 12 waits for the watermark: [5, 15) ends next
    out = step.process(st, "k", np.array([7, 11]), np.array([9.0, 8.0]), 11)  # 7 and 11 are at or behind 11
    assert out.late_order.tolist() == [7, 11] and not len(out.ends)
    st.timers.discard(15)  # Spark removes a timer when it fires
    out = step.process(st, "k", np.empty(0, np.int64), np.empty(0), 16, fired=15)  # the timer at 15 fires
    assert out.ends.tolist() == [15] and out.results.tolist() == [1.0] and st.timers == {20}
    assert Header.from_blob(st.header).late == 2


def test_state_calls_per_micro_batch_are_few():
    """A kept operator: one header read and one write per micro-batch, a chunk put only when one fills."""
    step = KeyWindows(StepConfig(pr.CountWindow(range=1000, slide=1), "max", chunk_rows=256, namespace="calls"))
    st = DictState()
    for i in range(10):
        step.process(st, "k", np.arange(i * 100, i * 100 + 100), np.ones(100), None)
    assert st.calls == {"get_header": 10, "put_header": 10, "put_chunk": 3}


def test_operator_cache_evicts_and_closes():
    closed = []
    c = OperatorCache(capacity=2, on_evict=closed.append)
    for k in "abc":
        c.put(k, b"t", k)
    assert closed == ["a"] and len(c) == 2
    assert c.take("b", b"x") is None and closed == ["a", "b"]


def test_positional_user_aggregation_is_refused_for_count_windows():
    agg = pr.Aggregation(lift=lambda v, p: v * (p % 3), combine=max, lower=float, identity=-1.0, name="pos",
                         positional=True)
    with pytest.raises(ValueError, match="positional"):
        KeyWindows(StepConfig(pr.CountWindow(range=4, slide=1), agg))


def test_a_worker_keeps_the_operators_of_a_few_queries_only():
    from spark_integration import stream_key

    first = stream_key.worker_cache("q-first", 10)
    closed = []
    first.on_evict = closed.append
    first.put("k", b"t", "op")
    for i in range(stream_key.CACHED_QUERIES):
        stream_key.worker_cache(f"q-{i}", 10)
    assert "q-first" not in stream_key._caches and closed == ["op"]


@pytest.mark.parametrize("agg", ["max", "count", "argmax", "sum"])
def test_rows_waiting_for_the_watermark_are_kept_folded(agg):
    """A micro-batch's rows wait for the next watermark as one partial per sub-slice (the header stays small),
    and the windows are those of the raw rows (bit for bit but for a float sum's rounding)."""
    win = pr.TimeWindow(range=100, slide=10)
    rng = np.random.default_rng(5)
    folded = KeyWindows(StepConfig(win, agg, chunk_rows=8, namespace=f"fold-{agg}"))
    raw = KeyWindows(StepConfig(win, agg, chunk_rows=8, namespace=f"fold-raw-{agg}", preaggregate=False))
    a, b = DictState(), DictState()
    got, want = [], []
    wm = 0
    for i in range(30):  # 500 rows per micro-batch over ~50 time units, the watermark 7 behind: a sub-slice
        t = np.sort(rng.integers(max(wm + 1, i * 50 - 5), i * 50 + 50, 500))  # gets rows after it was released
        v = np.round(rng.normal(size=500), 1)
        v[rng.random(500) < 0.02] = np.nan
        perm = rng.permutation(500)
        for step, st, res in ((folded, a, got), (raw, b, want)):
            out = step.process(st, "k", t[perm], v[perm], wm)  # any order within the micro-batch
            res.append((out.ends.tolist(), np.asarray(out.results, float).tolist()))
        assert len(Header.from_blob(a.header).pend_t) <= 7 and len(Header.from_blob(b.header).pend_t) >= 400
        wm = int(t.max()) - 7
    for (ge, gr), (we, wr) in zip(got, want):
        assert ge == we
        if agg == "sum":
            np.testing.assert_allclose(gr, wr, rtol=1e-12, atol=1e-12)
        else:
            assert np.array_equal(gr, wr, equal_nan=True)


def test_header_bytes_round_trip_and_a_foreign_layout_is_refused():
    h = Header(n=5, last=-3, emitted=9, late=2, first_chunk=1, next_chunk=3, chunk_last=np.array([4, 8]),
               open_t=np.array([1, 2]), open_v=np.array([-0.0, np.inf]), pend_t=np.array([7]),
               pend_v=np.array([np.nan]), timer=11)
    g = Header.from_blob(h.to_blob())
    assert (g.n, g.last, g.emitted, g.late, g.first_chunk, g.next_chunk, g.timer, g.token) == \
        (5, -3, 9, 2, 1, 3, 11, h.token)
    assert g.chunk_last.tolist() == [4, 8] and g.open_t.tolist() == [1, 2] and g.pend_t.tolist() == [7]
    assert np.signbit(g.open_v[0]) and np.isinf(g.open_v[1]) and np.isnan(g.pend_v[0])
    blob = bytearray(h.to_blob())
    blob[0] = 99
    with pytest.raises(ValueError, match="layout 99"):
        Header.from_blob(bytes(blob))
