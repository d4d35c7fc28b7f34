"""Kill -9 a running ``pba-run`` mid-stream, ``--resume`` it, and compare with an uninterrupted run.

The job is throttled (``--rate``) so that it is still running when the test
kills it right after a checkpoint has been written; only the coordinator is
killed, so the test also checks that orphaned task slots exit on their own.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

CLI = [sys.executable, "-m", "pba_runtime", "--no-progress", "--quiet"]


def wait_gone(pgid: int, timeout: float = 15.0) -> None:
    """Wait until no process of the group is left (slots, forkserver, resource tracker)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)
    pytest.fail(f"processes of group {pgid} were still running {timeout} s after the coordinator was killed")


def kill_after_checkpoint(args: list[str], ckpt_dir: str, min_id: int = 2, timeout: float = 60.0) -> None:
    proc = subprocess.Popen(CLI + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    path = os.path.join(ckpt_dir, "checkpoint.pkl")
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert proc.poll() is None, f"the job ended before it was killed: {proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, "no checkpoint written in time"
            if os.path.exists(path):
                try:
                    with open(path, "rb") as f:
                        ck = pickle.load(f)
                except (EOFError, pickle.UnpicklingError):
                    ck = {"id": 0}
                if ck["id"] >= min_id:
                    assert not ck["finished"]
                    break
            time.sleep(0.02)
        time.sleep(0.15)  # let it write results past the checkpoint, so the resume must cut them
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    wait_gone(proc.pid)
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"pba_{proc.pid}_")]
    assert not left, f"the killed job left shared memory behind: {left}"  # the CSV sink's rings, the pool's blocks


def rows_by_key(path) -> dict[str, list[tuple[str, ...]]]:
    with open(path, newline="") as f:
        if str(path).endswith(".jsonl"):  # no header; each object as CSV's fields
            rows = [["key", "start", "end", "value"]]
            rows += [[str(r["key"]), str(r["start"]), str(r["end"]), repr(r["value"])] for r in map(json.loads, f)]
        else:
            rows = list(csv.reader(f))
    out: dict[str, list] = {}
    for row in rows[1:]:
        out.setdefault(row[0], []).append(tuple(row[1:]))
    return out, rows[0], len(rows)


def run(args: list[str]) -> None:
    proc = subprocess.run(CLI + args, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()


@pytest.mark.parametrize("resume_parallelism, stage, fmt", [("2", "auto", "csv"), ("1", "auto", "csv"),
                                                             ("2", "on", "csv"), ("2", "auto", "jsonl")])
def test_kill_and_resume_count_windows_match_an_uninterrupted_run(tmp_path, resume_parallelism, stage, fmt):
    """``stage``: the slots' output stages (``auto``: off on 2 cores, the CI machine's; ``on``: the path of
    machines with cores to spare); ``fmt``: the text sink (both truncated back to the checkpoint's length)."""
    job = ["--source", "debs14", "--keys", "12", "--tuples", "240000", "--window", "count", "--range", "500",
           "--slide", "1", "--agg", "max", "--batch-size", "4000", "--output-stage", stage]
    ref, out, ck = tmp_path / f"ref.{fmt}", tmp_path / f"out.{fmt}", str(tmp_path / "ck")
    run(job + ["-p", "2", "--sink", f"{fmt}:{ref}"])
    durable = job + ["--sink", f"{fmt}:{out}", "--checkpoint-dir", ck, "--checkpoint-every", "20000"]
    kill_after_checkpoint(durable + ["-p", "2", "--rate", "60000"], ck)
    partial = os.path.getsize(out)
    run(durable + ["-p", resume_parallelism, "--resume"])  # the parallelism may change on resume
    want, header, n_want = rows_by_key(ref)
    got, header2, n_got = rows_by_key(out)
    assert 0 < partial < os.path.getsize(out)
    assert header2 == header
    assert n_got == n_want  # no window lost, none duplicated
    assert got == want  # the same results, in the same order per key


@pytest.mark.parametrize("agg, algorithm", [("max", "auto"), ("mean", "auto"), ("median", "auto"),
                                            ("p99~1%", "auto"), ("p99~1%", "pba")])
def test_kill_and_resume_time_windows_with_late_data(tmp_path, agg, algorithm):
    """Results equal bit for bit (the CSV holds each float's repr): a resumed mean differed in 1-2 ULP when
    the reorder buffer's snapshot turned its waiting arrays into a heap (issue 15, item 12). A sketch by PBA:
    the checkpoint holds its partials, arrays of counts."""
    job = ["--source", "debs12", "--keys", "3", "--tuples", "150000", "--disorder", "300",
           "--disorder-fraction", "0.1", "--window", "time", "--range", "2s", "--slide", "100ms",
           "--allowed-lateness", "120", "--agg", agg, "--algorithm", algorithm, "--batch-size", "3000", "-p", "2"]
    ref, out, ck = tmp_path / "ref.csv", tmp_path / "out.csv", str(tmp_path / "ck")
    run(job + ["--sink", f"csv:{ref}"])
    durable = job + ["--sink", f"csv:{out}", "--checkpoint-dir", ck, "--checkpoint-every", "15000"]
    kill_after_checkpoint(durable + ["--rate", "40000"], ck)
    run(durable + ["--resume"])
    for a, b in ((ref, out), (tmp_path / "ref.late.csv", tmp_path / "out.late.csv")):
        want, _, n_want = rows_by_key(a)
        got, _, n_got = rows_by_key(b)
        assert n_got == n_want and got == want, b.name
    assert rows_by_key(tmp_path / "ref.late.csv")[2] > 100


@pytest.mark.parametrize("window", ["count", "time"])
def test_kill_and_resume_a_query_job_gives_every_row_once(tmp_path, window):
    """A query's checkpoint holds every output's state per key: after a SIGKILL and ``--resume`` (on another
    parallelism) the CSV holds the uninterrupted run's rows, each once, every column bit for bit."""
    job = ["--source", "debs12" if window == "time" else "debs14", "--keys", "6", "--tuples", "150000",
           "--window", window, "--agg", "max,mean,std", "--batch-size", "3000"]
    job += (["--range", "1s,3s", "--slide", "500ms", "--disorder", "200", "--allowed-lateness", "100"]
            if window == "time" else ["--range", "100,700", "--slide", "3"])
    ref, out, ck = tmp_path / "ref.csv", tmp_path / "out.csv", str(tmp_path / "ck")
    run(job + ["-p", "2", "--sink", f"csv:{ref}"])
    durable = job + ["--sink", f"csv:{out}", "--checkpoint-dir", ck, "--checkpoint-every", "15000"]
    kill_after_checkpoint(durable + ["-p", "2", "--rate", "40000"], ck)
    run(durable + ["-p", "1", "--resume"])
    want, header, n_want = rows_by_key(ref)
    got, header2, n_got = rows_by_key(out)
    assert header2 == header and len(header) == 2 + 6
    assert n_got == n_want and got == want


def read_parts(directory, fmt: str) -> dict:
    """Rows per key of the committed part files, in stream order (a key's rows are in one slot's parts)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    names = sorted(n for n in os.listdir(directory) if not n.startswith("."))
    assert names and all(n.startswith("part-") and n.endswith(f".{fmt}") for n in names), names
    table = ds.dataset(str(directory), format="parquet" if fmt == "parquet" else "ipc").to_table()
    assert isinstance(table, pa.Table)
    out: dict = {}
    cols = [table.column(c).to_pylist() for c in ("key", "start", "end", "value")]
    for key, start, end, value in zip(*cols):
        out.setdefault(key, []).append((start, end, value))
    for rows in out.values():
        rows.sort(key=lambda r: r[1])
    return out


@pytest.mark.parametrize("fmt, stage, codec", [("parquet", "auto", None), ("arrow", "auto", None),
                                               ("parquet", "on", None), ("arrow", "auto", "zstd")])
def test_kill_and_resume_part_file_sinks_give_every_window_once(tmp_path, fmt, stage, codec):
    """Part-file sinks commit whole files per checkpoint: after a SIGKILL and --resume the committed parts
    hold the uninterrupted run's windows, each once, bit for bit; nothing in progress is left behind
    (with the slots' output stages and without, and with a codec of the user's)."""
    job = ["--source", "debs14", "--keys", "12", "--tuples", "240000", "--window", "count", "--range", "500",
           "--slide", "1", "--agg", "mean", "--batch-size", "4000", "--output-stage", stage]
    job += [] if codec is None else ["--compression", codec]
    ref, out, ck = tmp_path / "ref", tmp_path / "out", str(tmp_path / "ck")
    run(job + ["-p", "2", "--sink", f"{fmt}:{ref}"])
    durable = job + ["--sink", f"{fmt}:{out}", "--checkpoint-dir", ck, "--checkpoint-every", "20000"]
    kill_after_checkpoint(durable + ["-p", "2", "--rate", "60000"], ck)
    committed = [n for n in os.listdir(out) if not n.startswith(".")]
    assert committed, "the killed run committed no part"
    run(durable + ["-p", "1", "--resume"])
    want, got = read_parts(ref, fmt), read_parts(out, fmt)
    assert sum(map(len, got.values())) == sum(map(len, want.values())) > 200_000
    assert got == want
    assert not [n for n in os.listdir(out) if n.startswith(".")]


# ----------------------------------------------------------------------------- checkpoints are trusted files
class _RunsCode:
    """Unpickles as ``open(marker, "w")``: what a planted checkpoint could do with any code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(ck, marker) -> str:
    """A checkpoint directory holding a pickle that runs code when loaded."""
    os.makedirs(ck, exist_ok=True)
    path = os.path.join(ck, "checkpoint.pkl")
    with open(path, "wb") as f:
        pickle.dump({"format_version": 1, "payload": _RunsCode(marker)}, f)
    return path


RESUMABLE = ["--source", "debs14", "--keys", "3", "--tuples", "3000", "--range", "16", "--batch-size", "500",
             "-p", "1"]


def _resume(ck, out) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + RESUMABLE + ["--sink", f"csv:{out}", "--checkpoint-dir", str(ck), "--resume"],
                          capture_output=True, text=True, timeout=120)


def test_resume_refuses_a_world_writable_checkpoint_directory_before_unpickling(tmp_path):
    """Exit 2, one line naming the directory, why and the remedy; the planted pickle never ran."""
    ck, marker = tmp_path / "ck", tmp_path / "ran"
    _plant(ck, marker)
    os.chmod(ck, 0o777)
    proc = _resume(ck, tmp_path / "out.csv")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"pba-run: error: refusing the checkpoint directory {ck}: it is world-writable "
                           "(mode 0777); a checkpoint is a pickle, and loading it runs any code written into it, "
                           "so pba-runtime only loads checkpoints no other user can write. If you trust its "
                           f"contents, make it private: `chmod go-w {ck}`\n")
    assert not marker.exists() and proc.stdout == ""


def test_resume_refuses_a_group_writable_checkpoint_file(tmp_path):
    ck, marker = tmp_path / "ck", tmp_path / "ran"
    os.mkdir(ck, 0o700)
    path = _plant(ck, marker)
    os.chmod(path, 0o620)
    proc = _resume(ck, tmp_path / "out.csv")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"pba-run: error: refusing the checkpoint file {path}: it is group-writable "
                                  "(mode 0620); a checkpoint is a pickle") and proc.stderr.count("\n") == 1
    assert proc.stderr.endswith(f"make it private: `chmod go-w {path}`\n"), proc.stderr
    assert not marker.exists()


def test_a_fresh_start_refuses_a_checkpoint_directory_others_can_write(tmp_path):
    """Up front, before any work: a job checkpointing there for hours could not be resumed."""
    ck, out = tmp_path / "ck", tmp_path / "out.csv"
    os.mkdir(ck)
    os.chmod(ck, 0o775)
    proc = subprocess.run(CLI + RESUMABLE + ["--sink", f"csv:{out}", "--checkpoint-dir", str(ck)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"pba-run: error: refusing the checkpoint directory {ck}: it is group-writable "
                                  "(mode 0775)") and proc.stderr.count("\n") == 1, proc.stderr
    assert not out.exists()


def test_checkpoints_are_private_and_a_private_one_resumes(tmp_path):
    """New directories are 0700 and checkpoint files 0600 (whatever the umask lets through); resuming from
    them is accepted (the finished job says so and exits 0)."""
    ck, out = tmp_path / "deep" / "ck", tmp_path / "out.csv"
    old = os.umask(0)  # the widest umask: the modes come from the code, not from the user's umask
    try:
        proc = subprocess.run(CLI + RESUMABLE + ["--sink", f"csv:{out}", "--checkpoint-dir", str(ck),
                                                 "--checkpoint-every", "1000"],
                              capture_output=True, text=True, timeout=120)
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(os.stat(ck).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ck / "checkpoint.pkl").st_mode) == 0o600
    proc = _resume(ck, out)
    assert proc.returncode == 0, proc.stderr
    assert "already finished" in proc.stdout + proc.stderr


def _fake_stat(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize("uid, mode, refused", [
    (None, stat.S_IFDIR | 0o700, None), (None, stat.S_IFDIR | 0o755, None), (0, stat.S_IFDIR | 0o755, None),
    (None, stat.S_IFDIR | 0o1777, "world-writable (mode 1777)"), (None, stat.S_IFREG | 0o660, "group-writable"),
    ("other", stat.S_IFREG | 0o600, "owned by uid"),
])
def test_check_private_judges_as_ssh_does(uid, mode, refused):
    """Accepted: owned by this user or root, and writable by no one else. The error is a ValueError."""
    from pba_runtime.runtime.checkpoint import check_private

    me = os.geteuid()
    uid = me if uid is None else (me + 4242 if uid == "other" else uid)
    st = _fake_stat(mode, uid)
    if refused is None:
        check_private("/x/ck", st)
        return
    with pytest.raises(ValueError, match=re.escape("refusing the checkpoint directory /x/ck: it is " + refused)):
        check_private("/x/ck", st)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_load_refuses_a_checkpoint_file_owned_by_another_user(tmp_path):
    from pba_runtime.runtime.checkpoint import load_checkpoint

    ck, marker = tmp_path / "ck", tmp_path / "ran"
    os.mkdir(ck, 0o700)
    path = _plant(ck, marker)
    os.chown(path, 65534, 65534)
    with pytest.raises(ValueError, match=re.escape(f"refusing the checkpoint file {path}: it is owned by uid 65534")):
        load_checkpoint(str(ck))
    assert not marker.exists()
