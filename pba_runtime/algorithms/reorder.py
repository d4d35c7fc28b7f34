"""Bounded-lateness reorder buffer in front of a FIFO window operator.

``pr.create(name, TimeWindow(...), agg, allowed_lateness=L)`` wraps a FIFO algorithm (every one but
``fiba``, which needs non-decreasing timestamps) in a :class:`ReorderBuffer`: tuples wait until the
watermark (``max timestamp seen - L``) passes them and are released in order; a tuple that arrives below
the watermark is *late*, counted (``stats()["late"]``) and kept for the caller
(:meth:`ReorderBuffer.take_late`), never silently dropped. The windows are exactly those of the stream of
non-late tuples, stably sorted by timestamp.

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

from ..aggregations import BUILTIN_AGGREGATIONS, as_float_array
from ..windows import CountWindow, validate_window
from .base import WindowOperator, as_timestamps, check_timestamp, sizeof

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
    ValueError: allowed_lateness applies to time windows (TimeWindow) only; count windows are ordered by arrival, ...
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


# Timestamps (and the lateness) within this bound keep ``max - lateness`` inside int64;
# anything wider takes the per-tuple path, which computes with Python integers.
_SAFE = 2**62
_NO_INTS = np.zeros(0, dtype=np.int64)


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

    Notes
    -----
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

    :meth:`ReorderBuffer.insert_many` decides a whole batch at once with the
    per-tuple rule: the watermark a tuple meets is the running maximum of the
    timestamps before it (seeded with the buffer's) minus ``L``, so finding the late
    tuples is one vectorised comparison. For aggregations with a kernel (the numeric
    built-ins) the buffer keeps the waiting values in sorted arrays and releases
    everything at or below the batch's final watermark through *one*
    ``insert_many`` of the inner operator (vectorised in PBA and SBA). That feeds
    the inner operator the same tuples in the same order as releasing them tuple
    by tuple: a tuple released early is never after one released later, since the
    later one was not late, i.e. not below the watermark that released the
    earlier. The inner operator's windows depend only on the tuples it receives,
    not on how they are split into calls, so the ends, late tuples and buffer state
    are those of the per-tuple path, and so are the results (up to rounding for
    sum, mean and std, as for any ``insert_many``). Other aggregations (``collect``,
    custom ones without a kernel) go tuple by tuple: the inner operator's
    ``insert_many`` would do the same.

    Waiting tuples live in one of two forms, both ordered by ``(timestamp,
    arrival)``: a heap of lifted partials ``(timestamp, arrival, partial)``, filled
    tuple by tuple (:meth:`insert`, :meth:`restore`, batches of aggregations
    without a kernel), and sorted arrays of float values, filled by the vectorised
    :meth:`insert_many` so that they can go to the inner operator's
    ``insert_many``. :meth:`insert` first moves the arrays into the heap; a batch
    releases both, merged in order. Snapshots hold both forms as they are.

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
        self.engine = inner.engine
        self._inner = inner
        self._heap: list[tuple[int, int, Any]] = []  # (timestamp, arrival seq, lifted partial)
        self._seq = 0
        self._max: int | None = None  # largest timestamp seen
        self._late: list[tuple[Any, int]] = []
        self._nlate = 0
        # batches of a kernel aggregation go to the inner operator's insert_many, as floats
        self._vector = self.agg.kernel is not None
        # built-in kernels refuse exactly what the per-tuple lift refuses, once values are floats
        self._builtin = BUILTIN_AGGREGATIONS.get(self.agg.name) is self.agg
        self._clear_pending()

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
        t = check_timestamp(timestamp, self.window)
        agg = self.agg
        p = agg.lift(value, t) if agg.positional else agg.lift(value)  # bad values raise, late or not
        if len(self._pt):
            self._pending_to_heap()
        self._n += 1
        return self._offer(value, p, t)

    def insert_many(self, values: Any, timestamps: Any = None) -> tuple[np.ndarray, Any]:
        """Insert a batch in any timestamp order; return ``(ends, results)`` of the windows it completes.

        The semantics of :meth:`insert` applied to each tuple in turn (same late
        tuples, windows and buffer state), decided for the whole batch at once (see
        the module notes); the whole batch is validated before anything changes.

        Parameters
        ----------
        values : sequence
            One value per tuple.
        timestamps : array_like of int
            One timestamp per value, in any order.

        Returns
        -------
        ends : numpy.ndarray
            int64 ends of the windows completed, in order.
        results : numpy.ndarray or list
            Their results, packed as the inner operator's ``insert_many`` packs them.

        Examples
        --------
        >>> import pba_runtime as pr
        >>> op = pr.create("sba", pr.TimeWindow(range=10, slide=10), "sum", allowed_lateness=5)
        >>> ends, res = op.insert_many([1.0, 2.0, 4.0, 8.0, 16.0], [3, 12, 8, 21, 2])
        >>> ends.tolist(), res.tolist(), op.take_late()  # 2 < 21 - 5: late
        ([10], [5.0], [(16.0, 2)])
        >>> op.stats()["buffered"], op.watermark  # 21 waits: above the watermark 16
        (1, 16)
        """
        self._check_open()
        if not hasattr(values, "__len__"):
            values = list(values)
        n = len(values)
        ts = as_timestamps(timestamps, n, self.window)
        if self._vector:
            vals, parts = self._float_values(values, ts)
        else:
            vals, parts = None, self._inner.lift_all(values, ts)  # validates the whole batch first
        if not n:
            return self._pack([], [])
        if vals is None or not self._fits_int64(ts):
            if parts is None:
                parts = self._inner.lift_all(values, ts)
            return self._insert_each(values, parts, ts)
        return self._insert_batch(values, vals, ts)

    def flush(self) -> tuple[np.ndarray, Any]:
        """End of stream: release every buffered tuple, then flush the inner operator.

        The arrays of waiting values go to the inner operator in one ``insert_many``.
        """
        self._check_open()
        inner = self._inner
        inner.check_open()
        legacy = sorted(self._heap)  # (timestamp, seq) are unique: partials are never compared
        self._heap = []
        pt, ps, pv = self._pt, self._ps, self._pv
        self._clear_pending()
        pieces = self._release(legacy, pt, ps, pv)
        pieces.append(inner.flush())  # the inner operator's own end of stream (PBA's is vectorised)
        self._flushed = True
        self._emitted = inner.emitted
        return self._gather(pieces)

    def take_late(self) -> list[tuple[Any, int]]:
        """Return and clear the late tuples, as ``(value, timestamp)`` in arrival order."""
        late, self._late = self._late, []
        return late

    def stats(self) -> dict[str, Any]:
        st = self._inner.stats()
        st.update(
            received=self._n,
            late=self._nlate,
            buffered=len(self._heap) + len(self._pt),
            allowed_lateness=self._lateness,
            watermark=self.watermark,
            state_bytes=self.state_bytes(),
        )
        return st

    def state_bytes(self) -> int:
        pending = self._pt.nbytes + self._ps.nbytes + self._pv.nbytes if len(self._pt) else 0
        return self._inner.state_bytes() + (sizeof(self._heap) if self._heap else 0) + pending

    def snapshot(self) -> dict[str, Any]:
        """The inner operator's snapshot plus the buffer (key ``"reorder"``, its heap sorted)."""
        st = self._inner.snapshot()
        st["reorder"] = {
            "allowed_lateness": self._lateness,
            "heap": sorted(self._heap),
            # the waiting arrays as they are: they reach the inner operator through insert_many, and
            # lifting them into the heap would release them tuple by tuple after a restore, which
            # rounds float sums differently from the uninterrupted run
            "pending": (self._pt.copy(), self._ps.copy(), self._pv.copy()),
            "seq": self._seq,
            "max": self._max,
            "late": list(self._late),
            "nlate": self._nlate,
            "received": self._n,
        }
        return st

    def restore(self, state: dict[str, Any]) -> ReorderBuffer:
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
        self._pt, self._ps, self._pv = (a.copy() for a in rb["pending"])
        self._seq = rb["seq"]
        self._max = rb["max"]
        self._late = list(rb["late"])
        self._nlate = rb["nlate"]
        self._n = rb["received"]
        self._emitted = self._inner.emitted
        self._flushed = self._inner.flushed
        return self

    def close(self) -> None:
        if not self._closed:
            self._inner.close()
        super().close()

    def __repr__(self) -> str:
        return f"ReorderBuffer({self._inner!r}, allowed_lateness={self._lateness})"

    # ------------------------------------------------------------------ per tuple
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
            out = self._inner.insert_lifted(p, t)
        else:
            heapq.heappush(heap, (t, self._seq, p))
            out = []
            inner_step = self._inner.insert_lifted
            while heap and heap[0][0] <= w:
                tt, _, pp = heapq.heappop(heap)
                got = inner_step(pp, tt)
                if got:
                    out.extend(got)
        self._seq += 1
        if out:
            self._emitted = self._inner.emitted
        return out

    def _insert_each(self, values: Any, parts: list, ts: np.ndarray) -> tuple[np.ndarray, Any]:
        """The per-tuple path over a validated batch (``parts``: its lifted partials)."""
        if len(self._pt):
            self._pending_to_heap()
        raw = values.tolist() if isinstance(values, np.ndarray) else values
        out: list[tuple[int, Any]] = []
        for i, t in enumerate(ts.tolist()):
            self._n += 1
            got = self._offer(raw[i], parts[i], t)
            if got:
                out.extend(got)
        self._emitted = self._inner.emitted
        return self._pack([e for e, _ in out], [r for _, r in out])

    # ------------------------------------------------------------------ batch path
    def _clear_pending(self) -> None:
        """Empty the array form: timestamps, arrival seqs and float values, sorted by (timestamp, seq)."""
        self._pt = self._ps = _NO_INTS
        self._pv = np.zeros(0)

    def _float_values(self, values: Any, ts: np.ndarray) -> tuple[np.ndarray | None, list | None]:
        """Validate a batch for a kernel aggregation: ``(floats, partials or None)``.

        ``floats`` is ``None`` when the values are valid tuple by tuple but not as
        floats for the kernel: the per-tuple path then takes ``partials``. Raises
        the per-tuple path's error for a value it refuses, before any state changes.
        """
        agg = self.agg
        # a custom aggregation's own lift is the judge, as tuple by tuple
        parts = None if self._builtin else self._inner.lift_all(values, ts)
        try:
            vals = as_float_array(values, agg_name=agg.name, missing=agg.missing)
            agg.kernel.lift(vals, ts if agg.positional else None)  # what the inner's insert_many will do
        except Exception:
            if parts is None:
                parts = self._inner.lift_all(values, ts)  # the per-tuple path's error
            return None, parts  # valid tuple by tuple, not as floats: the per-tuple path takes it
        return vals, parts

    def _fits_int64(self, ts: np.ndarray) -> bool:
        """Whether ``timestamp - allowed_lateness`` cannot overflow int64 for this batch and the buffer."""
        mx = self._max
        if self._lateness >= _SAFE or int(ts[0]) <= -_SAFE:
            return False
        if mx is not None and not -_SAFE < mx < _SAFE:
            return False
        return not self._heap or self._heap[0][0] > -_SAFE

    def _insert_batch(self, values: Any, vals: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, Any]:
        """Vectorised :meth:`insert_many`: the per-tuple decisions for a whole validated batch."""
        L = self._lateness
        mx0 = self._max
        N = len(ts)
        # Tuple i meets the watermark max(buffer max, ts[:i]) - L. A late tuple is below
        # that max, so counting it in the running max changes nothing.
        if N < 2 or not (ts[1:] < ts[:-1]).any():
            # in order: no tuple is below one before it, only the buffer's max can make it
            # late, so the late tuples are a prefix
            mx1 = int(ts[-1]) if mx0 is None else max(mx0, int(ts[-1]))
            nlate = 0 if mx0 is None else int(np.searchsorted(ts, mx0 - L, side="left"))
            late = slice(0, nlate)
            nt, nv = ts[nlate:], vals[nlate:]
            in_order = True
        else:
            run = np.maximum.accumulate(ts)
            before = np.empty_like(ts)
            if mx0 is None:
                before[0] = ts[0]  # the first tuple ever is never late (L >= 0)
                before[1:] = run[:-1]
                mx1 = int(run[-1])
            else:
                before[0] = mx0
                np.maximum(run[:-1], mx0, out=before[1:])
                mx1 = max(mx0, int(run[-1]))
            late = np.flatnonzero(ts < before - L)
            nlate = len(late)
            keep = np.ones(N, dtype=bool)
            keep[late] = False
            nt, nv = (ts[keep], vals[keep]) if nlate else (ts, vals)
            in_order = False
        if nlate:
            lv = values[late].tolist() if isinstance(values, np.ndarray) else [
                values[i] for i in (range(nlate) if in_order else late.tolist())]
            self._late.extend(zip(lv, ts[late].tolist()))
            self._nlate += nlate
        k = N - nlate
        ns = np.arange(self._seq, self._seq + k, dtype=np.int64)  # seqs count the tuples kept
        self._seq += k
        if not in_order and k > 1 and (nt[1:] < nt[:-1]).any():
            order = np.argsort(nt, kind="stable")  # equal timestamps keep their arrival order
            nt, ns, nv = nt[order], ns[order], nv[order]
        # merge with the waiting arrays, whose seqs are all smaller
        pt = self._pt
        if not len(pt):
            mt, ms, mv = nt, ns, nv
        elif not k:
            mt, ms, mv = pt, self._ps, self._pv
        else:
            mt = np.concatenate([pt, nt])
            ms = np.concatenate([self._ps, ns])
            mv = np.concatenate([self._pv, nv])
            if nt[0] < pt[-1]:
                order = np.argsort(mt, kind="stable")  # ties: the waiting (older) tuple first
                mt, ms, mv = mt[order], ms[order], mv[order]
        self._max = mx1
        self._n += N
        w = mx1 - L
        cut = int(np.searchsorted(mt, w, side="right"))
        if cut < len(mt):  # copies: the caller may reuse its arrays
            self._pt, self._ps, self._pv = mt[cut:].copy(), ms[cut:].copy(), mv[cut:].copy()
        else:
            self._clear_pending()
        heap = self._heap
        legacy = []
        while heap and heap[0][0] <= w:
            legacy.append(heapq.heappop(heap))
        pieces = self._release(legacy, mt[:cut], ms[:cut], mv[:cut])
        self._emitted = self._inner.emitted
        return self._gather(pieces)

    def _release(self, legacy: list, mt: np.ndarray, ms: np.ndarray, mv: np.ndarray) -> list:
        """Feed the inner operator heap entries ``legacy`` and the arrays, merged by (timestamp, seq).

        Both are sorted. Without heap entries (the usual case) this is one
        ``insert_many``; returns the ``(ends, results)`` pieces in order.
        """
        inner = self._inner
        if not legacy:
            return [inner.insert_many(mv, mt)] if len(mt) else []
        pieces: list = []
        steps: list[tuple[int, Any]] = []
        pos = 0
        for t, s, p in legacy:
            lo = int(np.searchsorted(mt, t, side="left"))
            hi = int(np.searchsorted(mt, t, side="right"))
            j = lo + int(np.searchsorted(ms[lo:hi], s))  # seqs ascend within one timestamp
            if j > pos:
                if steps:
                    pieces.append(self._pack([e for e, _ in steps], [r for _, r in steps]))
                    steps = []
                pieces.append(inner.insert_many(mv[pos:j], mt[pos:j]))
                pos = j
            steps.extend(inner.insert_lifted(p, t))
        if steps:
            pieces.append(self._pack([e for e, _ in steps], [r for _, r in steps]))
        if pos < len(mt):
            pieces.append(inner.insert_many(mv[pos:], mt[pos:]))
        return pieces

    def _gather(self, pieces: list) -> tuple[np.ndarray, Any]:
        """Concatenate ``(ends, results)`` pieces."""
        pieces = [pc for pc in pieces if len(pc[0])]
        if not pieces:
            return self._pack([], [])
        if len(pieces) == 1:
            return pieces[0]
        return self._pack([e for pc in pieces for e in pc[0].tolist()], [r for pc in pieces for r in pc[1]])

    def _lifted_pending(self) -> list[tuple[int, int, Any]]:
        """The array form as heap entries ``(timestamp, seq, partial)``, sorted."""
        if not len(self._pt):
            return []
        lift = self.agg.lift
        ts, seqs, vals = self._pt.tolist(), self._ps.tolist(), self._pv.tolist()
        if self.agg.positional:
            return [(t, s, lift(v, t)) for t, s, v in zip(ts, seqs, vals)]
        return [(t, s, lift(v)) for t, s, v in zip(ts, seqs, vals)]

    def _pending_to_heap(self) -> None:
        entries = self._lifted_pending()
        self._clear_pending()
        if self._heap:
            self._heap.extend(entries)
            heapq.heapify(self._heap)
        else:
            self._heap = entries  # sorted: already a heap
