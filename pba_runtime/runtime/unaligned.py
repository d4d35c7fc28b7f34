"""``load8`` / ``store8`` (``load2`` / ``store2``): eight (two) bytes of a ``uint8`` array at any offset, as one
``uint64`` (``uint16``), nopython only.

numba moves a ``uint8`` array's bytes one at a time; text writers that copy short runs of bytes (the
CSV writer copies the line before, ~21 bytes, on most rows, and puts two digits at a time) spend most of
their time there. These intrinsics load and store eight or two bytes at a byte offset in one unaligned
machine move (x86 and ARM64 allow it). No bounds check: the caller guarantees ``0 <= i`` and
``i + 8 <= len(a)`` (``i + 2``). The byte order is the machine's: a load then a store of the same width
copies the bytes as they are, whatever it is.

Examples
--------
>>> import numba, numpy as np
>>> @numba.njit
... def copy8(a, src, dst):
...     store8(a, dst, load8(a, src))
>>> a = np.frombuffer(b"abcdefgh--------", np.uint8).copy()
>>> copy8(a, 0, 8); a.tobytes()
b'abcdefghabcdefgh'
>>> @numba.njit
... def copy2(a, src, dst):
...     store2(a, dst, load2(a, src))
>>> copy2(a, 3, 14); a.tobytes()
b'abcdefghabcdefde'
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["load8", "store8", "load2", "store2"]

_UINT = {2: types.uint16, 8: types.uint64}


def _byte_array(a: types.Type) -> bool:
    return isinstance(a, types.Array) and a.dtype == types.uint8 and a.ndim == 1 and a.layout == "C"


def _address(context, builder, aryty, ary, i, width):  # pragma: no cover - compiled
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [i]), ir.IntType(8 * width).as_pointer())


def _load(width: int):
    """The intrinsic ``load<width>``: ``width`` bytes at any offset as one unsigned integer."""
    uint = _UINT[width]

    def load(typingctx, a, i):
        if not (_byte_array(a) and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, signature, args):  # pragma: no cover - compiled
            return builder.load(_address(context, builder, signature.args[0], args[0], args[1], width), align=1)

        return uint(a, i), codegen

    load.__name__ = load.__qualname__ = f"load{width}"
    load.__doc__ = f"The {width} bytes ``a[i:i + {width}]`` as a ``{uint}`` (``a``: a C-contiguous ``uint8`` array)."
    return intrinsic(load)


def _store(width: int):
    """The intrinsic ``store<width>``: an unsigned integer's ``width`` bytes written at any offset."""
    uint = _UINT[width]

    def store(typingctx, a, i, v):
        if not (_byte_array(a) and a.mutable and isinstance(i, types.Integer) and isinstance(v, types.Integer)):
            return None

        def codegen(context, builder, signature, args):  # pragma: no cover - compiled
            value = context.cast(builder, args[2], signature.args[2], uint)
            builder.store(value, _address(context, builder, signature.args[0], args[0], args[1], width), align=1)
            return context.get_dummy_value()

        return types.void(a, i, v), codegen

    store.__name__ = store.__qualname__ = f"store{width}"
    store.__doc__ = (f"Write the ``{uint}`` ``v``'s {width} bytes to ``a[i:i + {width}]`` (``a``: a C-contiguous "
                     "``uint8`` array).")
    return intrinsic(store)


load8, store8 = _load(8), _store(8)
load2, store2 = _load(2), _store(2)
