"""DABA (Tangwongsan et al., DEBS'17), :mod:`pba_runtime.algorithms.daba` compiled.

Two parallel rings ``vals`` (slice partials) and ``aggs`` (partial aggregates) indexed by absolute
positions with the six pointers ``F <= L <= R <= A <= B <= E``; every push and pop ends with
``fixup``, one step of the incremental reversal of the back into the front (singleton, flip, shift,
shrink), so an insert makes at most 4 combines, an evict 3 and a query 1, worst case: no flip spike,
unlike Two-Stacks. The same steps, in the same order, as the Python algorithm: the same bits.
"""

from __future__ import annotations

from .loop_template import Algorithm

__all__ = ["ALGORITHM"]

_FIXUP = """
if F == B:
    L = E
    R = E
    A = E
    B = E
else:
    if L == B:
        flips += 1
        L = F
        A = E
        B = E
    if L == R:
        A += 1
        R += 1
        L += 1
    else:
        jl = L & dmask
        ja = (A - 1) & dmask
        acc = combine(@L(aggs, jl), @L(aggs, ja))
        if A != B:
            sa = @L(aggs, A & dmask)
            acc = combine(acc, sa)
            @S(aggs, jl, acc)
            acc = combine(@L(vals, ja), sa)
            @S(aggs, ja, acc)
        else:
            @S(aggs, jl, acc)
            acc = @L(vals, ja)
            @S(aggs, ja, acc)
        L += 1
        A -= 1
"""


def _with_fixup(code: str) -> str:
    import textwrap

    return textwrap.dedent(code).strip("\n") + "\n" + _FIXUP.strip("\n")


ALGORITHM = Algorithm(
    name="daba",
    ints=("F", "L", "R", "A", "B", "E", "flips"),
    arrays=("vals", "aggs"),
    params=("dmask",),
    push=_with_fixup("""
        @S(vals, E & dmask, P)
        if B == E:
            @S(aggs, E & dmask, P)
        else:
            je = (E - 1) & dmask
            acc = combine(@L(aggs, je), P)
            @S(aggs, E & dmask, acc)
        E += 1
    """),
    pop=_with_fixup("""
        F += 1
    """),
    query="""
        if F == B:
            if B != E:
                je = (E - 1) & dmask
                RES = @L(aggs, je)
            else:
                RES = ident
        elif B == E:
            RES = @L(aggs, F & dmask)
        else:
            je = (E - 1) & dmask
            RES = combine(@L(aggs, F & dmask), @L(aggs, je))
    """,
    reset="""
        F = 0
        L = 0
        R = 0
        A = 0
        B = 0
        E = 0
    """,
)
