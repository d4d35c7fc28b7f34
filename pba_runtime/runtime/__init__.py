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
>>> summary = Job(Debs14Source(plugs=3, tuples=500), pr.CountWindow(range=100, slide=10), "max",
...               algorithm="sba", parallelism=1).run()
>>> summary["tuples"], summary["windows"], summary["algorithms"]
(500, 22, {'sba': 3})
"""

from .checkpoint import BarrierAligner, CheckpointPolicy, load_checkpoint, write_checkpoint
from .errors import JobError, UserError
from .job import Job
from .metrics import JobMetrics, LatencyHistogram
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
    "Source",
    "UserError",
    "load_checkpoint",
    "write_checkpoint",
]
