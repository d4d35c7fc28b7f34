"""A keyed streaming job: source -> key by -> per-key windowed aggregation -> sink.

(Over 500 lines: one run's life cycle, starting the slots, routing batches, the
checkpoint barrier, the sink thread and the teardown on every failure, is one state
machine under one set of queues; its pieces cannot be read apart.)

The coordinator (the process that calls :meth:`Job.run`) reads the source in
batches, hash-partitions each batch by key (:mod:`~pba_runtime.runtime.partitioning`)
and puts each slot's share, as numpy arrays, on that slot's bounded input
queue. ``parallelism`` task slots (:mod:`~pba_runtime.runtime.slot`, one process
each, started with ``forkserver`` or ``spawn``, never ``fork``) aggregate their
keys and put formatted results on one bounded output queue. A sink thread in
the coordinator writes them, aligns checkpoint barriers
(:mod:`~pba_runtime.runtime.checkpoint`) and keeps the metrics
(:mod:`~pba_runtime.runtime.metrics`).

Bounded queues give backpressure: a slow sink blocks the slots, slow slots
block the source; memory stays at about ``queue_size`` batches per queue.
Per-key order is kept: a key always goes to the same slot, batches reach a
slot in order, and a slot feeds each key its tuples in arrival order.

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

import inspect
import itertools
import logging
import math
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import pba_runtime as pr

from .. import logs
from ..forkserver import WARM_ENV, environ, path_env, preload_modules
from ..host import KeyedHost
from .byte_ring import ByteRing, input_ring_capacity, ring_capacity
from .checkpoint import (
    CHECKPOINT_FILE,
    BarrierAligner,
    CheckpointPolicy,
    fingerprint,
    load_checkpoint,
    prepare_checkpoint_dir,
    write_checkpoint,
)
from .errors import JobError, UserError
from .metrics import JobMetrics, PhaseClock
from .part_files import check_compression, commit_parts, prepare_part_dir
from .partitioning import Partitioner, compact_keys, key_array, slot_of, split_by_slot
from .sinks import (
    LATE_COLUMNS,
    PART_FORMATS,
    RESULT_COLUMNS,
    TEXT_FORMATS,
    FileSink,
    late_format_for,
    late_path_for,
    parse_sink_spec,
)
from .slot import POLL, STAGED_FORMATS, SlotSpec, slot_main
from .sources import DEFAULT_BATCH_SIZE, Source

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
        An aggregation name, or a picklable :class:`pba_runtime.Aggregation`.
    algorithm : str
        A name in ``pba_runtime.ALGORITHMS`` or ``"auto"`` (the default, as in ``pba-run``,
        ``sliding_aggregate`` and the Spark adapter: PBA where its worker can help, else SBA;
        the metrics say which ran and why).
    parallelism : int
        Task slots (processes).
    sink : str
        ``"none"``, ``"csv:PATH"`` or ``"jsonl:PATH"`` (``PATH`` ``-`` is stdout),
        ``"parquet:DIR"`` or ``"arrow:DIR"`` (part files, :mod:`~pba_runtime.runtime.part_files`).
    compression : str, optional
        A part-file sink's codec instead of its default: ``"lz4"``, ``"snappy"``, ``"zstd"``, ``"gzip"``,
        ``"brotli"`` or ``"none"`` for Parquet, ``"lz4"``, ``"zstd"`` or ``"none"`` for Arrow IPC
        (:data:`~pba_runtime.runtime.part_files.CODECS`). Default: LZ4 for Parquet (the value column left
        uncompressed where LZ4 would not pack it), uncompressed Arrow record batches.
    late_output : str, optional
        File for late tuples (time windows); default beside the sink file
        (``out.late.csv``; ``DIR.late.csv`` for a part-file sink), else ``late.csv``.
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

    def __init__(self, source: Source, window: pr.CountWindow | pr.TimeWindow, agg: Any = "max",
                 algorithm: str = "auto", *, parallelism: int = 2, sink: str = "none", late_output: str | None = None,
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
        try:
            self.window = pr.windows.validate_window(window)
            self.agg = pr.get_aggregation(agg)
        except (TypeError, ValueError) as exc:
            raise UserError(str(exc)) from None
        self.agg_spec = agg if isinstance(agg, str) else self.agg
        if not isinstance(agg, str):
            try:
                pickle.dumps(self.agg)
            except Exception:
                raise UserError(f"aggregation {self.agg.name!r} cannot be sent to the task slots (not picklable: "
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
        self.sink_format, self.sink_path = parse_sink_spec(sink)
        self.compression = check_compression(self.sink_format, compression)
        self.late_format = late_format_for(self.sink_format)
        self.late_path = late_output or late_path_for(self.sink_path, self.sink_format)
        if self.sink_path not in (None, "-") and os.path.abspath(self.late_path) == os.path.abspath(self.sink_path):
            raise UserError("the late output must be another file than the sink")
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
            self._slot_spec(0).host_spec().validate()
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
            "sink": [self.sink_format, None if self.sink_path in (None, "-") else os.path.abspath(self.sink_path)],
            "late_output": [self.late_format, os.path.abspath(self.late_path)],
        }

    def _slot_spec(self, index: int, epoch: int = 1, ring: str | None = None, in_ring: str | None = None) -> SlotSpec:
        profile = os.path.join(self.profile_dir, f"slot{index}.prof") if self.profile_dir else None
        return SlotSpec(index=index, window=self.window, agg=self.agg_spec, algorithm=self.algorithm,
                        engine=self.engine, allowed_lateness=self.allowed_lateness, sink_format=self.sink_format,
                        sink_path=self.sink_path, compression=self.compression,
                        epoch=epoch, late_format=self.late_format, profile_path=profile,
                        durable=self.checkpoint_dir is not None, ring=ring, in_ring=in_ring,
                        log_config=logs.current_config(),
                        cores=self.cores_per_slot(), staged=self.output_stage())

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
        pickled: ``moment_sketch``'s CSV lines did with 48, and the slots' queue threads took 164 ns a tuple
        (8 with these).

        >>> from pba_runtime.runtime import Debs14Source
        >>> w = pr.CountWindow(range=4, slide=1)
        >>> [Job(Debs14Source(tuples=10), w, agg, sink=sink).ring_row_bytes()
        ...  for agg, sink in (("max", "csv:o.csv"), ("max", "jsonl:o.jsonl"), ("moment_sketch", "csv:o.csv"))]
        [48, 96, 600]
        """
        agg = self.agg
        width = agg.kernel.shape[0] if agg.result == "vector" and agg.kernel is not None and agg.kernel.shape else 0
        return (96 if self.sink_format == "jsonl" else 48) + 24 * width

    def output_stage(self) -> bool:
        """Whether the slots format and write the sink's results on an output stage (a thread beside each
        slot's main loop): only with a sink, as the job was told, or else where the cores this process may run
        on give every busy thread one: each slot's main loop and its stage, and the coordinator
        (``2 * parallelism + 1``).

        With fewer cores the stage's thread only takes turns with the others, and its hand-offs cost more than
        the overlap gains. Measured on 2 cores (the default job, in-process, 3 repetitions a round): with 2
        slots the CPU ratio to the job without a sink went 0.61-0.67x -> 0.67-0.70x with CSV on the main
        loops (8 rounds, better in all 8), 0.59-0.60x -> 0.62-0.67x with Parquet (5 rounds, all 5); with 1
        slot, CSV 0.65-0.66x -> 0.72-0.73x (2 rounds).

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
        return _Run(self).execute(resume, on_start)


class _Run:
    """One execution of a job (its processes, queues, threads and files)."""

    def __init__(self, job: Job):
        self.job = job
        self.metrics = job.metrics = JobMetrics(job.parallelism)
        self.failure: BaseException | None = None
        self.procs: list[Any] = []
        self.in_qs: list[Any] = []
        self.out_q: Any = None
        self.rings: list[ByteRing] = []  # a text sink's: one per slot, result bytes without the pipe
        self.in_rings: list[ByteRing] = []  # one per slot: its grouped input values without the pipe
        self.grouper: Any = None  # a SlotGrouper when the keys are small integers (key_grouping)
        self.sink: FileSink | None = None
        self.late_sink: FileSink | None = None
        self.positions: dict[int, tuple[Any, int]] = {}
        self.final_parts: list[str] = []  # part files the slots closed at the end of the stream
        self.checkpoint_id = 0
        self.done: set[int] = set()
        self.report_now = threading.Event()
        self.stopped = threading.Event()
        self.bar: Any = None
        self.clock = PhaseClock()  # the source loop's
        self.sink_clock = PhaseClock()  # the sink thread's
        self.stream = job.log_stream or sys.stderr

    # ------------------------------------------------------------------ output of progress lines
    def say(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    # ------------------------------------------------------------------ setup
    def _load(self, resume: bool) -> dict[str, Any] | None:
        job = self.job
        if not resume:
            return None
        if job.checkpoint_dir is None:
            raise UserError("--resume needs a checkpoint directory")
        if not job.source.resumable:
            raise UserError(f"the {job.source.kind} source on stdin cannot be resumed (it cannot be replayed)")
        ckpt = load_checkpoint(job.checkpoint_dir)
        if ckpt is None:
            raise UserError(f"no checkpoint in {job.checkpoint_dir} to resume from")
        if ckpt["fingerprint"] != fingerprint(job.describe()):
            mine, theirs = job.describe(), ckpt.get("description", {})
            diff = [k for k in mine if mine[k] != theirs.get(k)]
            raise UserError(f"the checkpoint in {job.checkpoint_dir} belongs to another job "
                            f"(different {', '.join(diff) or 'settings'}); resume with the same settings")
        if job.sink_path == "-":
            log.warning("stdout cannot be rewound: results after the last checkpoint are repeated (at-least-once)")
        return ckpt

    def _open_sinks(self, ckpt: dict[str, Any] | None) -> None:
        job = self.job
        if job.sink_format in PART_FORMATS:
            removed = prepare_part_dir(job.sink_path, job.sink_format, None if ckpt is None else ckpt["id"],
                                       None if ckpt is None else ckpt.get("pending_parts", []))
            if removed:
                log.info("removed %d part files of an earlier run or past the checkpoint in %s", len(removed),
                         job.sink_path)
        elif job.sink_format is not None:
            self.sink = FileSink(job.sink_path, job.sink_format, RESULT_COLUMNS)
            self.sink.open(None if ckpt is None else ckpt["sink_offset"])
        self.late_sink = FileSink(job.late_path, job.late_format, LATE_COLUMNS, lazy=True)
        self.late_sink.open(None if ckpt is None else ckpt["late_offset"])

    def _start_slots(self, ckpt: dict[str, Any] | None) -> None:
        job = self.job
        P = job.parallelism
        states: list[dict[Any, Any]] = [{} for _ in range(P)]
        saved: dict[Any, Any] = {}
        for blob in (ckpt or {}).get("states", []):
            saved.update(pickle.loads(blob))
        if saved:
            keys = list(saved)
            owners = slot_of(key_array(keys), P).tolist()  # re-partition: the parallelism may have changed
            for k, s in zip(keys, owners):
                states[s][k] = saved[k]
        ctx = job._ctx
        epoch = (0 if ckpt is None else ckpt["id"]) + 1
        self.out_q = ctx.Queue(maxsize=job.queue_size * P)
        if job.sink_format in TEXT_FORMATS:
            capacity = ring_capacity(job.batch_size, job.queue_size, job.ring_row_bytes())
            self.rings = [ByteRing.create(capacity) for _ in range(P)]
        if self.grouper is not None:
            capacity = input_ring_capacity(job.batch_size, job.queue_size, job.is_time)
            self.in_rings = [ByteRing.create(capacity, on_wait=self._input_wait) for _ in range(P)]
        env = {}
        if isinstance(job.agg_spec, str):  # read by pba_runtime.runtime.preload, if this starts the forkserver
            env[WARM_ENV] = f"{job.agg_spec}:{job.engine}"
        if ctx.get_start_method() == "forkserver":
            env.update(path_env())
        with environ(env):
            for i in range(P):
                q = ctx.Queue(maxsize=job.queue_size)
                ring = self.rings[i].name if self.rings else None
                in_ring = self.in_rings[i].name if self.in_rings else None
                p = ctx.Process(target=slot_main, args=(job._slot_spec(i, epoch, ring, in_ring), q, self.out_q, states[i]),
                                name=f"pba-slot-{i}", daemon=True)
                p.start()
                self.in_qs.append(q)
                self.procs.append(p)

    def _await_ready(self) -> None:
        """Wait until every slot is up, its kernels warm (``("ready", slot)``): the stream starts then."""
        ready: set[int] = set()
        while len(ready) < self.job.parallelism:
            try:
                msg = self.out_q.get(timeout=POLL)
            except queue.Empty:
                self._check_slots()
                continue
            if msg[0] == "error":
                _, slot, text, user = msg
                raise (UserError if user else JobError)(f"task slot {slot}: {text}")
            if msg[0] != "ready":
                raise JobError(f"task slot {msg[1]} sent {msg[0]!r} before it was ready")
            ready.add(msg[1])
        for ring in [*self.rings, *self.in_rings]:  # every slot has mapped its rings: no name is left to leak
            ring.unlink()

    # ------------------------------------------------------------------ sink thread
    def _sink_loop(self) -> None:
        self.sink_clock = PhaseClock()
        try:
            self._sink_loop_body()
        finally:
            self.metrics.sink = self.sink_clock.report()

    def _sink_loop_body(self) -> None:
        aligner = BarrierAligner(self.job.parallelism, self._deliver, self._complete_checkpoint)
        P = self.job.parallelism
        try:
            while len(self.done) < P:
                try:
                    msg = self.out_q.get(timeout=POLL)
                except queue.Empty:
                    self._check_slots()
                    msg = None
                if msg is not None:
                    kind = msg[0]
                    if kind == "error":
                        _, slot, text, user = msg
                        raise (UserError if user else JobError)(f"task slot {slot}: {text}")
                    if kind == "stats":
                        self.metrics.slot_report(msg[1], msg[2])
                    else:
                        aligner.offer(msg[1], msg)
                if self.failure is not None:
                    return
        except BrokenPipeError as exc:  # the reader of stdout went away (| head)
            if self.failure is None:
                self.failure = exc
        except OSError as exc:
            if self.failure is None:
                self.failure = JobError(f"cannot write the output: {exc}")
        except BaseException as exc:
            if self.failure is None:
                self.failure = exc

    def _report_loop(self) -> None:
        """Metrics lines on stderr: every ``metrics_interval`` seconds and on SIGUSR1.

        A thread of its own, so that a sink blocked on a slow reader of stdout
        does not hold the metrics back.
        """
        interval = self.job.metrics_interval
        next_line = time.monotonic() + (interval or math.inf)
        while not self.stopped.is_set():
            timeout = min(POLL, max(0.0, next_line - time.monotonic()))
            if self.report_now.wait(timeout) or time.monotonic() >= next_line:
                if self.stopped.is_set():
                    return
                self.report_now.clear()
                if interval is not None and time.monotonic() >= next_line:
                    next_line = time.monotonic() + interval
                self.say(self.metrics.line())

    def _check_slots(self) -> None:
        for i, p in enumerate(self.procs):
            if i not in self.done and p.exitcode is not None:
                raise JobError(f"task slot {i} died (exit code {p.exitcode}) before the end of the stream")

    def _deliver(self, slot: int, msg: tuple) -> None:
        kind = msg[0]
        if kind == "out":
            _, _, data, n_win, arrival, late, n_late = msg
            self.sink_clock.mark()
            if type(data) is tuple:  # a region of the slot's ring
                ring = self.rings[slot]
                self.sink.write(ring.view(data))
                ring.release(data)
            elif data:
                self.sink.write(data)
            if late:
                self.late_sink.write(late)
            self.sink_clock.lap("write")
            self.metrics.windows += n_win
            self.metrics.late += n_late
            if n_win:
                self.metrics.latency.record(time.monotonic() - arrival, n_win)
        elif kind == "done":
            self.metrics.slot_report(slot, msg[2])
            self.final_parts.extend(msg[3])
            self.done.add(slot)

    def _complete_checkpoint(self, cid: int, parts: dict[int, Any], finished: bool = False) -> None:
        if self.failure is not None:  # the job is being torn down: keep the last good checkpoint
            return
        t0 = time.perf_counter()
        self.sink_clock.mark()
        position, tuples = self.positions.pop(cid)
        states = [payload["states"] for _, payload in sorted(parts.items())]  # pickled {key: snapshot} per slot
        pending = [name for _, payload in sorted(parts.items()) for name in payload["parts"]]
        if finished:
            pending += self.final_parts
        n_keys = sum(payload["keys"] for payload in parts.values())
        m = self.metrics
        data = {
            "id": cid,
            "finished": finished,
            "fingerprint": fingerprint(self.job.describe()),
            "description": self.job.describe(),
            "position": position,
            "states": states,
            "sink_offset": self.sink.sync() if self.sink is not None else 0,
            "late_offset": self.late_sink.sync(),
            "pending_parts": pending,  # committed (renamed) once this checkpoint is durable
            "counters": {"tuples": m.restored["tuples"] + tuples, "windows": m.restored["windows"] + m.windows,
                         "late": m.restored["late"] + m.late},
            "parallelism": self.job.parallelism,
            "written_at": time.time(),
        }
        write_checkpoint(self.job.checkpoint_dir, data)
        if pending:
            commit_parts(self.job.sink_path, pending)
        m.checkpoints += 1
        m.last_checkpoint = cid
        dt = time.perf_counter() - t0
        m.checkpoint_seconds += dt
        self.sink_clock.lap("checkpoint")
        log.info("checkpoint %d: position %s, %d keys, %.1f ms", cid, position, n_keys, dt * 1000)

    # ------------------------------------------------------------------ coordinator
    def _input_wait(self) -> None:
        """While a slot's input ring is full: stop waiting once the job has failed (a slot died, say)."""
        if self.failure is not None:
            raise self.failure

    def _ship(self, i: int, column: Any) -> Any:
        """``column`` into slot ``i``'s input ring: its region ``(position, length)``; the array itself when it
        cannot fit (the queue pickles it, as before), ``None`` for ``None``."""
        if column is None or not self.in_rings:
            return column
        ring = self.in_rings[i]
        buf = ring.reserve(column.nbytes)
        if buf is None:
            return column
        buf.view(column.dtype)[:] = column
        return ring.commit(column.nbytes)

    def _put(self, i: int, msg: tuple) -> None:
        q = self.in_qs[i]
        while True:
            if self.failure is not None:
                raise self.failure
            try:
                q.put(msg, timeout=POLL)
                return
            except queue.Full:
                continue

    def _source_loop(self, start: Any, batches: Iterator[Any]) -> None:
        job, m = self.job, self.metrics
        P = job.parallelism
        policy = None
        if job.checkpoint_dir is not None:
            policy = CheckpointPolicy(job.checkpoint_every, job.checkpoint_interval, start=time.monotonic())
        src = job.source
        last_progress = src.progress(start)
        t_start = time.monotonic()
        self.end_position = start
        clock = self.clock
        partition = Partitioner(P)
        grouper = self.grouper
        clock.mark()
        for batch in batches:
            clock.lap("source")
            n = len(batch)
            ts = batch.timestamps if job.is_time else None
            grouped = None if grouper is None or not n else grouper(batch.keys, batch.values, ts)
            if grouped is not None:  # each slot's share grouped by key, its values through its input ring
                clock.lap("partition")
                for i, g in enumerate(grouped):
                    if g is not None:
                        self._put(i, ("grouped", g.keys, g.bounds, self._ship(i, g.values),
                                      self._ship(i, g.timestamps), batch.arrival))
                clock.lap("queue_put")
            elif n:
                keys = batch.keys
                slots = partition(keys)
                parts = split_by_slot(slots, P)
                keys = compact_keys(keys)  # 1-2 bytes a key instead of 8 through the queue's pipe
                clock.lap("partition")
                for i, idx in enumerate(parts):
                    if idx is None:
                        continue
                    if P == 1:
                        msg = ("data", keys, batch.values, ts, batch.arrival)
                    else:
                        msg = ("data", keys[idx], batch.values[idx], None if ts is None else ts[idx],
                               batch.arrival)
                    self._put(i, msg)
                clock.lap("queue_put")
            m.tuples += n
            self.end_position = batch.position
            if self.bar is not None:
                p = src.progress(batch.position)
                self.bar.update(p - last_progress)
                last_progress = p
            if policy is not None and self.checkpoint_id not in self.positions:
                now = time.monotonic()
                if policy.due(m.tuples, now):
                    self.checkpoint_id += 1
                    self.positions[self.checkpoint_id] = (batch.position, m.tuples)
                    for i in range(P):
                        self._put(i, ("barrier", self.checkpoint_id))
                    policy.taken(m.tuples, now)
            if job.rate is not None:
                wait = t_start + m.tuples / job.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            if self.failure is not None:
                raise self.failure
            clock.mark()

    def execute(self, resume: bool, on_start: Callable[[], None] | None = None) -> dict[str, Any]:
        t_run = time.monotonic()
        job = self.job
        ckpt = self._load(resume)
        if ckpt is not None and ckpt.get("finished"):
            log.info("the job in %s already finished; nothing to resume", job.checkpoint_dir)
            self.metrics.restored.update(ckpt["counters"])
            self.metrics.finish()
            return dict(self.metrics.summary(), already_finished=True)
        start = None if ckpt is None else ckpt["position"]
        try:  # before any output, process or work: the checkpoint directory, then the source's first batch
            if job.checkpoint_dir is not None:
                for path in prepare_checkpoint_dir(job.checkpoint_dir):
                    log.info("removed %s (left by a run killed while writing a checkpoint)", path)
            batches: Iterator[Any] = _batches(job.source, start, job.batch_size, job.is_time)
            first = next(batches, None)
            if on_start is not None:
                on_start()
        except BaseException:
            job.source.close()
            raise
        if first is not None:
            batches = itertools.chain([first], batches)
            if first.keys.dtype.kind in "iu":  # small integer keys, likely: group them here (key_grouping)
                from . import key_grouping

                self.grouper = key_grouping.SlotGrouper(job.parallelism)
        if ckpt is not None:
            self.metrics.restored.update(ckpt["counters"])
            self.checkpoint_id = ckpt["id"]
        if ckpt is None and job.checkpoint_dir is not None:
            # A fresh start rewrites the sink: an older checkpoint no longer matches it.
            stale = os.path.join(job.checkpoint_dir, CHECKPOINT_FILE)
            if os.path.exists(stale):
                log.info("fresh start: removing the previous checkpoint %s", stale)
                os.unlink(stale)
        profiler = None
        if job.profile_dir:
            import cProfile

            os.makedirs(job.profile_dir, exist_ok=True)
            profiler = cProfile.Profile()
        old_usr1 = _install_sigusr1(self.report_now)
        sink_thread = None
        close_error = None
        try:
            self._open_sinks(ckpt)
            if job.progress and job.source.total is not None:
                from tqdm import tqdm

                self.bar = tqdm(total=job.source.total, initial=job.source.progress(start),
                                unit=job.source.progress_unit, unit_scale=True, file=sys.stderr,
                                desc=f"pba-run {job.source.kind}", smoothing=0.1, dynamic_ncols=True)
            warming = []
            if self.grouper is not None:  # numba and the compiled grouping, while the slots start
                from .key_grouping import warm_in_background

                warming.append(warm_in_background())
            # the source's compiled loops (the DEBS'14 generator's), also while the slots start
            warming.append(threading.Thread(target=_warm_source, args=(job.source,), name="pba-source-warm",
                                            daemon=True))
            warming[-1].start()
            self._start_slots(ckpt)
            self._await_ready()
            for thread in warming:
                thread.join()
            self.metrics.start(startup=time.monotonic() - t_run)
            sink_thread = threading.Thread(target=self._sink_loop, name="pba-sink", daemon=True)
            sink_thread.start()
            threading.Thread(target=self._report_loop, name="pba-metrics", daemon=True).start()
            if profiler is not None:
                profiler.enable()
            self.clock = PhaseClock()
            if first is not None:
                first.arrival = time.monotonic()  # read before the slots started: latency counts from now
            try:
                self._source_loop(start, batches)
            finally:
                self.metrics.coordinator = self.clock.report()
            for i in range(job.parallelism):
                self._put(i, ("end", time.monotonic()))
            while sink_thread.is_alive():
                sink_thread.join(timeout=POLL)
            if profiler is not None:
                profiler.disable()
            if self.failure is not None:
                raise self.failure
            for p in self.procs:
                p.join(timeout=10)
            self.metrics.finish()
            if job.checkpoint_dir is not None:
                self.positions[self.checkpoint_id + 1] = (self.end_position, self.metrics.tuples)
                self._complete_checkpoint(self.checkpoint_id + 1, {}, finished=True)
            elif self.final_parts:
                commit_parts(job.sink_path, self.final_parts)
        except BaseException as exc:
            if self.failure is None:
                self.failure = exc
            self._abort()
            raise
        finally:
            self.stopped.set()
            self.report_now.set()
            if sink_thread is not None:
                # it stops at its next message once a failure is set; let it, before the files are closed
                sink_thread.join(timeout=10)
            if profiler is not None:
                profiler.dump_stats(os.path.join(job.profile_dir, "coordinator.prof"))
            _restore_sigusr1(old_usr1)
            if self.bar is not None:
                self.bar.close()
            for s in (self.sink, self.late_sink):
                if s is not None:
                    try:
                        s.close()
                    except JobError as exc:  # a full device at the last flush; an earlier failure comes first
                        close_error = close_error or exc
            job.source.close()
            self._close_queues()
            for ring in [*self.rings, *self.in_rings]:  # after the sink thread and the slots: nobody uses them now
                ring.close()
            self.rings, self.in_rings = [], []
        if close_error is not None:
            raise close_error
        return dict(self.metrics.summary(), output_stage=job.output_stage())

    def _abort(self) -> None:
        """Stop every slot now (after an error or an interrupt)."""
        for p in self.procs:
            if p.exitcode is None:
                p.terminate()
        for p in self.procs:
            p.join(timeout=2)
            if p.exitcode is None:
                p.kill()
                p.join(timeout=2)
        for q in self.in_qs:
            q.cancel_join_thread()

    def _close_queues(self) -> None:
        """Close the queues and wait for their feeder threads.

        A feeder thread (a daemon) drops the last references to its queue's
        semaphores when it ends; if that happens during interpreter shutdown,
        the thread can be stopped between unlinking a semaphore and telling the
        resource tracker, which then warns about a "leaked semaphore". Joining
        the feeders here ends them while the interpreter is fully alive (after
        a normal end they have nothing left to send; after an abort the joins
        were cancelled and return at once).
        """
        queues = [q for q in [*self.in_qs, self.out_q] if q is not None]
        for q in queues:
            q.close()
        for q in queues:
            q.join_thread()
        for p in self.procs:
            if p.exitcode is None:
                p.join(timeout=1)
            if p.exitcode is not None:
                p.close()
        self.in_qs, self.out_q, self.procs = [], None, []


def _batches(source: Source, start: Any, batch_size: int, timestamps: bool) -> Iterator[Any]:
    """``source.batches(...)``, telling it when the job needs no timestamps (count windows) if it takes the
    keyword (a user's :class:`Source` subclass may not)."""
    if not timestamps and "timestamps" in inspect.signature(source.batches).parameters:
        return source.batches(start, batch_size, timestamps=False)
    return source.batches(start, batch_size)


def _warm_source(source: Source) -> None:
    try:
        source.warm()
    except Exception:  # a source that cannot load its compiled loop runs without it
        log.debug("the source's warm-up failed", exc_info=True)


def _install_sigusr1(event: threading.Event) -> Any:
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
        return None
    return signal.signal(signal.SIGUSR1, lambda signum, frame: event.set())


def _restore_sigusr1(old: Any) -> None:
    if old is not None:
        signal.signal(signal.SIGUSR1, old)
