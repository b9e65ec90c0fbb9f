"""The Kafka-protocol server loop: one trio task per connection, requests answered in order.

Like Kafka's socket server, a connection's requests are handled one at a time and answered in the
order they came (clients pipeline, and rely on that order). The handler gets each frame's bytes
and returns the response as a list of parts: bytes-like parts are written as they are, and a
`FileRegion` (a byte range of a log segment) is written with ``os.sendfile``, so record data goes
from the page cache to the socket without passing through Python. A handler that returns None
sends nothing (Produce with acks=0). Regions whose descriptors the handler owns are handed to the
connection (`Connection.hold`), which closes them once the response is sent or the request fails.

A frame over ``socket.request.max.bytes``, or one the handler rejects with `BadRequest`, closes that
connection and only that one.

Memory: all connections share one `RequestBudget` (``queued.max.request.bytes``, see
kraftpy.rpc.framing): a request holds its bytes from the moment they are read until its answer has
been sent, and a connection that would go over the budget stops reading until others finish. A
connection on which nothing arrives for ``connections.max.idle.ms`` (while no request of its is being
handled) is closed. Failing accepts (the open-files limit) back off and log once per interval
(kraftpy.rpc.listeners).

Listeners: `serve_listeners` serves several (each with its name and security protocol) from one accept
nursery and one request budget. On an SSL or SASL_SSL listener each accepted stream is wrapped in a
`trio.SSLStream` and its handshake done before the first frame is read; a handshake that fails (a
plaintext client, an unknown CA, a missing client certificate when one is required) closes that
connection with one log line. A verified client certificate names the connection's principal. File
regions go out with ``sendfile`` on plaintext sockets only: over TLS their bytes are read (in a worker
thread, at most `TLS_READ_CHUNK` at a time) and encrypted like any other part.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from kraftpy.fatal import binding
from kraftpy.logs import get_logger
from kraftpy.metrics import BYTES_IN, CONNECTIONS, REQUEST_TIME, REQUESTS
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.types import FileRegion
from kraftpy.rpc.framing import FramedStream, FrameError, IdleConnection, RequestBudget
from kraftpy.rpc.listeners import Acceptor
from kraftpy.security.tls import handshake_failure, peer_principal


class BadRequest(Exception):
    """The frame does not parse as a request we serve; the connection is closed."""


#: How long a TLS client has to finish its handshake.
TLS_HANDSHAKE_TIMEOUT_S = 10.0
#: The most bytes of a file region read at once to be sent over TLS.
TLS_READ_CHUNK = 1 << 20

#: The principal of a connection nobody authenticated (a PLAINTEXT listener, or SSL without a client
#: certificate), as Kafka names it.
ANONYMOUS = "User:ANONYMOUS"


class Connection:
    """What a handler may know about the connection a request came on: the listener it arrived on
    (its name and security protocol), the peer, and who it is (``principal``, ``User:NAME``: set by
    the TLS client certificate or by SASL; ``User:ANONYMOUS`` until then)."""

    def __init__(self, stream: trio.SocketStream, listener: str, security_protocol: str = "PLAINTEXT") -> None:
        #: What requests are read from and answers written to: the socket, or its `trio.SSLStream`
        #: once the TLS handshake is done (the peer is always the socket's).
        self.stream: trio.abc.Stream = stream
        self.listener = listener
        self.security_protocol = security_protocol
        self.principal = ANONYMOUS
        try:
            host, port = stream.socket.getpeername()[:2]
            self.peer = f"{host}:{port}"
            self.client_host = str(host)
        except (OSError, AttributeError):  # AttributeError: a stream without a socket (in tests)
            self.peer = "?"
            self.client_host = "?"
        self._held: list[FileRegion] = []
        #: Set by the client quotas (kraftpy.broker.quotas) when the request just answered put its client
        #: over a quota: nothing more is read from this connection for that many ms (KIP-219 muting).
        self.throttle_ms = 0

    def hold(self, region: FileRegion) -> FileRegion:
        """Own ``region`` until the current request is answered (or fails), then close it."""
        self._held.append(region)
        return region

    def release(self) -> None:
        held, self._held = self._held, []
        for region in held:
            region.close()


Handler = Callable[[bytes, Connection], Awaitable[Sequence[Any] | None]]


async def send_parts(stream: trio.abc.Stream, parts: Sequence[Any]) -> None:
    """Write bytes parts and file regions, in order, to the stream (file regions with sendfile when it
    is a plain socket, read and sent through it otherwise)."""
    pending: list[bytes | bytearray | memoryview] = []
    for part in parts:
        if isinstance(part, FileRegion):
            if pending:
                await stream.send_all(b"".join(pending))
                pending = []
            if isinstance(stream, trio.SocketStream):
                await _sendfile(stream, part.fd, part.offset, part.length)
            else:
                await _send_region_read(stream, part.fd, part.offset, part.length)
        else:
            pending.append(part)
    if pending:
        await stream.send_all(b"".join(pending) if len(pending) > 1 else pending[0])


async def _send_region_read(stream: trio.abc.Stream, fd: int, offset: int, length: int) -> None:
    """A file region through a stream that is not a socket (TLS): read in bounded chunks, then sent."""
    while length > 0:
        chunk = await trio.to_thread.run_sync(os.pread, fd, min(length, TLS_READ_CHUNK), offset)
        if not chunk:
            raise trio.BrokenResourceError("file region ended early: the segment was truncated")
        await stream.send_all(chunk)
        offset += len(chunk)
        length -= len(chunk)


async def _sendfile(stream: trio.SocketStream, fd: int, offset: int, length: int) -> None:
    sock = stream.socket
    out = sock.fileno()
    while length > 0:
        try:
            sent = os.sendfile(out, fd, offset, length)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                raise trio.BrokenResourceError(str(exc)) from exc
            raise
        if sent == 0:
            raise trio.BrokenResourceError("file region ended early: the segment was truncated")
        offset += sent
        length -= sent
        await trio.lowlevel.checkpoint()


_KNOWN_API_KEYS = {int(key) for key in ApiKey}


def _api_label(frame: Any) -> str:
    """The metrics label of a request's api key: any key outside Kafka's shares one label, so frames
    naming made-up keys cannot grow the metrics without bound."""
    key = int.from_bytes(frame[:2], "big", signed=True)
    return str(key) if key in _KNOWN_API_KEYS else "unknown"


def _request_name(key: ApiKey) -> str:
    """Kafka's name of a request (``ApiVersions``), as its RequestMetrics label it."""
    return "".join(word.capitalize() for word in key.name.split("_"))


#: The latency histogram of each request, by api key; made-up keys share one.
_REQUEST_TIMERS = {int(key): REQUEST_TIME.labels(_request_name(key)) for key in ApiKey}
_UNKNOWN_TIMER = REQUEST_TIME.labels("unknown")


def _request_timer(frame: Any) -> Any:
    return _REQUEST_TIMERS.get(int.from_bytes(frame[:2], "big", signed=True), _UNKNOWN_TIMER)


class KafkaServer:
    def __init__(self, handler: Handler, *, max_frame_bytes: int, listener: str = "PLAINTEXT",
                 log: Any = None, queued_max_request_bytes: int = -1, connections_max_idle_ms: int = -1) -> None:
        """``queued_max_request_bytes`` (-1: no bound) and ``connections_max_idle_ms`` (-1: never)
        are Kafka's ``queued.max.request.bytes`` and ``connections.max.idle.ms``."""
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.listener = listener
        self.log = log or get_logger("kafka-server")
        self.port: int | None = None
        self.connections = 0
        #: Request bytes held by all connections (queued.max.request.bytes).
        self.budget = RequestBudget(queued_max_request_bytes if queued_max_request_bytes > 0 else None)
        self.idle_timeout = connections_max_idle_ms / 1000 if connections_max_idle_ms >= 0 else None
        self.acceptor = Acceptor(self._serve_connection, self.log)

    async def serve(self, host: str, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host or None)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(self.acceptor.serve, listeners, listener_name=self.listener))
            task_status.started(self.port)

    async def serve_listeners(self, specs: Sequence[Any], *, setting: str | None = None,
                              task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve every listener of ``specs`` (each with ``name``, ``host``, ``port``,
        ``security_protocol`` and ``tls``: a `kraftpy.security.tls.ServerTls` or None) until cancelled;
        ``task_status.started`` gets ``{name: bound port}``. The first is ``self.port``. A listener
        that cannot be bound is a `kraftpy.fatal.ListenerError` naming its address and ``setting``."""
        bound = []
        for spec in specs:
            with binding(spec.host, spec.port, setting or f"listener {spec.name}"):
                bound.append((spec, await trio.open_tcp_listeners(spec.port, host=spec.host or None)))
        ports = {spec.name: sockets[0].socket.getsockname()[1] for spec, sockets in bound}
        self.port = ports[specs[0].name]
        async with trio.open_nursery() as nursery:
            for spec, sockets in bound:
                await nursery.start(functools.partial(
                    self.acceptor.serve, sockets, handler=functools.partial(self._serve_listener_connection, spec),
                    listener_name=spec.name))
            task_status.started(ports)

    async def _serve_listener_connection(self, spec: Any, stream: trio.SocketStream) -> None:
        await self._serve_connection(stream, spec.name, spec.security_protocol, spec.tls)

    async def _handshake(self, conn: Connection, stream: trio.SocketStream, tls: Any) -> trio.SSLStream | None:
        """The TLS stream of an accepted connection, or None (logged) when the handshake fails."""
        ssl_stream = tls.wrap(stream)
        reason = None
        with trio.move_on_after(TLS_HANDSHAKE_TIMEOUT_S):
            try:
                await ssl_stream.do_handshake()
                return ssl_stream
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                reason = handshake_failure(exc)
        self.log.warning("closing connection: TLS handshake failed", listener=conn.listener, peer=conn.peer,
                         reason=reason or f"no handshake within {TLS_HANDSHAKE_TIMEOUT_S:g}s")
        return None

    async def _serve_connection(self, stream: trio.SocketStream, listener: str | None = None,
                                security_protocol: str = "PLAINTEXT", tls: Any = None) -> None:
        conn = Connection(stream, listener or self.listener, security_protocol)
        if tls is not None:
            ssl_stream = await self._handshake(conn, stream, tls)
            if ssl_stream is None:
                return
            conn.stream = ssl_stream
            conn.principal = peer_principal(ssl_stream)
        stream = conn.stream
        framed = FramedStream(stream, self.max_frame_bytes, budget=self.budget, idle_timeout=self.idle_timeout)
        self.connections += 1
        CONNECTIONS.inc()
        try:
            while True:
                frame = await framed.receive_frame()
                if frame is None:
                    return
                BYTES_IN.inc(len(frame) + 4)
                started = time.perf_counter()
                timer = _request_timer(frame) if len(frame) >= 2 else _UNKNOWN_TIMER
                if len(frame) >= 2:
                    REQUESTS.labels(_api_label(frame)).inc()
                try:
                    parts = await self.handler(frame, conn)
                    if parts:
                        await send_parts(stream, parts)
                    timer.observe(time.perf_counter() - started)
                finally:
                    conn.release()
                    framed.release(frame)
                    del frame
                if conn.throttle_ms > 0:
                    # The response went out at once, carrying the throttle time; the connection is muted.
                    throttle, conn.throttle_ms = conn.throttle_ms, 0
                    await trio.sleep(throttle / 1000)
        except (FrameError, BadRequest) as exc:
            self.log.warning("closing connection", peer=conn.peer, reason=str(exc))
        except IdleConnection as exc:
            self.log.debug("closing idle connection", peer=conn.peer, reason=str(exc))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.connections -= 1
            CONNECTIONS.dec()
            with trio.CancelScope(shield=True):
                await framed.aclose()
