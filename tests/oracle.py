"""A naive oracle written straight from shared/spec/semantics.md, with numpy.

It shares no code with pba_runtime: windows are enumerated from their
definition and each one is aggregated from scratch.
"""

from __future__ import annotations

import math

import numpy as np

EXACT = {"max", "min", "count", "argmax", "argmin", "collect"}
EPS = 2.0 ** -52  # float64's machine epsilon (twice the unit roundoff)
RTOL = 1e-9  # the spec's tolerance, relative to the result (Aggregations)


class Want(float):
    """An expected float result with ``floor``: the absolute error rounding alone may leave (see
    :func:`assert_results_equal`); a plain float has none."""

    floor: float

    partial: object  # a user aggregation's exact partial, before its lower (None otherwise)

    def __new__(cls, value, floor=0.0, partial=None):
        w = super().__new__(cls, value)
        w.floor = float(floor)
        w.partial = partial
        return w


class WantVec(np.ndarray):
    """An expected vector result (``moment_sketch``) with ``floor``, one per component."""

    floor: np.ndarray


def _want_vec(value, floor) -> WantVec:
    w = np.asarray(value, dtype=float).view(WantVec)
    w.floor = np.asarray(floor, dtype=float)
    return w


def _sum_floor(terms) -> float:
    """The rounding any summation order may leave in a sum of these float terms: ``n eps sum |t_i|``
    (the bound of recursive, pairwise and tree sums alike is ``(n - 1) u sum |t_i|``, ``u = eps / 2``)."""
    a = np.abs(np.asarray(terms, dtype=float))
    return len(a) * EPS * math.fsum(a.tolist()) if len(a) and np.isfinite(a).all() else 0.0


def exact_var(vals) -> float:
    """The sample variance (ddof=1) of the float64 ``vals``, exact then rounded once.

    Each finite float is an integer times a power of two, so ``n sum x**2 - (sum x)**2`` is formed in
    Python integers exactly; NaN when a value is not finite or ``n < 2``, as ``np.var(ddof=1)``.
    """
    x = [float(v) for v in vals]
    n = len(x)
    if n < 2 or not all(math.isfinite(v) for v in x):
        return math.nan
    ratios = [v.as_integer_ratio() for v in x]
    k = max(d.bit_length() - 1 for _, d in ratios)
    ints = [a << (k - (d.bit_length() - 1)) for a, d in ratios]
    S = sum(ints)
    Q = sum(i * i for i in ints)
    return (n * Q - S * S) / (n * (n - 1) << (2 * k))  # int / int: correctly rounded


def exact_std(vals) -> float:
    """The sample std (ddof=1) of the float64 ``vals``: the root of :func:`exact_var` (rounded twice: the
    variance, its root); NaN when a value is not finite or ``n < 2``, as ``np.std(ddof=1)``."""
    return math.sqrt(exact_var(vals))


def _std_with_floor(vals) -> tuple[float, float]:
    """The exact std and the floor of float64's range alone: the values are exact, so is their std, but
    squared deviations below 2**-1022 are subnormal and keep fewer digits (``n eps_min`` of the sum of
    squares, through the root); nothing for any std above ~1e-150."""
    std = exact_std(vals)
    n = len(vals)
    if not math.isfinite(std):
        return std, 0.0
    d = 2 * n * math.ulp(0.0) / (n - 1)  # the sum of squares' absolute rounding where it is subnormal
    return std, d / (math.sqrt(std * std + d) + std)  # sqrt(std**2 + d) - std, without the cancellation


def _through_lower(lower, partial, err) -> float:
    """How far ``lower`` moves when the float ``partial`` is off by ``err`` either way (0 when undefined)."""
    w = lower(partial)
    out = 0.0
    for p in (partial + err, partial - err):
        try:
            out = max(out, abs(lower(p) - w))
        except (ValueError, ArithmeticError):  # sqrt of a partial pushed below zero: the other side decides
            out = max(out, abs(lower(partial + err) - w))
    return out if math.isfinite(out) else err


def fold(agg, vals, pos):
    """A user aggregation over one window, straight from its definition: lower(lift(v1) (+) ... (+) lift(vm)).

    A float result of float partials comes as a :class:`Want` whose floor is the rounding another order of
    the combines may give, as for a sum (``n eps sum |lift(v_i)|``).
    """
    acc = agg.identity
    parts = []
    for v, p in zip(vals.tolist(), pos.tolist()):
        part = agg.lift(v, p) if agg.positional else agg.lift(v)
        parts.append(part)
        acc = agg.combine(acc, part)
    res = agg.lower(acc)
    if isinstance(res, float) and all(isinstance(p, float) for p in parts):
        return Want(res, _sum_floor(parts), partial=acc)
    return res


def _agg(name, vals: np.ndarray, pos: np.ndarray):
    if not isinstance(name, str):  # a user aggregation (pba_runtime.Aggregation)
        return fold(name, vals, pos)
    if name == "max":
        return float(np.max(vals))
    if name == "min":
        return float(np.min(vals))
    if name == "sum":
        if not np.isfinite(vals).all():  # numpy's NaN / inf
            with np.errstate(invalid="ignore"):
                return float(np.sum(vals))
        return Want(math.fsum(vals.tolist()), _sum_floor(vals))
    if name == "count":
        return len(vals)
    if name == "mean":
        if not np.isfinite(vals).all():
            with np.errstate(invalid="ignore"):
                return float(np.mean(vals))
        return Want(math.fsum(vals.tolist()) / len(vals), _sum_floor(vals) / len(vals))
    if name == "std":
        return Want(*_std_with_floor(vals))
    if name == "var":
        var = exact_var(vals)
        n = len(vals)  # the floor of float64's range: squared deviations below 2**-1022 are subnormal
        return Want(var, 2 * n * math.ulp(0.0) / (n - 1) if math.isfinite(var) else 0.0)
    if name == "geomean":
        with np.errstate(divide="ignore", invalid="ignore"):
            lx = np.log(vals)
        if not np.isfinite(lx).all():
            with np.errstate(divide="ignore", invalid="ignore"):
                return float(np.exp(np.mean(lx)))
        g = math.exp(math.fsum(lx.tolist()) / len(lx))
        # an absolute error e in the mean of the logs is a relative one in the result
        return Want(g, g * _sum_floor(lx) / len(lx))
    if name == "argmax":
        return int(pos[int(np.argmax(vals))])
    if name == "argmin":  # the smallest, the oldest on ties; NaN counts, as np.argmin's first NaN
        return int(pos[int(np.argmin(vals))])
    if name == "collect":
        return list(vals.tolist())
    if name == "moment_sketch":
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lx = np.log(vals)
            cols = [vals ** j for j in range(1, 11)] + [lx ** j for j in range(1, 11)]
            # each power sum exactly (math.fsum) of the powers; its floor: the sum's rounding and the j - 1
            # roundings of each power (the lift multiplies j times), each at most eps |term|
            sums = [math.fsum(c.tolist()) if np.isfinite(c).all() else float(np.sum(c)) for c in cols]
            floors = [_sum_floor(c) + (j % 10 + 1) * EPS * float(np.sum(np.abs(c))) if np.isfinite(c).all() else 0.0
                      for j, c in enumerate(cols)]
            return _want_vec([np.min(vals), np.max(vals), len(vals)] + sums, [0.0, 0.0, 0.0] + floors)
    raise KeyError(name)


def count_windows(values, r: int, s: int, agg: str):
    x = np.asarray(values, dtype=float)
    ends, res = [], []
    k = 0
    while k * s + r <= len(x):
        lo = k * s
        ends.append(lo + r)
        res.append(_agg(agg, x[lo : lo + r], np.arange(lo, lo + r)))
        k += 1
    return ends, res


def time_windows(values, timestamps, r: int, s: int, agg: str, offset: int = 0):
    x = np.asarray(values, dtype=float)
    ts = np.asarray(timestamps, dtype=np.int64)
    ends, res = [], []
    if not len(ts):
        return ends, res
    k = (int(ts[0]) - offset - r) // s + 1
    k_last = (int(ts[-1]) - offset) // s
    while k <= k_last:
        lo = k * s + offset
        sel = (ts >= lo) & (ts < lo + r)
        if sel.any():
            ends.append(lo + r)
            res.append(_agg(agg, x[sel], ts[sel]))
        k += 1
    return ends, res


def exact_sums(values, ends_starts):
    """``math.fsum`` (exact, then rounded once) of each window ``values[lo:hi]``."""
    x = np.asarray(values, dtype=float).tolist()
    return [math.fsum(x[lo:hi]) for lo, hi in ends_starts]


def assert_results_equal(agg, got, want, values=None) -> None:
    """Exact for max/min/count/argmax/collect; relative ``RTOL`` (1e-9) to the expected result otherwise.

    The rule (the spec's Aggregations section: "rounding only, relative 1e-9 ... relative to the result
    itself"): ``|got - want| <= RTOL |want| + floor``, where ``floor`` is carried by the expected value
    (:class:`Want`, :class:`WantVec`, built by this oracle from the window's own values) and is only the
    rounding the exact value allows: ``n eps sum |v_i|`` for a sum of ``n`` floats (a sum that cancels
    to ~0, ``1e12 + -1e12 + 5``, may be off by the rounding of its 1e12s: 1e-3 here, not 500), divided
    by ``n`` for a mean, relative ``eps sum |ln v_i| / n`` for ``geomean``; for ``std`` (the exact std
    of exact float64 values: ``1e12 + 0.1, 1e12 + 0.7, ...`` is compared at 1e-9 of its 0.3) only what
    subnormal squares lose (values near 1e-159), and
    for ``moment_sketch`` per component (the power sums' own rounding). No floor is scaled by the
    input's largest value; an expected value given as a plain float (computed by a test) has floor 0.
    NaN must be NaN, an infinity the same infinity.

    A user aggregation (``pba_runtime.Aggregation``) is exact when its ``result`` is not ``float``. One
    with a float ``inverse`` (subtract-on-evict) may carry the rounding of the values it evicted
    (``pba_runtime/algorithms/soe.py``: from at most two window lengths back): with the stream's
    ``values`` given, its floor also has ``eps sum |lift(v)|`` over them, carried through its ``lower`` (a
    square root amplifies it near 0). ``values`` serves nothing else.
    """
    got = list(got)
    want = list(want)
    assert len(got) == len(want), f"{len(got)} results, expected {len(want)}"
    evicted, lower = 0.0, None  # the rounding a user inverse may leave behind, and its lower
    if not isinstance(agg, str):
        if agg.inverse is not None and not agg.positional and values is not None and agg.result == "float":
            with np.errstate(all="ignore"):
                lifted = [agg.lift(float(v)) for v in np.asarray(values, dtype=float).tolist()]
            if all(isinstance(p, float) and math.isfinite(p) for p in lifted):
                evicted = EPS * math.fsum(abs(p) for p in lifted)
        lower = agg.lower
        agg = "sum" if agg.result == "float" and not agg.selective else "max"
    if agg in EXACT:
        for i, (g, w) in enumerate(zip(got, want)):
            if isinstance(w, float) and math.isnan(w):
                assert isinstance(g, float) and math.isnan(g), f"window {i}: {g!r} != nan"
            else:
                g = g.tolist() if isinstance(g, np.ndarray) else g
                assert g == w, f"window {i}: {g!r} != {w!r}"
        return
    if not want:
        return
    floor = np.array([getattr(x, "floor", 0.0) * np.ones(np.shape(x)) for x in want], dtype=float)
    if evicted:  # in the partials' units: through the lower to the results' (sqrt amplifies it near 0)
        floor += [_through_lower(lower, w.partial, evicted) if getattr(w, "partial", None) is not None else evicted
                  for w in want]
    g = np.asarray(got, dtype=float)
    w = np.asarray(want, dtype=float)
    assert g.shape == w.shape, f"{agg}: results of shape {g.shape}, expected {w.shape}"
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: the other terms decide
        ok = np.abs(g - w) <= RTOL * np.abs(w) + floor
    ok |= (np.isnan(g) & np.isnan(w)) | (np.isinf(w) & (g == w))
    if not ok.all():
        bad = np.argwhere(~ok)[:5]
        raise AssertionError(f"{agg}: {len(np.argwhere(~ok))} results differ beyond relative {RTOL} (+ rounding "
                             "floor); first (index, got, want, allowed): "
                             + "; ".join(f"{tuple(int(i) for i in ix)} {g[tuple(ix)]!r} {w[tuple(ix)]!r} "
                                         f"{RTOL * abs(w[tuple(ix)]) + floor[tuple(ix)]:.3g}" for ix in bad))
