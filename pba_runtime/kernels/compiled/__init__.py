"""The compiled window merge: PBA over a batch of slice partials in one pass per chunk, GIL released.

Every merge takes the windows ``[a0, a1)`` of a batch (``a0`` a multiple of ``q``, so a caller splits the
windows between threads at row boundaries) over ``X``, the slice partials, cut into rows of ``q``: for each row
it builds the row's lcs into a scratch buffer of ``q`` partials, then walks the next row once, growing its csa
and writing ``lcs[j] (+) csa[j-1]`` for each window that starts at column ``j`` (column 0 is the whole row, the
lcs alone): the numpy reference's arithmetic (:func:`pba_runtime.merge.merge_rows`), element for element. One
module per kernel family holds its merge, lift, lower and slide-1 merge from values: :mod:`.ufuncs` (the
combines of numpy's ufuncs, ``max``/``min`` propagating NaN as ``np.maximum``/``np.minimum``), :mod:`.std`
(Chan et al.'s update over shifted power sums), :mod:`.argmax` (the oldest of equal values); :mod:`.common`
holds the combine codes and the scalar combines they share. Numba (``nogil=True``) caches each function's
machine code on disk beside its file, so a second process loads it (:mod:`..lean_load`); every name is
re-exported here (``from pba_runtime.kernels import compiled as C; C.merge_std(...)``).
"""

from __future__ import annotations

from .argmax import _argmax as _argmax
from .argmax import _csa_records as _csa_records
from .argmax import _lcs_records as _lcs_records
from .argmax import argmax_from_values, lift_argmax, merge_argmax
from .common import _JIT as _JIT
from .common import (
    ADD,
    COLUMNS_ROW_MIN,
    FMAX,
    FMIN,
    MAX,
    MIN,
    MUL,
    SUM_CHUNK,
    SUM_ONE_LOOP_MIN,
    c_add,
    c_fmax,
    c_fmin,
    c_max,
    c_min,
    c_mul,
)
from .common import _exact_inverse as _exact_inverse
from .common import _fill_ends as _fill_ends
from .common import _over as _over
from .common import _scale as _scale
from .std import _chan as _chan
from .std import _unshift as _unshift
from .std import lift_std, lower_std, merge_std, std_from_values
from .ufuncs import _columns_row as _columns_row
from .ufuncs import _scalar_op as _scalar_op
from .ufuncs import _scalar_rows as _scalar_rows
from .ufuncs import _sum_rows as _sum_rows
from .ufuncs import (
    count_from_values,
    lift_moments,
    lift_pair,
    lower_ratio,
    mean_from_values,
    merge_columns,
    merge_scalar,
    merge_scalar_keyed,
    merge_scalar_two_pass,
)

__all__ = ["ADD", "MAX", "MIN", "MUL", "FMAX", "FMIN", "COLUMNS_ROW_MIN", "SUM_ONE_LOOP_MIN", "SUM_CHUNK", "c_add",
           "c_max", "c_min", "c_mul", "c_fmax", "c_fmin", "merge_scalar", "merge_scalar_two_pass", "merge_scalar_keyed",
           "merge_columns", "merge_std", "merge_argmax", "lift_std", "lift_moments", "lift_pair", "lift_argmax",
           "lower_std", "lower_ratio", "std_from_values", "mean_from_values", "count_from_values", "argmax_from_values"]
