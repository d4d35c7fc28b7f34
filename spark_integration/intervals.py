"""Time windows for Spark timestamps: durations in milliseconds.

When ``order_by`` is a Spark ``TimestampType`` column, the adapter works in
epoch **milliseconds** (a timestamp is floored to its millisecond), so a
window's range, slide and offset are milliseconds too. They may be given as
integers (milliseconds), as :class:`datetime.timedelta` (or numpy's and pandas'),
as Spark interval strings such as ``"1 hour"``, ``"60 seconds"`` or
``"1 minute 30 seconds"``, or in pandas' and polars' spellings (``"5min"``, ``"1h30m"``):
the core's one parser, :mod:`pba_runtime.durations`. Months and years are refused
because their length varies.

Examples
--------
>>> parse_interval("1 hour")
3600000
>>> parse_interval("1 minute 30 seconds")
90000
>>> time_window("60 seconds", "1 second")
TimeWindow(range=60000, slide=1000, offset=0)
>>> parse_interval("2 months")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: interval '2 months': unit 'months' is a calendar unit (months, quarters and years vary in length); ...
"""

from __future__ import annotations

import datetime

import pba_runtime as pr
from pba_runtime.durations import DurationLike, parse_duration

__all__ = ["as_window", "parse_interval", "time_window"]


def parse_interval(value: DurationLike, *, name: str = "interval") -> int:
    """An interval in whole milliseconds (:func:`pba_runtime.durations.parse_duration`).

    Parameters
    ----------
    value : str, int, datetime.timedelta, numpy.timedelta64 or pandas.Timedelta
        ``"1 hour"``, ``"500 milliseconds"``, ``"INTERVAL 2 minutes"``, ``"5min"``; an integer is
        taken as milliseconds already.
    name : str
        The parameter name used in error messages.

    Returns
    -------
    int
        Milliseconds.

    Raises
    ------
    ValueError
        Unparseable text, an unsupported unit, or an interval that is not a
        whole number of milliseconds.

    Examples
    --------
    >>> import datetime
    >>> parse_interval("500 milliseconds"), parse_interval(250), parse_interval(datetime.timedelta(seconds=2))
    (500, 250, 2000)
    """
    return parse_duration(value, name=name, unit="ms", allow_negative=True)


def time_window(range: DurationLike, slide: DurationLike | None = None, offset: DurationLike = 0) -> pr.TimeWindow:
    """A :class:`pba_runtime.TimeWindow` in milliseconds from intervals (``slide`` defaults to ``range``).

    ``offset`` is Spark's ``startTime`` of ``window()``: windows start at ``k*slide + offset``.

    Examples
    --------
    >>> time_window("1 hour", "1 second")
    TimeWindow(range=3600000, slide=1000, offset=0)
    >>> time_window("10 seconds", offset="2 seconds")
    TimeWindow(range=10000, slide=10000, offset=2000)
    """
    return pr.TimeWindow(range=range, slide=slide, offset=offset)


def as_window(window: object) -> pr.CountWindow | pr.TimeWindow:
    """Normalise the ``window`` argument of the adapter.

    Accepts a :class:`~pba_runtime.CountWindow`, a :class:`~pba_runtime.TimeWindow`
    (integers in the unit of ``order_by``: milliseconds for timestamps), a tuple
    ``(range, slide[, offset])`` of intervals, which means a time window, or one
    interval (a string or a timedelta), a tumbling time window as Spark's
    ``window(col, "1 minute")``.

    Examples
    --------
    >>> as_window(("1 minute", "10 seconds"))
    TimeWindow(range=60000, slide=10000, offset=0)
    >>> as_window("1 minute")
    TimeWindow(range=60000, slide=60000, offset=0)
    >>> as_window(pr.CountWindow(range=8, slide=2))
    CountWindow(range=8, slide=2)
    """
    if isinstance(window, (pr.CountWindow, pr.TimeWindow)):
        return window
    if isinstance(window, tuple) and len(window) in (1, 2, 3):
        return time_window(*window)
    if isinstance(window, (str, datetime.timedelta)):
        return time_window(window)
    raise TypeError(
        "window must be a pba_runtime.CountWindow, a pba_runtime.TimeWindow, an interval such as '1 minute' "
        f"(tumbling) or a tuple of intervals (range, slide[, offset]) such as ('1 hour', '1 second'); "
        f"got {type(window).__name__} {window!r}"
    )
