"""The coordinator: one run of a :class:`~pba_runtime.runtime.job.Job`, its processes, queues, threads and files.

The coordinator (the process that calls :meth:`Job.run <pba_runtime.runtime.job.Job.run>`) reads the source in
batches, hash-partitions each batch by key (:mod:`~pba_runtime.runtime.partitioning`) and puts each slot's
share, as numpy arrays, on that slot's bounded input queue. ``parallelism`` task slots
(:mod:`~pba_runtime.runtime.slot`, one process each, started with ``forkserver`` or ``spawn``, never ``fork``)
aggregate their keys and put formatted results on one bounded output queue. A sink thread in the coordinator
writes them, aligns checkpoint barriers (:mod:`~pba_runtime.runtime.checkpoint`) and keeps the metrics
(:mod:`~pba_runtime.runtime.metrics`). Bounded queues give backpressure: a slow sink blocks the slots, slow
slots block the source; memory stays at about ``queue_size`` batches per queue. Per-key order is kept: a key
always goes to the same slot, batches reach a slot in order, and a slot feeds each key its tuples in arrival
order. One run's life cycle, starting the slots, routing batches, the checkpoint barrier, the sink thread and
the teardown on every failure, is one state machine under one set of queues: :class:`JobRun`.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..forkserver import WARM_ENV, environ, path_env
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
from .part_files import commit_parts, prepare_part_dir
from .partitioning import Partitioner, compact_keys, key_array, slot_of, split_by_slot
from .redis_streams import LogUnavailable, RedisStreamSink
from .sinks import LATE_COLUMNS, PART_FORMATS, TEXT_FORMATS, FileSink
from .slot import POLL, slot_main
from .sources import Source

__all__ = ["JobRun"]

log = logging.getLogger("pba_runtime")


class JobRun:
    """One execution of a job (its processes, queues, threads and files): ``JobRun(job).execute(resume)``."""

    def __init__(self, job: Any):
        self.job = job
        self.metrics = job.metrics = JobMetrics(job.parallelism)
        self.failure: BaseException | None = None
        self.procs: list[Any] = []
        self.in_qs: list[Any] = []
        self.out_q: Any = None
        self.rings: list[ByteRing] = []  # a text sink's: one per slot, result bytes without the pipe
        self.in_rings: list[ByteRing] = []  # one per slot: its grouped input values without the pipe
        self.grouper: Any = None  # a SlotGrouper when the keys are small integers (key_grouping)
        self.sink: FileSink | RedisStreamSink | None = None
        self.late_sink: FileSink | RedisStreamSink | None = None
        self.halted = threading.Event()  # the halt's checkpoint is written: the sink thread may end
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
        elif job.log_sink is not None:
            columns = job.result_columns()
            self.sink = RedisStreamSink(job.log_sink, columns, tuple(c for c in columns if c in ("key", "start", "end")))
            self.sink.open(None if ckpt is None else ckpt["sink_offset"])
        elif job.sink_format is not None:
            self.sink = FileSink(job.sink_path, job.sink_format, job.result_columns())
            self.sink.open(None if ckpt is None else ckpt["sink_offset"])
        if job.log_late is not None:
            self.late_sink = RedisStreamSink(job.log_late, LATE_COLUMNS)
        else:
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
            while len(self.done) < P and not self.halted.is_set():
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
                         "late": m.restored["late"] + m.late,
                         "malformed": m.restored.get("malformed", 0) + m.malformed},
            "parallelism": self.job.parallelism,
            "written_at": time.time(),
        }
        write_checkpoint(self.job.checkpoint_dir, data)
        if pending:
            commit_parts(self.job.sink_path, pending)
        if cid == 0:  # the start's (see execute): not one the job took
            return
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
            m.malformed = src.malformed
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
            if ckpt is None and job.checkpoint_dir is not None and any(
                    getattr(sk, "appends", False) for sk in (self.sink, self.late_sink)):
                # A sink that appends on a fresh start (a stream): checkpoint 0 holds where its entries begin,
                # so a job killed before its first checkpoint resumes from the start with none written twice.
                self.positions[0] = (None, 0)
                self._complete_checkpoint(0, {})
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
            halt = job.source.halted if job.checkpoint_dir is not None else None
            if halt is not None:  # a stop or a lost broker: a checkpoint where the reading stopped, no end
                self._halt(sink_thread)
            else:
                for i in range(job.parallelism):
                    self._put(i, ("end", time.monotonic()))
            while sink_thread.is_alive():
                sink_thread.join(timeout=POLL)
            if profiler is not None:
                profiler.disable()
            if self.failure is not None:
                raise self.failure
            if halt is not None:
                self._abort()  # their state is in the checkpoint; the stream goes on after a resume
            for p in self.procs:
                p.join(timeout=10)
            self.metrics.finish()
            failure = job.source.failure
            if halt is not None:
                if failure is not None:
                    raise LogUnavailable(f"{failure}; stopped at checkpoint {self.checkpoint_id} "
                                         "(continue with --resume)")
                return dict(self.metrics.summary(), output_stage=job.output_stage(), stopped=halt,
                            checkpoint=self.checkpoint_id)
            if job.checkpoint_dir is not None:
                self.positions[self.checkpoint_id + 1] = (self.end_position, self.metrics.tuples)
                self._complete_checkpoint(self.checkpoint_id + 1, {}, finished=True)
            elif self.final_parts:
                commit_parts(job.sink_path, self.final_parts)
            if failure is not None:  # no checkpoints: every result of what was read is written, then the error
                raise failure
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

    def _halt(self, sink_thread: threading.Thread) -> None:
        """A checkpoint at the position the source stopped at, then the sink thread's end (not the stream's:
        the slots flush no window)."""
        m = self.metrics
        while self.checkpoint_id in self.positions and sink_thread.is_alive():  # one under way: let it finish
            time.sleep(POLL)
        self.checkpoint_id += 1
        cid = self.checkpoint_id
        self.positions[cid] = (self.end_position, m.tuples)
        for i in range(self.job.parallelism):
            self._put(i, ("barrier", cid))
        while m.last_checkpoint != cid:
            if self.failure is not None:
                raise self.failure
            if not sink_thread.is_alive():
                raise JobError("the sink thread ended before the last checkpoint")
            time.sleep(POLL)
        self.halted.set()

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
