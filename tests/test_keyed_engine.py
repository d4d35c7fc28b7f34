"""The keyed window-output engine (``engines/keyed.py``): fast == slow == ``sliding_aggregate`` per key.

Random keys (empty ones included), several windows at once (``r % s != 0``, different slides, tumbling),
count and time windows (ties, gaps, negative timestamps), NaN / inf / -0.0 / 1e12 beside 1e-3, both missing
policies, ``min_periods`` 0, 1, 3. Per key, window and aggregation: the ends are ``sliding_aggregate``'s, and
so are ``max``/``min``/``count``/``argmax``/``argmin`` with ``missing="propagate"``; every result is the naive
oracle's (:mod:`tests.oracle`: exact, or 1e-9 relative with its rounding floors) over the window's values
(with ``skip``: its non-NaN values, null under ``min_periods``); the compiled kernels equal the plain
reference (:func:`window_results_reference`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime.engines.keyed import _FLOAT, KEYED_AGGS, WindowResult, _check, window_results, window_results_reference
from tests.oracle import EXACT, _agg, assert_results_equal

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e12, 1e-3, -1e12, 1e12 + 0.1, 1e12 + 0.7])


def _values(rng: np.random.Generator, n: int, style: int) -> np.ndarray:
    if style == 0:
        return np.round(rng.normal(size=n) * 10, 1)
    if style == 1:  # ill-conditioned: runs of 1e12 + small beside runs of 1e-3
        run = (np.arange(n) // 7) % 2 == 0
        return np.where(run, 1e12 + rng.integers(0, 8, n) * 0.1, 1e-3 * rng.integers(1, 5, n))
    v = np.round(rng.normal(size=n), 2)  # special values sprinkled, ties (rounded) included
    pick = rng.random(n) < 0.3
    v[pick] = SPECIAL[rng.integers(0, len(SPECIAL), int(pick.sum()))]
    return v


@st.composite
def cases(draw, time: bool):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_keys = draw(st.integers(0, 5))
    lens = [draw(st.sampled_from([0, 1, 2, 5, 13, 40])) for _ in range(n_keys)]
    bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    V = _values(rng, int(bounds[-1]), draw(st.integers(0, 2)))
    nw = draw(st.integers(1, 3))
    windows = []
    for _ in range(nw):
        r = draw(st.integers(1, 12))
        s = draw(st.integers(1, r))
        if time:
            windows.append(pr.TimeWindow(range=r, slide=s, offset=draw(st.integers(0, s - 1))))
        else:
            windows.append(pr.CountWindow(range=r, slide=s))
    if draw(st.booleans()):  # a second window on the first's slide: one slicing shared
        w = windows[0]
        r2 = draw(st.integers(w.slide, 16))
        windows.append(pr.TimeWindow(range=r2, slide=w.slide, offset=w.offset) if time
                       else pr.CountWindow(range=r2, slide=w.slide))
    T = None
    if time:
        parts = []
        for n in lens:
            steps = rng.choice([0, 0, 1, 2, 3, 40], size=n)  # ties, small steps, gaps wider than any range
            parts.append(int(rng.integers(-60, 20)) + np.cumsum(steps))
        T = np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)
    aggs = draw(st.lists(st.sampled_from(KEYED_AGGS), min_size=1, max_size=len(KEYED_AGGS), unique=True))
    missing = draw(st.sampled_from(["propagate", "skip"]))
    mp = draw(st.sampled_from([0, 1, 3]))
    return V, T, bounds, windows, aggs, missing, mp


def _window_values(x, t, w, end):
    """The window's values and positions (count: stream positions; time: timestamps)."""
    if t is None:
        lo = end - w.range
        return x[lo:end], np.arange(lo, end)
    sel = (t >= end - w.range) & (t < end)
    return x[sel], t[sel]


def check(V, T, bounds, windows, aggs, missing, mp):
    fast = window_results(V, T, bounds, windows, aggs, missing=missing, min_periods=mp)
    slow = window_results_reference(V, T, bounds, windows, aggs, missing=missing, min_periods=mp)
    assert len(fast) == len(slow) == len(windows)
    skip = missing == "skip"
    for w, f, s in zip(windows, fast, slow):
        assert f.key.dtype == np.int64 and f.end.dtype == np.int64
        np.testing.assert_array_equal(f.key, s.key)
        np.testing.assert_array_equal(f.end, s.end)
        if len(f.key) > 1:  # ordered by key then end
            assert ((np.diff(f.key) > 0) | ((np.diff(f.key) == 0) & (np.diff(f.end) > 0))).all()
        for a in aggs:
            want_dtype = np.int64 if a in ("count", "argmax", "argmin") else np.float64
            assert f.values[a].dtype == want_dtype, a
            if skip:
                np.testing.assert_array_equal(f.valid[a], s.valid[a])
            else:
                assert f.valid[a] is None and s.valid[a] is None
        for k in range(len(bounds) - 1):
            lo, hi = bounds[k], bounds[k + 1]
            x = V[lo:hi]
            t = None if T is None else T[lo:hi]
            rows = f.key == k
            ends = f.end[rows]
            want_ends, _ = pr.sliding_aggregate(x, window=w, agg="count", timestamps=t)
            np.testing.assert_array_equal(ends, want_ends)
            for a in aggs:
                got = f.values[a][rows]
                ref = s.values[a][rows]
                if not skip:
                    e, res = pr.sliding_aggregate(x, window=w, agg=a, timestamps=t)
                    np.testing.assert_array_equal(e, ends)
                    if a in EXACT:
                        assert_results_equal(a, got.tolist(), np.asarray(res).tolist())
                ok = f.valid[a][rows] if skip else np.ones(len(ends), dtype=bool)
                want, idx = [], []
                for i, end in enumerate(ends.tolist()):
                    xs, pos = _window_values(x, t, w, end)
                    if skip:
                        keep = ~np.isnan(xs)
                        xs, pos = xs[keep], pos[keep]
                        need = max(1, mp) if a in ("max", "min", "argmax", "argmin") else mp
                        assert bool(ok[i]) == (len(xs) >= need), (a, end)
                    if ok[i] and (len(xs) or a in ("sum", "count")):
                        if not len(xs):
                            want.append(0 if a == "count" else 0.0)
                        else:
                            want.append(_agg(a, xs, pos))
                        idx.append(i)
                    elif ok[i]:  # no values, min_periods 0: mean, std, var are NaN
                        assert math.isnan(got[i]), (a, end, got[i])
                for g_ in (got, ref):
                    vals = [g_[i].item() for i in idx]
                    assert_results_equal(a, vals, want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(time=False))
def test_count_windows_match_sliding_aggregate(case):
    check(*case)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(time=True))
def test_time_windows_match_sliding_aggregate(case):
    check(*case)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(case=st.booleans().flatmap(lambda time: cases(time=time)))
def test_slices_lifted_a_segment_at_a_time(monkeypatch, case):
    """Segments of one block start (the kernels' scratch bound, forced small): the same rows."""
    import pba_runtime.engines.keyed as keyed

    monkeypatch.setattr(keyed, "SEGMENT_SLICES", 1)
    monkeypatch.setattr(keyed, "SEGMENT_PER_Q", 0)
    check(*case)


@pytest.mark.parametrize("segment", [None, 1, 3])
def test_ill_conditioned_std_and_var(monkeypatch, segment):
    if segment is not None:
        import pba_runtime.engines.keyed as keyed

        monkeypatch.setattr(keyed, "SEGMENT_SLICES", segment)
        monkeypatch.setattr(keyed, "SEGMENT_PER_Q", 0)
    rng = np.random.default_rng(1)
    V = np.concatenate([1e12 + rng.integers(0, 9, 300) * 0.1, 1e-3 * rng.integers(1, 9, 300),
                        1e12 + rng.integers(0, 9, 300) * 0.1])
    bounds = np.array([0, 300, 900], dtype=np.int64)
    windows = [pr.CountWindow(64, 1), pr.CountWindow(50, 7), pr.CountWindow(90, 30)]
    check(V, None, bounds, windows, ["std", "var", "mean", "sum"], "propagate", 1)
    T = np.concatenate([np.arange(300) * 3, np.arange(600) * 2 - 500]).astype(np.int64)
    check(V, T, bounds, [pr.TimeWindow(60, 6, offset=2), pr.TimeWindow(45, 6)], ["std", "var", "argmin"], "skip", 3)
    check(V, None, bounds, [pr.CountWindow(40, 4), pr.CountWindow(24, 4)], ["max", "argmax", "count"], "skip", 0)


def test_many_keys_split_between_threads(monkeypatch):
    """The keys cut into ranges for this thread and the pool's worker (forced below the row threshold):
    the same rows as the reference."""
    import pba_runtime.engines.keyed as keyed

    calls = []

    def split(fn, bounds, *, pool=None):
        calls.append(1)
        return keyed_split(fn, bounds, pool=pool, min_rows=0)

    from pba_runtime.engines.key_split import run_split as keyed_split

    monkeypatch.setattr(keyed, "run_split", split)
    rng = np.random.default_rng(5)
    lens = rng.integers(0, 80, 60)
    bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    V = np.round(rng.normal(size=int(bounds[-1])), 1)
    T = np.concatenate([np.cumsum(rng.integers(0, 4, n)) for n in lens]).astype(np.int64)
    for t, ws in ((None, [pr.CountWindow(16, 1), pr.CountWindow(20, 4)]), (T, [pr.TimeWindow(16, 4)])):
        fast = window_results(V, t, bounds, ws, list(KEYED_AGGS))
        slow = window_results_reference(V, t, bounds, ws, list(KEYED_AGGS))
        for f, s in zip(fast, slow):
            np.testing.assert_array_equal(f.key, s.key)
            np.testing.assert_array_equal(f.end, s.end)
            for a in KEYED_AGGS:
                np.testing.assert_allclose(f.values[a], s.values[a], rtol=1e-9, atol=1e-12)
    assert calls


FROM_VALUES = ("max", "min", "sum", "count", "mean", "std", "argmax")  # the slide-1 road's aggregations


def check_slide1_bits(V, bounds, windows, aggs):
    """Every count window of slide 1 and range > 1: for the slide-1 road's aggregations, the rows of a
    ``sliding_aggregate`` call per key, bit for bit (NaN's sign aside)."""
    res = window_results(V, None, bounds, windows, aggs)
    for w, r in zip(windows, res):
        if w.slide != 1 or w.range == 1:
            continue
        want = slide1_per_key_reference(V, bounds, w, [a for a in aggs if a in FROM_VALUES])
        np.testing.assert_array_equal(r.key, want.key)
        np.testing.assert_array_equal(r.end, want.end)
        for a, v in want.values.items():
            assert r.values[a].dtype == v.dtype, a
            assert np.array_equal(r.values[a], v, equal_nan=True), (w, a)


@st.composite
def slide1_cases(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    lens = [draw(st.sampled_from([0, 1, 3, 7, 16, 29, 64])) for _ in range(draw(st.integers(0, 6)))]
    bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    V = _values(rng, int(bounds[-1]), draw(st.integers(0, 2)))
    ranges = draw(st.lists(st.integers(1, 20), min_size=1, max_size=3, unique=True))
    windows = [pr.CountWindow(r) for r in ranges]
    windows.insert(draw(st.integers(0, len(windows))), pr.CountWindow(5, 3))  # another slide in the same call
    aggs = draw(st.lists(st.sampled_from(KEYED_AGGS), min_size=1, max_size=len(KEYED_AGGS), unique=True))
    return V, bounds, windows, aggs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slide1_cases())
def test_slide1_count_windows_give_sliding_aggregate_bits(case):
    """Count windows of slide 1 (keys empty or shorter than the window among them) beside a window of
    slide 3, every aggregation: the slide-1 road's are ``sliding_aggregate``'s bits per key, and every
    result the reference's and the oracle's."""
    V, bounds, windows, aggs = case
    check_slide1_bits(V, bounds, windows, aggs)
    check(V, None, bounds, windows, aggs, "propagate", 1)


def test_slide1_long_windows_one_loop_sum():
    """Windows of ``SUM_ONE_LOOP_MIN`` values and more (``sum``/``mean`` by the one-loop kernel), keys
    shorter and longer than them: ``sliding_aggregate``'s bits; ``skip`` keeps the generic pass."""
    from pba_runtime.kernels.compiled import SUM_ONE_LOOP_MIN

    rng = np.random.default_rng(7)
    q = SUM_ONE_LOOP_MIN
    lens = [0, q - 1, q, 3 * q + 5, 50]
    bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    V = _values(rng, int(bounds[-1]), 2)
    windows = [pr.CountWindow(q), pr.CountWindow(q + 3), pr.CountWindow(40), pr.CountWindow(9, 4)]
    check_slide1_bits(V, bounds, windows, list(KEYED_AGGS))
    skip = window_results(V, None, bounds, windows, ["sum", "max"], missing="skip", min_periods=0)
    ref = window_results_reference(V, None, bounds, windows, ["sum", "max"], missing="skip", min_periods=0)
    for f, s in zip(skip, ref):
        np.testing.assert_array_equal(f.end, s.end)
        np.testing.assert_array_equal(f.values["max"], s.values["max"])
        np.testing.assert_array_equal(f.valid["max"], s.valid["max"])


def test_slide1_split_between_threads(monkeypatch):
    """The slide-1 road over key ranges on this thread and the pool's worker (forced below the row
    threshold): the bits of one call per key."""
    import pba_runtime.engines.keyed as keyed
    from pba_runtime.engines.key_split import run_split as keyed_split

    monkeypatch.setattr(keyed, "run_split", lambda fn, bounds, *, pool=None: keyed_split(fn, bounds, pool=pool,
                                                                                           min_rows=0))
    rng = np.random.default_rng(11)
    lens = rng.integers(0, 120, 40)
    bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    V = _values(rng, int(bounds[-1]), 2)
    check_slide1_bits(V, bounds, [pr.CountWindow(16), pr.CountWindow(33), pr.CountWindow(6, 2)], list(KEYED_AGGS))


def test_bad_input_names_the_parameter():
    V = np.arange(4.0)
    b = np.array([0, 4])
    with pytest.raises(ValueError, match="aggregation"):
        window_results(V, None, b, [pr.CountWindow(2)], ["median"])
    with pytest.raises(ValueError, match="missing"):
        window_results(V, None, b, [pr.CountWindow(2)], ["max"], missing="drop")
    with pytest.raises(ValueError, match="T"):
        window_results(V, None, b, [pr.TimeWindow(2)], ["max"])
    with pytest.raises(ValueError, match="non-decreasing"):
        window_results(V, np.array([0, 2, 1, 3]), b, [pr.TimeWindow(2)], ["max"])
    with pytest.raises(ValueError, match="timestamps"):
        window_results(V, np.array([0, 1, 2, 2**63 - 1]), b, [pr.TimeWindow(2)], ["max"])
    # a decrease across keys is fine
    r = window_results(V, np.array([5, 6, 0, 1]), np.array([0, 2, 4]), [pr.TimeWindow(2)], ["count"])[0]
    assert r.key.tolist() == [0, 0, 1] and r.end.tolist() == [6, 8, 2]
    assert window_results(V, None, np.array([0]), [pr.CountWindow(2)], ["max"])[0].key.shape == (0,)


# ---------------------------------------------------------------------- the slide-1 road's reference
def slide1_per_key_reference(V, bounds, window: pr.CountWindow, aggs) -> WindowResult:
    """One count window's rows over every key by a ``pba_runtime.sliding_aggregate`` call per key and
    aggregation (``missing="propagate"``): the reference of the slide-1 road of :func:`window_results`
    (:func:`pba_runtime.kernels.compiled.keyed.count_slide1_values`), which must give its bits.

    """
    V, _, bounds, windows, aggs = _check(V, None, bounds, [window], aggs, "propagate", 1)
    none = np.empty(0, dtype=np.int64)
    keys, ends = [none], [none]
    vals = {a: [np.empty(0, dtype=np.float64 if a in _FLOAT else np.int64)] for a in aggs}
    for k in range(len(bounds) - 1):
        x = V[bounds[k] : bounds[k + 1]]
        e, _ = pr.sliding_aggregate(x, window=window, agg="count")
        keys.append(np.full(len(e), k, dtype=np.int64))
        ends.append(np.asarray(e, dtype=np.int64))
        for a in aggs:
            vals[a].append(np.asarray(pr.sliding_aggregate(x, window=window, agg=a)[1]))
    values = {a: np.concatenate(vals[a]) for a in aggs}
    return WindowResult(np.concatenate(keys), np.concatenate(ends), values, {a: None for a in aggs})
