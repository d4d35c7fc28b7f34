"""Extrema: ``max``, ``min``, ``argmax``, ``argmin``, every form of each (Python, numpy, compiled declaration).

``max`` and ``min`` keep the value itself as their partial (NaN propagates, as numpy's ``maximum``);
``argmax`` keeps ``(value, position)``: the largest value wins, NaN counts as largest (as
``np.argmax``) and ties go to the oldest. ``argmin`` is ``argmax`` over the negated values, so the
same rule gives the smallest value, the oldest on ties (``-x == -y`` exactly when ``x == y``), and
every engine that carries ``argmax`` carries it.

Examples
--------
>>> from pba_runtime.aggregations import get_aggregation
>>> am = get_aggregation("argmin")
>>> p = am.combine(am.combine(am.lift(3.0, 0), am.lift(1.0, 1)), am.lift(1.0, 2))
>>> am.lower(p)
1
"""

from __future__ import annotations

import math

import numpy as np

from .base import Aggregation, CompiledForms, Kernel, _flip, _from_first, _real, register_builtin, scalar_builtin

_INF = math.inf
_NAN = math.nan


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



class ArgminKernel(ArgmaxKernel):
    """:class:`ArgmaxKernel` over the negated values: the smallest value, the oldest on ties."""

    def lift(self, values, positions):
        return np.stack([-np.asarray(values, dtype=np.float64), positions.astype(np.float64)], axis=-1)


def _max2(a, b):
    return a if (a >= b or a != a) else b


def _min2(a, b):
    return a if (a <= b or a != a) else b


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



def _argmax_lift(v, pos):
    return (_real(v, "argmax"), float(pos))


def _argmin_lift(v, pos):
    return (-_real(v, "argmin"), float(pos))


def _position(p):
    return int(p[1])


register_builtin(scalar_builtin("max", _max2, -_INF, np.maximum, selective=True))
register_builtin(scalar_builtin("min", _min2, _INF, np.minimum, selective=True))
register_builtin(Aggregation(
    name="argmax", lift=_argmax_lift, combine=_argmax2, lower=_position, identity=(-_INF, _NAN),
    selective=True, positional=True, result="int", kernel=ArgmaxKernel(), preaggregate="argmax",
    compiled=CompiledForms(layout="argmax", lift="lift_argmax", from_values="argmax_from_values", stepwise="argmax",
                           position_result=True),
))
register_builtin(Aggregation(
    name="argmin", lift=_argmin_lift, combine=_argmax2, lower=_position, identity=(-_INF, _NAN),
    selective=True, positional=True, result="int", kernel=ArgminKernel(),
    compiled=CompiledForms(layout="argmax", stepwise="argmin", position_result=True),
))
