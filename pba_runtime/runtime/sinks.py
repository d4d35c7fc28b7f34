"""Sinks: where window results (and late tuples) go, and how they are formatted.

Formats (chosen with a sink spec such as ``csv:out.csv``):

* ``csv``: a header ``key,start,end,value`` then one line per window;
  ``start``/``end`` are the window's bounds (``end`` exclusive, as in the
  semantics contract: stream positions for count windows, timestamps for time
  windows). Floats are written with ``repr``, so they read back exactly.
  Vector results (``moment_sketch``) and lists (``collect``) are written as
  ``;``-separated values.
* ``jsonl``: one object ``{"key": ..., "start": ..., "end": ..., "value": ...}``
  per line; non-finite floats are written as Python's :mod:`json` does
  (``NaN``, ``Infinity``).
* ``none``: results are counted (for metrics and latency) but not written.

A sink path of ``-`` means stdout. Late tuples (the late side output) are
written to their own file, in the sink's format, as ``key,timestamp,value``.

Formatting runs in the task slots (in parallel), which hand the sink ready
bytes; the sink only appends them. A file sink knows its byte offset, so a
checkpoint can record it and a resumed job truncates the file back to it
(see :mod:`pba_runtime.runtime.checkpoint`).

Examples
--------
>>> import numpy as np
>>> print(format_results("csv", 7, np.array([3, 4]), np.array([0.5, 2.0]), 3), end="")
7,0,3,0.5
7,1,4,2.0
>>> print(format_results("jsonl", "a", np.array([10]), np.array([float("nan")]), 10), end="")
{"key": "a", "start": 0, "end": 10, "value": NaN}
>>> print(format_late("csv", "a,b", np.array([5]), np.array([1.25])), end="")
"a,b",5,1.25
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
from typing import Any, BinaryIO

import numpy as np

from .errors import JobError, UserError

__all__ = ["FORMATS", "parse_sink_spec", "format_results", "format_late", "header", "FileSink", "late_path_for"]

#: Output formats of file and stdout sinks.
FORMATS = ("csv", "jsonl")

RESULT_COLUMNS = ("key", "start", "end", "value")
LATE_COLUMNS = ("key", "timestamp", "value")


def parse_sink_spec(spec: str) -> tuple[str | None, str | None]:
    """``"csv:PATH"``, ``"jsonl:PATH"`` (``PATH`` may be ``-``, stdout) or ``"none"`` -> ``(format, path)``.

    Examples
    --------
    >>> parse_sink_spec("csv:out.csv"), parse_sink_spec("jsonl:-"), parse_sink_spec("none")
    (('csv', 'out.csv'), ('jsonl', '-'), (None, None))
    >>> parse_sink_spec("parquet:x")
    Traceback (most recent call last):
    ...
    pba_runtime.runtime.errors.UserError: sink must be none, csv:PATH or jsonl:PATH (PATH '-' for stdout), got 'parquet:x'
    """
    if spec == "none":
        return None, None
    fmt, sep, path = spec.partition(":")
    if not sep or fmt not in FORMATS or not path:
        raise UserError(f"sink must be none, csv:PATH or jsonl:PATH (PATH '-' for stdout), got {spec!r}")
    return fmt, path


def _csv_field(x: Any) -> str:
    s = str(x)
    if any(c in s for c in ',"\r\n') or s != s.strip():
        buf = io.StringIO()
        csv.writer(buf, lineterminator="").writerow([s])
        return buf.getvalue()
    return s


def _json_float(x: float) -> str:
    return repr(x) if math.isfinite(x) else json.dumps(x)


def _cells(fmt: str, results: Any) -> list[str]:
    """Each result as the text of one field."""
    if isinstance(results, np.ndarray) and results.ndim == 1:
        vals = results.tolist()
        if results.dtype.kind == "f" and fmt == "jsonl" and not np.isfinite(results).all():
            return [_json_float(v) for v in vals]
        return [str(v) for v in vals]
    rows = results.tolist() if isinstance(results, np.ndarray) else list(results)
    if fmt == "csv":
        return [";".join(map(str, row)) if isinstance(row, (list, tuple)) else _csv_field(row) for row in rows]
    return [json.dumps(row) for row in rows]


def format_results(fmt: str, key: Any, ends: np.ndarray, results: Any, range_: int) -> str:
    """Lines for the windows of one key: ``ends`` (exclusive) and their ``results``."""
    cells = _cells(fmt, results)
    ends_l = ends.tolist()
    if fmt == "csv":
        prefix = _csv_field(key) + ","
        return "".join([f"{prefix}{e - range_},{e},{c}\n" for e, c in zip(ends_l, cells)])
    prefix = '{"key": ' + json.dumps(key) + ', "start": '
    return "".join([f'{prefix}{e - range_}, "end": {e}, "value": {c}}}\n' for e, c in zip(ends_l, cells)])


def format_late(fmt: str, key: Any, timestamps: np.ndarray, values: np.ndarray) -> str:
    """Lines for late tuples of one key."""
    vals = np.asarray(values, dtype=np.float64).tolist()
    ts = np.asarray(timestamps).tolist()
    if fmt == "csv":
        prefix = _csv_field(key) + ","
        return "".join([f"{prefix}{t},{v!r}\n" for t, v in zip(ts, vals)])
    prefix = '{"key": ' + json.dumps(key) + ', "timestamp": '
    return "".join([f'{prefix}{t}, "value": {_json_float(v)}}}\n' for t, v in zip(ts, vals)])


def header(fmt: str, columns: tuple[str, ...]) -> bytes:
    """The first line of a new file in ``fmt`` (CSV only)."""
    return (",".join(columns) + "\n").encode() if fmt == "csv" else b""


def late_path_for(sink_path: str | None, fmt: str | None) -> str:
    """Default path of the late side output: beside the sink file, else ``late.csv`` in the working directory.

    Examples
    --------
    >>> late_path_for("out/result.csv", "csv"), late_path_for("-", "jsonl"), late_path_for(None, None)
    ('out/result.late.csv', 'late.jsonl', 'late.csv')
    """
    ext = fmt or "csv"
    if sink_path in (None, "-"):
        return f"late.{ext}"
    root, dot, suffix = sink_path.rpartition(".")
    if dot and "/" not in suffix:
        return f"{root}.late.{suffix}"
    return f"{sink_path}.late.{ext}"


class FileSink:
    """Appends bytes to a file (or stdout) and knows how many are durable.

    Parameters
    ----------
    path : str
        File path, or ``"-"`` for stdout (cannot be rewound on resume).
    fmt : str
        ``"csv"`` or ``"jsonl"``; a new CSV file starts with ``columns``.
    columns : tuple of str
    lazy : bool
        Create the file only at the first write (the late side output).

    A write, flush or fsync that fails (a full device) raises
    :class:`~pba_runtime.runtime.errors.JobError` naming the output; a
    ``BrokenPipeError`` (the reader of stdout went away) is raised as it is.
    """

    def __init__(self, path: str, fmt: str, columns: tuple[str, ...] = RESULT_COLUMNS, *, lazy: bool = False):
        self.path = path
        self.fmt = fmt
        self.columns = columns
        self.lazy = lazy
        self.rewindable = path != "-"
        self._f: BinaryIO | None = None
        self._closed = False
        self._offset = 0
        self.bytes_written = 0
        if self.rewindable:
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise UserError(f"output directory does not exist: {parent}")

    def open(self, resume_offset: int | None = None) -> None:
        """Start the file afresh, or (resume) truncate it back to ``resume_offset`` bytes and append."""
        if not self.rewindable:
            self._f = sys.stdout.buffer
            if resume_offset is None:
                self._write_raw(header(self.fmt, self.columns))
            return
        if resume_offset:
            try:
                f = open(self.path, "r+b")
            except FileNotFoundError:
                raise UserError(f"cannot resume: the output file {self.path} written before the checkpoint "
                                "is gone") from None
            size = os.fstat(f.fileno()).st_size
            if size < resume_offset:
                f.close()
                raise UserError(f"cannot resume: {self.path} has {size} bytes, the checkpoint recorded "
                                f"{resume_offset}")
            f.truncate(resume_offset)
            f.seek(resume_offset)
            self._f = f
            self._offset = resume_offset
            return
        if not self.lazy:
            self._create()
        elif os.path.exists(self.path):
            os.unlink(self.path)  # a stale file from an earlier run

    def _create(self) -> None:
        try:
            self._f = open(self.path, "wb")
        except OSError as exc:
            raise UserError(f"cannot write {self.path}: {exc.strerror}") from None
        self._offset = 0
        self._write_raw(header(self.fmt, self.columns))

    def _failed(self, exc: OSError) -> JobError:
        where = "stdout" if not self.rewindable else self.path
        return JobError(f"cannot write the output {where}: {exc.strerror or exc}")

    def _write_raw(self, data: bytes) -> None:
        if data:
            try:
                self._f.write(data)
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise self._failed(exc) from None
            self._offset += len(data)

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines)."""
        if not data:
            return
        if self._closed:
            raise ValueError(f"sink {self.path} is closed")
        if self._f is None:  # a lazy file, at its first write
            self._create()
        self._write_raw(data)
        self.bytes_written += len(data)

    def sync(self) -> int:
        """Make everything written durable (flush + fsync); returns the file's length in bytes."""
        if self._f is not None:
            try:
                self._f.flush()
                if self.rewindable:
                    os.fsync(self._f.fileno())
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise self._failed(exc) from None
        return self._offset

    @property
    def offset(self) -> int:
        """Bytes in the file so far (header included)."""
        return self._offset

    def close(self) -> None:
        """Flush and close (stdout is flushed, not closed); a failed flush raises :class:`JobError`."""
        self._closed = True
        f, self._f = self._f, None
        if f is None:
            return
        try:
            f.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None
        finally:
            if self.rewindable:
                try:
                    f.close()
                except OSError:  # the flush above already failed and said why
                    pass
