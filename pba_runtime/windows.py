"""Window definitions: frozen, validated configuration objects.

A sliding window ``W[r, s]`` has a range ``r`` and a slide ``s`` (positive
integers, ``r >= s``). Window ``k`` covers ``[k*s + offset, k*s + offset + r)``
and is reported with its exclusive end ``k*s + offset + r``
(see ``docs/semantics.md``).

Every window is cut into slices of one slide each (Cutty slicing): window ``k``
covers the ``q = r // s`` whole slices ``k .. k+q-1`` and, when ``m = r % s`` is
not zero, the first ``m`` units of slice ``k+q`` (its *head*). The algorithms
only ever merge slice aggregations; this module owns that arithmetic.

``CountWindow(range)`` alone slides by 1 (pandas' ``rolling(n)``); ``TimeWindow(range)``
alone is tumbling (slide = range, Spark's ``window(col, "1 minute")``). A time window's
range, slide and offset may be durations (:mod:`pba_runtime.durations`): ``"5min"``,
``"1 minute"``, a ``timedelta``; against integer timestamps they mean milliseconds.

Examples
--------
>>> w = CountWindow(range=10, slide=3)
>>> w.slices_per_window, w.head_units
(3, 1)
>>> CountWindow(4)
CountWindow(range=4, slide=1)
>>> TimeWindow(range=3_600_000, slide=1_000).is_tumbling
False
>>> TimeWindow("1min")
TimeWindow(range=60000, slide=60000, offset=0)
>>> CountWindow(range=0, slide=1)
Traceback (most recent call last):
...
ValueError: range must be a positive integer, got 0
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .durations import Duration, DurationLike, as_duration, check_unit

__all__ = ["CountWindow", "TimeWindow", "Window", "validate_window", "time_slices", "window_spans", "INT64_MIN", "INT64_MAX"]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


@dataclass(frozen=True)
class _SlidingWindow:
    range: int
    slide: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "range", _positive_int("range", self.range))
        object.__setattr__(self, "slide", _positive_int("slide", self.slide))
        if self.slide > self.range:
            raise ValueError(
                f"slide must be <= range (a window W[r, s] needs r >= s), got range={self.range}, slide={self.slide}"
            )

    @property
    def slices_per_window(self) -> int:
        """``q = range // slide``: whole slices in one window."""
        return self.range // self.slide

    @property
    def head_units(self) -> int:
        """``m = range % slide``: units of one more slice that a window covers."""
        return self.range % self.slide

    @property
    def is_tumbling(self) -> bool:
        return self.range == self.slide


@dataclass(frozen=True)
class CountWindow(_SlidingWindow):
    """Count-based sliding window: units are 0-based stream positions, per key.

    Window ``k`` covers positions ``[k*slide, k*slide + range)``, is emitted when
    position ``k*slide + range - 1`` arrives, and is reported with end
    ``k*slide + range`` (the number of values seen). ``slide`` defaults to 1
    (pandas' ``rolling(n)`` step, polars' ``rolling``).

    Examples
    --------
    >>> CountWindow(range=1024)
    CountWindow(range=1024, slide=1)
    >>> CountWindow(range=4, slide=2).windows_for(9)
    3
    """

    slide: int = 1

    def windows_for(self, n_values: int) -> int:
        """Number of windows a stream of ``n_values`` values yields."""
        return max(0, (n_values - self.range) // self.slide + 1)


@dataclass(frozen=True, repr=False)
class TimeWindow(_SlidingWindow):
    """Time-based sliding window over integer timestamps (for example milliseconds).

    Window ``k`` (any integer) covers ``[k*slide + offset, k*slide + offset + range)``;
    it is emitted once a tuple at or past its end arrives (or at ``flush``), and
    only if it holds at least one tuple.

    Parameters
    ----------
    range, slide, offset
        Integers in the timestamps' own unit, or durations (:mod:`pba_runtime.durations`):
        ``"250ms"``, ``"5min"``, ``"1h30m"``, ``"1 minute"``, a ``datetime.timedelta``,
        ``numpy.timedelta64`` or ``pandas.Timedelta``, resolved to integers of ``unit``.
        ``slide`` defaults to ``range`` (a tumbling window); ``offset`` to 0 (it is kept
        modulo ``slide``, so it may be negative). A duration that is not a whole number
        of ``unit``, or a range or slide that is not positive, raises a ``ValueError``
        naming the parameter.
    unit : {"ms", "us", "ns", "s", "D"}
        What the durations resolve to: the timestamps' unit. Default milliseconds (epoch ms).

    The attributes ``range``, ``slide`` and ``offset`` are those integers; the durations as
    given stay on the window (``label``, ``durations``) and :meth:`in_unit` resolves them
    to another unit.

    Examples
    --------
    >>> w = TimeWindow(range=60_000, slide=1_000)
    >>> w.slice_of(61_500), w.window_end(0)
    (61, 60000)
    >>> w = TimeWindow("5min", slide="1 minute")
    >>> w, w.label
    (TimeWindow(range=300000, slide=60000, offset=0), '5min')
    >>> w.in_unit("s")
    TimeWindow(range=300, slide=60, offset=0, unit='s')
    >>> TimeWindow("1h", "90us")
    Traceback (most recent call last):
    ...
    ValueError: slide '90us' is not a whole number of milliseconds (against integer timestamps a duration means milliseconds)
    """

    slide: int = None  # type: ignore[assignment]  # None: the range (a tumbling window)
    offset: int = 0
    unit: str = field(default="ms", kw_only=True)
    # the durations as given (range, slide, offset): the labels and exact lengths, for in_unit
    _durations: tuple[Duration, Duration, Duration] | None = field(default=None, init=False, repr=False,
                                                                   compare=False)

    if TYPE_CHECKING:  # what the constructor takes (the dataclass's fields hold the resolved integers)
        def __init__(self, range: DurationLike, slide: DurationLike | None = None, offset: DurationLike = 0, *,
                     unit: str = "ms") -> None: ...

    def __post_init__(self) -> None:
        unit = check_unit(self.unit)
        r = as_duration(self.range, name="range")
        s = r if self.slide is None else as_duration(self.slide, name="slide")
        o = as_duration(self.offset, name="offset", allow_negative=True)
        object.__setattr__(self, "range", r.in_unit(unit, name="range"))
        object.__setattr__(self, "slide", s.in_unit(unit, name="slide"))
        offset = o.in_unit(unit, name="offset")
        object.__setattr__(self, "_durations", (r, s, o))
        super().__post_init__()
        # Offsets are equivalent modulo the slide; keep the canonical one.
        object.__setattr__(self, "offset", offset % self.slide)

    def __repr__(self) -> str:
        unit = "" if self.unit == "ms" else f", unit={self.unit!r}"
        return f"TimeWindow(range={self.range}, slide={self.slide}, offset={self.offset}{unit})"

    @property
    def durations(self) -> dict[str, Duration]:
        """The range, slide and offset as given: exact lengths (``Duration.ns``; ``None`` for a bare
        integer, in the timestamps' unit) and the user's spellings (``Duration.label``)."""
        given = self._durations or tuple(Duration(None, v, str(v)) for v in (self.range, self.slide, self.offset))
        return dict(zip(("range", "slide", "offset"), given))

    @property
    def label(self) -> str:
        """The range as the user wrote it: ``"5min"``, ``"1 minute"``, ``"60000"`` (a timedelta: ``"5min"``).

        Examples
        --------
        >>> TimeWindow("60s").label, TimeWindow(60_000).label
        ('60s', '60000')
        """
        return self.durations["range"].label

    def in_unit(self, unit: str) -> TimeWindow:
        """This window with its durations resolved to integers of ``unit`` (``"ns"``, ``"us"``, ``"ms"``, ``"s"``, ``"D"``).

        Durations are exact; an integer given as such stays as it is (it is in the timestamps' unit).
        A duration that is not a whole number of ``unit`` raises a ``ValueError`` naming the parameter.

        Examples
        --------
        >>> import datetime
        >>> TimeWindow(datetime.timedelta(minutes=1), "10s").in_unit("us")
        TimeWindow(range=60000000, slide=10000000, offset=0, unit='us')
        """
        if unit == self.unit:
            return self
        r, s, o = self.durations.values()
        return TimeWindow(r, s, o, unit=unit)

    @functools.cached_property  # per-tuple checks read it (frozen: cached_property writes __dict__ directly)
    def timestamp_range(self) -> tuple[int, int]:
        """The timestamps this window accepts, ``(lowest, highest)``, both inclusive.

        Every window holding such a timestamp has bounds that fit in int64, with room
        for the slicing arithmetic (``range + 2 * slide`` from either end); the
        operators refuse other timestamps with a ``ValueError`` naming ``timestamps``.

        Examples
        --------
        >>> lo, hi = TimeWindow(range=100, slide=10).timestamp_range
        >>> lo == -2**63 + 120, hi == 2**63 - 1 - 120
        (True, True)
        """
        margin = self.range + 2 * self.slide
        return INT64_MIN + margin, INT64_MAX - margin

    def slice_of(self, timestamp: int) -> int:
        """Index of the slice that holds ``timestamp``."""
        return (timestamp - self.offset) // self.slide

    def window_end(self, k: int) -> int:
        """Exclusive end of window ``k``."""
        return k * self.slide + self.offset + self.range


Window = CountWindow | TimeWindow


def validate_window(window: object) -> Window:
    """Return ``window`` if it is a :class:`CountWindow` or :class:`TimeWindow`, else raise ``TypeError``."""
    if not isinstance(window, (CountWindow, TimeWindow)):
        raise TypeError(
            f"window must be a CountWindow or TimeWindow, got {type(window).__name__}; "
            "e.g. pr.CountWindow(range=1024, slide=1)"
        )
    return window


def time_slices(ts, s: int, off: int, r: int, last_slice: int, has_last: bool):
    """Each tuple's slice and the tuples where a time window's slicing restarts (the numpy reference).

    ``G[i] = (ts[i] - off) // s``. A tuple *starts an episode* when the first window holding it,
    ``(ts[i] - off - r) // s + 1``, begins after the previous tuple's slice (``last_slice``, the slice
    of the last tuple before the batch, when ``has_last``): every window holding an older tuple is
    then complete, and the slicing starts afresh. Returns ``(G, starts)``, ``starts`` ascending.
    ``pba_runtime.kernels.time_slicing.time_slices`` is the compiled twin (one pass, no temporaries).

    Examples
    --------
    >>> import numpy as np
    >>> G, starts = time_slices(np.array([0, 3, 12, 15, 200]), 10, 0, 30, 0, False)
    >>> G.tolist(), starts.tolist()
    ([0, 0, 1, 1, 20], [0, 4])
    """
    import numpy as np

    G = (ts - off) // s
    first_k = (ts - off - r) // s + 1  # the first window holding each tuple
    fresh = np.empty(len(ts), dtype=bool)
    fresh[1:] = first_k[1:] > G[:-1]
    if len(ts):
        fresh[0] = not has_last or first_k[0] > last_slice
    return G, np.flatnonzero(fresh)


def window_spans(window: Window, n: int, timestamps=None):
    """Every window a stream of ``n`` values emits, as rows: ``(ends, S, E)``, window ``i`` the rows
    ``[S[i], E[i])`` with exclusive end ``ends[i]``; ``S`` and ``E`` never decrease.

    Count windows: the full windows, ends ``range, range + slide, ...``. Time windows (``timestamps``
    non-decreasing int64): every window ``[k*slide + offset, ... + range)`` that holds a tuple, as
    ``docs/semantics.md`` emits them (end of stream included). For the kernels that need each window's
    values rather than its slices (the order statistics).

    Examples
    --------
    >>> import numpy as np
    >>> [a.tolist() for a in window_spans(CountWindow(3, 2), 7)]
    [[3, 5, 7], [0, 2, 4], [3, 5, 7]]
    >>> [a.tolist() for a in window_spans(TimeWindow(10, 5), 3, np.array([0, 3, 27]))]
    [[5, 10, 30, 35], [0, 0, 2, 2], [2, 2, 3, 3]]
    """
    import numpy as np

    r, s = int(window.range), int(window.slide)
    if isinstance(window, CountWindow):
        m = max(0, (n - r) // s + 1)
        S = np.arange(m, dtype=np.int64) * s
        return S + r, S, S + r
    t = np.asarray(timestamps, dtype=np.int64)
    if not len(t):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z.copy()
    off = int(window.offset)
    jl = (t - off - r) // s + 1  # the windows holding tuple i: jl[i] .. jh[i], both non-decreasing
    jh = (t - off) // s
    new_run = np.ones(len(t), dtype=bool)  # runs of overlapping or touching window ranges
    new_run[1:] = jl[1:] > jh[:-1] + 1
    first = np.flatnonzero(new_run)
    lo = jl[first]
    hi = np.maximum.reduceat(jh, first)
    counts = hi - lo + 1
    j = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(int(counts.sum()))
    start = j * s + off
    S = np.searchsorted(t, start, side="left")
    E = np.searchsorted(t, start + r, side="left")
    keep = E > S
    return (start + r)[keep], S[keep], E[keep]
