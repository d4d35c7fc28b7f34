"""The compiled per-tuple engine (pba_runtime.kernels.stepwise) and pr.replay against the Python algorithms.

Every compiled algorithm x aggregation x window kind gives the Python operator's ``insert`` outputs
(and ``flush``'s): the windows exactly, the results exactly for max/min/count/argmax and within
rounding otherwise; compiled PBA equals compiled SBA bit for bit. The loops are compiled once per
(algorithm, aggregation) and cached on disk, so a second run pays no compile.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import user_functions as U
from hypothesis import given
from hypothesis import strategies as st
from oracle import assert_results_equal
from streams import run_per_tuple

import pba_runtime as pr
from pba_runtime.kernels.stepwise import Stepper

SPREAD = pr.Aggregation(lift=U.pair, combine=U.pair_min_max, lower=U.spread, identity=(math.inf, -math.inf),
                        name="spread_stepwise", commutative=True, result="float")

MEAN_USER = pr.Aggregation(lift=U.value_one, combine=U.pair_add, lower=U.ratio, identity=(0.0, 0.0), inverse=U.pair_sub,
                           name="mean_stepwise", commutative=True, result="float")

BUILTINS = ["max", "min", "sum", "count", "mean", "std", "geomean", "argmax", "moment_sketch"]
WINDOWS = [
    pr.CountWindow(range=7, slide=1),
    pr.CountWindow(range=10, slide=3),  # r % s != 0
    pr.TimeWindow(range=9, slide=3),
    pr.TimeWindow(range=10, slide=4, offset=2),  # r % s != 0, an offset
]


def _name(agg) -> str:
    return agg if isinstance(agg, str) else agg.name


def matrix(aggs, keep_time=("max",)):
    """(agg, window) cases: every aggregation on the count windows; on the time windows only ``keep_time`` in
    the default run, the rest with the slow tests (each compiles its own time-window loop: 5-30 s cold)."""
    cases = []
    for agg in aggs:
        for w in WINDOWS:
            slow = isinstance(w, pr.TimeWindow) and _name(agg) not in keep_time
            cases.append(pytest.param(agg, w, id=f"{_name(agg)}-{w!r}", marks=[pytest.mark.slow] if slow else []))
    return cases


def _stream(seed: int, n: int, window, agg, special: bool = True):
    rng = np.random.default_rng(seed)
    vals = rng.random(n) * 10
    if special and agg not in ("geomean", "moment_sketch"):
        vals[rng.integers(0, n, 4)] = np.nan
        vals[rng.integers(0, n, 3)] = np.inf
        vals[rng.integers(0, n, 2)] = -0.0
        vals[rng.integers(0, n, 2)] = 1e12
    ts = None
    if isinstance(window, pr.TimeWindow):  # repeated timestamps, short gaps and gaps longer than the range
        steps = rng.integers(0, 4, n) + (rng.random(n) < 0.03) * 40
        ts = np.cumsum(steps) - 50
    return vals, ts


def _python(alg, window, agg, vals, ts, chunk_size):
    kw = {"chunk_size": chunk_size} if alg in ("sba", "pba") else {}
    with pr.create("sba" if alg == "pba" else alg, window, agg, **kw) as op:
        return run_per_tuple(op, vals.tolist(), ts)


def _check(alg, window, agg, vals, ts, *, latency=False):
    b = pr.plan_chunk_size(window, pr.get_aggregation(agg)) if alg in ("sba", "pba") else None
    out = pr.replay(alg, window, agg, vals, ts, chunk_size=b, latency=latency)
    ends, want = _python(alg, window, agg, vals, ts, b)
    assert out.ends.tolist() == ends
    assert_results_equal(agg, [list(r) if np.ndim(r) else r for r in out.results],
                         [list(r) if np.ndim(r) else r for r in want])
    return out


@pytest.mark.parametrize("agg, window", matrix(BUILTINS + [SPREAD], keep_time=("max", "std", "spread_stepwise")))
def test_sba_matches_python(agg, window):
    vals, ts = _stream(1, 300, window, agg)
    _check("sba", window, agg, vals, ts)


# Two-Stacks over scalar partials in the default run (max, sum; std on time windows in the hypothesis test
# below); its argmax, user-aggregation and std count-window loops (~1-2 s each, cold) with the slow tests:
# those aggregations' loops are checked against Python by SBA's test, and the same stacks by max and sum
@pytest.mark.parametrize("agg, window", matrix(["max", "sum"])
                         + [pytest.param(*c.values, id=c.id, marks=pytest.mark.slow) for c in matrix(["std", "argmax",
                                                                                                     SPREAD])])
def test_two_stacks_matches_python(agg, window):
    vals, ts = _stream(2, 300, window, agg)
    _check("two_stacks", window, agg, vals, ts)


@pytest.mark.parametrize("agg, window", matrix(["max", "min", "argmax"]))
def test_slick_deque_matches_python(agg, window):
    vals, ts = _stream(8, 300, window, agg)
    _check("slick_deque", window, agg, vals, ts)


# FlatFAT's loops take the longest to compile (20-30 s each, cold, on the loaded machine): its argmax and user
# aggregation run with the slow tests; DABA's compile fast
FAST_PAIRS = [(a, g) for a in ("daba", "flatfat") for g in ("max", "sum")] + [("daba", "argmax"), ("daba", SPREAD)]


@pytest.mark.parametrize("alg, agg, window", [
    pytest.param(alg, *case.values, id=f"{alg}-{case.id}", marks=case.marks)
    for alg, agg in FAST_PAIRS for case in matrix([agg])])
def test_daba_flatfat_match_python(alg, agg, window):
    """Bit for bit: the same combines in the same order as the Python algorithms (DABA's fixup steps,
    FlatFAT's tree node for node), so even the float sums have the Python results' bits."""
    vals, ts = _stream(9, 300, window, agg)
    out = _check(alg, window, agg, vals, ts)
    _, want = _python(alg, window, agg, vals, ts, None)
    assert np.asarray(out.results, dtype=float).tobytes() == np.asarray(want, dtype=float).tobytes()


@pytest.mark.slow
@pytest.mark.timeout(600)  # a cold compile of the 23-wide moment_sketch loop takes minutes on a loaded machine
@pytest.mark.parametrize("window", WINDOWS, ids=repr)
@pytest.mark.parametrize("alg, agg", [(a, g) for a in ("daba", "flatfat")
                                      for g in ("min", "count", "mean", "std", "geomean", "moment_sketch", "argmax",
                                                SPREAD) if (a, g) not in FAST_PAIRS],
                         ids=lambda a: a if isinstance(a, str) else a.name)
def test_daba_flatfat_match_python_other_aggregations(alg, agg, window):
    vals, ts = _stream(10, 300, window, agg)
    out = _check(alg, window, agg, vals, ts)
    if agg in ("argmax", SPREAD):  # bit for bit
        _, want = _python(alg, window, agg, vals, ts, None)
        assert np.asarray(out.results, dtype=float).tobytes() == np.asarray(want, dtype=float).tobytes()


def test_flatfat_resizes_as_the_python_tree():
    """Gaps longer than the range empty the window (the tree starts over at 8 slots), then it grows
    and shrinks: the same capacities as the Python aggregator, so the same sums, bit for bit."""
    rng = np.random.default_rng(11)
    n = 3000
    vals = rng.random(n) * 10
    vals[::97] = 1e12
    steps = rng.integers(0, 3, n) + (rng.random(n) < 0.004) * 200 + (rng.random(n) < 0.01) * 30
    ts = np.cumsum(steps)
    w = pr.TimeWindow(range=90, slide=1)
    out = pr.replay("flatfat", w, "sum", vals, ts)
    _, want = _python("flatfat", w, "sum", vals, ts, None)
    assert out.results.tobytes() == np.asarray(want, dtype=float).tobytes()
    assert out.stats["resizes"] >= 4


@pytest.mark.parametrize("agg, window", matrix(["sum", "count", "std", MEAN_USER], keep_time=("sum",))
                         + [pytest.param(*c.values, id=c.id, marks=pytest.mark.slow) for c in matrix(["mean"])])
def test_soe_matches_python(agg, window):
    """Bit for bit but std: the exact accumulators round the exact sum once (the Python SoE's integers
    give the same correctly rounded float) and count/user aggregations take the Python steps; std
    rounds ``n sum x**2 - (sum x)**2`` (exact) once and divides: the spec's rounding."""
    vals, ts = _stream(12, 300, window, agg)
    rng = np.random.default_rng(13)
    vals[rng.integers(0, len(vals), 20)] = 1e-3
    vals[rng.integers(0, len(vals), 3)] = -np.inf
    vals[rng.integers(0, len(vals), 3)] = 1e-310  # subnormal
    vals[rng.integers(0, len(vals), 3)] = -1e300
    out = _check("soe", window, agg, vals, ts)
    if agg != "std":
        _, want = _python("soe", window, agg, vals, ts, None)
        assert np.asarray(out.results, dtype=float).tobytes() == np.asarray(want, dtype=float).tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("window", WINDOWS, ids=repr)
def test_soe_matches_python_geomean(window):
    vals, ts = _stream(14, 300, window, "geomean")
    vals[::17] = 0.0
    out = _check("soe", window, "geomean", vals, ts)
    _, want = _python("soe", window, "geomean", vals, ts, None)
    assert out.results.tobytes() == np.asarray(want, dtype=float).tobytes()


def test_soe_ill_conditioned():
    """Runs of 1e12 (equal, then with noise) beside runs of 1e-3: the exact accumulators keep no trace of
    evicted values; a window of equal values has std exactly 0."""
    rng = np.random.default_rng(15)
    vals = np.concatenate([np.full(200, 1e12), 1e12 + rng.random(200), np.full(100, 1e-3), rng.random(100) * 1e-3])
    w = pr.CountWindow(range=50, slide=1)
    for agg in ("sum", "std"):
        out = _check("soe", w, agg, vals, None)  # result i: the window ending at i + 50
        if agg == "std":
            assert (out.results[:151] == 0.0).all() and (out.results[400:451] == 0.0).all()
        else:  # 50 times the float 1e-3, exactly, rounded once
            assert (out.results[400:451] == float(Fraction(1e-3) * 50)).all()


def test_soe_needs_an_invertible_aggregation():
    with pytest.raises(ValueError, match="needs an invertible aggregation .* 'max' is not invertible"):
        pr.replay("soe", pr.CountWindow(range=2, slide=1), "max", [1.0])


def test_slick_deque_needs_a_selective_aggregation():
    with pytest.raises(ValueError, match="selective"):
        pr.replay("slick_deque", pr.CountWindow(range=2, slide=1), "sum", [1.0])


@pytest.mark.slow
@pytest.mark.parametrize("window", WINDOWS, ids=repr)
@pytest.mark.parametrize("agg", ["min", "count", "mean", "geomean", "moment_sketch"])
def test_two_stacks_matches_python_other_aggregations(agg, window):
    vals, ts = _stream(3, 300, window, agg)
    _check("two_stacks", window, agg, vals, ts)


# every aggregation on the count windows; on the time windows the ones SBA's test keeps (their SBA loops are
# compiled there already), the rest (moment_sketch's time loops: ~19 s cold, sum's and argmax's 3-4 s) slow
@pytest.mark.parametrize("agg, window", matrix(["max", "sum", "std", "argmax", "moment_sketch", SPREAD],
                                               keep_time=("max", "std", "spread_stepwise")))
def test_pba_equals_sba_bit_for_bit(agg, window):
    """PBA's lcs come from the worker thread; every result has SBA's bits (same chunks, same order)."""
    vals, ts = _stream(4, 2000, window, agg)
    b = max(1, window.range // window.slide // 2 + 1)
    with pr.WorkerPool("thread", 1) as pool:
        pba = pr.replay("pba", window, agg, vals, ts, chunk_size=b, pool=pool)
    sba = pr.replay("sba", window, agg, vals, ts, chunk_size=b)
    assert pba.ends.tolist() == sba.ends.tolist()
    assert np.asarray(pba.results).tobytes() == np.asarray(sba.results).tobytes()
    assert pba.stats["lcs_on"] == "worker thread"
    if isinstance(window, pr.CountWindow):
        assert pba.stats["lcs_tasks"] + pba.stats["lcs_built_on_main_loop"] >= 1


@pytest.mark.parametrize("b", [1, 5, 33, 63, 64])
@pytest.mark.parametrize("agg", ["max", "sum", "argmax", SPREAD], ids=lambda a: a if isinstance(a, str) else a.name)
def test_sba_slide_one_runs_match_python(agg, b):
    """Count windows with slide 1 step a run of tuples between chunk boundaries in one tight loop
    (``sba.run_count_s1``): with no middle chunk (b = 63), one (b = 33), several or a window inside one
    chunk (the generic step: b = 1, 5, 64), fed whole or in pieces, SBA gives the Python operator's
    windows and PBA SBA's bits."""
    w = pr.CountWindow(range=64, slide=1)
    vals, _ = _stream(8, 3000, w, agg)
    out = pr.replay("sba", w, agg, vals, chunk_size=b)
    ends, want = _python("sba", w, agg, vals, None, b)
    assert out.ends.tolist() == ends
    assert_results_equal(agg, list(out.results), want)
    st_ = Stepper("sba", w, agg, chunk_size=b)
    parts = [st_.run(vals[lo:lo + 97]) for lo in range(0, 3000, 97)]
    assert np.concatenate([p[1] for p in parts]).tobytes() == np.asarray(out.results, dtype=float).tobytes()
    with pr.WorkerPool("thread", 1) as pool:
        pba = pr.replay("pba", w, agg, vals, chunk_size=b, pool=pool)
    assert np.asarray(pba.results).tobytes() == np.asarray(out.results).tobytes()


def test_pba_large_window_worker_builds_the_lcs():
    """W[2^10, 1] over 50k values: the worker builds lcs; stalls are counted (their number depends on the load)."""
    vals = np.random.default_rng(5).random(50_000)
    w = pr.CountWindow(range=1024, slide=1)
    with pr.WorkerPool("thread", 1) as pool:
        pba = pr.replay("pba", w, "max", vals, pool=pool)
    sba = pr.replay("sba", w, "max", vals)
    assert pba.results.tobytes() == sba.results.tobytes()
    st_ = pba.stats
    assert st_["chunk_size"] == sba.stats["chunk_size"]
    assert st_["lcs_tasks"] + st_["lcs_built_on_main_loop"] + st_["fallbacks"] >= (50_000 // st_["chunk_size"]) - 1
    assert st_["stalls"] >= 0 and st_["stall_ns"] >= 0


def test_pba_hands_off_only_chunks_worth_it():
    """Planned chunks below MIN_WORKER_CHUNK slices are built on the main loop (stats say why); an explicit
    chunk_size goes to the worker whatever its size; the results are SBA's bits either way."""
    vals = np.random.default_rng(9).random(20_000)
    small = pr.CountWindow(range=64, slide=1)  # Theorem 1: 33 slices
    with pr.WorkerPool("thread", 1) as pool:
        planned = pr.replay("pba", small, "max", vals, pool=pool)
        forced = pr.replay("pba", small, "max", vals, pool=pool, chunk_size=33)
        big = pr.replay("pba", pr.CountWindow(range=2 * pr.chunking.MIN_WORKER_CHUNK, slide=1), "max", vals, pool=pool)
    sba = pr.replay("sba", small, "max", vals)
    assert planned.stats["chunk_size"] == 33 and planned.stats["lcs_on"] == "main loop"
    assert "MIN_WORKER_CHUNK" in planned.stats["why"] and planned.stats["lcs_tasks"] == 0
    assert planned.stats["stalls"] == 0
    assert forced.stats["lcs_on"] == "worker thread" and "why" not in forced.stats
    assert big.stats["lcs_on"] == "worker thread" and big.stats["chunk_size"] >= pr.chunking.MIN_WORKER_CHUNK
    for out in (planned, forced):
        assert out.results.tobytes() == sba.results.tobytes()


def test_pba_with_a_closed_pool_builds_on_the_main_loop():
    pool = pr.WorkerPool("thread", 1)
    pool.close()
    vals = np.arange(100.0)
    out = pr.replay("pba", pr.CountWindow(range=8, slide=1), "max", vals, pool=pool, chunk_size=5)  # for the worker
    assert out.results.tolist() == [float(e - 1) for e in out.ends]
    assert "closed" in out.stats["why"]


@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                          st.sampled_from([0.0, -0.0, 1e12, 1e-3])), max_size=80),
       st.integers(1, 9), st.integers(1, 4), st.sampled_from(["sba", "two_stacks", "slick_deque", "daba", "flatfat"]))
def test_hypothesis_streams_count(values, r, s, alg):
    s = min(s, r)
    vals = np.array(values, dtype=float)
    _check(alg, pr.CountWindow(range=r, slide=s), "max", vals, None)
    if alg != "slick_deque":
        _check(alg, pr.CountWindow(range=r, slide=s), "sum", np.nan_to_num(vals, posinf=0.0, neginf=0.0) % 1e6, None)
    if alg in ("sba", "daba"):  # SoE: max is not invertible; its exact sum over the raw values
        _check("soe", pr.CountWindow(range=r, slide=s), "sum", vals, None)


# the time-window loops only this test compiles (Two-Stacks' std, DABA's sum, SoE's std: ~11 s cold, together)
# are checked with the slow tests (full=True); the default run checks every other pair here: each algorithm's
# max, SBA's std, FlatFAT's and SoE's sum (their std and sum run on time windows in the tests above too)
ONLY_HERE = {("two_stacks", "std"), ("daba", "sum"), ("soe", "std")}


@pytest.mark.parametrize("full", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["default", "full"])
@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.integers(0, 12)), max_size=60),
       st.integers(1, 9), st.integers(1, 4), st.integers(-5, 5),
       st.sampled_from(["sba", "two_stacks", "daba", "flatfat"]))
def test_hypothesis_streams_time(full, rows, r, s, offset, alg):
    s = min(s, r)
    vals = np.array([v for v, _ in rows], dtype=float)
    ts = np.cumsum([d for _, d in rows]).astype(np.int64) if rows else np.zeros(0, dtype=np.int64)
    checks = [(alg, "max"), (alg, "std" if alg in ("sba", "two_stacks") else "sum")]
    if alg == "sba":
        checks += [("soe", "std"), ("soe", "sum")]
    for a, agg in checks:
        if full or (a, agg) not in ONLY_HERE:
            _check(a, pr.TimeWindow(range=r, slide=s, offset=offset), agg, vals, ts)


# latency=True compiles another loop per algorithm (~1-3 s each, cold); the timing lines are the slicing
# template's (@LAT), which touch only their own locals (test_snippets_cannot_clobber_the_template): SBA/PBA
# and Two-Stacks (the latency benchmark's pair) in the default run, the other mergers with the slow tests
@pytest.mark.parametrize("alg", ["sba", "pba", "two_stacks"]
                         + [pytest.param(a, marks=pytest.mark.slow) for a in ("slick_deque", "daba", "flatfat", "soe")])
def test_latency_one_per_window(alg):
    vals = np.random.default_rng(6).random(5000)
    out = _check(alg, pr.CountWindow(range=64, slide=1), "sum" if alg == "soe" else "max", vals, None, latency=True)
    assert out.latency_ns.shape == out.ends.shape
    assert out.latency_ns.dtype == np.int64 and (out.latency_ns >= 0).all()
    assert out.seconds > 0 and out.throughput > 0


def test_latency_time_window_and_flush():
    vals = np.arange(20.0)
    ts = np.arange(20) * 3
    out = pr.replay("sba", pr.TimeWindow(range=10, slide=5), "max", vals, ts, latency=True)
    assert len(out.latency_ns) == len(out.ends) and (out.latency_ns >= 0).all()
    assert out.ends[-1] == 65  # the windows flushed at the end of the stream


def test_no_latency_without_asking():
    assert pr.replay("sba", pr.CountWindow(range=2, slide=1), "max", [1.0, 2.0, 3.0]).latency_ns is None


@pytest.mark.parametrize("alg, agg", [("sba", "std"), ("daba", "sum"), ("flatfat", "sum"), ("soe", "sum")])
def test_stepper_in_pieces_equals_one_run(alg, agg):
    """The state lives between calls: a stream fed in pieces gives one run's windows."""
    vals = np.random.default_rng(7).random(3000)
    vals[::50] = 1e12
    w = pr.CountWindow(range=100, slide=3)
    kw = {"chunk_size": 20} if alg == "sba" else {}
    one = Stepper(alg, w, agg, **kw).run(vals)
    st_ = Stepper(alg, w, agg, **kw)
    parts = [st_.run(vals[lo:lo + 700]) for lo in range(0, 3000, 700)]
    assert np.concatenate([p[0] for p in parts]).tolist() == one[0].tolist()
    assert np.concatenate([p[1] for p in parts]).tobytes() == one[1].tobytes()


@pytest.mark.parametrize("call, exc, words", [
    (lambda: pr.replay("fiba", pr.CountWindow(range=2, slide=1), "max", [1.0]), ValueError,
     "'fiba' has no compiled per-tuple loop.*pr.create"),
    (lambda: pr.replay("soe", pr.CountWindow(range=2, slide=1),
                       pr.Aggregation(lift=U.value_one, combine=U.pair_add, lower=U.ratio, identity=(0.0, 0.0),
                                      inverse=lambda t, a: [t[0] - a[0]], name="badinv_stepwise"),
                       [1.0]), ValueError, "cannot compile its inverse|its inverse must return"),
    (lambda: pr.replay("recal", pr.CountWindow(range=2, slide=1), "max", [1.0]), ValueError, "algorithm must be"),
    (lambda: pr.replay("sba", pr.CountWindow(range=2, slide=1), "collect", [1.0]), ValueError, "collect"),
    (lambda: pr.replay("sba", pr.CountWindow(range=2, slide=1), "max", ["a"]), TypeError, "values"),
    (lambda: pr.replay("sba", pr.CountWindow(range=2, slide=1), "max", [1.0], [0]), ValueError, "timestamps"),
    (lambda: pr.replay("sba", pr.TimeWindow(range=2, slide=1), "max", [1.0, 2.0], [3, 1]), ValueError,
     "non-decreasing"),
    (lambda: pr.replay("sba", pr.TimeWindow(range=2, slide=1), "max", [1.0]), ValueError, "timestamps"),
    (lambda: pr.replay("sba", pr.CountWindow(range=4, slide=1), "max", [1.0], chunk_size=9), ValueError,
     "chunk_size"),
    (lambda: pr.replay("sba", pr.CountWindow(range=2, slide=1), "geomean", [1.0, -1.0]), ValueError, ">= 0"),
    (lambda: pr.replay("pba", pr.CountWindow(range=2, slide=1), "max", [1.0], pool=3), TypeError, "pool"),
    (lambda: pr.replay("sba", pr.CountWindow(range=2, slide=1), "max", [1.0], latency=1), TypeError, "latency"),
    (lambda: pr.replay("sba", pr.CountWindow(range=2, slide=1),
                       pr.Aggregation(lift=math.ulp, combine=max, lower=float, identity=0.0, name="ulpmax_builtin"),
                       [1.0]), ValueError, r"numba cannot compile its lift math\.ulp"),
])
def test_bad_input(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_snippets_cannot_clobber_the_template():
    """A merger's snippet that assigned a slicing-layer local (FlatFAT's query once named one ``last``)
    would compile to a silently wrong loop: ``loop_template.source`` refuses it."""
    import dataclasses

    from pba_runtime.kernels.stepwise import ALGORITHMS, loop_template, soe

    for alg in [a for a, _ in ALGORITHMS.values()] + list(soe.EXACT.values()):
        loop_template.check_names(alg)
    with pytest.raises(ValueError, match="assign last"):
        loop_template.check_names(dataclasses.replace(ALGORITHMS["flatfat"][0], query="last = 1\nRES = ident"))


class _HeldPool(pr.WorkerPool):
    """A thread pool whose PBA worker loop starts only once the run asks it to stop: every chunk's worker is late."""

    def submit_thread(self, fn, *args):
        import time

        ctl = args[4]  # worker_loop(saa, lcs, done, wq, ctl, ...): ctl[2] is the stop flag

        def held():
            while ctl[2] == 0:
                time.sleep(0.0005)
            return fn(*args)

        return super().submit_thread(held)


@pytest.mark.parametrize("b", [16, 33, 64])
@pytest.mark.parametrize("agg", ["max", "sum", "argmax", SPREAD], ids=lambda a: a if isinstance(a, str) else a.name)
def test_pba_helps_a_late_worker(agg, b):
    """A worker that never runs while the stream does: the main loop builds every lcs itself, spread over the
    tuples, and never waits (no stall: each build done before a window needs it); the worker skips the tasks
    it was too late for. Results are SBA's bits, fed whole or in pieces; the stats count the help."""
    w = pr.CountWindow(range=64, slide=1)
    vals, _ = _stream(11, 3000, w, agg)
    sba = pr.replay("sba", w, agg, vals, chunk_size=b)
    with _HeldPool("thread", 1) as pool:
        pba = pr.replay("pba", w, agg, vals, chunk_size=b, pool=pool)
        st_ = Stepper("pba", w, agg, chunk_size=b, pool=pool)
        parts = [st_.run(vals[lo:lo + 97]) for lo in range(0, 3000, 97)]
    assert np.asarray(pba.results).tobytes() == np.asarray(sba.results).tobytes()
    assert np.concatenate([p[1] for p in parts]).tobytes() == np.asarray(sba.results, dtype=float).tobytes()
    s = pba.stats
    chunks = 3000 // b
    assert s["lcs_tasks"] == 0 and s["stalls"] == 0 and s["slot_waits"] == 0
    # (the last one may be under way when the stream ends)
    assert s["worker_late"] - 1 <= s["lcs_built_inline"] <= s["worker_late"] and chunks - 3 <= s["worker_late"] <= chunks
    assert s["lcs_taken_back"] == s["worker_late"]  # claimed before the worker started: it skipped them all
    assert s["lcs_built_on_main_loop"] >= s["lcs_built_inline"]


@pytest.mark.parametrize("window", [pr.TimeWindow(range=70, slide=10), pr.TimeWindow(range=75, slide=10)],
                         ids=str)
def test_pba_helps_a_late_worker_time_windows(window):
    """Time windows (gaps reset the merger: new epochs; a partial slice when range % slide != 0)."""
    vals, ts = _stream(12, 3000, window, "max")
    sba = pr.replay("sba", window, "max", vals, ts, chunk_size=4)
    with _HeldPool("thread", 1) as pool:
        pba = pr.replay("pba", window, "max", vals, ts, chunk_size=4, pool=pool)
    assert pba.ends.tolist() == sba.ends.tolist()
    assert np.asarray(pba.results).tobytes() == np.asarray(sba.results).tobytes()
    assert pba.stats["lcs_tasks"] == 0 and pba.stats["worker_late"] >= 1


def test_pba_worker_loop_is_dispatched_before_the_stream():
    """The pool thread's first call of the compiled worker loop (numba's dispatch, under the GIL) is paid
    before the first tuple, not while the first chunk's lcs is due: a worker that runs at once is on time
    for the first chunks too (its lcs come from the worker; how many is up to the machine: not asserted)."""
    w = pr.CountWindow(range=4096, slide=1)
    vals = np.random.default_rng(3).random(20_000)
    with pr.WorkerPool("thread", 1) as pool:
        st_ = Stepper("pba", w, "max", chunk_size=2049, pool=pool)
        st_.run(vals, final=True)
    s = st_.stats()
    assert s["lcs_tasks"] + s["lcs_built_inline"] + s["inline_builds"] >= 20_000 // 2049 - 2
    ctl = st_.arrays[6]  # tags posted, tasks done with, stop, tasks skipped
    assert ctl[0] == ctl[1] == s["lcs_tasks"] + ctl[3] and ctl[2] == 1
