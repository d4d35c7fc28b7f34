"""Standalone parallel stream runtime: keyed sliding-window aggregation on one machine.

A job reads a source, partitions it by key to ``parallelism`` task slots
(processes), aggregates each key over sliding windows with any algorithm of
``pba_runtime.ALGORITHMS``, and writes the results to a sink, with event-time
lateness handling, checkpoints and metrics. The ``pba-run`` command
(:mod:`pba_runtime.cli`) is its command-line face.

Where each concept lives:

=================  ===========================================================
``job``            :class:`Job`: the coordinator, queues, sink thread
``slot``           a task slot process: per-key operators, one worker pool
``sources``        DEBS'14 / DEBS'12 generators, CSV, JSON lines
``sinks``          CSV / JSON lines / stdout / none, result formatting
``partitioning``   stable key hash, split by slot, group by key
``checkpoint``     atomic snapshots, barrier alignment, resume
``metrics``        throughput, latency percentiles, stalls, time shares
``errors``         :class:`UserError` (exit 2) and :class:`JobError` (exit 1)
=================  ===========================================================

Examples
--------
>>> import pba_runtime as pr
>>> from pba_runtime.runtime import Job, Debs14Source
>>> job = Job(Debs14Source(plugs=84, tuples=6_000_000), pr.CountWindow(range=1024), "max",
...           parallelism=2)   # the default job of ``pba-run`` (algorithm "auto", as every entry point)
>>> job.describe()["source"]
{'kind': 'debs14', 'seed': 1, 'disorder': 0, 'disorder_fraction': 0.05, 'plugs': 84}

``job.run()`` starts the task slots, runs to the end of the stream and
returns the metrics summary (see :class:`Job`).
"""

from .checkpoint import BarrierAligner, CheckpointPolicy, load_checkpoint, write_checkpoint
from .errors import JobError, UserError
from .job import Job
from .metrics import JobMetrics, LatencyHistogram
from .redis_streams import RedisStreamSource
from .sources import Batch, CsvSource, Debs12Source, Debs14Source, JsonlSource, Source

__all__ = [
    "Batch",
    "BarrierAligner",
    "CheckpointPolicy",
    "CsvSource",
    "Debs12Source",
    "Debs14Source",
    "Job",
    "JobError",
    "JobMetrics",
    "JsonlSource",
    "LatencyHistogram",
    "RedisStreamSource",
    "Source",
    "UserError",
    "load_checkpoint",
    "write_checkpoint",
]
