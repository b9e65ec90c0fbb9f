"""A guard that fails a test when blocking file work runs on the event loop's thread.

    with file_work_forbidden_here():
        ...  # trio code: fsync, ftruncate, rename, unlink, mkdir, open... raise on this thread;
             # worker threads (trio.to_thread) may do them

Page-cache reads and writes of open descriptors (pread, writev, sendfile) are allowed: those are
the data path. What is forbidden is what can block on the disk or the file system's journal.
"""

from __future__ import annotations

import builtins
import io
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

_OS_CALLS = ("fsync", "fdatasync", "ftruncate", "truncate", "rename", "replace", "unlink", "remove", "rmdir",
             "mkdir", "makedirs", "open", "scandir", "listdir")


class BlockingFileWork(AssertionError):
    """File work on the event loop's thread."""


@contextmanager
def file_work_forbidden_here() -> Iterator[list[str]]:
    """Forbid the calls of `_OS_CALLS` and ``open()`` on the current thread while the block runs;
    yields the list of calls seen on other threads (proof that the work did happen, elsewhere)."""
    loop_thread = threading.get_ident()
    elsewhere: list[str] = []
    patch = pytest.MonkeyPatch()

    def guard(name, real):
        def call(*args, **kwargs):
            if threading.get_ident() == loop_thread:
                raise BlockingFileWork(f"os.{name}{args!r:.120} on the event loop's thread")
            elsewhere.append(name)
            return real(*args, **kwargs)

        return call

    for name in _OS_CALLS:
        patch.setattr(os, name, guard(name, getattr(os, name)))
    patch.setattr(builtins, "open", guard("open()", builtins.open))
    patch.setattr(io, "open", guard("open()", io.open))
    try:
        yield elsewhere
    finally:
        patch.undo()
