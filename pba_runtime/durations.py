"""Durations: the one parser behind every time window's ``range``, ``slide`` and ``offset``.

The core (:class:`~pba_runtime.TimeWindow`), the ``pba-run`` options (``--range``, ``--slide``,
``--offset``, ``--allowed-lateness``) and the Spark adapter's windows all read a duration here
(``docs/semantics.md``, *Durations*). A duration is

* an integer: a number of the timestamps' own unit, kept as it is (``1000``, ``"1000"``);
* a ``datetime.timedelta``, ``numpy.timedelta64`` or ``pandas.Timedelta`` (exact, to the nanosecond);
* a string in pandas' and polars' spellings, ``"250ms"``, ``"60s"``, ``"5min"``, ``"1h30m"``, ``"1d"``,
  ``"1.5s"``, or Spark's interval strings, ``"1 minute"``, ``"2 hours"``, ``"INTERVAL 1 minute 30 seconds"``.
  Units: ``ns``, ``us``, ``ms``, ``s``, ``m``/``min``, ``h``, ``d``, ``w`` and their long names (singular or
  plural). Months, quarters and years are refused: their length varies with the calendar.

:func:`as_duration` keeps the exact length (integer nanoseconds) and the user's spelling (the label);
:meth:`Duration.in_unit` gives it as an integer of a timestamp unit, refusing a duration that is not a whole
number of that unit. Against integer timestamps a duration means milliseconds (the project's epoch-ms
convention); against a datetime column it is exact in that column's unit. Importing this module imports
neither numpy nor pandas: their values are recognised only once the caller has imported them.

Examples
--------
>>> parse_duration("1h30m", name="range")
5400000
>>> parse_duration("1 minute", name="range"), parse_duration(250, name="slide")
(60000, 250)
>>> import datetime
>>> parse_duration(datetime.timedelta(seconds=2), name="slide", unit="us")
2000000
>>> d = as_duration("5min", name="range")
>>> d.label, d.ns, d.in_unit("s", name="range")
('5min', 300000000000, 300)
>>> parse_duration("250us", name="slide")
Traceback (most recent call last):
...
ValueError: slide '250us' is not a whole number of milliseconds (against integer timestamps a duration means milliseconds)
>>> parse_duration("1mo", name="range")
Traceback (most recent call last):
...
ValueError: range '1mo': unit 'mo' is a calendar unit (months, quarters and years vary in length); give a fixed length such as '30d'
"""

from __future__ import annotations

import datetime as _dt
import numbers
import re
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import numpy

__all__ = ["Duration", "DurationLike", "TIME_UNITS", "as_duration", "check_unit", "format_duration",
           "parse_duration"]

#: Nanoseconds in one of each timestamp unit a window resolves to (numpy's and Arrow's datetime units;
#: ``"D"``, days, is a date column's).
TIME_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "D": 86_400_000_000_000}
_UNIT_WORDS = {"ns": "nanoseconds", "us": "microseconds", "ms": "milliseconds", "s": "seconds", "D": "days"}

_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "min": 60_000_000_000,
       "h": 3_600_000_000_000, "d": 86_400_000_000_000, "w": 604_800_000_000_000}
_SPELLINGS = {
    "ns": ("ns", "nano", "nanos", "nanosecond", "nanoseconds"),
    "us": ("us", "µs", "micro", "micros", "microsecond", "microseconds"),
    "ms": ("ms", "milli", "millis", "millisecond", "milliseconds", "msec", "msecs"),
    "s": ("s", "sec", "secs", "second", "seconds"),
    "min": ("m", "min", "mins", "minute", "minutes"),
    "h": ("h", "hr", "hrs", "hour", "hours"),
    "d": ("d", "day", "days"),
    "w": ("w", "week", "weeks"),
}
_UNIT_OF = {spelling: unit for unit, spellings in _SPELLINGS.items() for spelling in spellings}
_CALENDAR = ("mo", "month", "months", "q", "quarter", "quarters", "y", "yr", "yrs", "year", "years")
_ACCEPTED = "ns, us, ms, s, m or min, h, d, w (or their names: '1 minute', '2 hours')"
_PART = re.compile(r"\s*(\d[\d_]*(?:\.\d*)?|\.\d+)\s*([^\W\d_]+)\s*,?")
_WHAT = ("an integer (the timestamps' unit), a duration string such as '5min', '1h30m' or '1 minute', "
         "or a datetime.timedelta / numpy.timedelta64 / pandas.Timedelta")

#: What :func:`as_duration` accepts (a ``pandas.Timedelta`` is a ``datetime.timedelta``).
DurationLike: TypeAlias = "int | str | _dt.timedelta | numpy.timedelta64 | Duration"


@dataclass(frozen=True)
class Duration:
    """A duration as the user gave it.

    ``ns``: its exact length in nanoseconds, or ``None`` for a bare integer, which is a number of the
    timestamps' own unit (``count``) whatever that unit is. ``label``: the spelling the user wrote
    (``"5min"``, ``"1 minute"``, ``"1000"``; a timedelta's is :func:`format_duration`'s).

    Examples
    --------
    >>> as_duration("90s", name="range").in_unit("ms", name="range")
    90000
    >>> as_duration(7, name="range").in_unit("ns", name="range")  # a bare integer is in the timestamps' unit
    7
    """

    ns: int | None
    count: int | None
    label: str

    def in_unit(self, unit: str, *, name: str = "duration") -> int:
        """This duration as an integer number of ``unit`` (``"ns"``, ``"us"``, ``"ms"``, ``"s"``, ``"D"``).

        A bare integer is returned as it is. A duration that is not a whole number of ``unit`` raises a
        ``ValueError`` naming ``name``.
        """
        if self.ns is None:
            return self.count  # type: ignore[return-value]
        per = _unit_ns(unit)
        whole, rest = divmod(self.ns, per)
        if rest:
            why = "against integer timestamps a duration means milliseconds" if unit == "ms" else f"the unit is {unit!r}"
            raise ValueError(f"{name} {self.label!r} is not a whole number of {_UNIT_WORDS[unit]} ({why})")
        return whole


def check_unit(unit: str) -> str:
    """``unit`` if it is a timestamp unit a duration resolves to (:data:`TIME_UNITS`), else ``ValueError``."""
    if not isinstance(unit, str) or unit not in TIME_UNITS:
        raise ValueError(f"unit must be one of {', '.join(map(repr, TIME_UNITS))}, got {unit!r}")
    return unit


def _unit_ns(unit: str) -> int:
    return TIME_UNITS[check_unit(unit)]


def as_duration(value: DurationLike, *, name: str = "duration", allow_negative: bool = False) -> Duration:
    """``value`` read as a :class:`Duration`; ``name`` (``"range"``, ``"slide"``, ``"offset"``) names it in errors.

    Zero and negative durations are refused (``ValueError``) unless ``allow_negative`` (zero and negative
    accepted: an offset). Unknown types raise ``TypeError``.

    Examples
    --------
    >>> as_duration("1 minute 30 seconds", name="range")
    Duration(ns=90000000000, count=None, label='1 minute 30 seconds')
    >>> as_duration("0s", name="slide")
    Traceback (most recent call last):
    ...
    ValueError: slide must be a positive duration, got '0s'
    """
    d = _read(value, name)
    n = d.ns if d.ns is not None else d.count
    if not allow_negative and n <= 0:  # type: ignore[operator]
        if d.ns is None:
            raise ValueError(f"{name} must be a positive integer, got {d.count}")
        raise ValueError(f"{name} must be a positive duration, got {d.label!r}")
    return d


def parse_duration(value: DurationLike, *, name: str = "duration", unit: str = "ms",
                   allow_negative: bool = False) -> int:
    """``value`` as an integer number of ``unit`` (milliseconds by default: integer timestamps' unit).

    :func:`as_duration` then :meth:`Duration.in_unit`; a bare integer is kept as it is.

    Examples
    --------
    >>> parse_duration("1.5s"), parse_duration("2 hours"), parse_duration("500", name="slide")
    (1500, 7200000, 500)
    """
    return as_duration(value, name=name, allow_negative=allow_negative).in_unit(unit, name=name)


def _read(value: Any, name: str) -> Duration:
    if isinstance(value, Duration):
        return value
    if isinstance(value, bool):
        raise TypeError(f"{name} must be {_WHAT}; got bool {value!r}")
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.timedelta64):  # before Integral: numpy's is a signedinteger
        return _from_timedelta64(np, value, name)
    if isinstance(value, numbers.Integral):
        return Duration(None, int(value), str(int(value)))
    if isinstance(value, str):
        return _from_text(value, name)
    pd = sys.modules.get("pandas")  # a pandas.Timedelta is a timedelta with nanoseconds: read it first
    if pd is not None and isinstance(value, pd.Timedelta):
        return _from_ns(int(value.value), name)
    if isinstance(value, _dt.timedelta):
        return _from_ns(((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds) * 1_000, name)
    if pd is not None and value is pd.NaT:
        raise ValueError(f"{name} is NaT (not a time), not a duration")
    raise TypeError(f"{name} must be {_WHAT}; got {type(value).__name__} {value!r}")


def _from_ns(ns: int, name: str) -> Duration:
    return Duration(ns, None, format_duration(ns))


def _from_timedelta64(np: Any, value: Any, name: str) -> Duration:
    if np.isnat(value):
        raise ValueError(f"{name} is NaT (not a time), not a duration")
    unit, step = np.datetime_data(value.dtype)
    if unit in ("Y", "M"):
        raise ValueError(f"{name} {value!r}: unit {unit!r} is a calendar unit (months and years vary in length); "
                         "give a fixed length such as np.timedelta64(30, 'D')")
    if unit == "generic":
        raise ValueError(f"{name} {value!r} has no unit; give one, e.g. np.timedelta64(5, 'm')")
    per_ns = {"W": _NS["w"], "D": _NS["d"], "h": _NS["h"], "m": _NS["min"], "s": _NS["s"], "ms": _NS["ms"],
              "us": _NS["us"], "ns": 1, "ps": Fraction(1, 1_000), "fs": Fraction(1, 10**6),
              "as": Fraction(1, 10**9)}[unit]
    ns = int(value.astype(np.int64)) * step * per_ns
    if Fraction(ns).denominator != 1:
        raise ValueError(f"{name} {value!r} is not a whole number of nanoseconds")
    return _from_ns(int(ns), name)


def _from_text(value: str, name: str) -> Duration:
    text = value.strip()
    if text.lower().startswith("interval "):  # Spark SQL's INTERVAL literal
        text = text[len("interval "):].strip()
    sign = 1
    if text and text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        text = text[1:].strip()
    if re.fullmatch(r"\d[\d_]*", text):  # a bare integer: the timestamps' own unit
        return Duration(None, sign * int(text.replace("_", "")), value.strip())
    pos, total = 0, Fraction(0)
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m:
            raise ValueError(
                f"{name} {value!r} is not a duration; expected an integer (the timestamps' unit) or "
                f"<number><unit> parts such as '250ms', '5min', '1h30m' or '1 minute 30 seconds'; units: {_ACCEPTED}"
            )
        number, spelled = m.group(1).replace("_", ""), m.group(2)
        total += Fraction(number) * _unit_of_spelling(spelled, value, name)
        pos = m.end()
    if not text:
        raise ValueError(f"{name} {value!r} is empty; expected a duration such as '5min' or an integer")
    if total.denominator != 1:
        raise ValueError(f"{name} {value!r} is not a whole number of nanoseconds")
    return Duration(sign * int(total), None, value.strip())


def _unit_of_spelling(spelled: str, value: str, name: str) -> int:
    if spelled in ("M", "Y", "Q"):  # pandas' offset aliases: month, year, quarter
        raise ValueError(
            f"{name} {value!r}: unit {spelled!r} is a calendar unit in pandas (month, year or quarter, which vary "
            "in length); for minutes write 'min' or 'm'"
        )
    low = spelled.lower()
    if low in _CALENDAR:
        raise ValueError(
            f"{name} {value!r}: unit {spelled!r} is a calendar unit (months, quarters and years vary in length); "
            "give a fixed length such as '30d'"
        )
    if low == "i":
        raise ValueError(f"{name} {value!r}: unit 'i' counts rows (polars); for a window of rows use a CountWindow")
    unit = _UNIT_OF.get(low)
    if unit is None:
        raise ValueError(f"{name} {value!r}: unit {spelled!r} is not supported; accepted units: {_ACCEPTED}")
    return _NS[unit]


def format_duration(ns: int) -> str:
    """A duration of ``ns`` nanoseconds in pandas' spelling, largest units first (a timedelta's label).

    Examples
    --------
    >>> format_duration(300_000_000_000), format_duration(5_400_000_000_000), format_duration(1_500_000)
    ('5min', '1h30min', '1ms500us')
    """
    if ns == 0:
        return "0s"
    sign, ns = ("-" if ns < 0 else ""), abs(ns)
    parts = []
    for unit in ("d", "h", "min", "s", "ms", "us", "ns"):
        n, ns = divmod(ns, _NS[unit])
        if n:
            parts.append(f"{n}{unit}")
    return sign + "".join(parts)
