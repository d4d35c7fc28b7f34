"""User aggregations as users write them compile (issue 40): builtins, ``math.*``, ``operator.*``, numpy
ufuncs, ``functools.partial``, already-jitted functions, and lambdas/defs calling them.

Each accepted form compiles without a warning and gives what the Python form gives (the spec oracle's
left fold of the user's own functions, tests/oracle.py); the differential matrix runs the same forms
through every algorithm (tests/test_differential.py's USER_AGGS). What numba cannot compile warns once,
naming the function and numba's reason.
"""

from __future__ import annotations

import functools
import math
import operator
import warnings

import numba
import numpy as np
import pytest
from oracle import assert_results_equal, count_windows

import pba_runtime as pr
from pba_runtime.kernels import CompileWarning, resolve_engine
from pba_runtime.kernels.user import LiftedKernel, compile_aggregation
from pba_runtime.kernels.user_forms import form, form_name

_JITTED_ABS = numba.njit(lambda v: abs(v))


def _helper(v):
    return v - math.floor(v)


def _calls_python_helper(v):
    return _helper(v)


# (aggregation, the form it shows): scalar partials, one tuple partial, and the docs' example
FORMS = [
    pr.Aggregation(lift=abs, combine=max, lower=float, identity=0.0, name="builtins_absmax", result="float"),
    pr.Aggregation(lift=float, combine=min, lower=int, identity=math.inf, name="builtins_min_int", result="float"),
    pr.Aggregation(lift=math.exp, combine=operator.add, lower=math.log, identity=0.0, name="logsumexp",
                   result="float", inverse=operator.sub),
    pr.Aggregation(lift=lambda v: v * v, combine=operator.add, lower=math.sqrt, identity=0.0, name="rss",
                   result="float", inverse=operator.sub),
    pr.Aggregation(lift=abs, combine=math.hypot, lower=float, identity=0.0, name="hypot", result="float"),
    pr.Aggregation(lift=operator.neg, combine=np.maximum, lower=operator.neg, identity=-math.inf, name="neg_ufunc",
                   result="float"),
    pr.Aggregation(lift=functools.partial(operator.mul, 2.0), combine=max, lower=round, identity=-math.inf,
                   name="partial_round", result="float"),
    pr.Aggregation(lift=_JITTED_ABS, combine=lambda a, b: max(a, b), lower=lambda p: float(p), identity=0.0,
                   name="jitted_lambdas", result="float"),
    pr.Aggregation(lift=lambda v: (v, v), combine=lambda a, b: (min(a[0], b[0]), max(a[1], b[1])),
                   lower=lambda p: p[1] - p[0], identity=(math.inf, -math.inf), name="range_lambdas",
                   result="float"),
]


def _values(seed: int, n: int = 300) -> np.ndarray:
    """Ordinary values, integers (ties), signed zeros and a few large ones; no NaN (Python's max and min
    are not associative over NaN: a left fold and a window merge differ whatever the engine)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=3.0, size=n)
    ties = rng.random(n) < 0.2
    x[ties] = rng.integers(-4, 5, size=int(ties.sum())).astype(float)
    x[::17] = -0.0
    x[::29] = 0.0
    x[5::41] = rng.choice([300.0, -300.0, 1e-6], size=len(x[5::41]))
    return x


@pytest.mark.parametrize("agg", FORMS, ids=lambda a: a.name)
def test_accepted_forms_compile_quietly_and_equal_the_python_form(agg):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        eng = resolve_engine(agg, "auto")
        kernel, why = compile_aggregation(agg)
    assert kernel is not None and why == ""
    assert eng.name == "compiled" and eng.layout == "user"
    x = _values(len(agg.name))
    for r, s in ((1, 1), (7, 1), (32, 5), (100, 100)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompileWarning)
            ends, got = pr.sliding_aggregate(x, window=pr.CountWindow(range=r, slide=s), agg=agg)
        want_ends, want = count_windows(x, r, s, agg)
        assert ends.tolist() == want_ends
        assert_results_equal(agg, got, want, x)
        _, py = pr.sliding_aggregate(x, window=pr.CountWindow(range=r, slide=s), agg=agg, engine="python")
        assert_results_equal(agg, got, py, x)


def test_the_docs_example_compiles_its_lift_beside_its_ufunc(recwarn):
    """docs/batch.md's absmax (ufunc=np.maximum): the merge is the ufunc's, the lift and lower compiled."""
    agg = pr.Aggregation(lift=abs, combine=max, lower=float, identity=0.0, name="absmax_docs", ufunc=np.maximum)
    eng = resolve_engine(agg)
    assert eng.name == "compiled" and eng.layout == "scalar" and isinstance(eng.kernel, LiftedKernel)
    x = _values(3)
    ends, res = pr.sliding_aggregate(x, window=pr.CountWindow(range=16, slide=1), agg=agg)
    assert res.tolist() == [max(abs(v) for v in x[i:i + 16]) for i in range(len(x) - 15)]
    assert not [w for w in recwarn if issubclass(w.category, CompileWarning)]


def test_a_lift_python_refuses_is_compared_where_python_answers():
    """``int`` and ``math.log`` raise on some samples (NaN, inf, negatives): compared on the others."""
    agg = pr.Aggregation(lift=math.log, combine=max, lower=int, identity=-math.inf, name="log_int",
                         result="float")
    kernel, why = compile_aggregation(agg)
    assert kernel is not None, why
    x = np.array([1.0, 2.5, 10.0, 3.0, 0.5, 7.0])
    _, got = pr.sliding_aggregate(x, window=pr.CountWindow(range=3, slide=1), agg=agg)
    assert got.tolist() == [int(max(math.log(v) for v in x[i:i + 3])) for i in range(4)]


@pytest.mark.parametrize("agg, words", [
    (pr.Aggregation(lift=math.ulp, combine=max, lower=float, identity=0.0, name="ulp_builtin"),
     r"'ulp_builtin' runs on the Python engine: numba cannot compile its lift math\.ulp \(TypingError: "
     r"Untyped global name 'ulp'; numba has no implementation of math\.ulp\)"),
    (pr.Aggregation(lift=lambda v: math.fmod(v, 1.0), combine=max, lower=float, identity=0.0, name="fmod_lambda"),
     r"numba cannot compile its lift <lambda> \(TypingError: Unknown attribute 'fmod' of type module math\)"),
    (pr.Aggregation(lift=float, combine=max, lower=_calls_python_helper, identity=0.0, name="python_helper"),
     r"numba cannot compile its lower _calls_python_helper \(TypingError: Untyped global name '_helper' "
     r"\(a function\); a Python function it calls must itself be numba.njit\)"),
    (pr.Aggregation(lift=float, combine=max, lower=functools.partial(math.fmod, 1.0), identity=0.0,
                    name="partial_fmod"),
     r"numba cannot compile its lower functools\.partial\(math\.fmod, \.\.\.\)"),
])
def test_what_numba_cannot_compile_warns_once_naming_the_function(agg, words):
    with pytest.warns(CompileWarning, match=words) as caught:
        eng = resolve_engine(agg, "auto")
    assert len(caught) == 1 and eng.name == "python"
    assert all(len(line) < 400 for line in str(caught[0].message).splitlines())
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # said once per aggregation
        _, got = pr.sliding_aggregate([1.5, 2.5, 0.5], window=pr.CountWindow(range=2, slide=1), agg=agg)
    assert_results_equal(agg, got, count_windows([1.5, 2.5, 0.5], 2, 1, agg)[1])
    with pytest.raises(ValueError, match=f"engine='compiled' is not available for aggregation '{agg.name}'"):
        resolve_engine(agg, "compiled")


def test_wrappers_of_named_callables_are_importable_by_name():
    """The per-tuple engine's generated loops import a builtin's wrapper by name (and numba caches them)."""
    import importlib

    here = importlib.import_module("pba_runtime.kernels.user_forms")
    for fn, arity in ((abs, 1), (max, 2), (math.sqrt, 1), (operator.add, 2), (np.maximum, 2), (float, 1)):
        name = form_name(fn, arity)
        assert name is not None and getattr(here, name) is form(fn, arity)
    assert form_name(functools.partial(max, 1.0), 1) is None  # built, but not importable
    assert form(_helper, 1) is _helper
    with pytest.raises(AttributeError):
        _ = here.call1_zz
    with pytest.raises(AttributeError):
        getattr(here, "call1_" + b"math:no_such_function".hex())


def test_the_per_tuple_engine_runs_builtins_compiled():
    """pr.replay's compiled loops (pba_runtime.kernels.stepwise) over builtins: the oracle's results, SoE's
    subtract-on-evict through the compiled operator.sub."""
    x = _values(5, 200)
    absmax = FORMS[0]
    rep = pr.replay("sba", pr.CountWindow(range=8, slide=1), absmax, x)
    ends, want = count_windows(x, 8, 1, absmax)
    assert rep.ends.tolist() == ends
    assert_results_equal(absmax, rep.results, want, x)
    rss = FORMS[3]
    rep = pr.replay("soe", pr.CountWindow(range=8, slide=2), rss, x)
    ends, want = count_windows(x, 8, 2, rss)
    assert rep.ends.tolist() == ends
    assert_results_equal(rss, rep.results, want, x)


def test_an_inverse_that_does_not_compile_leaves_soe_saying_why():
    agg = pr.Aggregation(lift=float, combine=operator.add, lower=float, identity=0.0, name="fmod_inverse",
                         inverse=math.fmod)
    kernel, why = compile_aggregation(agg)
    assert kernel is not None and "inverse" not in kernel.jitted and "math.fmod" in kernel.inverse_why
    with pytest.raises(ValueError, match=r"'fmod_inverse' has no compiled subtract-on-evict: numba cannot compile "
                                         r"its inverse math\.fmod"):
        pr.replay("soe", pr.CountWindow(range=4, slide=1), agg, [1.0, 2.0, 3.0, 4.0, 5.0])
