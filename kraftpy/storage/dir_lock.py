"""One process a data directory: a node holds an exclusive lock on ``<dir>/.lock`` in each of its
directories (Kafka's ``.lock`` in every log directory) for as long as it runs.

Two processes writing the same logs would interleave batches, truncate each other and fight over the
metadata log: the second is refused before it reads anything, with one line naming the directory and
the process holding it. The lock is ``flock`` on a file the lock leaves in place: the kernel drops it
when the holder's descriptor closes, at its exit whatever the signal (kill -9 included), so no stale
lock is ever left behind to clear by hand. The file holds the holder's pid, for the message only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable
from pathlib import Path

from kraftpy.fatal import describe_os_error
from kraftpy.storage.formatter import FormatError

LOCK_FILE = ".lock"


class DirectoryInUse(FormatError):
    """Another process holds the lock of one of the directories."""


class DirectoryLocks:
    """The locks of a node's directories, held until `release` (or the process's exit)."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


def lock_dirs(dirs: Iterable[Path]) -> DirectoryLocks:
    """Lock each of ``dirs`` (existing directories) for this process; DirectoryInUse when another
    process holds one, a FormatError naming the file and the errno when the lock file cannot be opened
    (none is kept locked then)."""
    fds: list[int] = []
    try:
        for directory in dirs:
            path = Path(directory) / LOCK_FILE
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise FormatError(f"cannot lock {path}: {describe_os_error(exc)}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise DirectoryInUse(
                    f"{directory} is in use by another process{holder} (it holds {path}): one kraftpy process "
                    "a directory; stop that one first, or give this one directories of its own") from None
            except BaseException:
                os.close(fd)
                raise
            fds.append(fd)
            with contextlib.suppress(OSError):  # the pid is for the message only (a full disk may refuse it)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        DirectoryLocks(fds).release()
        raise
    return DirectoryLocks(fds)


#: Locks taken for the rest of this process's life (`hold_for_process`).
_HELD: list[DirectoryLocks] = []


def hold_for_process(dirs: Iterable[Path]) -> None:
    """`lock_dirs`, held until this process exits: what a node's process does once its directories are
    found formatted, before it opens anything in them."""
    _HELD.append(lock_dirs(dirs))


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""
