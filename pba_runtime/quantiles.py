"""Quantiles over sliding windows: ``"median"`` and :func:`quantile`, exact or sketched.

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

``quantile(q, relative_error=eps)`` is a :class:`QuantileSketch`: a DDSketch
(:mod:`pba_runtime.aggregations.sketches`), within ``eps`` of the exact ``lower`` quantile. It is a monoid
(:attr:`QuantileSketch.aggregation`), so any algorithm named carries it, the worker pool building PBA's lcs;
with ``"auto"`` it takes the same sorted-window route as the exact quantiles, whose batch of windows runs a
running histogram of the sketch's buckets (:mod:`pba_runtime.kernels.compiled.sketches`) with the monoid's
results.

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

import math
import numbers
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .aggregations import Aggregation, check_min_periods
from .aggregations.sketches import DEFAULT_MAX_BUCKETS, check_sketch, gamma_of, quantile_sketch, width
from .engines.key_split import run_split
from .kernels.compiled.quantiles import METHODS, window_quantiles
from .kernels.compiled.sketches import window_sketch_quantiles
from .windows import CountWindow, TimeWindow, window_spans

__all__ = ["INTERPOLATIONS", "Quantile", "QuantileSketch", "as_quantile", "keyed_quantile_rows", "keyed_quantile_windows", "quantile",
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
        tail = "" if self.interpolation == "linear" else f"_{self.interpolation}"
        return f"p{_percent(self.q)}{tail}"

    @property
    def method(self) -> int:
        return METHODS["median" if self.median else self.interpolation]

    def skipping(self, min_periods: int = 1) -> Quantile:
        """The same quantile skipping missing values (what :func:`~pba_runtime.aggregations.skip_missing` is
        to an aggregation): an operator built from it skips NaN and needs ``min_periods`` values."""
        return replace(self, missing="skip", min_periods=check_min_periods(min_periods))


MEDIAN = Quantile(0.5, "linear", median=True)


def _percent(q: float) -> str:
    """``q`` in percent as an output name spells it: ``99``, ``99_9``."""
    return f"{q * 100:.10g}".replace(".", "_")


@dataclass(frozen=True)
class QuantileSketch:
    """The ``q``-quantile of each window within ``relative_error`` of the exact ``lower`` one (a DDSketch).

    Build it with :func:`quantile` and ``relative_error=``. One partial holds ``6 + 2 * max_buckets``
    floats (:attr:`partial_bytes`, 32,816 bytes at the default 2048 buckets per sign), whatever the window.
    """

    q: float
    relative_error: float
    max_buckets: int = DEFAULT_MAX_BUCKETS
    missing: str = "propagate"
    min_periods: int = 1
    result = "float"
    preaggregate = None
    positional = False

    @property
    def name(self) -> str:
        """``p`` and the percent, then ``_sketch``: ``p99_sketch``, ``p50_sketch``."""
        return f"p{_percent(self.q)}_sketch"

    @property
    def partial_bytes(self) -> int:
        """Bytes of one partial (the fixed bound of the sketch's state per slice)."""
        return 8 * width(self.max_buckets)

    @property
    def ln_gamma(self) -> float:
        return math.log(gamma_of(self.relative_error))

    @property
    def aggregation(self) -> Aggregation:
        """The monoid: what an algorithm of partials (``"pba"``, ``"sba"``, ...) carries, skipping missing
        values as :meth:`skipping` said (:func:`~pba_runtime.aggregations.skip_missing`)."""
        from .aggregations import skip_missing

        agg = quantile_sketch(self.q, self.relative_error, max_buckets=self.max_buckets, name=self.name)
        return skip_missing(agg, self.min_periods) if self.missing == "skip" else agg

    def skipping(self, min_periods: int = 1) -> QuantileSketch:
        """The same sketch skipping missing values, with ``min_periods`` values a window needs."""
        return replace(self, missing="skip", min_periods=check_min_periods(min_periods))


def quantile(q: float, interpolation: str | None = None, *, relative_error: float | None = None,
             max_buckets: int = DEFAULT_MAX_BUCKETS) -> Quantile | QuantileSketch:
    """The ``q``-quantile over each window: exact, as ``numpy.quantile(window, q, method=interpolation)``,
    or within ``relative_error`` of the exact ``lower`` quantile (a mergeable sketch).

    Parameters
    ----------
    q : float
        In ``[0, 1]``.
    interpolation : {"linear", "lower", "higher", "nearest", "midpoint"}, optional
        Between the two values around the quantile's rank, as numpy and pandas name it (default
        ``"linear"``); a sketch answers the ``"lower"`` one.
    relative_error : float, optional
        In ``(0, 1)``: a :class:`QuantileSketch`, ``|result - exact| <= relative_error * |exact|``.
    max_buckets : int
        A sketch's buckets per sign (default 2048, 17 decades of magnitude at 1%): values smaller in
        magnitude than ``(1 + 2 relative_error)^-max_buckets`` times the window's largest of their sign share
        its lowest bucket.

    Examples
    --------
    >>> quantile(0.99).name, quantile(0.999).name, quantile(0.25, "lower").name
    ('p99', 'p99_9', 'p25_lower')
    >>> quantile(0.99, relative_error=0.01).name
    'p99_sketch'
    >>> quantile(1.5)
    Traceback (most recent call last):
    ...
    ValueError: q must be a number in [0, 1], got 1.5
    """
    if relative_error is not None:
        if interpolation not in (None, "lower"):
            raise ValueError(f"interpolation must be 'lower' (or not given) with relative_error: a sketch answers "
                             f"the lower quantile, got {interpolation!r}")
        return QuantileSketch(*check_sketch(q, relative_error, max_buckets))
    if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0.0 <= float(q) <= 1.0:
        raise ValueError(f"q must be a number in [0, 1], got {q!r}")
    interpolation = "linear" if interpolation is None else interpolation
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {', '.join(map(repr, INTERPOLATIONS))}, got {interpolation!r}")
    return Quantile(float(q), interpolation)


def as_quantile(agg: Any) -> Quantile | QuantileSketch | None:
    """``agg`` as a :class:`Quantile` or :class:`QuantileSketch` when it names one (``"median"`` or a
    :func:`quantile`), else ``None``."""
    if isinstance(agg, (Quantile, QuantileSketch)):
        return agg
    if isinstance(agg, str) and agg == "median":
        return MEDIAN
    return None


def monoid_of(algorithm: str, q: Quantile | QuantileSketch) -> Aggregation | None:
    """The monoid an algorithm of partials runs for ``q``: a sketch's :attr:`QuantileSketch.aggregation` when
    ``algorithm`` names one; ``None`` for ``"auto"`` and ``"sorted_window"`` (the sorted-window route)."""
    if isinstance(q, QuantileSketch) and algorithm not in ("auto", "sorted_window"):
        return q.aggregation
    return None


def refuse_algorithm(algorithm: str, q: Quantile) -> None:
    """Order statistics run on the sorted-window kernel; an algorithm of partials is refused by name."""
    if algorithm not in ("auto", "sorted_window"):
        raise ValueError(
            f"algorithm {algorithm!r} merges partials of a monoid; agg {q.name!r} is an order statistic (not a "
            "monoid) and runs on the sorted-window kernel: pass algorithm='auto' (or 'sorted_window')")


def run_windows(v: np.ndarray, S: np.ndarray, E: np.ndarray, q: Quantile | QuantileSketch | tuple[QuantileSketch, ...],
                skip: bool, mp: int, pool: Any) -> np.ndarray:
    """The kernel over windows ``[S[i], E[i])`` of ``v`` (non-decreasing bounds), split in ranges that run at
    once on this thread and ``pool``'s worker (from :data:`SPLIT_MIN_WINDOWS` windows).

    ``q`` a tuple of sketches of one ``relative_error`` and ``max_buckets``: one pass of the histogram answers
    them all, one column each (shape ``(len(S), len(q))``)."""
    rows = np.arange(len(S) + 1, dtype=np.int64)
    if isinstance(q, QuantileSketch | tuple):
        many = isinstance(q, tuple)
        group = q if many else (q,)
        if len({(g.relative_error, g.max_buckets) for g in group}) != 1:
            raise ValueError("q: sketches answered in one pass share relative_error and max_buckets")
        out2 = np.empty((len(S), len(group)), dtype=np.float64)
        qs, lg, K = np.array([g.q for g in group]), group[0].ln_gamma, group[0].max_buckets
        run_split(lambda i0, i1: window_sketch_quantiles(v, S, E, qs, lg, K, skip, mp, i0, i1, out2),
                  rows, pool=pool, min_rows=SPLIT_MIN_WINDOWS)
        return out2 if many else out2[:, 0]
    out = np.empty(len(S), dtype=np.float64)
    qv, code = float(q.q), q.method
    run_split(lambda i0, i1: window_quantiles(v, S, E, qv, code, skip, mp, i0, i1, out),
              rows, pool=pool, min_rows=SPLIT_MIN_WINDOWS)
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
                           q: Quantile | QuantileSketch | tuple[QuantileSketch, ...], *, missing: str,
                           min_periods: int, pool: Any = None):
    """Window output of ``q`` for every key at once: ``(key, end, values, valid)`` ordered by key then end
    (``values`` one column per sketch when ``q`` is a tuple of them, as :func:`run_windows`).

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
        return z, z.copy(), np.zeros((0, len(q)) if isinstance(q, tuple) else 0), None
    S, E = np.concatenate(Ss), np.concatenate(Es)
    skip = missing == "skip"
    mp = min_periods if skip else 1
    vals = run_windows(V, S, E, q, skip, mp, pool)
    return np.concatenate(keys), np.concatenate(ends), vals, _valid(V, S, E, skip, min_periods)


def keyed_quantile_rows(V: np.ndarray, T: np.ndarray | None, bounds: np.ndarray, window: CountWindow | TimeWindow,
                        q: Quantile | QuantileSketch | tuple[QuantileSketch, ...], *, missing: str,
                        min_periods: int, closed: str, pool: Any = None):
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
