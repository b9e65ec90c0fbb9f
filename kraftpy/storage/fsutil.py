"""Small durable file writes: temporary file, fsync, rename, fsync of the directory.

After `write_atomic` returns, a crash leaves either the old file or the new one, never a mix.
With ``sync=False`` the fsyncs are left to the caller, who makes a whole batch of writes durable
at once with `sync_filesystem` (a clean shutdown of thousands of logs: one syncfs, not thousands
of fsyncs) before it records anything that relies on them.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)
_fallocate = getattr(_libc, "fallocate", None)
if _fallocate is not None:
    _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    _fallocate.restype = ctypes.c_int

#: fallocate's mode that allocates blocks past the end of a file and leaves its size as it is.
FALLOC_FL_KEEP_SIZE = 1
#: What fallocate answers when the blocks cannot be had or the file system does not reserve them: the
#: file is then written as it would have been without (a full disk shows at the writes, as ever).
_NOT_RESERVED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


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


def reserve_blocks(fd: int, length: int) -> bool:
    """Allocate the disk blocks of the file's first ``length`` bytes, past its end too, and leave its
    size as it is (Linux ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``): writes up to there then land in
    blocks the file already has. True when the blocks are reserved; False where the system or the file
    system does not reserve blocks, or the disk (or a quota) has no room for them: then nothing stays
    reserved (a file system that ran out of room part of the way keeps what it had allocated, and the
    file is cut at its own size to give that back). Another error (EIO, EBADF) raises OSError."""
    if _fallocate is None or length <= 0:
        return False
    if _fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NOT_RESERVED:
        if err in (errno.ENOSPC, errno.EDQUOT):
            os.ftruncate(fd, os.fstat(fd).st_size)
        return False
    raise OSError(err, f"fallocate: {os.strerror(err)}")
