"""Missing values in array input: refused under ``missing="propagate"``, read as NaN under ``missing="skip"``.

A pandas ``<NA>`` (a nullable dtype such as ``Float64``/``Int64``, or an Arrow-backed one), a null of a
pyarrow array or a polars Series, and a masked entry of a ``numpy.ma.MaskedArray`` are *missing*, not
numbers: ``numpy.asarray`` would turn them into NaN, or drop the mask and keep whatever lies under it.
Under ``missing="propagate"`` (the default of arrays and per-tuple operators) they are refused naming the
parameter (:func:`refuse_missing`), and ``NaN`` itself is a float that stays a value (numpy's result,
``docs/semantics.md``). Under ``missing="skip"`` they are read as NaN (:func:`fill_missing`), and NaN is
skipped with them (:func:`pba_runtime.aggregations.skip_missing`). Nothing here imports pandas, pyarrow
or polars: an object of theirs can only exist once the caller has imported them.

Examples
--------
>>> import numpy as np
>>> refuse_missing(np.array([1.0, np.nan]))  # NaN is a value
>>> refuse_missing(np.ma.masked_array([1.0, 2.0], mask=[False, True]))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: values holds a missing value (a masked entry at position 1): missing="propagate" refuses ... to drop them
>>> fill_missing(np.ma.masked_array([1.0, 2.0], mask=[False, True])).tolist()
[1.0, nan]
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["MISSING_POLICY", "MISSING", "check_missing", "fill_missing", "is_missing", "refuse_missing"]

MISSING_POLICY = ('missing="propagate" refuses them (the default for arrays and per-tuple operators); '
                  'pass missing="skip" to skip missing values and NaN')

#: the accepted values of ``missing=``
MISSING = ("propagate", "skip")


def check_missing(missing: Any) -> str:
    """``missing`` if it is one of :data:`MISSING`, else a ``ValueError`` naming ``missing`` and the accepted values.

    >>> check_missing("drop")
    Traceback (most recent call last):
    ...
    ValueError: missing must be 'propagate' or 'skip', got 'drop'
    """
    if not isinstance(missing, str) or missing not in MISSING:
        raise ValueError(f"missing must be 'propagate' or 'skip', got {missing!r}")
    return missing


def is_missing(v: Any) -> bool:
    """Whether one value is missing under ``missing="skip"``: ``None``, pandas' ``<NA>``, numpy's ``masked``
    or a NaN (of any float type).

    >>> [is_missing(v) for v in (None, float("nan"), 1.0, 0, "a")]
    [True, True, False, False, False]
    """
    if v is None:
        return True
    if v.__class__ is float:
        return v != v
    if type(v).__name__ in ("NAType", "MaskedConstant"):
        return True
    try:
        return bool(v != v)
    except (TypeError, ValueError):
        return False


def fill_missing(values: Any) -> Any:
    """``values`` with its missing entries (see the module) as NaN, a float64 array, when it holds any:
    ``values`` itself otherwise (NaN stays as it is). A list or an object array holding ``None`` or
    ``<NA>`` among real numbers becomes a float64 array too."""
    mask, _, _ = _missing_mask(values)
    import numpy as np

    if mask is None:
        if isinstance(values, np.ndarray) and values.dtype.kind != "O":
            return values
        if isinstance(values, (list, tuple, np.ndarray)):
            return _fill_objects(values)
        return values
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return values
    if isinstance(values, np.ma.MaskedArray):
        data = np.ma.getdata(values)
        if data.dtype.kind not in "biuf":
            return values
        return np.where(mask.reshape(data.shape), np.nan, data.astype(np.float64))
    try:
        data = np.asarray(_to_float_numpy(values), dtype=np.float64)
    except Exception:  # pandas', pyarrow's or polars' own error for an array that is not numbers
        return values  # not numbers: the caller's check names the dtype
    out = data.copy() if data.base is not None or not data.flags.writeable else data
    out[mask] = np.nan
    return out


def _to_float_numpy(values: Any) -> Any:
    """A pandas, pyarrow or polars array holding nulls as numbers (the nulls' places are overwritten)."""
    to_numpy = getattr(values, "to_numpy", None)
    pa = sys.modules.get("pyarrow")
    if pa is not None and isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_numpy(zero_copy_only=False)
    pl = sys.modules.get("polars")
    if pl is not None and isinstance(values, pl.Series):
        return values.cast(pl.Float64).to_numpy()
    import numpy as np

    return to_numpy(dtype=np.float64, na_value=np.nan)


def _fill_objects(values: Any) -> Any:
    """A list or object array holding ``None``/``<NA>``/``masked`` among real numbers, as float64 with NaN."""
    import numbers

    import numpy as np

    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if isinstance(values, np.ndarray) and values.ndim != 1:
        return values
    if not any(v is None or type(v).__name__ in ("NAType", "MaskedConstant") for v in items):
        return values
    out = []
    for v in items:
        if v is None or type(v).__name__ in ("NAType", "MaskedConstant"):
            out.append(np.nan)
        elif isinstance(v, numbers.Real):
            out.append(float(v))
        else:
            return values  # not numbers: the caller's check names the dtype
    return np.array(out, dtype=np.float64)


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

