"""Logging for the main process and its worker processes, into one rotating file.

:func:`configure_logging` puts a :class:`concurrent_log_handler.ConcurrentRotatingFileHandler`
on the ``"pba_runtime"`` logger. That handler takes a lock file around each
write and each rollover, so several processes can append to one file and
rotate it without losing or interleaving lines. A process
:class:`~pba_runtime.WorkerPool` hands the configuration to its workers (in
their initializer, and with every task, so a later ``configure_logging`` call
reaches running workers too); a worker logs its pid, each task and its timing
at ``DEBUG`` level. Records carry ``%(process)d`` so lines from different
processes can be told apart.

Examples
--------
>>> import logging, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "logs", "pba.log")
>>> handler = configure_logging(path, "DEBUG")
>>> os.path.exists(path)  # created at once (the handler itself opens it at the first record)
True
>>> logging.getLogger("pba_runtime").debug("hello")
>>> "DEBUG pba_runtime: hello" in open(path).read()
True
>>> configure_logging(None)  # remove the handler again
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["configure_logging", "current_config", "apply_config", "LOG_FORMAT"]

LOGGER_NAME = "pba_runtime"
LOG_FORMAT = "%(asctime)s %(process)d %(processName)s %(levelname)s %(name)s: %(message)s"

_config: tuple | None = None
_handler: logging.Handler | None = None
_owned_level = False


def _level(level: Any) -> int:
    if isinstance(level, bool):
        raise TypeError(f"level must be a logging level name or int, got {level!r}")
    if isinstance(level, int):
        return level
    if isinstance(level, str):
        value = logging.getLevelName(level.upper())
        if isinstance(value, int):
            return value
    raise ValueError(f"level must be a logging level (DEBUG, INFO, WARNING, ERROR, CRITICAL or an int), got {level!r}")


def configure_logging(path: str | os.PathLike | None, level: int | str = "INFO", *,
                      max_bytes: int = 10 * 2**20, backup_count: int = 5,
                      fmt: str = LOG_FORMAT) -> logging.Handler | None:
    """Log ``pba_runtime`` (main process and pool workers) to ``path``, rotated by size.

    Parameters
    ----------
    path : str or os.PathLike or None
        Log file; ``None`` removes the handler this function installed.
    level : int or str
        Level of the ``"pba_runtime"`` logger (``"DEBUG"`` shows every worker task).
    max_bytes, backup_count : int
        Rotate at ``max_bytes`` (0: never), keeping ``backup_count`` old files.
    fmt : str
        :mod:`logging` format of each line.

    Returns
    -------
    logging.Handler or None
        The installed handler. Calling again replaces it (one handler at a time).

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "run.log")
    >>> configure_logging(path, "WARNING", max_bytes=1 << 20, backup_count=3).maxBytes
    1048576
    >>> configure_logging(None)
    """
    global _config, _handler
    lvl = _level(level)
    if path is None:
        _install(None)
        return None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
    if isinstance(backup_count, bool) or not isinstance(backup_count, int) or backup_count < 0:
        raise ValueError(f"backup_count must be an integer >= 0, got {backup_count!r}")
    cfg = (os.path.abspath(os.fspath(path)), lvl, max_bytes, backup_count, fmt)
    _install(cfg)
    return _handler


def _install(cfg: tuple | None) -> None:
    global _config, _handler, _owned_level
    logger = logging.getLogger(LOGGER_NAME)
    if _handler is not None:
        logger.removeHandler(_handler)
        try:
            _handler.close()
        except Exception:  # pragma: no cover
            pass
        _handler = None
    _config = cfg
    if cfg is None:
        if _owned_level:
            logger.setLevel(logging.NOTSET)
            _owned_level = False
        return
    from concurrent_log_handler import ConcurrentRotatingFileHandler

    path, lvl, max_bytes, backup_count, fmt = cfg
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # The handler always opens its file lazily, at the first record at `lvl`: create it now, so that a
    # run that logs nothing still shows where its log goes (and a path that cannot be written fails here).
    with open(path, "a", encoding="utf-8"):
        pass
    handler = ConcurrentRotatingFileHandler(path, "a", maxBytes=max_bytes, backupCount=backup_count)
    handler.setFormatter(logging.Formatter(fmt))
    handler.setLevel(lvl)
    logger.addHandler(handler)
    logger.setLevel(lvl)
    _owned_level = True
    _handler = handler


def current_config() -> tuple | None:
    """The configuration last set by :func:`configure_logging` (what workers receive), or ``None``."""
    return _config


def apply_config(cfg: tuple | None) -> None:
    """Worker side: adopt the main process's configuration if it changed (cheap when it did not)."""
    if cfg != _config:
        _install(cfg)
