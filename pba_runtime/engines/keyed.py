"""Window output of many keys: several windows and several built-in aggregations of one value column, in one pass.

Rows are laid out key after key: key ``k``'s values are ``V[bounds[k] : bounds[k + 1]]`` (a key may have none),
ordered by its timestamps ``T`` (same layout) for time windows, or in stream order for count windows
(``T=None``). :func:`window_results` answers every (window, aggregation) for every key in one compiled call
per slide (:mod:`pba_runtime.kernels.compiled.keyed`; the keys split between this thread and the pool's
worker, :func:`.key_split.run_split`): each key's stream is sliced once per distinct slide, each slice's
partial lifted once per family of aggregations (``max``/``argmax``, ``min``/``argmin``, and
``count``/``sum``/``mean``/``std``/``var``), and every window of that slide answered from those slices.
Count windows of slide 1 and ``range > 1`` with ``missing="propagate"`` (pandas' ``rolling(n)``) take
another road for ``max``, ``min``, ``sum``, ``mean``, ``std``, ``argmax`` and ``count``: per key, the
single-stream kernel ``sliding_aggregate`` runs over the values themselves, all keys in one compiled call
per window (:func:`pba_runtime.kernels.compiled.keyed.count_slide1_values`); ``var`` and ``argmin`` there,
and every other window, take the pass above.

Per key, window and aggregation, the rows are what ``pba_runtime.sliding_aggregate(V[a:b], window=w, agg=agg,
timestamps=T[a:b])`` gives (ends and results; ``sum``, ``mean``, ``std``, ``var`` to rounding, but bit for
bit on the slide-1 road above; ``tests/test_keyed_engine.py``'s ``slide1_per_key_reference`` is that per-key loop): count
windows emit their full windows, time windows every window holding a tuple. ``missing="skip"``: NaN is a
tuple but not a value; each result is over the window's other values and ``valid`` is False where fewer
than ``min_periods`` remain (``max``, ``min``, ``argmax``, ``argmin``: also where none does); ``count`` is
the number of values. There, where not valid, float results are NaN, ``argmax``/``argmin`` 0 (``count`` keeps
the count).
:func:`window_results_reference` is the plain numpy reference (window by window from the definitions).

Examples
--------
>>> import numpy as np
>>> import pba_runtime as pr
>>> V = np.array([1.0, 5.0, 2.0, 4.0, 3.0, 7.0, 6.0])
>>> bounds = np.array([0, 4, 4, 7])  # key 0: 4 values, key 1: none, key 2: 3
>>> res = window_results(V, None, bounds, [pr.CountWindow(2, 1), pr.CountWindow(3, 3)], ["max", "argmin"])
>>> res[0].key, res[0].end
(array([0, 0, 0, 2, 2]), array([2, 3, 4, 2, 3]))
>>> res[0].values["max"], res[0].values["argmin"]
(array([5., 5., 4., 7., 7.]), array([0, 2, 2, 0, 2]))
>>> res[1].key, res[1].end, res[1].values["max"]
(array([0, 2]), array([3, 3]), array([5., 7.]))
>>> T = np.array([0, 1, 5, 9, -3, 0, 1])
>>> V[3] = np.nan
>>> r = window_results(V, T, bounds, [pr.TimeWindow(4, 2)], ["sum", "count"], missing="skip", min_periods=2)[0]
>>> r.key, r.end
(array([0, 0, 0, 0, 0, 0, 2, 2, 2, 2]), array([ 2,  4,  6,  8, 10, 12, -2,  0,  2,  4]))
>>> r.values["count"]
array([2, 2, 1, 1, 0, 0, 1, 1, 2, 2])
>>> r.values["sum"]  # NaN where not valid
array([ 6.,  6., nan, nan, nan, nan, nan, nan, 13., 13.])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..aggregations import BUILTIN_AGGREGATIONS
from ..kernels.read_only import read_only
from ..windows import CountWindow, TimeWindow
from .key_split import run_split

__all__ = ["KEYED_AGGS", "WindowResult", "window_results", "window_results_reference"]

#: The aggregations :func:`window_results` answers (built-ins all), in the order of the kernels' codes.
KEYED_AGGS = tuple(a for a in ("max", "min", "sum", "count", "mean", "std", "var", "argmax", "argmin")
                   if a in BUILTIN_AGGREGATIONS)
_FLOAT = ("max", "min", "sum", "mean", "std", "var")
_INT = ("count", "argmax", "argmin")
_NEED_ONE = ("max", "min", "argmax", "argmin")
#: with a single-stream kernel over the values of count windows of slide 1 (``sliding_aggregate``'s)
_FROM_VALUES = ("max", "min", "sum", "count", "mean", "std", "argmax")  # not valid over no values, whatever min_periods
MISSING = ("propagate", "skip")
#: The kernels lift slices this many block starts at a time (at least ``SEGMENT_PER_Q`` times the longest
#: window, in slices): their scratch is bounded whatever a key's length.
SEGMENT_SLICES = 1 << 14
SEGMENT_PER_Q = 8


@dataclass(frozen=True)
class WindowResult:
    """One window's rows over every key, ordered by key then end.

    ``key``: int64, the key index of each row; ``end``: int64, the window's exclusive end (count windows:
    the position within the key, ``k*s + r``; time windows: ``k*s + offset + r``, in ``T``'s unit);
    ``values``: aggregation name -> results (float64; ``count``, ``argmax``, ``argmin`` int64, positions
    or timestamps); ``valid``: aggregation -> bool array (False: null), or None when every row is valid
    (always, with ``missing="propagate"``).
    """

    key: np.ndarray
    end: np.ndarray
    values: dict[str, np.ndarray]
    valid: dict[str, np.ndarray | None]


def _check(V, T, bounds, windows, aggs, missing, min_periods):
    """The arguments as the kernels take them, or a ``ValueError``/``TypeError`` naming the parameter."""
    if missing not in MISSING:
        raise ValueError(f"missing must be one of {', '.join(MISSING)}; got {missing!r}")
    if isinstance(min_periods, bool) or not isinstance(min_periods, (int, np.integer)) or min_periods < 0:
        raise ValueError(f"min_periods must be an integer >= 0; got {min_periods!r}")
    aggs = [aggs] if isinstance(aggs, str) else list(aggs)
    for a in aggs:
        if a not in KEYED_AGGS:
            raise ValueError(f"unknown aggregation {a!r} for window_results; accepted: {', '.join(KEYED_AGGS)}")
    if len(set(aggs)) != len(aggs):
        raise ValueError(f"aggs names an aggregation twice: {aggs!r}")
    windows = list(windows)
    for w in windows:
        if not isinstance(w, (CountWindow, TimeWindow)):
            raise TypeError(f"windows must hold CountWindow or TimeWindow, got {type(w).__name__}")
    V = np.ascontiguousarray(V, dtype=np.float64)
    bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    if V.ndim != 1:
        raise ValueError(f"V must be 1-D; got shape {V.shape}")
    if bounds.ndim != 1 or len(bounds) < 1 or (np.diff(bounds) < 0).any() or bounds[0] < 0 or bounds[-1] > len(V):
        raise ValueError("bounds must be non-decreasing int64 offsets into V, n_keys + 1 of them")
    time = [isinstance(w, TimeWindow) for w in windows]
    if T is None:
        if any(time):
            raise ValueError("timestamps T are needed for a TimeWindow; got T=None")
    else:
        if windows and not all(time):
            raise ValueError("timestamps T given with a CountWindow: pass T=None for count windows")
        T = np.asarray(T)
        if T.dtype.kind not in "iu" or T.shape != V.shape:
            raise ValueError(f"timestamps T must be integers, one per value ({len(V)}); got {T.dtype} {T.shape}")
        T = np.ascontiguousarray(T, dtype=np.int64)
        if len(T) > 1:
            down = np.flatnonzero(T[1:] < T[:-1]) + 1  # a decrease inside a key (not at a key's first row)
            first = np.zeros(len(T) + 1, dtype=bool)
            first[bounds] = True
            if len(down) and not first[down].all():
                raise ValueError("timestamps must be non-decreasing within each key")
        for w in windows:
            lo, hi = w.timestamp_range
            if len(T) and (int(T.min()) < lo or int(T.max()) > hi):
                raise ValueError(f"timestamps beyond [{lo}, {hi}]: a window bound of {w} would not fit in int64")
    return V, T, bounds, windows, aggs


def _groups(windows) -> list[tuple[int, list[int]]]:
    """The windows' indices by slide, in order of first appearance: ``[(slide, [i, ...]), ...]``."""
    by: dict[int, list[int]] = {}
    for i, w in enumerate(windows):
        by.setdefault(int(w.slide), []).append(i)
    return list(by.items())


def _plan(windows, idx, time):
    """A slide group's grid ``g``, base and per window ``(q, p, c)`` in slices."""
    ws = [windows[i] for i in idx]
    s = int(ws[0].slide)
    base = min(int(w.offset) for w in ws) if time else 0
    g = s
    for w in ws:
        g = math.gcd(g, int(w.range))
        if time:
            g = math.gcd(g, int(w.offset) - base)
    q = np.array([int(w.range) // g for w in ws], dtype=np.int64)
    p = np.full(len(ws), s // g, dtype=np.int64)
    c = np.array([(int(w.offset) - base) // g if time else 0 for w in ws], dtype=np.int64)
    return g, base, q, p, c


def window_results(V: Any, T: Any, bounds: Any, windows: Any, aggs: Any, *, missing: str = "propagate",
                   min_periods: int = 1, pool: Any = None) -> list[WindowResult]:
    """Every window's rows over every key, one :class:`WindowResult` per window, in ``windows``' order.

    Parameters
    ----------
    V : array of float64
        The values, key after key: key ``k``'s are ``V[bounds[k]:bounds[k + 1]]``, ordered by ``T``.
    T : array of int64 or None
        The timestamps (same layout, non-decreasing within a key) for time windows; ``None`` for count windows.
    bounds : array of int64
        ``n_keys + 1`` offsets.
    windows : list of CountWindow or TimeWindow
        All of one kind; a time window's range, slide and offset in ``T``'s unit.
    aggs : list of str
        Names from :data:`KEYED_AGGS`.
    missing : {"propagate", "skip"}
        ``"propagate"``: NaN is a value (numpy's results); ``"skip"``: NaN is no value, and a result over
        fewer than ``min_periods`` values is not valid.
    min_periods : int
        With ``missing="skip"``: the values a valid result needs.
    pool : WorkerPool, optional
        Whose thread workers take a share of the keys (default: the shared pool, for large input).
    """
    V, T, bounds, windows, aggs = _check(V, T, bounds, windows, aggs, missing, min_periods)
    from ..kernels.compiled import keyed as K

    nkeys = len(bounds) - 1
    time = T is not None
    skip = missing == "skip"
    # the kernels only read the inputs: read-only views, so each compiles once whatever the caller's buffers
    V, bounds = read_only(V), read_only(bounds)
    T = read_only(T) if time else None
    # the result rows of each (window, key), and where each starts
    counts = np.zeros((len(windows), max(nkeys, 0)), dtype=np.int64)
    if nkeys:
        lens = np.diff(bounds)
        for i, w in enumerate(windows):
            if time:
                out = counts[i]
                run_split(lambda k0, k1: K.time_window_counts(T, bounds, k0, k1, int(w.slide), int(w.offset),
                                                              int(w.range), out), bounds, pool=pool)
            else:
                counts[i] = np.where(lens >= w.range, (lens - w.range) // w.slide + 1, 0)
    per_window = counts.sum(axis=1)
    wbase = np.concatenate([[0], np.cumsum(per_window)]).astype(np.int64)
    total = int(wbase[-1])
    wstart = np.zeros((len(windows), nkeys + 1), dtype=np.int64)
    if nkeys:
        wstart[:, 1:] = np.cumsum(counts, axis=1)
    wstart += wbase[:-1, None]
    # result rows: the float aggregations in F, the int ones in I (count always, with skip: the validity)
    fnames = [a for a in aggs if a in _FLOAT]
    inames = [a for a in aggs if a in _INT]
    if skip and "count" not in inames:
        inames.append("count")
    codes = np.full(9, -1, dtype=np.int64)
    for j, a in enumerate(fnames):
        codes[KEYED_AGGS.index(a)] = j
    for j, a in enumerate(inames):
        codes[KEYED_AGGS.index(a)] = j
    bad = np.zeros(1, dtype=np.int64)
    mp = float(min_periods)
    # count windows of slide 1 (q > 1, propagate): the aggregations with a single-stream kernel over the
    # values run it per key (sliding_aggregate's bits); the generic pass answers the others
    fast = [a for a in aggs if a in _FROM_VALUES] if not (time or skip) else []
    fast_codes = np.array([KEYED_AGGS.index(a) for a in fast], dtype=np.int64)
    fast_rows = np.array([fnames.index(a) if a in _FLOAT else inames.index(a) for a in fast], dtype=np.int64)
    rest_codes = codes.copy()
    rest_codes[fast_codes] = -1
    jobs = []  # (slide, windows, codes) for the generic pass
    slide1 = []  # the windows of the slide-1 road
    for s, idx in _groups(windows):
        one = [i for i in idx if s == 1 and int(windows[i].range) > 1] if len(fast) else []
        slide1 += one
        if one and (rest_codes >= 0).any():
            jobs.append((s, one, rest_codes))
        others = [i for i in idx if i not in one]
        if others:
            jobs.append((s, others, codes))
    # the result arrays: one set per window when only the slide-1 road writes them (a window's results then
    # hold no other window's memory), else one set for all (the generic pass fills several windows a call)
    if jobs:
        shared = (np.empty((len(fnames), total)), np.empty((len(inames), total), dtype=np.int64),
                  np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64))
        arrays = [shared] * len(windows)
        origin = wbase[:-1]
        F, FI, ends, keys = shared
    else:
        arrays = [(np.empty((len(fnames), n)), np.empty((len(inames), n), dtype=np.int64), np.empty(n, dtype=np.int64),
                   np.empty(n, dtype=np.int64)) for n in per_window.tolist()]
        origin = np.zeros(len(windows), dtype=np.int64)
    for i in slide1:
        if nkeys:
            Fi, FIi, ends_i, keys_i = arrays[i]
            st_i = np.ascontiguousarray(wstart[i] - wbase[i] + origin[i])
            run_split(lambda k0, k1, i=i, Fi=Fi, FIi=FIi, ends_i=ends_i, keys_i=keys_i, st_i=st_i:
                      K.count_slide1_values(V, bounds, k0, k1, int(windows[i].range), st_i, fast_codes, fast_rows, Fi,
                                            FIi, ends_i, keys_i), bounds, pool=pool)
    for s, idx, gcodes in jobs:
        g, base, q, p, c = _plan(windows, idx, time)
        ws = np.full(len(idx), s, dtype=np.int64)
        st = np.ascontiguousarray(wstart[idx])
        seg = max(SEGMENT_SLICES, SEGMENT_PER_Q * int(q.max()), 1)
        if time:
            def fill(k0, k1):
                K.time_group(V, T, bounds, k0, k1, g, base, ws, q, p, c, st, F, FI, ends, keys, gcodes, skip, mp, seg,
                             bad)
        else:
            wr = np.array([int(windows[i].range) for i in idx], dtype=np.int64)

            def fill(k0, k1):
                K.count_group(V, bounds, k0, k1, g, wr, ws, q, p, st, F, FI, ends, keys, gcodes, skip, mp, seg, bad)
        if nkeys:
            run_split(fill, bounds, pool=pool)
    if bad[0]:  # pragma: no cover (the counts and the fill enumerate the same windows)
        raise RuntimeError("window_results: the kernels wrote another number of windows than counted")
    results = []
    for i in range(len(windows)):
        lo = int(origin[i])
        hi = lo + int(per_window[i])
        F, FI, ends, keys = arrays[i]
        values = {}
        valid: dict[str, np.ndarray | None] = {}
        n = FI[inames.index("count"), lo:hi] if skip else None
        for a in aggs:
            values[a] = F[fnames.index(a), lo:hi] if a in _FLOAT else FI[inames.index(a), lo:hi]
            if skip:
                valid[a] = n >= (max(1, min_periods) if a in _NEED_ONE else min_periods)
            else:
                valid[a] = None
        results.append(WindowResult(keys[lo:hi], ends[lo:hi], values, valid))
    return results


# ----------------------------------------------------------------------------- the plain reference
def _ref_agg(name: str, x: np.ndarray, pos: np.ndarray) -> float | int:
    """One window's ``name`` over its values ``x`` (at positions ``pos``) with numpy; ``std``/``var`` by the
    corrected two-pass over exact sums (accurate on ``1e12 + 0.1, ...``), numpy's NaN where not finite."""
    if name == "count":
        return len(x)
    if name in ("argmax", "argmin"):
        return int(pos[int(np.argmax(x) if name == "argmax" else np.argmin(x))])
    if name in ("max", "min"):
        return float(np.max(x) if name == "max" else np.min(x))
    finite = bool(np.isfinite(x).all())
    if name in ("sum", "mean"):
        if not finite:
            with np.errstate(invalid="ignore"):
                return float(np.sum(x) if name == "sum" else np.mean(x))
        s = math.fsum(x.tolist())
        return s if name == "sum" else (s / len(x) if len(x) else math.nan)
    n = len(x)
    if n < 2 or not finite:
        return math.nan
    d = x - math.fsum(x.tolist()) / n
    var = (math.fsum((d * d).tolist()) - math.fsum(d.tolist()) ** 2 / n) / (n - 1)
    var = max(var, 0.0)
    return math.sqrt(var) if name == "std" else var


def window_results_reference(V: Any, T: Any, bounds: Any, windows: Any, aggs: Any, *, missing: str = "propagate",
                             min_periods: int = 1, pool: Any = None) -> list[WindowResult]:
    """:func:`window_results` window by window from the definitions (numpy; ``pool`` unused): the kernels'
    reference."""
    V, T, bounds, windows, aggs = _check(V, T, bounds, windows, aggs, missing, min_periods)
    skip = missing == "skip"
    out = []
    for w in windows:
        keys, ends = [], []
        vals: dict[str, list] = {a: [] for a in aggs}
        oks: dict[str, list] = {a: [] for a in aggs}
        r, s = int(w.range), int(w.slide)
        for k in range(len(bounds) - 1):
            x = V[bounds[k] : bounds[k + 1]]
            spans = []  # (end, selection)
            if T is None:
                spans = [(j * s + r, slice(j * s, j * s + r)) for j in range(max(0, (len(x) - r) // s + 1))]
            elif len(x):
                t = T[bounds[k] : bounds[k + 1]]
                off = int(w.offset)
                for j in range((int(t[0]) - off - r) // s + 1, (int(t[-1]) - off) // s + 1):
                    lo = j * s + off
                    a, b = np.searchsorted(t, [lo, lo + r])
                    if b > a:
                        spans.append((lo + r, slice(int(a), int(b))))
            for end, sel in spans:
                xs = x[sel]
                pos = np.arange(len(x))[sel] if T is None else T[bounds[k] : bounds[k + 1]][sel]
                if skip:
                    keep = ~np.isnan(xs)
                    xs, pos = xs[keep], pos[keep]
                keys.append(k)
                ends.append(end)
                for a in aggs:
                    need = max(1, min_periods) if a in _NEED_ONE else min_periods
                    ok = not skip or len(xs) >= need
                    oks[a].append(ok)
                    if a in _NEED_ONE and not len(xs):
                        vals[a].append(0 if a in _INT else math.nan)
                    elif ok or a == "count":
                        vals[a].append(_ref_agg(a, xs, pos))
                    else:
                        vals[a].append(0 if a in _INT else math.nan)
        values = {a: np.array(vals[a], dtype=np.int64 if a in _INT else np.float64) for a in aggs}
        valid = {a: (np.array(oks[a], dtype=bool) if skip else None) for a in aggs}
        out.append(WindowResult(np.array(keys, dtype=np.int64), np.array(ends, dtype=np.int64), values, valid))
    return out
