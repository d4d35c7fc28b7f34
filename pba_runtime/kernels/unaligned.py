"""``load8`` / ``store8``: eight bytes of a ``uint8`` array at any offset, as one ``uint64`` (nopython only).

numba moves a ``uint8`` array's bytes one at a time; text writers that copy short runs of bytes (the
CSV writer copies the line before, ~21 bytes, on most rows) spend most of their time there. These
intrinsics load and store eight bytes at a byte offset in one unaligned machine move (x86 and ARM64
allow it). No bounds check: the caller guarantees ``0 <= i`` and ``i + 8 <= len(a)``. The byte order is
the machine's: a ``load8`` then ``store8`` copies the bytes as they are, whatever it is.

Examples
--------
>>> import numba, numpy as np
>>> @numba.njit
... def copy8(a, src, dst):
...     store8(a, dst, load8(a, src))
>>> a = np.frombuffer(b"abcdefgh--------", np.uint8).copy()
>>> copy8(a, 0, 8); a.tobytes()
b'abcdefghabcdefgh'
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["load8", "store8"]

_I64P = ir.IntType(64).as_pointer()


def _byte_array(a: types.Type) -> bool:
    return isinstance(a, types.Array) and a.dtype == types.uint8 and a.ndim == 1 and a.layout == "C"


def _address(context, builder, aryty, ary, i):  # pragma: no cover - compiled
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [i]), _I64P)


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
