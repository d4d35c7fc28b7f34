"""The task slots' output stage: jobs run in order on one thread, errors reach the slot, no thread outlives it."""

from __future__ import annotations

import threading
import time

import pytest

from pba_runtime.runtime.output_stage import OutputStage


def test_messages_leave_in_submission_order_and_none_is_skipped():
    sent = []
    stage = OutputStage(sent.append, depth=1)
    for i in range(200):
        stage.submit(lambda i=i: None if i % 7 == 0 else ("out", i))
    stage.close()
    assert sent == [("out", i) for i in range(200) if i % 7]
    assert not stage._thread.is_alive()
    rep = stage.report()
    assert set(rep["cpu"]) == {"format", "emit"} and rep["thread_cpu"] >= 0


def test_a_failed_job_is_raised_by_the_next_submit_and_later_jobs_do_not_run():
    sent = []
    stage = OutputStage(sent.append)

    def fail():
        raise OSError(28, "No space left on device")

    stage.submit(lambda: "a")
    stage.submit(fail)
    deadline = time.monotonic() + 10
    while stage._error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(OSError, match="No space left"):
        stage.submit(lambda: "b")
    with pytest.raises(OSError, match="No space left"):
        stage.check()
    with pytest.raises(OSError):
        stage.close()
    assert sent == ["a"] and not stage._thread.is_alive()


def test_a_blocked_stage_is_abandoned_within_its_bound():
    """``abandon`` returns while the stage's thread is still blocked in its emit, and the stage is failed."""
    release, emitting = threading.Event(), threading.Event()

    def emit(message):
        emitting.set()
        release.wait()

    stage = OutputStage(emit, depth=1)
    stage.submit(lambda: "stuck")  # emit blocks (a coordinator that no longer reads)
    assert emitting.wait(60)  # abandoned once its emit is under way (before, the job would just be skipped)
    caller = threading.Thread(target=stage.abandon, kwargs={"timeout": 0.3}, daemon=True)
    caller.start()
    caller.join(60)  # a guard against a hang, not a measure
    assert not caller.is_alive() and stage._thread.is_alive()  # returned, its emit still blocked
    with pytest.raises(RuntimeError, match="output stage abandoned"):
        stage.submit(lambda: "later")
    release.set()
    stage._thread.join(5)
    assert not stage._thread.is_alive()


def test_depth_is_checked():
    with pytest.raises(ValueError, match="depth must be at least 1"):
        OutputStage(print, depth=0)
