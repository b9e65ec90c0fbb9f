"""SASL mechanisms: SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and PLAIN (RFC 4616), JAAS parsing."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.security.jaas import JaasConfigError, parse_jaas_config, parse_listener_jaas_config, plain_users
from kraftpy.security.plain import PlainServer, plain_message
from kraftpy.security.sasl import (
    MAX_TOKEN_BYTES,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    Authenticated,
    Challenge,
    Failed,
    invalid_credentials,
)
from kraftpy.security.scram import (
    AUTHZID_MISMATCH,
    INVALID_NONCE,
    UNKNOWN_USER,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    escape_saslname,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"

GENERIC_256 = invalid_credentials(SCRAM_SHA_256)


def rfc_server() -> ScramServer:
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pencil", salt=RFC_SALT, iterations=4096)
    return ScramServer(SCRAM_SHA_256, {"user": cred}.get, server_nonce=lambda: RFC_SERVER_NONCE)


def server_for(mechanism: str, users: dict[str, str]) -> ScramServer:
    creds = {name: ScramCredential.from_password(mechanism, pw) for name, pw in users.items()}
    return ScramServer(mechanism, creds.get)


def exchange(server: ScramServer, client: ScramClient):
    """Runs a whole exchange; returns the last outcome."""
    out = server.respond(client.first_message())
    if not isinstance(out, Challenge):
        return out
    out = server.respond(client.final_message(out.data))
    if isinstance(out, Authenticated):
        client.verify_server_final(out.data)
    return out


# --- SCRAM ---------------------------------------------------------------------------------------


def test_rfc7677_server_side_byte_for_byte():
    server = rfc_server()
    assert server.respond(RFC_CLIENT_FIRST) == Challenge(RFC_SERVER_FIRST)
    assert server.respond(RFC_CLIENT_FINAL) == Authenticated("user", RFC_SERVER_FINAL)
    assert server.done


def test_rfc7677_client_side_byte_for_byte():
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first_message() == RFC_CLIENT_FIRST
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify_server_final(RFC_SERVER_FINAL)
    with pytest.raises(ScramError, match="server signature"):
        client.verify_server_final(b"v=" + base64.b64encode(b"\x00" * 32))


def test_credential_keys_match_rfc7677():
    # StoredKey/ServerKey derived from the RFC's SaltedPassword; the server keeps no password.
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pencil", salt=RFC_SALT, iterations=4096)
    assert len(cred.stored_key) == len(cred.server_key) == 32
    assert "pencil" not in repr(cred) and "stored_key" not in repr(cred)


@pytest.mark.parametrize("iterations", [4095, 16385, 0])
def test_credential_iterations_bounded(iterations):
    with pytest.raises(ScramError, match="4096..16384"):
        ScramCredential.from_password(SCRAM_SHA_512, "pw", iterations=iterations)


def test_unknown_mechanism_refused():
    with pytest.raises(ScramError, match="unsupported SCRAM mechanism"):
        ScramCredential.from_password("SCRAM-SHA-1", "pw")


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_round_trip(mechanism):
    server = server_for(mechanism, {"alice": "alice-secret"})
    out = exchange(server, ScramClient(mechanism, "alice", "alice-secret"))
    assert isinstance(out, Authenticated) and out.username == "alice"


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_kafka_python_client_authenticates(mechanism):
    # An independent client implementation (kafka-python's) against our server, and a wrong password.
    from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

    for password, ok in (("alice-secret", True), ("nope", False)):
        server = server_for(mechanism, {"alice": "alice-secret"})
        client = KafkaPythonScramClient("alice", password, mechanism)
        challenge = server.respond(client.first_message())
        assert isinstance(challenge, Challenge)
        client.process_server_first_message(challenge.data)
        out = server.respond(client.final_message())
        if ok:
            assert isinstance(out, Authenticated) and out.username == "alice"
            client.process_server_final_message(out.data)  # raises if our signature were wrong
        else:
            assert out == Failed(invalid_credentials(mechanism), "Invalid client credentials")


def test_sha512_credential_on_sha256_server_is_unknown_user():
    cred = ScramCredential.from_password(SCRAM_SHA_512, "pw")
    server = ScramServer(SCRAM_SHA_256, {"alice": cred}.get)
    out = server.respond(ScramClient(SCRAM_SHA_256, "alice", "pw").first_message())
    assert out == Failed(GENERIC_256, UNKNOWN_USER)


def test_username_with_comma_and_equals_is_escaped():
    name = "a,b=c"
    assert escape_saslname(name) == "a=2Cb=3Dc"
    server = server_for(SCRAM_SHA_256, {name: "pw"})
    out = exchange(server, ScramClient(SCRAM_SHA_256, name, "pw"))
    assert out == Authenticated(name, out.data)


def test_wrong_password():
    server = server_for(SCRAM_SHA_512, {"alice": "right"})
    out = exchange(server, ScramClient(SCRAM_SHA_512, "alice", "wrong"))
    assert out == Failed(invalid_credentials(SCRAM_SHA_512), "Invalid client credentials")
    assert "wrong" not in out.message + out.reason
    assert server.done and server.username == "alice"


def test_unknown_user_fails_at_first_message():
    server = server_for(SCRAM_SHA_256, {"alice": "pw"})
    out = server.respond(ScramClient(SCRAM_SHA_256, "bob", "pw").first_message())
    assert out == Failed(GENERIC_256, UNKNOWN_USER)


def test_reauthentication_message():
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pw")
    server = ScramServer(SCRAM_SHA_256, {"alice": cred}.get, reauthentication=True)
    out = exchange(server, ScramClient(SCRAM_SHA_256, "alice", "nope"))
    assert out.message == (
        "Authentication failed during re-authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    )


def test_wrong_nonce_in_client_final():
    server = rfc_server()
    server.respond(RFC_CLIENT_FIRST)
    tampered = RFC_CLIENT_FINAL.replace(b"r=rOprNGfwEbeRWgbNEkqO%", b"r=rOprNGfwEbeRWgbNEkqX%")
    assert server.respond(tampered) == Failed(INVALID_NONCE, INVALID_NONCE)


def test_client_refuses_server_nonce_not_extending_its_own():
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="abc")
    with pytest.raises(ScramError, match="nonce"):
        client.final_message(b"r=xyzdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(ScramError, match="nonce"):
        client.final_message(b"r=abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


@pytest.mark.parametrize("iterations", [b"4095", b"16385", b"99999999999", b"-1", b"\xd9\xa4"])
def test_client_bounds_server_iterations(iterations):
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="abc")
    with pytest.raises(ScramError):
        client.final_message(b"r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=" + iterations)


def test_tampered_proof():
    server = rfc_server()
    server.respond(RFC_CLIENT_FIRST)
    proof = bytearray(base64.b64decode(RFC_CLIENT_FINAL.rsplit(b",p=", 1)[1]))
    proof[0] ^= 1
    tampered = RFC_CLIENT_FINAL.rsplit(b",p=", 1)[0] + b",p=" + base64.b64encode(bytes(proof))
    assert server.respond(tampered) == Failed(GENERIC_256, "Invalid client credentials")


def test_tampered_auth_message_fails_even_with_the_right_proof():
    # The proof signs the whole AuthMessage: an added extension in the client-final breaks it.
    server = rfc_server()
    server.respond(RFC_CLIENT_FIRST)
    without, proof = RFC_CLIENT_FINAL.rsplit(b",p=", 1)
    assert server.respond(without + b",x=1,p=" + proof) == Failed(GENERIC_256, "Invalid client credentials")


def test_channel_binding_refused():
    for first in (b"p=tls-unique,,n=user,r=abc", b"y,,n=user,r=abc"):
        out = rfc_server().respond(first)
        assert isinstance(out, Failed) and "channel binding is not supported" in out.reason
        assert out.message == GENERIC_256


def test_client_final_channel_binding_must_echo_gs2_header():
    server = rfc_server()
    server.respond(RFC_CLIENT_FIRST)
    other = RFC_CLIENT_FINAL.replace(b"c=biws", b"c=" + base64.b64encode(b"y,,"))
    out = server.respond(other)
    assert isinstance(out, Failed) and "channel binding" in out.reason


def test_authzid_equal_to_username_accepted_different_refused():
    server = server_for(SCRAM_SHA_256, {"alice": "pw"})
    out = exchange(server, ScramClient(SCRAM_SHA_256, "alice", "pw", authzid="alice"))
    assert isinstance(out, Authenticated)
    server = server_for(SCRAM_SHA_256, {"alice": "pw"})
    out = server.respond(ScramClient(SCRAM_SHA_256, "alice", "pw", authzid="admin").first_message())
    assert out == Failed(AUTHZID_MISMATCH, AUTHZID_MISMATCH)


def test_tokenauth_extension_refused_other_extensions_ignored():
    server = server_for(SCRAM_SHA_256, {"alice": "pw"})
    out = server.respond(ScramClient(SCRAM_SHA_256, "alice", "pw", extensions={"tokenauth": "true"}).first_message())
    assert isinstance(out, Failed) and "tokenauth" in out.reason
    server = server_for(SCRAM_SHA_256, {"alice": "pw"})
    out = exchange(server, ScramClient(SCRAM_SHA_256, "alice", "pw", extensions={"traceid": "42"}))
    assert isinstance(out, Authenticated)


def test_stored_credential_below_minimum_iterations_refused():
    good = ScramCredential.from_password(SCRAM_SHA_256, "pw")
    weak = ScramCredential(SCRAM_SHA_256, good.salt, 1024, good.stored_key, good.server_key)
    out = ScramServer(SCRAM_SHA_256, {"alice": weak}.get).respond(b"n,,n=alice,r=abc")
    assert out == Failed(GENERIC_256, "Iterations 1024 is less than the minimum 4096 for SCRAM-SHA-256")


def test_failing_credential_store_is_an_outcome():
    def lookup(name):
        raise OSError("store down")

    out = ScramServer(SCRAM_SHA_256, lookup).respond(b"n,,n=alice,r=abc")
    assert out == Failed(GENERIC_256, "Authentication failed: Credentials could not be obtained")


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"n,,",
        b"n,,r=abc,n=user",  # attributes out of order
        b"n,,n=user",  # no nonce
        b"n,,n=,r=abc",  # empty name
        b"n,,n=us=er,r=abc",  # bare '='
        b"n,,n=us=2Xer,r=abc",
        b"n,,n=u\x00ser,r=abc",
        b"n,,n=user,r=a b",  # nonce not printable
        b"n,,n=user,r=",
        b"n,,m=ext,n=user,r=abc",  # reserved mandatory extension
        b"n,x,n=user,r=abc",  # authzid without a=
        b"n,a=,n=user,r=abc",
        b"n,,n=user,r=abc,ext",  # extension without value
        b"n,,n=user,r=abc,1x=1",
        b"n,,n=user,r=abc,a=1,a=2",
        b"n,,n=\xff\xfe,r=abc",  # not UTF-8
        b"n,,n=user,r=" + b"a" * MAX_TOKEN_BYTES,  # oversized
    ],
)
def test_malformed_client_first(first):
    out = rfc_server().respond(first)
    assert isinstance(out, Failed) and out.message == GENERIC_256
    assert out.reason.startswith("Invalid SCRAM message")


@pytest.mark.parametrize(
    "final",
    [
        b"",
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,c=biws,p=AAAA",  # out of order
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",  # no proof
        b"c=bi!s,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",  # bad base64
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAA",  # bad padding
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=\xc3\xa9AAA",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",  # short proof
    ],
)
def test_malformed_client_final(final):
    server = rfc_server()
    assert isinstance(server.respond(RFC_CLIENT_FIRST), Challenge)
    out = server.respond(final)
    assert isinstance(out, Failed) and out.message == GENERIC_256


def test_finished_exchange_refuses_more_tokens():
    server = rfc_server()
    server.respond(RFC_CLIENT_FIRST)
    server.respond(RFC_CLIENT_FINAL)
    out = server.respond(RFC_CLIENT_FINAL)
    assert out == Failed(GENERIC_256, "SCRAM exchange already finished")


def test_server_final_error_reported_by_client():
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.final_message(RFC_SERVER_FIRST)
    with pytest.raises(ScramError, match="invalid-proof"):
        client.verify_server_final(b"e=invalid-proof")


_PREFIXES = st.sampled_from([b"", b"n,,", b"n,,n=user,r=", b"n,a=user,n=user,r=rOprNGfwEbeRWgbNEkqO,", b"c=biws,r="])


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.tuples(_PREFIXES, st.binary(max_size=200)), min_size=1, max_size=4), real_first=st.booleans())
def test_arbitrary_bytes_never_raise(tokens, real_first):
    server = rfc_server()
    if real_first:
        assert isinstance(server.respond(RFC_CLIENT_FIRST), Challenge)
    for prefix, body in tokens:
        out = server.respond(prefix + body)
        assert isinstance(out, Challenge | Failed | Authenticated)
        if isinstance(out, Failed):
            assert server.done


@settings(max_examples=300, deadline=None)
@given(token=st.binary(max_size=300))
def test_plain_arbitrary_bytes_never_raise(token):
    out = PlainServer({"alice": "pw"}).respond(token)
    assert isinstance(out, Failed) or out == Authenticated("alice")


# --- PLAIN ---------------------------------------------------------------------------------------


def test_plain_good_with_dict_and_callable():
    assert PlainServer({"alice": "s3cret"}).respond(plain_message("alice", "s3cret")) == Authenticated("alice")
    seen = []

    def check(user, pw):
        seen.append(user)
        return pw == "x"

    assert PlainServer(check).respond(plain_message("bob", "x", authzid="bob")) == Authenticated("bob")
    assert seen == ["bob"]


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (plain_message("alice", "wrong"), "Authentication failed: Invalid username or password"),
        (plain_message("mallory", "s3cret"), "Authentication failed: Invalid username or password"),
        (plain_message("alice", "s3cret", authzid="admin"), AUTHZID_MISMATCH),
        (plain_message("", "s3cret"), "Authentication failed: username not specified"),
        (plain_message("alice", ""), "Authentication failed: password not specified"),
        (b"alice\x00s3cret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\x00alice\x00s3cret\x00x\x00y", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\x00alice\x00s3\xffcret", invalid_credentials("PLAIN")),
        (b"\x00alice\x00" + b"x" * MAX_TOKEN_BYTES, invalid_credentials("PLAIN")),
    ],
)
def test_plain_refused(token, message):
    out = PlainServer({"alice": "s3cret"}).respond(token)
    assert isinstance(out, Failed) and out.message == message
    assert "s3cret" not in out.reason and "wrong" not in out.reason


def test_plain_failure_names_the_user_for_the_log():
    server = PlainServer({"alice": "s3cret"})
    assert isinstance(server.respond(plain_message("alice", "wrong")), Failed)
    assert server.username == "alice"


def test_plain_one_token_only():
    server = PlainServer({"alice": "s3cret"})
    assert server.respond(plain_message("alice", "s3cret")) == Authenticated("alice")
    assert isinstance(server.respond(plain_message("alice", "s3cret")), Failed)


# --- JAAS ----------------------------------------------------------------------------------------

PLAIN_JAAS = """
org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin" password="admin-secret"   // the broker's own login
    /* users this listener accepts */
    user_admin="admin-secret"
    user_alice='al"ice\\\\pw'
    user_bob=bob-pw;
"""


def test_jaas_plain_users():
    assert plain_users(PLAIN_JAAS) == {"admin": "admin-secret", "alice": 'al"ice\\pw', "bob": "bob-pw"}
    entry = parse_listener_jaas_config(PLAIN_JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.control_flag == "required"
    assert entry.options["username"] == "admin"
    assert "admin-secret" not in repr(entry)


def test_jaas_escapes_and_flags():
    (entry,) = parse_jaas_config('m.Mod OPTIONAL k="a\\"b\\nc" k2=$x-y_z.1;')
    assert entry.control_flag == "optional"
    assert entry.options == {"k": 'a"b\nc', "k2": "$x-y_z.1"}


def test_jaas_several_entries_but_a_listener_takes_one():
    text = "a.A required; b.B sufficient x=1;"
    assert [e.login_module for e in parse_jaas_config(text)] == ["a.A", "b.B"]
    with pytest.raises(JaasConfigError, match="contains 2 login modules, should be 1 module"):
        parse_listener_jaas_config(text)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "Login module not specified"),
        ("// only a comment", "Login module not specified"),
        ("a.A", "control flag not specified"),
        ("a.A;", "control flag not specified"),
        ("a.A mandatory;", "Invalid login module control flag 'mandatory'"),
        ("a.A required user_x=;", "Value not specified for key 'user_x'"),
        ("a.A required user_x;", "Value not specified for key 'user_x'"),
        ('a.A required user_x="pw"', "not terminated by semi-colon"),
        ('a.A required user_x="pw;', "unterminated quoted value"),
        ("a.A required /* x", "unterminated /\\* comment"),
        ("a.A required = x;", "expected an option name"),
    ],
)
def test_jaas_errors(text, error):
    with pytest.raises(JaasConfigError, match=error) as raised:
        parse_jaas_config(text)
    assert '"pw' not in str(raised.value) and "\n" not in str(raised.value)  # one line, no value
