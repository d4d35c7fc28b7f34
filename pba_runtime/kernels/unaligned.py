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

_I64P = ir.IntType(64).as_pointer()
_I16P = ir.IntType(16).as_pointer()


def _byte_array(a: types.Type) -> bool:
    return isinstance(a, types.Array) and a.dtype == types.uint8 and a.ndim == 1 and a.layout == "C"


def _address(context, builder, aryty, ary, i, ptr=_I64P):  # pragma: no cover - compiled
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [i]), ptr)


@intrinsic
def load8(typingctx, a, i):
    """The eight bytes ``a[i:i + 8]`` as a ``uint64`` (``a``: a C-contiguous ``uint8`` array)."""
    if not (_byte_array(a) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, signature, args):  # pragma: no cover - compiled
        return builder.load(_address(context, builder, signature.args[0], args[0], args[1]), align=1)

    return types.uint64(a, i), codegen


@intrinsic
def store8(typingctx, a, i, v):
    """Write the ``uint64`` ``v``'s eight bytes to ``a[i:i + 8]`` (``a``: a C-contiguous ``uint8`` array)."""
    if not (_byte_array(a) and a.mutable and isinstance(i, types.Integer) and isinstance(v, types.Integer)):
        return None

    def codegen(context, builder, signature, args):  # pragma: no cover - compiled
        value = context.cast(builder, args[2], signature.args[2], types.uint64)
        builder.store(value, _address(context, builder, signature.args[0], args[0], args[1]), align=1)
        return context.get_dummy_value()

    return types.void(a, i, v), codegen


@intrinsic
def load2(typingctx, a, i):
    """The two bytes ``a[i:i + 2]`` as a ``uint16`` (``a``: a C-contiguous ``uint8`` array)."""
    if not (_byte_array(a) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, signature, args):  # pragma: no cover - compiled
        return builder.load(_address(context, builder, signature.args[0], args[0], args[1], _I16P), align=1)

    return types.uint16(a, i), codegen


@intrinsic
def store2(typingctx, a, i, v):
    """Write the ``uint16`` ``v``'s two bytes to ``a[i:i + 2]`` (``a``: a C-contiguous ``uint8`` array)."""
    if not (_byte_array(a) and a.mutable and isinstance(i, types.Integer) and isinstance(v, types.Integer)):
        return None

    def codegen(context, builder, signature, args):  # pragma: no cover - compiled
        value = context.cast(builder, args[2], signature.args[2], types.uint16)
        builder.store(value, _address(context, builder, signature.args[0], args[0], args[1], _I16P), align=1)
        return context.get_dummy_value()

    return types.void(a, i, v), codegen
