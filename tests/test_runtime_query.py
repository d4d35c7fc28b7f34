"""A query in the standalone runtime: ``Job(query=...)`` and ``pba-run --agg a,b --range r1,r2`` against the same
query over the same tuples as a frame (``pr.Query.run``), every sink's columns, the summary per output, bad input.

Every job here runs real task-slot processes over small streams.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import pba_runtime as pr
from pba_runtime.cli import _aggs
from pba_runtime.runtime import CsvSource, Debs14Source, Job, UserError
from pba_runtime.runtime.query_rows import QueryOutputs, format_query, join, query_table

CLI = [sys.executable, "-m", "pba_runtime", "--no-progress", "--quiet"]


@pytest.fixture(autouse=True)
def no_leftover_children():
    yield
    assert multiprocessing.active_children() == []


def frame_of(source) -> pd.DataFrame:
    keys, values, ts = source.take(0, source.total)
    return pd.DataFrame({"key": keys, "ts": ts, "value": values})


def assert_same_rows(got: pd.DataFrame, want: pd.DataFrame, names: list[str], exact: tuple[str, ...]) -> None:
    """The job's rows (any order across keys) equal the frame query's: same (key, end) rows, each output equal
    (``exact``: bit for bit; the others to 1e-9), null in the same places."""
    got = got.sort_values(["key", "end"], kind="stable").reset_index(drop=True)
    want = want.rename(columns={"window_end": "end", "window_start": "start"})
    want = want.sort_values(["key", "end"], kind="stable").reset_index(drop=True)
    assert len(got) == len(want)
    np.testing.assert_array_equal(got["key"].to_numpy(), want["key"].to_numpy())
    np.testing.assert_array_equal(got["end"].to_numpy(), want["end"].to_numpy())
    if "start" in want:
        np.testing.assert_array_equal(got["start"].to_numpy(), want["start"].to_numpy())
    for n in names:
        g, w = got[n].to_numpy(dtype=float), want[n].to_numpy(dtype=float)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=n)
        ok = ~np.isnan(w)
        if n.split("_")[1] in exact:
            np.testing.assert_array_equal(g[ok], w[ok], err_msg=n)
        else:
            np.testing.assert_allclose(g[ok], w[ok], rtol=1e-9, atol=1e-9, err_msg=n)


COUNT_WINDOWS = [pr.CountWindow(4), pr.CountWindow(7, 3), pr.CountWindow(12, 3)]  # 7 % 3 != 0
TIME_WINDOWS = [pr.TimeWindow("2s", "1s"), pr.TimeWindow("5s", "1s")]


@pytest.mark.parametrize("windows", [COUNT_WINDOWS, COUNT_WINDOWS[:1], TIME_WINDOWS], ids=["count", "one", "time"])
@pytest.mark.parametrize("algorithm", ["sba", "pba"])
def test_a_query_job_gives_the_frame_query_rows(tmp_path, windows, algorithm):
    source = Debs14Source(plugs=5, tuples=6_000, seed=3)
    q = pr.Query(by="key", on="ts" if isinstance(windows[0], pr.TimeWindow) else None, windows=windows,
                 aggs={"value": ["max", "mean", "std", "count", "argmax"]}, missing="propagate")
    out = tmp_path / "out.csv"
    summary = Job(source, query=q, algorithm=algorithm, parallelism=2, sink=f"csv:{out}", batch_size=700).run()
    got = pd.read_csv(out)
    names = [o.name for o in q.outputs]
    assert list(got.columns) == ["key", *(["start"] if len(windows) == 1 else []), "end", *names]
    assert_same_rows(got, q.run(frame_of(source)), names, exact=("max", "count", "argmax"))
    assert summary["windows"] == len(got)
    assert set(summary["outputs"]) == set(names)
    for o in q.outputs:  # each output's windows: its non-null cells (a std of one value is NaN)
        if o.agg.name != "std":
            assert summary["outputs"][o.name]["windows"] == int(got[o.name].notna().sum())


def test_a_query_job_skips_missing_values_as_the_frame_query(tmp_path):
    rng = np.random.default_rng(5)
    n = 3_000
    keys = rng.integers(0, 4, n)
    values = np.round(rng.normal(10, 3, n), 3)
    values[rng.random(n) < 0.2] = np.nan
    src = tmp_path / "in.csv"
    pd.DataFrame({"key": keys, "ts": np.arange(n) * 7, "value": values}).to_csv(src, index=False, na_rep="nan")
    source = CsvSource(str(src), ts_col=None)
    q = pr.Query(by="key", windows=[pr.CountWindow(5), pr.CountWindow(9)], aggs={"value": ["max", "sum", "mean"]},
                 min_periods=2)  # missing="skip", the frames' default
    out = tmp_path / "out.csv"
    Job(source, query=q, parallelism=2, sink=f"csv:{out}", batch_size=256).run()
    want = q.run(pd.DataFrame({"key": keys, "value": values}))
    assert_same_rows(pd.read_csv(out), want, [o.name for o in q.outputs], exact=("max",))


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "jsonl"])
def test_every_sink_writes_the_query_columns(tmp_path, fmt):
    source = Debs14Source(plugs=3, tuples=3_000, seed=2)
    q = pr.Query(windows=[pr.CountWindow(8), pr.CountWindow(16, 4)], aggs={"value": ["min", "count"]},
                 missing="propagate")
    ref = tmp_path / "ref.csv"
    Job(source, query=q, parallelism=2, sink=f"csv:{ref}").run()
    want = pd.read_csv(ref).sort_values(["key", "end"], kind="stable").reset_index(drop=True)
    path = tmp_path / ("out.jsonl" if fmt == "jsonl" else "out")
    Job(source, query=q, parallelism=2, sink=f"{fmt}:{path}").run()
    if fmt == "jsonl":
        got = pd.DataFrame([json.loads(line) for line in open(path)])
    elif fmt == "parquet":
        table = pq.read_table(path)
        assert [str(f.type) for f in table.schema] == ["int64", "int64", "double", "int64", "double", "int64"]
        got = table.to_pandas()
    else:
        import pyarrow as pa
        import pyarrow.dataset as ds

        got = ds.dataset(str(path), format="arrow").to_table().to_pandas()
        assert got["value_count_8"].dtype == np.int64 and got["value_count_16"].dtype == "float64" or \
            str(got["value_count_16"].dtype) in ("Int64", "float64")
        del pa
    got = got.sort_values(["key", "end"], kind="stable").reset_index(drop=True)
    assert list(got.columns) == list(want.columns)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_cli_query_header_banner_and_summary_per_output(tmp_path):
    out = tmp_path / "out.csv"
    proc = subprocess.run([sys.executable, "-m", "pba_runtime", "--no-progress", "--tuples", "4000", "--keys", "4",
                           "--agg", "max,mean,std", "--range", "16,64", "--range", "256", "--sink", f"csv:{out}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names = [f"value_{a}_{r}" for r in (16, 64, 256) for a in ("max", "mean", "std")]
    assert open(out).readline().strip().split(",") == ["key", "end", *names]
    assert "W[16, 1], W[64, 1], W[256, 1] x max, mean, std (9 outputs" in proc.stdout
    for n in names:
        assert f"output       {n}: " in proc.stdout
    got = pd.read_csv(out)
    q = pr.Query(by="key", windows=[pr.CountWindow(r) for r in (16, 64, 256)],
                 aggs={"value": ["max", "mean", "std"]}, missing="propagate")
    assert_same_rows(got, q.run(frame_of(Debs14Source(plugs=4, tuples=4000))), names, exact=("max",))


def test_cli_one_output_keeps_the_one_output_columns(tmp_path):
    out = tmp_path / "out.csv"
    subprocess.run(CLI + ["--tuples", "2000", "--keys", "2", "--range", "8", "--agg", "max", "--sink", f"csv:{out}"],
                   check=True, timeout=120)
    assert open(out).readline().strip() == "key,start,end,value"


@pytest.mark.parametrize("args, message", [
    (["--agg", "max,nope"], "--agg: unknown aggregation 'nope'"),
    (["--agg", "max,max"], "--agg: an aggregation is given twice"),
    (["--range", "8,8"], "--range: a range is given twice"),
    (["--range", "8,"], "--range: an empty range"),
    (["--agg", "max,collect", "--range", "8"], "a job's outputs are numbers; 'collect' gives list results"),
])
def test_cli_refuses_a_bad_query_in_one_line(args, message):
    proc = subprocess.run(CLI + ["--tuples", "100"] + args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("kwargs, message", [
    ({"query": pr.Query(windows=pr.CountWindow(4), aggs={"value": "max"}), "window": pr.CountWindow(4)},
     "give either window and agg, or query=, not both"),
    ({"query": pr.Query(windows=pr.CountWindow(4), aggs={"value": "max"}, align="rows")}, 'align="rows"'),
    ({"query": pr.Query(windows=pr.CountWindow(4), aggs={"value": "max", "volt": "min"})}, "name 2: ['value', 'volt']"),
    ({"query": pr.Query(on="ts", windows=[pr.CountWindow(4), pr.TimeWindow("1s")], aggs={"value": "max"})},
     "windows must all be count windows or all time windows"),
    ({"query": pr.Query(windows=pr.CountWindow(4), aggs={"value": "max"}, missing="propagate", min_periods=2)},
     'min_periods applies with missing="skip"'),
    ({"query": "max"}, "query must be a pba_runtime.Query"),
    ({}, "a job needs a window"),
])
def test_job_refuses_a_query_it_cannot_run_before_any_process_starts(kwargs, message):
    with pytest.raises(UserError, match=None) as err:
        Job(Debs14Source(plugs=2, tuples=100), **kwargs)
    assert message in str(err.value)


def test_join_places_outputs_of_windows_with_other_ends():
    e1, e2 = np.array([2, 3, 4]), np.array([3])
    parts = join(["a", "b"], [[(e1, np.array([1.0, 2.0, 3.0])), (np.array([5]), np.array([9.0]))],
                              [(e2, np.array([7.0])), (np.empty(0, np.int64), np.empty(0))]], [0, 1])
    assert [(k, e.tolist()) for k, e, _ in parts] == [("a", [2, 3, 4]), ("b", [5])]
    np.testing.assert_array_equal(parts.columns[1], [[1.0, np.nan], [2.0, 7.0], [3.0, np.nan], [9.0, np.nan]])
    assert parts.absent.tolist() == [[False, True], [False, False], [False, True], [False, True]]


def test_query_lines_and_table_agree():
    q = QueryOutputs.of(pr.Query(windows=[pr.CountWindow(2), pr.CountWindow(3)], aggs={"v": ["sum", "count"]},
                                 missing="propagate"))
    parts = join(['a,"b'], [[(np.array([2, 3]), np.array([0.1 + 0.2, -0.0]))], [(np.array([2, 3]), np.array([2, 2]))],
                            [(np.array([3]), np.array([np.inf]))], [(np.array([3]), np.array([3]))]], q.window_of)
    text = format_query(q, "csv", parts).decode()
    assert text == '"a,""b",2,0.30000000000000004,2,,\n"a,""b",3,-0.0,2,inf,3\n'
    lines = [json.loads(line) for line in format_query(q, "jsonl", parts).decode().splitlines()]
    assert lines[0] == {"key": 'a,"b', "end": 2, "v_sum_2": 0.30000000000000004, "v_count_2": 2, "v_sum_3": None,
                        "v_count_3": None}
    table = query_table(q, parts)
    assert table.column_names == list(q.columns())
    assert table.column("v_count_3").to_pylist() == [None, 3]


@pytest.mark.parametrize("windows", [[pr.CountWindow(16), pr.CountWindow(40, 7)], [pr.TimeWindow("5s", "1s")]],
                         ids=["count", "time"])
def test_median_and_p99_jobs_give_the_frame_query_rows(tmp_path, windows):
    """Order statistics in the runtime: every key on the sorted-window operator, beside a monoid's outputs;
    the rows of the frame query over the same tuples, bit for bit, at parallelism 2 and small batches."""
    source = Debs14Source(plugs=5, tuples=6_000, seed=4)
    q = pr.Query(by="key", on="ts" if isinstance(windows[0], pr.TimeWindow) else None, windows=windows,
                 aggs={"value": ["median", pr.quantile(0.99), "max", pr.quantile(0.99, relative_error=0.01)]},
                 missing="propagate")
    out = tmp_path / "out.csv"
    summary = Job(source, query=q, parallelism=2, sink=f"csv:{out}", batch_size=500).run()
    got = pd.read_csv(out)
    names = [o.name for o in q.outputs]
    assert_same_rows(got, q.run(frame_of(source)), names, exact=("max",))  # pandas' CSV reader may miss the last bit
    assert summary["algorithms"].get("sorted_window")
    one = tmp_path / "one.csv"
    Job(source, windows[0], "median", parallelism=1, sink=f"csv:{one}", batch_size=333).run()
    want = q.run(frame_of(source))
    first = [o.name for o in q.outputs if o.window == 0 and o.agg.name == "median"][0]
    got1 = pd.read_csv(one).sort_values(["key", "end"], kind="stable")
    w = want.dropna(subset=[first]).sort_values(["key", "window_end"], kind="stable")
    np.testing.assert_array_equal(got1["end"].to_numpy(), w["window_end"].to_numpy())
    np.testing.assert_allclose(got1["value"].to_numpy(), w[first].to_numpy(), rtol=1e-14)


def test_a_skipping_median_job_gives_the_frame_query_rows(tmp_path):
    """missing="skip" (a query's default) with NaN among the values and min_periods=3."""
    rng = np.random.default_rng(5)
    n = 3000
    vals = rng.normal(10, 2, n).round(2)
    vals[rng.random(n) < 0.2] = np.nan
    path = tmp_path / "in.csv"
    frame = pd.DataFrame({"key": rng.integers(0, 4, n), "ts": np.arange(n) * 250, "value": vals})
    frame.to_csv(path, index=False, na_rep="nan")
    src = CsvSource(str(path), key_col="key", ts_col="ts", value_col="value")
    q = pr.Query(by="key", on="ts", windows=[pr.TimeWindow("3s", "1s"), pr.TimeWindow("10s", "1s")],
                 aggs={"value": ["median", pr.quantile(0.9, "lower")]}, min_periods=3)
    out = tmp_path / "out.csv"
    Job(src, query=q, parallelism=2, sink=f"csv:{out}", batch_size=256).run()
    names = [o.name for o in q.outputs]
    assert_same_rows(pd.read_csv(out), q.run(frame), names, exact=())


def test_pba_run_takes_median_and_percentiles(tmp_path):
    out = tmp_path / "q.csv"
    subprocess.run([*CLI, "--tuples", "3000", "--agg", "median,p99,max", "--range", "8,32", "--sink", f"csv:{out}"],
                   check=True)
    got = pd.read_csv(out)
    assert list(got.columns)[2:] == [f"value_{a}_{r}" for r in (8, 32) for a in ("median", "p99", "max")]
    sk = tmp_path / "sketch.csv"
    subprocess.run([*CLI, "--tuples", "3000", "--agg", "p99,p99~1%,p50~0.005", "--range", "32", "--sink",
                    f"csv:{sk}"], check=True)
    got = pd.read_csv(sk)
    assert list(got.columns)[-3:] == ["value_p99", "value_p99_sketch", "value_p50_sketch"]
    assert len(got) > 100 and np.isfinite(got["value_p99_sketch"]).all()  # the values: the Job test above
    for word in ("p99~0%", "p99~1.5", "p99~"):
        with pytest.raises(UserError, match="--agg"):
            _aggs(argparse.Namespace(agg=word))
    bad = subprocess.run([*CLI, "--tuples", "10", "--agg", "p150"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--agg" in bad.stderr
    bad = subprocess.run([*CLI, "--tuples", "10", "--agg", "median", "--algorithm", "pba"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "order statistic" in bad.stderr
