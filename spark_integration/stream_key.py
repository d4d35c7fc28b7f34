"""One key's step in a micro-batch: new rows (or a fired timer) in, windows and late rows out (no Spark needed).

What :class:`spark_integration.streaming.PBAProcessor` runs for each key it is
called with. The state store is reached through a :class:`StateAccess` (Spark's
``MapState`` and timers in the processor; a dict in the tests), with
the layout of :mod:`spark_integration.stream_state`.

**Count windows.** A micro-batch's rows of the key are ordered by the order
column (stable); a row ordered before the last row the key already consumed is
*late* (counted, and returned when asked) and takes no position; the others
are fed to the operator and every window they complete is emitted at once.

**Time windows** (event time, the order column in milliseconds). ``wm`` is
Spark's watermark for the micro-batch. A row at or behind it (``t <= wm``, what
Spark's own stateful operators drop) is *late*; the others wait in the header
until the watermark passes them, then are fed in timestamp order, so the
operator always sees non-decreasing timestamps. A window is emitted once the
watermark reaches its end (``end <= wm``), as Spark's ``window()`` in append
mode: the operator emits a window when a newer row arrives; a window whose end
the watermark passed before the key had a newer row is computed by a copy of the
operator, flushed (:meth:`KeyWindows._flushed_until`). An event-time timer at the
next window end to come brings the key back when no row does. Before the first
watermark (Spark's is 0 until then) rows only wait.

Examples
--------
>>> import numpy as np, pba_runtime as pr
>>> step = KeyWindows(StepConfig(pr.CountWindow(range=2, slide=1), "sum"))
>>> st = DictState()
>>> out = step.process(st, "k", np.array([3, 1, 2]), np.array([30.0, 10.0, 20.0]), None)
>>> out.ends.tolist(), out.results.tolist()
([2, 3], [30.0, 50.0])
>>> out = step.process(st, "k", np.array([2, 4]), np.array([99.0, 40.0]), None)  # 2 is behind 3: late
>>> out.ends.tolist(), out.results.tolist(), out.late_order.tolist()
([4], [70.0], [2])
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import pba_runtime as pr
from pba_runtime.host import KeyedHost
from pba_runtime.quantiles import as_quantile

from .stream_state import NO_TIME, Header, OperatorCache, pack_rows, unpack_rows

__all__ = ["DictState", "KeyOutput", "KeyWindows", "StateAccess", "StepConfig"]


class StateAccess:
    """What a key's step needs of the state store (for the current key); see :class:`DictState`."""

    def get_header(self) -> bytes | None:  # pragma: no cover - interface
        raise NotImplementedError

    def put_header(self, blob: bytes) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def chunks(self) -> Iterator[tuple[int, bytes]]:  # pragma: no cover - interface
        raise NotImplementedError

    def put_chunk(self, cid: int, blob: bytes) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def remove_chunk(self, cid: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def register_timer(self, t: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def delete_timer(self, t: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class DictState(StateAccess):
    """A :class:`StateAccess` over dicts (one key): for tests, and to read what a step stores.

    ``calls`` counts the state calls a step made, by kind.
    """

    def __init__(self) -> None:
        self.header: bytes | None = None
        self.chunk_map: dict[int, bytes] = {}
        self.timers: set[int] = set()
        self.calls: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1

    def get_header(self) -> bytes | None:
        self._count("get_header")
        return self.header

    def put_header(self, blob: bytes) -> None:
        self._count("put_header")
        self.header = blob

    def chunks(self) -> Iterator[tuple[int, bytes]]:
        self._count("chunks")
        return iter(list(self.chunk_map.items()))

    def put_chunk(self, cid: int, blob: bytes) -> None:
        self._count("put_chunk")
        self.chunk_map[cid] = blob

    def remove_chunk(self, cid: int) -> None:
        self._count("remove_chunk")
        self.chunk_map.pop(cid, None)

    def register_timer(self, t: int) -> None:
        self._count("register_timer")
        self.timers.add(t)

    def delete_timer(self, t: int) -> None:
        self._count("delete_timer")
        self.timers.discard(t)


@dataclass(frozen=True)
class StepConfig:
    """What a key's step is configured with (frozen, picklable).

    Parameters
    ----------
    window, agg, algorithm, engine, min_slices, cores
        As for :class:`pba_runtime.host.HostSpec` (through
        :func:`spark_integration.python_worker.key_host`).
    chunk_rows : int
        Rows per sealed chunk of the tail.
    cache_keys : int
        Operators a Python worker keeps between micro-batches (per query).
    preaggregate : bool
        Time windows of ``max``, ``min``, ``sum``, ``count``, ``argmax`` (what the
        aggregation declares): rows are folded per sub-slice before the operator
        and the tail (:data:`PREAGGREGATED`).
    namespace : str
        Names one query's operators in the worker's cache.
    missing : {"propagate", "skip"}
        ``"skip"``: NaN values are not values (the operator runs
        :func:`pba_runtime.aggregations.skipping.skip_missing` of ``agg``; no pre-aggregation).
    min_periods : int
        ``missing="skip"``: fewest values a result needs (else NaN).
    """

    window: Any
    agg: Any
    algorithm: str = "auto"
    engine: str = "auto"
    min_slices: int | None = None
    cores: int | None = None
    chunk_rows: int = 4096
    cache_keys: int = 10_000
    namespace: str = ""
    preaggregate: bool = True
    missing: str = "propagate"
    min_periods: int = 1


@dataclass
class KeyOutput:
    """What one step of one key gives: windows (``ends``, ``results`` pieces) and late rows."""

    ends: np.ndarray
    results: Any
    late_order: np.ndarray
    late_value: np.ndarray
    algorithm: str = ""
    rows: int = 0
    rebuilt: bool = False
    parts: list = field(default_factory=list, repr=False)


@dataclass
class _Live:
    """An operator between micro-batches: the host's entry and, for count windows, its first position."""

    hosted: Any
    base: int = 0


_caches: dict[str, OperatorCache] = {}

#: Time windows: what a key's rows are folded into per *sub-slice* (a slide, cut at ``range % slide``: every
#: window boundary is a sub-slice boundary, so the windows are the same), by what the aggregation declares
#: (``Aggregation.preaggregate``), and the aggregation the operator then runs over the partials. A sub-slice
#: fed in two micro-batches gives two partials (combined by the operator). ``mean`` would need two operators.
PREAGGREGATED = {"max": "max", "min": "min", "sum": "sum", "argmax": "argmax", "count": "sum"}


def _close_live(live: _Live) -> None:
    live.hosted.op.close()


#: Queries whose operators a Python worker keeps at once (a new one evicts the oldest: a stopped query's
#: operators would otherwise stay in a long-lived worker).
CACHED_QUERIES = 4


def worker_cache(namespace: str, capacity: int) -> OperatorCache:
    """This Python worker's operator cache of one query (``namespace``)."""
    cache = _caches.get(namespace)
    if cache is None:
        while len(_caches) >= CACHED_QUERIES:
            _caches.pop(next(iter(_caches))).clear()
        cache = _caches[namespace] = OperatorCache(capacity, on_evict=_close_live)
    return cache


class KeyWindows:
    """The per-key step of a streaming sliding-window aggregation (see the module docstring).

    Parameters
    ----------
    cfg : StepConfig
    host : KeyedHost, optional
        Opens the operators (validation, algorithm choice, pool); default
        :func:`spark_integration.python_worker.key_host` of ``cfg``.
    """

    def __init__(self, cfg: StepConfig, host: KeyedHost | None = None):
        from . import python_worker as rt

        self.cfg = cfg
        q = as_quantile(cfg.agg)  # an order statistic: the sorted-window operator, fed the rows themselves
        self.agg = q if q is not None else pr.get_aggregation(cfg.agg)
        self.is_time = isinstance(cfg.window, pr.TimeWindow)
        kind = self.agg.preaggregate
        skip = cfg.missing == "skip"
        self.pre = kind if self.is_time and cfg.preaggregate and kind in PREAGGREGATED and not skip else None
        op_agg = cfg.agg if self.pre is None else PREAGGREGATED[kind]
        if skip and q is not None:
            op_agg = q.skipping(cfg.min_periods)
        elif skip:
            from pba_runtime.aggregations.skipping import skip_missing

            op_agg = skip_missing(cfg.agg, cfg.min_periods)
        self.host = host if host is not None else rt.key_host(
            cfg.algorithm, cfg.window, op_agg, cores=cfg.cores, min_slices=cfg.min_slices, engine=cfg.engine)
        self.window = self.host.window
        # a count window's operator is rebuilt from its tail at a later position: a position result
        # (argmax, argmin) is shifted back; another positional aggregation would see wrong positions
        self.shift_results = (not self.is_time) and self.agg.positional
        if self.shift_results and not self.agg.compiled.position_result:
            raise ValueError(f"aggregation {self.agg.name!r} is positional (its lift takes the position): a "
                             "streaming count window supports only the built-in 'argmax' and 'argmin' among those")
        self.cache = worker_cache(cfg.namespace, cfg.cache_keys)
        self.C = int(cfg.chunk_rows)

    # ------------------------------------------------------------------ one key
    def process(self, st: StateAccess, key: Any, order: np.ndarray, values: np.ndarray, wm: int | None,
                fired: int | None = None, released: bool = False) -> KeyOutput:
        """Feed one key's new rows (``order`` int64, ``values`` float64; both may be empty) at watermark ``wm``.

        ``wm``: the micro-batch's event-time watermark in ms (time windows; ``None`` or ``<= 0``: none
        yet). ``fired``: the expiry of the event-time timer that brought the key here, if one did.
        ``released`` (time windows): the rows are the caller's, held until ``wm`` passed them (a query's
        rows, kept once for all its outputs): none is late, and they are fed at once.
        """
        hdr = Header.from_blob(st.get_header())
        live = self.cache.take(key, hdr.token)
        rebuilt = live is None
        if live is None:
            live = self._rebuild(st, hdr)
        if fired is not None and hdr.timer == fired:
            hdr.timer = NO_TIME  # a fired timer is gone
        order = np.asarray(order, np.int64)
        values = np.asarray(values, np.float64)
        try:
            if self.is_time:
                out = self._time_step(st, hdr, live, order, values, wm if wm is not None and wm > 0 else None,
                                      released)
            else:
                out = self._count_step(st, hdr, live, order, values)
        except BaseException:
            live.hosted.op.close()
            raise
        st.put_header(hdr.to_blob())
        self.cache.put(key, hdr.token, live)
        out.algorithm = live.hosted.algorithm
        out.rebuilt = rebuilt
        if out.parts:
            if all(isinstance(p, np.ndarray) for p in out.parts):
                out.results = np.concatenate(out.parts)
            else:
                out.results = [x for p in out.parts for x in p]
        else:
            out.results = np.empty(0)
        return out

    # ------------------------------------------------------------------ count windows
    def _count_tail_start(self, n: int) -> int:
        """The first position a window not yet emitted covers (``n`` rows consumed)."""
        r, s = self.window.range, self.window.slide
        return ((n - r) // s + 1) * s if n >= r else 0

    def _count_step(self, st: StateAccess, hdr: Header, live: _Live, order: np.ndarray,
                    values: np.ndarray) -> KeyOutput:
        idx = np.argsort(order, kind="stable")
        order, values = order[idx], values[idx]
        late = order < hdr.last if hdr.last != NO_TIME else np.zeros(len(order), bool)
        out = self._late_split(hdr, order, values, late)
        if late.any():
            order, values = order[~late], values[~late]
        if len(values):
            ends, res = live.hosted.op.insert_many(values)
            if len(ends):
                ends = ends + live.base
                if self.shift_results:
                    res = res + live.base
                out.ends, out.parts = ends, [res]
            pos = np.arange(hdr.n, hdr.n + len(values), dtype=np.int64)  # the tail holds positions
            keep = pos >= self._count_tail_start(hdr.n + len(values))  # the rows a window to come covers
            self._append(st, hdr, pos[keep], values[keep])
            hdr.n += len(values)
            hdr.last = int(order[-1])
            out.rows = len(values)
        self._expire(st, hdr, self._count_tail_start(hdr.n))
        return out

    # ------------------------------------------------------------------ time windows
    def _k_after(self, t: int) -> int:
        """The first window (number) ending after ``t``."""
        w = self.window
        return (t - w.offset - w.range) // w.slide + 1

    def _end(self, k: int) -> int:
        w = self.window
        return k * w.slide + w.offset + w.range

    def _time_step(self, st: StateAccess, hdr: Header, live: _Live, t: np.ndarray, v: np.ndarray,
                   wm: int | None, released: bool = False) -> KeyOutput:
        late = t <= wm if wm is not None and not released else np.zeros(len(t), bool)
        out = self._late_split(hdr, t, v, late)
        if late.any():
            t, v = t[~late], v[~late]
        if len(t):
            out.rows = len(t)
            if self.pre is not None:
                hdr.pend_t, hdr.pend_v = self._fold_pending(hdr.pend_t, hdr.pend_v, t, v)
            else:
                hdr.pend_t = np.concatenate([hdr.pend_t, t])
                hdr.pend_v = np.concatenate([hdr.pend_v, v])
        if wm is not None and (hdr.emitted == NO_TIME or wm > hdr.emitted):
            before = hdr.emitted
            ready = hdr.pend_t <= wm
            ends_parts: list[np.ndarray] = []
            res_parts: list[Any] = []
            if ready.any():
                rt_, rv = hdr.pend_t[ready], hdr.pend_v[ready]
                hdr.pend_t, hdr.pend_v = hdr.pend_t[~ready], hdr.pend_v[~ready]
                if self.pre is None:  # pre-aggregated: the pending partials are sorted already
                    o = np.argsort(rt_, kind="stable")
                    rt_, rv = rt_[o], rv[o]
                ends, res = live.hosted.op.insert_many(rv, rt_)
                self._keep_after(ends, res, before, None, ends_parts, res_parts)
                hdr.n += len(rv)
                hdr.last = int(rt_[-1])
                released = (rt_, rv)
            else:
                released = None
            if hdr.last != NO_TIME:
                k = self._k_after(hdr.last)
                if before != NO_TIME:
                    k = max(k, self._k_after(before))
                w = self.window
                if k * w.slide + w.offset <= hdr.last and self._end(k) <= wm:  # the watermark passed a window end
                    ends, res = self._flushed_until(st, hdr, live, released)
                    self._keep_after(ends, res, max(before, hdr.last), wm, ends_parts, res_parts)
            start = self._end(self._k_after(wm)) - self.window.range  # the oldest window to come
            if released is not None:  # into the tail: the rows a window to come covers (no write of the others)
                keep = released[0] >= start
                self._append(st, hdr, released[0][keep], released[1][keep])
            hdr.emitted = wm
            if ends_parts:
                out.ends = np.concatenate(ends_parts)
                out.parts = res_parts if self.pre != "count" else [p.astype(np.int64) for p in res_parts]
            self._expire(st, hdr, start)
        self._set_timer(st, hdr)
        return out

    def _fold_pending(self, pend_t: np.ndarray, pend_v: np.ndarray, t: np.ndarray,
                      v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pending partials (one per sub-slice, sorted) with a micro-batch's new rows folded in.

        Rows wait for the watermark as partials, so the header holds about one value per slide of
        the rows ahead of the watermark, not every row. A sub-slice partly behind the watermark is
        released whole; a row that comes later in the same sub-slice is ahead of that watermark, so
        the operator still sees non-decreasing times, and it gets a second partial of the sub-slice
        (combined by the operator, as for a sub-slice fed in two micro-batches).
        """
        if (t[1:] < t[:-1]).any():  # a micro-batch's rows of a key mostly come in time order already
            o = np.argsort(t, kind="stable")
            t, v = t[o], v[o]
        t, v = self._preaggregate(t, v)
        if not len(pend_t):
            return t, v
        at, av = np.concatenate([pend_t, t]), np.concatenate([pend_v, v])
        o = np.argsort(at, kind="stable")  # a sub-slice's older partial first
        return self._preaggregate(at[o], av[o], PREAGGREGATED[self.pre])

    def _preaggregate(self, t: np.ndarray, v: np.ndarray, kind: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Rows sorted by time folded per sub-slice: ``(representative times, partials)``.

        The representative time is the sub-slice's start, or for argmax the time of its largest value
        (NaN the largest, the oldest on ties, as the aggregation's own rule). ``kind``: the fold
        (default the aggregation's; partials are combined with :data:`PREAGGREGATED`'s, a count by a sum).
        """
        w = self.window
        unit = (t - w.offset) % w.slide
        sub = t - unit
        m = w.range % w.slide
        if m:
            sub = sub + np.where(unit >= m, m, 0)
        starts = np.flatnonzero(np.r_[True, sub[1:] != sub[:-1]])
        kind = kind or self.pre
        if kind == "max":
            return sub[starts], np.maximum.reduceat(v, starts)
        if kind == "min":
            return sub[starts], np.minimum.reduceat(v, starts)
        if kind == "sum":
            return sub[starts], np.add.reduceat(v, starts)
        if kind == "count":
            return sub[starts], np.diff(np.r_[starts, len(v)]).astype(np.float64)
        top = np.repeat(np.maximum.reduceat(v, starts), np.diff(np.r_[starts, len(v)]))  # argmax
        hits = np.flatnonzero((v == top) | (np.isnan(v) & np.isnan(top)))
        first = hits[np.searchsorted(hits, starts)]
        return t[first], v[first]

    @staticmethod
    def _keep_after(ends: np.ndarray, res: Any, after: int, upto: int | None, ends_parts: list,
                    res_parts: list) -> None:
        """The windows ending in ``(after, upto]`` (``after`` NO_TIME: from the first; ``upto`` None: all)."""
        if not len(ends):
            return
        m = ends > after if after != NO_TIME else np.ones(len(ends), bool)
        if upto is not None:
            m &= ends <= upto
        if not m.any():
            return
        ends_parts.append(ends[m])
        if isinstance(res, list):
            res_parts.append([x for x, keep in zip(res, m.tolist()) if keep])
        else:
            res_parts.append(res[m])

    def _flushed_until(self, st: StateAccess, hdr: Header, live: _Live,
                       released: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, Any]:
        """The windows a flush would emit now, from a copy of the operator (the operator goes on).
        ``released``: the rows this step fed it, not in the tail yet."""
        clone = self.host.open()
        try:
            try:
                clone.op.restore(live.hosted.op.snapshot())
            except ValueError:  # another algorithm than the live one (its pool failed): replay the tail
                clone.op.close()
                clone = self._replay(st, hdr, released).hosted
            return clone.op.flush()
        finally:
            clone.op.close()

    def _set_timer(self, st: StateAccess, hdr: Header) -> None:
        """One event-time timer at the next window end to come (none when the key holds nothing to emit)."""
        w = self.window
        cands = []
        if hdr.last != NO_TIME:
            k = self._k_after(hdr.last)
            if hdr.emitted != NO_TIME:
                k = max(k, self._k_after(hdr.emitted))
            if k * w.slide + w.offset <= hdr.last:
                cands.append(self._end(k))
        if len(hdr.pend_t):
            cands.append(self._end(self._k_after(int(hdr.pend_t.min()))))
        nxt = min(cands) if cands else NO_TIME
        if nxt != hdr.timer:
            if hdr.timer != NO_TIME:
                st.delete_timer(hdr.timer)
            if nxt != NO_TIME:
                st.register_timer(nxt)
            hdr.timer = nxt

    # ------------------------------------------------------------------ the tail
    def _late_split(self, hdr: Header, order: np.ndarray, values: np.ndarray, late: np.ndarray) -> KeyOutput:
        n_late = int(late.sum())
        hdr.late += n_late
        empty_e = np.empty(0, np.int64)
        if n_late:
            return KeyOutput(empty_e, None, order[late], values[late])
        return KeyOutput(empty_e, None, empty_e, np.empty(0, np.float64))

    def _append(self, st: StateAccess, hdr: Header, order: np.ndarray, values: np.ndarray) -> None:
        """Add consumed rows to the open chunk; seal it into the map each time it holds ``chunk_rows``."""
        ot = np.concatenate([hdr.open_t, order]) if len(hdr.open_t) else order
        ov = np.concatenate([hdr.open_v, values]) if len(hdr.open_v) else values
        C = self.C
        i = 0
        sealed = []
        while len(ot) - i >= C:
            st.put_chunk(hdr.next_chunk, pack_rows(ot[i:i + C], ov[i:i + C]))
            sealed.append(int(ot[i + C - 1]))
            hdr.next_chunk += 1
            i += C
        if sealed:
            hdr.chunk_last = np.concatenate([hdr.chunk_last, np.array(sealed, np.int64)])
        hdr.open_t, hdr.open_v = ot[i:].copy(), ov[i:].copy()

    def _expire(self, st: StateAccess, hdr: Header, start: int) -> None:
        """Drop the tail's rows before ``start`` (a position or a time): whole sealed chunks, then, once none
        is left, the open chunk's front."""
        while hdr.first_chunk < hdr.next_chunk and hdr.chunk_last[0] < start:
            st.remove_chunk(hdr.first_chunk)
            hdr.first_chunk += 1
            hdr.chunk_last = hdr.chunk_last[1:]
        if hdr.first_chunk == hdr.next_chunk and len(hdr.open_t) and hdr.open_t[0] < start:
            keep = hdr.open_t >= start
            hdr.open_t, hdr.open_v = hdr.open_t[keep], hdr.open_v[keep]

    def _tail(self, st: StateAccess, hdr: Header) -> tuple[np.ndarray, np.ndarray]:
        """The key's tail as stored: the live sealed chunks in order, then the open chunk."""
        parts = []
        if hdr.next_chunk > hdr.first_chunk:
            got = {int(cid): blob for cid, blob in st.chunks()}
            for cid in range(hdr.first_chunk, hdr.next_chunk):
                if cid not in got:
                    raise RuntimeError(f"the state store lost chunk {cid} of a key (chunks {sorted(got)})")
                parts.append(unpack_rows(got[cid]))
        parts.append((hdr.open_t, hdr.open_v))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _replay(self, st: StateAccess, hdr: Header,
                extra: tuple[np.ndarray, np.ndarray] | None = None) -> _Live:
        """A fresh operator that has consumed the key's tail, and ``extra`` rows after it (its windows already
        emitted: dropped)."""
        t, v = self._tail(st, hdr)
        if extra is not None:
            t, v = np.concatenate([t, extra[0]]), np.concatenate([v, extra[1]])
        hosted = self.host.open()
        base = 0
        try:
            if self.is_time:
                if len(v):
                    hosted.op.insert_many(v, t)  # every window it completes ends at or before hdr.emitted
            else:
                base = self._count_tail_start(hdr.n)
                v = v[t >= base]  # a count window's tail holds positions
                if len(v):
                    ends, _ = hosted.op.insert_many(v)
                    if len(ends):  # pragma: no cover - the tail is shorter than a window
                        raise RuntimeError("a count window's tail completed a window on replay")
        except BaseException:
            hosted.op.close()
            raise
        return _Live(hosted, base)

    def _rebuild(self, st: StateAccess, hdr: Header) -> _Live:
        return self._replay(st, hdr)
