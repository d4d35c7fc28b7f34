"""What each piece of a sink costs on its own, per result row, beside what the 0.7x goal allows (issue 18).

The goal: with a CSV or Parquet sink, ``pba-run``'s default job runs at >= 0.7x the rate of the job without
one. On a machine whose cores the job keeps busy, that is a CPU budget: if the job without a sink spends
``T`` ns of CPU a tuple, a sink may add at most ``T / 0.7 - T`` ns a row (one result row per tuple here).
This bench measures the pieces a sink cannot do without, each alone, so that budget can be read against
them:

* ``csv_loop``: the compiled CSV writer's loop alone (``text_lines.write_float_lines``), the batch's columns to text;
* ``csv_batch``: ``sinks.format_batch`` as a task slot calls it (the loop and the batch's Python, the
  lines written into a shared-memory ring: ``byte_ring.ByteRing``);
* ``jsonl_batch``: the same for the JSON-lines sink (``format_batch("jsonl", ...)``: the one compiled writer with
  JSON's texts between the numbers, each line ~2.6x a CSV line's bytes);
* ``file_write``: those CSV bytes appended to a file beside the results by the CSV sink's own writer
  (``sinks.FileSink``: the kernel's copy into the page cache, which the coordinator's sink thread pays for
  every byte), then the file removed;
* ``parquet`` and ``arrow``: a slot's part-file writer (``sinks.result_table`` and
  ``part_files.PartWriter``: the table, the encoding, the write);
* ``csv_reference`` and ``jsonl_reference``: the readable per-line formatter (``sinks.format_results``), on
  every tenth batch: the slow reference the compiled writer is tested against, for scale (what the JSON-lines
  sink ran before it was compiled);
* ``parquet_table``: the Parquet piece's table alone (``sinks.result_table``), and ``parquet_writer``: its
  writer alone (the slot's part writer, ``part_files.PartWriter`` with ``part_files.PARQUET_OPTIONS``, on tables
  built beforehand): the two halves of ``parquet``;
* ``parquet_snappy``, ``parquet_no_stats``, ``parquet_snappy_no_stats`` and ``parquet_uncompressed``: that writer
  with Snappy instead of LZ4, without the ``end`` column's statistics, with both, and without compression:
  what pyarrow's writer costs with the cheapest of its options measured (:data:`PARQUET_VARIANTS`).

The input is the default job's own results for one slot: the DEBS'14-like stream (84 plugs, 6M tuples),
``W[1024, 1]`` max per plug (``pr.replay``, SBA), the even plugs (a slot's half), cut into the batches a
slot formats (each plug's windows of one 65,536-tuple batch: ~780). Pieces are interleaved over the
repetitions; thread CPU (``time.thread_time``) per row, medians [min-max].

    python bench/bench_sink_floor.py                 # 7 repetitions -> bench/results/sink_floor.json
    python bench/bench_sink_floor.py --repeats 3 --out /tmp/floor.json
    python bench/bench_sink_floor.py --codecs        # each codec a part-file sink takes -> sink_codecs.json

``--codecs`` times a slot's part writer (``part_files.PartWriter``, on tables built beforehand) with each codec
a job's ``compression`` takes (``part_files.CODECS``) and with the default (``default``), interleaved, and
keeps the bytes a row of each part: what the choice costs, for ``docs/runtime.md``'s table.

With ``bench/results/runtime_sinks.json`` present (``bench_runtime.py --sinks``), the JSON also keeps that
run's CPU a tuple of the job without a sink and of the CSV and Parquet jobs, and the report sets the pieces
against the budget.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import exp_common as C
import numpy as np

import pba_runtime as pr
from pba_runtime.runtime import Debs14Source, text_lines
from pba_runtime.runtime.byte_ring import ByteRing, ring_capacity
from pba_runtime.runtime.part_files import CODECS, PartWriter
from pba_runtime.runtime.sinks import FileSink, ResultParts, format_batch, format_results, result_table

WINDOW = pr.CountWindow(range=1024, slide=1)
#: pyarrow's Parquet writer alone, timed as a piece under each entry: what it changes from the slots' options
#: (``part_files.PARQUET_OPTIONS``; ``parquet_writer`` changes nothing).
PARQUET_VARIANTS = {"parquet_writer": {}, "parquet_snappy": {"compression": "snappy"},
                    "parquet_no_stats": {"write_statistics": False},
                    "parquet_snappy_no_stats": {"compression": "snappy", "write_statistics": False},
                    "parquet_uncompressed": {"compression": "none"}}
PIECES = ("csv_loop", "csv_batch", "jsonl_batch", "file_write", "parquet", "arrow", "csv_reference",
          "jsonl_reference", "parquet_table", *PARQUET_VARIANTS)


def slot_batches(tuples: int, batch_size: int) -> list[list]:
    """One slot's result batches of the default job: ``[[(plug, ends, maxima), ...], ...]``."""
    keys, values, _ = Debs14Source(plugs=84, tuples=tuples).take(0, tuples, timestamps=False)
    batch_of = np.arange(tuples) // batch_size
    per_key = {}
    for k in range(0, 84, 2):  # a slot's half of the plugs
        mine = np.flatnonzero(keys == k)
        out = pr.replay("sba", WINDOW, "max", values[mine])
        # the window ending at the plug's i-th tuple is emitted in that tuple's batch
        per_key[k] = (out.ends, out.results, batch_of[mine[out.ends - 1]])
    batches = []
    for b in range(int(batch_of[-1]) + 1):
        parts = ResultParts()
        for k, (ends, res, where) in per_key.items():
            lo, hi = np.searchsorted(where, [b, b + 1])
            if hi > lo:
                parts.append((k, ends[lo:hi], res[lo:hi]))
        if parts:  # the slot's batches carry their columns end to end (the keyed merge's arrays)
            parts.columns = (np.concatenate([e for _, e, _ in parts]), np.concatenate([r for _, _, r in parts]))
            batches.append(parts)
    return batches


def rows_of(batches: list[list]) -> int:
    return sum(len(e) for parts in batches for _, e, _ in parts)


def loop_args(batches: list[list]) -> list[tuple]:
    """Each batch as the compiled loop's arguments (what ``lines_into`` prepares)."""
    out = []
    for parts in batches:
        prefix, prefix_off = text_lines.blob([f"{k},".encode() for k, _, _ in parts])
        counts = np.array([len(e) for _, e, _ in parts], np.int64)
        ends = np.concatenate([e for _, e, _ in parts]).astype(np.int64)
        vals = np.concatenate([r for _, _, r in parts]).astype(np.float64)
        out.append((prefix, prefix_off, counts, ends, vals))
    return out


def time_pieces(batches: list[list], texts: list[bytes], repeats: int, tmp: str) -> dict[str, list[float]]:
    """Thread CPU ns a row of each piece, per repetition; ``texts``: each batch's CSV lines."""
    rows = rows_of(batches)
    args = loop_args(batches)
    bound = max(len(a[3]) for a in args) * 96 + 64
    buf = np.empty(bound, np.uint8)
    every_tenth = batches[::10]
    ref_rows = rows_of(every_tenth)

    def csv_loop() -> int:
        for prefix, prefix_off, counts, ends, vals in args:
            text_lines.write_float_lines(buf, prefix, prefix_off, counts, ends, WINDOW.range, vals)
        return rows

    ring = ByteRing.create(ring_capacity(max(len(a[3]) for a in args) * 2, 4, 96))
    slot_side = ByteRing.attach(ring.name)

    def text_batch(fmt: str) -> int:  # as a slot formats: into its ring (the coordinator releases each region)
        for parts in batches:
            ref = format_batch(fmt, parts, WINDOW.range, slot_side)
            ring.release(ref)
        return rows

    def file_write() -> int:  # as the coordinator's sink thread writes them
        path = os.path.join(tmp, "floor.csv")
        sink = FileSink(path, "csv")
        try:
            sink.open()
            for text in texts:
                sink.write(text)
        finally:
            sink.close()
            os.remove(path)
        return rows

    def part_file(fmt: str, tables: list | None = None, options: dict | None = None) -> int:
        """A slot's part writer over the batches (their tables built here, or ``tables`` built beforehand)."""
        write_part(tmp, fmt, tables if tables is not None else (result_table(p, WINDOW.range) for p in batches),
                   parquet_options=options)
        return rows

    def reference(fmt: str) -> int:
        for parts in every_tenth:
            "".join(format_results(fmt, k, e, r, WINDOW.range) for k, e, r in parts).encode()
        return ref_rows

    def parquet_table() -> int:
        for parts in batches:
            result_table(parts, WINDOW.range)
        return rows

    tables = [result_table(parts, WINDOW.range) for parts in batches]

    cases = {"csv_loop": csv_loop, "csv_batch": lambda: text_batch("csv"), "jsonl_batch": lambda: text_batch("jsonl"),
             "file_write": file_write, "parquet": lambda: part_file("parquet"), "arrow": lambda: part_file("arrow"),
             "csv_reference": lambda: reference("csv"), "jsonl_reference": lambda: reference("jsonl"),
             "parquet_table": parquet_table,
             **{name: (lambda change=change: part_file("parquet", tables, change))
                for name, change in PARQUET_VARIANTS.items()}}
    out: dict[str, list[float]] = {k: [] for k in cases}
    try:
        for fn in cases.values():  # compile, load, warm the page cache's free pages
            fn()
        for rep in range(repeats):
            for name in np.random.default_rng(rep).permutation(list(cases)):
                t0 = time.thread_time()
                n = cases[name]()
                out[name].append((time.thread_time() - t0) * 1e9 / n)
    finally:
        slot_side.close()
        ring.close()
    return out


def write_part(tmp: str, fmt: str, tables: Iterable[Any], **options: Any) -> int:
    """Write ``tables`` as a slot's part writer does (``PartWriter`` with ``options``) into a directory of its
    own under ``tmp``, then remove it; the part's bytes."""
    d = tempfile.mkdtemp(dir=tmp)
    writer = PartWriter(d, fmt, slot=0, epoch=1, durable=False, **options)
    for table in tables:
        writer.write(table)
    writer.roll()
    size = 0
    for name in os.listdir(d):
        size += os.path.getsize(os.path.join(d, name))
        os.remove(os.path.join(d, name))
    os.rmdir(d)
    return size


def time_codecs(batches: list[list], repeats: int, tmp: str) -> tuple[dict[str, list[float]], dict[str, float]]:
    """CPU ns a row of a slot's part writer with each codec (``"parquet default"``, ``"parquet snappy"``,
    ...), per repetition, and each part's bytes a row. Process CPU, not the thread's: pyarrow may compress on
    threads of its own (its IPC writer does unless told not to)."""
    tables = [result_table(parts, WINDOW.range) for parts in batches]
    rows = sum(t.num_rows for t in tables)
    cases = {f"{fmt} {codec}": (fmt, None if codec == "default" else codec)
             for fmt, codecs in CODECS.items() for codec in ("default", *codecs)}
    size: dict[str, float] = {}

    def write(name: str) -> int:
        fmt, codec = cases[name]
        size[name] = write_part(tmp, fmt, tables, compression=codec) / rows
        return rows

    out: dict[str, list[float]] = {k: [] for k in cases}
    for name in cases:  # load, warm the page cache's free pages
        write(name)
    for rep in range(repeats):
        for name in np.random.default_rng(rep).permutation(list(cases)):
            t0 = time.process_time()
            n = write(name)
            out[name].append((time.process_time() - t0) * 1e9 / n)
    return out, size


def job_cpu(path: Path) -> dict[str, float]:
    """CPU ns a tuple of the runtime_sinks.json jobs (every stage, as its report sums them)."""
    rs = C.read_json(path)
    if not rs:
        return {}
    return {k: sum(v["cpu_ns_per_tuple_median"].values()) for k, v in rs.get("results", {}).items()
            if v.get("cpu_ns_per_tuple_median")}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuples", type=int, default=6_000_000)
    ap.add_argument("--batch-size", type=int, default=65_536)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=None,
                    help="the results (default bench/results/sink_floor.json, with --codecs sink_codecs.json)")
    ap.add_argument("--jobs", type=Path, default=C.RESULTS / "runtime_sinks.json",
                    help="bench_runtime.py --sinks results whose CPU a tuple sets the budget")
    ap.add_argument("--codecs", action="store_true",
                    help="time the part writer with each codec a job takes instead (default out: sink_codecs.json)")
    args = ap.parse_args(argv)
    load = C.LoadLog()
    batches = slot_batches(args.tuples, args.batch_size)
    load.mark("input")
    if args.codecs:
        out = args.out or C.RESULTS / "sink_codecs.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            per_row, size = time_codecs(batches, args.repeats, tmp)
        load.mark("codecs")
        result = {"what": "a slot's part writer with each codec, process CPU ns a result row", "tuples": args.tuples,
                  "rows": rows_of(batches), "batches": len(batches), "repeats": args.repeats,
                  "codecs": {k: {**C.spread(v), "bytes_per_row": size[k]} for k, v in per_row.items()},
                  "machine": C.machine(load)}
        C.write_json(out, result)
        for k, v in result["codecs"].items():
            print(f"  {k:16s} {v['median']:7.2f} ns a row [{v['min']:.2f}-{v['max']:.2f}], {v['bytes_per_row']:.2f} B")
        print(f"written to {out}")
        return
    args.out = args.out or C.RESULTS / "sink_floor.json"
    texts = [format_batch("csv", parts, WINDOW.range) for parts in batches]
    csv_bytes = sum(map(len, texts))
    rows = rows_of(batches)
    out_dir = args.out.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        per_row = time_pieces(batches, texts, args.repeats, tmp)
    load.mark("pieces")
    result = {"what": "sink pieces alone, thread CPU ns a result row", "tuples": args.tuples, "rows": rows,
              "batches": len(batches), "csv_bytes_per_row": csv_bytes / rows, "repeats": args.repeats,
              "pieces": {k: C.spread(v) for k, v in per_row.items()}, "jobs_cpu_ns_per_tuple": job_cpu(args.jobs),
              "machine": C.machine(load)}
    C.write_json(args.out, result)
    print(f"{rows:,} rows in {len(batches)} batches, {csv_bytes / rows:.1f} CSV bytes a row")
    for k in PIECES:
        s = result["pieces"][k]
        print(f"  {k:14s} {s['median']:7.2f} ns a row [{s['min']:.2f}-{s['max']:.2f}]")
    jobs = result["jobs_cpu_ns_per_tuple"]
    if "none" in jobs:
        t = jobs["none"]
        print(f"job without a sink: {t:.1f} ns CPU a tuple; 0.7x allows a sink {t / 0.7 - t:.1f} ns a row; "
              + ", ".join(f"{k} adds {v - t:.1f}" for k, v in jobs.items() if k != "none"))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
