"""The DEBS'14 generator's compiled block pass gives numpy's keys and values bit for bit, and the stream is
the one it was (a digest of the reference's blocks, pinned), whichever path runs."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pba_runtime.runtime import Debs14Source
from pba_runtime.runtime import generated_blocks as G
from pba_runtime.runtime.sources import GENERATOR_BLOCK


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


@pytest.fixture
def compiled():
    kernel = G.load()
    if kernel is None:  # pragma: no cover - numba is a dependency
        pytest.skip("no numba")
    return kernel


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), block=st.integers(0, 10**6), plugs=st.sampled_from([1, 2, 7, 84, 1000]),
       n=st.sampled_from([4, 8, 1024, GENERATOR_BLOCK]))
def test_compiled_equals_reference(seed, block, plugs, n):
    kernel = G.load()
    src = Debs14Source(plugs=plugs, seed=seed % 1000)
    rng_a, rng_b = np.random.default_rng([seed, block]), np.random.default_rng([seed, block])
    ka, va = G.debs14_reference(rng_a, src._table, src._base, n)
    kb, vb = G.debs14_compiled(rng_b, G.compact_table(src._table), src._base, n, kernel)
    assert ka.dtype == kb.dtype == np.int64 and va.dtype == vb.dtype == np.float64
    assert ka.tobytes() == kb.tobytes() and va.tobytes() == vb.tobytes()
    # the generators are left in the same state: the draws after (the disorder's) are the same
    sa, sb = rng_a.bit_generator.state, rng_b.bit_generator.state
    assert sa["state"] == sb["state"] and sa["has_uint32"] == sb["has_uint32"] == 0  # (a spent buffer may differ)
    assert rng_a.random(3).tobytes() == rng_b.random(3).tobytes()


def test_compiled_covers_every_16_bit_draw_and_special_bases(compiled):
    """Keys through the whole table; bases with values where rounding to 3 decimals is delicate."""
    table = np.arange(1 << 16, dtype=np.int64) % 5
    base = np.array([0.0005, 1e12, 1e-3, 2.675, np.inf])
    for seed in range(3):
        ka, va = G.debs14_reference(np.random.default_rng(seed), table, base, 1 << 16)
        for small in (table, G.compact_table(table), table.astype(np.uint16), table.astype(np.int32)):
            kb, vb = G.debs14_compiled(np.random.default_rng(seed), small, base, 1 << 16, compiled)
            assert kb.dtype == np.int64 and ka.tobytes() == kb.tobytes() and va.tobytes() == vb.tobytes()


def test_compact_table_keeps_the_keys():
    for top in (0, 1, 255, 256, 65_535, 65_536, 2**40):
        table = np.array([0, top // 2, top])
        small = G.compact_table(table)
        assert small.tolist() == table.tolist() and small.itemsize <= table.itemsize
    assert G.compact_table(np.array([-1, 3])).dtype == np.int64


def test_compiled_needs_a_multiple_of_four(compiled):
    with pytest.raises(ValueError, match="multiple of 4"):
        G.debs14_compiled(np.random.default_rng(0), np.zeros(1 << 16, dtype=np.int64), np.ones(1), 6, compiled)


# digests of the stream as the tree before the compiled pass generated it (numpy's passes only)
def _stream(plugs, seed, timestamps, disorder=0):
    src = Debs14Source(plugs=plugs, tuples=3 * GENERATOR_BLOCK + 1000, seed=seed, disorder=disorder)
    k, v, t = src.take(GENERATOR_BLOCK - 500, 2 * GENERATOR_BLOCK + 1000, timestamps)  # across three blocks
    return _digest(k, v) if t is None else _digest(k, v, t)


@pytest.mark.parametrize("plugs,seed,timestamps,disorder,want", [
    (84, 1, False, 0, "a2319b646ac4f6a7"),
    (84, 1, True, 0, "10e7b9d94a769821"),
    (7, 3, True, 2_000, "66f857311faa32c8"),
])
def test_the_stream_is_the_same_on_either_path(monkeypatch, compiled, plugs, seed, timestamps, disorder, want):
    fast = _stream(plugs, seed, timestamps, disorder)
    monkeypatch.setattr(G, "loaded", lambda: None)
    slow = _stream(plugs, seed, timestamps, disorder)
    assert fast == slow == want
