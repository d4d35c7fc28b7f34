"""PBA's chunk stores (local, shared memory): one per-tuple path over every store and partial width.

The per-tuple path (count windows, slide 1) inlines the push that the slicing
layer's generic path calls: the two must give the same bits over every store,
chunk size and aggregation, and a snapshot taken on one store must restore on
any other and go on bit for bit.
"""

from __future__ import annotations

from array import array

import aggs_for_processes as A
import numpy as np
import pytest

import pba_runtime as pr

VALUES = [3.0, float("nan"), -0.0, 1e12, 1e-3, float("inf"), 2.5, -7.0, 0.0, float("-inf"), 5.0, 1e-3] * 9
AGGS = ["max", "sum", "mean", "std", A.PY_MAX, A.PY_MEAN, A.PY_FIRST, "collect"]
STORES = ["sba", "thread", "process"]


@pytest.fixture(scope="module")
def pools():
    with pr.WorkerPool(kind="thread", workers=1) as threads, pr.WorkerPool(kind="process", workers=1) as procs:
        yield {"thread": threads, "process": procs}


def _create(store, agg, pools, r=12, chunk_size=None):
    if store == "sba":
        return pr.create("sba", pr.CountWindow(r, 1), agg, chunk_size=chunk_size)
    return pr.create("pba", pr.CountWindow(r, 1), agg, chunk_size=chunk_size, pool=pools[store])


def _bits(x):
    """``x`` with every float as its exact bits (NaN as one value: the per-tuple and generic paths may differ
    in a NaN's sign bit, from inf + -inf, as they did before the chunk store)."""
    if isinstance(x, float):
        return "nan" if x != x else x.hex()
    if isinstance(x, (list, tuple, array)):
        return [type(x).__name__] + [_bits(y) for y in x]
    if isinstance(x, dict):
        return {k: _bits(v) for k, v in x.items()}
    return x


def _run(op, values):
    return [res for v in values for _, res in op.insert(v)]


@pytest.mark.parametrize("agg", AGGS, ids=lambda a: getattr(a, "name", a))
@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("chunk_size", [None, 1, 5, 12])
def test_per_tuple_path_equals_the_generic_path(pools, store, agg, chunk_size):
    with _create(store, agg, pools, chunk_size=chunk_size) as fast, _create(store, agg, pools, chunk_size=chunk_size) as slow:
        slow._fast = False  # every tuple through the slicing layer's _push/_pop/_query
        got, want = _run(fast, VALUES), _run(slow, VALUES)
        assert fast.stats()["shared_memory"] == (store == "process" and agg != "collect")
        assert _bits(got) == _bits(want)
        assert fast.emitted == slow.emitted == len(VALUES) - 11
        assert fast.stats()["chunks"] == slow.stats()["chunks"]


@pytest.mark.parametrize("agg", ["max", "mean", A.PY_MEAN, "collect"], ids=lambda a: getattr(a, "name", a))
@pytest.mark.parametrize("cut", [7, 20, 24])  # mid-chunk, and at a chunk boundary
def test_snapshot_moves_between_stores_bit_for_bit(pools, agg, cut):
    want = None
    for source in STORES:
        with _create(source, agg, pools, chunk_size=4) as op:
            _run(op, VALUES[:cut])
            state = op.snapshot()
            rest = _run(op, VALUES[cut:])
        chunks = _bits((state["state"]["chunks"], state["state"]["open"], state["state"]["_csa"]))
        if want is None:
            want, want_chunks = rest, chunks
        assert chunks == want_chunks, source  # the same snapshot, whichever store took it
        assert _bits(rest) == _bits(want)
        for target in STORES:
            if (source == "sba") != (target == "sba"):
                continue  # a snapshot names its algorithm
            with _create(target, agg, pools, chunk_size=4) as other:
                other.restore(state)
                assert _bits(_run(other, VALUES[cut:])) == _bits(want), (source, target)


def test_refused_partial_at_a_chunk_start_changes_nothing(pools):
    bad = pr.Aggregation(lift=A.py_lift, combine=A.py_max2, lower=A.py_lower, identity=float("-inf"), name="bad2")
    with _create("process", bad, pools, r=4, chunk_size=2) as op, _create("sba", A.PY_MAX, pools, r=4) as ref:
        assert op.stats()["shared_memory"]
        got = _run(op, [1.0, 2.0])  # chunk 0 full: the next partial opens chunk 1
        object.__setattr__(bad, "lift", lambda v: str(v))
        with pytest.raises(TypeError, match="must be a float"):
            op.insert(3.0)
        object.__setattr__(bad, "lift", A.py_lift)
        got += _run(op, [3.0, 0.0, 4.0, -1.0, 0.5])
        assert got == _run(ref, [1.0, 2.0, 3.0, 0.0, 4.0, -1.0, 0.5])
        assert op.stats()["tuples"] == 7


def test_local_rows_are_allocated_per_chunk_and_snapshots_keep_the_written_ones():
    with pr.create("sba", pr.CountWindow(8, 1), "mean", chunk_size=4) as op:
        _run(op, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        open_rec = op._open
        assert len(open_rec.saa) == 4 * 2  # b rows of (sum, count), allocated when the chunk opened
        saa, lcs, ca = op.snapshot()["state"]["chunks"][1]
        assert np.frombuffer(saa).tolist() == [5.0, 1.0, 6.0, 1.0] and lcs is None and ca is None
