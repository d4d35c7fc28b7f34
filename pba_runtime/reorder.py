"""Bounded-lateness reorder buffer in front of a FIFO window operator.

The FIFO algorithms (everything but ``fiba``) need non-decreasing timestamps.
``pr.create(name, TimeWindow(...), agg, allowed_lateness=L)`` wraps them in a
:class:`ReorderBuffer`: tuples wait in a heap keyed by ``(timestamp, arrival)``;
the *watermark* is ``max timestamp seen - L``; tuples with a timestamp at or
below the watermark are released in order into the inner operator. A tuple
whose timestamp is below the watermark when it arrives can no longer be placed
in order: it is *late*. Late tuples are counted (``stats()["late"]``) and kept
for the caller (:meth:`ReorderBuffer.take_late`), never silently dropped.

The result is exactly the windows of the stream of non-late tuples, stably
sorted by timestamp (equal timestamps keep their arrival order). A window is
emitted when the inner operator receives a tuple at or past its end, so at
most ``L`` time units later than without the buffer, or at :meth:`flush`.

Examples
--------
>>> import pba_runtime as pr
>>> op = pr.create("sba", pr.TimeWindow(range=10, slide=10), "sum", allowed_lateness=5)
>>> op.insert(1.0, 3), op.insert(2.0, 12), op.insert(4.0, 8), op.insert(8.0, 21)
([], [], [], [(10, 5.0)])
>>> op.insert(16.0, 2)  # 2 < watermark 21 - 5: late
[]
>>> op.take_late(), op.stats()["late"]
([(16.0, 2)], 1)
>>> op.flush()[1].tolist()
[2.0, 8.0]
"""

from __future__ import annotations

import heapq
import numbers
from typing import Any

import numpy as np

from .algorithms.base import WindowOperator, _check_timestamp, sizeof
from .windows import CountWindow, validate_window

__all__ = ["ReorderBuffer", "check_allowed_lateness"]


def check_allowed_lateness(allowed_lateness: Any, window: Any) -> int:
    """Validate ``allowed_lateness`` for ``window``: an integer ``>= 0``, time windows only.

    Examples
    --------
    >>> from pba_runtime import CountWindow, TimeWindow
    >>> check_allowed_lateness(5, TimeWindow(range=10, slide=1))
    5
    >>> check_allowed_lateness(5, CountWindow(range=10, slide=1))
    Traceback (most recent call last):
    ...
    ValueError: allowed_lateness applies to time windows (TimeWindow) only; count windows are ordered by arrival, got CountWindow(range=10, slide=1)
    """
    window = validate_window(window)
    if isinstance(allowed_lateness, bool) or not isinstance(allowed_lateness, numbers.Integral):
        raise TypeError(
            f"allowed_lateness must be an integer >= 0 (time units, like the timestamps) or None, "
            f"got {type(allowed_lateness).__name__} {allowed_lateness!r}"
        )
    if allowed_lateness < 0:
        raise ValueError(f"allowed_lateness must be an integer >= 0 (time units, like the timestamps), got {allowed_lateness}")
    if isinstance(window, CountWindow):
        raise ValueError(
            "allowed_lateness applies to time windows (TimeWindow) only; count windows are ordered by arrival, "
            f"got {window!r}"
        )
    return int(allowed_lateness)


def _as_timestamps(timestamps: Any, n: int) -> np.ndarray:
    """Integer timestamps, one per value, in any order."""
    if timestamps is None:
        raise ValueError("timestamps are required for time windows (TimeWindow); pass insert_many(values, timestamps=...)")
    ts = np.asarray(timestamps)
    if ts.ndim != 1 or len(ts) != n:
        raise ValueError(f"timestamps must be one-dimensional with one timestamp per value ({n}), got shape {ts.shape}")
    if n and ts.dtype.kind not in "iu":
        raise TypeError(f"timestamps must be integers (e.g. epoch milliseconds), got dtype {ts.dtype}")
    return ts.astype(np.int64, copy=False)


class ReorderBuffer(WindowOperator):
    """A FIFO operator behind a bounded reorder buffer of ``allowed_lateness`` time units.

    Usually built by ``pr.create(..., allowed_lateness=L)``.

    Parameters
    ----------
    inner : WindowOperator
        A fresh operator over a :class:`~pba_runtime.TimeWindow`; it receives the
        tuples in timestamp order.
    allowed_lateness : int
        ``L >= 0``: how far behind the largest timestamp seen a tuple may arrive
        and still land in its windows.

    Examples
    --------
    >>> import pba_runtime as pr
    >>> inner = pr.create("recal", pr.TimeWindow(range=4, slide=2), "collect")
    >>> op = ReorderBuffer(inner, allowed_lateness=3)
    >>> ends, res = op.insert_many([10, 30, 20, 40], [1, 3, 2, 9])
    >>> ends.tolist(), res  # watermark 9 - 3 = 6: timestamps 1, 2, 3 released in order
    ([2], [[10]])
    >>> op.flush()[1]
    [[10, 20, 30], [20, 30], [40], [40]]
    """

    def __init__(self, inner: WindowOperator, allowed_lateness: int):
        if not isinstance(inner, WindowOperator):
            raise TypeError(f"inner must be a pba_runtime WindowOperator, got {type(inner).__name__}")
        if isinstance(inner, ReorderBuffer):
            raise TypeError("inner is already behind a reorder buffer")
        self._lateness = check_allowed_lateness(allowed_lateness, inner.window)
        super().__init__(inner.window, inner.agg)
        self.name = inner.name
        self._inner = inner
        self._heap: list[tuple[int, int, Any]] = []  # (timestamp, arrival seq, lifted partial)
        self._seq = 0
        self._max: int | None = None  # largest timestamp seen
        self._late: list[tuple[Any, int]] = []
        self._nlate = 0

    # ------------------------------------------------------------------ properties
    @property
    def inner(self) -> WindowOperator:
        """The wrapped FIFO operator."""
        return self._inner

    @property
    def allowed_lateness(self) -> int:
        return self._lateness

    @property
    def watermark(self) -> int | None:
        """``max timestamp seen - allowed_lateness`` (``None`` before the first tuple)."""
        return None if self._max is None else self._max - self._lateness

    # ------------------------------------------------------------------ public API
    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        """Insert one tuple; return the windows it completes. A late tuple is kept for :meth:`take_late`."""
        self._check_open()
        t = _check_timestamp(timestamp)
        agg = self.agg
        p = agg.lift(value, t) if agg.positional else agg.lift(value)  # bad values raise, late or not
        self._n += 1
        return self._offer(value, p, t)

    def insert_many(self, values: Any, timestamps: Any = None) -> tuple[np.ndarray, Any]:
        """Insert a batch in any timestamp order; return ``(ends, results)`` of the windows it completes."""
        self._check_open()
        if not hasattr(values, "__len__"):
            values = list(values)
        n = len(values)
        ts = _as_timestamps(timestamps, n)
        parts = self._inner._lift_all(values, ts)  # validates the whole batch before any state changes
        raw = values.tolist() if isinstance(values, np.ndarray) else values
        out: list[tuple[int, Any]] = []
        for i, t in enumerate(ts.tolist()):
            self._n += 1
            got = self._offer(raw[i], parts[i], t)
            if got:
                out.extend(got)
        self._emitted = self._inner._emitted
        return self._pack([e for e, _ in out], [r for _, r in out])

    def flush(self) -> tuple[np.ndarray, Any]:
        """End of stream: release every buffered tuple, then flush the inner operator."""
        self._check_open()
        inner = self._inner
        inner._check_open()
        out: list[tuple[int, Any]] = []
        heap = self._heap
        while heap:
            t, _, p = heapq.heappop(heap)
            out.extend(inner._step(p, t))
        out.extend(inner._flush())
        inner._flushed = True
        self._flushed = True
        self._emitted = inner._emitted
        return self._pack([e for e, _ in out], [r for _, r in out])

    def take_late(self) -> list[tuple[Any, int]]:
        """Return and clear the late tuples, as ``(value, timestamp)`` in arrival order."""
        late, self._late = self._late, []
        return late

    def stats(self) -> dict[str, Any]:
        st = self._inner.stats()
        st.update(
            received=self._n,
            late=self._nlate,
            buffered=len(self._heap),
            allowed_lateness=self._lateness,
            watermark=self.watermark,
            state_bytes=self.state_bytes(),
        )
        return st

    def state_bytes(self) -> int:
        return self._inner.state_bytes() + (sizeof(self._heap) if self._heap else 0)

    def snapshot(self) -> dict[str, Any]:
        """The inner operator's snapshot plus the buffer (key ``"reorder"``)."""
        st = self._inner.snapshot()
        st["reorder"] = {
            "allowed_lateness": self._lateness,
            "heap": list(self._heap),
            "seq": self._seq,
            "max": self._max,
            "late": list(self._late),
            "nlate": self._nlate,
            "received": self._n,
        }
        return st

    def restore(self, state: dict[str, Any]) -> "ReorderBuffer":
        """Load a :meth:`snapshot` taken with the same algorithm, window, aggregation and lateness."""
        if not isinstance(state, dict) or not isinstance(state.get("reorder"), dict):
            raise ValueError(
                "state was taken without allowed_lateness (no reorder buffer); restore it into an operator "
                "created without allowed_lateness"
            )
        rb = state["reorder"]
        if rb["allowed_lateness"] != self._lateness:
            raise ValueError(
                f"state was taken with allowed_lateness {rb['allowed_lateness']}, this operator has {self._lateness}"
            )
        self._inner.restore({k: v for k, v in state.items() if k != "reorder"})
        self._heap = list(rb["heap"])
        heapq.heapify(self._heap)
        self._seq = rb["seq"]
        self._max = rb["max"]
        self._late = list(rb["late"])
        self._nlate = rb["nlate"]
        self._n = rb["received"]
        self._emitted = self._inner._emitted
        self._flushed = self._inner._flushed
        return self

    def close(self) -> None:
        if not self._closed:
            self._inner.close()
        super().close()

    def __repr__(self) -> str:
        return f"ReorderBuffer({self._inner!r}, allowed_lateness={self._lateness})"

    # ------------------------------------------------------------------ internals
    def _offer(self, value: Any, p: Any, t: int) -> list[tuple[int, Any]]:
        mx = self._max
        L = self._lateness
        if mx is not None and t < mx - L:
            self._late.append((value, t))
            self._nlate += 1
            return []
        heap = self._heap
        if mx is None or t > mx:
            mx = self._max = t
        w = mx - L
        if not heap and t <= w:  # in order and nothing waiting: straight through
            out = self._inner._step(p, t)
        else:
            heapq.heappush(heap, (t, self._seq, p))
            out = []
            inner_step = self._inner._step
            while heap and heap[0][0] <= w:
                tt, _, pp = heapq.heappop(heap)
                got = inner_step(pp, tt)
                if got:
                    out.extend(got)
        self._seq += 1
        if out:
            self._emitted = self._inner._emitted
        return out
