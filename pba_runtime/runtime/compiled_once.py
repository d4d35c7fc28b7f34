"""A numba function built at its first use, once per process: the runtime's coordinator-side loops.

The coordinator imports numba only when a job needs one of its compiled loops (the grouping's counting
sort, the default source's generator), so a job that uses neither, and ``import pba_runtime``, pay no
numba import. :class:`CompiledOnce` holds such a loop: ``get()`` imports numba and builds it the first
time (under a lock, so two threads build it once), ``loaded()`` says whether that has happened without
waiting. Without numba both give ``None`` and the caller takes its numpy path.

Examples
--------
>>> def build(njit):
...     @njit(cache=False)
...     def twice(x):
...         return 2 * x
...     return twice
>>> loop = CompiledOnce(build)
>>> loop.loaded() is None
True
>>> loop.get()(21), loop.loaded() is loop.get()
(42, True)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CompiledOnce"]


class CompiledOnce:
    """``build(njit)`` run at the first :meth:`get`, its result kept; ``None`` without numba.

    Parameters
    ----------
    build : callable
        Called once with ``numba.njit``; returns the compiled function (it may call it to compile it for the
        argument types it will get, or load them from numba's disk cache).
    """

    def __init__(self, build: Callable[[Any], Any]) -> None:
        self._build = build
        self._fn: Any = None  # None: not built yet; False: no numba
        self._lock = threading.Lock()

    def get(self) -> Any:
        """Import numba and build the function (once); ``None`` without numba."""
        with self._lock:
            if self._fn is None:
                try:
                    from numba import njit
                except ImportError:  # pragma: no cover - numba is a dependency
                    self._fn = False
                    return None
                self._fn = self._build(njit)
            return self._fn or None

    def loaded(self) -> Any:
        """The function if :meth:`get` has built it, else ``None`` (never waits, never imports numba)."""
        return self._fn or None
