"""A keyed streaming job: source -> key by -> per-key windowed aggregation -> sink, as configured and checked.

A :class:`Job` holds what defines the run: the source, the window and aggregation, the algorithm, the task
slots (``parallelism``), the sink and late output, checkpoints, throttling and metrics. Every setting is
checked when the job is built, so a bad window, aggregation or sink fails before any process starts;
:meth:`Job.run` hands it to the coordinator (:mod:`~pba_runtime.runtime.coordinator`), which starts the slots,
routes the batches and writes the results.

Examples
--------
>>> import pba_runtime as pr
>>> from pba_runtime.runtime import Job, Debs14Source
>>> job = Job(Debs14Source(plugs=4, tuples=2_000), pr.CountWindow(range=64, slide=1), "max",
...           algorithm="sba", parallelism=1)
>>> job.run()["windows"]
1748
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
from collections.abc import Callable
from typing import Any, TextIO

import pba_runtime as pr

from .. import logs
from ..forkserver import preload_modules
from ..host import KeyedHost
from ..quantiles import as_quantile
from .checkpoint import CheckpointPolicy
from .coordinator import JobRun
from .errors import UserError
from .metrics import JobMetrics
from .part_files import check_compression
from .query_rows import QueryOutputs
from .redis_streams import RedisStream, is_redis_url
from .sinks import RESULT_COLUMNS, late_format_for, late_path_for, parse_sink_spec
from .sources import DEFAULT_BATCH_SIZE, Source
from .task_slot import STAGED_FORMATS, SlotSpec

__all__ = ["Job"]

log = logging.getLogger("pba_runtime")

#: Batches each input queue holds (the output queue holds this many per slot).
DEFAULT_QUEUE_SIZE = 4


def _context(start_method: str | None, compiled: bool = False, sink_format: str | None = None) -> Any:
    method = start_method or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    if method == "fork":
        raise UserError("start_method 'fork' is not supported (worker threads and fork do not mix); "
                        "use 'forkserver' or 'spawn'")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":  # what it imports once, not in every slot (if this process starts it)
        ctx.set_forkserver_preload(preload_modules(compiled, sink_format))
    return ctx


class Job:
    """A keyed sliding-window aggregation job.

    Parameters
    ----------
    source : Source
        Where tuples come from (see :mod:`pba_runtime.runtime.sources`).
    window : CountWindow or TimeWindow
        Count windows are per key (stream positions of the key's tuples).
    agg : str or Aggregation
        An aggregation name, or a picklable :class:`pba_runtime.Aggregation` (default ``"max"``).
    query : pba_runtime.Query, optional
        Instead of ``window`` and ``agg``: every output of a query at once (its windows, and its aggregations
        of the stream's value column, the column the query names), one row per (key, window end) with each
        output in its own column (:mod:`~pba_runtime.runtime.query_rows`); the stream's key and timestamps are
        the source's (the query's ``by`` and ``on`` are the frames'). Time windows' durations in milliseconds.
    algorithm : str
        A name in ``pba_runtime.ALGORITHMS`` or ``"auto"`` (the default, as in ``pba-run``,
        ``sliding_aggregate`` and the Spark adapter: PBA where its worker can help, else SBA;
        the metrics say which ran and why).
    parallelism : int
        Task slots (processes).
    sink : str
        ``"none"``, ``"csv:PATH"`` or ``"jsonl:PATH"`` (``PATH`` ``-`` is stdout),
        ``"parquet:DIR"`` or ``"arrow:DIR"`` (part files, :mod:`~pba_runtime.runtime.part_files`), or a
        Redis stream ``"redis://HOST:PORT/STREAM"`` (an entry a row, :mod:`~pba_runtime.runtime.redis_streams`).
    compression : str, optional
        A part-file sink's codec instead of its default: ``"lz4"``, ``"snappy"``, ``"zstd"``, ``"gzip"``,
        ``"brotli"`` or ``"none"`` for Parquet, ``"lz4"``, ``"zstd"`` or ``"none"`` for Arrow IPC
        (:data:`~pba_runtime.runtime.part_files.CODECS`). Default: LZ4 for Parquet (the value column left
        uncompressed where LZ4 would not pack it), uncompressed Arrow record batches.
    late_output : str, optional
        File (or Redis stream URL) for late tuples (time windows); default beside the sink file
        (``out.late.csv``; ``DIR.late.csv`` for a part-file sink; the stream ``STREAM:late`` beside a
        Redis sink), else ``late.csv``.
        Created at the first late tuple.
    allowed_lateness : int, optional
        Time windows only: a key's watermark is its largest timestamp minus this
        (ms); tuples behind it go to the late output. Default 0 for time windows.
    checkpoint_dir : str, optional
        Where checkpoints go; enables checkpointing.
    checkpoint_every : int, optional
        Checkpoint every this many tuples.
    checkpoint_interval : float, optional
        Checkpoint every this many seconds (default 10 s when ``checkpoint_dir``
        is given and ``checkpoint_every`` is not).
    batch_size : int
        Tuples per batch read from the source.
    queue_size : int
        Batches per input queue.
    rate : float, optional
        Throttle the source to this many tuples per second.
    progress : bool
        Show a tqdm progress bar on stderr (finite sources).
    metrics_interval : float, optional
        Print a metrics line to ``log_stream`` every this many seconds.
    log_stream : file, optional
        Where progress lines go (default stderr).
    profile_dir : str, optional
        Write cProfile statistics of the coordinator and every slot there.
    start_method : {"forkserver", "spawn"}, optional
    engine : {"auto", "compiled", "numpy", "python"}
        What runs each key's batch merge (:mod:`pba_runtime.kernels`).
    output_stage : bool, optional
        With a CSV, Parquet or Arrow sink, whether each slot formats and writes its results on a thread of
        its own (its output stage, :mod:`~pba_runtime.runtime.output_stage`) while it aggregates the next
        batch, or on its main loop. Default (``None``): on a thread of its own only where the cores allow it
        (:meth:`output_stage`).
    """

    def __init__(self, source: Source, window: pr.CountWindow | pr.TimeWindow | None = None, agg: Any = None,
                 algorithm: str = "auto", *, query: Any = None, parallelism: int = 2, sink: str = "none", late_output: str | None = None,
                 allowed_lateness: int | None = None, checkpoint_dir: str | None = None,
                 checkpoint_every: int | None = None, checkpoint_interval: float | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, queue_size: int = DEFAULT_QUEUE_SIZE,
                 rate: float | None = None, progress: bool = False, metrics_interval: float | None = None,
                 log_stream: TextIO | None = None, profile_dir: str | None = None,
                 start_method: str | None = None, engine: str = "auto", output_stage: bool | None = None,
                 compression: str | None = None):
        if not isinstance(source, Source):
            raise UserError(f"source must be a pba_runtime.runtime Source, got {type(source).__name__}")
        self.source = source
        self.query = None
        if query is not None:
            if window is not None or agg is not None:
                raise UserError("query: give either window and agg, or query=, not both")
            self.query = QueryOutputs.of(query)
            window, agg = self.query.windows[0], self.query.aggs[0]
        elif window is None:
            raise UserError("window: a job needs a window (pr.CountWindow or pr.TimeWindow), or query=")
        agg = "max" if agg is None else agg
        try:
            self.window = pr.windows.validate_window(window)
            self.agg = as_quantile(agg) or pr.get_aggregation(agg)
        except (TypeError, ValueError) as exc:
            raise UserError(str(exc)) from None
        self.agg_spec = agg if isinstance(agg, str) else self.agg
        for a in (self.query.aggs if self.query is not None else (agg,)):
            if isinstance(a, str):
                continue
            try:
                pickle.dumps(a)
            except Exception:
                raise UserError(f"aggregation {a.name!r} cannot be sent to the task slots (not picklable: "
                                "define its functions at module level)") from None
        self.algorithm = algorithm
        self.engine = engine
        if algorithm != "auto" and algorithm not in pr.ALGORITHMS:
            raise UserError(f"unknown algorithm {algorithm!r}; accepted: {', '.join(pr.ALGORITHMS)}, or 'auto'")
        for name, value in (("parallelism", parallelism), ("batch_size", batch_size), ("queue_size", queue_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name} must be a positive integer, got {value!r}")
        self.parallelism, self.batch_size, self.queue_size = parallelism, batch_size, queue_size
        self.is_time = isinstance(self.window, pr.TimeWindow)
        if allowed_lateness is not None:
            if not self.is_time:
                raise UserError("allowed lateness applies to time windows only (count windows have no event time)")
            if isinstance(allowed_lateness, bool) or not isinstance(allowed_lateness, int) or allowed_lateness < 0:
                raise UserError(f"allowed lateness must be a non-negative integer (ms), got {allowed_lateness!r}")
        elif self.is_time:
            allowed_lateness = 0
        self.allowed_lateness = allowed_lateness
        if self.is_time and not source.has_timestamps:
            raise UserError("time windows need timestamps: give the source a timestamp column")
        # a Redis stream sink: the slots format CSV lines, which the sink appends as entries (redis_streams)
        self.log_sink = RedisStream.parse(sink, "sink") if is_redis_url(sink) else None
        self.sink_format, self.sink_path = ("csv", None) if self.log_sink else parse_sink_spec(sink)
        self.compression = check_compression(self.sink_format, compression)
        self.late_format = late_format_for(self.sink_format)
        self.log_late = (RedisStream.parse(late_output, "late output") if is_redis_url(late_output) else
                         self.log_sink.side("late") if self.log_sink and late_output is None else None)
        self.late_path = (self.log_late.safe_url() if self.log_late else
                          late_output or late_path_for(self.sink_path, self.sink_format))
        if self.sink_path not in (None, "-") and os.path.abspath(self.late_path) == os.path.abspath(self.sink_path):
            raise UserError("the late output must be another file than the sink")
        if self.log_sink and self.log_late and self.log_late.safe_url() == self.log_sink.safe_url():
            raise UserError("the late output must be another stream than the sink")
        self.checkpoint_dir = checkpoint_dir
        if checkpoint_dir is None and (checkpoint_every is not None or checkpoint_interval is not None):
            raise UserError("a checkpoint interval needs a checkpoint directory")
        if checkpoint_dir is not None and checkpoint_every is None and checkpoint_interval is None:
            checkpoint_interval = 10.0
        self.checkpoint_every, self.checkpoint_interval = checkpoint_every, checkpoint_interval
        if checkpoint_dir is not None:
            CheckpointPolicy(checkpoint_every, checkpoint_interval)  # validates
        if rate is not None and not (isinstance(rate, (int, float)) and rate > 0):
            raise UserError(f"rate must be a positive number of tuples per second, got {rate!r}")
        if metrics_interval is not None and not (isinstance(metrics_interval, (int, float)) and metrics_interval > 0):
            raise UserError(f"metrics interval must be a positive number of seconds, got {metrics_interval!r}")
        self.rate, self.progress, self.metrics_interval = rate, progress, metrics_interval
        self.log_stream = log_stream
        self.profile_dir = profile_dir
        if output_stage is not None and not isinstance(output_stage, bool):
            raise UserError(f"output_stage must be True, False or None (decided by the cores), got {output_stage!r}")
        self._output_stage = output_stage
        self._check_operator()
        self._ctx = _context(start_method, self._slot_spec(0).host_spec().engine_name() == "compiled",
                             self.sink_format)
        self.metrics = JobMetrics(parallelism)

    # ------------------------------------------------------------------ description
    def _check_operator(self) -> None:
        """Validate the slots' operators here: a bad window/aggregation/algorithm fails before any process starts."""
        try:
            for spec in self._slot_spec(0).host_specs():
                spec.validate()
        except (TypeError, ValueError) as exc:
            raise UserError(str(exc)) from None

    def describe(self) -> dict[str, Any]:
        """What defines this job's output; a checkpoint is only resumed by a job with the same description."""
        return {
            "source": self.source.describe(),
            "window": repr(self.window),
            "aggregation": self.agg.name,
            "algorithm": self.algorithm,
            "allowed_lateness": self.allowed_lateness,
            "sink": (["redis", self.log_sink.safe_url()] if self.log_sink else
                     [self.sink_format, None if self.sink_path in (None, "-") else os.path.abspath(self.sink_path)]),
            "late_output": (["redis", self.late_path] if self.log_late else
                            [self.late_format, os.path.abspath(self.late_path)]),
            **({} if self.query is None else {"query": self.query.describe()}),
        }

    def result_columns(self) -> tuple[str, ...]:
        """The sink's columns: ``key, start, end, value``, or a query's (:meth:`QueryOutputs.columns
        <pba_runtime.runtime.query_rows.QueryOutputs.columns>`)."""
        return RESULT_COLUMNS if self.query is None else self.query.columns()

    def _slot_spec(self, index: int, epoch: int = 1, ring: str | None = None, in_ring: str | None = None) -> SlotSpec:
        profile = os.path.join(self.profile_dir, f"slot{index}.prof") if self.profile_dir else None
        return SlotSpec(index=index, window=self.window, agg=self.agg_spec, algorithm=self.algorithm,
                        engine=self.engine, allowed_lateness=self.allowed_lateness, sink_format=self.sink_format,
                        sink_path=self.sink_path, compression=self.compression,
                        epoch=epoch, late_format=self.late_format, profile_path=profile,
                        durable=self.checkpoint_dir is not None, ring=ring, in_ring=in_ring,
                        log_config=logs.current_config(),
                        cores=self.cores_per_slot(), staged=self.output_stage(), query=self.query)

    def cores_per_slot(self) -> int:
        """Cores each task slot may use: the cores this process may run on, shared by the slots (at least 1).

        ``"auto"`` runs SBA below 2: a slot's worker could only take turns with its main loop.
        """
        return max(1, self.cores() // self.parallelism)

    @staticmethod
    def cores() -> int:
        """The cores this process may run on (its CPU affinity where the system has one)."""
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            return os.cpu_count() or 1

    def ring_row_bytes(self) -> int:
        """Bytes of a slot's ring a result row of a text sink is given (``byte_ring.ring_capacity``): 48 for a CSV
        line, 96 for a JSON line, and 24 more for each number of a vector result (a ``moment_sketch``'s 23: the
        writer reserves ~25 B a number). A batch whose lines may not fit in the ring goes through the queue,
        pickled, which costs the slots' queue threads far more than the ring (``moment_sketch``'s CSV lines did
        with 48).

        >>> from pba_runtime.runtime import Debs14Source
        >>> w = pr.CountWindow(range=4, slide=1)
        >>> [Job(Debs14Source(tuples=10), w, agg, sink=sink).ring_row_bytes()
        ...  for agg, sink in (("max", "csv:o.csv"), ("max", "jsonl:o.jsonl"), ("moment_sketch", "csv:o.csv"))]
        [48, 96, 600]
        """
        if self.query is not None:  # a number (or null) and the text before it, per output
            names = sum(len(n) + 6 for n in self.query.names) if self.sink_format == "jsonl" else 0
            return (96 if self.sink_format == "jsonl" else 48) + 25 * len(self.query.names) + names
        agg = self.agg
        width = agg.kernel.shape[0] if agg.result == "vector" and agg.kernel is not None and agg.kernel.shape else 0
        return (96 if self.sink_format == "jsonl" else 48) + 24 * width

    def output_stage(self) -> bool:
        """Whether the slots format and write the sink's results on an output stage (a thread beside each
        slot's main loop): only with a sink, as the job was told, or else where the cores this process may run
        on give every busy thread one: each slot's main loop and its stage, and the coordinator
        (``2 * parallelism + 1``).

        With fewer cores the stage's thread only takes turns with the others, and its hand-offs cost more than
        the overlap gains: on 2 cores the default job with a CSV or Parquet sink used less CPU with the sink on
        the slots' main loops.

        >>> from pba_runtime.runtime import Debs14Source
        >>> job = Job(Debs14Source(tuples=10), pr.CountWindow(range=4, slide=1), sink="csv:out.csv", output_stage=True)
        >>> job.output_stage(), Job(Debs14Source(tuples=10), pr.CountWindow(range=4, slide=1)).output_stage()
        (True, False)
        """
        if self.sink_format not in STAGED_FORMATS:
            return False
        if self._output_stage is not None:
            return self._output_stage
        return self.cores() >= 2 * self.parallelism + 1

    def choice(self) -> tuple[str, str]:
        """``(algorithm, reason)`` the slots start a key with before they see its pieces (the banner's)."""
        return KeyedHost(self._slot_spec(0).host_spec()).choose()

    # ------------------------------------------------------------------ run
    def run(self, resume: bool = False, on_start: Callable[[], None] | None = None) -> dict[str, Any]:
        """Run to the end of the source (or until interrupted); returns the metrics summary.

        Before any output is written or any process started, the job checks
        that the checkpoint directory can be written (and removes temporary
        files a killed run left there) and reads the source's first batch, so
        a bad checkpoint directory or a bad start of the input fails first.

        Parameters
        ----------
        resume : bool
            Continue from the checkpoint in ``checkpoint_dir``: restore every
            key's state, truncate the sink and late output to what the
            checkpoint had written, and read the source from its position.
        on_start : callable, optional
            Called once those checks passed, before the sink is opened (the
            CLI prints its banner there).
        """
        return JobRun(self).execute(resume, on_start)
