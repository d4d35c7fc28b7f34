"""What the forkserver of a job's task slots loads once, so that every slot forked from it starts warm.

A job started with ``forkserver`` (the default where there is one) names this
module in :func:`multiprocessing.set_forkserver_preload`, after numba's compiled
kernels. On import, in the forkserver, it loads the job's compiled merge from
numba's disk cache (:func:`pba_runtime.kernels.warm`), named by
the environment variable :data:`WARM_ENV` (``"AGGREGATION:ENGINE"``) that the
job (or the ``pba-run`` command, which starts the server before its job:
:mod:`pba_runtime.forkserver`) sets while the forkserver starts. Without it
(or under ``spawn``) a slot warms its kernels itself; a slot whose merge is
another than the one loaded here loads its own after the fork, numba's
first dispatch in the process already paid. Any failure here is silent: the
slot's first merge raises it where the job reports it.
"""

from __future__ import annotations

import os

from ..forkserver import WARM_ENV

__all__ = ["WARM_ENV", "warm_from_env"]


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
