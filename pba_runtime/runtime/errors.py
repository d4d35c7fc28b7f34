"""Errors of the runtime: user errors (bad configuration or input) and job failures.

The CLI prints either as one line on stderr; a :class:`UserError` exits with
code 2 (fix the command or the input), a :class:`JobError` with code 1.

Examples
--------
>>> str(UserError("parallelism must be a positive integer, got 0"))
'parallelism must be a positive integer, got 0'
>>> issubclass(UserError, JobError)
True
"""

from __future__ import annotations

__all__ = ["JobError", "UserError"]


class JobError(RuntimeError):
    """The job failed (a task slot died, the sink cannot be written...)."""


class UserError(JobError, ValueError):
    """The job's configuration or its input is wrong; the message says what to change."""
