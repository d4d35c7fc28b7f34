"""missing="skip" and min_periods (docs/semantics.md, Queries over frames): nulls and NaN are not values.

The oracle is written from the rule: per window (the windows of tests/oracle.py, missing positions
included), drop the missing values, aggregate the rest as the oracle does, null below ``min_periods``.
Every algorithm x built-in aggregation x count and time windows, per tuple and in batches, is checked
against it; slide-1 count windows also against pandas' rolling.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import _agg, assert_results_equal
from streams import run_batches, run_per_tuple

import pba_runtime as pr

AGGS = sorted(pr.BUILTIN_AGGREGATIONS)
NUMERIC = [a for a in AGGS if a != "collect"]
MIN_PERIODS = (0, 1, 3)
NAN = math.nan


# --------------------------------------------------------------------------- the oracle
def _is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _skip_result(agg: str, vals: list, pos: list, mp: int):
    """One window: the non-missing ``vals`` (positions ``pos``) aggregated, null below ``mp`` values."""
    keep = [(v, p) for v, p in zip(vals, pos) if not _is_missing(v)]
    n = len(keep)
    vector = agg == "moment_sketch"
    null = None if agg == "collect" else (np.full(23, NAN) if vector else NAN)
    if n < mp:
        return null
    if n == 0:  # min_periods=0: the aggregation of no values where it has one
        if agg in ("sum", "count"):
            return 0.0
        if agg == "collect":
            return []
        if vector:
            return np.array([math.inf, -math.inf] + [0.0] * 21)
        return NAN
    x = np.array([v for v, _ in keep], dtype=float)
    p = np.array([q for _, q in keep], dtype=np.int64)
    res = _agg(agg, x, p)
    if agg in ("count", "argmax", "argmin"):
        return float(res)
    return res


def skip_count_windows(values, r: int, s: int, agg: str, mp: int):
    ends, res = [], []
    k = 0
    while k * s + r <= len(values):
        lo = k * s
        ends.append(lo + r)
        res.append(_skip_result(agg, list(values[lo:lo + r]), list(range(lo, lo + r)), mp))
        k += 1
    return ends, res


def skip_time_windows(values, ts, r: int, s: int, agg: str, mp: int, offset: int = 0):
    ts = np.asarray(ts, dtype=np.int64)
    ends, res = [], []
    if not len(ts):
        return ends, res
    k = (int(ts[0]) - offset - r) // s + 1
    while k <= (int(ts[-1]) - offset) // s:
        lo = k * s + offset
        idx = np.flatnonzero((ts >= lo) & (ts < lo + r))
        if len(idx):  # a window holding a tuple is emitted, missing or not
            ends.append(lo + r)
            res.append(_skip_result(agg, [values[i] for i in idx], ts[idx].tolist(), mp))
        k += 1
    return ends, res


def assert_skip_equal(agg: str, got, want) -> None:
    """Nulls where the oracle has them, the oracle's comparison (tests/oracle.py) elsewhere."""
    got, want = list(got), list(want)
    assert len(got) == len(want), f"{len(got)} results, expected {len(want)}"
    if agg == "collect":
        assert [None if g is None else [float(v) for v in g] for g in got] == want
        return
    exact = agg in ("max", "min", "count", "argmax", "argmin")
    null_w = [bool(np.all(np.isnan(np.asarray(w, dtype=float)))) for w in want]
    null_g = [bool(np.all(np.isnan(np.asarray(g, dtype=float)))) for g in got]
    assert null_g == null_w, f"{agg}: nulls at {null_g}, expected {null_w}"
    for g in got:
        assert not isinstance(g, (int, np.integer)), f"{agg}: an int result {g!r} under skip"
    keep = [i for i, n in enumerate(null_w) if not n]
    if exact:
        assert [float(got[i]) for i in keep] == [float(want[i]) for i in keep]
    else:
        assert_results_equal(agg, [got[i] for i in keep], [want[i] for i in keep])


# --------------------------------------------------------------------------- the matrix
STEPPED = ("daba", "flatfat", "soe")


def make(alg: str, window, agg, mp: int, **options):
    if alg in STEPPED:
        options.setdefault("engine", "python")
    return pr.create(alg, window, agg, missing="skip", min_periods=mp, **options)


def _accepts(alg: str, agg: str, mp: int) -> bool:
    try:
        make(alg, pr.CountWindow(range=2, slide=1), agg, mp).close()
        return True
    except ValueError:
        return False


MATRIX = [(alg, agg) for alg in pr.ALGORITHMS for agg in AGGS if _accepts(alg, agg, 3) or _accepts(alg, agg, 1)]


def value_strategy(agg: str):
    missing = st.sampled_from([NAN, None])
    if agg in ("geomean", "moment_sketch"):
        good = st.floats(min_value=0.125, max_value=8.0, allow_nan=False, allow_subnormal=False)
    else:
        good = st.one_of(st.integers(min_value=-5, max_value=5).map(float),
                         st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_subnormal=False))
    return st.one_of(good, good, missing)


@st.composite
def count_case(draw, agg: str):
    r = draw(st.integers(1, 12))
    s = draw(st.sampled_from([1, r, max(1, r // 2), draw(st.integers(1, r))]))
    values = draw(st.lists(value_strategy(agg), max_size=50))
    return r, s, values


@st.composite
def time_case(draw, agg: str):
    r = draw(st.integers(1, 20))
    s = draw(st.sampled_from([1, r, max(1, r // 3), draw(st.integers(1, r))]))
    offset = draw(st.integers(0, s - 1))
    values = draw(st.lists(value_strategy(agg), max_size=40))
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 2, s, r - 1, r, r + 1, 3 * r + 7]),
                         min_size=len(values), max_size=len(values)))
    ts = (draw(st.integers(-30, 30)) + np.cumsum(gaps)).astype(np.int64) if values else np.zeros(0, np.int64)
    return r, s, offset, values, ts


def _splits(draw, n: int) -> list[int]:
    return [0] + sorted(draw(st.lists(st.integers(0, n), max_size=3))) + [n]


def _batch_values(values, nullable: bool):
    """The batch form of a stream: floats with NaN, or (``nullable``) a pandas Float64 array with <NA>."""
    if nullable:
        pd = pytest.importorskip("pandas")
        return pd.array([None if v is None else v for v in values], dtype="Float64")
    return np.array([NAN if v is None else v for v in values], dtype=float)


@settings(max_examples=25, deadline=None)
@pytest.mark.parametrize("alg,agg", MATRIX)
@given(data=st.data())
def test_count_windows_skip_like_the_oracle(alg, agg, data):
    mp = data.draw(st.sampled_from(MIN_PERIODS))
    if not _accepts(alg, agg, mp):
        return
    r, s, values = data.draw(count_case(agg))
    want_ends, want = skip_count_windows(values, r, s, agg, mp)
    win = pr.CountWindow(range=r, slide=s)
    with make(alg, win, agg, mp) as op:
        ends, got = run_per_tuple(op, values)
    assert ends == want_ends
    assert_skip_equal(agg, got, want)
    batch = _batch_values(values, data.draw(st.booleans()))
    with make(alg, win, agg, mp) as op:
        ends, got = run_batches(op, batch, _splits(data.draw, len(values)))
    assert ends == want_ends
    assert_skip_equal(agg, got, want)


@settings(max_examples=25, deadline=None)
@pytest.mark.parametrize("alg,agg", MATRIX)
@given(data=st.data())
def test_time_windows_skip_like_the_oracle(alg, agg, data):
    mp = data.draw(st.sampled_from(MIN_PERIODS))
    if not _accepts(alg, agg, mp):
        return
    r, s, offset, values, ts = data.draw(time_case(agg))
    want_ends, want = skip_time_windows(values, ts, r, s, agg, mp, offset)
    win = pr.TimeWindow(range=r, slide=s, offset=offset)
    with make(alg, win, agg, mp) as op:
        ends, got = run_per_tuple(op, values, ts)
    assert ends == want_ends
    assert_skip_equal(agg, got, want)
    batch = _batch_values(values, data.draw(st.booleans()))
    with make(alg, win, agg, mp) as op:
        ends, got = run_batches(op, batch, _splits(data.draw, len(values)), ts)
    assert ends == want_ends
    assert_skip_equal(agg, got, want)


@settings(max_examples=30, deadline=None)
@pytest.mark.parametrize("agg", AGGS)
@given(data=st.data())
def test_sliding_aggregate_skips_on_every_engine(agg, data):
    """The one-shot entry point, algorithm "auto" and each engine, count and time windows."""
    mp = data.draw(st.sampled_from(MIN_PERIODS))
    engine = data.draw(st.sampled_from(["auto", "numpy", "python"]))
    if agg == "collect" and engine == "numpy":
        engine = "python"
    if data.draw(st.booleans()):
        r, s, values = data.draw(count_case(agg))
        win, ts = pr.CountWindow(range=r, slide=s), None
        want_ends, want = skip_count_windows(values, r, s, agg, mp)
    else:
        r, s, offset, values, ts = data.draw(time_case(agg))
        win = pr.TimeWindow(range=r, slide=s, offset=offset)
        want_ends, want = skip_time_windows(values, ts, r, s, agg, mp, offset)
    batch = _batch_values(values, data.draw(st.booleans()))
    ends, got = pr.sliding_aggregate(batch, window=win, agg=agg, timestamps=ts, missing="skip", min_periods=mp,
                                     engine=engine)
    assert ends.tolist() == want_ends
    if agg == "collect":
        assert isinstance(got, list)
    else:
        assert got.dtype == np.float64
    assert_skip_equal(agg, got, want)


@pytest.mark.parametrize("agg", ["max", "sum", "std", "argmax", "collect", "mean"])
def test_snapshot_restore_under_skip(agg):
    values = [1.0, NAN, 3.0, None, 5.0, 2.0, NAN, NAN, 4.0, 0.5, 7.0]
    ts = np.array([0, 1, 1, 3, 6, 7, 7, 9, 14, 15, 16], dtype=np.int64)
    win = pr.TimeWindow(range=5, slide=2)
    for alg in pr.ALGORITHMS:
        if not _accepts(alg, agg, 2):
            continue
        with make(alg, win, agg, 2) as op:
            full = run_per_tuple(op, values, ts)
        with make(alg, win, agg, 2) as op:
            e1, r1 = op.insert_many(_batch_values(values[:5], False), ts[:5])
            state = pickle.loads(pickle.dumps(op.snapshot()))
        with make(alg, win, agg, 2) as op2:
            op2.restore(state)
            e2, r2 = run_per_tuple(op2, values[5:], ts[5:])
        assert e1.tolist() + e2 == full[0], alg
        assert_skip_equal(agg, list(r1) + r2, full[1])
        with make(alg, win, agg, 3) as other, pytest.raises(ValueError, match="another aggregation"):
            other.restore(state)  # min_periods is part of what the aggregation computes


# --------------------------------------------------------------------------- pandas
@pytest.mark.parametrize("agg", ["max", "min", "sum", "mean", "std", "var", "count"])
@pytest.mark.parametrize("mp", [0, 1, 3])
def test_slide_one_count_windows_equal_pandas_rolling(agg, mp):
    """Equal to pandas, but for ``count`` with ``min_periods >= 1``: pandas' rolling count holds its
    ``min_periods`` against the window's positions, here (the rule of every aggregation) against its values."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(7)
    x = rng.normal(size=300)
    x[rng.random(300) < 0.3] = NAN
    x[100:110] = NAN  # a run longer than the window
    r = 5
    want = getattr(pd.Series(x).rolling(r, min_periods=mp), agg)().to_numpy()[r - 1:]
    if agg == "count":  # pandas' count of a full window whatever min_periods: null below it here
        want = np.where(want < mp, NAN, want)
    for alg in ("auto", "pba", "sba", "two_stacks", "daba"):
        if not _accepts(alg if alg != "auto" else "sba", agg, mp):
            continue
        ends, got = pr.sliding_aggregate(x, window=pr.CountWindow(r), agg=agg, algorithm=alg, missing="skip",
                                         min_periods=mp)
        assert ends.tolist() == list(range(r, 301))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=f"{alg} {agg}")


def test_nullable_arrow_polars_and_masked_input_skip():
    pd = pytest.importorskip("pandas")
    win = pr.CountWindow(2)
    inputs = [pd.Series([1.0, None, 3.0, None, 7.0], dtype="Float64"), pd.Series([1, None, 3, None, 7], dtype="Int64"),
              pd.Series([1.0, None, 3.0, None, 7.0], dtype="float64[pyarrow]"),
              np.ma.masked_array([1.0, 9.0, 3.0, 9.0, 7.0], mask=[0, 1, 0, 1, 0]),
              [1.0, None, 3.0, pd.NA, 7.0]]
    pa = pytest.importorskip("pyarrow")
    inputs.append(pa.array([1.0, None, 3.0, None, 7.0]))
    pl = pytest.importorskip("polars")
    inputs.append(pl.Series([1, None, 3, None, 7]))
    for values in inputs:
        _, got = pr.sliding_aggregate(values, window=win, agg="sum", missing="skip", min_periods=2)
        np.testing.assert_array_equal(got, [NAN, NAN, NAN, NAN], err_msg=str(values))  # one value a window
        _, got = pr.sliding_aggregate(values, window=win, agg="max", missing="skip")
        np.testing.assert_array_equal(got, [1.0, 3.0, 3.0, 7.0], err_msg=str(values))
        _, got = pr.sliding_aggregate(values, window=pr.CountWindow(3), agg="sum", missing="skip")
        np.testing.assert_array_equal(got, [4.0, 3.0, 10.0], err_msg=str(values))


def test_per_tuple_insert_skips_none_na_and_nan():
    pd = pytest.importorskip("pandas")
    for alg in pr.ALGORITHMS:
        if not _accepts(alg, "mean", 1):
            continue
        with make(alg, pr.CountWindow(range=3, slide=1), "mean", 1) as op:
            out = [op.insert(v) for v in (2.0, None, pd.NA, np.float32("nan"), 4.0)]
        assert [r for o in out for _, r in o][:1] == [2.0]
        assert math.isnan([r for o in out for _, r in o][1])
        assert [r for o in out for _, r in o][2] == 4.0


# --------------------------------------------------------------------------- results and bad input
def test_result_forms_under_skip():
    v = np.array([3.0, NAN, 1.0, NAN, NAN, NAN, 2.0])
    win = pr.CountWindow(range=3, slide=1)
    _, am = pr.sliding_aggregate(v, window=win, agg="argmax", missing="skip")
    assert am.dtype == np.float64 and np.array_equal(am, [0.0, 2.0, 2.0, NAN, 6.0], equal_nan=True)
    _, c = pr.sliding_aggregate(v, window=win, agg="count", missing="skip", min_periods=0)
    assert c.dtype == np.float64 and c.tolist() == [2.0, 1.0, 1.0, 0.0, 1.0]
    _, col = pr.sliding_aggregate(v, window=win, agg="collect", missing="skip", min_periods=0)
    assert col == [[3.0, 1.0], [1.0], [1.0], [], [2.0]]
    _, ms = pr.sliding_aggregate(v, window=win, agg="moment_sketch", missing="skip", min_periods=2)
    assert ms.shape == (5, 23) and np.isnan(ms[1:]).all() and ms[0, :3].tolist() == [1.0, 3.0, 2.0]
    _, ms = pr.sliding_aggregate(v[:1], window=pr.CountWindow(4), agg="moment_sketch", missing="skip")
    assert ms.shape == (0, 23)
    _, s0 = pr.sliding_aggregate(v, window=win, agg="sum", missing="skip", min_periods=0)
    assert s0.tolist() == [4.0, 1.0, 1.0, 0.0, 2.0]
    _, m0 = pr.sliding_aggregate(v, window=win, agg="max", missing="skip", min_periods=0)
    assert np.array_equal(m0, [3.0, 1.0, 1.0, NAN, 2.0], equal_nan=True)


def test_propagate_is_unchanged_and_refuses_nulls_pointing_to_skip():
    pd = pytest.importorskip("pandas")
    _, got = pr.sliding_aggregate([1.0, NAN, 3.0], window=pr.CountWindow(2), agg="max")
    assert np.isnan(got).all()
    _, got = pr.sliding_aggregate([1.0, 2.0, 3.0], window=pr.CountWindow(2), agg="count")
    assert got.dtype == np.int64
    with pytest.raises(ValueError, match='missing="skip"'):
        pr.sliding_aggregate(pd.Series([1.0, None], dtype="Float64"), window=pr.CountWindow(2), agg="max")


@pytest.mark.parametrize("kwargs, error, match", [
    ({"missing": "drop"}, ValueError, "missing must be 'propagate' or 'skip', got 'drop'"),
    ({"missing": None}, ValueError, "missing must be 'propagate' or 'skip'"),
    ({"missing": "skip", "min_periods": -1}, ValueError, "min_periods must be an integer >= 0, got -1"),
    ({"missing": "skip", "min_periods": 1.5}, TypeError, "min_periods must be an integer >= 0, got float 1.5"),
    ({"missing": "skip", "min_periods": True}, TypeError, "min_periods"),
])
def test_bad_missing_and_min_periods_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        pr.sliding_aggregate([1.0, 2.0], window=pr.CountWindow(2), agg="max", **kwargs)
    with pytest.raises(error, match=match):
        pr.create("sba", pr.CountWindow(2), "max", **kwargs)


def test_slick_deque_runs_selective_skips_up_to_one_value():
    with make("slick_deque", pr.CountWindow(3), "max", 1) as op:
        assert op.insert_many([1.0, NAN, NAN, NAN, 2.0])[1].tolist()[:1] == [1.0]
    with pytest.raises(ValueError, match="selective"):
        make("slick_deque", pr.CountWindow(3), "max", 2)


def test_skip_missing_is_shared_and_named():
    a = pr.aggregations.skip_missing("max", 2)
    assert a is pr.aggregations.skip_missing(a, 2) and a.inner is pr.get_aggregation("max")
    assert a.missing == "skip" and a.name == "max" and a.fingerprint != pr.aggregations.skip_missing("max", 3).fingerprint
    from pba_runtime.tasks import aggregation_ref, resolve_ref

    assert resolve_ref(aggregation_ref(a)) is a


def test_engines_of_the_skipping_forms():
    from pba_runtime.kernels import resolve_engine

    S = pr.aggregations.skip_missing
    assert resolve_engine(S("max", 3)).layout == "columns"
    assert resolve_engine(S("mean", 3)).layout == "columns"
    assert resolve_engine(S("std", 3)).layout == "std"
    assert resolve_engine(S("argmax", 3)).name == "numpy"
    assert resolve_engine(S("collect", 3)).name == "python"
    assert S("sum", 1).compiled.exact == "pair" and S("std", 1).compiled.exact == "std"


@pytest.mark.parametrize("agg", ["sum", "mean", "std"])
def test_subtract_on_evict_keeps_exact_accumulators_under_skip(agg):
    """Ill-conditioned data (1e12 beside 1e-3, NaN between): the 1e-9 of the results themselves."""
    values = [1e12, 1e-3, NAN, 1e-3, 2e-3, None, 1e-3, 3e-3, 1e12 + 0.5, 1e-3, NAN, 2e-3, 1e-3] * 3
    win = pr.CountWindow(range=3, slide=1)
    want_ends, want = skip_count_windows(values, 3, 1, agg, 1)
    for engine in ("python", "auto"):
        with pr.create("soe", win, agg, missing="skip", engine=engine) as op:
            ends, got = run_per_tuple(op, values)
        assert ends == want_ends
        assert_skip_equal(agg, got, want)
