"""The built-in aggregations as numba-compilable monoids, and user aggregations through :mod:`..user`.

Each built-in has a ``lift``, ``combine`` and ``lower`` here written as the scalar form in
:mod:`pba_runtime.aggregations` is (same operations in the same order), so ``max``, ``min``, ``count``
and ``argmax`` are bit-exact and ``sum``, ``mean``, ``std``, ``geomean`` and ``moment_sketch`` give the
Python form's rounding. A partial is a float (width 0) or a tuple of ``width`` floats.

Two differences, both in the values the Python form refuses or rewrites before it lifts them:
values are checked before the loop (:func:`pba_runtime.replay.replay` refuses strings, and negative
values for ``geomean``/``moment_sketch``, as the operators do), and ``-0.0`` is lifted as itself
(numpy's ``np.max`` keeps it; the Python ``lift`` adds ``0.0``).

Examples
--------
>>> m = monoid_of(get_aggregation("mean"))
>>> m.width, m.identity, m.result
(2, (0.0, 0.0), 'float')
>>> m.lower(m.combine(m.lift(1.0), m.lift(3.0)))
2.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from ...aggregations import BUILTIN_AGGREGATIONS, Aggregation, get_aggregation

__all__ = ["Monoid", "monoid_of", "get_aggregation"]

_INF = math.inf
_NAN = math.nan
jit = numba.njit(inline="never", cache=True)


# ----------------------------------------------------------------- scalar partials
@jit
def same_lift(x):
    return x


@jit
def same_lower(p):
    return p


@jit
def max_combine(a, b):
    return a if (a >= b or a != a) else b


@jit
def min_combine(a, b):
    return a if (a <= b or a != a) else b


@jit
def add_combine(a, b):
    return a + b


@jit
def count_lift(x):
    return 1.0


@jit
def sub_inverse(t, a):
    """``count``'s inverse (subtract-on-evict): ``t - a``, as ``operator.sub``."""
    return t - a


# ----------------------------------------------------------------- pairs: mean, geomean
@jit
def mean_lift(x):
    return (x, 1.0)


@jit
def pair_add(a, b):
    return (a[0] + b[0], a[1] + b[1])


@jit
def mean_lower(p):
    return p[0] / p[1]


@jit
def log_np(x):
    if x > 0.0:
        return math.log(x)
    if x == 0.0:
        return -_INF
    return _NAN


@jit
def geo_lift(x):
    return (log_np(x), 1.0)


@jit
def geo_lower(p):
    return math.exp(p[0] / p[1])


# ----------------------------------------------------------------- std (Chan et al.)
@jit
def std_lift(x):
    return (1.0, x, 0.0, 0.0)


# Chan et al.'s merge of (n, mean, M2, lo): the built-in's own Python combine, compiled as it is
chan = jit(BUILTIN_AGGREGATIONS["std"].combine)


@jit
def std_lower(p):
    n = p[0]
    if n > 1.0 and math.isfinite(p[1]):
        return math.sqrt(p[2] / (n - 1.0))
    return _NAN


@jit
def var_lower(p):
    n = p[0]
    if n > 1.0 and math.isfinite(p[1]):
        return p[2] / (n - 1.0)
    return _NAN


# ----------------------------------------------------------------- argmax
@jit
def argmax_lift(x, pos):
    return (x, float(pos))


@jit
def argmin_lift(x, pos):
    return (-x, float(pos))


# the built-in's own Python combine (the older one on ties; NaN counts as largest), compiled as it is
argmax_combine = jit(BUILTIN_AGGREGATIONS["argmax"].combine)


@jit
def argmax_lower(p):
    return p[1]


# ----------------------------------------------------------------- moment sketch (k = 10), generated
def _moment_source(k: int) -> str:
    w = 3 + 2 * k
    lines = ["def moment_lift(x):", "    p = 1.0"]
    terms = ["x", "x", "1.0"]
    for j in range(k):
        lines.append(f"    x{j} = p * x" if j == 0 else f"    x{j} = x{j - 1} * x")
        terms.append(f"x{j}")
    lines.append("    lx = log_np(x)")
    for j in range(k):
        lines.append(f"    l{j} = p * lx" if j == 0 else f"    l{j} = l{j - 1} * lx")
        terms.append(f"l{j}")
    lines.append("    return (" + ", ".join(terms) + ")")
    lines += ["", "def moment_combine(a, b):",
              "    lo = a[0] if (a[0] <= b[0] or a[0] != a[0]) else b[0]",
              "    hi = a[1] if (a[1] >= b[1] or a[1] != a[1]) else b[1]",
              "    return (lo, hi, " + ", ".join(f"a[{i}] + b[{i}]" for i in range(2, w)) + ")"]
    return "\n".join(lines) + "\n"


_ns: dict[str, Any] = {"log_np": log_np}
exec(compile(_moment_source(10), "<pba_runtime moment sketch monoid>", "exec"), _ns)
moment_lift = numba.njit(inline="never")(_ns["moment_lift"])
moment_combine = numba.njit(inline="never")(_ns["moment_combine"])


@dataclass(frozen=True)
class Monoid:
    """An aggregation as the compiled engine runs it.

    ``module``: for built-ins, the names of the three functions in this module (the generated
    loops import them, so numba caches those loops on disk); ``None`` for a user aggregation
    (``lift``/``combine``/``lower`` are its compiled functions). ``result``: ``"float"``, ``"int"``
    (the float lowered is converted) or ``"vector"`` (``lower`` returns the partial itself).
    """

    name: str
    width: int
    identity: Any
    positional: bool
    result: str
    lift: Any
    combine: Any
    lower: Any
    key: str
    names: tuple[str, str, str] | None = None
    #: a user aggregation whose lift, combine and lower are module-level functions: their
    #: ``(module, name)``, so the generated loops can import them and be cached on disk too
    source: tuple[tuple[str, str], ...] | None = None
    non_negative: bool = False
    #: subtract-on-evict: the compiled ``inverse(total, older)`` (``None``: not invertible), and as
    #: ``names``/``source`` say for the others, its name here (built-ins) or ``(module, name)`` (users)
    inverse: Any = None
    inverse_name: str | None = None
    inverse_source: tuple[str, str] | None = None
    #: a user aggregation's inverse that numba does not compile, or compiles to other results: why
    inverse_why: str = ""

    def identity_array(self) -> np.ndarray:
        return np.asarray(self.identity, dtype=np.float64).reshape((1,) + ((self.width,) if self.width else ()))


#: the compiled monoid of each ``CompiledForms.stepwise`` name: (width, lift, combine, lower, result,
#: inverse (subtract-on-evict beyond the exact accumulators of ``stepwise.soe``), values must be >= 0)
_BUILTIN = {
    "max": (0, "same_lift", "max_combine", "same_lower", "float", None, False),
    "min": (0, "same_lift", "min_combine", "same_lower", "float", None, False),
    "sum": (0, "same_lift", "add_combine", "same_lower", "float", None, False),
    "count": (0, "count_lift", "add_combine", "same_lower", "int", "sub_inverse", False),
    "mean": (2, "mean_lift", "pair_add", "mean_lower", "float", None, False),
    "geomean": (2, "geo_lift", "pair_add", "geo_lower", "float", None, True),
    "std": (4, "std_lift", "chan", "std_lower", "float", None, False),
    "var": (4, "std_lift", "chan", "var_lower", "float", None, False),
    "argmax": (2, "argmax_lift", "argmax_combine", "argmax_lower", "int", None, False),
    "argmin": (2, "argmin_lift", "argmax_combine", "argmax_lower", "int", None, False),
    "moment_sketch": (23, "moment_lift", "moment_combine", "same_lower", "vector", None, True),
}

_user: dict[str, tuple[Monoid | None, str]] = {}


def _importable(*fns: Any) -> tuple[tuple[str, str], ...] | None:
    """``(module, name)`` of each function if every one is a module-level function found by that name."""
    import sys

    out = []
    for f in fns:
        mod, name = getattr(f, "__module__", None), getattr(f, "__qualname__", "")
        if not mod or not name.isidentifier() or getattr(sys.modules.get(mod), name, None) is not f:
            return None
        out.append((mod, name))
    return tuple(out)


def monoid_of(agg: Aggregation) -> Monoid:
    """The compiled monoid of ``agg``; ``ValueError`` (saying why) when it has none.

    Built-ins (but ``collect``, whose partial is a list) and user aggregations whose Python
    ``lift``/``combine``/``lower`` numba compiles (checked against the Python form, as the batch
    engine does) have one.
    """
    spec = _BUILTIN.get(agg.compiled.stepwise)
    if spec is not None:  # declared by the aggregation's family
        w, lift, combine, lower, result, inv, non_negative = spec
        g = globals()
        return Monoid(agg.name, w, agg.identity, agg.positional, result, g[lift], g[combine], g[lower],
                      key=f"builtin:{agg.compiled.stepwise}", names=(lift, combine, lower),
                      non_negative=non_negative, inverse=g[inv] if inv else None, inverse_name=inv)
    if BUILTIN_AGGREGATIONS.get(agg.name) is agg:
        raise ValueError(f"aggregation {agg.name!r} has no compiled per-tuple form (its partials are lists)")
    key = agg.fingerprint
    hit = _user.get(key)
    if hit is None:
        from .. import _user_kernel  # compiled and checked once per process, shared with the batch engine
        from ..user import _width

        kernel, why = _user_kernel(agg, warn=False)
        mono = None
        if kernel is not None:
            j = kernel.jitted
            w = _width(agg.identity)
            ident = float(agg.identity) if w == 0 else tuple(float(x) for x in agg.identity)
            f = kernel.forms  # the Python functions numba compiled (a builtin's: a wrapper calling it)
            inv = j.get("inverse")  # compiled and checked against the Python inverse (None: it differs)
            isrc = _importable(f["inverse"]) if inv is not None else None
            mono = Monoid(agg.name, w, ident, agg.positional, "object", j["lift"], j["combine"], j["lower"],
                          key=f"user:{key}", source=_importable(f["lift"], f["combine"], f["lower"]),
                          inverse=inv, inverse_source=isrc[0] if isrc else None,
                          inverse_why=getattr(kernel, "inverse_why", ""))
        hit = _user[key] = (mono, why)
    if hit[0] is None:
        raise ValueError(f"aggregation {agg.name!r} has no compiled per-tuple form: {hit[1]}")
    return hit[0]
