"""Time windows for Spark timestamps: interval strings and ``timedelta`` in milliseconds.

When ``order_by`` is a Spark ``TimestampType`` column, the adapter works in
epoch **milliseconds** (a timestamp is floored to its millisecond), so a
window's range, slide and offset are milliseconds too. They may be given as
integers (milliseconds), as :class:`datetime.timedelta`, or as Spark interval
strings such as ``"1 hour"``, ``"60 seconds"`` or ``"1 minute 30 seconds"``
(the units Spark's ``window()`` accepts: week, day, hour, minute, second,
millisecond, microsecond, singular or plural; months and years are refused
because their length varies).

Examples
--------
>>> parse_interval("1 hour")
3600000
>>> parse_interval("1 minute 30 seconds")
90000
>>> time_window("60 seconds", "1 second")
TimeWindow(range=60000, slide=1000, offset=0)
>>> parse_interval("2 months")
Traceback (most recent call last):
...
ValueError: interval '2 months': unit 'months' is not supported; accepted units: week, day, hour, minute, ...)
"""

from __future__ import annotations

import datetime as _dt
import numbers
import re

import pba_runtime as pr

__all__ = ["as_window", "parse_interval", "time_window"]

_UNIT_US = {
    "week": 7 * 86_400_000_000,
    "day": 86_400_000_000,
    "hour": 3_600_000_000,
    "minute": 60_000_000,
    "second": 1_000_000,
    "millisecond": 1_000,
    "microsecond": 1,
}
_ALIASES = {
    "weeks": "week", "days": "day", "hours": "hour", "minutes": "minute", "seconds": "second",
    "milliseconds": "millisecond", "microseconds": "microsecond",
    "h": "hour", "min": "minute", "mins": "minute", "s": "second", "sec": "second", "secs": "second",
    "ms": "millisecond", "us": "microsecond",
}
_ACCEPTED = "week, day, hour, minute, second, millisecond, microsecond (singular or plural, or an 'INTERVAL ...' prefix)"
_PAIR = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")


def parse_interval(value: str | int | _dt.timedelta, *, name: str = "interval") -> int:
    """An interval in whole milliseconds.

    Parameters
    ----------
    value : str, int or datetime.timedelta
        ``"1 hour"``, ``"500 milliseconds"``, ``"INTERVAL 2 minutes"``; an integer is
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
    >>> parse_interval("500 milliseconds"), parse_interval(250), parse_interval(_dt.timedelta(seconds=2))
    (500, 250, 2000)
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be milliseconds (int), a timedelta or an interval string, got bool {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, _dt.timedelta):
        us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return _whole_ms(us, value, name)
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be milliseconds (int), a timedelta or an interval string such as '1 hour', "
            f"got {type(value).__name__} {value!r}"
        )
    text = value.strip()
    if text.lower().startswith("interval "):
        text = text[len("interval "):]
    pos, total, seen = 0, 0, False
    while pos < len(text):
        m = _PAIR.match(text, pos)
        if not m:
            raise ValueError(
                f"{name} {value!r} is not an interval; expected '<number> <unit>' pairs such as '1 hour' "
                f"or '1 minute 30 seconds'; units: {_ACCEPTED}"
            )
        number, unit = m.group(1), m.group(2).lower()
        unit_key = _ALIASES.get(unit, unit)
        if unit_key not in _UNIT_US:
            raise ValueError(f"{name} {value!r}: unit {unit!r} is not supported; accepted units: {_ACCEPTED}")
        if "." in number:
            whole, frac = number.lstrip("+-").split(".")
            sign = -1 if number.startswith("-") else 1
            scale = _UNIT_US[unit_key]
            us_frac = int(frac) * scale
            if us_frac % 10 ** len(frac):
                raise ValueError(f"{name} {value!r} is not a whole number of microseconds")
            total += sign * (int(whole) * scale + us_frac // 10 ** len(frac))
        else:
            total += int(number) * _UNIT_US[unit_key]
        seen = True
        pos = m.end()
    if not seen:
        raise ValueError(f"{name} {value!r} is empty; expected an interval such as '1 hour'")
    return _whole_ms(total, value, name)


def _whole_ms(us: int, value: object, name: str) -> int:
    if us % 1000:
        raise ValueError(f"{name} {value!r} is not a whole number of milliseconds (the adapter's time unit)")
    return us // 1000


def time_window(range: str | int | _dt.timedelta, slide: str | int | _dt.timedelta | None = None,
                offset: str | int | _dt.timedelta = 0) -> pr.TimeWindow:
    """A :class:`pba_runtime.TimeWindow` in milliseconds from intervals (``slide`` defaults to ``range``).

    ``offset`` is Spark's ``startTime`` of ``window()``: windows start at ``k*slide + offset``.

    Examples
    --------
    >>> time_window("1 hour", "1 second")
    TimeWindow(range=3600000, slide=1000, offset=0)
    >>> time_window("10 seconds", offset="2 seconds")
    TimeWindow(range=10000, slide=10000, offset=2000)
    """
    r = parse_interval(range, name="range")
    s = r if slide is None else parse_interval(slide, name="slide")
    return pr.TimeWindow(range=r, slide=s, offset=parse_interval(offset, name="offset"))


def as_window(window: object) -> pr.CountWindow | pr.TimeWindow:
    """Normalise the ``window`` argument of the adapter.

    Accepts a :class:`~pba_runtime.CountWindow`, a :class:`~pba_runtime.TimeWindow`
    (integers in the unit of ``order_by``: milliseconds for timestamps), or a
    tuple ``(range, slide[, offset])`` of intervals, which means a time window.

    Examples
    --------
    >>> as_window(("1 minute", "10 seconds"))
    TimeWindow(range=60000, slide=10000, offset=0)
    >>> as_window(pr.CountWindow(range=8, slide=2))
    CountWindow(range=8, slide=2)
    """
    if isinstance(window, (pr.CountWindow, pr.TimeWindow)):
        return window
    if isinstance(window, tuple) and len(window) in (2, 3):
        return time_window(*window)
    raise TypeError(
        "window must be a pba_runtime.CountWindow, a pba_runtime.TimeWindow or a tuple of intervals "
        f"(range, slide[, offset]) such as ('1 hour', '1 second'); got {type(window).__name__} {window!r}"
    )
