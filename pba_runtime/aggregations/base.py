"""The monoid an aggregation is: ``Aggregation``, its numpy ``Kernel`` forms, the declared capabilities.

``combine`` is always called as ``older (+) newer``; it must be associative, not necessarily
commutative or invertible. What an aggregation can do (invertible, selective, commutative, the
compiled forms its family has) is declared on it and read through :class:`Aggregation` and
:class:`CompiledForms`, never by its name. The built-ins live in one module per family beside
this one (``extrema``, ``sums``, ``products``, ``moments``, ``collect``), each holding every form
of its aggregations: the Python reference (``lift``/``combine``/``lower``), the numpy kernel and
the declaration of its compiled forms.

Examples
--------
>>> agg = get_aggregation("mean")
>>> agg.lower(agg.combine(agg.lift(1.0), agg.lift(3.0)))
2.0
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..missing import MISSING_POLICY, fill_missing, refuse_missing

_INF = math.inf
_NAN = math.nan

# --------------------------------------------------------------------------- helpers
def as_float_array(values: Any, *, name: str = "values", agg_name: str = "", missing: str = "propagate") -> np.ndarray:
    """Validate numeric input and return it as a 1-D float64 array (no copy when possible).

    A missing value (pandas' ``<NA>``, a masked entry, an Arrow or polars null) raises a ``ValueError``
    naming ``name`` (:func:`pba_runtime.missing.refuse_missing`); NaN is a value. With ``missing="skip"``
    (an aggregation's :attr:`Aggregation.missing`) a missing value is read as NaN instead."""
    if missing == "skip":
        values = fill_missing(values)
    else:
        refuse_missing(values, name)
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        what = f"aggregation {agg_name!r}" if agg_name else "this aggregation"
        raise TypeError(f"{name} must be real numbers (bool, int or float) for {what}, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def _real(v: Any, agg_name: str) -> float:
    """Lift one value to a Python float, refusing strings, None and other non-numbers."""
    try:
        x = v + 0.0
    except TypeError:
        raise TypeError(
            f"value must be a real number for aggregation {agg_name!r}, got {type(v).__name__} {v!r}"
        ) from None
    if type(x) is not float:
        if isinstance(x, complex):
            raise TypeError(f"value must be a real number for aggregation {agg_name!r}, got complex {v!r}")
        if type(x).__name__ == "NAType":  # pandas' <NA> (pd.NA + 0.0 is pd.NA)
            raise ValueError(f"value is missing (<NA>): {MISSING_POLICY}; pass float('nan') if NaN is what you mean")
        x = float(x)
    return x


_WHY_NON_NEGATIVE = {"geomean": "a geometric mean of positive values"}


def _non_negative(x: float, agg_name: str) -> float:
    """``x`` itself if it is ``>= 0`` (or NaN, which propagates); the log-based aggregations refuse the rest."""
    if x < 0.0:
        why = _WHY_NON_NEGATIVE.get(agg_name, "it takes logarithms")
        raise ValueError(f"value must be >= 0 for aggregation {agg_name!r} ({why}), got {x!r}")
    return x


def _non_negative_array(v: np.ndarray, agg_name: str) -> None:
    """Refuse a batch holding a negative value, naming the first one (nothing is changed yet)."""
    neg = v < 0
    if neg.any():
        _non_negative(float(v[np.argmax(neg)]), agg_name)


def _log(x: float) -> float:
    """Natural log with numpy's conventions: log(0) = -inf, log(<0) = nan."""
    if x > 0.0:
        return math.log(x)
    if x == 0.0:
        return -_INF
    return _NAN


def _elementwise_lift(lift: Callable, positional: bool) -> Callable:
    """The kernel form of a user's scalar ``lift``: applied to every value, as the per-tuple path does.

    A faster form declared through ``ufunc=`` speeds up ``combine`` only; the user's own
    ``lift`` still decides each partial (the spec: every form gives the Python form's results).
    """
    if positional:
        def klift(values: np.ndarray, positions: np.ndarray) -> np.ndarray:
            out = [lift(v, p) for v, p in zip(values.tolist(), positions.tolist())]
            return np.array(out, dtype=np.float64).reshape(len(out))
    else:
        def klift(values: np.ndarray) -> np.ndarray:
            out = [lift(v) for v in values.tolist()]
            return np.array(out, dtype=np.float64).reshape(len(out))
    return klift


def _elementwise_lower(lower: Callable) -> Callable:
    """The kernel form of a user's scalar ``lower``."""
    def klower(parts: np.ndarray) -> np.ndarray:
        return np.asarray([lower(x) for x in parts.tolist()])
    return klower


def quiet_non_finite(fn: Callable) -> Callable:
    """Run ``fn`` without numpy's warnings for non-finite arithmetic (``inf - inf``, overflow).

    A window holding NaN or infinities gives numpy's result silently, as the per-tuple path (Python
    floats) and pandas' rolling windows do. Decorates the vectorised entry points (a fresh
    ``np.errstate`` per call: numpy 2's is thread-local and not re-entrant, so the worker pool's threads
    and processes set their own once, :func:`pba_runtime.pool.quiet_worker_thread`). Not a chunk's lcs
    built on the caller's thread by the per-tuple path: entering an ``errstate`` there costs SBA's
    per-tuple ``insert`` a visible share of its time (bench/bench_core.py).
    """
    @functools.wraps(fn)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(invalid="ignore", over="ignore"):
            return fn(*args, **kwargs)
    return quiet


def _code_id(code: Any) -> list:
    """A code object's bytecode, names and constants (nested code objects recursively, never by address)."""
    consts = [_code_id(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), code.co_names, code.co_varnames, consts]


def _callable_id(f: Any) -> str:
    """What a function computes, as a string stable across processes (see ``Aggregation.fingerprint``)."""
    if f is None:
        return "None"
    if isinstance(f, np.ufunc):
        return f"ufunc:{f.__name__}"
    if isinstance(f, functools.partial):
        return f"partial({_callable_id(f.func)}, {f.args!r}, {sorted(f.keywords.items())!r})"
    if callable(getattr(f, "py_func", None)):  # a numba.njit function: what its Python function computes
        return f"jit({_callable_id(f.py_func)})"
    name = f"{getattr(f, '__module__', None)}.{getattr(f, '__qualname__', type(f).__qualname__)}"
    code = getattr(f, "__code__", None)
    if code is None:  # a builtin (max, float, ...) or a callable object
        return name if hasattr(f, "__qualname__") else f"{name}:{f!r}"
    cells = []
    for cell in f.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            v = None
        cells.append(_callable_id(v) if callable(v) else repr(v))
    return f"{name}:{_code_id(code)!r}:{cells!r}:{f.__defaults__!r}"


def _from_first(parts: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop what lies before the first segment (``ufunc.reduceat`` ignores it too)."""
    starts = np.asarray(starts)
    if len(starts) and starts[0]:
        return parts[starts[0]:], starts - starts[0]
    return parts, starts


_REVERSED = tuple((slice(None),) * k + (slice(None, None, -1),) for k in range(4))


def _flip(a: np.ndarray, axis: int) -> np.ndarray:
    """``np.flip(a, axis)`` for a non-negative ``axis``, as a basic slice (less call overhead: the batch
    merge flips a row per call)."""
    return a[_REVERSED[axis]] if 0 <= axis < 4 else np.flip(a, axis=axis)


# --------------------------------------------------------------------------- kernels
class Kernel:
    """Vectorised form of an aggregation over arrays of partials.

    Partials of shape ``shape`` (``()`` for a scalar partial, ``(k,)`` for a vector
    one) are laid out along the last axes: an array of ``n`` partials has shape
    ``(n,) + shape``. ``axis`` arguments index the leading (slice) axes.
    """

    shape: tuple = ()
    identity: np.ndarray
    # ``combine(older, newer, out=older)`` is safe: every output element is written
    # only after the operands it depends on were read
    combine_in_place: bool = False

    def lift(self, values: np.ndarray, positions: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def reduce_segments(self, parts: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Aggregate ``parts[starts[i]:starts[i+1]]`` (the last segment runs to the end); segments are non-empty."""
        raise NotImplementedError

    def combine(self, older: np.ndarray, newer: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def accumulate(self, parts: np.ndarray, axis: int, reverse: bool = False, out: np.ndarray | None = None,
                   nan_free: bool = False) -> np.ndarray:
        """Prefix aggregation along ``axis`` (``reverse``: suffix, i.e. the lcs of PBA).

        ``nan_free``: the caller checked (:meth:`nan_free_rows`) that ``parts`` holds no NaN,
        so a faster loop that differs only on NaN may run.
        """
        raise NotImplementedError

    def nan_free_rows(self, rows: np.ndarray) -> np.ndarray | None:
        """Per row of ``rows`` (slices along the last slice axis), whether it holds no NaN;
        ``None`` when ``accumulate`` has no faster NaN-free loop (then nobody needs to look)."""
        return None

    def lower(self, parts: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # conversions between the scalar form (Python floats / tuples) and array rows
    def to_array(self, partials: Sequence[Any]) -> np.ndarray:
        if not len(partials):
            return np.empty((0,) + self.shape)
        return np.asarray(partials, dtype=np.float64).reshape((len(partials),) + self.shape)

    def to_partials(self, arr: np.ndarray) -> list:
        if self.shape == ():
            return arr.tolist()
        return [tuple(row) for row in arr.tolist()]

    def identity_array(self, n: int) -> np.ndarray:
        return np.broadcast_to(self.identity, (n,) + self.shape).copy()


# fmax/fmin equal maximum/minimum on NaN-free input (up to the sign of a zero, which numpy's
# own SIMD and scalar maximum already disagree on) and accumulate faster: no NaN test per element
# (bench/bench_core.py)
_NAN_FREE_TWIN = {np.maximum: np.fmax, np.minimum: np.fmin}


class WrappedKernel(Kernel):
    """A kernel that replaces some of another's forms (a compiled lift or lower) and delegates the rest."""

    def __init__(self, base: Kernel):
        self.base = base
        self.shape = base.shape
        self.identity = base.identity
        self.combine_in_place = base.combine_in_place

    def lift(self, values, positions):
        return self.base.lift(values, positions)

    def lower(self, parts):
        return self.base.lower(parts)

    def reduce_segments(self, parts, starts):
        return self.base.reduce_segments(parts, starts)

    def combine(self, older, newer, out=None):
        return self.base.combine(older, newer, out=out)

    def accumulate(self, parts, axis, reverse=False, out=None, nan_free=False):
        return self.base.accumulate(parts, axis, reverse=reverse, out=out, nan_free=nan_free)

    def nan_free_rows(self, rows):
        return self.base.nan_free_rows(rows)


class UfuncKernel(Kernel):
    """Kernel whose partial fields each combine with a binary ufunc (max, sum, moments...).

    ``groups`` lists ``(ufunc, n_columns)`` over the columns of a vector partial,
    or is a single ufunc for a scalar partial.
    """

    combine_in_place = True  # elementwise ufuncs

    def __init__(self, groups, identity, lift: Callable, lower: Callable, *, positional: bool = False,
                 elementwise: bool = False):
        #: the lift and lower are a user's scalar ``lift``/``lower`` applied per element (``ufunc=``), which
        #: the compiled engine may compile (pba_runtime.kernels.user)
        self.elementwise = elementwise
        self._nan_free_ufunc = None
        self._positional = positional
        if isinstance(groups, np.ufunc):
            self.shape = ()
            self._groups = None
            self._ufunc = groups
            self._nan_free_ufunc = _NAN_FREE_TWIN.get(groups)
        else:
            width = sum(n for _, n in groups)
            self.shape = (width,)
            self._groups = []
            col = 0
            for uf, n in groups:
                self._groups.append((uf, slice(col, col + n)))
                col += n
        self.identity = np.asarray(identity, dtype=np.float64).reshape(self.shape)
        self._lift = lift
        self._lower = lower

    @property
    def ufuncs(self) -> tuple:
        """``(ufunc, columns)`` per group of columns (``columns`` ``None`` for a scalar partial)."""
        if self._groups is None:
            return ((self._ufunc, None),)
        return tuple(self._groups)

    @property
    def scalar_lift(self) -> Callable:
        """The lift applied to a batch of values (a user's scalar lift, per element, when ``elementwise``)."""
        return self._lift

    def lift(self, values, positions):
        return self._lift(values, positions) if self._positional else self._lift(values)

    def lower(self, parts):
        return self._lower(parts)

    def reduce_segments(self, parts, starts):
        if self._groups is None:
            return self._ufunc.reduceat(parts, starts, axis=0)
        out = np.empty((len(starts),) + self.shape)
        for uf, cols in self._groups:
            out[:, cols] = uf.reduceat(parts[:, cols], starts, axis=0)
        return out

    def combine(self, older, newer, out=None):
        if self._groups is None:
            return self._ufunc(older, newer, out=out)
        if out is None:
            out = np.empty(np.broadcast_shapes(np.shape(older), np.shape(newer)))
        for uf, cols in self._groups:
            uf(older[..., cols], newer[..., cols], out=out[..., cols])
        return out

    def nan_free_rows(self, rows):
        if self._nan_free_ufunc is None:
            return None
        return ~np.isnan(self._ufunc.reduce(rows, axis=-1))  # maximum/minimum propagate a NaN

    def accumulate(self, parts, axis, reverse=False, out=None, nan_free=False):
        if out is None:
            out = np.empty_like(parts)
        src = _flip(parts, axis) if reverse else parts
        dst = _flip(out, axis) if reverse else out
        if self._groups is None:
            uf = self._nan_free_ufunc if nan_free and self._nan_free_ufunc is not None else self._ufunc
            uf.accumulate(src, axis=axis, out=dst)
        else:
            for uf, cols in self._groups:
                uf.accumulate(src[..., cols], axis=axis, out=dst[..., cols])
        return out


# --------------------------------------------------------------------------- compiled forms
#: the layouts of the compiled merge (pba_runtime.kernels): a ufunc kernel's is derived from its ufuncs
LAYOUTS = ("scalar", "columns", "std", "argmax")


@dataclass(frozen=True)
class CompiledForms:
    """What an aggregation's family declares about its compiled forms (read by the engines).

    Parameters
    ----------
    layout : str, optional
        The compiled merge its partials take: ``"std"`` (``(n, mean, M2, lo)`` merged by Chan's
        update) or ``"argmax"`` (``(value, position)``, the largest value, the oldest on ties);
        ``None``: derived from a :class:`UfuncKernel`'s ufuncs (``"scalar"``/``"columns"``).
    lift, lower : str, optional
        Names of compiled replacements of the kernel's lift and lower in ``pba_runtime.kernels.compiled``
        (``None``: the kernel's numpy form runs).
    lift_refuses_negative : bool
        The compiled lift does not check its values; a batch holding a negative value goes to the
        kernel's lift, which refuses it naming the value.
    from_values : str, optional
        The compiled merge that reads the values themselves and writes lowered results (count
        windows, slide 1), and ``value_column`` the column of a slice partial that holds its one value.
    exact : str, optional
        The exact accumulator subtract-on-evict keeps (``"sum"``, ``"pair"``: a sum and a count, or
        ``"std"``: sums of x and x**2), instead of calling ``inverse``.
    stepwise : str, optional
        The name of its monoid in the compiled per-tuple engine (``pba_runtime.kernels.stepwise.monoids``).
    position_result : bool
        Its result is the position its ``lift`` was given (argmax, argmin): a driver that rebuilds an
        operator at a later position shifts the results back by as much.
    """

    layout: str | None = None
    lift: str | None = None
    lower: str | None = None
    lift_refuses_negative: bool = False
    from_values: str | None = None
    value_column: int = 0
    exact: str | None = None
    stepwise: str | None = None
    position_result: bool = False

    def __post_init__(self) -> None:
        if self.layout is not None and self.layout not in LAYOUTS:
            raise ValueError(f"CompiledForms layout must be one of {LAYOUTS} or None, got {self.layout!r}")
        if self.exact not in (None, "sum", "pair", "std"):
            raise ValueError(f"CompiledForms exact must be 'sum', 'pair', 'std' or None, got {self.exact!r}")


NO_COMPILED_FORMS = CompiledForms()

_PREAGGREGATES = (None, "max", "min", "sum", "count", "mean", "argmax")


# --------------------------------------------------------------------------- the Aggregation type
@dataclass(frozen=True, eq=False)
class Aggregation:
    """A sliding-window aggregation as a monoid ``(lift, combine, lower, identity)``.

    Parameters
    ----------
    lift : callable
        ``lift(value) -> partial`` (``lift(value, position)`` when ``positional``).
    combine : callable
        ``combine(older, newer) -> partial``; associative.
    lower : callable
        ``lower(partial) -> result``.
    identity : object
        Neutral partial: ``combine(identity, p) == combine(p, identity) == p``.
    name : str
        Shown in errors and metrics.
    inverse : callable, optional
        ``inverse(total, older) -> rest`` with ``combine(older, rest) == total``;
        declares the aggregation invertible (needed by subtract-on-evict).
    commutative, selective : bool
        Declared capabilities (selective: ``combine`` returns one of its operands).
    positional : bool
        ``lift`` also receives the value's position (count windows) or timestamp.
    float_passthrough : bool
        Declares ``lift(x) == x`` and ``lower(p) == p`` for a Python float ``x`` (max, min, sum): a
        per-tuple loop may skip both calls.
    preaggregate : str, optional
        Declares that a slice's partial is a plain SQL aggregate of its values, so a planner (the
        Spark adapter) may compute sub-slice partials with its own aggregation: ``"max"``, ``"min"``,
        ``"sum"``, ``"count"``, ``"mean"`` (sum and count) or ``"argmax"`` (value, then oldest time).
    kernel : Kernel, optional
        Vectorised form over numpy arrays; enables numpy-built csa/lcs and the batch path.
    ufunc : numpy.ufunc, optional
        Shortcut to declare a kernel for a scalar partial combined by a binary ufunc
        (for example ``np.maximum``); ``lift`` must then return a float.
    compiled : CompiledForms, optional
        What the compiled engines may run for it (the built-ins' families declare it; a user's
        ``ufunc=`` kernel needs none).
    count_column : int, optional
        Declares that the partial counts the values lifted into it: the partial itself (``0``, a
        scalar partial: ``count``) or its column ``count_column`` (``mean``, ``std``, ...).
        :func:`~pba_runtime.aggregations.skip_missing` then keeps the partial as it is (a missing
        value lifts to the identity) instead of adding a count to it.

    Examples
    --------
    >>> import numpy as np
    >>> rng = Aggregation(lift=lambda v: (v, v), combine=lambda a, b: (min(a[0], b[0]), max(a[1], b[1])),
    ...                   lower=lambda p: p[1] - p[0], identity=(float("inf"), float("-inf")), name="range")
    >>> rng.lower(rng.combine(rng.lift(2.0), rng.lift(5.0)))
    3.0
    >>> top = Aggregation(lift=float, combine=max, lower=float, identity=float("-inf"), ufunc=np.maximum)
    >>> top.kernel is not None
    True
    """

    lift: Callable
    combine: Callable
    lower: Callable
    identity: Any
    name: str = "custom"
    inverse: Callable | None = None
    commutative: bool = False
    selective: bool = False
    positional: bool = False
    kernel: Kernel | None = None
    ufunc: np.ufunc | None = field(default=None, repr=False)
    result: str = "object"  # "float", "int", "vector", "list" or "object": how batch results are packed
    float_passthrough: bool = False
    preaggregate: str | None = None
    compiled: CompiledForms = field(default=NO_COMPILED_FORMS, repr=False)
    count_column: int | None = None

    def __post_init__(self) -> None:
        for fname in ("lift", "combine", "lower"):
            if not callable(getattr(self, fname)):
                raise TypeError(f"Aggregation {fname} must be callable, got {type(getattr(self, fname)).__name__}")
        if self.inverse is not None and not callable(self.inverse):
            raise TypeError(f"Aggregation inverse must be callable or None, got {type(self.inverse).__name__}")
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Aggregation name must be a non-empty string, got {self.name!r}")
        if self.ufunc is not None:
            if not isinstance(self.ufunc, np.ufunc) or self.ufunc.nin != 2:
                raise TypeError(f"Aggregation ufunc must be a binary numpy ufunc, got {self.ufunc!r}")
            if self.kernel is None:
                kern = UfuncKernel(self.ufunc, self.identity, lift=_elementwise_lift(self.lift, self.positional),
                                   lower=_elementwise_lower(self.lower), positional=self.positional,
                                   elementwise=True)
                object.__setattr__(self, "kernel", kern)
        if self.preaggregate not in _PREAGGREGATES:
            raise ValueError(f"Aggregation preaggregate must be one of {sorted(p for p in _PREAGGREGATES if p)} "
                             f"or None, got {self.preaggregate!r}")
        if not isinstance(self.compiled, CompiledForms):
            raise TypeError(f"Aggregation compiled must be a CompiledForms, got {type(self.compiled).__name__}")
        if self.kernel is not None and not isinstance(self.kernel, Kernel):
            raise TypeError(f"Aggregation kernel must be a pba_runtime.Kernel, got {type(self.kernel).__name__}")
        if self.count_column is not None and (isinstance(self.count_column, bool)
                                              or not isinstance(self.count_column, int) or self.count_column < 0):
            raise TypeError(f"Aggregation count_column must be a non-negative int or None, got {self.count_column!r}")

    @functools.cached_property  # frozen dataclass: cached_property writes __dict__ directly
    def fingerprint(self) -> str:
        """What the aggregation computes, as a string stable across processes (snapshots compare it).

        Built from the name, the capabilities, the identity and each function's module,
        qualified name, bytecode, constants and closure values, so two aggregations that share
        a name but not a ``combine`` (say ``max`` and ``min``) differ.

        Examples
        --------
        >>> hi = Aggregation(lift=float, combine=max, lower=float, identity=float("-inf"))
        >>> lo = Aggregation(lift=float, combine=min, lower=float, identity=float("inf"))
        >>> hi.fingerprint == lo.fingerprint, hi.fingerprint == get_aggregation(hi).fingerprint
        (False, True)
        """
        if BUILTIN_AGGREGATIONS.get(self.name) is self:
            return f"builtin:{self.name}"
        parts = [self.name, repr(self.identity), self.result, str(self.positional), str(self.commutative),
                 str(self.selective), None if self.ufunc is None else self.ufunc.__name__,
                 type(self.kernel).__qualname__]
        parts += [_callable_id(f) for f in (self.lift, self.combine, self.lower, self.inverse)]
        if self.compiled != NO_COMPILED_FORMS:
            parts.append(repr(self.compiled))
        if self.count_column is not None:
            parts.append(f"count_column={self.count_column}")
        return "custom:" + hashlib.sha256(repr(parts).encode()).hexdigest()

    @property
    def missing(self) -> str:
        """The missing-value policy of its input: ``"propagate"`` (numpy's result; nulls refused), or
        ``"skip"`` for :func:`~pba_runtime.aggregations.skip_missing`'s aggregations."""
        return "propagate"

    @property
    def invertible(self) -> bool:
        return self.inverse is not None

    @property
    def vectorised(self) -> bool:
        return self.kernel is not None

    def pack(self, results: list) -> Any:
        """Pack a list of lowered results the way ``insert_many`` returns them."""
        if self.result == "float":
            return np.asarray(results, dtype=np.float64)
        if self.result == "int":
            return np.asarray(results, dtype=np.int64)
        if self.result == "vector":
            width = self.kernel.shape[0] if self.kernel is not None else 0
            return np.asarray(results, dtype=np.float64).reshape(len(results), -1 if results else width)
        if self.result == "list":
            return list(results)
        try:
            return np.asarray(results)
        except (ValueError, TypeError):
            return list(results)

    def __repr__(self) -> str:
        caps = [c for c in ("invertible", "commutative", "selective", "vectorised") if getattr(self, c)]
        return f"Aggregation({self.name!r}{', ' if caps else ''}{', '.join(caps)})"



def _float_array(v):
    return np.asarray(v, dtype=np.float64)


def _same(a):
    return a


def scalar_builtin(name: str, combine: Callable, identity: float, ufunc: np.ufunc, *, inverse: Callable | None = None,
                   selective: bool = False, exact: str | None = None) -> Aggregation:
    """A built-in whose partial is one float, the value itself (max, min, sum): ``lift`` checks it is a
    real number, ``ufunc`` is its numpy combine."""
    return Aggregation(
        name=name, lift=lambda v, _n=name: _real(v, _n), combine=combine, lower=float, identity=identity,
        inverse=inverse, commutative=True, selective=selective, result="float", float_passthrough=True,
        preaggregate=name, kernel=UfuncKernel(ufunc, identity, lift=_float_array, lower=_same),
        compiled=CompiledForms(exact=exact, stepwise=name),
    )


# --------------------------------------------------------------------------- the built-ins' registry
#: every built-in by name, filled by the family modules (``pba_runtime.aggregations`` imports them all)
BUILTIN_AGGREGATIONS: dict[str, Aggregation] = {}


def register_builtin(agg: Aggregation) -> Aggregation:
    """Add ``agg`` to :data:`BUILTIN_AGGREGATIONS` under its name (the family modules call it once each)."""
    if agg.name in BUILTIN_AGGREGATIONS:
        raise ValueError(f"a built-in aggregation named {agg.name!r} exists already")
    BUILTIN_AGGREGATIONS[agg.name] = agg
    return agg


def get_aggregation(agg: str | Aggregation) -> Aggregation:
    """Return the built-in aggregation named ``agg``, or ``agg`` itself if it is an :class:`Aggregation`.

    Examples
    --------
    >>> get_aggregation("max").name
    'max'
    >>> get_aggregation("median")
    Traceback (most recent call last):
    ...
    ValueError: unknown aggregation 'median'; accepted: argmax, argmin, collect, count, geomean, max, mean, min, ...
    """
    if isinstance(agg, Aggregation):
        return agg
    if isinstance(agg, str):
        try:
            return BUILTIN_AGGREGATIONS[agg]
        except KeyError:
            raise ValueError(
                f"unknown aggregation {agg!r}; accepted: {', '.join(sorted(BUILTIN_AGGREGATIONS))}, "
                "or a pba_runtime.Aggregation"
            ) from None
    raise TypeError(f"agg must be an aggregation name (str) or a pba_runtime.Aggregation, got {type(agg).__name__}")
