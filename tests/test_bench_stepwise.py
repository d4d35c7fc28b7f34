"""A smoke run of bench/bench_stepwise.py (tiny sizes) so the harness cannot rot; nothing here asserts on time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))


# with the slow tests, beside the experiments' smoke runs: ~30 s cold, and the compiled loops it times are
# tested in the default run by tests/test_stepwise.py
@pytest.mark.slow
def test_bench_stepwise_smoke(tmp_path):
    import bench_stepwise

    bench_stepwise.main(["--smoke", "--out-dir", str(tmp_path)])
    res = json.loads((tmp_path / "stepwise_smoke.json").read_text())
    assert res["smoke"] is True and len(res["machine"]["loadavg"]) == 3
    assert set(res["throughput"]) == {"max W[16,1]", "max W[64,1]", "std W[64,1]"}
    for row in res["throughput"].values():
        for alg in ("sba", "pba", "two_stacks"):
            c = row[alg]
            assert c["median"] > 0 and c["min"] <= c["median"] <= c["max"]
        # chunks of 9-33 slices: below MIN_WORKER_CHUNK, PBA builds its lcs on the main loop and says why
        assert row["stats_last_repeat"]["pba"]["lcs_on"] == "main loop"
        assert "MIN_WORKER_CHUNK" in row["stats_last_repeat"]["pba"]["why"]
    lat = res["latency"]["max W[64,1]"]
    for alg in ("pba", "two_stacks"):
        assert 0 <= lat[alg]["p99"]["median"] <= lat[alg]["max"]["median"]
    assert set(lat["pba_over_two_stacks"]) == {"max", "top10", "top100", "p99", "std", "std_below_1ms", "mean"}


def test_bench_stepwise_insert_smoke(tmp_path):
    """``--insert``: each algorithm's Python ``op.insert`` beside numba's call floor (no timing asserted)."""
    import bench_stepwise

    bench_stepwise.main(["--insert", "--smoke", "--out-dir", str(tmp_path)])
    res = json.loads((tmp_path / "stepwise_insert_smoke.json").read_text())
    assert set(res["insert"]) == set(bench_stepwise.ALGS) == set(res["insert_over_floor"])
    assert set(res["numba"]) == {"call(float)", "call(1 arrays, float)", "call(3 arrays, float)", "call(8 arrays, float)"}
    for row in [*res["numba"].values(), *res["insert"].values()]:
        assert 0 < row["min"] <= row["median"] <= row["max"]
    assert set(res["step"]) == {"daba max count", "daba sum count"}  # the Python step beside the compiled one
    for row in res["step"].values():
        assert row["python"]["median"] > 0 and row["compiled"]["median"] > 0 and row["speedup"] > 0
