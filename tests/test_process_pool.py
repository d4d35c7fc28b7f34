"""Process worker pool: shared-memory chunks, equality with recal, worker faults, cleanup, logging (issue 4)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import aggs_for_processes as A
import numpy as np
import pytest

import pba_runtime as pr
from pba_runtime.shm import live_blocks

pytestmark = pytest.mark.timeout(120)

HERE = os.path.dirname(os.path.abspath(__file__))


def _mine() -> set[str]:
    """This process's blocks in /dev/shm."""
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"pba_{os.getpid()}_")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _same(got, want, exact: bool) -> None:
    """Window results equal: exactly (NaN == NaN), or to rounding (relative 1e-9) for sums."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(g, list):  # collect
            assert g == w
            continue
        g, w = np.asarray(g, dtype=float), np.asarray(w, dtype=float)
        if exact:
            assert np.array_equal(g, w, equal_nan=True), (g, w)
        else:
            assert np.allclose(g, w, rtol=1e-9, atol=1e-12, equal_nan=True), (g, w)


def _stream(op, values, ts=None):
    if ts is None:
        return [r for v in values for _, r in op.insert(v)]
    return [r for v, t in zip(values, ts) for _, r in op.insert(v, t)]


@pytest.fixture(scope="module")
def pool():
    """One process pool for many aggregators (many keys), as one pool per task slot."""
    with pr.WorkerPool(kind="process", workers=2, task_timeout=60) as p:
        assert p.ready(60)
        yield p


@pytest.fixture(autouse=True)
def _disarmed():
    A.disarm()
    yield
    A.disarm()


def teardown_module(module):
    shutil.rmtree(A.FAULT_DIR, ignore_errors=True)


EXACT = {"max", "min", "count", "argmax", "collect", "py_max", "py_first"}
AGGS = ["max", "sum", "mean", "std", "argmax", "moment_sketch", "collect", A.PY_MAX, A.PY_MEAN, A.PY_FIRST]


def _name(agg):
    return agg if isinstance(agg, str) else agg.name


# ----------------------------------------------------------------------------- equal to recal
@pytest.mark.parametrize("agg", AGGS, ids=_name)
def test_process_pba_equals_recal_per_tuple(pool, agg):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 100.0, 1500).tolist()
    for win in (pr.CountWindow(range=64, slide=1), pr.CountWindow(range=50, slide=3), pr.CountWindow(range=7, slide=7)):
        with pr.create("pba", win, agg, pool=pool) as op, pr.create("recal", win, agg) as ref, \
                pr.create("sba", win, agg, chunk_size=op.chunk_size) as sba:
            got = _stream(op, x)
            _same(got, _stream(ref, x), _name(agg) in EXACT)
            _same(got, _stream(sba, x), exact=True)  # same chunks, same arithmetic: bit for bit
            st = op.stats()
            assert st["pool"] == "process" and st["lcs_tasks"] == st["chunks"] > 0
            assert st["shared_memory"] == (_name(agg) != "collect")  # collect: the pool's threads


@pytest.mark.parametrize("agg", ["max", "std", A.PY_MEAN], ids=_name)
def test_process_pba_equals_recal_time_windows(pool, agg):
    rng = np.random.default_rng(4)
    ts = np.cumsum(rng.integers(0, 4, 2000)).tolist()
    x = rng.uniform(0.5, 100.0, 2000).tolist()
    win = pr.TimeWindow(range=120, slide=7)
    with pr.create("pba", win, agg, pool=pool) as op, pr.create("recal", win, agg) as ref:
        got = _stream(op, x, ts) + list(op.flush()[1])
        want = _stream(ref, x, ts) + list(ref.flush()[1])
    _same(got, want, _name(agg) in EXACT)


def test_many_aggregators_share_one_pool(pool):
    """Twenty keys interleaved on one pool: each gets its own slots, every result equals recal."""
    win = pr.CountWindow(range=40, slide=1)
    keys = range(20)
    ops = {k: pr.create("pba", win, A.PY_MAX if k % 2 else "sum", pool=pool) for k in keys}
    refs = {k: pr.create("recal", win, A.PY_MAX if k % 2 else "sum") for k in keys}
    got = {k: [] for k in keys}
    want = {k: [] for k in keys}
    rng = np.random.default_rng(5)
    for _ in range(4000):
        k = int(rng.integers(0, 20))
        v = float(rng.uniform(0, 10))
        got[k] += [r for _, r in ops[k].insert(v)]
        want[k] += [r for _, r in refs[k].insert(v)]
    names = set()
    for k in keys:
        _same(got[k], want[k], exact=bool(k % 2))
        names |= set(ops[k]._shm.block_names)
        ops[k].close()
        refs[k].close()
    assert len(names) >= 20  # one store per key
    assert not names & _mine()  # closing an aggregator unlinks its blocks


def test_batch_and_mixed_paths_equal_sba(pool):
    """insert_many: the worker merges its rows from shared memory; batches and single inserts mix freely."""
    x = np.random.default_rng(7).uniform(0.5, 100.0, 300_000)
    for agg in ("max", "std", "moment_sketch"):
        for r, s in [(1000, 1), (4096, 3)]:
            win = pr.CountWindow(range=r, slide=s)
            e1, r1 = pr.sliding_aggregate(x, window=win, agg=agg, algorithm="pba", pool=pool)
            e2, r2 = pr.sliding_aggregate(x, window=win, agg=agg, algorithm="sba")
            assert np.array_equal(e1, e2) and np.array_equal(r1, r2, equal_nan=True)
    win = pr.CountWindow(range=300, slide=2)
    y = x[:20_000]
    with pr.create("pba", win, "sum", pool=pool) as op, pr.create("recal", win, "sum") as ref:
        got = list(op.insert_many(y[:7000])[1]) + _stream(op, y[7000:7500].tolist()) + list(op.insert_many(y[7500:])[1])
        want = _stream(ref, y.tolist())
        assert op.stats()["shared_memory"]
    _same(got, want, exact=False)
    # time windows: batches cut into episodes, history reloaded into shared-memory slots
    ts = np.cumsum(np.random.default_rng(6).integers(0, 3, 20_000))
    win = pr.TimeWindow(range=500, slide=20)
    with pr.create("pba", win, "max", pool=pool) as op, pr.create("recal", win, "max") as ref:
        got = np.concatenate([op.insert_many(y[:9000], ts[:9000])[1], op.insert_many(y[9000:], ts[9000:])[1],
                              op.flush()[1]])
        want = np.concatenate([ref.insert_many(y, ts)[1], ref.flush()[1]])
        assert op.stats()["shared_memory"] and np.array_equal(got, want)


def test_snapshot_moves_between_process_and_thread_operators(pool):
    """A snapshot never points into shared memory: it restores into a thread-pool PBA and back."""
    win = pr.CountWindow(range=30, slide=1)
    x = np.random.default_rng(8).uniform(0, 9, 400).tolist()
    for agg in ("mean", A.PY_MEAN):
        with pr.create("pba", win, agg, pool=pool) as proc, pr.create("pba", win, agg) as thread:
            assert _stream(proc, x[:213]) == _stream(thread, x[:213])
            with pr.create("pba", win, agg).restore(proc.snapshot()) as moved, \
                    pr.create("pba", win, agg, pool=pool).restore(thread.snapshot()) as back:
                assert back.stats()["shared_memory"]
                rest = [_stream(o, x[213:]) for o in (proc, thread, moved, back)]
        assert rest[0] == rest[1] == rest[2] == rest[3] and rest[0]


def test_unimportable_aggregation_uses_the_thread_workers(pool):
    """A lambda cannot reach a worker process: same results, lcs in the pool's threads."""
    agg = pr.Aggregation(lift=float, combine=lambda a, b: max(a, b), lower=float, identity=float("-inf"))
    win = pr.CountWindow(range=20, slide=1)
    x = [float((i * 7) % 13) for i in range(300)]
    with pr.create("pba", win, agg, pool=pool) as op:
        got = _stream(op, x)
        assert not op.stats()["shared_memory"] and op.stats()["lcs_tasks"] > 0
    assert got == [max(x[k : k + 20]) for k in range(len(x) - 19)]


def test_partial_of_the_wrong_type_is_refused_and_changes_nothing(pool):
    bad = pr.Aggregation(lift=A.py_lift, combine=A.py_max2, lower=A.py_lower, identity=float("-inf"), name="bad")
    win = pr.CountWindow(range=4, slide=1)
    with pr.create("pba", win, bad, pool=pool) as op:
        assert op.stats()["shared_memory"]
        op.insert(1.0)
        object.__setattr__(bad, "lift", lambda v: str(v))
        with pytest.raises(TypeError, match="must be a float"):
            op.insert(2.0)
        object.__setattr__(bad, "lift", A.py_lift)
        assert [r for v in (2.0, 3.0, 0.0, 0.0) for _, r in op.insert(v)] == [3.0, 3.0]


# ----------------------------------------------------------------------------- faults
def _fault_run(pool, kind, n=3000, r=64):
    win = pr.CountWindow(range=r, slide=1)
    x = np.random.default_rng(9).uniform(0, 100, n).tolist()
    with pr.create("pba", win, A.FAULTY_MAX, pool=pool) as op, pr.create("recal", win, A.PY_MAX) as ref:
        got = _stream(op, x[: n // 3])
        A.arm(kind)
        got += _stream(op, x[n // 3 : 2 * n // 3])
        mid = op.stats()
        got += _stream(op, x[2 * n // 3 :])
        end = op.stats()
        want = _stream(ref, x)
    assert got == want  # nothing lost, nothing duplicated
    assert not os.path.exists(os.path.join(A.FAULT_DIR, kind))  # the fault did happen
    return mid, end


def test_worker_sigkilled_mid_task_loses_nothing_and_pool_recovers():
    with pr.WorkerPool(kind="process", workers=1, task_timeout=60) as pool:
        assert pool.ready(60)
        old = pool.pids()
        mid, end = _fault_run(pool, "kill")
        st = pool.stats()
        assert st["restarts"] >= 1 and st["generation"] >= 1
        assert mid["fallbacks"] >= 1  # the killed task's lcs was built on the main thread
        assert not any(_alive(p) for p in old)  # the old generation is gone
        assert pool.pids() and not set(pool.pids()) & set(old)
        assert end["fallbacks"] == mid["fallbacks"]  # the last third ran in the new processes


def test_idle_worker_sigkilled_between_chunks():
    with pr.WorkerPool(kind="process", workers=1, task_timeout=60) as pool:
        assert pool.ready(60)
        win = pr.CountWindow(range=64, slide=1)
        x = np.random.default_rng(10).uniform(0, 100, 2000).tolist()
        with pr.create("pba", win, A.PY_MAX, pool=pool) as op, pr.create("recal", win, A.PY_MAX) as ref:
            got = _stream(op, x[:1000])
            old = pool.pids()
            for pid in old:
                os.kill(pid, signal.SIGKILL)
            got += _stream(op, x[1000:])
            assert got == _stream(ref, x)
        assert pool.stats()["restarts"] >= 1 and not set(pool.pids()) & set(old)


def test_hung_worker_times_out_and_is_replaced():
    with pr.WorkerPool(kind="process", workers=1, task_timeout=1.0) as pool:
        assert pool.ready(60)
        old = pool.pids()
        mid, end = _fault_run(pool, "hang")
        st = pool.stats()
        assert st["timeouts"] >= 1 and st["restarts"] >= 1
        assert mid["fallbacks"] >= 1
        assert not any(_alive(p) for p in old)  # the hung worker was killed
        assert end["lcs_tasks"] > mid["lcs_tasks"]


def test_raising_worker_falls_back_without_restart():
    with pr.WorkerPool(kind="process", workers=1) as pool:
        assert pool.ready(60)
        mid, end = _fault_run(pool, "raise")
        assert mid["fallbacks"] == 1 and end["fallbacks"] == 1
        assert pool.stats()["restarts"] == 0


def test_pool_that_keeps_dying_degrades_to_threads(monkeypatch):
    """Workers that die at every task: after MAX_RESTARTS restarts the tasks run in threads; results still equal."""
    import pba_runtime.pool.executor as pool_mod

    monkeypatch.setattr(pool_mod, "MAX_RESTARTS", 2)
    with pr.WorkerPool(kind="process", workers=1) as pool:
        assert pool.ready(60)
        win = pr.CountWindow(range=40, slide=1)
        x = np.random.default_rng(13).uniform(0, 100, 1500).tolist()
        with pr.create("pba", win, A.FAULTY_MAX, pool=pool) as op, pr.create("recal", win, A.PY_MAX) as ref:
            got = []
            for i in range(0, len(x), 100):
                if not pool.stats()["degraded"]:
                    A.arm("kill")
                got += _stream(op, x[i : i + 100])
            assert got == _stream(ref, x)
            st = pool.stats()
            assert st["degraded"] and st["restarts"] == 3 and op.stats()["lcs_tasks"] > 0


def test_batch_merge_worker_killed():
    x = np.random.default_rng(11).uniform(0, 100, 200_000)
    win = pr.CountWindow(range=2000, slide=1)
    with pr.WorkerPool(kind="process", workers=1) as pool:
        assert pool.ready(60)
        A.arm("kill")
        e1, r1 = pr.sliding_aggregate(x, window=win, agg=A.FAULTY_KERNEL_MAX, algorithm="pba", pool=pool)
        assert pool.stats()["restarts"] == 1
        e3, r3 = pr.sliding_aggregate(x, window=win, agg=A.FAULTY_KERNEL_MAX, algorithm="pba", pool=pool)
    e2, r2 = pr.sliding_aggregate(x, window=win, agg="max", algorithm="sba")
    assert np.array_equal(e1, e2) and np.array_equal(r1, r2) and np.array_equal(r3, r2)


def test_closed_process_pool_falls_back_and_unlinks():
    pool = pr.WorkerPool(kind="process", workers=1)
    win = pr.CountWindow(range=16, slide=1)
    op = pr.create("pba", win, A.PY_MAX, pool=pool)
    out = [res for v in range(40) for _, res in op.insert(float(v))]
    names = set(op._shm.block_names)
    assert names and names <= _mine() and names <= set(live_blocks())
    pool.close()
    assert not names & _mine() and not op._shm.block_names  # names gone, the operator goes on
    out += [res for v in range(40, 200) for _, res in op.insert(float(v))]
    assert op.stats()["fallbacks"] > 0
    assert out == [float(k + 15) for k in range(200 - 15)]
    op.close()


# ----------------------------------------------------------------------------- cleanup
def test_dev_shm_before_and_after(pool):
    before = _mine()
    win = pr.CountWindow(range=256, slide=1)
    op = pr.create("pba", win, A.PY_MEAN, pool=pool)
    try:
        _stream(op, [float(i % 10) for i in range(1000)])
        during = _mine() - before
        assert during and all(n.startswith("pba_") for n in during)
        raise KeyError("an exception in the middle of a stream")
    except KeyError:
        pass
    finally:
        op.close()
    assert _mine() - before == set()


_EXIT_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, HERE)
    import pba_runtime as pr
    import aggs_for_processes as A
    if __name__ == "__main__":
        how = sys.argv[1]
        pool = pr.WorkerPool(kind="process", workers=1, start_method=sys.argv[2])
        # the numpy engine's batch merge leases a shared-memory scratch block (the compiled one uses a thread)
        ops = [pr.create("pba", pr.CountWindow(range=100, slide=1), agg, pool=pool, engine=engine)
               for agg, engine in ((A.PY_MAX, "auto"), ("max", "numpy"))]
        ops[1].insert_many([1.0] * 200_000)
        for i in range(1000):
            for op in ops:
                op.insert(float(i))
        print(os.getpid(), sum(n.startswith(f"pba_{os.getpid()}_") for n in os.listdir("/dev/shm")), flush=True)
        if how == "interrupt":
            signal.raise_signal(signal.SIGINT)  # KeyboardInterrupt in the main loop, nothing closed
        elif how == "exit":
            sys.exit(0)  # nothing closed: atexit and finalizers unlink
""")


@pytest.mark.parametrize("how,method", [("exit", "spawn"), ("interrupt", "forkserver")])
def test_interpreter_exit_and_keyboard_interrupt_unlink_everything(tmp_path, how, method, sigint_default):
    script = tmp_path / "run.py"
    script.write_text(_EXIT_SCRIPT.replace("HERE", repr(HERE)))
    proc = subprocess.run([sys.executable, str(script), how, method], capture_output=True, text=True, timeout=90,
                          preexec_fn=sigint_default)
    # a KeyboardInterrupt that ends the interpreter exits by SIGINT (-2)
    assert proc.returncode == (0 if how == "exit" else -signal.SIGINT), proc.stderr
    if how == "interrupt":
        assert "KeyboardInterrupt" in proc.stderr
    pid, held = map(int, proc.stdout.split())
    assert held >= 3  # two stores and a batch scratch block were in /dev/shm
    assert [n for n in os.listdir("/dev/shm") if n.startswith(f"pba_{pid}_")] == []
    assert "resource_tracker" not in proc.stderr and "leaked" not in proc.stderr, proc.stderr


_KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, HERE)
    import numpy as np
    import pba_runtime as pr
    import aggs_for_processes as A

    def sems(ex):
        return [getattr(q, a)._semlock.name for q, attrs in ((ex._call_queue, ("_rlock", "_wlock", "_sem")),
                                                              (ex._result_queue, ("_rlock", "_wlock")))
                for a in attrs]

    if __name__ == "__main__":
        method, names = sys.argv[1], []
        # a worker killed mid-task by a fault, as the fault tests do; the pool recovers and goes on
        with pr.WorkerPool(kind="process", workers=1, start_method=method) as pool:
            assert pool.ready(60)
            names += sems(pool._executor)
            x = np.random.default_rng(9).uniform(0, 100, 600).tolist()
            with pr.create("pba", pr.CountWindow(range=64, slide=1), A.FAULTY_MAX, pool=pool) as op:
                for v in x[:200]:
                    op.insert(v)
                A.arm("kill")
                for v in x[200:]:
                    op.insert(v)
            assert pool.stats()["restarts"] >= 1, pool.stats()
            names += sems(pool._executor)
        left = pr.WorkerPool(kind="process", workers=2, start_method=method)
        assert left.ready(60)
        names += sems(left._executor)
        # a child forked by os.fork that ends normally leaves the parent's pool alone (workers, semaphores)
        child = os.fork()
        if child == 0:
            sys.exit(0)
        assert os.waitpid(child, 0)[1] == 0
        assert left.submit(sum, [1, 2]).result(timeout=60) == 3 and left.stats()["restarts"] == 0
        assert all(os.path.exists("/dev/shm/sem." + n.lstrip("/")) for n in names[-5:])
        # an idle worker killed, and the script exits at once, nothing closed (the exit hooks close it)
        os.kill(left.pids()[0], signal.SIGKILL)
        print(" ".join(names), flush=True)
""")


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_script_that_kills_a_pool_worker_exits_quietly_and_leaves_no_semaphore(tmp_path, method):
    """No resource_tracker KeyError or leak warning, no traceback at exit (concurrent.futures' exit hook once
    wrote to the wakeup pipe of a manager thread closing it: EBADF), and every executor's sem.mp-* is gone;
    a forked child's normal exit killed the parent's workers and unlinked its semaphores' names."""
    script = tmp_path / "kill.py"
    script.write_text(_KILL_SCRIPT.replace("HERE", repr(HERE)))
    A.disarm()
    proc = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr
    names = proc.stdout.split()
    assert len(names) == 15, proc.stdout  # three executors, five semaphores each
    assert [n for n in names if os.path.exists("/dev/shm/sem." + n.lstrip("/"))] == []
    noise = [line for line in proc.stderr.splitlines()
             if any(w in line for w in ("resource_tracker", "KeyError", "leaked", "Traceback", "OSError"))]
    assert noise == [], proc.stderr
    assert not os.path.exists(os.path.join(A.FAULT_DIR, "kill"))  # the fault did happen


# ----------------------------------------------------------------------------- start methods & validation
def test_forkserver_start_method():
    with pr.WorkerPool(kind="process", workers=1, start_method="forkserver") as pool:
        win = pr.CountWindow(range=50, slide=2)
        x = np.random.default_rng(12).uniform(0, 100, 1000).tolist()
        with pr.create("pba", win, A.PY_MEAN, pool=pool) as op, pr.create("recal", win, A.PY_MEAN) as ref:
            _same(_stream(op, x), _stream(ref, x), exact=False)
            assert op.stats()["shared_memory"] and op.stats()["lcs_tasks"] > 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="process", start_method="fork"), "fork is unsafe"),
    (dict(kind="process", start_method="thread"), "start_method"),
    (dict(kind="thread", start_method="spawn"), "only applies"),
    (dict(kind="process", task_timeout=0), "task_timeout"),
    (dict(kind="process", workers=0), "workers"),
])
def test_bad_pool_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pr.WorkerPool(**kwargs)


# ----------------------------------------------------------------------------- logging
_LOG_SCRIPT = textwrap.dedent("""
    import logging, sys
    import pba_runtime as pr
    pr.configure_logging(sys.argv[1], "INFO", max_bytes=20_000, backup_count=200)
    log = logging.getLogger("pba_runtime.test")
    for i in range(int(sys.argv[3])):
        log.info("line %s %d", sys.argv[2], i)
""")


def test_two_processes_log_to_one_rotating_file_without_losing_lines(tmp_path):
    script = tmp_path / "log.py"
    script.write_text(_LOG_SCRIPT)
    path = tmp_path / "pba.log"
    n = 600
    procs = [subprocess.Popen([sys.executable, str(script), str(path), tag, str(n)]) for tag in ("a", "b")]
    for p in procs:
        assert p.wait(timeout=90) == 0
    lines = []
    for f in tmp_path.iterdir():
        if f.name.startswith("pba.log"):
            lines += [ln for ln in f.read_text().splitlines() if " line " in ln]
    assert len([f for f in tmp_path.iterdir() if f.name.startswith("pba.log")]) > 2  # it did rotate
    got = sorted(ln.split(" line ")[1] for ln in lines)
    assert got == sorted(f"{t} {i}" for t in ("a", "b") for i in range(n))  # every line exactly once


def test_workers_log_pid_task_and_timing(tmp_path):
    path = tmp_path / "workers.log"
    pr.configure_logging(str(path), "DEBUG")
    try:
        with pr.WorkerPool(kind="process", workers=1) as pool:
            with pr.create("pba", pr.CountWindow(range=32, slide=1), A.PY_MAX, pool=pool) as op:
                _stream(op, [float(i) for i in range(200)])
            pids = pool.pids()
    finally:
        pr.configure_logging(None)
    text = path.read_text()
    assert f"worker pid {pids[0]}: lcs task pba_{os.getpid()}_" in text and " ms" in text
    assert f"worker pid {pids[0]} started" in text
