"""``pba-run`` on a Redis stream (issue 45): source and sink, exactly once across kills, SIGTERM, side streams,
credentials, a lost broker. Each test module starts its own ``redis-server`` on a loopback port."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from redis_server import RedisServer, as_csv_rows, by_key, entries, feed
from test_runtime_resume import CLI, kill_after_checkpoint, wait_gone

from pba_runtime.runtime.errors import UserError
from pba_runtime.runtime.redis_streams import RedisStream, RedisStreamSink, xadd_rows
from pba_runtime.runtime.sources import Debs12Source, Debs14Source

COLUMNS = ["key", "start", "end", "value"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = RedisServer(tmp_path_factory.mktemp("redis"))
    yield s
    s.stop()


def run(args: list[str], env: dict | None = None, code: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(CLI + args, capture_output=True, timeout=180, env=env)
    assert proc.returncode == code, proc.stderr.decode()
    return proc


def same_windows(got: list[list[str]], want: list[list[str]]) -> None:
    """Each key's windows in order, once each; values equal, or within the contract's 1e-9 for a mean (a live
    stream's batches are cut where its reads end, and a sum may round differently in its last bits)."""
    g, w = by_key(got), by_key(want)
    assert len(got) == len(want) and g.keys() == w.keys()
    for k in w:
        assert [r[:3] for r in g[k]] == [r[:3] for r in w[k]], k
        np.testing.assert_allclose([float(r[3]) for r in g[k]], [float(r[3]) for r in w[k]], rtol=1e-9, atol=0)


def csv_rows(path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))[1:]


def debs12_stream(server, name: str, n: int, disorder: int = 300) -> list[list[str]]:
    """``n`` tuples of 3 sensors (10% out of order by up to ``disorder`` ms) into the stream ``name``."""
    k, v, t = Debs12Source(sensors=3, tuples=n, disorder=disorder, disorder_fraction=0.1).take(0, n)
    feed(server.client(), name, k, t, v)
    return [[str(a), str(int(b)), repr(float(c))] for a, b, c in zip(k, t, v)]


TIME_JOB = ["--window", "time", "--range", "2s", "--slide", "100ms", "--allowed-lateness", "120",
            "--agg", "max", "--batch-size", "3000", "-p", "2"]


def test_a_stream_job_equals_the_same_job_over_a_csv_file(server, tmp_path):
    """Source and sink: the job over the stream writes what the job over the same tuples in a CSV file
    writes, late tuples included, each key's rows in order; the sink's entries are the CSV sink's fields."""
    tuples = debs12_stream(server, "t1", 60_000)
    src = tmp_path / "in.csv"
    with open(src, "w", newline="") as f:
        csv.writer(f).writerows([["key", "ts", "value"], *tuples])
    ref = tmp_path / "ref.csv"
    run(["--source", f"csv:{src}", *TIME_JOB, "--sink", f"csv:{ref}"])
    run(["--source", server.url("t1"), "--tuples", "60000", *TIME_JOB, "--sink", server.url("t1-out")])
    c = server.client()
    want, got = csv_rows(ref), as_csv_rows(entries(c, "t1-out"), COLUMNS)
    assert len(got) == len(want) > 1000 and by_key(got) == by_key(want)
    late_want = csv_rows(tmp_path / "ref.late.csv")
    late_got = as_csv_rows(entries(c, "t1-out:late"), ["key", "timestamp", "value"])
    assert len(late_want) > 100 and by_key(late_got) == by_key(late_want)


def test_a_query_runs_unchanged_on_a_stream(server, tmp_path):
    """Several aggregations and windows (the query of the query issues): the same rows as over a CSV file."""
    tuples = debs12_stream(server, "q1", 30_000, disorder=0)
    src = tmp_path / "in.csv"
    with open(src, "w", newline="") as f:
        csv.writer(f).writerows([["key", "ts", "value"], *tuples])
    job = ["--window", "time", "--range", "1s,3s", "--slide", "500ms", "--agg", "max,mean,p99", "-p", "2"]
    ref = tmp_path / "ref.csv"
    run(["--source", f"csv:{src}", *job, "--sink", f"csv:{ref}"])
    run(["--source", server.url("q1"), "--tuples", "30000", *job, "--sink", server.url("q1-out")])
    with open(ref, newline="") as f:
        header = next(csv.reader(f))
    got = as_csv_rows(entries(server.client(), "q1-out"), header)
    assert by_key(got) == by_key(csv_rows(ref)) and len(got) > 100


@pytest.mark.parametrize("kills", [3, pytest.param(20, marks=pytest.mark.slow)])
def test_kills_and_resumes_give_the_uninterrupted_output_once(server, tmp_path, kills):
    """SIGKILL of the coordinator after a checkpoint and past it, ``kills`` times, each followed by
    ``--resume``: the output stream holds the uninterrupted run's rows, each once (the sink skips what a killed
    run wrote past its checkpoint), and nothing of a killed run is left running (``kill_after_checkpoint``).
    ``bench/bench_redis.py`` kills at random points instead, 20 times."""
    n = 30_000 * kills  # each run reads two checkpoints' worth and more before its kill
    debs12_stream(server, "k1", n)
    base = ["--source", server.url("k1"), "--tuples", str(n), *TIME_JOB]
    run(base + ["--sink", server.url("k1-ref")])
    ck = str(tmp_path / "ck")
    durable = base + ["--sink", server.url("k1-out"), "--checkpoint-dir", ck, "--checkpoint-every", "6000"]
    kill_after_checkpoint(durable + ["--rate", "30000"], ck)
    for i in range(1, kills):
        kill_after_checkpoint(durable + ["--rate", "30000", "--resume"], ck, min_id=2 + 2 * i)
    run(durable + ["--resume"])
    c = server.client()
    for ref, out in (("k1-ref", "k1-out"), ("k1-ref:late", "k1-out:late")):
        cols = COLUMNS if ":" not in ref else ["key", "timestamp", "value"]
        want, got = as_csv_rows(entries(c, ref), cols), as_csv_rows(entries(c, out), cols)
        assert len(got) == len(want) and by_key(got) == by_key(want), out


def test_sigterm_drains_checkpoints_and_exits_0_then_resume_continues(server, tmp_path):
    """An endless job: SIGTERM stops the reading, writes a checkpoint and exits 0 with one line; more entries
    are appended; ``--resume`` reads on from the checkpoint's entry, and the output equals one run over all."""
    k, v, t = Debs14Source(plugs=8, tuples=40_000).take(0, 40_000)
    c = server.client()
    feed(c, "s1", k[:20_000], t[:20_000], v[:20_000])
    feed(c, "s1-all", k, t, v)
    window = ["--window", "count", "--range", "50", "--slide", "10", "--agg", "mean"]
    run(["--source", server.url("s1"), "--tuples", "20000", *window, "--sink", server.url("s1-half")])
    half = c.xlen("s1-half")
    job = ["--source", server.url("s1"), *window, "--sink", server.url("s1-out"), "--checkpoint-dir",
           str(tmp_path / "ck")]
    proc = subprocess.Popen(CLI + job, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while c.xlen("s1-out") < half and time.monotonic() < deadline:  # every window of what is there
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopped (SIGTERM) after 20,000 tuples at checkpoint" in err and "--resume" in err, err
    wait_gone(proc.pid)
    feed(c, "s1", k[20_000:], t[20_000:], v[20_000:])
    run(job + ["--resume", "--tuples", "40000"])
    run(["--source", server.url("s1-all"), "--tuples", "40000", *window, "--sink", server.url("s1-ref")])
    want, got = as_csv_rows(entries(c, "s1-ref"), COLUMNS), as_csv_rows(entries(c, "s1-out"), COLUMNS)
    assert len(want) > half
    same_windows(got, want)


def test_malformed_entries_are_counted_and_copied_to_a_side_stream_once(server, tmp_path):
    c = server.client()
    for i in range(300):
        c.xadd("m1", {"key": f"k{i % 3}", "ts": str(1000 + 10 * i), "value": str(i)})
        if i % 100 == 50:
            c.xadd("m1", {"key": "bad", "ts": "soon", "value": "1"})
            c.xadd("m1", {"key": "bad", "ts": "5", "value": "many"})
            c.xadd("m1", {"key": "bad", "value": "1"})
    job = ["--source", server.url("m1"), "--tuples", "309", "--window", "time", "--range", "100", "--slide",
           "50", "--agg", "count", "--metrics-json", str(tmp_path / "m.json"), "--sink", server.url("m1-out")]
    err = run(job).stderr.decode()
    assert "malformed entries of m1 copied to m1:malformed" in err
    assert json.load(open(tmp_path / "m.json"))["malformed"] == 9
    side = entries(c, "m1:malformed")
    assert len(side) == 9 and {e["error"] for e in side} == {
        "field 'ts': cannot read 'soon' as an integer timestamp (epoch ms)",
        "field 'value': cannot read 'many' as a number (float64)", "no timestamp field 'ts'"}
    run(job[:-1] + [server.url("m1-out2")])  # a replay copies none twice: each keeps its entry ID
    assert len(entries(c, "m1:malformed")) == 9
    assert sum(float(r["value"]) for r in entries(c, "m1-out")) == 2 * 300  # each good tuple in 2 windows


def test_credentials_are_used_and_never_printed(tmp_path):
    s = RedisServer(tmp_path / "auth", password="s3cr3t-pw")
    try:
        c = s.client()
        feed(c, "a1", ["x"] * 100, None, np.arange(100.0))
        url = f"redis://default:s3cr3t-pw@127.0.0.1:{s.port}/a1"
        out = tmp_path / "o.csv"
        ck = tmp_path / "ck"
        job = ["--source", url, "--tuples", "100", "--range", "10", "--slide", "10", "--agg", "sum",
               "--metrics-json", str(tmp_path / "m.json"), "--log-level", "info", "--checkpoint-dir", str(ck)]
        proc = subprocess.run([sys.executable, "-m", "pba_runtime", "--no-progress", "--metrics-interval", "0.05",
                               *job, "--sink", f"csv:{out}"], capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        assert len(csv_rows(out)) == 10
        seen = proc.stdout + proc.stderr + (tmp_path / "m.json").read_bytes()
        seen += b"".join(p.read_bytes() for p in ck.iterdir())
        assert b"s3cr3t-pw" not in seen and f"redis://default@127.0.0.1:{s.port}/a1".encode() in proc.stdout
        env = dict(os.environ, REDIS_PASSWORD="s3cr3t-pw")  # the password from the environment
        run(["--source", s.url("a1"), "--tuples", "100", "--range", "10", "--agg", "sum", "--sink",
             s.url("a1-out")], env=env)
        assert c.xlen("a1-out") == 91
        bad = run(["--source", f"redis://default:wrong@127.0.0.1:{s.port}/a1", "--tuples", "100"], code=2)
        assert b"refused the credentials" in bad.stderr and b"wrong" not in bad.stderr
    finally:
        s.stop()


def test_tls_with_the_servers_certificate_and_a_clear_refusal_without_it(tmp_path):
    """``rediss://``: source and sink over TLS with ``ssl_ca_certs``; without it, the unverifiable
    certificate is one line and exit code 2 at once (not a lost connection retried)."""
    s = RedisServer(tmp_path / "tls", tls=True)
    try:
        feed(s.client(), "t1", ["a", "b"] * 50, None, np.arange(100.0))
        run(["--source", s.url("t1"), "--tuples", "100", "--range", "5", "--slide", "5", "--agg", "sum", "--sink",
             s.url("t1-out")])
        got = as_csv_rows(entries(s.client(), "t1-out"), COLUMNS)
        assert len(got) == 20 and got[0] == ["a", "0", "5", repr(float(sum(range(0, 10, 2))))]
        bad = run(["--source", f"rediss://127.0.0.1:{s.port}/t1", "--tuples", "100"], code=2)
        assert b"certificate verify failed" in bad.stderr and b"ssl_ca_certs" in bad.stderr
    finally:
        s.stop()


def test_a_lost_broker_is_retried_then_the_job_stops_at_a_checkpoint(tmp_path):
    """The server goes away mid-stream: the job retries for ``retry``, then says so in one line and exits 1 with
    a checkpoint; the server back (its data kept on disk), ``--resume`` finishes with every row once."""
    s = RedisServer(tmp_path / "lost", appendonly=True)
    try:
        c = s.client()
        k, v, t = Debs14Source(plugs=4, tuples=30_000).take(0, 30_000)
        feed(c, "l1", k, t, v)
        feed(c, "l1-all", k, t, v)
        window = ["--tuples", "30000", "--range", "40", "--slide", "4", "--agg", "max", "--batch-size", "1000"]
        job = ["--source", s.url("l1", retry="1s"), *window, "--sink", s.url("l1-out", retry="1s"),
               "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "2000"]
        proc = subprocess.Popen(CLI + job + ["--rate", "10000"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            while c.xlen("l1-out") < 1000:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.05)
            s.stop()
            code = proc.wait(timeout=60)
            err = proc.stderr.read().decode()
        finally:
            if proc.poll() is None:
                proc.kill()
        wait_gone(proc.pid)
        lines = [ln for ln in err.splitlines() if "WARNING" not in ln]
        assert code == 1 and len(lines) == 1 and "lost the connection to redis://127.0.0.1" in lines[0], err
        s.start()
        run(job + ["--resume"])
        run(["--source", s.url("l1-all"), *window, "--sink", s.url("l1-ref")])
        c = s.client()
        want, got = as_csv_rows(entries(c, "l1-ref"), COLUMNS), as_csv_rows(entries(c, "l1-out"), COLUMNS)
        assert len(got) == len(want) and by_key(got) == by_key(want)
    finally:
        s.stop()


def test_a_checkpoint_during_a_replay_keeps_the_rows_still_ahead_of_it(server):
    """Killed again before a replay has produced every row the first killed run wrote ahead: the second
    checkpoint must not vouch for those rows, or the next resume writes them twice."""
    target, cols = RedisStream.parse(server.url("r1")), ("key", "start", "end", "value")
    row = {x: f"k,0,{x},1.5\n".encode() for x in "ABCD"}
    first = RedisStreamSink(target, cols, ("key", "start", "end"))
    first.open(None)
    first.write(row["A"])
    at_checkpoint_1 = first.sync()
    first.write(row["B"] + row["C"])  # ahead of checkpoint 1, then killed
    second = RedisStreamSink(target, cols, ("key", "start", "end"))
    second.open(at_checkpoint_1)
    second.write(row["B"])  # the replay produces B again: skipped
    at_checkpoint_2 = second.sync()  # C is still ahead of the replay; killed again
    third = RedisStreamSink(target, cols, ("key", "start", "end"))
    third.open(at_checkpoint_2)
    third.write(row["C"] + row["D"])
    assert [e["end"] for e in entries(server.client(), "r1")] == ["A", "B", "C", "D"]


def test_the_packed_xadds_write_what_a_pipeline_of_xadd_calls_writes(server):
    """``xadd_rows`` (one write of the protocol's bytes) beside its reference, redis-py's pipeline."""
    rng = random.Random(3)
    rows = [[rng.choice([b"a", b"k,1", "\u00e9".encode(), b""]), str(rng.randint(-9, 9)).encode(),
             repr(rng.random()).encode(), b"\r\n x"] for _ in range(500)]
    names = [b"key", b"start", b"end", b"value"]
    c = server.client()
    ids = xadd_rows(c, b"x-fast", names, rows)
    pipe = c.pipeline(transaction=False)
    for row in rows:
        pipe.xadd("x-slow", dict(zip(names, row)))
    pipe.execute()
    assert len(ids) == 500
    assert [f for _, f in c.xrange("x-fast")] == [f for _, f in c.xrange("x-slow")]


@pytest.mark.parametrize("url, message", [
    ("redis://host:99999/s", "the port must be an integer"),
    ("redis://host:6379/", "needs a host and a stream name"),
    ("redis://host/s?blocking=1", "unknown option 'blocking'"),
    ("redis://host/s?retry=soon", "retry must be a duration"),
    ("redis://u:pw@host:bad/s", "redis://u@host:bad/s"),
])
def test_bad_urls_are_named_without_their_password(url, message):
    with pytest.raises(UserError, match=message.replace("?", r"\?")) as err:
        RedisStream.parse(url, "source")
    assert "pw@" not in str(err.value)


def test_the_cli_names_a_bad_source_option_for_a_stream(server):
    bad = run(["--source", server.url("z"), "--keys", "3"], code=2)
    assert b"--keys applies to generated sources" in bad.stderr
