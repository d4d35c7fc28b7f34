"""Algorithm registry: every sliding-window algorithm behind one interface.

Each module holds one algorithm, a subclass of
:class:`~pba_runtime.algorithms.base.WindowOperator`. ``create(name, ...)``
builds one; ``ALGORITHMS`` lists the registered names.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ..aggregations import Aggregation, check_min_periods, get_aggregation, skip_missing
from ..batch import splits_rows
from ..kernels import Engine, check_engine, resolve_engine
from ..missing import check_missing
from ..pool import WorkerPool, default_pool_free
from ..windows import CountWindow, TimeWindow, validate_window
from .base import WindowOperator
from .compiled_step import COMPILED_STEP, compiled_step_for
from .daba import DABA
from .fiba import FiBA
from .flatfat import FlatFATAggregator
from .pba import PBA, SBA
from .recal import Recal
from .slick_deque import SlickDeque
from .soe import SubtractOnEvict
from .two_stacks import TwoStacks

__all__ = ["ALGORITHMS", "REGISTRY", "REASONS", "register", "create", "resolve_auto", "choose_algorithm",
           "choose_batch_algorithm", "why_text", "mark_auto", "uses_pool", "check_pool", "engines_of", "engine_of",
           "AUTO_PBA_MIN_SLICES", "AUTO_PBA_MIN_SLICES_PYTHON", "AUTO_BATCH_SPLIT_MIN"]

REGISTRY: dict[str, type[WindowOperator]] = {}


def register(cls: type[WindowOperator]) -> type[WindowOperator]:
    """Class decorator: make ``cls`` reachable as ``create(cls.name, ...)``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    REGISTRY[cls.name] = cls
    ALGORITHMS[:] = sorted(REGISTRY)
    return cls


ALGORITHMS: list[str] = []
for _cls in (Recal, SBA, PBA, SubtractOnEvict, TwoStacks, DABA, SlickDeque, FlatFATAggregator, FiBA):
    register(_cls)

# "auto" picks PBA from this many slices per window up (q = range // slide), SBA below. SBA builds each
# chunk's lcs on the main loop, so its boundary pause grows with the window, while PBA's tail stays at the
# hand-off to a worker thread; below this size PBA's thread only adds contention, and the per-tuple
# throughput of the two is about the same (bench/bench_core.py --auto shows it; docs/measurements.md).
AUTO_PBA_MIN_SLICES = 1 << 15
# A Python-callable aggregation builds its lcs in a Python loop, far slower a slice than numpy's, so SBA's
# boundary pause grows long at smaller windows: PBA pays off earlier.
AUTO_PBA_MIN_SLICES_PYTHON = 1 << 12
# The batch path (pr.sliding_aggregate, an "auto" operator's first insert_many) runs PBA, whose compiled merge
# splits the batch's windows between the main thread and the pool's worker, from this many windows in the
# batch, whatever the range. Below it the worker's wake-up and the fresh pages cost more than half of what the
# split saves (for mean, argmax and geomean the longest); from it the split loses nowhere and wins for most
# built-ins. bench/bench_auto.py checks the default against both at 4M and 10M values.
AUTO_BATCH_SPLIT_MIN = 1 << 19


#: Why :func:`choose_algorithm` chose: ``requested`` (an explicit name, honoured),
#: ``large_window`` (PBA), ``small_window``, ``one_core``, ``small_key``,
#: ``pool_unavailable``, ``pool_died`` (SBA for ``"auto"``, or instead of a
#: requested algorithm that needs a pool it cannot have). :func:`choose_batch_algorithm`
#: adds ``batch_split`` (PBA), ``small_batch``, ``busy_pool`` and ``one_thread_batch`` (SBA).
REASONS = ("requested", "large_window", "small_window", "one_core", "small_key", "pool_unavailable", "pool_died",
           "batch_split", "small_batch", "busy_pool", "one_thread_batch")


def engines_of(algorithm: str) -> tuple[str, ...]:
    """The engines ``algorithm``'s ``engine=`` option accepts besides ``"auto"``.

    DABA, FlatFAT and SoE accept ``"compiled"``: their per-tuple step in machine code
    (:mod:`.compiled_step`); ``"python"`` is their Python operator.

    >>> engines_of("daba"), engines_of("two_stacks")
    (('compiled', 'python'), ('python',))
    """
    step = COMPILED_STEP.get(algorithm)
    return step.engines if step is not None else REGISTRY[algorithm].engines


def engine_of(algorithm: str, window: CountWindow | TimeWindow, agg: str | Aggregation, engine: str = "auto",
              allowed_lateness: int | None = None) -> Engine:
    """The engine ``create(algorithm, window, agg, engine=engine)`` runs (what its ``stats()["engine"]`` says).

    >>> import pba_runtime as pr
    >>> w = pr.CountWindow(range=4, slide=1)
    >>> [engine_of(a, w, "sum").name for a in ("pba", "daba", "two_stacks")]
    ['compiled', 'compiled', 'python']
    >>> engine_of("daba", w, "collect").name, engine_of("daba", w, "sum", "python").name
    ('python', 'python')
    """
    aggregation = get_aggregation(agg)
    if algorithm in COMPILED_STEP:
        step = compiled_step_for(algorithm, validate_window(window), aggregation, engine, allowed_lateness)
        return Engine("compiled") if step is not None else Engine("python")
    if REGISTRY[algorithm].engines == ("python",):
        return Engine("python")
    return resolve_engine(aggregation, engine)


def uses_pool(cls: type | None) -> bool:
    """Whether the algorithm class builds in a :class:`~pba_runtime.WorkerPool` (its ``pool=`` option).

    An algorithm declares it with the class attribute ``parallel = True`` (PBA;
    SBA, PBA's one-thread form, sets it ``False``). Every other algorithm takes
    no pool: :func:`create` does not pass one to it.

    >>> uses_pool(REGISTRY["pba"]), uses_pool(REGISTRY["sba"]), uses_pool(REGISTRY["two_stacks"])
    (True, False, False)
    """
    return bool(getattr(cls, "parallel", False))


def check_pool(pool: Any) -> WorkerPool | None:
    """``pool`` if it is a :class:`~pba_runtime.WorkerPool` or ``None``; a TypeError naming ``pool`` otherwise."""
    if pool is not None and not isinstance(pool, WorkerPool):
        raise TypeError(f"pool must be a pba_runtime.WorkerPool or None, got {type(pool).__name__}")
    return pool


def choose_algorithm(requested: str, window: CountWindow | TimeWindow, agg: str | Aggregation | None = None, *,
                     min_slices: int | None = None, cores: int | None = None, key_slices: int | None = None,
                     pool_ok: bool = True, pool_died: bool = False) -> tuple[str, str]:
    """The per-tuple (and per-key) algorithm-choice policy: ``(algorithm, reason)`` for one key (a reason in
    :data:`REASONS`); a batch into a fresh stream has its own, :func:`choose_batch_algorithm`.

    An explicit name is honoured (``requested``), unless it needs a pool that
    cannot be had (``pool_ok=False``): then SBA, PBA's one-thread form, runs
    (``pool_unavailable`` or ``pool_died``). ``"auto"`` runs SBA when the window
    has fewer than ``min_slices`` slices (``small_window``), a task has fewer than
    two cores (``one_core``), the key is fed in pieces too short for PBA's batch
    path to split (``small_key``, :func:`pba_runtime.batch.splits_rows`) or there
    is no pool, and PBA otherwise (``large_window``).

    Parameters
    ----------
    requested : str
        ``"auto"`` or an algorithm name.
    window : CountWindow or TimeWindow
    agg : str or Aggregation, optional
        With ``min_slices=None``, the threshold is :data:`AUTO_PBA_MIN_SLICES`, or
        :data:`AUTO_PBA_MIN_SLICES_PYTHON` for an aggregation without a numpy kernel.
    min_slices : int, optional
        Slices per window (``range // slide``) from which ``"auto"`` runs PBA.
    cores : int, optional
        Cores one task may use (``None``: unknown, no reason to fall back).
    key_slices : int, optional
        Slices per ``insert_many`` piece of the key, when known.
    pool_ok, pool_died : bool
        Whether a pool can be had, and, when not, whether one died.

    Examples
    --------
    >>> import pba_runtime as pr
    >>> choose_algorithm("auto", pr.CountWindow(range=1 << 16, slide=1), "max")
    ('pba', 'large_window')
    >>> choose_algorithm("auto", pr.CountWindow(range=8192, slide=1), "max", min_slices=1024, cores=1)
    ('sba', 'one_core')
    >>> choose_algorithm("pba", pr.CountWindow(range=8192, slide=1), pool_ok=False)
    ('sba', 'pool_unavailable')
    """
    pool_reason = "pool_died" if pool_died else "pool_unavailable"
    if requested != "auto":
        if not pool_ok and uses_pool(REGISTRY.get(requested)):
            return "sba", pool_reason
        return requested, "requested"
    window = validate_window(window)
    if min_slices is None:
        python_loop = agg is not None and get_aggregation(agg).kernel is None
        min_slices = AUTO_PBA_MIN_SLICES_PYTHON if python_loop else AUTO_PBA_MIN_SLICES
    q = window.range // window.slide
    if q < min_slices:
        return "sba", "small_window"
    if cores is not None and cores < 2:
        return "sba", "one_core"
    if key_slices is not None and not splits_rows(q, key_slices):
        return "sba", "small_key"
    if not pool_ok:
        return "sba", pool_reason
    return "pba", "large_window"


def _cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _batch_windows(window: CountWindow | TimeWindow, n_values: int) -> int:
    """Windows a batch of ``n_values`` values of a fresh stream completes (count windows), or ``n_values``
    (time windows: the values decide how many there are)."""
    if isinstance(window, TimeWindow):
        return n_values
    return max(0, (n_values - window.range) // window.slide + 1)


def choose_batch_algorithm(window: CountWindow | TimeWindow, agg: str | Aggregation, n_values: int, *,
                           engine: str = "auto", pool: WorkerPool | None = None,
                           cores: int | None = None) -> tuple[str, str]:
    """``(algorithm, reason)`` ``"auto"`` runs for one batch of ``n_values`` values into a fresh stream.

    The batch policy of :func:`pba_runtime.sliding_aggregate` and of an ``"auto"``
    operator's first ``insert_many``; the per-tuple policy (:func:`choose_algorithm`)
    stays for operators fed tuple by tuple. In a batch, PBA and SBA run the same
    vectorised merge, and PBA's splits its windows between the main thread and the
    pool's worker. So ``"auto"`` runs PBA (``batch_split``) when the batch completes
    :data:`AUTO_BATCH_SPLIT_MIN` windows and up (values, for time windows) and the
    pool has a free worker, and SBA otherwise: ``small_batch`` (the split would cost
    more than it saves), ``busy_pool`` (the worker runs another task), ``one_core``
    (this process may run on one CPU) or ``one_thread_batch`` (``count``'s fill with
    slide 1 runs on one thread whatever the pool). An aggregation without a kernel
    takes the batch path tuple by tuple: the per-tuple policy decides.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
    n_values : int
        Values in the batch.
    engine : str
        The ``engine=`` option (:mod:`pba_runtime.kernels`).
    pool : WorkerPool, optional
        The pool PBA would use (``None``: the default thread pool).
    cores : int, optional
        CPUs this process may use (default: its affinity).

    Examples
    --------
    >>> import pba_runtime as pr
    >>> w = pr.CountWindow(range=1024, slide=1)
    >>> choose_batch_algorithm(w, "max", 4_000_000, cores=2)
    ('pba', 'batch_split')
    >>> choose_batch_algorithm(w, "max", 100_000, cores=2), choose_batch_algorithm(w, "max", 4_000_000, cores=1)
    (('sba', 'small_batch'), ('sba', 'one_core'))
    >>> choose_batch_algorithm(w, "count", 4_000_000, cores=2)
    ('sba', 'one_thread_batch')
    """
    window = validate_window(window)
    aggregation = get_aggregation(agg)
    return _batch_choice(window, aggregation, n_values, resolve_engine(aggregation, check_engine(engine)), pool, cores)


def _batch_choice(window: CountWindow | TimeWindow, aggregation: Aggregation, n_values: int, resolved: Engine,
                  pool: WorkerPool | None, cores: int | None = None) -> tuple[str, str]:
    """:func:`choose_batch_algorithm` of a validated window and aggregation and the engine resolved."""
    if resolved.kernel is None and aggregation.kernel is None or resolved.name == "python":
        return choose_algorithm("auto", window, aggregation)
    count_window = isinstance(window, CountWindow)
    if count_window and window.slide == 1 and resolved.from_values == "count_from_values":
        return "sba", "one_thread_batch"
    if resolved.compiled or not count_window:
        large = _batch_windows(window, n_values) >= AUTO_BATCH_SPLIT_MIN
    else:  # the numpy merge splits by its own rule
        large = splits_rows(window.range // window.slide, n_values // window.slide,
                            "thread" if pool is None else pool.kind)
    if not large:
        return "sba", "small_batch"
    if (cores if cores is not None else _cores()) < 2:
        return "sba", "one_core"
    if not (pool.free_worker() if pool is not None else default_pool_free()):
        return "sba", "busy_pool"
    return "pba", "batch_split"


def why_text(algorithm: str, reason: str, window: CountWindow | TimeWindow, n_values: int | None = None, *,
             least: int = AUTO_PBA_MIN_SLICES) -> str:
    """A sentence for ``stats()["why"]``: why ``"auto"`` ran ``algorithm`` (``reason`` in :data:`REASONS`;
    ``least``: the per-tuple policy's threshold in slices).

    >>> import pba_runtime as pr
    >>> why_text("pba", "batch_split", pr.CountWindow(range=1024, slide=1), 4_000_000)
    'batch of 4,000,000 values with a free worker: split'
    >>> why_text("sba", "small_window", pr.CountWindow(range=1024, slide=1))
    'window of 1,024 slices, PBA from 32,768: SBA'
    """
    window = validate_window(window)
    q = window.range // window.slide
    batch = f"batch of {n_values:,} values" if n_values is not None else "batch"
    texts = {
        "batch_split": f"{batch} with a free worker: split",
        "small_batch": f"{batch}, PBA splits from {AUTO_BATCH_SPLIT_MIN:,} windows: one thread",
        "busy_pool": f"{batch}, the pool's worker is busy: one thread",
        "one_core": "one CPU for this process: one thread",
        "one_thread_batch": f"{batch} of count windows with slide 1: a fill on one thread",
        "small_window": f"window of {q:,} slices, PBA from {least:,}: SBA",
        "large_window": f"window of {q:,} slices, PBA from {least:,}: PBA",
        "small_key": f"pieces of {n_values or 0:,} slices, too short for PBA's batch merge to split: SBA",
        "pool_unavailable": "no worker pool: SBA",
        "pool_died": "the worker pool died: SBA",
        "restored": f"restored from a checkpoint taken with {algorithm.upper()}",
    }
    return texts.get(reason, f"{reason.replace('_', ' ')}: {algorithm.upper()}")


def resolve_auto(window: CountWindow | TimeWindow, agg: str | Aggregation | None = None) -> str:
    """The algorithm ``"auto"`` stands for per tuple: SBA for small windows, PBA for large ones
    (:func:`choose_algorithm`); a batch has its own policy, :func:`choose_batch_algorithm`.

    >>> import pba_runtime as pr
    >>> pr.resolve_auto(pr.CountWindow(range=1024, slide=1)), pr.resolve_auto(pr.CountWindow(range=1 << 16, slide=1))
    ('sba', 'pba')
    """
    return choose_algorithm("auto", window, agg)[0]


def create(algorithm: str, window: CountWindow | TimeWindow, agg: str | Aggregation, *,
           allowed_lateness: int | None = None, missing: str = "propagate", min_periods: int = 1,
           **options: Any) -> WindowOperator:
    """Build the operator ``algorithm`` (a name in ``ALGORITHMS`` or ``"auto"``) for ``window`` and ``agg``.

    ``missing="skip"`` skips missing values: nulls (``None``, pandas' ``<NA>``, a masked entry, an
    Arrow or polars null) and NaN are not values, each window's result is ``agg`` over its other
    values, and null (NaN; ``None`` for ``collect``) where fewer than ``min_periods`` (an int ``>= 0``,
    default 1) remain; results are then float64, ``count``, ``argmax`` and ``argmin`` included
    (:func:`pba_runtime.aggregations.skip_missing`, ``docs/semantics.md``). ``missing="propagate"``
    (the default) gives numpy's result, NaN a value and nulls refused; ``min_periods`` is then unused.

    ``allowed_lateness=L`` (time windows only, integer ``L >= 0``) accepts tuples up
    to ``L`` time units behind the largest timestamp seen: ``fiba`` places them
    itself, every other algorithm gets a bounded reorder buffer in front
    (:class:`pba_runtime.algorithms.reorder.ReorderBuffer`). Later tuples are counted in
    ``stats()["late"]`` and returned by ``take_late()``.

    ``engine=`` (``"auto"``, ``"compiled"``, ``"numpy"`` or ``"python"``, see
    :mod:`pba_runtime.kernels`) picks what runs the batch path, once; an algorithm
    runs only the engines in its ``engines`` (``stats()["engine"]`` tells). For ``daba``,
    ``flatfat`` and ``soe`` it picks the per-tuple step: ``"auto"`` and ``"compiled"`` step
    ``insert`` in machine code where that gives the Python operator's bits
    (:mod:`.compiled_step`, ``stats()["step"]``), ``"python"`` runs the Python operator.

    ``pool=`` (a :class:`~pba_runtime.WorkerPool` or ``None``) is an option of
    every algorithm here, typed once: it goes to an algorithm that uses one
    (:func:`uses_pool`, PBA) and is not passed to the others, which take none.

    Examples
    --------
    >>> import pba_runtime as pr
    >>> op = pr.create("pba", pr.CountWindow(range=3, slide=1), "sum")
    >>> op.insert_many([1, 2, 3, 4])[1].tolist()
    [6.0, 9.0]
    >>> op.close()
    >>> late = pr.create("sba", pr.TimeWindow(range=10, slide=5), "max", allowed_lateness=3)
    >>> late.insert(1.0, 4), late.insert(2.0, 9), late.insert(5.0, 7), late.insert(0.0, 20)
    ([], [], [], [(5, 1.0)])
    >>> late.insert(3.0, 6), late.take_late()  # 6 < watermark 20 - 3
    ([], [(3.0, 6)])
    >>> late.flush()[1].tolist()
    [5.0, 5.0, 0.0, 0.0]
    >>> skip = pr.create("sba", pr.CountWindow(range=3, slide=1), "sum", missing="skip", min_periods=2)
    >>> skip.insert_many([1.0, float("nan"), None, 4.0, 5.0])[1].tolist()
    [nan, nan, 9.0]
    """
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name (str), got {type(algorithm).__name__}")
    from ..quantiles import as_quantile, monoid_of

    if (q := as_quantile(agg)) is not None:
        if (monoid := monoid_of(algorithm, q)) is None:  # an order statistic: no algorithm of partials carries it
            return _sorted_window(algorithm, window, q, allowed_lateness, missing, min_periods, options)
        agg = monoid  # a quantile sketch, by the algorithm named: its monoid, skipping as the sketch says
        if q.missing == "skip":
            missing = "propagate"  # skip_missing is in the monoid already (QuantileSketch.skipping)
    min_periods = check_min_periods(min_periods)
    if check_missing(missing) == "skip":
        agg = skip_missing(agg, min_periods)
    auto = algorithm == "auto"
    if auto:
        algorithm, reason = choose_algorithm("auto", window, agg)
    try:
        cls = REGISTRY[algorithm]
    except KeyError:
        raise ValueError(f"unknown algorithm {algorithm!r}; accepted: {', '.join(ALGORITHMS)}, or 'auto'") from None
    pool = check_pool(options.pop("pool", None))
    if pool is not None and uses_pool(cls):
        options["pool"] = pool
    engine = check_engine(options.pop("engine", "auto"))
    engines = engines_of(algorithm)
    if engine != "auto" and engine not in engines:
        raise ValueError(f"engine={engine!r} is not available for algorithm {algorithm!r}: it runs "
                         f"{', '.join(map(repr, engines))} (or 'auto')")
    lateness = None
    if allowed_lateness is not None:
        from .reorder import ReorderBuffer, check_allowed_lateness

        lateness = check_allowed_lateness(allowed_lateness, window)
    if algorithm in COMPILED_STEP:  # the per-tuple step in machine code, where it runs (compiled_step.py)
        step = compiled_step_for(algorithm, validate_window(window), get_aggregation(agg), engine, lateness)
        if step is not None:
            return step(window, agg, **options)
    if cls.engines != ("python",):
        options["engine"] = engine
    if lateness is not None and getattr(cls, "native_lateness", False):
        return cls(window, agg, allowed_lateness=lateness, **options)
    op = cls(window, agg, **options)
    if auto:  # SBA or PBA: say why; the first batch into a fresh stream decides again
        mark_auto(op, algorithm, reason)
        op._auto_batch = functools.partial(_decide_batch, op.window, op.agg, op.engine, pool)  # no cycle to op
    return op if lateness is None else ReorderBuffer(op, lateness)


def _sorted_window(algorithm: str, window: Any, q: Any, allowed_lateness: Any, missing: str, min_periods: int,
                   options: dict[str, Any]) -> Any:
    """The operator of an order statistic (:class:`.sorted_window.SortedWindow`), for ``"auto"`` or its name."""
    from ..quantiles import refuse_algorithm
    from .sorted_window import SortedWindow

    if algorithm != SortedWindow.name:
        refuse_algorithm(algorithm, q)
    pool = check_pool(options.pop("pool", None))
    engine = check_engine(options.pop("engine", "auto"))
    if engine not in ("auto", "compiled"):
        raise ValueError(f"engine={engine!r} is not available for agg {q.name!r}: its kernel is compiled ('auto')")
    if options:
        raise TypeError(f"create() got options agg {q.name!r} does not take: {sorted(options)}")
    if q.missing == "skip" and missing == "propagate":  # a quantile that skips (Quantile.skipping) keeps its policy
        missing, min_periods = q.missing, q.min_periods
    return SortedWindow(window, q, missing=check_missing(missing), min_periods=min_periods,
                        allowed_lateness=allowed_lateness, pool=pool)


def mark_auto(op: WindowOperator, algorithm: str, reason: str, n_values: int | None = None) -> None:
    """Record on ``op`` (SBA or PBA, or a reorder buffer around one) that ``"auto"`` chose it and why:
    its ``stats()`` then say ``chosen_by="auto"`` and ``why`` (:func:`why_text`, formatted when asked)."""
    inner = getattr(op, "_inner", op)
    if not isinstance(inner, PBA):
        return
    inner.chosen_by = "auto"
    inner._why = functools.partial(why_text, algorithm, reason, inner.window, n_values, least=_least_slices(inner.agg))


def _least_slices(agg: Aggregation) -> int:
    """Slices per window from which the per-tuple policy runs PBA for ``agg``."""
    return AUTO_PBA_MIN_SLICES_PYTHON if agg.kernel is None else AUTO_PBA_MIN_SLICES


def _decide_batch(window: CountWindow | TimeWindow, agg: Aggregation, engine: Engine, pool: WorkerPool | None,
                  n_values: int) -> tuple[str, Any, WorkerPool | None]:
    """An ``"auto"`` operator's batch decision: ``(algorithm, why, pool)`` (``PBA._decide_batch`` asks it;
    ``why`` a partial of :func:`why_text`, formatted when ``stats()`` asks)."""
    algorithm, reason = _batch_choice(window, agg, n_values, engine, pool)
    return algorithm, functools.partial(why_text, algorithm, reason, window, n_values, least=_least_slices(agg)), pool
