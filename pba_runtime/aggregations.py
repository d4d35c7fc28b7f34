"""Aggregations as monoids over partials: ``lift``, ``combine``, ``lower``, ``identity``.

(Over 500 lines: the catalogue of built-ins, each in its scalar form and its
numpy kernel form side by side, because the two must agree bit for bit.)

``combine`` is always called as ``older (+) newer``; it must be associative, not
necessarily commutative or invertible. Capabilities (invertible, commutative,
selective) are declared by the aggregation and checked by the algorithms that
need them.

Each built-in has two forms that must agree:

* the **scalar form** (``lift``/``combine``/``lower`` on Python floats or tuples),
  used by the per-tuple main loop and the reference ``recal``;
* a **kernel** (:class:`Kernel`): the same monoid over numpy arrays of partials
  (``(..., n)`` for scalar partials, ``(..., n, k)`` for vector partials), used to
  build slice aggregations (``reduceat``), csa and lcs (``accumulate``) and to
  merge window parts in bulk. Kernel loops run in C and release the GIL, which
  is what lets a worker thread build lcs beside the main loop.

Examples
--------
>>> agg = get_aggregation("mean")
>>> p = agg.combine(agg.lift(1.0), agg.lift(3.0))
>>> agg.lower(p)
2.0
>>> import numpy as np
>>> k = get_aggregation("max").kernel
>>> k.accumulate(np.array([1.0, 3.0, 2.0]), axis=0, reverse=True).tolist()
[3.0, 3.0, 2.0]
"""

from __future__ import annotations

import functools
import hashlib
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .missing import MISSING_POLICY, refuse_missing

__all__ = [
    "Aggregation",
    "Kernel",
    "UfuncKernel",
    "BUILTIN_AGGREGATIONS",
    "get_aggregation",
    "moment_sketch",
    "as_float_array",
    "quiet_non_finite",
]

_INF = math.inf
_NAN = math.nan


# --------------------------------------------------------------------------- helpers
def as_float_array(values: Any, *, name: str = "values", agg_name: str = "") -> np.ndarray:
    """Validate numeric input and return it as a 1-D float64 array (no copy when possible).

    A missing value (pandas' ``<NA>``, a masked entry, an Arrow or polars null) raises a ``ValueError``
    naming ``name`` (:func:`pba_runtime.missing.refuse_missing`); NaN is a value."""
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
    built on the caller's thread by the per-tuple path: an ``errstate`` costs ~0.9 us, and wrapping that
    build took SBA's per-tuple ``insert`` from 1,765 to 2,042 ns at ``W[8,1]`` (1.16x) and 744 -> 799 at
    ``W[64,1]`` (medians of 7).
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
    """``np.flip(a, axis)`` for a non-negative ``axis``, as a basic slice (a tenth of the call overhead):
    the batch merge flips a row per call."""
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
# own SIMD and scalar maximum already disagree on) and accumulate 5-14% faster: no NaN test
# per element (measured with numpy 2.4: bench/bench_core.py)
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

    def __init__(self, groups, identity, lift: Callable, lower: Callable, *, positional: bool = False):
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


def _two_sum_fast(ref, mu):
    """``(hi, lo)`` with ``hi = ref + mu`` rounded and ``lo`` its rounding error (Fast2Sum, as ``_chan``)."""
    hi = ref + mu
    with np.errstate(invalid="ignore"):
        return hi, mu - (hi - ref)


class StdKernel(Kernel):
    """Partials ``(n, mean, M2, lo)`` merged with Chan et al.'s pairwise update (``_chan``: the mean is
    ``mean + lo``, so the std is exact to rounding however large the mean).

    Prefix sums are taken over power sums shifted by the first slice of each
    prefix (the last, for suffixes), so they stay accurate without a per-element
    Python loop.
    """

    shape = (4,)
    identity = np.zeros(4)
    combine_in_place = True  # n, the deviation and the weight are taken before any field of out is written

    def lift(self, values, positions):
        out = np.zeros((len(values), 4))
        out[:, 0] = 1.0
        out[:, 1] = values
        return out

    def reduce_segments(self, parts, starts):
        # corrected two-pass: deviations from a member of the segment give its mean to rounding, deviations
        # from that mean its M2 (the residual r, a rounding, corrects both)
        parts, starts = _from_first(parts, starts)
        n_el = len(parts)
        lengths = np.diff(np.append(starts, n_el))
        cnt, mean, m2, lo = parts[:, 0], parts[:, 1], parts[:, 2], parts[:, 3]
        n = np.add.reduceat(cnt, starts)
        ref = mean[starts]
        with np.errstate(invalid="ignore", divide="ignore"):  # inf - inf in a window holding infinities: NaN
            dev = (mean - np.repeat(ref, lengths)) + lo
            mu = np.divide(np.add.reduceat(cnt * dev, starts), n, out=np.zeros_like(n), where=n > 0)
            dev -= np.repeat(mu, lengths)
            r = np.add.reduceat(cnt * dev, starts)
            ss = np.add.reduceat(m2, starts) + np.add.reduceat(cnt * dev * dev, starts)
            rn = np.divide(r, n, out=np.zeros_like(n), where=n > 0)
            ss = np.maximum(ss - r * rn, 0.0, where=~np.isnan(ss), out=ss)
            hi, low = _two_sum_fast(ref, mu + rn)
        return np.stack([n, hi, ss, low], axis=-1)

    def combine(self, older, newer, out=None):
        na, ma, Ma, la = older[..., 0], older[..., 1], older[..., 2], older[..., 3]
        nb, mb, Mb, lb = newer[..., 0], newer[..., 1], newer[..., 2], newer[..., 3]
        n = na + nb
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.divide(nb, n, out=np.zeros_like(n), where=n > 0)
            d = (mb - ma) + (lb - la)
            u = la + d * f
            m = ma + u
            M = (Ma + Mb) + d * d * na * f
            lo = u - (m - ma)
        a0, b0 = na == 0, nb == 0  # an empty side: the other unchanged (as _chan)
        if a0.any() or b0.any():
            m, M, lo = (
                np.where(a0, mb, np.where(b0, ma, m)), np.where(a0, Mb, np.where(b0, Ma, M)),
                np.where(a0, lb, np.where(b0, la, lo)))
        if out is None:
            out = np.empty(n.shape + (4,))
        out[..., 1] = m
        out[..., 2] = M
        out[..., 3] = lo
        out[..., 0] = n
        return out

    def accumulate(self, parts, axis, reverse=False, out=None, nan_free=False):
        if out is None:
            out = np.empty_like(parts)
        if parts.shape[axis] == 0:
            return out
        cnt, mean, m2, lo = parts[..., 0], parts[..., 1], parts[..., 2], parts[..., 3]
        # Shift by a slice that lies inside every prefix (suffix, when reverse) the scan
        # produces: the first (last) non-empty slice. Cancellation in Q - S*mu is then
        # bounded by the prefix's own spread, not by far-away values of the same chunk.
        filled = cnt > 0
        if reverse:
            at = cnt.shape[axis] - 1 - np.argmax(np.flip(filled, axis=axis), axis=axis)
        else:
            at = np.argmax(filled, axis=axis)
        ref = np.take_along_axis(mean, np.expand_dims(at, axis), axis=axis)
        with np.errstate(invalid="ignore"):
            dev = (mean - ref) + lo
        s = cnt * dev
        q = m2 + s * dev
        if reverse:
            cnt, s, q = _flip(cnt, axis), _flip(s, axis), _flip(q, axis)
        N = np.cumsum(cnt, axis=axis)
        S = np.cumsum(s, axis=axis)
        Q = np.cumsum(q, axis=axis)
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = N > 0
            mu = np.divide(S, N, out=np.zeros_like(S), where=ok)
            M2 = np.maximum(Q - S * mu, 0.0)
            M2[~ok] = 0.0
            hi, low = _two_sum_fast(ref, mu)
            hi[~ok] = 0.0
            low[~ok] = 0.0
        if reverse:
            N, hi, M2, low = _flip(N, axis), _flip(hi, axis), _flip(M2, axis), _flip(low, axis)
        out[..., 0] = N
        out[..., 1] = hi
        out[..., 2] = M2
        out[..., 3] = low
        return out

    def lower(self, parts):
        n, mu, M2 = parts[..., 0], parts[..., 1], parts[..., 2]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((n > 1) & np.isfinite(mu), np.sqrt(M2 / (n - 1)), np.nan)  # as _std_lower


class ArgmaxKernel(Kernel):
    """Partials ``(value, position)``; the identity has position NaN.

    The largest value wins, NaN counts as largest (as ``np.argmax``) and ties go
    to the oldest element. Positions grow along the stream, so "oldest" is
    "leftmost" along the slice axis.
    """

    shape = (2,)
    identity = np.array([-np.inf, np.nan])
    combine_in_place = True  # the result is selected in full before it is written

    def lift(self, values, positions):
        return np.stack([values, positions.astype(np.float64)], axis=-1)

    def combine(self, older, newer, out=None):
        av, ap = older[..., 0], older[..., 1]
        bv, bp = newer[..., 0], newer[..., 1]
        take_b = np.isnan(ap) | (~np.isnan(bp) & ((bv > av) | (np.isnan(bv) & ~np.isnan(av))))
        res = np.where(take_b[..., None], newer, older)
        if out is not None:
            out[...] = res
            return out
        return res

    def reduce_segments(self, parts, starts):
        parts, starts = _from_first(parts, starts)
        n_el = len(parts)
        v, p = parts[:, 0], parts[:, 1]
        valid = ~np.isnan(p)
        key = np.where(valid, v, -np.inf)
        seg_max = np.maximum.reduceat(key, starts)
        lengths = np.diff(np.append(starts, n_el))
        rep = np.repeat(seg_max, lengths)
        hit = valid & ((key == rep) | (np.isnan(key) & np.isnan(rep)))
        first = np.minimum.reduceat(np.where(hit, np.arange(n_el), n_el), starts)
        out = self.identity_array(len(starts))
        found = first < n_el
        out[found] = parts[first[found]]
        return out

    def accumulate(self, parts, axis, reverse=False, out=None, nan_free=False):
        v, p = parts[..., 0], parts[..., 1]
        if reverse:
            v, p = _flip(v, axis), _flip(p, axis)
        valid = ~np.isnan(p)
        key = np.where(valid, v, -np.inf)
        run = np.maximum.accumulate(key, axis=axis)  # NaN-propagating running max
        prev = np.roll(run, 1, axis=axis)
        seen = np.cumsum(valid, axis=axis)
        prev_seen = seen - valid
        prev_nan = np.isnan(prev)
        if reverse:
            # scanning from the newest end: ties move the choice to the older (new) element
            beats = np.isnan(key) | (~prev_nan & (key >= prev))
        else:
            beats = (np.isnan(key) & ~prev_nan) | (~prev_nan & (key > prev))
        record = valid & ((prev_seen == 0) | beats)
        idx_shape = [1] * v.ndim
        idx_shape[axis] = v.shape[axis]
        idx = np.arange(v.shape[axis]).reshape(idx_shape)
        chosen = np.maximum.accumulate(np.where(record, idx, -1), axis=axis)
        has = chosen >= 0
        safe = np.where(has, chosen, 0)
        cv = np.take_along_axis(v, safe, axis=axis)
        cp = np.take_along_axis(p, safe, axis=axis)
        cv = np.where(has, cv, -np.inf)
        cp = np.where(has, cp, np.nan)
        if reverse:
            cv, cp = _flip(cv, axis), _flip(cp, axis)
        if out is None:
            out = np.empty_like(parts)
        out[..., 0] = cv
        out[..., 1] = cp
        return out

    def lower(self, parts):
        return parts[..., 1].astype(np.int64)


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
                                   lower=_elementwise_lower(self.lower), positional=self.positional)
                object.__setattr__(self, "kernel", kern)
        if self.preaggregate not in _PREAGGREGATES:
            raise ValueError(f"Aggregation preaggregate must be one of {sorted(p for p in _PREAGGREGATES if p)} "
                             f"or None, got {self.preaggregate!r}")
        if self.kernel is not None and not isinstance(self.kernel, Kernel):
            raise TypeError(f"Aggregation kernel must be a pba_runtime.Kernel, got {type(self.kernel).__name__}")

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
        return "custom:" + hashlib.sha256(repr(parts).encode()).hexdigest()

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


# --------------------------------------------------------------------------- built-ins
def _max2(a, b):
    return a if (a >= b or a != a) else b


def _min2(a, b):
    return a if (a <= b or a != a) else b


def _pair_add(a, b):
    return (a[0] + b[0], a[1] + b[1])


def _pair_sub(t, a):
    return (t[0] - a[0], t[1] - a[1])


def _chan(a, b):
    """Chan et al.'s pairwise merge of ``std`` partials ``(n, mean, M2, lo)``.

    The mean is carried as the unevaluated sum ``mean + lo`` (``lo`` the rounding error of ``mean``,
    kept by a Fast2Sum): over ``1e12 + 0.1, 1e12 + 0.7, ...`` a rounded mean alone is off by up to half
    an ulp of ``1e12`` (6e-5), which the next merge's ``d * d`` turns into a relative error of ~1e-4 in
    ``M2``. With ``lo`` the deviation ``d`` of two means is exact to rounding relative to ``d`` itself,
    and ``M2`` is a sum of non-negative terms: the std is exact to a few ulps however large the mean.
    (Fast2Sum needs ``|mean| >= |u|`` to be exact; when ``|u|`` is larger its error is an ulp of ``u``,
    below the rounding ``d * f`` already has.) An empty side gives the other unchanged: its ``lo`` would
    be lost in ``d``, and an infinite mean would meet ``0 * inf``.
    """
    na, ma, Ma, la = a
    nb, mb, Mb, lb = b
    if na == 0.0:
        return b
    if nb == 0.0:
        return a
    n = na + nb
    f = nb / n
    d = (mb - ma) + (lb - la)
    u = la + d * f
    m = ma + u
    return (n, m, (Ma + Mb) + d * d * na * f, u - (m - ma))


def _chan_inverse(t, a):
    """``_chan``'s inverse: the partial ``r`` with ``_chan(a, r) == t`` (to rounding)."""
    nt, mt, Mt, lt = t
    na, ma, Ma, la = a
    n = nt - na
    if n <= 0.0:
        return (0.0, 0.0, 0.0, 0.0)
    D = (mt - ma) + (lt - la)  # mean(t) - mean(a); mean(r) - mean(a) is D * nt / n
    u = lt + D * (na / n)
    m = mt + u
    d = D * nt / n
    return (n, m, max(Mt - Ma - d * d * na * n / nt, 0.0), u - (m - mt))


def _std_lower(p):
    # a window holding NaN or +-inf has a non-finite mean (Chan's update propagates it), and numpy's
    # np.std(ddof=1) of such a window is NaN: x - mean is NaN for some x
    n = p[0]
    if n > 1.0 and math.isfinite(p[1]):
        return math.sqrt(p[2] / (n - 1.0))
    return _NAN


def _argmax2(a, b):
    if b[1] != b[1]:
        return a
    if a[1] != a[1]:
        return b
    av = a[0]
    bv = b[0]
    if bv > av or (bv != bv and av == av):
        return b
    return a


def _collect_lift(v):
    return (v,)


def _make_builtins() -> dict[str, Aggregation]:
    def fl(v):
        return np.asarray(v, dtype=np.float64)

    def nolower(a):
        return a

    aggs: dict[str, Aggregation] = {}

    def scalar(name, combine, identity, ufunc, *, inverse=None, selective=False):
        lift = lambda v, _n=name: _real(v, _n)  # noqa: E731
        aggs[name] = Aggregation(
            name=name, lift=lift, combine=combine, lower=float, identity=identity, inverse=inverse,
            commutative=True, selective=selective, result="float", float_passthrough=True, preaggregate=name,
            kernel=UfuncKernel(ufunc, identity, lift=fl, lower=nolower),
        )

    scalar("max", _max2, -_INF, np.maximum, selective=True)
    scalar("min", _min2, _INF, np.minimum, selective=True)
    scalar("sum", operator.add, 0.0, np.add, inverse=operator.sub)

    def count_lift(v):
        _real(v, "count")
        return 1.0

    aggs["count"] = Aggregation(
        name="count", lift=count_lift, combine=operator.add, lower=int, identity=0.0, inverse=operator.sub,
        commutative=True, result="int", preaggregate="count",
        kernel=UfuncKernel(np.add, 0.0, lift=lambda v: np.ones(len(v)), lower=lambda a: a.astype(np.int64)),
    )

    def mean_lift(v):
        return (_real(v, "mean"), 1.0)

    def mean_kl(v):
        return np.stack([v, np.ones(len(v))], axis=-1)

    def mean_lower(p):
        return p[0] / p[1]

    aggs["mean"] = Aggregation(
        name="mean", lift=mean_lift, combine=_pair_add, lower=mean_lower, identity=(0.0, 0.0), inverse=_pair_sub,
        commutative=True, result="float", preaggregate="mean",
        kernel=UfuncKernel([(np.add, 2)], (0.0, 0.0), lift=mean_kl, lower=lambda a: a[..., 0] / a[..., 1]),
    )

    def std_lift(v):
        return (1.0, _real(v, "std"), 0.0, 0.0)

    aggs["std"] = Aggregation(
        name="std", lift=std_lift, combine=_chan, lower=_std_lower, identity=(0.0, 0.0, 0.0, 0.0),
        inverse=_chan_inverse, commutative=True, result="float", kernel=StdKernel(),
    )

    def geo_lift(v):
        return (_log(_non_negative(_real(v, "geomean"), "geomean")), 1.0)

    def geo_kl(v):
        _non_negative_array(v, "geomean")
        with np.errstate(divide="ignore"):
            return np.stack([np.log(v), np.ones(len(v))], axis=-1)

    def geo_lower(p):
        return math.exp(p[0] / p[1])

    aggs["geomean"] = Aggregation(
        name="geomean", lift=geo_lift, combine=_pair_add, lower=geo_lower, identity=(0.0, 0.0), inverse=_pair_sub,
        commutative=True, result="float",
        kernel=UfuncKernel([(np.add, 2)], (0.0, 0.0), lift=geo_kl, lower=lambda a: np.exp(a[..., 0] / a[..., 1])),
    )

    def argmax_lift(v, pos):
        return (_real(v, "argmax"), float(pos))

    aggs["argmax"] = Aggregation(
        name="argmax", lift=argmax_lift, combine=_argmax2, lower=lambda p: int(p[1]), identity=(-_INF, _NAN),
        selective=True, positional=True, result="int", kernel=ArgmaxKernel(), preaggregate="argmax",
    )

    aggs["moment_sketch"] = moment_sketch(10)

    aggs["collect"] = Aggregation(
        name="collect", lift=_collect_lift, combine=operator.add, lower=list, identity=(), result="list",
    )
    return aggs


def moment_sketch(k: int = 10) -> Aggregation:
    """The moment sketch of Gan et al.: ``(min, max, count, sum x^1..x^k, sum ln(x)^1..ln(x)^k)``.

    Values must be ``>= 0`` (the ``ln`` terms; a negative value raises ``ValueError``, as for
    ``geomean``); a zero gives ``ln`` terms of ``-inf``, as numpy does.

    Examples
    --------
    >>> ms = moment_sketch(2)
    >>> ms.lower(ms.combine(ms.lift(1.0), ms.lift(2.0))).tolist()[:5]
    [1.0, 2.0, 2.0, 3.0, 5.0]
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    width = 3 + 2 * k
    name = "moment_sketch" if k == 10 else f"moment_sketch[{k}]"

    def lift(v):
        x = _non_negative(_real(v, name), name)
        out = [x, x, 1.0]
        p = 1.0
        for _ in range(k):
            p *= x
            out.append(p)
        lx = _log(x)
        p = 1.0
        for _ in range(k):
            p *= lx
            out.append(p)
        return tuple(out)

    def combine(a, b):
        lo = a[0] if (a[0] <= b[0] or a[0] != a[0]) else b[0]
        hi = a[1] if (a[1] >= b[1] or a[1] != a[1]) else b[1]
        return (lo, hi, *[x + y for x, y in zip(a[2:], b[2:])])

    def klift(v):
        _non_negative_array(v, name)
        out = np.empty((len(v), width))
        out[:, 0] = v
        out[:, 1] = v
        out[:, 2] = 1.0
        p = np.ones(len(v))
        for j in range(k):
            p = p * v
            out[:, 3 + j] = p
        with np.errstate(divide="ignore", invalid="ignore"):
            lx = np.log(v)
        p = np.ones(len(v))
        for j in range(k):
            p = p * lx
            out[:, 3 + k + j] = p
        return out

    identity = (_INF, -_INF) + (0.0,) * (width - 2)
    return Aggregation(
        name=name, lift=lift, combine=combine, lower=lambda p: np.asarray(p, dtype=np.float64),
        identity=identity, commutative=True, result="vector",
        kernel=UfuncKernel([(np.minimum, 1), (np.maximum, 1), (np.add, width - 2)], identity, lift=klift,
                           lower=lambda a: np.array(a, dtype=np.float64)),
    )


BUILTIN_AGGREGATIONS: dict[str, Aggregation] = _make_builtins()


def get_aggregation(agg: str | Aggregation) -> Aggregation:
    """Return the built-in aggregation named ``agg``, or ``agg`` itself if it is an :class:`Aggregation`.

    Examples
    --------
    >>> get_aggregation("max").name
    'max'
    >>> get_aggregation("median")
    Traceback (most recent call last):
    ...
    ValueError: unknown aggregation 'median'; accepted: argmax, collect, count, geomean, max, mean, min, ...
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
