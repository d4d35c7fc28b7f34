"""The kinds of partial the fused time-window loop keeps in registers, and how it moves and combines them.

A kind is a scalar combine code of :mod:`.compiled` (``ADD`` .. ``FMIN``) or one of ``PAIR`` (two sums),
``ARGMAX`` and ``STD`` (Chan et al.'s merge). :func:`ld` and :func:`sto` move a partial of kind ``K``
from and to row ``i`` of an array, :func:`comb` combines two; numba's ``overload`` resolves each at
compile time from the literal ``K``, so a kernel of :mod:`.time_fused` holds its own combine only.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from .compiled import _JIT, ADD, FMAX, MAX, MIN, MUL, _argmax, _chan

__all__ = ["PAIR", "ARGMAX", "STD", "ld", "sto", "comb"]

_HELPER = {**_JIT, "_nrt": False}  # as time_fused's helpers: no reference counting

# The kind of partial a kernel is compiled for: a scalar combine code of :mod:`.compiled` (ADD .. FMIN),
# or one of these. Passed down as a literal, so each kernel holds one combine, written out where it is used.
PAIR, ARGMAX, STD = 6, 7, 8
_WIDTH = {PAIR: 2, ARGMAX: 2, STD: 4}  # floats per partial (scalars: 1-D arrays)


def _kind(K):
    """The literal kind of a helper's ``K`` argument, or ``None`` (numba then retries with the literal)."""
    return K.literal_value if isinstance(K, types.IntegerLiteral) else None


# A partial as a value the loop keeps in registers: a float, or a tuple of floats. ``ld``/``sto`` move
# it from/to row ``i`` of an array, ``comb`` combines two; each resolved at compile time from the kind
# ``K`` (numba's ``overload``), so a kernel holds its own combine only (no code tested per combine).
def ld(a, i, K):
    """Row ``i`` of ``a`` as a partial of kind ``K``."""


def sto(a, i, v, K):
    """Store partial ``v`` of kind ``K`` at row ``i`` of ``a``."""


def comb(a, b, K):
    """Two partials of kind ``K`` combined."""


@overload(ld, prefer_literal=True, jit_options=_HELPER)
def _ld(a, i, K):
    k = _kind(K)
    if k is None:
        return None
    w = _WIDTH.get(k, 0)
    if w == 0:
        return lambda a, i, K: a[i]
    if a.ndim == 1:  # the batch's values, lifted here (see LIFTED): std's (1, x, 0, 0), mean's (x, 1)
        if k == STD:
            return lambda a, i, K: (1.0, a[i], 0.0, 0.0)
        if k == PAIR:
            return lambda a, i, K: (a[i], 1.0)
        return None
    if w == 2:
        return lambda a, i, K: (a[i, 0], a[i, 1])
    return lambda a, i, K: (a[i, 0], a[i, 1], a[i, 2], a[i, 3])


@overload(sto, prefer_literal=True, jit_options=_HELPER)
def _sto(a, i, v, K):
    k = _kind(K)
    if k is None:
        return None
    w = _WIDTH.get(k, 0)
    if w == 0:
        def store1(a, i, v, K):
            a[i] = v
        return store1
    if a.ndim == 1:  # the results, lowered as they are stored (see LOWERED)
        if k == STD:
            def store_std(a, i, v, K):  # compiled.lower_std's arithmetic
                n = v[0]
                mu = v[1]
                a[i] = np.sqrt(v[2] / (n - 1.0)) if (n > 1.0 and mu - mu == 0.0) else np.nan
            return store_std
        if k == PAIR:
            def store_ratio(a, i, v, K):  # compiled.lower_ratio's
                a[i] = v[0] / v[1]
            return store_ratio
        return None
    if w == 2:
        def store2(a, i, v, K):
            a[i, 0] = v[0]
            a[i, 1] = v[1]
        return store2

    def store4(a, i, v, K):
        a[i, 0] = v[0]
        a[i, 1] = v[1]
        a[i, 2] = v[2]
        a[i, 3] = v[3]
    return store4


@overload(comb, prefer_literal=True, jit_options=_HELPER)
def _comb(a, b, K):
    """The combines of :mod:`.compiled` (``c_add``, ``c_max``, ...), two sums (``mean``'s and
    ``geomean``'s partials: the only two-column built-ins), ``argmax``'s and Chan et al.'s update."""
    k = _kind(K)
    if k is None:
        return None
    if k == ADD:
        return lambda a, b, K: a + b
    if k == MAX:
        return lambda a, b, K: a if (a >= b or a != a) else b
    if k == MIN:
        return lambda a, b, K: a if (a <= b or a != a) else b
    if k == MUL:
        return lambda a, b, K: a * b
    if k == FMAX:
        return lambda a, b, K: a if (a >= b or b != b) else b
    if k == PAIR:
        return lambda a, b, K: (a[0] + b[0], a[1] + b[1])
    if k == ARGMAX:
        return lambda a, b, K: _argmax(a[0], a[1], b[0], b[1])
    if k == STD:
        return lambda a, b, K: _chan(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
    return lambda a, b, K: a if (a <= b or b != b) else b  # FMIN
