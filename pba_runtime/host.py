"""The keyed host: one window operator per key, as every per-key driver keeps them.

A driver that aggregates a keyed stream (the runtime's task slots, :mod:`pba_runtime.runtime.slot`; the
Spark adapter's runners and its RDD function) gets here, written once: the validation of a job,
``(window, agg, algorithm, options)``, before any key is seen (:func:`validate`); the algorithm choice per
key, with its reason (:func:`~pba_runtime.algorithms.choose_algorithm`, the one policy that
``pr.create(algorithm="auto")`` follows too); the map of per-key operators with the snapshot and restore of
all of them at once (:class:`KeyedHost`); and the pool handed to every key whose algorithm uses one, or a
*pool source* asked at each such key's opening. A host is configured with a :class:`HostSpec`, a frozen,
picklable value a driver can ship to a worker; :meth:`KeyedHost.snapshot` gives its state as a picklable
``{key: state}``.

Examples
--------
>>> import pba_runtime as pr
>>> host = KeyedHost(HostSpec(pr.CountWindow(range=2, slide=1), "sum"))
>>> host.operator("a").insert_many([1.0, 2.0, 3.0])[1].tolist()
[3.0, 5.0]
>>> host.keys["a"].algorithm, host.keys["a"].reason
('sba', 'small_window')
>>> state = host.snapshot()
>>> again = KeyedHost(host.spec, states=state)
>>> again.operator("a").insert_many([4.0])[1].tolist()
[7.0]
>>> host.close(); again.close()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .aggregations import Aggregation, get_aggregation
from .algorithms import (
    ALGORITHMS,
    REGISTRY,
    check_pool,
    choose_algorithm,
    create,
    engine_of,
    engines_of,
    mark_auto,
    uses_pool,
)
from .algorithms.base import WindowOperator
from .algorithms.reorder import check_allowed_lateness
from .kernels import Engine, check_engine, resolve_engine
from .pool import WorkerPool
from .quantiles import as_quantile, monoid_of, refuse_algorithm
from .windows import CountWindow, TimeWindow, validate_window

__all__ = ["HostSpec", "HostedKey", "KeyedHost", "PoolSource", "choose_algorithm", "validate"]

#: A pool source: called when a key's algorithm uses a pool; returns ``(pool, None)``, or
#: ``(None, "pool_unavailable" | "pool_died")`` when there is none (the key then runs SBA).
PoolSource = Callable[[], tuple[WorkerPool | None, str | None]]


#: The operator of order statistics (:mod:`pba_runtime.algorithms.sorted_window`): every key of a quantile's job.
ORDER_STATISTICS = "sorted_window"


def validate(window: CountWindow | TimeWindow, agg: str | Aggregation, algorithm: str = "auto", *,
             allowed_lateness: int | None = None, **options: Any) -> tuple[CountWindow | TimeWindow, Aggregation, str]:
    """Check a job's ``(window, agg, algorithm, options)`` without building an operator.

    Raises what :func:`pba_runtime.create` would raise for any key of the job:
    a bad window or aggregation, an unknown algorithm, an aggregation that
    lacks a capability the algorithm requires (for ``"auto"``: of either
    algorithm it may choose), a bad ``allowed_lateness``, a ``pool`` that is not
    a :class:`~pba_runtime.WorkerPool`, or an option the algorithm does not take.

    Returns
    -------
    tuple
        ``(window, aggregation, algorithm)``, validated (the aggregation resolved).

    Examples
    --------
    >>> import pba_runtime as pr
    >>> validate(pr.CountWindow(range=4, slide=2), "max")[1].name
    'max'
    >>> validate(pr.CountWindow(range=4, slide=2), "max", "soe")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: algorithm 'soe' needs an invertible aggregation (...); aggregation 'max' is not invertible
    """
    window = validate_window(window)
    if (q := as_quantile(agg)) is not None and (agg := monoid_of(algorithm, q)) is None:
        # an order statistic (or a sketch by "auto"): the sorted-window operator, for every key
        if algorithm not in ("auto", "sorted_window"):
            refuse_algorithm(algorithm, q)
        if allowed_lateness is not None:
            check_allowed_lateness(allowed_lateness, window)
        return window, q, ORDER_STATISTICS
    aggregation = get_aggregation(agg)
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name (str), got {type(algorithm).__name__}")
    if algorithm != "auto" and algorithm not in REGISTRY:
        raise ValueError(f"unknown algorithm {algorithm!r}; accepted: {', '.join(ALGORITHMS)}, or 'auto'")
    classes = [REGISTRY["sba"], REGISTRY["pba"]] if algorithm == "auto" else [REGISTRY[algorithm]]
    for cls in classes:
        for attr, why in cls.requires:
            if not getattr(aggregation, attr):
                raise ValueError(f"algorithm {cls.name!r} needs {why}; aggregation {aggregation.name!r} is not {attr}")
    if allowed_lateness is not None:
        check_allowed_lateness(allowed_lateness, window)
    check_pool(options.pop("pool", None))
    engine = check_engine(options.pop("engine", "auto"))
    if engine != "auto":
        for cls in classes:
            if engine not in engines_of(cls.name):
                raise ValueError(f"engine={engine!r} is not available for algorithm {cls.name!r}: it runs "
                                 f"{', '.join(map(repr, engines_of(cls.name)))} (or 'auto')")
            engine_of(cls.name, window, aggregation, engine, allowed_lateness)  # raises where create would
        resolve_engine(aggregation, engine)  # raises if the aggregation has no such form
    for name in options:
        if not all(_takes(cls, name) for cls in classes):
            raise TypeError(f"algorithm {algorithm!r} takes no option {name!r}")
    return window, aggregation, algorithm


def _takes(cls: type, name: str) -> bool:
    import inspect

    params = inspect.signature(cls.__init__).parameters
    return name in params and name not in ("self", "window", "agg")


@dataclass(frozen=True)
class HostSpec:
    """What a :class:`KeyedHost` builds its operators from (frozen and picklable).

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
        A name, or a (picklable, to ship it) :class:`~pba_runtime.Aggregation`.
    algorithm : str
        ``"auto"`` or a name in ``pba_runtime.ALGORITHMS``.
    allowed_lateness : int, optional
        Time windows: each key's operator reorders tuples up to this far behind.
    min_slices : int, optional
        ``"auto"`` runs PBA from this many slices per window up (default: the
        core's threshold for the aggregation, see :func:`choose_algorithm`).
    cores : int, optional
        Cores one task may use (below 2, ``"auto"`` runs SBA); ``None``: unknown.
    engine : str
        ``"auto"``, ``"compiled"``, ``"numpy"`` or ``"python"``: what runs each key's batch
        merge (:mod:`pba_runtime.kernels`).
    """

    window: Any
    agg: Any
    algorithm: str = "auto"
    allowed_lateness: int | None = None
    min_slices: int | None = None
    cores: int | None = None
    engine: str = "auto"

    def engine_name(self) -> str:
        """The engine this spec's operators run when ``"auto"`` picks the algorithm without a key's sizes."""
        return KeyedHost(self).engine().name

    def validate(self) -> tuple[CountWindow | TimeWindow, Aggregation, str]:
        """:func:`validate` of this spec."""
        return validate(self.window, self.agg, self.algorithm, allowed_lateness=self.allowed_lateness,
                        engine=self.engine)


class HostedKey:
    """One key's operator, the algorithm it runs and why, and the pool it was given (or ``None``)."""

    __slots__ = ("algorithm", "op", "pool", "reason")

    def __init__(self, op: WindowOperator, algorithm: str, reason: str, pool: WorkerPool | None = None):
        self.op, self.algorithm, self.reason, self.pool = op, algorithm, reason, pool

    def __repr__(self) -> str:
        return f"HostedKey({self.algorithm}, {self.reason})"


class KeyedHost:
    """A map of per-key operators built from one :class:`HostSpec`, with its pool.

    Parameters
    ----------
    spec : HostSpec
        Validated here, once.
    pool : WorkerPool or callable, optional
        Given to every key whose algorithm uses a pool; or a :data:`PoolSource`
        asked at each such key's opening. ``None``: PBA uses the default pool.
        The host does not close it.
    states : dict, optional
        ``{key: state}`` from :meth:`snapshot`, restored at once.
    """

    def __init__(self, spec: HostSpec, pool: WorkerPool | PoolSource | None = None,
                 states: dict[Any, Any] | None = None):
        self.spec = spec
        self.window, self.agg, self.algorithm = spec.validate()
        self.pool = pool if callable(pool) and not isinstance(pool, WorkerPool) else check_pool(pool)
        self.keys: dict[Any, HostedKey] = {}
        if states:
            self.restore(states)

    def engine(self, algorithm: str | None = None) -> Engine:
        """The engine the keys' operators run (``algorithm``: the one chosen for a key; default: what
        ``"auto"`` picks without a key's sizes): :func:`pba_runtime.algorithms.engine_of`."""
        alg = algorithm or self.choose()[0]
        if alg == ORDER_STATISTICS:
            return Engine("compiled")
        return engine_of(alg, self.window, self.agg, self.spec.engine, self.spec.allowed_lateness)

    # ------------------------------------------------------------------ the algorithm and the pool
    def choose(self, key_slices: int | None = None, *, pool_ok: bool = True,
               pool_died: bool = False) -> tuple[str, str]:
        """``(algorithm, reason)`` for a key (:func:`choose_algorithm` with this host's spec)."""
        spec = self.spec
        if self.algorithm == ORDER_STATISTICS:
            return ORDER_STATISTICS, "order_statistic"
        return choose_algorithm(self.algorithm, self.window, self.agg, min_slices=spec.min_slices,
                                cores=spec.cores, key_slices=key_slices, pool_ok=pool_ok, pool_died=pool_died)

    def _pool_for(self, algorithm: str) -> tuple[WorkerPool | None, str | None]:
        if not uses_pool(REGISTRY.get(algorithm)) or self.pool is None:
            return None, None
        if isinstance(self.pool, WorkerPool):
            return self.pool, None
        return self.pool()

    def open(self, key_slices: int | None = None) -> HostedKey:
        """A new operator (not registered under a key): choose its algorithm, get its pool, build it.

        Parameters
        ----------
        key_slices : int, optional
            Slices per ``insert_many`` piece of the key, when known (``"auto"``
            runs SBA for pieces PBA's batch path would not split).
        """
        return self._build(*self.choose(key_slices), key_slices)

    def _build(self, alg: str, why: str, key_slices: int | None = None) -> HostedKey:
        pool, failed = self._pool_for(alg)
        if failed is not None:
            alg, why = self.choose(key_slices, pool_ok=False, pool_died=failed == "pool_died")
            pool = None
        options: dict[str, Any] = {"engine": self.spec.engine}
        if pool is not None:
            options["pool"] = pool
        if self.spec.allowed_lateness is not None:
            options["allowed_lateness"] = self.spec.allowed_lateness
        op = create(alg, self.window, self.agg, **options)
        if self.algorithm == "auto":
            mark_auto(op, alg, why, key_slices)
        return HostedKey(op, alg, why, pool)

    # ------------------------------------------------------------------ the keys
    def operator(self, key: Any) -> WindowOperator:
        """``key``'s operator, opened at its first use."""
        hosted = self.keys.get(key)
        if hosted is None:
            hosted = self.keys[key] = self.open()
        return hosted.op

    def add(self, key: Any, hosted: HostedKey) -> None:
        """Register an operator opened with :meth:`open` under ``key``."""
        self.keys[key] = hosted

    def pop(self, key: Any) -> HostedKey:
        """Unregister ``key`` and return its entry (its operator still open)."""
        return self.keys.pop(key)

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys)

    def items(self) -> Iterator[tuple[Any, WindowOperator]]:
        """``(key, operator)`` of every key."""
        return ((k, h.op) for k, h in self.keys.items())

    # ------------------------------------------------------------------ state
    def snapshot(self) -> dict[Any, Any]:
        """``{key: op.snapshot()}`` of every key (picklable; may share objects with the live operators)."""
        return {k: h.op.snapshot() for k, h in self.keys.items()}

    def restore(self, states: dict[Any, Any]) -> None:
        """Open an operator for each key of ``states`` (from :meth:`snapshot`) and load its state.

        Under ``"auto"`` a key resumes with the algorithm its state was taken
        with (reason ``"restored"`` when the policy would now choose another),
        so a checkpoint outlives a change of the policy.
        """
        for key, state in states.items():
            alg, why = self.choose()
            taken = state.get("algorithm") if isinstance(state, dict) else None
            if self.algorithm == "auto" and taken in ("sba", "pba") and taken != alg:
                alg, why = taken, "restored"
            hosted = self._build(alg, why)
            hosted.op.restore(state)
            self.keys[key] = hosted

    def close(self) -> None:
        """Close every key's operator (not the pool) and forget the keys."""
        keys, self.keys = self.keys, {}
        for hosted in keys.values():
            hosted.op.close()
