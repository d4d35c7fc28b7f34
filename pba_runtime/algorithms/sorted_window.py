"""The operator of order statistics: ``pr.create("auto", window, "median")``, per tuple and in batches.

A quantile is not a monoid, so it has no slices, chunks or partials: the operator keeps the values any
window still to come may hold, and when a batch completes windows it answers all of them in one call of
the sorted-window kernel (:mod:`pba_runtime.kernels.compiled.quantiles`) over that buffer, then drops the
values no later window holds. A count window of range ``r`` keeps at most ``r - 1 + slide`` values; a time
window the tuples of one range. Any split of the stream into batches gives the same results as one batch
(:func:`pba_runtime.sliding_aggregate`), and a snapshot holds the buffer and the counters.

With ``allowed_lateness=L`` (time windows) a tuple may come up to ``L`` behind the largest timestamp seen:
tuples wait, ordered by timestamp (ties: arrival), until the largest timestamp is ``L`` past them; a tuple
later than that is *late*, counted (``stats()["late"]``) and kept for :meth:`SortedWindow.take_late`, as
the reorder buffer of the other algorithms does.

Examples
--------
>>> import pba_runtime as pr
>>> op = pr.create("auto", pr.CountWindow(3), "median")
>>> op.insert(3.0), op.insert(1.0), op.insert(4.0), op.insert(1.0)
([], [], [(3, 3.0)], [(4, 1.0)])
>>> ends, res = op.insert_many([5.0, 9.0])
>>> ends.tolist(), res.tolist()
([5, 6], [4.0, 5.0])
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ..aggregations import as_float_array, check_min_periods
from ..missing import check_missing
from ..quantiles import Quantile, run_windows
from ..windows import CountWindow, TimeWindow, validate_window, window_spans
from .base import STATE_VERSION, Results, as_timestamps, check_order, check_timestamp, validate_timestamps

__all__ = ["SortedWindow"]


class SortedWindow:
    """Exact quantiles of each window, emitted as batches complete them.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    q : Quantile
        ``pr.quantile(...)`` or the median.
    missing : {"propagate", "skip"}
    min_periods : int
    allowed_lateness : int, optional
        Time windows: how far behind the largest timestamp seen a tuple may come (see the module).
    pool : WorkerPool, optional
        Whose worker answers half of a large batch's windows beside this thread (default: the shared pool).
    """

    name = "sorted_window"

    def __init__(self, window: CountWindow | TimeWindow, q: Quantile, *, missing: str = "propagate",
                 min_periods: int = 1, allowed_lateness: int | None = None, pool: Any = None):
        self.window = validate_window(window)
        self.q = q
        self.missing = check_missing(missing)
        self.min_periods = check_min_periods(min_periods) if missing == "skip" else 1
        self._is_time = isinstance(window, TimeWindow)
        self._v = np.zeros(0)  # the values a window to come may hold
        self._t = np.zeros(0, dtype=np.int64)  # their timestamps (time windows)
        self._base = 0  # the stream position of _v[0]
        self._n = 0  # tuples seen
        # the index of the next window to emit (k of k*slide + offset; time windows: none before the first tuple)
        self._next: int | None = None if self._is_time else 0
        self._t_last: int | None = None
        self._emitted = 0
        self._flushed = False
        self._closed = False
        self._pool = pool
        self._lateness = None
        if allowed_lateness is not None:
            from .reorder import check_allowed_lateness

            self._lateness = check_allowed_lateness(allowed_lateness, window)
        self._pv = np.zeros(0)  # tuples waiting for the largest timestamp to pass them by the lateness
        self._pt = np.zeros(0, dtype=np.int64)
        self._max: int | None = None
        self._late: list[tuple[Any, int]] = []
        self._nlate = 0

    # ------------------------------------------------------------------ the public API of an operator
    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        """Insert one tuple; return ``(window_end, result)`` for each window it completes."""
        if self._is_time:
            t = check_timestamp(timestamp, self.window)
            if self._lateness is None and self._t_last is not None and t < self._t_last:
                check_order(t, self._t_last)
            ends, res = self.insert_many([value], np.array([t], dtype=np.int64))
        else:
            ends, res = self.insert_many([value], timestamp)
        return list(zip(ends.tolist(), res.tolist()))

    def insert_many(self, values: Any, timestamps: Any = None) -> Results:
        """Insert a batch; return ``(ends, results)`` for the windows it completes (float64 results)."""
        self._check_open()
        v = as_float_array(values, agg_name=self.q.name, missing=self.missing)
        if self._is_time and self._lateness is not None:
            return self._reorder(v, as_timestamps(timestamps, len(v), self.window))
        return self._in_order(v, timestamps)

    def _in_order(self, v: np.ndarray, timestamps: Any) -> Results:
        if self._is_time:
            t = validate_timestamps(timestamps, len(v), self._t_last, self.window)
        elif timestamps is not None:
            raise ValueError("timestamps are for time windows; a CountWindow orders values by position")
        if not len(v):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        # an empty buffer takes the batch itself: _emit keeps only a copy of what windows to come hold
        self._v = np.concatenate([self._v, v]) if len(self._v) else v
        self._n += len(v)
        if self._is_time:
            self._t = np.concatenate([self._t, t]) if len(self._t) else t
            self._t_last = int(t[-1])
        return self._emit(final=False)

    def _reorder(self, v: np.ndarray, t: np.ndarray) -> Results:
        """Tuples of any order within the lateness: the late ones aside, the others released in timestamp order
        once the largest timestamp is the lateness past them."""
        if not len(v):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        prev = np.iinfo(np.int64).min if self._max is None else self._max
        top = np.maximum.accumulate(np.maximum(t, prev))
        late = t < top - self._lateness
        if late.any():
            self._late += list(zip(v[late].tolist(), t[late].tolist()))
            self._nlate += int(late.sum())
        self._max = int(top[-1])
        pv = np.concatenate([self._pv, v[~late]])
        pt = np.concatenate([self._pt, t[~late]])
        order = np.argsort(pt, kind="stable")  # ties keep arrival order
        pv, pt = pv[order], pt[order]
        cut = int(np.searchsorted(pt, self._max - self._lateness, side="right"))
        self._pv, self._pt = pv[cut:], pt[cut:]
        return self._in_order(pv[:cut], pt[:cut])

    def take_late(self) -> list[tuple[Any, int]]:
        """Return and clear the late tuples, as ``(value, timestamp)`` in arrival order."""
        late, self._late = self._late, []
        return late

    def flush(self) -> Results:
        """End of stream: emit the time windows still holding tuples. Inserting after it raises."""
        if self._flushed and not self._closed:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        self._check_open()
        head = None
        if len(self._pt):  # the tuples still waiting on the lateness
            head = self._in_order(self._pv, self._pt)
            self._pv, self._pt = np.zeros(0), np.zeros(0, dtype=np.int64)
        out = self._emit(final=True) if self._is_time else (np.zeros(0, dtype=np.int64), np.zeros(0))
        self._flushed = True
        if head is not None:
            out = (np.concatenate([head[0], out[0]]), np.concatenate([head[1], out[1]]))
        return out

    def _insert_and_flush(self, values: Any, timestamps: Any = None) -> Results:
        ends, res = self.insert_many(values, timestamps)
        e2, r2 = self.flush()
        return np.concatenate([ends, e2]), np.concatenate([res, r2])

    def close(self) -> None:
        self._closed = True
        self._v = np.zeros(0)
        self._t = np.zeros(0, dtype=np.int64)

    def __enter__(self) -> SortedWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def flushed(self) -> bool:
        return self._flushed

    @property
    def emitted(self) -> int:
        return self._emitted

    def stats(self) -> dict[str, Any]:
        st = {"algorithm": self.name, "engine": "compiled", "step": "batch", "tuples": self._n,
              "windows": self._emitted, "state_bytes": self.state_bytes()}
        if self._lateness is not None:
            st.update(late=self._nlate, buffered=len(self._pt), allowed_lateness=self._lateness)
        return st

    def state_bytes(self) -> int:
        return int(self._v.nbytes + self._t.nbytes + self._pv.nbytes + self._pt.nbytes)

    _FIELDS = ("_v", "_t", "_base", "_n", "_next", "_t_last", "_emitted", "_flushed", "_pv", "_pt", "_max", "_late",
               "_nlate")

    def snapshot(self) -> dict[str, Any]:
        """A picklable copy of the state, taken between two inserts."""
        return {"version": STATE_VERSION, "algorithm": self.name, "window": self.window, "aggregation": self.q,
                "missing": (self.missing, self.min_periods), "allowed_lateness": self._lateness,
                "state": copy.deepcopy({f: getattr(self, f) for f in self._FIELDS})}

    def restore(self, state: dict[str, Any]) -> SortedWindow:
        """Load a :meth:`snapshot` of the same window, quantile and missing policy; returns ``self``."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError("state must be a snapshot() of this pba_runtime version")
        for key, mine in (("algorithm", self.name), ("window", self.window), ("aggregation", self.q),
                          ("missing", (self.missing, self.min_periods)), ("allowed_lateness", self._lateness)):
            if state.get(key) != mine:
                raise ValueError(f"state was taken with {key} {state.get(key)!r}, this operator has {mine!r}")
        for f, x in copy.deepcopy(state["state"]).items():
            setattr(self, f, x)
        return self

    def __repr__(self) -> str:
        return f"SortedWindow({self.window!r}, {self.q.name!r})"

    # ------------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.name} operator is closed")
        if self._flushed:
            raise ValueError(f"{self.name} operator was flushed (end of stream); create a new one to go on")

    def _emit(self, final: bool) -> Results:
        """Answer the windows complete now (all that hold tuples at the end), then drop what none to come holds."""
        r, s = int(self.window.range), int(self.window.slide)
        if self._is_time:
            off = int(self.window.offset)
            ends, S, E = window_spans(self.window, len(self._v), self._t)
            keep = np.ones(len(ends), dtype=bool) if self._next is None else (ends - off - r) // s >= self._next
            if not final:  # complete: a tuple at or after its end has come
                keep &= ends <= self._t_last
            ends, S, E = ends[keep], S[keep], E[keep]
            nxt = self._next
            if not final:
                done = (self._t_last - off - r) // s + 1  # every window before this one has ended
                nxt = done if nxt is None else max(nxt, done)
        else:
            last = (self._n - r) // s  # the last full window's index
            S = np.arange(self._next, last + 1, dtype=np.int64) * s - self._base
            E = S + r
            ends = E + self._base
            nxt = max(self._next, last + 1)
        out = run_windows(self._v, S.astype(np.int64, copy=False), E.astype(np.int64, copy=False), self.q,
                          self.missing == "skip",
                          self.min_periods, self._pool)
        self._next = nxt if nxt is None else int(nxt)
        self._emitted += len(ends)
        # drop the values before the next window's start
        if self._is_time and self._next is not None:
            start = self._next * s + int(self.window.offset)
            cut = int(np.searchsorted(self._t, start, side="left"))
            self._t = self._t[cut:].copy()
        elif self._is_time:
            cut = 0
        else:
            cut = min(max(self._next * s - self._base, 0), len(self._v))
            self._base += cut
        self._v = self._v[cut:].copy()
        return ends.astype(np.int64, copy=False), out
