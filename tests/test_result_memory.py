"""Large batch results come from blocks earlier callers dropped (``pba_runtime.kernels.result_memory``):
a block is reused only once every array over it is gone, results a caller keeps never change, and the
memory kept is bounded."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import pba_runtime as pr
from pba_runtime.kernels import result_memory as RM


@pytest.fixture(autouse=True)
def _empty_cache():
    RM.release_cached()
    yield
    RM.release_cached()


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_small_requests_are_plain_arrays():
    a = RM.result_block(RM.MIN_BYTES - 1)
    assert a.flags.owndata and a.nbytes == RM.MIN_BYTES - 1
    del a
    assert RM.cached_bytes() == 0


def test_a_block_is_reused_only_after_its_last_view_is_gone():
    a = RM.result_block(RM.MIN_BYTES + 8192)
    addr = _address(a)
    f = a.view(np.float64)[3:].reshape(-1, 1)  # views keep the block in use
    del a
    gc.collect()
    assert RM.cached_bytes() == 0
    b = RM.result_block(RM.MIN_BYTES)
    assert _address(b) != addr  # still in use: another block
    del f
    assert RM.cached_bytes() == RM.MIN_BYTES + 8192
    c = RM.result_block(RM.MIN_BYTES)  # fits (not less than FIT of it): the dropped block
    assert _address(c) == addr and c.nbytes == RM.MIN_BYTES and c.flags.writeable
    assert RM.cached_bytes() == 0
    del b, c


def test_too_small_a_request_does_not_take_a_large_block():
    a = RM.result_block(4 * RM.MIN_BYTES)
    del a
    b = RM.result_block(RM.MIN_BYTES)  # less than FIT of the dropped block: a new one
    assert RM.cached_bytes() == 4 * RM.MIN_BYTES
    del b


def test_kept_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(RM, "KEEP_BYTES", 2 * RM.MIN_BYTES)
    blocks = [RM.result_block(RM.MIN_BYTES) for _ in range(3)]
    del blocks
    assert RM.cached_bytes() == 2 * RM.MIN_BYTES


def test_blocks_dropped_on_other_threads():
    out = []
    ts = [threading.Thread(target=lambda: out.append(RM.result_block(RM.MIN_BYTES))) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(out) == 4
    drops = [threading.Thread(target=out.pop) for _ in range(4)]
    for t in drops:
        t.start()
    for t in drops:
        t.join()
    assert RM.cached_bytes() == 4 * RM.MIN_BYTES


@pytest.mark.parametrize("agg", ["sum", "max", "count", "std"])
def test_results_kept_by_the_caller_never_change(agg):
    """Large results (above MIN_BYTES with their ends): a later call reuses a dropped block, never a kept one,
    and gives the same results as the first."""
    n = RM.MIN_BYTES // 16 + 5000
    x = np.random.default_rng(3).normal(size=n)
    win = pr.CountWindow(range=1 << 10, slide=1)
    with pr.WorkerPool("thread", workers=1) as pool:
        kept_ends, kept = pr.sliding_aggregate(x, window=win, agg=agg, pool=pool, engine="compiled")
        ref = kept.copy(), kept_ends.copy()
        for _ in range(3):  # each drops its results: the next reuses the block
            e, r = pr.sliding_aggregate(x, window=win, agg=agg, pool=pool, engine="compiled")
            assert not np.shares_memory(r, kept)
            np.testing.assert_array_equal(r, ref[0])
            np.testing.assert_array_equal(e, ref[1])
            del e, r
        assert RM.cached_bytes() > 0
    np.testing.assert_array_equal(kept, ref[0])
    np.testing.assert_array_equal(kept_ends, ref[1])
