"""Key partitioning: which task slot owns a key, and grouping a batch by key.

Keys are hash-partitioned to the ``P`` task slots with a *stable* hash, so a key
lands on the same slot in every run, every process and after a ``--resume``
(Python's built-in ``hash()`` of a ``str`` is salted per process and would not do):

* integer keys: the splitmix64 finaliser of the 64-bit value;
* string keys: CRC-32 of the UTF-8 bytes. String keys may come as ``str_``
  arrays or as ``object`` arrays of ``str`` (what the text sources use: a
  ``str_`` array drops trailing NUL characters, so ``"a\\x00"`` would become
  ``"a"``); both hash alike.

Within one batch a slot then groups tuples by key with a *stable* sort, so
each key sees its tuples in arrival order (per-key order is kept end to end).

Examples
--------
>>> import numpy as np
>>> slots = slot_of(np.array([0, 1, 2, 3, 0]), 2)
>>> slots.tolist()
[0, 1, 0, 0, 0]
>>> slot_of(np.array(["plug-1", "plug-2"]), 4).tolist()
[0, 2]
>>> [(k, idx.tolist()) for k, idx in group_by_key(np.array([7, 3, 7, 3, 9]))]
[(3, [1, 3]), (7, [0, 2]), (9, [4])]
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["stable_hash", "slot_of", "split_by_slot", "group_by_key", "group_runs", "key_to_python", "key_array", "Partitioner",
           "compact_keys"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= _M1
        z ^= z >> np.uint64(27)
        z *= _M2
        z ^= z >> np.uint64(31)
    return z


def stable_hash(keys: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each key that is the same in every process and run.

    Parameters
    ----------
    keys : numpy.ndarray
        Integer (any width) or string (``str_``, or ``object`` holding ``str``)
        keys, one-dimensional.

    Returns
    -------
    numpy.ndarray of uint64

    Examples
    --------
    >>> import numpy as np
    >>> int(stable_hash(np.array([1]))[0]) == int(stable_hash(np.array([1], dtype=np.int32))[0])
    True
    >>> int(stable_hash(np.array(["a"]))[0])
    3904355907
    """
    keys = np.asarray(keys)
    if keys.dtype.kind in "iub":
        return _splitmix64(keys.astype(np.int64, copy=False).view(np.uint64))
    if keys.dtype.kind in "USO":
        if keys.dtype.kind == "O" and not all(isinstance(k, (str, bytes)) for k in keys.tolist()):
            raise TypeError("keys of an object array must all be str")
        uniq, inverse = np.unique(keys, return_inverse=True)
        hashed = np.fromiter(
            (zlib.crc32(k.encode("utf-8") if isinstance(k, str) else k) for k in uniq.tolist()),
            dtype=np.uint64, count=len(uniq),
        )
        return hashed[inverse.reshape(-1)]
    raise TypeError(f"keys must be integers or strings, got dtype {keys.dtype}")


def slot_of(keys: np.ndarray, parallelism: int) -> np.ndarray:
    """The task slot (``0 .. parallelism-1``) that owns each key.

    Examples
    --------
    >>> import numpy as np
    >>> slot_of(np.array([5, 5, 6]), 1).tolist()
    [0, 0, 0]
    """
    if parallelism == 1:
        return np.zeros(len(keys), dtype=np.intp)
    return (stable_hash(keys) % np.uint64(parallelism)).astype(np.intp)


#: Integer keys in ``[0, TABLE_KEYS)`` are partitioned through a table of their slots (one gather per batch).
TABLE_KEYS = 1 << 16


class Partitioner:
    """:func:`slot_of` for one parallelism, through a cached table of slots when keys are small
    non-negative integers (the generated sources' plugs and sensors): the same slots, without hashing
    every tuple.

    Examples
    --------
    >>> import numpy as np
    >>> keys = np.array([0, 1, 2, 3, 0, 70_000])
    >>> Partitioner(2)(keys).tolist() == slot_of(keys, 2).tolist()
    True
    """

    def __init__(self, parallelism: int):
        self.parallelism = parallelism
        self._table = np.empty(0, dtype=np.intp)

    def __call__(self, keys: np.ndarray) -> np.ndarray:
        if self.parallelism == 1 or keys.dtype.kind not in "iu" or not len(keys):
            return slot_of(keys, self.parallelism)
        lo, hi = int(keys.min()), int(keys.max())
        if lo < 0 or hi >= TABLE_KEYS:
            return slot_of(keys, self.parallelism)
        if hi >= len(self._table):
            self._table = slot_of(np.arange(hi + 1, dtype=np.int64), self.parallelism)
        return self._table[keys]


def compact_keys(keys: np.ndarray) -> np.ndarray:
    """Integer keys in the narrowest integer type that holds them (fewer bytes to ship to a slot).

    The keys' values are unchanged (a slot turns each into a Python ``int``).

    Examples
    --------
    >>> import numpy as np
    >>> compact_keys(np.array([0, 83])).dtype.name, compact_keys(np.array([-1, 300])).dtype.name
    ('uint8', 'int16')
    >>> compact_keys(np.array(["a"])).dtype.kind
    'U'
    """
    if keys.dtype.kind not in "iu" or not len(keys) or keys.dtype.itemsize == 1:
        return keys
    lo, hi = int(keys.min()), int(keys.max())
    for dtype in (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return keys.astype(dtype) if np.dtype(dtype).itemsize < keys.dtype.itemsize else keys
    return keys


def split_by_slot(slots: np.ndarray, parallelism: int) -> list[np.ndarray | None]:
    """For each slot, the (increasing) indices of the tuples it owns, or ``None`` if it owns none.

    Examples
    --------
    >>> import numpy as np
    >>> [None if i is None else i.tolist() for i in split_by_slot(np.array([1, 0, 1]), 3)]
    [[1], [0, 2], None]
    """
    if parallelism == 1:
        return [np.arange(len(slots))] if len(slots) else [None]
    if parallelism <= 16:  # a few linear passes beat a sort
        out: list[np.ndarray | None] = []
        for i in range(parallelism):
            idx = np.flatnonzero(slots == i)
            out.append(idx if len(idx) else None)
        return out
    order = np.argsort(slots, kind="stable")
    counts = np.bincount(slots, minlength=parallelism)
    out = []
    lo = 0
    for c in counts.tolist():
        out.append(order[lo : lo + c] if c else None)
        lo += c
    return out


def key_array(keys: list) -> np.ndarray:
    """Python keys as an array :func:`slot_of` takes: int64 for ints, ``object`` for strings (NULs kept).

    Examples
    --------
    >>> key_array(["a", "a\\x00"]).tolist(), key_array([3, 4]).dtype.name
    (['a', 'a\\x00'], 'int64')
    """
    if keys and all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in keys):
        return np.array(keys, dtype=np.int64)
    out = np.empty(len(keys), dtype=object)
    out[:] = keys
    return out


def key_to_python(key: Any) -> Any:
    """A numpy scalar key as the plain Python ``int`` or ``str`` used in keyed state."""
    return key.item() if isinstance(key, np.generic) else key


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """A stable sort order of ``keys``; integer keys within a 2**16 span use numpy's O(n) radix sort."""
    if keys.dtype.kind in "iu" and len(keys) > 64:
        lo, hi = int(keys.min()), int(keys.max())
        if hi - lo < 1 << 16:
            return np.argsort((keys - lo).astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def group_runs(keys: np.ndarray) -> tuple[np.ndarray, list, list[int]]:
    """``(order, firsts, bounds)``: a stable sort order of ``keys``, its distinct keys in sorted order, and
    where each key's run starts in ``keys[order]`` (``len(firsts) + 1`` offsets).

    Examples
    --------
    >>> import numpy as np
    >>> order, firsts, bounds = group_runs(np.array([7, 3, 7, 3, 9]))
    >>> order.tolist(), firsts, bounds
    ([1, 3, 0, 2, 4], [3, 7, 9], [0, 2, 4, 5])
    """
    n = len(keys)
    if n == 0:
        return np.empty(0, dtype=np.intp), [], [0]
    order = _stable_order(keys)
    sk = keys[order]
    cuts = (np.flatnonzero(sk[1:] != sk[:-1]) + 1).tolist()
    bounds = [0, *cuts, n]
    return order, sk[bounds[:-1]].tolist(), bounds


def group_by_key(keys: np.ndarray) -> Iterator[tuple[Any, np.ndarray]]:
    """Yield ``(key, indices)`` per distinct key; indices increase (arrival order kept).

    Keys come out sorted; each key's indices are in the order the tuples arrived.
    """
    order, firsts, bounds = group_runs(keys)
    for i, k in enumerate(firsts):
        yield k, order[bounds[i] : bounds[i + 1]]
