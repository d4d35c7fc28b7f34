"""The Spark adapter's pieces that need no SparkSession: the Arrow runner, the RDD
partition function on plain iterators, intervals, the algorithm choice, the pool.

Results are checked against ``tests/oracle.py`` (written from the spec, no
pba_runtime code). These tests run without Java and carry no ``spark`` mark.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import Future

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from oracle import assert_results_equal, count_windows, time_windows

import pba_runtime as pr
import spark_integration as si
from spark_integration import python_worker as rt
from spark_integration.arrow_runner import (
    ORDER_COL,
    VALUE_COL,
    RunnerConfig,
    run_key_frame,
    run_keyed_batches,
)

AGGS = ["max", "sum", "mean", "argmax", "count", "std", "collect", "moment_sketch"]


def _keyed_data(rng, sizes, time=False):
    """Rows sorted by key then order: keys 'k0'.. with the given sizes; timestamps with repeats and gaps."""
    keys, vals, ts = [], [], []
    for i, n in enumerate(sizes):
        keys += [f"k{i}"] * n
        vals.append(rng.integers(-50, 50, n).astype(float))  # ties, to check argmax takes the oldest
        if time:
            ts.append(np.cumsum(rng.choice([0, 1, 3, 7, 40], n)) + int(rng.integers(-100, 100)))
    v = np.concatenate(vals) if vals else np.empty(0)
    t = np.concatenate(ts) if ts else None
    return keys, v, t


def _batches(keys, v, t, rng, max_rows=37):
    out, i = [], 0
    while i < len(v):
        n = int(rng.integers(1, max_rows))
        cols = {"key": pa.array(keys[i:i + n], pa.string()), VALUE_COL: pa.array(v[i:i + n])}
        if t is not None:
            cols[ORDER_COL] = pa.array(t[i:i + n], pa.int64())
        out.append(pa.RecordBatch.from_pydict(cols))
        i += n
    return out


def _expected(keys, v, t, window, agg):
    want = {}
    for k in dict.fromkeys(keys):
        sel = np.array([x == k for x in keys])
        if isinstance(window, pr.TimeWindow):
            want[k] = time_windows(v[sel], t[sel], window.range, window.slide, agg, window.offset)
        else:
            want[k] = count_windows(v[sel], window.range, window.slide, agg)
    return want


def _check(out_rows, want, agg, v):
    got = {}
    for k, e, r in out_rows:
        got.setdefault(k, ([], []))
        got[k][0].append(e)
        got[k][1].append(r)
    for k, (we, wr) in want.items():
        ge, gr = got.get(k, ([], []))
        assert ge == we, f"key {k}: window ends differ"
        assert_results_equal(agg, gr, wr, v)
    assert set(got) <= set(want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the oracle's moment sketch of zeros (log 0)
@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("window", [pr.CountWindow(range=7, slide=3), pr.CountWindow(range=5, slide=1),
                                    pr.TimeWindow(range=10, slide=4, offset=1), pr.TimeWindow(range=6, slide=6)],
                         ids=["count-7-3", "count-5-1", "time-10-4-1", "time-6-6"])
@pytest.mark.parametrize("path", ["arrow", "pandas"])
def test_runner_matches_oracle(agg, window, path):
    """Both runners: record batches spanning keys (``mapInArrow``), one key's DataFrame (``applyInPandas``)."""
    rng = np.random.default_rng(hash((agg, repr(window))) % 2**32)
    is_time = isinstance(window, pr.TimeWindow)
    keys, v, t = _keyed_data(rng, [120, 3, 0, 1, 45, 9], time=is_time)
    if agg == "moment_sketch":
        v = np.abs(v)  # its log terms need values >= 0 (the spec)
    # small pieces: a key spans many batches and many insert_many calls
    cfg = RunnerConfig(key_names=("key",), window=window, agg=agg, batch_rows=16, out_rows=10)
    if path == "arrow":
        out = pa.Table.from_batches(list(run_keyed_batches(cfg, _batches(keys, v, t, rng))))
        assert out.column_names == ["key", "window_end", "result"]
        rows = zip(out.column("key").to_pylist(), out.column("window_end").to_pylist(),
                   out.column("result").to_pylist())
    else:
        frame = pd.DataFrame({"key": keys, VALUE_COL: v, **({ORDER_COL: t} if is_time else {})})
        outs = [run_key_frame(cfg, g) for _, g in frame.groupby("key", sort=False)]
        assert all(list(o.columns) == ["key", "window_end", "result"] for o in outs)
        rows = [r for o in outs for r in zip(o["key"], o["window_end"].tolist(), o["result"].tolist())]
    _check(rows, _expected(keys, v, t, window, agg), agg, v)


def test_frame_runner_keeps_nan_and_types_an_empty_key():
    """NaN values are values; the result columns are Arrow-backed (PySpark would make a NaN null otherwise)."""
    cfg = RunnerConfig(key_names=("key",), window=pr.CountWindow(range=2, slide=1), agg="min", algorithm_column=True)
    out = run_key_frame(cfg, pd.DataFrame({"key": [7, 7, 7], VALUE_COL: [1.0, np.nan, 2.0]}))
    assert out["key"].tolist() == [7, 7] and out["algorithm"].tolist() == ["sba", "sba"]
    assert pa.array(out["result"]).to_pylist()[0] != pa.array(out["result"]).to_pylist()[0]  # NaN, not null
    assert pa.array(out["result"]).null_count == 0
    empty = run_key_frame(cfg, pd.DataFrame({"key": pd.Series([], dtype=np.int64),
                                             VALUE_COL: pd.Series([], dtype=float)}))
    assert len(empty) == 0 and list(empty.columns) == ["key", "window_end", "result", "algorithm"]
    assert str(empty["key"].dtype) == "int64" and pa.array(empty["window_end"]).type == pa.int64()
    unsorted = pd.DataFrame({"key": ["a", "a"], VALUE_COL: [1.0, 2.0], ORDER_COL: [5, 4]})
    tcfg = RunnerConfig(key_names=("key",), window=pr.TimeWindow(range=2, slide=1), agg="max", order_label="ts")
    with pytest.raises(ValueError, match="'ts' is not sorted within key key='a'"):
        run_key_frame(tcfg, unsorted)


def test_runner_multi_column_and_null_keys():
    cfg = RunnerConfig(key_names=("a", "b"), window=pr.CountWindow(range=2, slide=1), agg="sum")
    b1 = pa.RecordBatch.from_pydict({"a": [None, None, 1, 1, 1], "b": ["x", "x", "x", "y", "y"],
                                     VALUE_COL: [1.0, 2.0, 3.0, 4.0, 5.0]})
    b2 = pa.RecordBatch.from_pydict({"a": [1, 2], "b": ["y", None], VALUE_COL: [6.0, 7.0]})
    out = pa.Table.from_batches(list(run_keyed_batches(cfg, [b1, b2]))).to_pydict()
    assert out == {"a": [None, 1, 1], "b": ["x", "y", "y"], "window_end": [2, 2, 3], "result": [3.0, 9.0, 11.0]}


def test_runner_empty_input_and_metrics():
    m = si.AlgorithmMetrics()
    cfg = RunnerConfig(key_names=("key",), window=pr.CountWindow(range=3, slide=1), agg="max", metrics=m)
    assert list(run_keyed_batches(cfg, [])) == []
    assert m.value == {}
    empty = pa.RecordBatch.from_pydict({"key": pa.array([], pa.string()), VALUE_COL: pa.array([], pa.float64())})
    assert list(run_keyed_batches(cfg, [empty])) == []


def test_runner_algorithm_column_and_metrics():
    m = si.AlgorithmMetrics()
    cfg = RunnerConfig(key_names=("key",), window=pr.CountWindow(range=4, slide=2), agg="max", metrics=m,
                       algorithm_column=True)
    batch = pa.RecordBatch.from_pydict({"key": ["a"] * 6 + ["b"] * 2, VALUE_COL: np.arange(8.0)})
    out = pa.Table.from_batches(list(run_keyed_batches(cfg, [batch]))).to_pydict()
    assert out["algorithm"] == ["sba", "sba"]
    assert m.algorithms() == {"sba": 2} and m.reasons() == {"small_window": 2}
    assert m.value["rows.sba"] == 8 and m.value["windows"] == 2


def test_runner_null_policy_and_unsorted_order():
    batch = pa.RecordBatch.from_pydict({"key": ["a", "a", "a"], VALUE_COL: [1.0, None, 3.0], ORDER_COL: [1, 2, 3]})
    fail = RunnerConfig(key_names=("key",), window=pr.TimeWindow(range=2, slide=1), agg="max", value_label="load")
    with pytest.raises(ValueError, match="value column 'load' holds nulls.*nulls='skip'"):
        list(run_keyed_batches(fail, [batch]))
    skip = RunnerConfig(key_names=("key",), window=pr.TimeWindow(range=2, slide=1), agg="count", nulls="skip")
    out = pa.Table.from_batches(list(run_keyed_batches(skip, [batch]))).to_pydict()
    assert out["window_end"] == [2, 3, 4, 5] and out["result"] == [1, 1, 1, 1]
    unsorted = pa.RecordBatch.from_pydict({"key": ["a", "a"], VALUE_COL: [1.0, 2.0], ORDER_COL: [5, 4]})
    cfg = RunnerConfig(key_names=("key",), window=pr.TimeWindow(range=2, slide=1), agg="max", order_label="ts")
    with pytest.raises(ValueError, match="ts"):
        list(run_keyed_batches(cfg, [unsorted]))


def test_runner_timestamps_in_milliseconds():
    ts = pa.array([0, 999, 1_000, 2_500_000], pa.timestamp("us", tz="UTC"))  # 0 ms, 0 ms, 1 ms, 2500 ms
    batch = pa.RecordBatch.from_pydict({"key": ["a"] * 4, VALUE_COL: [1.0, 2.0, 3.0, 4.0], ORDER_COL: ts})
    cfg = RunnerConfig(key_names=("key",), window=si.time_window("1 second", "1 second"), agg="argmax")
    out = pa.Table.from_batches(list(run_keyed_batches(cfg, [batch]))).to_pydict()
    assert out["window_end"] == [1000, 3000] and out["result"] == [1, 2500]


# --------------------------------------------------------------------------- RDD partition function
@pytest.mark.parametrize("agg", ["max", "sum", "argmax", "mean"])
@pytest.mark.parametrize("time", [False, True])
def test_partition_function_interleaved_keys(agg, time):
    rng = np.random.default_rng(7)
    window = pr.TimeWindow(range=9, slide=2) if time else pr.CountWindow(range=6, slide=4)
    keys, v, t = _keyed_data(rng, [80, 13, 1, 30], time=time)
    if t is None:
        t = np.arange(len(v))
    # interleave the keys, each key keeping its order: a random merge of the per-key sequences
    per_key: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        per_key.setdefault(k, []).append(i)
    draws = [k for k in per_key for _ in per_key[k]]
    rng.shuffle(draws)
    cursors = dict.fromkeys(per_key, 0)
    order = []
    for k in draws:
        order.append(per_key[k][cursors[k]])
        cursors[k] += 1
    records = [{"k": keys[i], "t": int(t[i]), "v": float(v[i])} for i in order]
    f = si.pba_partition_function(window, agg, key="k", order="t", value="v", batch_size=7)
    _check(f(iter(records)), _expected(keys, v, t, window, agg), agg, v)


def test_partition_function_bad_input():
    f = si.pba_partition_function(pr.CountWindow(range=2, slide=1), "max", key="k", order="ts", value="load")
    with pytest.raises(ValueError, match="order column 'ts' is not sorted within key 'a'"):
        list(f([{"k": "a", "ts": 2, "load": 1.0}, {"k": "b", "ts": 0, "load": 1.0}, {"k": "a", "ts": 1, "load": 1.0}]))
    with pytest.raises(ValueError, match="value column 'load' is null"):
        list(f([{"k": "a", "ts": 1, "load": None}]))
    with pytest.raises(TypeError, match="value column 'load' must be numeric"):
        list(f([{"k": "a", "ts": 1, "load": "7"}]))
    with pytest.raises(KeyError, match="value 'load' is not a field"):
        list(f([{"k": "a", "ts": 1}]))
    skip = si.pba_partition_function(pr.CountWindow(range=2, slide=1), "sum", key=0, value=1, nulls="skip")
    assert list(skip([("a", 1), ("a", None), ("a", 2)])) == [("a", 2, 3.0)]
    with pytest.raises(ValueError, match="nulls must be one of"):
        si.pba_partition_function(pr.CountWindow(range=2, slide=1), "max", key=0, value=1, nulls="zero")
    with pytest.raises(ValueError, match="order .* is required for a time window"):
        si.pba_partition_function(("1 second", "1 second"), "max", key=0, value=1)


def test_partition_function_datetimes():
    utc = dt.UTC
    f = si.pba_partition_function(("1 second", "1 second"), "count", key="k", order="t", value="v")
    rows = [{"k": 1, "t": dt.datetime(2024, 1, 1, 0, 0, 0, 999_999, tzinfo=utc), "v": 1.0},
            {"k": 1, "t": dt.datetime(2024, 1, 1, 0, 0, 1, tzinfo=utc), "v": 2.0}]
    base = int(dt.datetime(2024, 1, 1, tzinfo=utc).timestamp()) * 1000
    assert list(f(rows)) == [(1, base + 1000, 1), (1, base + 2000, 1)]



def test_key_partition_check_flags_a_key_in_two_partitions_of_one_stage_only():
    from spark_integration.rdd import (
        KeyPartitionWarning,
        _fingerprint,
        _KeyOwners,
        _KeyOwnersParam,
    )

    fp = np.array([_fingerprint(k) for k in ("a", "b", -1, -2, 1, ("t", None))], dtype=np.uint64)
    assert len(set(fp.tolist())) == fp.size  # hash(-1) == hash(-2) in Python; the fingerprints differ
    assert _fingerprint("a") == _fingerprint("a")
    param = _KeyOwnersParam("hint")
    acc = param.zero(None)
    for stage, part, idx in ((1, 0, [0, 2, 4]), (1, 0, [0, 2]), (2, 1, [0, 1]), (1, 1, [1, 3, 5])):
        acc = param.addInPlace(acc, _KeyOwners.of(stage, part, fp[idx]))  # a retry; another stage: no split
    assert acc.split == 0
    with pytest.warns(KeyPartitionWarning, match=r"2 key\(s\) had records in more than one partition .*partitions [01] and 2"):
        acc = param.addInPlace(acc, _KeyOwners.of(1, 2, fp[[0, 5]]))
    assert acc.split == 2

# --------------------------------------------------------------------------- intervals
def test_intervals():
    assert si.parse_interval("1 hour") == 3_600_000
    assert si.parse_interval("INTERVAL 1 minute 30 seconds") == 90_000
    assert si.parse_interval(dt.timedelta(milliseconds=1500)) == 1500
    assert si.time_window("60 seconds", "1 second") == pr.TimeWindow(range=60_000, slide=1_000)
    with pytest.raises(ValueError, match="unit 'months' is a calendar unit"):
        si.parse_interval("1 months")
    with pytest.raises(ValueError, match="not a whole number of milliseconds"):
        si.parse_interval("5 microseconds")
    with pytest.raises(ValueError, match="slide must be <= range"):
        si.time_window("1 second", "1 minute")


# --------------------------------------------------------------------------- algorithm choice and the pool
def test_choose_algorithm_rules():
    big, small = pr.CountWindow(range=8192, slide=1), pr.CountWindow(range=64, slide=1)
    assert rt.choose_algorithm("auto", small, cores=4) == ("sba", "small_window")
    assert rt.choose_algorithm("auto", big, cores=1) == ("sba", "one_core")
    assert rt.choose_algorithm("auto", big, cores=2, key_slices=10) == ("sba", "small_key")
    assert rt.choose_algorithm("auto", big, cores=2, pool_ok=False) == ("sba", "pool_unavailable")
    assert rt.choose_algorithm("auto", big, cores=2, pool_ok=False, pool_died=True) == ("sba", "pool_died")
    assert rt.choose_algorithm("auto", big, cores=None) == ("pba", "large_window")
    assert rt.choose_algorithm("pba", small, cores=1) == ("pba", "requested")
    assert rt.choose_algorithm("pba", small, pool_ok=False) == ("sba", "pool_unavailable")
    assert rt.choose_algorithm("sba", big) == ("sba", "requested")
    assert rt.choose_algorithm("auto", small, min_slices=8) == ("pba", "large_window")


def test_worker_pool_is_reused_and_replaced_when_closed():
    rt.close_worker_pool()
    p1, why = rt.worker_pool()
    assert why is None and rt.worker_pool()[0] is p1
    p1.close()
    p2, why = rt.worker_pool()
    assert why is None and p2 is not p1 and not p2.closed
    rt.close_worker_pool()
    assert p2.closed


def _no_pool(workers):
    raise OSError("no threads here")


class _DyingPool(pr.WorkerPool):
    """Every task fails, as if the worker died."""

    def submit(self, fn, *args):
        fut = Future()
        fut.set_exception(RuntimeError("worker died"))
        return fut


def _dying_pool(workers):
    return _DyingPool(kind="thread", workers=workers)


def test_pool_that_cannot_start_falls_back_to_sba():
    rt.close_worker_pool()
    m = si.AlgorithmMetrics()
    cfg = RunnerConfig(key_names=("key",), window=pr.CountWindow(range=4, slide=1), agg="max", algorithm="pba",
                       pool_factory=_no_pool, metrics=m)
    batch = pa.RecordBatch.from_pydict({"key": ["a"] * 10, VALUE_COL: np.arange(10.0)})
    out = pa.Table.from_batches(list(run_keyed_batches(cfg, [batch]))).to_pydict()
    assert out["result"] == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert m.algorithms() == {"sba": 1} and m.reasons() == {"pool_unavailable": 1}
    rt.close_worker_pool()


def test_dying_pool_loses_no_window():
    """A pool whose tasks fail: the batch path's pool work is redone on the main thread and counted."""
    rt.close_worker_pool()
    rng = np.random.default_rng(3)
    n = 3 * rt.PBA_MIN_KEY_SLICES  # large enough for the batch path to use the pool
    v = rng.random(n)
    m = si.AlgorithmMetrics()
    # rows of 4096 slices: the batch merge splits them between threads (rows of < 2^11 slices need >= 1024 rows)
    cfg = RunnerConfig(key_names=("key",), window=pr.CountWindow(range=4096, slide=1), agg="max", cores_per_task=2,
                       pool_factory=_dying_pool, metrics=m, batch_rows=n)
    batches = [pa.RecordBatch.from_pydict({"key": [k] * n, VALUE_COL: v}) for k in ("a", "b")]
    out = pa.Table.from_batches(list(run_keyed_batches(cfg, batches)))
    want = pr.sliding_aggregate(v, window=pr.CountWindow(range=4096, slide=1), agg="max", algorithm="sba")[1]
    for k in ("a", "b"):
        got = out.filter(pa.compute.equal(out.column("key"), k)).column("result").to_numpy()
        np.testing.assert_array_equal(got, want)
    assert m.value["pool_failures"] >= 1
    assert m.value["keys.pba"] == 2  # the second key got a fresh pool from the factory
    rt.close_worker_pool()


def test_guarded_pool_repairs_failed_tasks():
    g = rt.GuardedPool(_DyingPool(kind="thread", workers=1))
    assert g.submit(max, 3, 9).result() == 9 and g.failures == 1
    g.close()
    assert g.closed
    with pytest.raises(RuntimeError):
        g.submit(max, 1, 2)


def test_guarded_future_completes_for_wait_and_repairs_once():
    from concurrent.futures import wait

    with pr.WorkerPool(kind="thread", workers=1) as inner:
        g = rt.GuardedPool(inner)
        ok = g.submit(sum, [1, 2, 3])
        wait([ok])  # a guarded future completes with its worker's
        assert ok.done() and ok.result() == 6 and g.failures == 0
        assert g.wait_for(ok) is True and g.task_timeout is None  # the shared pool's own API, delegated
        calls = []

        def flaky(x):
            calls.append(x)
            if len(calls) == 1:
                raise MemoryError("worker failed")
            return x * 2

        bad = g.submit(flaky, 21)
        wait([bad])
        assert bad.result() == 42 and bad.result() == 42 and g.failures == 1 and calls == [21, 21]
        assert bad.exception() is None
        assert inner.closed  # a failure marks the shared pool dead: the next key starts a new one


def test_partition_function_algorithm_choice_by_piece_size():
    rng = np.random.default_rng(5)
    n = 2 * rt.PBA_MIN_KEY_SLICES + 100
    v = rng.random(n)
    records = [("big", float(x)) for x in v] + [("small", 1.0), ("small", 2.0)]
    window = pr.CountWindow(range=4096, slide=1)  # pieces of 2^17 slices are split between threads, 4096 not
    want = count_windows(v, 4096, 1, "max")
    for batch_size, algs in ((2 * rt.PBA_MIN_KEY_SLICES, {"pba": 1, "sba": 1}), (4096, {"sba": 2})):
        m = si.AlgorithmMetrics()
        f = si.pba_partition_function(window, "max", key=0, value=1, batch_size=batch_size, cores_per_task=2,
                                      metrics=m)
        got = [(e, r) for k, e, r in f(iter(records)) if k == "big"]
        assert [e for e, _ in got] == want[0] and [r for _, r in got] == want[1]
        assert m.algorithms() == algs
    rt.close_worker_pool()
