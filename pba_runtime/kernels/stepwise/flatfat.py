"""FlatFAT and the Reactive Aggregator (Tangwongsan et al., VLDB'15), :mod:`pba_runtime.algorithms.flatfat` compiled.

A complete binary tree over ``fcap`` leaf slots in one array ``tv`` with heap numbering (root 1,
children of ``v`` at ``2v`` and ``2v+1``, leaf ``i`` at ``fcap + i``); ``tf`` flags the non-empty
nodes (an empty one, the paper's bottom, combines as a neutral element). The window is a circular
buffer in the leaves (``[slot0, slot0 + span)``): a push or a pop writes one leaf and marks it
dirty; a query repairs the dirty leaf-to-root paths (two of them, meeting at their common
ancestor) and answers the root, or ``suffix(front) (+) prefix(back)`` when the buffer wraps, so the
order of a non-commutative aggregation is kept. The capacity doubles when the buffer is full and
halves when fewer than a quarter of the slots are used, and a time gap that empties the window
starts over at 8 slots: the Python aggregator's tree, node for node, so the same bits.
"""

from __future__ import annotations

import textwrap

from .loop_template import Algorithm

__all__ = ["ALGORITHM"]

MIN_CAPACITY = 8  # as pba_runtime.algorithms.flatfat.MIN_CAPACITY

#: node ``V`` from its children (written out where it is used: a call per node, which passes the
#: arrays, costs several times the node's own work)
_NODE = """
na = 2 * V
nb = na + 1
if tf[na] == 0:
    tf[V] = tf[nb]
    if tf[nb] != 0:
        y = @L(tv, nb)
        @S(tv, V, y)
elif tf[nb] == 0:
    tf[V] = 1
    y = @L(tv, na)
    @S(tv, V, y)
else:
    y = combine(@L(tv, na), @L(tv, nb))
    @S(tv, V, y)
    tf[V] = 1
"""


def _node(v: str, indent: str) -> str:
    return textwrap.indent(_NODE.strip("\n").replace("V", v), indent)


_HELPERS = '''
def ff_repair(tv, tf, cap, d0, d1):
    u = (cap + d0) >> 1
    v = u if d1 < 0 else (cap + d1) >> 1
    while u > 0:
@NODE_U
        if v != u:
@NODE_V
        u >>= 1
        v >>= 1


def ff_resize(tv, tf, tmp, cap, slot0, span, newcap):
    n = 0
    for j in range(span):
        leaf = cap + ((slot0 + j) & (cap - 1))
        if tf[leaf] != 0:
            y = @L(tv, leaf)
            @S(tmp, n, y)
            n += 1
    for j in range(newcap, 2 * newcap):
        tf[j] = 0
    for j in range(n):
        y = @L(tmp, j)
        @S(tv, newcap + j, y)
        tf[newcap + j] = 1
    for v in range(newcap - 1, 0, -1):
@NODE_R
    return n


def ff_prefix(tv, tf, cap, i):
    v = cap + i
    acc = @L(tv, v)
    has = tf[v] != 0
    while v > 1:
        if v & 1:
            if tf[v - 1] != 0:
                w = v - 1
                if has:
                    acc = combine(@L(tv, w), acc)
                else:
                    acc = @L(tv, w)
                    has = True
        v >>= 1
    return acc


def ff_suffix(tv, tf, cap, j):
    v = cap + j
    acc = @L(tv, v)
    has = tf[v] != 0
    while v > 1:
        if not v & 1:
            if tf[v + 1] != 0:
                w = v + 1
                if has:
                    acc = combine(acc, @L(tv, w))
                else:
                    acc = @L(tv, w)
                    has = True
        v >>= 1
    return acc
'''.replace("@NODE_U", _node("u", " " * 8)).replace("@NODE_V", _node("v", " " * 12)).replace(
    "@NODE_R", _node("v", " " * 8))

_DIRTY = """
if d1 >= 0:
    ff_repair(tv, tf, fcap, d0, d1)
    d0 = SLOT
    d1 = -1
elif d0 >= 0:
    d1 = SLOT
else:
    d0 = SLOT
"""


def _dirty(slot: str) -> str:
    return _DIRTY.replace("SLOT", slot)


def _join(*parts: str) -> str:
    import textwrap

    return "\n".join(textwrap.dedent(p).strip("\n") for p in parts)


ALGORITHM = Algorithm(
    name="flatfat",
    ints=("fcap", "slot0", "span", "count", "d0", "d1", "resizes"),
    arrays=("tv", "tf", "tmp"),
    helpers=_HELPERS,
    helper_names=("ff_repair", "ff_resize", "ff_prefix", "ff_suffix"),
    inline=("ff_repair",),
    push=_join("""
        if span == fcap:
            if 4 * fcap > tf.shape[0]:  # never: the driver allocates for the most slices a window holds
                raise RuntimeError("flatfat: the tree outgrew its arrays")
            ff_resize(tv, tf, tmp, fcap, slot0, span, 2 * fcap)
            fcap = 2 * fcap
            slot0 = 0
            span = count
            d0 = -1
            d1 = -1
            resizes += 1
        slot = (slot0 + span) & (fcap - 1)
        @S(tv, fcap + slot, P)
        tf[fcap + slot] = 1
    """, _dirty("slot"), """
        span += 1
        count += 1
    """),
    pop=_join("""
        slot = slot0
        tf[fcap + slot] = 0
    """, _dirty("slot"), """
        count -= 1
        while span > 0 and tf[fcap + slot0] == 0:
            slot0 = (slot0 + 1) & (fcap - 1)
            span -= 1
        if count < fcap // 4 and fcap > 8:
            ff_resize(tv, tf, tmp, fcap, slot0, span, fcap // 2)
            fcap = fcap // 2
            slot0 = 0
            span = count
            d0 = -1
            d1 = -1
            resizes += 1
    """),
    query="""
        if d0 >= 0:
            ff_repair(tv, tf, fcap, d0, d1)
            d0 = -1
            d1 = -1
        if count == 0:
            RES = ident
        else:
            ffl = (slot0 + span - 1) & (fcap - 1)
            if slot0 <= ffl:
                RES = @L(tv, 1)
            else:
                RES = combine(ff_suffix(tv, tf, fcap, slot0), ff_prefix(tv, tf, fcap, ffl))
    """,
    reset="""
        fcap = 8
        slot0 = 0
        span = 0
        count = 0
        d0 = -1
        d1 = -1
        for jj in range(16):
            tf[jj] = 0
    """,
)
