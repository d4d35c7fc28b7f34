"""A query in Spark: ``si.aggregate`` of 1 and 9 outputs against Spark SQL's window functions (issue 43).

bench_spark.py's source (84 keys, slight skew, float64 values, ``t`` the row order), ``--rows`` rows
(default 2M) cached in memory, local[2], Spark's ``noop`` sink. Count windows, slide 1:

* ``ours_1``: ``si.aggregate`` of max over ``CountWindow(1024)``;
* ``ours_9``: max, mean, std over ``CountWindow(256)``, ``CountWindow(1024)``, ``CountWindow(4096)`` (one
  shuffle, one sort, every output in the same pass);
* ``sql_1`` / ``sql_9``: the same as one ``select`` of window expressions (``ROWS BETWEEN r-1 PRECEDING AND
  CURRENT ROW``), ``spark.sql.window.segmentTree.enabled=true``;
* ``loop_9`` (``--loop``): ``si.sliding_window_aggregate`` once per output (9 shuffles; no join back).

One untimed warm-up of every case, then ``--reps`` interleaved repetitions (median and [min-max]). The
query's results are checked against Spark SQL's on ``--check-rows`` rows (max exact, the rest 1e-9
relative). Results: ``bench/results/spark_query.json`` (``spark_query_quick.json`` with ``--quick``).

    python bench/bench_spark_query.py            # 2M rows, 3 repetitions
    python bench/bench_spark_query.py --quick    # 200k rows, 1 repetition: a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from bench_spark import SEGTREE, noop, session, source  # noqa: E402
from exp_common import LoadLog, code_state, machine, spread  # noqa: E402

import pba_runtime as pr  # noqa: E402
import spark_integration as si  # noqa: E402

RESULTS = HERE / "results"
RANGES = (256, 1024, 4096)
AGGS = ("max", "mean", "std")


def query(n_out: int) -> pr.Query:
    if n_out == 1:
        return pr.Query(by="k", on="t", windows=pr.CountWindow(1024), aggs={"v": "max"})
    return pr.Query(by="k", on="t", windows=[pr.CountWindow(r) for r in RANGES], aggs={"v": list(AGGS)})


def sql(df, n_out: int):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    fns = {"max": F.max, "mean": F.avg, "std": F.stddev_samp}
    cols = []
    for r in ((1024,) if n_out == 1 else RANGES):
        w = Window.partitionBy("k").orderBy("t").rowsBetween(-(r - 1), 0)
        for a in (("max",) if n_out == 1 else AGGS):
            cols.append(fns[a]("v").over(w).alias(f"v_{a}_{r}"))
    return df.select("k", "t", *cols)


def loop(df):
    outs = []
    for r in RANGES:
        for a in AGGS:
            outs.append(si.sliding_window_aggregate(df, key="k", order_by="t", value="v", window=pr.CountWindow(r),
                                                    agg=a))
    return outs


def check(spark, rows: int) -> dict:
    """ours_9 against sql_9 on ``rows`` rows: full windows only (Spark's first rows have partial windows)."""
    df = source(spark, rows).select("k", "t", "v")
    ours = si.aggregate(df, query(9)).toPandas()
    native = sql(df, 9).toPandas().sort_values(["k", "t"]).reset_index(drop=True)
    native["pos"] = native.groupby("k").cumcount() + 1  # window end = the key's rows seen
    ok = {}
    for r in RANGES:
        mine = ours.dropna(subset=[f"v_max_{r}"]).set_index(["k", "window_end"])
        theirs = native[native["pos"] >= r].set_index(["k", "pos"])
        theirs = theirs.loc[mine.index]
        for a in AGGS:
            g, w = mine[f"v_{a}_{r}"].to_numpy(), theirs[f"v_{a}_{r}"].to_numpy()
            ok[f"{a}_{r}"] = bool(np.array_equal(g, w) if a == "max" else np.allclose(g, w, rtol=1e-9, atol=0))
    return ok


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--check-rows", type=int, default=50_000)
    ap.add_argument("--loop", action="store_true", help="also the 9 sliding_window_aggregate calls")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    rows = a.rows or (200_000 if a.quick else 2_000_000)
    reps = a.reps or (1 if a.quick else 3)
    out_path = a.out or RESULTS / ("spark_query_quick.json" if a.quick else "spark_query.json")
    load = LoadLog()
    load.mark("start")
    start = code_state()
    spark = session("local[2]")
    try:
        df = source(spark, rows).select("k", "t", "v").cache()
        df.count()
        cases = {"ours_1": lambda: [si.aggregate(df, query(1))], "ours_9": lambda: [si.aggregate(df, query(9))],
                 "sql_1": lambda: [sql(df, 1)], "sql_9": lambda: [sql(df, 9)]}
        if a.loop:
            cases["loop_9"] = lambda: loop(df)
        times: dict[str, list[float]] = {n: [] for n in cases}
        for rep in range(-1, reps):
            for name, build in cases.items():
                confs = SEGTREE if name.startswith("sql") else {}
                old = {k: spark.conf.get(k, None) for k in confs}
                for k, v in confs.items():
                    spark.conf.set(k, v)
                t0 = time.perf_counter()
                for d in build():
                    noop(d)
                dt = time.perf_counter() - t0
                for k, v in old.items():
                    spark.conf.unset(k) if v is None else spark.conf.set(k, v)
                if rep >= 0:
                    times[name].append(dt)
                print(f"  {name:8s} {'warm-up' if rep < 0 else f'rep {rep}'}: {dt:6.2f} s", flush=True)
            load.mark(f"rep {rep}")
        agrees = check(spark, a.check_rows)
        plan = si.aggregate(df, query(9))._jdf.queryExecution().executedPlan().toString()
    finally:
        spark.stop()
    res = {"quick": a.quick, "rows": rows, "reps": reps, "cases": {n: spread(t) for n, t in times.items()},
           "agrees": agrees, "exchanges_in_the_query_plan": plan.count("Exchange")}
    med = {n: statistics.median(t) for n, t in times.items()}
    res["ratios"] = {"ours_9 / ours_1": med["ours_9"] / med["ours_1"], "sql_9 / ours_9": med["sql_9"] / med["ours_9"],
                     "sql_1 / ours_1": med["sql_1"] / med["ours_1"]}
    if "loop_9" in med:
        res["ratios"]["loop_9 / ours_9"] = med["loop_9"] / med["ours_9"]
    res["goals"] = {"ours_9 / ours_1 <= 1.5": res["ratios"]["ours_9 / ours_1"] <= 1.5,
                    "sql_9 / ours_9 >= 5": res["ratios"]["sql_9 / ours_9"] >= 5}
    load.mark("end")
    res["machine"] = machine(load, start)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("ratios", "goals", "agrees", "exchanges_in_the_query_plan")}, indent=1))
    return res


if __name__ == "__main__":
    main()
