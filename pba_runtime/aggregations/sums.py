"""Sums: ``sum``, ``count``, ``mean``, ``std``, ``var``, every form of each (Python, numpy, compiled declaration).

``sum`` keeps the running sum; ``mean`` the pair ``(sum, count)``; ``std`` and ``var`` (sample
deviation and variance, ddof=1, as pandas' rolling ones) share the exact partial ``(n, mean, M2, lo)``
merged by Chan et al.'s pairwise update with the mean's rounding error carried in ``lo``, so their
results are exact to rounding however large the mean; they differ in the lower only. All are
invertible (subtract-on-evict keeps exact accumulators for them: ``CompiledForms.exact``).

Examples
--------
>>> from pba_runtime.aggregations import get_aggregation
>>> var = get_aggregation("var")
>>> var.lower(var.combine(var.combine(var.lift(1.0), var.lift(2.0)), var.lift(4.0)))
2.333333333333333
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .base import (
    Aggregation,
    CompiledForms,
    Kernel,
    UfuncKernel,
    _flip,
    _from_first,
    _real,
    register_builtin,
    scalar_builtin,
)

_NAN = math.nan


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



class VarKernel(StdKernel):
    """:class:`StdKernel` lowered to the sample variance ``M2 / (n - 1)``."""

    def lower(self, parts):
        n, mu, M2 = parts[..., 0], parts[..., 1], parts[..., 2]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((n > 1) & np.isfinite(mu), M2 / (n - 1), np.nan)  # as _var_lower


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



def _var_lower(p):
    n = p[0]
    if n > 1.0 and math.isfinite(p[1]):
        return p[2] / (n - 1.0)
    return _NAN


def _count_lift(v):
    _real(v, "count")
    return 1.0


def _ones(v):
    return np.ones(len(v))


def _as_int(a):
    return a.astype(np.int64)


def _mean_lift(v):
    return (_real(v, "mean"), 1.0)


def _mean_kl(v):
    return np.stack([v, np.ones(len(v))], axis=-1)


def _mean_lower(p):
    return p[0] / p[1]


def _mean_klower(a):
    return a[..., 0] / a[..., 1]


def _std_lift(v):
    return (1.0, _real(v, "std"), 0.0, 0.0)


def _var_lift(v):
    return (1.0, _real(v, "var"), 0.0, 0.0)


register_builtin(scalar_builtin("sum", operator.add, 0.0, np.add, inverse=operator.sub, exact="sum"))
register_builtin(Aggregation(
    name="count", lift=_count_lift, combine=operator.add, lower=int, identity=0.0, inverse=operator.sub,
    commutative=True, result="int", preaggregate="count", count_column=0,
    kernel=UfuncKernel(np.add, 0.0, lift=_ones, lower=_as_int),
    compiled=CompiledForms(from_values="count_from_values", stepwise="count"),
))
register_builtin(Aggregation(
    name="mean", lift=_mean_lift, combine=_pair_add, lower=_mean_lower, identity=(0.0, 0.0), inverse=_pair_sub,
    commutative=True, result="float", preaggregate="mean", count_column=1,
    kernel=UfuncKernel([(np.add, 2)], (0.0, 0.0), lift=_mean_kl, lower=_mean_klower),
    compiled=CompiledForms(lift="lift_pair", lower="lower_ratio", from_values="mean_from_values", exact="pair",
                           stepwise="mean"),
))
register_builtin(Aggregation(
    name="std", lift=_std_lift, combine=_chan, lower=_std_lower, identity=(0.0, 0.0, 0.0, 0.0),
    inverse=_chan_inverse, commutative=True, result="float", kernel=StdKernel(), count_column=0,
    compiled=CompiledForms(layout="std", lift="lift_std", lower="lower_std", from_values="std_from_values",
                           value_column=1, exact="std", stepwise="std"),
))
register_builtin(Aggregation(
    name="var", lift=_var_lift, combine=_chan, lower=_var_lower, identity=(0.0, 0.0, 0.0, 0.0),
    inverse=_chan_inverse, commutative=True, result="float", kernel=VarKernel(), count_column=0,
    compiled=CompiledForms(layout="std", lift="lift_std", exact="std", stepwise="var"),
))
