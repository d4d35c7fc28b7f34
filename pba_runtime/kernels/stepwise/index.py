"""``uidx``: an array subscript that numba knows is not negative (nopython only).

numba lets a signed index count from the end (``a[-1]``), so every load and store through an ``int64``
index pays a sign test and a select and keeps the array's length live; through an unsigned one it does
not. ``uidx(i)`` reinterprets an ``int64`` that the caller knows is ``>= 0`` as a ``uint64``: no
instruction, and (unlike ``np.uint64(i)``, a call numba types at each site) a one-line intrinsic, cheap
to compile. :func:`pba_runtime.kernels.stepwise.loop_template.unsigned_indices` puts it in the generated loops.

Examples
--------
>>> import numba, numpy as np
>>> numba.njit(lambda a, i: a[uidx(i)])(np.arange(4.0), 2)
2.0
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic

__all__ = ["uidx"]


@intrinsic
def uidx(typingctx, i):
    """``i`` (an integer >= 0) as a ``uint64`` subscript."""
    if not isinstance(i, types.Integer):
        return None
    sig = types.uint64(i)

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[0], signature.args[0], types.uint64)

    return sig, codegen
