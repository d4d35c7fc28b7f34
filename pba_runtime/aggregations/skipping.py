"""Missing values skipped: ``skip_missing(agg, min_periods)``, the aggregation behind ``missing="skip"``.

Under ``missing="skip"`` a null (``None``, pandas' ``<NA>``, a masked entry, an Arrow or polars null:
the input layer reads them as NaN, :func:`pba_runtime.missing.fill_missing`) and a NaN are not values:
each window's result is the aggregation of its other values, and null where fewer than
``min_periods`` of them remain. The windows themselves do not change (a count window still covers
``range`` stream positions, missing ones included).

One transform serves every aggregation, by what it declares, never by its name:

* its partial already counts its values (``Aggregation.count_column``: ``count``, ``mean``,
  ``geomean``, ``std``, ``var``, ``moment_sketch``): the partial stays as it is, a missing value lifts
  to the identity, and the lower reads the count. Its compiled merge and its exact subtract-on-evict
  accumulators carry over unchanged;
* otherwise (``max``, ``min``, ``sum``, ``argmax``, ``argmin``, ``collect``, user aggregations) a count
  is added to the partial: ``(partial, count)``, flat (``(*partial, count)``) for a vector partial of a
  kernel. A ``ufunc`` kernel stays a ``ufunc`` kernel with one more ``np.add`` column (so the compiled
  columns merge runs it), any other kernel is wrapped (:class:`SkipKernel`, the numpy engine), and
  ``sum``'s exact accumulator becomes the ``(sum, count)`` pair's;
* a selective aggregation (``max``, ``min``, ``argmax``, ``argmin``) with ``min_periods <= 1`` keeps a
  flag (1: the partial holds a value) instead of the count, combined by ``np.maximum``: its combine
  still returns one of its operands, so ``slick_deque`` runs it. With ``min_periods >= 2`` it counts,
  and is not selective.

Results: float64 with NaN where null, for every aggregation whose result is a number (``count``,
``argmax`` and ``argmin`` included: a count, a position as float64); a row of NaN for a vector result
(``moment_sketch``); ``None`` for a list (``collect``: the window's non-missing values) or an object.
A window without any value (possible with ``min_periods=0``) gives the aggregation of no values where
it has one (``sum`` 0, ``count`` 0, ``collect`` ``[]``, ``moment_sketch`` its identity) and null where
it has none (a selective aggregation such as ``max``, or a lower that fails on the identity, as
``mean``'s 0 / 0).

Examples
--------
>>> from pba_runtime.aggregations import get_aggregation
>>> mx = skip_missing("max", min_periods=2)
>>> p = mx.combine(mx.combine(mx.lift(3.0), mx.lift(float("nan"))), mx.lift(None))
>>> mx.lower(p), mx.lower(mx.combine(p, mx.lift(5.0)))
(nan, 5.0)
>>> skip_missing("mean") is skip_missing("mean", 1)
True
"""

from __future__ import annotations

import math
import numbers
import weakref
from typing import Any

import numpy as np

from ..missing import is_missing
from .base import (
    Aggregation,
    CompiledForms,
    Kernel,
    UfuncKernel,
    get_aggregation,
)

__all__ = ["skip_missing", "check_min_periods", "SkipKernel"]

_NAN = math.nan
_cache: weakref.WeakKeyDictionary[Aggregation, dict[int, Aggregation]] = weakref.WeakKeyDictionary()


def check_min_periods(min_periods: Any) -> int:
    """``min_periods`` as an int ``>= 0``; a ``TypeError`` (not an integer) or ``ValueError`` (negative)
    naming ``min_periods`` otherwise.

    >>> check_min_periods(1.5)
    Traceback (most recent call last):
    ...
    TypeError: min_periods must be an integer >= 0, got float 1.5
    """
    if isinstance(min_periods, bool) or not isinstance(min_periods, numbers.Integral):
        raise TypeError(f"min_periods must be an integer >= 0, got {type(min_periods).__name__} {min_periods!r}")
    if min_periods < 0:
        raise ValueError(f"min_periods must be an integer >= 0, got {min_periods!r}")
    return int(min_periods)


def skip_missing(agg: str | Aggregation, min_periods: int = 1) -> Aggregation:
    """``agg`` with missing values (nulls and NaN) skipped, null where fewer than ``min_periods`` remain.

    The same object for the same ``agg`` and ``min_periods`` (so a caller that builds an operator per
    key shares the engines' caches). See the module doc for the partial, the forms and the results.

    Parameters
    ----------
    agg : str or Aggregation
        A built-in name or an aggregation (one that already skips: its inner one is wrapped again).
    min_periods : int
        Values (non-missing) a window needs for a result; ``>= 0``.

    Examples
    --------
    >>> s = skip_missing("count", min_periods=0)
    >>> s.lower(s.combine(s.lift(None), s.lift(float("nan")))), s.lower(s.lift(2.0))
    (0.0, 1.0)
    >>> skip_missing("collect").lower(skip_missing("collect").lift(float("nan"))) is None
    True
    """
    inner = get_aggregation(agg)
    min_periods = check_min_periods(min_periods)
    if isinstance(inner, SkipMissing):
        inner = inner.inner
    per = _cache.get(inner)
    if per is None:
        per = _cache.setdefault(inner, {})
    hit = per.get(min_periods)
    if hit is None:
        hit = per.setdefault(min_periods, _build(inner, min_periods))
    return hit


class SkipMissing(Aggregation):
    """An aggregation built by :func:`skip_missing`: ``inner`` with missing values skipped."""

    # set by _build (a frozen dataclass's attributes, written once)
    inner: Aggregation
    min_periods: int

    @property
    def missing(self) -> str:
        return "skip"

    @property
    def fingerprint(self) -> str:  # what it computes: the inner aggregation's and the policy
        return f"skip_missing[{self.min_periods}]:{self.inner.fingerprint}"

    def pack(self, results: list) -> Any:
        if self.result == "vector":
            width = self.inner.kernel.shape[0] if self.inner.kernel is not None else 0
            return np.asarray(results, dtype=np.float64).reshape(len(results), -1 if results else width)
        return super().pack(results)

    def __repr__(self) -> str:
        return f"skip_missing({self.inner!r}, min_periods={self.min_periods})"


def _null_of(result: str, width: int) -> Any:
    if result in ("float", "int"):
        return _NAN
    if result == "vector":
        return np.full(width, _NAN)
    return None


def _build(inner: Aggregation, mp: int) -> Aggregation:
    kernel = inner.kernel
    width = kernel.shape[0] if kernel is not None and kernel.shape else 0
    result = "float" if inner.result in ("float", "int") else inner.result
    null = _null_of(result, width)
    ilift, icombine, ilower, iinverse = inner.lift, inner.combine, inner.lower, inner.inverse
    positional = inner.positional
    cc = inner.count_column
    if cc is not None:
        form = "own"
    elif kernel is not None and kernel.shape:
        form = "flat"
    else:
        form = "pair"
    # a selective aggregation with min_periods <= 1 needs to know only whether a partial holds a value: a
    # flag, combined by max, keeps its combine selective (slick_deque runs it); else a count, by addition
    flag = inner.selective and mp <= 1 and form != "own"
    k = width

    # ---- the Python form: identity, the count, the inner partial
    if form == "own":
        identity = inner.identity
        scalar = not isinstance(identity, (tuple, list, np.ndarray))

        def count_of(p):
            return p if scalar else p[cc]

        def inner_of(p):
            return p
    elif form == "flat":
        identity = (*tuple(inner.identity), 0.0)

        def count_of(p):
            return p[k]

        def inner_of(p):
            return p[:k]
    else:
        identity = (inner.identity, 0.0)

        def count_of(p):
            return p[1]

        def inner_of(p):
            return p[0]

    def convert(r):
        if result == "float":
            return float(r)
        if result == "vector":
            return np.asarray(r, dtype=np.float64)
        return r

    empty = null
    if not inner.selective:  # a selective aggregation has no operand to give over no values
        try:
            with np.errstate(all="ignore"):
                empty = convert(ilower(inner_of(identity)))
        except Exception:  # mean's 0 / 0 and the like: no result over no values
            empty = null
    empty_is_null = empty is None or (isinstance(empty, float) and empty != empty) or (
        isinstance(empty, np.ndarray) and bool(np.isnan(empty).all()))

    if form == "own":
        if positional:
            def lift(v, pos):
                return identity if is_missing(v) else ilift(v, pos)
        else:
            def lift(v):
                return identity if is_missing(v) else ilift(v)
        combine = icombine
        inverse = iinverse
    else:
        if form == "flat":
            def wrap(p, c):
                return (*p, c)
        else:
            def wrap(p, c):
                return (p, c)
        if positional:
            def lift(v, pos):
                return identity if is_missing(v) else wrap(ilift(v, pos), 1.0)
        else:
            def lift(v):
                return identity if is_missing(v) else wrap(ilift(v), 1.0)

        if flag:
            def combine(a, b):
                if not count_of(b):
                    return a
                if not count_of(a):
                    return b
                ia = inner_of(a)
                return a if icombine(ia, inner_of(b)) is ia else b
        else:
            def combine(a, b):
                ca, cb = count_of(a), count_of(b)
                if not cb:
                    return a
                if not ca:
                    return b
                return wrap(icombine(inner_of(a), inner_of(b)), ca + cb)

        inverse = None
        if iinverse is not None and not flag:
            def inverse(t, a):
                ca = count_of(a)
                if not ca:
                    return t
                rest = count_of(t) - ca
                if not rest:
                    return identity
                return wrap(iinverse(inner_of(t), inner_of(a)), rest)

    def lower(p):
        c = count_of(p)
        if c < mp:
            return null
        if not c:
            return empty
        return convert(ilower(inner_of(p)))

    # ---- the vectorised form and what the compiled engines may run
    forms = inner.compiled
    new_kernel = None
    layout = None
    exact = None
    if kernel is not None:
        klift, klower = _kernel_forms(kernel, form, cc, mp, k, empty, empty_is_null)
        if type(kernel) is UfuncKernel:
            groups = [(uf, 1 if cols is None else cols.stop - cols.start) for uf, cols in kernel.ufuncs]
            if form == "own":
                groups = groups[0][0] if kernel.shape == () else groups
            else:
                groups = groups + [(np.maximum if flag else np.add, 1)]
            new_kernel = UfuncKernel(groups, identity, lift=klift, lower=klower, positional=True)
        else:
            new_kernel = SkipKernel(kernel, own=form == "own", identity=identity, lift=klift, lower=klower,
                                    counter=np.maximum if flag else np.add)
        if form == "own":
            layout = forms.layout  # the same partials: the same compiled merge (``std``)
            exact = forms.exact
        elif forms.exact == "sum":
            exact = "pair"  # (sum, count): the exact sum and the count, as mean's
    agg = SkipMissing(
        lift=lift, combine=combine, lower=lower, identity=identity, name=inner.name, inverse=inverse,
        commutative=inner.commutative, selective=inner.selective and (form == "own" or flag), positional=positional,
        kernel=new_kernel, result=result, count_column=cc if form == "own" else (k if form == "flat" else 1),
        compiled=CompiledForms(layout=layout, exact=exact, position_result=forms.position_result),
    )
    object.__setattr__(agg, "inner", inner)
    object.__setattr__(agg, "min_periods", mp)
    return agg


def _kernel_forms(kernel: Kernel, form: str, cc: int | None, mp: int, k: int, empty: Any, empty_is_null: bool):
    """The vectorised lift and lower of the skipping aggregation over ``kernel``'s partials."""
    scalar_inner = kernel.shape == ()
    own = form == "own"
    ident = kernel.identity
    width = (k + 1,) if form == "flat" else ((2,) if not own else kernel.shape)
    if own:
        full_identity = np.asarray(ident, dtype=np.float64).reshape(kernel.shape)
    elif scalar_inner:
        full_identity = np.array([float(ident), 0.0])
    else:
        full_identity = np.append(np.asarray(ident, dtype=np.float64), 0.0)

    def klift(values, positions=None):
        values = np.asarray(values, dtype=np.float64)
        miss = np.isnan(values)
        n = len(values)
        if miss.any():
            keep = ~miss
            rows = kernel.lift(values[keep], None if positions is None else np.asarray(positions)[keep])
        else:
            keep = None
            rows = kernel.lift(values, positions)
        rows = np.asarray(rows, dtype=np.float64)
        if own and keep is None:
            return rows
        out = np.empty((n,) + width)
        out[...] = full_identity
        sel = slice(None) if keep is None else keep
        if own:
            out[sel] = rows
        elif scalar_inner:
            out[sel, 0] = rows
            out[sel, 1] = 1.0
        else:
            out[sel, :k] = rows
            out[sel, k] = 1.0
        return out

    def klower(parts):
        parts = np.asarray(parts)
        if own:
            cnt = parts if scalar_inner else parts[..., cc]
            inner_parts = parts
        elif scalar_inner:
            cnt, inner_parts = parts[..., 1], parts[..., 0]
        else:
            cnt, inner_parts = parts[..., k], parts[..., :k]
        with np.errstate(all="ignore"):
            res = np.array(kernel.lower(np.ascontiguousarray(inner_parts)), dtype=np.float64)
        none = cnt == 0
        if empty_is_null:
            res[(cnt < mp) | none] = _NAN
        else:
            res[none] = empty
            res[cnt < mp] = _NAN
        return res

    return klift, klower


class SkipKernel(Kernel):
    """The kernel of a skipping aggregation over a kernel that is not a ``ufunc`` kernel.

    ``own``: the partials are the inner kernel's (their count is one of their columns), and every
    form but the lift and the lower is the inner kernel's. Otherwise a partial is the inner one's
    with a count after it (the last column): the inner kernel reduces, combines and accumulates its
    columns, ``counter`` the count (``np.add``; ``np.maximum`` for a flag, see :func:`skip_missing`).
    """

    def __init__(self, base: Kernel, *, own: bool, identity: Any, lift: Any, lower: Any, counter: Any = np.add):
        self.base = base
        self._own = own
        self._counter = counter
        self._scalar = base.shape == ()
        self._lift = lift
        self._lower = lower
        self.combine_in_place = base.combine_in_place if own else True  # both parts computed before written
        if own:
            self.shape = base.shape
        else:
            self.shape = (2,) if self._scalar else (base.shape[0] + 1,)
        self.identity = np.asarray(identity, dtype=np.float64).reshape(self.shape)

    def _inner(self, parts: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(parts[..., 0] if self._scalar else parts[..., :-1])

    def _join(self, inner: np.ndarray, count: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(np.shape(count) + self.shape)
        if self._scalar:
            out[..., 0] = inner
        else:
            out[..., :-1] = inner
        out[..., -1] = count
        return out

    def lift(self, values, positions):
        return self._lift(values, positions)

    def lower(self, parts):
        return self._lower(parts)

    def reduce_segments(self, parts, starts):
        if self._own:
            return self.base.reduce_segments(parts, starts)
        return self._join(self.base.reduce_segments(self._inner(parts), starts),
                          self._counter.reduceat(parts[..., -1], starts, axis=0))

    def combine(self, older, newer, out=None):
        if self._own:
            return self.base.combine(older, newer, out=out) if out is not None else self.base.combine(older, newer)
        inner = self.base.combine(self._inner(older), self._inner(newer))
        count = self._counter(older[..., -1], newer[..., -1])
        return self._join(inner, count, out)

    def accumulate(self, parts, axis, reverse=False, out=None, nan_free=False):
        if self._own:
            return self.base.accumulate(parts, axis, reverse=reverse, out=out)
        inner = self.base.accumulate(self._inner(parts), axis, reverse=reverse)
        cnt = parts[..., -1]
        acc = self._counter.accumulate
        count = np.flip(acc(np.flip(cnt, axis=axis), axis=axis), axis=axis) if reverse else acc(cnt, axis=axis)
        if out is None:
            out = np.empty_like(parts)
        return self._join(inner, count, out)
