"""Accepting connections, and what to do when the process cannot take another one.

`Acceptor.serve` accepts on each listener and runs the handler for every new connection in one
nursery, like ``trio.serve_listeners``, except when ``accept`` fails for want of resources (EMFILE:
the open-files limit; ENFILE, ENOBUFS, ENOMEM): then the listener backs off — 10 ms, doubling to
1 s — and tries again, and the failure is logged once per `LOG_INTERVAL` with the number of failed
attempts since the last line, as one line rather than a traceback per attempt. Connections that arrive meanwhile wait in
the kernel's backlog and are served once descriptors are free again; the first accept that
succeeds after failures is logged too.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

#: accept() failures that mean "not now": the process or system is out of descriptors or memory.
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
MIN_BACKOFF = 0.01
MAX_BACKOFF = 1.0
#: At most one warning per listener in this many seconds while accept keeps failing.
LOG_INTERVAL = 10.0


def describe_errno(exc: OSError) -> str:
    """``Too many open files (EMFILE)``."""
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return f"{os.strerror(exc.errno or 0)} ({name})"


class Acceptor:
    """Accepts on listeners and runs ``handler`` for each connection; counts failed accepts."""

    def __init__(self, handler: Callable[[trio.SocketStream], Awaitable[Any]], log: Any) -> None:
        self.handler = handler
        self.log = log
        #: Accepts that failed for want of resources, since the start.
        self.failed_accepts = 0
        self._failed = trio.Event()
        #: Connection limits (kraftpy.rpc.connection_limits.ConnectionLimits) asked about every accepted
        #: connection before its handler starts; None: no limits.
        self.limits: Any = None

    async def accept_failed(self) -> None:
        """Wait for the next failed accept (tests)."""
        await self._failed.wait()

    async def serve(self, listeners: Sequence[trio.SocketListener], *,
                    handler: Callable[[trio.SocketStream], Awaitable[Any]] | None = None,
                    listener_name: str = "", task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept on every listener until cancelled; each connection's handler (``handler``, else the
        acceptor's) runs in this nursery."""
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, nursery, handler or self.handler, listener_name)
            task_status.started(listeners)

    def _note_failure(self) -> None:
        self.failed_accepts += 1
        self._failed.set()
        self._failed = trio.Event()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery,
                           handler: Callable[[trio.SocketStream], Awaitable[Any]], name: str = "") -> None:
        log = self.log
        backoff = MIN_BACKOFF
        failures = 0  # since the last line logged
        failing_since: float | None = None
        last_warning = -math.inf
        try:
            address = listener.socket.getsockname()
            where = f"{address[0]}:{address[1]}"
        except (OSError, IndexError):
            where = "?"
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in CAPACITY_ERRNOS:
                        raise
                    self._note_failure()
                    now = trio.current_time()
                    failures += 1
                    if failing_since is None:
                        failing_since = now
                    if now - last_warning >= LOG_INTERVAL:
                        log.warning("cannot accept connections, backing off", listener=where,
                                    error=describe_errno(exc), failed_attempts=failures,
                                    retry_in_ms=round(backoff * 1000))
                        last_warning = now
                        failures = 0
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                    continue
                if failing_since is not None:
                    log.info("accepting connections again", listener=where, failed_attempts=failures,
                             after_ms=round((trio.current_time() - failing_since) * 1000))
                    failing_since = None
                    failures = 0
                    last_warning = -math.inf
                backoff = MIN_BACKOFF
                if self.limits is not None:
                    host = _peer_host(stream)
                    if not self.limits.admit(name, host):
                        await stream.aclose()
                        continue
                    nursery.start_soon(_run_limited, handler, stream, self.limits, name, host)
                    continue
                nursery.start_soon(_run_handler, handler, stream)


async def _run_handler(handler: Callable[[trio.SocketStream], Awaitable[Any]], stream: trio.SocketStream) -> None:
    async with stream:
        await handler(stream)


def _peer_host(stream: trio.SocketStream) -> str:
    try:
        return str(stream.socket.getpeername()[0])
    except (OSError, AttributeError, IndexError):
        return "?"


async def _run_limited(handler: Callable[[trio.SocketStream], Awaitable[Any]], stream: trio.SocketStream,
                       limits: Any, name: str, host: str) -> None:
    try:
        await _run_handler(handler, stream)
    finally:
        limits.release(name, host)
