"""The keyed host (pba_runtime.host): one policy, one validation, all keys' state, the pool."""

import pickle

import numpy as np
import pytest

import pba_runtime as pr
from pba_runtime.algorithms import choose_algorithm, uses_pool
from pba_runtime.host import HostSpec, KeyedHost, validate
from pba_runtime.runtime.slot import SlotSpec, TaskSlot, make_operator

PY_MAX = pr.Aggregation(lift=float, combine=max, lower=float, identity=float("-inf"), name="py_max")


def test_slot_and_create_choose_the_same_algorithm_for_a_python_aggregation():
    # 2^13 slices: above the Python-loop threshold (2^12), below the kernel one (2^15)
    win = pr.CountWindow(range=1 << 13, slide=1)
    assert pr.resolve_auto(win, PY_MAX) == "pba"
    with pr.create("auto", win, PY_MAX) as op:
        assert op.name == "pba"
    pool = pr.WorkerPool(kind="thread", workers=1)
    try:
        op = make_operator(SlotSpec(index=0, window=win, agg=PY_MAX, algorithm="auto"), pool)
        assert op.name == "pba"
        op.close()
    finally:
        pool.close()


def test_policy_reasons():
    big = pr.CountWindow(range=1 << 12, slide=1)
    assert choose_algorithm("auto", big, "max", min_slices=1024, cores=2) == ("pba", "large_window")
    assert choose_algorithm("auto", big, "max") == ("sba", "small_window")
    assert choose_algorithm("two_stacks", big, "max", pool_ok=False) == ("two_stacks", "requested")
    assert choose_algorithm("pba", big, "max", pool_ok=False, pool_died=True) == ("sba", "pool_died")


CASES = [
    (dict(agg="max", algorithm="soe"), ValueError, "invertible"),
    (dict(agg="max", algorithm="nope"), ValueError, "unknown algorithm"),
    (dict(agg="nope"), ValueError, "nope"),
    (dict(agg="max", allowed_lateness=-1), ValueError, "allowed_lateness"),
    (dict(agg="max", pool="threads"), TypeError, "pool"),
    (dict(agg="max", algorithm="two_stacks", bogus=1), TypeError, "bogus"),
]


@pytest.mark.parametrize("kwargs, exc, text", CASES)
def test_validate_raises_what_create_raises(kwargs, exc, text):
    win = pr.TimeWindow(range=10, slide=5)
    kwargs = dict(kwargs)
    agg, alg = kwargs.pop("agg"), kwargs.pop("algorithm", "auto")
    with pytest.raises(exc, match=text):
        pr.create(alg, win, agg, **kwargs)
    with pytest.raises(exc, match=text):
        validate(win, agg, alg, **kwargs)


def test_validate_builds_no_operator(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("an operator was built")

    monkeypatch.setattr(pr.WindowOperator, "__init__", refuse)
    win = pr.TimeWindow(range=10, slide=5)
    assert validate(win, "max", "fiba", allowed_lateness=3, min_arity=4)[2] == "fiba"
    assert validate(win, "sum", "auto", allowed_lateness=0)[1].name == "sum"
    with pytest.raises(AssertionError):
        pr.create("sba", win, "max")


@pytest.mark.parametrize("alg", ["two_stacks", "daba", "slick_deque", "flatfat", "fiba", "recal", "sba"])
def test_pool_is_typed_and_only_given_to_algorithms_that_use_one(alg):
    assert not uses_pool(pr.algorithms.REGISTRY[alg])
    with pytest.raises(TypeError, match="pool"):
        pr.create(alg, pr.CountWindow(range=4, slide=1), "max", pool="threads")
    if alg != "sba":  # the class itself takes no pool any more (SBA shares PBA's constructor)
        with pytest.raises(TypeError):
            pr.algorithms.REGISTRY[alg](pr.CountWindow(range=4, slide=1), "max", pool=pr.default_pool())
    with pr.create(alg, pr.CountWindow(range=4, slide=1), "max", pool=pr.default_pool()) as op:
        assert op.insert_many(np.arange(6.0))[1].tolist() == [3.0, 4.0, 5.0]


def test_sliding_aggregate_auto_takes_a_pool_whatever_it_picks():
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        for q in (16, 1 << 15):
            win = pr.CountWindow(range=q, slide=1)
            x = np.arange(q + 3.0)
            assert pr.sliding_aggregate(x, window=win, agg="max", pool=pool)[1].tolist() == [q - 1.0 + i for i in
                                                                                            range(4)]


def test_host_snapshot_restore_all_keys_and_pickle_the_spec():
    spec = HostSpec(pr.TimeWindow(range=10, slide=5), "sum", "auto", allowed_lateness=2)
    spec = pickle.loads(pickle.dumps(spec))
    host = KeyedHost(spec)
    host.operator("a").insert_many([1.0, 2.0], [1, 6])
    host.operator("b").insert_many([5.0], [3])
    state = pickle.loads(pickle.dumps(host.snapshot()))
    twin = KeyedHost(spec, states=state)
    assert sorted(twin) == ["a", "b"] and len(twin) == 2
    for h in (host, twin):
        assert h.operator("a").flush()[1].tolist() == [1.0, 3.0, 2.0]
        assert h.operator("b").flush()[1].tolist() == [5.0, 5.0]
    host.close()
    twin.close()
    assert len(host) == 0


def test_host_pool_source_failure_runs_sba():
    spec = HostSpec(pr.CountWindow(range=64, slide=1), "max", "pba")
    host = KeyedHost(spec, pool=lambda: (None, "pool_died"))
    hosted = host.open()
    assert (hosted.algorithm, hosted.reason, hosted.pool) == ("sba", "pool_died", None)
    hosted.op.close()
    with pr.WorkerPool(kind="thread", workers=1) as pool:
        hosted = KeyedHost(spec, pool=pool).open()
        assert (hosted.algorithm, hosted.reason, hosted.pool) == ("pba", "requested", pool)
        hosted.op.close()


def test_task_slot_keeps_its_keys_in_the_host():
    slot = TaskSlot(SlotSpec(index=0, window=pr.CountWindow(range=2, slide=1), agg="sum", algorithm="sba"))
    try:
        slot.on_data(np.array([1, 2, 1]), np.array([1.0, 2.0, 3.0]), None, 0.0)
        assert sorted(slot.ops) == [1, 2] and len(slot.host) == 2
        states = pickle.loads(slot.on_barrier(1)[3]["states"])
        again = TaskSlot(slot.spec, states)
        assert again.host.operator(1).insert_many([5.0])[1].tolist() == [8.0]
        again.close()
    finally:
        slot.close()


def test_auto_key_resumes_with_the_algorithm_of_its_state():
    win = pr.CountWindow(range=1 << 13, slide=1)  # auto: PBA for a Python aggregation (SBA before issue 16)
    with pr.create("sba", win, PY_MAX) as sba:
        sba.insert_many(np.arange(100.0))
        state = sba.snapshot()
    host = KeyedHost(HostSpec(win, PY_MAX, "auto"), states={"k": state})
    assert (host.keys["k"].algorithm, host.keys["k"].reason) == ("sba", "restored")
    assert host.open().algorithm == "pba"
    host.close()
