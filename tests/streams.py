"""Feeding a stream to an operator, per tuple or in batches, the way the differential tests do."""

from __future__ import annotations

import numpy as np


def run_per_tuple(op, values, ts=None):
    ends, results = [], []
    for i, v in enumerate(values):
        out = op.insert(v) if ts is None else op.insert(v, int(ts[i]))
        for e, res in out:
            ends.append(e)
            results.append(res)
    fe, fr = op.flush()
    return ends + fe.tolist(), results + list(fr)


def run_batches(op, values, bounds, ts=None):
    ends, results = [], []
    for lo, hi in zip(bounds, bounds[1:]):
        e, r = op.insert_many(values[lo:hi], None if ts is None else ts[lo:hi])
        assert e.dtype == np.int64
        ends += e.tolist()
        results += list(r)
    fe, fr = op.flush()
    return ends + fe.tolist(), results + list(fr)
