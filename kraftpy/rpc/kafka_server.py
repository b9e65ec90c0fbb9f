"""The Kafka-protocol server loop: one trio task per connection, requests answered in order.

Like Kafka's socket server, a connection's requests are answered in the order they came (clients
pipeline, and rely on that order) and handled one at a time, with one exception: Produce. Once a
Produce's batches are appended, its handler calls `allow_next_request` before it waits for
replication (acks=all), and the connection reads on: a next Produce is handled at once — appended
while the first waits, so one round of the followers' fetches replicates both — and answered after
it. Kafka mutes the connection until the answer is sent, so its acks=all producer gets one batch
committed per replication round trip per connection; a client with several requests in flight
(librdkafka sends up to max.in.flight) waits here for none of that. Any other request waits until
every answer before it is sent, so nothing else changes order. At most `PIPELINED_PRODUCES`
Produce requests of `PIPELINED_PRODUCE_BYTES` in all are under way on one connection. A Produce with
acks=all, or one that starts while another is under way, is handled in a task of its own in the
connection's nursery; any other request, alone on its connection, in the connection's task (a Produce
with acks=0 or 1 waits for nothing but its append: its acks are read off the frame, `produce_acks`,
and it is spared a task's start and the two switches to it and back). The first failure (a bad frame,
a handler's `BadRequest`, a broken socket) cancels the others and closes the connection.

The handler gets each frame's bytes and returns the response as a list of parts: bytes-like parts are written as they are, and a
`FileRegion` (a byte range of a log segment) is written with ``os.sendfile``, so record data goes
from the page cache to the socket without passing through Python. A handler that returns None
sends nothing (Produce with acks=0). Regions whose descriptors the handler owns are handed to the
connection (`Connection.hold`), which closes them once the response is sent or the request fails.

An answer carrying at least `THREADED_WRITE_BYTES` of file regions (a consumer catching up, a follower
far behind) is written from a worker thread, at most `WRITE_THREADS` at once: the kernel's work
of a sendfile of a megabyte (on loopback the receiver's TCP processing too) is about half a
millisecond, during which the event loop would answer nothing else. On the first would-block the
thread returns, the event loop waits until the socket is writable, and another hop goes on.

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

import contextvars
import errno
import functools
import os
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from kraftpy.fatal import binding
from kraftpy.logs import get_logger
from kraftpy.metrics import (
    BYTES_IN,
    CONNECTIONS,
    REQUEST_PHASE_TIME,
    REQUEST_TIME,
    REQUESTS,
    RequestTimes,
    request_times,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.frames import produce_acks
from kraftpy.protocol.types import FileRegion
from kraftpy.rpc.framing import FramedStream, FrameError, IdleConnection, RequestBudget, send_all_fast
from kraftpy.rpc.listeners import Acceptor
from kraftpy.security.tls import handshake_failure, peer_principal


class BadRequest(Exception):
    """The frame does not parse as a request we serve; the connection is closed."""


#: How long a TLS client has to finish its handshake.
TLS_HANDSHAKE_TIMEOUT_S = 10.0
#: The most bytes of a file region read at once to be sent over TLS.
TLS_READ_CHUNK = 1 << 20
#: A file region of at most this many bytes is read and written with the bytes around it, in one
#: write, rather than sent with sendfile between two writes: a tail fetch (a follower's, a consumer's
#: keeping up) carries a few small regions, and three system calls and three TCP segments per region,
#: each waking the reader, cost more than the copy. The data was just written: it is in the page cache.
COALESCED_REGION_BYTES = 16 * 1024
#: The most bytes of small regions one answer gathers this way (the rest go by sendfile).
COALESCED_ANSWER_BYTES = 256 * 1024
#: An answer with at least this many bytes of file regions is written from a worker thread (see the
#: module's docstring): with six consumers catching up on one `kraftpy dev`, a producer's p99 on the
#: same broker was 119-628 ms with these answers written on the event loop, 11-24 ms with them written
#: from threads (three runs each, bench/catchup.py).
THREADED_WRITE_BYTES = 256 * 1024
#: The worker threads a server writes large answers from at once: each hop is a few non-blocking system
#: calls, so threads cost little, while fewer threads than readers catching up at once measured worse
#: (six readers: a producer's p99 of 27-83 ms in five runs with three threads, 9-24 ms with forty).
WRITE_THREADS = 40

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
        #: Called once when the connection has authenticated (SASL): it may send large frames from then on.
        self.on_authenticated: Callable[[], None] | None = None
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
        #: The threads large answers are written from (the server's; None: trio's own).
        self.write_limiter: trio.CapacityLimiter | None = None

    def hold(self, region: FileRegion) -> FileRegion:
        """Own ``region`` until the current request is answered (or fails), then close it."""
        self._held.append(region)
        return region

    def release(self) -> None:
        held, self._held = self._held, []
        for region in held:
            region.close()


Handler = Callable[[bytes, Connection], Awaitable[Sequence[Any] | None]]


async def send_parts(stream: trio.abc.Stream, parts: Sequence[Any],
                     limiter: trio.CapacityLimiter | None = None) -> None:
    """Write bytes parts and file regions, in order, to the stream (file regions with sendfile when it
    is a plain socket, read and sent through it otherwise). On a plain socket, parts whose regions add
    up to `THREADED_WRITE_BYTES` or more are written from worker threads of ``limiter``."""
    pending: list[bytes | bytearray | memoryview] = []
    plain_socket = isinstance(stream, trio.SocketStream)
    if plain_socket and sum(part.length for part in parts if isinstance(part, FileRegion)) >= THREADED_WRITE_BYTES:
        await _write_from_threads(stream, _socket_writes(parts), limiter)
        return
    coalesced = 0
    for part in parts:
        if isinstance(part, FileRegion):
            if (plain_socket and part.length <= COALESCED_REGION_BYTES
                    and coalesced + part.length <= COALESCED_ANSWER_BYTES):
                # As sendfile would, a read of the page cache on the event loop (see COALESCED_REGION_BYTES).
                data = os.pread(part.fd, part.length, part.offset)
                if len(data) != part.length:
                    raise trio.BrokenResourceError("file region ended early: the segment was truncated")
                pending.append(data)
                coalesced += part.length
                continue
            if pending:
                await send_all_fast(stream, b"".join(pending))
                pending = []
            if plain_socket:
                await _sendfile(stream, part.fd, part.offset, part.length)
            else:
                await _send_region_read(stream, part.fd, part.offset, part.length)
        else:
            pending.append(part)
    if pending:
        data = b"".join(pending) if len(pending) > 1 else pending[0]
        await send_all_fast(stream, data)


def _socket_writes(parts: Sequence[Any]) -> list[Any]:
    """The parts as the writes they take: each run of bytes joined, each region alone, nothing empty."""
    writes: list[Any] = []
    pending: list[Any] = []
    for part in parts:
        if isinstance(part, FileRegion):
            if pending:
                writes.append(b"".join(pending))
                pending = []
            if part.length:
                writes.append(part)
        elif len(part):
            pending.append(part)
    if pending:
        writes.append(b"".join(pending))
    return writes


async def _write_from_threads(stream: trio.SocketStream, writes: list[Any],
                              limiter: trio.CapacityLimiter | None) -> None:
    """Write ``writes`` to the socket from worker threads: each hop writes until the socket would block
    (the event loop then waits until it is writable) or everything is written."""
    sock = stream.socket
    out = sock.fileno()
    index, offset = 0, 0
    while True:
        index, offset = await trio.to_thread.run_sync(_write_some, out, writes, index, offset, limiter=limiter)
        if index == len(writes):
            return
        await trio.lowlevel.wait_writable(sock)


def _write_some(out: int, writes: list[Any], index: int, offset: int) -> tuple[int, int]:
    """Write ``writes[index:]``, the first from its byte ``offset``, to the non-blocking socket ``out``
    until all is written or it would block; returns where it stopped (index, offset)."""
    while index < len(writes):
        write = writes[index]
        try:
            if isinstance(write, FileRegion):
                remaining = write.length - offset
                sent = os.sendfile(out, write.fd, write.offset + offset, remaining)
                if sent == 0:
                    raise trio.BrokenResourceError("file region ended early: the segment was truncated")
            else:
                view = memoryview(write)[offset:]
                remaining = len(view)
                sent = os.write(out, view)
        except BlockingIOError:
            return index, offset
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                raise trio.BrokenResourceError(str(exc)) from exc
            raise
        if sent < remaining:
            offset += sent
        else:
            index, offset = index + 1, 0
    return index, offset


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


def _request_name(key: ApiKey) -> str:
    """Kafka's name of a request (``ApiVersions``), as its RequestMetrics label it."""
    return "".join(word.capitalize() for word in key.name.split("_"))


#: Kafka's request name of each api key; made-up keys share one.
_REQUEST_NAMES = {int(key): _request_name(key) for key in ApiKey}
_UNKNOWN_NAME = "unknown"
#: The phases of `REQUEST_PHASE_TIME`, in the order a request goes through them.
PHASES = ("request_queue", "local", "remote", "response_queue", "response_send")
#: A request name's latency histogram and its phases' (see `_timers`).
_TIMERS: dict[str, tuple[Any, ...]] = {}


def _timers(name: str) -> tuple[Any, ...]:
    """The total and phase histograms of the request ``name``, labelled on its first request (a broker
    answers a few of Kafka's requests; every name's would make /metrics long for nothing)."""
    timers = _TIMERS.get(name)
    if timers is None:
        timers = _TIMERS[name] = (REQUEST_TIME.labels(name),
                                  *(REQUEST_PHASE_TIME.labels(name, phase) for phase in PHASES))
    return timers


#: The request counter of each api key, labelled by its number, looked up once rather than per request.
#: Any key outside Kafka's shares one label: frames naming made-up keys cannot grow the metrics without bound.
_REQUEST_COUNTERS = {key: REQUESTS.labels(str(key)) for key in _KNOWN_API_KEYS}
_UNKNOWN_COUNTER = REQUESTS.labels("unknown")


def _request_metrics(frame: Any) -> tuple[Any, str]:
    """The request counter and Kafka's request name of a frame's api key."""
    if len(frame) < 2:
        return _UNKNOWN_COUNTER, _UNKNOWN_NAME
    key = int.from_bytes(frame[:2], "big", signed=True)
    return _REQUEST_COUNTERS.get(key, _UNKNOWN_COUNTER), _REQUEST_NAMES.get(key, _UNKNOWN_NAME)


def _observe(times: RequestTimes, read_at: float, started: float, handled: float, queued: float,
             sent: float) -> None:
    """One answered request's total time and phases (see `REQUEST_PHASE_TIME`)."""
    total, request_queue, local, remote, response_queue, response_send = _timers(times.name)
    total.observe(sent - read_at)
    request_queue.observe(started - read_at)
    local.observe(max(handled - started - times.remote, 0.0))
    remote.observe(times.remote)
    response_queue.observe(queued - handled)
    response_send.observe(sent - queued)


#: Produce requests of one connection under way at once: appended in order, answered in order, the
#: later ones appended while the earlier wait for replication (see `allow_next_request`).
PIPELINED_PRODUCES = 16
#: Frame bytes of the Produce requests a connection may hold under way before it reads another frame.
PIPELINED_PRODUCE_BYTES = 1024 * 1024


class _Request:
    """One request of a connection, from its frame read until its answer is sent."""

    __slots__ = ("frame", "previous", "produce", "read_at", "released", "sent", "size")

    def __init__(self, frame: Any, previous: _Request | None, produce: bool, read_at: float) -> None:
        self.frame = frame
        self.size = len(frame)
        #: trio.current_time() when its frame was read.
        self.read_at = read_at
        #: The request read before it, whose answer goes out first.
        self.previous = previous
        self.produce = produce
        #: Set once the next request may start: its handler allowed it, or it is answered.
        self.released = trio.Event()
        #: Set once its answer is sent (or it failed).
        self.sent = trio.Event()


class _Pipeline:
    """The requests of one connection that are started and not yet answered, oldest first."""

    def __init__(self) -> None:
        self.answering: deque[_Request] = deque()
        self.bytes = 0
        #: What ends the connection: the first failure of its reader or of a request.
        self.error: Exception | None = None

    def admits(self, size: int) -> bool:
        """May a Produce of ``size`` frame bytes start while the others are under way? Only after
        Produce requests that allowed it, within `PIPELINED_PRODUCES` and `PIPELINED_PRODUCE_BYTES`."""
        last = self.answering[-1]
        return (last.produce and last.released.is_set() and len(self.answering) < PIPELINED_PRODUCES
                and self.bytes + size <= PIPELINED_PRODUCE_BYTES)

    def add(self, request: _Request) -> None:
        self.answering.append(request)
        self.bytes += request.size

    def done(self, request: _Request) -> None:
        request.released.set()
        request.sent.set()
        self.answering.remove(request)
        self.bytes -= request.size

    def fail(self, exc: Exception, nursery: trio.Nursery) -> None:
        if self.error is None:
            self.error = exc
        nursery.cancel_scope.cancel()


#: The request whose handler runs in this task, when it is a Produce (see `allow_next_request`).
_current_request: contextvars.ContextVar[_Request | None] = contextvars.ContextVar("kraftpy_request", default=None)


def allow_next_request() -> None:
    """Let the connection of the Produce request being handled start its next request now, if that
    is a Produce too: called once its batches are appended, before it waits for replication. The
    next one is appended meanwhile (so one round of the followers' fetches replicates both) and
    answered after it. Any other request waits until every answer before it is sent, as in Kafka."""
    request = _current_request.get()
    if request is not None:
        request.released.set()


async def _mute(conn: Connection) -> None:
    """A connection whose client went over a quota reads nothing for the throttle time (KIP-219)."""
    if conn.throttle_ms > 0:
        throttle, conn.throttle_ms = conn.throttle_ms, 0
        await trio.sleep(throttle / 1000)


class KafkaServer:
    def __init__(self, handler: Handler, *, max_frame_bytes: int, listener: str = "PLAINTEXT",
                 log: Any = None, queued_max_request_bytes: int = -1, connections_max_idle_ms: int = -1,
                 sasl_max_receive_bytes: int | None = None, write_threads: int = WRITE_THREADS) -> None:
        """``queued_max_request_bytes`` (-1: no bound), ``connections_max_idle_ms`` (-1: never) and
        ``sasl_max_receive_bytes`` (None: no bound of its own) are Kafka's ``queued.max.request.bytes``,
        ``connections.max.idle.ms`` and ``sasl.server.max.receive.size``: the largest frame a
        SASL_PLAINTEXT or SASL_SSL connection may send before it has authenticated (then
        ``max_frame_bytes``, socket.request.max.bytes). ``write_threads``: the worker threads that
        write large answers at once (see `THREADED_WRITE_BYTES`)."""
        self.handler = handler
        self.write_limiter = trio.CapacityLimiter(write_threads)
        self.max_frame_bytes = max_frame_bytes
        self.sasl_max_receive_bytes = sasl_max_receive_bytes
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
        conn.write_limiter = self.write_limiter
        if tls is not None:
            ssl_stream = await self._handshake(conn, stream, tls)
            if ssl_stream is None:
                return
            conn.stream = ssl_stream
            conn.principal = peer_principal(ssl_stream)
        framed = FramedStream(conn.stream, self.max_frame_bytes, budget=self.budget, idle_timeout=self.idle_timeout)
        if security_protocol.startswith("SASL_") and self.sasl_max_receive_bytes is not None:
            # Until it has authenticated, a client may not make the broker read (and hold) a frame of up
            # to socket.request.max.bytes: Kafka's sasl.server.max.receive.size.
            framed.set_max_frame_bytes(min(self.max_frame_bytes, self.sasl_max_receive_bytes),
                                       "sasl.server.max.receive.size")
            conn.on_authenticated = framed.restore_max_frame_bytes
        self.connections += 1
        CONNECTIONS.inc()
        pipeline = _Pipeline()
        try:
            async with framed.expiring_when_idle(), trio.open_nursery() as nursery:
                try:
                    await self._read_requests(conn, framed, pipeline, nursery)
                except Exception as exc:  # what ends the connection, raised again below
                    pipeline.fail(exc, nursery)
            if pipeline.error is not None:
                raise pipeline.error
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

    async def _read_requests(self, conn: Connection, framed: FramedStream, pipeline: _Pipeline,
                             nursery: trio.Nursery) -> None:
        """Read frames and start each request's task, in order: the next frame is read once the
        request before it is answered, or once it allowed the next to start (`allow_next_request`)
        and both are Produce requests, within the pipeline's bounds."""
        while True:
            await _mute(conn)
            # A connection with answers under way is not idle.
            frame = await framed.receive_frame(idle=not pipeline.answering)
            if frame is None:
                return  # the nursery still waits for the answers under way
            read_at = trio.current_time()
            BYTES_IN.inc(len(frame) + 4)
            produce = len(frame) >= 2 and frame[0] == 0 and frame[1] == 0  # api key 0
            while pipeline.answering and not (produce and pipeline.admits(len(frame))):
                await pipeline.answering[0].sent.wait()
            await _mute(conn)
            request = _Request(frame, pipeline.answering[-1] if pipeline.answering else None, produce, read_at)
            pipeline.add(request)
            if produce and (request.previous is not None or produce_acks(frame) not in (0, 1)):
                # acks=all may wait for the followers, and the next Produce may start meanwhile (or
                # this one starts while the one before it waits): a task of its own.
                nursery.start_soon(self._answer, conn, framed, pipeline, request, nursery)
                await request.released.wait()
            else:
                # Alone on the connection (every answer before it is sent), and answered without
                # waiting for anything else: handled in this task.
                await self._answer(conn, framed, pipeline, request, nursery)

    async def _answer(self, conn: Connection, framed: FramedStream, pipeline: _Pipeline, request: _Request,
                      nursery: trio.Nursery) -> None:
        """Handle one request and send its answer after the answer of the request before it."""
        frame = request.frame
        started = trio.current_time()
        counter, name = _request_metrics(frame)
        counter.inc()
        times = RequestTimes(name)
        request_times.set(times)
        _current_request.set(request if request.produce else None)
        try:
            parts = await self.handler(frame, conn)
            handled = trio.current_time()
            if request.produce:
                request.released.set()
            if request.previous is not None:
                await request.previous.sent.wait()
            queued = trio.current_time()
            if parts:
                await send_parts(conn.stream, parts, conn.write_limiter)
            _observe(times, request.read_at, started, handled, queued, trio.current_time())
        except Exception as exc:
            pipeline.fail(exc, nursery)
        finally:
            if not request.produce:
                conn.release()  # only a request alone on its connection holds file regions
            framed.release(frame)
            request.frame = None
            del frame
            pipeline.done(request)
