"""Recal: recompute every window from its raw tuples (the reference).

It shares no slicing code with the other algorithms on purpose: it keeps the
lifted tuples of the last ``range`` units and folds a window's tuples left to
right when the window completes, so it checks the slicing layer as well as
the merging algorithms. ``O(r)`` per window.

Examples
--------
>>> from pba_runtime import CountWindow
>>> op = Recal(CountWindow(range=3, slide=1), "sum")
>>> [op.insert(v) for v in (1, 2, 3, 4)]
[[], [], [(3, 6.0)], [(4, 9.0)]]
"""

from __future__ import annotations

from collections import deque
from functools import reduce
from typing import Any

from .base import WindowOperator, sizeof

_NO_TUPLE = object()  # a time window holding no tuple (a result may be None: collect under missing="skip")


class Recal(WindowOperator):
    name = "recal"

    def __init__(self, window, agg):
        super().__init__(window, agg)
        self._buf: deque = deque()  # (position or timestamp, partial)
        self._next_k: int | None = None

    _STATE_FIELDS = WindowOperator._STATE_FIELDS + ("_buf", "_next_k")

    def _fold(self, lo: float, hi: float) -> Any:
        parts = [p for x, p in self._buf if lo <= x < hi]
        if not parts:
            return _NO_TUPLE
        self._emitted += 1
        return self.agg.lower(reduce(self.agg.combine, parts))

    def _step(self, p, t):
        s, r, off = self._s, self._r, self._off
        if t is None:  # count window: position n
            n = self._n
            self._buf.append((n, p))
            if len(self._buf) > r:
                self._buf.popleft()
            self._n = n + 1
            e = n + 1 - r
            if e < 0 or e % s:
                return []
            return [(n + 1, self._fold(e, n + 1))]
        out = []
        if self._t_last is not None:
            k = self._next_k
            while k * s + off + r <= t and k * s + off <= self._t_last:
                res = self._fold(k * s + off, k * s + off + r)
                if res is not _NO_TUPLE:
                    out.append((k * s + off + r, res))
                k += 1
            self._next_k = max(k, (t - off - r) // s + 1)
        else:
            self._next_k = (t - off - r) // s + 1
        start = self._next_k * s + off
        while self._buf and self._buf[0][0] < start:
            self._buf.popleft()
        self._buf.append((t, p))
        self._t_last = t
        self._n += 1
        return out

    def _flush(self):
        out = []
        if self._t_last is None:
            return out
        s, r, off = self._s, self._r, self._off
        k = self._next_k
        while k * s + off <= self._t_last:
            res = self._fold(k * s + off, k * s + off + r)
            if res is not _NO_TUPLE:
                out.append((k * s + off + r, res))
            k += 1
        self._next_k = k
        self._buf.clear()
        return out

    def state_bytes(self) -> int:
        return sizeof(list(self._buf))
