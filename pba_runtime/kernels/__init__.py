"""Execution engines: which code runs an operator's arithmetic, chosen once per operator.

- ``"compiled"``: the window merge of a batch in machine code (:mod:`.compiled`, numba, GIL
  released, so a pool's thread works beside the main thread), for every built-in aggregation,
  every ``ufunc=`` aggregation whose ufunc it knows (the user's ``lift`` and ``lower`` compiled
  beside it where numba compiles them), and user aggregations whose ``lift``/``combine``/``lower``
  numba compiles, builtins such as ``abs``, ``max``, ``math.sqrt`` included (:mod:`.user`: the
  whole batch path then runs compiled, lift and lower included).
- ``"numpy"``: the vectorised reference (:mod:`pba_runtime.merge`), for aggregations with a kernel.
- ``"python"``: per-element Python ``combine`` calls; every aggregation has it.

``"auto"`` takes the first of these the aggregation supports. Asking for ``"compiled"``
where it is not available raises a ``ValueError`` that says why; ``"auto"`` falls back and
warns once per aggregation (naming its function) when a user aggregation does not compile.

numba is imported on the first compiled merge, not with the package, and its machine code is
cached on disk (``__pycache__`` beside :mod:`.compiled`, or ``NUMBA_CACHE_DIR``), so a second
process pays no compile.

Examples
--------
>>> import pba_runtime as pr
>>> resolve_engine(pr.get_aggregation("max"), "auto").name
'compiled'
>>> resolve_engine(pr.get_aggregation("collect"), "auto").name
'python'
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..aggregations import BUILTIN_AGGREGATIONS, Aggregation, Kernel, UfuncKernel, WrappedKernel
from .read_only import read_only
from .scratch import scratch

__all__ = ["ENGINES", "CompileWarning", "Engine", "resolve_engine", "check_engine", "compiled_available", "merge_keyed",
           "block_start_cost", "merge_range", "values_range", "warm", "warm_in_background"]

ENGINES = ("auto", "compiled", "numpy", "python")

# codes of .compiled's combines (kept here so choosing an engine imports no numba)
_UFUNC_CODES = {np.add: 0, np.maximum: 1, np.minimum: 2, np.multiply: 3, np.fmax: 4, np.fmin: 5}


class CompiledKernel(WrappedKernel):
    """An aggregation's kernel with its lift and lower compiled where numpy builds temporaries.

    Everything else (slice reduction, combine, accumulate) is the wrapped kernel's.
    """

    def __init__(self, base: Kernel, lift: str | None, lower: str | None, lift_refuses_negative: bool = False):
        super().__init__(base)
        self._lift_name = lift
        self._lower_name = lower
        self._refuses_negative = lift_refuses_negative

    def lift(self, values, positions):
        if self._lift_name is None:
            return self.base.lift(values, positions)
        from . import compiled as C

        vals = read_only(np.ascontiguousarray(values, dtype=np.float64))  # (one compiled type: read_only.py)
        if self._refuses_negative and (vals < 0).any():
            return self.base.lift(values, positions)  # which refuses the batch, naming the value
        out = np.empty((len(values),) + self.shape)
        if positions is not None:
            getattr(C, self._lift_name)(vals, read_only(np.ascontiguousarray(positions)), out)
        else:
            getattr(C, self._lift_name)(vals, out)
        return out

    def lower(self, parts):
        if self._lower_name is None or parts.ndim != 2:
            return self.base.lower(parts)
        from . import compiled as C

        out = np.empty(len(parts))
        getattr(C, self._lower_name)(read_only(np.ascontiguousarray(parts)), out)
        return out



@dataclass(frozen=True)
class Engine:
    """The engine an operator runs: its ``name`` and, for ``"compiled"``, the merge's layout.

    ``layout`` is ``"scalar"`` (one float per partial, combined by ``ops[0]``),
    ``"columns"`` (column ``k`` combined by ``ops[k]``), ``"std"`` or ``"argmax"``.
    ``why`` says why a fallback engine was chosen (reported by ``stats()``);
    ``kernel``: the kernel the operator's batch path calls (``None``: the aggregation's).
    """

    name: str
    layout: str | None = None
    ops: tuple = ()
    why: str = ""
    #: count windows with slide 1: the merge that reads the values and writes lowered results
    #: (:func:`values_range`), and the column of a slice's partial that holds its one value
    from_values: str | None = None
    value_column: int = 0

    @property
    def lowers_in_merge(self) -> bool:
        """Whether the merge can write lowered results itself (user aggregations: no partials written)."""
        return self.layout == "user"
    kernel: Kernel | None = field(default=None, compare=False, repr=False)
    _ops_array: Any = field(default=None, compare=False, repr=False)

    @property
    def compiled(self) -> bool:
        return self.name == "compiled"


def check_engine(engine: Any) -> str:
    """``engine`` if it names an engine, else a ``ValueError`` naming the accepted ones."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    return engine


_available: bool | None = None
_lock = threading.Lock()


def compiled_available() -> bool:
    """Whether numba is installed here (it is a dependency; without it "auto" falls back to numpy).

    Found, not imported: numba's import waits for the first compiled merge, or for
    :func:`warm_in_background`.
    """
    global _available
    if _available is None:
        import importlib.util

        _available = importlib.util.find_spec("numba") is not None
    return _available


def warm(engine: Engine) -> None:
    """Import numba and load ``engine``'s compiled merge from the disk cache (a tiny merge): paid once per
    process (``bench/bench_first_call.py``), here rather than in the first batch."""
    if not engine.compiled:
        return
    X = np.zeros((4,) + (engine.kernel.shape if engine.kernel is not None else ()))
    merge_range(engine, X, 2, 0, 3, np.empty((3,) + X.shape[1:]), np.empty(3, dtype=np.int64), 0, 1)
    if engine.layout == "scalar":  # and the runtime's merge of many keys in one call (algorithms/keyed_batch.py)
        one = np.zeros(1, dtype=np.int64)
        merge_keyed(engine, X, one, one + 3, one, one, 2, np.empty(3), np.empty(3, dtype=np.int64))


def warm_in_background(engine: Engine) -> threading.Thread | None:
    """:func:`warm` on a thread, so the cost overlaps a driver's wait for its first data (a task slot
    waiting for its first batch). The caller joins the thread when it closes; ``None`` if nothing to do."""
    if not engine.compiled:
        return None
    t = threading.Thread(target=_warm_quietly, args=(engine,), name="pba-kernels-warm", daemon=True)
    t.start()
    return t


def _warm_quietly(engine: Engine) -> None:
    try:
        warm(engine)
    except Exception:  # the first real merge raises it, where the caller sees it
        pass


def _layout(agg: Aggregation) -> tuple[str | None, tuple, str]:
    """The compiled merge layout of ``agg``'s kernel, or ``(None, (), why not)``."""
    kernel = agg.kernel
    if kernel is None:
        return None, (), f"aggregation {agg.name!r} has no vectorised form to compile"
    if agg.compiled.layout is not None:  # declared by the aggregation's family
        return agg.compiled.layout, (), ""
    if type(kernel) is UfuncKernel:
        ops = []
        for uf, cols in kernel.ufuncs:
            code = _UFUNC_CODES.get(uf)
            if code is None:
                return None, (), f"ufunc {uf.__name__} has no compiled combine"
            if cols is None:
                return "scalar", (code,), ""
            ops += [code] * (cols.stop - cols.start)
        return "columns", tuple(ops), ""
    return None, (), f"kernel {type(kernel).__name__} has no compiled form"


def _compiled_kernel(agg: Aggregation, layout: str) -> Kernel:
    """The kernel a compiled operator calls: the aggregation's, with the lift and lower of the
    built-ins that build temporaries in numpy compiled."""
    forms = agg.compiled
    if forms.lift is None and forms.lower is None:
        return _lifted_kernel(agg) if _has_user_lift(agg) else agg.kernel
    return CompiledKernel(agg.kernel, forms.lift, forms.lower, forms.lift_refuses_negative)


def _has_user_lift(agg: Aggregation) -> bool:
    """Whether ``agg`` is a user's ``ufunc=`` aggregation, its kernel lifting each value by the user's ``lift``."""
    kernel = agg.kernel
    return type(kernel) is UfuncKernel and kernel.elementwise


_lifted: dict[str, Kernel] = {}  # fingerprint -> the kernel with the user's lift compiled (or the Python one)


def _lifted_kernel(agg: Aggregation) -> Kernel:
    """``agg``'s kernel with its lift and lower compiled (:func:`.user.compile_lift_lower`) where they compile
    and agree with the Python ones; its own kernel (the lift in Python) otherwise. Once per process."""
    key = agg.fingerprint
    with _lock:
        hit = _lifted.get(key)
    if hit is None:
        from .user import compile_lift_lower

        hit = compile_lift_lower(agg)[0] or agg.kernel
        with _lock:
            hit = _lifted.setdefault(key, hit)
    return hit


class CompileWarning(UserWarning):
    """A user aggregation runs on the Python engine because numba could not compile it (said once)."""


_user_kernels: dict[str, tuple[Any, str]] = {}  # fingerprint -> (UserKernel or None, why not)
_warned: set[str] = set()


def _user_kernel(agg: Aggregation, warn: bool) -> tuple[Any, str]:
    """The compiled kernel of a user aggregation without a vectorised form, once per process."""
    key = agg.fingerprint
    with _lock:
        hit = _user_kernels.get(key)
    if hit is None:
        from .user import compile_aggregation

        hit = compile_aggregation(agg)
        with _lock:
            _user_kernels[key] = hit
    if hit[0] is None and warn and key not in _warned:
        _warned.add(key)
        import warnings

        warnings.warn(f"aggregation {agg.name!r} runs on the Python engine: {hit[1]}", CompileWarning, stacklevel=4)
    return hit


def resolve_engine(agg: Aggregation, engine: str = "auto") -> Engine:
    """The engine ``agg`` runs on when ``engine`` is asked for (see the module doc).

    Raises ``ValueError`` for an unknown name, or ``"compiled"``/``"numpy"`` where the
    aggregation has no such form (the message says why).
    """
    check_engine(engine)
    if engine == "python":
        return Engine("python")
    if engine in ("auto", "compiled"):
        layout, ops, why = _layout(agg)
        # (an aggregation that skips missing values is not compiled whole: its lift reads nulls)
        if layout is None and agg.kernel is None and agg.missing != "skip" and compiled_available():
            # one this library made (collect: a list is no number; a quantile sketch: an array): nothing to say
            builtin = BUILTIN_AGGREGATIONS.get(agg.name) is agg or getattr(agg.lift, "__module__", "").startswith(
                "pba_runtime.")
            kernel, why = _user_kernel(agg, warn=engine == "auto" and not builtin)
            if kernel is not None:
                return Engine("compiled", "user", kernel=kernel)
        if layout is not None and not compiled_available():
            layout, why = None, "numba does not import here"
        if layout is not None:
            forms = agg.compiled
            return Engine("compiled", layout, ops, kernel=_compiled_kernel(agg, layout), from_values=forms.from_values,
                          value_column=forms.value_column, _ops_array=np.asarray(ops, dtype=np.int64))
        if engine == "compiled":
            raise ValueError(f"engine='compiled' is not available for aggregation {agg.name!r}: {why}")
        if agg.kernel is not None:
            return Engine("numpy", why=why)
        return Engine("python", why=why)
    if agg.kernel is None:  # engine == "numpy"
        raise ValueError(f"engine='numpy' needs an aggregation with a vectorised form (kernel= or ufunc=); "
                         f"{agg.name!r} has none")
    return Engine("numpy")


def block_start_cost(engine: Engine, q: int, from_values: bool) -> bool:
    """Whether ``engine``'s merge over rows of ``q`` (``from_values``: :func:`values_range`, else
    :func:`merge_range`) builds the first row's lcs of each block apart: the one-loop ``sum`` and
    ``mean`` (``compiled._sum_rows``, from ``SUM_ONE_LOOP_MIN``), where one thread builds each next
    row's lcs beside the windows of the row before (``batch.compiled_blocks`` gives them fewer blocks)."""
    if not engine.compiled:
        return False
    from . import compiled as C

    if q < C.SUM_ONE_LOOP_MIN:
        return False
    if from_values:
        return engine.from_values == "mean_from_values"
    return engine.layout == "scalar" and engine.ops[0] == C.ADD


def merge_range(engine: Engine, X: np.ndarray, q: int, a0: int, a1: int, out: np.ndarray, ends: np.ndarray,
                first_end: int, step: int, lowered: bool = False) -> None:
    """Windows ``[a0, a1)`` of a batch (``a0`` a multiple of ``q``) by ``engine``'s compiled merge.

    Safe to call from several threads on disjoint ranges: each thread has its own scratch
    (:func:`.scratch.scratch`, kept for the thread's next call).
    ``lowered`` (engines with ``lowers_in_merge``): ``out`` gets the lowered results.
    """
    from . import compiled as C

    X = read_only(X)  # writable or not (Arrow's buffers), one compiled type (read_only.py)
    if engine.layout == "scalar":
        op = engine.ops[0]
        one_loop = op == C.ADD and q >= C.SUM_ONE_LOOP_MIN  # the lcs of two rows, no csa (compiled._sum_rows)
        C.merge_scalar(X, q, a0, a1, out, ends, first_end, step, op, scratch("lcs", 2 * q if one_loop else q),
                       scratch("csa", 1 if one_loop else q))
    elif engine.layout == "columns":
        C.merge_columns(X, q, a0, a1, out, ends, first_end, step, engine._ops_array,
                        scratch("lcs", (q, X.shape[1])), scratch("csa", (q, X.shape[1])))
    elif engine.layout == "std":
        C.merge_std(X, q, a0, a1, out, ends, first_end, step, scratch("lcs", (q, 3)), scratch("csa", (q, 3)))
    elif engine.layout == "argmax":
        C.merge_argmax(X, q, a0, a1, out, ends, first_end, step, scratch("lcs", (q, 2)))
    elif engine.layout == "user":
        engine.kernel.merge(X, q, a0, a1, out, ends, first_end, step, lowered)
    else:  # pragma: no cover - resolve_engine never builds one
        raise ValueError(f"no compiled merge for layout {engine.layout!r}")


def merge_keyed(engine: Engine, X: np.ndarray, xstart: np.ndarray, nwin: np.ndarray, ostart: np.ndarray,
                first_end: np.ndarray, q: int, out: np.ndarray, ends: np.ndarray) -> None:
    """Several keys' merges in one compiled call (scalar layout; count windows, slide 1): key ``k``'s
    history and batch are ``X[xstart[k] : xstart[k] + nwin[k] + q - 1]``, its windows go to ``out`` and
    ``ends`` from ``ostart[k]`` (:func:`pba_runtime.kernels.compiled.merge_scalar_keyed`): the results
    of :func:`merge_range` on each key's partials, without a Python call per key."""
    from . import compiled as C

    if engine.layout != "scalar":  # pragma: no cover - the caller's guard
        raise ValueError(f"merge_keyed takes scalar partials, not layout {engine.layout!r}")
    C.merge_scalar_keyed(read_only(X), xstart, nwin, ostart, first_end, q, engine.ops[0], out, ends, scratch("lcs", q),
                         scratch("csa", q))


def values_range(engine: Engine, V: np.ndarray, q: int, a0: int, a1: int, out: np.ndarray, ends: np.ndarray,
                 first_end: int, step: int, pos0: int = 0) -> None:
    """Lowered results of windows ``[a0, a1)`` of ``q`` values each, straight from the values ``V``
    (``engine.from_values``; count windows with slide 1; ``pos0``: the position of ``V[0]``, for
    ``argmax``). Same results as :func:`merge_range` on the values' partials followed by the lower
    (``count``: ``q``, int64, the values unread)."""
    from . import compiled as C

    V = read_only(V)  # writable or not (Arrow's buffers), one compiled type (read_only.py)
    if engine.from_values == "count_from_values":
        C.count_from_values(q, a0, a1, out, ends, first_end, step)
        return
    if engine.from_values == "argmax_from_values":
        C.argmax_from_values(V, q, a0, a1, out, ends, first_end, step, scratch("lcs", q, np.int64),
                             scratch("lcv", q), scratch("csa", q, np.int64), scratch("csv", q), pos0)
        return
    if engine.from_values == "mean_from_values" and q >= C.SUM_ONE_LOOP_MIN:  # the lcs of two rows, no csa
        C.mean_from_values(V, q, a0, a1, out, ends, first_end, step, scratch("lcs", 2 * q), scratch("csa", 1))
        return
    shape = (2, q) if engine.from_values == "std_from_values" else (q,)
    getattr(C, engine.from_values)(V, q, a0, a1, out, ends, first_end, step, scratch("lcs", shape),
                                   scratch("csa", shape))
