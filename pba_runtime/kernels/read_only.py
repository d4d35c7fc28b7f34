"""Read-only views of the arrays a compiled kernel only reads: one machine-code specialisation, not two.

numba compiles a kernel once per argument *type*, and an array's type includes whether it is writable:
``Array(float64, 1, 'C', readonly=True)`` is another type than the writable one. Arrow hands out its buffers as
read-only arrays (``to_numpy`` without a copy, so the Spark adapter's pieces of a key), and ``np.frombuffer`` of
``bytes`` too, while numpy callers pass writable ones: a kernel called with both was compiled twice (a third
time when only its timestamps differed). The callers pass :func:`read_only` views of the inputs instead, so each
kernel has one type per input, whatever the caller's buffer is. A view costs no copy, and the machine code is
the same (the flag only forbids stores at typing time: a kernel that wrote an input would not compile, which is
a check too).

Examples
--------
>>> import numpy as np
>>> a = np.arange(3.0)
>>> v = read_only(a)
>>> v.flags.writeable, a.flags.writeable, v.base is a
(False, True, True)
>>> read_only(v) is v
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["read_only"]


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` itself if it is read-only, else a read-only view of it (no copy)."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v
