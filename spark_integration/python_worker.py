"""What runs inside a Spark Python worker: one worker pool per process, the PBA/SBA choice, metrics.

**One pool per Python worker process.** :func:`worker_pool` creates one
:class:`pba_runtime.WorkerPool` the first time a key in this process needs PBA
and hands the same pool to every later key and task (PySpark reuses Python
workers across tasks by default, ``spark.python.worker.reuse=true``), as the
paper's Flink integration keeps one pool per task slot. A pool inherited
through ``fork`` is never used (its threads do not exist in the child). The
pool is closed at interpreter exit (``atexit``); PySpark's daemon ends forked
workers with ``os._exit``, which skips ``atexit`` but ends the pool's threads
together with the process, so nothing outlives the worker either way.

**The algorithm per key partition** (:func:`choose_algorithm`: the core's one
policy, :func:`pba_runtime.algorithms.choose_algorithm`, with Spark's
threshold). Each runner keeps its keys in a :class:`pba_runtime.host.KeyedHost`
(:func:`key_host`) whose pool source is this process's pool. With
``algorithm="auto"`` a key runs SBA, the one-thread version, when

* ``small_window``: the window has fewer than :data:`SPARK_PBA_MIN_SLICES`
  slices (``range // slide``);
* ``one_core``: a task has fewer than two cores to itself: ``spark.task.cpus``
  is 1 (the default: every core runs a task of its own, so PBA's worker thread
  would only compete with another task), the executor has one core
  (``local[1]``, ``spark.executor.cores=1``), or the worker process is pinned to
  one CPU. On local[2] forced PBA is slower than SBA (``bench/bench_spark.py``
  shows it); set ``spark.task.cpus=2`` to give each task a core for its pool;
* ``small_key``: the key's whole stream (or, in the RDD function, each piece
  it is fed in) is shorter than a batch that PBA splits with the pool
  (``pba_runtime.batch.splits_rows``), so PBA could only add overhead;
* ``pool_unavailable``: the pool cannot be started in this process;
* ``pool_died``: the pool was closed or its worker failed (PBA itself then
  finishes every window on the main thread, nothing is lost; later keys run SBA
  with this reason once a new pool cannot be started either).

and PBA otherwise (reason ``large_window``). An explicit ``algorithm="pba"``
is honoured unless the pool is unavailable; ``"sba"`` and ``"recal"`` are
always honoured (reason ``requested``).

**Visibility.** Every decision is counted in a :class:`AlgorithmMetrics`
(a Spark accumulator, read on the driver after an action) and logged by the
``spark_integration`` logger in the worker: one INFO line per partition (per
key with ``applyInPandas``) with the counts, one WARNING when the pool cannot start or dies.

Examples
--------
>>> import pba_runtime as pr
>>> choose_algorithm("auto", pr.CountWindow(range=64, slide=1), cores=2)
('sba', 'small_window')
>>> choose_algorithm("auto", pr.CountWindow(range=8192, slide=1), cores=1)
('sba', 'one_core')
>>> choose_algorithm("auto", pr.CountWindow(range=8192, slide=1), cores=2)
('pba', 'large_window')
>>> choose_algorithm("auto", pr.CountWindow(range=8192, slide=1), cores=2, key_slices=1000)
('sba', 'small_key')
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pba_runtime as pr
from pba_runtime.algorithms import REASONS
from pba_runtime.algorithms import choose_algorithm as _choose
from pba_runtime.host import HostedKey, HostSpec, KeyedHost

__all__ = [
    "PBA_MIN_KEY_SLICES",
    "REASONS",
    "SPARK_PBA_MIN_SLICES",
    "AlgorithmMetrics",
    "GuardedPool",
    "KeyOperator",
    "MetricsParam",
    "algorithm_metrics",
    "choose_algorithm",
    "close_worker_pool",
    "key_host",
    "local_cores",
    "worker_pool",
]

log = logging.getLogger("spark_integration")

#: ``auto`` runs PBA from this many slices per window (``range // slide``) up.
#: Inside Spark every key goes through the batch path, where what PBA
#: parallelises (half of the window merge, in the pool) grows with the batch,
#: not with the window; the core's own threshold
#: (``pba_runtime.AUTO_PBA_MIN_SLICES``) comes from per-tuple tail latency,
#: which a Spark batch job does not have. ``bench/bench_spark.py``
#: (``spark.task.cpus=2`` phase) compares PBA and SBA at 2^10 and 2^13 slices.
SPARK_PBA_MIN_SLICES = 1 << 10

# the least batch from which vectorised PBA hands rows to the pool (longer for rows under 2^11 slices:
# ``pba_runtime.batch.splits_rows`` is the rule)
from pba_runtime.batch import PARALLEL_BATCH_MIN as PBA_MIN_KEY_SLICES  # noqa: E402  (beside its explanation)


def local_cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def choose_algorithm(requested: str, window: pr.CountWindow | pr.TimeWindow, *, cores: int | None = None,
                     key_slices: int | None = None, pool_ok: bool = True, pool_died: bool = False,
                     min_slices: int | None = None) -> tuple[str, str]:
    """``(algorithm, reason)`` for one key partition; see the module docstring for the rules.

    Parameters
    ----------
    requested : str
        ``"auto"`` or an algorithm name.
    window : CountWindow or TimeWindow
    cores : int, optional
        Cores one task may use (``None``: unknown, not a reason to fall back).
    key_slices : int, optional
        Slices in the key's whole stream when it is known to be that short.
    pool_ok, pool_died : bool
        Whether this process has a working pool, and why not.
    min_slices : int, optional
        Overrides :data:`SPARK_PBA_MIN_SLICES`.
    """
    return _choose(requested, window, min_slices=SPARK_PBA_MIN_SLICES if min_slices is None else min_slices,
                   cores=cores, key_slices=key_slices, pool_ok=pool_ok, pool_died=pool_died)


# --------------------------------------------------------------------------- the pool
_lock = threading.Lock()
_pid: int | None = None
# factory key -> [pool or None, why the last start failed or None]
_pools: dict[str, list] = {}


def _default_factory(workers: int) -> pr.WorkerPool:
    return pr.WorkerPool(kind="thread", workers=workers)


def _factory_key(factory: Callable[..., Any] | None) -> str:
    if factory is None:
        return "default"
    return f"{getattr(factory, '__module__', '')}.{getattr(factory, '__qualname__', type(factory).__name__)}"


def worker_pool(workers: int = 1, factory: Callable[[int], pr.WorkerPool] | None = None) -> tuple[pr.WorkerPool | None, str | None]:
    """This process's pool and, when there is none, why: ``(pool, None)`` or ``(None, reason)``.

    The pool is created on first use and reused by every later key and task of
    the process. A closed pool (it *died*) is replaced; when a pool cannot be
    started, the process remembers it and runs SBA from then on (per factory).

    Parameters
    ----------
    workers : int
        Threads of the pool when it is created.
    factory : callable, optional
        ``factory(workers) -> WorkerPool``; the default builds a thread pool.
        Each factory (by module and qualified name) has its own pool.

    Returns
    -------
    tuple
        ``(pool, None)``, or ``(None, "pool_unavailable" | "pool_died")``.

    Examples
    --------
    >>> pool, why = worker_pool()
    >>> pool is worker_pool()[0], why
    (True, None)
    >>> close_worker_pool()
    >>> pool.closed
    True
    """
    global _pid
    pid = os.getpid()
    key = _factory_key(factory)
    with _lock:
        if _pid != pid:  # first use, or inherited through fork: the parent's threads are not here
            _pools.clear()
            _pid = pid
        slot = _pools.setdefault(key, [None, None])
        pool, failed = slot
        if pool is not None and not pool.closed:
            return pool, None
        if failed is not None:
            return None, failed
        died = pool is not None  # there was one and it is closed
        try:
            pool = (factory or _default_factory)(workers)
            if not isinstance(pool, pr.WorkerPool):
                raise TypeError(f"pool factory returned {type(pool).__name__}, not a pba_runtime.WorkerPool")
            if pool.closed:
                raise RuntimeError("pool factory returned a closed pool")
        except Exception as exc:  # noqa: BLE001 - a user factory may fail any way: logged, SBA runs
            slot[0], slot[1] = None, ("pool_died" if died else "pool_unavailable")
            log.warning("spark_integration: worker pool cannot start in pid %d (%s: %s); running SBA",
                        pid, type(exc).__name__, exc)
            return None, slot[1]
        if died:
            log.warning("spark_integration: worker pool in pid %d was closed; started a new one", pid)
        slot[0] = pool
        return pool, None


_FAILED = object()


class _GuardedFuture(Future):
    """The future of a task whose failure is repaired: ``result()`` then runs the task on the caller's thread.

    It completes when the worker's future does (so ``concurrent.futures.wait``
    works on it); a failure completes it with a marker that ``result()`` turns
    into the task's result computed here.
    """

    def __init__(self, inner: Future, fn: Callable[..., Any], args: tuple, owner: GuardedPool):
        super().__init__()
        self._inner, self._fn, self._args, self._owner = inner, fn, args, owner
        self._failure: BaseException | None = None
        self._repair_lock = threading.Lock()
        self._repaired: Any = _FAILED
        inner.add_done_callback(self._relay)

    def _relay(self, inner: Future) -> None:
        try:
            res = inner.result()
        except BaseException as exc:  # noqa: BLE001 - failed or cancelled: repaired on demand
            self._failure = exc
            res = _FAILED
        self.set_result(res)

    def cancel(self) -> bool:
        return self._inner.cancel()

    def result(self, timeout: float | None = None) -> Any:
        res = super().result(timeout)
        if res is not _FAILED:
            return res
        with self._repair_lock:
            if self._repaired is _FAILED:
                self._owner._failed(self._failure)
                self._repaired = self._fn(*self._args)
            return self._repaired

    def exception(self, timeout: float | None = None) -> BaseException | None:
        super().result(timeout)
        return None  # a worker's failure is repaired, never raised


class GuardedPool(pr.WorkerPool):
    """The process's pool as one PBA operator sees it: Spark's policy for a failed task.

    The core repairs every failed task itself (``pba_runtime.pool.result_or_repair``,
    per tuple and in the batch path). What this adds is the adapter's policy
    around it: a failed task is redone here on the caller's thread (every task
    is a pure function of its arguments that writes only its own output, so the
    result is the same), ``failures`` counts it for the ``pool_failures``
    metric, and the shared pool is closed (it *died*), so the next key starts a
    new one or falls back to SBA (reason ``pool_died``). Closing a
    ``GuardedPool`` does not close the shared pool.

    Examples
    --------
    >>> from concurrent.futures import Future
    >>> class Dying(pr.WorkerPool):
    ...     def submit(self, fn, *args):
    ...         f = Future(); f.set_exception(RuntimeError("worker died")); return f
    >>> g = GuardedPool(Dying())
    >>> g.submit(sum, [1, 2]).result(), g.failures
    (3, 1)
    """

    def __init__(self, inner: pr.WorkerPool):  # no super().__init__: no executor of its own
        self._inner = inner
        self.kind = inner.kind
        self.workers = inner.workers
        self.failures = 0
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed or self._inner.closed

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        if self._closed:
            raise RuntimeError("GuardedPool is closed")
        return _GuardedFuture(self._inner.submit(fn, *args), fn, args, self)

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            self.failures += 1
        mark_pool_dead(self._inner, f"{type(exc).__name__}: {exc}")

    def close(self, wait: bool = True) -> None:
        self._closed = True

    def __getattr__(self, name: str) -> Any:  # wait_for, task_timeout, recover, ...: the shared pool's
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"GuardedPool({self._inner!r}, failures={self.failures})"


def mark_pool_dead(pool: pr.WorkerPool, why: str) -> None:
    """A PBA operator saw ``pool`` fail (a worker raised or it was closed): close it, so the next key starts a new one."""
    if not pool.closed:
        log.warning("spark_integration: worker pool in pid %d failed (%s); closing it", os.getpid(), why)
        pool.close(wait=False)


def close_worker_pool() -> None:
    """Close this process's pools (registered with ``atexit``); the next :func:`worker_pool` starts afresh."""
    with _lock:
        mine = _pid == os.getpid()
        slots = list(_pools.values())
        _pools.clear()
    for pool, _ in slots:
        if pool is not None and mine:
            pool.close(wait=False)


atexit.register(close_worker_pool)


# --------------------------------------------------------------------------- the keys' host
def pool_source(workers: int = 1, factory: Callable[[int], pr.WorkerPool] | None = None
                ) -> Callable[[], tuple[pr.WorkerPool | None, str | None]]:
    """A :data:`pba_runtime.host.PoolSource` over this process's pool (:func:`worker_pool`).

    Each key that runs PBA gets a :class:`GuardedPool` over a thread pool (its
    failed tasks are redone on the main thread), or a process pool (from a
    ``factory``) as it is: PBA repairs its own tasks there.
    """
    def acquire() -> tuple[pr.WorkerPool | None, str | None]:
        pool, failed = worker_pool(workers, factory)
        if pool is None:
            return None, failed
        return (GuardedPool(pool) if pool.kind == "thread" else pool), None

    return acquire


def key_host(requested: str, window: pr.CountWindow | pr.TimeWindow, agg: Any, *, cores: int | None = None,
             min_slices: int | None = None, pool_workers: int = 1,
             pool_factory: Callable[[int], pr.WorkerPool] | None = None, engine: str = "auto") -> KeyedHost:
    """The :class:`~pba_runtime.host.KeyedHost` of a Spark runner: Spark's threshold, cores and pool source.

    Examples
    --------
    >>> host = key_host("auto", pr.CountWindow(range=1 << 12, slide=1), "max", cores=2)
    >>> host.choose(), host.choose(key_slices=100)
    (('pba', 'large_window'), ('sba', 'small_key'))
    """
    spec = HostSpec(window, agg, requested, min_slices=SPARK_PBA_MIN_SLICES if min_slices is None else min_slices,
                    cores=cores, engine=engine)
    return KeyedHost(spec, pool_source(pool_workers, pool_factory))


class KeyOperator(HostedKey):
    """One key partition's operator, its algorithm and why, and its share of the metrics.

    A :class:`~pba_runtime.host.HostedKey` whose pool, when PBA runs with a
    thread pool, is its :class:`GuardedPool` (``guard``).

    Examples
    --------
    >>> k = KeyOperator.open("auto", pr.CountWindow(range=3, slide=1), "max", cores=2, key_slices=4)
    >>> k.algorithm, k.reason
    ('sba', 'small_window')
    >>> k.op.insert_many([1.0, 5.0, 2.0, 0.0])[1].tolist()
    [5.0, 5.0]
    >>> counts = {}
    >>> k.close(counts, rows=4)
    >>> counts
    {'keys.sba': 1, 'rows.sba': 4, 'reason.small_window': 1, 'windows': 2}
    """

    __slots__ = ()

    @property
    def guard(self) -> GuardedPool | None:
        """The :class:`GuardedPool` this key's PBA runs with, or ``None``."""
        return self.pool if isinstance(self.pool, GuardedPool) else None

    @classmethod
    def of(cls, hosted: HostedKey) -> KeyOperator:
        """The :class:`KeyOperator` of an operator a host opened."""
        return cls(hosted.op, hosted.algorithm, hosted.reason, hosted.pool)

    @classmethod
    def open(cls, requested: str, window: pr.CountWindow | pr.TimeWindow, agg: Any, *,
             cores: int | None = None, key_slices: int | None = None, min_slices: int | None = None,
             pool_workers: int = 1, pool_factory: Callable[[int], pr.WorkerPool] | None = None,
             engine: str = "auto") -> KeyOperator:
        """Choose the algorithm (:func:`choose_algorithm`), get the process's pool if PBA, build the operator."""
        host = key_host(requested, window, agg, cores=cores, min_slices=min_slices, pool_workers=pool_workers,
                        pool_factory=pool_factory, engine=engine)
        return cls.of(host.open(key_slices))

    def close(self, counts: dict[str, int], rows: int) -> None:
        """Close the operator and add its counters (``rows``: the input rows it stood for) to ``counts``."""
        try:
            stats = self.op.stats()
        finally:
            self.op.close()
        failures = int(stats.get("fallbacks", 0) or 0)
        guard = self.guard
        if guard is not None:
            failures += guard.failures
            guard.close()
        if failures:
            counts["pool_failures"] = counts.get("pool_failures", 0) + failures
        for name, n in ((f"keys.{self.algorithm}", 1), (f"rows.{self.algorithm}", rows),
                        (f"reason.{self.reason}", 1), ("windows", int(stats.get("windows", 0)))):
            counts[name] = counts.get(name, 0) + n


# --------------------------------------------------------------------------- metrics
class MetricsParam:
    """Spark ``AccumulatorParam`` over ``dict[str, int]`` counters (added key by key).

    Examples
    --------
    >>> p = MetricsParam()
    >>> p.addInPlace({"keys.sba": 1}, {"keys.sba": 2, "rows.sba": 10})
    {'keys.sba': 3, 'rows.sba': 10}
    """

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, value1: dict[str, int], value2: dict[str, int]) -> dict[str, int]:
        for k, v in value2.items():
            value1[k] = value1.get(k, 0) + v
        return value1


class AlgorithmMetrics:
    """Which algorithm ran, counted by a Spark accumulator (read on the driver after an action).

    Counters: ``keys.<algorithm>`` and ``rows.<algorithm>`` (key partitions and
    input rows per algorithm), ``reason.<reason>`` (key partitions per reason,
    see :data:`REASONS`), ``windows`` (results emitted) and ``pool_failures``
    (pool tasks that failed and were redone on the main thread). A task that Spark runs
    twice (a retry, or two actions on the same uncached result) counts twice.

    Parameters
    ----------
    accumulator : pyspark.Accumulator, optional
        Built with :class:`MetricsParam`; ``None`` keeps the counts locally
        (used without Spark).

    Examples
    --------
    >>> m = AlgorithmMetrics()
    >>> m.add({"keys.sba": 2, "reason.small_window": 2, "rows.sba": 50})
    >>> m.value["keys.sba"], m.algorithms()
    (2, {'sba': 2})
    """

    def __init__(self, accumulator: Any = None):
        self._acc = accumulator
        self._local: dict[str, int] = {}

    def add(self, counts: dict[str, int]) -> None:
        """Add counters (in a worker: goes back to the driver with the task's result)."""
        if not counts:
            return
        if self._acc is not None:
            self._acc.add(dict(counts))
        else:
            MetricsParam().addInPlace(self._local, counts)

    @property
    def value(self) -> dict[str, int]:
        """All counters (on the driver)."""
        return dict(self._acc.value) if self._acc is not None else dict(self._local)

    def algorithms(self) -> dict[str, int]:
        """Key partitions per algorithm, e.g. ``{"pba": 80, "sba": 4}``."""
        return {k.split(".", 1)[1]: v for k, v in sorted(self.value.items()) if k.startswith("keys.")}

    def reasons(self) -> dict[str, int]:
        """Key partitions per reason, e.g. ``{"large_window": 80, "small_key": 4}``."""
        return {k.split(".", 1)[1]: v for k, v in sorted(self.value.items()) if k.startswith("reason.")}

    def __getstate__(self) -> dict[str, Any]:
        return {"_acc": self._acc, "_local": {}}

    def __repr__(self) -> str:
        return f"AlgorithmMetrics({self.value})"


def algorithm_metrics(spark: Any) -> AlgorithmMetrics:
    """A new :class:`AlgorithmMetrics` backed by an accumulator of ``spark``'s SparkContext.

    The counts arrive with the tasks' results: they are empty until an action
    has run the job, and a second action on the same uncached result counts again.

    Examples
    --------
    >>> import pba_runtime as pr, spark_integration as si  # doctest: +SKIP
    >>> from pyspark.sql import SparkSession  # doctest: +SKIP
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
    >>> df = spark.createDataFrame([("a", t, float(t % 7)) for t in range(100)] + [("b", 0, 1.0)],
    ...                            "k string, t long, v double")  # doctest: +SKIP
    >>> metrics = si.algorithm_metrics(spark)  # doctest: +SKIP
    >>> out = si.sliding_window_aggregate(df, key="k", order_by="t", value="v",
    ...                                   window=pr.CountWindow(range=10, slide=1), agg="max", metrics=metrics)  # doctest: +SKIP
    >>> metrics.algorithms()  # nothing ran yet  # doctest: +SKIP
    {}
    >>> len(out.collect())  # doctest: +SKIP
    91
    >>> metrics.algorithms(), metrics.reasons()  # doctest: +SKIP
    ({'sba': 2}, {'small_window': 2})
    >>> metrics.value["rows.sba"], metrics.value["windows"]  # doctest: +SKIP
    (101, 91)
    """
    sc = getattr(spark, "sparkContext", spark)
    return AlgorithmMetrics(sc.accumulator({}, MetricsParam()))


def configure_worker_logging(level: str | int | None) -> None:
    """In a worker: send the ``spark_integration`` logger to stderr (the executor log) at ``level``."""
    if level is None:
        return
    if not any(getattr(h, "_pba_spark", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._pba_spark = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    log.setLevel(level)
