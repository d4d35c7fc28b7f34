"""Standalone runtime, end to end: generated streams through a keyed job vs ``recal`` per key.

Every job here runs real task-slot processes; streams are small so the file
stays within a few seconds.
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest

import pba_runtime as pr
from pba_runtime.runtime import (
    BarrierAligner,
    CsvSource,
    Debs12Source,
    Debs14Source,
    Job,
    JsonlSource,
    LatencyHistogram,
    UserError,
    load_checkpoint,
)
from pba_runtime.runtime.partitioning import Partitioner, compact_keys, group_by_key, slot_of, stable_hash
from pba_runtime.runtime.sinks import FileSink, format_results


@pytest.fixture(autouse=True)
def no_leftover_children():
    yield
    assert multiprocessing.active_children() == []


# ----------------------------------------------------------------------------- helpers
def read_results(path: str) -> dict[str, list[tuple[int, int, str]]]:
    """Sink CSV -> {key: [(start, end, value text), ...]} in file order."""
    out: dict[str, list] = {}
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["key", "start", "end", "value"]
    for key, start, end, value in rows[1:]:
        out.setdefault(key, []).append((int(start), int(end), value))
    return out


def reference(keys, values, ts, window, agg, lateness=None):
    """Per key: recal's windows (over the non-late tuples, stably sorted by time) and the late tuples."""
    results: dict[str, list] = {}
    late: dict[str, list] = {}
    is_time = isinstance(window, pr.TimeWindow)
    for k in np.unique(keys).tolist():
        idx = np.flatnonzero(keys == k)
        v = values[idx]
        t = ts[idx] if is_time else None
        if is_time and lateness is not None:
            running = np.maximum.accumulate(t)
            prev_max = np.concatenate([[t[0]], running[:-1]])
            is_late = t < prev_max - lateness
            # a late tuple does not raise the maximum, but it is below it anyway
            late[str(k)] = list(zip(t[is_late].tolist(), v[is_late].tolist()))
            order = np.argsort(t[~is_late], kind="stable")
            v, t = v[~is_late][order], t[~is_late][order]
        op = pr.create("recal", window, agg)
        e1, r1 = op.insert_many(v, t)
        e2, r2 = op.flush()
        ends = np.concatenate([e1, e2]).tolist()
        res = np.concatenate([np.asarray(r1, dtype=float), np.asarray(r2, dtype=float)]).tolist()
        results[str(k)] = [(e - window.range, e, r) for e, r in zip(ends, res)]
    return results, late


def assert_same(got: dict, want: dict, rel: float = 0.0) -> None:
    assert sorted(got) == sorted(k for k in want if want[k])
    for k, rows in want.items():
        g = got.get(k, [])
        assert [(s, e) for s, e, _ in g] == [(s, e) for s, e, _ in rows], k
        for (_, _, gv), (_, _, wv) in zip(g, rows):
            if rel:
                assert math.isclose(float(gv), wv, rel_tol=rel), (k, gv, wv)
            else:
                assert float(gv) == wv, (k, gv, wv)


# ----------------------------------------------------------------------------- end to end vs recal
@pytest.mark.parametrize("parallelism", [1, 2])
def test_count_windows_match_recal_per_key(tmp_path, parallelism):
    src = Debs14Source(plugs=7, tuples=30_000, seed=3)
    window = pr.CountWindow(range=300, slide=7)
    out = tmp_path / "out.csv"
    summary = Job(src, window, "max", "pba", parallelism=parallelism, sink=f"csv:{out}", batch_size=4_000).run()
    k, v, t = Debs14Source(plugs=7, tuples=30_000, seed=3).take(0, 30_000)
    want, _ = reference(k, v, t, window, "max")
    assert_same(read_results(out), want)
    assert summary["tuples"] == 30_000
    assert summary["windows"] == sum(len(r) for r in want.values())
    assert summary["keys"] == 7 and summary["algorithms"] == {"pba": 7}
    assert summary["late"] == 0
    assert len(summary["slots"]) == parallelism


@pytest.mark.parametrize("parallelism", [1, 2])
def test_time_windows_match_recal_per_key(tmp_path, parallelism):
    src = Debs12Source(sensors=4, tuples=24_000, seed=5)
    window = pr.TimeWindow(range=1_000, slide=250)  # 100 records/s: 100 records per window
    out = tmp_path / "out.csv"
    summary = Job(src, window, "mean", "sba", parallelism=parallelism, sink=f"csv:{out}", batch_size=3_000).run()
    k, v, t = src.take(0, 24_000)
    want, _ = reference(k, v, t, window, "mean")
    assert_same(read_results(out), want, rel=1e-9)
    assert summary["windows"] == sum(len(r) for r in want.values())
    assert summary["late"] == 0 and not os.path.exists(tmp_path / "out.late.csv")


@pytest.mark.parametrize("agg", ["min", "sum"])
def test_every_algorithm_gives_the_same_results(tmp_path, agg):
    window = pr.CountWindow(range=64, slide=3)
    src = Debs14Source(plugs=5, tuples=5_000)
    k, v, t = src.take(0, 5_000)
    want, _ = reference(k, v, t, window, agg)
    ran = []
    for alg in [*pr.ALGORITHMS, "auto"]:
        try:
            pr.create(alg, window, agg).close()
        except ValueError:  # e.g. subtract-on-evict needs an invertible aggregation
            continue
        out = tmp_path / f"{alg}.csv"
        Job(src, window, agg, alg, parallelism=2, sink=f"csv:{out}", batch_size=1_000).run()
        assert_same(read_results(out), want, rel=1e-9 if agg == "sum" else 0.0)
        ran.append(alg)
    assert {"pba", "sba", "recal", "auto"} <= set(ran)


@pytest.mark.parametrize("algorithm", [
    "pba",  # behind the runtime's reorder buffer
    pytest.param("fiba", marks=pytest.mark.skipif("fiba" not in pr.ALGORITHMS, reason="no fiba")),  # native
])
def test_late_tuples_go_to_the_side_output_with_exact_counts(tmp_path, algorithm):
    src = Debs12Source(sensors=3, tuples=30_000, seed=2, disorder=400, disorder_fraction=0.1)
    window = pr.TimeWindow(range=500, slide=100)
    lateness = 150
    out, late_out = tmp_path / "out.jsonl", tmp_path / "late.jsonl"
    summary = Job(src, window, "max", algorithm, parallelism=2, sink=f"jsonl:{out}", late_output=str(late_out),
                  allowed_lateness=lateness, batch_size=2_500).run()
    k, v, t = src.take(0, 30_000)
    want, want_late = reference(k, v, t, window, "max", lateness)
    n_late = sum(len(x) for x in want_late.values())
    assert 0 < n_late < 30_000 * 0.1
    assert summary["late"] == n_late
    got_late: dict[str, list] = {}
    for line in late_out.read_text().splitlines():
        obj = json.loads(line)
        got_late.setdefault(obj["key"], []).append((obj["timestamp"], obj["value"]))
    assert got_late == {key: rows for key, rows in want_late.items() if rows}
    got: dict[str, list] = {}
    for line in out.read_text().splitlines():
        obj = json.loads(line)
        got.setdefault(obj["key"], []).append((obj["start"], obj["end"], repr(obj["value"])))
    assert_same(got, want)
    # nothing dropped: every tuple is in a window's input or in the late output
    assert summary["tuples"] == 30_000


def test_time_windows_without_lateness_send_out_of_order_tuples_to_late(tmp_path):
    src = Debs14Source(plugs=3, tuples=6_000, disorder=3_000, disorder_fraction=0.2)
    summary = Job(src, pr.TimeWindow(range=10_000, slide=5_000), "count", "sba", parallelism=1,
                  late_output=str(tmp_path / "late.csv")).run()
    k, v, t = src.take(0, 6_000)
    _, want_late = reference(k, v, t, pr.TimeWindow(range=10_000, slide=5_000), "count", 0)
    assert summary["late"] == sum(len(x) for x in want_late.values()) > 0
    rows = list(csv.reader(open(tmp_path / "late.csv")))
    assert rows[0] == ["key", "timestamp", "value"] and len(rows) == summary["late"] + 1


def test_csv_round_trip(tmp_path):
    """A generated stream written as CSV and read back gives the same windows; results read back exactly."""
    n = 12_000
    gen = Debs14Source(plugs=6, tuples=n, seed=9)
    k, v, t = gen.take(0, n)
    data = tmp_path / "plugs.csv"
    with open(data, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ts", "plug", "load"])
        for row in zip(t.tolist(), k.tolist(), v.tolist()):
            w.writerow(row)
    window = pr.TimeWindow(range=5_000, slide=1_000)
    a, b = tmp_path / "from_gen.csv", tmp_path / "from_csv.csv"
    Job(gen, window, "sum", "pba", parallelism=2, sink=f"csv:{a}", batch_size=1_000).run()
    Job(CsvSource(str(data), key_col="plug", ts_col="ts", value_col="load"), window, "sum", "pba", parallelism=2,
        sink=f"csv:{b}", batch_size=1_000).run()
    assert read_results(a) == read_results(b)
    want, _ = reference(k, v, t, window, "sum")
    assert_same(read_results(b), want, rel=1e-9)


def test_jsonl_from_stdin(tmp_path):
    lines = "".join(json.dumps({"key": f"s{i % 3}", "value": float(i), "ts": 1_000 + 10 * i}) + "\n"
                    for i in range(300))
    out = tmp_path / "out.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "pba_runtime", "--source", "jsonl:-", "--window", "time", "--range", "100",
         "--slide", "50", "--agg", "count", "--sink", f"csv:{out}", "-p", "2", "--no-progress", "--quiet"],
        input=lines.encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    got = read_results(out)
    assert sorted(got) == ["s0", "s1", "s2"]
    # each key has a tuple every 30 ms; a 100 ms window holds 3 or 4 of them
    assert {v for rows in got.values() for _, _, v in rows[2:-2]} <= {"3", "4"}


def test_jsonl_file_source_and_its_errors(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"k": "a" if i % 2 else 7, "v": i, "t": i}) + "\n" for i in range(20)))
    out = tmp_path / "out.csv"
    summary = Job(JsonlSource(str(data), key_col="k", value_col="v", ts_col="t"), pr.TimeWindow(range=4, slide=4),
                  "sum", "sba", parallelism=2, sink=f"csv:{out}").run()
    assert summary["windows"] == 10
    assert read_results(out)["7"][0] == (0, 4, "2.0") and read_results(out)["a"][0] == (0, 4, "4.0")
    data.write_text('{"k": "a", "v": 1, "t": 1}\n{"k": "a", "v": 1, "t": 1.5}\n')
    with pytest.raises(UserError, match=r"line 2: member 't': expected an integer timestamp"):
        Job(JsonlSource(str(data), key_col="k", value_col="v", ts_col="t"), pr.TimeWindow(range=4, slide=4),
            "sum", "sba", parallelism=1).run()
    data.write_text('{"k": "a", "v": 1, "t": 1}\n{"k": "a", "v": 1\n')
    with pytest.raises(UserError, match=r"line 2: not valid JSON"):
        Job(JsonlSource(str(data), key_col="k", value_col="v", ts_col="t"), pr.TimeWindow(range=4, slide=4),
            "sum", "sba", parallelism=1).run()


def test_vector_and_list_results(tmp_path):
    out = tmp_path / "out.jsonl"
    Job(Debs14Source(plugs=2, tuples=40), pr.CountWindow(range=3, slide=3), "collect", "sba", parallelism=1,
        sink=f"jsonl:{out}").run()
    k, v, _ = Debs14Source(plugs=2, tuples=40).take(0, 40)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    for row in rows:
        vals = v[k == int(row["key"])]
        assert row["value"] == vals[row["start"]:row["end"]].tolist()
    out2 = tmp_path / "sketch.csv"
    Job(Debs14Source(plugs=2, tuples=40), pr.CountWindow(range=4, slide=4), "moment_sketch", "sba", parallelism=1,
        sink=f"csv:{out2}").run()
    first = next(iter(read_results(out2).values()))[0][2]
    assert len(first.split(";")) == 23


# ----------------------------------------------------------------------------- checkpoints in-process
def test_checkpoints_are_written_and_a_finished_job_is_not_rerun(tmp_path):
    ck = tmp_path / "ck"
    out = tmp_path / "out.csv"
    job = Job(Debs14Source(plugs=4, tuples=20_000), pr.CountWindow(range=100, slide=1), "max", "pba",
              parallelism=2, sink=f"csv:{out}", checkpoint_dir=str(ck), checkpoint_every=4_000, batch_size=1_000)
    summary = job.run()
    # up to 4 periodic + the final one: a checkpoint is not started while one is in flight, and this stream
    # lasts ~30 ms, so on a loaded machine a barrier's trip (through the slots' output stage threads) can
    # outlast the next one's turn; at least one periodic checkpoint and the final one are always taken
    assert summary["checkpoints"] >= 2
    before = out.read_bytes()
    again = Job(Debs14Source(plugs=4, tuples=20_000), pr.CountWindow(range=100, slide=1), "max", "pba",
                parallelism=2, sink=f"csv:{out}", checkpoint_dir=str(ck), batch_size=1_000).run(resume=True)
    assert again["total"]["windows"] == summary["windows"] and again["windows"] == 0
    assert out.read_bytes() == before


def test_csv_job_that_failed_resumes_from_its_checkpoint(tmp_path):
    """A bad line stops the job after some checkpoints; fixed in place, --resume ends like a clean run."""
    n = 8_000
    k, v, t = Debs14Source(plugs=5, tuples=n, seed=11).take(0, n)
    lines = [f"{a},{b},{c:.3f}\n" for a, b, c in zip(k.tolist(), t.tolist(), v.tolist())]
    good = "key,ts,value\n" + "".join(lines)
    bad_line = 6_700
    broken = lines[:]
    a, b, c = lines[bad_line].rstrip("\n").split(",")
    broken[bad_line] = f"{a},{b},{'?' * len(c)}\n"  # same length: offsets stay valid
    data = tmp_path / "in.csv"
    window = pr.TimeWindow(range=2_000, slide=500)

    def job(out):
        return Job(CsvSource(str(data)), window, "max", "pba", parallelism=2, sink=f"csv:{out}",
                   checkpoint_dir=str(tmp_path / f"ck-{out.stem}"), checkpoint_every=1_000, batch_size=500)

    data.write_text(good)
    job(tmp_path / "ref.csv").run()
    data.write_text("key,ts,value\n" + "".join(broken))
    with pytest.raises(UserError, match=f"line {bad_line + 2}: column 'value'"):
        job(tmp_path / "out.csv").run()
    data.write_text(good)
    summary = job(tmp_path / "out.csv").run(resume=True)
    assert 0 < summary["tuples"] < n and summary["total"]["tuples"] == n
    assert (tmp_path / "out.csv").read_text().count("\n") == (tmp_path / "ref.csv").read_text().count("\n")
    assert read_results(tmp_path / "out.csv") == read_results(tmp_path / "ref.csv")


def test_a_fresh_start_drops_the_previous_checkpoint(tmp_path):
    data = tmp_path / "in.csv"
    data.write_text("key,value\n" + "a,1\n" * 50)
    ck = str(tmp_path / "ck")
    Job(CsvSource(str(data), ts_col=None), pr.CountWindow(range=2, slide=1), "max", "sba", parallelism=1,
        sink=f"csv:{tmp_path / 'o.csv'}", checkpoint_dir=ck, checkpoint_every=10, batch_size=10).run()
    assert load_checkpoint(ck)["finished"]
    before = (tmp_path / "o.csv").read_bytes()
    data.write_text("key,value\na,oops\n")
    with pytest.raises(UserError, match="oops"):  # fails in its first batch: before the sink is opened
        Job(CsvSource(str(data), ts_col=None), pr.CountWindow(range=2, slide=1), "max", "sba", parallelism=1,
            sink=f"csv:{tmp_path / 'o.csv'}", checkpoint_dir=ck, checkpoint_every=10, batch_size=10).run()
    assert load_checkpoint(ck)["finished"] and (tmp_path / "o.csv").read_bytes() == before  # both untouched
    data.write_text("key,value\n" + "a,1\n" * 3 + "a,oops\n")
    with pytest.raises(UserError, match="oops"):  # fails in its second batch, before its first checkpoint
        Job(CsvSource(str(data), ts_col=None), pr.CountWindow(range=2, slide=1), "max", "sba", parallelism=1,
            sink=f"csv:{tmp_path / 'o.csv'}", checkpoint_dir=ck, checkpoint_every=10, batch_size=2).run()
    assert load_checkpoint(ck) is None  # so --resume cannot pair the old state with the rewritten sink


def test_resume_checks_the_job_matches(tmp_path):
    ck = tmp_path / "ck"
    Job(Debs14Source(plugs=4, tuples=2_000), pr.CountWindow(range=10, slide=1), "max", "sba", parallelism=1,
        checkpoint_dir=str(ck), checkpoint_every=500, batch_size=500).run()
    with pytest.raises(UserError, match="another job.*window"):
        Job(Debs14Source(plugs=4, tuples=2_000), pr.CountWindow(range=20, slide=1), "max", "sba", parallelism=1,
            checkpoint_dir=str(ck)).run(resume=True)
    with pytest.raises(UserError, match="no checkpoint"):
        Job(Debs14Source(plugs=4, tuples=2_000), pr.CountWindow(range=10, slide=1), "max", "sba", parallelism=1,
            checkpoint_dir=str(tmp_path / "empty")).run(resume=True)


# ----------------------------------------------------------------------------- failures
def test_a_slot_failure_stops_the_job_with_a_clear_error(tmp_path):
    data = tmp_path / "neg.csv"
    data.write_text("key,value\na,1\na,-2\n")
    with pytest.raises(UserError, match=r"^task slot 0: value must be >= 0 for aggregation 'geomean' "
                                        r"\(a geometric mean of positive values\), got -2\.0$"):
        Job(CsvSource(str(data), ts_col=None), pr.CountWindow(range=1, slide=1), "geomean", "sba",
            parallelism=1).run()


def test_bad_input_line_is_reported_with_its_number(tmp_path):
    data = tmp_path / "bad.csv"
    data.write_text("key,value\na,1\nb,oops\n")
    with pytest.raises(UserError, match=r"line 3: column 'value': cannot read 'oops'"):
        Job(CsvSource(str(data), ts_col=None), pr.CountWindow(range=1, slide=1), "max", "sba", parallelism=1).run()


@pytest.mark.parametrize("kwargs, match", [
    ({"parallelism": 0}, "parallelism must be a positive integer"),
    ({"allowed_lateness": 5}, "time windows only"),
    ({"sink": "orc:x"}, "sink must be"),
    ({"sink": "arrow:-"}, "cannot write stdout"),
    ({"algorithm": "fast"}, "unknown algorithm 'fast'"),
    ({"agg": "mode"}, "unknown aggregation 'mode'"),
    ({"checkpoint_every": 10}, "needs a checkpoint directory"),
])
def test_job_validates_its_configuration(kwargs, match):
    args = {"agg": "max", "algorithm": "pba", **kwargs}
    agg, alg = args.pop("agg"), args.pop("algorithm")
    with pytest.raises(UserError, match=match):
        Job(Debs14Source(plugs=2, tuples=10), pr.CountWindow(range=4, slide=1), agg, alg, **args)


# ----------------------------------------------------------------------------- units
@pytest.mark.parametrize("window, lateness", [(pr.TimeWindow(range=5_000, slide=1_000), 0),
                                              (pr.CountWindow(range=30, slide=1), None)])
def test_slot_barrier_state_is_frozen_at_the_barrier(window, lateness):
    """The states sent at a barrier do not change when the slot goes on (the queue pickles later)."""
    import pickle

    from pba_runtime.runtime.slot import SlotSpec, TaskSlot

    spec = SlotSpec(index=0, window=window, agg="max", algorithm="pba", allowed_lateness=lateness,
                    sink_format="csv")
    k, v, t = Debs14Source(plugs=3, tuples=600).take(0, 600)  # (these broke a state sent unpickled)
    a = TaskSlot(spec)
    a.on_data(k[:300], v[:300], t[:300], 0.0)
    payload = a.on_barrier(1)[3]
    first = a.on_data(k[300:], v[300:], t[300:], 0.0)
    b = TaskSlot(spec, pickle.loads(payload["states"]))
    again = b.on_data(k[300:], v[300:], t[300:], 0.0)
    assert first[2] == again[2] and first[3] == again[3] > 0
    a.close()
    b.close()


def test_stable_hash_is_the_same_in_another_process():
    keys = np.array(["plug-1", "mf02", "é"])
    ints = np.arange(-3, 50)
    code = ("import numpy as np; from pba_runtime.runtime.partitioning import stable_hash; "
            "print(stable_hash(np.array(['plug-1', 'mf02', 'é'])).tolist(), stable_hash(np.arange(-3, 50)).tolist())")
    env = dict(os.environ, PYTHONHASHSEED="123")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert got.strip() == f"{stable_hash(keys).tolist()} {stable_hash(ints).tolist()}"
    assert np.bincount(slot_of(np.arange(84), 2)).min() > 30  # 84 plugs spread over 2 slots


@pytest.mark.parametrize("keys", [np.arange(84), np.array([0, 5, 65_535, 3]), np.array([-4, 7, 300]),
                                  np.array([2**40, 1, 2]), np.array([70_000, 0]), np.array([], dtype=np.int64)])
def test_partitioner_table_and_compact_keys_equal_the_slow_path(keys):
    """The table of slots for small keys gives slot_of's slots; compact keys keep their values and groups."""
    rng = np.random.default_rng(3)
    batch = rng.choice(keys, 1000) if len(keys) else keys
    for parallelism in (1, 2, 3, 7):
        part = Partitioner(parallelism)
        for _ in range(2):  # the table, then the cached table
            assert part(batch).tolist() == slot_of(batch, parallelism).tolist()
    small = compact_keys(batch)
    assert small.tolist() == batch.tolist() and small.dtype.itemsize <= batch.dtype.itemsize
    assert [(k, i.tolist()) for k, i in group_by_key(small)] == [(k, i.tolist()) for k, i in group_by_key(batch)]
    assert all(type(k) is int for k, _ in group_by_key(small))


def test_group_by_key_keeps_arrival_order():
    keys = np.array(["b", "a", "b", "c", "a", "b"])
    assert [(k, i.tolist()) for k, i in group_by_key(keys)] == [("a", [1, 4]), ("b", [0, 2, 5]), ("c", [3])]


def test_barrier_alignment_holds_later_messages_until_all_slots_have_the_barrier():
    events = []
    a = BarrierAligner(3, deliver=lambda s, m: events.append((s, m)),
                       complete=lambda cid, parts: events.append(("ckpt", cid, sorted(parts))))
    a.offer(0, ("barrier", 0, 1, "s0"))
    a.offer(0, "x0")
    a.offer(0, ("barrier", 0, 2, "s0'"))  # already the next checkpoint: held too
    a.offer(1, "y0")
    a.offer(1, ("barrier", 1, 1, "s1"))
    a.offer(1, "y1")
    assert events == [(1, "y0")]
    a.offer(2, ("barrier", 2, 1, "s2"))
    assert events == [(1, "y0"), ("ckpt", 1, [0, 1, 2]), (0, "x0"), (1, "y1")]
    assert a.pending == 2


def test_file_sink_truncates_to_the_checkpointed_offset(tmp_path):
    p = tmp_path / "o.csv"
    s = FileSink(str(p), "csv")
    s.open()
    s.write(format_results("csv", "k", np.array([2, 3]), np.array([1.0, 2.0]), 2).encode())
    off = s.sync()
    s.write(b"k,2,4,9.0\n")
    s.close()
    s = FileSink(str(p), "csv")
    s.open(resume_offset=off)
    s.write(b"k,2,4,3.0\n")
    s.close()
    assert p.read_text() == "key,start,end,value\nk,0,2,1.0\nk,1,3,2.0\nk,2,4,3.0\n"


@pytest.mark.parametrize("reserve", [100, 4096])
def test_file_sink_reserves_disk_ahead_and_gives_it_back(tmp_path, monkeypatch, reserve):
    """The sink reserves disk past what it wrote (a write crossing the reserve takes more), never changes the
    file's length by it (the checkpoint's offset and readers see only what was written), and gives back what
    is left when it closes, also after a resume."""
    from pba_runtime.runtime import sinks

    monkeypatch.setattr(sinks, "PREALLOCATE", reserve)
    p = tmp_path / "o.csv"
    lines = [f"k,{i},{i + 2},{i / 3!r}\n".encode() for i in range(3000)]
    s = FileSink(str(p), "csv")
    s.open()
    for i in range(0, 2000, 8):
        s.write(b"".join(lines[i:i + 8]))
        s._f.flush()
        assert os.path.getsize(p) == s.offset
    off = s.sync()
    assert off == os.path.getsize(p)
    if s._reserved > 0:  # a file system that cannot reserve writes as before
        assert s._reserved >= s.offset
    s.write(b"k,9,9,9.0\n")  # after the checkpoint: gone at the resume
    s.close()
    assert os.stat(p).st_blocks * 512 < os.path.getsize(p) + 2 * 4096
    s = FileSink(str(p), "csv")
    s.open(resume_offset=off)
    s.write(b"".join(lines[2000:]))
    s.close()
    assert p.read_bytes() == b"key,start,end,value\n" + b"".join(lines)
    assert os.stat(p).st_blocks * 512 < os.path.getsize(p) + 2 * 4096


def test_latency_histogram_percentiles_are_within_two_percent():
    h = LatencyHistogram()
    lat = np.random.default_rng(0).lognormal(-5, 1, 5_000)
    for x in lat:
        h.record(float(x), 2)
    for p in (50, 90, 99):
        want = np.percentile(lat, p)
        assert want * 0.97 <= h.percentile(p) <= want * 1.03, p
    assert h.count == 10_000 and h.percentile(100) == lat.max()


def test_generators_are_deterministic_by_position():
    a = Debs14Source(plugs=84, tuples=None, seed=4, disorder=100)
    whole = a.take(65_000, 1_000)
    b = Debs14Source(plugs=84, tuples=None, seed=4, disorder=100)
    parts = [b.take(65_000, 536), b.take(65_536, 464)]
    for col in range(3):
        assert np.array_equal(whole[col], np.concatenate([p[col] for p in parts]))
    counts = np.bincount(Debs14Source(plugs=84, tuples=None).take(0, 200_000)[0], minlength=84)
    assert counts.min() > 0 and counts.max() / counts.min() < 3.5  # slight skew


@pytest.mark.parametrize("source", [Debs14Source(plugs=84, tuples=70_000, seed=4, disorder=100),
                                    Debs12Source(sensors=3, tuples=70_000, disorder=50)])
def test_generators_without_timestamps_give_the_same_keys_and_values(source):
    """A count-window job asks for no timestamps (the generator skips them): the same keys and values."""
    with_ts = list(source.batches(batch_size=40_000))
    without = list(source.batches(batch_size=40_000, timestamps=False))
    assert [b.position for b in with_ts] == [b.position for b in without]
    for a, b in zip(with_ts, without):
        assert np.array_equal(a.keys, b.keys) and np.array_equal(a.values, b.values)
        assert a.timestamps is not None and b.timestamps is None


def test_slots_run_the_coordinators_pba_runtime_whatever_the_working_directory(tmp_path):
    """A forkserver imports the modules it preloads (the slot's) on a path of its own, which begins with the
    working directory: Python 3.11 does not give it the parent's ``sys.path``. A ``pba_runtime`` in the
    directory a job runs from (another checkout) would then be the slots' code, and the coordinator's the one
    it imported. The job starts its forkserver on the coordinator's path instead."""
    decoy = tmp_path / "cwd" / "pba_runtime" / "runtime"
    decoy.mkdir(parents=True)
    (decoy.parent / "__init__.py").write_text("")
    (decoy / "__init__.py").write_text("")
    (decoy / "slot.py").write_text("def slot_main(*args, **kwargs):\n    raise SystemExit('the decoy slot ran')\n")
    script = tmp_path / "script" / "run.py"
    script.parent.mkdir()
    script.write_text(
        "import pba_runtime as pr\n"
        "from pba_runtime.runtime import Debs14Source, Job\n"
        "if __name__ == '__main__':\n"
        "    s = Job(Debs14Source(plugs=2, tuples=2_000), pr.CountWindow(range=10, slide=1), 'max', 'sba',\n"
        "            parallelism=2, start_method='forkserver').run()\n"
        "    print('windows', s['windows'])\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path / "cwd", capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"windows {2_000 - 2 * 9}" in proc.stdout
