"""The quantile sketch (``pr.quantile(q, relative_error=eps)``): compiled forms against their plain references,
the windows kernel against the monoid merged per window, the error bound against numpy's exact ``lower``
quantile, every algorithm of partials carrying the monoid, queries, bad input."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime.aggregations import sketches as sk
from pba_runtime.kernels.compiled.sketches import window_sketch_quantiles

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e12, 1e-3, -1e12, -1e-3, 1.0, 1.0, 2.0, 7.25, -3.5]
QS = [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0, 1 / 3]


@st.composite
def streams(draw, max_n=60, nan=True):
    n = draw(st.integers(0, max_n))
    pool = SPECIAL if nan else SPECIAL[1:]
    pick = st.one_of(st.sampled_from(pool), st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False),
                     st.floats(1e-300, 1e300).map(lambda x: x * (1 if int(math.log10(x)) % 2 else -1)))
    return np.array(draw(st.lists(pick, min_size=n, max_size=n)), dtype=np.float64)


def _fold(agg, v):
    p = agg.identity
    for x in v:
        p = agg.combine(p, agg.lift(x))
    return p


def _tree(agg, parts):
    """Merge in a balanced tree, right to left: another order than the fold's."""
    if not parts:
        return agg.identity
    while len(parts) > 1:
        parts = [agg.combine(parts[i + 1], parts[i]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float))


# --------------------------------------------------------------------------- the monoid, fast == slow
@given(streams(), st.sampled_from([2, 3, 8, 64, 2048]), st.sampled_from([0.001, 0.01, 0.05]))
def test_the_compiled_merge_is_its_reference_in_any_order(v, K, eps):
    agg = sk.quantile_sketch(0.5, eps, max_buckets=K)
    lg = math.log(sk.gamma_of(eps))
    ref = agg.identity.copy()
    for x in v:
        lift = agg.lift(x)
        _same(lift, sk.lift_reference(float(x), lg, K))
        ref = sk.combine_reference(ref, lift, K)
    _same(_fold(agg, v), ref)
    _same(_tree(agg, [agg.lift(x) for x in v]), ref)  # associative and commutative: the same partial
    assert agg.combine(agg.identity, ref).tolist() == ref.tolist() == agg.combine(ref, agg.identity).tolist()


@given(streams(), st.sampled_from([2, 5, 2048]), st.sampled_from(QS))
def test_the_compiled_lower_is_its_reference(v, K, q):
    agg = sk.quantile_sketch(q, 0.01, max_buckets=K)
    p = _fold(agg, v)
    want = sk.lower_reference(p, q, math.log(sk.gamma_of(0.01)), K)
    _same(agg.lower(p), want)


@st.composite
def bounded(draw):
    """Values and monotone window bounds ``[S[i], E[i])`` (empty windows, jumps, shrinking and growing)."""
    v = draw(streams(70))
    n = len(v)
    m = draw(st.integers(0, 30))
    S = np.sort(np.array(draw(st.lists(st.integers(0, n), min_size=m, max_size=m)), dtype=np.int64))
    L = np.array(draw(st.lists(st.integers(0, 15), min_size=m, max_size=m)), dtype=np.int64)
    E = np.maximum(np.maximum.accumulate(np.minimum(S + L, n)) if m else S, S).astype(np.int64)
    return v, S, E


@given(bounded(), st.sampled_from([2, 4, 2048]), st.booleans(), st.integers(1, 4))
def test_the_windows_kernel_is_the_monoid_merged_per_window(case, K, skip, mp):
    v, S, E = case
    qs = np.array(QS)
    eps = 0.02
    lg = math.log(sk.gamma_of(eps))
    out = np.full((len(S), len(qs)), -7.0)
    window_sketch_quantiles(v, S, E, qs, lg, K, skip, mp, 0, len(S), out)
    aggs = [sk.quantile_sketch(q, eps, max_buckets=K) for q in qs]
    for i in range(len(S)):
        x = v[S[i]:E[i]]
        if skip:
            x = x[~np.isnan(x)]
        p = _fold(aggs[0], x)
        for j, agg in enumerate(aggs):
            want = np.nan if (skip and len(x) < mp) else agg.lower(p)
            _same(out[i, j], want)
    if len(S) > 1:  # cut anywhere: each range builds its own histogram, the same results
        cut = len(S) // 2
        parts = np.full_like(out, -7.0)
        window_sketch_quantiles(v, S, E, qs, lg, K, skip, mp, 0, cut, parts)
        window_sketch_quantiles(v, S, E, qs, lg, K, skip, mp, cut, len(S), parts)
        _same(parts, out)


@given(streams(200, nan=False), st.sampled_from(QS), st.sampled_from([0.001, 0.01, 0.1]))
def test_the_result_is_within_eps_of_the_exact_lower_quantile(v, q, eps):
    """The contract: ``|got - want| <= eps |want|`` against numpy's ``lower`` quantile (no collapse: 2**21 buckets
    cover 1e-300 to 1e300 at these errors)."""
    if not len(v):
        return
    ends, got = pr.sliding_aggregate(v, window=pr.CountWindow(len(v)), agg=pr.quantile(q, relative_error=eps,
                                                                                      max_buckets=1 << 21))
    want = np.quantile(v, q, method="lower")
    assert got[0] == want or abs(got[0] - want) <= eps * abs(want), (got[0], want)


def test_collapsed_buckets_keep_the_high_quantiles_and_the_sign():
    """Past ``max_buckets`` keys the smallest magnitudes share the lowest bucket: the top of the range stays
    within eps; a quantile among the collapsed values has the right sign and the lowest bucket's value."""
    v = np.concatenate([np.geomspace(1e-6, 1e6, 1201), -np.geomspace(1e-6, 1e6, 1201)])
    agg = pr.quantile(0.99, relative_error=0.01, max_buckets=64)
    got = pr.sliding_aggregate(v, window=pr.CountWindow(len(v)), agg=agg)[1][0]
    want = np.quantile(v, 0.99, method="lower")
    assert abs(got - want) <= 0.01 * want
    low = pr.sliding_aggregate(v, window=pr.CountWindow(len(v)), agg=pr.quantile(0.6, relative_error=0.01,
                                                                                  max_buckets=64))[1][0]
    gamma = sk.gamma_of(0.01)
    assert np.quantile(v, 0.6, method="lower") < low <= 1e6 * gamma ** -(64 - 2)  # the lowest bucket, raised


# --------------------------------------------------------------------------- every algorithm carries the monoid
def _stream(seed, n=300, nan=0.05):
    rng = np.random.default_rng(seed)
    v = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).round(3)
    v[rng.random(n) < nan] = np.nan
    return v


@pytest.mark.parametrize("algorithm", pr.algorithms.ALGORITHMS)
@pytest.mark.parametrize("missing", ["propagate", "skip"])
def test_every_algorithm_gives_the_windows_kernel_result(algorithm, missing):
    v = _stream(1)
    t = np.cumsum(np.random.default_rng(2).integers(0, 4, len(v)))
    agg = pr.quantile(0.9, relative_error=0.01, max_buckets=256)
    for w, ts in ((pr.CountWindow(20, 3), None), (pr.TimeWindow(25, 7), t)):
        want = pr.sliding_aggregate(v, window=w, agg=agg, timestamps=ts, missing=missing, min_periods=2)
        try:
            got = pr.sliding_aggregate(v, window=w, agg=agg, timestamps=ts, missing=missing, min_periods=2,
                                       algorithm=algorithm)
        except ValueError as exc:  # an algorithm needing what a sketch is not (invertible, selective): by name
            assert f"algorithm {algorithm!r} needs" in str(exc) and "p90_sketch" in str(exc)
            continue
        _same(got[0], want[0])
        _same(got[1], want[1])


@given(st.data(), st.sampled_from(["pba", "sba", "two_stacks"]), st.booleans())
def test_per_tuple_batches_and_a_snapshot_give_the_batch_answer(data, algorithm, timed):
    v = data.draw(streams(80))
    r = data.draw(st.integers(1, 10))
    s = data.draw(st.integers(1, r))
    t = np.cumsum(np.array(data.draw(st.lists(st.sampled_from([0, 1, 2, 9]), min_size=len(v), max_size=len(v))),
                           dtype=np.int64)) if timed else None
    w = pr.TimeWindow(r, s) if timed else pr.CountWindow(r, s)
    agg = pr.quantile(0.5, relative_error=0.01, max_buckets=16)
    want_ends, want = pr.sliding_aggregate(v, window=w, agg=agg, timestamps=t)
    op = pr.create(algorithm, w, agg)
    cut = data.draw(st.integers(0, len(v)))
    ends, res = [], []
    for a, b in ((0, cut), (cut, len(v))):
        if a == cut:
            op = pr.create(algorithm, w, agg).restore(pickle.loads(pickle.dumps(op.snapshot())))
        for i in range(a, b):
            for e, x in op.insert(v[i], int(t[i]) if timed else None):
                ends.append(e)
                res.append(x)
    e, x = op.flush()
    assert ends + list(e) == want_ends.tolist()
    _same(res + list(x), want)


def test_pba_builds_the_sketch_lcs_on_the_worker_pool():
    v = _stream(3, n=5000, nan=0.0)
    agg = pr.quantile(0.99, relative_error=0.01)
    w = pr.CountWindow(512, 4)
    with pr.WorkerPool(workers=1) as pool:
        got = pr.sliding_aggregate(v, window=w, agg=agg, algorithm="pba", pool=pool)
    _same(got[1], pr.sliding_aggregate(v, window=w, agg=agg)[1])


# --------------------------------------------------------------------------- queries
def test_a_query_answers_several_sketched_quantiles_in_one_pass():
    rng = np.random.default_rng(4)
    n = 3000
    df = pd.DataFrame({"plug": rng.integers(0, 5, n), "ts": pd.to_datetime(np.sort(rng.integers(0, 600_000, n)), unit="ms"),
                       "load": rng.lognormal(2, 1, n).round(2)})
    df.loc[rng.random(n) < 0.03, "load"] = np.nan
    sketches = [pr.quantile(q, relative_error=0.01) for q in (0.5, 0.9, 0.99)]
    w = pr.TimeWindow("1min", "10s")
    got = pr.aggregate(df, by="plug", on="ts", windows=w, aggs={"load": [*sketches, pr.quantile(0.99, "lower")]},
                       missing="skip")
    assert list(got.columns)[-4:] == ["load_p50_sketch", "load_p90_sketch", "load_p99_sketch", "load_p99_lower"]
    exact, sketched = got["load_p99_lower"].to_numpy(float), got["load_p99_sketch"].to_numpy(float)
    ok = ~np.isnan(exact)
    assert ok.sum() > 100 and np.array_equal(ok, ~np.isnan(sketched))
    assert np.all(np.abs(sketched[ok] - exact[ok]) <= 0.01 * np.abs(exact[ok]))
    for plug, g in df.sort_values(["plug", "ts"], kind="stable").groupby("plug"):
        t = g["ts"].to_numpy().astype("datetime64[ms]").astype(np.int64)
        for s in sketches:
            _, want = pr.sliding_aggregate(g["load"].to_numpy(), window=w.in_unit("ms"), agg=s, timestamps=t,
                                           missing="skip")
            _same(got.loc[got["plug"] == plug, "load_" + s.name].to_numpy(float), want)


def test_query_rows_are_within_eps_of_pandas_rolling_lower_quantile():
    rng = np.random.default_rng(5)
    n = 2000
    df = pd.DataFrame({"plug": rng.integers(0, 4, n), "load": rng.normal(10, 3, n).round(2)})
    got = pr.aggregate(df, by="plug", windows=pr.CountWindow(30), aggs={"load": pr.quantile(0.75, relative_error=0.01)},
                       align="rows")
    want = df.groupby("plug")["load"].rolling(30).quantile(0.75, interpolation="lower").reset_index(level=0, drop=True)
    want = want.sort_index().to_numpy()
    g = got["load_p75_sketch"].to_numpy(float)
    ok = ~np.isnan(want)
    assert np.array_equal(ok, ~np.isnan(g))
    assert np.all(np.abs(g[ok] - want[ok]) <= 0.01 * np.abs(want[ok]))


# --------------------------------------------------------------------------- bad input
def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="relative_error must be a number in"):
        pr.quantile(0.5, relative_error=0.0)
    with pytest.raises(ValueError, match="relative_error must be a number in"):
        pr.quantile(0.5, relative_error="1%")
    with pytest.raises(ValueError, match="max_buckets must be an integer"):
        pr.quantile(0.5, relative_error=0.01, max_buckets=1)
    with pytest.raises(ValueError, match="q must be a number"):
        pr.quantile(2, relative_error=0.01)
    with pytest.raises(ValueError, match="interpolation must be 'lower'"):
        pr.quantile(0.5, "linear", relative_error=0.01)
    assert pr.quantile(0.5, "lower", relative_error=0.01) == pr.quantile(0.5, relative_error=0.01)
    s = pr.quantile(0.999, relative_error=0.01)
    assert s.name == "p99_9_sketch" and s.partial_bytes == 8 * (6 + 2 * 2048)
    assert pickle.loads(pickle.dumps(s)) == s
