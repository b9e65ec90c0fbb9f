"""Faults a process cannot go on after, said in one line instead of a traceback.

A part that meets such a fault — the metadata log cannot be written, a listener's port is taken —
raises `FatalError` with the line an operator needs: what failed, where (the file, directory or
address, and the configuration key when one decides it), and the errno by name. The error travels
up through the nursery tree, wrapped in exception groups on the way and joined by the other tasks'
cancellations; the command's top level finds it again with `fatal_message` and prints that line.

OS errors that reach the top level unwrapped are said the same way when they are about storage
(ENOSPC, EIO, EROFS, ... with the file they name): a full disk is an operator's problem, not a bug.
Anything else is left alone, so a real bug still shows its traceback.
"""

from __future__ import annotations

import errno as errno_codes
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

#: OS errors that say the storage is unusable (full, failing, read-only, not permitted), not that
#: kraftpy has a bug.
STORAGE_ERRNOS = frozenset({
    errno_codes.ENOSPC, errno_codes.EDQUOT, errno_codes.EIO, errno_codes.EROFS, errno_codes.EACCES,
    errno_codes.EPERM, errno_codes.ENOTDIR, errno_codes.EISDIR, errno_codes.EMFILE, errno_codes.ENFILE,
    errno_codes.ESTALE, errno_codes.ENXIO,
})
#: OS errors of binding a listening socket that are the machine's or the configuration's doing.
BIND_ERRNOS = frozenset({errno_codes.EADDRINUSE, errno_codes.EADDRNOTAVAIL, errno_codes.EACCES})
#: The full-disk errors: a write may succeed again once space is freed.
NO_SPACE_ERRNOS = frozenset({errno_codes.ENOSPC, errno_codes.EDQUOT})


class FatalError(Exception):
    """A fault the process stops on; ``str()`` is the one line to print."""


def errno_name(code: int | None) -> str:
    return errno_codes.errorcode.get(code or 0, f"errno {code}")


def describe_os_error(exc: OSError) -> str:
    """``No space left on device (ENOSPC)``: the reason and the errno's name, without the file."""
    if isinstance(exc, socket.gaierror):
        return f"{exc.strerror or exc}"
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    return f"{reason} ({errno_name(exc.errno)})" if exc.errno else reason


class ListenerError(FatalError):
    """A listening socket could not be bound: ``cannot listen on 127.0.0.1:9092: Address already in use
    (EADDRINUSE) (listeners=...)``."""


@contextmanager
def binding(host: str | None, port: int, setting: str) -> Iterator[None]:
    """Around the code that binds ``host:port`` (and nothing else that could fail the same way): a
    failure to bind becomes a `ListenerError` naming ``setting``, the configuration that chose the
    address (``listeners=...``); any other error passes as it is."""
    try:
        yield
    except BaseException as exc:
        bind_error = find_bind_error(exc)
        if bind_error is None:
            raise
        raise ListenerError(f"cannot listen on {host or '0.0.0.0'}:{port}: "
                            f"{describe_os_error(bind_error)} ({setting})") from bind_error


def storage_failure(action: str, path: object, exc: OSError) -> FatalError:
    """``cannot write the metadata log in /data/__cluster_metadata-0: No space left on device (ENOSPC)``."""
    error = FatalError(f"{action} {path}: {describe_os_error(exc)}")
    error.__cause__ = exc
    return error


def is_bind_error(exc: BaseException) -> bool:
    """An error of binding a socket (a file error has a file name, a bind error none)."""
    if isinstance(exc, socket.gaierror):
        return True
    return isinstance(exc, OSError) and exc.errno in BIND_ERRNOS and exc.filename is None


def find_bind_error(exc: BaseException) -> OSError | None:
    """The first error of binding a listening socket in ``exc`` (and the groups it wraps), if any."""
    for leaf in _leaves(exc):
        if is_bind_error(leaf):
            assert isinstance(leaf, OSError)
            return leaf
    return None


def fatal_message(exc: BaseException) -> str | None:
    """The one line to print for ``exc``: the first `FatalError` in it (however deep in exception
    groups, or in the context of an error raised while cleaning up after it), else the first storage
    OS error with its file; None when ``exc`` is neither (a bug: let its traceback show)."""
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, FatalError):
            return str(leaf)
    for leaf in leaves:
        if isinstance(leaf, OSError) and leaf.errno in STORAGE_ERRNOS:
            where = f"{leaf.filename}: " if leaf.filename else ""
            return f"{where}{describe_os_error(leaf)}"
    return None


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """Every exception in ``exc``: the leaves of its groups, each followed by what it was raised from."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            stack[:0] = list(current.exceptions)
            continue
        yield current
        chained = current.__cause__ or current.__context__
        if chained is not None:
            stack.insert(0, chained)
