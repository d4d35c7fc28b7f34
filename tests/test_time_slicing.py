"""The compiled slicing of time-window batches (kernels/time_slicing.py) against its numpy reference.

Fast == slow (bottleneck's habit): slice ids and episode starts exactly, the folded slice
partials bit for bit for max/min (any order gives the same) and within rounding for sums;
then whole operators, compiled engine against numpy engine, through random batch splits.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime import windows
from pba_runtime.kernels import time_slicing as slicing
from pba_runtime.kernels.read_only import read_only

pytest.importorskip("numba")


@st.composite
def time_batches(draw):
    s = draw(st.integers(1, 50))
    r = s * draw(st.integers(1, 8)) + draw(st.sampled_from([0, 0, draw(st.integers(0, s - 1))]))
    r = max(r, s)
    off = draw(st.integers(-20, 20))
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 7, s, r, 5 * r + 3]), min_size=0, max_size=200))
    t0 = draw(st.integers(-10_000, 10_000))
    ts = (t0 + np.cumsum(np.asarray(steps, dtype=np.int64))).astype(np.int64)
    has_last = draw(st.booleans()) and len(ts) > 0
    last = ((int(ts[0]) - off) // s - draw(st.integers(0, r // s + 3))) if has_last else 0
    return ts, s, off, r, last, has_last


@settings(max_examples=300, deadline=None)
@given(time_batches())
def test_time_slices_equal_the_numpy_reference(case):
    ts, s, off, r, last, has_last = case
    G, starts = slicing.time_slices(ts, s, off, r, last, has_last)
    G_ref, starts_ref = windows.time_slices(ts, s, off, r, last, has_last)
    assert G.tolist() == G_ref.tolist()
    assert starts.tolist() == starts_ref.tolist()


@pytest.mark.parametrize("agg", ["max", "min", "sum", "mean", "moment_sketch"])
@settings(max_examples=60, deadline=None)
@given(case=time_batches(), seed=st.integers(0, 2**32 - 1))
def test_fold_equals_reduce_segments(agg, case, seed):
    ts, s, off, *_ = case
    if not len(ts):
        return
    rng = np.random.default_rng(seed)
    vals = rng.choice([0.0, -0.0, 1.5, -2.0, 1e12, 1e-3, np.nan, np.inf, -np.inf], size=len(ts))
    if agg == "moment_sketch":  # values >= 0 (its logarithms); 23 columns: folded a tuple at a time
        vals = np.abs(vals)
    engine = pr.kernels.resolve_engine(pr.get_aggregation(agg), "compiled")
    kernel = engine.kernel
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        P = kernel.lift(vals, None)
    G = (ts - off) // s
    S0 = int(G[0])
    width = int(G[-1]) - S0 + 1
    fast, slow = kernel.identity_array(width), kernel.identity_array(width)
    if P.ndim == 1:  # read-only partials, as PBA passes them: the specialisation it runs
        slicing.fold_scalar(read_only(P), G, S0, fast, engine.ops[0])
    else:
        slicing.fold_columns(read_only(P), G, S0, fast, engine._ops_array)
        by_column = kernel.identity_array(width)  # each column alone, folded in the same order: the same bits
        for k, op in enumerate(engine._ops_array):
            slicing.fold_scalar(read_only(P)[:, k], G, S0, by_column[:, k], int(op))
        np.testing.assert_array_equal(fast, by_column)
    starts = np.insert(np.flatnonzero(np.diff(G)) + 1, 0, 0)
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf: NaN, as the fold gives
        slow[G[starts] - S0] = kernel.reduce_segments(P, starts)
    if agg in ("max", "min"):
        np.testing.assert_array_equal(fast, slow)
    else:
        np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.parametrize("agg", ["max", "sum", "mean", "std", "argmax", "moment_sketch"])
@pytest.mark.parametrize("window", [pr.TimeWindow(range=60, slide=10), pr.TimeWindow(range=65, slide=10, offset=3),
                                    pr.TimeWindow(range=7, slide=7)])
def test_compiled_time_batches_equal_numpy_through_random_splits(agg, window):
    rng = np.random.default_rng(7)
    n = 3000
    steps = rng.choice([0, 1, 2, 5, 200], size=n, p=[0.2, 0.4, 0.3, 0.09, 0.01])
    ts = np.cumsum(steps).astype(np.int64) - 500
    x = rng.normal(size=n)
    if agg == "moment_sketch":  # values >= 0 (its logarithms); 23 columns, folded a tuple at a time
        x = np.abs(x)
    x[rng.integers(0, n, 10)] = np.nan
    ref_ends, ref = pr.sliding_aggregate(x, window=window, agg=agg, timestamps=ts, algorithm="sba", engine="numpy")
    for algorithm in ("sba", "pba"):
        cuts = np.sort(rng.choice(np.arange(1, n), size=6, replace=False))
        with pr.create(algorithm, window, agg, engine="compiled") as op:
            parts = [op.insert_many(x[a:b], ts[a:b]) for a, b in zip([0, *cuts], [*cuts, n])]
            parts.append(op.flush())
        ends = np.concatenate([e for e, _ in parts])
        res = np.concatenate([r for _, r in parts])
        assert ends.tolist() == ref_ends.tolist()
        if agg in ("max", "argmax"):
            np.testing.assert_array_equal(res, ref)
        else:
            np.testing.assert_allclose(res, ref, rtol=1e-9, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("agg", ["max", "sum", "mean"])
@pytest.mark.parametrize("window", [pr.TimeWindow(range=4000, slide=1500), pr.TimeWindow(range=60, slide=10, offset=3)])
def test_compiled_time_batches_give_one_batchs_results_through_any_split(agg, window):
    """Every split into batches gives one batch's results: max bit for bit, float sums to rounding (each batch's
    merge cuts rows of q slices from its own first window; docs/kernels.md)."""
    rng = np.random.default_rng(3)
    n = 2000
    ts = np.cumsum(rng.integers(0, 700 if window.range > 100 else 7, n)).astype(np.int64)
    x = rng.normal(size=n).round(3)
    for algorithm in ("sba", "pba"):
        with pr.create(algorithm, window, agg, engine="compiled") as op:
            whole = np.concatenate([op.insert_many(x, ts)[1], op.flush()[1]])
        for seed in range(5):
            cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, n), 8, replace=False))
            with pr.create(algorithm, window, agg, engine="compiled") as op:
                parts = [op.insert_many(x[a:b], ts[a:b]) for a, b in zip([0, *cuts], [*cuts, n])] + [op.flush()]
            got = np.concatenate([r for _, r in parts])
            if agg == "max":
                assert got.tobytes() == whole.tobytes()
            else:
                np.testing.assert_allclose(got, whole, rtol=1e-12, atol=1e-15)
