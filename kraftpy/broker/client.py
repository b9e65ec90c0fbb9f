"""A minimal Kafka-protocol client connection on trio: one request at a time, answered in order.

Followers fetch from their leaders through it (``fetcher.py``), and tests use it to speak the
protocol to a broker directly. Frames are encoded and decoded by ``kraftpy.protocol.frames``; a
response's ``records`` fields are slices of the received frame, so fetched batches reach the
follower's log without another copy. Given a `kraftpy.security.tls.ClientTls`, ``connect`` does the
TLS handshake first (the inter-broker listener over SSL); given a `SaslLogin`, it then authenticates with
SaslHandshake v1 and SaslAuthenticate (PLAIN or SCRAM-SHA-256/512) before the first request.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import trio

from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.frames import DEFAULT_MAX_FRAME_SIZE, decode_response, encode_request, join_frame
from kraftpy.rpc.framing import FramedStream, FrameError, send_all_fast
from kraftpy.security.sasl import SaslLogin
from kraftpy.security.tls import handshake_failure

#: How long a TLS handshake with a broker may take.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class ConnectionClosed(Exception):
    """The broker closed the connection, or it broke."""


def client_sasl_login(values: Mapping[str, str]) -> SaslLogin | None:
    """The login of a client config (Kafka's client keys) whose security.protocol is SASL_PLAINTEXT or
    SASL_SSL: ``sasl.mechanism`` with the username and password of ``sasl.jaas.config``
    (PlainLoginModule or ScramLoginModule) or of ``sasl.username``/``sasl.password`` (librdkafka's
    keys). None for other protocols; ValueError naming the key (never a password) otherwise."""
    from kraftpy.security.jaas import JaasConfigError, parse_listener_jaas_config

    if values.get("security.protocol", "PLAINTEXT").strip().upper() not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return None
    mechanism = values.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise ValueError(f"sasl.mechanism={mechanism}: not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    username, password = values.get("sasl.username"), values.get("sasl.password")
    if values.get("sasl.jaas.config"):
        try:
            options = parse_listener_jaas_config(values["sasl.jaas.config"]).options
        except JaasConfigError as exc:
            raise ValueError(f"sasl.jaas.config=[hidden]: {exc}") from None
        username, password = options.get("username", username), options.get("password", password)
    if not username or password is None:
        raise ValueError(f"security.protocol={values['security.protocol']}: sasl.jaas.config (username=, password=) "
                         "or sasl.username and sasl.password are needed")
    return SaslLogin(mechanism, username, password)


class KafkaConnection:
    """One TCP connection to a broker. Not for concurrent use: callers send one request at a time."""

    def __init__(self, stream: trio.abc.Stream, client_id: str, max_frame_bytes: int) -> None:
        self._stream = stream
        self._framed = FramedStream(stream, max_frame_bytes)
        self.client_id = client_id
        self._correlation = itertools.count(1)

    @classmethod
    async def connect(
        cls, host: str, port: int, *, client_id: str = "kraftpy", max_frame_bytes: int = DEFAULT_MAX_FRAME_SIZE,
        tls: Any = None, sasl: SaslLogin | None = None,
    ) -> KafkaConnection:
        try:
            stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise ConnectionClosed(f"cannot connect to {host}:{port}: {exc}") from exc
        if tls is not None:
            try:
                with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                    stream = await tls.connect(stream, host)
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
                await trio.aclose_forcefully(stream)
                raise ConnectionClosed(f"TLS handshake with {host}:{port} failed: {handshake_failure(exc)}") from None
        conn = cls(stream, client_id, max_frame_bytes)
        if sasl is not None:
            try:
                await conn.authenticate(sasl)
            except BaseException:
                await conn.aclose()
                raise
        return conn

    async def authenticate(self, login: SaslLogin) -> None:
        """SaslHandshake v1 then SaslAuthenticate v1 until the mechanism is done; raises
        `ConnectionClosed` with the broker's error when refused."""
        from kraftpy.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
        from kraftpy.security.sasl import authenticate_client
        from kraftpy.security.scram import ScramError

        answer = await self.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=login.mechanism))
        if answer.error_code != ErrorCode.NONE:
            raise ConnectionClosed(f"SASL mechanism {login.mechanism} refused: {ErrorCode(answer.error_code).name} "
                                   f"(enabled: {', '.join(answer.mechanisms)})")

        async def step(token: bytes) -> bytes:
            reply = await self.request(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=token))
            if reply.error_code != ErrorCode.NONE:
                raise ConnectionClosed(f"SASL authentication as {login.username!r} failed: "
                                       f"{ErrorCode(reply.error_code).name}: {reply.error_message}")
            return bytes(reply.auth_bytes)

        try:
            await authenticate_client(login, step)
        except ScramError as exc:
            raise ConnectionClosed(f"SASL authentication as {login.username!r} failed: {exc}") from None

    async def send_raw(self, frame: bytes) -> None:
        """Write bytes as they are (tests send malformed frames with this)."""
        try:
            await send_all_fast(self._stream, frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionClosed(str(exc)) from exc

    async def receive_frame(self) -> memoryview:
        try:
            frame = await self._framed.receive_frame()
        except (trio.BrokenResourceError, trio.ClosedResourceError, FrameError) as exc:
            raise ConnectionClosed(str(exc)) from exc
        if frame is None:
            raise ConnectionClosed("the broker closed the connection")
        return frame

    async def request(self, api_key: int, api_version: int, request: Any) -> Any:
        """Send ``request`` and return the decoded response body."""
        correlation_id = next(self._correlation)
        await self.send_raw(join_frame(encode_request(api_key, api_version, correlation_id, self.client_id, request)))
        frame = await self.receive_frame()
        header, body = decode_response(api_key, api_version, frame)
        if header.correlation_id != correlation_id:
            raise ConnectionClosed(f"response for correlation id {header.correlation_id}, expected {correlation_id}")
        return body

    async def send_only(self, api_key: int, api_version: int, request: Any) -> None:
        """Send a request that gets no response (Produce with acks=0)."""
        correlation_id = next(self._correlation)
        await self.send_raw(join_frame(encode_request(api_key, api_version, correlation_id, self.client_id, request)))

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._stream.aclose()

    async def __aenter__(self) -> KafkaConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
