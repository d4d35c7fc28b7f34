"""A clock and a memory fence callable from nopython code.

:func:`ticks` reads the CPU's time-stamp counter (``llvm.readcyclecounter``: ``rdtsc`` on x86, a few
nanoseconds, not serialising), which ticks at a constant rate on CPUs with ``constant_tsc`` (every x86-64
of the last decade). :func:`ns_per_tick` calibrates it once against ``time.perf_counter_ns``.
:func:`fence` is a sequentially consistent fence (a compiler and hardware barrier) for the flags PBA's
main loop and worker share, and :func:`relax` gives the CPU away while a loop waits (``sched_yield``).

Examples
--------
>>> 0.05 < ns_per_tick() < 100.0
True
"""

from __future__ import annotations

import functools
import time

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["ticks", "fence", "relax", "nap", "ns_per_tick"]


@intrinsic
def ticks(typingctx):
    """The time-stamp counter, as an int64 (nopython only)."""
    sig = types.int64()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


@intrinsic
def fence(typingctx):
    """A seq_cst fence: no load or store moves across it (nopython only)."""
    sig = types.none()

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def relax(typingctx):
    """``sched_yield()``: give the CPU away while a loop waits (nopython only; a call by symbol name,
    so the loops that call it stay cacheable on disk)."""
    sig = types.none()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def nap(typingctx, us):
    """``usleep(us)`` (nopython only; by symbol name, as :func:`relax`)."""
    sig = types.none(types.intp)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "usleep")
        builder.call(fn, [builder.trunc(args[0], ir.IntType(32))])
        return context.get_dummy_value()

    return sig, codegen


@functools.cache
def ns_per_tick() -> float:
    """Nanoseconds per :func:`ticks` tick on this machine (measured once per process)."""
    import numba

    @numba.njit
    def now():
        return ticks()

    now()
    best = None
    for _ in range(2):
        t0, c0 = time.perf_counter_ns(), now()
        time.sleep(0.01)
        t1, c1 = time.perf_counter_ns(), now()
        r = (t1 - t0) / max(1, c1 - c0)
        best = r if best is None else (best + r) / 2
    return best
