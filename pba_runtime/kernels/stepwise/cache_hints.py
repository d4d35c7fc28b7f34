"""Cache hints for loops whose data crosses cores (nopython only): ``prefetch`` and ``evict``.

PBA's main loop writes each slice partial into ``saa``; the worker, on the other core, reads a closed
chunk's partials to build its lcs, which pulls those cache lines into the worker's caches. ``K`` chunks
later the main loop writes the same lines again, and a store to a line that another core holds waits
until that core has dropped its copy. On a 2-vCPU virtual machine that wait can be the whole story: when
the hypervisor places the two vCPUs on different dies (a cache line's round trip between them is several
times longer, ``bench/noise_floor.py`` shows it), PBA's main loop falls far behind SBA's.
So the worker evicts the partials it has read (:func:`evict`, ``clflush``) and reads them ahead of use
(:func:`prefetch`): the main loop's later stores then find no other copy to wait for.

Both are hints: no result depends on them. ``prefetch`` is LLVM's portable ``llvm.prefetch`` (a
prefetch never faults, so the address may lie outside the array); ``evict`` is ``clflush`` on x86-64 and
nothing elsewhere.

Examples
--------
>>> import numba, numpy as np
>>> @numba.njit
... def total_then_evict(a):
...     s = 0.0
...     for i in range(len(a)):
...         prefetch(a, i + 64, 0)
...         s += a[i]
...     for off in range(0, len(a) * a.strides[0], 64):
...         evict(a, off)
...     return s
>>> total_then_evict(np.ones(100))
100.0
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch", "evict"]

#: ``clflush`` exists on every x86-64 CPU (SSE2); elsewhere :func:`evict` emits nothing
HAS_CLFLUSH = platform.machine().lower() in ("x86_64", "amd64")


def _address(context, builder, aryty, ary, idx, idxty, rows: bool):
    arr = context.make_array(aryty)(context, builder, ary)
    i = context.cast(builder, idx, idxty, types.intp)
    if rows:
        i = builder.mul(i, builder.extract_value(arr.strides, 0))
    return builder.inttoptr(builder.add(builder.ptrtoint(arr.data, cgutils.intp_t), i), ir.IntType(8).as_pointer())


@intrinsic(prefer_literal=True)
def prefetch(typingctx, arr, i, write):
    """Bring row ``i`` of ``arr`` (its first element along axis 0) into cache: for reading (``write`` 0) or
    for writing (``write`` the literal 1: ``prefetchw`` where the CPU has it)."""
    if not isinstance(arr, types.Array) or not isinstance(i, types.Integer) or not isinstance(write, types.Integer):
        return None
    rw = 1 if isinstance(write, types.IntegerLiteral) and write.literal_value else 0
    sig = types.none(arr, i, write)

    def codegen(context, builder, signature, args):
        ptr = _address(context, builder, signature.args[0], args[0], args[1], signature.args[1], rows=True)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [ptr, ir.Constant(i32, rw), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def evict(typingctx, arr, offset):
    """Flush the cache line holding byte ``offset`` of ``arr``'s data from every cache (x86-64; a no-op
    elsewhere). Written-back if dirty: the data is unchanged."""
    if not isinstance(arr, types.Array) or not isinstance(offset, types.Integer):
        return None
    sig = types.none(arr, offset)

    def codegen(context, builder, signature, args):
        if HAS_CLFLUSH:
            ptr = _address(context, builder, signature.args[0], args[0], args[1], signature.args[1], rows=False)
            fnty = ir.FunctionType(ir.VoidType(), [ptr.type])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.clflush")
            builder.call(fn, [ptr])
        return context.get_dummy_value()

    return sig, codegen
