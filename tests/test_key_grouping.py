"""The coordinator's one-pass partitioning and grouping (small integer keys) and the slots' input rings.

The compiled counting sort equals its numpy reference and the old path (``slot_of`` then each slot's
``group_runs``); jobs whose values travel through the input rings (of the default size, small enough that the
coordinator waits for room, smaller than a share so it goes inline, and batches that fall back to the general
path) give every key's windows as the per-key reference computes them and leave nothing in ``/dev/shm``.
"""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_runtime import read_results, reference

import pba_runtime as pr
from pba_runtime.runtime import Debs14Source, Job, coordinator
from pba_runtime.runtime.key_grouping import SlotGrouper
from pba_runtime.runtime.partitioning import group_runs, slot_of
from pba_runtime.runtime.sources import Batch, Source


@pytest.fixture(autouse=True)
def no_leftover_children():
    yield
    assert multiprocessing.active_children() == []


def _mine() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"pba_{os.getpid()}_")}


def _old_path(keys, values, ts, parallelism):
    """What the slots got before: each slot's tuples (``slot_of``) sorted stably by key (``group_runs``)."""
    slots = slot_of(keys, parallelism)
    out = []
    for i in range(parallelism):
        idx = np.flatnonzero(slots == i)
        if not len(idx):
            out.append(None)
            continue
        order, firsts, bounds = group_runs(keys[idx])
        out.append((firsts, bounds, values[idx][order].tobytes(), None if ts is None else ts[idx][order].tolist()))
    return out


def _as_tuples(groups):
    return [None if g is None else (g.keys, g.bounds, g.values.tobytes(),
                                    None if g.timestamps is None else g.timestamps.tolist()) for g in groups]


special = st.sampled_from([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e12, 1e-3])


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.one_of(st.integers(0, 9), st.integers(0, 70_000)), min_size=1, max_size=300),
       parallelism=st.integers(1, 5), with_ts=st.booleans(), data=st.data())
def test_compiled_grouping_equals_the_reference_and_the_old_path(keys, parallelism, with_ts, data):
    k = np.array(keys, dtype=np.int64)
    vals = data.draw(st.lists(st.one_of(st.floats(allow_nan=True), special), min_size=len(k), max_size=len(k)))
    v = np.array(vals, dtype=np.float64)
    ts = np.arange(len(k), dtype=np.int64)[::-1] * 7 if with_ts else None
    fast, slow = SlotGrouper(parallelism), SlotGrouper(parallelism, compiled=False)
    got, ref = fast(k, v, ts), slow(k, v, ts)
    if k.max() >= 1 << 16:
        assert got is None and ref is None  # the caller's general path
        return
    want = _old_path(k, v, ts, parallelism)
    assert _as_tuples(got) == _as_tuples(ref) == want  # values compared as bytes: NaN, -0.0 bit for bit
    assert all(type(x) is int for g in got if g is not None for x in g.keys)


@pytest.mark.parametrize("keys", [np.array([-1, 3]), np.array(["a", "b"]), np.array([1.5, 2.0]),
                                  np.array([], dtype=np.int64)])
def test_other_keys_take_the_general_path(keys):
    assert SlotGrouper(2)(keys, np.zeros(len(keys)), None) is None


def test_the_rank_table_grows_with_the_keys():
    g = SlotGrouper(3)
    for hi in (5, 40, 65_535):
        k = np.array([hi, 0, hi, 1], dtype=np.int64)
        assert _as_tuples(g(k, np.arange(4.0), None)) == _old_path(k, np.arange(4.0), None, 3)


def test_one_grouper_over_batches_in_and_out_of_its_table():
    """The compiled pass finds a key without a rank itself (no min/max pass first): then the table grows, or
    the batch goes to the general path, and the next batches are grouped as a fresh grouper groups them."""
    g = SlotGrouper(2)
    batches = [[0, 5, 3], [-1, 2], [70_000, 1], [200, 3, 0], [2**63 - 1], [7, 7, 1]]
    for keys in batches:
        for dtype in (np.int64, np.uint64, np.int32):
            if min(keys) < 0 and dtype is np.uint64 or max(keys) >= 2**31 and dtype is np.int32:
                continue
            k = np.array(keys, dtype=dtype)
            v = np.arange(len(k), dtype=np.float64)
            got, ref = g(k, v, None), SlotGrouper(2, compiled=False)(k, v, None)
            assert (got is None) == (ref is None) == (min(keys) < 0 or max(keys) >= 1 << 16)
            if got is not None:
                assert _as_tuples(got) == _as_tuples(ref) == _old_path(k.astype(np.int64), v, None, 2)


def test_a_bad_parallelism_is_refused():
    with pytest.raises(ValueError, match="parallelism must be a positive integer"):
        SlotGrouper(0)


class _MixedKeys(Source):
    """Integer keys; every third batch holds a key too large for the rank table (the general path)."""

    kind = "mixed"

    def __init__(self, tuples: int):
        self.tuples = tuples

    def describe(self):
        return {"kind": self.kind, "tuples": self.tuples}

    def columns(self):
        k, v, t = Debs14Source(plugs=6, tuples=self.tuples, seed=4, disorder=300).take(0, self.tuples)
        k = k.copy()
        k[k == 5] = 100_000
        return k, v, t

    def batches(self, start=None, batch_size=1000):
        k, v, t = self.columns()
        pos = 0 if start is None else int(start)
        b = 0
        while pos < self.tuples:
            n = min(batch_size, self.tuples - pos)
            kk = k[pos : pos + n]
            if b % 3:
                kk = np.where(kk == 100_000, 5, kk)  # small keys only: the grouped path
            yield Batch(kk, v[pos : pos + n], t[pos : pos + n], pos + n, 0.0)
            pos += n
            b += 1


def _mixed_reference(src, batch_size):
    """The keys as the source yields them (100_000 and 5 are one plug split in two keys by batch)."""
    ks, vs, ts = [], [], []
    for b in src.batches(batch_size=batch_size):
        ks.append(b.keys)
        vs.append(b.values)
        ts.append(b.timestamps)
    return np.concatenate(ks), np.concatenate(vs), np.concatenate(ts)


@pytest.mark.parametrize("capacity", [None, 20_000, 64])
@pytest.mark.parametrize("window", [pr.CountWindow(range=50, slide=1), pr.TimeWindow(range=2_000, slide=500)])
def test_jobs_through_the_input_rings_give_the_reference_windows(tmp_path, monkeypatch, capacity, window):
    """Default rings, rings so small the coordinator waits for the slots to release, rings smaller than a
    share (sent inline), and batches of the general path between: every window once, as the reference."""
    if capacity is not None:
        monkeypatch.setattr(coordinator, "input_ring_capacity", lambda *a: capacity)
    before = _mine()
    src = _MixedKeys(12_000)
    is_time = isinstance(window, pr.TimeWindow)
    lateness = 400 if is_time else None
    out = tmp_path / "out.csv"
    summary = Job(src, window, "max", "sba", parallelism=2, batch_size=1_000, sink=f"csv:{out}",
                  allowed_lateness=lateness, late_output=str(tmp_path / "late.csv")).run()
    k, v, t = _mixed_reference(src, 1_000)
    want, want_late = reference(k, v, t, window, "max", lateness)
    got = read_results(out)
    assert sorted(got) == sorted(key for key in want if want[key])
    for key, rows in want.items():
        assert [(s, e, float(x)) for s, e, x in got.get(key, [])] == [(s, e, r) for s, e, r in rows], key
    assert summary["windows"] == sum(len(r) for r in want.values())
    assert summary["late"] == sum(len(x) for x in want_late.values())
    assert _mine() == before


class _FailsLater(Source):
    """Integer keys, a negative value (which ``geomean`` refuses) in batch 6 of 40: the slot fails while the
    coordinator is ahead of it, waiting for room in a small input ring or on the queue."""

    kind = "fails-later"

    def describe(self):
        return {"kind": self.kind}

    def batches(self, start=None, batch_size=1000):
        for b in range(40):
            values = np.full(batch_size, 2.0)
            if b == 5:
                values[7] = -1.0
            yield Batch(np.arange(batch_size, dtype=np.int64) % 3, values, None, (b + 1) * batch_size, 0.0)


def test_a_slot_failing_while_the_coordinator_waits_for_its_ring_stops_the_job(monkeypatch):
    monkeypatch.setattr(coordinator, "input_ring_capacity", lambda *a: 20_000)
    before = _mine()
    with pytest.raises(pr.runtime.UserError, match="task slot 0"):
        Job(_FailsLater(), pr.CountWindow(range=2, slide=1), "geomean", "sba", parallelism=1, batch_size=1000,
            queue_size=16).run()
    assert _mine() == before
