"""The CSV sink's shared-memory byte ring: regions in order across the wrap, backpressure, the inline fallback, the
CSV writer writing into it, and a job through small rings writing the bytes of the job without them."""

from __future__ import annotations

import csv
import json
import os
import threading
import time

import numpy as np
import pytest

import pba_runtime as pr
from pba_runtime.runtime import Debs14Source, Job, coordinator
from pba_runtime.runtime.byte_ring import ByteRing
from pba_runtime.runtime.sinks import format_batch, format_results


def _mine() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"pba_{os.getpid()}_")}


def test_regions_cross_the_wrap_in_order_with_a_consumer_thread():
    """A producer and a consumer thread, random sizes up to the whole ring: every region read back intact, in
    order, the producer waiting whenever the ring is full."""
    ring = ByteRing.create(1000)
    producer = ByteRing.attach(ring.name)
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 1001, 400).tolist()
    sent, got = [], []
    refs: list = []
    done = threading.Event()

    def consume():
        while not (done.is_set() and not refs):
            if not refs:
                time.sleep(0.0001)
                continue
            ref = refs.pop(0)
            got.append(bytes(ring.view(ref)))
            ring.release(ref)

    t = threading.Thread(target=consume)
    t.start()
    try:
        for i, n in enumerate(sizes):
            data = bytes([i % 251]) * n
            ref = producer.put(data)
            assert ref is not None and ref[1] == n and ref[0] % 1000 + n <= 1000  # never across the end
            sent.append(data)
            refs.append(ref)
    finally:
        done.set()
        t.join(timeout=30)
    assert got == sent
    assert producer.waits > 0  # 400 regions of ~500 B through 1000 B: it had to wait
    producer.close()
    ring.close()


def test_a_region_larger_than_the_ring_is_refused_and_a_wait_can_be_stopped():
    ring = ByteRing.create(100)

    class Stop(Exception):
        pass

    def on_wait():
        raise Stop

    producer = ByteRing.attach(ring.name, on_wait=on_wait)
    assert producer.reserve(101) is None and producer.put(b"x" * 101) is None
    assert producer.put(b"a" * 60) == (0, 60)
    with pytest.raises(Stop):  # 60 of 100 bytes not released: 50 more must wait, and the wait is stopped
        producer.put(b"b" * 50)
    ring.release((0, 60))
    assert producer.put(b"b" * 50) == (100, 50)  # placed at the start: 40 bytes at the end skipped
    with pytest.raises(ValueError, match="capacity"):
        ByteRing.create(0)
    producer.close()
    ring.close()


def test_the_owner_unlinks_and_close_leaves_nothing_in_dev_shm():
    before = _mine()
    ring = ByteRing.create(64)
    assert ring.name in _mine() - before
    other = ByteRing.attach(ring.name)
    ring.unlink()  # what the coordinator does once every slot mapped its ring
    assert _mine() == before
    assert other.put(b"still mapped") == (0, 12) and bytes(ring.view((0, 12))) == b"still mapped"
    other.close()
    ring.close()
    assert _mine() == before


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("capacity", [1 << 20, 3000, 10])
def test_text_batch_into_the_ring_writes_the_bytes_of_the_reference(capacity, fmt):
    """Into a ring (large; smaller than the writer's bound, so bytes come back inline; or tiny): the same bytes
    as the per-line formatter, in CSV and JSON lines, for floats (non-finite ones too), ints and vectors."""
    rng = np.random.default_rng(5)
    batches = [
        [(k, np.arange(100, 140), np.round(rng.random(40) * 100, 3)) for k in (3, 17)],
        [("a,b", np.arange(5, 35), np.concatenate([[float("nan"), 1e-9, -0.0, 1e300], rng.random(26)]))],
        [(1, np.array([4, 5]), np.array([[1.0, 2.0], [3.0, 4.5]]))],
        [(2, np.arange(9, 29), np.arange(20, dtype=np.int64) * -7)],
    ]
    ring = ByteRing.create(capacity)
    producer = ByteRing.attach(ring.name)
    try:
        for _ in range(3):  # around the ring more than once
            for parts in batches:
                want = "".join(format_results(fmt, k, e, r, 4) for k, e, r in parts).encode()
                got = format_batch(fmt, parts, 4, producer)
                if isinstance(got, tuple):
                    assert bytes(ring.view(got)) == want
                    ring.release(got)
                else:
                    assert got == want
    finally:
        producer.close()
        ring.close()


def _rows(path) -> list:
    with open(path, newline="") as f:
        return sorted(list(csv.reader(f))[1:], key=lambda r: (int(r[0]), int(r[2])))


def _json_rows(path) -> list:
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return sorted([[str(r["key"]), str(r["start"]), str(r["end"]), repr(r["value"])] for r in rows],
                  key=lambda r: (int(r[0]), int(r[2])))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("capacity", [None, 150_000, 200])
def test_a_job_through_its_rings_writes_the_windows_of_the_job_without_them(tmp_path, monkeypatch, capacity, fmt):
    """A text sink through rings of the default size, through small ones (the slots wait for room) and through
    rings smaller than a batch's lines (sent inline): every key's windows, once, as the per-key reference
    computes them; no ring is left in /dev/shm."""
    if capacity is not None:
        monkeypatch.setattr(coordinator, "ring_capacity", lambda batch_size, queue_size, row_bytes=48: capacity)
    before = _mine()
    src = Debs14Source(plugs=5, tuples=30_000)
    keys, values, _ = src.take(0, 30_000)
    window = pr.CountWindow(range=40, slide=1)
    out = tmp_path / f"out.{fmt}"
    summary = Job(src, window, "max", "sba", parallelism=2, batch_size=1500, sink=f"{fmt}:{out}").run()
    rows = _rows(out) if fmt == "csv" else _json_rows(out)
    assert len(rows) == summary["windows"] == 30_000 - 5 * 39
    want = []
    for k in np.unique(keys):
        ends, res = pr.sliding_aggregate(values[keys == k], window=window, agg="max", algorithm="sba")
        want += [[str(k), str(e - 40), str(e), repr(float(r))] for e, r in zip(ends.tolist(), res.tolist())]
    assert rows == sorted(want, key=lambda r: (int(r[0]), int(r[2])))
    assert _mine() == before
