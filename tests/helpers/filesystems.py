"""Small real file systems for fault tests: a tmpfs of a few hundred KiB that fills up for real.

``small_filesystem(path, size)`` mounts a tmpfs there (which needs root, or CAP_SYS_ADMIN) and
skips the test, saying why, where that is not permitted; ``fill(path)`` takes every free byte with
one file (so the next write that needs a new page fails with ENOSPC) and returns it, to be
deleted when the test frees the space again.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = "filler"


@contextmanager
def small_filesystem(path: Path, size: str = "512k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the block; skips the test when mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (for a real ENOSPC) needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a real ENOSPC: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path) -> Path:
    """Write one file under ``path`` until its file system is full; returns the file."""
    filler = path / FILLER
    block = b"\0" * 4096
    with open(filler, "ab", buffering=0) as f:
        for size in (4096, 512, 1):
            try:
                while True:
                    f.write(block[:size])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return filler


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize
