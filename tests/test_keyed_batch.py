"""The keyed batch path (``algorithms/keyed_batch.py``, the lean ``insert_many``): fast == slow, bit for bit.

Every key's windows through :func:`insert_many_keyed` (one compiled call for the lean keys) and
through the lean single-key ``insert_many`` equal the general batch path's (``count_batch.insert_slices``, the
readable reference) bit for bit, and the naive oracle's; keys appear in only some batches, batches
are too short for a window, a snapshot is taken and restored midway, and other algorithms and
aggregations (not lean) mix in.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pba_runtime as pr
from pba_runtime.algorithms.keyed_batch import insert_many_keyed
from pba_runtime.engines import count_batch
from pba_runtime.runtime.partitioning import group_runs
from tests.oracle import assert_results_equal, count_windows

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e12, 1e-3, -1e12])


def _stream(rng: np.random.Generator, n: int, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    keys = rng.integers(0, n_keys, n)
    values = rng.normal(size=n) * 10
    special = rng.random(n) < 0.05
    values[special] = rng.choice(SPECIAL, int(special.sum()))
    return keys, values


def _batches(rng: np.random.Generator, n: int) -> list[tuple[int, int]]:
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, rng.integers(1, 12)), replace=False))
    bounds = [0, *cuts.tolist(), n]
    return list(zip(bounds[:-1], bounds[1:]))


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _run_keyed(make, keys, values, batches, snapshot_at=None):
    """Every key's (ends, results) through insert_many_keyed, batch by batch (a snapshot and restore of
    every key into fresh operators before batch ``snapshot_at``)."""
    ops: dict = {}
    got: dict = {}
    for b, (lo, hi) in enumerate(batches):
        if b == snapshot_at:
            states = pickle.loads(pickle.dumps({k: op.snapshot() for k, op in ops.items()}))
            for op in ops.values():
                op.close()
            ops = {k: make(k).restore(s) for k, s in states.items()}
        order, firsts, bounds = group_runs(keys[lo:hi])
        batch_ops = [ops.setdefault(k, make(k)) for k in firsts]
        outs = insert_many_keyed(batch_ops, values[lo:hi][order], bounds)
        for k, (e, r) in zip(firsts, outs):
            got.setdefault(k, []).append((e, r))
    for op in ops.values():
        op.close()
    return {k: (np.concatenate([e for e, _ in v]), np.concatenate([r for _, r in v])) for k, v in got.items()}


def _run_reference(make, keys, values, batches):
    """Every key's (ends, results) through the general batch path, one key at a time (the slow reference)."""
    out = {}
    for k in np.unique(keys).tolist():
        op = make(k)
        parts = []
        for lo, hi in batches:
            vals = values[lo:hi][keys[lo:hi] == k]
            if len(vals):
                parts.append(count_batch.insert_slices(op, vals) if hasattr(op, "_batch") else op.insert_many(vals))
        op.close()
        out[k] = (np.concatenate([e for e, _ in parts]), np.concatenate([r for _, r in parts]))
    return out


def _check(keyed: dict, ref: dict, keys, values, r: int, agg: str) -> None:
    assert keyed.keys() == ref.keys()
    for k in ref:
        assert keyed[k][0].tolist() == ref[k][0].tolist(), f"key {k}: ends"
        assert _bits(keyed[k][1]) == _bits(np.asarray(ref[k][1], dtype=keyed[k][1].dtype)), f"key {k}: results"
        vals = values[keys == k]
        want_ends, want = count_windows(vals, r, 1, agg)
        assert keyed[k][0].tolist() == want_ends
        assert_results_equal(agg, keyed[k][1].tolist(), want, vals[np.isfinite(vals)])  # the scale of the sums


@pytest.mark.parametrize("agg", ["max", "min", "sum"])
@pytest.mark.parametrize("algorithm", ["sba", "pba", "mixed"])
def test_keyed_equals_per_key_reference(agg, algorithm):
    rng = np.random.default_rng(hash((agg, algorithm)) % 2**32)
    r = 16
    keys, values = _stream(rng, 3000, 9)
    keys[keys == 8] = np.where(np.arange(3000) < 1500, 8, 7)[keys == 8]  # key 8 only in the first half
    batches = _batches(rng, len(keys))
    w = pr.CountWindow(range=r, slide=1)
    pool = pr.WorkerPool(kind="thread", workers=1)
    try:
        def make(k):
            alg = algorithm if algorithm != "mixed" else ("pba", "sba", "two_stacks")[k % 3]
            options = {"pool": pool} if alg == "pba" else {}
            return pr.create(alg, w, agg, **({"engine": "compiled"} if alg != "two_stacks" else {}), **options)

        ref = _run_reference(make, keys, values, batches)
        _check(_run_keyed(make, keys, values, batches), ref, keys, values, r, agg)
        _check(_run_keyed(make, keys, values, batches, snapshot_at=len(batches) // 2), ref, keys, values, r, agg)
    finally:
        pool.close()


@pytest.mark.parametrize("agg", ["count", "mean", "std", "argmax"])
def test_other_aggregations_go_their_own_way(agg):
    """Not lean: each key its own insert_many; the results are still every key's."""
    rng = np.random.default_rng(3)
    keys, values = _stream(rng, 800, 4)
    values = np.nan_to_num(values, nan=1.0, posinf=2.0, neginf=-2.0)
    batches = _batches(rng, len(keys))

    def make(_k):
        return pr.create("sba", pr.CountWindow(range=8, slide=1), agg)

    keyed = _run_keyed(make, keys, values, batches)
    for k in np.unique(keys).tolist():
        want_ends, want = count_windows(values[keys == k], 8, 1, agg)
        assert keyed[k][0].tolist() == want_ends
        assert_results_equal(agg, keyed[k][1].tolist(), want, values[keys == k])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), r=st.sampled_from([2, 3, 7, 64]), n_keys=st.integers(1, 6),
       n=st.integers(1, 400), agg=st.sampled_from(["max", "sum"]))
def test_keyed_hypothesis(seed, r, n_keys, n, agg):
    rng = np.random.default_rng(seed)
    keys, values = _stream(rng, n, n_keys)
    batches = _batches(rng, n) if n > 1 else [(0, n)]

    def make(_k):
        return pr.create("sba", pr.CountWindow(range=r, slide=1), agg, engine="compiled")

    ref = _run_reference(make, keys, values, batches)
    _check(_run_keyed(make, keys, values, batches, snapshot_at=len(batches) - 1), ref, keys, values, r, agg)


def test_lean_single_key_equals_general_path():
    """The lean single-key ``insert_many`` (the host's and the API's path) == ``count_batch.insert_slices``, bit for bit,
    with per-tuple inserts and a flush in between."""
    rng = np.random.default_rng(5)
    _, values = _stream(rng, 5000, 1)
    w = pr.CountWindow(range=100, slide=1)
    a, b = pr.create("sba", w, "sum", engine="compiled"), pr.create("sba", w, "sum", engine="compiled")
    pos = 0
    for size in [50, 60, 1, 300, 7, 1000, 2000]:
        chunk = values[pos : pos + size]
        pos += size
        ea, ra = a.insert_many(chunk)
        eb, rb = count_batch.insert_slices(b, chunk)
        assert ea.tolist() == eb.tolist() and _bits(ra) == _bits(rb)
        if size == 7:
            for v in values[pos : pos + 3].tolist():
                assert repr(a.insert(v)) == repr(b.insert(v))  # nan != nan
            pos += 3
    assert a.flush()[0].tolist() == b.flush()[0].tolist()


def test_bad_bounds():
    op = pr.create("sba", pr.CountWindow(range=2, slide=1), "max")
    with pytest.raises(ValueError, match="bounds must have"):
        insert_many_keyed([op], np.ones(3), [0, 3, 3])


def test_lean_path_takes_strided_and_other_inputs():
    """Strided, integer and list inputs give what the general path gives."""
    w = pr.CountWindow(range=4, slide=1)
    base = np.arange(40, dtype=np.float64)[::-1]
    for chunk in (base[::2], np.arange(10), list(range(10)), base[:10]):
        a, b = pr.create("sba", w, "max"), pr.create("sba", w, "max")
        ea, ra = a.insert_many(chunk)
        eb, rb = count_batch.insert_slices(b, chunk)
        assert ea.tolist() == eb.tolist() and ra.tolist() == rb.tolist()


def test_warm_loads_the_keyed_merge_too():
    """A task slot warms its kernels before the stream's clock starts (runtime/preload.py): the merge of
    many keys in one call must be among them, or a fresh machine's first job compiles it mid-stream
    (measured: 1.1M tuples/s and a 4.9 s p99 latency on a fresh clone's first `pba-run`, 17M after)."""
    from pba_runtime.kernels import compiled as C
    from pba_runtime.kernels import resolve_engine, warm

    warm(resolve_engine(pr.get_aggregation("max")))
    assert C.merge_scalar_keyed.signatures


_MERGER_FIELDS = ("_pushed", "_popped", "_open", "_open_base", "_open_rows", "_front", "_back", "_n", "_fill", "_emitted", "_next_k",
                  "_chunks_closed")


@pytest.mark.parametrize("chunk_size", [None, 7, 64])
def test_lean_finish_keeps_the_state_the_general_path_keeps(chunk_size):
    """``_finish_lean`` (``_finish_batch`` and the calls under it, inlined) leaves every field of the merger
    as the general path's ``_finish_batch`` does, also after per-tuple inserts left chunks to drop."""
    rng = np.random.default_rng(11)
    _, values = _stream(rng, 4000, 1)
    w = pr.CountWindow(range=64, slide=1)
    a = pr.create("sba", w, "max", engine="compiled", chunk_size=chunk_size)
    b = pr.create("sba", w, "max", engine="compiled", chunk_size=chunk_size)
    lean = []
    finish_lean = a._finish_lean
    a._finish_lean = lambda *args: (lean.append(1), finish_lean(*args))
    pos = 0
    for size, per_tuple in [(100, 0), (30, 5), (200, 0), (1, 70), (500, 0), (63, 0), (64, 0)]:
        chunk = values[pos : pos + size]
        pos += size
        ea, ra = a.insert_many(chunk)  # the lean path (_finish_lean)
        eb, rb = count_batch.insert_slices(b, chunk)  # the general path (_finish_batch)
        assert ea.tolist() == eb.tolist() and _bits(ra) == _bits(rb)
        for f in _MERGER_FIELDS:
            assert getattr(a, f) == getattr(b, f), f
        assert a._chunks == b._chunks == {}
        assert _bits(np.asarray(a._csa)) == _bits(np.asarray(b._csa)) and repr(a._cur) == repr(b._cur)
        assert a._deferred[1:] == b._deferred[1:] and _bits(a._deferred[0]) == _bits(b._deferred[0])
        for v in values[pos : pos + per_tuple].tolist():  # chunks for the next batch to drop
            assert repr(a.insert(v)) == repr(b.insert(v))
        pos += per_tuple
    assert len(lean) >= 4  # most batches took the lean path


@pytest.mark.parametrize("agg", ["max", "min", "sum", "count"])
def test_columns_are_the_keys_windows_end_to_end(agg):
    """``columns``: the lean keys with a window, in order, and their windows end to end, exactly the per-key
    (ends, results) returned (which are unchanged by asking); not given when a key's results are not views of
    them (``count``'s integer results), and only the lean keys listed when others mix in."""
    rng = np.random.default_rng(3)
    w = pr.CountWindow(range=8, slide=1)
    for mixed in (False, True):
        ops = [pr.create("sba", w, agg) for _ in range(5)]
        if mixed:
            ops[2] = pr.create("two_stacks", w, agg)
        ref = [pr.create("sba", w, agg) if not (mixed and i == 2) else pr.create("two_stacks", w, agg)
               for i in range(5)]
        for n in (3, 40, 1, 25):  # short batches leave some keys without a window
            values = rng.normal(size=5 * n)
            values[::7] = np.nan
            bounds = [0, n, 2 * n, 3 * n, 3 * n + 2, 5 * n]
            columns: list = []
            outs = insert_many_keyed(ops, values, bounds, columns)
            want = [op.insert_many(values[bounds[i] : bounds[i + 1]]) for i, op in enumerate(ref)]
            for (e, r), (we, wr) in zip(outs, want):
                assert _bits(e) == _bits(we) and _bits(np.asarray(r)) == _bits(np.asarray(wr))
            lean = [i for i in range(5) if not (mixed and i == 2)]
            with_window = [i for i in lean if len(want[i][0])]
            if agg == "count" or len(with_window) < 2:  # no lean results, or nothing merged in one call
                assert not columns
                continue
            (idx, ends, res), = columns
            assert idx == with_window
            assert _bits(ends) == _bits(np.concatenate([want[i][0] for i in idx]))
            assert _bits(res) == _bits(np.concatenate([np.asarray(want[i][1]) for i in idx]))
