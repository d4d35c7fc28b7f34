"""Worker pools that build lcs buffers beside the main loop: threads, or worker processes over shared memory.

One pool serves many aggregators (one per key), as the paper's Flink integration runs one pool per task slot.
A thread pool works in parallel with the main loop for kernel (numpy) aggregations, whose accumulate loops
release the GIL; a Python-callable aggregation holds the GIL, so its lcs only overlaps the main loop in a
process pool. :mod:`~pba_runtime.pool.executor` holds the pool itself, :mod:`~pba_runtime.pool.repair` the
one repair of a failed task, :mod:`~pba_runtime.pool.workers` what each worker runs first and
:mod:`~pba_runtime.pool.cleanup` how a process pool's workers and semaphores end with it; the shared memory is
:mod:`pba_runtime.shm`, the tasks :mod:`pba_runtime.tasks`.

Examples
--------
>>> with WorkerPool(kind="thread", workers=1) as pool:
...     pool.submit(sum, [1, 2, 3]).result()
6
>>> with WorkerPool(kind="process", workers=1, task_timeout=30) as pool:  # doctest: +SKIP
...     pool.submit(sum, [1, 2, 3]).result()
6
"""

from .executor import DEFAULT_TASK_TIMEOUT, START_METHODS, WorkerPool, default_pool, default_pool_free
from .repair import result_or_repair
from .workers import ORPHAN_EXIT_CODE, exit_with_parent, quiet_worker_thread

__all__ = ["WorkerPool", "default_pool", "default_pool_free", "exit_with_parent", "quiet_worker_thread", "result_or_repair",
           "DEFAULT_TASK_TIMEOUT", "START_METHODS", "ORPHAN_EXIT_CODE"]
