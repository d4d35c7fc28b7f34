"""Two-Stacks (Tangwongsan et al.), the "lite" variant of :mod:`pba_runtime.algorithms.two_stacks`, compiled.

One ring of slice partials ``vals`` split into a front ``[tf, tb)``, whose ``aggs`` hold the suffix
aggregates, and a back ``[tb, te)`` with its running aggregate ``bagg``. A pop from an empty front
flips the back onto it (``te - tb`` combines, newest first): the O(window) spike of its latency.
"""

from __future__ import annotations

from .loop_template import Algorithm

__all__ = ["ALGORITHM"]

ALGORITHM = Algorithm(
    name="two_stacks",
    ints=("tf", "tb", "te", "flips"),
    parts=("bagg",),
    arrays=("vals", "aggs"),
    params=("tmask",),
    push="""
        @S(vals, te & tmask, P)
        if te == tb:
            bagg = P
        else:
            bagg = combine(bagg, P)
        te += 1
    """,
    pop="""
        if tf == tb:
            jx = te - 1
            acc = @L(vals, jx & tmask)
            @S(aggs, jx & tmask, acc)
            for jx in range(te - 2, tb - 1, -1):
                acc = combine(@L(vals, jx & tmask), acc)
                @S(aggs, jx & tmask, acc)
            tb = te
            bagg = ident
            flips += 1
        tf += 1
    """,
    query="""
        if tf == tb:
            RES = bagg
        else:
            fr = @L(aggs, tf & tmask)
            if tb == te:
                RES = fr
            else:
                RES = combine(fr, bagg)
    """,
    reset="""
        tf = 0
        tb = 0
        te = 0
        bagg = ident
    """,
)
