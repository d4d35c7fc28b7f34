"""Sinks: the compiled text writer (CSV and JSON lines) against the per-line reference and ``repr``, and the part
files of Parquet / Arrow sinks."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime.runtime import Debs12Source, Debs14Source, Job, UserError, text_lines
from pba_runtime.runtime.byte_ring import ByteRing
from pba_runtime.runtime.errors import JobError
from pba_runtime.runtime.part_files import PartWriter, commit_parts, part_files, prepare_part_dir
from pba_runtime.runtime.sinks import format_batch, format_results, result_table, sample_parts
from pba_runtime.runtime.text_lines import JSONL, float_text, lines

SPECIAL = [0.0, -0.0, 2.0, -3.0, 1e16, -1e16, 1e15, 9007199254740993.0, 2.0**63, 1e-5, 1e-4, 9.999999999999999e-05,
           float("nan"), float("inf"), -float("inf"), 5e-324, -5e-324, 2.2250738585072014e-308, 0.1 + 0.2,
           1.7976931348623157e308, 12345.5, 5977587022847.288, 1234567890.125, 0.000123, 1e22, 123456789012345.67]


def slow_csv(parts, range_):
    return slow_text("csv", parts, range_)


def slow_text(fmt, parts, range_):
    return "".join(format_results(fmt, k, e, r, range_) for k, e, r in parts if len(e)).encode()


#: the text sinks' formats: one compiled writer, two layouts
TEXT = pytest.mark.parametrize("fmt", ["csv", "jsonl"])


def test_float_text_is_repr_on_edge_values_and_random_bit_patterns():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**64, 200_000, dtype=np.uint64).view(np.float64)
    scaled = rng.random(200_000) * 10.0 ** rng.integers(-8, 20, 200_000)
    decimals = np.round(rng.random(100_000) * 1000, 3)
    near = np.nextafter(decimals, np.inf)  # 17 significant digits: the repr fallback
    for v in (np.array(SPECIAL), bits, scaled, -scaled, decimals, -decimals, near, np.floor(scaled)):
        assert float_text(v) == [repr(x) for x in v.tolist()]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=50))
def test_float_text_matches_repr(values):
    v = np.array(values, dtype=np.float64)
    assert float_text(v) == [repr(x) for x in v.tolist()]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=6)),
                          st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=5)),
                min_size=1, max_size=6),
       st.integers(0, 10**6))
@TEXT
def test_text_lines_are_the_per_line_formatters_bytes(fmt, parts, range_):
    """Any keys (quoted where CSV needs, escaped as JSON needs), any floats, negative starts: the compiled lines
    == the reference's."""
    built = [(k, np.arange(len(v), dtype=np.int64) * 7 - 3, np.array(v)) for k, v in parts]
    assert format_batch(fmt, built, range_) == slow_text(fmt, built, range_)
    ints = [(k, e, np.arange(len(e), dtype=np.int64) * -(2**40)) for k, e, _ in built]
    assert format_batch(fmt, ints, range_) == slow_text(fmt, ints, range_)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 4),
       st.lists(st.tuples(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=6)), st.integers(1, 5)),
                min_size=1, max_size=5),
       st.data())
@TEXT
def test_vector_results_are_the_per_line_formatters_bytes(fmt, width, shape, data):
    """Vector results (a ``moment_sketch``'s rows of floats, any width, non-finite numbers among them), as parts
    and as a slot's columns: the compiled lines == the reference's (CSV ``;``-joined, JSON lists)."""
    from pba_runtime.runtime.sinks import ResultParts

    floats = st.floats(allow_nan=True, allow_infinity=True)
    parts = ResultParts()
    for key, n in shape:
        values = np.array(data.draw(st.lists(floats, min_size=n * width, max_size=n * width)), dtype=np.float64)
        parts.append((key, np.arange(n, dtype=np.int64) + 1000, values.reshape(n, width)))
    assert format_batch(fmt, list(parts), 3) == slow_text(fmt, parts, 3)
    parts.columns = (np.concatenate([e for _, e, _ in parts]), np.concatenate([r for _, _, r in parts]))
    assert format_batch(fmt, parts, 3) == slow_text(fmt, parts, 3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.5, -2.25, 123.456, 1e-3, 7.0, 0.1 + 0.2, 0.0, -0.0, float("nan"), 1e-9]),
                          st.integers(1, 6)), min_size=1, max_size=12),
       st.integers(1, 4))
@TEXT
def test_text_lines_repeat_the_text_of_a_repeated_value_as_the_reference_writes_it(fmt, runs, n_keys):
    """A sliding max repeats its value from window to window: the writer copies the row before's text. Runs of
    equal values (zeros of either sign and nan among them, which must not be copied for one another), across
    parts, before and after a value that sends the batch to the two-pass path: the reference's bytes."""
    values = np.array([v for v, n in runs for _ in range(n)])
    cuts = np.linspace(0, len(values), n_keys + 1).astype(int)
    parts = [(k, np.arange(cuts[k], cuts[k + 1], dtype=np.int64) + 9, values[cuts[k]:cuts[k + 1]])
             for k in range(n_keys)]
    assert format_batch(fmt, parts, 3) == slow_text(fmt, parts, 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.integers(-99, 10**6), st.sampled_from(["a", "b,c", ""])),
                          st.sampled_from([-7, 0, 1, 5, 95, 995, 9_990, 99_995, 10**12 - 3, 2**62]),
                          st.lists(st.sampled_from([1, 1, 1, 1, 0, 2, 9]), min_size=1, max_size=40),
                          st.lists(st.sampled_from([2.5, 2.5, 2.5, 99.125, -0.5, 0.1 + 0.2]), min_size=1, max_size=40)),
                min_size=1, max_size=5),
       st.sampled_from([-3, 0, 1, 3, 10, 96, 1024]))
@TEXT
def test_text_lines_of_consecutive_windows_are_the_line_before_incremented(fmt, parts, range_):
    """Slide-1 count windows: a row one position on with the same value is written as the line before with its
    start and end incremented in their text. Carries across 9 -> 10 -> ... (start and end apart), negative and
    zero starts, steps of 0 and more than one, value changes and key changes: the reference's bytes, with and
    without the slot's ring."""
    built = []
    for key, first, steps, vals in parts:
        ends = first + np.cumsum(np.array(steps, dtype=np.int64)) - steps[0]
        built.append((key, ends, np.resize(np.array(vals), len(ends))))
    expected = slow_text(fmt, built, range_)
    assert format_batch(fmt, built, range_) == expected
    ring = ByteRing.create(1 << 16)
    try:
        ref = format_batch(fmt, built, range_, ring)
        got = bytes(ring.view(ref)) if isinstance(ref, tuple) else ref
        assert got == expected
    finally:
        ring.close()


@TEXT
@pytest.mark.parametrize("little", [True, False])
def test_text_lines_of_a_slide_1_window_over_many_rows(monkeypatch, little, fmt):
    """The default job's shape: long runs of consecutive windows, a value repeated over most of them, ends
    crossing 10**k, keys whose lines are longer than the shortcut keeps (96 bytes); every row's bytes as the
    reference's, also without the shortcut (a big-endian machine's path)."""
    monkeypatch.setattr(text_lines, "_LITTLE", little)
    rng = np.random.default_rng(3)
    parts = []
    for key, first in ((46, 1), (7, 9_000), (1234, 99_000), ("k" * 40, 990), ("k" * 70, 5), (3, 10**15)):
        ends = np.arange(first, first + 20_000, dtype=np.int64)
        vals = np.maximum.accumulate(np.round(rng.random(len(ends)) * 100, 3))
        parts.append((key, ends, vals))
    # a value of 15-17 digits on every row (a mean's, a deviation's): the template up to end, then the value
    ends = np.arange(95, 20_095, dtype=np.int64)
    parts.append(("mean", ends, np.sqrt(rng.random(len(ends)) * 100) * rng.choice([1e-5, 1.0, 1e12], len(ends))))
    assert format_batch(fmt, parts, 1024) == slow_text(fmt, parts, 1024)


@TEXT
@pytest.mark.parametrize("range_", [-3, 3, 90, 1024])
def test_text_lines_of_a_slide_1_window_across_two_and_three_digits(range_, fmt):
    """Consecutive windows whose start or end has one, two or three digits, a negative range (end below
    start) among them: the rows written from the line before's template are the reference's."""
    ends = np.arange(-20, 1_300, dtype=np.int64)
    parts = [(5, ends, np.full(len(ends), 2.5)), ("k", ends + 7, np.full(len(ends), -0.125))]
    assert format_batch(fmt, parts, range_) == slow_text(fmt, parts, range_)


def test_json_lines_read_back_to_the_same_doubles():
    """Random bit patterns (non-finite ones among them) as JSON lines: :mod:`json` reads every line back to the
    key, the window and the same double (``NaN`` as a NaN)."""
    rng = np.random.default_rng(11)
    values = np.concatenate([np.array(SPECIAL), rng.integers(0, 2**64, 50_000, dtype=np.uint64).view(np.float64)])
    ends = np.arange(len(values), dtype=np.int64) + 10**12
    text = lines([b'{"key": "k\\u00e9", "start": '], np.array([len(values)]), ends, 7, values, JSONL)
    rows = [json.loads(line) for line in text.decode().splitlines()]
    assert [r["key"] for r in rows[:1]] == ["k\u00e9"] and [r["end"] - r["start"] for r in rows] == [7] * len(rows)
    assert [r["end"] for r in rows] == ends.tolist()
    got = np.array([r["value"] for r in rows])
    same = (got.view(np.uint64) == values.view(np.uint64)) | (np.isnan(got) & np.isnan(values))
    assert same.all()


def test_lines_checks_its_lengths():
    with pytest.raises(ValueError, match="counts must sum"):
        lines([b"1,"], np.array([3]), np.array([1, 2]), 1, np.array([1.0, 2.0]))


@TEXT
@pytest.mark.parametrize("keys", [[7, 3, 12], ["mf01", "a b", "plug-2"], [True, None, 'q"\\é']])
def test_text_batch_writes_the_bytes_of_the_per_line_formatter(keys, fmt):
    rng = np.random.default_rng(1)
    parts = [(k, np.arange(10, 10 + n), np.concatenate([np.array(SPECIAL), rng.random(n - len(SPECIAL)) * 100]))
             for k, n in zip(keys, (30, 40, 50))]
    parts.append((keys[0], np.array([], dtype=np.int64), np.array([])))  # a key without windows this batch
    assert format_batch(fmt, parts, 4) == slow_text(fmt, parts, 4)
    ints = [(k, np.arange(5, 9), np.arange(4, dtype=np.int64) * -3) for k in keys]
    assert format_batch(fmt, ints, 5) == slow_text(fmt, ints, 5)


def test_csv_batch_quotes_keys_writes_vectors_and_falls_back_for_lists():
    quoted = [("a,b", np.array([3]), np.array([1.5])), (' pad', np.array([3]), np.array([2.0])),
              ('q"', np.array([4]), np.array([-0.0]))]
    assert format_batch("csv", quoted, 3) == slow_csv(quoted, 3) == b'"a,b",0,3,1.5\n pad,0,3,2.0\n"q""",1,4,-0.0\n'
    vectors = [(1, np.array([4, 5]), np.array([[1.0, 2.0], [3.0, 4.5]]))]
    assert format_batch("csv", vectors, 4) == slow_csv(vectors, 4) == b"1,0,4,1.0;2.0\n1,1,5,3.0;4.5\n"
    lists = [(1, np.array([2]), [[1.0, 2.0]])]
    assert format_batch("csv", lists, 2) == slow_csv(lists, 2)
    assert format_batch("csv", [], 2) == b""


def test_result_table_columns():
    t = result_table([(3, np.array([4, 5]), np.array([1, 2], dtype=np.int64)), (1, np.array([9]), np.array([7]))], 4)
    assert t.schema.names == ["key", "start", "end", "value"]
    assert t.column("key").to_pylist() == [3, 3, 1] and t.column("start").to_pylist() == [0, 1, 5]
    assert t.column("value").type == pa.int64()
    v = result_table([("k", np.array([2]), np.array([[1.0, 2.0, 3.0]]))], 2).column("value")
    assert v.to_pylist() == [[1.0, 2.0, 3.0]]
    lists = result_table([("k", np.array([2, 3]), [[1.0], []])], 2).column("value")
    assert lists.type == pa.list_(pa.float64()) and lists.to_pylist() == [[1.0], []]


def table(n, key=1):
    return pa.table({"key": [key] * n, "start": list(range(n)), "end": list(range(1, n + 1)),
                     "value": [float(i) for i in range(n)]})


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_part_writer_rolls_whole_files_in_row_groups(tmp_path, fmt):
    w = PartWriter(str(tmp_path), fmt, slot=3, epoch=5, rows_per_group=10)
    for _ in range(5):
        w.write(table(4))
    assert w.roll(next_epoch=6) == [f"part-000005-0003.{fmt}"]
    assert w.roll(next_epoch=7) == []  # nothing written in epoch 6: no part
    assert os.listdir(tmp_path) == [f".part-000005-0003.{fmt}.inprogress"]
    commit_parts(str(tmp_path), [f"part-000005-0003.{fmt}"])
    commit_parts(str(tmp_path), [f"part-000005-0003.{fmt}"])  # idempotent
    path = tmp_path / f"part-000005-0003.{fmt}"
    if fmt == "parquet":
        meta = pq.ParquetFile(path).metadata
        assert meta.num_row_groups == 2  # 12 rows, then 8
        columns = [meta.row_group(0).column(i) for i in range(4)]  # LZ4-compressed pages
        assert all(c.compression == "LZ4" for c in columns)
        assert [("BYTE_STREAM_SPLIT" in c.encodings, "PLAIN" in c.encodings) for c in columns] == [
            (False, True), (True, False), (True, False), (False, True)]  # start and end byte-stream-split
        # statistics for end only (a time range's filter): end's min and max in the first row group
        assert [c.statistics is not None and c.statistics.has_min_max for c in columns] == [False, False, True, False]
        assert (columns[2].statistics.min, columns[2].statistics.max) == (1, 4)
        import polars as pl  # the dev extra has it

        assert pl.read_parquet(path)["value"].to_list() == [float(i % 4) for i in range(20)]
        assert pd.read_parquet(path)["value"].tolist() == [float(i % 4) for i in range(20)]
    got = ds.dataset(str(tmp_path), format="parquet" if fmt == "parquet" else "ipc").to_table()
    assert got.num_rows == 20 and got.column("value").to_pylist() == [float(i % 4) for i in range(20)]
    w.close()
    with pytest.raises(JobError, match="it was not written"):
        commit_parts(str(tmp_path), [f"part-000009-0000.{fmt}"])


def test_a_parts_value_column_is_lz4_compressed_only_where_lz4_packs_it(tmp_path):
    """LZ4 stays on a sliding max's repeated values, not on a mean's digits (it cost them ~2x the writer for
    ~12% fewer bytes); the choice is made once, from the writer's first table of enough rows, and a caller's
    compression is kept as given. The rows read back the same either way."""
    rng = np.random.default_rng(8)
    n = 5000
    kinds = {"max": np.repeat(rng.random(n // 100), 100), "mean": rng.random(n) * 1e3 / 7}

    def codecs(path):
        meta = pq.ParquetFile(path).metadata
        return [meta.row_group(0).column(i).compression for i in range(4)]

    for kind, values in kinds.items():
        for options, want in ((None, "LZ4" if kind == "max" else "UNCOMPRESSED"), ({"compression": "lz4"}, "LZ4")):
            d = tmp_path / f"{kind}-{options is not None}"
            d.mkdir()
            w = PartWriter(str(d), "parquet", slot=0, epoch=1, rows_per_group=n, parquet_options=options)
            t = pa.table({"key": np.zeros(n, np.int64), "start": np.arange(n), "end": np.arange(n) + 1,
                          "value": values})
            w.write(t)
            w.roll(next_epoch=2)
            w.write(t.set_column(3, "value", pa.array(kinds["max" if kind == "mean" else "mean"])))  # the other kind
            names = w.roll()
            assert names == ["part-000002-0000.parquet"]
            for epoch, expect in ((1, values), (2, kinds["max" if kind == "mean" else "mean"])):
                path = d / f".part-00000{epoch}-0000.parquet.inprogress"
                assert codecs(path) == ["LZ4", "LZ4", "LZ4", want]  # the first table's choice, for every part
                assert np.array_equal(pq.read_table(path).column("value").to_numpy(), expect)
            w.close()

    # a first part too small to judge by (an early checkpoint) keeps LZ4; the next part's first table chooses
    w = PartWriter(str(tmp_path), "parquet", slot=1, epoch=1, rows_per_group=n)
    small = pa.table({"key": np.zeros(10, np.int64), "start": np.arange(10), "end": np.arange(10) + 1,
                      "value": kinds["mean"][:10]})
    w.write(small)
    w.roll(next_epoch=2)
    w.write(pa.table({"key": np.zeros(n, np.int64), "start": np.arange(n), "end": np.arange(n) + 1,
                      "value": kinds["mean"]}))
    w.roll()
    assert codecs(tmp_path / ".part-000001-0001.parquet.inprogress")[3] == "LZ4"
    assert codecs(tmp_path / ".part-000002-0001.parquet.inprogress")[3] == "UNCOMPRESSED"
    w.close()


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_part_writers_warm_up_writes_nothing_and_changes_no_part(tmp_path, fmt):
    """A slot warms its part writer before its stream on made-up results (pyarrow's first writer and memory):
    nothing reaches the directory, and the parts written after are those of a writer never warmed."""
    got = {}
    for warm in (False, True):
        d = tmp_path / str(warm)
        d.mkdir()
        w = PartWriter(str(d), fmt, slot=0, epoch=1, rows_per_group=10, durable=False)
        if warm:
            w.warm(result_table(sample_parts(1000, keys=3), 16))
            assert os.listdir(d) == [] and w.rows_written == 0
        w.write(table(12))
        w.write(table(3, key=2))
        (name,) = w.roll()
        got[warm] = (pq.read_table if fmt == "parquet" else lambda p: pa.ipc.open_file(p).read_all())(
            d / f".{name}.inprogress")
    assert got[True].equals(got[False]) and got[True].num_rows == 15


def test_a_batch_past_the_row_group_size_is_written_as_it_comes_as_one_row_group(tmp_path):
    """A slot's batch is never split or held back: the default job's ~32,750 rows a batch are each a group."""
    w = PartWriter(str(tmp_path), "parquet", slot=0, epoch=1, rows_per_group=10, durable=False)
    w.write(table(3))
    w.write(table(25))  # 28 rows buffered: both written, as one group
    w.write(table(12))  # past 10 on its own: written at once
    assert w.rows_written == 40
    w.write(table(4))
    assert w.rows_written == 40  # held until 10 rows or the roll
    names = w.roll()
    meta = pq.ParquetFile(tmp_path / f".{names[0]}.inprogress").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [28, 12, 4]


@pytest.mark.parametrize("durable", [True, False])
def test_a_part_is_fsynced_only_when_a_checkpoint_will_name_it(tmp_path, monkeypatch, durable):
    """With checkpoints a closed part must survive a crash (fsync); without, it is flushed only, as the CSV file."""
    from pba_runtime.runtime import part_files

    synced = []
    monkeypatch.setattr(part_files, "fsync_path", synced.append)
    w = PartWriter(str(tmp_path), "parquet", slot=0, epoch=1, durable=durable)
    w.write(table(3))
    names = w.roll()
    assert (synced == [str(tmp_path / f".{names[0]}.inprogress")]) if durable else synced == []
    assert pq.read_table(tmp_path / f".{names[0]}.inprogress").num_rows == 3


def test_prepare_part_dir_keeps_exactly_the_committed_output(tmp_path):
    d = str(tmp_path / "out")
    names = ["part-000001-0000.parquet", "part-000002-0001.parquet", ".part-000003-0000.parquet.inprogress",
             "part-000004-0000.parquet", ".part-000003-0001.parquet.inprogress", "notes.txt"]
    os.mkdir(d)
    for n in names:
        open(os.path.join(d, n), "w").close()
    # resume from checkpoint 3 whose pending part of slot 0 was not renamed yet (killed after the checkpoint)
    removed = prepare_part_dir(d, "parquet", 3, ["part-000003-0000.parquet"])
    assert removed == [".part-000003-0001.parquet.inprogress", "part-000004-0000.parquet"]
    assert sorted(os.listdir(d)) == ["notes.txt", "part-000001-0000.parquet", "part-000002-0001.parquet",
                                     "part-000003-0000.parquet"]
    assert part_files(d) == ["part-000001-0000.parquet", "part-000002-0001.parquet", "part-000003-0000.parquet"]
    with pytest.raises(UserError, match="cannot resume: cannot commit the part file"):
        prepare_part_dir(d, "parquet", 3, ["part-000003-0007.parquet"])
    prepare_part_dir(d, "parquet")  # a fresh start: every part of the earlier run goes, nothing else
    assert os.listdir(d) == ["notes.txt"]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_part_file_sinks_hold_the_csv_sinks_windows(tmp_path, fmt):
    rows = {}
    for sink in ("csv", fmt):
        out = tmp_path / f"out-{sink}"
        summary = Job(Debs14Source(plugs=6, tuples=30_000), pr.CountWindow(range=64, slide=3), "mean", "pba",
                      parallelism=2, batch_size=4096, sink=f"{sink}:{out}").run()
        if sink == "csv":
            with open(out, newline="") as f:
                got = [(int(k), int(s), int(e), float(v)) for k, s, e, v in list(csv.reader(f))[1:]]
        else:
            assert len(part_files(str(out), fmt)) == 2 and not [n for n in os.listdir(out) if n.startswith(".")]
            t = ds.dataset(str(out), format="parquet" if fmt == "parquet" else "ipc").to_table()
            got = list(zip(*(t.column(c).to_pylist() for c in ("key", "start", "end", "value"))))
        rows[sink] = sorted(got, key=lambda r: (r[0], r[2]))
        assert summary["windows"] == len(got)
    assert rows["csv"] == rows[fmt]


CODECS = [("parquet", c) for c in ("lz4", "snappy", "zstd", "gzip", "brotli", "none")] + [
    ("arrow", c) for c in ("lz4", "zstd", "none")]


def codecs_of(path, fmt):
    """The codec names a part's data was written with (Parquet: every column chunk's; Arrow: the batches')."""
    if fmt == "parquet":
        meta = pq.ParquetFile(path).metadata
        return {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups) for c in range(4)}
    # pyarrow does not tell an IPC batch's codec: against the same rows written uncompressed, a compressed part
    # (its key, start and end columns pack) is smaller
    table = pa.ipc.open_file(str(path)).read_all()
    plain = pa.BufferOutputStream()
    with pa.ipc.new_file(plain, table.schema) as w:
        w.write_table(table)
    return {"UNCOMPRESSED" if os.path.getsize(path) >= 0.9 * plain.getvalue().size else "COMPRESSED"}


@pytest.mark.parametrize("fmt, codec", CODECS)
def test_a_part_file_sinks_codec_is_the_one_asked_for_and_its_rows_are_the_defaults(tmp_path, fmt, codec):
    """``compression`` picks the parts' codec (every column of a Parquet part, Spark's ``compression`` option;
    an Arrow part's record batches); the committed rows are those of the default codec's run, bit for bit."""
    rows = {}
    for name, chosen in (("default", None), (codec, codec)):
        out = tmp_path / name
        summary = Job(Debs14Source(plugs=6, tuples=30_000), pr.CountWindow(range=64, slide=3), "mean", "sba",
                      parallelism=2, batch_size=4096, sink=f"{fmt}:{out}", compression=chosen).run()
        parts = part_files(str(out), fmt)
        assert len(parts) == 2
        t = ds.dataset(str(out), format="parquet" if fmt == "parquet" else "ipc").to_table()
        assert t.num_rows == summary["windows"]
        rows[name] = t.sort_by([("key", "ascending"), ("end", "ascending")])
        if chosen is not None:
            want = {"none": "UNCOMPRESSED"}.get(codec, codec.upper()) if fmt == "parquet" else \
                ("UNCOMPRESSED" if codec == "none" else "COMPRESSED")
            assert {c for p in parts for c in codecs_of(os.path.join(out, p), fmt)} == {want}
    assert rows["default"].equals(rows[codec])


@pytest.mark.parametrize("sink, codec, match", [
    ("parquet:{d}", "lzo", "compression of a parquet sink must be one of lz4, snappy, zstd, gzip, brotli, none"),
    ("arrow:{d}", "snappy", "compression of an arrow sink must be one of lz4, zstd, none, got 'snappy'"),
    ("parquet:{d}", 4, "got 4"),
    ("csv:{d}.csv", "lz4", "parquet and arrow sinks only, not to a csv sink"),
    ("none", "zstd", "parquet and arrow sinks only, and this job has no sink")])
def test_a_codec_the_sink_does_not_take_is_refused_before_anything_is_written(tmp_path, sink, codec, match):
    d = tmp_path / "out"
    with pytest.raises(UserError, match=match) as info:
        Job(Debs14Source(plugs=2, tuples=1000), pr.CountWindow(range=8, slide=1), sink=sink.format(d=d),
            compression=codec)
    assert isinstance(info.value, ValueError)
    assert not os.path.exists(d) and not os.path.exists(f"{d}.csv")


def test_part_file_sink_with_time_windows_writes_late_tuples_beside_it(tmp_path):
    out = tmp_path / "res"
    summary = Job(Debs12Source(sensors=2, tuples=20_000, disorder=300, disorder_fraction=0.1),
                  pr.TimeWindow(range=2000, slide=500), "max", "sba", parallelism=1, allowed_lateness=50,
                  sink=f"parquet:{out}").run()
    assert summary["late"] > 0
    late = tmp_path / "res.late.csv"
    assert late.read_text().startswith("key,timestamp,value\n")
    assert ds.dataset(str(out)).to_table().num_rows == summary["windows"]


def test_spawned_slots_import_the_sink_before_they_are_ready(tmp_path):
    """Under spawn (no forkserver to preload pyarrow and the merge) the slots still say when they are ready,
    the start-up is reported apart, and the Arrow parts hold every window."""
    out = tmp_path / "res"
    summary = Job(Debs14Source(plugs=4, tuples=20_000), pr.CountWindow(range=100, slide=1), "max", "auto",
                  parallelism=2, sink=f"arrow:{out}", start_method="spawn").run()
    assert summary["startup_s"] > 0 and summary["windows"] == 20_000 - 4 * 99
    assert ds.dataset(str(out), format="ipc").to_table().num_rows == summary["windows"]
    assert summary["reasons"] == {"sba:small_window": 4}


@pytest.mark.parametrize("output_stage", [True, False])
@pytest.mark.parametrize("batch_size", [997, 4096])
def test_csv_sink_through_the_output_stage_holds_every_keys_windows_exactly(tmp_path, batch_size, output_stage):
    """The slots format and send on their output stage while they aggregate the next batch (or on their main
    loop): the file holds, per key and in order, exactly the windows of the key's stream (max: no rounding),
    repr-exact."""
    src = Debs14Source(plugs=5, tuples=40_000)
    keys, values, _ = Debs14Source(plugs=5, tuples=40_000).take(0, 40_000)
    window = pr.CountWindow(range=50, slide=3)
    out = tmp_path / "out.csv"
    summary = Job(src, window, "max", "pba", parallelism=2, batch_size=batch_size, sink=f"csv:{out}",
                  output_stage=output_stage).run()
    assert summary["output_stage"] is output_stage
    with open(out, newline="") as f:
        rows = list(csv.reader(f))[1:]
    got: dict[int, list] = {}
    for k, s, e, v in rows:
        assert float(v) == float(repr(float(v))) and repr(float(v)) == v  # written as repr writes it
        got.setdefault(int(k), []).append((int(s), int(e), float(v)))
    for k in np.unique(keys):
        ends, res = pr.sliding_aggregate(values[keys == k], window=window, agg="max", algorithm="sba")
        assert got[int(k)] == [(int(e) - 50, int(e), float(r)) for e, r in zip(ends, res)]


def test_sinks_take_a_batchs_columns_instead_of_concatenating_its_parts():
    """A slot's :class:`ResultParts` with ``columns`` (every part's windows end to end): the CSV and JSON bytes
    and the table are the per-part path's (JSON lines of keys :mod:`json` writes: numpy's ints it does not)."""
    from pba_runtime.runtime.sinks import ResultParts

    rng = np.random.default_rng(2)
    counts = [30, 1, 45, 12]
    ends = np.concatenate([np.arange(100, 100 + n) for n in counts])
    floats = np.concatenate([np.array(SPECIAL), rng.random(len(ends) - len(SPECIAL)) * 100])
    ints = (rng.random(len(ends)) * 1e6).astype(np.int64)
    cuts = np.cumsum([0, *counts])
    key_sets = ([7, 3, 12, 40], ["mf01", "a b", "plug-2", "x"], [np.int64(7), 3, np.int32(-12), 40],
                [True, False, True, 1], [7, "7", 3.5, None])
    for keys, res in [(keys, floats) for keys in key_sets] + [([7, 3, 12, 40], ints)]:
        plain = [(k, ends[a:b], res[a:b]) for k, a, b in zip(keys, cuts[:-1], cuts[1:])]
        parts = ResultParts(plain)
        parts.columns = (ends, res)
        for fmt in ("csv",) if any(isinstance(k, np.generic) for k in keys) else ("csv", "jsonl"):
            assert format_batch(fmt, parts, 4) == format_batch(fmt, plain, 4) == slow_text(fmt, plain, 4)
            ring = ByteRing.create(1 << 16)
            producer = ByteRing.attach(ring.name)
            try:
                ref = format_batch(fmt, parts, 4, producer)
                assert bytes(ring.view(ref)) == slow_text(fmt, plain, 4)
            finally:
                producer.close()
                ring.close()
        fast, slow = result_table(parts, 4), result_table(plain, 4)
        assert fast.schema == slow.schema and fast.column("key").to_pylist() == slow.column("key").to_pylist()
        assert fast.schema.field("key").type == (pa.int64() if all(type(k) in (int, np.int64, np.int32)
                                                                     for k in keys) else pa.string())
        for name in ("start", "end", "value"):  # bit for bit (NaN included)
            assert fast.column(name).to_numpy().tobytes() == slow.column(name).to_numpy().tobytes()


def test_output_stage_only_where_the_cores_give_every_busy_thread_one(monkeypatch):
    """Auto: an output stage beside each slot only with cores for each slot's two threads and the coordinator;
    never without a sink; as told otherwise; a bad value is refused."""
    src, window = Debs14Source(plugs=2, tuples=100), pr.CountWindow(range=4, slide=1)
    for cores, staged in ((4, False), (5, True)):
        monkeypatch.setattr(Job, "cores", staticmethod(lambda cores=cores: cores))
        assert Job(src, window, sink="csv:out.csv", parallelism=2).output_stage() is staged
        assert Job(src, window, sink="parquet:out", parallelism=2, output_stage=not staged).output_stage() is not staged
        assert Job(src, window, sink="jsonl:out.jsonl", parallelism=2).output_stage() is staged
        assert Job(src, window).output_stage() is False
    with pytest.raises(UserError, match="output_stage must be True, False or None"):
        Job(src, window, sink="csv:out.csv", output_stage="yes")


def test_line_prefixes_of_equal_keys_of_other_types_are_their_own():
    """``1``, ``True`` and ``1.0`` are one key of a dict but three CSV fields (and JSON values): the cache of a
    batch's key prefixes keeps them apart, and the formats' apart."""
    from pba_runtime.runtime.sinks import ResultParts

    ends, res = np.array([5, 6]), np.array([0.5, 1.5])
    for keys, first in (((1, 2), b"1,"), ((True, 2), b"True,"), ((1.0, 2), b"1.0,"), ((1, 2), b"1,")):
        parts = ResultParts([(keys[0], ends[:1], res[:1]), (keys[1], ends[1:], res[1:])])
        parts.columns = (ends, res)
        assert format_batch("csv", parts, 4) == first + b"1,5,0.5\n2,2,6,1.5\n" == slow_csv(list(parts), 4)
        assert format_batch("jsonl", parts, 4) == slow_text("jsonl", list(parts), 4)
    assert format_batch("jsonl", parts, 4).startswith(b'{"key": 1, "start": 1, "end": 5, "value": 0.5}\n')


def test_line_prefixes_of_many_keys_or_unhashable_keys_are_not_cached(monkeypatch):
    """A batch of more keys than the prefix cache takes, or with an unhashable key, is written from its keys
    directly, the same bytes; a tuple of prefixes is prefixes, not a blob."""
    from pba_runtime.runtime import sinks
    from pba_runtime.runtime.sinks import ResultParts
    from pba_runtime.runtime.text_lines import lines

    ends, res = np.array([5, 6, 7]), np.array([0.5, 1.5, 2.5])
    monkeypatch.setattr(sinks, "PREFIX_CACHE_KEYS", 2)
    sinks._cached_prefix_blob.cache_clear()
    for keys in ((1, 2, 3), (1, [2], "x")):
        parts = ResultParts([(k, ends[i:i + 1], res[i:i + 1]) for i, k in enumerate(keys)])
        parts.columns = (ends, res)
        for fmt in ("csv", "jsonl"):
            assert format_batch(fmt, parts, 4) == slow_text(fmt, list(parts), 4)
    assert sinks._cached_prefix_blob.cache_info().currsize == 0
    assert lines((b"a,", b"b,"), np.array([1, 2]), ends, 4, res) == b"a,1,5,0.5\nb,2,6,1.5\nb,3,7,2.5\n"
