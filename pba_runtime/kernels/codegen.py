"""Generated numba loops over partials of any fixed width: the ``@L``/``@S`` load/store template.

A partial is a float (width 0) or a tuple of ``w`` floats. Loops over partials are written once as
Python source in which ``@L(arr, idx)`` loads the partial at ``idx`` of a float array (a float, or a
tuple of the row's fields) and ``@S(arr, idx, var)`` stores ``var`` there (on a line of its own).
:func:`expand` rewrites them for one width, so a loop is compiled once per width and the user's (or
a built-in's) ``lift``/``combine``/``lower`` are compiled as they are, inlined by LLVM.

Used by :mod:`pba_runtime.kernels.user` (the batch loops of a user aggregation) and by
:mod:`pba_runtime.kernels.stepwise` (the per-tuple engine).

Examples
--------
>>> print(expand("t = @L(a, i)\\n@S(b, j, t)", 2))
t = (a[i, 0], a[i, 1])
b[j, 0] = t[0]
b[j, 1] = t[1]
>>> print(expand("t = @L(a, i)\\n@S(b, j, t)", 0))
t = a[i]
b[j] = t
"""

from __future__ import annotations

import re

__all__ = ["expand"]

_LOAD = re.compile(r"@L\((\w+), ([^()]+?)\)")
_STORE = re.compile(r"^(\s*)@S\((\w+), ([^,]+), ([^\n]+?)\)$", re.M)


def expand(src: str, w: int) -> str:
    """``src`` with every ``@L``/``@S`` written out for partials of ``w`` floats (0: a scalar partial)."""

    def load(m: re.Match) -> str:
        arr, idx = m.group(1), m.group(2)
        if not w:
            return f"{arr}[{idx}]"
        return "(" + ", ".join(f"{arr}[{idx}, {k}]" for k in range(w)) + ("," if w == 1 else "") + ")"

    def store(m: re.Match) -> str:
        indent, arr, idx, var = m.groups()
        if not w:
            return f"{indent}{arr}[{idx}] = {var}"
        return "\n".join(f"{indent}{arr}[{idx}, {k}] = {var}[{k}]" for k in range(w))

    return _STORE.sub(store, _LOAD.sub(load, src))
