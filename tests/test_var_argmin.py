"""``var`` and ``argmin`` (issue 41): each added by its family's module alone, checked against peers.

The differential matrix (``tests/test_differential.py``) runs both through every algorithm against the
oracle; here they meet what users compare them with: pandas' ``rolling().var()``, bottleneck's
``move_var(ddof=1)`` and ``move_argmin``, numpy per window, on every engine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pba_runtime as pr
from pba_runtime.aggregations import CompiledForms

ENGINES = ("compiled", "numpy", "python")


def _windows(x, r, s):
    return [x[e - r:e] for e in range(r, len(x) + 1) if (e - r) % s == 0]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("r,s", [(1, 1), (2, 1), (64, 1), (100, 7), (37, 37)])
def test_var_equals_pandas_bottleneck_and_numpy(engine, r, s):
    pd = pytest.importorskip("pandas")
    bn = pytest.importorskip("bottleneck")
    rng = np.random.default_rng(r * 131 + s)
    x = np.concatenate([rng.normal(1e6, 3.0, 500), rng.normal(0.0, 1e-3, 500)])
    for algorithm in ("pba", "sba", "two_stacks", "soe"):
        ends, got = pr.sliding_aggregate(x, window=pr.CountWindow(range=r, slide=s), agg="var", algorithm=algorithm,
                                         engine=engine if algorithm in ("pba", "sba") else "auto")
        want = np.array([np.var(w, ddof=1) if len(w) > 1 else math.nan for w in _windows(x, r, s)])
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
        if s == 1 and r > 1:  # (bottleneck's ddof=1 variance of one value is not NaN)
            # the peers keep running sums of squares: once the values near 1e6 leave, what is left of their
            # rounding swamps a variance near 1e-6 (ours stays exact: above), so they are compared before
            head = slice(0, 500 - r + 1)
            np.testing.assert_allclose(got[head], pd.Series(x).rolling(r).var().to_numpy()[r - 1:][head], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got[head], bn.move_var(x, r, ddof=1)[r - 1:][head], rtol=1e-6, atol=1e-6)


def test_var_is_std_squared_and_nan_like_std():
    x = np.array([1.0, 2.0, 4.0, math.nan, 5.0, math.inf, 1.0, 1.0, -0.0, 0.0])
    w = pr.CountWindow(range=3, slide=1)
    _, var = pr.sliding_aggregate(x, window=w, agg="var")
    _, std = pr.sliding_aggregate(x, window=w, agg="std")
    assert np.array_equal(np.isnan(var), np.isnan(std))
    np.testing.assert_allclose(var[~np.isnan(var)], std[~np.isnan(std)] ** 2, rtol=1e-12)
    _, one = pr.sliding_aggregate([3.0, 4.0], window=pr.CountWindow(range=1, slide=1), agg="var")
    assert np.isnan(one).all()  # n == 1: NaN, as pandas' var (ddof=1)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("r,s", [(1, 1), (3, 1), (64, 1), (100, 7), (37, 37)])
def test_argmin_equals_numpy_and_bottleneck(engine, r, s):
    bn = pytest.importorskip("bottleneck")
    rng = np.random.default_rng(r * 17 + s)
    ties = rng.integers(0, 5, 600).astype(float)  # many ties: the oldest wins, as np.argmin's first
    smooth = rng.normal(size=600)  # no ties: bottleneck's window-relative index gives the same position
    for x in (ties, smooth):
        for algorithm in ("pba", "sba", "two_stacks", "slick_deque", "daba"):
            ends, got = pr.sliding_aggregate(x, window=pr.CountWindow(range=r, slide=s), agg="argmin",
                                             algorithm=algorithm,
                                             engine=engine if algorithm in ("pba", "sba") else "auto")
            want = [e - r + int(np.argmin(x[e - r:e])) for e in range(r, len(x) + 1) if (e - r) % s == 0]
            assert got.tolist() == want
        if s == 1 and x is smooth:
            assert got.tolist() == (np.arange(r - 1, len(x)) - bn.move_argmin(x, r)[r - 1:]).astype(int).tolist()


def test_argmin_over_time_windows_gives_timestamps_the_oldest_on_ties():
    x = np.array([2.0, 1.0, 1.0, 3.0, -0.0, 0.0, math.nan, 5.0])
    ts = np.array([0, 10, 10, 20, 30, 40, 50, 60])
    ends, got = pr.sliding_aggregate(x, window=pr.TimeWindow(range=30, slide=10), agg="argmin", timestamps=ts)
    want = []
    for end in ends.tolist():
        m = (ts >= end - 30) & (ts < end)
        want.append(int(ts[m][np.argmin(x[m])]))
    assert got.tolist() == want


def test_a_family_declaration_is_all_an_engine_reads():
    """An aggregation that declares std's compiled forms gets std's compiled merge: nothing is found by name."""
    std = pr.get_aggregation("std")
    mine = pr.Aggregation(lift=std.lift, combine=std.combine, lower=std.lower, identity=std.identity, name="mystd",
                          inverse=std.inverse, commutative=True, result="float", kernel=std.kernel,
                          compiled=CompiledForms(layout="std", lift="lift_std", lower="lower_std"))
    from pba_runtime.kernels import resolve_engine

    eng = resolve_engine(mine, "auto")
    assert (eng.name, eng.layout) == ("compiled", "std")
    x = np.random.default_rng(1).normal(size=300)
    w = pr.CountWindow(range=16, slide=3)
    assert np.array_equal(pr.sliding_aggregate(x, window=w, agg=mine)[1], pr.sliding_aggregate(x, window=w, agg="std")[1])


def test_compiled_forms_refuse_what_no_engine_has():
    with pytest.raises(ValueError, match="layout"):
        CompiledForms(layout="median")
    with pytest.raises(TypeError, match="compiled"):
        pr.Aggregation(lift=float, combine=max, lower=float, identity=0.0, compiled="std")
