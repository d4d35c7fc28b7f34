"""A Redis server of a test's own, on a loopback port in a temporary directory, and a fast producer."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """``redis-server`` on ``127.0.0.1:port``, its files in ``directory``; :meth:`stop` ends it.

    ``appendonly``: the server's data survive a restart (:meth:`start` again on the same port).
    """

    def __init__(self, directory: Any, password: str | None = None, appendonly: bool = False, tls: bool = False):
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (.ci/run installs Debian's package)")
        self.directory, self.password, self.appendonly = str(directory), password, appendonly
        os.makedirs(self.directory, exist_ok=True)
        self.cert = os.path.join(self.directory, "cert.pem") if tls else None
        if tls:  # a self-signed certificate for 127.0.0.1
            if shutil.which("openssl") is None:
                pytest.skip("openssl is not installed (it makes the TLS test's certificate)")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                            "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout",
                            os.path.join(self.directory, "key.pem"), "-out", self.cert], check=True,
                           capture_output=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        import redis

        listen = ["--port", str(self.port)]
        if self.cert:
            listen = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", self.cert, "--tls-key-file",
                      os.path.join(self.directory, "key.pem"), "--tls-auth-clients", "no"]
        cmd = ["redis-server", *listen, "--bind", "127.0.0.1", "--dir", self.directory,
               "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always"]
        if self.password:
            cmd += ["--requirepass", self.password]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = self.client()
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)
        client.close()

    def url(self, stream: str, **opts: str) -> str:
        if self.cert:
            opts = {"ssl_ca_certs": self.cert, **opts}
        query = "&".join(f"{k}={v}" for k, v in opts.items())
        scheme = "rediss" if self.cert else "redis"
        return f"{scheme}://127.0.0.1:{self.port}/{stream}" + (f"?{query}" if query else "")

    def client(self) -> Any:
        import redis

        tls = {"ssl": True, "ssl_ca_certs": self.cert} if self.cert else {}
        return redis.Redis(port=self.port, password=self.password, **tls)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None


def feed(client: Any, stream: str, keys: Any, ts: Any, values: Any, batch: int = 10_000) -> None:
    """Append one entry per tuple (fields key, ts, value; ts omitted when ``ts`` is None)."""
    n = len(values)
    for lo in range(0, n, batch):
        pipe = client.pipeline(transaction=False)
        for j in range(lo, min(n, lo + batch)):
            fields = {"key": str(keys[j]), "value": repr(float(values[j]))}
            if ts is not None:
                fields["ts"] = str(int(ts[j]))
            pipe.xadd(stream, fields)
        pipe.execute()


def entries(client: Any, stream: str) -> list[dict[str, str]]:
    """Every entry of ``stream``, its fields decoded, in stream order."""
    return [{k.decode(): v.decode() for k, v in f.items()} for _, f in client.xrange(stream)]


def as_csv_rows(rows: list[dict[str, str]], columns: list[str]) -> list[list[str]]:
    return [[r[c] for c in columns] for r in rows]


def by_key(rows: list[list[str]]) -> dict[str, list[list[str]]]:
    """Rows grouped by their first cell (the key), each key's in order: per-key order is the contract."""
    out: dict[str, list[list[str]]] = {}
    for r in rows:
        out.setdefault(r[0], []).append(r)
    return out


__all__ = ["RedisServer", "feed", "entries", "as_csv_rows", "by_key", "free_port"]
