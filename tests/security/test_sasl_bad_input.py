"""Bad input to the SASL servers: any bytes, in any number of steps, get an outcome and never an
exception; a SCRAM exchange damaged anywhere after a good first message fails."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.security.oauthbearer import OAuthBearerServer, UnsecuredValidator
from kraftpy.security.plain import PlainServer
from kraftpy.security.sasl import Authenticated, Challenge, Failed
from kraftpy.security.scram import ScramClient, ScramCredential, ScramServer

CRED = ScramCredential.from_password("SCRAM-SHA-256", "pw", salt=b"salt")

tokens = st.lists(st.binary(max_size=300) | st.sampled_from([
    b"n,,n=alice,r=abc", b"n,,n=alice,r=abc,ext=1", b"c=biws,r=abc,p=AAAA", b"\x00alice\x00pw", b"\x01",
    b"n,,\x01auth=Bearer x.y.\x01\x01", b"n,a=alice,n=alice,r=" + b"x" * 9000]), min_size=1, max_size=4)


def servers():
    return [PlainServer({"alice": "pw"}), ScramServer("SCRAM-SHA-256", {"alice": CRED}.get),
            OAuthBearerServer(UnsecuredValidator())]


@settings(max_examples=300, deadline=None)
@given(tokens)
def test_any_tokens_get_an_outcome(sequence):
    for server in servers():
        for token in sequence:
            assert isinstance(server.respond(token), Challenge | Authenticated | Failed)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.integers(0, 255))
def test_a_damaged_client_final_message_fails(position, value):
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    server = ScramServer("SCRAM-SHA-256", {"alice": CRED}.get)
    first = server.respond(client.first_message())
    final = bytearray(client.final_message(first.data))
    if position >= len(final) or final[position] == value:
        return
    original = bytes(final)
    final[position] = value
    outcome = server.respond(bytes(final))
    if isinstance(outcome, Authenticated):
        # Only a base64 character differing in the unused low bits of the proof's last one (a
        # non-canonical encoding of the same proof) may still be accepted.
        import base64
        proof = lambda m: base64.b64decode(m.rsplit(b",p=", 1)[1])  # noqa: E731
        assert b",p=" in bytes(final) and proof(bytes(final)) == proof(original)
    else:
        assert isinstance(outcome, Failed)


def _unsecured_token(claims: bytes) -> bytes:
    import base64

    from kraftpy.security.oauthbearer import client_message

    def part(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    header = part(b'{"alg":"none"}')
    return client_message(f"{header}.{part(claims)}.")


@pytest.mark.parametrize("claims", [
    b'{"sub":"x","exp":Infinity}', b'{"sub":"x","exp":NaN}', b'{"sub":"x","exp":1e999}',
    b'{"sub":"x","exp":-Infinity}', b'{"sub":"x","exp":4102444800,"iat":NaN}',
    b'{"sub":"x","exp":1' + b"0" * 400 + b"}",
])
def test_an_oauthbearer_token_whose_times_are_not_finite_numbers_is_refused(claims):
    """Found by the handshake fuzzing (tests/fuzz/findings/oauthbearer-infinite-exp.json): an unsecured token
    with exp Infinity (1e999 parses as infinity too) or NaN never expires, so it was accepted; the session
    lifetime then took int(infinity) and the SaslAuthenticate handler failed with a traceback."""
    server = OAuthBearerServer(UnsecuredValidator())
    outcome = server.respond(_unsecured_token(claims))
    assert isinstance(outcome, Challenge) and outcome.data == b'{"status":"invalid_token"}'
    assert isinstance(server.respond(b"\x01"), Failed)
