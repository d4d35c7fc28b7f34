"""Worker tasks: how a task names an aggregation, the workers' entry points, and the chunk slots that use them.

A process pool never ships data: a task is a small tuple naming a
shared-memory block (:mod:`pba_runtime.shm`), offsets and shapes, and the
aggregation (:func:`aggregation_ref`), which the worker rebuilds
(:func:`resolve_ref`, cached). The arithmetic a task runs is
:mod:`pba_runtime.merge`'s, the same the main thread runs when it repairs a
failed task (:func:`pba_runtime.pool.result_or_repair`).

* :func:`run_lcs_task`: the lcs of one chunk slot (PBA's per-tuple path);
* :func:`run_merge_task`: the windows of the first rows of a batch (:mod:`pba_runtime.batch`);
* :func:`open_chunk_slots`: an aggregator's shared-memory chunk slots, whose lcs tasks go to a process pool.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import sys
import time
import weakref
from typing import Any

from . import logs
from .aggregations import BUILTIN_AGGREGATIONS, Aggregation, get_aggregation, moment_sketch, skip_missing
from .merge import lcs_into, merge_rows
from .shm import ChunkSlots, attached, partial_width

__all__ = ["AggregationUnavailable", "aggregation_ref", "resolve_ref", "run_lcs_task", "run_merge_task",
           "open_chunk_slots"]

log = logging.getLogger("pba_runtime")


# ----------------------------------------------------------------------------- naming an aggregation
class AggregationUnavailable(RuntimeError):
    """A worker process could not rebuild the aggregation a task names."""


_refs: weakref.WeakKeyDictionary[Aggregation, tuple | None] = weakref.WeakKeyDictionary()


def aggregation_ref(agg: Aggregation) -> tuple | None:
    """How a task names ``agg`` so that a worker process can rebuild it; ``None`` if it cannot.

    * ``("builtin", name)`` for a built-in, ``("moment_sketch", k)`` for ``moment_sketch(k)``;
    * ``("ref", module, attribute)`` for an :class:`Aggregation` bound to a module-level name
      (found in the module of its ``combine``/``lift``/``lower``): pickled by reference;
    * ``("skip", inner reference, min_periods)`` for ``skip_missing(inner, min_periods)``;
    * ``("pickle", bytes)`` when the object pickles (its callables are module-level functions).

    >>> aggregation_ref(get_aggregation("max"))
    ('builtin', 'max')
    >>> aggregation_ref(moment_sketch(3))
    ('moment_sketch', 3)
    >>> aggregation_ref(Aggregation(lift=float, combine=lambda a, b: a + b, lower=float, identity=0.0)) is None
    True
    """
    try:
        return _refs[agg]
    except KeyError:
        pass
    ref = _find_ref(agg)
    _refs[agg] = ref
    return ref


def _find_ref(agg: Aggregation) -> tuple | None:
    if BUILTIN_AGGREGATIONS.get(agg.name) is agg:
        return ("builtin", agg.name)
    if agg.missing == "skip":  # skip_missing(inner, min_periods): named by its inner aggregation's reference
        inner = aggregation_ref(agg.inner)
        return None if inner is None else ("skip", inner, agg.min_periods)
    m = re.fullmatch(r"moment_sketch(?:\[(\d+)\])?", agg.name)
    if m and agg.fingerprint == moment_sketch(int(m.group(1) or 10)).fingerprint:
        return ("moment_sketch", int(m.group(1) or 10))
    for fn in (agg.combine, agg.lift, agg.lower):
        mod = sys.modules.get(getattr(fn, "__module__", None) or "")
        if mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if value is agg:
                return ("ref", mod.__name__, attr)
    try:
        data = pickle.dumps(agg)
        pickle.loads(data)
    except Exception:
        return None
    return ("pickle", data)


_resolved: dict[Any, Aggregation] = {}


def resolve_ref(ref: tuple) -> Aggregation:
    """The aggregation a task names (worker side; cached)."""
    key = ref if ref[0] != "pickle" else ("pickle", hash(ref[1]), ref[1])
    agg = _resolved.get(key)
    if agg is not None:
        return agg
    try:
        if ref[0] == "builtin":
            agg = get_aggregation(ref[1])
        elif ref[0] == "moment_sketch":
            agg = moment_sketch(ref[1])
        elif ref[0] == "skip":
            agg = skip_missing(resolve_ref(ref[1]), ref[2])
        elif ref[0] == "ref":
            import importlib

            agg = getattr(importlib.import_module(ref[1]), ref[2])
        elif ref[0] == "pickle":
            agg = pickle.loads(ref[1])
        else:
            raise ValueError(f"unknown aggregation reference {ref!r}")
        if not isinstance(agg, Aggregation):
            raise TypeError(f"{ref!r} is a {type(agg).__name__}, not a pba_runtime.Aggregation")
    except Exception as exc:
        raise AggregationUnavailable(f"worker pid {os.getpid()} cannot rebuild aggregation {ref[:3]!r}: "
                                     f"{type(exc).__name__}: {exc}") from None
    _resolved[key] = agg
    return agg


# ----------------------------------------------------------------------------- worker side
def run_lcs_task(task: tuple) -> int:
    """Worker side of an lcs task (see :meth:`ChunkSlots.task`); returns the worker's pid."""
    t0 = time.perf_counter()
    _, name, saa_off, lcs_off, n, width, ref, log_cfg = task
    logs.apply_config(log_cfg)
    agg = resolve_ref(ref)
    blk = attached(name)
    k = max(width, 1)
    lcs_into(agg, blk.floats(saa_off, n * k), blk.floats(lcs_off, n * k), n, width)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("worker pid %d: lcs task %s+%d, %d rows of %s, %.3f ms", os.getpid(), name, saa_off, n,
                  agg.name, 1e3 * (time.perf_counter() - t0))
    return os.getpid()


def run_merge_task(task: tuple) -> int:
    """Worker side of a batch merge task: windows of rows ``[0, rows)`` of a shared body into a shared output.

    Both live in a scratch block the main process reuses from batch to batch
    (its pages stay resident: fresh shared pages cost far more to fault in
    than the heap pages ``np.empty`` reuses), so the mapping is cached.
    """
    t0 = time.perf_counter()
    _, name, body_off, body_shape, out_off, out_shape, rows, ref, log_cfg = task
    logs.apply_config(log_cfg)
    agg = resolve_ref(ref)
    blk = attached(name)
    body = blk.ndarray(body_off, body_shape)
    outv = blk.ndarray(out_off, out_shape)
    merge_rows(agg.kernel, body, outv, 0, rows)
    del body, outv
    if log.isEnabledFor(logging.DEBUG):
        log.debug("worker pid %d: merge task %s, %d rows of %d slices (%s), %.3f ms", os.getpid(), name, rows,
                  body_shape[1], agg.name, 1e3 * (time.perf_counter() - t0))
    return os.getpid()


# ----------------------------------------------------------------------------- main side
def open_chunk_slots(pool: Any, agg: Aggregation, rows: int, slots: int = 4) -> ChunkSlots | None:
    """Shared-memory chunk slots for one aggregator, or ``None`` if its lcs cannot be built in a process.

    ``None`` (use ``pool.submit_thread``) for thread pools, a closed pool,
    partials that are not fixed-size numeric, and aggregations a worker could
    not rebuild. The store's blocks are unlinked when ``pool`` closes.
    """
    if pool.kind != "process" or pool.closed:
        return None
    width = partial_width(agg)
    ref = aggregation_ref(agg) if width is not None else None
    if ref is None:
        return None
    store = ChunkSlots(agg, ref, rows, width, run_lcs_task, pool.submit, pool.submit_thread, slots_per_block=slots,
                       on_release=pool.settle, log_config=logs.current_config)
    store.reserve()  # the first block now, not in the first insert
    pool.memory.add_store(store)
    return store
