"""A task slot's keys and batches: :class:`TaskSlot` holds one slot's share of the keys and their windowed
aggregations, and turns each batch into the message of its results.

What a slot needs to know travels as a :class:`SlotSpec` (picklable); the slot's process, its message loop and
the messages themselves are :mod:`~pba_runtime.runtime.slot`'s. A slot keeps its keys' operators in a
:class:`pba_runtime.host.KeyedHost` (the algorithm per key, snapshot and restore of all keys) and owns one
:class:`pba_runtime.WorkerPool` that builds the lcs of all its keys (the paper's Flink integration runs one pool
per task slot).

Examples
--------
A slot can run in-process, which is how the unit below is checked:

>>> import numpy as np, pba_runtime as pr
>>> slot = TaskSlot(SlotSpec(index=0, window=pr.CountWindow(range=2, slide=1), agg="sum",
...                          algorithm="sba", sink_format="csv"))
>>> msg = slot.on_data(np.array([1, 1, 2]), np.array([1.0, 2.0, 5.0]), None, 0.0)
>>> msg[0], msg[2].decode(), msg[3]
('out', '1,0,2,3.0\\n', 1)
>>> slot.close()
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import pickle
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

import pba_runtime as pr

from ..algorithms.keyed_batch import insert_many_keyed
from ..batch import COMPILED_SPLIT_MIN, PARALLEL_BATCH_MIN
from ..host import HostSpec, KeyedHost
from ..kernels import warm_in_background
from .byte_ring import ByteRing
from .metrics import PhaseClock, Rusage
from .part_files import ROWS_PER_GROUP, PartWriter
from .partitioning import group_runs
from .query_rows import format_query, join, query_table
from .sinks import PART_FORMATS, TEXT_FORMATS, ResultParts, format_batch, format_late, result_table, sample_parts

__all__ = ["SlotSpec", "TaskSlot", "make_operator", "STAGED_FORMATS"]

log = logging.getLogger("pba_runtime")

@dataclass
class SlotSpec:
    """What a slot needs to know (picklable; sent to the slot process).

    Parameters
    ----------
    index : int
        This slot's number, ``0 .. parallelism-1``.
    window : CountWindow or TimeWindow
    agg : str or Aggregation
        A name, or a picklable :class:`pba_runtime.Aggregation`.
    algorithm : str
        A name in ``pba_runtime.ALGORITHMS`` or ``"auto"``.
    engine : str
        ``"auto"``, ``"compiled"``, ``"numpy"`` or ``"python"`` (:mod:`pba_runtime.kernels`).
    allowed_lateness : int or None
        Time windows: how far (ms) behind a key's largest timestamp a tuple may
        arrive and still be reordered into its windows.
    sink_format : {"csv", "jsonl", "parquet", "arrow", None}
        Format of result bytes (``None``: only count them); ``"parquet"`` and
        ``"arrow"``: the slot writes part files into ``sink_path``.
    sink_path : str, optional
        The part-file sinks' directory.
    compression : str, optional
        The part-file sinks' codec (:data:`~pba_runtime.runtime.part_files.CODECS`; ``None``: the format's default).
    epoch : int
        The part-file sinks' first epoch (the checkpoint resumed from, plus 1).
    late_format : {"csv", "jsonl"}
        Format of late-tuple bytes.
    pool_workers : int
        Threads of the slot's lcs worker pool.
    cores : int, optional
        Cores a slot may use (``"auto"`` runs SBA below 2: the slot's worker would
        only take turns with its main loop); ``None``: unknown.
    profile_path : str, optional
        Write a cProfile of the slot's loop there.
    durable : bool
        The job checkpoints: a part file is fsynced when it is closed (a checkpoint names it).
    ring : str, optional
        The CSV sink's shared-memory ring of this slot (:mod:`~pba_runtime.runtime.byte_ring`), made by
        the coordinator: the slot writes its result lines into it and sends their region.
    in_ring : str, optional
        The slot's input ring, made by the coordinator: the values (and timestamps) of its ``"grouped"``
        batches.
    log_config : tuple, optional
        The coordinator's :func:`pba_runtime.configure_logging` setting
        (``pba_runtime.logs.current_config()``): the slot logs to the same file.
    staged : bool
        Format and write the sink's results on an output stage (a thread of the slot's own) rather than
        on the main loop (:meth:`pba_runtime.runtime.Job.output_stage`, which sets it only for a sink of
        :data:`STAGED_FORMATS`).
    query : QueryOutputs, optional
        A query job's outputs (:mod:`~pba_runtime.runtime.query_rows`): one operator per output and key,
        their results joined into one row per (key, window end); ``window`` and ``agg`` are then its first
        output's.
    """

    index: int
    window: Any
    agg: Any
    algorithm: str
    engine: str = "auto"
    allowed_lateness: int | None = None
    sink_format: str | None = None
    sink_path: str | None = None
    compression: str | None = None
    epoch: int = 1
    late_format: str = "csv"
    pool_workers: int = 1
    cores: int | None = None
    profile_path: str | None = None
    durable: bool = True
    ring: str | None = None
    in_ring: str | None = None
    log_config: tuple | None = None
    staged: bool = False
    query: Any = None

    def host_spec(self) -> HostSpec:
        """The :class:`~pba_runtime.host.HostSpec` of this slot's keys (a query's first output's)."""
        return self.host_specs()[0]

    def host_specs(self) -> list[HostSpec]:
        """One :class:`~pba_runtime.host.HostSpec` per output: the job's one, or each of its query's."""
        if self.query is None:
            return [HostSpec(self.window, self.agg, self.algorithm, allowed_lateness=self.allowed_lateness,
                             engine=self.engine, cores=self.cores)]
        q = self.query
        return [HostSpec(w, q.aggregation(i), self.algorithm, allowed_lateness=self.allowed_lateness,
                         engine=self.engine, cores=self.cores) for i, w in enumerate(q.windows)]


def make_operator(spec: SlotSpec, pool: pr.WorkerPool | None) -> pr.WindowOperator:
    """The operator of one key: what the slot's :class:`~pba_runtime.host.KeyedHost` opens for a key."""
    return KeyedHost(spec.host_spec(), pool).open().op


class CountingPool(pr.WorkerPool):
    """The slot's worker pool, counting the tasks handed to it (lcs and batch-merge halves alike).

    :meth:`pba_runtime.WorkerPool.stats` has no task count, and PBA's
    ``stats()["lcs_tasks"]`` counts its per-tuple path only; what the summary
    says about the worker comes from here.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tasks = 0

    def submit(self, fn: Any, *args: Any) -> Any:
        self.tasks += 1
        return super().submit(fn, *args)

    def submit_thread(self, fn: Any, *args: Any) -> Any:
        self.tasks += 1
        return super().submit_thread(fn, *args)


class TaskSlot:
    """The keyed state and batch processing of one slot (the process loop is :func:`slot_main`)."""

    def __init__(self, spec: SlotSpec, states: dict[Any, Any] | None = None):
        self.spec = spec
        self.pool = CountingPool(kind="thread", workers=spec.pool_workers)
        self.query = spec.query
        #: one host per output (a query's), each key opened in all of them at once
        self.hosts = [KeyedHost(h, self.pool) for h in spec.host_specs()]
        self.host = self.hosts[0]
        self.output_windows = [0] * len(self.hosts)  # windows each output emitted
        # numba's import and the cached merge load while the slot waits for its first batch
        self._warm = warm_in_background(self.host.engine())
        self.clock = PhaseClock()
        self.tuples = 0
        self.windows = 0
        self.late = 0
        self._cpu0 = time.process_time()
        self._rusage = Rusage("process")
        self._gc0 = [g["collections"] for g in gc.get_stats()]
        self.frozen = False  # freeze_startup() sets it
        self._is_time = isinstance(spec.window, pr.TimeWindow)
        self._range = spec.window.range
        self._slide = spec.window.slide
        self.calls = 0  # per-key merges (one per key per batch)
        self.largest_piece = 0  # most windows one insert_many call emitted
        self.parts = None
        self.output: Any = None  # the OutputStage, when slot_main runs one
        if spec.sink_format in PART_FORMATS:
            self.parts = PartWriter(spec.sink_path, spec.sink_format, spec.index, spec.epoch,
                                    durable=spec.durable, compression=spec.compression)
        self.ring = None if spec.ring is None else ByteRing.attach(spec.ring, on_wait=_check_parent)
        self.in_ring = None if spec.in_ring is None else ByteRing.attach(spec.in_ring)
        if states:
            if self.query is None:
                self.host.restore(states)
            else:  # a query's key: its outputs' snapshots, in order
                for i, host in enumerate(self.hosts):
                    host.restore({k: v[i] for k, v in states.items()})

    @property
    def ops(self) -> dict[Any, pr.WindowOperator]:
        """``{key: operator}`` of the keys this slot has seen."""
        return dict(self.host.items())

    def _count(self, parts: list, late_parts: list) -> tuple[int, int]:
        """Windows and late tuples of a batch, added to the slot's counters (on its main thread)."""
        n_win = sum(len(e) for _, e, _ in parts)
        n_late = sum(len(t) for _, t, _ in late_parts)
        self.windows += n_win
        self.late += n_late
        return n_win, n_late

    def _format(self, parts: list, late_parts: list, arrival: float, counts: tuple[int, int] | None = None) -> tuple:
        """The ``("out", ...)`` message of a batch's results (a part-file sink writes them here); ``counts``:
        :meth:`_count`'s, when the main thread took them already."""
        fmt = self.spec.sink_format
        n_win, n_late = self._count(parts, late_parts) if counts is None else counts
        out = None
        if fmt is not None and n_win:
            if self.parts is not None:
                self.parts.write(result_table(parts, self._range) if self.query is None
                                 else query_table(self.query, parts))
            elif self.query is not None:
                out = format_query(self.query, fmt, parts, self.ring)
            else:
                out = format_batch(fmt, parts, self._range, self.ring)
        late = None
        if n_late:
            late = "".join(format_late(self.spec.late_format, k, t, v) for k, t, v in late_parts).encode()
        return ("out", self.spec.index, out, n_win, arrival, late, n_late)

    def _take_late(self, key: Any, op: Any, late_parts: list) -> None:
        take = getattr(op, "take_late", None)
        if take is None:
            return
        late = take()
        if late:
            vals, ts = zip(*late)
            late_parts.append((key, np.asarray(ts, dtype=np.int64), np.asarray(vals, dtype=np.float64)))

    def on_data(self, keys: np.ndarray, values: np.ndarray, timestamps: np.ndarray | None, arrival: float) -> tuple:
        """Process one batch; returns the ``("out", ...)`` message."""
        parts, late_parts = self.aggregate(keys, values, timestamps)
        self.clock.mark()
        msg = self._format(parts, late_parts, arrival)
        self.clock.lap("format")
        return msg

    def on_grouped(self, keys: list, bounds: list, values: Any, timestamps: Any, arrival: float) -> tuple:
        """Process one batch the coordinator grouped (a ``"grouped"`` message); returns the ``("out", ...)``
        message."""
        values, timestamps = self.receive_grouped(values, timestamps)
        parts, late_parts = self.aggregate_grouped(keys, bounds, values, timestamps)
        self.clock.mark()
        msg = self._format(parts, late_parts, arrival)
        self.clock.lap("format")
        return msg

    def receive_grouped(self, values: Any, timestamps: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """A ``"grouped"`` message's columns as arrays: copied out of the input ring (and the ring's regions
        released: the operators may keep views of what they are given), or as they came."""
        self.clock.mark()
        out = self._unship(values, np.float64), self._unship(timestamps, np.int64)
        self.clock.lap("receive")
        return out

    def _unship(self, column: Any, dtype: Any) -> np.ndarray | None:
        if column is None or isinstance(column, np.ndarray):
            return column
        view = self.in_ring.view(column)
        arr = np.frombuffer(view, dtype=dtype).copy()
        del view
        self.in_ring.release(column)
        return arr

    def aggregate(self, keys: np.ndarray, values: np.ndarray, timestamps: np.ndarray | None) -> tuple[list, list]:
        """Feed one batch to its keys' operators: ``(parts, late_parts)``, ``[(key, ends, results), ...]`` and
        ``[(key, timestamps, values), ...]``, for :meth:`_format`.

        The batch is sorted by key once (stably), then as :meth:`aggregate_grouped`.
        """
        clock = self.clock
        clock.mark()
        order, firsts, bounds = group_runs(keys)
        sorted_values = values[order]
        sorted_ts = None if timestamps is None or not self._is_time else timestamps[order]
        clock.lap("group")
        return self.aggregate_grouped(firsts, bounds, sorted_values, sorted_ts)

    def aggregate_grouped(self, keys: list, bounds: list, values: np.ndarray,
                          timestamps: np.ndarray | None) -> tuple[list, list]:
        """:meth:`aggregate` of a batch grouped by key: key ``keys[j]``'s tuples, in arrival order, are
        ``values[bounds[j] : bounds[j + 1]]`` (and ``timestamps``'s, for time windows).

        Count windows: every key's operator at once
        (:func:`~pba_runtime.algorithms.keyed_batch.insert_many_keyed`: the common case, such as the default
        job's, merges all keys in one compiled call); time windows: one ``insert_many`` per key.
        """
        clock = self.clock
        clock.mark()
        if self.query is not None:
            return self._aggregate_query(keys, bounds, values, timestamps)
        keys_seen = self.host.keys
        if not self._is_time:
            slide = self._slide
            ops = []
            for i, key in enumerate(keys):
                hosted = keys_seen.get(key)
                if hosted is None:
                    hosted = self._open(key, (bounds[i + 1] - bounds[i]) // slide)
                ops.append(hosted.op)
            columns: list = []
            outs = insert_many_keyed(ops, values, bounds, columns)
            parts = ResultParts((key, ends, res) for key, (ends, res) in zip(keys, outs) if len(ends))
            if columns and len(columns[0][0]) == len(parts):  # every part a view of the merge's arrays, in order
                parts.columns = columns[0][1:]
            self._account(len(keys), len(values), parts)
            clock.lap("aggregate")
            return parts, []
        parts = []
        late_parts: list = []
        for i, key in enumerate(keys):
            lo, hi = bounds[i], bounds[i + 1]
            ts = timestamps[lo:hi]
            hosted = keys_seen.get(key)
            if hosted is None:
                hosted = self._open(key, int(ts.max() - ts.min()) // self._slide + 1)
            op = hosted.op
            ends, res = op.insert_many(values[lo:hi], ts)
            self._take_late(key, op, late_parts)
            if len(ends):
                parts.append((key, ends, res))
        self._account(len(keys), len(values), parts)
        clock.lap("aggregate")
        return parts, late_parts

    def _aggregate_query(self, keys: list, bounds: list, values: np.ndarray,
                         timestamps: np.ndarray | None) -> tuple[list, list]:
        """:meth:`aggregate_grouped` of a query: every output's operators fed the same grouped batch (count
        windows: all keys of an output in one :func:`insert_many_keyed`), the results joined into the query's
        rows (:func:`~pba_runtime.runtime.query_rows.join`); late tuples are the first output's (every output
        sees the same tuples under the same lateness)."""
        keys_seen = self.host.keys
        for i, key in enumerate(keys):
            if key not in keys_seen:
                lo, hi = bounds[i], bounds[i + 1]
                span = hi - lo if not self._is_time else int(timestamps[lo:hi].max() - timestamps[lo:hi].min()) + 1
                self._open(key, span)
        outs: list[list] = []
        columns: list = []
        late_parts: list = []
        for h, host in enumerate(self.hosts):
            seen = host.keys
            merged: list = []
            if not self._is_time:
                got = insert_many_keyed([seen[key].op for key in keys], values, bounds, merged)
            else:
                got = []
                for i, key in enumerate(keys):
                    lo, hi = bounds[i], bounds[i + 1]
                    op = seen[key].op
                    got.append(op.insert_many(values[lo:hi], timestamps[lo:hi]))
                    if h == 0:
                        self._take_late(key, op, late_parts)
                    elif hasattr(op, "take_late"):
                        op.take_late()  # the same tuples as the first output's
            n_win = sum(len(e) for e, _ in got)
            self.output_windows[h] += n_win
            outs.append(got)
            # every key's windows as the merge's own two arrays, when it returned them so
            whole = merged and len(merged[0][0]) == sum(1 for e, _ in got if len(e)) and len(merged[0][1]) == n_win
            columns.append(merged[0][1:] if whole else None)
        parts = join(list(keys), outs, self.query.window_of, columns)
        self._account(len(keys), len(values), parts)
        self.clock.lap("aggregate")
        return parts, late_parts

    def _account(self, calls: int, tuples: int, parts: list) -> None:
        """Count a batch: its keys' calls, its tuples, the most windows one key emitted."""
        self.calls += calls
        self.tuples += tuples
        for _, ends, _ in parts:
            if len(ends) > self.largest_piece:
                self.largest_piece = len(ends)

    def _open(self, key: Any, key_slices: int) -> Any:
        """Open ``key``'s operator at its first piece: ``"auto"`` sees the piece's slices (``small_key``).
        A query's key is opened in every output's host (``key_slices``: the piece's span, in tuples or ms,
        divided by each window's slide)."""
        if self.query is None:
            hosted = self.host.open(key_slices)
            self.host.add(key, hosted)
            return hosted
        for host, w in zip(self.hosts, self.query.windows):
            host.add(key, host.open(max(1, key_slices // w.slide)))
        return self.host.keys[key]

    def on_barrier(self, checkpoint_id: int) -> tuple:
        """Snapshot every key: the ``("barrier", ...)`` message."""
        payload = self.snapshot()
        payload["parts"] = self.finish_parts(checkpoint_id + 1)
        return ("barrier", self.spec.index, checkpoint_id, payload)

    def snapshot(self) -> dict[str, Any]:
        """The barrier's payload but its ``parts``: every key's state, pickled now, and the counters."""
        self.clock.mark()
        states = pickle.dumps(self._states(), protocol=pickle.HIGHEST_PROTOCOL)
        payload = {"states": states, "keys": len(self.host), "tuples": self.tuples, "windows": self.windows,
                   "late": self.late}
        self.clock.lap("snapshot")
        return payload

    def _states(self) -> dict[Any, Any]:
        """``{key: snapshot}``; a query's key: its outputs' snapshots, in order."""
        if self.query is None:
            return self.host.snapshot()
        snaps = [host.snapshot() for host in self.hosts]
        return {k: tuple(s[k] for s in snaps) for k in snaps[0]}

    def on_end(self, arrival: float) -> tuple:
        """Flush every key (end of stream); returns the last ``("out", ...)`` message."""
        parts, late_parts = self.flush()
        self.clock.mark()
        msg = self._format(parts, late_parts, arrival)
        self.clock.lap("format")
        return msg

    def flush(self) -> tuple[list, list]:
        """Flush every key (end of stream): ``(parts, late_parts)`` as :meth:`aggregate`."""
        self.clock.mark()
        parts = []
        late_parts: list = []
        if self.query is not None:
            keys = list(self.host.keys)
            outs = []
            for h, host in enumerate(self.hosts):
                got = []
                for key in keys:
                    op = host.keys[key].op
                    got.append(op.flush())
                    if h == 0:
                        self._take_late(key, op, late_parts)
                    elif hasattr(op, "take_late"):
                        op.take_late()
                self.output_windows[h] += sum(len(e) for e, _ in got)
                outs.append(got)
            parts = join(keys, outs, self.query.window_of) if keys else []
            self.clock.lap("aggregate")
            return parts, late_parts
        for key, op in self.host.items():
            ends, res = op.flush()
            self._take_late(key, op, late_parts)
            if len(ends):
                parts.append((key, ends, res))
        self.clock.lap("aggregate")
        return parts, late_parts

    def _clock_report(self, main: dict[str, Any] | None = None) -> dict[str, Any]:
        """The main thread's phases, and the output stage's (format, emit) added when there is one."""
        rep = self.clock.report() if main is None else {k: (dict(v) if isinstance(v, dict) else v)
                                                        for k, v in main.items()}
        if self.output is not None:
            st = self.output.report()
            for k in ("wall", "cpu"):
                for phase, v in st[k].items():
                    rep[k][phase] = rep[k].get(phase, 0.0) + v
            rep["thread_cpu"] += st["thread_cpu"]
        return rep

    def start_stream(self) -> None:
        """The stream starts (the slot said it is ready): its CPU time and its clock's phases count from now,
        as the coordinator's do, so start-up (a sink's imports, the compiled writer's load) is not charged
        to the stream."""
        self.clock = PhaseClock()
        self._cpu0 = time.process_time()
        self._rusage = Rusage("process")
        self._gc0 = [g["collections"] for g in gc.get_stats()]

    def freeze_startup(self) -> None:
        """Hand every object allocated so far to the garbage collector's permanent generation (``gc.freeze()``):
        :func:`slot_main` calls it once the slot is up, before it says it is ready.

        Those objects (the forkserver's modules, numba's kernels, pyarrow) live as long as the
        slot, but many were still in the young generations when the forkserver forked it, so a collection in
        the stream walked them all and wrote to every page they are on, pages the slot shares with its
        forkserver until it writes them (copy on write). Where one landed depended on how many objects a tree's
        start-up happened to allocate: in one checkout the default job's Arrow sink paid that in the first
        batch's ``result_table`` (the first call that allocated enough to start a collection), its formatting
        twice as slow; the same commit in another checkout did not. Frozen, the stream's collections see only the stream's own objects.
        """
        gc.freeze()
        self.frozen = True

    def warm_sink(self) -> None:
        """Write made-up results of a row group's size once through the part-file sink's table and writer,
        into memory (:meth:`PartWriter.warm`): :func:`slot_main` calls it before the slot says it is ready, so
        pyarrow's first-use costs fall in the slot's start-up, not in its stream (nothing without a part-file
        sink)."""
        if self.parts is not None:
            sample = sample_parts(ROWS_PER_GROUP)
            if self.query is None:
                self.parts.warm(result_table(sample, self._range))
            else:
                self.parts.warm(query_table(self.query, join([0], [[sample.columns]] * len(self.hosts))))

    def finish_parts(self, next_epoch: int | None = None) -> list[str]:
        """Close the slot's part file (part-file sinks): its name, for the checkpoint (or the end) to commit."""
        return [] if self.parts is None else self.parts.roll(next_epoch)

    def stats(self, main_clock: dict[str, Any] | None = None) -> dict[str, Any]:
        """Counters of this slot: tuples, windows, late, lcs tasks/stalls, algorithms, time per phase.

        ``main_clock``: the main thread's clock report, taken on it, when this runs on the output stage.
        """
        algs: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        engines: Counter[str] = Counter()
        stalls = lcs = 0
        stall_time = 0.0
        late_ops = 0
        for hosted in self.host.keys.values():
            op = hosted.op
            st = op.stats()
            alg = str(st.get("algorithm", getattr(op, "name", "?")))
            algs[alg] += 1
            reasons[f"{alg}:{hosted.reason}"] += 1
            engines[str(st.get("engine", "python"))] += 1
            stalls += int(st.get("stalls", 0))
            lcs += int(st.get("lcs_tasks", 0))
            stall_time += float(st.get("stall_time", 0.0))
            late_ops += int(st.get("late", 0))
        clock = self._clock_report(main_clock)
        rusage = {"process": self._rusage.delta(), "main": clock.get("rusage", {}),
                  "output": {} if self.output is None else self.output.report()["rusage"]}
        return {"slot": self.spec.index, "pid": os.getpid(), "keys": len(self.host), "tuples": self.tuples,
                "windows": self.windows, "late": self.late, "lcs_tasks": lcs, "stalls": stalls,
                "stall_time": stall_time, "algorithms": dict(algs), "reasons": dict(reasons),
                "engines": dict(engines), "pool_tasks": self.pool.tasks, "calls": self.calls,
                "largest_piece": self.largest_piece, "split_min": self._split_min(),
                "clock": clock, "rusage": rusage,
                "gc": {"frozen": self.frozen,  # the objects of the slot's start-up (freeze_startup)
                       "collections": [g["collections"] - c for g, c in zip(gc.get_stats(), self._gc0)]},
                "outputs": self._output_stats(),
                "cpu_s": time.process_time() - self._cpu0}

    def _output_stats(self) -> dict[str, Any]:
        """A query's outputs: per name, the windows it emitted and its keys' algorithms (empty without a query)."""
        if self.query is None:
            return {}
        out = {}
        for name, host, n in zip(self.query.names, self.hosts, self.output_windows):
            algs: Counter[str] = Counter(str(h.op.stats().get("algorithm", h.algorithm)) for h in host.keys.values())
            out[name] = {"windows": n, "algorithms": dict(algs)}
        return out

    def _split_min(self) -> dict[str, int]:
        """From how large a merge PBA's batch path gives its worker a part: windows (compiled engine),
        slice partials (numpy engine; plus two rows of ``q`` slices, :func:`pba_runtime.batch.splits_rows`)."""
        return {"compiled_windows": COMPILED_SPLIT_MIN, "numpy_slices": PARALLEL_BATCH_MIN}

    def close(self) -> None:
        if self.output is not None:
            self.output.abandon()  # a no-op once closed; after a failure it no longer touches the part file
        if self.parts is not None:
            self.parts.close()
        if self.ring is not None:
            self.ring.close()
        if self.in_ring is not None:
            self.in_ring.close()
        for host in self.hosts:
            host.close()
        self.pool.close(wait=False)
        if self._warm is not None:
            self._warm.join()


#: Sink formats whose results a slot may write on its output stage: their writers release the GIL (the compiled
#: text writer, pyarrow).
STAGED_FORMATS = (*TEXT_FORMATS, *PART_FORMATS)


class _ParentGone(Exception):
    pass


def _parent_alive() -> bool:
    parent = multiprocessing.parent_process()
    return parent is None or parent.is_alive()


def _check_parent() -> None:
    """Raise :class:`_ParentGone` if the coordinator died (the output stage waiting for room in its ring)."""
    if not _parent_alive():
        raise _ParentGone
