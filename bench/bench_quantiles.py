"""Exact rolling median and quantile(0.99) against bottleneck, polars and pandas (issue 44).

``--n`` values (default 2M, normal), count windows of slide 1 at ``W[2^6]``, ``W[2^10]``, ``W[2^14]``,
``W[2^17]``. Methods, side by side in one run, interleaved in a shuffled order each repetition:

* ``ours``: ``pr.sliding_aggregate(v, window=pr.CountWindow(w), agg="median")`` (``pr.quantile(0.99)``), the
  defaults users take (the batch split in two ranges, this thread and the pool's worker);
* ``ours_1t``: the kernel over every window on one thread (what one core does);
* ``bottleneck``: ``move_median(v, w)``; ``polars``: ``Series.rolling_median(w)`` /
  ``rolling_quantile(0.99, "linear", w)``; ``pandas``: ``Series.rolling(w).median()`` / ``.quantile(0.99)``
  (pandas at the two smaller windows only: it takes minutes at the larger).

Each is timed ``--reps`` times after a warm call: medians and spread, in M values/s; results checked equal
(bottleneck, to the bit) or to 1e-12 (polars, pandas). Results go to ``bench/results/quantiles.json``.

**Sketched** (``--part sketch``): a DEBS'14-like stream (``Debs14Source``: 84 plugs, each about once a
second; ``--rows``, default 10M), a query per plug of p50 and p99 over ``TimeWindow("1h", "1s")`` and
``TimeWindow("24h", "1min")``: ``sketch`` (``pr.quantile(q, relative_error=0.01)``, the defaults) against
``exact`` (``pr.quantile(q, "lower")``, the quantile the sketch approximates), side by side; the observed
largest relative error over every window; and the state one plug's operator holds at the end of its stream,
on the default route (``auto``: the window's values) and on PBA carrying the monoid (its slices' partials).

    python bench/bench_quantiles.py                  # both parts: 2M values, 5 repetitions; 10M rows, 3
    python bench/bench_quantiles.py --quick          # 200k values, 2 repetitions, two windows; 1M rows, 1
    python bench/bench_quantiles.py --part sketch    # the sketched rows only
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from exp_common import LoadLog, code_state, interleave, machine, spread  # noqa: E402

import pba_runtime as pr  # noqa: E402
from pba_runtime.kernels.compiled.quantiles import METHODS, window_quantiles  # noqa: E402

RESULTS = HERE / "results"


def _have(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def cases(v: np.ndarray, w: int, what: str, slow_peers: bool) -> dict:
    agg = "median" if what == "median" else pr.quantile(0.99)
    S = np.arange(len(v) - w + 1, dtype=np.int64)
    E = S + w
    out = np.empty(len(S))
    code = METHODS["median"] if what == "median" else METHODS["linear"]
    c = {
        "ours": lambda: pr.sliding_aggregate(v, window=pr.CountWindow(w), agg=agg)[1],
        "ours_1t": lambda: (window_quantiles(v, S, E, 0.99, code, False, 1, 0, len(S), out), out)[1],
    }
    if what == "median" and _have("bottleneck"):
        import bottleneck as bn

        c["bottleneck"] = lambda: bn.move_median(v, w)[w - 1:]
    if _have("polars"):
        import polars as pl

        s = pl.Series(v)
        c["polars"] = ((lambda: s.rolling_median(w).to_numpy()[w - 1:]) if what == "median" else
                       (lambda: s.rolling_quantile(0.99, "linear", w).to_numpy()[w - 1:]))
    if slow_peers:
        import pandas as pd

        ps = pd.Series(v)
        c["pandas"] = ((lambda: ps.rolling(w).median().to_numpy()[w - 1:]) if what == "median" else
                       (lambda: ps.rolling(w).quantile(0.99).to_numpy()[w - 1:]))
    return c


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=None, help="values (default 2M; --quick 200k)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 5; --quick 2)")
    ap.add_argument("--windows", default=None, help="comma-separated ranges (default 64,1024,16384,131072)")
    ap.add_argument("--rows", type=int, default=None, help="sketch part: stream rows (default 10M; --quick 1M)")
    ap.add_argument("--part", choices=("exact", "sketch", "all"), default="all")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="the JSON file (default bench/results/quantiles.json)")
    args = ap.parse_args(argv)
    quick = {"n": 200_000, "reps": 2, "windows": "64,1024", "rows": 1_000_000}
    full = {"n": 2_000_000, "reps": 5, "windows": "64,1024,16384,131072", "rows": 10_000_000}
    for k, d in (quick if args.quick else full).items():
        if getattr(args, k) is None:
            setattr(args, k, d)
    windows = [int(x) for x in args.windows.split(",")]
    load = LoadLog()
    load.mark("start")
    start = code_state()
    v = np.random.default_rng(44).normal(size=args.n)
    report: dict = {"n": args.n, "reps": args.reps, "rows": {}}
    for what in ("median", "quantile_0.99") if args.part != "sketch" else ():
        for w in windows:
            c = cases(v, w, what, slow_peers=w <= 1024)
            ref = c["ours"]()
            for name, f in c.items():  # warm, and check
                got = f()
                if name in ("ours_1t", "bottleneck"):
                    assert np.array_equal(got, ref), (what, w, name)
                else:
                    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12, err_msg=f"{what} {w} {name}")

            def timed(f):
                def run():
                    t = time.perf_counter()
                    f()
                    return time.perf_counter() - t
                return run

            runs = interleave({k: timed(f) for k, f in c.items()}, args.reps)
            load.mark(f"{what} {w}")
            row = {k: spread([args.n / t / 1e6 for t in ts]) for k, ts in runs.items()}
            ratios = {f"ours / {k}": row["ours"]["median"] / row[k]["median"] for k in row if k != "ours"}
            report["rows"][f"{what} W[{w}]"] = {"Mvalues_per_s": row, "ratios": ratios}
            line = "  ".join(f"{k} {r['median']:.1f} [{r['min']:.1f}-{r['max']:.1f}]" for k, r in row.items())
            print(f"{what:14s} W[{w}]  {line}", flush=True)
    if args.part != "exact":
        report["sketch"] = sketch_rows(args.rows, 1 if args.quick else max(1, min(args.reps, 3)), load)
    load.mark("end")
    report["machine"] = machine(load, start)
    name = "quantiles" + ("" if args.part == "all" else "_" + args.part) + ("_quick" if args.quick else "")
    out = args.out or RESULTS / (name + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    return report


def _debs(rows: int):
    from pba_runtime.runtime import Debs14Source

    k, v, t = Debs14Source(plugs=84, tuples=rows, seed=1).take(0, rows)
    return {"plug": k, "ts": t.astype("datetime64[ms]"), "load": v}


def _state_bytes(frame: dict, window, agg, algorithm: str, tail: int) -> int:
    """The state of the busiest plug's operator after its last ``tail`` rows, fed one at a time to PBA."""
    plug = np.bincount(frame["plug"]).argmax()
    sel = frame["plug"] == plug
    v, t = frame["load"][sel][-tail:], frame["ts"][sel][-tail:].astype(np.int64)
    op = pr.create(algorithm, window.in_unit("ms"), agg)
    op.insert_many(v, t) if algorithm == "auto" else [op.insert(float(x), int(ts)) for x, ts in zip(v, t)]
    return int(op.state_bytes())


def sketch_rows(rows: int, reps: int, load: LoadLog) -> dict:
    """The sketched p50/p99 against the exact lower ones over the DEBS'14-like query (see the module doc)."""
    frame = _debs(rows)
    out: dict = {"rows": rows, "plugs": 84, "reps": reps, "relative_error": 0.01, "windows": {}}
    for label, w in (("1h/1s", pr.TimeWindow("1h", "1s")), ("24h/1min", pr.TimeWindow("24h", "1min"))):
        aggs = {"sketch": [pr.quantile(0.5, relative_error=0.01), pr.quantile(0.99, relative_error=0.01)],
                "exact": [pr.quantile(0.5, "lower"), pr.quantile(0.99, "lower")]}
        queries = {k: pr.Query(by="plug", on="ts", windows=w, aggs={"load": a}) for k, a in aggs.items()}
        got = {k: q.run(frame) for k, q in queries.items()}  # warm, and the error on every window
        err = {}
        for qn, (sk, ex) in zip(("p50", "p99"), zip(*(list(got[k])[-2:] for k in ("sketch", "exact")))):
            a, b = np.asarray(got["sketch"][sk], dtype=float), np.asarray(got["exact"][ex], dtype=float)
            err[qn] = float(np.max(np.abs(a - b) / np.abs(b)))
        windows = len(got["exact"]["window_end"])
        del got

        def timed(q):
            def run():
                t0 = time.perf_counter()
                q.run(frame)
                return time.perf_counter() - t0
            return run

        runs = interleave({k: timed(q) for k, q in queries.items()}, reps)
        load.mark(f"sketch {label}")
        row = {k: spread([rows / t / 1e6 for t in ts]) for k, ts in runs.items()}
        sk = aggs["sketch"][1]
        # past a full window of the plug's (once a second) tuples: the state a running job holds
        tail = int(w.in_unit("ms").range // 1000) + 12_000
        state = {"auto (window values)": _state_bytes(frame, w, sk, "auto", tail),
                 "pba (slice partials)": _state_bytes(frame, w, sk, "pba", tail)}
        out["windows"][label] = {"Mrows_per_s": row, "sketch / exact": row["sketch"]["median"] / row["exact"]["median"],
                                 "max_relative_error": err, "windows": windows, "state_bytes_one_plug": state,
                                 "partial_bytes": sk.partial_bytes}
        line = "  ".join(f"{k} {r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]" for k, r in row.items())
        print(f"sketch {label:9s} M rows/s  {line}  ratio {out['windows'][label]['sketch / exact']:.2f}x  "
              f"max rel err {err}  state {state}", flush=True)
    return out


if __name__ == "__main__":
    main()
