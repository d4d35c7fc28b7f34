"""Sinks: where window results (and late tuples) go, and how they are formatted.

Formats (chosen with a sink spec such as ``csv:out.csv``):

* ``csv``: a header ``key,start,end,value`` then one line per window;
  ``start``/``end`` are the window's bounds (``end`` exclusive, as in the
  semantics contract: stream positions for count windows, timestamps for time
  windows). Floats are written as ``repr`` writes them, so they read back
  exactly.
* ``jsonl``: one object ``{"key": ..., "start": ..., "end": ..., "value": ...}``
  per line; non-finite floats are written as Python's :mod:`json` does
  (``NaN``, ``Infinity``).

  Scalar and vector results (``moment_sketch``: in CSV ``;``-separated values,
  in JSON a list) of both are written a batch at a time from its columns in
  one compiled pass (:func:`format_batch`, :mod:`~pba_runtime.runtime.text_lines`);
  lists (``collect``) through the per-line formatter (:func:`format_results`),
  the readable slow reference. Both write the same bytes.
* ``parquet`` and ``arrow`` (Arrow IPC file format): columns ``key``, ``start``,
  ``end``, ``value`` in *part files* of a directory, written by each task slot
  itself (:mod:`pba_runtime.runtime.part_files`): one part per slot per
  checkpoint, committed (renamed) when the checkpoint is, as Flink's file sink does.
* ``none``: results are counted (for metrics and latency) but not written.

A sink path of ``-`` means stdout (text formats). Late tuples (the late side
output) are written to their own file, in the sink's format (CSV for the
part-file sinks), as ``key,timestamp,value``.

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
>>> print(format_batch("csv", [(7, np.array([3, 4]), np.array([0.5, 2.0]))], 3).decode(), end="")
7,0,3,0.5
7,1,4,2.0
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import sys
from typing import Any, BinaryIO

import numpy as np

from .errors import JobError, UserError

__all__ = ["FORMATS", "TEXT_FORMATS", "PART_FORMATS", "parse_sink_spec", "format_results", "format_late",
           "format_batch", "result_table", "ResultParts", "sample_parts", "header", "FileSink",
           "late_path_for", "late_format_for"]

#: Formats of sinks that append to one file (or stdout).
TEXT_FORMATS = ("csv", "jsonl")
#: Formats of sinks that write part files into a directory.
PART_FORMATS = ("parquet", "arrow")
#: Every output format.
FORMATS = TEXT_FORMATS + PART_FORMATS
_SINK_SPELLINGS = "none, csv:PATH, jsonl:PATH (PATH '-' for stdout), parquet:DIR or arrow:DIR"

#: Bytes a file sink reserves on disk ahead of what it has written (Linux ``fallocate`` with
#: ``FALLOC_FL_KEEP_SIZE``, as RocksDB reserves its write-ahead logs: the file's length does not change, so
#: readers and the checkpoint's offset see only what was written). The kernel then copies each write into
#: blocks the file already has, instead of reserving them write by write (ext4's delayed allocation),
#: which spends less of the kernel's CPU a byte. What is left of the reserve is given back when the sink closes
#: (a truncate to the length).
PREALLOCATE = 64 << 20
_FALLOC_FL_KEEP_SIZE = 1

RESULT_COLUMNS = ("key", "start", "end", "value")
LATE_COLUMNS = ("key", "timestamp", "value")


def parse_sink_spec(spec: str) -> tuple[str | None, str | None]:
    """``"csv:PATH"``, ``"jsonl:PATH"`` (``PATH`` may be ``-``, stdout), ``"parquet:DIR"``,
    ``"arrow:DIR"`` or ``"none"`` -> ``(format, path)``.

    Examples
    --------
    >>> parse_sink_spec("csv:out.csv"), parse_sink_spec("jsonl:-"), parse_sink_spec("none")
    (('csv', 'out.csv'), ('jsonl', '-'), (None, None))
    >>> parse_sink_spec("parquet:results"), parse_sink_spec("arrow:results")
    (('parquet', 'results'), ('arrow', 'results'))
    >>> parse_sink_spec("orc:x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pba_runtime.runtime.errors.UserError: sink must be none, csv:PATH, ... parquet:DIR or arrow:DIR, got 'orc:x'
    """
    if not isinstance(spec, str):
        raise UserError(f"sink must be a string: {_SINK_SPELLINGS}; got {type(spec).__name__}")
    if spec == "none":
        return None, None
    fmt, sep, path = spec.partition(":")
    if not sep or fmt not in FORMATS or not path:
        raise UserError(f"sink must be {_SINK_SPELLINGS}, got {spec!r}")
    if fmt in PART_FORMATS and path == "-":
        raise UserError(f"a {fmt} sink writes part files into a directory; it cannot write stdout "
                        f"(use csv:- or jsonl:-), got {spec!r}")
    return fmt, path


@functools.cache
def _fallocate() -> Any:
    """libc's ``fallocate`` (Linux), or ``None`` where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:  # the process's own symbols, the C library's among them (find_library would run ldconfig)
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fn.restype = ctypes.c_int
    return fn


def _reserve(fd: int, offset: int, length: int) -> bool:
    """Reserve ``length`` bytes of disk at ``offset`` of file ``fd`` without changing its length; ``False`` when
    the system or file system cannot (nothing changed then)."""
    fn = _fallocate()
    return fn is not None and fn(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def _csv_field(x: Any) -> str:
    s = str(x)
    if any(c in s for c in ',"\r\n') or s != s.strip():
        buf = io.StringIO()
        csv.writer(buf, lineterminator="").writerow([s])
        return buf.getvalue()
    return s


@functools.lru_cache(maxsize=1 << 16, typed=True)
def _line_prefix(fmt: str, key: Any) -> bytes:
    """What a line of ``key``'s windows holds before ``start``, encoded: ``key``'s CSV field and its comma, or
    ``{"key": <key in JSON>, "start": ``. A slot's keys recur batch after batch, and quoting
    each of them again at every batch would cost a large share of a CSV row."""
    if fmt == "csv":
        return (_csv_field(key) + ",").encode()
    return ('{"key": ' + json.dumps(key) + ', "start": ').encode()


#: A batch of at most this many keys has its line prefixes cached (:func:`_prefix_blob`); larger ones (a
#: high-cardinality stream) would fill the cache with batches that never recur.
PREFIX_CACHE_KEYS = 4096


def _prefix_blob(fmt: str, keys: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The line prefixes of a batch's ``keys`` (:func:`_line_prefix`), as one blob and its offsets (what the
    compiled writer takes, :func:`pba_runtime.runtime.text_lines.blob`). A slot's batches bring mostly the same
    keys in the same order, so a batch of up to :data:`PREFIX_CACHE_KEYS` keys is cached by its keys and their
    types (``1``, ``True`` and ``1.0`` are one key of a dict, but not one CSV field)."""
    from .text_lines import blob

    if len(keys) <= PREFIX_CACHE_KEYS:
        try:
            return _cached_prefix_blob(fmt, keys, tuple(map(type, keys)))
        except TypeError:  # an unhashable key
            pass
    try:
        return blob([_line_prefix(fmt, k) for k in keys])
    except TypeError:  # an unhashable key: the prefix uncached
        return blob([_line_prefix.__wrapped__(fmt, k) for k in keys])


@functools.lru_cache(maxsize=16)
def _cached_prefix_blob(fmt: str, keys: tuple, types: tuple) -> tuple[np.ndarray, np.ndarray]:
    from .text_lines import blob

    return blob([_line_prefix(fmt, k) for k in keys])


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


def _arrow_numbers(values: np.ndarray) -> Any:
    """A numeric numpy array as a pyarrow array over the same memory (``pa.array`` would import pandas
    at a slot's first batch, and copy)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def _arrow_repeated_strings(texts: list[str], counts: list[int]) -> Any:
    """``texts[i]`` repeated ``counts[i]`` times, as a pyarrow string array built from its buffers."""
    import pyarrow as pa

    encoded = [t.encode() for t in texts]
    lengths = np.repeat(np.fromiter((len(b) for b in encoded), np.int64, len(encoded)), counts)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(b * c for b, c in zip(encoded, counts))
    return pa.Array.from_buffers(pa.large_string(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
                                 ).cast(pa.string())


class ResultParts(list):
    """A batch's windows ``[(key, ends, results), ...]`` (every part with a window), and, when the slot has them,
    ``columns``: ``(ends, results)`` of every part end to end, one array each (the keyed merge's own arrays,
    :func:`~pba_runtime.algorithms.keyed_batch.insert_many_keyed`), so the sinks need not concatenate them.

    >>> parts = ResultParts([(7, np.array([3]), np.array([1.0]))]); parts.columns is None
    True
    """

    columns: tuple[np.ndarray, np.ndarray] | None = None


def sample_parts(rows: int, keys: int = 8) -> ResultParts:
    """Made-up results of ``rows`` windows over ``keys`` int keys, shaped as a slot's batch (float64 values, its
    ``columns`` set): what a slot writes once before its stream starts (:meth:`PartWriter.warm
    <pba_runtime.runtime.part_files.PartWriter.warm>`).

    >>> parts = sample_parts(10, keys=3); [(k, len(e)) for k, e, _ in parts], len(parts.columns[0])
    ([(0, 3), (1, 3), (2, 4)], 10)
    """
    ends = np.arange(1, rows + 1, dtype=np.int64)
    values = np.zeros(rows)
    cuts = np.linspace(0, rows, keys + 1).astype(np.int64)
    parts = ResultParts((k, ends[a:b], values[a:b]) for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])))
    parts.columns = (ends, values)
    return parts


def _columns(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """``(ends, results)`` of ``parts`` (every part with a window) concatenated (what a
    :class:`ResultParts`'s ``columns`` hold already)."""
    if len(parts) == 1:
        return parts[0][1], parts[0][2]
    return np.concatenate([e for _, e, _ in parts]), np.concatenate([r for _, _, r in parts])


def result_table(parts: list, range_: int) -> Any:
    """The windows of a batch, ``[(key, ends, results), ...]``, as a pyarrow Table ``key, start, end, value``.

    Keys: int64, or string; values: the results' own type (float64, int64), a
    fixed-size list for vector results, a list of float64 for lists. Numeric
    columns are built from the numpy arrays' buffers (no Python object per result).
    Every field is declared non-nullable but a value column built from Python lists.

    Examples
    --------
    >>> t = result_table([("a", np.array([2, 3]), np.array([1.5, 2.5])), ("b", np.array([2]), np.array([4.0]))], 2)
    >>> t.column_names, t.column("key").to_pylist(), t.column("start").to_pylist()
    (['key', 'start', 'end', 'value'], ['a', 'a', 'b'], [0, 1, 0])
    >>> [f.nullable for f in t.schema]
    [False, False, False, False]
    """
    import pyarrow as pa

    columns = getattr(parts, "columns", None)
    if columns is not None and columns[1].ndim == 1 and columns[1].dtype.kind in "fiu":
        return _table_of_columns(parts, columns, range_)
    parts = [p for p in parts if len(p[1])]
    keys = [k for k, _, _ in parts]
    counts = [len(e) for _, e, _ in parts]
    if columns is not None:
        ends = columns[0]
    else:
        ends = np.concatenate([np.asarray(e, dtype=np.int64) for _, e, _ in parts]) if parts else np.empty(0, np.int64)
    key_col = _key_column(keys, counts)
    results = [r for _, _, r in parts]
    from_numpy = True  # no null can be in the value column
    if results and all(isinstance(r, np.ndarray) and r.ndim == 1 and r.dtype.kind in "fiu" for r in results):
        value_col = _arrow_numbers(np.concatenate(results))  # (a slot's scalar columns returned above)
    elif results and all(isinstance(r, np.ndarray) and r.ndim == 2 and r.dtype.kind == "f" for r in results):
        flat = np.concatenate(results)
        value_col = pa.FixedSizeListArray.from_arrays(_arrow_numbers(flat.reshape(-1)), flat.shape[1])
    else:
        from_numpy = False
        rows = [list(row) if isinstance(row, (list, tuple, np.ndarray)) else row for r in results for row in r]
        try:
            value_col = pa.array(rows, type=pa.list_(pa.float64()))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            value_col = pa.array(rows)
    return _table(key_col, ends, range_, value_col, value_nullable=not from_numpy)


def _key_column(keys: list, counts: list[int]) -> Any:
    """The ``key`` column: each key repeated over its windows, int64 when every key is an int (bools are not),
    else strings."""
    if keys and (set(map(type, keys)) <= {int}
                 or all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in keys)):
        return _arrow_numbers(np.repeat(np.array(keys, dtype=np.int64), counts))
    return _arrow_repeated_strings([str(k) for k in keys], counts)


def _table(key_col: Any, ends: np.ndarray, range_: int, value_col: Any, value_nullable: bool = False) -> Any:
    """The result table ``key, start, end, value`` of its columns (``start`` is ``end - range_``)."""
    import pyarrow as pa

    return pa.Table.from_arrays([key_col, _arrow_numbers(ends - range_), _arrow_numbers(ends), value_col],
                                schema=_result_schema(key_col.type, value_col.type, value_nullable))


@functools.lru_cache(maxsize=64)
def _result_schema(key_type: Any, value_type: Any, value_nullable: bool) -> Any:
    """The result table's schema. Fields that cannot hold a null are declared so: the Parquet writer then
    encodes no definition levels, a large share of the writer's time on the default job's parts."""
    import pyarrow as pa

    return pa.schema([pa.field("key", key_type, nullable=False), pa.field("start", pa.int64(), nullable=False),
                      pa.field("end", pa.int64(), nullable=False),
                      pa.field("value", value_type, nullable=value_nullable)])


def _table_of_columns(parts: Any, columns: tuple[np.ndarray, np.ndarray], range_: int) -> Any:
    """:func:`result_table` of a slot's :class:`ResultParts` whose ``columns`` hold scalar numbers: the same
    table with a batch's Python done once, not once a part (the checks of every part's type, the schema)."""
    ends, values = columns
    key_col = _key_column([k for k, _, _ in parts], [len(e) for _, e, _ in parts])
    return _table(key_col, ends, range_, _arrow_numbers(values))


def _text_kind(results: Any) -> tuple | None:
    """What the compiled writer makes of a part's ``results``: ``("f",)`` or ``("i",)`` (float64 or int64
    scalars), ``("f", width)`` (float vectors: a ``moment_sketch``'s), else ``None`` (the per-line formatter's)."""
    if isinstance(results, np.ndarray):
        if results.ndim == 1 and results.dtype.kind in "fi":
            return (results.dtype.kind,)
        if results.ndim == 2 and results.dtype.kind == "f":
            return ("f", results.shape[1])
    return None


def format_batch(fmt: str, parts: list, range_: int, ring: Any = None) -> bytes | tuple[int, int]:
    """CSV or JSON lines (``fmt``) of a batch's windows ``[(key, ends, results), ...]``, from its columns in one
    compiled pass.

    Scalar float64 or int64 results, or float vectors of one width (every part
    alike) go through :func:`pba_runtime.runtime.text_lines.lines` (floats
    spelled as ``repr``; keys quoted as CSV needs or written as :mod:`json`
    writes them, as :func:`format_results` does); any other batch (lists,
    a mix) through :func:`format_results`, the readable slow reference, which
    writes the same bytes.

    With ``ring`` (a task slot's :class:`~pba_runtime.runtime.byte_ring.ByteRing`)
    the lines are written into it and their region ``(position, length)`` is
    returned; bytes are returned when they cannot fit in the ring.

    Examples
    --------
    >>> print(format_batch("jsonl", [("a", np.array([3]), np.array([0.5]))], 3).decode(), end="")
    {"key": "a", "start": 0, "end": 3, "value": 0.5}
    """
    columns = getattr(parts, "columns", None)
    if columns is None or _text_kind(columns[1]) is None:  # not a slot's columns of numbers
        parts = [p for p in parts if len(p[1])]
        if not parts:
            return b""
        kinds = {_text_kind(r) for _, _, r in parts}
        if len(kinds) != 1 or None in kinds:
            data = "".join(format_results(fmt, k, e, r, range_) for k, e, r in parts).encode()
            ref = None if ring is None else ring.put(data)
            return data if ref is None else ref
        columns = _columns(parts)
    elif not parts:
        return b""
    from .text_lines import CSV, JSONL, lines, lines_into

    layout = CSV if fmt == "csv" else JSONL
    prefixes = _prefix_blob(fmt, tuple([k for k, _, _ in parts]))
    counts = np.fromiter((len(e) for _, e, _ in parts), np.int64, len(parts))
    ends, values = columns
    if ring is not None:
        last: list = [None]  # the buffer of the last call, None if it is the ring's

        def alloc(n: int) -> np.ndarray:
            buf = ring.reserve(n)
            last[0] = np.empty(n, np.uint8) if buf is None else None  # larger than the ring: private memory
            return buf if buf is not None else last[0]

        n = lines_into(alloc, prefixes, counts, ends, range_, values, layout)
        if last[0] is None:
            return ring.commit(n)
        ring.cancel()
        return last[0][:n].tobytes()
    return lines(prefixes, counts, ends, range_, values, layout)


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


def late_format_for(fmt: str | None) -> str:
    """The late side output's format for a sink of format ``fmt``: the sink's text format, else CSV.

    Examples
    --------
    >>> late_format_for("jsonl"), late_format_for("parquet"), late_format_for(None)
    ('jsonl', 'csv', 'csv')
    """
    return fmt if fmt in TEXT_FORMATS else "csv"


def late_path_for(sink_path: str | None, fmt: str | None) -> str:
    """Default path of the late side output: beside the sink file (or directory), else ``late.csv`` in the
    working directory. The part-file sinks' late output is CSV, beside their directory.

    Examples
    --------
    >>> late_path_for("out/result.csv", "csv"), late_path_for("-", "jsonl"), late_path_for(None, None)
    ('out/result.late.csv', 'late.jsonl', 'late.csv')
    >>> late_path_for("out/results/", "parquet")
    'out/results.late.csv'
    """
    ext = late_format_for(fmt)
    if fmt in PART_FORMATS:
        return f"{os.path.normpath(sink_path)}.late.csv"
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

    A file (not stdout) keeps :data:`PREALLOCATE` bytes of disk reserved past
    what it has written, where the file system can; the file's length is only
    what was written, and :meth:`close` gives the rest back. A job that dies
    leaves the reserve allocated until its file is truncated (a resume does) or
    written afresh.
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
        self._reserved = 0  # the file's bytes reserved on disk (PREALLOCATE); -1: the file system cannot
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
            self._offset = self._reserved = resume_offset
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
                if self.rewindable and 0 <= self._reserved < self._offset + len(data):
                    start = max(self._reserved, self._offset)
                    end = self._offset + len(data) + PREALLOCATE
                    self._reserved = end if _reserve(self._f.fileno(), start, end - start) else -1
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
            if self.rewindable and self._reserved > self._offset:
                f.truncate(self._offset)  # gives back the disk reserved past the end
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
