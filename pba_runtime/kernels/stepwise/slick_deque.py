"""SlickDeque (Shein et al., EDBT'18), the non-invertible variant of :mod:`pba_runtime.algorithms.slick_deque`, compiled.

For a selective aggregation (``combine`` returns one of its operands: max, min, argmax) the deque
``dv``/``di`` (partials and slice numbers, ring positions ``[dh, dt)``) keeps the slices that can still
be a window's answer, oldest first: a push drops from the back every slice the new one beats
(``combine(back, new)`` is not ``back``), a pop drops the front if it is the slice leaving, and the
query is the front, without a combine.
"""

from __future__ import annotations

from .loop_template import Algorithm

__all__ = ["ALGORITHM", "same_source"]


def same_source(w: int) -> str:
    """``kept(a, c)``: whether ``c`` (``combine(a, b)``) is ``a`` itself, NaN matching NaN."""
    if not w:
        return "def kept(a, c):\n    return a == c or (a != a and c != c)\n"
    terms = " and ".join(f"(a[{k}] == c[{k}] or (a[{k}] != a[{k}] and c[{k}] != c[{k}]))" for k in range(w))
    return f"def kept(a, c):\n    return {terms}\n"


ALGORITHM = Algorithm(
    name="slick_deque",
    ints=("dh", "dt", "pushed", "popped"),
    arrays=("dv", "di"),
    params=("dmask",),
    helper_names=("kept",),
    width_helpers=same_source,
    push="""
        while dt > dh:
            dl = (dt - 1) & dmask
            bk = @L(dv, dl)
            if kept(bk, combine(bk, P)):
                break
            dt -= 1
        @S(dv, dt & dmask, P)
        di[dt & dmask] = pushed
        dt += 1
        pushed += 1
    """,
    pop="""
        if dh < dt and di[dh & dmask] == popped:
            dh += 1
        popped += 1
    """,
    query="""
        if dh < dt:
            RES = @L(dv, dh & dmask)
        else:
            RES = ident
    """,
    reset="""
        dh = 0
        dt = 0
        pushed = 0
        popped = 0
    """,
)
