"""Sketches: the mergeable quantile sketch behind ``pr.quantile(q, relative_error=eps)``.

A DDSketch (Masson, Rim and Lee, VLDB 2019): a value ``x > 0`` falls in the bucket of key
``k = ceil(log(x) / log(gamma))``, ``gamma = (1 + eps) / (1 - eps)``, i.e. ``(gamma^(k-1), gamma^k]``, and is
answered as ``2 gamma^k / (gamma + 1)``, within relative error ``eps`` of every value of the bucket. Negative
values go to a second store by ``|x|``; zeros, ``-inf``, ``+inf`` and NaN are counted apart. Two sketches merge
by adding their buckets: a monoid, associative and commutative, so every algorithm carries it.

**The partial** is a float64 array of ``6 + 2 * max_buckets`` counts and keys (:func:`width`)::

    [nan, -inf, +inf, zeros, top key (+), top key (-), buckets (+) ..., buckets (-) ...]

Each store holds the ``max_buckets`` keys up to its top key (the largest key it has seen; ``-inf`` while
empty); bucket ``j`` is key ``top - max_buckets + 1 + j``. A key below that range is *collapsed* into the
lowest bucket (DDSketch's collapsing-lowest store): the result stays within ``eps`` for every quantile whose
value is at least ``gamma^-max_buckets`` times the largest magnitude of its sign (at ``eps=0.01`` and the
default 2048 buckets, 17 decades). Collapsing depends only on the largest key of the union, so any merge
order gives the same partial (counts are integers, exact in float64 up to 2**53).

**The result** is the sketch's value of the ``lower`` quantile (numpy's ``method="lower"``: the value of rank
``floor(q (n - 1))``), within ``eps`` of the exact one: ``|got - want| <= eps |want|``, for values of either
sign and zero, normal floats (a subnormal value, below 2.2e-308, has too few bits for the bound). A window
holding NaN is NaN (``skip_missing`` wraps it for ``missing="skip"``, as any aggregation).

Each form has its plain reference beside it (bottleneck's habit): :func:`lift_reference`,
:func:`combine_reference` and :func:`lower_reference` are numpy over one partial; the compiled forms
(:func:`combine_into`, :func:`lower_parts`) are what the aggregation runs, and the tests assert they agree.

Examples
--------
>>> import numpy as np
>>> agg = quantile_sketch(0.5, 0.01)
>>> p = agg.identity
>>> for x in [3.0, -1.0, 0.0, 7.5, 2.0]:
...     p = agg.combine(p, agg.lift(x))
>>> got = agg.lower(p)  # the exact one is 2.0
>>> round(got, 4), abs(got - 2.0) <= 0.01 * 2.0
(1.9937, True)
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from numba import njit

from .base import Aggregation, _real

__all__ = ["quantile_sketch", "width", "bucket_keys", "combine_into", "lower_parts", "lift_reference",
           "combine_reference", "lower_reference", "DEFAULT_MAX_BUCKETS"]

#: buckets per sign (DDSketch's and Datadog's default): 17 decades at ``eps=0.01``
DEFAULT_MAX_BUCKETS = 2048

# the partial's fields
NAN, NEG_INF, POS_INF, ZERO, POS_TOP, NEG_TOP, HEAD = 0, 1, 2, 3, 4, 5, 6
_JIT = {"nogil": True, "cache": True, "error_model": "numpy"}
_MAX = float(np.finfo(np.float64).max)


def width(max_buckets: int) -> int:
    """Floats in one partial of a sketch with ``max_buckets`` buckets per sign (8 bytes each).

    >>> width(2048), width(2048) * 8
    (4102, 32816)
    """
    return HEAD + 2 * max_buckets


def gamma_of(relative_error: float) -> float:
    """The bucket ratio of ``relative_error``, a hair inside it so a value's rounding at a bucket's edge
    (the ``log`` is correct to an ulp, not exact) still meets the bound."""
    e = relative_error * (1.0 - 1e-7)
    return (1.0 + e) / (1.0 - e)


# --------------------------------------------------------------------------- compiled forms
@njit(inline="always", **_JIT)
def _key(x, ln_gamma):
    """The bucket key of a positive finite ``x``: ``ceil(log(x) / ln_gamma)``."""
    return np.ceil(np.log(x) / ln_gamma)


@njit(**_JIT)
def bucket_keys(v, ln_gamma, kind, key):
    """Per value: ``kind`` (0 NaN, 1 -inf, 2 +inf, 3 zero, 4 positive, 5 negative) and, for the last two,
    the bucket ``key`` of ``|x|`` (int64)."""
    for i in range(len(v)):
        x = v[i]
        if x != x:
            kind[i] = 0
        elif x == 0.0:
            kind[i] = 3
        elif x > 0.0:
            if x == np.inf:
                kind[i] = 2
            else:
                kind[i] = 4
                key[i] = np.int64(_key(x, ln_gamma))
        elif x == -np.inf:
            kind[i] = 1
        else:
            kind[i] = 5
            key[i] = np.int64(_key(-x, ln_gamma))


@njit(**_JIT)
def _lift_into(x, ln_gamma, K, out):
    out[:] = 0.0
    out[POS_TOP] = -np.inf
    out[NEG_TOP] = -np.inf
    if x != x:
        out[NAN] = 1.0
    elif x == 0.0:
        out[ZERO] = 1.0
    elif x == np.inf:
        out[POS_INF] = 1.0
    elif x == -np.inf:
        out[NEG_INF] = 1.0
    elif x > 0.0:
        out[POS_TOP] = _key(x, ln_gamma)
        out[HEAD + K - 1] = 1.0
    else:
        out[NEG_TOP] = _key(-x, ln_gamma)
        out[HEAD + 2 * K - 1] = 1.0


@njit(inline="always", **_JIT)
def _rebase(src, out, base, ts, t, K):
    """``out``'s store at ``base`` := ``src``'s (top ``ts``) moved to top ``t >= ts``; ``out`` may be ``src``
    (every bucket moves down, read before it is written)."""
    if ts == -np.inf:
        for j in range(K):
            out[base + j] = 0.0
        return
    shift = np.int64(t - ts)
    if shift >= K:
        acc = 0.0
        for j in range(K):
            acc += src[base + j]
            out[base + j] = 0.0
        out[base] = acc
        return
    acc = 0.0
    for j in range(shift + 1):
        acc += src[base + j]
    out[base] = acc
    for j in range(shift + 1, K):
        out[base + j - shift] = src[base + j]
    for j in range(max(K - shift, 1), K):
        out[base + j] = 0.0


@njit(inline="always", **_JIT)
def _add(src, out, base, ts, t, K):
    """Add ``src``'s store (top ``ts``) into ``out``'s (top ``t >= ts``), collapsing what falls below."""
    if ts == -np.inf:
        return
    shift = np.int64(t - ts)
    if shift >= K:
        acc = 0.0
        for j in range(K):
            acc += src[base + j]
        out[base] += acc
        return
    acc = 0.0
    for j in range(shift + 1):
        acc += src[base + j]
    out[base] += acc
    for j in range(shift + 1, K):
        out[base + j - shift] += src[base + j]


@njit(**_JIT)
def combine_into(a, b, out, K):
    """``out := a (+) b`` for partials of ``K`` buckets per sign; ``out`` may be ``a``, not ``b`` (unless
    ``a`` is ``b``)."""
    for f in range(POS_TOP):
        out[f] = a[f] + b[f]
    for base, tf in ((HEAD, POS_TOP), (HEAD + K, NEG_TOP)):
        ta, tb = a[tf], b[tf]
        t = max(ta, tb)
        _rebase(a, out, base, ta, t, K)
        _add(b, out, base, tb, t, K)
        out[tf] = t


@njit(inline="always", **_JIT)
def _rep(key, ln_gamma, scale):
    """A bucket's value, ``2 gamma^key / (gamma + 1)``: within ``eps`` of all it holds (no overflow)."""
    y = np.exp(key * ln_gamma + scale)
    return _MAX if y > _MAX else y


@njit(inline="always", **_JIT)
def _lower_one(p, q, ln_gamma, scale, K):
    if p[NAN] > 0.0:
        return np.nan
    n = p[NEG_INF] + p[POS_INF] + p[ZERO]
    for j in range(2 * K):
        n += p[HEAD + j]
    if n <= 0.0:
        return np.nan
    r = min(max(np.floor((n - 1.0) * q), 0.0), n - 1.0)  # numpy's "lower": rank floor(q (n - 1))
    c = p[NEG_INF]
    if r < c:
        return -np.inf
    tn = p[NEG_TOP]
    for j in range(K - 1, -1, -1):  # negatives, largest magnitude first
        c += p[HEAD + K + j]
        if r < c:
            return -_rep(tn - K + 1 + j, ln_gamma, scale)
    c += p[ZERO]
    if r < c:
        return 0.0
    tp = p[POS_TOP]
    for j in range(K):
        c += p[HEAD + j]
        if r < c:
            return _rep(tp - K + 1 + j, ln_gamma, scale)
    return np.inf


@njit(**_JIT)
def lower_parts(P, q, ln_gamma, K, out):
    """``out[i]`` := the ``q`` result of partial row ``P[i]``."""
    scale = np.log(2.0 / (np.exp(ln_gamma) + 1.0))
    for i in range(P.shape[0]):
        out[i] = _lower_one(P[i], q, ln_gamma, scale, K)


# --------------------------------------------------------------------------- plain references
def _key_reference(x: float, ln_gamma: float) -> float:
    return float(math.ceil(math.log(x) / ln_gamma))


def lift_reference(x: float, ln_gamma: float, K: int) -> np.ndarray:
    """One value's partial, in plain Python."""
    p = np.zeros(width(K))
    p[POS_TOP] = p[NEG_TOP] = -math.inf
    if math.isnan(x):
        p[NAN] = 1
    elif x == 0.0:
        p[ZERO] = 1
    elif math.isinf(x):
        p[POS_INF if x > 0 else NEG_INF] = 1
    elif x > 0:
        p[POS_TOP], p[HEAD + K - 1] = _key_reference(x, ln_gamma), 1
    else:
        p[NEG_TOP], p[HEAD + 2 * K - 1] = _key_reference(-x, ln_gamma), 1
    return p


def _store_reference(p: np.ndarray, base: int, top: float, K: int) -> dict[int, float]:
    return {} if top == -math.inf else {int(top) - K + 1 + j: p[base + j] for j in range(K) if p[base + j]}


def combine_reference(a: np.ndarray, b: np.ndarray, K: int) -> np.ndarray:
    """``a (+) b`` in plain Python: union the buckets by key, then collapse below the top's range."""
    out = np.zeros(width(K))
    out[:POS_TOP] = a[:POS_TOP] + b[:POS_TOP]
    for base, tf in ((HEAD, POS_TOP), (HEAD + K, NEG_TOP)):
        t = max(a[tf], b[tf])
        out[tf] = t
        if t == -math.inf:
            continue
        merged: dict[int, float] = {}
        for p in (a, b):
            for k, c in _store_reference(p, base, p[tf], K).items():
                k = max(k, int(t) - K + 1)
                merged[k] = merged.get(k, 0.0) + c
        for k, c in merged.items():
            out[base + k - (int(t) - K + 1)] = c
    return out


def lower_reference(p: np.ndarray, q: float, ln_gamma: float, K: int) -> float:
    """The ``q`` result of one partial, in plain Python: its values, sorted, at the lower rank."""
    if p[NAN]:
        return math.nan
    scale = math.log(2.0 / (math.exp(ln_gamma) + 1.0))  # a bucket's value is 2 gamma^k / (gamma + 1)
    items = [(-math.inf, p[NEG_INF]), (0.0, p[ZERO]), (math.inf, p[POS_INF])]
    for base, tf, sign in ((HEAD, POS_TOP, 1.0), (HEAD + K, NEG_TOP, -1.0)):
        for k, c in _store_reference(p, base, p[tf], K).items():
            items.append((sign * min(math.exp(k * ln_gamma + scale), _MAX), c))
    items = sorted((v, c) for v, c in items if c)
    n = sum(c for _, c in items)
    if not n:
        return math.nan
    r = min(max(math.floor((n - 1) * q), 0), n - 1)
    for v, c in items:
        if r < c:
            return v
        r -= c
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- the aggregation
def check_sketch(q, relative_error, max_buckets) -> tuple[float, float, int]:
    """``(q, relative_error, max_buckets)`` checked, or a ``ValueError`` naming the parameter."""
    if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0.0 <= float(q) <= 1.0:
        raise ValueError(f"q must be a number in [0, 1], got {q!r}")
    if (isinstance(relative_error, bool) or not isinstance(relative_error, numbers.Real)
            or not 0.0 < float(relative_error) < 1.0):
        raise ValueError(f"relative_error must be a number in (0, 1), got {relative_error!r}")
    if isinstance(max_buckets, bool) or not isinstance(max_buckets, numbers.Integral) or max_buckets < 2:
        raise ValueError(f"max_buckets must be an integer >= 2, got {max_buckets!r}")
    return float(q), float(relative_error), int(max_buckets)


def quantile_sketch(q: float, relative_error: float, *, max_buckets: int = DEFAULT_MAX_BUCKETS,
                    name: str | None = None) -> Aggregation:
    """The monoid of a DDSketch answering the ``q`` quantile within ``relative_error``.

    Parameters
    ----------
    q : float
        In ``[0, 1]``.
    relative_error : float
        In ``(0, 1)``: the result is within it of the exact ``lower`` quantile.
    max_buckets : int
        Buckets per sign; one partial holds ``6 + 2 * max_buckets`` floats (:func:`width`).
    name : str, optional
        Its output name (default ``sketch_p<q>``).

    Examples
    --------
    >>> agg = quantile_sketch(0.99, 0.01)
    >>> agg.name, len(agg.identity)
    ('sketch_p99', 4102)
    """
    q, eps, K = check_sketch(q, relative_error, max_buckets)
    ln_gamma = math.log(gamma_of(eps))
    W = width(K)
    identity = np.zeros(W)
    identity[POS_TOP] = identity[NEG_TOP] = -math.inf
    identity.flags.writeable = False
    label = name or "sketch_p" + f"{q * 100:.10g}".replace(".", "_")

    def lift(v):
        out = np.empty(W)
        _lift_into(_real(v, label), ln_gamma, K, out)
        return out

    def combine(a, b):
        out = np.empty(W)
        combine_into(a, b, out, K)
        return out

    def lower(p):
        out = np.empty(1)
        lower_parts(np.asarray(p, dtype=np.float64).reshape(1, W), q, ln_gamma, K, out)
        return float(out[0])

    return Aggregation(name=label, lift=lift, combine=combine, lower=lower, identity=identity, commutative=True,
                       result="float")
