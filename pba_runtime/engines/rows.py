"""Row output (pandas' and polars' rolling shape) for many keys in one compiled call per key range.

Each row gets the aggregation over the window that ends at it (``docs/semantics.md``, "Queries over
frames", row output): a count window is the key's last ``range`` rows up to and including the row; a time
window the key's rows with a timestamp in ``(t - range, t]`` (``closed="right"``, pandas' default), with
``"left"``, ``"both"``, ``"neither"`` and ties exactly as pandas bounds them (see :func:`row_results`).
The kernels are Two-Stacks over those bounds (:mod:`pba_runtime.kernels.compiled.rows`): no running sum,
so a result carries only its own window's rounding, and a NaN or inf that has left the window is gone.
The keys are split between the calling thread and the pool's worker (:func:`.key_split.run_split`).

Examples
--------
>>> import numpy as np
>>> from pba_runtime import CountWindow
>>> V = np.array([1.0, 5.0, 2.0, 7.0, 3.0])
>>> bounds = np.array([0, 3, 5])  # key 0: rows 0-2, key 1: rows 3-4
>>> out = row_results(V, None, bounds, CountWindow(2), ("max", "count"))
>>> out["max"]
(array([1., 5., 5., 7., 7.]), None)
>>> out["count"][0]
array([1, 2, 2, 1, 2])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels.compiled import rows as K
from ..windows import CountWindow, TimeWindow
from .key_split import run_split

__all__ = ["KEYED_ROW_AGGS", "row_results", "row_results_reference"]

#: The aggregations row output computes here.
KEYED_ROW_AGGS = ("max", "min", "sum", "count", "mean", "std", "var", "argmax", "argmin")
#: Results of no value are undefined for these: such a row is invalid whatever ``min_periods`` says.
_NEED_A_VALUE = frozenset({"max", "min", "mean", "argmax", "argmin"})
_INT_RESULTS = frozenset({"count", "argmax", "argmin"})
_MISSING = ("propagate", "skip")
_I64 = np.iinfo(np.int64)


def _check(V: Any, T: Any, bounds: Any, window: Any, aggs: Any, missing: str, min_periods: Any,
           closed: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, tuple[str, ...]]:
    """The arguments as arrays, or a ``ValueError``/``TypeError`` naming the parameter."""
    V = np.ascontiguousarray(V, dtype=np.float64)
    if V.ndim != 1:
        raise ValueError(f"V must be 1-D, got shape {V.shape}")
    bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    if bounds.ndim != 1 or len(bounds) < 1 or bounds[0] != 0 or bounds[-1] != len(V) or (np.diff(bounds) < 0).any():
        raise ValueError(f"bounds must be non-decreasing int64 from 0 to len(V) = {len(V)} (n_keys + 1 entries)")
    if isinstance(aggs, str):
        aggs = (aggs,)
    aggs = tuple(aggs)
    unknown = [a for a in aggs if a not in KEYED_ROW_AGGS]
    if unknown:
        raise ValueError(f"aggs: unknown aggregation {unknown[0]!r}; accepted: {', '.join(KEYED_ROW_AGGS)}")
    if missing not in _MISSING:
        raise ValueError(f"missing must be one of {', '.join(map(repr, _MISSING))}, got {missing!r}")
    if isinstance(min_periods, bool) or not isinstance(min_periods, (int, np.integer)) or min_periods < 0:
        raise ValueError(f"min_periods must be a non-negative integer, got {min_periods!r}")
    if closed not in K.CLOSED:
        raise ValueError(f"closed must be one of {', '.join(map(repr, K.CLOSED))}, got {closed!r}")
    if isinstance(window, CountWindow):
        if window.slide != 1:
            raise ValueError(f"window: row output has no slide, got a count window of slide {window.slide}")
        if T is not None:
            raise ValueError("timestamps (T) must be None with a count window")
        return V, None, bounds, aggs
    if not isinstance(window, TimeWindow):
        raise TypeError(f"window must be a CountWindow or a TimeWindow, got {type(window).__name__}")
    if T is None:
        raise ValueError("timestamps (T) are needed with a time window")
    T = np.asarray(T)
    if T.dtype.kind not in "iu":
        raise TypeError(f"timestamps (T) must be integers, got dtype {T.dtype}")
    T = np.ascontiguousarray(T, dtype=np.int64)
    if T.shape != V.shape:
        raise ValueError(f"timestamps (T) must have V's length {len(V)}, got shape {T.shape}")
    if len(T):
        step = np.diff(T)
        inside = np.ones(len(step), dtype=bool)
        inside[bounds[1:-1][(bounds[1:-1] > 0) & (bounds[1:-1] < len(T))] - 1] = False  # key boundaries
        if (step[inside] < 0).any():
            raise ValueError("timestamps (T) must be non-decreasing within each key")
        if int(T.min()) - int(window.range) - 1 < _I64.min:
            raise ValueError(f"timestamps: a window bound {int(T.min())} - {window.range} does not fit in int64")
    return V, T, bounds, aggs


def row_results(V: Any, T: Any, bounds: Any, window: CountWindow | TimeWindow, aggs: tuple[str, ...], *,
                missing: str = "propagate", min_periods: int = 1, closed: str = "right",
                pool: Any = None) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Row output for many keys: each aggregation over the window that ends at each row.

    Parameters
    ----------
    V : array_like of float64, 1-D
        The values, laid out key after key: key ``k``'s rows are ``V[bounds[k]:bounds[k + 1]]``, each key's
        rows in order (of ``T`` for a time window).
    T : array_like of int64 or None
        The timestamps, laid out as ``V``, non-decreasing within each key (``None`` for a count window).
    bounds : array_like of int64
        ``n_keys + 1`` non-decreasing offsets, ``bounds[0] == 0``, ``bounds[-1] == len(V)``.
    window : CountWindow or TimeWindow
        A count window of slide 1, or a time window (only its ``range`` is read, in ``T``'s unit).
    aggs : tuple of str
        Names from :data:`KEYED_ROW_AGGS`.
    missing : {"propagate", "skip"}
        ``"propagate"``: NaN is a value (numpy's result: ``max`` over a window holding NaN is NaN). ``"skip"``:
        NaN is not a value; each result is over the window's other values (inf still is one).
    min_periods : int
        A row is valid where its window holds at least this many values (rows; non-NaN rows under
        ``"skip"``). pandas' default is the range for a count window, 1 for a time window.
    closed : {"right", "left", "both", "neither"}
        Which ends of the window are in it, as pandas' ``rolling(closed=)``. Time windows: row ``i``'s window
        is its key's rows ``j`` with ``T[j]`` in ``(T[i] - range, T[i]]`` (``"right"``), ``[T[i] - range,
        T[i]]`` (``"both"``), with ``j <= i`` (rows tied with ``T[i]`` after it are out, as pandas' end
        ``i + 1``); ``"left"``/``"neither"``: ``[T[i] - range, T[i])`` / ``(T[i] - range, T[i])``, so no
        row tied with ``T[i]`` is in it. Count windows: rows ``(i - range, i]`` of the key, one more
        older for ``"left"``/``"both"``, without row ``i`` for ``"left"``/``"neither"`` (pandas' bounds).
    pool : WorkerPool, optional
        Whose thread worker runs some of the keys (default: the shared pool, for inputs big enough).

    Returns
    -------
    dict
        ``{agg: (values, valid)}``, ``values`` of ``len(V)`` in ``V``'s row order and ``valid`` a bool array,
        or ``None`` when every row is valid. ``values`` is int64 for ``count`` (the number of values),
        ``argmax`` and ``argmin`` (count windows: the row's 0-based position in its key; time windows: its
        timestamp; the oldest row on ties, NaN counting as largest for ``argmax`` and smallest for
        ``argmin`` under ``"propagate"``, as ``np.argmax``), float64 otherwise. ``std``/``var`` are the
        sample ones (ddof=1), NaN over one value. A row is invalid where its window holds fewer than
        ``min_periods`` values, or (``max``, ``min``, ``mean``, ``argmax``, ``argmin``) none; an invalid
        row's value is NaN (0 for the int64 results). Accurate to rounding: sums are compensated and
        variances Chan et al.'s merge, over the window's own values only.

    Examples
    --------
    >>> import numpy as np
    >>> from pba_runtime import TimeWindow
    >>> V = np.array([1.0, np.nan, 3.0, 4.0])
    >>> T = np.array([0, 10, 10, 70])
    >>> out = row_results(V, T, np.array([0, 4]), TimeWindow(60), ("sum", "argmax"), missing="skip")
    >>> out["sum"][0], out["argmax"][0]
    (array([1., 1., 4., 4.]), array([ 0,  0, 10, 70]))
    >>> row_results(V, T, np.array([0, 4]), TimeWindow(60), ("max",), closed="left")["max"]
    (array([nan,  1.,  1., nan]), array([False,  True,  True,  True]))
    """
    V, T, bounds, aggs = _check(V, T, bounds, window, aggs, missing, min_periods, closed)
    n = len(V)
    skip = missing == "skip"
    timed = T is not None
    Tk = T if timed else np.empty(0, dtype=np.int64)
    r = int(window.range)
    code = K.CLOSED[closed]
    S = np.empty(n, dtype=np.int64)
    E = np.empty(n, dtype=np.int64)
    nobs = np.empty(n, dtype=np.int64)
    want = set(aggs)
    raw: dict[str, np.ndarray] = {}
    if want & {"sum", "mean"}:
        raw["sum"] = np.empty(n)
    if want & {"std", "var"}:
        raw["var"] = np.empty(n)
    for name in ("max", "min"):
        if name in want:
            raw[name] = np.empty(n)
    for name in ("argmax", "argmin"):
        if name in want:
            raw[name] = np.empty(n, dtype=np.int64)

    def run(k0: int, k1: int) -> None:
        K.row_bounds(Tk, bounds, k0, k1, r, code, timed, S, E)
        K.row_nobs(V, bounds, k0, k1, S, E, skip, nobs)
        if "sum" in raw:
            K.rows_sum(V, bounds, k0, k1, S, E, skip, raw["sum"])
        if "var" in raw:
            K.rows_var(V, bounds, k0, k1, S, E, skip, raw["var"])
        for name, neg in (("max", False), ("min", True)):
            if name in raw:
                K.rows_max(V, bounds, k0, k1, S, E, neg, skip, raw[name])
        for name, neg in (("argmax", False), ("argmin", True)):
            if name in raw:
                K.rows_argmax(V, Tk, bounds, k0, k1, S, E, neg, skip, timed, raw[name])

    run_split(run, bounds, pool=pool)
    return _finish(aggs, raw, nobs, min_periods)


def _finish(aggs: tuple[str, ...], raw: dict[str, np.ndarray], nobs: np.ndarray,
            min_periods: int) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """The results from the kernels' raw ones and each row's number of values: lowered, masked."""
    enough = nobs >= min_periods
    some = enough & (nobs >= 1)
    masks = {False: None if enough.all() else enough, True: None if some.all() else some}
    out: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    for name in aggs:
        if name == "count":
            values = nobs.copy()
        elif name == "mean":
            with np.errstate(invalid="ignore", divide="ignore"):
                values = raw["sum"] / nobs
        elif name == "std":
            values = np.sqrt(raw["var"])
        else:
            values = raw[name].copy() if name == "sum" and "mean" in aggs else raw[name]
        valid = masks[name in _NEED_A_VALUE]
        if valid is not None:
            values[~valid] = 0 if name in _INT_RESULTS else np.nan
        out[name] = (values, valid)
    return out


# ----------------------------------------------------------------------------- the reference
def _window_rows(T: np.ndarray | None, a: int, b: int, i: int, r: int, closed: str) -> np.ndarray:
    """Row ``i``'s window from its definition (``row_results``' ``closed``), as absolute rows of key ``[a, b)``."""
    left = closed in ("left", "both")
    right = closed in ("right", "both")
    rows = np.arange(a, b)
    if T is None:
        p = rows - a
        pi = i - a
        lo = pi - r + (0 if left else 1)
        return rows[(p >= lo) & ((p <= pi) if right else (p < pi))]
    t = T[a:b]
    ok = (t >= T[i] - r) if left else (t > T[i] - r)
    ok &= (rows <= i) if right else (t < T[i])
    return rows[ok]


def _exact_var(x: list[float]) -> float:
    """The sample variance of finite floats, exact then rounded once (each float is an integer times a power
    of two, so ``n sum x**2 - (sum x)**2`` is exact in Python integers)."""
    n = len(x)
    ratios = [v.as_integer_ratio() for v in x]
    k = max(d.bit_length() - 1 for _, d in ratios)
    ints = [p << (k - (d.bit_length() - 1)) for p, d in ratios]
    s = sum(ints)
    q = sum(i * i for i in ints)
    return (n * q - s * s) / (n * (n - 1) << (2 * k))


def _one(name: str, vals: np.ndarray, pos: np.ndarray) -> float | int:
    """``name`` over one window's values ``vals`` (``pos``: their positions or timestamps), from its definition."""
    m = len(vals)
    finite = bool(np.isfinite(vals).all())
    if name == "count":
        return m
    if name in ("argmax", "argmin"):
        return int(pos[int(np.argmax(vals) if name == "argmax" else np.argmin(vals))]) if m else 0
    if name in ("max", "min"):
        return float(np.max(vals) if name == "max" else np.min(vals)) if m else math.nan
    if name in ("sum", "mean"):
        with np.errstate(invalid="ignore", over="ignore"):
            total = math.fsum(vals.tolist()) if finite else float(np.sum(vals))
        return total if name == "sum" else (total / m if m else math.nan)
    var = _exact_var(vals.tolist()) if m > 1 and finite else math.nan
    return var if name == "var" else math.sqrt(var)


def row_results_reference(V: Any, T: Any, bounds: Any, window: CountWindow | TimeWindow, aggs: tuple[str, ...], *,
                          missing: str = "propagate", min_periods: int = 1,
                          closed: str = "right") -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """:func:`row_results` recomputed row by row from the definition (numpy, ``math.fsum``, an exact
    variance): the slow form the tests hold the kernels to.

    Examples
    --------
    >>> import numpy as np
    >>> from pba_runtime import CountWindow
    >>> row_results_reference(np.array([1.0, 5.0, 2.0]), None, np.array([0, 3]), CountWindow(2), ("min",))
    {'min': (array([1., 1., 2.]), None)}
    """
    V, T, bounds, aggs = _check(V, T, bounds, window, aggs, missing, min_periods, closed)
    r = int(window.range)
    res = {name: np.zeros(len(V), dtype=np.int64 if name in _INT_RESULTS else np.float64) for name in aggs}
    ok = {name: np.zeros(len(V), dtype=bool) for name in aggs}
    for k in range(len(bounds) - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        for i in range(a, b):
            rows = _window_rows(T, a, b, i, r, closed)
            vals = V[rows]
            if missing == "skip":
                rows = rows[~np.isnan(vals)]
                vals = V[rows]
            pos = T[rows] if T is not None else rows - a
            for name in aggs:
                good = len(vals) >= min_periods and (len(vals) >= 1 or name not in _NEED_A_VALUE)
                ok[name][i] = good
                res[name][i] = _one(name, vals, pos) if good else (0 if name in _INT_RESULTS else math.nan)
    return {name: (res[name], None if ok[name].all() else ok[name]) for name in aggs}
