"""Faults killed for real: orphaned task slots and pool workers, a broken pool's semaphores (issue 15).

Every test starts its processes in a session of their own and kills that
whole session in ``finally``, so a failure cannot leave processes behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "pba_runtime", "--no-progress", "--quiet"]
#: How long orphans may take to go (they go in well under a second; a loaded machine is slower).
GONE_TIMEOUT = 20.0


def session_pids(sid: int) -> set[int]:
    """Live (not zombie) processes of session ``sid``."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            out.add(int(entry))
    return out


def kill_session(sid: int) -> None:
    for pid in session_pids(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ")[:120]
    except OSError:
        return "?"


def wait_session_gone(sid: int, what: str) -> None:
    deadline = time.monotonic() + GONE_TIMEOUT
    while session_pids(sid):
        if time.monotonic() > deadline:
            left = {pid: _cmdline(pid) for pid in session_pids(sid)}
            pytest.fail(f"{what}: still alive {GONE_TIMEOUT} s after the kill: {left}")
        time.sleep(0.05)


def segments_of(pids: set[int]) -> list[str]:
    """Shared-memory blocks created by any of ``pids`` (named ``pba_<pid>_...``)."""
    return [n for n in os.listdir("/dev/shm") if n.startswith("pba_") and n.split("_")[1].isdigit()
            and int(n.split("_")[1]) in pids]


def wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


# ----------------------------------------------------------------------------- item 10: pba-run's task slots
def test_task_slots_exit_when_the_coordinator_is_killed_mid_stream(tmp_path):
    """kill -9 of the coordinator while it streams: every slot (even one blocked in read() of a half-written
    batch), the forkserver and the resource tracker are gone soon after; no pba_* block is left."""
    out = tmp_path / "out.csv"
    proc = subprocess.Popen(CLI + ["--tuples", "0", "-p", "2", "--sink", f"csv:{out}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    sid = proc.pid
    try:
        # mid-stream: the slots have written results for a while (batches are in flight on every queue)
        wait_until(lambda: proc.poll() is not None or (out.exists() and out.stat().st_size > 2_000_000), 60,
                   "the job to stream")
        assert proc.poll() is None, "the endless job ended by itself"
        pids = session_pids(sid)
        assert len(pids) >= 4  # coordinator, forkserver, resource tracker, slots
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_session_gone(sid, "processes of the killed job")
        assert segments_of(pids) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_session(sid)


def run_snippet(code: str) -> None:
    """Run ``code`` in a fresh interpreter (its own forkserver, none of this process's imports); it prints ok."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


def test_the_command_starts_its_forkserver_before_it_imports_numpy():
    run_snippet("import multiprocessing.forkserver as fs, os, sys\n"
            "from pba_runtime import forkserver\n"
            "assert forkserver.start_early(['--agg', 'sum'])\n"
            "pid = fs._forkserver._forkserver_pid\n"
            "assert 'numpy' not in sys.modules and pid is not None\n"
            "assert not forkserver.start_early([])  # one runs already\n"
            "forkserver.stop()  # at once, in the middle of its imports\n"
            "assert fs._forkserver._forkserver_pid is None and not os.path.exists(f'/proc/{pid}')\n"
            "print('ok')\n")


def test_a_forkserver_that_cannot_start_early_is_left_to_the_job():
    run_snippet("import multiprocessing.forkserver as fs, os\n"
            "from pba_runtime import forkserver\n"
            "def refuse():\n    raise OSError('no socket here')\n"
            "fs.ensure_running = refuse\n"
            "before = dict(os.environ)\n"
            "assert not forkserver.start_early([]) and dict(os.environ) == before\n"
            "print('ok')\n")


@pytest.mark.parametrize("args", [["--range", "0"], ["--tuples", "2000", "--range", "16"]])
def test_the_commands_early_forkserver_ends_with_the_command(args, tmp_path):
    """The command starts its job's forkserver before it parses its arguments in full
    (pba_runtime/forkserver.py): with a user error (exit 2, no job) or after a job, its forkserver is gone
    when it exits (waited for, even in the middle of its imports); the rest of its session soon after."""
    err = tmp_path / "stderr"
    with open(err, "w") as f:  # a file, not a pipe: the forkserver inherits the command's stderr
        proc = subprocess.Popen(CLI + args, stdout=subprocess.DEVNULL, stderr=f, start_new_session=True)
    sid = proc.pid
    try:
        proc.wait(timeout=120)
        assert proc.returncode == (2 if args[-1] == "0" else 0), err.read_text()
        assert [p for p in session_pids(sid) if "forkserver" in _cmdline(p)] == []
        wait_session_gone(sid, "processes of the command")
    finally:
        kill_session(sid)


# ----------------------------------------------------------------------------- item 11: process pools
ORPHAN_POOL = textwrap.dedent("""
    import numpy as np
    import pba_runtime as pr

    if __name__ == "__main__":
        pool = pr.WorkerPool(kind="process", workers=2, task_timeout=60)
        assert pool.ready(60)
        ops = [pr.create("pba", pr.CountWindow(range=4096, slide=1), "max", pool=pool) for _ in range(3)]
        x = np.random.default_rng(0).uniform(size=2000)
        for op in ops:
            for v in x:
                op.insert(v)
        print("ready", flush=True)
        while True:  # mid-stream, tasks in flight
            for op in ops:
                for v in x:
                    op.insert(v)
""")


def test_pool_workers_exit_and_blocks_are_reclaimed_when_the_parent_is_killed(tmp_path):
    script = tmp_path / "orphan_pool.py"
    script.write_text(ORPHAN_POOL)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True, text=True)
    sid = proc.pid
    pids = {sid}
    try:
        assert proc.stdout.readline() == "ready\n"
        pids = session_pids(sid)
        assert len(segments_of({proc.pid})) >= 3  # one chunk store per operator
        assert len(pids) >= 4  # parent, resource tracker, 2 workers
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_session_gone(sid, "workers of the killed pool's parent")
        # the resource tracker unlinks the dead parent's blocks once the last worker has let go of it
        wait_until(lambda: not segments_of(pids), GONE_TIMEOUT, "the dead parent's blocks to be unlinked")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        kill_session(sid)
        for name in segments_of(pids):  # a failed run killed the resource tracker too: tidy up
            os.unlink(os.path.join("/dev/shm", name))


BROKEN_POOL = textwrap.dedent("""
    import os, signal, time
    from concurrent.futures.process import BrokenProcessPool
    import pba_runtime as pr

    def names(ex):
        return [getattr(q, a)._semlock.name for q, attrs in ((ex._call_queue, ("_rlock", "_wlock", "_sem")),
                                                              (ex._result_queue, ("_rlock", "_wlock")))
                for a in attrs]

    def exists(name):
        return os.path.exists("/dev/shm/sem." + name.lstrip("/"))

    if __name__ == "__main__":
        with pr.WorkerPool(kind="process", workers=1, task_timeout=60) as pool:
            assert pool.ready(60)
            broken = pool._executor  # kept alive, as a stuck manager thread or a traceback would
            sems = names(broken)
            assert all(map(exists, sems)), sems
            fut = pool.submit(time.sleep, 60)
            os.kill(pool.pids()[0], signal.SIGKILL)  # mid-task
            assert isinstance(fut.exception(timeout=60), BrokenProcessPool)
            assert pool.recover(fut, "test")
            print("left", [n for n in sems if exists(n)], flush=True)
            assert pool.submit(sum, [1, 2]).result(timeout=60) == 3
            again = names(pool._executor)
        print("closed", [n for n in again if exists(n)], flush=True)
        del broken
""")


def test_a_restart_releases_the_broken_executors_semaphores(tmp_path):
    """SIGKILL of a worker mid-task: the restart unlinks the old executor's sem.mp-* at once (not at exit),
    and the resource tracker prints no KeyError or leak warning at exit."""
    script = tmp_path / "broken_pool.py"
    script.write_text(BROKEN_POOL)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True)
    try:
        out, err = proc.communicate(timeout=100)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        kill_session(proc.pid)
    assert proc.returncode == 0, err
    assert "left []" in out, out
    assert "closed []" in out, out
    assert "KeyError" not in err and "leaked" not in err, err


# ----------------------------------------------------------------------------- item 13: full devices, checkpoints
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def _run_cli(args: list[str], stdout=subprocess.PIPE, quiet: bool = True) -> subprocess.CompletedProcess:
    cli = CLI if quiet else [c for c in CLI if c != "--quiet"]
    return subprocess.run(cli + args, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=100, check=False)


@needs_dev_full
@pytest.mark.parametrize("args, to_full_stdout", [
    (["--source", "debs14", "--tuples", "20000", "--sink", "csv:/dev/full"], False),  # the header fails
    (["--source", "debs14", "--tuples", "200000", "--sink", "jsonl:/dev/full"], False),  # a later write fails
    (["--source", "debs14", "--tuples", "200000", "--sink", "jsonl:-"], True),
    (["--source", "debs14", "--tuples", "20000", "--sink", "csv:-"], True),
], ids=["csv-file", "jsonl-file", "jsonl-stdout", "csv-stdout"])
def test_a_sink_on_a_full_device_is_one_line(args, to_full_stdout):
    with open("/dev/full", "wb") as full:
        proc = _run_cli(args, stdout=full if to_full_stdout else subprocess.PIPE)
    assert proc.returncode == 1
    where = "stdout" if to_full_stdout else "/dev/full"
    assert proc.stderr.endswith(f"pba-run: failed: cannot write the output {where}: No space left on device\n"), \
        proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


@needs_dev_full
def test_the_summary_to_a_full_stdout_is_one_line():
    with open("/dev/full", "wb") as full:
        proc = _run_cli(["--source", "debs14", "--tuples", "2000", "--range", "10"], stdout=full, quiet=False)
    assert proc.returncode == 1
    assert proc.stderr == "pba-run: failed: cannot write to stdout: No space left on device\n", proc.stderr


def _unwritable_dir(tmp_path) -> str:
    """A directory this process cannot create files in (root ignores permissions: use /proc then)."""
    if os.geteuid() == 0:
        return "/proc"
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    return str(d)


@pytest.mark.parametrize("kind", ["unwritable", "under-a-file"])
def test_an_unwritable_checkpoint_directory_is_reported_up_front(tmp_path, kind):
    if kind == "unwritable":
        ck, message = _unwritable_dir(tmp_path), "cannot write checkpoints into"
    else:
        (tmp_path / "file").write_text("")
        ck, message = str(tmp_path / "file" / "ck"), "cannot create the checkpoint directory"
    out = tmp_path / "out.csv"
    proc = _run_cli(["--source", "debs14", "--tuples", "20000", "--sink", f"csv:{out}", "--checkpoint-dir", ck,
                     "--checkpoint-every", "1000"])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"pba-run: error: {message} {ck}: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == "" and not out.exists()  # before any work: no banner, no sink
    if kind == "unwritable" and ck != "/proc":
        assert os.listdir(ck) == []  # no .checkpoint.pkl.<pid>.tmp left


def test_stale_checkpoint_temporaries_are_removed_on_start_and_resume(tmp_path):
    """What a kill during a checkpoint write leaves (the temporary of a dead pid) is removed."""
    from pba_runtime.runtime.checkpoint import load_checkpoint

    ck = tmp_path / "ck"
    ck.mkdir()
    stale = ck / ".checkpoint.pkl.999999.tmp"
    stale.write_bytes(b"half a pickle")
    data = tmp_path / "in.csv"
    # the bad row comes 250 batches in: the source cannot read that far ahead of the slots (bounded queues),
    # so checkpoints complete before it (with the bad row at line 202 a loaded machine sometimes wrote none)
    data.write_text("key,value\n" + "".join(f"k{i % 3},{i}\n" for i in range(5000)) + "k0,oops\n")
    args = ["--source", f"csv:{data}", "--range", "4", "--sink", f"csv:{tmp_path / 'out.csv'}",
            "--checkpoint-dir", str(ck), "--checkpoint-every", "50", "--batch-size", "20", "-p", "1"]
    proc = _run_cli(args)
    assert proc.returncode == 2 and "line 5002" in proc.stderr, proc.stderr
    assert not stale.exists() and load_checkpoint(str(ck))["id"] >= 1
    assert [n for n in os.listdir(ck) if n.endswith(".tmp")] == []
    stale.write_bytes(b"half a pickle")
    data.write_text("key,value\n" + "".join(f"k{i % 3},{i}\n" for i in range(5001)))
    proc = _run_cli(args + ["--resume"])
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(ck)) == ["checkpoint.pkl"]


def test_a_failed_checkpoint_write_leaves_no_temporary(tmp_path):
    from pba_runtime.runtime.checkpoint import write_checkpoint

    # Python 3.11-3.12 say "Can't pickle local object", 3.13 "Can't get local object"
    with pytest.raises(Exception, match="local object"):
        write_checkpoint(str(tmp_path), {"state": lambda: 0})  # fails half-way through the write
    assert os.listdir(tmp_path) == []


#: ``python -m pba_runtime`` whose coordinator SIGKILLs itself half-way through writing its second checkpoint:
#: the pickle's first half is in the temporary file, flushed, and checkpoint.pkl is the first checkpoint.
_KILLED_IN_SECOND_CHECKPOINT = """
import os, pickle, signal

if __name__ == "__main__":  # the job's slots re-import this file: only the coordinator runs it
    import pba_runtime.runtime.checkpoint as checkpoint

    class KillingPickle:
        writes = 0

        def __getattr__(self, name):
            return getattr(pickle, name)

        def dump(self, obj, f, protocol=None):
            KillingPickle.writes += 1
            if KillingPickle.writes == 2:
                data = pickle.dumps(obj, protocol=protocol)
                f.write(data[: len(data) // 2])
                f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            pickle.dump(obj, f, protocol=protocol)

    checkpoint.pickle = KillingPickle()
    from pba_runtime.__main__ import entry

    entry()
"""


def test_kill_during_a_checkpoint_write_then_resume(tmp_path):
    """SIGKILL while the coordinator writes a checkpoint (its temporary file is there): the resume removes the
    temporary, ends with a complete sink, and leaves only checkpoint.pkl."""
    ck = tmp_path / "ck"
    out = tmp_path / "out.csv"
    args = ["--tuples", "400000", "--range", "1000", "--algorithm", "sba", "-p", "1", "--sink", f"csv:{out}",
            "--checkpoint-dir", str(ck), "--checkpoint-every", "100000"]
    killing = tmp_path / "killed_in_second_checkpoint.py"
    killing.write_text(_KILLED_IN_SECOND_CHECKPOINT)
    err = tmp_path / "killed.err"
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, str(killing), *CLI[3:], *args], stdout=subprocess.DEVNULL,
                                stderr=f, start_new_session=True)
    try:
        proc.wait(timeout=90)
        wait_session_gone(proc.pid, "processes of the killed job")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_session(proc.pid)
    assert proc.returncode == -signal.SIGKILL, (
        f"the job was not killed in its second checkpoint write\n{err.read_text()}")
    names = sorted(os.listdir(ck))  # the first checkpoint, and the second's half-written temporary
    assert len(names) == 2 and names[1] == "checkpoint.pkl" and names[0].endswith(".tmp"), names
    from pba_runtime.runtime import load_checkpoint

    assert 0 < load_checkpoint(str(ck))["position"] < 400_000  # the first, mid-stream: the resume has work
    proc = _run_cli(args + ["--resume"])
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(ck)) == ["checkpoint.pkl"]
    ref = tmp_path / "ref.csv"
    ref_args = [a if a != f"csv:{out}" else f"csv:{ref}" for a in args[:-4]]  # uninterrupted, no checkpoints
    assert _run_cli(ref_args).returncode == 0
    with open(out) as f:
        got = f.read().splitlines()
    with open(ref) as f:
        want = f.read().splitlines()
    assert len(got) == len(want) and sorted(got) == sorted(want)  # every window exactly once
