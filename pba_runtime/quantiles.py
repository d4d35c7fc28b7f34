"""Exact quantiles over sliding windows: ``"median"`` and :func:`quantile`.

A quantile is an *order statistic*, not a monoid: the medians of two slices do not give the median of
their union, so PBA's chunks (and Theorem 1's ``b*``, which prices merging slice partials) do not apply,
nor does any algorithm of ``pba_runtime.ALGORITHMS``, all of which merge partials. What carries it is a
sorted window of values: :mod:`pba_runtime.kernels.compiled.quantiles` keeps each window's values in
order and moves from one window to the next by the values that left and came. The windows' rows come
from :func:`pba_runtime.windows.window_spans`; a batch of windows is cut in two ranges that run at once,
on this thread and on the pool's worker (each range starts its own sorted window).

Results are numpy's: ``numpy.quantile(window, q, method=interpolation)``, and ``numpy.median`` for
``"median"``; NaN as the missing-value policy says (``skip``: not a value; ``propagate``: a window
holding NaN is NaN).

Examples
--------
>>> import pba_runtime as pr
>>> ends, med = pr.sliding_aggregate([3.0, 1.0, 4.0, 1.0, 5.0], window=pr.CountWindow(3), agg="median")
>>> ends.tolist(), med.tolist()
([3, 4, 5], [3.0, 1.0, 4.0])
>>> pr.sliding_aggregate([3.0, 1.0, 4.0, 1.0], window=pr.CountWindow(4), agg=pr.quantile(0.9))[1].tolist()
[3.7]
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .aggregations import check_min_periods
from .engines.key_split import run_split
from .kernels.compiled.quantiles import METHODS, window_quantiles
from .windows import CountWindow, TimeWindow, window_spans

__all__ = ["INTERPOLATIONS", "Quantile", "as_quantile", "keyed_quantile_rows", "keyed_quantile_windows", "quantile",
           "run_windows"]

#: numpy's ``method=`` names the exact quantile takes (pandas' rolling quantile has the same five)
INTERPOLATIONS = ("linear", "lower", "higher", "nearest", "midpoint")

#: windows below which one call runs on this thread (a split costs a pool round trip)
SPLIT_MIN_WINDOWS = 1 << 14


@dataclass(frozen=True)
class Quantile:
    """The exact ``q``-quantile of each window (``interpolation`` as numpy's ``method=``); ``median``: numpy's.

    Build it with :func:`quantile` or the name ``"median"``.
    """

    q: float
    interpolation: str = "linear"
    median: bool = False
    #: the missing-value policy an operator built from it takes by default (:meth:`skipping`)
    missing: str = "propagate"
    min_periods: int = 1
    #: what a result is (as :attr:`Aggregation.result`): a float
    result = "float"
    #: as an :class:`Aggregation` declares them: no SQL aggregate gives a slice's part of it (no Spark
    #: pre-aggregation), and its values carry no position
    preaggregate = None
    positional = False

    @property
    def name(self) -> str:
        """The output name: ``median``; else ``p`` and the percent, ``p99``, ``p99_9`` (a name Spark reads
        without backticks), then the interpolation when not linear: ``p25_lower``."""
        if self.median:
            return "median"
        pct = f"{self.q * 100:.10g}".replace(".", "_")
        tail = "" if self.interpolation == "linear" else f"_{self.interpolation}"
        return f"p{pct}{tail}"

    @property
    def method(self) -> int:
        return METHODS["median" if self.median else self.interpolation]

    def skipping(self, min_periods: int = 1) -> Quantile:
        """The same quantile skipping missing values (what :func:`~pba_runtime.aggregations.skip_missing` is
        to an aggregation): an operator built from it skips NaN and needs ``min_periods`` values."""
        return replace(self, missing="skip", min_periods=check_min_periods(min_periods))


MEDIAN = Quantile(0.5, "linear", median=True)


def quantile(q: float, interpolation: str = "linear") -> Quantile:
    """The exact ``q``-quantile over each window, as ``numpy.quantile(window, q, method=interpolation)``.

    Parameters
    ----------
    q : float
        In ``[0, 1]``.
    interpolation : {"linear", "lower", "higher", "nearest", "midpoint"}
        Between the two values around the quantile's rank, as numpy and pandas name it.

    Examples
    --------
    >>> quantile(0.99).name, quantile(0.999).name, quantile(0.25, "lower").name
    ('p99', 'p99_9', 'p25_lower')
    >>> quantile(1.5)
    Traceback (most recent call last):
    ...
    ValueError: q must be a number in [0, 1], got 1.5
    """
    if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0.0 <= float(q) <= 1.0:
        raise ValueError(f"q must be a number in [0, 1], got {q!r}")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {', '.join(map(repr, INTERPOLATIONS))}, got {interpolation!r}")
    return Quantile(float(q), interpolation)


def as_quantile(agg: Any) -> Quantile | None:
    """``agg`` as a :class:`Quantile` when it names one (``"median"`` or a :func:`quantile`), else ``None``."""
    if isinstance(agg, Quantile):
        return agg
    if isinstance(agg, str) and agg == "median":
        return MEDIAN
    return None


def refuse_algorithm(algorithm: str, q: Quantile) -> None:
    """Order statistics run on the sorted-window kernel; an algorithm of partials is refused by name."""
    if algorithm not in ("auto", "sorted_window"):
        raise ValueError(
            f"algorithm {algorithm!r} merges partials of a monoid; agg {q.name!r} is an order statistic (not a "
            "monoid) and runs on the sorted-window kernel: pass algorithm='auto' (or 'sorted_window')")


def run_windows(v: np.ndarray, S: np.ndarray, E: np.ndarray, q: Quantile, skip: bool, mp: int, pool: Any
                 ) -> np.ndarray:
    """The kernel over windows ``[S[i], E[i])`` of ``v`` (non-decreasing bounds), split in ranges that run at
    once on this thread and ``pool``'s worker (from :data:`SPLIT_MIN_WINDOWS` windows)."""
    out = np.empty(len(S), dtype=np.float64)
    qv, code = float(q.q), q.method
    run_split(lambda i0, i1: window_quantiles(v, S, E, qv, code, skip, mp, i0, i1, out),
              np.arange(len(S) + 1, dtype=np.int64), pool=pool, min_rows=SPLIT_MIN_WINDOWS)
    return out


def _valid(V: np.ndarray, S: np.ndarray, E: np.ndarray, skip: bool, mp: int) -> np.ndarray | None:
    """Which windows have a result (``False``: null): values, or rows under ``propagate``, ``>= mp`` (and one)."""
    rows = E - S
    if skip:
        nan_before = np.concatenate(([0], np.cumsum(np.isnan(V), dtype=np.int64)))
        rows = rows - (nan_before[E] - nan_before[S])
    ok = rows >= max(mp, 1)
    return None if ok.all() else ok


def keyed_quantile_windows(V: np.ndarray, T: np.ndarray | None, bounds: np.ndarray, window: CountWindow | TimeWindow,
                           q: Quantile, *, missing: str, min_periods: int, pool: Any = None):
    """Window output of ``q`` for every key at once: ``(key, end, values, valid)`` ordered by key then end.

    Rows are laid out key after key (``bounds``), ``T`` the order within each key (time windows). Each key's
    windows are :func:`window_spans` of its rows; all keys' windows go to one kernel call (the bounds stay
    non-decreasing from key to key), split in ranges that run at once.
    """
    timed = isinstance(window, TimeWindow)
    keys, ends, Ss, Es = [], [], [], []
    for k in range(len(bounds) - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        if a == b:
            continue
        e, S, E = window_spans(window, b - a, T[a:b] if timed else None)
        keys.append(np.full(len(e), k, dtype=np.int64))
        ends.append(e)
        Ss.append(S + a)
        Es.append(E + a)
    if not keys:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy(), np.zeros(0), None
    S, E = np.concatenate(Ss), np.concatenate(Es)
    skip = missing == "skip"
    mp = min_periods if skip else 1
    vals = run_windows(V, S, E, q, skip, mp, pool)
    return np.concatenate(keys), np.concatenate(ends), vals, _valid(V, S, E, skip, min_periods)


def keyed_quantile_rows(V: np.ndarray, T: np.ndarray | None, bounds: np.ndarray, window: CountWindow | TimeWindow,
                        q: Quantile, *, missing: str, min_periods: int, closed: str, pool: Any = None):
    """Row output of ``q``: each row's window as pandas bounds it (:func:`~pba_runtime.kernels.compiled.rows.row_bounds`,
    the four ``closed``), every key in one kernel call. Returns ``(values, valid)`` per row."""
    from .kernels.compiled.rows import CLOSED, row_bounds

    n = len(V)
    timed = isinstance(window, TimeWindow)
    S = np.empty(n, dtype=np.int64)
    E = np.empty(n, dtype=np.int64)
    Tk = np.ascontiguousarray(T, dtype=np.int64) if timed else np.zeros(1, dtype=np.int64)
    row_bounds(Tk, np.asarray(bounds, dtype=np.int64), 0, len(bounds) - 1, int(window.range), CLOSED[closed], timed,
               S, E)
    skip = missing == "skip"
    vals = run_windows(V, S, E, q, skip, min_periods if skip else 1, pool)
    return vals, _valid(V, S, E, skip, min_periods)
