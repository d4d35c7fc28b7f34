"""A naive oracle written straight from shared/spec/semantics.md, with numpy.

It shares no code with pba_runtime: windows are enumerated from their
definition and each one is aggregated from scratch.
"""

from __future__ import annotations

import math

import numpy as np

EXACT = {"max", "min", "count", "argmax", "collect"}


def fold(agg, vals, pos):
    """A user aggregation over one window, straight from its definition: lower(lift(v1) (+) ... (+) lift(vm))."""
    acc = agg.identity
    for v, p in zip(vals.tolist(), pos.tolist()):
        acc = agg.combine(acc, agg.lift(v, p) if agg.positional else agg.lift(v))
    return agg.lower(acc)


def _agg(name, vals: np.ndarray, pos: np.ndarray):
    if not isinstance(name, str):  # a user aggregation (pba_runtime.Aggregation)
        return fold(name, vals, pos)
    if name == "max":
        return float(np.max(vals))
    if name == "min":
        return float(np.min(vals))
    if name == "sum":
        with np.errstate(invalid="ignore"):
            return float(np.sum(vals))
    if name == "count":
        return len(vals)
    if name == "mean":
        with np.errstate(invalid="ignore"):
            return float(np.mean(vals))
    if name == "std":
        with np.errstate(invalid="ignore"):
            return float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan
    if name == "geomean":
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.exp(np.mean(np.log(vals))))
    if name == "argmax":
        return int(pos[int(np.argmax(vals))])
    if name == "collect":
        return list(vals.tolist())
    if name == "moment_sketch":
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lx = np.log(vals)
            return np.array([np.min(vals), np.max(vals), len(vals)]
                            + [np.sum(vals ** j) for j in range(1, 11)]
                            + [np.sum(lx ** j) for j in range(1, 11)])
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
    """Exact for max/min/count/argmax/collect; relative 1e-9 (plus a scale-aware floor) otherwise.

    A user aggregation (``pba_runtime.Aggregation``) is exact when its ``result`` is not ``float``.
    """
    got = list(got)
    want = list(want)
    assert len(got) == len(want), f"{len(got)} results, expected {len(want)}"
    if not isinstance(agg, str):
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
    g = np.asarray(got, dtype=float)
    w = np.asarray(want, dtype=float)
    scale = 1.0 if values is None or not len(values) else float(np.max(np.abs(values))) or 1.0
    if agg == "moment_sketch":
        # power sums up to x**10: compare each column relative to its own magnitude
        col_scale = np.nanmax(np.where(np.isfinite(w), np.abs(w), 0.0), axis=0, initial=1.0)
        with np.errstate(invalid="ignore"):  # inf - inf where both are inf: the last line decides
            ok = np.isclose(g, w, rtol=1e-9, atol=0, equal_nan=True) | (np.abs(g - w) <= 1e-9 * col_scale)
        ok |= np.isinf(w) & (g == w)
        assert ok.all(), f"moment_sketch differs: {g[~ok][:5]} vs {w[~ok][:5]}"
        return
    np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9 * scale, equal_nan=True, err_msg=agg)
