"""The compiled engine against its slow references (bottleneck's habit): fast == slow over a corpus.

The numpy window merge (``pba_runtime.merge``) and the Python ``combine`` are the references;
every built-in aggregation runs on all three engines, count and time windows, ``r % s != 0``,
gaps, NaN, inf, -0.0 and ill-conditioned magnitudes, in one batch and through random batch
splits. Exact aggregations must agree bit for bit (up to the sign of a zero, on which numpy's
own SIMD and scalar maximum disagree); the others to rounding (relative 1e-9, the spec's).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime.batch import COMPILED_SPLIT_MIN, windows_with_ends
from pba_runtime.kernels import ENGINES, resolve_engine
from pba_runtime.kernels.read_only import read_only
from tests import oracle
from tests.oracle import assert_results_equal
from tests.streams import run_batches

KERNEL_AGGS = ["max", "min", "sum", "count", "mean", "std", "geomean", "argmax", "moment_sketch"]
NON_NEGATIVE = {"geomean", "moment_sketch"}
EXACT = {"max", "min", "count", "argmax"}


def _values(rng, n, agg, special=True):
    v = rng.normal(size=n) * 10.0 ** rng.integers(-3, 4)
    if special and n > 4:
        kinds = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e12, 1e-3]
        idx = rng.choice(n, size=max(1, n // 25), replace=False)
        v[idx] = rng.choice(kinds, size=len(idx))
    if agg in NON_NEGATIVE:
        v = np.abs(v)
    return v


def _same(agg, got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    if agg in EXACT:
        np.testing.assert_array_equal(got, want)  # NaN == NaN, -0.0 == 0.0
    else:
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("agg", KERNEL_AGGS)
@pytest.mark.parametrize("q", [2, 3, 8, 64])
def test_compiled_merge_equals_numpy_merge(agg, q):
    """The arithmetic layer alone: windows_with_ends with the compiled engine == the numpy one."""
    rng = np.random.default_rng(q)
    a = pr.get_aggregation(agg)
    eng = resolve_engine(a, "compiled")
    for n in (q, q + 1, 3 * q - 1, 5 * q + 3, 700):
        v = _values(rng, n, agg)
        P = a.kernel.lift(v, np.arange(n, dtype=np.float64) if a.positional else None)
        nwin = n - q + 1
        e1, r1 = windows_with_ends(a.kernel, P, q, nwin, 7, 3)
        e2, r2 = windows_with_ends(a.kernel, P, q, nwin, 7, 3, engine=eng)
        np.testing.assert_array_equal(e1, e2)
        _same(agg, a.kernel.lower(r2), a.kernel.lower(r1))


@pytest.mark.parametrize("agg", ["max", "sum", "std", "argmax", "mean"])
def test_compiled_merge_split_across_threads(agg):
    """A pool's thread takes half the windows: same results as one thread (the split is at a row)."""
    a = pr.get_aggregation(agg)
    eng = resolve_engine(a, "compiled")
    rng = np.random.default_rng(5)
    q = 1000
    n = COMPILED_SPLIT_MIN + 3 * q + 17
    v = _values(rng, n, agg)
    P = a.kernel.lift(v, np.arange(n, dtype=np.float64) if a.positional else None)
    nwin = n - q + 1
    with pr.WorkerPool("thread", workers=1) as pool:
        e1, r1 = windows_with_ends(a.kernel, P, q, nwin, 0, 1, pool, engine=eng)
    e2, r2 = windows_with_ends(a.kernel, P, q, nwin, 0, 1, None, engine=eng)
    np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(r1, r2)


def _run(engine, algorithm, window, agg, v, ts, bounds):
    with pr.create(algorithm, window, agg, engine=engine) as op:
        assert op.stats()["engine"] == engine
        return run_batches(op, v, bounds, ts)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("agg", KERNEL_AGGS)
def test_engines_agree_count_windows(agg, data):
    """compiled == numpy == python, per random batch split, count windows with r % s != 0."""
    s = data.draw(st.integers(1, 4), label="slide")
    r = data.draw(st.integers(s, 24), label="range")
    n = data.draw(st.integers(0, 160), label="n")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    v = _values(rng, n, agg)
    cuts = sorted(rng.choice(n + 1, size=min(n, 4), replace=False).tolist()) if n else []
    bounds = [0, *cuts, n]
    window = pr.CountWindow(range=r, slide=s)
    algorithm = data.draw(st.sampled_from(["pba", "sba"]), label="algorithm")
    ends_c, res_c = _run("compiled", algorithm, window, agg, v, None, bounds)
    ends_n, res_n = _run("numpy", algorithm, window, agg, v, None, bounds)
    ends_p, res_p = _run("python", algorithm, window, agg, v, None, bounds)
    assert ends_c == ends_n == ends_p
    _same(agg, res_c, res_n)
    assert_results_equal(agg, res_c, res_p, v[np.isfinite(v)])  # the scale of the finite values


@settings(max_examples=25, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("agg", KERNEL_AGGS)
def test_engines_agree_time_windows(agg, data):
    """compiled == numpy == python over time windows with gaps and repeated timestamps."""
    s = data.draw(st.integers(1, 5), label="slide")
    r = data.draw(st.integers(s, 30), label="range")
    n = data.draw(st.integers(0, 120), label="n")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    v = _values(rng, n, agg)
    steps = rng.choice([0, 0, 1, 2, 3, 40], size=n)  # repeats, small steps and gaps
    ts = np.cumsum(steps).astype(np.int64) - 50
    cuts = sorted(rng.choice(n + 1, size=min(n, 3), replace=False).tolist()) if n else []
    bounds = [0, *cuts, n]
    window = pr.TimeWindow(range=r, slide=s)
    ends_c, res_c = _run("compiled", "pba", window, agg, v, ts, bounds)
    ends_n, res_n = _run("numpy", "pba", window, agg, v, ts, bounds)
    ends_p, res_p = _run("python", "sba", window, agg, v, ts, bounds)
    assert ends_c == ends_n == ends_p
    _same(agg, res_c, res_n)
    assert_results_equal(agg, res_c, res_p, v[np.isfinite(v)])  # the scale of the finite values


def _time_case(data, n_max=120):
    """A time-window stream: slide, range (``r % s != 0`` half the time), offset, gaps (some longer than
    the range: new episodes), repeated timestamps, NaN/inf/-0.0 values, and a random batch split."""
    s = data.draw(st.integers(1, 5), label="slide")
    r = data.draw(st.sampled_from([s, 2 * s, 3 * s + 1, 4 * s, data.draw(st.integers(s, 30))]), label="range")
    off = data.draw(st.integers(-7, 7), label="offset")
    n = data.draw(st.integers(0, n_max), label="n")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    steps = rng.choice([0, 0, 1, 2, 3, s, r - 1, r, r + 1, 5 * r], size=n)
    ts = (np.cumsum(steps) - 50).astype(np.int64)
    cuts = sorted(rng.choice(n + 1, size=min(n, 4), replace=False).tolist()) if n else []
    return pr.TimeWindow(range=r, slide=s, offset=off), ts, [0, *cuts, n], rng


def _time_run(window, agg, v, ts, bounds, fused, algorithm="pba"):
    with pr.create(algorithm, window, agg, engine="compiled") as op:
        assert op._fused_time or not fused
        op._fused_time = fused  # False: the episode path (the reference)
        return run_batches(op, v, bounds, ts)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("agg", ["max", "min", "sum", "count", "mean", "std", "geomean", "argmax"])
def test_fused_time_windows_equal_the_episode_path(agg, data):
    """The fused time-window kernel (kernels/time_fused.py) == the episode path it replaces, through
    random batch splits, gaps, repeated timestamps and r % s != 0 (PBA and SBA)."""
    window, ts, bounds, rng = _time_case(data)
    v = _values(rng, len(ts), agg)
    algorithm = data.draw(st.sampled_from(["pba", "sba"]), label="algorithm")
    ends_f, res_f = _time_run(window, agg, v, ts, bounds, True, algorithm)
    ends_r, res_r = _time_run(window, agg, v, ts, bounds, False, algorithm)
    assert ends_f == ends_r
    _same(agg, res_f, res_r)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("agg", ["max", "argmax", "sum", "std"])
def test_fused_time_windows_any_split(agg, data):
    """Any batch split gives the one-batch results (bit for bit for max and argmax), and a snapshot taken
    between two batches, restored into a fresh operator, goes on as the uninterrupted run; per-tuple
    inserts mixed in between batches too."""
    window, ts, bounds, rng = _time_case(data)
    v = _values(rng, len(ts), agg)
    whole = _time_run(window, agg, v, ts, [0, len(ts)], True)
    split = _time_run(window, agg, v, ts, bounds, True)
    assert split[0] == whole[0]
    _same(agg, split[1], whole[1])
    mid = bounds[len(bounds) // 2]
    with pr.create("pba", window, agg, engine="compiled") as a:
        e1, r1 = a.insert_many(v[:mid], ts[:mid])
        snap = a.snapshot()
    with pr.create("pba", window, agg, engine="compiled") as b:
        b.restore(snap)
        k = min(len(ts), mid + 3)  # a few per-tuple inserts, then batches again
        out = [b.insert(float(x), int(t)) for x, t in zip(v[mid:k], ts[mid:k])]
        e2, r2 = run_batches(b, v[k:], [0, (len(ts) - k) // 2, len(ts) - k], ts[k:])
    ends = e1.tolist() + [e for o in out for e, _ in o] + e2
    res = list(r1) + [x for o in out for _, x in o] + list(r2)
    assert ends == whole[0]
    _same(agg, res, whole[1])


@pytest.mark.parametrize("window", [pr.TimeWindow(range=600, slide=4), pr.TimeWindow(range=603, slide=4, offset=2)],
                         ids=["r%s==0", "r%s!=0"])
@pytest.mark.parametrize("agg", ["max", "sum", "std", "argmax"])
def test_fused_time_windows_grow_their_result_array(agg, window):
    """Sparse tuples complete q + 1 windows each, beyond the first result array (4 per tuple): the
    kernel stops at an event, keeps its row in the state vector, and goes on in a larger array
    (with heads, ``r % s != 0``, too)."""
    rng = np.random.default_rng(3)
    ts = np.cumsum(rng.choice([1, 700, 2000], size=400)).astype(np.int64)
    v = _values(rng, len(ts), agg)
    fused = _time_run(window, agg, v, ts, [0, 150, 400], True)
    ref = _time_run(window, agg, v, ts, [0, 150, 400], False)
    assert len(fused[0]) > 4 * len(ts) + 2 * 150 + 4
    assert fused[0] == ref[0]
    _same(agg, fused[1], ref[1])
    want = oracle.time_windows(v, ts, window.range, window.slide, agg, offset=window.offset)
    assert fused[0] == list(want[0])
    assert_results_equal(agg, fused[1], want[1], v[np.isfinite(v)])


def test_fused_time_windows_cover_the_builtins_and_flush_in_one_call(monkeypatch):
    """Which aggregations run fused (moment_sketch's 23 columns and user aggregations keep the episode
    path), and the end-of-stream flush drains the open windows without a Python step per window."""
    from pba_runtime.algorithms.base import SlicedAggregator

    window = pr.TimeWindow(range=60, slide=10)
    for agg in ["max", "min", "sum", "count", "mean", "std", "geomean", "argmax"]:
        with pr.create("pba", window, agg) as op:
            assert op._fused_time, agg
    for agg in [pr.get_aggregation("moment_sketch"), ABSMAX]:
        with pr.create("pba", window, agg) as op:
            assert not op._fused_time, agg.name

    def refuse(*args):
        raise AssertionError("a Python step per window")

    monkeypatch.setattr(SlicedAggregator, "_advance", refuse)
    with pr.create("pba", window, "max") as op:
        op.insert_many(np.arange(5.0), np.array([0, 10, 20, 30, 45]))
        ends, res = op.flush()
    assert ends.tolist() == [50, 60, 70, 80, 90, 100] and res.tolist() == [4.0] * 6


def test_ill_conditioned_sums_stay_exact():
    """Runs of 1e12 beside runs of 1e-3: the compiled sum and std within 1e-12 of an exact recompute."""
    import math
    import statistics

    v = np.concatenate([np.full(300, 1e12), 1e-3 * (1 + np.arange(700) % 7), np.full(300, 1e12)])
    w = 256
    _, got = pr.sliding_aggregate(v, window=pr.CountWindow(range=w, slide=1), agg="sum", engine="compiled")
    want = np.array([math.fsum(v[k : k + w]) for k in range(len(v) - w + 1)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    _, got = pr.sliding_aggregate(v, window=pr.CountWindow(range=w, slide=1), agg="std", engine="compiled")
    from fractions import Fraction

    def exact_std(x):
        xs = [Fraction(float(t)) for t in x]
        m = sum(xs) / len(xs)
        return math.sqrt(float(sum((t - m) ** 2 for t in xs) / (len(xs) - 1)))

    want = np.array([exact_std(v[k : k + w]) for k in range(0, len(v) - w + 1, 37)])
    np.testing.assert_allclose(got[::37], want, rtol=1e-12)
    assert statistics.fmean(got) > 0


def test_engine_choice_and_errors():
    assert resolve_engine(pr.get_aggregation("std")).name == "compiled"
    assert resolve_engine(pr.get_aggregation("collect")).name == "python"
    with pytest.raises(ValueError, match="engine must be one of"):
        pr.create("pba", pr.CountWindow(range=4, slide=1), "max", engine="fast")
    with pytest.raises(ValueError, match="engine='compiled' is not available for aggregation 'collect'"):
        pr.create("pba", pr.CountWindow(range=4, slide=1), "collect", engine="compiled")
    with pytest.raises(ValueError, match="engine='numpy' needs"):
        pr.create("sba", pr.CountWindow(range=4, slide=1), "collect", engine="numpy")
    with pytest.raises(ValueError, match="not available for algorithm 'two_stacks'"):
        pr.create("two_stacks", pr.CountWindow(range=4, slide=1), "max", engine="compiled")
    with pr.create("two_stacks", pr.CountWindow(range=4, slide=1), "max", engine="python") as op:
        assert op.stats()["engine"] == "python"
    with pr.create("pba", pr.CountWindow(range=4, slide=1), "max") as op:
        assert op.stats()["engine"] == "compiled"
    assert set(ENGINES) == {"auto", "compiled", "numpy", "python"}


# ----------------------------------------------------------------------------- user aggregations
def _absmax_lift(v):
    return abs(v)


def _max_nan(a, b):
    return a if (a >= b or a != a) else b


def _ident(p):
    return p


def _pair(v):
    return (v, v)


def _pair_combine(a, b):  # NaN-propagating: Python's min/max are not associative over NaN
    lo = a[0] if (a[0] <= b[0] or a[0] != a[0]) else b[0]
    hi = a[1] if (a[1] >= b[1] or a[1] != a[1]) else b[1]
    return (lo, hi)


def _spread(p):
    return p[1] - p[0]


ABSMAX = pr.Aggregation(lift=_absmax_lift, combine=_max_nan, lower=_ident, identity=0.0, name="absmax")
SPREAD = pr.Aggregation(lift=_pair, combine=_pair_combine, lower=_spread, identity=(np.inf, -np.inf),
                        name="spread")
# math.ulp is a builtin numba has no implementation of (abs, max, float compile: tests/test_user_compile.py)
BUILTIN_CALLABLES = pr.Aggregation(lift=math.ulp, combine=max, lower=float, identity=0.0, name="ulpmax_builtins")


@pytest.mark.parametrize("agg", [ABSMAX, SPREAD], ids=lambda a: a.name)
def test_user_kernel_compiles_and_equals_python(agg):
    from pba_runtime.kernels.user import compile_aggregation

    kernel, why = compile_aggregation(agg)
    assert kernel is not None, why
    assert resolve_engine(agg).layout == "user"
    rng = np.random.default_rng(3)
    v = _values(rng, 500, "max")
    for q in (2, 5, 33):
        P = kernel.lift(v, None)
        nwin = len(v) - q + 1
        _, ref = windows_with_ends(kernel, P, q, nwin, 0, 1)  # the numpy merge over the kernel's combine
        _, got = windows_with_ends(kernel, P, q, nwin, 0, 1, engine=resolve_engine(agg))
        np.testing.assert_array_equal(kernel.lower(got), kernel.lower(ref))
        want = []
        for k in range(nwin):
            acc = agg.identity
            for x in v[k : k + q].tolist():
                acc = agg.combine(acc, agg.lift(x))
            want.append(agg.lower(acc))
        np.testing.assert_array_equal(kernel.lower(got), np.array(want, dtype=float))


def test_user_kernel_that_cannot_compile_says_why_once():
    from pba_runtime.kernels import CompileWarning

    with pytest.warns(CompileWarning, match=r"ulpmax_builtins.*cannot compile its lift math\.ulp .*'ulp'"):
        eng = resolve_engine(BUILTIN_CALLABLES, "auto")
    assert eng.name == "python" and "cannot compile" in eng.why
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: a second operator is quiet
        assert resolve_engine(BUILTIN_CALLABLES, "auto").name == "python"
    with pytest.raises(ValueError, match="engine='compiled' is not available for aggregation 'ulpmax_builtins'"):
        resolve_engine(BUILTIN_CALLABLES, "compiled")


def test_user_kernel_differing_from_python_is_not_used():
    """A function numba compiles to other results than Python's (integer overflow here) stays on Python."""
    from pba_runtime.kernels.user import compile_aggregation

    def lift(v):
        return float(int(v) + 9223372036854775807)  # Python's int grows; numba's int64 wraps to negative

    def combine(a, b):
        return max(a, b)

    def lower(p):
        return p

    agg = pr.Aggregation(lift=lift, combine=combine, lower=lower, identity=0.0, name="odd")
    kernel, why = compile_aggregation(agg)
    assert kernel is None and why.startswith("its compiled lift ") and why.endswith(".lift differs from the Python one")
    same = pr.Aggregation(lift=lambda v: float(int(v) + 1), combine=combine, lower=lower, identity=0.0, name="ok")
    kernel, why = compile_aggregation(same)  # the same functions without the overflow compile
    assert kernel is not None and why == ""


@pytest.mark.parametrize("agg", ["std", "mean", "argmax", "count"])
@pytest.mark.parametrize("q", [2, 7, 64])
def test_from_values_equals_partials_then_lower(agg, q):
    """The slide-1 shortcut (values in, lowered results out) gives the generic compiled path's bits."""
    from pba_runtime.batch import windows_from_values

    a = pr.get_aggregation(agg)
    eng = resolve_engine(a, "compiled")
    rng = np.random.default_rng(q)
    for n in (q, q + 1, 4 * q + 3, 600):
        v = _values(rng, n, agg)
        nwin = n - q + 1
        pos = np.arange(n, dtype=np.float64) + 11 if a.positional else None
        e1, r1 = windows_with_ends(eng.kernel, eng.kernel.lift(v, pos), q, nwin, 3, 1, engine=eng)
        e2, r2 = windows_from_values(eng, v, q, nwin, 3, 1, pos0=11)
        np.testing.assert_array_equal(e1, e2)
        np.testing.assert_array_equal(eng.kernel.lower(r1), r2)
        assert np.array_equal(np.signbit(eng.kernel.lower(r1)), np.signbit(r2))


def _tie_heavy(rng, n):
    """Few distinct values (many ties), with NaN, inf, -inf, -0.0 and 0.0 among them."""
    kinds = np.array([1.0, 2.0, -1.0, 0.0, -0.0, np.nan, np.inf, -np.inf, 2.0, 1.0])
    return kinds[rng.integers(0, len(kinds), size=n)]


@pytest.mark.parametrize("agg", ["std", "mean", "argmax", "count"])
@pytest.mark.parametrize("q", [2, 3, 5, 16])
def test_from_values_any_row_grouping_same_bits(agg, q):
    """The slide-1 merges process rows in pairs from ``a0``: calls starting at every row (so the
    pairs fall differently), ending inside a row (a last partial row), give one call's bits."""
    from pba_runtime.kernels import values_range

    eng = resolve_engine(pr.get_aggregation(agg), "compiled")
    rng = np.random.default_rng(q + 100)
    dtype = np.int64 if agg in ("argmax", "count") else np.float64
    for v in (_tie_heavy(rng, 9 * q + 4), _values(rng, 9 * q + 4, agg)):
        nwin = len(v) - q + 1
        whole = np.empty(nwin, dtype=dtype)
        values_range(eng, v, q, 0, nwin, whole, np.empty(0, dtype=np.int64), 0, 1, 5)
        none = np.empty(0, dtype=np.int64)
        for cut in range(q, nwin, q):  # two calls, the second from row cut // q: pairs fall differently
            parts = np.full(nwin, -7, dtype=dtype)
            values_range(eng, v, q, 0, cut, parts, none, 0, 1, 5)
            values_range(eng, v, q, cut, nwin, parts, none, 0, 1, 5)
            np.testing.assert_array_equal(parts.view(np.int64), whole.view(np.int64))
        for a1 in range(1, nwin, max(1, q // 2)):  # one call ending inside a row: its last row partial
            part = np.full(nwin, -7, dtype=dtype)
            values_range(eng, v, q, 0, a1, part, none, 0, 1, 5)
            np.testing.assert_array_equal(part[:a1].view(np.int64), whole[:a1].view(np.int64))


@pytest.mark.parametrize("q", [2, 7, 64])
def test_argmax_ties_nan_inf_zero_signs(q):
    """argmax from values over tie-heavy data equals the Python form (oldest of equal values, NaN largest)."""
    a = pr.get_aggregation("argmax")
    rng = np.random.default_rng(q)
    v = _tie_heavy(rng, 5 * q + 3)
    _, got = pr.sliding_aggregate(v, window=pr.CountWindow(range=q, slide=1), agg=a, engine="compiled")
    _, want = pr.sliding_aggregate(v, window=pr.CountWindow(range=q, slide=1), agg=a, engine="python")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_columns_merge_equals_scalar_merge_per_column():
    """merge_columns (rows once, runs of columns with one combine) == merge_scalar on each column alone."""
    from pba_runtime.kernels import compiled as C

    rng = np.random.default_rng(9)
    for ops in ([C.MIN, C.MAX] + [C.ADD] * 5, [C.MAX, C.FMIN, C.MUL, C.FMAX, C.ADD, C.ADD],  # a column at a time
                [C.MIN, C.MAX] + [C.ADD] * 21, [C.MAX, C.FMIN, C.MUL, C.FMAX] + [C.ADD, C.MIN] * 3):  # by rows
        assert (len(ops) >= C.COLUMNS_ROW_MIN) == (len(ops) > 7)
        K = len(ops)
        for q in (2, 3, 16):
            for n in (q, q + 1, 4 * q + 3):
                X = rng.normal(size=(n, K))
                X.flat[rng.choice(X.size, size=X.size // 8, replace=False)] = rng.choice(
                    [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e12], size=X.size // 8)
                nwin = n - q + 1
                got = np.empty((nwin, K))
                # read-only inputs, as merge_range passes them: the specialisations the engine runs (no other compile)
                C.merge_columns(read_only(X), q, 0, nwin, got, np.empty(0, dtype=np.int64), 0, 1, np.asarray(ops),
                                np.empty((q, K)), np.empty((q, K)))
                for k, op in enumerate(ops):
                    want = np.empty(nwin)
                    C.merge_scalar(read_only(np.ascontiguousarray(X[:, k])), q, 0, nwin, want, np.empty(0, dtype=np.int64),
                                   0, 1, op, np.empty(q), np.empty(q))
                    same = (got[:, k].view(np.int64) == want.view(np.int64)) | (np.isnan(got[:, k])
                                                                                 & np.isnan(want))
                    assert same.all(), (ops, q, n, k)  # bits, up to the sign of a NaN (inf - inf)


def test_moment_sketch_compiled_lift():
    """The compiled moment_sketch lift == the numpy one within rounding; a negative value is refused by name."""
    eng = resolve_engine(pr.get_aggregation("moment_sketch"), "compiled")
    base = pr.get_aggregation("moment_sketch").kernel
    v = np.abs(np.random.default_rng(2).normal(size=500)) * 3
    v[:5] = [0.0, np.nan, np.inf, 1e12, 1e-3]
    got, want = eng.kernel.lift(v, None), base.lift(v, None)
    np.testing.assert_allclose(got, want, rtol=1e-13, equal_nan=True)
    with pytest.raises(ValueError, match="moment_sketch"):
        eng.kernel.lift(np.array([1.0, -2.0]), None)


def test_compiled_split_when_the_pool_thread_is_busy():
    """The pool's only thread is held by another task: the main thread claims every block itself, gives
    the one-thread bits, and does not wait for the busy thread."""
    import threading

    from pba_runtime.batch import compiled_blocks

    a = pr.get_aggregation("sum")
    eng = resolve_engine(a, "compiled")
    q = 1000
    n = 3 * COMPILED_SPLIT_MIN + 17
    v = np.random.default_rng(4).normal(size=n)
    nwin = n - q + 1
    assert len(compiled_blocks(q, nwin)) > 2
    e1, r1 = windows_with_ends(a.kernel, v, q, nwin, 0, 1, None, engine=eng)
    release = threading.Event()
    with pr.WorkerPool("thread", workers=1) as pool:
        held = pool.submit(release.wait, 30)
        try:
            e2, r2 = windows_with_ends(a.kernel, v, q, nwin, 0, 1, pool, engine=eng)
        finally:
            release.set()
        held.result()
        e3, r3 = windows_with_ends(a.kernel, v, q, nwin, 0, 1, pool, engine=eng)  # and with it free
    for e, r in ((e2, r2), (e3, r3)):
        np.testing.assert_array_equal(e, e1)
        np.testing.assert_array_equal(r.view(np.int64), r1.view(np.int64))


def test_compiled_split_repairs_a_failed_block():
    """A pool thread's block that raises is merged again on the main thread: the one-thread bits."""
    import threading
    import warnings

    from pba_runtime.batch import _merge_compiled
    from pba_runtime.kernels import merge_range

    eng = resolve_engine(pr.get_aggregation("max"), "compiled")
    q = 1000
    n = 3 * COMPILED_SPLIT_MIN + 17
    v = np.random.default_rng(6).normal(size=n)
    nwin = n - q + 1
    main = threading.get_ident()
    failed = []
    tried = threading.Event()

    def flaky(*args):
        if threading.get_ident() != main and not failed:
            failed.append(args[3])
            tried.set()
            raise RuntimeError("injected")
        if threading.get_ident() == main:
            tried.wait(10)  # the main thread's first block waits until the pool thread claimed one
        merge_range(*args)

    e1, r1 = _merge_compiled(eng, v, q, nwin, None, (0, 1))
    with pr.WorkerPool("thread", workers=1) as pool, warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        e2, r2 = _merge_compiled(eng, v, q, nwin, pool, (0, 1), flaky)
    assert failed  # the pool thread did claim a block, and it failed
    np.testing.assert_array_equal(e2, e1)
    np.testing.assert_array_equal(r2.view(np.int64), r1.view(np.int64))


def test_scratch_is_per_thread_reused_and_bounded():
    """A thread's scratch for a slot is reused by its next call, never shared with another thread, and a
    request beyond KEEP_BYTES is not kept."""
    import threading

    from pba_runtime.kernels.scratch import KEEP_BYTES, scratch

    a = scratch("test-a", (8, 3))
    assert a.shape == (8, 3) and a.flags.c_contiguous and a.dtype == np.float64
    assert scratch("test-a", 5, np.int64).base is a.base  # smaller: the same buffer
    assert scratch("test-b", 4).base is not a.base  # another slot: another buffer
    other = []
    t = threading.Thread(target=lambda: other.append(scratch("test-a", (8, 3)).base))
    t.start()
    t.join()
    assert other[0] is not a.base
    big = scratch("test-big", KEEP_BYTES // 8 + 1)
    assert scratch("test-big", 1).base is not big.base  # too large to keep: allocated anew


@pytest.mark.parametrize("q", [2, 3, 7, 64, (1 << 17) + 3])
def test_argmax_from_values_records_adversarial(q):
    """argmax from values works on the records of each row's suffix and prefix maxima, the windows written
    as runs between them: the positions of the partial path (numpy merge of (value, position) partials)
    where every value is a record (sorted up, sorted down), where none is after the first (constant), over
    ties, NaN runs, inf and signed zeros, and from every row (a thread's block)."""
    from pba_runtime.batch import windows_from_values
    from pba_runtime.kernels import values_range

    a = pr.get_aggregation("argmax")
    eng = resolve_engine(a, "compiled")
    rng = np.random.default_rng(q)
    n = 3 * q + 5 if q > 100 else 9 * q + 4
    up = np.sort(rng.normal(size=n))
    nan_runs = _values(rng, n, "argmax")
    nan_runs[rng.integers(0, n, size=max(1, n // 20))] = np.nan
    nan_runs[n // 3 : n // 3 + q // 2 + 1] = np.nan
    for v in (_tie_heavy(rng, n), _values(rng, n, "argmax"), up, up[::-1].copy(), np.full(n, 2.5),
              np.full(n, np.nan), nan_runs, np.tile([0.0, -0.0, 1.0, np.inf, -np.inf], n // 5 + 1)[:n]):
        nwin = len(v) - q + 1
        pos = np.arange(len(v), dtype=np.float64) + 11
        _, ref = windows_with_ends(a.kernel, a.kernel.lift(v, pos), q, nwin, 3, 1)  # numpy merge
        _, got = windows_from_values(eng, v, q, nwin, 3, 1, pos0=11)
        np.testing.assert_array_equal(got, a.kernel.lower(ref))
        for a0 in range(q, nwin, q):
            part = np.full(nwin, -7, dtype=np.int64)
            none = np.empty(0, dtype=np.int64)
            values_range(eng, v, q, 0, a0, part, none, 0, 1, 11)
            values_range(eng, v, q, a0, nwin, part, none, 0, 1, 11)
            np.testing.assert_array_equal(part, got)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("agg", ["max", "sum", "std", "argmax"])
def test_fused_time_windows_insert_and_flush_in_one_call(agg, data):
    """``sliding_aggregate`` on the fused path runs the batch and the end of stream in the same compiled
    call (``PBA._insert_and_flush``: more calls only when the result array fills up), and gives what
    ``insert_many`` then ``flush`` on the episode path (the reference) give; an empty stream gives nothing."""
    from pba_runtime.kernels import time_fused as TF

    window, ts, _, rng = _time_case(data)
    v = _values(rng, len(ts), agg)
    calls = []
    runner = TF.runner

    def counted(layout, ops):
        run = runner(layout, ops)

        def call(*args):
            calls.append(args[8])  # flush
            return run(*args)

        return call

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TF, "runner", counted)
        ends, res = pr.sliding_aggregate(v, window=window, agg=agg, timestamps=ts, algorithm="pba",
                                         engine="compiled")
    assert set(calls) == ({True} if len(ts) else set())
    with pr.create("pba", window, agg, engine="compiled") as op:
        op._fused_time = False
        e1, r1 = op.insert_many(v, ts)
        e2, r2 = op.flush()
    assert ends.tolist() == e1.tolist() + e2.tolist()
    _same(agg, res, list(r1) + list(r2))


@pytest.mark.parametrize("q", [2, 3, 7, 64, 2 * 2048 + 3, 4096])
@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
def test_one_loop_sum_equals_the_two_pass_merge_bit_for_bit(q, mean):
    """``_sum_rows`` (one loop per row, the next row's lcs built beside the windows) == ``_scalar_rows``
    (lcs and csa, then the windows) bit for bit, for sum and mean from values: one call, calls
    starting at every row, calls ending inside a row; NaN, inf, -0.0, 1e12 beside 1e-3. Rows longer
    than ``SUM_CHUNK`` (its windows in chunks, mean's division after each) and ``q`` not a power of two
    (a division, not a product)."""
    from pba_runtime.kernels import compiled as C

    assert 2 * 2048 + 3 > 2 * C.SUM_CHUNK

    rng = np.random.default_rng(q + 7)
    none = np.empty(0, dtype=np.int64)
    for v in (_values(rng, 9 * q + 4, "sum"), _tie_heavy(rng, 9 * q + 4),
              np.tile(np.r_[np.full(q + 1, 1e12), np.full(q + 2, 1e-3)], 5)):
        v = read_only(v)  # as values_range and merge_range pass it: the specialisation the engine runs
        nwin = len(v) - q + 1

        def one(a0, a1, out, ends=none):
            if mean:
                C.mean_from_values(v, q, a0, a1, out, ends, 3, 1, np.empty(2 * q), np.empty(1))
            else:
                C.merge_scalar(v, q, a0, a1, out, ends, 3, 1, C.ADD, np.empty(2 * q), np.empty(1))

        def ref(a0, a1, out, ends=none):
            if mean:
                C.mean_from_values(v, q, a0, a1, out, ends, 3, 1, np.empty(q), np.empty(q))
            else:
                C.merge_scalar_two_pass(v, q, a0, a1, out, ends, 3, 1, C.ADD, np.empty(q), np.empty(q))

        want, we = np.empty(nwin), np.empty(nwin, dtype=np.int64)
        got, ge = np.full(nwin, -7.0), np.full(nwin, -7, dtype=np.int64)
        ref(0, nwin, want, we)
        one(0, nwin, got, ge)
        # every bit but a NaN's sign: which operand's NaN an add returns (inf + -inf beside a NaN
        # of the data) is the compiler's choice of operand order, one per loop
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan].view(np.int64), want[~nan].view(np.int64))
        np.testing.assert_array_equal(ge, we)
        for cut in range(q, nwin, q):  # the one-loop merge against itself: every bit (PBA == SBA)
            parts = np.full(nwin, -7.0)
            one(0, cut, parts)
            one(cut, nwin, parts)
            np.testing.assert_array_equal(parts.view(np.int64), got.view(np.int64))
        for a1 in range(1, nwin, max(1, q // 2)):
            part = np.full(nwin, -7.0)
            one(0, a1, part)
            np.testing.assert_array_equal(part[:a1].view(np.int64), got[:a1].view(np.int64))
            assert (part[a1:] == -7.0).all()


@pytest.mark.parametrize("q", [2048, 2051])
@pytest.mark.parametrize("agg", ["sum", "mean"])
def test_long_rows_sum_pba_equals_sba_and_numpy(q, agg):
    """Rows from SUM_ONE_LOOP_MIN (the one-loop sum and mean, the operator's path): PBA with a pool (blocks
    on two threads) == SBA bit for bit, == the numpy engine to rounding, through batch splits too."""
    from pba_runtime.kernels import compiled as C

    assert q >= C.SUM_ONE_LOOP_MIN
    rng = np.random.default_rng(q)
    v = _values(rng, COMPILED_SPLIT_MIN + 5 * q + 11, "sum")
    win = pr.CountWindow(range=q, slide=1)
    with pr.WorkerPool("thread", workers=1) as pool:
        e1, r1 = pr.sliding_aggregate(v, window=win, agg=agg, algorithm="pba", pool=pool, engine="compiled")
    e2, r2 = pr.sliding_aggregate(v, window=win, agg=agg, algorithm="sba", engine="compiled")
    e3, r3 = pr.sliding_aggregate(v, window=win, agg=agg, algorithm="sba", engine="numpy")
    np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(e1, e3)
    np.testing.assert_array_equal(r1.view(np.int64), r2.view(np.int64))
    _same(agg, r1, r3)
    with pr.create("pba", win, agg, engine="compiled") as op:
        ends, res = run_batches(op, v, [0, q + 5, 3 * q, len(v) // 2, len(v)], None)
    assert ends == e3.tolist()
    _same(agg, res, r3)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fused_time_windows_check_timestamps_as_the_reference(data):
    """The fused path's one-pass timestamp check (``time_fused.timestamps_ok``) accepts what
    ``validate_timestamps`` accepts and refuses the rest with its error (out of order, before the last
    timestamp seen, out of range), the operator unchanged by a refused batch."""
    from pba_runtime.algorithms.base import validate_timestamps
    from pba_runtime.kernels import time_fused as TF

    window = pr.TimeWindow(range=30, slide=10)
    lo, hi = window.timestamp_range
    n = data.draw(st.integers(1, 12), label="n")
    pick = st.one_of(st.integers(-40, 40), st.sampled_from([lo, lo - 1, hi, hi + 1]))
    ts = np.array(sorted(data.draw(st.lists(pick, min_size=n, max_size=n), label="ts")), dtype=np.int64)
    if data.draw(st.booleans(), label="shuffle"):
        ts = ts[np.random.default_rng(n).permutation(n)]
    t_last = data.draw(st.sampled_from([None, -5, 0, 7]), label="t_last")
    try:
        validate_timestamps(ts, n, t_last, window)
        ok = True
    except ValueError as exc:
        ok, why = False, str(exc)
    assert TF.timestamps_ok(read_only(ts), lo, hi, lo if t_last is None else max(lo, t_last)) == ok  # as PBA's
    v = np.arange(float(n))
    with pr.create("pba", window, "max", engine="compiled") as op:
        assert op._fused_time
        if t_last is not None:
            op.insert_many(np.zeros(1), np.array([t_last]))
        before = op.snapshot()
        if ok:
            op.insert_many(v, ts)
        else:
            with pytest.raises(ValueError) as info:
                op.insert_many(v, ts)
            assert str(info.value) == why
            after = op.snapshot()
            assert repr(after) == repr(before)


# NaN is fmax's and fmin's identity (each ignores a NaN beside a number): with -inf, a window of NaN alone
# gave -inf where the identity seeded the fold and NaN where it did not; an identity that is not one is
# outside the monoid laws every algorithm may assume.
_UFUNC_AGGS = {
    "fmax": pr.Aggregation(lift=float, combine=lambda a, b: float(np.fmax(a, b)), lower=float, identity=np.nan,
                           ufunc=np.fmax, name="fmax_ufunc"),
    "fmin": pr.Aggregation(lift=float, combine=lambda a, b: float(np.fmin(a, b)), lower=float, identity=np.nan,
                           ufunc=np.fmin, name="fmin_ufunc"),
    "prod": pr.Aggregation(lift=float, combine=lambda a, b: a * b, lower=float, identity=1.0,
                           ufunc=np.multiply, name="prod_ufunc"),
}


@settings(max_examples=25, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", ["prod", *(pytest.param(n, marks=pytest.mark.slow) for n in ("fmax", "fmin"))])
def test_fused_time_windows_of_ufunc_aggregations_equal_the_episode_path(name, data):
    """``ufunc=`` aggregations over ``np.fmax``, ``np.fmin``, ``np.multiply`` (each a fused kernel of its
    own, ``time_fused.RUNNERS``) == the episode path, through random splits, gaps and NaN. ``fmax`` and
    ``fmin`` in the slow run: each kernel compiles for ~5 s of CPU cold, and they differ from ``max``'s and
    ``min``'s only in their combine."""
    agg = _UFUNC_AGGS[name]
    window, ts, bounds, rng = _time_case(data)
    v = rng.uniform(0.5, 2.0, size=len(ts))
    if len(v) > 4:
        v[rng.choice(len(v), size=len(v) // 8, replace=False)] = rng.choice([np.nan, -0.0, 0.0, 1.0])
    ends_f, res_f = _time_run(window, agg, v, ts, bounds, True)
    ends_r, res_r = _time_run(window, agg, v, ts, bounds, False)
    assert ends_f == ends_r
    if name == "prod":
        np.testing.assert_allclose(res_f, res_r, rtol=1e-12, equal_nan=True)
    else:
        np.testing.assert_array_equal(res_f, res_r)


def _fused_equals_episode_and_reference(window, agg, v, ts, rng, TF, switch, off):
    """Through random batch splits: the fused kernel gives the episode path's windows, and every bit of
    what it gives with ``TF.<switch> = off`` (the slow form of the loop under test)."""
    n = len(v)
    bounds = [0, *sorted(rng.choice(n + 1, size=3, replace=False).tolist()), n]
    fused = _time_run(window, agg, v, ts, bounds, True)
    ref = _time_run(window, agg, v, ts, bounds, False)
    assert fused[0] == ref[0]
    _same(agg, fused[1], ref[1])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TF, switch, off)
        slow = _time_run(window, agg, v, ts, bounds, True)
    assert slow[0] == fused[0]
    np.testing.assert_array_equal(np.asarray(slow[1]).view(np.int64), np.asarray(fused[1]).view(np.int64))


@settings(max_examples=12, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("agg", ["max", "sum", "std", "argmax", "mean"])
def test_fused_time_windows_fold_rows_in_two_lanes(agg, data):
    """Rows of ``time_fused.LANES_MIN`` tuples and more (``range % slide == 0``) fold in two lanes side by
    side (``_fold_lanes``): the same windows as the episode path, through gaps inside a row (empty slices
    between tuples), gaps that end an episode, repeated timestamps, an offset, NaN/inf/-0.0, and random
    batch splits (a batch starting inside a slice whose partial the operator carries)."""
    from pba_runtime.kernels import time_fused as TF

    s = data.draw(st.integers(1, 6), label="slide")
    q = data.draw(st.sampled_from([300, 1000, 3000]), label="q")
    off = data.draw(st.integers(-5, 5), label="offset")
    window = pr.TimeWindow(range=q * s, slide=s, offset=off)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    n = 6 * TF.LANES_MIN + int(rng.integers(0, 2000))
    steps = rng.choice([0, 0, 1, 1, 2, 3], size=n)  # rows of hundreds of tuples
    gaps = rng.random(n) < 0.01
    steps[gaps] = rng.integers(s, 40 * s, size=int(gaps.sum()))  # empty slices inside a row
    steps[rng.random(n) < 0.002] = q * s + int(rng.integers(0, 3 * q * s))  # some end the episode
    ts = (np.cumsum(steps) - 1000).astype(np.int64)
    v = _values(rng, n, agg)
    _fused_equals_episode_and_reference(window, agg, v, ts, rng, TF, "LANES_MIN", 2**62)  # one lane: the reference


@settings(max_examples=12, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("agg", ["max", "sum", "std", "argmax", "mean"])
def test_fused_time_windows_emit_a_rows_windows_and_lcs_in_one_loop(agg, data):
    """A full row's windows and its lcs as two chains in one loop (``_emit_then_lcs``): every bit as
    ``_emit`` then ``_lcs`` (``time_fused.FUSE_ROWS`` off, the reference), and the episode path's windows,
    over rows whose first or last columns hold no tuple (gaps inside rows, episodes ending), windows
    already emitted by a batch's end (random splits), ``range % slide != 0`` (heads), an offset,
    repeated timestamps and NaN/inf/-0.0."""
    from pba_runtime.kernels import time_fused as TF

    s = data.draw(st.integers(1, 6), label="slide")
    q = data.draw(st.sampled_from([3, 40, 300]), label="q")
    extra = data.draw(st.sampled_from([0, 0, 1, s - 1]), label="range % slide")
    off = data.draw(st.integers(-5, 5), label="offset")
    window = pr.TimeWindow(range=q * s + extra, slide=s, offset=off)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    n = int(rng.integers(200, 3000))
    steps = rng.choice([0, 1, 1, 2, 3], size=n)
    gaps = rng.random(n) < 0.03
    steps[gaps] = rng.integers(s, 2 * q * s, size=int(gaps.sum()))  # inside a row, or ending the episode
    ts = (np.cumsum(steps) - 500).astype(np.int64)
    v = _values(rng, n, agg)
    _fused_equals_episode_and_reference(window, agg, v, ts, rng, TF, "FUSE_ROWS", False)  # _emit then _lcs


def _halves_run(window, agg, v, ts, bounds, TF, split, how):
    """Batches and the one-call ``sliding_aggregate`` with ``TF.SPLIT_MIN`` low (``split``) or out of reach,
    the pool's second part taken at once by its thread (``"pool"``), run before the first part ends
    (``"ran"``: its windows moved next to it) or never started (``"pending"``: cancelled, run after it).
    Returns the two runs' ``(ends, results)`` and how many second parts were handed to the pool."""
    from concurrent.futures import Future

    handed = []
    with pr.WorkerPool("thread", workers=1) as pool:
        if how != "pool":
            def submit(fn, *args):
                handed.append(how)
                fut = Future()
                if how == "ran":
                    fn(*args)
                    fut.set_result(None)
                return fut

            pool.submit_thread = submit
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(TF, "SPLIT_MIN", 2 if split else 2**62)
            with pr.create("pba", window, agg, engine="compiled", pool=pool) as op:
                batches = run_batches(op, v, bounds, ts)
            ends, res = pr.sliding_aggregate(v, window=window, agg=agg, timestamps=ts, algorithm="pba", pool=pool,
                                             engine="compiled")
    return (batches, (ends.tolist(), list(res))), len(handed)


def _bits(res):
    return np.asarray(res).view(np.int64)  # every bit (argmax's positions are int64 already)


@settings(max_examples=15, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("agg", ["max", "sum", "std", "argmax", "mean"])
def test_fused_time_windows_cut_a_batch_at_an_episode_end_on_two_threads(agg, data):
    """Batches of ``time_fused.SPLIT_MIN`` records and more are cut at an episode's end near their middle,
    the second part run by a pool thread (``PBA._fused_halves``): every bit as the one call (the
    reference, ``SPLIT_MIN`` out of reach), through random batch splits (the state the second part
    leaves is the operator's), gaps, ``r % s != 0``, offsets and NaN/inf/-0.0, with the end of stream
    in the same call (``sliding_aggregate``), whether the pool's thread takes the second part at once,
    runs it before the first part ends, or has not started it when the first part ends."""
    from pba_runtime.kernels import time_fused as TF

    window, ts, bounds, rng = _time_case(data, n_max=300)
    v = _values(rng, len(ts), agg)
    how = data.draw(st.sampled_from(["pool", "ran", "pending"]), label="second part")
    halves, _ = _halves_run(window, agg, v, ts, bounds, TF, True, how)
    one, _ = _halves_run(window, agg, v, ts, bounds, TF, False, how)
    for (e1, r1), (e2, r2) in zip(halves, one):
        assert e1 == e2
        np.testing.assert_array_equal(_bits(r1), _bits(r2))


@pytest.mark.parametrize("how", ["pool", "ran", "pending"])
def test_fused_time_windows_cut_the_benchmarks_stream(how):
    """The benchmark's kind of stream (gaps of 2 s - 2 min among steps of 1-3 ms, ``TimeWindow(60 s, 10 ms)``):
    its batches are cut (the second part handed to the pool) and give the one call's windows bit for bit;
    a batch without an episode's end is not cut."""
    from pba_runtime.kernels import time_fused as TF

    rng = np.random.default_rng(5)
    n = 40_000
    steps = rng.integers(1, 4, size=n)
    gaps = rng.random(n) < 3e-4
    steps[gaps] = rng.integers(2_000, 50_000, size=int(gaps.sum()))  # inside the window
    steps[5_000::5_000] = 70_000  # an episode ends every 5000 records: every batch here is cut
    ts = np.cumsum(steps).astype(np.int64)
    v = rng.normal(size=n)
    window = pr.TimeWindow(range=60_000, slide=10)
    for agg in ("max", "sum", "std"):
        halves, handed = _halves_run(window, agg, v, ts, [0, n // 3, n], TF, True, how)
        one, _ = _halves_run(window, agg, v, ts, [0, n // 3, n], TF, False, how)
        assert handed == (3 if how != "pool" else 0)  # two batches and the one-call run
        for (e1, r1), (e2, r2) in zip(halves, one):
            assert e1 == e2
            np.testing.assert_array_equal(_bits(r1), _bits(r2))
    short = ts[:500]  # ~1.5 s of records: one episode, no cut
    assert TF.episode_cut(short, 0, 10, 60_000, 0, len(short)) == -1
    _, handed = _halves_run(window, "max", v[:500], short, [0, 500], TF, True, "ran")
    assert handed == 0


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_part_windows_counts_the_windows_a_drained_batch_emits(data):
    """``time_fused.part_windows`` (the count that places a cut batch's second part right after the first
    part's windows) == the windows ``insert_many`` then ``flush`` emit for a batch, from the state an
    earlier batch left (or none), over gaps, episodes, repeated timestamps, ``r % s != 0`` and offsets,
    in batches longer than its blocks (``_BLOCK``); and ``episode_cut`` finds the first episode start."""
    from pba_runtime.kernels import time_fused as TF

    window, ts, _, rng = _time_case(data, n_max=3 * TF._BLOCK)
    n = len(ts)
    b = data.draw(st.integers(0, max(n - 1, 0)), label="first batch")
    c = data.draw(st.integers(b + 1, n), label="end") if n else 0
    if c <= b:
        return
    v = rng.normal(size=n)
    with pr.create("pba", window, "max", engine="compiled") as op:
        op.insert_many(v[:b], ts[:b])
        have = op._slice is not None
        S, next_k = (op._slice, op._next_k) if have else (0, 0)
        e2, _ = op.insert_many(v[b:c], ts[b:c])
        e3, _ = op.flush()
        off, s, r = op._off, op._s, op._r
    assert TF.part_windows(ts[b:c], off, s, r, c - b, have, S, next_k) == len(e2) + len(e3)
    t = ts[b:c] - off
    fresh = [i for i in range(1, c - b) if t[i] >= (t[i - 1] // s) * s + r]
    assert TF.episode_cut(ts[b:c], off, s, r, 0, c - b) == (fresh[0] if fresh else -1)
