"""A process's first compiled call (issue 40): the kernels load from numba's disk cache without numba's
compiler set-up (:mod:`pba_runtime.kernels.lean_load`), give the results the other engines give, and a
compile after them still gets numba's whole set-up; and ``bench/bench_first_call.py``'s harness runs.

The loads are checked in fresh processes (a process of the suite has compiled or loaded kernels already):
one primes the cache, the next must load every kernel it calls without importing what the set-up imports.
Nothing here asserts on time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"

#: a priming process may compile every kernel of compiled.py (minutes on a fresh clone, cold cache)
pytestmark = pytest.mark.timeout(900)

# Every built-in over count windows, slide 1 (the merges from values) and slide 3 (the partials' merges,
# lifts and lowers), and over time windows (the fused kernels), against the numpy engine (no numba); then
# what loaded, then a compile.
SCRIPT = textwrap.dedent("""
    import json, sys
    import numba.core.base
    import numpy as np

    refreshes = []  # numba's compiler set-up: the target context's refresh (a compile runs it, a load need not)
    _refresh = numba.core.base.BaseContext.refresh
    numba.core.base.BaseContext.refresh = lambda self: (refreshes.append(1), _refresh(self))[1]
    import pba_runtime as pr

    rng = np.random.default_rng(1)
    x = rng.random(5000) * 10
    x[17] = np.nan
    ts = np.cumsum(rng.integers(0, 4, len(x)))  # gaps and equal timestamps
    report = {"mismatch": []}

    def same(ends, res, ends2, ref):
        return np.array_equal(ends, ends2) and np.allclose(np.asarray(res, float), np.asarray(ref, float),
                                                           rtol=1e-9, atol=0, equal_nan=True)

    for name, agg in sorted(pr.BUILTIN_AGGREGATIONS.items()):
        if agg.kernel is None:
            continue
        vals = np.abs(x) + 1 if name in ("geomean", "moment_sketch") else x
        for slide in (1, 3):
            w = pr.CountWindow(range=64, slide=slide)
            ends, res = pr.sliding_aggregate(vals, window=w, agg=name)
            ends2, ref = pr.sliding_aggregate(vals, window=w, agg=name, engine="numpy")
            if not same(ends, res, ends2, ref):
                report["mismatch"].append([name, slide])
        w = pr.TimeWindow(range=50, slide=10)  # the fused time-window kernels (time_fused.py)
        ends, res = pr.sliding_aggregate(vals, window=w, agg=name, timestamps=ts)
        ends2, ref = pr.sliding_aggregate(vals, window=w, agg=name, timestamps=ts, engine="numpy")
        if not same(ends, res, ends2, ref):
            report["mismatch"].append([name, "time"])
    from numba.core.dispatcher import Dispatcher
    from pba_runtime.kernels import compiled, lean_load, time_fused, time_slicing

    loaded = {f"{m.__name__.rsplit('.', 1)[1]}.{k}": v for m in (compiled, time_slicing, time_fused)
              for k, v in vars(m).items() if isinstance(v, Dispatcher) and v.overloads}
    report["loaded"] = sorted(loaded)
    report["all_lean"] = all(lean_load.is_lean(v) for v in loaded.values())
    report["cache_hits"] = sum(sum(v.stats.cache_hits.values()) for v in loaded.values())
    report["compiled_here"] = sum(sum(v.stats.cache_misses.values()) for v in loaded.values())
    report["setup_ran"] = bool(refreshes)
    import numba

    @numba.njit(cache=False)
    def twice(a):
        return np.median(a) * 2  # numba's set-up (its numpy functions) must be there for this compile
    report["compile_after"] = float(twice(np.array([3.0, 4.0, 7.0])))
    report["setup_ran_after"] = bool(refreshes)
    ends, res = pr.sliding_aggregate(x, window=pr.CountWindow(range=64, slide=1), agg="max")  # still runs
    report["max_after"] = float(np.nanmax(res))
    print(json.dumps(report))
""")


def _fresh(script: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DEBUG_CACHE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(ROOT), capture_output=True, text=True,
                          timeout=850)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_every_cached_kernel_loads_lean():
    from numba.core.caching import FunctionCache
    from numba.core.dispatcher import Dispatcher

    from pba_runtime.kernels import compiled, lean_load, time_fused, time_slicing

    for module in (compiled, time_slicing, time_fused):
        cached = [v for v in vars(module).values() if isinstance(v, Dispatcher) and isinstance(v._cache, FunctionCache)]
        assert len(cached) > 5 and all(lean_load.is_lean(v) for v in cached)
        assert lean_load.lean_loads(vars(module)) == 0  # once: a second call changes nothing


def test_a_fresh_process_loads_its_kernels_without_numbas_compiler_setup():
    _fresh(SCRIPT)  # primes the disk cache (compiles what it lacks)
    rep = _fresh(SCRIPT)
    assert rep["mismatch"] == []
    assert {f"compiled.{k}" for k in ("merge_scalar", "merge_columns", "merge_std", "merge_argmax", "std_from_values",
                                      "mean_from_values", "argmax_from_values", "count_from_values", "lift_std",
                                      "lift_pair", "lower_std", "lower_ratio", "lift_moments", "lift_argmax")
            } <= set(rep["loaded"])
    assert {"time_fused.run_max", "time_fused.run_std", "time_fused.timestamps_ok"} <= set(rep["loaded"])
    assert rep["all_lean"] and rep["compiled_here"] == 0 and rep["cache_hits"] >= len(rep["loaded"])
    assert rep["setup_ran"] is False  # the loads skipped it
    assert rep["compile_after"] == 8.0 and rep["setup_ran_after"] is True  # a compile still gets it
    assert rep["max_after"] > 9


def test_first_call_bench_smoke(tmp_path):
    """bench/bench_first_call.py at a tiny size: fresh processes, both peers and the phases, the counts."""
    sys.path.insert(0, str(BENCH))
    import bench_first_call

    out = tmp_path / "first_call.json"
    res = bench_first_call.main(["--quick", "--aggs", "max,std", "--out", str(out)])
    assert json.loads(out.read_text())["warm"].keys() == res["warm"].keys() == {"max", "std"}
    for row in res["warm"].values():
        for peer in bench_first_call.PEERS:
            s = row[peer]
            assert s["same_results"] and 0 < s["first_s"]["min"] <= s["first_s"]["median"] <= s["first_s"]["max"]
            assert s["steady_s"]["median"] > 0
        c = row["counts"]
        assert c["cache_data_loads"] >= 1 and c["signatures_loaded"] >= 1 and c["cache_saves"] == 0  # warm
        assert c["numba_setup_ran"] is False and c["numba_modules"] > 0
        assert all(row["phases"][k]["median"] > 0 for k in ("import_api_s", "import_numba_s", "first_s"))
    assert res["cold"] == {} and res["bytecode_cache"] is True and res["window"]["kind"] == "count"
    res = bench_first_call.main(["--quick", "--time", "--aggs", "max", "--out", str(tmp_path / "time.json")])
    row = res["warm"]["max"]
    assert res["window"]["kind"] == "time" and row["lean"]["same_results"]
    assert "time_fused.run_max" in row["counts"]["kernels_touched"] and row["counts"]["numba_setup_ran"] is False


@pytest.mark.slow  # compiles a kernel family into an empty cache (tens of seconds)
def test_first_call_bench_cold(tmp_path):
    sys.path.insert(0, str(BENCH))
    import bench_first_call

    res = bench_first_call.main(["--quick", "--aggs", "max", "--cold", "--out", str(tmp_path / "f.json")])
    cold = res["cold"]["max"]
    assert cold["first_s"]["n"] == 1 and cold["same_results"]
    assert not list(Path(tempfile.gettempdir()).glob("pba-first-call-cold-*"))
