"""The SASL authentication gate and handlers (kraftpy.broker.apis.sasl) through `KafkaApis.handle`, on
an in-memory stream: what is served before authentication, PLAIN and SCRAM exchanges, failures (their
answer, delay and log line), unknown mechanisms, the v0 raw-token path and KIP-368 session expiry."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from kraftpy.broker.apis import KafkaApis
from kraftpy.broker.apis.sasl import SaslApi, SaslListener, SaslSettings
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata.records import UserScramCredentialRecord
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.frames import decode_response, encode_request, join_frame
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from kraftpy.rpc.kafka_server import ANONYMOUS, BadRequest, Connection
from kraftpy.security.plain import plain_message
from kraftpy.security.scram import ScramClient, ScramCredential
from tests.security.test_tls_config import Recorder

SECRET = "alice-secret"
_CRED = ScramCredential.from_password("SCRAM-SHA-512", SECRET, salt=b"fixed-salt")
ALICE_512 = UserScramCredentialRecord("alice", 2, _CRED.salt, _CRED.stored_key, _CRED.server_key, _CRED.iterations)


class Harness:
    def __init__(self, *, max_reauth_ms: int = 0, protocol: str = "SASL_PLAINTEXT") -> None:
        listener = SaslListener(("PLAIN", "SCRAM-SHA-512"), plain_users={"bob": "bob-secret", "eve": "eve-secret"},
                                max_reauth_ms=max_reauth_ms)
        self.sasl = SaslApi(SaslSettings({"SASL_PLAINTEXT": listener}, failed_authentication_delay_ms=100),
                            lambda name, code: ALICE_512 if (name, code) == ("alice", 2) else None)
        self.apis = KafkaApis(MetadataCache())
        self.apis.gate = self.sasl
        self.apis.register_all(self.sasl.handlers())
        self.apis.register(ApiKey.METADATA, self._metadata)
        self.client_side, server_side = trio.testing.memory_stream_pair()
        self.conn = Connection(server_side, "SASL_PLAINTEXT", protocol)
        self._correlation = 0

    async def _metadata(self, header, request, conn):
        from kraftpy.protocol.messages import MetadataResponse
        return MetadataResponse(brokers=[], topics=[])

    async def call(self, api_key: int, version: int, request):
        """The decoded answer the handler returned, or the one sent before `BadRequest` closed the
        connection (then re-raised, with it attached as ``exc.sent``)."""
        self._correlation += 1
        frame = join_frame(encode_request(api_key, version, self._correlation, "test", request))[4:]
        try:
            parts = await self.apis.handle(frame, self.conn)
        except BadRequest as exc:
            exc.sent = await self._sent(api_key, version)
            raise
        return decode_response(api_key, version, b"".join(bytes(p) for p in parts)[4:])[1]

    async def _sent(self, api_key: int, version: int):
        data = b""
        with trio.move_on_after(0.01):
            while True:
                chunk = await self.client_side.receive_some()
                if not chunk:
                    break
                data += chunk
        return decode_response(api_key, version, data[4:])[1] if data else None

    async def scram(self, password: str, version: int = 2):
        client = ScramClient("SCRAM-SHA-512", "alice", password)
        first = await self.call(ApiKey.SASL_AUTHENTICATE, version, SaslAuthenticateRequest(
            auth_bytes=client.first_message()))
        final = await self.call(ApiKey.SASL_AUTHENTICATE, version, SaslAuthenticateRequest(
            auth_bytes=client.final_message(first.auth_bytes)))
        client.verify_server_final(final.auth_bytes)
        return final


async def test_before_authentication_only_api_versions_and_sasl_are_served():
    h = Harness()
    versions = await h.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                       client_software_version="1"))
    advertised = {k.api_key for k in versions.api_keys}
    assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= advertised
    with pytest.raises(BadRequest, match="Unexpected Kafka request of type Metadata during SASL handshake"):
        await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))


async def test_scram_success_sets_the_principal_and_opens_the_gate():
    h = Harness()
    handshake = await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert handshake.error_code == ErrorCode.NONE and handshake.mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    assert h.conn.principal == ANONYMOUS
    final = await h.scram(SECRET)
    assert final.error_code == ErrorCode.NONE and final.session_lifetime_ms == 0
    assert h.conn.principal == "User:alice"
    assert (await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))).brokers == []


async def test_plain_success_and_a_plaintext_listener_is_not_gated():
    h = Harness()
    await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    answer = await h.call(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(
        auth_bytes=plain_message("bob", "bob-secret")))
    assert answer.error_code == ErrorCode.NONE and h.conn.principal == "User:bob"
    plain = Harness(protocol="PLAINTEXT")
    assert (await plain.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))).brokers == []
    refused = await plain.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert refused.error_code == ErrorCode.ILLEGAL_SASL_STATE


async def test_wrong_password_is_answered_after_the_delay_then_closed_without_the_secret(autojump_clock):
    h = Harness()
    await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    started = trio.current_time()
    with pytest.raises(BadRequest) as info:
        await h.call(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
            auth_bytes=plain_message("bob", "not-the-password")))
    assert trio.current_time() - started >= 0.1
    sent = info.value.sent
    assert sent.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert sent.error_message == "Authentication failed: Invalid username or password"
    line = str(info.value)
    assert "PLAIN" in line and "User:bob" in line and "not-the-password" not in line
    assert h.conn.principal == ANONYMOUS


async def test_wrong_scram_password_fails_with_kafkas_message(autojump_clock):
    h = Harness()
    await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    with pytest.raises(BadRequest) as info:
        await h.scram("wrong")
    assert info.value.sent.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")
    assert "User:alice" in str(info.value) and "SCRAM-SHA-512" in str(info.value)


async def test_unknown_mechanism_is_refused_with_the_enabled_list():
    h = Harness()
    with pytest.raises(BadRequest, match="Unsupported SASL mechanism 'GSSAPI'") as info:
        await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
    assert info.value.sent.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert info.value.sent.mechanisms == ["PLAIN", "SCRAM-SHA-512"]


async def test_authenticate_without_handshake_is_an_illegal_state():
    h = Harness()
    with pytest.raises(BadRequest) as info:
        await h.call(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=b"x"))
    assert info.value.sent.error_code == ErrorCode.ILLEGAL_SASL_STATE


async def test_v0_handshake_takes_raw_tokens():
    h = Harness()
    assert (await h.call(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))).error_code == 0
    parts = await h.apis.handle(plain_message("bob", "bob-secret"), h.conn)
    assert b"".join(bytes(p) for p in parts) == b"\x00\x00\x00\x00"
    assert h.conn.principal == "User:bob"
    assert (await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))).brokers == []


async def test_expired_session_is_closed_unless_reauthenticated(autojump_clock):
    h = Harness(max_reauth_ms=1000)
    await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    final = await h.scram(SECRET, version=1)
    assert final.session_lifetime_ms == 1000
    await trio.sleep(0.5)
    await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
    # Re-authentication on the same connection before the session ends starts a new one.
    await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    await h.scram(SECRET, version=1)
    await trio.sleep(0.9)
    await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
    await trio.sleep(0.2)
    with pytest.raises(BadRequest, match="SASL session of User:alice expired"):
        await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))


async def test_reauthentication_cannot_change_the_principal(autojump_clock):
    h = Harness(max_reauth_ms=1000)
    await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    await h.call(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=plain_message("bob", "bob-secret")))
    await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    with pytest.raises(BadRequest) as info:
        await h.call(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(
            auth_bytes=plain_message("eve", "eve-secret")))
    assert info.value.sent.error_message == "Cannot change principals during re-authentication from User:bob: User:eve"
    assert h.conn.principal == "User:bob"


async def test_describe_user_scram_credentials_from_the_image():
    """Mechanisms and iterations only; every user when none is named; Kafka's per-user errors."""
    from kraftpy.broker.apis.scram_credentials import ScramCredentialsApi
    from kraftpy.metadata.delta import replay_records
    from kraftpy.metadata.image import EMPTY_IMAGE
    from kraftpy.protocol.messages import DescribeUserScramCredentialsRequest as Req

    cache = MetadataCache()
    cache.set_image(replay_records(EMPTY_IMAGE, [ALICE_512]))
    api = ScramCredentialsApi(cache, channel=None)
    everyone = await api.handle_describe_user_scram_credentials(None, Req(users=None), None)
    assert [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in everyone.results] == [("alice", 0, [(2, 4096)])]
    named = await api.handle_describe_user_scram_credentials(None, Req(users=[
        Req.UserName(name="bob"), Req.UserName(name="alice"), Req.UserName(name="alice")]), None)
    assert [(r.user, r.error_code) for r in named.results] == [
        ("bob", ErrorCode.RESOURCE_NOT_FOUND), ("alice", ErrorCode.DUPLICATE_RESOURCE)]


# -- sasl.server.max.receive.size: the frame limit before authentication --------------------------------------


class _Listener:
    def __init__(self, name: str) -> None:
        self.name, self.host, self.port, self.security_protocol, self.tls = name, "127.0.0.1", 0, name, None


async def _exchange(stream: trio.SocketStream, api_key: int, version: int, correlation: int, request):
    await stream.send_all(bytes(join_frame(encode_request(api_key, version, correlation, "test", request))))
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = await stream.receive_some()
        assert chunk, "the connection was closed"
        data += chunk
    return decode_response(api_key, version, data[4:])[1]


async def _closed(stream: trio.SocketStream) -> bool:
    try:
        return await stream.receive_some() == b""
    except trio.BrokenResourceError:
        return True


async def test_an_unauthenticated_connection_may_not_send_a_frame_over_sasl_server_max_receive_size():
    """Kafka's sasl.server.max.receive.size: before a SASL connection has authenticated, a size prefix
    over it closes the connection before any of the frame is read; once authenticated, frames up to
    socket.request.max.bytes are read. A PLAINTEXT listener is not bounded by it."""
    from kraftpy.rpc.kafka_server import KafkaServer

    h = Harness()
    log = Recorder()
    server = KafkaServer(h.apis.handle, max_frame_bytes=8 << 20, log=log, sasl_max_receive_bytes=64 * 1024)
    big = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t" * 200) for _ in range(1000)])
    async with trio.open_nursery() as nursery:
        ports = await nursery.start(server.serve_listeners, [_Listener("SASL_PLAINTEXT"), _Listener("PLAINTEXT")])
        # Unauthenticated: a 100 MiB prefix is refused at once, nothing of it is awaited.
        stream = await trio.open_tcp_stream("127.0.0.1", ports["SASL_PLAINTEXT"])
        await stream.send_all((100 << 20).to_bytes(4, "big") + b"\x00\x24\x00\x01")
        with trio.fail_after(5):
            assert await _closed(stream)
        assert any("sasl.server.max.receive.size=65536" in fields.get("reason", "") for _, fields in log.lines)
        # A frame over the bound, but within socket.request.max.bytes, is refused too before authentication.
        stream = await trio.open_tcp_stream("127.0.0.1", ports["SASL_PLAINTEXT"])
        try:
            await stream.send_all(bytes(join_frame(encode_request(ApiKey.METADATA, 12, 1, "test", big))))
        except trio.BrokenResourceError:
            pass  # closed while the rest was still being sent
        with trio.fail_after(5):
            assert await _closed(stream)
        # Authenticated, the same frame is served.
        stream = await trio.open_tcp_stream("127.0.0.1", ports["SASL_PLAINTEXT"])
        await _exchange(stream, ApiKey.SASL_HANDSHAKE, 1, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        answer = await _exchange(stream, ApiKey.SASL_AUTHENTICATE, 1, 2, SaslAuthenticateRequest(
            auth_bytes=plain_message("bob", "bob-secret")))
        assert answer.error_code == ErrorCode.NONE
        assert (await _exchange(stream, ApiKey.METADATA, 12, 3, big)).brokers == []
        # A PLAINTEXT listener reads it without authentication (no SASL there).
        stream = await trio.open_tcp_stream("127.0.0.1", ports["PLAINTEXT"])
        assert (await _exchange(stream, ApiKey.METADATA, 12, 1, big)).brokers == []
        nursery.cancel_scope.cancel()
