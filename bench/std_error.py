"""The relative error of ``std`` on every path against the exact std of the float64 values.

Data: ``1e12 + small`` (a large mean with a small spread, the case of issue 40), count windows
``W[3, 1]`` and ``W[64, 4]``, time windows (several values per slice) and their per-tuple, batch
(each engine) and replay paths. Prints one line per path: the largest relative error over its windows.

    python bench/std_error.py [--n 400] [--json bench/results/std_error.json]
"""

from __future__ import annotations

import argparse
import json
import math
from fractions import Fraction

import numpy as np

import pba_runtime as pr
from pba_runtime.algorithms import ALGORITHMS, engines_of
from pba_runtime.replay import REPLAY_ALGORITHMS


def exact_std(vals) -> float:
    """sqrt of the exact M2 / (n - 1) of the float64 values (rounded once, then sqrt)."""
    if len(vals) < 2:
        return math.nan
    fr = [Fraction(float(v)) for v in vals]
    n = len(fr)
    s = sum(fr)
    m2 = sum((x - s / n) ** 2 for x in fr)
    return math.sqrt(m2 / (n - 1))


def windows_of(values, ts, win):
    """(end, values) of every window with a result, from the definition."""
    out = []
    if isinstance(win, pr.CountWindow):
        k = 0
        while k * win.slide + win.range <= len(values):
            lo = k * win.slide
            out.append((lo + win.range, values[lo : lo + win.range]))
            k += 1
        return out
    r, s = win.range, win.slide
    k = (int(ts[0]) - r) // s + 1
    while k <= int(ts[-1]) // s:
        lo = k * s
        sel = (ts >= lo) & (ts < lo + r)
        if sel.any():
            out.append((lo + r, values[sel]))
        k += 1
    return out


def rel_err(got, want_windows) -> float:
    want = np.array([exact_std(v) for _, v in want_windows])
    got = np.asarray(got, dtype=float)
    if got.shape != want.shape:
        return math.inf
    ok = ~np.isnan(want)
    if np.isnan(got[ok]).any() or not np.isnan(got[~ok]).all():
        return math.inf
    err = np.abs(got[ok] - want[ok])  # relative to the exact std; a window of equal values must give 0
    pos = want[ok] > 0
    rel = np.where(pos, err / np.where(pos, want[ok], 1.0), np.where(err > 0, np.inf, 0.0))
    return float(np.max(rel)) if ok.any() else 0.0


def per_tuple(alg, win, values, ts, engine):
    res = []
    with pr.create(alg, win, "std", engine=engine) as op:
        for i, v in enumerate(values):
            out = op.insert(float(v)) if ts is None else op.insert(float(v), int(ts[i]))
            res += [r for _, r in out]
        res += list(op.flush()[1])
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(40)
    values = 1e12 + np.round(rng.uniform(0, 1, a.n), 1)  # 1e12 + 0.1, 1e12 + 0.7, ... (the float64 nearest)
    ts = np.cumsum(rng.integers(0, 3, a.n)).astype(np.int64)  # several values per slice
    cases = [("W[3,1]", pr.CountWindow(range=3, slide=1), None),
             ("W[64,4]", pr.CountWindow(range=64, slide=4), None),
             ("T[12,3]", pr.TimeWindow(range=12, slide=3), ts)]
    rows = []
    for label, win, t in cases:
        want = windows_of(values, t, win)
        for alg in ALGORITHMS:
            for engine in ("auto",) + engines_of(alg):
                try:
                    rows.append((label, f"insert {alg} engine={engine}", rel_err(per_tuple(alg, win, values, t, engine), want)))
                except (ValueError, TypeError) as e:
                    rows.append((label, f"insert {alg} engine={engine}", f"refused: {str(e)[:60]}"))
                try:
                    _, got = pr.sliding_aggregate(values, window=win, agg="std", algorithm=alg, timestamps=t,
                                                  engine=engine)
                    rows.append((label, f"batch {alg} engine={engine}", rel_err(got, want)))
                except (ValueError, TypeError) as e:
                    rows.append((label, f"batch {alg} engine={engine}", f"refused: {str(e)[:60]}"))
        for alg in REPLAY_ALGORITHMS:
            try:
                rows.append((label, f"replay {alg}", rel_err(pr.replay(alg, win, "std", values, t).results, want)))
            except (ValueError, TypeError) as e:
                rows.append((label, f"replay {alg}", f"refused: {str(e)[:60]}"))
    for label, path, err in rows:
        if isinstance(err, str) and "selective" in err:
            continue
        print(f"{label:8} {path:40} {err if isinstance(err, str) else f'{err:.2e}'}")
    print("largest:", max(e for *_, e in rows if not isinstance(e, str)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"window": w, "path": p, "rel_err": e} for w, p, e in rows], f, indent=1)


if __name__ == "__main__":
    main()
