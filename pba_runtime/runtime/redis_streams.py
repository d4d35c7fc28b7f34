"""Redis Streams: a replayable log as a job's source and sink, exactly once across a kill and resume.

A stream is named by a URL, as Redis users write one, with the stream's name as its path::

    redis://[USER[:PASSWORD]@]HOST[:PORT]/STREAM[?db=N&block=100ms&retry=30s]
    rediss://...[?ssl_ca_certs=PATH&ssl_cert_reqs=required]          (TLS, options as redis-py's URLs)

Without a password in the URL, ``$REDIS_PASSWORD`` is used when it is set. A password is never written
out: :meth:`RedisStream.safe_url` (what banners, logs, metrics and checkpoints hold) drops it.

* :class:`RedisStreamSource` reads entries in order with blocking ``XREAD`` calls, up to a batch at a
  time, from the start of the stream (or, on resume, after the last entry ID its checkpoint holds). An entry
  is one tuple: its fields named by ``key_col``, ``value_col`` and ``ts_col`` (integer epoch ms), as a CSV
  source's columns. An entry that cannot be read (a field missing, a value not a number, a timestamp not an
  integer) is counted and copied to the side stream ``STREAM:malformed`` with the reason, under its own
  entry ID, so a replay after a resume copies it once. The source is endless: it ends after ``tuples``
  entries, or at :meth:`stop` (``pba-run`` calls it on SIGTERM: the job drains, checkpoints and exits 0).
* :class:`RedisStreamSink` appends one entry per result row, with the CSV sink's fields. Exactly once is an
  *idempotent write keyed by the checkpoint*: each checkpoint records the ID of the last entry the sink had
  written. A resumed job reads the entries after that ID (those a killed run wrote past its checkpoint) and
  skips each of them once when its replay produces it again; a replay produces the same rows, so every row
  is in the stream once. A fresh start appends to the stream (a log is not rewritten).

A lost connection is retried with backoff for ``retry`` (default 30 s); then the source stops the job at a
checkpoint with one line saying why (:class:`LogUnavailable`), and a sink fails the job, its last checkpoint
kept; either resumes with ``--resume``.

Examples
--------
>>> s = RedisStream.parse("redis://reader:secret@localhost:6390/plugs?retry=5s")
>>> s.host, s.port, s.stream, s.username, s.retry
('localhost', 6390, 'plugs', 'reader', 5.0)
>>> s.safe_url()
'redis://reader@localhost:6390/plugs'
>>> RedisStream.parse("rediss://h/out").tls, RedisStream.parse("rediss://h/out").port
(True, 6379)
"""

from __future__ import annotations

import csv
import logging
import os
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..durations import parse_duration
from .errors import JobError, UserError
from .sources import DEFAULT_BATCH_SIZE, Batch, Source, key_column

__all__ = ["RedisStream", "RedisStreamSource", "RedisStreamSink", "LogUnavailable", "is_redis_url", "xadd_rows",
           "PASSWORD_ENV"]

log = logging.getLogger("pba_runtime.runtime")

#: Where a password comes from when the URL has none.
PASSWORD_ENV = "REDIS_PASSWORD"
SCHEMES = ("redis", "rediss")
_SPELLING = "redis://[USER[:PASSWORD]@]HOST[:PORT]/STREAM (rediss:// for TLS)"


def is_redis_url(spec: Any) -> bool:
    """Whether ``spec`` names a Redis stream (``redis://`` or ``rediss://``)."""
    return isinstance(spec, str) and spec.partition("://")[0] in SCHEMES and "://" in spec


class LogUnavailable(JobError):
    """The broker could not be reached for longer than the retry period."""


@dataclass(frozen=True)
class RedisStream:
    """Where a stream is: server, credentials, stream name and how to wait on it (see the module docstring)."""

    host: str
    port: int
    stream: str
    username: str | None = None
    password: str | None = field(default=None, repr=False, compare=False)
    tls: bool = False
    db: int = 0
    block: float = 0.1  # seconds an XREAD waits for new entries before the source looks at its stop flag
    retry: float = 30.0  # seconds a lost connection is retried before the job stops
    ca_certs: str | None = None  # TLS: the certificates that sign the server's (default: the system's)
    cert_reqs: str = "required"  # TLS: whether the server's certificate is checked

    @classmethod
    def parse(cls, url: str, what: str = "stream") -> RedisStream:
        """A :class:`RedisStream` from its URL; a :class:`UserError` naming ``what`` when it is malformed."""
        if not is_redis_url(url):
            raise UserError(f"{what} must be a URL {_SPELLING}, got {url!r}")
        u = urllib.parse.urlsplit(url)
        stream = urllib.parse.unquote(u.path[1:]) if u.path.startswith("/") else ""
        if not stream or not u.hostname:
            raise UserError(f"{what} {cls._redact(url)}: needs a host and a stream name: {_SPELLING}")
        try:
            port = u.port or 6379
        except ValueError:
            raise UserError(f"{what} {cls._redact(url)}: the port must be an integer 1-65535") from None
        opts: dict[str, Any] = {}
        for name, value in urllib.parse.parse_qsl(u.query, keep_blank_values=True):
            if name == "db":
                if not value.isdigit():
                    raise UserError(f"{what}: db must be a non-negative integer, got {value!r}")
                opts["db"] = int(value)
            elif name in ("block", "retry"):
                try:  # a bare number is seconds here, as redis-cli's timeouts
                    ms = parse_duration(f"{value}s" if value.isdigit() else value, name=name)
                except (TypeError, ValueError):
                    ms = -1
                if ms <= 0:
                    raise UserError(f"{what}: {name} must be a duration such as 100ms or 30s, got {value!r}")
                opts[name] = ms / 1000.0
            elif name == "ssl_ca_certs":
                if not os.path.isfile(value):
                    raise UserError(f"{what}: ssl_ca_certs: no such file: {value}")
                opts["ca_certs"] = value
            elif name == "ssl_cert_reqs":
                if value not in ("none", "optional", "required"):
                    raise UserError(f"{what}: ssl_cert_reqs must be none, optional or required, got {value!r}")
                opts["cert_reqs"] = value
            else:
                raise UserError(f"{what}: unknown option {name!r} in the URL (db, block, retry, ssl_ca_certs, "
                                "ssl_cert_reqs)")
        password = urllib.parse.unquote(u.password) if u.password is not None else os.environ.get(PASSWORD_ENV)
        username = urllib.parse.unquote(u.username) if u.username else None
        return cls(host=u.hostname, port=port, stream=stream, username=username, password=password or None,
                   tls=u.scheme == "rediss", **opts)

    @staticmethod
    def _redact(url: str) -> str:
        u = urllib.parse.urlsplit(url)
        if u.password is None:
            return url
        netloc = u.netloc.rpartition("@")[2]
        return urllib.parse.urlunsplit(u._replace(netloc=f"{u.username}@{netloc}"))

    def safe_url(self, stream: str | None = None) -> str:
        """The URL without its password (what is printed and checkpointed)."""
        user = f"{urllib.parse.quote(self.username)}@" if self.username else ""
        name = urllib.parse.quote(self.stream if stream is None else stream, safe=":/")
        return f"{'rediss' if self.tls else 'redis'}://{user}{self.host}:{self.port}/{name}"

    def side(self, suffix: str) -> RedisStream:
        """The same server's stream ``STREAM:suffix`` (the late and malformed side outputs)."""
        return RedisStream(**{**self.__dict__, "stream": f"{self.stream}:{suffix}"})

    def connect(self, decode: bool = False) -> Any:
        """A client of this server (``redis.Redis``); no command is sent yet."""
        try:
            import redis
        except ImportError:  # pragma: no cover - a dependency of the package
            raise UserError("Redis streams need the redis package: pip install redis") from None
        tls = {"ssl_ca_certs": self.ca_certs, "ssl_cert_reqs": self.cert_reqs} if self.tls else {}
        return redis.Redis(host=self.host, port=self.port, db=self.db, username=self.username,
                           password=self.password, ssl=self.tls, decode_responses=decode, **tls,
                           socket_connect_timeout=5, socket_timeout=max(5.0, 4 * self.block),
                           health_check_interval=0)

    def call(self, op: Callable[[], Any], doing: str, stop: threading.Event | None = None) -> Any:
        """``op()``, retrying a lost connection with backoff for :attr:`retry` seconds.

        A refused password is a :class:`UserError` at once; a connection lost for longer is
        :class:`LogUnavailable`. ``stop`` set while waiting ends the wait with ``None``.
        """
        import redis

        delay, deadline, attempts = 0.05, time.monotonic() + self.retry, 0
        while True:
            try:
                return op()
            except redis.AuthenticationError as exc:
                raise UserError(f"{self.safe_url()}: the server refused the credentials ({exc})") from None
            except redis.ResponseError as exc:
                if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
                    raise UserError(f"{self.safe_url()}: the server refused the credentials ({exc})") from None
                raise JobError(f"{self.safe_url()}: {doing}: {exc}") from None
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                if self.tls and ("certificate" in str(exc) or "SSL" in str(exc)):  # not a lost connection
                    raise UserError(f"{self.safe_url()}: TLS: {exc} (the server's certificate: ssl_ca_certs=PATH "
                                    "in the URL names the certificates that sign it)") from None
                attempts += 1
                if time.monotonic() + delay > deadline:
                    raise LogUnavailable(f"lost the connection to {self.safe_url()} while {doing}: {exc} "
                                         f"({attempts} attempts over {self.retry:g} s)") from None
                if attempts == 1:
                    log.warning("%s: %s (%s); retrying for up to %g s", self.safe_url(), doing, exc, self.retry)
                if stop is not None and stop.wait(delay):
                    return None
                if stop is None:
                    time.sleep(delay)
                delay = min(2 * delay, 2.0)


def _id_str(entry_id: Any) -> str:
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


class RedisStreamSource(Source):
    """Tuples from a Redis stream, one entry a tuple, resumable from an entry ID.

    Parameters
    ----------
    url : str
        ``redis://[USER[:PASSWORD]@]HOST[:PORT]/STREAM`` (``rediss://`` for TLS; options in the module docstring).
    key_col, value_col : str
        The entry fields of the key and the value (a float).
    ts_col : str or None
        The field of the timestamp (integer epoch ms); ``None`` when the job needs none (count windows).
    tuples : int, optional
        End after this many entries (malformed ones included); ``None``: endless, until :meth:`stop`.

    The position a batch carries (what a checkpoint stores) is ``(last entry ID, entries read)``.
    """

    kind = "redis"
    progress_unit = "tuples"
    resumable = True
    stoppable = True

    def __init__(self, url: str, *, key_col: str = "key", value_col: str = "value", ts_col: str | None = "ts",
                 tuples: int | None = None):
        self.target = RedisStream.parse(url, "source")
        if tuples is not None and (isinstance(tuples, bool) or not isinstance(tuples, int) or tuples < 1):
            raise UserError(f"tuples must be a positive integer or None (endless), got {tuples!r}")
        self.tuples = tuples
        self.key_col, self.value_col, self.ts_col = key_col, value_col, ts_col
        self.has_timestamps = ts_col is not None
        self.malformed = 0
        self.halted: str | None = None  # why batches() ended before the stream did: a stop or a lost broker
        self.failure: LogUnavailable | None = None
        self._stop = threading.Event()
        self._client: Any = None
        self._side: Any = None

    @property
    def total(self) -> int | None:
        return self.tuples

    def progress(self, position: Any) -> int:
        return 0 if position is None else int(position[1])

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "url": self.target.safe_url(), "db": self.target.db, "key_col": self.key_col,
                "value_col": self.value_col, "ts_col": self.ts_col}  # not tuples: a resume may read on further

    def stop(self, why: str = "stopped") -> None:
        """End :meth:`batches` after the read under way (thread- and signal-safe)."""
        if self.halted is None:
            self.halted = why
        self._stop.set()

    def batches(self, start: Any = None, batch_size: int = DEFAULT_BATCH_SIZE, *,
                timestamps: bool = True) -> Iterator[Batch]:
        t = self.target
        self._client = r = t.connect(decode=True)
        r.set_response_callback("XREAD", lambda reply, **kw: reply)  # the reply as sent: no dict an entry
        last, read = ("0-0", 0) if start is None else (str(start[0]), int(start[1]))
        block_ms = max(1, round(t.block * 1000))
        while not self._stop.is_set():
            want = batch_size if self.tuples is None else min(batch_size, self.tuples - read)
            if want <= 0:
                return
            try:
                reply = t.call(lambda: r.xread({t.stream: last}, count=want, block=block_ms),
                               f"reading {t.stream}", self._stop)
            except LogUnavailable as exc:
                self.failure = exc
                self.stop("lost the broker")
                return
            if not reply:
                continue
            arrival = time.monotonic()
            entries = reply[t.stream] if isinstance(reply, dict) else reply[0][1]  # RESP3 or RESP2
            last = _id_str(entries[-1][0])
            read += len(entries)
            keys, values, ts = self._columns(entries, timestamps)
            yield Batch(keys, values, ts, (last, read), arrival)

    def _columns(self, entries: list, timestamps: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Keys, values and timestamps of ``entries`` (``[id, [field, value, ...]]`` each, as Redis sends them);
        the malformed ones diverted."""
        kc, vc = self.key_col, self.value_col
        tc = self.ts_col if timestamps else None
        try:  # every entry with the first one's fields in its order: numpy reads the columns of strings
            flat = np.array([e[1] for e in entries], dtype=object)
            names = entries[0][1][0::2]
            if flat.ndim == 2 and all((flat[:, 2 * i] == name).all() for i, name in enumerate(names)):
                at = {name: 2 * i + 1 for i, name in enumerate(names)}
                values = flat[:, at[vc]].astype(np.float64)
                ts = None if tc is None else flat[:, at[tc]].astype(np.int64)
                return key_column(flat[:, at[kc]].tolist()), values, ts
        except (KeyError, ValueError, TypeError, OverflowError):
            pass
        entries = [(eid, dict(zip(f[0::2], f[1::2]))) for eid, f in entries]
        good: list[tuple[str, float, int]] = []  # entry by entry: the good ones, and why each other is not
        bad: list[tuple[str, dict, str]] = []
        for eid, f in entries:
            why = None
            for role, name in (("key", kc), ("value", vc), ("timestamp", tc)):
                if name is not None and name not in f:
                    why = f"no {role} field {name!r}"
                    break
            if why is None:
                try:
                    v = float(f[vc])
                except ValueError:
                    why = f"field {vc!r}: cannot read {f[vc][:40]!r} as a number (float64)"
            if why is None and tc is not None:
                try:
                    tv = int(f[tc])
                    np.int64(tv)
                except (ValueError, OverflowError):
                    why = f"field {tc!r}: cannot read {f[tc][:40]!r} as an integer timestamp (epoch ms)"
            if why is None:
                good.append((f[kc], v, tv if tc is not None else 0))
            else:
                bad.append((_id_str(eid), f, why))
        if bad:
            self._divert(bad)
        keys = key_column([g[0] for g in good])
        values = np.array([g[1] for g in good], dtype=np.float64)
        ts = None if tc is None else np.array([g[2] for g in good], dtype=np.int64)
        return keys, values, ts

    def _divert(self, bad: list[tuple[str, dict, str]]) -> None:
        """Malformed entries to ``STREAM:malformed``, each under its own ID (a replay adds none twice)."""
        self.malformed += len(bad)
        side = self.target.side("malformed")
        if self._side is None:
            self._side = side.connect(decode=True)

        def append() -> list:  # a new pipeline each attempt: a failed one forgets its commands
            pipe = self._side.pipeline(transaction=False)
            for eid, f, why in bad:
                pipe.xadd(side.stream, {**f, "error": why}, id=eid)
            return pipe.execute(raise_on_error=False)

        for res in side.call(append, f"writing {side.stream}") or []:
            if isinstance(res, Exception) and "equal or smaller" not in str(res):
                raise JobError(f"{side.safe_url()}: cannot write a malformed entry: {res}")
        log.warning("%d malformed %s of %s copied to %s", len(bad), "entry" if len(bad) == 1 else "entries",
                    self.target.stream, side.stream)

    def close(self) -> None:
        for c in (self._client, self._side):
            if c is not None:
                c.close()
        self._client = self._side = None


def _bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def xadd_rows(client: Any, stream: bytes, names: list[bytes], rows: list[list[bytes]]) -> list[bytes]:
    """``XADD stream * name cell ...`` for each row, in one write of the protocol's bytes; their entry IDs.

    The same commands as a ``client.pipeline()`` of ``xadd`` calls (its reference, which the tests compare),
    packed here in one ``join``: the pipeline builds each command through several Python calls a field, which
    made the sink thread the job's bottleneck (bench/bench_redis.py).
    """
    if not rows:
        return []
    head = b"*%d\r\n$4\r\nXADD\r\n%s$1\r\n*\r\n" % (3 + 2 * len(names), _bulk(stream))
    fields = [_bulk(n) for n in names]
    data = b"".join([head + b"".join([f + _bulk(c) for f, c in zip(fields, row)]) for row in rows])
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command([data])
        ids = [conn.read_response() for _ in rows]
    except BaseException:
        conn.disconnect()  # a half-read reply must not reach the next command
        raise
    finally:
        pool.release(conn)
    return ids


def _take_out(rows: list[list[bytes]], skip: Counter, key_of: Callable[[list[bytes]], tuple]) -> list[list[bytes]]:
    """``rows`` without one occurrence of each row whose ``key_of`` ``skip`` counts (which loses those counts)."""
    out = []
    for row in rows:
        key = key_of(row)
        if skip.get(key):
            skip[key] -= 1
            if not skip[key]:
                del skip[key]
            continue
        out.append(row)
    return out


class RedisStreamSink:
    """Appends result rows to a Redis stream, one entry a row, exactly once across a kill and resume.

    It takes what a file sink takes, CSV lines without a header, and writes each line's fields under the
    ``columns`` names. :meth:`sync` returns the ID of the last entry written (a checkpoint's
    ``sink_offset``); :meth:`open` with that ID skips, once each, the rows a killed run wrote after it.

    Parameters
    ----------
    target : RedisStream
    columns : tuple of str
        Field names, in the order of the CSV line's cells.
    identity : tuple of str, optional
        The fields that tell one row from another (default all): for results the window's ``key``, ``start``
        and ``end``, not its values. A replay reads the stream's batches where they were cut this time, and a
        sum or a mean may then round differently in its last bits (within the contract's 1e-9); the row
        already written stands.
    """

    rewindable = True
    #: A fresh start appends to what the stream holds (a file sink rewrites its file).
    appends = True

    def __init__(self, target: RedisStream, columns: tuple[str, ...], identity: tuple[str, ...] | None = None):
        self.target = target
        self.path = target.safe_url()
        self.columns = tuple(columns)
        self._names = [c.encode() for c in self.columns]
        self._ident = [self.columns.index(c) for c in (identity or self.columns)]
        self._client: Any = None
        self._last = "0-0"
        self._skip: Counter = Counter()
        self._resumed_at = "0-0"  # the checkpoint's ID this sink resumed after
        self.bytes_written = 0
        self.entries_written = 0

    def open(self, resume_offset: str | None = None) -> None:
        """Start appending; on resume (``resume_offset``: the checkpoint's last entry ID) first read the entries
        written after it, to skip them once when they are produced again."""
        t = self.target
        self._client = r = t.connect()
        top = t.call(lambda: r.xrevrange(t.stream, count=1), f"opening {t.stream}")
        self._last = _id_str(top[0][0]) if top else "0-0"
        if resume_offset is None or not isinstance(resume_offset, str):
            return
        self._resumed_at = resume_offset
        after = t.call(lambda: r.xrange(t.stream, min=f"({resume_offset}", max="+"), f"reading {t.stream}")
        self._skip = Counter(self._key([f.get(n, b"") for n in self._names]) for _, f in after)
        if self._skip:
            log.info("%s: %d entries written after the checkpoint; each is skipped once when produced again",
                     self.path, len(after))

    def _key(self, row: list[bytes]) -> tuple[bytes, ...]:
        return tuple(row[i] for i in self._ident)

    def _rows(self, data: bytes) -> list[list[bytes]]:
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        n = len(self._names)
        rows = [line.split(b",") for line in lines]
        for i, row in enumerate(rows):
            if len(row) != n or b'"' in lines[i]:  # a quoted field (a key holding a comma or a quote)
                cells = next(csv.reader([lines[i].decode()]))
                rows[i] = [c.encode() for c in cells]
        return rows

    def write(self, data: Any) -> None:
        """Append the rows of ``data`` (whole CSV lines)."""
        data = bytes(data)
        if not data:
            return
        rows = self._rows(data)
        if self._skip:
            rows = _take_out(rows, self._skip, self._key)
        if rows:
            self._append(rows)
        self.bytes_written += len(data)

    def _append(self, rows: list[list[bytes]]) -> None:
        t, r, names = self.target, self._client, self._names
        tries = 0

        def append() -> str | None:
            nonlocal tries
            todo, last = rows, None
            if tries:  # a retry: the lost attempt may have appended some rows; append the others only
                after = r.xrange(t.stream, min=f"({self._last}", max="+")
                if after:
                    last = _id_str(after[-1][0])
                    todo = _take_out(rows, Counter(self._key([f.get(n, b"") for n in names]) for _, f in after),
                                     self._key)
            tries += 1
            ids = xadd_rows(r, t.stream.encode(), names, todo)
            return _id_str(ids[-1]) if ids else last

        last = t.call(append, f"writing {t.stream}")
        if last is not None:
            self._last = last
        self.entries_written += len(rows)

    def sync(self) -> str:
        """The ID after which a resume must look for rows written ahead of its checkpoint (every write is
        acknowledged): the last entry's, once every row a killed run wrote ahead has been produced again;
        until then the ID this sink resumed after, as those rows are still ahead of the replay."""
        return self._resumed_at if self._skip else self._last

    @property
    def offset(self) -> str:
        return self._last

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
