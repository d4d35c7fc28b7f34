"""Row output for many keys (pba_runtime.engines.rows): the kernels against the per-row recompute, pandas'
rolling and the oracle's exactness floors."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import EXACT, Want, _sum_floor, assert_results_equal, exact_std

import pba_runtime as pr
from pba_runtime.engines import rows as R
from pba_runtime.engines.key_split import SPLIT_MIN_ROWS
from pba_runtime.kernels.compiled import rows as K

CLOSED = ("right", "left", "both", "neither")
FLOAT_AGGS = ("sum", "mean", "std", "var")
# ill-conditioned and non-finite values beside ordinary ones
SPECIAL = [1e12, 1e12 + 0.1, 1e12 + 0.7, 1e12 + 0.3, -1e12, 1e-3, 2e-3, 0.0, -0.0, 1.0, -2.5, 3.0, 7.0,
           math.nan, math.inf, -math.inf]


@st.composite
def cases(draw):
    lens = draw(st.lists(st.integers(0, 30), min_size=1, max_size=5))
    bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    n = int(bounds[-1])
    finite = st.floats(-1e3, 1e3, allow_nan=False)
    weights = draw(st.sampled_from(["special", "finite", "mixed"]))
    pick = {"special": st.sampled_from(SPECIAL), "finite": finite,
            "mixed": st.one_of(st.sampled_from(SPECIAL), finite)}[weights]
    V = np.array(draw(st.lists(pick, min_size=n, max_size=n)), dtype=float)
    timed = draw(st.booleans())
    if timed:
        steps = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 5, 30, 100]), min_size=n, max_size=n))
        T = np.array(steps, dtype=np.int64)
        for k in range(len(lens)):  # each key from its own start
            a, b = bounds[k], bounds[k + 1]
            T[a:b] = np.cumsum(T[a:b]) + draw(st.integers(-50, 50))
        window = pr.TimeWindow(draw(st.sampled_from([1, 2, 5, 10, 60])))
    else:
        T = None
        window = pr.CountWindow(draw(st.integers(1, 6)))
    missing = draw(st.sampled_from(["propagate", "skip"]))
    min_periods = draw(st.sampled_from([0, 1, 3, window.range]))
    closed = draw(st.sampled_from(CLOSED))
    return V, T, bounds, window, missing, min_periods, closed


def _same_exact(name, got, want):
    g, w = got[name][0], want[name][0]
    assert g.dtype == w.dtype, (name, g.dtype, w.dtype)
    assert np.array_equal(g, w, equal_nan=True), (name, g, w)


def _same_valid(name, got, want):
    g, w = got[name][1], want[name][1]
    assert (g is None) == (w is None), (name, g, w)
    if g is not None:
        assert np.array_equal(g, w), (name, g, w)


def _floors(V, T, bounds, window, missing, closed, name, ref):
    """The oracle's expected values for a float aggregation: the exact result with the rounding floor its
    window's values allow (a sum: ``n eps sum |v|``; a var: ``n`` subnormal steps, where squares of values
    below 1e-154 underflow; a std: that floor's square root)."""
    out = []
    for k in range(len(bounds) - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        for i in range(a, b):
            vals = V[R._window_rows(T, a, b, i, int(window.range), closed)]
            if missing == "skip":
                vals = vals[~np.isnan(vals)]
            w = ref[i]
            if name == "sum":
                out.append(Want(w, _sum_floor(vals)))
            elif name == "mean" and len(vals):
                out.append(Want(w, _sum_floor(vals) / len(vals)))
            elif name in ("var", "std"):
                sub = len(vals) * 2.0**-1074  # each squared deviation rounds by under one subnormal step
                out.append(Want(w, sub if name == "var" else sub**0.5))
            else:
                out.append(Want(w))
    return out


@settings(max_examples=400, deadline=None)
@given(cases())
def test_fast_equals_reference(case):
    V, T, bounds, window, missing, min_periods, closed = case
    kw = dict(missing=missing, min_periods=min_periods, closed=closed)
    got = R.row_results(V, T, bounds, window, R.KEYED_ROW_AGGS, **kw)
    want = R.row_results_reference(V, T, bounds, window, R.KEYED_ROW_AGGS, **kw)
    assert list(got) == list(R.KEYED_ROW_AGGS)
    for name in R.KEYED_ROW_AGGS:
        _same_valid(name, got, want)
        assert got[name][0].shape == (len(V),)
        if name in EXACT:
            _same_exact(name, got, want)
        else:
            assert got[name][0].dtype == np.float64
            wants = _floors(V, T, bounds, window, missing, closed, name, want[name][0])
            assert_results_equal(name, got[name][0].tolist(), wants)


@settings(max_examples=60, deadline=None)
@given(cases())
def test_kernels_compiled_equal_their_python_form(case):
    """Each kernel's ``py_func`` (the interpreter running the same loop) gives the compiled kernel's bits."""
    V, T, bounds, window, missing, _, closed = case
    n = len(V)
    timed = T is not None
    Tk = T if timed else np.empty(0, dtype=np.int64)
    skip = missing == "skip"
    args = (bounds, 0, len(bounds) - 1)
    S, E, S2, E2 = (np.empty(n, dtype=np.int64) for _ in range(4))
    K.row_bounds(Tk, *args, int(window.range), K.CLOSED[closed], timed, S, E)
    K.row_bounds.py_func(Tk, *args, int(window.range), K.CLOSED[closed], timed, S2, E2)
    assert np.array_equal(S, S2) and np.array_equal(E, E2)
    calls = [(K.row_nobs, (V, *args, S, E, skip), np.int64), (K.rows_sum, (V, *args, S, E, skip), float),
             (K.rows_var, (V, *args, S, E, skip), float)]
    for neg in (False, True):
        calls.append((K.rows_max, (V, *args, S, E, neg, skip), float))
        calls.append((K.rows_argmax, (V, Tk, *args, S, E, neg, skip, timed), np.int64))
    for fn, a, dtype in calls:
        fast, slow = np.empty(n, dtype=dtype), np.empty(n, dtype=dtype)
        fn(*a, fast)
        fn.py_func(*a, slow)
        assert fast.tobytes() == slow.tobytes(), fn


def _pandas(series, window, closed, m, name):
    roll = (series.rolling(f"{window.range}ms", closed=closed, min_periods=m) if isinstance(window, pr.TimeWindow)
            else series.rolling(window.range, closed=closed, min_periods=m))
    return getattr(roll, name)().to_numpy()


@pytest.mark.parametrize("timed", [True, False])
def test_equals_pandas_rolling(timed):
    rng = np.random.default_rng(7 + timed)
    names = ("max", "min", "sum", "count", "mean", "std", "var")
    for trial in range(40):
        lens = rng.integers(0, 40, rng.integers(1, 5))
        bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        n = int(bounds[-1])
        V = np.round(rng.normal(size=n) * 100, 1)
        V[rng.random(n) < 0.15] = np.nan
        if trial % 4 == 0:
            V = np.round(V)  # equal values: pandas' constant-window variance is exactly 0, as Chan's
        if timed:
            T = np.concatenate([np.cumsum(rng.choice([0, 0, 1, 3, 10, 40], size=b - a)) for a, b in
                                zip(bounds[:-1], bounds[1:])]).astype(np.int64)
            window = pr.TimeWindow(int(rng.choice([1, 5, 30, 60])))
        else:
            T = None
            window = pr.CountWindow(int(rng.integers(1, 7)))
        for closed in CLOSED:
            for m in sorted({0, 1, 3, window.range}):
                if not timed and m > window.range:
                    continue
                got = R.row_results(V, T, bounds, window, names, missing="skip", min_periods=m, closed=closed)
                for k in range(len(lens)):
                    a, b = bounds[k], bounds[k + 1]
                    index = pd.to_datetime(T[a:b], unit="ms") if timed else None
                    s = pd.Series(V[a:b], index=index)
                    for name in names:
                        want = _pandas(s, window, closed, m, name)
                        values, valid = got[name]
                        g = values[a:b].astype(float)
                        if valid is not None:
                            g = np.where(valid[a:b], g, np.nan)
                        where = f"{name} closed={closed} min_periods={m} {window}"
                        if name == "count":  # pandas' count is valid on rows, not values (the spec: values)
                            mine = ~np.isnan(g)
                            assert np.array_equal(g[mine], want[mine]), where
                            assert not (want[~mine] >= max(m, 1)).any(), where
                        elif name in ("max", "min"):
                            assert np.array_equal(g, want, equal_nan=True), where
                        else:
                            np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-9, err_msg=where)


def test_ill_conditioned_long_windows():
    """Runs of 1e12 beside runs of 1e-3, and 1e12 + small steps: every row within 1e-9 of the exact result
    (many flips of long fronts; a running sum with subtraction would be 1e-4 off on the 1e-3 runs)."""
    rng = np.random.default_rng(3)
    blocks = [np.full(rng.integers(5, 60), 1e12) + rng.integers(0, 8, 1) * 0.1 for _ in range(8)]
    blocks += [rng.random(rng.integers(5, 60)) * 1e-3 for _ in range(8)]
    rng.shuffle(blocks)
    V = np.concatenate(blocks)
    V2 = 1e12 + rng.choice([0.1, 0.7, 0.3, 0.9], size=300)
    V = np.concatenate([V, V2])
    bounds = np.array([0, len(V) - 300, len(V)])
    for window in (pr.CountWindow(50), pr.CountWindow(7)):
        got = R.row_results(V, None, bounds, window, FLOAT_AGGS)
        for k in range(2):
            a, b = bounds[k], bounds[k + 1]
            for i in range(a, b):
                vals = V[max(a, i + 1 - window.range): i + 1]
                assert_results_equal("sum", [got["sum"][0][i]], [Want(math.fsum(vals), _sum_floor(vals))])
                if len(vals) > 1:
                    assert_results_equal("std", [got["std"][0][i]], [exact_std(vals)])


def test_nonfinite_leave_the_window():
    V = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0, 4.0, 8.0])
    got = R.row_results(V, None, np.array([0, 7]), pr.CountWindow(3), ("sum", "max", "std", "argmax", "argmin"))
    s = got["sum"][0]
    assert np.isnan(s[:4]).all() and s[4] == -np.inf and s[5:].tolist() == [7.0, 14.0]
    assert np.isnan(got["max"][0][:3]).all() and got["max"][0][3:].tolist() == [np.inf, 2.0, 4.0, 8.0]
    assert np.isnan(got["std"][0][:5]).all() and np.allclose(got["std"][0][5:], [np.std([1, 2, 4], ddof=1),
                                                                             np.std([2, 4, 8], ddof=1)], rtol=1e-15)
    assert got["argmax"][0].tolist() == [0, 0, 0, 1, 4, 5, 6]  # NaN counts as largest, then the inf
    assert got["argmin"][0].tolist() == [0, 0, 0, 2, 2, 3, 4]  # NaN counts (np.argmin), then -inf
    skip = R.row_results(V, None, np.array([0, 7]), pr.CountWindow(3), ("sum", "max", "count"), missing="skip",
                         min_periods=1)
    assert skip["count"][0].tolist() == [0, 1, 2, 3, 3, 3, 3]
    assert skip["count"][1].tolist() == [False] + [True] * 6
    assert np.isnan(skip["sum"][0][0]) and skip["sum"][0][1] == np.inf and np.isnan(skip["sum"][0][2])


def test_time_window_ties_and_argmax_timestamps():
    V = np.array([1.0, 3.0, 3.0, 2.0, 5.0])
    T = np.array([0, 10, 10, 10, 100])
    bounds = np.array([0, 5])
    right = R.row_results(V, T, bounds, pr.TimeWindow(60), ("count", "argmax"))
    assert right["count"][0].tolist() == [1, 2, 3, 4, 1]  # the tied rows after a row are not in its window
    assert right["argmax"][0].tolist() == [0, 10, 10, 10, 100]
    left = R.row_results(V, T, bounds, pr.TimeWindow(60), ("count",), closed="left", min_periods=0)
    assert left["count"][0].tolist() == [0, 1, 1, 1, 0]  # none of a row's ties is in its window


def test_keys_split_between_threads_equal_one_thread():
    rng = np.random.default_rng(11)
    lens = rng.integers(0, 3000, 50)
    bounds = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    n = int(bounds[-1])
    assert n >= SPLIT_MIN_ROWS
    V = rng.normal(size=n)
    V[rng.random(n) < 0.01] = np.nan
    T = np.concatenate([np.cumsum(rng.integers(0, 5, size=x)) for x in lens]).astype(np.int64)
    aggs = R.KEYED_ROW_AGGS
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        both = R.row_results(V, T, bounds, pr.TimeWindow(40), aggs, missing="skip", pool=pool)
    half = 25
    cut = int(bounds[half])
    parts = [R.row_results(V[:cut], T[:cut], bounds[: half + 1], pr.TimeWindow(40), aggs, missing="skip"),
             R.row_results(V[cut:], T[cut:], bounds[half:] - cut, pr.TimeWindow(40), aggs, missing="skip")]
    for name in aggs:
        one = np.concatenate([p[name][0] for p in parts])
        assert one.tobytes() == both[name][0].tobytes(), name


def test_empty_and_bad_input():
    out = R.row_results(np.empty(0), None, np.array([0]), pr.CountWindow(3), ("max", "count"))
    assert out["max"][0].shape == (0,) and out["count"][0].dtype == np.int64 and out["max"][1] is None
    V = np.array([1.0, 2.0])
    b = np.array([0, 2])
    with pytest.raises(ValueError, match="aggs"):
        R.row_results(V, None, b, pr.CountWindow(2), ("median",))
    with pytest.raises(ValueError, match="closed"):
        R.row_results(V, None, b, pr.CountWindow(2), ("max",), closed="middle")
    with pytest.raises(ValueError, match="missing"):
        R.row_results(V, None, b, pr.CountWindow(2), ("max",), missing="drop")
    with pytest.raises(ValueError, match="min_periods"):
        R.row_results(V, None, b, pr.CountWindow(2), ("max",), min_periods=-1)
    with pytest.raises(ValueError, match="slide"):
        R.row_results(V, None, b, pr.CountWindow(2, 2), ("max",))
    with pytest.raises(ValueError, match="timestamps"):
        R.row_results(V, np.array([0, 1]), b, pr.CountWindow(2), ("max",))
    with pytest.raises(ValueError, match="timestamps"):
        R.row_results(V, None, b, pr.TimeWindow(2), ("max",))
    with pytest.raises(ValueError, match="non-decreasing"):
        R.row_results(V, np.array([5, 1]), b, pr.TimeWindow(2), ("max",))
    R.row_results(V, np.array([5, 1]), np.array([0, 1, 2]), pr.TimeWindow(2), ("max",))  # two keys: fine
    with pytest.raises(ValueError, match="timestamps"):
        R.row_results(V, np.array([np.iinfo(np.int64).min, 0]), b, pr.TimeWindow(2), ("max",))
    with pytest.raises(ValueError, match="bounds"):
        R.row_results(V, None, np.array([0, 3]), pr.CountWindow(2), ("max",))
