"""Loading this package's kernels from numba's disk cache without numba's compiler set-up.

The first compiled call of a process, warm cache, cost far more than the kernel: before numba looks in
its cache, ``Dispatcher._compile_for_args`` reads every installed distribution's entry points (numba
extensions), and ``FunctionCache.load_overload`` refreshes the target context, which imports some 70
more numba modules (the implementations of everything numba can compile: numpy's linalg and random,
typed containers, jitclass, ...) and registers ~1000 typing templates. A compile needs all of that;
loading machine code needs none of it: the cache's object code is unpickled, linked against numba's
runtime (NRT) and numba's C helpers (which the target context installs when it is created), and
called. ``bench/bench_first_call.py`` measures the first call against the steady one.

:func:`lean_loads` gives the cached dispatchers of a module a load that does only that. What changes is
when numba's set-up runs, never what runs: the code loaded is the file numba would load, and a miss
(cold cache, a signature not cached yet, a changed source) falls through to numba's compiler as before,
which runs the whole set-up itself (``numba.core.compiler.CompilerBase`` refreshes both contexts, the
entry points included). It suits modules whose kernels use arrays, numbers and ``math``/numpy scalar
functions only, as :mod:`.compiled`, :mod:`.time_slicing` and :mod:`.time_fused` do: a kernel hashing strings or building typed
containers needs symbols that the set-up's imports install (``numba.cpython.hashing``).

Where numba's internals differ from what this expects (another version), nothing is changed.

Examples
--------
>>> from pba_runtime.kernels import compiled
>>> is_lean(compiled.merge_scalar), lean_loads(vars(compiled))  # done when the module was imported
(True, 0)
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["lean_loads", "is_lean"]


def _load(cache: Any, sig: Any, target_context: Any) -> Any:
    """``FunctionCache.load_overload`` without ``target_context.refresh()``: NRT only (what linking needs)."""
    from numba.core.runtime import nrt

    nrt.rtsys.initialize(target_context)  # once per process (a no-op after); under numba's compile lock
    with cache._guard_against_spurious_io_errors():
        return cache._load_overload(sig, target_context)


def _no_entry_points() -> None:
    """The dispatcher's ``_compilation_chain_init_hook`` for a load (a compile reads the entry points itself)."""


def lean_loads(namespace: dict[str, Any]) -> int:
    """Give every disk-cached numba dispatcher in ``namespace`` (a module's ``globals()``) the lean load; the
    number of dispatchers changed (0 where numba's internals are not the expected ones)."""
    try:
        from numba.core.caching import FunctionCache
        from numba.core.dispatcher import Dispatcher
        from numba.core.runtime import nrt
    except ImportError:  # pragma: no cover - numba is a dependency; without it nothing is compiled
        return 0
    needed = (hasattr(FunctionCache, "_load_overload") and hasattr(FunctionCache, "_guard_against_spurious_io_errors")
              and hasattr(Dispatcher, "_compilation_chain_init_hook") and hasattr(nrt, "rtsys"))
    if not needed:  # pragma: no cover - another numba: its own load, unchanged
        return 0
    n = 0
    for obj in namespace.values():
        if isinstance(obj, Dispatcher) and isinstance(obj._cache, FunctionCache) and not is_lean(obj):
            obj._cache.load_overload = functools.partial(_load, obj._cache)
            obj._compilation_chain_init_hook = _no_entry_points
            n += 1
    return n


def is_lean(dispatcher: Any) -> bool:
    """Whether :func:`lean_loads` gave ``dispatcher`` its load."""
    load = getattr(getattr(dispatcher, "_cache", None), "__dict__", {}).get("load_overload")
    return isinstance(load, functools.partial) and load.func is _load
