"""Sources: where a job's tuples come from, in batches of numpy arrays.

A source yields :class:`Batch` objects: ``keys`` (int64 or str), ``values``
(float64), ``timestamps`` (int64 epoch milliseconds, or ``None``), the source
*position* after the batch (what a checkpoint stores to resume from) and the
batch's arrival time (``time.monotonic()`` when its first tuple was read,
for latency metrics).

Synthetic generators, modelled on the data sets of the PBA paper (section 5),
deterministic from a seed and from the position alone (the stream is generated
in fixed blocks, each from ``numpy.random.default_rng([seed, block])``), so a
resumed job regenerates exactly the tuples it has not seen:

* :class:`Debs14Source`: DEBS 2014 Grand Challenge smart plugs: power loads of
  ``plugs`` plugs (the key), with a slight skew of tuples per plug; each plug
  reports about once a second.
* :class:`Debs12Source`: DEBS 2012 Grand Challenge manufacturing equipment:
  ``sensors`` energy sensors (``mf01``, ``mf02``, ...), one record every 10 ms
  (100 records/s), each record one tuple per sensor with the same timestamp.

Both can shuffle event time (``disorder``): a fraction of the tuples carry a
timestamp up to ``disorder`` ms in the past, so they arrive out of order.

Text sources read a file (resumable: the position is a byte offset) or stdin
(``"-"``, not resumable; a batch is cut after ``batch_size`` lines or
``linger`` seconds, whichever comes first):

* :class:`CsvSource`: a CSV file with a header row.
* :class:`JsonlSource`: JSON lines, one object per line.

Keys of text sources are strings, in ``str_`` arrays, or in ``object`` arrays
for a batch where a key holds a NUL character: a fixed-width ``str_`` array
drops trailing NULs and would merge key ``"a\\x00"`` into ``"a"``. A line that cannot be read (not UTF-8, a CSV row
with too few or too many columns, a field over :data:`CSV_FIELD_LIMIT`
characters, a number out of float64's range) is a :class:`UserError` naming
the line.

Examples
--------
>>> src = Debs14Source(plugs=4, tuples=10, seed=1)
>>> [b.keys.tolist() for b in src.batches(batch_size=6)]
[[3, 1, 2, 1, 2, 2], [2, 3, 0, 0]]
>>> b = next(Debs12Source(sensors=2, tuples=4).batches())
>>> b.keys.tolist(), (b.timestamps - b.timestamps[0]).tolist(), b.position
(['mf01', 'mf02', 'mf01', 'mf02'], [0, 0, 10, 10], 4)
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from . import generated_blocks
from .errors import UserError

__all__ = [
    "Batch",
    "Source",
    "Debs14Source",
    "Debs12Source",
    "CsvSource",
    "JsonlSource",
    "DEFAULT_BATCH_SIZE",
    "key_column",
]

#: Tuples per batch read from a source (the unit shipped to task slots).
DEFAULT_BATCH_SIZE = 65_536

#: Tuples per generated block: generated data depends on ``(seed, block)`` only.
GENERATOR_BLOCK = 65_536

#: Longest CSV field (characters) a CSV source reads (the :mod:`csv` module's default limit).
CSV_FIELD_LIMIT = csv.field_size_limit()


@dataclass
class Batch:
    """A batch of tuples, column-wise.

    Attributes
    ----------
    keys : numpy.ndarray
        int64 keys, or string keys (``str_``, or ``object`` arrays of ``str``
        when a key holds a NUL character).
    values : numpy.ndarray
        float64 values.
    timestamps : numpy.ndarray or None
        int64 event timestamps (epoch milliseconds).
    position : object
        Source position after this batch (picklable; what a checkpoint stores).
    arrival : float
        ``time.monotonic()`` when the batch's first tuple was read.
    """

    keys: np.ndarray
    values: np.ndarray
    timestamps: np.ndarray | None
    position: Any
    arrival: float

    def __len__(self) -> int:
        return len(self.values)


class Source:
    """Base class of the sources.

    Subclasses set ``kind`` and ``resumable`` and implement :meth:`batches`.
    """

    kind: str = ""
    #: A checkpoint can restart it from a position.
    resumable: bool = True
    #: Unit of :meth:`progress` (shown on the progress bar).
    progress_unit: str = "tuples"
    #: Whether the source gives timestamps.
    has_timestamps: bool = True
    #: Why :meth:`batches` ended before the stream did (an endless source's :meth:`stop`), or ``None``.
    halted: str | None = None
    #: Whether :meth:`stop` ends the stream cleanly (a log source: ``pba-run`` calls it on SIGTERM).
    stoppable: bool = False
    #: What made :meth:`batches` halt, when it was not a stop (a lost broker), or ``None``.
    failure: BaseException | None = None
    #: Entries read but not readable as tuples (sent to a side output), so far.
    malformed: int = 0

    def describe(self) -> dict[str, Any]:
        """The parameters that define the stream (a resumed job must match them)."""
        raise NotImplementedError

    def batches(self, start: Any = None, batch_size: int = DEFAULT_BATCH_SIZE, *,
                timestamps: bool = True) -> Iterator[Batch]:
        """Yield batches from ``start`` (a position from an earlier batch; ``None``: the beginning).

        ``timestamps=False``: the caller does not need them (count windows); a source may then leave
        ``Batch.timestamps`` ``None`` (the generators do: they then skip making them).
        """
        raise NotImplementedError

    @property
    def total(self) -> int | None:
        """End of the progress scale, or ``None`` for an unbounded source."""
        return None

    def progress(self, position: Any) -> int:
        """Where ``position`` is on the progress scale."""
        return 0 if position is None else int(position)

    def close(self) -> None:
        """Release files."""

    def stop(self, why: str = "stopped") -> None:
        """Ask :meth:`batches` to end after the batch it is reading (:attr:`stoppable` sources)."""
        raise NotImplementedError(f"the {self.kind} source cannot be stopped")

    def warm(self) -> None:
        """Load what the source compiles (a job calls it on a thread while its task slots start; the source
        runs without it until then). Nothing here; :class:`Debs14Source` loads its generator's loop."""


def _check_count(name: str, value: Any, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (0 if allow_zero else 1):
        what = "a non-negative" if allow_zero else "a positive"
        raise UserError(f"{name} must be {what} integer, got {value!r}")
    return int(value)


class _Generator(Source):
    """Block-wise deterministic generator; subclasses implement ``_block(b)``."""

    def __init__(self, tuples: int | None, seed: int, disorder: int, disorder_fraction: float):
        self.tuples = None if tuples is None else _check_count("tuples", tuples, allow_zero=True)
        self.seed = _check_count("seed", seed, allow_zero=True)
        self.disorder = _check_count("disorder", disorder, allow_zero=True)
        if not (isinstance(disorder_fraction, (int, float)) and 0.0 <= disorder_fraction <= 1.0):
            raise UserError(f"disorder fraction must be a number in [0, 1], got {disorder_fraction!r}")
        self.disorder_fraction = float(disorder_fraction)
        self._cache: tuple[int, tuple] | None = None

    @property
    def total(self) -> int | None:
        return self.tuples

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self.seed, "disorder": self.disorder,
                "disorder_fraction": self.disorder_fraction, **self._params()}

    def _params(self) -> dict[str, Any]:
        return {}

    def _block(self, b: int, timestamps: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def _disorder(self, rng: np.random.Generator, ts: np.ndarray) -> np.ndarray:
        if self.disorder and self.disorder_fraction:
            late = np.flatnonzero(rng.random(len(ts)) < self.disorder_fraction)
            ts[late] -= rng.integers(1, self.disorder + 1, size=len(late))
        return ts

    def block(self, b: int, timestamps: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Keys, values and timestamps of tuples ``[b * GENERATOR_BLOCK, (b+1) * GENERATOR_BLOCK)``
        (timestamps ``None`` when not asked for; keys and values the same either way)."""
        if self._cache is None or self._cache[0] != (b, timestamps):
            self._cache = ((b, timestamps), self._block(b, timestamps))
        return self._cache[1]

    def take(self, start: int, n: int, timestamps: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Tuples ``[start, start + n)`` as ``(keys, values, timestamps)``."""
        parts = []
        pos, end = start, start + n
        while pos < end:
            b, lo = divmod(pos, GENERATOR_BLOCK)
            hi = min(GENERATOR_BLOCK, lo + end - pos)
            k, v, t = self.block(b, timestamps)
            parts.append((k[lo:hi], v[lo:hi], None if t is None else t[lo:hi]))
            pos += hi - lo
        if len(parts) == 1:
            return parts[0]
        return tuple(None if cols[0] is None else np.concatenate(cols)  # type: ignore[return-value]
                     for cols in zip(*parts))

    def batches(self, start: Any = None, batch_size: int = DEFAULT_BATCH_SIZE, *,
                timestamps: bool = True) -> Iterator[Batch]:
        pos = 0 if start is None else int(start)
        while self.tuples is None or pos < self.tuples:
            n = batch_size if self.tuples is None else min(batch_size, self.tuples - pos)
            arrival = time.monotonic()
            k, v, t = self.take(pos, n, timestamps)
            pos += n
            yield Batch(k, v, t, pos, arrival)


class Debs14Source(_Generator):
    """DEBS 2014 smart-plug loads: ``plugs`` keys (ints ``0 .. plugs-1``) with a slight skew.

    Each plug has its own base load (log-normal, tens of watts) and reports a
    load within 20 % of it. Plug ``i`` gets a share of the tuples proportional to a
    Zipf weight of exponent 0.2 over a seeded permutation (the busiest plug has
    about 2.4x the tuples of the quietest at 84 plugs). Timestamps are epoch
    milliseconds from 2013-09-01 (the data set's first day) advancing
    ``1000 / plugs`` ms per tuple: every plug reports about once a second.

    Parameters
    ----------
    plugs : int
        Number of keys (84 in the paper's local Flink experiment).
    tuples : int or None
        Stream length; ``None`` for an unbounded stream.
    seed : int
    disorder : int
        Largest delay (ms) of an out-of-order tuple; 0 for in-order timestamps.
    disorder_fraction : float
        Fraction of the tuples that are delayed when ``disorder > 0``.

    Examples
    --------
    >>> k, v, t = Debs14Source(plugs=84, tuples=100).take(0, 5)
    >>> k.tolist(), v.dtype.name, (t - t[0]).tolist()
    ([75, 40, 63, 44, 56], 'float64', [0, 11, 23, 35, 47])
    """

    kind = "debs14"
    T0 = 1_377_993_600_000  # 2013-09-01T00:00:00Z

    def __init__(self, plugs: int = 84, tuples: int | None = 4_000_000, seed: int = 1, disorder: int = 0,
                 disorder_fraction: float = 0.05):
        super().__init__(tuples, seed, disorder, disorder_fraction)
        self.plugs = _check_count("plugs", plugs)
        rng = np.random.default_rng([self.seed, 0xDEB514])
        weights = 1.0 / np.arange(1, self.plugs + 1) ** 0.2
        weights = weights[rng.permutation(self.plugs)]
        cdf = np.cumsum(weights / weights.sum())
        # key of a uniform 16-bit draw (the skew is quantised to 1/65536)
        self._table = np.minimum(np.searchsorted(cdf, (np.arange(1 << 16) + 0.5) / (1 << 16), side="right"),
                                 self.plugs - 1).astype(np.int64)
        self._base = np.round(rng.lognormal(mean=3.5, sigma=0.8, size=self.plugs), 3)
        self._small_table = generated_blocks.compact_table(self._table)  # the compiled loop's (the same keys)

    def _params(self) -> dict[str, Any]:
        return {"plugs": self.plugs}

    def warm(self) -> None:
        generated_blocks.load()

    def _block(self, b: int, timestamps: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        rng = np.random.default_rng([self.seed, b])
        n = GENERATOR_BLOCK
        # keys: table[16-bit uniform draw]; values: round(base[key] * (0.8 + 0.4 * uniform), 3): numpy's
        # passes (debs14_reference), or one compiled loop over the same draws once loaded (the same bits)
        kernel = generated_blocks.loaded()
        if kernel is not None:
            keys, values = generated_blocks.debs14_compiled(rng, self._small_table, self._base, n, kernel)
        else:
            keys, values = generated_blocks.debs14_reference(rng, self._table, self._base, n)
        if not timestamps:  # the disorder's draws come after the values': keys and values are the same
            return keys, values, None
        ts = np.arange(b * n, (b + 1) * n, dtype=np.int64)
        ts *= 1000
        ts //= self.plugs
        ts += self.T0
        return keys, values, self._disorder(rng, ts)


class Debs12Source(_Generator):
    """DEBS 2012 manufacturing-equipment energy sensors, 100 records per second.

    Record ``j`` is taken at ``T0 + 10 * j`` ms and gives one tuple per sensor
    (keys ``"mf01"``, ``"mf02"``, ...), so the stream interleaves the sensors
    with equal timestamps. A sensor's reading follows a slow daily-like cycle
    around its own level plus noise.

    Parameters
    ----------
    sensors : int
        Number of keys (the data set's three electrical-power sensors by default).
    tuples : int or None
        Stream length in tuples (``records * sensors``); ``None``: unbounded.
    seed, disorder, disorder_fraction
        As for :class:`Debs14Source`.

    Examples
    --------
    >>> src = Debs12Source(sensors=3, tuples=6)
    >>> k, v, t = src.take(0, 6)
    >>> k.tolist(), (t - src.T0).tolist()
    (['mf01', 'mf02', 'mf03', 'mf01', 'mf02', 'mf03'], [0, 0, 0, 10, 10, 10])
    """

    kind = "debs12"
    T0 = 1_330_560_000_000  # 2012-03-01T00:00:00Z
    RECORD_MS = 10  # 100 records per second

    def __init__(self, sensors: int = 3, tuples: int | None = 3_000_000, seed: int = 1, disorder: int = 0,
                 disorder_fraction: float = 0.05):
        super().__init__(tuples, seed, disorder, disorder_fraction)
        self.sensors = _check_count("sensors", sensors)
        width = max(2, len(str(self.sensors)))
        self.names = np.array([f"mf{i + 1:0{width}d}" for i in range(self.sensors)])
        rng = np.random.default_rng([self.seed, 0xDEB512])
        self._level = rng.uniform(2_000.0, 9_000.0, size=self.sensors)
        self._phase = rng.uniform(0.0, 2 * math.pi, size=self.sensors)

    def _params(self) -> dict[str, Any]:
        return {"sensors": self.sensors}

    def _block(self, b: int, timestamps: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        rng = np.random.default_rng([self.seed, b])
        n = GENERATOR_BLOCK
        pos = np.arange(b * n, (b + 1) * n, dtype=np.int64)
        sensor = pos % self.sensors
        record = pos // self.sensors
        ts = self.T0 + record * self.RECORD_MS
        cycle = np.sin(2 * math.pi * record / 360_000.0 + self._phase[sensor])  # one hour of records
        values = np.round(self._level[sensor] * (1.0 + 0.2 * cycle) + rng.normal(0.0, 25.0, size=n), 2)
        return self.names[sensor], values, self._disorder(rng, ts) if timestamps else None


# --------------------------------------------------------------------------- text sources
def _read_batches_seekable(f: BinaryIO, batch_size: int) -> Iterator[tuple[list[bytes], int, float]]:
    while True:
        arrival = time.monotonic()
        lines = list(itertools.islice(f, batch_size))
        if not lines:
            return
        yield lines, f.tell(), arrival


def _read_batches_stream(fd: int, batch_size: int, linger: float) -> Iterator[tuple[list[bytes], int, float]]:
    """Lines from a pipe or terminal: a batch is cut after ``batch_size`` lines or ``linger`` seconds."""
    buf = b""
    lines: list[bytes] = []
    consumed = 0
    first = 0.0
    eof = False
    while not eof or lines:
        timeout = None if not lines else max(0.0, first + linger - time.monotonic())
        if not eof:
            ready, _, _ = select.select([fd], [], [], timeout)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    eof = True
                    if buf:
                        if not lines:
                            first = time.monotonic()
                        lines.append(buf)
                        buf = b""
                else:
                    parts = (buf + chunk).split(b"\n")
                    buf = parts.pop()
                    if parts and not lines:
                        first = time.monotonic()
                    lines.extend(p + b"\n" for p in parts)
        due = eof or (lines and time.monotonic() >= first + linger)
        while lines and (len(lines) >= batch_size or due):
            out, lines = lines[:batch_size], lines[batch_size:]
            consumed += sum(len(x) for x in out)
            yield out, consumed, first
            first = time.monotonic()


def _read_line_unbuffered(fd: int) -> bytes:
    """One line from ``fd`` without reading past it (for a header on stdin)."""
    out = bytearray()
    while True:
        c = os.read(fd, 1)
        out += c
        if not c or c == b"\n":
            return bytes(out)


class _TextSource(Source):
    """Line-oriented file or stdin source; subclasses parse lines into columns."""

    progress_unit = "B"
    #: What a named field is called in error messages.
    field_word = "column"

    def __init__(self, path: str, *, key_col: str = "key", value_col: str = "value", ts_col: str | None = "ts",
                 linger: float = 0.1):
        if not isinstance(path, str) or not path:
            raise UserError(f"{self.kind} source needs a file path or '-' for stdin, got {path!r}")
        self.path = path
        self.key_col, self.value_col, self.ts_col = key_col, value_col, ts_col
        self.linger = float(linger)
        self.resumable = path != "-"
        self.has_timestamps = ts_col is not None
        self._file: BinaryIO | None = None
        if self.resumable:
            if not os.path.isfile(path):
                raise UserError(f"{self.kind} source: no such file: {path}")
            self._size = os.path.getsize(path)
            try:
                with open(path, "rb") as f:  # a bad header fails here, before the job prints or writes anything
                    self._header(f.readline)
            except OSError as exc:
                raise UserError(f"{self.kind} source: cannot read {path}: {exc.strerror}") from None

    @property
    def total(self) -> int | None:
        return self._size if self.resumable else None

    def progress(self, position: Any) -> int:
        return 0 if position is None else int(position[0])

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": os.path.abspath(self.path) if self.resumable else "-",
                "key_col": self.key_col, "value_col": self.value_col, "ts_col": self.ts_col}

    def _where(self, line_no: int) -> str:
        return f"{self.kind} source {'stdin' if self.path == '-' else self.path}, line {line_no}"

    def _decode(self, line: bytes, line_no: int, encoding: str = "utf-8") -> str:
        try:
            return line.decode(encoding)
        except UnicodeDecodeError as exc:
            raise UserError(f"{self._where(line_no)}: not valid UTF-8 (byte 0x{line[exc.start]:02x} at byte "
                            f"{exc.start + 1} of the line)") from None

    def _decode_all(self, lines: list[bytes], first_line: int) -> str:
        """The lines as one string; a line that is not UTF-8 is a :class:`UserError` naming it."""
        try:
            return b"".join(lines).decode("utf-8")
        except UnicodeDecodeError:
            for j, line in enumerate(lines):
                self._decode(line, first_line + j)
            raise  # pragma: no cover - some line fails above

    def _header(self, readline: Callable[[], bytes]) -> tuple[int, int]:
        """Read what precedes the data with ``readline``; returns (bytes, lines) consumed."""
        return 0, 0

    def _parse(self, lines: list[bytes], first_line: int) -> tuple[list, list, list | None]:
        raise NotImplementedError

    def batches(self, start: Any = None, batch_size: int = DEFAULT_BATCH_SIZE, *,
                timestamps: bool = True) -> Iterator[Batch]:
        if self.resumable:
            f = self._file = open(self.path, "rb")
            skip, line_no = self._header(f.readline)
            if start is not None:
                f.seek(start[0])
                line_no = start[1]
            reader = _read_batches_seekable(f, batch_size)
        else:
            if start is not None:
                raise UserError(f"{self.kind} source on stdin cannot resume from a checkpoint")
            fd = sys.stdin.fileno()
            skip, line_no = self._header(lambda: _read_line_unbuffered(fd))
            reader = ((lines, pos + skip, arrival) for lines, pos, arrival in
                      _read_batches_stream(fd, batch_size, self.linger))
        for lines, pos, arrival in reader:
            first = line_no + 1
            keys, values, ts = self._parse(lines, first)
            line_no += len(lines)
            yield self._columns(keys, values, ts, (pos, line_no), arrival, first)

    def _columns(self, keys: list, values: list, ts: list | None, position: Any, arrival: float,
                 first_line: int) -> Batch:
        k = key_column(keys)
        try:
            v = np.array(values, dtype=np.float64)
        except (ValueError, TypeError, OverflowError):
            i, bad = next((i, x) for i, x in enumerate(values) if not _is_float(x))
            raise UserError(f"{self._where(first_line + i)}: {self.field_word} {self.value_col!r}: "
                            f"cannot read {_short(bad)} as a number (float64)") from None
        t = None
        if ts is not None:
            try:
                t = np.array(ts, dtype=np.int64) if ts else np.array([], dtype=np.int64)
            except (ValueError, TypeError, OverflowError):
                i, bad = next((i, x) for i, x in enumerate(ts) if not _is_int(x))
                raise UserError(f"{self._where(first_line + i)}: {self.field_word} {self.ts_col!r}: cannot read {_short(bad)} "
                                "as an integer timestamp (epoch milliseconds)") from None
        return Batch(k, v, t, position, arrival)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def key_column(keys: list[str]) -> np.ndarray:
    """String keys as a ``str_`` array, or an ``object`` array when a key holds a NUL character (``str_``
    would strip trailing NULs and merge ``"a\x00"`` into ``"a"``); ``str_`` is several times faster to hash,
    partition and group than ``object``."""
    if "\x00" in "".join(keys):
        k = np.empty(len(keys), dtype=object)
        k[:] = keys
        return k
    return np.array(keys, dtype=str) if keys else np.array([], dtype=str)


def _is_float(x: Any) -> bool:
    try:
        float(x)
        return not isinstance(x, bool)
    except (ValueError, TypeError, OverflowError):
        return False


def _short(x: Any, limit: int = 40) -> str:
    """``repr(x)``, cut to about ``limit`` characters (a 400-digit number or a huge field in an error message)."""
    text = repr(x) if not isinstance(x, int) else str(x)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...{text[-8:]} ({len(text)} characters)"


def _is_int(x: Any) -> bool:
    try:
        np.array([x], dtype=np.int64)
        return not isinstance(x, (bool, float))
    except (ValueError, TypeError, OverflowError):
        return False


class CsvSource(_TextSource):
    """A CSV file (or stdin, ``"-"``) with a header row naming the columns.

    One record per line (no line breaks inside quoted fields), with as many
    columns as the header; empty lines are skipped. A field may hold up to
    :data:`CSV_FIELD_LIMIT` characters.

    Parameters
    ----------
    path : str
        File path, or ``"-"`` for stdin.
    key_col, value_col : str
        Header names of the key and value columns.
    ts_col : str or None
        Header name of the timestamp column (integer epoch ms); ``None`` when
        the job needs no timestamps (count windows).
    linger : float
        stdin only: longest wait (s) before a partial batch is sent on.
    """

    kind = "csv"

    def _header(self, readline: Callable[[], bytes]) -> tuple[int, int]:
        line = readline()
        if not line:
            raise UserError(f"{self._where(1)}: empty file (a header row is needed)")
        try:
            header = next(csv.reader([self._decode(line, 1, "utf-8-sig").rstrip("\r\n")]), [])
        except csv.Error as exc:
            raise UserError(f"{self._where(1)}: cannot read the header: {exc}") from None
        cols = [c.strip() for c in header]
        idx = []
        for role, name in (("key", self.key_col), ("value", self.value_col), ("timestamp", self.ts_col)):
            if name is None:
                idx.append(None)
                continue
            if name not in cols:
                raise UserError(f"{self._where(1)}: no {role} column {name!r} in the header; columns: "
                                f"{', '.join(cols)}")
            idx.append(cols.index(name))
        self._idx = idx
        self._ncols = len(cols)
        return len(line), 1

    def _parse(self, lines: list[bytes], first_line: int) -> tuple[list, list, list | None]:
        text = self._decode_all(lines, first_line)
        ki, vi, ti = self._idx
        ncols = self._ncols
        try:
            rows = list(csv.reader(io.StringIO(text)))
        except csv.Error:
            rows = []
        if len(rows) != len(lines) or any(len(r) != ncols for r in rows):
            rows = []  # line by line: skip empty lines, name the bad one
            for j, line in enumerate(lines):
                try:
                    row = next(csv.reader([self._decode(line, first_line + j)]), [])
                except csv.Error as exc:
                    why = (f"a field is longer than {CSV_FIELD_LIMIT:,} characters" if "field larger" in str(exc)
                           else str(exc))
                    raise UserError(f"{self._where(first_line + j)}: {why}") from None
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != ncols:
                    raise UserError(f"{self._where(first_line + j)}: expected {ncols} columns (as the header), "
                                    f"got {len(row)}")
                rows.append(row)
        keys = [r[ki] for r in rows]
        values = [r[vi] for r in rows]
        ts = [r[ti] for r in rows] if ti is not None else None
        return keys, values, ts


class JsonlSource(_TextSource):
    """JSON lines (one object per line) from a file or stdin (``"-"``).

    Parameters are as for :class:`CsvSource`; ``key_col``, ``value_col`` and
    ``ts_col`` are object member names. Keys are read as strings
    (``{"key": 3}`` has key ``"3"``).

    Examples
    --------
    >>> src = JsonlSource("-", ts_col=None)
    >>> src._parse([b'{"key": "a", "value": 1.5}\\n', b'\\n', b'{"key": 2, "value": 3}\\n'], 1)
    (['a', '2'], [1.5, 3], None)
    """

    kind = "jsonl"
    field_word = "member"

    def _parse(self, lines: list[bytes], first_line: int) -> tuple[list, list, list | None]:
        keys, values = [], []
        ts: list | None = [] if self.ts_col is not None else None
        kc, vc, tc = self.key_col, self.value_col, self.ts_col
        for j, line in enumerate(lines):
            if not line.strip():
                continue
            text = self._decode(line, first_line + j)
            try:
                obj = json.loads(text)
                k = obj[kc]
                v = obj[vc]
                t = obj[tc] if tc is not None else None
            except json.JSONDecodeError as exc:
                raise UserError(f"{self._where(first_line + j)}: not valid JSON ({exc.msg})") from None
            except ValueError as exc:  # e.g. an integer of more digits than Python converts
                raise UserError(f"{self._where(first_line + j)}: cannot read the line: {exc}") from None
            except KeyError as exc:
                raise UserError(f"{self._where(first_line + j)}: no member {exc.args[0]!r}") from None
            except TypeError:
                raise UserError(f"{self._where(first_line + j)}: expected a JSON object") from None
            if ts is not None:
                if isinstance(t, bool) or not isinstance(t, (int, str)):
                    raise UserError(f"{self._where(first_line + j)}: member {tc!r}: expected an integer timestamp "
                                    f"(epoch milliseconds), got {json.dumps(t)}")
                ts.append(t)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise UserError(f"{self._where(first_line + j)}: member {vc!r}: expected a number, got {json.dumps(v)}")
            keys.append(k if isinstance(k, str) else json.dumps(k))
            values.append(v)
        return keys, values, ts
