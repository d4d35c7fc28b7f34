"""Queries over frames against the loop of calls users write today and against peers (issue 42).

A DEBS'14-like frame: ``--keys`` plugs (default 84), ``--rows`` rows (default 4M) sorted by plug then
time, a ``load`` reading about once a second per plug with ``ts`` as datetime64[ms]. Four queries:

* ``Q1``: per plug, max, mean and std of ``load`` over ``CountWindow(1024)`` (slide 1), window output;
* ``Q3``: the same over ``CountWindow(256)``, ``CountWindow(1024)`` and ``CountWindow(4096)`` (9 outputs);
* ``T``: max, mean, std over ``TimeWindow`` 1 min, 5 min and 15 min, slide 10 s, window output;
* ``R``: row output of ``rolling("60s")`` mean and max (``align="rows"``).

Methods, side by side in one run, interleaved in a shuffled order each round:

* ``query``: ``pr.aggregate(pandas_frame, ...)``, the path users take (defaults: ``missing="skip"``);
* ``loop``: a ``pr.sliding_aggregate`` call per plug x aggregation x window over the sorted arrays (what a
  user writes today, without the join back into a frame);
* ``bottleneck``: ``move_max``/``move_mean``/``move_std(ddof=1)`` per plug (count windows);
* ``polars``: ``with_columns(rolling_*(w).over("plug"))`` (count windows), ``group_by_dynamic`` per window
  (``T``), ``rolling_*_by("ts", "60s").over("plug")`` (``R``);
* ``duckdb``: SQL window functions (``ROWS BETWEEN w-1 PRECEDING``) for ``Q1``/``Q3``; for ``T`` 10 s slices
  (``GROUP BY``) then ``RANGE`` frames over the slice grid; ``R``: ``RANGE BETWEEN INTERVAL 60 SECONDS``...
  (DuckDB's frame is closed on the left: the peers' figures are for the same work, not the same bits);
* ``pandas``: ``groupby("plug").rolling(w).agg([...])`` and ``rolling("60s", on="ts")``.

A peer whose library is not installed is left out (``pip install -e '.[bench]'`` has them all). Each method
is timed ``--repeats`` times (the slow peers ``--peer-repeats``) after one warm call: the median and the spread
in wall seconds. The query's results are checked against the loop and against polars and pandas on the same
query (max exact, the rest 1e-9 relative). ``--memory`` measures, in a fresh process, the query's peak
resident memory beyond its input against the bytes of its result. Results go to
``bench/results/query.json`` (``query_quick.json`` with ``--quick``).

    python bench/bench_query.py                # 4M rows, 84 plugs, 5 repeats, memory
    python bench/bench_query.py --quick        # 100k rows, 8 plugs, 2 repeats: a smoke run
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from exp_common import LoadLog, code_state, interleave, machine, spread  # noqa: E402

import pba_runtime as pr  # noqa: E402

RESULTS = HERE / "results"
COUNT_RANGES = {"Q1": (1024,), "Q3": (256, 1024, 4096)}
TIME_RANGES = ("1min", "5min", "15min")
TIME_SLIDE = "10s"
AGGS = ("max", "mean", "std")
ROW_RANGE = "60s"
ROW_AGGS = ("mean", "max")
SLOW_PEERS = ("duckdb", "pandas")
GOALS = {"loop_over_query_Q3": 3.0, "Q3_over_Q1": 3.0, "polars": 5.0, "duckdb": 30.0, "pandas": 50.0, "memory": 2.0}


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# --------------------------------------------------------------------------- data
def make_frame(rows: int, keys: int, seed: int = 0) -> pd.DataFrame:
    """DEBS'14-like plugs: sorted by plug then time, a reading about once a second, datetime64[ms]."""
    rng = np.random.default_rng(seed)
    plug = np.sort(rng.integers(0, keys, rows))
    counts = np.bincount(plug, minlength=keys)
    steps = rng.integers(500, 1500, rows)  # ms between readings of one plug
    start = np.zeros(keys + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    ts = np.cumsum(steps)
    ts -= np.repeat(ts[start[:-1]] - steps[start[:-1]], counts)  # each plug's clock from 0
    ts += np.int64(1_385_856_000_000)  # 2013-12-01, the DEBS'14 data's month
    load = np.abs(rng.normal(50.0, 20.0, rows))
    return pd.DataFrame({"plug": plug, "ts": ts.astype("datetime64[ms]"), "load": load})


def key_slices(df: pd.DataFrame) -> list[tuple[int, int]]:
    plug = df["plug"].to_numpy()
    cut = np.flatnonzero(np.diff(plug)) + 1
    bounds = np.concatenate([[0], cut, [len(plug)]])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


# --------------------------------------------------------------------------- the methods
def count_windows(name: str) -> list[pr.CountWindow]:
    return [pr.CountWindow(r) for r in COUNT_RANGES[name]]


def time_windows() -> list[pr.TimeWindow]:
    return [pr.TimeWindow(r, TIME_SLIDE) for r in TIME_RANGES]


def query_method(df: pd.DataFrame, name: str):
    if name in COUNT_RANGES:
        q = pr.Query(by="plug", windows=count_windows(name), aggs={"load": list(AGGS)})
    elif name == "T":
        q = pr.Query(by="plug", on="ts", windows=time_windows(), aggs={"load": list(AGGS)})
    else:
        q = pr.Query(by="plug", on="ts", windows=pr.TimeWindow(ROW_RANGE), aggs={"load": list(ROW_AGGS)},
                     align="rows")
    return lambda: q.run(df)


def loop_method(df: pd.DataFrame, name: str):
    if name == "R":
        return None
    v = df["load"].to_numpy()
    t = df["ts"].to_numpy().view(np.int64)
    parts = key_slices(df)
    wins = count_windows(name) if name in COUNT_RANGES else time_windows()

    def run():
        out = []
        for a, b in parts:
            for w in wins:
                for agg in AGGS:
                    out.append(pr.sliding_aggregate(v[a:b], window=w, agg=agg,
                                                    timestamps=t[a:b] if name == "T" else None))
        return out
    return run


def bottleneck_method(df: pd.DataFrame, name: str):
    if name not in COUNT_RANGES or not has("bottleneck"):
        return None
    import bottleneck as bn

    v = df["load"].to_numpy()
    parts = key_slices(df)

    def run():
        out = []
        for a, b in parts:
            x = v[a:b]
            for r in COUNT_RANGES[name]:
                if len(x) >= r:  # bottleneck refuses a window longer than the array
                    out += [bn.move_max(x, r), bn.move_mean(x, r), bn.move_std(x, r, ddof=1)]
        return out
    return run


def polars_method(df: pd.DataFrame, name: str):
    if not has("polars"):
        return None
    import polars as pl

    p = pl.from_pandas(df)
    if name in COUNT_RANGES:
        exprs = []
        for r in COUNT_RANGES[name]:
            c = pl.col("load")
            exprs += [c.rolling_max(r).over("plug").alias(f"max_{r}"), c.rolling_mean(r).over("plug").alias(f"mean_{r}"),
                      c.rolling_std(r).over("plug").alias(f"std_{r}")]
        return lambda: p.with_columns(exprs)
    if name == "T":
        def run():
            return [p.group_by_dynamic("ts", every=TIME_SLIDE, period=_polars_span(r), group_by="plug", closed="left",
                                       label="right", start_by="window")
                    .agg(pl.col("load").max().alias("max"), pl.col("load").mean().alias("mean"),
                         pl.col("load").std().alias("std")) for r in TIME_RANGES]
        return run
    c = pl.col("load")
    exprs = [c.rolling_mean_by("ts", ROW_RANGE).over("plug").alias("mean"),
             c.rolling_max_by("ts", ROW_RANGE).over("plug").alias("max")]
    return lambda: p.with_columns(exprs)


def _polars_span(r: str) -> str:
    return r.replace("min", "m")  # polars spells minutes "m"


def duckdb_method(df: pd.DataFrame, name: str):
    if not has("duckdb"):
        return None
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    frame = df.assign(i=np.arange(len(df)), t=df["ts"].to_numpy().view(np.int64))
    con.register("plugs", frame)
    if name in COUNT_RANGES:
        cols, wins = [], []
        for r in COUNT_RANGES[name]:
            wins.append(f"w{r} AS (PARTITION BY plug ORDER BY i ROWS BETWEEN {r - 1} PRECEDING AND CURRENT ROW)")
            cols += [f"max(load) OVER w{r}", f"avg(load) OVER w{r}", f"stddev_samp(load) OVER w{r}"]
        sql = f"SELECT plug, i, {', '.join(cols)} FROM plugs WINDOW {', '.join(wins)}"
    elif name == "T":
        s = 10_000
        parts = []
        for r in TIME_RANGES:
            q = pr.TimeWindow(r).range // s
            parts.append(f"""SELECT plug, k, {q} AS q,
                 max(mx) OVER w AS mx, sum(sx) OVER w / sum(n) OVER w AS mean,
                 sqrt((sum(sxx) OVER w - sum(sx) OVER w * sum(sx) OVER w / sum(n) OVER w) / (sum(n) OVER w - 1)) AS std
               FROM slices WINDOW w AS (PARTITION BY plug ORDER BY k RANGE BETWEEN {q - 1} PRECEDING AND CURRENT ROW)""")
        sql = (f"WITH slices AS (SELECT plug, t // {s} AS k, max(load) AS mx, sum(load) AS sx, "
               f"sum(load * load) AS sxx, count(*) AS n FROM plugs GROUP BY plug, k) "
               + " UNION ALL ".join(parts))
    else:
        sql = ("SELECT plug, i, avg(load) OVER w, max(load) OVER w FROM plugs WINDOW w AS (PARTITION BY plug "
               "ORDER BY ts RANGE BETWEEN INTERVAL 59999 MILLISECONDS PRECEDING AND CURRENT ROW)")
    return lambda: con.execute(sql).to_arrow_table()


def pandas_method(df: pd.DataFrame, name: str):
    if name in COUNT_RANGES:
        def run():
            g = df.groupby("plug")["load"]
            return [g.rolling(r).agg(list(AGGS)) for r in COUNT_RANGES[name]]
        return run
    if name == "R":
        return lambda: df.groupby("plug").rolling(ROW_RANGE, on="ts")["load"].agg(list(ROW_AGGS))
    return None


METHODS = {"query": query_method, "loop": loop_method, "bottleneck": bottleneck_method, "polars": polars_method,
           "duckdb": duckdb_method, "pandas": pandas_method}


# --------------------------------------------------------------------------- agreement
def check(df: pd.DataFrame, name: str) -> dict[str, Any]:
    """The query's results against the loop of calls and against polars and pandas, on a part of the rows."""
    out = query_method(df, name)()
    res: dict[str, Any] = {}
    v = df["load"].to_numpy()
    t = df["ts"].to_numpy().view(np.int64)
    parts = key_slices(df)[:4]
    if name in COUNT_RANGES or name == "T":
        wins = count_windows(name) if name in COUNT_RANGES else time_windows()
        labels = [str(w.range) for w in wins] if name in COUNT_RANGES else list(TIME_RANGES)
        ok = True
        for a, b in parts:
            key = df["plug"].iat[a]
            mine = out[out["plug"] == key]
            ends = mine["window_end"].to_numpy()
            ends = ends if name in COUNT_RANGES else ends.astype("datetime64[ms]").view(np.int64)
            for w, lab in zip(wins, labels):
                for agg in AGGS:
                    e, r = pr.sliding_aggregate(v[a:b], window=w, agg=agg, timestamps=t[a:b] if name == "T" else None)
                    col = mine[f"load_{agg}_{lab}" if len(wins) > 1 else f"load_{agg}"].to_numpy()
                    got = col[np.isin(ends, e)]
                    ok &= len(got) == len(r) and _close(got, r, agg)
        res["loop"] = bool(ok)
    if name == "R":
        want = df.groupby("plug").rolling(ROW_RANGE, on="ts")["load"].agg(list(ROW_AGGS))
        want = want.reset_index(drop=True)  # indexed by (plug, ts): in the frame's order, which is sorted
        res["pandas"] = all(_close(out[f"load_{a}"].to_numpy(), want[a].to_numpy(), a) for a in ROW_AGGS)
    if name == "Q1":
        r = COUNT_RANGES[name][0]
        want = df.groupby("plug")["load"].rolling(r).agg(list(AGGS)).reset_index(level=0, drop=True).sort_index()
        full = want.dropna()
        res["pandas"] = all(_close(out[f"load_{a}"].to_numpy(), full[a].to_numpy(), a, rtol=1e-6) for a in AGGS)
    return res


def _close(got: np.ndarray, want: np.ndarray, agg: str, rtol: float = 1e-9) -> bool:
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    if got.shape != want.shape:
        return False
    if agg in ("max", "min", "count"):
        return bool(np.array_equal(got, want, equal_nan=True))
    return bool(np.allclose(got, want, rtol=rtol, atol=0, equal_nan=True))


# --------------------------------------------------------------------------- memory
def memory_child(rows: int, keys: int, name: str) -> dict[str, Any]:
    """In this (fresh) process: the query's peak resident memory beyond the input and its result's bytes."""
    df = make_frame(rows, keys)
    query_method(make_frame(20_000, 4), name)()  # compiles: its memory is a one-time cost, not the query's
    gc.collect()
    before = _rss_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current size
    out = query_method(df, name)()
    peak = _rss_kib("VmHWM")
    result = int(out.memory_usage(index=True, deep=True).sum())
    return {"query": name, "input_bytes": int(df.memory_usage(index=True, deep=True).sum()), "result_bytes": result,
            "peak_beyond_input_bytes": (peak - before) * 1024, "ratio": (peak - before) * 1024 / max(result, 1)}


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory(rows: int, keys: int, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--memory-child", name, "--rows", str(rows), "--keys",
                               str(keys)], capture_output=True, text=True, timeout=600)
        if proc.returncode:
            out[name] = {"error": proc.stderr[-2000:]}
        else:
            out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# --------------------------------------------------------------------------- the run
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k rows, 8 plugs, 2 repeats")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--keys", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--peer-repeats", type=int, default=None, help="repeats of the slow peers (duckdb, pandas)")
    ap.add_argument("--queries", default="Q1,Q3,T,R")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    rows = a.rows or (100_000 if a.quick else 4_000_000)
    keys = a.keys or (8 if a.quick else 84)
    if a.memory_child:
        print(json.dumps(memory_child(rows, keys, a.memory_child)))
        return {}
    reps = a.repeats or (2 if a.quick else 5)
    peer_reps = a.peer_repeats or (2 if a.quick else 3)
    names = a.queries.split(",")
    wanted = a.methods.split(",")
    out_path = a.out or RESULTS / ("query_quick.json" if a.quick else "query.json")
    load = LoadLog()
    load.mark("start")
    start = code_state()
    df = make_frame(rows, keys)
    res: dict[str, Any] = {"quick": a.quick, "rows": rows, "keys": keys, "repeats": reps, "peer_repeats": peer_reps,
                           "queries": {}}
    for name in names:
        cases = {m: METHODS[m](df, name) for m in wanted}
        cases = {m: fn for m, fn in cases.items() if fn is not None}
        first = {}
        for m, fn in cases.items():  # the warm call: numba compiles, pandas/polars/duckdb plan
            t0 = time.perf_counter()
            fn()
            first[m] = time.perf_counter() - t0
        fast = {m: fn for m, fn in cases.items() if m not in SLOW_PEERS}
        slow = {m: fn for m, fn in cases.items() if m in SLOW_PEERS}
        secs = interleave({m: _timer(fn) for m, fn in fast.items()}, reps)
        secs |= interleave({m: _timer(fn) for m, fn in slow.items()}, peer_reps)
        load.mark(name)
        q = {m: {"first_s": first[m], "seconds": spread(secs[m])} for m in cases}
        med = q["query"]["seconds"]["median"] if "query" in q else None
        ratios = {m: q[m]["seconds"]["median"] / med for m in q if m != "query" and med}
        res["queries"][name] = {"methods": q, "over_query": ratios, "agrees": check(df, name)}
        print(f"{name}: " + ", ".join(f"{m} {v['seconds']['median']:.3f}s [{v['seconds']['min']:.3f}-"
                                      f"{v['seconds']['max']:.3f}]" for m, v in q.items()), flush=True)
    if not a.no_memory and "query" in wanted:
        res["memory"] = memory(rows, keys, [n for n in names if n in ("Q3", "T", "R")])
    res["goals"] = goals(res)
    load.mark("end")
    res["machine"] = machine(load, start)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["goals"], indent=1))
    return res


def _timer(fn):
    def run() -> float:
        gc.collect()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return run


def goals(res: dict[str, Any]) -> dict[str, Any]:
    """Each goal of issue 42 with its measured ratio (medians)."""
    out: dict[str, Any] = {}
    qs = res["queries"]
    if "Q3" in qs and "loop" in qs["Q3"]["over_query"]:
        r = qs["Q3"]["over_query"]["loop"]
        out["Q3: loop / query"] = {"ratio": r, "goal": f">= {GOALS['loop_over_query_Q3']}", "met": r >= 3.0}
    if "Q1" in qs and "Q3" in qs:
        r = qs["Q3"]["methods"]["query"]["seconds"]["median"] / qs["Q1"]["methods"]["query"]["seconds"]["median"]
        out["query Q3 / Q1"] = {"ratio": r, "goal": f"<= {GOALS['Q3_over_Q1']}", "met": r <= 3.0}
    for name, q in qs.items():
        for peer in ("polars", "duckdb", "pandas"):
            if peer in q["over_query"]:
                r = q["over_query"][peer]
                out[f"{name}: {peer} / query"] = {"ratio": r, "goal": f">= {GOALS[peer]}", "met": r >= GOALS[peer]}
    for name, m in res.get("memory", {}).items():
        if "ratio" in m:
            out[f"{name}: peak memory beyond input / result bytes"] = {"ratio": m["ratio"], "goal": "<= 2",
                                                                       "met": m["ratio"] <= GOALS["memory"]}
    return out


if __name__ == "__main__":
    main()
