"""User aggregations compiled: a ``pr.Aggregation`` of plain Python over numbers, run in machine code.

When an aggregation has no vectorised form (no ``kernel=``/``ufunc=``) and its ``lift``,
``combine`` and ``lower`` are Python over numbers, or fixed-size tuples of numbers, numba
compiles them (``nopython`` mode) and :class:`UserKernel` runs them in the batch path: the
lift, the slice reduction, the window merge and the lower, each a compiled loop with the
GIL released. The user's functions are compiled as they are; the loops around them are
generated once per partial width (a tuple is loaded from and stored to a row of floats
field by field), so nothing here depends on what the functions compute.

Before it is used, the compiled form is checked against the Python form on a few values
(ordinary, negative, zero, NaN, inf): any difference, like any compile error, keeps the
aggregation on the Python engine, with the reason (``stats()["engine_why"]``).

Examples
--------
>>> import pba_runtime as pr
>>> absmax = pr.Aggregation(lift=abs, combine=max, lower=float, identity=0.0, name="absmax")
>>> kernel, why = compile_aggregation(absmax)
>>> kernel is None, "abs" in why  # builtins are not Python functions numba can compile
(True, True)
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..aggregations import Aggregation, Kernel
from .codegen import expand

__all__ = ["UserKernel", "compile_aggregation"]

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
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


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
    w = _width(agg.identity)
    if w is None:
        return None, f"its identity {agg.identity!r} is not a number or a tuple of numbers"
    try:
        import numba
    except Exception as exc:  # pragma: no cover - numba is a dependency
        return None, f"numba does not import here ({exc})"
    jitted = {}
    for name in ("lift", "combine", "lower"):
        fn = getattr(agg, name)
        try:
            jitted[name] = numba.njit(fn)
        except Exception as exc:  # not a Python function (a builtin, a class): numba refuses it
            return None, f"numba cannot compile its {name} {_name(fn)} ({type(exc).__name__})"
    # each of the user's functions alone first, so an error names the one that does not compile
    samples = {"lift": (1.5, 0) if agg.positional else (1.5,), "combine": (agg.identity, agg.identity),
               "lower": (agg.identity,)}
    for name in ("lift", "combine", "lower"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                jitted[name](*samples[name])
        except Exception as exc:
            return None, (f"numba cannot compile its {name} {_name(getattr(agg, name))} ({type(exc).__name__}: "
                          f"{_first_line(exc)}; a function it calls must itself be numba.njit)")
    funcs: dict[str, Any] = {}
    namespace = {"lift": jitted["lift"], "combine": jitted["combine"], "lower": jitted["lower"]}
    exec(compile(_source(w, agg.positional), f"<pba_runtime user kernel, width {w}>", "exec"), namespace)
    for name in ("lift_all", "lower_all", "combine_all", "reduce_all", "scan_all", "merge"):
        funcs[name] = numba.njit(nogil=True)(namespace[name])
    kernel = UserKernel(agg, w, funcs)
    kernel.jitted = jitted  # the user's own functions compiled (the per-tuple engine inlines them)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            why = _check(agg, kernel)
    except Exception as exc:
        return None, f"numba cannot compile the loops around it ({type(exc).__name__}: {_first_line(exc)})"
    if why:
        return None, why
    return kernel, ""


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _first_line(exc: Exception) -> str:
    """The line of a numba error that says what failed (its first lines are the pipeline's)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("Failed in", "During:", "File ", "^", ">")):
            return ln[:200]
    return lines[0][:200] if lines else ""


def _check(agg: Aggregation, kernel: UserKernel) -> str:
    """Compile every loop and compare the compiled form with the Python form on ``_SAMPLES``."""
    vals = np.array(_SAMPLES)
    pos = np.arange(len(vals), dtype=np.int64)
    py_parts = []
    for v, p in zip(vals.tolist(), pos.tolist()):
        try:
            py_parts.append(agg.lift(v, p) if agg.positional else agg.lift(v))
        except Exception:  # the Python form refuses this value (say, a log of a negative): compare the others
            py_parts.append(None)
    keep = [i for i, p in enumerate(py_parts) if p is not None]
    if not keep:
        return "its lift refuses every sample value"
    vals, pos = vals[keep], pos[keep]
    py_parts = [py_parts[i] for i in keep]
    parts = kernel.lift(vals, pos)
    if not _same(parts, py_parts):
        return f"its compiled lift {_name(agg.lift)} differs from the Python one"
    py_low = [agg.lower(p) for p in py_parts]
    try:
        np.asarray(py_low, dtype=np.float64).reshape(len(py_low))
    except (TypeError, ValueError):
        return f"its lower {_name(agg.lower)} does not return a number"
    if not _same(kernel.lower(parts), py_low):
        return f"its compiled lower {_name(agg.lower)} differs from the Python one"
    py_comb = [agg.combine(a, b) for a, b in zip(py_parts[:-1], py_parts[1:])]
    if not _same(kernel.combine(parts[:-1], parts[1:]), py_comb):
        return f"its compiled combine {_name(agg.combine)} differs from the Python one"
    # the loops the batch path runs: scan, reduce and merge, once each on the samples
    kernel.accumulate(parts, 0, reverse=True)
    kernel.reduce_segments(parts, np.array([0, 2]))
    n = len(parts)
    if n >= 2:
        kernel.merge(np.ascontiguousarray(parts), 2, 0, n - 1, np.empty((n - 1,) + kernel.shape),
                     np.empty(0, dtype=np.int64), 0, 1)
    return ""
