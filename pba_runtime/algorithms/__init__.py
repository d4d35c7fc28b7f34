"""Algorithm registry: every sliding-window algorithm behind one interface.

Each module holds one algorithm, a subclass of
:class:`~pba_runtime.algorithms.base.WindowOperator`. ``create(name, ...)``
builds one; ``ALGORITHMS`` lists the registered names.
"""

from __future__ import annotations

from typing import Any

from ..aggregations import Aggregation, get_aggregation
from ..windows import CountWindow, TimeWindow, validate_window
from .base import SlicedAggregator, WindowOperator
from .daba import DABA
from .fiba import FiBA
from .flatfat import FlatFATAggregator
from .pba import PBA, SBA
from .recal import Recal
from .slick_deque import SlickDeque
from .soe import SubtractOnEvict
from .two_stacks import TwoStacks

__all__ = ["ALGORITHMS", "REGISTRY", "register", "create", "resolve_auto", "AUTO_PBA_MIN_SLICES",
           "AUTO_PBA_MIN_SLICES_PYTHON"]

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

# "auto" picks PBA from this many slices per window up (q = range // slide), SBA below.
# Measured on the 2-core project machine (bench/bench_core.py --auto, per-tuple max):
# SBA builds a chunk's lcs with numpy at ~4.4 ns a slice, so its boundary pause grows
# with the window (0.15 ms at 2^15, 0.29 ms at 2^16), while PBA's tail stays at the
# hand-off to a worker thread (0.1-0.35 ms with the GIL). Below 2^15 PBA only adds
# contention (p99.99 55-75 us against SBA's 18-32 us); throughput is within 2%.
AUTO_PBA_MIN_SLICES = 1 << 15
# A Python-callable aggregation builds its lcs in a Python loop (100-300 ns a slice),
# so SBA's boundary pause reaches a millisecond from ~2^12 slices: PBA pays off earlier.
AUTO_PBA_MIN_SLICES_PYTHON = 1 << 12


def resolve_auto(window: CountWindow | TimeWindow, agg: str | Aggregation | None = None) -> str:
    """The algorithm ``"auto"`` stands for: SBA for small windows, PBA for large ones.

    >>> import pba_runtime as pr
    >>> pr.resolve_auto(pr.CountWindow(range=1024, slide=1)), pr.resolve_auto(pr.CountWindow(range=1 << 16, slide=1))
    ('sba', 'pba')
    """
    window = validate_window(window)
    python_loop = agg is not None and get_aggregation(agg).kernel is None
    threshold = AUTO_PBA_MIN_SLICES_PYTHON if python_loop else AUTO_PBA_MIN_SLICES
    return "pba" if window.range // window.slide >= threshold else "sba"


def create(algorithm: str, window: CountWindow | TimeWindow, agg: str | Aggregation, *,
           allowed_lateness: int | None = None, **options: Any) -> WindowOperator:
    """Build the operator ``algorithm`` (a name in ``ALGORITHMS`` or ``"auto"``) for ``window`` and ``agg``.

    ``allowed_lateness=L`` (time windows only, integer ``L >= 0``) accepts tuples up
    to ``L`` time units behind the largest timestamp seen: ``fiba`` places them
    itself, every other algorithm gets a bounded reorder buffer in front
    (:class:`pba_runtime.algorithms.reorder.ReorderBuffer`). Later tuples are counted in
    ``stats()["late"]`` and returned by ``take_late()``.

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
    """
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name (str), got {type(algorithm).__name__}")
    if algorithm == "auto":
        algorithm = resolve_auto(window, agg)
    try:
        cls = REGISTRY[algorithm]
    except KeyError:
        raise ValueError(f"unknown algorithm {algorithm!r}; accepted: {', '.join(ALGORITHMS)}, or 'auto'") from None
    if allowed_lateness is not None:
        from .reorder import ReorderBuffer, check_allowed_lateness

        lateness = check_allowed_lateness(allowed_lateness, window)
        if getattr(cls, "native_lateness", False):
            return cls(window, agg, allowed_lateness=lateness, **options)
        return ReorderBuffer(cls(window, agg, **options), lateness)
    return cls(window, agg, **options)
