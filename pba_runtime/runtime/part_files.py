"""Part files: the Parquet and Arrow IPC sinks, exactly-once by committing whole files per checkpoint.

A Parquet (or Arrow IPC) file cannot be truncated back to a checkpoint, so these
sinks write, as Flink's ``FileSink`` does, *part files* into a directory:

* Each task slot writes its own results (in parallel; nothing crosses a queue)
  into an *in-progress* part, a hidden file ``.part-EEEEEE-SSSS.parquet.inprogress``
  (``E``: the epoch, the id of the checkpoint that will commit it; ``S``: the slot),
  its batches' rows buffered until they reach :data:`ROWS_PER_GROUP`, then written as one row group
  (:class:`PartWriter`).
* At a checkpoint barrier the slot closes its part (flushed and fsynced) and
  names it in its barrier payload, then starts the next epoch's part at its
  next result.
* Once the checkpoint is durable (it records those names as ``pending_parts``),
  the coordinator commits them: renames each to its visible name
  ``part-EEEEEE-SSSS.parquet`` and fsyncs the directory (:func:`commit_parts`).
  At the end of the stream the last parts are committed the same way.
* A resumed job first finishes the commit of the checkpoint's pending parts
  (the kill may have come between the checkpoint and the renames), then
  removes every in-progress part and every part of a later epoch
  (:func:`prepare_part_dir`); the replay writes those results again. A fresh
  start removes the directory's part files of an earlier run (only files
  named like parts; nothing else in the directory is touched).

Readers see whole files only: ``pyarrow.dataset``, pandas and polars skip
hidden files, so ``pandas.read_parquet(DIR)`` reads every committed window
exactly once. Per-key order is kept within a part (a key always goes to the
same slot; its rows are in stream order); across parts, sort by
``key, end`` for the stream order of a key.

Examples
--------
>>> import tempfile, pyarrow as pa
>>> d = tempfile.mkdtemp()
>>> prepare_part_dir(d, "arrow")
[]
>>> w = PartWriter(d, "arrow", slot=0, epoch=1)
>>> w.write(pa.table({"key": [1], "start": [0], "end": [4], "value": [2.5]}))
>>> names = w.roll(next_epoch=2); names
['part-000001-0000.arrow']
>>> os.listdir(d)
['.part-000001-0000.arrow.inprogress']
>>> commit_parts(d, names); os.listdir(d)
['part-000001-0000.arrow']
>>> pa.ipc.open_file(os.path.join(d, names[0])).read_all().column("value").to_pylist()
[2.5]
>>> w.close(); import shutil; shutil.rmtree(d)
"""

from __future__ import annotations

import os
import re
from typing import Any

from .checkpoint import fsync_path
from .errors import JobError, UserError

__all__ = ["PartWriter", "commit_parts", "prepare_part_dir", "part_files", "value_compression", "check_compression",
           "CODECS", "ROWS_PER_GROUP",
           "SUFFIXES"]

#: Rows a slot buffers before it writes them as a row group (Parquet) or record batches of up to this many rows
#: (Arrow): bounded memory, row groups large enough for readers, and each write short. A slot (its main loop or
#: its output stage) writes them between two batches' results, and its aggregation waits behind a long write. A
#: slot's batch of the default job brings just under this many rows, so each batch is written as it comes, as its
#: own row group (a batch is never split), while it is still in the caches; larger groups of whole batches save
#: the writer a little but not the job, which then holds several batches' tables
#: (``bench/bench_runtime_versions.py --sinks`` compares them).
ROWS_PER_GROUP = 1 << 14

SUFFIXES = {"parquet": ".parquet", "arrow": ".arrow"}
#: How the Parquet parts are encoded: ``key`` and ``value`` plain, ``start`` and ``end`` byte-stream-split (each
#: value's eight bytes go to eight streams, so the high bytes, constant between consecutive windows, form long runs),
#: every page compressed with LZ4 (``LZ4_RAW``, which pyarrow, pandas, polars, DuckDB and Spark read; ``value``'s only
#: where LZ4 packs it, :data:`VALUE_LZ4_MAX_RATIO`; byte-stream-split integers need Parquet format 2.11 readers:
#: pyarrow >= 16, parquet-java >= 1.14, as Spark 4 ships); min/max statistics for ``end`` only, the column a reader
#: filters a time range on: every row group of a part holds every key of its slot (each batch brings them all), so the
#: key's statistics would skip nothing, and ``start`` is ``end`` minus the range; the column writers take 64K values at
#: a time (pyarrow's default, 1,024, checks the page size after each; a page may pass its 1 MB target by one such
#: batch); data pages of version 2 (their levels, here none, are not compressed with the values). Each column's
#: encoding is the cheapest to write of those tried (plain, dictionary, delta, byte-stream-split; LZ4, Snappy, none)
#: on batches shaped as a slot's of the default job; Snappy writes about as fast in the job but LZ4's files are
#: several times smaller, so LZ4 stays. pyarrow, pandas, polars, DuckDB and Spark read these parts (checked here:
#: Spark 4 read a part's rows and sums as pyarrow did).
PARQUET_OPTIONS = {"use_dictionary": False, "compression": "lz4", "write_statistics": ["end"],
                   "column_encoding": {"start": "BYTE_STREAM_SPLIT", "end": "BYTE_STREAM_SPLIT"},
                   "write_batch_size": 1 << 16, "data_page_version": "2.0"}
#: A part's ``value`` column keeps :data:`PARQUET_OPTIONS`' LZ4 only if LZ4 packs a sample of it (the writer's
#: first table of enough rows) into at most this fraction of its bytes; else it is written uncompressed
#: (:func:`value_compression`). LZ4's cost follows what it finds: a sliding max's repeated values pack well and
#: cheaply, a deviation's 15-17 digits not at all (LZ4 gives up early), but a mean's (a sum of readings over the
#: range, whose low bits repeat in places) pack little at a high cost, which doubled the writer of ``--agg mean``'s
#: parts.
VALUE_LZ4_MAX_RATIO = 0.5
#: Rows a first table needs for that choice: a smaller one (a part closed by an early checkpoint) keeps LZ4, and the
#: writer chooses at its next part.
VALUE_SAMPLE_ROWS = 4096
#: Bytes a part's writer gathers before it writes them to the file. pyarrow's Parquet writer writes each page
#: header, page and footer piece as it comes, hundreds of small ``write`` and ``lseek`` calls a million rows
#: (``strace -c`` shows them); through this buffer, a few large writes.
WRITE_BUFFER = 1 << 20
_IN_PROGRESS = ".inprogress"
_PART = re.compile(r"^(\.)?part-(\d{6,})-(\d{4,})\.(parquet|arrow)(\.inprogress)?$")


def part_name(fmt: str, epoch: int, slot: int) -> str:
    """The committed name of slot ``slot``'s part of epoch ``epoch``.

    >>> part_name("parquet", 3, 1)
    'part-000003-0001.parquet'
    """
    return f"part-{epoch:06d}-{slot:04d}{SUFFIXES[fmt]}"


#: The codecs a part-file sink may be told to use instead of its default (``Job(compression=...)``,
#: ``pba-run --compression``), by format: a Parquet part's pages with any codec pyarrow writes (Spark's default
#: is Snappy; ``"lz4"`` is ``LZ4_RAW``), an Arrow IPC part's record batches with LZ4 frames or Zstandard (the
#: two the IPC format has); ``"none"``: uncompressed. The default (``None``) is :data:`PARQUET_OPTIONS`' LZ4,
#: with the value column's codec chosen by :func:`value_compression`, for Parquet, and uncompressed record
#: batches for Arrow (a reader maps them as they are). What each costs a row of the default job's results:
#: ``docs/runtime.md``, "The parts' codec".
CODECS = {"parquet": ("lz4", "snappy", "zstd", "gzip", "brotli", "none"), "arrow": ("lz4", "zstd", "none")}


def check_compression(fmt: str | None, compression: Any) -> str | None:
    """``compression`` if a sink of format ``fmt`` takes it (:data:`CODECS`; ``None``: the format's default).

    >>> check_compression("parquet", "snappy"), check_compression("arrow", None)
    ('snappy', None)
    >>> check_compression("arrow", "snappy")
    Traceback (most recent call last):
    ...
    pba_runtime.runtime.errors.UserError: compression of an arrow sink must be one of lz4, zstd, none, got 'snappy'
    >>> check_compression("csv", "lz4")
    Traceback (most recent call last):
    ...
    pba_runtime.runtime.errors.UserError: compression applies to the parquet and arrow sinks only, not to a csv sink
    """
    if compression is None:
        return None
    if fmt not in CODECS:
        raise UserError("compression applies to the parquet and arrow sinks only, "
                        + ("and this job has no sink" if fmt is None else f"not to a {fmt} sink"))
    if not isinstance(compression, str) or compression not in CODECS[fmt]:
        raise UserError(f"compression of a{'n' if fmt == 'arrow' else ''} {fmt} sink must be one of "
                        f"{', '.join(CODECS[fmt])}, got {compression!r}")
    return compression


def value_compression(table: Any, codec: str = "lz4") -> str | None:
    """``codec``, or ``"none"`` if ``table``'s ``value`` column is numbers LZ4 packs into more than
    :data:`VALUE_LZ4_MAX_RATIO` of their bytes (other columns, and values of other types, keep ``codec``);
    ``None`` if ``table`` has fewer than :data:`VALUE_SAMPLE_ROWS` rows to judge by.

    >>> import numpy as np, pyarrow as pa
    >>> rows = 4096
    >>> value_compression(pa.table({"value": np.repeat([2.5, 3.0], rows // 2)}))  # a sliding max's
    'lz4'
    >>> value_compression(pa.table({"value": np.random.default_rng(0).random(rows)}))  # a mean's digits
    'none'
    >>> value_compression(pa.table({"value": [[1.0]] * rows}))  # lists: as they are
    'lz4'
    >>> value_compression(pa.table({"value": [1.5, 2.5]})) is None  # too few rows
    True
    """
    import pyarrow as pa

    if codec != "lz4" or "value" not in table.column_names:
        return codec
    if table.num_rows < VALUE_SAMPLE_ROWS:
        return None
    values = table.column("value").combine_chunks()
    if pa.types.is_fixed_size_list(values.type):  # a vector a window: its numbers
        values = values.flatten()
    if not (pa.types.is_floating(values.type) or pa.types.is_integer(values.type)) or values.null_count:
        return codec
    width = values.type.bit_width // 8
    data = values.buffers()[1][values.offset * width:(values.offset + len(values)) * width]
    packed = pa.Codec("lz4_raw").compress(data)
    return codec if packed.size <= VALUE_LZ4_MAX_RATIO * data.size else "none"


def _in_progress(name: str) -> str:
    return f".{name}{_IN_PROGRESS}"


class PartWriter:
    """A task slot's writer of part files (see the module doc).

    Parameters
    ----------
    directory : str
        The sink's directory (it exists: the coordinator prepared it).
    fmt : {"parquet", "arrow"}
    slot : int
        The slot's index (part of every part's name).
    epoch : int
        The epoch of the first part: the id of the checkpoint resumed from, plus 1.
    rows_per_group : int
        Rows buffered before they are written: one Parquet row group (a batch is never split), or Arrow record
        batches of up to this many rows.
    durable : bool
        Fsync each part when it is closed: a checkpoint names it, so it must survive a crash. A job
        without checkpoints (``False``) only flushes its parts, as the CSV sink only flushes its file.
    parquet_options : dict, optional
        pyarrow ``ParquetWriter`` options over :data:`PARQUET_OPTIONS` (``bench/bench_sink_floor.py``
        measures the writer with others; a job keeps these).
    compression : str, optional
        The parts' codec, one of :data:`CODECS` of ``fmt`` (the job's ``compression``); ``None``: the format's
        default.
    """

    def __init__(self, directory: str, fmt: str, slot: int, epoch: int, rows_per_group: int = ROWS_PER_GROUP,
                 durable: bool = True, parquet_options: dict[str, Any] | None = None,
                 compression: str | None = None):
        if fmt not in SUFFIXES:
            raise ValueError(f"part files are parquet or arrow, got {fmt!r}")
        self.directory, self.fmt, self.slot, self.epoch = directory, fmt, slot, epoch
        self.rows_per_group = rows_per_group
        self.durable = durable
        chosen = dict(parquet_options or {})
        if check_compression(fmt, compression) is not None and fmt == "parquet":
            chosen["compression"] = compression
        self.parquet_options = {**PARQUET_OPTIONS, **chosen}
        #: the Arrow IPC writer's options (its record batches' codec)
        self.ipc_compression = None if compression in (None, "none") else compression
        # the value column's codec, chosen at the first part from its first table (:func:`value_compression`),
        # unless the caller chose the compression
        self._adapt_value = fmt == "parquet" and "compression" not in chosen
        self._value_codec: str | None = None
        self._buffer: list[Any] = []
        self._buffered = 0
        self._writer: Any = None
        self._file: Any = None
        self._schema: Any = None
        self.rows_written = 0

    @property
    def _path(self) -> str:
        return os.path.join(self.directory, _in_progress(part_name(self.fmt, self.epoch, self.slot)))

    def write(self, table: Any) -> None:
        """Add a batch's results (a pyarrow Table ``key, start, end, value``)."""
        if not table.num_rows:
            return
        self._buffer.append(table)
        self._buffered += table.num_rows
        if self._buffered >= self.rows_per_group:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._buffer:
            return
        table = pa.concat_tables(self._buffer, promote_options="permissive") if len(self._buffer) > 1 \
            else self._buffer[0]
        self._buffer, self._buffered = [], 0
        try:
            if self._writer is None:
                self._open(table)
            elif table.schema != self._schema:
                table = table.cast(self._schema)
            if self.fmt == "parquet":
                self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
            else:
                self._writer.write_table(table, max_chunksize=self.rows_per_group)
        except OSError as exc:
            raise JobError(f"cannot write the part file {self._path}: {exc.strerror or exc}") from None
        self.rows_written += table.num_rows

    def _open(self, table: Any) -> None:
        import pyarrow as pa

        schema = self._schema = table.schema
        self._file = pa.output_stream(self._path, buffer_size=WRITE_BUFFER)
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(self._file, schema, **self.options_for(table))
        else:
            self._writer = pa.ipc.new_file(self._file, schema, options=self._ipc_options())

    def _ipc_options(self) -> Any:
        """The Arrow IPC writer's options: its codec, and the compression on the calling thread (pyarrow's
        default hands each batch's buffers to its CPU thread pool; here each slot is already one of the job's
        parallel writers, and a pool would take the cores from the other slots)."""
        import pyarrow as pa

        return pa.ipc.IpcWriteOptions(compression=self.ipc_compression, use_threads=False)

    def options_for(self, table: Any) -> dict[str, Any]:
        """The Parquet writer's options for a part whose first table is ``table``: :attr:`parquet_options`, with
        the ``value`` column uncompressed if :func:`value_compression` says so of the first table large enough
        to judge by (decided once: a slot's results keep their kind)."""
        if not self._adapt_value:
            return self.parquet_options
        if self._value_codec is None:
            self._value_codec = value_compression(table, self.parquet_options["compression"])
        if self._value_codec is None or self._value_codec == self.parquet_options["compression"]:
            return self.parquet_options  # (None: too few rows to choose by; the next part chooses)
        codecs = {name: self.parquet_options["compression"] for name in table.column_names}
        return {**self.parquet_options, "compression": {**codecs, "value": self._value_codec}}

    def warm(self, table: Any) -> None:
        """Write ``table`` once as a part would be written (this format, these options) into memory, not into a
        part: a slot calls it before the stream starts.

        A process pays its first table, writer and row group dearly: pyarrow's first writer of a process costs
        more than the next, and the memory its columns, pages and buffers take is faulted in as it first grows;
        without this, each slot of the default job paid that inside its stream. Nothing is written to the sink's
        directory. (With an output stage the part is written on the stage's thread: pyarrow's per-thread
        memory is that thread's own, and only the process-wide part of the warm-up carries over.)
        """
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetWriter(sink, table.schema, **self.parquet_options) as writer:
                writer.write_table(table, row_group_size=max(table.num_rows, 1))
        else:
            with pa.ipc.new_file(sink, table.schema, options=self._ipc_options()) as writer:
                writer.write_table(table, max_chunksize=self.rows_per_group)

    def roll(self, next_epoch: int | None = None) -> list[str]:
        """Close the current part (flushed, and fsynced if ``durable``) and start epoch ``next_epoch``.

        Returns the committed names of the parts closed (none if this epoch had no results).
        """
        self._flush()
        names = []
        if self._writer is not None:
            path = self._path
            try:
                self._writer.close()
                if self._file is not None:
                    self._file.close()
                if self.durable:
                    fsync_path(path)
            except OSError as exc:
                raise JobError(f"cannot write the part file {path}: {exc.strerror or exc}") from None
            self._writer = self._file = None
            names.append(part_name(self.fmt, self.epoch, self.slot))
        if next_epoch is not None:
            self.epoch = next_epoch
        return names

    def close(self) -> None:
        """Stop writing (after a failure): the open part stays in progress, never committed."""
        self._buffer = []
        writer, self._writer = self._writer, None
        for closable in (writer, self._file):
            if closable is not None:
                try:
                    closable.close()
                except Exception:  # the part is abandoned; a later start removes it
                    pass
        self._file = None


def commit_parts(directory: str, names: list[str]) -> None:
    """Rename each part of ``names`` from in progress to its committed name, then fsync the directory.

    Idempotent: a part already committed is left as it is. A part that is
    neither in progress nor committed raises :class:`JobError`.
    """
    if not names:
        return
    for name in names:
        src, dst = os.path.join(directory, _in_progress(name)), os.path.join(directory, name)
        try:
            os.replace(src, dst)
        except FileNotFoundError:
            if not os.path.exists(dst):
                raise JobError(f"cannot commit the part file {dst}: it was not written (or was removed)") from None
        except OSError as exc:
            raise JobError(f"cannot commit the part file {dst}: {exc.strerror or exc}") from None
    try:
        fsync_path(directory)
    except OSError as exc:
        raise JobError(f"cannot commit the part files in {directory}: {exc.strerror or exc}") from None


def part_files(directory: str, fmt: str | None = None) -> list[str]:
    """The committed part files in ``directory`` (names, sorted), optionally of one format only.

    >>> import tempfile; d = tempfile.mkdtemp()
    >>> for n in ("part-000001-0000.parquet", ".part-000002-0000.parquet.inprogress", "notes.txt"):
    ...     _ = open(os.path.join(d, n), "w")
    >>> part_files(d)
    ['part-000001-0000.parquet']
    >>> import shutil; shutil.rmtree(d)
    """
    out = []
    for name in os.listdir(directory):
        m = _PART.match(name)
        if m and not m.group(1) and not m.group(5) and (fmt is None or m.group(4) == fmt):
            out.append(name)
    return sorted(out)


def prepare_part_dir(directory: str, fmt: str, checkpoint_id: int | None = None,
                     pending: list[str] | None = None) -> list[str]:
    """Before a job writes parts into ``directory``: create it (its parent must exist) and make it hold
    exactly the committed output.

    A fresh start (``checkpoint_id`` ``None``) removes every part file (committed
    or in progress, of either format) of an earlier run. A resume from checkpoint
    ``checkpoint_id`` first commits its ``pending`` parts, then removes every
    part in progress and every part of a later epoch. Returns the removed names.
    Other files are left alone. A directory that cannot be created or written,
    or a pending part that is gone, raises :class:`UserError`.
    """
    parent = os.path.dirname(os.path.abspath(directory))
    if not os.path.isdir(parent):
        raise UserError(f"output directory does not exist: {parent}")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the output directory {directory}: {exc.strerror or exc}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(f"cannot write the output directory {directory}")
    if checkpoint_id is not None and pending:
        try:
            commit_parts(directory, pending)
        except JobError as exc:
            raise UserError(f"cannot resume: {exc}") from None
    removed = []
    for name in sorted(os.listdir(directory)):
        m = _PART.match(name)
        if m is None:
            continue
        stale = checkpoint_id is None or bool(m.group(1)) or bool(m.group(5)) or int(m.group(2)) > checkpoint_id
        if stale:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise UserError(f"cannot remove {os.path.join(directory, name)}: {exc.strerror or exc}") from None
            removed.append(name)
    return removed
