"""Exact quantiles over sliding windows: the sorted-window kernel against numpy per window, its plain-Python
form, ``sliding_aggregate`` against a recompute from the spec's windows, peers (bottleneck, pandas), bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime.kernels.compiled.quantiles import METHODS, window_quantiles, window_quantiles_reference

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e12, 1e-3, -1e12, 1.0, 1.0, 2.0]


@st.composite
def streams(draw, max_n=80):
    n = draw(st.integers(0, max_n))
    pick = st.one_of(st.sampled_from(SPECIAL), st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 1)))
    return np.array(draw(st.lists(pick, min_size=n, max_size=n)), dtype=np.float64)


@st.composite
def bounded(draw):
    """Values and monotone window bounds ``[S[i], E[i])`` (empty windows, jumps, shrinking and growing)."""
    v = draw(streams())
    n = len(v)
    m = draw(st.integers(0, 40))
    S = np.sort(np.array(draw(st.lists(st.integers(0, n), min_size=m, max_size=m)), dtype=np.int64))
    L = np.array(draw(st.lists(st.integers(0, 15), min_size=m, max_size=m)), dtype=np.int64)
    E = np.maximum(np.maximum.accumulate(np.minimum(S + L, n)) if m else S, S).astype(np.int64)
    return v, S, E


METHOD_NAMES = list(METHODS)


@given(bounded(), st.sampled_from([0.0, 0.01, 0.25, 0.5, 0.75, 0.99, 1.0, 1 / 3]), st.sampled_from(METHOD_NAMES),
       st.booleans(), st.integers(0, 4))
def test_the_kernel_is_numpy_per_window(case, q, method, skip, min_periods):
    v, S, E = case
    mp = max(min_periods, 1) if not skip else min_periods
    out = np.full(len(S), -7.0)
    window_quantiles(v, S, E, q, METHODS[method], skip, mp, 0, len(S), out)
    want = window_quantiles_reference(v, S, E, q, method, skip, mp)
    np.testing.assert_array_equal(out, want)
    # cut anywhere, each range starts its own sorted window: the same results
    if len(S) > 1:
        cut = len(S) // 3
        parts = np.full(len(S), -7.0)
        window_quantiles(v, S, E, q, METHODS[method], skip, mp, 0, cut, parts)
        window_quantiles(v, S, E, q, METHODS[method], skip, mp, cut, len(S), parts)
        np.testing.assert_array_equal(parts, want)


@given(bounded(), st.sampled_from(METHOD_NAMES), st.booleans())
def test_the_plain_python_form_is_the_compiled_kernel(case, method, skip):
    v, S, E = case
    a, b = np.full(len(S), -7.0), np.full(len(S), -7.0)
    window_quantiles(v, S, E, 0.3, METHODS[method], skip, 1, 0, len(S), a)
    window_quantiles.py_func(v, S, E, 0.3, METHODS[method], skip, 1, 0, len(S), b)
    np.testing.assert_array_equal(a, b)


def _spec_windows(window, n, t=None):
    """The windows ``docs/semantics.md`` emits, as (end, row selection), written from its words."""
    r, s = int(window.range), int(window.slide)
    if t is None:
        return [(j * s + r, slice(j * s, j * s + r)) for j in range(max(0, (n - r) // s + 1))]
    out = []
    if n:
        off = int(window.offset)
        for j in range((int(t[0]) - off - r) // s + 1, (int(t[-1]) - off) // s + 1):
            lo = j * s + off
            sel = np.flatnonzero((t >= lo) & (t < lo + r))
            if len(sel):
                out.append((lo + r, slice(int(sel[0]), int(sel[-1]) + 1)))
    return out


@np.errstate(invalid="ignore")
def _naive(v, spans, agg, missing, mp):
    res = []
    for _, sel in spans:
        x = v[sel]
        if missing == "skip":
            x = x[~np.isnan(x)]
        if not len(x) or len(x) < mp or np.isnan(x).any():
            res.append(np.nan)
        elif agg == "median":
            res.append(np.median(x))
        else:
            res.append(np.quantile(x, agg.q, method=agg.interpolation))
    return np.array(res, dtype=np.float64)


AGGS = ["median", pr.quantile(0.99), pr.quantile(0.1, "lower"), pr.quantile(0.5, "nearest"),
        pr.quantile(0.7, "midpoint"), pr.quantile(0.3, "higher")]


@given(streams(120), st.integers(1, 9), st.integers(1, 9), st.sampled_from(AGGS), st.sampled_from(["propagate", "skip"]),
       st.integers(0, 3))
def test_count_windows_of_any_slide_are_the_spec(v, r, s, agg, missing, mp):
    s = min(s, r)  # r % s != 0 included
    w = pr.CountWindow(r, s)
    ends, got = pr.sliding_aggregate(v, window=w, agg=agg, missing=missing, min_periods=mp)
    spans = _spec_windows(w, len(v))
    assert ends.tolist() == [e for e, _ in spans]
    np.testing.assert_array_equal(got, _naive(v, spans, agg, missing, mp if missing == "skip" else 1))


@given(streams(100), st.integers(1, 40), st.integers(1, 40), st.integers(-5, 5), st.sampled_from(AGGS),
       st.sampled_from(["propagate", "skip"]), st.data())
def test_time_windows_with_gaps_and_ties_are_the_spec(v, r, s, off, agg, missing, data):
    s = min(s, r)
    steps = data.draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 50]), min_size=len(v), max_size=len(v)))
    t = np.cumsum(np.array(steps, dtype=np.int64)) - 7
    w = pr.TimeWindow(r, s, offset=off % s)
    ends, got = pr.sliding_aggregate(v, window=w, agg=agg, timestamps=t, missing=missing)
    spans = _spec_windows(w, len(v), t)
    assert ends.tolist() == [e for e, _ in spans]
    np.testing.assert_array_equal(got, _naive(v, spans, agg, missing, 1))


def test_a_large_batch_split_across_threads_is_one_call():
    """Past the split threshold the windows run as two ranges at once: the same results as numpy."""
    rng = np.random.default_rng(3)
    v = rng.normal(size=60_000).round(2)
    v[rng.random(len(v)) < 0.01] = np.nan
    ends, got = pr.sliding_aggregate(v, window=pr.CountWindow(300, 7), agg=pr.quantile(0.95), missing="skip")
    spans = _spec_windows(pr.CountWindow(300, 7), len(v))
    np.testing.assert_array_equal(got, _naive(v, spans, pr.quantile(0.95), "skip", 1))


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_windows_long_enough_for_the_radix_sort(method):
    """Parts of RADIX_MIN values and more are radix-sorted (-0.0 read as 0.0, ties kept in order): the same
    results as numpy, over ties, infinities, signed zeros and NaN, both policies."""
    from pba_runtime.kernels.compiled.quantiles import RADIX_MIN

    rng = np.random.default_rng(len(method))
    n = 6 * RADIX_MIN
    v = rng.choice(np.array(SPECIAL + [3.5, -2.25, 7.0]), n) * rng.choice([1.0, 1.0, 0.5], n)
    fresh = rng.random(n) < 0.3
    v[fresh] = rng.normal(size=int(fresh.sum())).round(1)
    S = np.sort(rng.integers(0, n - 2 * RADIX_MIN, 300))
    E = np.maximum.accumulate(S + rng.integers(RADIX_MIN, 2 * RADIX_MIN, 300))
    for skip in (False, True):
        vv = v if skip else np.where(np.isnan(v), 1.5, v)
        out = np.empty(len(S))
        window_quantiles(vv, S, E, 0.37, METHODS[method], skip, 1, 0, len(S), out)
        np.testing.assert_array_equal(out, window_quantiles_reference(vv, S, E, 0.37, method, skip, 1))


@pytest.mark.parametrize("window", [1, 2, 64, 1000])
def test_bottleneck_and_pandas_agree(window):
    """Peers nobody here wrote: bottleneck's move_median (NaN skipped, min_count) and pandas' rolling
    median and quantile (skip, min_periods)."""
    bn = pytest.importorskip("bottleneck")
    rng = np.random.default_rng(window)
    v = rng.normal(size=5000).round(1)
    v[rng.random(len(v)) < 0.05] = np.nan
    w = pr.CountWindow(window)
    _, med = pr.sliding_aggregate(v, window=w, agg="median", missing="skip", min_periods=1)
    np.testing.assert_array_equal(med, bn.move_median(v, window, min_count=1)[window - 1:])
    np.testing.assert_allclose(med, pd.Series(v).rolling(window, min_periods=1).median().to_numpy()[window - 1:],
                               rtol=1e-15, atol=0)
    for q, how in [(0.99, "linear"), (0.25, "lower"), (0.5, "midpoint"), (0.9, "nearest")]:
        mp = min(2, window)
        _, got = pr.sliding_aggregate(v, window=w, agg=pr.quantile(q, how), missing="skip", min_periods=mp)
        want = pd.Series(v).rolling(window, min_periods=mp).quantile(q, interpolation=how).to_numpy()[window - 1:]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match=r"q must be a number in \[0, 1\]"):
        pr.quantile(-0.1)
    with pytest.raises(ValueError, match="interpolation must be one of 'linear'"):
        pr.quantile(0.5, "cubic")
    with pytest.raises(ValueError, match="algorithm 'pba' merges partials of a monoid; agg 'median' is an order"):
        pr.sliding_aggregate([1.0, 2.0], window=pr.CountWindow(2), agg="median", algorithm="pba")
    with pytest.raises(ValueError, match="timestamps are required"):
        pr.sliding_aggregate([1.0, 2.0], window=pr.TimeWindow(2), agg="median")
    with pytest.raises(ValueError, match="timestamps must be non-decreasing"):
        pr.sliding_aggregate([1.0, 2.0], window=pr.TimeWindow(2), agg="median", timestamps=[5, 1])
    with pytest.raises(TypeError, match="must be real numbers"):
        pr.sliding_aggregate(["a", "b"], window=pr.CountWindow(2), agg="median")
    with pytest.raises(ValueError, match="missing must be"):
        pr.sliding_aggregate([1.0], window=pr.CountWindow(1), agg="median", missing="drop")


# --------------------------------------------------------------------------- in a query
def _plugs(n=4000, seed=0, nan=0.05):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"plug": rng.integers(0, 6, n), "t": np.sort(rng.integers(0, 900_000, n)),
                       "load": rng.normal(10, 3, n).round(1)})
    df.loc[rng.random(n) < nan, "load"] = np.nan
    df["ts"] = pd.to_datetime(df["t"], unit="ms")
    return df


@pytest.mark.parametrize("missing", ["skip", "propagate"])
def test_query_windows_are_sliding_aggregate_per_key(missing):
    """The spec's words: each (column, aggregation, window) of a query is what sliding_aggregate gives over
    the key's values; here for median and p99 over a count and a time window, with other outputs beside."""
    df = _plugs()
    wins = {"16": pr.CountWindow(16, 3), "1min": pr.TimeWindow("1min", "10s")}
    for label, w in wins.items():
        q = pr.Query(by="plug", on="ts", windows=w, aggs={"load": ["median", pr.quantile(0.99), "max"]},
                     missing=missing, min_periods=3 if missing == "skip" else None)
        got = q.run(df)
        assert list(got.columns)[-3:] == ["load_median", "load_p99", "load_max"]
        for plug, g in df.sort_values(["plug", "ts"], kind="stable").groupby("plug"):
            mine = got[got["plug"] == plug]
            t = g["t"].to_numpy() if isinstance(w, pr.TimeWindow) else None
            opts = {"missing": missing, "min_periods": 3} if missing == "skip" else {}
            for name, agg in [("load_median", "median"), ("load_p99", pr.quantile(0.99))]:
                ends, want = pr.sliding_aggregate(g["load"].to_numpy(), window=w.in_unit("ms") if t is not None
                                                  else w, agg=agg, timestamps=t, **opts)
                np.testing.assert_array_equal(mine[name].to_numpy(dtype=float), want, err_msg=f"{label} {name}")


@pytest.mark.parametrize("closed", ["right", "left", "both", "neither"])
def test_query_rows_are_pandas_rolling(closed):
    df = _plugs(seed=1)
    q = pr.Query(by="plug", on="ts", windows=pr.TimeWindow("90s"), aggs={"load": ["median", pr.quantile(0.9, "lower")]},
                 align="rows", closed=closed)
    got = q.run(df)
    g = df.sort_values(["plug", "ts"], kind="stable")
    roll = g.groupby("plug").rolling("90s", on="ts", closed=closed)["load"]
    np.testing.assert_allclose(got.loc[g.index, "load_median"].to_numpy(dtype=float), roll.median().to_numpy(),
                               rtol=1e-15, equal_nan=True)
    np.testing.assert_allclose(got.loc[g.index, "load_p90_lower"].to_numpy(dtype=float),
                               roll.quantile(0.9, interpolation="lower").to_numpy(), rtol=0, equal_nan=True)


def test_query_count_rows_equal_polars_rolling_quantile_over_keys():
    pl = pytest.importorskip("polars")
    df = _plugs(seed=2, nan=0.0)
    q = pr.Query(by="plug", on="ts", windows=pr.CountWindow(25), aggs={"load": ["median", pr.quantile(0.75)]},
                 align="rows")
    frame = pl.from_pandas(df).with_row_index("row")
    got = q.run(frame)
    want = frame.sort("plug", "ts", maintain_order=True).with_columns(
        pl.col("load").rolling_median(25).over("plug").alias("m"),
        pl.col("load").rolling_quantile(0.75, "linear", 25).over("plug").alias("p")).sort("row")
    np.testing.assert_allclose(got["load_median"].to_numpy(), want["m"].to_numpy(), rtol=1e-15, equal_nan=True)
    np.testing.assert_allclose(got["load_p75"].to_numpy(), want["p"].to_numpy(), rtol=1e-12, equal_nan=True)
    assert got["load_median"].null_count() == want["m"].null_count() > 0


def test_a_query_with_quantiles_pickles_and_names_its_outputs():
    import pickle

    q = pr.Query(by="plug", on="ts", windows=pr.CountWindow(4),
                 aggs={"load": ["median", pr.quantile(0.999)], "low": ("load", pr.quantile(0.05, "nearest"))})
    assert [o.name for o in pickle.loads(pickle.dumps(q)).outputs] == ["load_median", "load_p99_9", "low"]
    with pytest.raises(TypeError, match=r"pr.quantile\(q\)"):
        pr.Query(by="plug", on="ts", windows=pr.CountWindow(4), aggs={"load": [0.5]})


# --------------------------------------------------------------------------- the operator, per tuple and in batches
def _windows_and_stream(data, timed):
    v = data.draw(streams(90))
    r = data.draw(st.integers(1, 12))
    s = data.draw(st.integers(1, r))
    if timed:
        steps = data.draw(st.lists(st.sampled_from([0, 0, 1, 2, 5, 40]), min_size=len(v), max_size=len(v)))
        t = np.cumsum(np.array(steps, dtype=np.int64))
        return v, pr.TimeWindow(r, s, offset=data.draw(st.integers(0, s - 1))), t
    return v, pr.CountWindow(r, s), None


@given(st.data(), st.booleans(), st.sampled_from(AGGS), st.sampled_from(["propagate", "skip"]))
def test_the_operator_gives_the_batch_answer_through_any_split_and_a_snapshot(data, timed, agg, missing):
    """Per tuple, random batch splits and a snapshot/restore at a random cut: the windows and bits of
    sliding_aggregate's one call (itself the spec, above)."""
    v, w, t = _windows_and_stream(data, timed)
    want_ends, want = pr.sliding_aggregate(v, window=w, agg=agg, timestamps=t, missing=missing, min_periods=2)
    op = pr.create("auto", w, agg, missing=missing, min_periods=2)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(v)), max_size=5)))
    snap_at = data.draw(st.integers(0, len(cuts)))
    ends, res = [], []
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(v)])):
        if i == snap_at:  # carry on in a fresh operator from a snapshot
            op = pr.create("sorted_window", w, agg, missing=missing, min_periods=2).restore(op.snapshot())
        if b - a == 1 and data.draw(st.booleans()):
            got = op.insert(v[a], int(t[a]) if timed else None)
            ends += [e for e, _ in got]
            res += [x for _, x in got]
            continue
        e, x = op.insert_many(v[a:b], t[a:b] if timed else None)
        ends += e.tolist()
        res += x.tolist()
    e, x = op.flush()
    ends += e.tolist()
    res += x.tolist()
    assert ends == want_ends.tolist()
    np.testing.assert_array_equal(np.array(res, dtype=float), want)
    assert op.stats()["windows"] == len(want)


def test_the_operator_keeps_only_what_a_window_to_come_holds():
    op = pr.create("auto", pr.CountWindow(100, 10), pr.quantile(0.9))
    for _ in range(50):
        op.insert_many(np.random.default_rng(0).normal(size=1000))
    assert op.state_bytes() <= (100 + 10) * 8
    op = pr.create("auto", pr.TimeWindow(1000, 100), "median")
    op.insert_many(np.ones(100_000), np.arange(100_000, dtype=np.int64))
    assert op.state_bytes() <= 2 * 1100 * 8


def test_operators_refuse_what_they_cannot_carry():
    with pytest.raises(ValueError, match="algorithm 'pba' merges partials of a monoid"):
        pr.create("pba", pr.CountWindow(4), "median")
    with pytest.raises(ValueError, match="allowed_lateness"):
        pr.create("auto", pr.CountWindow(4), "median", allowed_lateness=2)
    op = pr.create("auto", pr.CountWindow(4), pr.quantile(0.5))
    with pytest.raises(ValueError, match="state was taken with aggregation"):
        op.restore(pr.create("auto", pr.CountWindow(4), pr.quantile(0.6)).snapshot())
    op.flush()
    with pytest.raises(ValueError, match="flushed"):
        op.insert(1.0)


@given(st.data(), st.integers(0, 6))
def test_late_tuples_are_those_the_reorder_buffer_calls_late(data, lateness):
    """Within the lateness, any arrival order gives the sorted stream's windows; later tuples are counted and
    returned as the other algorithms' reorder buffer does (its late tuples are the same ones)."""
    n = data.draw(st.integers(0, 60))
    t = np.array(data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)), dtype=np.int64)
    v = np.array(data.draw(st.lists(st.floats(-5, 5, allow_nan=False), min_size=n, max_size=n)))
    w = pr.TimeWindow(6, 2)
    op = pr.create("auto", w, "median", allowed_lateness=lateness)
    ref = pr.create("sba", w, "collect", allowed_lateness=lateness)
    cut = data.draw(st.integers(0, n))
    ends, res = [], []
    for a, b in ((0, cut), (cut, n)):
        e, x = op.insert_many(v[a:b], t[a:b])
        ends += e.tolist()
        res += x.tolist()
        ref.insert_many(v[a:b], t[a:b])
    e, x = op.flush()
    ends += e.tolist()
    res += x.tolist()
    late = op.take_late()
    assert late == ref.take_late() and op.stats()["late"] == len(late)
    kept = np.ones(n, dtype=bool)
    for lv, lt in late:  # the on-time tuples, in timestamp order (ties: arrival)
        i = next(i for i in range(n) if kept[i] and v[i] == lv and t[i] == lt)
        kept[i] = False
    order = np.argsort(t[kept], kind="stable")
    want_ends, want = pr.sliding_aggregate(v[kept][order], window=w, agg="median", timestamps=t[kept][order])
    assert ends == want_ends.tolist()
    np.testing.assert_array_equal(np.array(res, dtype=float), want)
