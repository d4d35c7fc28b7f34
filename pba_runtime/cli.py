"""``pba-run``: run a keyed sliding-window aggregation job from the command line.

With no arguments it runs the default job (the paper's Flink experiment,
scaled to one machine): a DEBS'14-like smart-plug stream of 6 million tuples
over 84 plugs, count window W[1024, 1], ``max``, parallelism 2, and prints
the summary. Its algorithm is ``auto``: SBA here (a window of 1,024 slices is
too small for PBA's worker to pay; the banner and the summary say so), PBA
with ``--algorithm pba``.

User errors (bad options, unreadable input, a checkpoint of another job) are
one line on stderr and exit code 2; a failed job exits with 1, an interrupted
one with 130 (resume it with ``--resume`` if it was checkpointing).

Examples
--------
>>> parse_duration("1.5s"), parse_duration("250"), parse_duration("2m")
(1500, 250, 120000)
>>> main(["--window", "count", "--range", "0"])  # prints "pba-run: error: range must be ..." on stderr
2
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pba_runtime as pr

from . import durations
from .host import KeyedHost
from .kernels import ENGINES
from .runtime import Job, UserError
from .runtime.errors import JobError
from .runtime.malloc_tuning import keep_freed_memory
from .runtime.metrics import REASON_TEXT
from .runtime.redis_streams import RedisStreamSource, is_redis_url
from .runtime.slot import STAGED_FORMATS
from .runtime.sources import DEFAULT_BATCH_SIZE, CsvSource, Debs12Source, Debs14Source, JsonlSource, Source

__all__ = ["main", "build_parser", "parse_duration"]

PROG = "pba-run"
DEFAULT_TUPLES = 6_000_000

EXAMPLES = f"""\
examples:
  {PROG}
      the default job: DEBS'14-like smart plugs, 84 plugs, {DEFAULT_TUPLES:,} tuples,
      count window W[1024, 1], max, auto (SBA: the window is too small for PBA's
      worker; the banner says why), parallelism 2; prints the summary
  {PROG} --source debs12 --window time --range 60s --slide 1s --agg mean --sink csv:power.csv
      one-minute sliding mean per sensor of a DEBS'12-like stream (100 records/s)
  {PROG} --source debs12 --disorder 2000 --window time --range 10s --slide 1s \\
         --allowed-lateness 500ms --sink jsonl:out.jsonl --late-output late.jsonl
      out-of-order timestamps: tuples more than 500 ms behind their key's
      newest timestamp go to late.jsonl, and are counted
  {PROG} --source csv:readings.csv --key-col plug --ts-col ts --value-col load \\
         --window count --range 100 --slide 10 --agg max --sink csv:-
      a CSV file (with a header row) to stdout
  tail -f events.jsonl | {PROG} --source jsonl:- --window time --range 5s --slide 5s --agg count --sink jsonl:-
      JSON lines from stdin
  {PROG} --tuples 50000000 --checkpoint-dir ckpt --checkpoint-every 30s --sink csv:out.csv
  {PROG} --tuples 50000000 --checkpoint-dir ckpt --checkpoint-every 30s --sink csv:out.csv --resume
      checkpoint every 30 s; after a crash or kill, --resume (same options) continues
      where the last checkpoint was, and out.csv ends with every window exactly once

While it runs, `kill -USR1 <pid>` prints a metrics line on stderr (or use --metrics-interval).
"""

def parse_duration(text: str) -> int:
    """A non-negative time length in milliseconds, as every duration option reads it (:mod:`pba_runtime.durations`):
    ``"250"`` (ms), ``"250ms"``, ``"1.5s"``, ``"2m"``, ``"1h30m"``, ``"1d"``, ``"1 minute"``."""
    try:
        ms = durations.parse_duration(text, name="duration", allow_negative=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("duration ")) from None
    if ms < 0:
        raise argparse.ArgumentTypeError(f"expected a duration of zero or more, got {text!r}")
    return ms


def _positive_int(text: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _count(text: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not v > 0 or not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return v


def _interval(text: str) -> tuple[int | None, float | None]:
    """``"100000"`` (tuples) or ``"30s"``/``"500ms"``/``"2m"`` (time)."""
    t = text.strip().replace("_", "")
    if t.isdigit():
        if int(t) < 1:
            raise argparse.ArgumentTypeError(f"expected a positive number of tuples or a duration, got {text!r}")
        return int(t), None
    try:
        ms = parse_duration(t)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a number of tuples (100000) or a duration (30s, 500ms, 2m), got {text!r}") from None
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive interval, got {text!r}")
    return None, ms / 1000.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UserError(f"{message} (see {PROG} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``pba-run`` argument parser."""
    algos = ", ".join([*pr.ALGORITHMS, "auto"])
    aggs = ", ".join(sorted(pr.BUILTIN_AGGREGATIONS))
    p = _Parser(
        prog=PROG,
        description="Keyed sliding-window aggregation over a stream, in parallel on one machine: "
                    "source -> key by -> per-key windowed aggregation (PBA or another algorithm) -> sink.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--demo", action="store_true", help="run the default job (the same as no arguments)")
    g = p.add_argument_group("source")
    g.add_argument("--source", default="debs14", metavar="SPEC",
                   help="debs14 (smart plugs, default), debs12 (manufacturing sensors), csv:PATH or jsonl:PATH "
                        "(PATH '-' reads stdin), or a Redis stream redis://[USER[:PASSWORD]@]HOST[:PORT]/STREAM "
                        "(rediss:// for TLS; the password may come from $REDIS_PASSWORD): endless, resumable")
    g.add_argument("--tuples", type=_count, default=None, metavar="N",
                   help=f"length of a generated stream (default {DEFAULT_TUPLES:,}; 0 = endless); a Redis "
                        "stream: end after N entries (default endless, until SIGTERM)")
    g.add_argument("--keys", type=_positive_int, default=None, metavar="N",
                   help="generated streams: plugs (debs14, default 84) or sensors (debs12, default 3)")
    g.add_argument("--seed", type=_count, default=1, help="generated streams: random seed (default 1)")
    g.add_argument("--disorder", type=parse_duration, default=0, metavar="DURATION",
                   help="generated streams: delay some timestamps by up to this much (out-of-order event time)")
    g.add_argument("--disorder-fraction", type=_fraction, default=0.05, metavar="F",
                   help="generated streams: fraction of tuples delayed by --disorder (default 0.05)")
    g.add_argument("--rate", type=_positive_float, default=None, metavar="N",
                   help="read at most N tuples per second (default: as fast as possible)")
    g.add_argument("--key-col", default="key", metavar="NAME", help="csv/jsonl/redis: key column (default key)")
    g.add_argument("--ts-col", default="ts", metavar="NAME",
                   help="csv/jsonl/redis: timestamp column, integer epoch ms (default ts; needed by time windows)")
    g.add_argument("--value-col", default="value", metavar="NAME", help="csv/jsonl/redis: value column (default value)")
    g = p.add_argument_group("window and aggregation")
    g.add_argument("--window", choices=("count", "time"), default="count",
                   help="count: per-key positions (default); time: event-time timestamps")
    g.add_argument("--range", default=None, metavar="R", action="append",
                   help="window range: tuples (count, default 1024) or, for time windows, a duration: 250ms, 60s, "
                        "5min, 1h30m, 1d, '1 minute' (a bare number is milliseconds; default 60s); several "
                        "windows: repeat it or list them (--range 256,1024,4096), every output over each")
    g.add_argument("--slide", default=None, metavar="S",
                   help="window slide, same units as --range, of every window (default 1 for count; the range "
                        "for time: tumbling)")
    g.add_argument("--offset", default=None, metavar="DURATION",
                   help="time windows: windows start at k * slide + offset (default 0)")
    g.add_argument("--agg", default="max", metavar="NAME[,NAME...]",
                   help=f"aggregation: {aggs}, median or a percentile (p99, p99.9: exact; p99~1%%: a sketch within "
                        "1%% of it) (default max); "
                        "several: --agg max,mean,std. With several "
                        "aggregations or ranges the sink writes one row per (key, window end), every output "
                        "in its own column (value_max_1024, ...)")
    g.add_argument("--algorithm", default="auto", metavar="NAME",
                   help=f"algorithm: {algos} (default auto: PBA where its worker can help, else SBA; the banner "
                        "and the summary say which and why)")
    g.add_argument("--engine", default="auto", choices=ENGINES, metavar="NAME",
                   help="what runs the window merge: auto, compiled (numba), numpy or python (default auto)")
    g.add_argument("--allowed-lateness", type=parse_duration, default=None, metavar="DURATION",
                   help="time windows: a key's watermark is its newest timestamp minus this; older tuples "
                        "are late (default 0)")
    g = p.add_argument_group("execution")
    g.add_argument("-p", "--parallelism", type=_positive_int, default=2, metavar="P",
                   help="task slots, one process each (default 2)")
    g.add_argument("--batch-size", type=_positive_int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=f"tuples per batch read from the source (default {DEFAULT_BATCH_SIZE})")
    g.add_argument("--queue-size", type=_positive_int, default=4, metavar="N",
                   help="batches each bounded queue holds (default 4)")
    g = p.add_argument_group("output")
    g.add_argument("--sink", default="none", metavar="SPEC",
                   help="none (count only, default), csv:PATH or jsonl:PATH (PATH '-' writes stdout), parquet:DIR or "
                        "arrow:DIR (part files, committed at each checkpoint), or a Redis stream "
                        "redis://HOST:PORT/STREAM (an entry a row, exactly once across a resume)")
    g.add_argument("--compression", default=None, metavar="CODEC",
                   help="parquet and arrow sinks: the parts' codec instead of the default (parquet: lz4, snappy, "
                        "zstd, gzip, brotli or none; default lz4; arrow: lz4, zstd or none; default none)")
    g.add_argument("--output-stage", choices=("auto", "on", "off"), default="auto",
                   help="csv, parquet and arrow sinks: format and write each slot's results on a thread beside its "
                        "main loop (on), or on the main loop (off); auto: on where the cores give every busy "
                        "thread one (2 x parallelism + 1)")
    g.add_argument("--late-output", default=None, metavar="PATH",
                   help="file for late tuples (default: beside the sink file, e.g. out.late.csv, or DIR.late.csv "
                        "for parquet/arrow sinks, else late.csv)")
    g = p.add_argument_group("checkpoints")
    g.add_argument("--checkpoint-dir", default=None, metavar="DIR", help="take checkpoints into DIR")
    g.add_argument("--checkpoint-every", type=_interval, default=None, metavar="N|DURATION",
                   help="checkpoint every N tuples or every DURATION (e.g. 30s; default 10s)")
    g.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint in --checkpoint-dir (give the same job options)")
    g = p.add_argument_group("metrics")
    g.add_argument("--metrics-interval", type=_positive_float, default=None, metavar="SECONDS",
                   help="print a metrics line on stderr every SECONDS (also on SIGUSR1)")
    g.add_argument("--metrics-json", default=None, metavar="PATH", help="write the final metrics as JSON")
    bar = g.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="progress bar on stderr (default: when stderr is a terminal)")
    bar.add_argument("--no-progress", dest="progress", action="store_false")
    g.add_argument("--quiet", "-q", action="store_true", help="no summary")
    g.add_argument("--profile", default=None, metavar="DIR", help="write cProfile files of every process to DIR")
    g.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                   help="log level of the pba_runtime logger (default warning)")
    g.add_argument("--log-file", default=None, metavar="PATH",
                   help="also log to PATH, from every slot process and pool worker (rotated at 10 MiB, "
                        "5 old files kept; safe across processes)")
    return p


def _ranges(args: argparse.Namespace) -> list[str | None]:
    """The ``--range`` values, each repeated option or comma-separated item one window (``[None]``: none given)."""
    if not args.range:
        return [None]
    out = [r.strip() for text in args.range for r in text.split(",")]
    if any(not r for r in out):
        raise UserError(f"--range: an empty range in {','.join(args.range)!r}")
    if len(set(out)) != len(out):
        raise UserError(f"--range: a range is given twice ({', '.join(out)})")
    return out


def _windows(args: argparse.Namespace) -> list[pr.CountWindow | pr.TimeWindow]:
    """One window per ``--range``, each of ``--window``'s kind and the one ``--slide``."""
    return [_window(args, r) for r in _ranges(args)]


def _aggs(args: argparse.Namespace) -> list[Any]:
    """``--agg``'s names: the built-ins, ``median``, percentiles ``p99``, ``p99.9`` (exact, linear) and
    sketched ones ``p99~1%`` (within 1% of the exact lower quantile, :func:`pba_runtime.quantile`'s
    ``relative_error``)."""
    out = [a.strip() for a in args.agg.split(",")]
    if any(not a for a in out):
        raise UserError(f"--agg: an empty name in {args.agg!r}")
    if len(set(out)) != len(out):
        raise UserError(f"--agg: an aggregation is given twice ({args.agg})")
    aggs: list[Any] = []
    for a in out:
        m = re.fullmatch(r"p(\d+(?:\.\d+)?)(?:~(\d*\.?\d+)(%?))?", a)
        if m and float(m.group(1)) <= 100:
            if m.group(2) is None:
                aggs.append(pr.quantile(float(m.group(1)) / 100))
                continue
            eps = float(m.group(2)) / (100 if m.group(3) else 1)
            try:
                aggs.append(pr.quantile(float(m.group(1)) / 100, relative_error=eps))
            except ValueError as exc:
                raise UserError(f"--agg {a}: {exc}") from None
        elif a in pr.BUILTIN_AGGREGATIONS or a == "median":
            aggs.append(a)
        else:
            raise UserError(f"--agg: unknown aggregation {a!r}; accepted: {', '.join(sorted(pr.BUILTIN_AGGREGATIONS))}, "
                            "median, or a percentile p0..p100 (p99, p99.9; sketched within 1%: p99~1%)")
    return aggs


def _window(args: argparse.Namespace, range_: str | None) -> pr.CountWindow | pr.TimeWindow:
    try:
        if args.window == "count":
            if args.offset is not None:
                raise UserError("--offset applies to time windows (--window time)")

            def count(name: str, text: str) -> int:
                t = text.replace("_", "")
                if not re.fullmatch(r"-?\d+", t):
                    raise UserError(f"--{name} of a count window is a number of tuples, got {text!r}")
                return int(t)

            return pr.CountWindow(range=count("range", range_ or "1024"), slide=count("slide", args.slide or "1"))

        def dur(name: str, text: str | None) -> durations.Duration | None:  # errors name the option
            if text is None:
                return None
            d = durations.as_duration(text, name=f"--{name}", allow_negative=name == "offset")
            d.in_unit("ms", name=f"--{name}")
            return d

        offset = dur("offset", args.offset)
        return pr.TimeWindow(range=dur("range", range_ or "60s"), slide=dur("slide", args.slide),
                             offset=0 if offset is None else offset)
    except (TypeError, ValueError) as exc:
        raise UserError(str(exc)) from None


def _source(args: argparse.Namespace) -> Source:
    spec = args.source
    ts_col = args.ts_col if args.window == "time" else None
    kind, sep, path = ("redis", "", "") if is_redis_url(spec) else spec.partition(":")
    generated = kind in ("debs14", "debs12")
    if generated and sep:
        raise UserError(f"source {kind} takes no path; got {spec!r}")
    if not generated:
        for opt, val, default in (("--tuples", args.tuples, None), ("--keys", args.keys, None),
                                  ("--disorder", args.disorder, 0)):
            if val != default and not (opt == "--tuples" and kind == "redis"):  # a stream's end: N entries
                raise UserError(f"{opt} applies to generated sources (debs14, debs12), not {kind}")
    if kind == "redis":
        return RedisStreamSource(spec, key_col=args.key_col, value_col=args.value_col, ts_col=ts_col,
                                 tuples=args.tuples or None)
    if kind == "debs14":
        tuples = DEFAULT_TUPLES if args.tuples is None else (args.tuples or None)
        return Debs14Source(plugs=args.keys or 84, tuples=tuples, seed=args.seed, disorder=args.disorder,
                            disorder_fraction=args.disorder_fraction)
    if kind == "debs12":
        tuples = DEFAULT_TUPLES if args.tuples is None else (args.tuples or None)
        return Debs12Source(sensors=args.keys or 3, tuples=tuples, seed=args.seed, disorder=args.disorder,
                            disorder_fraction=args.disorder_fraction)
    if kind in ("csv", "jsonl") and sep and path:
        cls = CsvSource if kind == "csv" else JsonlSource
        return cls(path, key_col=args.key_col, value_col=args.value_col, ts_col=ts_col)
    raise UserError("source must be debs14, debs12, csv:PATH or jsonl:PATH (PATH '-' for stdin) or "
                    f"redis://HOST:PORT/STREAM, got {spec!r}")


def _describe(job: Job) -> str:
    src = job.source
    d = src.describe()
    if d["kind"] == "debs14":
        what = f"DEBS'14-like smart plugs ({d['plugs']} plugs, {_n(src.total)} tuples)"
    elif d["kind"] == "debs12":
        what = f"DEBS'12-like sensors ({d['sensors']} sensors at 100 records/s, {_n(src.total)} tuples)"
    elif d["kind"] == "redis":
        what = f"redis stream {d['url']} ({_n(src.total)} tuples)"
    else:
        what = f"{d['kind']} {d['path']}"
    w = job.window
    kind = "time" if job.is_time else "count"
    if job.query is not None:
        return _describe_query(job, what, kind)
    alg = job.algorithm
    if alg == "auto":
        chosen, why = job.choice()
        if why == "small_window":
            q, least = w.range // w.slide, pr.algorithms.AUTO_PBA_MIN_SLICES
            if job.agg.kernel is None:
                least = pr.algorithms.AUTO_PBA_MIN_SLICES_PYTHON
            alg = f"auto -> {chosen}: {q:,} slices a window, PBA from {least:,}"
        else:
            alg = f"auto -> {chosen}: {REASON_TEXT.get(why, why)}"
    late = f", lateness {job.allowed_lateness} ms" if job.is_time else ""
    engine = _engine_name(job)
    return (f"{PROG}: {what} -> key by -> {kind} W[{w.range}, {w.slide}] {job.agg.name} ({alg}{late}), "
            f"{engine} engine x {job.parallelism} slots -> {_sink_text(job)}")


def _sink_text(job: Job) -> str:
    if job.log_sink is not None:
        return f"redis stream {job.log_sink.safe_url()} (late: {job.late_path})"
    sink = "none" if job.sink_format is None else f"{job.sink_format}:{job.sink_path}"
    if job.compression is not None:
        sink += f" ({job.compression})"
    if job.sink_format in STAGED_FORMATS:
        sink += (" (written on an output thread beside each slot)" if job.output_stage() else
                 f" (written on the slots' main loops: {job.cores()} cores, too few for an output thread each)")
    return sink


def _describe_query(job: Job, what: str, kind: str) -> str:
    """The banner of a query job: its windows and aggregations, the outputs' algorithms."""
    q = job.query
    wins = ", ".join(dict.fromkeys(f"W[{w.range}, {w.slide}]" for w in q.windows))
    aggs = ", ".join(dict.fromkeys(a if isinstance(a, str) else a.name for a in q.aggs))
    algs: dict[str, int] = {}
    for spec in job._slot_spec(0).host_specs():
        alg = job.algorithm if job.algorithm != "auto" else KeyedHost(spec).choose()[0]
        algs[alg] = algs.get(alg, 0) + 1
    chosen = ", ".join(f"{a} x{n}" for a, n in algs.items())
    late = f", lateness {job.allowed_lateness} ms" if job.is_time else ""
    return (f"{PROG}: {what} -> key by -> {kind} {wins} x {aggs} ({len(q.names)} outputs, {job.algorithm} -> "
            f"{chosen}{late}) x {job.parallelism} slots -> {_sink_text(job)}")


def _engine_name(job: Job) -> str:
    """The engine the slots' operators run (:func:`pba_runtime.algorithms.engine_of`)."""
    return KeyedHost(job._slot_spec(0).host_spec()).engine(None if job.algorithm == "auto" else job.algorithm).name


def _n(total: int | None) -> str:
    return "endless" if total is None else f"{total:,}"


class _Terminated(BaseException):
    pass


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated


def _stop_on_sigterm(source: Source) -> Callable[[int, Any], None]:
    """An endless source's SIGTERM: the first stops the reading (the job drains, checkpoints and exits 0), a
    second ends the job at once."""
    def handler(signum: int, frame: Any) -> None:
        if source.halted is not None:
            raise _Terminated
        source.stop("SIGTERM")
    return handler


def _setup_logging(level: str) -> None:
    logger = logging.getLogger("pba_runtime")
    logger.setLevel(level.upper())
    if not logger.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
        logger.addHandler(h)
        logger.propagate = False


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of unwritable output is silent."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _json_safe(x: Any) -> Any:
    """``x`` with every non-finite float (a latency of no windows, a rate of no time) as ``None``."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pba-run`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    old_term = None
    try:
        args = build_parser().parse_args(argv)
        keep_freed_memory()  # pba-run's own process: the source's batch arrays from the heap (see malloc_tuning)
        _setup_logging(args.log_level)
        if args.log_file is not None:
            pr.configure_logging(args.log_file, args.log_level.upper())
        windows, aggs = _windows(args), _aggs(args)
        source = _source(args)
        every_tuples, every_seconds = args.checkpoint_every or (None, None)
        if args.checkpoint_every is not None and args.checkpoint_dir is None:
            raise UserError("--checkpoint-every needs --checkpoint-dir")
        if args.resume and args.checkpoint_dir is None:
            raise UserError("--resume needs --checkpoint-dir (where the checkpoint is)")
        progress = args.progress if args.progress is not None else sys.stderr.isatty()
        if len(windows) == 1 and len(aggs) == 1:
            what: dict[str, Any] = {"window": windows[0], "agg": aggs[0]}
        else:  # a query: every aggregation over every window, one column each
            column = args.value_col if source.kind in ("csv", "jsonl", "redis") else "value"
            try:
                what = {"query": pr.Query(on=args.ts_col if args.window == "time" else None, windows=windows,
                                          aggs={column: aggs}, missing="propagate")}
            except (TypeError, ValueError) as exc:
                raise UserError(str(exc)) from None
        job = Job(source, algorithm=args.algorithm, **what, parallelism=args.parallelism, sink=args.sink,
                  late_output=args.late_output, allowed_lateness=args.allowed_lateness,
                  checkpoint_dir=args.checkpoint_dir, checkpoint_every=every_tuples,
                  checkpoint_interval=every_seconds, batch_size=args.batch_size, queue_size=args.queue_size,
                  rate=args.rate, progress=progress, metrics_interval=args.metrics_interval,
                  profile_dir=args.profile, engine=args.engine,
                  output_stage={"auto": None, "on": True, "off": False}[args.output_stage],
                  compression=args.compression)
        out = sys.stderr if job.sink_path == "-" else sys.stdout
        banner = None if args.quiet else (lambda: print(_describe(job), file=out, flush=True))
        if threading.current_thread() is threading.main_thread():
            old_term = signal.signal(signal.SIGTERM, _stop_on_sigterm(source) if source.stoppable else _on_sigterm)
        summary = job.run(resume=args.resume, on_start=banner)  # the banner once the source has started well
        if summary.get("already_finished"):
            t = summary["total"]
            print(f"{PROG}: the job in {args.checkpoint_dir} already finished ({t['tuples']:,} tuples, "
                  f"{t['windows']:,} windows, {t['late']:,} late); nothing to resume", file=out, flush=True)
        elif not args.quiet:
            print(job.metrics.text(), file=out, flush=True)
        if summary.get("stopped"):
            print(f"{PROG}: stopped ({summary['stopped']}) after {summary['total']['tuples']:,} tuples at checkpoint "
                  f"{summary['checkpoint']} (continue with --resume)", file=sys.stderr, flush=True)
        if not args.quiet and not summary.get("already_finished"):
            late = summary["late"]
            if late:
                print(f"late tuples written to {job.late_path}", file=out, flush=True)
        if args.metrics_json:
            with open(args.metrics_json, "w") as f:  # strict JSON: what has no value (no windows) is null
                json.dump(_json_safe(summary), f, indent=2, default=str, allow_nan=False)
        return 0
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except JobError as exc:
        print(f"{PROG}: failed: {exc}", file=sys.stderr)
        if "output stdout" in str(exc):
            _drop_stdout()
        return 1
    except (KeyboardInterrupt, _Terminated) as exc:
        sig = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
        hint = " (continue with --resume)" if "args" in locals() and args.checkpoint_dir else ""
        print(f"{PROG}: {sig}{hint}", file=sys.stderr)
        return 130 if isinstance(exc, KeyboardInterrupt) else 143
    except BrokenPipeError:  # the reader of stdout went away (| head): not an error
        _drop_stdout()
        return 0
    except OSError as exc:  # printing the banner or the summary (a full device)
        print(f"{PROG}: failed: cannot write to stdout: {exc.strerror or exc}", file=sys.stderr)
        _drop_stdout()
        return 1
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


# ``python -m pba_runtime.cli``: main alone. The command is ``pba-run`` or ``python -m pba_runtime``
# (:mod:`pba_runtime.__main__`), which start the job's forkserver before this module's imports; calling it from
# here would import a layer above this one.
if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
