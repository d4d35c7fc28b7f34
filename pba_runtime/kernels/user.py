"""User aggregations compiled: a ``pr.Aggregation`` of plain Python over numbers, run in machine code.

When an aggregation has no vectorised form (no ``kernel=``/``ufunc=``) and its ``lift``,
``combine`` and ``lower`` are Python over numbers, or fixed-size tuples of numbers, numba
compiles them (``nopython`` mode) and :class:`UserKernel` runs them in the batch path: the
lift, the slice reduction, the window merge and the lower, each a compiled loop with the
GIL released. The user's functions are compiled as they are; a builtin or module function
numba compiles a call to (``abs``, ``max``, ``float``, ``math.sqrt``, ``operator.add``, a numpy
ufunc, a ``functools.partial`` of one) through a one-line wrapper (:mod:`.user_forms`). The loops
around them are generated once per partial width (a tuple is loaded from and stored to a row of
floats field by field), so nothing here depends on what the functions compute.

Before it is used, the compiled form is checked against the Python form on a few values
(ordinary, negative, zero, NaN, inf): any difference, like any compile error, keeps the
aggregation on the Python engine, with the reason (``stats()["engine_why"]``): the function, and
the line of numba's error that says why.

Examples
--------
>>> import pba_runtime as pr
>>> absmax = pr.Aggregation(lift=abs, combine=max, lower=float, identity=0.0, name="absmax")
>>> kernel, why = compile_aggregation(absmax)
>>> kernel is not None, why  # builtins compile through a wrapper calling them
(True, '')
>>> import math
>>> odd = pr.Aggregation(lift=float, combine=max, lower=math.fsum, identity=0.0, name="odd")
>>> compile_aggregation(odd)[1].split(" (")[0]  # numba has no math.fsum
'numba cannot compile its lower math.fsum'
"""

from __future__ import annotations

import math
import re
import types
import warnings
from typing import Any

import numpy as np

from ..aggregations import Aggregation, Kernel, WrappedKernel
from .codegen import expand
from .user_forms import describe, form

__all__ = ["LiftedKernel", "UserKernel", "compile_aggregation", "compile_lift_lower"]

_SAMPLES = (0.0, 1.5, -2.25, 3.0, 1e-3, 1e12, -0.0, math.inf, -math.inf, math.nan)

# What the generated loops look like. @L(arr, idx) loads the partial at ``idx`` (a float, or a tuple
# of the row's fields); @S(arr, idx, var) stores ``var`` there. Loops walk forward over views (the
# lcs over reversed ones), as the built-in merges do, so numba drops its negative-index tests.
_TEMPLATE = """
def lift_all(values, positions, out):
    for i in range(values.shape[0]):
        t = LIFT
        @S(out, i, t)

def lower_all(parts, out):
    for i in range(parts.shape[0]):
        out[i] = lower(@L(parts, i))

def combine_all(a, b, out):
    for i in range(out.shape[0]):
        t = combine(@L(a, i), @L(b, i))
        @S(out, i, t)

def reduce_all(parts, starts, out):
    n = parts.shape[0]
    for s in range(starts.shape[0]):
        lo = starts[s]
        hi = starts[s + 1] if s + 1 < starts.shape[0] else n
        seg = parts[lo:hi]
        t = @L(seg, 0)
        for i in range(1, hi - lo):
            t = combine(t, @L(seg, i))
        @S(out, s, t)

def scan_all(parts, out, reverse):
    n = parts.shape[0]
    if n == 0:
        return
    src = parts[::-1] if reverse else parts[::1]
    dst = out[::-1] if reverse else out[::1]
    t = @L(src, 0)
    @S(dst, 0, t)
    for i in range(1, n):
        if reverse:
            t = combine(@L(src, i), t)
        else:
            t = combine(t, @L(src, i))
        @S(dst, i, t)

def merge(X, q, a0, a1, out, ends, first_end, step, lcs, csa, lowered, lowered_out):
    c = a0 // q
    lr = lcs[::-1]
    while c * q < a1:
        base = c * q
        n = min(q, a1 - base)
        xr = X[base : base + q][::-1]
        xn = X[base + q : base + q + n - 1]
        o = out[base : base + n] if not lowered else out[0:0]
        t = @L(xr, 0)
        @S(lr, 0, t)
        for i in range(1, q):
            t = combine(@L(xr, i), t)
            @S(lr, i, t)
        if n > 1:
            u = @L(xn, 0)
            @S(csa, 0, u)
            for i in range(1, n - 1):
                u = combine(u, @L(xn, i))
                @S(csa, i, u)
        if lowered:
            o1 = lowered_out[base : base + n]
            o1[0] = lower(@L(lcs, 0))
            for j in range(1, n):
                o1[j] = lower(combine(@L(lcs, j), @L(csa, j - 1)))
        else:
            t = @L(lcs, 0)
            @S(o, 0, t)
            for j in range(1, n):
                t = combine(@L(lcs, j), @L(csa, j - 1))
                @S(o, j, t)
        c += 1
    if ends.shape[0] > 0:
        e = ends[a0:a1]
        start = first_end + a0 * step
        for i in range(a1 - a0):
            e[i] = start + i * step
"""

def _source(w: int, positional: bool) -> str:
    """The loops around the user's functions, for partials of ``w`` floats (0: a scalar partial)."""
    return expand(_TEMPLATE.replace("LIFT", "lift(values[i], positions[i])" if positional else "lift(values[i])"), w)


def _width(identity: Any) -> int | None:
    """0 for a number, ``k`` for a tuple of ``k`` numbers, ``None`` for anything else."""
    if isinstance(identity, (bool, np.bool_)):
        return None
    if isinstance(identity, (int, float, np.integer, np.floating)):
        return 0
    if isinstance(identity, tuple) and identity and all(
            isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in identity):
        return len(identity)
    return None


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` hold the same numbers (NaN equal to NaN); ``False`` if one holds anything else."""
    try:
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # a complex, a list, a string: no partial of ours
        return False
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


_REFUSED = object()  # a sample the Python form raises on


def _call(fn: Any, args: tuple) -> Any:
    """``fn(*args)``, or ``_REFUSED`` if it raises."""
    try:
        return fn(*args)
    except Exception:
        return _REFUSED


def _number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating))


class UserKernel(Kernel):
    """The compiled kernel of a user aggregation: numba loops around the user's compiled functions."""

    combine_in_place = True  # each output row is written after its operands were read

    def __init__(self, agg: Aggregation, w: int, funcs: dict[str, Any]):
        self.shape = (w,) if w else ()
        self.result = agg.result
        self.identity = np.asarray(agg.identity, dtype=np.float64).reshape(self.shape)
        self._f = funcs
        self._positional = agg.positional

    def lift(self, values, positions):
        out = np.empty((len(values),) + self.shape)
        pos = positions if positions is not None else np.empty(0, dtype=np.int64)
        if self._positional and positions is None:
            raise ValueError("this aggregation is positional: lift needs positions")
        self._f["lift_all"](np.ascontiguousarray(values, dtype=np.float64), np.asarray(pos), out)
        return out

    def lower(self, parts):
        out = np.empty(len(parts))
        self._f["lower_all"](np.ascontiguousarray(parts, dtype=np.float64), out)
        return out

    def combine(self, older, newer, out=None):
        a, b = np.broadcast_arrays(np.asarray(older, dtype=np.float64), np.asarray(newer, dtype=np.float64))
        shape = a.shape
        a = np.ascontiguousarray(a).reshape((-1,) + self.shape)
        b = np.ascontiguousarray(b).reshape((-1,) + self.shape)
        res = np.empty_like(a)
        self._f["combine_all"](a, b, res)
        res = res.reshape(shape)
        if out is not None:
            out[...] = res
            return out
        return res

    def reduce_segments(self, parts, starts):
        out = np.empty((len(starts),) + self.shape)
        self._f["reduce_all"](np.ascontiguousarray(parts, dtype=np.float64), np.asarray(starts, dtype=np.int64),
                              out)
        return out

    def accumulate(self, parts, axis, reverse=False, out=None, nan_free=False):
        parts = np.asarray(parts, dtype=np.float64)
        if out is None:
            out = np.empty_like(parts)
        moved = np.moveaxis(parts, axis, -1 - len(self.shape))
        dst = np.moveaxis(out, axis, -1 - len(self.shape))
        lead = moved.shape[: moved.ndim - 1 - len(self.shape)]
        for idx in np.ndindex(*lead):
            row = np.ascontiguousarray(moved[idx])
            res = np.empty_like(row)
            self._f["scan_all"](row, res, reverse)
            dst[idx] = res
        return out

    def merge(self, X, q, a0, a1, out, ends, first_end, step, lowered=False):
        """Windows ``[a0, a1)`` of a batch (see :mod:`pba_runtime.kernels.compiled`) into ``out``: their
        partials, or with ``lowered`` their lowered results (a 1-D float array: no partials written)."""
        scratch = (q,) + self.shape
        parts_out = np.empty((0,) + self.shape) if lowered else out
        self._f["merge"](X, q, a0, a1, parts_out, ends, first_end, step, np.empty(scratch), np.empty(scratch),
                         lowered, out if lowered else np.empty(0))


def compile_aggregation(agg: Aggregation) -> tuple[UserKernel | None, str]:
    """``(kernel, "")``, or ``(None, why)`` when ``agg``'s Python form does not compile or differs compiled."""
    return _compile(agg, full=True)


def compile_lift_lower(agg: Aggregation) -> tuple[Kernel | None, str]:
    """For an aggregation with a ``ufunc=`` faster form: its kernel with the user's ``lift`` (and ``lower``,
    when it returns floats) compiled, the ufunc's combine kept; ``(None, why)`` if the lift does not compile.

    >>> import numpy as np
    >>> import pba_runtime as pr
    >>> agg = pr.Aggregation(lift=abs, combine=max, lower=float, identity=0.0, name="absmax", ufunc=np.maximum)
    >>> kernel, why = compile_lift_lower(agg)
    >>> kernel.lift(np.array([-2.0, 1.0]), None).tolist(), why
    ([2.0, 1.0], '')
    """
    if agg.kernel is None or _width(agg.identity) != 0:
        return None, "only a scalar partial's lift is compiled beside its ufunc"
    compiled, why = _compile(agg, full=False)
    if compiled is None:
        return None, why
    return LiftedKernel(agg.kernel, compiled, compiled.lower_floats), ""


class LiftedKernel(WrappedKernel):
    """A ``ufunc=`` aggregation's kernel with the user's lift (and lower) compiled; the rest the ufunc's."""

    def __init__(self, base: Kernel, compiled: UserKernel, lower: bool):
        super().__init__(base)
        self._compiled, self._lower = compiled, lower

    def lift(self, values, positions):
        return self._compiled.lift(values, positions)

    def lower(self, parts):
        return self._compiled.lower(parts) if self._lower and parts.ndim == 1 else self.base.lower(parts)



def _compile(agg: Aggregation, full: bool) -> tuple[UserKernel | None, str]:
    """The user kernel of ``agg`` (``full``), or its compiled lift and lower alone (the loops' ``lift_all``
    and ``lower_all``: an aggregation whose ``ufunc=`` does the combining)."""
    w = _width(agg.identity)
    if w is None:
        return None, f"its identity {agg.identity!r} is not a number or a tuple of numbers"
    try:
        import numba
    except Exception as exc:  # pragma: no cover - numba is a dependency
        return None, f"numba does not import here ({exc})"
    # each callable as a Python function numba compiles: the user's def or lambda, or a call to a builtin
    forms = {name: form(getattr(agg, name), arity) for name, arity in _arities(agg).items()
             if full or name in ("lift", "lower")}
    jitted = {name: numba.njit(f) for name, f in forms.items()}
    # each of the user's functions alone first, so an error names the one that does not compile
    samples = {"lift": (1.5, 0) if agg.positional else (1.5,), "combine": (agg.identity, agg.identity),
               "lower": (agg.identity,), "inverse": (agg.identity, agg.identity)}
    inverse_why = ""
    for name in ("lift", "combine", "lower", "inverse"):
        if name not in jitted:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                jitted[name](*samples[name])
        except Exception as exc:
            if name == "inverse":  # the batch path does not need it: the per-tuple SoE says why it has none
                del jitted[name], forms[name]
                inverse_why = _cannot(name, agg.inverse, exc)
                continue
            return None, _cannot(name, getattr(agg, name), exc)
    funcs: dict[str, Any] = {}
    namespace = {"lift": jitted["lift"], "combine": jitted.get("combine"), "lower": jitted["lower"]}
    exec(compile(_source(w, agg.positional), f"<pba_runtime user kernel, width {w}>", "exec"), namespace)
    loops = ("lift_all", "lower_all", "combine_all", "reduce_all", "scan_all", "merge") if full else (
        "lift_all", "lower_all")
    for name in loops:
        funcs[name] = numba.njit(nogil=True)(namespace[name])
    kernel = UserKernel(agg, w, funcs)
    kernel.jitted = jitted  # the user's own functions compiled (the per-tuple engine inlines them)
    kernel.forms = forms  # and the Python functions numba compiled them from (the per-tuple engine imports them)
    kernel.inverse_why = inverse_why
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            why = _check(agg, kernel, full)
    except Exception as exc:
        return None, f"numba cannot compile the loops around it ({type(exc).__name__}: {_first_line(exc)})"
    if why:
        return None, why
    return kernel, ""


def _arities(agg: Aggregation) -> dict[str, int]:
    """How many arguments each of ``agg``'s callables takes (the inverse, if it has one, last)."""
    out = {"lift": 2 if agg.positional else 1, "combine": 2, "lower": 1}
    if agg.inverse is not None:
        out["inverse"] = 2
    return out


def _cannot(role: str, fn: Any, exc: Exception) -> str:
    """Why numba does not compile ``fn`` (the aggregation's ``role``): the line of its error that says so."""
    line = re.sub(r"Module\(<module '([\w.]+)'[^)]*\)", r"module \1", _first_line(exc, limit=400))
    line = re.sub(r": Cannot determine Numba type of <class '(\w+)'>", r" (a \1)", line)
    hint = ""
    if isinstance(fn, types.FunctionType) and "(a function)" in line:
        hint = "; a Python function it calls must itself be numba.njit"
    elif not isinstance(fn, types.FunctionType) and "Untyped global name" in line:
        line = line.split(" (a ")[0]
        hint = f"; numba has no implementation of {describe(fn)}"
    if len(line) > 160:
        line = line[:157].rstrip() + "..."
    return f"numba cannot compile its {role} {describe(fn)} ({type(exc).__name__}: {line}{hint})"


def _name(fn: Any) -> str:
    return describe(fn)


def _first_line(exc: Exception, limit: int = 160) -> str:
    """The line of a numba error that says what failed (its first lines are the pipeline's), shortened."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    pick = next((ln for ln in lines if not ln.startswith(("Failed in", "During:", "File ", "^", ">"))),
                lines[0] if lines else "")
    pick = pick.replace("\x1b[1m", "").replace("\x1b[0m", "")
    return pick if len(pick) <= limit else pick[: limit - 3].rstrip() + "..."


def _check(agg: Aggregation, kernel: UserKernel, full: bool = True) -> str:
    """Compile every loop and compare the compiled form with the Python form on ``_SAMPLES``.

    A sample the Python form refuses (raises on: a log of a negative, ``int`` of NaN) is not compared:
    there the compiled form gives numba's result (NaN, or an integer's sentinel) where Python raises.
    """
    vals = np.array(_SAMPLES)
    pos = np.arange(len(vals), dtype=np.int64)
    py_parts = [_call(agg.lift, (v, p) if agg.positional else (v,)) for v, p in zip(vals.tolist(), pos.tolist())]
    keep = [i for i, p in enumerate(py_parts) if p is not _REFUSED]
    if not keep:
        return "its lift refuses every sample value"
    vals, pos = vals[keep], pos[keep]
    py_parts = [py_parts[i] for i in keep]
    parts = kernel.lift(vals, pos)
    if not _same(parts, py_parts):
        return f"its compiled lift {_name(agg.lift)} differs from the Python one"
    py_low = [_call(agg.lower, (p,)) for p in py_parts]
    ok = [i for i, x in enumerate(py_low) if x is not _REFUSED]
    if any(not _number(py_low[i]) for i in ok):
        return f"its lower {_name(agg.lower)} does not return a number"
    if ok and not _same(kernel.lower(parts)[ok], [py_low[i] for i in ok]):
        return f"its compiled lower {_name(agg.lower)} differs from the Python one"
    kernel.lower_floats = all(isinstance(py_low[i], (float, np.floating)) for i in ok)
    if not full:
        return ""
    py_comb = [_call(agg.combine, (a, b)) for a, b in zip(py_parts[:-1], py_parts[1:])]
    ok = [i for i, x in enumerate(py_comb) if x is not _REFUSED]
    if ok and not _same(kernel.combine(parts[:-1], parts[1:])[ok], [py_comb[i] for i in ok]):
        return f"its compiled combine {_name(agg.combine)} differs from the Python one"
    inverse = kernel.jitted.get("inverse")
    if inverse is not None:  # for the per-tuple SoE: dropped (not invertible compiled) when it differs
        pairs = [(c, p) for c, p in zip(py_comb, py_parts[1:]) if c is not _REFUSED]
        want = [_call(agg.inverse, ab) for ab in pairs]
        ok = [i for i, x in enumerate(want) if x is not _REFUSED]
        try:
            same = not ok or _same([inverse(*pairs[i]) for i in ok], [want[i] for i in ok])
        except Exception:
            same = False
        if not same:
            del kernel.jitted["inverse"], kernel.forms["inverse"]
            kernel.inverse_why = f"its compiled inverse {_name(agg.inverse)} differs from the Python one"
    # the loops the batch path runs: scan, reduce and merge, once each on the samples
    kernel.accumulate(parts, 0, reverse=True)
    kernel.reduce_segments(parts, np.array([0, 2]))
    n = len(parts)
    if n >= 2:
        kernel.merge(np.ascontiguousarray(parts), 2, 0, n - 1, np.empty((n - 1,) + kernel.shape),
                     np.empty(0, dtype=np.int64), 0, 1)
    return ""
