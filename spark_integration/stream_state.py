"""One key's window state between micro-batches, as Spark's state store holds it (no Spark needed).

A streaming key's operator must survive micro-batches, restarts and executor
loss, so its state lives in Spark's state store; every state call is a round
trip to the JVM and a changed value is written whole. The state is therefore
kept as the key's **tail**, the rows a window not yet emitted may still need,
in chunks that are written once:

* a **header** (:meth:`Header.to_blob` bytes): counters, the *open chunk* (the
  newest rows, fewer than ``chunk_rows``), the rows still waiting for the
  watermark (time windows) and a random *token* naming this version of the
  state;
* **sealed chunks** (:func:`pack_rows` bytes): ``chunk_rows`` rows each, written
  once when the open chunk fills, removed once every window that could need
  them has been emitted.

Both live in one ``MapState`` (:data:`STATE_KEY_SCHEMA` to
:data:`STATE_VALUE_SCHEMA`): the header under :data:`HEADER_ID`, a sealed chunk
under its id (0, 1, ...). One state variable, because each one costs every task
a round trip to declare it (~50 ms measured on the shared 2-core machine).
A micro-batch reads the header (one call), writes it back (one call) and, only
when the open chunk fills or old chunks expire, puts or removes a chunk. The
operator itself is kept in the Python worker between micro-batches
(:class:`OperatorCache`), under the header's token: when the next micro-batch
of the key finds the same token in the state store, the operator it left is
exactly the stored state and is used as it is. Otherwise (another worker, a
restart, a retried task) the operator is rebuilt from the tail: the chunks are
read and replayed through a fresh operator, and the windows it had already
emitted are dropped. Rows are bytes: ``int64`` order values (timestamps; for
count windows the rows' positions) then ``float64`` values (:func:`pack_rows`).
Rows no window to come can need are dropped: whole sealed chunks, and the open
chunk's front once no sealed chunk is left.

Examples
--------
>>> import numpy as np
>>> t, v = unpack_rows(pack_rows(np.array([5, 7]), np.array([1.5, -0.0])))
>>> t.tolist(), v.tolist()
([5, 7], [1.5, -0.0])
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "HEADER_ID",
    "NO_TIME",
    "Header",
    "OperatorCache",
    "STATE_KEY_SCHEMA",
    "STATE_VALUE_SCHEMA",
    "pack_rows",
    "unpack_rows",
]

#: The key's ``MapState``: its key (the header's or a sealed chunk's id) and value (bytes) schemas (DDL).
STATE_KEY_SCHEMA = "part long"
STATE_VALUE_SCHEMA = "blob binary"
#: The ``MapState`` key of the header (sealed chunks are 0, 1, ...).
HEADER_ID = -1
#: ``last``/``emitted``/``timer`` before there is one.
NO_TIME = -(1 << 63)

_EMPTY = b""
#: The header's layout version (its first ``int64``), and how many ``int64`` fields it starts with.
_LAYOUT = 1
_FIXED = 11


def pack_rows(order: np.ndarray, values: np.ndarray) -> bytes:
    """Rows as bytes: the ``int64`` order values, then the ``float64`` values (NaN, inf, -0.0 kept)."""
    return np.ascontiguousarray(order, dtype=np.int64).tobytes() + np.ascontiguousarray(values, np.float64).tobytes()


def unpack_rows(blob: bytes | None) -> tuple[np.ndarray, np.ndarray]:
    """The ``(order, values)`` arrays of :func:`pack_rows` bytes (``None``/empty: no rows)."""
    if not blob:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    n = len(blob) // 16
    return np.frombuffer(blob, np.int64, n, 0).copy(), np.frombuffer(blob, np.float64, n, 8 * n).copy()


@dataclass
class Header:
    """The key's header: what its header bytes hold (see the module docstring).

    ``n``: rows the operator consumed (count windows: the next position);
    ``last``: the last order value consumed (:data:`NO_TIME` before any);
    ``emitted``: time windows: every window ending at or before it was emitted
    (the watermark of the last emission); ``late``: late rows of the key so far;
    ``first_chunk``/``next_chunk``: the live sealed chunks' ids ``[first, next)``;
    ``chunk_last``: the last order value of each live sealed chunk (a timestamp; for count windows,
    whose tail holds positions, a position);
    ``open_t``/``open_v``: the open chunk; ``pend_t``/``pend_v``: rows waiting for
    the watermark (pre-aggregated: one partial per sub-slice); ``timer``: the event-time timer registered (:data:`NO_TIME`:
    none); ``token``: names this version of the state.
    """

    n: int = 0
    last: int = NO_TIME
    emitted: int = NO_TIME
    late: int = 0
    first_chunk: int = 0
    next_chunk: int = 0
    chunk_last: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    open_t: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    open_v: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    pend_t: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    pend_v: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    timer: int = NO_TIME
    token: bytes = _EMPTY

    @classmethod
    def from_blob(cls, blob: bytes | None) -> Header:
        """The header of :meth:`to_blob` bytes (``None``: a new key).

        Examples
        --------
        >>> h = Header(n=3, last=7, open_t=np.array([5, 7]), open_v=np.array([1.0, np.nan]))
        >>> g = Header.from_blob(h.to_blob())
        >>> (g.n, g.last, g.emitted == NO_TIME, g.open_t.tolist(), g.token == h.token, len(h.token))
        (3, 7, True, [5, 7], True, 16)
        """
        if blob is None:
            return cls()
        head = np.frombuffer(blob, np.int64, _FIXED)
        if head[0] != _LAYOUT:
            raise ValueError(f"a key's state header has layout {int(head[0])}; this version reads {_LAYOUT} "
                             "(a checkpoint written by another version of spark_integration)")
        _, n, last, emitted, late, first, nxt, timer, n_chunks, n_open, n_pend = (int(x) for x in head)
        at = 8 * _FIXED
        token = bytes(blob[at:at + 16])
        at += 16
        cl = np.frombuffer(blob, np.int64, n_chunks, at).copy()
        at += 8 * n_chunks
        ot, ov = unpack_rows(blob[at:at + 16 * n_open])
        at += 16 * n_open
        pt, pv = unpack_rows(blob[at:at + 16 * n_pend])
        return cls(n, last, emitted, late, first, nxt, cl, ot, ov, pt, pv, timer, token)

    def to_blob(self) -> bytes:
        """This header as bytes, with a fresh token (set on ``self`` too): ``int64`` fields, the token, the
        sealed chunks' last order values, the open chunk's rows, the pending rows."""
        self.token = os.urandom(16)
        head = np.array([_LAYOUT, self.n, self.last, self.emitted, self.late, self.first_chunk, self.next_chunk,
                         self.timer, len(self.chunk_last), len(self.open_t), len(self.pend_t)], np.int64)
        return b"".join((head.tobytes(), self.token, np.ascontiguousarray(self.chunk_last, np.int64).tobytes(),
                         pack_rows(self.open_t, self.open_v), pack_rows(self.pend_t, self.pend_v)))

    def state_bytes(self, chunk_rows: int) -> int:
        """Bytes this key holds in the state store (header payload plus its sealed chunks), about."""
        live = self.next_chunk - self.first_chunk
        return (8 * 7 + 16 + 8 * len(self.chunk_last) + 16 * (len(self.open_t) + len(self.pend_t))
                + live * (8 + 16 * chunk_rows))


class OperatorCache:
    """Operators left by earlier micro-batches in this Python worker, under the token of the state they hold.

    At most ``capacity`` keys (least recently used first out; an evicted key is
    rebuilt from the state store when it comes back).

    Examples
    --------
    >>> c = OperatorCache(capacity=1)
    >>> c.put("a", b"t1", "op-a"); c.take("a", b"t1")
    'op-a'
    >>> c.take("a", b"t1") is None  # taken: a second micro-batch cannot reuse it by mistake
    True
    >>> c.put("a", b"t1", "op-a"); c.take("a", b"t2") is None  # another version of the state
    True
    """

    def __init__(self, capacity: int = 10_000, on_evict: Any = None):
        self.capacity = capacity
        self.on_evict = on_evict
        self._d: OrderedDict[Any, tuple[bytes, Any]] = OrderedDict()

    def take(self, key: Any, token: bytes) -> Any:
        """The operator stored under ``key`` if its token is ``token``; removed either way."""
        got = self._d.pop(key, None)
        if got is None:
            return None
        if got[0] == token and token:
            return got[1]
        self._evicted(got[1])
        return None

    def put(self, key: Any, token: bytes, op: Any) -> None:
        """Keep ``op`` for ``key`` under ``token``, evicting the least recently used key beyond capacity."""
        old = self._d.pop(key, None)
        if old is not None:
            self._evicted(old[1])
        self._d[key] = (token, op)
        while len(self._d) > self.capacity:
            self._evicted(self._d.popitem(last=False)[1][1])

    def clear(self) -> None:
        """Forget (and close) every operator."""
        while self._d:
            self._evicted(self._d.popitem()[1][1])

    def __len__(self) -> int:
        return len(self._d)

    def _evicted(self, op: Any) -> None:
        if self.on_evict is not None:
            self.on_evict(op)
