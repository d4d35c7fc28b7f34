"""Core behaviour: chunk manager theorems, PBA == SBA bit for bit, state bounds, stats and bad input."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import time_windows

import pba_runtime as pr
from pba_runtime.chunking import CostModel, generalized_chunk_size


# ----------------------------------------------------------------------------- chunk manager
def test_theorem1_known_values():
    assert pr.theorem1(32, 1) == 17
    assert pr.optimal_chunk_size(pr.CountWindow(range=32, slide=1)) == 17
    for n in range(1, 3000):
        assert pr.theorem1(n, 1) == (n + 2) // 2 or n <= 2


@given(r=st.integers(1, 5000), s=st.integers(1, 200))
def test_theorem1_gives_one_chunk_per_window(r, s):
    if s > r:
        return
    b = pr.theorem1(r, s)
    assert 1 <= b <= r // s
    assert (r // s) // b == 1  # k == 1: at most 3 parts per window


@given(r=st.integers(1, 2000), s=st.integers(1, 100))
def test_generalized_reduces_to_theorem1_with_equal_costs(r, s):
    if s > r:
        return
    assert generalized_chunk_size(r, s, CostModel(worker=1.0, launch=0.0)) == pr.theorem1(r, s)


def test_generalized_prefers_larger_chunks_when_worker_is_cheap():
    b_eq = generalized_chunk_size(8192, 1, CostModel(1.0, 0.0))
    b_fast = generalized_chunk_size(8192, 1, CostModel(0.02, 200.0))
    assert b_eq == 4097
    assert b_eq < b_fast <= 8192
    # and never fewer than q//2 + 1 (k == 1) when the worker is slow
    assert generalized_chunk_size(8192, 1, CostModel(50.0, 10_000.0)) == 4097


def test_theorem2():
    # slides much longer than a combine: one chunk per window
    assert pr.theorem2(3_600_000, 1_000, 1e-4) == 3600
    # a combine as long as the slide: Theorem 2's second case, still k == 1
    b = pr.theorem2(100, 1, 1.0)
    assert 1 <= b <= 100 and 100 // b == 1
    assert pr.optimal_chunk_size(pr.TimeWindow(range=60_000, slide=1_000), combine_cost=1e-4) == 60
    with pytest.raises(ValueError, match="combine_cost"):
        pr.theorem2(10, 1, 0)


# ----------------------------------------------------------------------------- PBA == SBA
@pytest.mark.parametrize("agg", ["sum", "std", "mean", "max", "argmax", "moment_sketch", "collect"])
@given(data=st.data())
def test_pba_equals_sba_bit_for_bit(agg, data):
    r = data.draw(st.integers(2, 60))
    s = data.draw(st.integers(1, max(1, r // 3)))
    n = data.draw(st.integers(0, 400))
    seed = data.draw(st.integers(0, 2**32 - 1))
    q = r // s
    chunk = data.draw(st.integers(max(1, q // 2 + 1), q))
    workers = data.draw(st.integers(1, 3))
    values = np.random.default_rng(seed).uniform(0.5, 100.0, n)
    win = pr.CountWindow(range=r, slide=s)
    with pr.WorkerPool(kind="thread", workers=workers) as pool:
        with pr.create("pba", win, agg, pool=pool, chunk_size=chunk) as pba, \
                pr.create("sba", win, agg, chunk_size=chunk) as sba:
            got = [res for v in values for _, res in pba.insert(v)]
            want = [res for v in values for _, res in sba.insert(v)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(g, float) and math.isnan(g):
            assert math.isnan(w)
        else:
            assert np.array_equal(np.asarray(g), np.asarray(w)), (g, w)


def _three_part_reference(values, q, b, combine):
    """Every count window (slide 1) as ``(lcs[j] (+) ca...) (+) csa`` (``ca`` for ``j == 0``), in plain Python."""
    chunks = [values[c:c + b] for c in range(0, len(values), b)]
    out = []
    for k in range(len(values) - q + 1):
        last = k + q - 1
        cf, cl, j = k // b, last // b, k % b
        part = chunks[cf]
        if cf == cl:
            acc = part[j]
            for v in part[j + 1:last % b + 1]:
                acc = combine(acc, v)
            out.append(acc)
            continue
        if j:  # lcs[j], right to left
            first = part[-1]
            for v in reversed(part[j:-1]):
                first = combine(v, first)
        else:  # the whole front chunk: its ca, left to right
            first = part[0]
            for v in part[1:]:
                first = combine(first, v)
        for c in range(cf + 1, cl):  # ca of each middle chunk, left to right
            ca = chunks[c][0]
            for v in chunks[c][1:]:
                ca = combine(ca, v)
            first = combine(first, ca)
        csa = chunks[cl][0]
        for v in chunks[cl][1:last % b + 1]:
            csa = combine(csa, v)
        out.append(combine(first, csa))
    return out


@pytest.mark.parametrize("agg, combine", [("sum", lambda a, b: a + b), ("max", lambda a, b: a if a >= b else b)])
@given(data=st.data())
def test_per_tuple_windows_follow_the_three_part_formula(agg, combine, data):
    """The per-tuple path (incl. its lcs (+) ca_middle precompute) groups and orders combines as the paper's merge."""
    q = data.draw(st.integers(2, 70))
    b = data.draw(st.integers(1, q))
    n = data.draw(st.integers(0, 300))
    values = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).uniform(-1e3, 1e3, n).tolist()
    want = _three_part_reference(values, q, b, combine)
    for algo in ("sba", "pba"):
        with pr.create(algo, pr.CountWindow(range=q, slide=1), agg, chunk_size=b) as op:
            got = [res for v in values for _, res in op.insert(v)]
        assert got == want, (algo, q, b)  # floats compared exactly: same bits for sum


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 4097, 3 * 4096 + 5])
@pytest.mark.parametrize("first, step", [(0, 1), (-7, 3), (1 << 40, 1000)])
def test_window_ends_fill_is_arange(n, first, step):
    from pba_runtime.merge import fill_ends as _fill_ends

    dst = np.empty(n, dtype=np.int64)
    _fill_ends(dst, first, step)
    assert np.array_equal(dst, first + step * np.arange(n, dtype=np.int64))


@pytest.mark.parametrize("agg", ["sum", "std", "mean", "max", "argmax", "moment_sketch"])
@given(data=st.data())
def test_batch_merge_is_the_same_in_every_mode(agg, data):
    """The batch merge's modes (2-D calls or row by row; one thread or a split, with the worker taking the
    last row's lcs; NaN-free rows on the faster loop) give the same windows bit for bit, and those are the
    windows' aggregates."""
    from pba_runtime import batch, merge

    kernel = pr.get_aggregation(agg).kernel
    n = data.draw(st.integers(1, 400), label="n")
    q = data.draw(st.integers(1, n), label="q")
    nwin = n - q + 1
    x = np.random.default_rng(n * 1000 + q).normal(10.0, 3.0, n)
    if agg == "moment_sketch":
        x = np.abs(x)  # its log terms need values >= 0
    x[data.draw(st.lists(st.integers(0, n - 1), max_size=3), label="NaN at")] = np.nan  # rows with and without
    X = kernel.lift(x, np.arange(n, dtype=np.int64))
    first, step = data.draw(st.integers(-50, 50)), data.draw(st.integers(1, 9))
    min_rows = data.draw(st.integers(2, 6), label="rows per 2-D call")  # above R/2: the worker's share grows
    runs = []
    with pr.WorkerPool(kind="thread", workers=1) as pool, pytest.MonkeyPatch.context() as monkeypatch:
        for row_mode, parallel in [(False, False), (True, False), (False, True), (True, True)]:
            monkeypatch.setattr(merge, "ROW_MODE_MIN_Q", 1 if row_mode else 1 << 30)
            monkeypatch.setattr(merge, "MIN_ROWS_PER_CALL", min_rows)
            monkeypatch.setattr(merge, "MIN_ELEMENTS_PER_CALL", 8)
            monkeypatch.setattr(batch, "PARALLEL_BATCH_MIN", 1 if parallel else 1 << 60)
            runs.append(batch.windows_with_ends(kernel, X, q, nwin, first, step, pool))
    ends0, out0 = runs[0]
    assert np.array_equal(ends0, first + step * np.arange(nwin))
    for ends, out in runs[1:]:
        assert np.array_equal(ends, ends0) and np.array_equal(out, out0, equal_nan=True)
    assert np.array_equal(batch.window_merge(kernel, X, q, nwin), out0, equal_nan=True)
    want = np.stack([kernel.reduce_segments(X[a : a + q], np.array([0]))[0] for a in range(nwin)])
    np.testing.assert_allclose(kernel.lower(out0), kernel.lower(want), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("agg", ["sum", "std", "max", "argmax"])
def test_batch_pba_equals_sba_bit_for_bit(agg):
    """The parallel batch path splits chunk rows between threads; each window's arithmetic is unchanged."""
    x = np.random.default_rng(7).uniform(0.5, 100.0, 300_000)
    x[100_000:100_003] = np.nan  # some rows with a NaN, most without (max/min take a faster loop on those)
    for r, s in [(1000, 1), (4096, 3), (65536, 1)]:
        win = pr.CountWindow(range=r, slide=s)
        with pr.WorkerPool(kind="thread", workers=2) as pool:
            e1, r1 = pr.sliding_aggregate(x, window=win, agg=agg, algorithm="pba", pool=pool)
        e2, r2 = pr.sliding_aggregate(x, window=win, agg=agg, algorithm="sba")
        assert np.array_equal(e1, e2)
        assert np.array_equal(r1, r2, equal_nan=True)


def test_pools_restore_the_gil_switch_interval(monkeypatch):
    """The first pool lowers the interval, the last one to close puts the previous value back."""
    import sys

    import pba_runtime.pool.executor as pool_mod

    monkeypatch.setattr(pool_mod, "_switch_interval", pool_mod._SwitchInterval())  # apart from pools still open
    old = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        a, b = pr.WorkerPool(kind="thread"), pr.WorkerPool(kind="thread")
        low = pytest.approx(pool_mod.THREAD_SWITCH_INTERVAL)  # CPython keeps whole microseconds
        assert sys.getswitchinterval() == low
        a.close()
        a.close()  # idempotent: releases once
        assert sys.getswitchinterval() == low
        b.close()
        assert sys.getswitchinterval() == pytest.approx(0.005)
    finally:
        sys.setswitchinterval(old)


def test_pba_builds_lcs_in_the_pool_and_counts_stalls():
    win = pr.CountWindow(range=64, slide=1)
    with pr.WorkerPool(kind="thread", workers=1) as pool, pr.create("pba", win, "max", pool=pool) as op:
        for v in range(2000):
            op.insert(float(v % 37))
        st_ = op.stats()
    assert st_["algorithm"] == "pba" and st_["pool"] == "thread"
    assert st_["chunks"] >= 2000 // 64 and st_["lcs_tasks"] == st_["chunks"]
    assert 0 <= st_["stalls"] <= st_["lcs_tasks"] and st_["stall_time"] >= 0.0
    assert st_["tuples"] == 2000 and st_["windows"] == 2000 - 63


def test_closed_pool_falls_back_to_building_lcs_inline():
    pool = pr.WorkerPool(kind="thread", workers=1)
    win = pr.CountWindow(range=16, slide=1)
    op = pr.create("pba", win, "sum", pool=pool)
    out = [res for v in range(20) for _, res in op.insert(float(v))]
    pool.close()
    out += [res for v in range(20, 100) for _, res in op.insert(float(v))]
    assert op.stats()["fallbacks"] > 0
    assert out == [float(sum(range(k, k + 16))) for k in range(100 - 15)]
    op.close()


def test_worker_exception_never_loses_a_result(monkeypatch):
    import pba_runtime.algorithms.chunks as store_mod

    calls = {"n": 0}
    real = store_mod.build_lcs

    def flaky(agg, saa):
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            raise RuntimeError("worker crashed")
        return real(agg, saa)

    monkeypatch.setattr(store_mod, "build_lcs", flaky)
    win = pr.CountWindow(range=10, slide=1)
    with pr.create("pba", win, "max") as op:
        got = [res for v in range(200) for _, res in op.insert(float((v * 7) % 23))]
    want = [max((v * 7) % 23 for v in range(k, k + 10)) for k in range(191)]
    assert got == [float(w) for w in want]


# ----------------------------------------------------------------------------- state
def test_state_is_linear_in_the_window():
    """At most three chunks of partials (the paper's 3b* + 2)."""
    for r in (256, 4096):
        win = pr.CountWindow(range=r, slide=1)
        with pr.create("sba", win, "max") as op:
            for v in range(5 * r):
                op.insert(float(v))
            b = op.chunk_size
            # saa + lcs of at most 3 chunks, 8 bytes each
            assert op.state_bytes() <= 2 * 8 * (3 * b + 2)
            assert len(op._chunks) <= 3


def test_snapshot_is_picklable_and_checked():
    win = pr.CountWindow(range=8, slide=2)
    with pr.create("pba", win, "sum") as op:
        op.insert_many(np.arange(13.0))
        state = op.snapshot()
    pickle.dumps(state)
    with pr.create("sba", win, "sum") as other, pytest.raises(ValueError, match="algorithm"):
        other.restore(state)
    with pr.create("pba", pr.CountWindow(range=8, slide=1), "sum") as other, pytest.raises(ValueError, match="window"):
        other.restore(state)
    with pr.create("pba", win, "sum") as op2:
        op2.restore(state)
        assert op2.insert(13.0) == [(14, float(sum(range(6, 14))))]


def test_auto_picks_sba_for_small_and_pba_for_large_windows():
    assert pr.resolve_auto(pr.CountWindow(range=16, slide=1)) == "sba"
    assert pr.resolve_auto(pr.CountWindow(range=1 << 14, slide=1)) == "sba"
    assert pr.resolve_auto(pr.CountWindow(range=1 << 15, slide=1)) == "pba"
    with pr.create("auto", pr.CountWindow(range=1 << 15, slide=1), "max") as op:
        assert op.name == "pba"
    # a Python-loop lcs makes SBA's boundary pause long sooner
    py_max = pr.Aggregation(lift=float, combine=max, lower=float, identity=float("-inf"))
    assert pr.resolve_auto(pr.CountWindow(range=1 << 13, slide=1), py_max) == "pba"
    with pr.create("auto", pr.CountWindow(range=1 << 13, slide=1), py_max) as op:
        assert op.name == "pba"


def test_insert_returns_python_results():
    with pr.create("pba", pr.CountWindow(range=2, slide=1), "count") as op:
        assert op.insert(1.0) == []
        (end, res), = op.insert(2.0)
        assert (end, res) == (2, 2) and type(res) is int
    with pr.create("pba", pr.CountWindow(range=2, slide=1), "moment_sketch") as op:
        op.insert(1.0)
        _, res = op.insert(2.0)[0]
        assert isinstance(res, np.ndarray) and res.shape == (23,)
    ends, res = pr.sliding_aggregate([1.0, 2.0, 3.0], window=pr.CountWindow(range=2, slide=1), agg="moment_sketch")
    assert res.shape == (2, 23)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: pr.CountWindow(range=0, slide=1), ValueError, "range"),
        (lambda: pr.CountWindow(range=-4, slide=1), ValueError, "range"),
        (lambda: pr.CountWindow(range=4, slide=0), ValueError, "slide"),
        (lambda: pr.CountWindow(range=4.5, slide=1), TypeError, "range"),
        (lambda: pr.CountWindow(range="4", slide=1), TypeError, "range"),
        (lambda: pr.CountWindow(range=True, slide=1), TypeError, "range"),
        (lambda: pr.CountWindow(range=4, slide=5), ValueError, "slide must be <= range"),
        (lambda: pr.TimeWindow(range=10, slide=5, offset=1.5), TypeError, "offset"),
        (lambda: pr.get_aggregation("median"), ValueError, "accepted: argmax"),
        (lambda: pr.get_aggregation(3), TypeError, "agg"),
        (lambda: pr.create("fastest", pr.CountWindow(range=4, slide=1), "max"), ValueError, "accepted: "),
        (lambda: pr.create("pba", "W[4,1]", "max"), TypeError, "window"),
        (lambda: pr.create("pba", pr.CountWindow(range=4, slide=1), "max", chunk_size=5), ValueError, "chunk_size"),
        (lambda: pr.create("pba", pr.CountWindow(range=4, slide=1), "max", pool="threads"), TypeError, "pool"),
        (lambda: pr.WorkerPool(kind="gpu"), ValueError, "kind"),
        (lambda: pr.WorkerPool(workers=0), ValueError, "workers"),
        (lambda: pr.Aggregation(lift=1, combine=max, lower=float, identity=0.0), TypeError, "lift"),
    ],
)
def test_bad_configuration_is_refused_clearly(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.parametrize("alg", ["recal", "sba", "pba"])
def test_bad_values_and_timestamps(alg):
    cw = pr.CountWindow(range=3, slide=1)
    tw = pr.TimeWindow(range=10, slide=5)
    with pr.create(alg, cw, "max") as op:
        with pytest.raises(TypeError, match="value must be a real number"):
            op.insert("7")
        with pytest.raises(TypeError, match="real numbers"):
            op.insert_many(["1", "2"])
        with pytest.raises(TypeError, match="value must be a real number"):
            op.insert(None)
        # nothing was changed by the refused input
        assert [op.insert(v) for v in (1.0, 2.0, 3.0)][-1] == [(3, 3.0)]
    with pr.create(alg, cw, "geomean") as op, pytest.raises(ValueError, match="geomean"):
        op.insert(-1.0)
    with pr.create(alg, tw, "sum") as op:
        with pytest.raises(ValueError, match="timestamp is required"):
            op.insert(1.0)
        with pytest.raises(TypeError, match="timestamp must be an integer"):
            op.insert(1.0, 1.5)
        op.insert(1.0, 100)
        with pytest.raises(ValueError, match="non-decreasing"):
            op.insert(1.0, 99)
        with pytest.raises(ValueError, match="non-decreasing"):
            op.insert_many([1.0, 2.0], [120, 110])
        with pytest.raises(ValueError, match="non-decreasing"):
            op.insert_many([1.0], [50])
        with pytest.raises(ValueError, match="one timestamp per value"):
            op.insert_many([1.0, 2.0], [120])
        with pytest.raises(TypeError, match="integers"):
            op.insert_many([1.0], [120.5])
        # still consistent after the refusals
        ends, res = op.insert_many([2.0, 3.0], [104, 111])
        assert ends.tolist() == [105, 110] and res.tolist() == [3.0, 3.0]
        fe, fr = op.flush()
        assert fe.tolist() == [115, 120] and fr.tolist() == [3.0, 3.0]
        with pytest.raises(ValueError, match="flushed"):
            op.insert(1.0, 200)


def test_user_aggregation_with_float_lower_is_lifted():
    """The per-tuple fast path must not skip a user lift (here: absolute value)."""
    agg = pr.Aggregation(lift=lambda v: abs(float(v)), combine=max, lower=float, identity=0.0, name="absmax")
    for alg in ("sba", "pba"):
        with pr.create(alg, pr.CountWindow(range=2, slide=1), agg) as op:
            assert [res for v in (-5.0, 1.0, -2.0) for _, res in op.insert(v)] == [5.0, 2.0]


@pytest.mark.parametrize("alg", ["recal", "sba", "pba"])
def test_iterables_and_repeated_flush(alg):
    with pr.create(alg, pr.CountWindow(range=2, slide=1), "sum") as op:
        ends, res = op.insert_many(float(v) for v in range(4))
        assert ends.tolist() == [2, 3, 4] and res.tolist() == [1.0, 3.0, 5.0]
        assert op.flush()[0].tolist() == [] and op.flush()[0].tolist() == []


@pytest.mark.parametrize("alg", ["sba", "pba"])
def test_std_keeps_tiny_variances_beside_large_values(alg):
    """Reported by the baselines work: a suffix of tiny values must not be shifted by a far-away mean."""
    win = pr.TimeWindow(range=9, slide=1)
    values, ts = [567.0, 0.0, 1e-5, 0.0], [-10, -3, -2, 0]
    _, want = time_windows(values, ts, 9, 1, "std")
    for run in ("tuples", "batch"):
        with pr.create(alg, win, "std") as op:
            if run == "tuples":
                got = [res for v, t in zip(values, ts) for _, res in op.insert(v, t)]
            else:
                got = list(op.insert_many(values, ts)[1])
            got += list(op.flush()[1])
        np.testing.assert_allclose(got, want, rtol=1e-9, equal_nan=True)


@pytest.mark.parametrize("alg", ["recal", "sba", "pba", "two_stacks", "daba", "flatfat", "fiba"])
def test_snapshot_is_a_copy_not_a_view(alg):
    """Reported by the runtime work: later inserts must not change an earlier snapshot."""
    win = pr.TimeWindow(range=2000, slide=500)
    t = np.arange(0, 60_000, 7)
    v = np.random.default_rng(0).random(len(t))
    for lateness in (None, 0):
        opts = {} if lateness is None else {"allowed_lateness": lateness}
        with pr.create(alg, win, "max", **opts) as op:
            op.insert_many(v[:5000], t[:5000])
            for i in range(5000, 5050):
                op.insert(float(v[i]), int(t[i]))
            snap = op.snapshot()
            before = pickle.dumps(snap)
            op.insert_many(v[5050:5400], t[5050:5400])
            for i in range(5400, 5500):
                op.insert(float(v[i]), int(t[i]))
            assert pickle.dumps(snap) == before


@pytest.mark.parametrize("alg", ["sba", "pba"])
@pytest.mark.parametrize("agg", ["max", "sum", "count", "collect", "mean"])
@given(data=st.data())
def test_mixed_inserts_batches_and_snapshots(alg, agg, data):
    """One stream fed through single inserts, batches, stats() and snapshot/restore in any order."""
    from oracle import assert_results_equal, count_windows

    r = data.draw(st.integers(1, 40))
    s = data.draw(st.sampled_from([1, 1, 1, data.draw(st.integers(1, r))]))
    q = r // s
    chunk = data.draw(st.one_of(st.none(), st.integers(1, q)))
    values = data.draw(st.lists(st.integers(-20, 20).map(float), max_size=150))
    opts = {} if chunk is None else {"chunk_size": chunk}
    win = pr.CountWindow(range=r, slide=s)
    op = pr.create(alg, win, agg, **opts)
    got_ends, got = [], []
    i = 0
    while i < len(values):
        step = data.draw(st.sampled_from(["one", "one", "batch", "snap", "stats"]))
        if step == "one":
            for e, res in op.insert(values[i]):
                got_ends.append(e)
                got.append(res)
            i += 1
        elif step == "batch":
            j = data.draw(st.integers(i, len(values)))
            e, res = op.insert_many(values[i:j])
            got_ends += e.tolist()
            got += list(res)
            i = j
        elif step == "snap":
            state = pickle.loads(pickle.dumps(op.snapshot()))
            op.close()
            op = pr.create(alg, win, agg, **opts).restore(state)
        else:
            assert op.stats()["tuples"] == i
    st_ = op.stats()
    op.close()
    want_ends, want = count_windows(values, r, s, agg)
    assert got_ends == want_ends
    assert st_["windows"] == len(want_ends) and st_["tuples"] == len(values)
    assert_results_equal(agg, got, want, values)


def test_lateness_snapshot_is_refused_by_a_plain_operator():
    win = pr.TimeWindow(range=10, slide=5)
    with pr.create("sba", win, "max", allowed_lateness=3) as op:
        op.insert(1.0, 4)
        state = op.snapshot()
    with pr.create("sba", win, "max") as plain, pytest.raises(ValueError, match="allowed_lateness"):
        plain.restore(state)


def test_failed_batch_merge_task_is_redone_on_the_main_thread():
    """Reported by the Spark adapter work: a pool task that fails must not fail insert_many."""
    from concurrent.futures import Future

    class FailingPool(pr.WorkerPool):
        def submit(self, fn, *args):
            f = Future()
            f.set_exception(RuntimeError("worker died"))
            return f

    x = np.random.default_rng(0).random(300_000)
    win = pr.CountWindow(range=1024, slide=1)
    with FailingPool(kind="thread", workers=1) as pool, pr.create("pba", win, "max", pool=pool) as op:
        ends, res = op.insert_many(x)
        assert op.stats()["tuples"] == len(x)
    want_ends, want = pr.sliding_aggregate(x, window=win, agg="max", algorithm="sba")
    assert np.array_equal(ends, want_ends) and np.array_equal(res, want)


# ----------------------------------------------------------------------------- a late worker
def _late_run(pool, values, win, agg, *, snapshot_at=None):
    """Per-tuple PBA over ``values``; with ``snapshot_at``, snapshot there, restore into a new PBA, go on."""
    op = pr.create("pba", win, agg, pool=pool)
    out = []
    for i, v in enumerate(values):
        if i == snapshot_at:
            state = pickle.loads(pickle.dumps(op.snapshot()))
            late = op.stats()
            op.close()
            op = pr.create("pba", win, agg, pool=pool).restore(state)
        out += [res for _, res in op.insert(v)]
    st_ = op.stats()
    op.close()
    return out, st_, (late if snapshot_at is not None else None)


@pytest.mark.parametrize("agg", ["max", "sum", "collect"])
def test_pba_takes_back_lcs_tasks_the_worker_has_not_started(agg):
    """The pool's one worker is held by an event: no lcs task starts, the main loop takes each back (cancels it)
    and builds it itself, never waiting; results equal SBA's per tuple; stats count the help."""
    import threading

    win = pr.CountWindow(range=64, slide=1)
    vals = [float(v) for v in np.random.default_rng(4).integers(0, 50, 1500)]
    with pr.create("sba", win, agg) as ref:
        want = [res for v in vals for _, res in ref.insert(v)]
    gate = threading.Event()
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        pool.submit(gate.wait, 30)  # the worker is busy until the gate opens
        try:
            got, st_, _ = _late_run(pool, vals, win, agg)
        finally:
            gate.set()
    assert got == want
    assert st_["worker_late"] == st_["lcs_taken_back"] == st_["stalls"] >= 1500 // st_["chunk_size"] - 3
    assert st_["lcs_built_inline"] == 0 and st_["fallbacks"] == 0


def test_pba_builds_beside_a_worker_that_is_late_mid_task(monkeypatch):
    """Each lcs task starts, then waits on an event (a worker descheduled mid-build): the main loop builds the lcs
    beside it into its own buffer and drops the worker's result; the tasks queued behind are taken back. A
    snapshot taken with tasks still running restores to the same results. Then the worker finishes unread."""
    import threading

    from pba_runtime.algorithms import chunks as chunk_store

    real = chunk_store.build_lcs
    gate = threading.Event()
    started = []

    def slow_build(agg, saa):
        started.append(1)
        gate.wait(30)
        return real(agg, saa)

    monkeypatch.setattr(chunk_store, "build_lcs", slow_build)
    win = pr.CountWindow(range=40, slide=1)
    vals = [float(v) for v in np.random.default_rng(6).integers(-9, 9, 900)]
    with pr.create("sba", win, "sum") as ref:
        want = [res for v in vals for _, res in ref.insert(v)]
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        try:
            got, st_, mid = _late_run(pool, vals, win, "sum", snapshot_at=450)
        finally:
            gate.set()
    assert got == want
    assert started and mid["lcs_built_inline"] >= 1 and st_["lcs_built_inline"] >= 1
    assert mid["worker_late"] == mid["lcs_built_inline"] + mid["lcs_taken_back"] == mid["stalls"]
    assert st_["fallbacks"] == 0


def test_pba_state_of_an_older_version_restores_without_the_help_counters():
    win = pr.CountWindow(range=8, slide=1)
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        with pr.create("pba", win, "max", pool=pool) as op:
            for v in range(20):
                op.insert(float(v))
            state = op.snapshot()
        for k in ("_worker_late", "_lcs_taken_back", "_lcs_built_inline"):
            del state["state"][k]
        with pr.create("pba", win, "max", pool=pool).restore(state) as op2:
            assert op2.insert(30.0)[0][1] == 30.0
            assert op2.stats()["worker_late"] == 0
