"""Baseline FIFO algorithms: invariants after random operation sequences, operation counts, capabilities.

The mergers are driven directly through the slicing layer's FIFO interface
(``_push``, ``_pop``, ``_query``, ``_reset_merger``) with variable window sizes,
and checked against a left-to-right fold of the slices they hold. End-to-end
results against the spec oracle are in ``tests/test_differential.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime.algorithms.daba import DABA
from pba_runtime.algorithms.flatfat import EMPTY, FlatFAT, FlatFATAggregator
from pba_runtime.algorithms.slick_deque import SlickDeque
from pba_runtime.algorithms.soe import SubtractOnEvict
from pba_runtime.algorithms.two_stacks import TwoStacks

WIN = pr.CountWindow(range=6, slide=1)  # small preallocated rings: random sequences make them grow


def concat() -> pr.Aggregation:
    """Associative, non-commutative, comparable partials: catches any operand-order slip."""
    return pr.Aggregation(lift=lambda v: (v,), combine=lambda a, b: a + b, lower=list, identity=(), name="concat")


def counting(agg: pr.Aggregation) -> tuple[pr.Aggregation, list[int]]:
    calls = [0]

    def combine(a, b):
        calls[0] += 1
        return agg.combine(a, b)

    return pr.Aggregation(lift=agg.lift, combine=combine, lower=agg.lower, identity=agg.identity,
                          name="counting", inverse=agg.inverse, selective=agg.selective), calls


def fold(agg, parts):
    acc = agg.identity
    for p in parts:
        acc = agg.combine(acc, p)
    return acc


# a random FIFO history: True = push the next slice, False = pop the oldest (when any); None = reset
ops_strategy = st.lists(st.one_of(st.booleans(), st.booleans(), st.booleans(), st.just(None)), max_size=300)


def drive(op, agg, ops, values, check=None):
    held: list = []
    nxt = 0
    for o in ops:
        if o is None:
            op._reset_merger()
            held.clear()
        elif o or not held:
            p = values[nxt % len(values)]
            nxt += 1
            op._push(p)
            held.append(p)
        else:
            op._pop()
            held.pop(0)
        assert op._query() == fold(agg, held)
        if check is not None:
            check(op)


@pytest.mark.parametrize("cls", [TwoStacks, DABA, FlatFATAggregator])
@given(ops=ops_strategy)
def test_general_mergers_keep_order(cls, ops):
    agg = concat()
    op = cls(WIN, agg)
    check = getattr(op, "check_invariants", None)
    drive(op, agg, ops, [(i,) for i in range(1000)], check and (lambda o: o.check_invariants()))


@given(ops=ops_strategy, data=st.data())
def test_slick_deque_matches_fold_and_stays_monotonic(ops, data):
    name = data.draw(st.sampled_from(["max", "min", "argmax"]))
    agg = pr.get_aggregation(name)
    vals = data.draw(st.lists(st.integers(-3, 3).map(float), min_size=1, max_size=40))
    parts = [agg.lift(v, i) if agg.positional else agg.lift(v) for i, v in enumerate(vals)]
    parts.append(agg.identity)  # an empty slice (time windows push those across short gaps)

    def monotonic(o):
        dq = [p for _, p in o.deque()]
        for a, b in zip(dq, dq[1:]):
            assert agg.combine(a, b) is a  # every candidate beats every newer one
        idx = [i for i, _ in o.deque()]
        assert idx == sorted(idx) and (not idx or idx[0] >= o._popped)

    op = SlickDeque(WIN, agg)
    drive(op, agg, ops, parts, monotonic)


@given(ops=ops_strategy)
def test_soe_matches_fold_with_an_exact_inverse(ops):
    agg = pr.Aggregation(lift=int, combine=lambda a, b: a + b, lower=int, identity=0, inverse=lambda t, a: t - a,
                         name="isum")
    op = SubtractOnEvict(WIN, agg)
    drive(op, agg, ops, [3 ** (i % 17) * (-1) ** i for i in range(500)])


@pytest.mark.parametrize("agg", ["sum", "mean", "std", "geomean", "count"])
@given(ops=ops_strategy, data=st.data())
def test_soe_builtins_stay_within_rounding(agg, ops, data):
    a = pr.get_aggregation(agg)
    vals = data.draw(st.lists(st.floats(0.125, 1e3), min_size=1, max_size=50))
    parts = [a.lift(v) for v in vals]
    op = SubtractOnEvict(WIN, a)
    held: list = []
    nxt = 0
    for o in ops:
        if o is None:
            op._reset_merger()
            held.clear()
            continue
        if o or not held:
            p = parts[nxt % len(parts)]
            nxt += 1
            op._push(p)
            held.append(p)
        else:
            op._pop()
            held.pop(0)
        if held:
            got, want = a.lower(op._query()), a.lower(fold(a, held))
            if agg == "std" and len(held) == 1:
                continue
            assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9 * 1e3), (got, want)


def test_soe_std_is_exact_after_an_outlier_leaves():
    values = [1e3 + 0.1, 7.3, 7.3, 7.3, 7.3]
    ends, res = pr.sliding_aggregate(values, window=pr.CountWindow(range=3, slide=1), agg="std", algorithm="soe")
    assert res.tolist()[1:] == [0.0, 0.0]
    ends, res = pr.sliding_aggregate([math.inf, 1.0, 2.0, 2.0], window=pr.CountWindow(range=2, slide=1), agg="std",
                                     algorithm="soe")
    with np.errstate(invalid="ignore"):
        want = [np.std([math.inf, 1.0], ddof=1), 0.7071067811865476, 0.0]
    assert math.isnan(res[0]) and math.isnan(want[0]) and res.tolist()[1:] == want[1:]


def test_soe_does_not_drift_over_a_long_stream():
    rng = np.random.default_rng(3)
    x = rng.normal(size=200_000) * 1e6 + 1e9
    x[::1000] = 1e15  # outliers
    win = pr.CountWindow(range=64, slide=1)
    ends, got = pr.sliding_aggregate(x, window=win, agg="sum", algorithm="soe")
    xs = x.tolist()
    want = [math.fsum(xs[e - 64 : e]) for e in ends.tolist()]  # the correctly rounded sum of each window
    assert ends.tolist() == list(range(64, len(x) + 1))
    assert got.tolist() == want  # exact accumulators: each window rounded once (a float total drifts ~5e-11)


# --------------------------------------------------------------------------- DABA
@given(ops=ops_strategy)
def test_daba_operation_counts(ops):
    base = concat()
    agg, calls = counting(base)
    op = DABA(WIN, agg)
    held = 0
    per_insert, per_evict = [], []
    for i, o in enumerate(ops):
        if o is None:
            op._reset_merger()
            held = 0
            continue
        before = calls[0]
        if o or not held:
            op._push((i,))
            held += 1
            per_insert.append(calls[0] - before)
        else:
            op._pop()
            held -= 1
            per_evict.append(calls[0] - before)
        before = calls[0]
        op._query()
        assert calls[0] - before <= 1
        op.check_invariants()
    assert max(per_insert, default=0) <= 4
    assert max(per_evict, default=0) <= 3


def test_daba_average_counts_in_a_sliding_window():
    """Theorem 4.3: on average 2.5 combines per insert and 1.5 per evict once the window is full."""
    agg, calls = counting(pr.get_aggregation("sum"))
    op = DABA(pr.CountWindow(range=1024, slide=1), agg)
    for i in range(1024):
        op._push(float(i))
    c0 = calls[0]
    ins = ev = 0
    for i in range(20_000):
        b = calls[0]
        op._push(float(i))
        ins += calls[0] - b
        b = calls[0]
        op._pop()
        ev += calls[0] - b
    # the average over whole shrink/shift cycles; 20000 rounds end mid-cycle
    assert abs(ins / 20_000 - 2.5) < 0.01 and abs(ev / 20_000 - 1.5) < 0.01
    assert calls[0] - c0 == ins + ev


def test_daba_latency_has_no_flip_rebuild():
    """No single insert/evict does more than constant work, whatever the window size."""
    agg, calls = counting(pr.get_aggregation("max"))
    op = DABA(pr.CountWindow(range=4096, slide=1), agg)
    worst = 0
    for i in range(3 * 4096):
        b = calls[0]
        op._push(float(i))
        if i >= 4096:
            op._pop()
        worst = max(worst, calls[0] - b)
    assert worst <= 7


# --------------------------------------------------------------------------- Two-Stacks
def test_two_stacks_flips_once_per_window_and_keeps_its_buffers():
    agg, calls = counting(pr.get_aggregation("max"))
    n = 512
    op = TwoStacks(pr.CountWindow(range=n, slide=1), agg)
    vals_buf, aggs_buf = op._vals, op._aggs
    for i in range(n + 1):
        op._push(float(i))
    flips0 = op.stats()["flips"]
    worst = 0
    for i in range(4 * n):
        b = calls[0]
        op._pop()
        op._push(float(i))
        worst = max(worst, calls[0] - b)
    assert op.stats()["flips"] - flips0 == 4
    assert worst >= n  # the flip: one combine per element, the latency spike DABA avoids
    assert op._vals is vals_buf and op._aggs is aggs_buf  # flat, preallocated: no reallocation
    assert calls[0] / (4 * n) < 3


def test_rings_grow_past_the_preallocation():
    op = TwoStacks(pr.CountWindow(range=1 << 14, slide=1), "sum")
    assert op._cap == 1 << 12
    for _ in range(5000):
        op._push(1.0)
    assert op._cap == 1 << 13 and op._query() == 5000.0


# --------------------------------------------------------------------------- FlatFAT
@given(data=st.data())
def test_flatfat_tree_consistency_prefix_suffix(data):
    n = data.draw(st.integers(1, 40))
    c = lambda a, b: a + b  # noqa: E731  (string concatenation: non-commutative)
    init = [chr(65 + i) if data.draw(st.booleans()) else EMPTY for i in range(n)]
    fat = FlatFAT(c, init)
    fat.check()
    model = init + [EMPTY] * (fat.capacity - n)
    for _ in range(data.draw(st.integers(0, 30))):
        changes = data.draw(st.lists(st.tuples(st.integers(0, fat.capacity - 1),
                                               st.one_of(st.just(EMPTY), st.sampled_from("abcdefg"))), max_size=5))
        fat.update(changes)
        for i, v in changes:
            model[i] = v
        fat.check()
        full = "".join(x for x in model if x is not EMPTY)
        assert (fat.aggregate() if fat.aggregate() is not EMPTY else "") == full
        i = data.draw(st.integers(0, fat.capacity - 1))
        pre = "".join(x for x in model[: i + 1] if x is not EMPTY)
        suf = "".join(x for x in model[i:] if x is not EMPTY)
        assert (fat.prefix(i) if fat.prefix(i) is not EMPTY else "") == pre
        assert (fat.suffix(i) if fat.suffix(i) is not EMPTY else "") == suf
    items = [x for x in model if x is not EMPTY]
    assert fat.compact() == len(items)
    fat.check()
    assert [fat[i] for i in range(len(items))] == items
    assert all(fat[i] is EMPTY for i in range(len(items), fat.capacity))
    bigger = fat.resized(fat.capacity * 2)
    bigger.check()
    assert bigger.leaves() == items and bigger.capacity == fat.capacity * 2


def test_flatfat_aggregator_resizes_both_ways():
    agg = concat()
    op = FlatFATAggregator(pr.CountWindow(range=8, slide=1), agg)
    cap0 = op._fat.capacity
    held = []
    for i in range(300):
        op._push((i,))
        held.append((i,))
    assert op._fat.capacity >= 300 > cap0
    assert op._query() == fold(agg, held)
    for _ in range(290):
        op._pop()
        held.pop(0)
    op.check_invariants()
    assert op._fat.capacity < 64
    assert op._query() == fold(agg, held)
    assert op.stats()["resizes"] >= 4


def test_flatfat_compacts_when_the_buffer_has_holes():
    agg = concat()
    op = FlatFATAggregator(pr.CountWindow(range=8, slide=1), agg)
    fat = op._fat
    for i in range(fat.capacity):
        op._push((i,))
    # non-FIFO eviction (the Reactive Aggregator allows it) leaves holes in the middle
    gone = (9, 7, 5, 2)  # a quarter of the slots
    for i in gone:
        op._remove(i)
    op.check_invariants()
    want = tuple(i for i in range(fat.capacity) if i not in gone)
    assert op._query() == want
    op._push(("x",))  # full buffer with at most 3/4 in use: compact instead of resize
    op.check_invariants()
    assert op.stats()["compacts"] == 1 and op._fat.capacity == fat.capacity
    assert op._query() == want + ("x",)
    op._pop()
    op._remove(0)
    op.check_invariants()
    assert op._query() == want[2:] + ("x",)


# --------------------------------------------------------------------------- capabilities and API
@pytest.mark.parametrize("alg,agg,ok", [
    ("soe", "sum", True), ("soe", "std", True), ("soe", "geomean", True), ("soe", "max", False),
    ("soe", "collect", False), ("soe", "argmax", False),
    ("slick_deque", "max", True), ("slick_deque", "min", True), ("slick_deque", "argmax", True),
    ("slick_deque", "sum", False), ("slick_deque", "std", False), ("slick_deque", "collect", False),
    ("two_stacks", "collect", True), ("daba", "moment_sketch", True), ("flatfat", "argmax", True),
    ("fiba", "collect", True),
])
def test_capabilities_checked_at_create(alg, agg, ok):
    win = pr.CountWindow(range=4, slide=2)
    if ok:
        pr.create(alg, win, agg).close()
        return
    need = "invertible" if alg == "soe" else "selective"
    with pytest.raises(ValueError, match=f"algorithm '{alg}' needs an? {need}.*aggregation '{agg}' is not {need}"):
        pr.create(alg, win, agg)


@pytest.mark.parametrize("alg", ["soe", "two_stacks", "daba", "slick_deque", "flatfat", "fiba"])
def test_registered_with_pool_option_and_stats(alg):
    assert alg in pr.ALGORITHMS
    with pr.create(alg, pr.TimeWindow(range=100, slide=10), "max" if alg != "soe" else "sum",
                   pool=pr.default_pool()) as op:
        op.insert_many(np.arange(50.0), np.arange(0, 500, 10))
        st_ = op.stats()
        assert st_["algorithm"] == alg and st_["tuples"] == 50 and st_["state_bytes"] > 0
    with pytest.raises(TypeError):
        pr.create(alg, pr.CountWindow(range=4, slide=1), "sum" if alg == "soe" else "max", bogus=1)
