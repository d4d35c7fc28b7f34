"""Checkpoints: consistent snapshots of a job, written atomically, and barrier alignment.

The runtime takes *aligned* checkpoints, as Flink does:

1. The coordinator puts a barrier ``n`` into every task slot's input queue
   right after the batch that ends at source position ``X``.
2. A slot that meets the barrier has applied exactly the tuples before ``X``;
   it snapshots every key's operator (``op.snapshot()``), pickles the
   snapshots at once (a snapshot may share objects with the live operator)
   and passes them on its output queue, behind the results it already produced.
3. The sink writes results as they come, but once slot ``i`` has delivered
   barrier ``n`` it holds slot ``i``'s later messages (:class:`BarrierAligner`)
   until every slot has delivered it. At that moment the sink files hold
   exactly the results of the tuples before ``X``: the sink fsyncs them and
   records their byte lengths in the checkpoint with ``X`` and all key states.
4. The checkpoint is written to a temporary file, fsynced, and renamed over
   ``checkpoint.pkl`` (``os.replace`` is atomic), then the directory is fsynced.
   A write that fails removes its temporary file; one that a kill cut short
   leaves it, and the next start or resume removes it
   (:func:`prepare_checkpoint_dir`, which also checks up front, before any
   work, that the directory can be written).

**Checkpoints are trusted files.** A checkpoint is a pickle, and loading a
pickle runs whatever code it names (as Python's :mod:`pickle` documentation
warns; Flink's and Spark's state carry the same risk): whoever can write a
checkpoint directory can run their code as the user who resumes from it. So
directories this module creates are private (mode ``0700``) and checkpoint
files are written ``0600``; and a resume, or a start, refuses a directory or
file that another user could have written (:func:`check_private`: group- or
world-writable, or owned by another user than this one or root, as ``ssh``
judges its keys), naming it, why and the remedy.

**Exactly-once output by truncation** (CSV and JSON lines; the Parquet and
Arrow sinks commit whole part files per checkpoint instead, see
:mod:`pba_runtime.runtime.part_files`). A resumed job truncates the sink (and
the late side output) back to the recorded lengths before it appends, then
replays the source from ``X`` with the restored state. Results written after
the checkpoint and before the kill are cut off and produced again, the same
ones (window results are a deterministic function of each key's tuples), so
the file ends with every window exactly once. This was chosen over
transactional part files (write a new file per checkpoint epoch, rename it
when the checkpoint commits) because results stay visible as soon as they are
computed and the output remains one plain file; the price is that a reader
tailing the file during a crash may have seen lines that a resumed run cuts
and writes again (possibly in another order across keys; per-key order is
kept). stdout cannot be truncated, so a job writing to stdout is
at-least-once across a resume.

Examples
--------
>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> write_checkpoint(d, {"id": 1, "position": 42}).endswith("checkpoint.pkl")
True
>>> load_checkpoint(d)["position"]
42
>>> import shutil; shutil.rmtree(d)
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shlex
import stat
from collections import deque
from collections.abc import Callable
from typing import Any

from .errors import JobError, UserError

__all__ = ["CHECKPOINT_FILE", "CheckpointPolicy", "BarrierAligner", "write_checkpoint", "load_checkpoint",
           "fingerprint", "prepare_checkpoint_dir", "check_private"]

CHECKPOINT_FILE = "checkpoint.pkl"
FORMAT_VERSION = 1


_TMP_PREFIX = f".{CHECKPOINT_FILE}."
_TMP_SUFFIX = ".tmp"
#: Modes of what this module creates: the directory and the checkpoint files are the user's alone.
DIR_MODE = 0o700
FILE_MODE = 0o600


def _tmp_path(directory: str) -> str:
    return os.path.join(directory, f"{_TMP_PREFIX}{os.getpid()}{_TMP_SUFFIX}")


def fsync_path(path: str) -> None:
    """Flush a file's or a directory's entry to disk (a rename is durable once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_private(path: str, st: os.stat_result | None = None, *, what: str = "checkpoint directory") -> None:
    """Refuse ``path`` (a checkpoint directory or file) if a user other than this one (or root) could have
    written it: a checkpoint is a pickle, and loading it runs the code it names.

    Refused: group- or world-writable (``mode & 0o022``), or owned by a user other than the current one and
    root (the rule ``ssh`` applies to its keys and their directories). Raises :class:`UserError` naming
    ``path``, why and the remedy. ``st`` is the ``os.stat`` of ``path`` if the caller has it (an
    ``os.fstat`` of the file it opened, so that what is checked is what is read).

    Examples
    --------
    >>> import tempfile, shutil
    >>> d = tempfile.mkdtemp()
    >>> check_private(d)  # mkdtemp makes it 0700: accepted
    >>> os.chmod(d, 0o777)
    >>> check_private(d)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pba_runtime.runtime.errors.UserError: refusing the checkpoint directory ...: it is world-writable (mode 0777); ...
    >>> shutil.rmtree(d)
    """
    if os.name != "posix":  # pragma: no cover - the runtime is POSIX-only (shared memory, forkserver)
        return
    if st is None:
        st = os.stat(path)
    mode = stat.S_IMODE(st.st_mode)
    me = os.geteuid()
    trust = ("a checkpoint is a pickle, and loading it runs any code written into it, so pba-runtime "
             "only loads checkpoints no other user can write")
    if st.st_uid not in (me, 0):
        raise UserError(f"refusing the {what} {path}: it is owned by {_user(st.st_uid)}, not by you "
                        f"({_user(me)}); {trust}. Use a checkpoint directory of your own (or have its owner "
                        f"check it and `chown` it to you)")
    if mode & 0o022:
        who = "world-writable" if mode & 0o002 else "group-writable"
        raise UserError(f"refusing the {what} {path}: it is {who} (mode {mode:04o}); {trust}. If you trust "
                        f"its contents, make it private: `chmod go-w {shlex.quote(path)}`")


def _user(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def write_checkpoint(directory: str, data: dict[str, Any]) -> str:
    """Write ``data`` as ``directory/checkpoint.pkl`` atomically (temp file + fsync + rename + fsync dir).

    A failure removes the temporary file and raises :class:`JobError` (an
    ``OSError`` says the checkpoint directory cannot be written).
    """
    path = os.path.join(directory, CHECKPOINT_FILE)
    tmp = _tmp_path(directory)
    payload = dict(data, format_version=FORMAT_VERSION)
    try:
        os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
        with _open_private(tmp) as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_path(directory)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise JobError(f"cannot write a checkpoint into {directory}: {exc.strerror or exc}") from None
        raise
    return path


def _open_private(path: str):
    """``open(path, "wb")``, the file created (or made) ``0600``: only its owner may read or write it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a file left by an earlier write keeps its mode otherwise
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def prepare_checkpoint_dir(directory: str) -> list[str]:
    """Before a job starts: create ``directory``, remove stale temporary files, check it can be written.

    Temporary files (``.checkpoint.pkl.<pid>.tmp``) are what a process killed
    while writing a checkpoint leaves behind; a directory is used by one job
    at a time, so every one is stale when a job starts. Raises
    :class:`UserError` if the directory cannot be created or written (a file
    is created, fsynced and removed), so that this is known before any work
    is done, not at the first checkpoint. A directory it creates is private
    (``0700``); one that exists and that another user can write is refused
    (:func:`check_private`), as a resume from it would be. Returns the removed
    files.

    Examples
    --------
    >>> import tempfile, shutil
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, ".checkpoint.pkl.999999.tmp"), "wb")
    >>> [os.path.basename(p) for p in prepare_checkpoint_dir(d)], os.listdir(d)
    (['.checkpoint.pkl.999999.tmp'], [])
    >>> shutil.rmtree(d)
    """
    try:
        os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
        st = os.stat(directory)
    except OSError as exc:
        raise UserError(f"cannot create the checkpoint directory {directory}: {exc.strerror or exc}") from None
    check_private(directory, st)
    removed = []
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise UserError(f"cannot read the checkpoint directory {directory}: {exc.strerror or exc}") from None
    for name in names:
        if name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX):
            path = os.path.join(directory, name)
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise UserError(f"cannot remove the stale checkpoint file {path}: {exc.strerror or exc}") from None
    tmp = _tmp_path(directory)
    try:
        try:
            with open(tmp, "wb") as f:
                f.write(b"probe")
                f.flush()
                os.fsync(f.fileno())
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        raise UserError(f"cannot write checkpoints into {directory}: {exc.strerror or exc}") from None
    return removed


def load_checkpoint(directory: str) -> dict[str, Any] | None:
    """The checkpoint in ``directory``, or ``None`` if there is none.

    The directory and the file must be private to this user (or root's): one
    that another user can write is refused before anything is unpickled
    (:func:`check_private`; the file is checked on the descriptor it is read
    from).
    """
    path = os.path.join(directory, CHECKPOINT_FILE)
    try:
        check_private(directory, os.stat(directory))
        with open(path, "rb") as f:
            check_private(path, os.fstat(f.fileno()), what="checkpoint file")
            data = pickle.load(f)
    except FileNotFoundError:
        return None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise UserError(f"cannot read checkpoint {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{path} is not a checkpoint of this pba-runtime version")
    return data


def fingerprint(description: dict[str, Any]) -> str:
    """A short digest of what defines a job's output (a resumed job must match it).

    Examples
    --------
    >>> fingerprint({"window": "CountWindow(range=4, slide=1)"}) == fingerprint({"window": "CountWindow(range=4, slide=1)"})
    True
    """
    text = json.dumps(description, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class CheckpointPolicy:
    """When the next checkpoint is due: every ``every_tuples`` tuples and/or ``every_seconds`` seconds.

    Examples
    --------
    >>> p = CheckpointPolicy(every_tuples=100)
    >>> p.due(tuples=99, now=0.0), p.due(tuples=100, now=0.0)
    (False, True)
    >>> p.taken(tuples=100, now=0.0); p.due(tuples=150, now=0.0)
    False
    """

    def __init__(self, every_tuples: int | None = None, every_seconds: float | None = None, start: float = 0.0):
        if every_tuples is None and every_seconds is None:
            raise UserError("a checkpoint interval is needed: a number of tuples or of seconds")
        if every_tuples is not None and (isinstance(every_tuples, bool) or not isinstance(every_tuples, int)
                                         or every_tuples < 1):
            raise UserError(f"checkpoint interval must be a positive number of tuples, got {every_tuples!r}")
        if every_seconds is not None and not every_seconds > 0:
            raise UserError(f"checkpoint interval must be a positive number of seconds, got {every_seconds!r}")
        self.every_tuples = every_tuples
        self.every_seconds = every_seconds
        self._last_tuples = 0
        self._last_time = start

    def due(self, tuples: int, now: float) -> bool:
        if self.every_tuples is not None and tuples - self._last_tuples >= self.every_tuples:
            return True
        return self.every_seconds is not None and now - self._last_time >= self.every_seconds

    def taken(self, tuples: int, now: float) -> None:
        self._last_tuples = tuples
        self._last_time = now


class BarrierAligner:
    """Sink-side barrier alignment over ``parallelism`` slot streams (see the module doc).

    :meth:`offer` takes each message of slot ``i`` in order. Barrier messages
    are ``("barrier", slot, checkpoint_id, payload)``; anything else goes to
    ``deliver(slot, message)``, except that after slot ``i`` delivered the
    pending barrier its messages are held back until every slot delivered it;
    then ``complete(checkpoint_id, {slot: payload})`` runs and the held messages
    are replayed in order.

    Examples
    --------
    >>> seen = []
    >>> a = BarrierAligner(2, deliver=lambda s, m: seen.append(m), complete=lambda c, p: seen.append(("ckpt", c)))
    >>> a.offer(0, "a1"); a.offer(0, ("barrier", 0, 1, None)); a.offer(0, "a2")
    >>> a.offer(1, "b1"); a.offer(1, ("barrier", 1, 1, None))
    >>> seen
    ['a1', 'b1', ('ckpt', 1), 'a2']
    """

    def __init__(self, parallelism: int, deliver: Callable[[int, Any], None],
                 complete: Callable[[int, dict[int, Any]], None]):
        self.parallelism = parallelism
        self._deliver = deliver
        self._complete = complete
        self._held: list[deque] = [deque() for _ in range(parallelism)]
        self._parts: dict[int, Any] = {}
        self._pending: int | None = None

    @property
    def pending(self) -> int | None:
        """Id of the checkpoint being aligned, if any."""
        return self._pending

    def offer(self, slot: int, msg: Any) -> None:
        if slot in self._parts:
            self._held[slot].append(msg)
            return
        self._process(slot, msg)
        self._drain()

    def _process(self, slot: int, msg: Any) -> None:
        if isinstance(msg, tuple) and msg and msg[0] == "barrier":
            _, _, cid, payload = msg
            if self._pending is None:
                self._pending = cid
            elif cid != self._pending:
                raise RuntimeError(f"slot {slot} delivered barrier {cid} while aligning {self._pending}")
            self._parts[slot] = payload
        else:
            self._deliver(slot, msg)

    def _drain(self) -> None:
        while len(self._parts) == self.parallelism:
            cid, parts = self._pending, self._parts
            self._pending, self._parts = None, {}
            self._complete(cid, parts)
            for slot in range(self.parallelism):
                held = self._held[slot]
                while held and slot not in self._parts:
                    self._process(slot, held.popleft())
