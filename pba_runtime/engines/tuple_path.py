"""The per-tuple engine of count windows with slide 1 (the paper's main experiment): push, pop one, query.

:func:`tuple_insert` is the merger's push, pop and query for one tuple with the calls between them
inlined (the call and the attribute reads ``PBA._push`` would repeat are a share of a tuple:
``docs/internals/code-map.md``, "PBA's structure"), and a window over three chunks merged from
``lcs (+) ca`` of the middle chunk computed once per front chunk (:func:`front_mid`). While the operator's
``_tuple_mode`` is set only ``_pushed``, ``_popped``, ``_csa`` and the chunk bookkeeping are kept up to
date; every other entry point calls :func:`leave_tuple_mode` first, which derives the slicing layer's
counters (``_n``, ``_back``, ``_front``, ``_next_k``, ``_emitted``). Each function takes the operator
(``op``, a :class:`~pba_runtime.algorithms.pba.PBA`) and is bound as one of its methods. Its reference
is the slicing layer's per-tuple path over ``PBA._push``, ``_pop`` and ``_query`` (``PBA._fast`` off).
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

__all__ = ["enter_tuple_mode", "leave_tuple_mode", "tuple_insert", "front_mid"]

#: the engine this one's results equal, bit for bit
reference = "the slicing layer's per-tuple path over PBA._push, _pop and _query (PBA._fast off)"


def enter_tuple_mode(op) -> None:
    """Start the per-tuple engine: its front chunk and the counters it derives the slicing layer's from."""
    f, b = op._popped, op._b
    op._front_base = f - f % b  # first slice of the front chunk
    op._front_lcs_rows = None  # the front chunk's lcs as rows, once resolved
    op._front_mid_rows = None  # lcs (+) ca of the one middle chunk, once a window spans three chunks
    op._tuple_w0 = max(0, op._pushed - op._r + 1)
    op._tuple_e0 = op._emitted
    op._tuple_mode = True


def leave_tuple_mode(op) -> None:
    """Stop it (if running): the slicing layer's counters derived from the merger's."""
    if not op._tuple_mode:
        return
    op._tuple_mode = False
    g, f = op._pushed, op._popped
    op._n = op._back = g
    op._front = f
    windows = max(0, g - op._r + 1)
    op._emitted = op._tuple_e0 + windows - op._tuple_w0
    if windows:
        op._next_k = g - op._r + 1


def tuple_insert(op, value: Any) -> list[tuple[int, Any]]:
    """Insert one value: push (``PBA._push``'s middle, inlined), pop one slice, query the window."""
    p = value if value.__class__ is float and op._float_passthrough else op.agg.lift(value)
    g = op._pushed
    b = op._b
    # push: _push's middle, inlined (see the module doc)
    i = g - op._open_base
    if i == b:
        csa = op._start_chunk(g, p)
        i = 0
    else:
        saa = op._open_rows
        w = op._width
        try:  # first: a partial the store refuses changes nothing
            if w:
                saa[i * w : i * w + w] = array("d", p)
            else:
                saa[i] = p
        except (TypeError, ValueError, OverflowError):
            op._store.refuse(p)
        csa = op._csa = op._combine(op._csa, p)
    if i == b - 1:
        op._end_chunk(csa)
    g += 1
    op._pushed = g
    k = g - op._r
    if k < 0:
        return []
    # pop one slice
    fb = op._front_base
    j = k - fb
    if j == b:  # the window left the front chunk
        op._store.drop(op._chunks.pop(fb // b, None))
        fb = op._front_base = fb + b
        op._front_lcs_rows = op._front_mid_rows = None
        j = 0
    op._popped = k
    # query
    ob = op._open_base
    if fb == ob:  # the window lies in one chunk
        res = op._query() if j else csa
    elif j and ob - fb == 2 * b and op._mid_combine is not None:
        # three parts: lcs[j] (+) ca_mid is one numpy combine per front chunk, not one per tuple
        fm = op._front_mid_rows
        if fm is None:
            fm = op._front_mid_rows = op._front_mid(fb // b)
        res = op._combine(fm[j], csa)
    else:
        if j:
            lcs = op._front_lcs_rows
            if lcs is None:
                lcs = op._front_lcs(fb // b)
            first = lcs[j]
        else:
            first = op._chunks[fb // b].ca
        if ob - fb > b:  # a middle chunk: its ca (several only for user chunk sizes below q/2)
            if ob - fb == 2 * b:
                first = op._combine(first, op._chunks[fb // b + 1].ca)
            else:
                for c in range(fb // b + 1, ob // b):
                    first = op._combine(first, op._chunks[c].ca)
        res = op._combine(first, csa)
    return [(g, res if op._lower_float else op._lower(res))]


def front_mid(op, c: int) -> array:
    """``lcs[j] (+) ca_{c+1}`` for every ``j`` of front chunk ``c``: the per-tuple combines, element for
    element, in one numpy call (no latency spike beside the lcs the chunk needed anyway)."""
    lcs = op._front_lcs_rows
    if lcs is None:
        lcs = op._front_lcs(c)
    out = array("d")
    out.frombytes(op._mid_combine(np.asarray(lcs, dtype=np.float64), op._chunks[c + 1].ca).tobytes())
    return out
