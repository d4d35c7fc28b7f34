"""FiBA: the finger B-tree (node aggregates, arities, fingers after random operations) and the operator
(out-of-order windows emitted exactly when the watermark passes them)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import assert_results_equal, count_windows, time_windows

import pba_runtime as pr
from pba_runtime.algorithms.fiba import FiBA, FingerBTree


def cat(a, b):
    return a + b  # string concatenation: associative, not commutative


class Model:
    """A sorted dict of time -> value, the reference for the tree."""

    def __init__(self):
        self.d: dict[int, str] = {}

    def insert(self, t, v):
        self.d[t] = self.d.get(t, "") + v

    def evict(self, t):
        return self.d.pop(t, None) is not None

    def query(self, lo=None, hi=None):
        return "".join(self.d[t] for t in sorted(self.d) if (lo is None or t >= lo) and (hi is None or t <= hi))


op_strategy = st.one_of(
    st.tuples(st.just("ins"), st.integers(0, 60), st.sampled_from("abcdefghij")),
    st.tuples(st.just("ins"), st.integers(0, 60), st.sampled_from("abcdefghij")),
    st.tuples(st.just("ev"), st.integers(0, 60), st.just("")),
    st.tuples(st.just("old"), st.just(0), st.just("")),
    st.tuples(st.just("q"), st.integers(-2, 62), st.integers(-2, 62)),
)


@pytest.mark.parametrize("mu", [2, 3, 4])
@given(ops=st.lists(op_strategy, max_size=250))
def test_random_operations_keep_every_invariant(mu, ops):
    tree = FingerBTree(cat, "", min_arity=mu)
    model = Model()
    for op, a, b in ops:
        if op == "ins":
            tree.insert(a, b)
            model.insert(a, b)
        elif op == "ev":
            assert tree.evict(a) == model.evict(a)
        elif op == "old":
            if model.d:
                model.evict(min(model.d))
                assert tree.evict_oldest()
            else:
                assert not tree.evict_oldest()
        else:
            assert tree.query(a, b) == model.query(a, b)
            assert tree.query(a, None) == model.query(a, None)
            assert tree.query(None, b) == model.query(None, b)
            continue
        tree.check()  # key order, arities, leaf depth, parents, spine flags, fingers, every aggregate
        assert tree.query() == model.query()
        assert len(tree) == len(model.d)
        assert tree.min_key() == (min(model.d) if model.d else None)
        assert tree.max_key() == (max(model.d) if model.d else None)
    assert tree.items() == sorted(model.d.items())


@pytest.mark.parametrize("mu", [2, 3])
def test_inner_node_evictions(mu):
    """Evicting separators (values in inner nodes) replaces them from a leaf and rebalances."""
    tree = FingerBTree(cat, "", min_arity=mu)
    model = Model()
    for t in range(200):
        tree.insert(t, chr(97 + t % 26))
        model.insert(t, chr(97 + t % 26))
    rng = np.random.default_rng(0)
    while len(tree):
        x = tree.root
        # pick a separator at a random depth
        while x.kids is not None and rng.random() < 0.6:
            x = x.kids[rng.integers(len(x.kids))]
        t = x.times[rng.integers(len(x.times))] if x.times else tree.min_key()
        assert tree.evict(t) and model.evict(t)
        tree.check()
        assert tree.query() == model.query()
        lo, hi = sorted(rng.integers(-5, 205, 2).tolist())
        assert tree.query(lo, hi) == model.query(lo, hi)


@pytest.mark.parametrize("mu", [2, 4])
def test_fifo_use_is_amortised_constant(mu):
    """In order: append at the right finger, evict at the left; restructuring per operation does not
    grow with the window (amortised O(1)), and nothing but the fingers' paths is repaired."""
    ratios = []
    for w in (64, 4096):
        tree = FingerBTree(lambda a, b: a + b, 0, min_arity=mu)
        n = 3 * w + 6000
        for t in range(n):
            tree.insert(t, 1)
            if t >= w:
                tree.evict_oldest()
            if t % 2999 == 0:
                tree.check()
            assert tree.query() == min(t + 1, w)
        tree.check()
        ratios.append((tree.splits + tree.merges + tree.moves) / n)
    assert ratios[1] < 2.0 and ratios[1] <= ratios[0] * 1.25 + 0.05, ratios


@given(data=st.data())
def test_nearly_ordered_inserts(data):
    d = data.draw(st.integers(0, 8))
    n = data.draw(st.integers(0, 200))
    jitter = data.draw(st.lists(st.integers(0, d), min_size=n, max_size=n))
    tree = FingerBTree(cat, "", min_arity=2)
    model = Model()
    for i, j in enumerate(jitter):
        t = 3 * i - j
        tree.insert(t, "x" if j else "y")
        model.insert(t, "x" if j else "y")
        if i % 10 == 9:
            tree.evict_before(3 * i - 40)
            for k in [k for k in model.d if k < 3 * i - 40]:
                model.evict(k)
            tree.check()
    tree.check()
    assert tree.query() == model.query()


def test_tree_bad_input():
    with pytest.raises(ValueError, match="min_arity must be an integer >= 2"):
        FingerBTree(cat, "", min_arity=1)
    with pytest.raises(ValueError, match="min_arity"):
        pr.create("fiba", pr.CountWindow(range=4, slide=1), "sum", min_arity=True)
    tree = FingerBTree(cat, "")
    assert tree.query() == "" and tree.query(3, 1) == "" and not tree.evict(1) and not tree.evict_oldest()
    assert tree.min_key() is None and tree.max_key() is None


# --------------------------------------------------------------------------- the operator
@st.composite
def ooo_stream(draw):
    r = draw(st.integers(1, 20))
    s = draw(st.sampled_from([1, r, max(1, r // 3), draw(st.integers(1, r))]))
    offset = draw(st.integers(0, s - 1))
    n = draw(st.integers(0, 60))
    values = draw(st.lists(st.integers(-5, 5).map(float), min_size=n, max_size=n))
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, s, r, 2 * r + 5]), min_size=n, max_size=n))
    back = draw(st.lists(st.integers(0, 2 * r + 2), min_size=n, max_size=n))
    ts = (np.cumsum(steps) - np.asarray(back, dtype=np.int64)).astype(np.int64) if n else np.zeros(0, np.int64)
    lateness = draw(st.sampled_from([0, 1, 3, r, 2 * r + 2, 10_000]))
    return r, s, offset, values, ts.tolist(), lateness


@pytest.mark.parametrize("agg", ["collect", "sum", "argmax", "max"])
@pytest.mark.parametrize("mu", [2, 4])
@given(case=ooo_stream())
def test_windows_are_emitted_exactly_when_the_watermark_passes_them(agg, mu, case):
    r, s, offset, values, ts, L = case
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    op = pr.create("fiba", win, agg, allowed_lateness=L, min_arity=mu)
    assert isinstance(op, FiBA)
    emitted: list = []
    kept: list = []
    mx = None
    late = []
    for i, (v, t) in enumerate(zip(values, ts)):
        emitted += op.insert(v, t)
        if mx is not None and t < mx - L:
            late.append((v, t))
        else:
            kept.append((t, i, v))
            mx = t if mx is None else max(mx, t)
        wm = mx - L
        assert op.watermark == wm
        srt = sorted(kept)
        ends, want = time_windows([v for _, _, v in srt], [t for t, _, _ in srt], r, s, agg, offset)
        closed = [(e, w) for e, w in zip(ends, want) if e <= wm]  # final: no later tuple can land in them
        assert [e for e, _ in emitted] == [e for e, _ in closed]
        assert_results_equal(agg, [x for _, x in emitted], [w for _, w in closed], values)
    op.tree.check()
    fe, fr = op.flush()
    srt = sorted(kept)
    ends, want = time_windows([v for _, _, v in srt], [t for t, _, _ in srt], r, s, agg, offset)
    assert [e for e, _ in emitted] + fe.tolist() == ends
    assert_results_equal(agg, [x for _, x in emitted] + list(fr), want, values)
    assert op.take_late() == late and op.stats()["late"] == len(late)


@pytest.mark.parametrize("agg", ["collect", "std", "argmax"])
@given(data=st.data())
def test_small_arity_matches_the_oracle_in_order(agg, data):
    r = data.draw(st.integers(1, 30))
    s = data.draw(st.sampled_from([1, r, max(1, r // 2), data.draw(st.integers(1, r))]))
    values = data.draw(st.lists(st.integers(-5, 5).map(float), max_size=120))
    want_ends, want = count_windows(values, r, s, agg)
    op = pr.create("fiba", pr.CountWindow(range=r, slide=s), agg, min_arity=2)
    ends, got = [], []
    for v in values:
        for e, x in op.insert(v):
            ends.append(e)
            got.append(x)
        if agg != "std":  # check() compares aggregates exactly; std's grouping changes the rounding
            op.tree.check()
    assert ends == want_ends
    assert_results_equal(agg, got, want, values)


def test_keys_are_slices_unless_order_needs_timestamps():
    win = pr.TimeWindow(range=100, slide=10)
    ts = np.arange(0, 1000, 1)
    ooo = ts.copy()
    ooo[1::2], ooo[::2] = ts[::2], ts[1::2]  # swapped pairs: out of order by one
    op = pr.create("fiba", win, "sum", allowed_lateness=5)
    op.insert_many(np.ones(1000), ooo)
    assert len(op.tree) <= 100 // 10 + 2  # commutative: one key per slice
    op = pr.create("fiba", win, "collect", allowed_lateness=5)
    op.insert_many(list(range(1000)), ooo)
    assert len(op.tree) > 50  # non-commutative and out of order: exact timestamps keep the order
    e, res = op.insert_many([-1], [2000])
    assert res[-1] == [int(np.flatnonzero(ooo == t)[0]) for t in range(990, 1000)]  # timestamp order
    op = pr.create("fiba", win, "collect")  # in order: slices again (arrival order is time order)
    op.insert_many(list(range(1000)), ts)
    assert len(op.tree) <= 100 // 10 + 2


def test_window_sharing_range_query():
    op = pr.create("fiba", pr.TimeWindow(range=1000, slide=1), "sum", allowed_lateness=50)
    op.insert_many(np.arange(100.0), np.arange(0, 500, 5))
    assert op.query() == float(np.arange(100.0).sum())
    assert op.query(100, 199) == float(np.arange(20.0, 40.0).sum())  # keys 100..195, inclusive bounds
    assert op.query(600, 700) == 0.0
    coarse = pr.create("fiba", pr.TimeWindow(range=1000, slide=100), "sum")  # keys are slice starts
    coarse.insert_many(np.arange(100.0), np.arange(0, 500, 5))
    assert coarse.query(100, 100) == float(np.arange(20.0, 40.0).sum()) and coarse.query(101, 199) == 0.0


def test_operator_bad_input():
    with pytest.raises(ValueError, match="allowed_lateness applies to time windows"):
        FiBA(pr.CountWindow(range=4, slide=1), "sum", allowed_lateness=2)
    with pytest.raises(ValueError, match="allowed_lateness applies to time windows"):
        pr.create("fiba", pr.CountWindow(range=4, slide=1), "sum", allowed_lateness=2)
    with pytest.raises(TypeError, match="allowed_lateness must be an integer"):
        FiBA(pr.TimeWindow(range=4, slide=1), "sum", allowed_lateness="3")
    op = pr.create("fiba", pr.TimeWindow(range=4, slide=1), "sum")
    op.insert(1.0, 10)
    with pytest.raises(ValueError, match="non-decreasing"):
        op.insert(1.0, 9)
    with pytest.raises(ValueError, match="non-decreasing"):
        op.insert_many([1.0, 2.0], [12, 11])
    late = pr.create("fiba", pr.TimeWindow(range=4, slide=1), "sum", allowed_lateness=1)
    late.insert(1.0, 10)
    with pytest.raises(TypeError, match="real number"):
        late.insert("x", 2)  # bad values raise even when late
    assert late.insert(1.0, 2) == [] and late.take_late() == [(1.0, 2)]
    with pytest.raises(ValueError, match="one timestamp per value"):
        late.insert_many([1.0], [1, 2])


def test_restore_checks_lateness_and_copies_state():
    win = pr.TimeWindow(range=20, slide=5)
    op = pr.create("fiba", win, "collect", allowed_lateness=4)
    op.insert_many(list(range(10)), [3, 1, 2, 9, 8, 12, 11, 20, 18, 17])
    state = op.snapshot()
    op.insert_many([99], [60])
    with pytest.raises(ValueError, match="allowed_lateness 4"):
        pr.create("fiba", win, "collect", allowed_lateness=3).restore(state)
    op2 = pr.create("fiba", win, "collect", allowed_lateness=4).restore(pickle.loads(pickle.dumps(state)))
    op2.tree.check()
    a = op2.flush()
    b = pr.create("fiba", win, "collect", allowed_lateness=4).restore(state).flush()
    assert a[0].tolist() == b[0].tolist() and a[1] == b[1]
    e, r = op.flush()  # the original went on after the snapshot: 99 at 60 is in its windows only
    assert [99] in r and [99] not in a[1]
