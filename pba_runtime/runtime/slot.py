"""A task slot's process: its message loop, with or without an output stage, and its watch on the coordinator.

A slot first sends ``("ready", slot)`` once it is up and its compiled kernels
are loaded (the job's stream starts when every slot is ready), then reads
messages from its bounded input queue, in order:

* ``("data", keys, values, timestamps, arrival)``: a batch of its tuples. It
  groups them by key with a stable sort (each key keeps arrival order) and
  feeds each key's tuples to that key's operator: count windows all keys at
  once (:func:`~pba_runtime.algorithms.keyed_batch.insert_many_keyed`, one
  compiled merge for the common case), time windows with one
  ``op.insert_many(values, timestamps)`` per key; late tuples (time windows with a
  lateness bound) come back from ``op.take_late()``. The results of the whole
  batch are formatted here, in parallel with the other slots, and sent to the
  sink as one ``("out", slot, result_bytes, windows, arrival, late_bytes, late)``;
  a Parquet or Arrow sink's results are written here instead, into the slot's
  own part file (:mod:`~pba_runtime.runtime.part_files`; ``result_bytes`` is ``None``).
  With a CSV, Parquet or Arrow sink and cores to spare (``SlotSpec.staged``:
  :meth:`pba_runtime.runtime.Job.output_stage`), formatting, writing and sending
  run on the slot's output stage (:mod:`~pba_runtime.runtime.output_stage`), a
  thread that overlaps them with the next batch's aggregation (their writers
  release the GIL) and keeps every message in order; else on the main loop.
* ``("grouped", keys, bounds, values, timestamps, arrival)``: a batch the coordinator grouped by key
  already (:mod:`~pba_runtime.runtime.key_grouping`: small integer keys): key ``keys[j]``'s tuples are
  ``values[bounds[j] : bounds[j + 1]]``. ``values`` and ``timestamps`` are regions ``(position, length)``
  of the slot's input ring (:mod:`~pba_runtime.runtime.byte_ring`), copied out and released at once, or
  arrays (a share too large for the ring; ``timestamps`` ``None`` for count windows). Then as ``"data"``,
  without the sort.
* ``("barrier", checkpoint_id)``: snapshot every key's operator and send
  ``("barrier", slot, checkpoint_id, {"states": pickle.dumps({key: snapshot}), "parts": [...], ...})``
  (``parts``: the part files it closed for this checkpoint to commit).
  The snapshots are pickled right away: ``op.snapshot()`` may share objects
  with the live operator, and the queue would pickle them later, after the
  next batch has changed them.
* ``("end", arrival)``: end of stream: ``flush()`` every operator, send the
  last results, the final statistics and ``("done", slot, stats, parts)``.

The batches themselves are :class:`~pba_runtime.runtime.task_slot.TaskSlot`'s. Slots watch their
parent: if the coordinator dies (``kill -9``), they exit at once
(:func:`pba_runtime.pool.exit_with_parent`), even when blocked reading a batch
the coordinator was killed while writing.
"""

from __future__ import annotations

import cProfile
import importlib
import logging
import os
import queue
import signal
import time
from typing import Any

from ..forkserver import sink_modules
from ..pool import ORPHAN_EXIT_CODE, exit_with_parent
from .malloc_tuning import keep_freed_memory
from .output_stage import OutputStage
from .sinks import TEXT_FORMATS
from .task_slot import STAGED_FORMATS, SlotSpec, TaskSlot, _parent_alive, _ParentGone, make_operator

# SlotSpec, TaskSlot, make_operator and STAGED_FORMATS live in task_slot, re-exported here: the path users import
__all__ = ["SlotSpec", "TaskSlot", "slot_main", "make_operator", "STAGED_FORMATS", "POLL"]

log = logging.getLogger("pba_runtime")

#: Seconds between statistics reports of a slot.
STATS_INTERVAL = 1.0
#: Seconds a blocked queue operation waits before checking that the coordinator is alive.
POLL = 0.5


def _get(q: Any, slot: TaskSlot) -> Any:
    slot.clock.mark()
    while True:
        try:
            msg = q.get(timeout=POLL)
            break
        except queue.Empty:
            if not _parent_alive():
                raise _ParentGone from None
            if slot.output is not None:
                slot.output.check()  # a failed write is reported now, not at the next batch
    slot.clock.lap("receive")
    return msg


def _put(q: Any, msg: Any, slot: TaskSlot) -> None:
    slot.clock.mark()
    _send(q, msg)
    slot.clock.lap("emit")


def _send(q: Any, msg: Any) -> None:
    while True:
        try:
            q.put(msg, timeout=POLL)
            break
        except queue.Full:
            if not _parent_alive():
                raise _ParentGone from None


def _run_stream(slot: TaskSlot, in_q: Any, out_q: Any) -> None:
    """The slot's loop without a sink, or with its sink on the main loop: each batch's message made (formatted,
    or written into the slot's part file) and sent by the main thread."""
    spec = slot.spec
    last_stats = time.monotonic()
    while True:
        msg = _get(in_q, slot)
        kind = msg[0]
        if kind == "data" or kind == "grouped":
            out = slot.on_data(*msg[1:]) if kind == "data" else slot.on_grouped(*msg[1:])
            if out[3] or out[6]:
                _put(out_q, out, slot)
        elif kind == "barrier":
            _put(out_q, slot.on_barrier(msg[1]), slot)
        elif kind == "end":
            out = slot.on_end(msg[1])
            if out[3] or out[6]:
                _put(out_q, out, slot)
            break
        now = time.monotonic()
        if now - last_stats >= STATS_INTERVAL:
            last_stats = now
            _put(out_q, ("stats", spec.index, slot.stats()), slot)


def _run_stream_staged(slot: TaskSlot, in_q: Any, out_q: Any) -> None:
    """The slot's loop with a sink: formatting, writing and sending on the output stage, in order."""
    spec = slot.spec
    stage = slot.output = OutputStage(lambda m: _send(out_q, m))
    last_stats = time.monotonic()

    def results(parts: list, late_parts: list, arrival: float) -> None:
        counts = slot._count(parts, late_parts)
        if counts[0] or counts[1]:
            stage.submit(lambda: slot._format(parts, late_parts, arrival, counts))

    while True:
        msg = _get(in_q, slot)
        kind = msg[0]
        if kind == "data":
            arrival = msg[4]
            results(*slot.aggregate(msg[1], msg[2], msg[3]), arrival)
        elif kind == "grouped":
            _, keys, bounds, values, timestamps, arrival = msg
            values, timestamps = slot.receive_grouped(values, timestamps)
            results(*slot.aggregate_grouped(keys, bounds, values, timestamps), arrival)
        elif kind == "barrier":
            cid = msg[1]
            payload = slot.snapshot()
            stage.submit(lambda cid=cid, payload=payload: (
                "barrier", spec.index, cid, dict(payload, parts=slot.finish_parts(cid + 1))))
        elif kind == "end":
            results(*slot.flush(), msg[1])
            break
        now = time.monotonic()
        if now - last_stats >= STATS_INTERVAL:
            last_stats = now
            stats = slot.stats()  # on the main thread: its clock's CPU time can only be read here
            stage.submit(lambda stats=stats: ("stats", spec.index, stats))


def _finish(slot: TaskSlot, out_q: Any) -> None:
    """Send ``("done", slot, stats, parts)`` after every result (through the output stage, if any)."""
    index = slot.spec.index
    if slot.output is None:
        _put(out_q, ("done", index, slot.stats(), slot.finish_parts()), slot)
        return
    main = slot.clock.report()
    slot.output.submit(lambda: ("done", index, slot.stats(main), slot.finish_parts()))
    slot.output.close()


def slot_main(spec: SlotSpec, in_q: Any, out_q: Any, states: dict[Any, Any]) -> None:
    """Body of a slot process (see the module doc)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    exit_with_parent()  # a read() of a half-written batch would never return to _get's check
    keep_freed_memory()  # each batch's arrays from the heap, not fresh pages (see malloc_tuning)
    if spec.log_config is not None:
        from .. import logs

        logs.apply_config(spec.log_config)
    profiler = cProfile.Profile() if spec.profile_path else None
    slot = None
    try:
        if profiler is not None:
            profiler.enable()
        slot = TaskSlot(spec, states)
        for module in sink_modules(spec.sink_format):  # preloaded by a forkserver; imported here under spawn
            importlib.import_module(module)
        if spec.sink_format in TEXT_FORMATS:  # its compiled loops, from numba's disk cache, before the stream starts
            importlib.import_module("pba_runtime.runtime.text_lines").compile_now()
        slot.warm_sink()
        if slot._warm is not None:  # the stream starts when every slot is ready (its kernels loaded)
            slot._warm.join()
        slot.freeze_startup()
        _put(out_q, ("ready", spec.index), slot)
        slot.start_stream()
        log.info("task slot %d: %s over %s, %d keys restored", spec.index, spec.algorithm, spec.window, len(states))
        (_run_stream_staged if spec.staged else _run_stream)(slot, in_q, out_q)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(spec.profile_path)
        _finish(slot, out_q)
    except _ParentGone:
        out_q.cancel_join_thread()
        in_q.cancel_join_thread()
        os._exit(ORPHAN_EXIT_CODE)
    except BaseException as exc:  # report any failure to the coordinator, then exit
        from .errors import UserError

        user = isinstance(exc, (ValueError, TypeError, UserError))
        text = f"{type(exc).__name__}: {exc}" if not user else str(exc)
        log.debug("task slot %d failed", spec.index, exc_info=True)
        try:
            out_q.put(("error", spec.index, text, user), timeout=5)
        except Exception:
            out_q.cancel_join_thread()
        raise SystemExit(1) from None
    finally:
        if slot is not None:
            slot.close()
