"""A user aggregation as users write it, against pandas' numba ``rolling.apply`` (issue 40).

The aggregation of ``docs/batch.md`` (``lift=abs, combine=max, lower=float``), through
``pr.sliding_aggregate`` over ``CountWindow(range, 1)`` (default ``2^10``), in the forms a user writes it:

* ``docs``: exactly as the guide shows it (with ``ufunc=np.maximum``, its declared faster form);
* ``builtins``: the same without ``ufunc=`` (builtins only, compiled through wrappers calling them);
* ``lambdas``: ``lambda v: abs(v)``, ``lambda a, b: max(a, b)``, ``lambda p: float(p)``;
* ``defs``: the same monoid written as module-level ``def``s;
* ``builtin_max``: the built-in ``"max"`` over ``np.abs(x)`` (what the library does with its own kernel);

beside pandas' ``Series.rolling(range).apply(f, raw=True, engine="numba")`` with ``f`` a loop over the
window (``pandas_loop``) and ``np.abs(w).max()`` (``pandas_numpy``). Every method is checked to give
the same results. Methods run interleaved, in a rotated order each round; the first call of each
(which compiles: numba for the user aggregation, pandas' jit) is reported apart, then ``--repeats``
warm calls give the median [min-max] of wall seconds and values per second. Results go to
``bench/results/user_agg.json`` (``user_agg_quick.json`` with ``--quick``).

    python bench/bench_user_agg.py              # 2^20 values, W[2^10, 1], 7 repeats
    python bench/bench_user_agg.py --quick      # 2^14 values, 2 repeats: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import pba_runtime as pr

RESULTS = Path(__file__).resolve().parent / "results"


def absolute(v):
    return abs(v)


def larger(a, b):
    return max(a, b)


def same(p):
    return float(p)


AGGS = {
    "docs": pr.Aggregation(lift=abs, combine=max, lower=float, identity=0.0, name="absmax", ufunc=np.maximum),
    "builtins": pr.Aggregation(lift=abs, combine=max, lower=float, identity=0.0, name="absmax_builtins"),
    "lambdas": pr.Aggregation(lift=lambda v: abs(v), combine=lambda a, b: max(a, b), lower=lambda p: float(p),
                              identity=0.0, name="absmax_lambdas"),
    "defs": pr.Aggregation(lift=absolute, combine=larger, lower=same, identity=0.0, name="absmax_defs"),
}


def window_loop(w):
    m = 0.0
    for x in w:
        a = abs(x)
        if a > m:
            m = a
    return m


def window_numpy(w):
    return np.abs(w).max()


def _ours(agg):
    def run(x, r):
        return pr.sliding_aggregate(x, window=pr.CountWindow(range=r, slide=1), agg=agg)[1]
    return run


def _builtin_max(x, r):
    return pr.sliding_aggregate(np.abs(x), window=pr.CountWindow(range=r, slide=1), agg="max")[1]


def _pandas(f):
    def run(x, r):
        import pandas as pd

        return pd.Series(x).rolling(r).apply(f, raw=True, engine="numba").to_numpy()[r - 1:]
    return run


def methods() -> dict:
    out = {name: _ours(agg) for name, agg in AGGS.items()}
    out["builtin_max"] = _builtin_max
    out["pandas_loop"] = _pandas(window_loop)
    out["pandas_numpy"] = _pandas(window_numpy)
    return out


def _engine(agg) -> dict:
    """The engine ``sliding_aggregate`` runs ``agg`` on, and whether choosing it warned."""
    from pba_runtime.kernels import resolve_engine

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eng = resolve_engine(agg)
    return {"engine": eng.name, "layout": eng.layout, "why": eng.why,
            "warnings": [str(w.message) for w in caught]}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except Exception:
        return "unknown"


def _stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def run(n: int, r: int, repeats: int, seed: int = 1) -> dict:
    x = np.random.default_rng(seed).normal(size=n)
    want = np.abs(x)
    want = np.array([want[i:i + r].max() for i in range(n - r + 1)]) if n <= 1 << 15 else None
    fns = methods()
    names = list(fns)
    doc: dict = {"n": n, "range": r, "slide": 1, "repeats": repeats,
                 "machine": {"python": sys.version.split()[0], "numpy": np.__version__, "cpus": os.cpu_count(),
                             "platform": platform.platform(), "commit": _commit(),
                             "loadavg_start": list(os.getloadavg())}, "methods": {}}
    first: dict[str, float] = {}
    ref = None
    for name in names:  # the first call of each: compiles (numba, pandas' jit), reported apart
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # what warns is recorded in "engines"
            got = fns[name](x, r)
        first[name] = time.perf_counter() - t0
        got = np.asarray(got, dtype=np.float64)
        ref = got if ref is None else ref
        doc["methods"][name] = {"agrees": bool(np.array_equal(got, ref)
                                                and (want is None or np.array_equal(got, want)))}
    doc["engines"] = {name: _engine(agg) for name, agg in AGGS.items()}  # (compiled by the first calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for k in range(repeats):
        order = names[k % len(names):] + names[:k % len(names)]
        for name in order:
            t0 = time.perf_counter()
            fns[name](x, r)
            times[name].append(time.perf_counter() - t0)
    for name in names:
        s = _stats(times[name])
        doc["methods"][name].update({"first_s": first[name], "seconds": s,
                                     "values_per_s": {"median": n / s["median"], "min": n / s["max"],
                                                      "max": n / s["min"]}})
    pandas_best = min(doc["methods"][p]["seconds"]["median"] for p in ("pandas_loop", "pandas_numpy"))
    doc["speedup_vs_pandas"] = {name: pandas_best / doc["methods"][name]["seconds"]["median"]
                                for name in names if not name.startswith("pandas")}
    doc["machine"]["loadavg_end"] = list(os.getloadavg())
    return doc


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2^14 values, 2 repeats (a smoke run)")
    ap.add_argument("--n", type=int, default=None, help="values (default 2^20, --quick 2^14)")
    ap.add_argument("--range", type=int, default=1 << 10, help="window range (default 2^10)")
    ap.add_argument("--repeats", type=int, default=None, help="warm calls per method (default 7, --quick 2)")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default bench/results/user_agg.json)")
    a = ap.parse_args(argv)
    n = a.n or (1 << 14 if a.quick else 1 << 20)
    repeats = a.repeats or (2 if a.quick else 7)
    doc = run(n, a.range, repeats)
    doc["quick"] = a.quick
    out = a.out or RESULTS / ("user_agg_quick.json" if a.quick else "user_agg.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"n={n} W[{a.range}, 1], {repeats} warm repeats, load {doc['machine']['loadavg_start'][0]:.1f}")
    for name, m in doc["methods"].items():
        s, v = m["seconds"], m["values_per_s"]
        ratio = doc["speedup_vs_pandas"].get(name)
        print(f"  {name:>13}: {s['median'] * 1e3:9.2f} ms [{s['min'] * 1e3:.2f}-{s['max'] * 1e3:.2f}]  "
              f"{v['median'] / 1e6:8.2f} M/s  first {m['first_s']:.2f} s"
              + (f"  {ratio:7.1f}x pandas" if ratio else "") + ("" if m["agrees"] else "  DIFFERS"))
    for name, e in doc["engines"].items():
        if e["warnings"]:
            print(f"  {name} warned: {e['warnings'][0]}")
    print(f"-> {out}")
    return doc


if __name__ == "__main__":
    main()
