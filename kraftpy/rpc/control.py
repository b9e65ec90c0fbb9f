"""The control plane: msgpack request/response over size-prefixed frames.

Controllers talk Raft to each other, brokers register and heartbeat, and tools ask for the
quorum's status over this plane. Each frame holds one msgpack map:

    request   {"id": int, "api": str, "body": map}
    response  {"id": int, "body": map}
              {"id": int, "error": str, "message": str}      (the handler raised RpcError)

Requests on one connection are handled concurrently (a long-polling Fetch must not hold up a Vote)
and answered by id. A frame that is not such a map closes that connection and nothing else.

Like the Kafka port, the server's connections share one request budget (``queued.max.request.bytes``,
kraftpy.rpc.framing): a request's bytes count from the moment they are read until it is answered,
and a connection that would go over the budget stops reading. ``connections.max.idle.ms`` closes
connections on which nothing arrives; failing accepts back off (kraftpy.rpc.listeners).

TLS: a server given a `kraftpy.security.tls.ServerTls` (the controller listener over SSL) does the
handshake before reading a frame; one that fails (no certificate signed by the trust store when
``ssl.client.auth=required``, a plaintext peer) closes that connection with one log line, so a node
without a valid certificate cannot vote, fetch or register. A client given a `ClientTls` does the
handshake after connecting; a failed handshake is a failed connect (logged once per failure streak).

SASL (the controller listener over SASL_PLAINTEXT or SASL_SSL): a server given a
`kraftpy.security.controller_sasl.ControlSasl` serves nothing on a connection (after its TLS handshake)
until the peer authenticated, one frame at a time::

    AWAIT_HANDSHAKE --SaslHandshake {mechanism} (enabled)--> AWAIT_TOKEN --SaslAuthenticate {token}-->
        |                 answered {mechanisms}                  |  Challenge: {token, done: false}, again
        |                                                        |  Authenticated (and authorized):
        |                                                        |      {token, done: true} -> SERVING
        +-- any other request, an unknown mechanism, a failed exchange, a principal not allowed,
            or no authentication within SASL_AUTHENTICATION_TIMEOUT_S: an error answer, then close

Error answers use Kafka's names: ILLEGAL_SASL_STATE (a request before authentication),
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED (after ``connection.failed.authentication.delay.ms``,
with the mechanism's message), CLUSTER_AUTHORIZATION_FAILED (the principal may not speak the control
plane). Each closed connection is one log line with the peer, the mechanism and the principal the client
claimed, never a secret. The mechanism servers are the sans-IO ones of kraftpy.security (PLAIN, SCRAM).
A client given a `kraftpy.security.sasl.SaslLogin` authenticates right after connecting, within its
connect timeout; a refusal is a failed connect (`AuthenticationFailed`, backed off and logged once per
failure streak).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import trio

from kraftpy.fatal import FatalError
from kraftpy.logs import get_logger
from kraftpy.rpc.framing import FramedStream, FrameError, IdleConnection, RequestBudget
from kraftpy.rpc.listeners import Acceptor
from kraftpy.rpc.wire import WireError
from kraftpy.security.controller_sasl import ControlSasl
from kraftpy.security.listener_sasl import mechanism_server
from kraftpy.security.sasl import Authenticated, Challenge, SaslLogin, authenticate_client
from kraftpy.security.scram import ScramError
from kraftpy.security.tls import ANONYMOUS, handshake_failure, peer_principal

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
#: How long a TLS peer has to finish its handshake.
TLS_HANDSHAKE_TIMEOUT_S = 10.0
#: How long a peer of a SASL listener has to authenticate once connected (and, over TLS, handshaken).
SASL_AUTHENTICATION_TIMEOUT_S = 10.0
SASL_HANDSHAKE_API = "SaslHandshake"
SASL_AUTHENTICATE_API = "SaslAuthenticate"

Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
#: ``serve(framed, peer, principal)``: a connection that speaks the Kafka protocol (see `ControlServer`).
KafkaHandler = Callable[[FramedStream, str, str], Awaitable[None]]


class RpcError(Exception):
    """An error answer: ``code`` is a short name (Kafka's error names where one fits)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class ConnectionLost(RpcError):
    def __init__(self, message: str) -> None:
        super().__init__("NETWORK_EXCEPTION", message)


class AuthenticationFailed(ConnectionLost):
    """The server refused this client's SASL authentication (``code`` is its error, e.g.
    SASL_AUTHENTICATION_FAILED): a failed connect."""

    def __init__(self, code: str, message: str) -> None:
        RpcError.__init__(self, code, message)


class RequestTimeout(RpcError):
    def __init__(self, message: str) -> None:
        super().__init__("REQUEST_TIMED_OUT", message)


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


class ControlServer:
    """Serves one handler on a TCP listener; every connection lives in the server's nursery."""

    def __init__(self, handler: Handler, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 name: str = "control", queued_max_request_bytes: int = -1,
                 connections_max_idle_ms: int = -1, tls: Any = None, sasl: ControlSasl | None = None,
                 kafka: KafkaHandler | None = None, sasl_max_receive_bytes: int | None = None) -> None:
        """``queued_max_request_bytes`` (-1: no bound) and ``connections_max_idle_ms`` (-1: never)
        are Kafka's ``queued.max.request.bytes`` and ``connections.max.idle.ms``. ``kafka`` serves the
        connections whose first frame is a Kafka request (its api key's high byte, 0, where a control
        frame starts with a msgpack map) after the TLS handshake, with the peer and its TLS principal;
        such a connection does its own SASL exchange, in the Kafka protocol
        (kraftpy.metadata.controller_kafka). ``sasl_max_receive_bytes`` is Kafka's
        ``sasl.server.max.receive.size``: with ``sasl``, the largest frame a connection may send until it
        has authenticated (then ``max_frame_bytes``)."""
        self.handler = handler
        self.sasl_max_receive_bytes = sasl_max_receive_bytes
        self.kafka = kafka
        self.max_frame_bytes = max_frame_bytes
        #: The listener's `ServerTls` when it runs over TLS.
        self.tls = tls
        #: What the listener accepts when it runs over SASL (see the module doc).
        self.sasl = sasl
        self.log = get_logger(name)
        self.port: int | None = None
        #: Request bytes held by all connections of this server (queued.max.request.bytes).
        self.budget = RequestBudget(queued_max_request_bytes if queued_max_request_bytes > 0 else None)
        self.idle_timeout = connections_max_idle_ms / 1000 if connections_max_idle_ms >= 0 else None
        self.acceptor = Acceptor(self._handle_connection, self.log)

    async def serve(self, host: str, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; reports the bound port through ``task_status``."""
        listeners = await trio.open_tcp_listeners(port, host=host or None)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(self.acceptor.serve, listeners)
            task_status.started(self.port)

    async def _handle_connection(self, stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        principal = ANONYMOUS
        if self.tls is not None:
            ssl_stream = await self._handshake(stream)
            if ssl_stream is None:
                return
            stream = ssl_stream
            principal = peer_principal(ssl_stream)
        framed = FramedStream(stream, self.max_frame_bytes, budget=self.budget, idle_timeout=self.idle_timeout)
        if self.sasl is not None and self.sasl_max_receive_bytes is not None:
            # Lifted once the connection has authenticated (here, or by the Kafka handler).
            framed.set_max_frame_bytes(min(self.max_frame_bytes, self.sasl_max_receive_bytes),
                                       "sasl.server.max.receive.size")
        try:
            if self.kafka is not None and await self._served_as_kafka(framed, peer, principal):
                return
            if self.sasl is not None:
                if await self._authenticate(framed, peer) is None:
                    return
                framed.restore_max_frame_bytes()
            async with trio.open_nursery() as nursery:
                try:
                    await self._read_requests(framed, nursery)
                except FrameError as exc:
                    self.log.warning("closing connection", reason=str(exc))
                except IdleConnection as exc:
                    self.log.debug("closing idle connection", reason=str(exc))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                # The peer is gone or misbehaved: nobody is left to read pending answers.
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await framed.aclose()

    async def _served_as_kafka(self, framed: FramedStream, peer: str, principal: str) -> bool:
        """Look at the connection's first frame: a Kafka request's connection is served by the ``kafka``
        handler here (True once it is done with); a control-plane one is left for the caller (False)."""
        assert self.kafka is not None
        try:
            first = await framed.receive_frame()
            if first is None:
                return True
            framed.unread(first)
            if bytes(first[:1]) != b"\x00":
                return False
            await self.kafka(framed, peer, principal)
        except FrameError as exc:
            self.log.warning("closing connection", peer=peer, reason=str(exc))
        except IdleConnection as exc:
            self.log.debug("closing idle connection", peer=peer, reason=str(exc))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        return True

    async def _handshake(self, stream: trio.SocketStream) -> trio.SSLStream | None:
        ssl_stream = self.tls.wrap(stream)
        reason = f"no handshake within {TLS_HANDSHAKE_TIMEOUT_S:g}s"
        with trio.move_on_after(TLS_HANDSHAKE_TIMEOUT_S):
            try:
                await ssl_stream.do_handshake()
                return ssl_stream
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                reason = handshake_failure(exc)
        self.log.warning("closing connection: TLS handshake failed", peer=_peer(stream), reason=reason)
        return None

    async def _authenticate(self, framed: FramedStream, peer: str) -> str | None:
        """The SASL exchange a connection starts with: the principal, or None once the connection is
        to be closed (answered and logged here)."""
        assert self.sasl is not None
        # The failed-login delay is the server's own wait: it does not count against the peer.
        with trio.move_on_after(SASL_AUTHENTICATION_TIMEOUT_S + self.sasl.failed_authentication_delay_ms / 1000):
            try:
                return await self._sasl_exchange(framed, peer)
            except (FrameError, IdleConnection) as exc:
                self.log.warning("closing connection", peer=peer, reason=str(exc))
                return None
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
        self.log.warning("closing connection: SASL authentication failed", peer=peer,
                         reason=f"not authenticated within {SASL_AUTHENTICATION_TIMEOUT_S:g}s")
        return None

    async def _sasl_exchange(self, framed: FramedStream, peer: str) -> str | None:
        sasl = self.sasl
        assert sasl is not None
        mechanism: str | None = None
        server: Any = None
        while True:
            payload = await framed.receive_frame()
            if payload is None:
                return None
            framed.release(payload)
            try:
                msg = unpack(payload)
                req_id, api, body = msg["id"], msg["api"], msg["body"]
                if not isinstance(req_id, int) or not isinstance(api, str) or not isinstance(body, dict):
                    raise TypeError("id, api and body have the wrong types")
            except Exception as exc:
                raise FrameError(f"malformed control request: {exc}") from None
            del payload, msg
            if server is None:
                if api != SASL_HANDSHAKE_API:
                    await self._refuse(framed, req_id, "ILLEGAL_SASL_STATE",
                                       f"{api} before SASL authentication: send SaslHandshake first")
                    self.log.warning("closing connection: SASL authentication required", peer=peer, api=api[:64])
                    return None
                asked = body.get("mechanism")
                if asked not in sasl.mechanisms:
                    shown = asked[:64] if isinstance(asked, str) else repr(asked)[:64]
                    await self._refuse(framed, req_id, "UNSUPPORTED_SASL_MECHANISM",
                                       f"Unsupported SASL mechanism {shown} (enabled: {', '.join(sasl.mechanisms)})")
                    self.log.warning("closing connection: SASL mechanism not enabled", peer=peer, mechanism=shown,
                                     enabled=list(sasl.mechanisms))
                    return None
                mechanism = asked
                server = mechanism_server(mechanism, sasl.plain_users, sasl.lookup_scram)
                await framed.send_frame(pack({"id": req_id, "body": {"mechanisms": list(sasl.mechanisms)}}))
                continue
            token = body.get("token")
            if api != SASL_AUTHENTICATE_API or not isinstance(token, bytes):
                await self._refuse(framed, req_id, "ILLEGAL_SASL_STATE",
                                   f"{api} during SASL authentication: send SaslAuthenticate {{token}}")
                self.log.warning("closing connection: SASL authentication required", peer=peer, api=api[:64],
                                 mechanism=mechanism)
                return None
            outcome = server.respond(token)
            if isinstance(outcome, Challenge):
                await framed.send_frame(pack({"id": req_id, "body": {"token": outcome.data, "done": False}}))
                continue
            if isinstance(outcome, Authenticated):
                principal = f"User:{outcome.username}"
                refusal = sasl.authorize(principal, peer.rpartition(":")[0])
                if refusal is not None:
                    await self._refuse(framed, req_id, "CLUSTER_AUTHORIZATION_FAILED",
                                       f"{principal} may not use the controller listener")
                    self.log.warning("closing connection: control plane access denied", peer=peer,
                                     mechanism=mechanism, principal=principal, reason=refusal)
                    return None
                await framed.send_frame(pack({"id": req_id, "body": {"token": outcome.data, "done": True}}))
                self.log.debug("SASL authenticated", peer=peer, mechanism=mechanism, principal=principal)
                return principal
            await trio.sleep(sasl.failed_authentication_delay_ms / 1000)
            await self._refuse(framed, req_id, "SASL_AUTHENTICATION_FAILED", outcome.message)
            claimed = getattr(server, "username", None)
            self.log.warning("closing connection: SASL authentication failed", peer=peer, mechanism=mechanism,
                             principal=f"User:{claimed}" if claimed else None, reason=outcome.reason)
            return None

    async def _refuse(self, framed: FramedStream, req_id: int, code: str, message: str) -> None:
        """Answer a request with an error before the connection is closed (a peer gone already is fine)."""
        try:
            await framed.send_frame(pack({"id": req_id, "error": code, "message": message}))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _read_requests(self, framed: FramedStream, nursery: trio.Nursery) -> None:
        while True:
            payload = await framed.receive_frame()
            if payload is None:
                return
            size = len(payload)
            try:
                msg = unpack(payload)
                req_id, api, body = msg["id"], msg["api"], msg["body"]
                if not isinstance(req_id, int) or not isinstance(api, str) or not isinstance(body, dict):
                    raise TypeError("id, api and body have the wrong types")
            except Exception as exc:
                framed.release(size)
                raise FrameError(f"malformed control request: {exc}") from None
            del payload, msg
            nursery.start_soon(self._answer_and_release, framed, size, req_id, api, body)

    async def _answer_and_release(self, framed: FramedStream, size: int, req_id: int, api: str, body: dict) -> None:
        """Answer, then give the request's bytes back to the budget."""
        try:
            await self._answer(framed, req_id, api, body)
        finally:
            framed.release(size)

    async def _answer(self, framed: FramedStream, req_id: int, api: str, body: dict) -> None:
        try:
            result = await self.handler(api, body)
            reply = {"id": req_id, "body": result}
        except RpcError as exc:
            reply = {"id": req_id, "error": exc.code, "message": exc.message}
        except WireError as exc:  # a body that does not decode is the caller's fault, not ours
            reply = {"id": req_id, "error": "INVALID_REQUEST", "message": f"{api}: {exc}"}
        except FatalError as exc:  # the process is stopping on it (kraftpy.fatal): one line, no traceback
            reply = {"id": req_id, "error": "KAFKA_STORAGE_ERROR", "message": str(exc)}
        except Exception as exc:  # a bug in a handler answers the caller instead of killing the server
            self.log.exception("handler failed", api=api)
            reply = {"id": req_id, "error": "UNKNOWN_SERVER_ERROR", "message": repr(exc)}
        try:
            await framed.send_frame(pack(reply))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except (OSError, AttributeError):
        return "?"


class _Connection:
    def __init__(self, framed: FramedStream) -> None:
        self.framed = framed
        self.pending: dict[int, list] = {}
        self.closed = False
        self.error = ""

    def fail_all(self, reason: str) -> None:
        self.closed = True
        self.error = reason
        for slot in self.pending.values():
            slot[1] = ConnectionLost(reason)
            slot[0].set()
        self.pending.clear()


class ControlClient:
    """Requests to one peer, multiplexed by id over one connection that is re-opened on demand.

    Failed connects back off exponentially from ``retry_backoff`` to ``max_backoff`` seconds.
    The connection's reader task runs in ``nursery``: cancelling it is how the client shuts down.
    """

    def __init__(self, nursery: trio.Nursery, host: str, port: int, *, request_timeout: float = 2.0,
                 connect_timeout: float = 2.0, retry_backoff: float = 0.02, max_backoff: float = 1.0,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, tls: Any = None,
                 sasl: SaslLogin | None = None) -> None:
        """``tls``: the `kraftpy.security.tls.ClientTls` of a controller listener over TLS; ``sasl``: who
        to authenticate as on a controller listener over SASL."""
        self.nursery = nursery
        self.tls = tls
        self.sasl = sasl
        self.log = get_logger("control-client")
        #: The last connect failed its SASL authentication (logged once per streak of failures).
        self._authentication_failing = False
        self.host = host
        self.port = port
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.retry_backoff = retry_backoff
        self.max_backoff = max_backoff
        self.max_frame_bytes = max_frame_bytes
        self._conn: _Connection | None = None
        self._lock = trio.Lock()
        self._ids = itertools.count(1)
        self._next_attempt = -math.inf
        self._backoff = retry_backoff

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _connection(self) -> _Connection:
        async with self._lock:
            if self._conn is not None and not self._conn.closed:
                return self._conn
            wait = self._next_attempt - trio.current_time()
            if wait > 0:
                await trio.sleep(wait)
            try:
                with trio.fail_after(self.connect_timeout):
                    framed = FramedStream(await self._open_stream(), self.max_frame_bytes)
                    if self.sasl is not None:
                        await self._authenticate_or_close(framed)
            except AuthenticationFailed as exc:
                self._back_off()
                if not self._authentication_failing:
                    self._authentication_failing = True
                    self.log.warning("SASL authentication to a controller failed", peer=self.address,
                                     mechanism=self.sasl.mechanism if self.sasl else None, error=exc.code,
                                     reason=exc.message)
                raise
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError,
                    FrameError) as exc:
                self._back_off()
                raise ConnectionLost(f"cannot connect to {self.address}: {exc}") from None
            if self._authentication_failing:
                self._authentication_failing = False
                self.log.info("SASL authentication to a controller succeeded again", peer=self.address)
            self._backoff = self.retry_backoff
            self._next_attempt = -math.inf
            conn = _Connection(framed)
            self._conn = conn
            self.nursery.start_soon(self._read_responses, conn)
            return conn

    def _back_off(self) -> None:
        self._next_attempt = trio.current_time() + self._backoff
        self._backoff = min(self._backoff * 2, self.max_backoff)

    async def _authenticate_or_close(self, framed: FramedStream) -> None:
        try:
            await self._authenticate(framed)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(framed.stream)
            raise

    async def _authenticate(self, framed: FramedStream) -> None:
        """SaslHandshake, then SaslAuthenticate until the mechanism is done (one request at a time,
        before the connection carries anything else); raises `AuthenticationFailed` when refused."""
        login = self.sasl
        assert login is not None
        ids = self._ids

        def refused(code: str, message: str) -> AuthenticationFailed:
            return AuthenticationFailed(code, f"SASL authentication as {login.username!r} ({login.mechanism}) to "
                                              f"{self.address} failed: {message}")

        async def call(api: str, body: dict[str, Any]) -> dict[str, Any]:
            req_id = next(ids)
            await framed.send_frame(pack({"id": req_id, "api": api, "body": body}))
            payload = await framed.receive_frame()
            if payload is None:
                raise refused("SASL_AUTHENTICATION_FAILED", "the controller closed the connection")
            try:
                msg = unpack(payload)
                answer_id = msg["id"]
                error = msg.get("error")
                answer = msg.get("body", {})
            except Exception as exc:
                raise refused("SASL_AUTHENTICATION_FAILED", f"malformed answer: {exc}") from None
            if answer_id != req_id:
                raise refused("SASL_AUTHENTICATION_FAILED", f"answer for request {answer_id}, expected {req_id}")
            if error is not None:
                raise refused(str(error), f"{error}: {msg.get('message', '')}")
            return answer if isinstance(answer, dict) else {}

        await call(SASL_HANDSHAKE_API, {"mechanism": login.mechanism})

        async def step(token: bytes) -> bytes:
            answer = await call(SASL_AUTHENTICATE_API, {"token": token})
            data = answer.get("token")
            if not isinstance(data, bytes):
                raise refused("SASL_AUTHENTICATION_FAILED", "SaslAuthenticate answer without a token")
            return data

        try:
            await authenticate_client(login, step)
        except ScramError as exc:
            raise refused("SASL_AUTHENTICATION_FAILED", str(exc)) from None

    async def _open_stream(self) -> trio.abc.Stream:
        stream = await trio.open_tcp_stream(self.host, self.port)
        if self.tls is None:
            return stream
        try:
            return await self.tls.connect(stream, self.host)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            if isinstance(exc, trio.BrokenResourceError):
                raise OSError(f"TLS handshake failed: {handshake_failure(exc)}") from None
            raise

    async def _read_responses(self, conn: _Connection) -> None:
        reason = "connection closed by peer"
        try:
            while True:
                payload = await conn.framed.receive_frame()
                if payload is None:
                    break
                try:
                    msg = unpack(payload)
                    slot = conn.pending.pop(msg["id"], None)
                except Exception as exc:
                    reason = f"malformed response: {exc}"
                    break
                if slot is None:
                    continue  # the caller timed out and left
                if "error" in msg:
                    slot[1] = RpcError(msg["error"], msg.get("message", ""))
                else:
                    slot[1] = msg.get("body", {})
                slot[0].set()
        except (FrameError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            # Over TLS 1.3 a refused client certificate shows as the first read failing.
            reason = str(exc) or handshake_failure(exc)
        finally:
            conn.fail_all(reason)
            with trio.CancelScope(shield=True):
                await conn.framed.aclose()

    async def request(self, api: str, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer; raises RpcError (ConnectionLost, RequestTimeout,
        or the server's error)."""
        timeout = self.request_timeout if timeout is None else timeout
        req_id = next(self._ids)
        slot: list = [trio.Event(), None]
        conn: _Connection | None = None
        with trio.move_on_after(timeout) as scope:
            conn = await self._connection()
            conn.pending[req_id] = slot
            try:
                await conn.framed.send_frame(pack({"id": req_id, "api": api, "body": body}))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                conn.pending.pop(req_id, None)
                conn.fail_all(str(exc))
                raise ConnectionLost(f"{self.address}: {exc}") from None
            await slot[0].wait()
        if scope.cancelled_caught:
            if conn is not None:
                conn.pending.pop(req_id, None)
            raise RequestTimeout(f"{api} to {self.address} got no answer within {timeout:.3f}s")
        result = slot[1]
        if isinstance(result, Exception):
            raise result
        return result

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.fail_all("client closed")
            await conn.framed.aclose()
