"""DABA, FlatFAT and SoE on the compiled per-tuple step (pba_runtime.algorithms.compiled_step) against
their Python operators (engine="python"), bit for bit.

Each case feeds both operators the same stream in the same random pieces (per tuple ``insert``,
``insert_many`` batches, a pickled ``snapshot`` restored into a fresh operator in the middle (DABA's and
FlatFAT's, in the Python operator's form, also across the two steps), ``flush`` at the end) and compares every
piece's output: the window ends, the results' bits and their types. A NaN's sign and payload are not
compared (see ``_bits``). Every algorithm x aggregation x window kind runs in the default suite, each with a
third of the profile's examples (10 by default; 44 cells, where 12 had 30 before). The loops are cached on disk
(``~/.cache/pba_runtime/stepwise``): time-window loops and the wide aggregations compile for 5-30 s cold, once
per machine, ~6 min for all of them on 2 loaded cores, then this file runs in ~10 s.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime.algorithms.compiled_step import COMPILED_STEP, CompiledStep

ALL = {"daba": ("max", "min", "sum", "count", "mean", "std", "geomean", "argmax", "moment_sketch"),
       "flatfat": ("max", "min", "sum", "count", "mean", "std", "geomean", "argmax", "moment_sketch"),
       "soe": ("sum", "count", "mean", "geomean")}
CASES = [pytest.param(alg, agg, kind, id=f"{alg}-{agg}-{kind}")
         for alg, aggs in ALL.items() for agg in aggs for kind in ("count", "time")]
# each cell compiles its aggregation's step kernels on first call: from a cold numba cache on a loaded
# two-core runner that alone can pass the suite's 120 s per test
pytestmark = pytest.mark.timeout(600)

#: examples per cell: a third of the profile's (``HYPOTHESIS_PROFILE=thorough`` runs 166 each)
EXAMPLES = max(5, settings().max_examples // 3)

SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e12, 1e-3, -1e12, 5e-324]


def values(agg: str):
    if agg in ("geomean", "moment_sketch"):  # logarithms: values >= 0
        return st.one_of(st.sampled_from([math.nan, math.inf, 0.0, -0.0, 1e12, 1e-3]),
                         st.floats(min_value=0.125, max_value=8.0, allow_nan=False), st.integers(0, 9))
    return st.one_of(st.sampled_from(SPECIAL), st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
                     st.integers(-5, 5), st.integers(-5, 5).map(float))


@st.composite
def stream(draw, agg: str, kind: str):
    r = draw(st.integers(1, 20))
    s = draw(st.sampled_from([1, 1, r, max(1, r // 3), draw(st.integers(1, r))]))
    vals = draw(st.lists(values(agg), max_size=80))
    if kind == "count":
        return pr.CountWindow(range=r, slide=s), vals, None
    offset = draw(st.integers(0, s - 1))
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 2, s, r - 1, r, r + 1, 3 * r + 7]), min_size=len(vals),
                         max_size=len(vals)))
    ts = (draw(st.integers(-40, 40)) + np.cumsum(gaps, dtype=np.int64)).tolist()
    return pr.TimeWindow(range=r, slide=s, offset=offset), vals, ts


@st.composite
def plan(draw, n: int):
    """Pieces ``(how, lo, hi)``: ``insert`` one by one, ``many`` (insert_many), ``snap`` (restore a pickled snapshot)."""
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=5))))
    bounds = [0] + cuts + [n]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        out.append((draw(st.sampled_from(["insert", "many", "snap"])), lo, hi))
    return out


def _bits(a) -> bytes:
    """The bits of a float or an array, every NaN as numpy's NaN: a NaN's sign and payload are not kept (the
    compiled loop may add two NaNs in either order, and x86 then returns either one)."""
    a = np.array(a, dtype=np.float64)
    a[np.isnan(a)] = np.nan
    return a.tobytes()


def _same(a, b) -> None:
    """Equal bits and types: floats by their bits (-0.0; NaN as NaN), arrays by dtype, shape and bytes."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
        assert (a.tobytes() == b.tobytes()) if a.dtype.kind != "f" else _bits(a) == _bits(b), (a, b)
    elif isinstance(a, float):
        assert _bits(a) == _bits(b), (a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (a, b)
        for k in a:
            _same(a[k], b[k])
    else:
        assert a == b, (a, b)


def _comparable(snapshot: dict) -> dict:
    """A snapshot without what the steps need not agree on: FlatFAT's combine counter (a Python statistic)
    and its pending dirty slots with the nodes above them (the loop repairs two at a time)."""
    out = dict(snapshot, state=dict(snapshot["state"]))
    if "flatfat" in out["state"]:
        ff = dict(out["state"]["flatfat"])
        ff["tree"] = {"leaves": ff["tree"]["nodes"][len(ff["tree"]["nodes"]) // 2:]}
        ff.pop("dirty")
        out["state"]["flatfat"] = ff
    return out


def drive(op, how: str, vals: list, ts: list | None, lo: int, hi: int):
    """One piece of the stream; returns what the operator returned (per tuple: the list of lists)."""
    if how == "many":
        return op.insert_many(vals[lo:hi], None if ts is None else ts[lo:hi])
    return [op.insert(v) if ts is None else op.insert(v, ts[i]) for i, v in zip(range(lo, hi), vals[lo:hi])]


def run_both(alg, agg, window, vals, ts, pieces):
    fast = pr.create(alg, window, agg, engine="compiled")
    slow = pr.create(alg, window, agg, engine="python")
    assert isinstance(fast, CompiledStep) and fast.stats()["step"] == "compiled"
    assert not isinstance(slow, CompiledStep) and slow.stats()["step"] == "python"
    for how, lo, hi in pieces:
        if how == "snap":
            state = pickle.loads(pickle.dumps(fast.snapshot()))
            fast.close()
            if COMPILED_STEP[alg].converts:  # DABA: the Python operator's snapshot; each step restores the other's
                theirs = pickle.loads(pickle.dumps(slow.snapshot()))
                _same(_comparable(state), _comparable(theirs))
                slow.close()
                slow = pr.create(alg, window, agg, engine="python").restore(state)
                state = theirs
            fast = pr.create(alg, window, agg, engine="compiled").restore(state)
            assert fast.stats()["step"] == "compiled"
            how = "insert"
        _same(drive(fast, how, vals, ts, lo, hi), drive(slow, how, vals, ts, lo, hi))
    _same(fast.flush(), slow.flush())
    _same(fast.flush(), slow.flush())
    assert fast.stats()["tuples"] == slow.stats()["tuples"] == len(vals)
    assert fast.stats()["windows"] == slow.stats()["windows"]
    fast.close()
    slow.close()


@pytest.mark.parametrize("alg, agg, kind", CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_compiled_step_matches_python(alg, agg, kind, data):
    window, vals, ts = data.draw(stream(agg, kind))
    run_both(alg, agg, window, vals, ts, data.draw(plan(len(vals))))


@pytest.mark.parametrize("alg", ["daba", "flatfat"])
def test_long_stream_resizes_and_gaps(alg):
    """Long enough for DABA's flips and FlatFAT's growing and shrinking tree; gaps longer than the range."""
    rng = np.random.default_rng(3)
    n = 3000
    vals = (rng.random(n) * 10).tolist()
    for i in rng.integers(0, n, 40).tolist():
        vals[i] = [1e12, 1e-3, -0.0, math.nan, math.inf][i % 5]
    steps = rng.integers(0, 3, n) + (rng.random(n) < 0.004) * 200 + (rng.random(n) < 0.01) * 30
    ts = np.cumsum(steps).tolist()
    pieces = [("insert", 0, 700), ("many", 700, 1500), ("snap", 1500, 1600), ("many", 1600, 2900),
              ("insert", 2900, 3000)]
    run_both(alg, "sum", pr.CountWindow(range=100, slide=7), vals, None, pieces)
    run_both(alg, "max", pr.TimeWindow(range=90, slide=1), vals, ts, pieces)


def test_values_read_as_the_python_lift_reads_them():
    """Ints, bools, numpy scalars; -0.0 kept on DABA's fused path (count windows, slide 1) and made 0.0 by the
    lift everywhere else (insert_many, FlatFAT, slide > 1), as the Python operators do."""
    odd = [-0.0, 3, True, np.float32(1.5), np.int64(2**60 + 1), 2**60 + 1, -0.0, np.float64(-0.0), 0.0]
    for alg in ("daba", "flatfat"):
        for w in (pr.CountWindow(range=1, slide=1), pr.CountWindow(range=2, slide=2)):
            for agg in ("min", "sum", "max"):
                run_both(alg, agg, w, odd, None, [("insert", 0, 5), ("many", 5, 9)])


def test_bad_input_as_the_python_operator():
    """The same exception type and message, and nothing changes: the stream goes on with the same results."""
    w = pr.TimeWindow(range=4, slide=2)
    for alg, agg in (("daba", "max"), ("soe", "sum")):
        ops = [pr.create(alg, w, agg, engine="compiled"), pr.create(alg, w, agg, engine="python")]
        assert isinstance(ops[0], CompiledStep) and not isinstance(ops[1], CompiledStep)
        outs = []
        for op in ops:
            got = [op.insert(1.0, 10)]
            for bad in (lambda: op.insert("a", 11), lambda: op.insert(1.0, 9), lambda: op.insert(1.0),
                        lambda: op.insert(1.0, 1.5), lambda: op.insert(1.0, 2**63),
                        lambda: op.insert_many(["a"], [12]), lambda: op.insert_many([1.0, 2.0], [13, 12]),
                        lambda: op.insert_many([1.0], [5]), lambda: op.insert_many([1.0, 2.0], [13]),
                        lambda: op.insert_many([[1.0]], [13]), lambda: op.insert_many([1.0])):
                with pytest.raises((ValueError, TypeError)) as e:
                    bad()
                got.append((e.type, str(e.value)))
            got.append(op.insert(2.0, 13))
            got.append(op.insert_many([3.0, 4.0], [15, 20]))
            got.append(op.flush())
            with pytest.raises(ValueError) as e:
                op.insert(1.0, 30)
            got.append((e.type, str(e.value)))
            outs.append(got)
        _same(outs[0], outs[1])
    c = pr.CountWindow(range=2, slide=1)
    for agg in ("geomean",):
        ops = [pr.create("daba", c, agg), pr.create("daba", c, agg, engine="python")]
        outs = []
        for op in ops:
            got = [op.insert(2.0)]
            for bad in (lambda: op.insert(-1.0), lambda: op.insert(-1), lambda: op.insert_many([1.0, -2.0]),
                        lambda: op.insert(1.0, 5), lambda: op.insert(None)):
                with pytest.raises((ValueError, TypeError)) as e:
                    bad()
                got.append((e.type, str(e.value)))
            got.append(op.insert_many([4.0, 8.0]))
            outs.append(got)
        _same(outs[0], outs[1])


def test_where_the_compiled_step_runs():
    c = pr.CountWindow(range=4, slide=1)
    assert pr.algorithms.engines_of("daba") == ("compiled", "python")
    for alg in COMPILED_STEP:
        assert pr.create(alg, c, "sum", engine="compiled").stats()["engine"] == "compiled"
        assert pr.create(alg, c, "sum", engine="python").stats()["step"] == "python"
    for alg in ("daba", "flatfat"):  # "auto": the compiled step where it measured faster
        assert pr.create(alg, c, "sum").stats()["step"] == "compiled"
    assert pr.create("soe", c, "sum").stats()["step"] == "python"  # count windows: not faster
    assert pr.create("soe", pr.TimeWindow(range=4, slide=1), "sum").stats()["step"] == "compiled"
    # SoE's compiled std is within an ulp of the Python SoE's, not equal: the Python step
    assert pr.create("soe", c, "std", engine="auto").stats()["step"] == "python"
    with pytest.raises(ValueError, match="engine='compiled' is not available for algorithm 'soe'.*'std'"):
        pr.create("soe", c, "std", engine="compiled")
    with pytest.raises(ValueError, match="needs an invertible aggregation"):
        pr.create("soe", c, "max", engine="compiled")
    assert pr.create("daba", c, "collect").stats()["step"] == "python"
    with pytest.raises(ValueError, match="not a built-in"):
        pr.create("daba", c, pr.Aggregation(lift=float, combine=max, lower=float, identity=-math.inf, name="mx"),
                  engine="compiled")
    with pytest.raises(ValueError, match="engine='numpy' is not available for algorithm 'flatfat'"):
        pr.create("flatfat", c, "sum", engine="numpy")
    late = pr.create("daba", pr.TimeWindow(range=4, slide=2), "sum", allowed_lateness=3)
    assert late.stats()["step"] == "python"
    with pytest.raises(ValueError, match="allowed_lateness"):
        pr.create("daba", pr.TimeWindow(range=4, slide=2), "sum", allowed_lateness=3, engine="compiled")
    with pytest.raises(TypeError):
        pr.create("daba", c, "sum", chunk_size=3)


def test_daba_snapshots_cross_the_steps():
    """DABA's compiled step converts its rings and pointers: its snapshot is the Python operator's (the
    same dict), and each step restores the other's and goes on with the same bits."""
    w = pr.TimeWindow(range=7, slide=3, offset=1)
    vals = [1.0, 2.5, -0.0, math.nan, 4.0, 1e12, 1e-3, 7.0, 8.0, -1e12, 3.0]
    ts = [0, 1, 1, 4, 9, 30, 31, 33, 40, 41, 47]
    fast, slow = pr.create("daba", w, "std"), pr.create("daba", w, "std", engine="python")
    for v, t in zip(vals[:6], ts):
        _same(fast.insert(v, t), slow.insert(v, t))
    a, b = fast.snapshot(), slow.snapshot()
    assert "step" not in a
    _same(a, b)
    x = pr.create("daba", w, "std", engine="python").restore(pickle.loads(pickle.dumps(a)))
    y = pr.create("daba", w, "std").restore(pickle.loads(pickle.dumps(b)))
    assert y.stats()["step"] == "compiled"
    for v, t in zip(vals[6:], ts[6:]):
        _same(x.insert(v, t), y.insert(v, t))
    _same(x.flush(), y.flush())


def test_restore_across_steps():
    """SoE does not convert: a Python-step snapshot restores into a compiled-step operator (which then runs
    the Python operator restored from it, the same bits); a compiled-step snapshot into a Python-step
    operator is refused."""
    w = pr.CountWindow(range=3, slide=2)
    vals = [1.0, 2.5, -0.0, math.nan, 4.0, 1e12, 1e-3, 7.0, 8.0]
    py = pr.create("soe", w, "sum", engine="python")
    comp = pr.create("soe", w, "sum", engine="compiled")
    for v in vals[:4]:
        py.insert(v)
        comp.insert(v)
    state = pickle.loads(pickle.dumps(py.snapshot()))
    moved = pr.create("soe", w, "sum", engine="compiled").restore(state)
    assert moved.stats()["step"] == "python" and "Python step" in moved.stats()["why"]
    _same([moved.insert(v) for v in vals[4:]], [py.insert(v) for v in vals[4:]])
    _same(moved.flush(), py.flush())
    assert moved.flushed and moved.emitted == py.emitted and moved.state_bytes() == py.state_bytes()
    with pytest.raises(ValueError, match="flushed"):
        moved.check_open()
    snap = comp.snapshot()
    assert snap["step"] == "compiled"
    with pytest.raises(ValueError, match="compiled step"):
        pr.create("soe", w, "sum", engine="python").restore(snap)
    with pytest.raises(ValueError, match="algorithm"):
        pr.create("daba", w, "sum").restore(snap)
    with pytest.raises(ValueError, match="window"):
        pr.create("soe", pr.CountWindow(range=4, slide=2), "sum", engine="compiled").restore(snap)
    again = pr.create("soe", w, "sum", engine="compiled").restore(moved.snapshot())  # a Python-step snapshot
    back = pr.create("soe", w, "sum", engine="compiled").restore(pickle.loads(pickle.dumps(snap)))
    assert back.stats()["step"] == "compiled"
    assert again.stats()["tuples"] == len(vals) and back.stats()["tuples"] == 4
    _same([back.insert(v) for v in vals[4:]], [comp.insert(v) for v in vals[4:]])
