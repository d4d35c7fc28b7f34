"""The operator interface every algorithm implements, and the shared slicing layer.

:class:`WindowOperator` is the public face every algorithm implements (``insert``, ``insert_many``,
``flush``, ``snapshot``/``restore``, ``stats``, ``close``); :class:`SlicedAggregator` is the slicing layer
that turns tuples into slice partials and decides when each window is complete, so that an algorithm only
merges slices behind a small FIFO interface (``_push``, ``_pop``, ``_query``, ``_reset_merger``).
"""

from __future__ import annotations

import copy
import numbers
import sys
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..aggregations import Aggregation, as_float_array, get_aggregation
from ..kernels import Engine
from ..missing import fill_missing, refuse_missing
from ..windows import CountWindow, TimeWindow, validate_window

__all__ = ["Results", "WindowOperator", "SlicedAggregator", "SlideOneInsert", "UnsortedTimestampsError", "as_timestamps",
           "check_order", "check_timestamp", "no_timestamps", "validate_timestamps"]

#: What ``insert_many``, ``flush`` and ``sliding_aggregate`` return: the windows' int64 ends and their
#: results (float64, 2-D for vector results, int64 for count and argmax; a list for ``collect``).
Results = tuple[npt.NDArray[np.int64], npt.NDArray[Any] | list[Any]]

STATE_VERSION = 2  # 2: snapshots carry the aggregation's fingerprint


def check_timestamp(t: Any, window: TimeWindow) -> int:
    """One timestamp for a time window: an integer in ``window.timestamp_range``."""
    if t is None:
        raise ValueError("timestamp is required for time windows (TimeWindow); pass insert(value, timestamp=...)")
    if isinstance(t, bool) or not isinstance(t, numbers.Integral):
        raise TypeError(f"timestamp must be an integer (e.g. epoch milliseconds), got {type(t).__name__} {t!r}")
    t = int(t)
    lo, hi = window.timestamp_range
    if not lo <= t <= hi:
        _out_of_range(t, window)
    return t


class UnsortedTimestampsError(ValueError):
    """Timestamps that go back in time, given to a time window without a lateness buffer.

    ``detail`` says where (``"timestamps[5] = 3 < timestamps[4] = 7"``): a one-shot call
    (``sliding_aggregate``) words its own remedy around it.
    """

    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


def check_order(t: int, t_last: int | None) -> None:
    """Refuse a timestamp before the last one seen (time windows without a lateness buffer)."""
    if t_last is not None and t < t_last:
        raise UnsortedTimestampsError(
            f"timestamp {t} is before the last timestamp seen, {t_last}: time windows need "
            "non-decreasing timestamps (configure allowed_lateness to reorder late tuples)",
            f"timestamp {t} is before the one before it, {t_last}",
        )


def _out_of_range(t: int, window: TimeWindow) -> None:
    lo, hi = window.timestamp_range
    raise ValueError(
        f"timestamps must fit in int64 with the windows that hold them: {window!r} accepts timestamps in "
        f"[{lo}, {hi}], got {t}"
    )


def no_timestamps(timestamps: Any, window: Any) -> None:
    """Refuse timestamps given with a count window (which orders tuples by arrival)."""
    if timestamps is not None:
        raise ValueError(
            f"timestamps apply to time windows (TimeWindow) only; {window!r} orders tuples by arrival: "
            "drop timestamps=, or use a TimeWindow"
        )


def as_timestamps(timestamps: Any, n: int, window: TimeWindow) -> np.ndarray:
    """Integer timestamps, one per value, in any order, as int64 (each in ``window.timestamp_range``)."""
    if timestamps is None:
        raise ValueError("timestamps are required for time windows (TimeWindow); pass insert_many(values, timestamps=...)")
    ts = np.asarray(timestamps)
    if ts.ndim != 1 or len(ts) != n:
        raise ValueError(f"timestamps must be one-dimensional with one timestamp per value ({n}), got shape {ts.shape}")
    if not n:
        return np.zeros(0, dtype=np.int64)
    if ts.dtype.kind == "O" and all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in ts.tolist()):
        big = max(ts.tolist(), key=abs)  # Python integers beyond int64
        _out_of_range(int(big), window)
    if ts.dtype.kind not in "iu":
        raise TypeError(f"timestamps must be integers (e.g. epoch milliseconds), got dtype {ts.dtype}")
    lo, hi = window.timestamp_range
    t_min, t_max = int(ts.min()), int(ts.max())  # Python integers: uint64 beyond int64 stays exact
    if t_min < lo:
        _out_of_range(t_min, window)
    if t_max > hi:
        _out_of_range(t_max, window)
    return ts.astype(np.int64, copy=False)


def validate_timestamps(timestamps: Any, n: int, t_last: int | None, window: TimeWindow) -> np.ndarray:
    """Check a batch of timestamps: integers in range, one per value, non-decreasing and not before ``t_last``."""
    ts = as_timestamps(timestamps, n, window)
    if n:
        bad = np.flatnonzero(ts[1:] < ts[:-1])
        if len(bad):
            i = int(bad[0]) + 1
            detail = f"timestamps[{i}] = {ts[i]} < timestamps[{i - 1}] = {ts[i - 1]}"
            raise UnsortedTimestampsError(
                f"timestamps must be non-decreasing; {detail} (configure allowed_lateness to reorder late tuples)",
                detail)
        if t_last is not None and ts[0] < t_last:
            raise ValueError(
                f"timestamps must be non-decreasing; timestamps[0] = {ts[0]} is before the last timestamp seen, {t_last}"
            )
    return ts


class WindowOperator:
    """Base of every algorithm: the public per-tuple and batch API.

    Parameters
    ----------
    window : CountWindow or TimeWindow
    agg : str or Aggregation
    """

    name: ClassVar[str] = ""
    #: Capabilities the aggregation must declare, as (attribute, reason) pairs.
    requires: ClassVar[tuple[tuple[str, str], ...]] = ()
    # Set by a one-shot caller that closes the operator before it returns (``sliding_aggregate``):
    # the state may then keep views of the caller's input arrays instead of copies.
    _input_borrowed: bool = False
    #: The engine the batch path runs (:mod:`pba_runtime.kernels`); an operator with a compiled or
    #: numpy batch path chooses its own in ``__init__`` from its ``engine=`` option.
    engine: Engine = Engine("python")
    #: The engines its ``engine=`` option accepts besides ``"auto"`` (``create`` checks it).
    engines: ClassVar[tuple[str, ...]] = ("python",)

    def __init__(self, window: CountWindow | TimeWindow, agg: str | Aggregation):
        self.window = validate_window(window)
        self.agg = get_aggregation(agg)
        for attr, why in self.requires:
            if not getattr(self.agg, attr):
                raise ValueError(
                    f"algorithm {self.name!r} needs {why}; aggregation {self.agg.name!r} is not {attr}"
                )
        self._is_time = isinstance(self.window, TimeWindow)
        self._r = self.window.range
        self._s = self.window.slide
        self._q, self._m = divmod(self._r, self._s)
        self._off = self.window.offset if self._is_time else 0
        self._n = 0  # tuples seen
        self._t_last: int | None = None
        self._emitted = 0
        self._flushed = False
        self._closed = False

    # ------------------------------------------------------------------ public API
    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        """Insert one tuple; return ``(window_end, result)`` for each window it completes."""
        if self._flushed or self._closed:
            self._check_open()
        agg = self.agg
        if self._is_time:
            t = check_timestamp(timestamp, self.window)
            if self._t_last is not None and t < self._t_last:
                check_order(t, self._t_last)
            p = agg.lift(value, t) if agg.positional else agg.lift(value)
            return self._step(p, t)
        no_timestamps(timestamp, self.window)
        p = agg.lift(value, self._n) if agg.positional else agg.lift(value)
        return self._step(p, None)

    def insert_many(self, values: Any, timestamps: Any = None) -> Results:
        """Insert a batch; return ``(ends, results)`` for the windows it completes.

        ``ends`` is an int64 array; ``results`` a float64 array (2-D for vector
        results, int64 for count and argmax) or a list (``collect``). Any split
        of a stream into batches gives the per-tuple results.
        """
        values, ts = self._batch_input(values, timestamps)
        parts = self._lift_all(values, ts)
        ends: list[int] = []
        results: list[Any] = []
        step = self._step
        if ts is None:
            for p in parts:
                for e, res in step(p, None):
                    ends.append(e)
                    results.append(res)
        else:
            for p, t in zip(parts, ts.tolist()):
                for e, res in step(p, t):
                    ends.append(e)
                    results.append(res)
        return self._pack(ends, results)

    def _batch_input(self, values: Any, timestamps: Any) -> tuple[Any, np.ndarray | None]:
        """A batch's values (an iterator made a list) and its checked timestamps (``None`` on count windows);
        raises, with nothing changed, on a closed operator or timestamps the window refuses."""
        self._check_open()
        if not hasattr(values, "__len__"):
            values = list(values)
        if not self._is_time:
            no_timestamps(timestamps, self.window)
            return values, None
        return values, validate_timestamps(timestamps, len(values), self._t_last, self.window)

    def flush(self) -> Results:
        """End of stream: emit what it completes (time windows still holding tuples).

        Inserting after ``flush`` raises; a second ``flush`` returns nothing.
        """
        if self._flushed and not self._closed:
            return self._pack([], [])
        self._check_open()
        out = self._flush() if self._is_time else []
        self._flushed = True
        return self._pack([e for e, _ in out], [r for _, r in out])

    def _insert_and_flush(self, values: Any, timestamps: Any = None) -> Results:
        """``insert_many`` then ``flush``, as one ``(ends, results)`` (what ``sliding_aggregate``
        returns); an algorithm may do both in one pass."""
        ends, results = self.insert_many(values, timestamps)
        tail_ends, tail_results = self.flush()
        if len(tail_ends):
            ends = np.concatenate([ends, tail_ends])
            if isinstance(results, list):
                results = results + list(tail_results)
            else:
                results = np.concatenate([results, tail_results]) if len(results) else tail_results
        return ends, results

    def close(self) -> None:
        """Release workers and buffers. Idempotent."""
        self._closed = True

    def __enter__(self) -> WindowOperator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """Counters: tuples, windows, and the algorithm's own (chunks, lcs tasks, stalls...).

        ``step``: what runs ``insert``, ``"python"`` here (``"compiled"``: :mod:`.compiled_step`)."""
        return {"algorithm": self.name, "engine": self.engine.name, "step": "python", "tuples": self._n,
                "windows": self._emitted, "state_bytes": self.state_bytes()}

    def state_bytes(self) -> int:
        """Approximate bytes held by the window state."""
        return 0

    def snapshot(self) -> dict[str, Any]:
        """A picklable copy of the whole state, taken between two inserts."""
        # a copy: buffers the operator keeps mutating must not leak into the snapshot
        return {**self._snapshot_header(), "state": copy.deepcopy(self._get_state())}

    def _snapshot_header(self) -> dict[str, Any]:
        """What :meth:`_check_snapshot` checks: the version, algorithm, window and aggregation."""
        return {
            "version": STATE_VERSION,
            "algorithm": self.name,
            "window": self.window,
            "aggregation": self.agg.name,
            "aggregation_id": self.agg.fingerprint,  # restore refuses another aggregation of the same name
        }

    def restore(self, state: dict[str, Any]) -> WindowOperator:
        """Load a :meth:`snapshot` (of the same algorithm, window and aggregation); returns ``self``."""
        self._check_snapshot(state)
        if state.get("step") == "compiled":
            raise ValueError(
                f"state is a snapshot of {self.name!r}'s compiled step (its loop's arrays, "
                "pba_runtime.algorithms.compiled_step); restore it into an operator on the compiled step "
                f"(pr.create({self.name!r}, window, agg), engine 'auto' or 'compiled'), not engine='python'"
            )
        self._set_state(copy.deepcopy(state["state"]))
        return self

    def _check_snapshot(self, state: Any) -> None:
        """Refuse a snapshot of another version, algorithm, window or aggregation (``ValueError``)."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError("state must be a snapshot() of this pba_runtime version")
        if "reorder" in state:
            raise ValueError(
                "state was taken with allowed_lateness (it holds a reorder buffer); restore it into "
                "pr.create(..., allowed_lateness=...)"
            )
        for key, mine in (("algorithm", self.name), ("window", self.window), ("aggregation", self.agg.name)):
            if state.get(key) != mine:
                raise ValueError(f"state was taken with {key} {state.get(key)!r}, this operator has {mine!r}")
        if state.get("aggregation_id") != self.agg.fingerprint:
            raise ValueError(
                f"state was taken with another aggregation named {self.agg.name!r} (its lift, combine, lower, "
                "identity or capabilities differ); restore it into an operator with the same aggregation"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.window!r}, {self.agg.name!r})"

    # ------------------------------------------------------------------ in-order hook
    # What a driver that orders the tuples itself (the reorder buffer) uses instead of
    # insert: lift a batch once, validate it before anything changes, then feed the
    # partials in timestamp order.
    def lift_all(self, values: Any, timestamps: np.ndarray | None) -> list:
        """The lifted partials of a batch (``timestamps``: the positions of positional aggregations).

        Validates the whole batch and changes no state: a value this operator's
        ``insert`` would refuse raises here.
        """
        return self._lift_all(values, timestamps)

    def insert_lifted(self, partial: Any, timestamp: int | None) -> list[tuple[int, Any]]:
        """Advance by one tuple already lifted by :meth:`lift_all`; return the windows it completes.

        The caller guarantees what :meth:`insert` checks: the operator is open, the
        timestamp is valid (:func:`check_timestamp`) and not before the last one.
        """
        return self._step(partial, timestamp)

    def check_open(self) -> None:
        """Raise ``ValueError`` if the operator was closed or flushed."""
        self._check_open()

    @property
    def flushed(self) -> bool:
        """Whether :meth:`flush` ended the stream."""
        return self._flushed

    @property
    def emitted(self) -> int:
        """Windows emitted so far."""
        return self._emitted

    # ------------------------------------------------------------------ helpers
    _STATE_FIELDS: ClassVar[tuple[str, ...]] = ("_n", "_t_last", "_emitted", "_flushed")

    def _get_state(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self._STATE_FIELDS}

    def _set_state(self, st: dict[str, Any]) -> None:
        for f in self._STATE_FIELDS:
            setattr(self, f, st[f])

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.name} operator is closed")
        if self._flushed:
            raise ValueError(f"{self.name} operator was flushed (end of stream); create a new one to go on")

    def _lift_all(self, values: Any, ts: np.ndarray | None) -> list:
        """Lift a whole batch before touching any state, so bad input changes nothing."""
        agg = self.agg
        if agg.missing == "skip":  # nulls read as NaN, which the aggregation's lift skips
            values = fill_missing(values)
            if isinstance(values, np.ndarray):
                values = values.tolist()  # Python floats, as a list's values are lifted
        if agg.kernel is not None and agg.result != "object":
            as_float_array(values, agg_name=agg.name, missing=agg.missing)  # refuse strings & co. for the numeric built-ins
        elif agg.missing != "skip":
            refuse_missing(values)
        lift = agg.lift
        if agg.positional:
            pos = ts.tolist() if ts is not None else range(self._n, self._n + len(values))
            return [lift(v, p) for v, p in zip(values, pos)]
        return [lift(v) for v in values]

    def _pack(self, ends: list[int], results: list) -> Results:
        return np.asarray(ends, dtype=np.int64), self.agg.pack(results)

    def _step(self, p: Any, t: int | None) -> list[tuple[int, Any]]:
        """Advance by one lifted tuple."""
        raise NotImplementedError

    def _flush(self) -> list[tuple[int, Any]]:
        raise NotImplementedError


class SlicedAggregator(WindowOperator):
    """Slicing and window completion shared by every merging algorithm.

    Notes
    -----
    :class:`SlicedAggregator` turns tuples into slice aggregations (slice = slide,
    as in the paper's evaluation) and decides when each window is complete. The
    algorithms only merge slices, behind a tiny FIFO interface on slice partials:

    * ``_push(p)``: a slice closed; append its partial (newest).
    * ``_pop()``: evict the oldest slice.
    * ``_query()``: the aggregate of every slice held, oldest first.
    * ``_reset_merger()``: drop everything (a time gap longer than the range).

    Window ``k`` covers the whole slices ``k .. k+q-1`` plus, when ``m = r % s``
    is not zero, the *head* of slice ``k+q`` (its first ``m`` units). When window
    ``k`` completes the merger holds exactly slices ``k .. k+q-1`` after popping,
    so its result is ``lower(query() (+) head)``.
    """

    def __init__(self, window: CountWindow | TimeWindow, agg: str | Aggregation):
        super().__init__(window, agg)
        ident = self.agg.identity
        self._cur = ident  # partial of the current slice (time windows with m > 0: units >= m)
        self._head = ident  # time windows with m > 0: units < m of the current slice
        self._fill = 0  # count windows: tuples in the current slice
        self._slice: int | None = None  # time windows: current slice (None: nothing since the last reset)
        self._next_k = 0  # next window to emit
        self._front = 0  # absolute index of the oldest slice the merger holds
        self._back = 0  # one past the newest slice pushed

    _STATE_FIELDS = WindowOperator._STATE_FIELDS + (
        "_cur", "_head", "_fill", "_slice", "_next_k", "_front", "_back",
    )

    # ------------------------------------------------------------------ merger interface
    def _push(self, p: Any) -> None:
        raise NotImplementedError

    def _pop(self) -> None:
        raise NotImplementedError

    def _query(self) -> Any:
        raise NotImplementedError

    def _reset_merger(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ per tuple
    def _step(self, p: Any, t: int | None) -> list[tuple[int, Any]]:
        if t is not None:
            return self._step_time(p, t)
        s = self._s
        if s == 1:
            self._push(p)
            self._back += 1
        else:
            fill = self._fill
            self._cur = p if fill == 0 else self.agg.combine(self._cur, p)
            fill += 1
            if fill == s:
                self._push(self._cur)
                self._back += 1
                self._cur = self.agg.identity
                fill = 0
            self._fill = fill
        n = self._n = self._n + 1
        e = n - self._r
        if e < 0 or e % s:
            return []
        return [(n, self._emit(e // s, self._cur if self._m else None))]

    def _emit(self, k: int, head: Any) -> Any:
        """Result of window ``k``: pop to its first slice, query, add the head of slice ``k+q``."""
        while self._front < k:
            self._pop()
            self._front += 1
        res = self._query()
        if head is not None:
            res = self.agg.combine(res, head)
        self._next_k = k + 1
        self._emitted += 1
        return self.agg.lower(res)

    # ------------------------------------------------------------------ time windows
    def _window_end(self, k: int) -> int:
        return k * self._s + self._off + self._r

    def _start(self, t: int, g: int) -> None:
        """First tuple after a reset: the merger starts empty at slice ``g``."""
        self._reset_merger()
        self._slice = g
        self._front = self._back = g
        self._cur = self._head = self.agg.identity
        self._next_k = (t - self._off - self._r) // self._s + 1  # first window that holds t

    def _step_time(self, p: Any, t: int) -> list[tuple[int, Any]]:
        s, m = self._s, self._m
        g = (t - self._off) // s
        out: list[tuple[int, Any]] = []
        if self._slice is None:
            self._start(t, g)
        elif g != self._slice:
            self._advance(g, t, out)
        unit = t - self._off - g * s
        if m and self._next_k == g - self._q and unit >= m:
            # window g-q ends inside slice g, at or before t
            k = self._next_k
            out.append((self._window_end(k), self._emit(k, self._head)))
        if m and unit < m:
            self._head = self.agg.combine(self._head, p)
        else:
            self._cur = self.agg.combine(self._cur, p)
        self._t_last = t
        self._n += 1
        return out

    def _advance(self, g: int | None, t: int | None, out: list) -> None:
        """Close slices up to ``g`` emitting the windows that end by ``t`` (``g is None``: end of stream).

        Every pending window that starts at or before the last tuple's slice holds
        that tuple; once they are all out, no later window can reach an old slice,
        so the merger is reset instead of being fed empty slices across a gap.
        """
        q, m = self._q, self._m
        agg = self.agg
        last = S = self._slice
        while True:
            if m and self._next_k == S - q:
                k = self._next_k
                out.append((self._window_end(k), self._emit(k, self._head)))
            self._push(agg.combine(self._head, self._cur) if m else self._cur)
            self._back += 1
            self._head = self._cur = agg.identity
            S += 1
            if not m and self._next_k == S - q:
                k = self._next_k
                out.append((self._window_end(k), self._emit(k, None)))
            if self._next_k > last:
                if g is None:
                    self._reset_merger()
                    self._slice = None
                else:
                    self._start(t, g)
                return
            if S == g:
                self._slice = g
                return

    def _flush(self) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        if self._slice is not None:
            self._advance(None, None, out)
        return out


class SlideOneInsert:
    """A fused per-tuple ``insert`` for merging algorithms: count windows with slide 1.

    One slice per tuple, so the slicing layer's push, pop and query are inlined
    around the algorithm's own ``_push``/``_pop``/``_query``. The class sets
    ``_fast``, ``_passthrough`` and ``_lower_float`` (``ring.fast_path_flags``).
    Put it before :class:`SlicedAggregator` in the bases.
    """

    def insert(self, value: Any, timestamp: int | None = None) -> list[tuple[int, Any]]:
        if not self._fast or self._flushed or self._closed or timestamp is not None:
            return super().insert(value, timestamp)
        # count window, slide 1: push, pop, query (the same steps as the slicing layer)
        self._push(value if self._passthrough and value.__class__ is float else self.agg.lift(value))
        n = self._n = self._n + 1
        self._back = self._back + 1
        k = n - self._r
        if k < 0:
            return []
        while self._front < k:
            self._pop()
            self._front += 1
        res = self._query()
        self._next_k = k + 1
        self._emitted += 1
        return [(n, res if self._lower_float and res.__class__ is float else self.agg.lower(res))]


def sizeof(obj: Any) -> int:
    """Rough deep size of a state value (floats, tuples, lists, arrays)."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (list, tuple)):
        return sys.getsizeof(obj) + sum(sizeof(x) for x in obj[:64]) * max(1, len(obj)) // max(1, min(len(obj), 64))
    return sys.getsizeof(obj)
