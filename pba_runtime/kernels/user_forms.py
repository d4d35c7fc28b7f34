"""The Python function numba compiles for each callable of a user aggregation.

numba compiles Python functions (``def``, ``lambda``) from their bytecode. A builtin (``abs``,
``max``, ``float``), a module function written in C (``math.sqrt``, ``operator.add``), a numpy
ufunc, an already ``numba.njit``-ed function or a ``functools.partial`` is no Python function, but
numba compiles a *call* to most of them: :func:`form` returns a one-line Python function making that
call (``def lift(a): return abs(a)``), which numba compiles as it compiles the user's own ``def``.

A wrapper of a callable found by its module and name (``abs``, ``math.sqrt``, ``np.maximum``) is
itself importable from this module, by a name that encodes both (:func:`form_name`), so the
per-tuple engine's generated loops import it and numba caches them on disk as it caches a user's
module-level ``def`` (:mod:`pba_runtime.kernels.stepwise`).

Examples
--------
>>> import math
>>> f = form(math.hypot, 2)
>>> f(3.0, 4.0), f.__module__ == __name__
(5.0, True)
>>> import pba_runtime.kernels.user_forms as here
>>> form(max, 2) is getattr(here, form_name(max, 2))  # the same function, imported by name
True
>>> g = lambda v: v + 1.0
>>> form(g, 1) is g  # a Python function is compiled as it is
True
"""

from __future__ import annotations

import functools
import importlib
import threading
import types
from typing import Any

__all__ = ["form", "form_name", "describe"]

_PARAMS = ("a", "b", "c")
_PREFIX = "call"
_lock = threading.Lock()


def describe(fn: Any) -> str:
    """How a message names ``fn``: ``abs``, ``math.sqrt``, ``operator.add``, ``numpy.maximum``, ``my_lift``."""
    if isinstance(fn, functools.partial):
        return f"functools.partial({describe(fn.func)}, ...)"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        return repr(fn)
    if isinstance(fn, types.FunctionType):
        return name
    mod = getattr(fn, "__module__", None) or ""
    mod = {"builtins": "", "_operator": "operator"}.get(mod, mod)
    return f"{mod}.{name}" if mod else name


def _resolve(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def form_name(fn: Any, arity: int) -> str | None:
    """The name this module exports ``fn``'s wrapper of ``arity`` arguments by, if ``fn`` is found again by
    its module and name (``None``: a wrapper of it is built, but not importable)."""
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(mod, str) or not isinstance(qual, str) or "<" in qual:
        return None
    try:
        if _resolve(mod, qual) is not fn:
            return None
    except Exception:
        return None
    return f"{_PREFIX}{arity}_{f'{mod}:{qual}'.encode().hex()}"


def _wrap(fn: Any, arity: int, name: str) -> types.FunctionType:
    """``def name(a, ...): return fn(a, ...)``, ``fn`` a global of it (a partial's arguments too)."""
    params = ", ".join(_PARAMS[:arity])
    namespace: dict[str, Any] = {"__name__": __name__}
    args = params
    target = fn
    if isinstance(fn, functools.partial):
        bound = [f"_arg{i}" for i in range(len(fn.args))]
        namespace.update(zip(bound, fn.args))
        kws = [f"{k}=_kw_{k}" for k in fn.keywords]
        namespace.update({f"_kw_{k}": v for k, v in fn.keywords.items()})
        args = ", ".join(bound + ([params] if params else []) + kws)
        target = fn.func
        if isinstance(target, types.FunctionType):  # a Python function called from compiled code: compiled too
            import numba

            target = numba.njit(target)
    glob = getattr(target, "__name__", "")
    if not (isinstance(glob, str) and glob.isidentifier()) or glob in _PARAMS or glob.startswith("_"):
        glob = "_f"
    namespace[glob] = target
    exec(compile(f"def {name}({params}):\n    return {glob}({args})\n", f"<pba_runtime form of {describe(fn)}>",
                 "exec"), namespace)
    wrapper = namespace[name]
    wrapper.__qualname__ = name
    return wrapper


def form(fn: Any, arity: int) -> Any:
    """A Python function of ``arity`` arguments numba can compile that computes ``fn``: ``fn`` itself when it
    is one (a ``def`` or a ``lambda``), else a wrapper calling it (importable from here when
    :func:`form_name` names it)."""
    if isinstance(fn, types.FunctionType):
        return fn
    exported = form_name(fn, arity)
    if exported is None:
        return _wrap(fn, arity, f"{_PREFIX}{arity}")
    with _lock:
        hit = globals().get(exported)
        if hit is None:
            hit = globals()[exported] = _wrap(fn, arity, exported)
    return hit


def __getattr__(name: str) -> Any:
    """The wrapper a generated loop imports by name (``from ...user_forms import call1_...``)."""
    if name.startswith(_PREFIX) and "_" in name:
        head, _, code = name.partition("_")
        try:
            arity = int(head[len(_PREFIX):])
            mod, _, qual = bytes.fromhex(code).decode().partition(":")
            fn = _resolve(mod, qual)
        except Exception:
            raise AttributeError(name) from None
        if form_name(fn, arity) == name:
            return form(fn, arity)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
