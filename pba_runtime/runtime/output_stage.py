"""A task slot's output stage: its results formatted and sent on a thread of their own, in order.

With a sink, a slot's results are formatted (the compiled CSV writer, numba with the GIL released)
or written into its part file (pyarrow, which releases the GIL while it encodes and writes), and that
work is as long as the aggregation itself. On this thread it overlaps the slot's next batch: the slot's
main thread receives, groups and aggregates batch ``n + 1`` while batch ``n``'s results are written.

Order is the contract: every job (a callable returning the message to send, or ``None``) runs in
the order it was submitted, and the messages leave in that order, so a checkpoint barrier still
follows every result before it, and a part file is rolled after its last rows. At most ``depth``
jobs wait (bounded memory; a slow sink blocks the slot as before). A job that fails stops the
stage: the next :meth:`OutputStage.submit` or :meth:`OutputStage.close` raises its exception in the
slot's main thread, which reports it as before. :meth:`OutputStage.close` drains the stage and joins
its thread; :meth:`OutputStage.abandon` (a failure elsewhere) joins it within a bound without waiting
for its jobs.

Examples
--------
>>> sent = []
>>> stage = OutputStage(sent.append)
>>> stage.submit(lambda: ("out", 1))
>>> stage.submit(lambda: None)
>>> stage.submit(lambda: ("barrier", 2))
>>> stage.close()
>>> sent
[('out', 1), ('barrier', 2)]
>>> stage = OutputStage(sent.append)
>>> stage.submit(lambda: 1 / 0)
>>> stage.close()
Traceback (most recent call last):
...
ZeroDivisionError: division by zero
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from .metrics import PhaseClock

__all__ = ["OutputStage"]

_STOP = object()
_POLL = 0.1


class OutputStage:
    """Runs submitted jobs on one thread, in order, and passes their messages to ``emit``.

    Parameters
    ----------
    emit : callable
        ``emit(message)``, on the stage's thread (the slot's put on its output queue).
    depth : int
        Jobs that may wait before :meth:`submit` blocks.
    """

    def __init__(self, emit: Callable[[Any], None], depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth!r}")
        self._emit = emit
        self._jobs: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self.clock: PhaseClock | None = None
        self._thread_cpu = 0.0
        self._rusage: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, name="pba-slot-output", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        self.clock = PhaseClock()  # thread CPU time: made on this thread
        self._ready.set()
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            if self._error is not None:
                continue  # drain: the main thread raises the error
            try:
                self.clock.mark()
                msg = job()
                self.clock.lap("format")
                if msg is not None:
                    self._emit(msg)
                    self.clock.lap("emit")
            except BaseException as exc:
                self._error = exc
            self._thread_cpu = self.clock.thread_cpu()
            self._rusage = self.clock.rusage.delta()

    def check(self) -> None:
        """Raise the error of a job that failed, if one did."""
        if self._error is not None:
            raise self._error

    def submit(self, job: Callable[[], Any]) -> None:
        """Queue ``job`` (blocks while ``depth`` jobs wait); raises the error of an earlier job."""
        self.check()
        while True:
            try:
                self._jobs.put(job, timeout=_POLL)
                return
            except queue.Full:
                self.check()

    def close(self) -> None:
        """Run every queued job, join the thread, and raise the first job's error, if any."""
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join()
        self.check()

    def abandon(self, timeout: float = 5.0) -> None:
        """Stop without raising (the slot is failing): later jobs are skipped; joins within ``timeout``."""
        if self._error is None:
            self._error = RuntimeError("output stage abandoned")
        try:
            self._jobs.put(_STOP, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)

    def report(self) -> dict[str, Any]:
        """The stage thread's :class:`~pba_runtime.runtime.metrics.PhaseClock` phases, its CPU seconds and its
        :class:`~pba_runtime.runtime.metrics.Rusage` (as of its last job: a thread's figures can only be read
        on it)."""
        if self.clock is None:
            return {"wall": {}, "cpu": {}, "thread_cpu": 0.0, "rusage": {}}
        return {"wall": dict(self.clock.wall), "cpu": dict(self.clock.cpu), "thread_cpu": self._thread_cpu,
                "rusage": dict(self._rusage)}
