"""Small durable file writes: temporary file, fsync, rename, fsync of the directory.

After `write_atomic` returns, a crash leaves either the old file or the new one, never a mix.
With ``sync=False`` the fsyncs are left to the caller, who makes a whole batch of writes durable
at once with `sync_filesystem` (a clean shutdown of thousands of logs: one syncfs, not thousands
of fsyncs) before it records anything that relies on them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)


def read_small_file(path: str | os.PathLike[str], chunk: int = 1 << 16) -> bytes:
    """The whole of a small file (a checkpoint, a partition's metadata) in as few system calls as can
    be: open, one read and close for a file under ``chunk`` bytes. Each call lets another thread take
    the GIL, and a broker opening 100,000 logs reads two such files per log from worker threads
    beside the event loop (a buffered ``open().read()`` makes five calls). Raises OSError as open does."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, chunk)
        if len(data) < chunk:
            return data
        parts = [data]
        while part := os.read(fd, chunk):
            parts.append(part)
        return b"".join(parts)
    finally:
        os.close(fd)


def fsync_dir(directory: str | Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: str | Path) -> None:
    """Make everything written to the file system holding ``path`` durable (Linux ``syncfs``; the
    whole machine's ``sync`` where there is none). Data and metadata: renames and new files too."""
    if _syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` (see the module doc). An OSError names ``path`` (a failed
    ``write`` or ``fsync`` names no file of its own) and leaves no temporary file behind."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if sync:
            fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
