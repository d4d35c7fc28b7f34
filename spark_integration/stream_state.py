"""One key's window state between micro-batches, as Spark's state store holds it (no Spark needed).

A streaming key's operator must survive micro-batches, restarts and executor
loss, so its state lives in Spark's state store; every state call is a round
trip to the JVM and a changed value is written whole. The state is therefore
kept as the key's **tail**, the rows a window not yet emitted may still need,
in chunks that are written once:

* a **header** (one ``ValueState`` row, :data:`HEADER_SCHEMA`): counters, the
  *open chunk* (the newest rows, fewer than ``chunk_rows``), the rows still
  waiting for the watermark (time windows) and a random *token* naming this
  version of the state;
* **sealed chunks** (a ``MapState`` ``chunk id -> bytes``): ``chunk_rows`` rows
  each, written once when the open chunk fills, removed once every window that
  could need them has been emitted.

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
    "HEADER_SCHEMA",
    "NO_TIME",
    "Header",
    "OperatorCache",
    "pack_rows",
    "unpack_rows",
]

#: The header's ``ValueState`` schema (DDL).
HEADER_SCHEMA = ("n long, last long, emitted long, late long, first_chunk long, next_chunk long, "
                 "chunk_last binary, open binary, pending binary, timer long, token binary")
#: The chunks' ``MapState`` key and value schemas (DDL).
CHUNK_KEY_SCHEMA = "chunk long"
CHUNK_VALUE_SCHEMA = "rows binary"
#: ``last``/``emitted``/``timer`` before there is one.
NO_TIME = -(1 << 63)

_EMPTY = b""


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
    """The key's header: what one ``ValueState`` row holds (see the module docstring).

    ``n``: rows the operator consumed (count windows: the next position);
    ``last``: the last order value consumed (:data:`NO_TIME` before any);
    ``emitted``: time windows: every window ending at or before it was emitted
    (the watermark of the last emission); ``late``: late rows of the key so far;
    ``first_chunk``/``next_chunk``: the live sealed chunks' ids ``[first, next)``;
    ``chunk_last``: the last order value of each live sealed chunk (a timestamp; for count windows,
    whose tail holds positions, a position);
    ``open_t``/``open_v``: the open chunk; ``pend_t``/``pend_v``: rows waiting for
    the watermark; ``timer``: the event-time timer registered (:data:`NO_TIME`:
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
    def from_row(cls, row: tuple | None) -> Header:
        """The header of a ``ValueState.get()`` row (``None``: a new key)."""
        if row is None:
            return cls()
        n, last, emitted, late, first, nxt, chunk_last, opened, pending, timer, token = row
        ot, ov = unpack_rows(opened)
        pt, pv = unpack_rows(pending)
        cl = np.frombuffer(chunk_last, np.int64).copy() if chunk_last else np.empty(0, np.int64)
        return cls(int(n), int(last), int(emitted), int(late), int(first), int(nxt), cl, ot, ov, pt, pv,
                   int(timer), bytes(token or _EMPTY))

    def to_row(self) -> tuple:
        """The ``ValueState`` row of this header, with a fresh token (set on ``self`` too)."""
        self.token = os.urandom(16)
        return (self.n, self.last, self.emitted, self.late, self.first_chunk, self.next_chunk,
                self.chunk_last.tobytes(), pack_rows(self.open_t, self.open_v),
                pack_rows(self.pend_t, self.pend_v), self.timer, self.token)

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
