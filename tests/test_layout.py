"""A query's result layout: the compiled union of window rows and placements equal their plain references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pba_runtime.kernels.compiled.layout import (
    Runs,
    place,
    place_runs,
    place_runs_reference,
    union_rows,
    union_rows_reference,
)


@st.composite
def window_rows(draw):
    """Several windows' (key, end) rows, each strictly increasing by key then end."""
    out_k, out_e = [], []
    for _ in range(draw(st.integers(1, 4))):
        pairs = sorted(set(draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12)), max_size=30))))
        out_k.append(np.array([p[0] for p in pairs], dtype=np.int64))
        out_e.append(np.array([p[1] for p in pairs], dtype=np.int64))
    return out_k, out_e


@settings(max_examples=200)
@given(window_rows())
def test_union_rows_is_its_reference(rows):
    keys, ends = rows
    k, e, pos = union_rows(keys, ends)
    rk, re, rpos = union_rows_reference(keys, ends)
    assert k.tolist() == rk.tolist() and e.tolist() == re.tolist()
    assert [p.tolist() for p in pos] == [p.tolist() for p in rpos]
    for kk, ee, p in zip(keys, ends, pos):  # each window's rows are where the union has them
        assert k[p].tolist() == kk.tolist() and e[p].tolist() == ee.tolist()


@settings(max_examples=200)
@given(st.data())
def test_place_is_out_at_pos(data):
    m = data.draw(st.integers(0, 30))
    pos = np.array(sorted(data.draw(st.sets(st.integers(0, max(m - 1, 0)), max_size=m))) if m else [],
                   dtype=np.int64)
    vals = np.array(data.draw(st.lists(st.floats(allow_nan=True), min_size=len(pos), max_size=len(pos))))
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=len(pos), max_size=len(pos))), dtype=bool) \
        if data.draw(st.booleans()) else None
    out, ok = place(vals.astype(np.float64), valid, pos, m)
    want = np.full(m, np.nan)
    want[pos] = vals
    want_ok = np.zeros(m, dtype=bool)
    want_ok[pos] = True if valid is None else valid
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(ok, want_ok)


@settings(max_examples=200)
@given(st.data())
def test_place_runs_is_its_reference(data):
    lengths = data.draw(st.lists(st.integers(0, 6), max_size=6))
    gaps = data.draw(st.lists(st.integers(0, 3), min_size=len(lengths), max_size=len(lengths)))
    src, dst, d = [], [], 0
    for n, g in zip(lengths, gaps):
        d += g
        dst.append(d)
        src.append(sum(len_ for len_ in lengths[: len(src)]))
        d += n
    m = d + data.draw(st.integers(0, 3))
    n_vals = sum(lengths)
    runs = Runs(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(lengths, dtype=np.int64), m)
    dtype = data.draw(st.sampled_from([np.float64, np.int64]))
    vals = np.arange(n_vals, dtype=dtype) * 3 - 5
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=n_vals, max_size=n_vals)), dtype=bool) \
        if data.draw(st.booleans()) else None
    out, ok = place_runs(vals, valid, runs)
    want, want_ok = place_runs_reference(vals, valid, runs)
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(ok, want_ok)
