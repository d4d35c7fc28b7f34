"""What the forkserver of a job's task slots loads once, so that every slot forked from it starts warm.

A job started with ``forkserver`` (the default where there is one) names this
module in :func:`multiprocessing.set_forkserver_preload`, after numba's compiled
kernels. On import, in the forkserver, it loads the job's compiled merge from
numba's disk cache (:func:`pba_runtime.kernels.warm`, ~0.3-0.4 s), named by
the environment variable :data:`WARM_ENV` (``"AGGREGATION:ENGINE"``) that the
job sets while the forkserver starts. Without it (or under ``spawn``, or when
this process's forkserver was already running) a slot warms its kernels
itself, as before. Any failure here is silent: the slot's first merge raises
it where the job reports it.
"""

from __future__ import annotations

import os

__all__ = ["WARM_ENV", "warm_from_env"]

#: ``"AGGREGATION:ENGINE"`` of the merge to warm (built-in aggregations only).
WARM_ENV = "PBA_RUNTIME_PRELOAD_WARM"


def warm_from_env() -> bool:
    """Warm the merge :data:`WARM_ENV` names; whether one was warmed."""
    spec = os.environ.get(WARM_ENV)
    if not spec:
        return False
    agg, _, engine = spec.partition(":")
    try:
        from ..aggregations import get_aggregation
        from ..kernels import resolve_engine, warm

        resolved = resolve_engine(get_aggregation(agg), engine or "auto")
        if not resolved.compiled:
            return False
        warm(resolved)
    except Exception:
        return False
    return True


warm_from_env()
