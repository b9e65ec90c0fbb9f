"""Re-authentication (KIP-368) as Kafka's broker allows it, through the SASL gate with a raw client
(kraftpy.broker.apis.sasl on an in-memory stream, trio's virtual clock): while a re-authentication is
under way only SaslAuthenticate is served and anything else closes the connection; after the session
expired only a SaslHandshake (a re-authentication) is; a listener whose sessions never expire and a
second re-authentication within a second refuse the handshake with ILLEGAL_SASL_STATE and keep the
session."""

from __future__ import annotations

import pytest
import trio

from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from kraftpy.rpc.kafka_server import BadRequest
from kraftpy.security.plain import plain_message
from tests.security.test_sasl_gate import SECRET, Harness


async def _login_scram(h: Harness) -> None:
    await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert (await h.scram(SECRET, version=1)).error_code == ErrorCode.NONE


async def test_a_request_during_reauthentication_closes_the_connection(autojump_clock):
    h = Harness(max_reauth_ms=5000)
    await _login_scram(h)
    await trio.sleep(2)
    assert (await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
            ).error_code == ErrorCode.NONE
    # The session has 3 s left, but a re-authentication is under way: Kafka serves nothing else now.
    with pytest.raises(BadRequest, match="Unexpected Kafka request of type Metadata during SASL re-authentication"):
        await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
    assert h.conn.principal == "User:alice"


async def test_a_reauthentication_ends_with_requests_served_again(autojump_clock):
    h = Harness(max_reauth_ms=5000)
    await _login_scram(h)
    await trio.sleep(6)  # expired: only a SaslHandshake is taken now, and it starts a re-authentication
    await _login_scram(h)
    assert (await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))).brokers == []


@pytest.mark.parametrize("api_key, request_", [
    (ApiKey.API_VERSIONS, ApiVersionsRequest(client_software_name="t", client_software_version="1")),
    (ApiKey.SASL_AUTHENTICATE, SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abc")),
])
async def test_after_expiry_anything_but_a_handshake_closes(autojump_clock, api_key, request_):
    h = Harness(max_reauth_ms=1000)
    await _login_scram(h)
    await trio.sleep(1.5)
    with pytest.raises(BadRequest, match="expired"):
        await h.call(api_key, 1, request_)


async def test_no_reauthentication_where_sessions_do_not_expire_nor_twice_in_a_second(autojump_clock):
    never = Harness(max_reauth_ms=0)
    await never.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    await never.call(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=plain_message("bob", "bob-secret")))
    for version, mechanism in ((1, "PLAIN"), (0, "PLAIN"), (1, "GSSAPI")):  # whatever the handshake asks
        refused = await never.call(ApiKey.SASL_HANDSHAKE, version, SaslHandshakeRequest(mechanism=mechanism))
        assert refused.error_code == ErrorCode.ILLEGAL_SASL_STATE
    # The session is untouched: requests are served, and no re-authentication is under way.
    assert (await never.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))).brokers == []

    h = Harness(max_reauth_ms=5000)
    await _login_scram(h)
    await _login_scram(h)  # the first re-authentication
    await trio.sleep(0.5)
    again = await h.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert (await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))).brokers == []
    await trio.sleep(0.6)
    await _login_scram(h)  # a second later it is allowed again
    assert (await h.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))).brokers == []
