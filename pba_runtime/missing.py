"""Missing values in array input: refused, naming the parameter, until queries bring a missing-value policy.

A pandas ``<NA>`` (a nullable dtype such as ``Float64``/``Int64``, or an Arrow-backed one), a null of a
pyarrow array or a polars Series, and a masked entry of a ``numpy.ma.MaskedArray`` are *missing*, not
numbers: ``numpy.asarray`` would turn them into NaN, or drop the mask and keep whatever lies under it.
``NaN`` itself is a float and stays a value (numpy's result, ``docs/semantics.md``). Nothing here imports
pandas, pyarrow or polars: an object of theirs can only exist once the caller has imported them.

Examples
--------
>>> import numpy as np
>>> refuse_missing(np.array([1.0, np.nan]))  # NaN is a value
>>> refuse_missing(np.ma.masked_array([1.0, 2.0], mask=[False, True]))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: values holds a missing value (a masked entry at position 1): the missing-value policy comes ... to drop them
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["MISSING_POLICY", "refuse_missing"]

MISSING_POLICY = 'the missing-value policy comes with queries over frames (missing="skip" is not there yet)'


def refuse_missing(values: Any, name: str = "values") -> None:
    """Raise ``ValueError`` naming ``name`` if ``values`` holds a missing value (see the module); else nothing."""
    mask, what, remedy = _missing_mask(values)
    if mask is None:
        return
    import numpy as np

    where = np.flatnonzero(np.asarray(mask, dtype=bool))
    if len(where):
        raise ValueError(
            f"{name} holds a missing value ({what} at position {int(where[0])}): {MISSING_POLICY}; {remedy}"
        )


def _missing_mask(values: Any) -> tuple[Any, str, str]:
    """The missing-value mask of ``values`` (``None``: it cannot hold any), what a missing one is, and the remedy."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(values, np.ma.MaskedArray):
        return (np.ma.getmaskarray(values).ravel(), "a masked entry",
                "pass .filled(np.nan) if NaN is what you mean, or .compressed() to drop them")
    pd = sys.modules.get("pandas")
    if pd is not None:
        if isinstance(values, (pd.Series, pd.Index)):
            dtype = values.dtype
        elif isinstance(values, pd.api.extensions.ExtensionArray):
            dtype = values.dtype
        else:
            dtype = None
        # a numpy dtype's NaN is a float (a value); an extension dtype's isna() is its <NA> mask
        if dtype is not None and np is not None and not isinstance(dtype, np.dtype):
            return (values.isna(), "<NA>",
                    "pass .to_numpy(dtype=float, na_value=np.nan) if NaN is what you mean, or .dropna() to drop them")
    pa = sys.modules.get("pyarrow")
    if pa is not None and isinstance(values, (pa.Array, pa.ChunkedArray)):
        if values.null_count == 0:
            return None, "", ""
        return (values.is_null().to_numpy(zero_copy_only=False), "a null",
                "pass pyarrow.compute.fill_null(values, float('nan')) if NaN is what you mean, or .drop_null() to drop them")
    pl = sys.modules.get("polars")
    if pl is not None and isinstance(values, pl.Series):
        if values.null_count() == 0:
            return None, "", ""
        return (values.is_null().to_numpy(), "a null",
                "pass .fill_null(float('nan')) if NaN is what you mean, or .drop_nulls() to drop them")
    return None, "", ""

