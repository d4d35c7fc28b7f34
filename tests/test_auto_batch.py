"""The batch policy of ``"auto"`` (issue 40): which algorithm a batch runs, that its results are the explicit
algorithms', and that ``stats()`` says what ran and why. No timing here: bench/bench_auto.py measures."""

import os
import threading

import numpy as np
import oracle
import pytest

import pba_runtime as pr
import pba_runtime.algorithms as algorithms
from pba_runtime.algorithms import AUTO_BATCH_SPLIT_MIN, choose_batch_algorithm, why_text
from pba_runtime.host import HostSpec, KeyedHost

W = pr.CountWindow(range=64, slide=1)
BUILTINS = ("max", "min", "sum", "count", "mean", "std", "geomean", "argmax", "moment_sketch")
PY_MAX = pr.Aggregation(lift=float, combine=max, lower=float, identity=float("-inf"), name="py_max")


@pytest.fixture
def small_threshold(monkeypatch):
    """A batch of a few thousand values splits (the policy's threshold lowered), and two cores whatever the
    machine: the tests run the split without tens of MB."""
    monkeypatch.setattr(algorithms, "AUTO_BATCH_SPLIT_MIN", 1 << 10)
    monkeypatch.setattr(algorithms, "_cores", lambda: 2)
    return 1 << 10


@pytest.fixture
def busy_pool():
    """A thread pool whose one worker is held by a task until the test ends."""
    release = threading.Event()
    started = threading.Event()
    pool = pr.WorkerPool(kind="thread", workers=1)

    def hold():
        started.set()
        release.wait(30)

    fut = pool.submit(hold)
    assert started.wait(30)
    yield pool
    release.set()
    fut.result(30)
    pool.close()


def _values(n, seed=0):
    return np.random.default_rng(seed).random(n) + 0.5


# ---------------------------------------------------------------------------------------------- the choice
def test_a_large_batch_with_a_free_worker_runs_pba_whatever_the_range():
    for r in (16, 1024, 1 << 16):
        w = pr.CountWindow(range=r, slide=1)
        assert choose_batch_algorithm(w, "max", 4_000_000, cores=2) == ("pba", "batch_split")
    # the per-tuple policy still says SBA below 2^15 slices: it stays for operators fed tuple by tuple
    assert pr.resolve_auto(pr.CountWindow(range=1024, slide=1)) == "sba"


def test_the_threshold_counts_the_batchs_windows():
    r = 1024
    w = pr.CountWindow(range=r, slide=1)
    at = AUTO_BATCH_SPLIT_MIN + r - 1  # values completing exactly AUTO_BATCH_SPLIT_MIN windows
    assert choose_batch_algorithm(w, "sum", at, cores=2) == ("pba", "batch_split")
    assert choose_batch_algorithm(w, "sum", at - 1, cores=2) == ("sba", "small_batch")
    # slide 4: a quarter of the windows
    w4 = pr.CountWindow(range=r, slide=4)
    assert choose_batch_algorithm(w4, "sum", at, cores=2) == ("sba", "small_batch")
    assert choose_batch_algorithm(w4, "sum", 4 * AUTO_BATCH_SPLIT_MIN + r, cores=2) == ("pba", "batch_split")
    # time windows: the values
    tw = pr.TimeWindow(range=1000, slide=10)
    assert choose_batch_algorithm(tw, "max", AUTO_BATCH_SPLIT_MIN, cores=2) == ("pba", "batch_split")
    assert choose_batch_algorithm(tw, "max", AUTO_BATCH_SPLIT_MIN - 1, cores=2) == ("sba", "small_batch")


def test_sba_when_the_split_cannot_help(busy_pool):
    n = 4_000_000
    assert choose_batch_algorithm(W, "max", n, cores=1) == ("sba", "one_core")
    assert choose_batch_algorithm(W, "max", n, cores=2, pool=busy_pool) == ("sba", "busy_pool")
    assert choose_batch_algorithm(W, "count", n, cores=2) == ("sba", "one_thread_batch")  # a fill, never split
    with pr.WorkerPool(kind="thread", workers=1) as free:
        assert free.free_worker() and not busy_pool.free_worker()
        assert choose_batch_algorithm(W, "max", n, cores=2, pool=free) == ("pba", "batch_split")
    assert not free.free_worker()  # closed


@pytest.mark.filterwarnings("ignore::pba_runtime.kernels.CompileWarning")
def test_an_aggregation_without_a_kernel_keeps_the_per_tuple_policy():
    # its batch path goes tuple by tuple: the per-tuple thresholds decide (2^12 for a Python loop)
    assert choose_batch_algorithm(W, "max", 4_000_000, engine="python", cores=2) == ("sba", "small_window")
    w13 = pr.CountWindow(range=1 << 13, slide=1)
    if pr.algorithms.engine_of("sba", w13, PY_MAX).name == "python":  # numba does not compile it (yet)
        assert choose_batch_algorithm(w13, PY_MAX, 4_000_000, cores=2) == ("pba", "large_window")
        assert choose_batch_algorithm(W, PY_MAX, 4_000_000, cores=2) == ("sba", "small_window")
    else:  # compiled: its batch path is the vectorised merge, the batch policy decides
        assert choose_batch_algorithm(W, PY_MAX, 4_000_000, cores=2) == ("pba", "batch_split")


def test_the_numpy_engine_follows_its_merges_own_split_rule():
    from pba_runtime.batch import splits_rows

    for n in (1 << 15, 1 << 17, 1 << 20):
        want = ("pba", "batch_split") if splits_rows(64, n) else ("sba", "small_batch")
        assert choose_batch_algorithm(W, "max", n, engine="numpy", cores=2) == want


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="engine"):
        choose_batch_algorithm(W, "max", 10, engine="gpu")
    with pytest.raises(ValueError, match="aggregation"):
        choose_batch_algorithm(W, "nope", 10)


# ---------------------------------------------------------------------------------------------- operators
def test_a_fresh_auto_operator_splits_its_first_large_batch(small_threshold):
    x = _values(20_000)
    with pr.create("auto", W, "max") as op:
        st = op.stats()
        assert (st["algorithm"], st["chosen_by"], st["why"]) == ("sba", "auto",
                                                                 "window of 64 slices, PBA from 32,768: SBA")
        ends, res = op.insert_many(x)
        st = op.stats()
        assert (st["algorithm"], st["chosen_by"], st["pool"]) == ("pba", "auto", "thread")
        assert st["why"] == "batch of 20,000 values with a free worker: split"
        assert op.name == "pba"
        # the stream goes on, batch and per tuple, as PBA's
        more = _values(3_000, seed=1)
        e2, r2 = op.insert_many(more[:2_000])
        tail = [w for v in more[2_000:] for w in op.insert(v)]
        snap = op.snapshot()
    assert snap["algorithm"] == "pba"
    got = np.concatenate([res, r2, [v for _, v in tail]])
    want_ends, want = oracle.count_windows(np.concatenate([x, more]), 64, 1, "max")
    assert np.concatenate([ends, e2, [e for e, _ in tail]]).tolist() == list(want_ends)
    oracle.assert_results_equal("max", got, want)


def test_an_empty_or_lazy_first_batch_leaves_the_decision_to_the_next(small_threshold):
    with pr.create("auto", W, "max") as op:
        assert len(op.insert_many([])[0]) == 0
        op.insert_many(_values(20_000))
        assert op.stats()["algorithm"] == "pba"
    with pr.create("auto", W, "max") as op:
        op.insert_many(iter(_values(100)))  # no len(): the batch is not measured, the operator no longer fresh
        op.insert_many(_values(20_000))
        assert op.stats()["algorithm"] == "sba"


def test_a_small_first_batch_or_a_used_operator_keeps_the_per_tuple_choice(small_threshold):
    with pr.create("auto", W, "sum") as op:
        op.insert_many(_values(500))  # under 2^10 windows
        st = op.stats()
        assert st["algorithm"] == "sba" and st["why"] == "batch of 500 values, PBA splits from 1,024 windows: one thread"
        op.insert_many(_values(20_000))  # not the first batch any more
        assert op.stats()["algorithm"] == "sba"
    with pr.create("auto", W, "sum") as op:
        op.insert(1.0)
        op.insert_many(_values(20_000))  # not fresh
        st = op.stats()
        assert st["algorithm"] == "sba" and st["why"] == "window of 64 slices, PBA from 32,768: SBA"
    # a large window's PBA keeps its worker for the tuples to come after a small batch
    big = pr.CountWindow(range=1 << 15, slide=1)
    with pr.create("auto", big, "sum") as op:
        op.insert_many(_values(500))
        assert op.stats()["algorithm"] == "pba" and "PBA from 32,768: PBA" in op.stats()["why"]


def test_the_whole_stream_in_one_small_batch_runs_sba_even_for_a_large_window():
    big = pr.CountWindow(range=1 << 15, slide=1)
    x = _values(40_000)
    op = pr.create("auto", big, "max")
    try:
        assert op.name == "pba"
        ends, res = op._insert_and_flush(x)  # what sliding_aggregate calls: the batch is the whole stream
        st = op.stats()
        assert (st["algorithm"], st["pool"]) == ("sba", None)
        assert st["why"].startswith("batch of 40,000 values, PBA splits from")
    finally:
        op.close()
    want = pr.sliding_aggregate(x, window=big, agg="max", algorithm="pba")
    assert ends.tolist() == want[0].tolist() and res.tolist() == want[1].tolist()


def test_a_busy_pool_leaves_the_batch_on_one_thread(small_threshold, busy_pool):
    with pr.create("auto", W, "max", pool=busy_pool) as op:
        op.insert_many(_values(20_000))
        st = op.stats()
        assert st["algorithm"] == "sba" and st["why"] == "batch of 20,000 values, the pool's worker is busy: one thread"


def test_the_given_pool_is_the_one_pba_splits_with(small_threshold):
    with pr.WorkerPool(kind="thread", workers=1) as pool, pr.create("auto", W, "max", pool=pool) as op:
        op.insert_many(_values(20_000))
        assert op.stats()["algorithm"] == "pba" and op._pool is pool


def test_explicit_algorithms_say_they_were_requested():
    for alg in ("pba", "sba"):
        with pr.create(alg, W, "max") as op:
            st = op.stats()
            assert (st["chosen_by"], st["why"]) == ("request", None)
            op.insert_many(_values(5_000))
            assert op.name == alg


def test_a_reorder_buffer_reports_the_choice_of_its_operator(small_threshold):
    with pr.create("auto", pr.TimeWindow(range=100, slide=10), "max", allowed_lateness=5) as op:
        assert op.stats()["chosen_by"] == "auto" and "SBA" in op.stats()["why"]


@pytest.mark.parametrize("agg", BUILTINS)
def test_sliding_aggregate_auto_equals_both_explicit_algorithms(small_threshold, agg):
    x = _values(6_000, seed=3)
    for w in (W, pr.CountWindow(range=100, slide=7)):
        got = pr.sliding_aggregate(x, window=w, agg=agg)
        for alg in ("pba", "sba"):
            want = pr.sliding_aggregate(x, window=w, agg=agg, algorithm=alg)
            assert got[0].tolist() == want[0].tolist()
            assert np.array_equal(np.asarray(got[1]), np.asarray(want[1]))  # bit for bit: one arithmetic
        want_ends, want = oracle.count_windows(x, w.range, w.slide, agg)
        assert got[0].tolist() == list(want_ends)
        oracle.assert_results_equal(agg, got[1], want, x)


def test_time_windows_split_too_and_equal_sba(small_threshold):
    x = _values(20_000, seed=4)
    ts = np.cumsum(np.random.default_rng(4).integers(0, 3, len(x)))
    w = pr.TimeWindow(range=200, slide=20)
    with pr.create("auto", w, "sum") as op:
        e, r = op.insert_many(x, timestamps=ts)
        assert op.stats()["algorithm"] == "pba"
        e2, r2 = op.flush()
    want = pr.sliding_aggregate(x, window=w, agg="sum", algorithm="sba", timestamps=ts)
    assert np.concatenate([e, e2]).tolist() == want[0].tolist()
    assert np.concatenate([r, r2]).tolist() == want[1].tolist()


# ---------------------------------------------------------------------------------------------- hosts
def test_a_hosts_auto_keys_say_why_in_their_stats():
    host = KeyedHost(HostSpec(W, "max"))
    try:
        host.operator("a").insert_many([1.0, 2.0])
        st = host.keys["a"].op.stats()
        assert (st["chosen_by"], st["why"]) == ("auto", "window of 64 slices, PBA from 32,768: SBA")
        assert host.keys["a"].reason == "small_window"
    finally:
        host.close()
    explicit = KeyedHost(HostSpec(W, "max", "sba"))
    try:
        assert explicit.operator("a").stats()["chosen_by"] == "request"
    finally:
        explicit.close()


def test_why_text_spells_every_reason():
    for reason in algorithms.REASONS:
        text = why_text("sba", reason, W, 1000)
        assert text and "_" not in text


def test_a_process_pool_given_to_auto_splits_and_leaves_no_shared_memory(small_threshold):
    x = _values(20_000, seed=5)
    with pr.WorkerPool(kind="process", workers=1, task_timeout=60) as pool:
        with pr.create("auto", W, "max", pool=pool) as op:
            ends, res = op.insert_many(x)
            st = op.stats()
            tail = [w for v in _values(200, seed=6) for w in op.insert(v)]  # per tuple: lcs in the worker process
            names = list(op._store.shm.block_names) if st["shared_memory"] else []
        assert (st["algorithm"], st["pool"]) == ("pba", "process")
        assert not [n for n in names if os.path.exists(f"/dev/shm/{n.lstrip('/')}")]  # the operator unlinked them
    want = pr.sliding_aggregate(np.concatenate([x, _values(200, seed=6)]), window=W, agg="max", algorithm="sba")
    assert np.concatenate([ends, [e for e, _ in tail]]).tolist() == want[0].tolist()
    assert np.concatenate([res, [r for _, r in tail]]).tolist() == want[1].tolist()
