"""OAUTHBEARER: the client message, the unsecured validator (Kafka's development default) and JWKS
signature validation (RS256, ES256) with keys made by the test."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from kraftpy.security.oauthbearer import (
    InvalidToken,
    JwksValidator,
    OAuthBearerServer,
    UnsecuredValidator,
    client_message,
    load_jwks,
)
from kraftpy.security.sasl import Authenticated, Challenge, Failed

NOW = 1_700_000_000.0


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def part(obj: dict) -> str:
    return b64(json.dumps(obj).encode())


def unsecured(**claims) -> str:
    return f"{part({'alg': 'none'})}.{part(claims)}."


def test_unsecured_token_names_the_principal_and_its_expiry():
    server = OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW)
    outcome = server.respond(client_message(unsecured(sub="alice", exp=NOW + 60, iat=NOW)))
    assert outcome == Authenticated("alice") and server.expires_at == NOW + 60


@pytest.mark.parametrize(("claims", "why"), [
    ({"sub": "alice", "exp": NOW - 1}, "expired"),
    ({"sub": "alice"}, "exp is missing"),
    ({"exp": NOW + 60}, "principal claim sub"),
    ({"sub": "alice", "exp": NOW + 60, "iat": NOW + 600}, "future"),
])
def test_invalid_unsecured_tokens(claims, why):
    with pytest.raises(InvalidToken, match=why):
        UnsecuredValidator().validate(unsecured(**claims), NOW)


def test_required_scope_and_signed_tokens_refused_by_the_unsecured_validator():
    validator = UnsecuredValidator.from_jaas_options({"unsecuredValidatorRequiredScope": "write"})
    with pytest.raises(InvalidToken, match="required scope write"):
        validator.validate(unsecured(sub="a", exp=NOW + 9, scope="read"), NOW)
    assert validator.validate(unsecured(sub="a", exp=NOW + 9, scope="read write"), NOW).scope == ("read", "write")
    with pytest.raises(InvalidToken, match="alg none"):
        validator.validate(f"{part({'alg': 'RS256'})}.{part({'sub': 'a', 'exp': NOW + 9})}.c2ln", NOW)


def test_invalid_token_gets_the_error_challenge_then_fails():
    server = OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW)
    challenge = server.respond(client_message(unsecured(sub="alice", exp=NOW - 5)))
    assert challenge == Challenge(b'{"status":"invalid_token"}')
    outcome = server.respond(b"\x01")
    assert isinstance(outcome, Failed) and outcome.message == '{"status":"invalid_token"}'
    assert "expired" in outcome.reason


@pytest.mark.parametrize("message", [b"", b"garbage", b"n,,\x01auth=Basic x\x01\x01", b"y,,\x01auth=Bearer t\x01\x01",
                                     b"n,,\x01auth=Bearer t", b"\xff" * 10, b"n,," + b"a" * 10000])
def test_malformed_messages_fail_without_raising(message):
    assert isinstance(OAuthBearerServer(UnsecuredValidator()).respond(message), (Failed, Challenge))


def test_authzid_must_be_the_principal():
    server = OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW)
    assert isinstance(server.respond(client_message(unsecured(sub="alice", exp=NOW + 9), authzid="bob")), Failed)


def _jwks(tmp_path, keys: list[dict]) -> str:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": keys}))
    return path.as_uri()


def _int(n: int) -> str:
    return b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def test_jwks_rs256_and_es256(tmp_path):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rsa_pub, ec_pub = rsa_key.public_key().public_numbers(), ec_key.public_key().public_numbers()
    url = _jwks(tmp_path, [
        {"kty": "RSA", "kid": "r1", "n": _int(rsa_pub.n), "e": _int(rsa_pub.e), "use": "sig"},
        {"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64(ec_pub.x.to_bytes(32, "big")),
         "y": b64(ec_pub.y.to_bytes(32, "big"))},
    ])
    validator = JwksValidator(load_jwks(url), expected_audience=("kafka",), expected_issuer="https://idp")
    claims = {"sub": "svc", "exp": NOW + 300, "iat": NOW, "aud": "kafka", "iss": "https://idp"}

    def rs256(header, payload, key=rsa_key):
        signed = f"{part(header)}.{part(payload)}"
        return f"{signed}.{b64(key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256()))}"

    def es256(header, payload):
        signed = f"{part(header)}.{part(payload)}"
        r, s = decode_dss_signature(ec_key.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signed}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    assert validator.validate(rs256({"alg": "RS256", "kid": "r1"}, claims), NOW).principal == "svc"
    assert validator.validate(es256({"alg": "ES256", "kid": "e1"}, claims), NOW).principal == "svc"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for token, why in [
        (rs256({"alg": "RS256", "kid": "r1"}, claims, other), "signature does not verify"),
        (rs256({"alg": "RS256", "kid": "zz"}, claims), "no key with kid"),
        (rs256({"alg": "RS256", "kid": "r1"}, {**claims, "aud": "other"}), "audience"),
        (rs256({"alg": "RS256", "kid": "r1"}, {**claims, "iss": "evil"}), "issuer"),
        (rs256({"alg": "RS256", "kid": "r1"}, {**claims, "exp": NOW - 100}), "expired"),
        (rs256({"alg": "RS256", "kid": "r1"}, {k: v for k, v in claims.items() if k != "iat"}), "iat"),
        (unsecured(**claims), "signed JWS"),
        (es256({"alg": "RS256", "kid": "e1"}, claims), "not accepted"),
    ]:
        with pytest.raises(InvalidToken, match=why):
            validator.validate(token, NOW)


def test_jwks_only_from_a_readable_file(tmp_path):
    with pytest.raises(ValueError, match="only file: URLs"):
        load_jwks("https://idp.example.com/jwks")
    with pytest.raises(ValueError, match="cannot read"):
        load_jwks((tmp_path / "missing.json").as_uri())


# -- on a real process ---------------------------------------------------------------------------


def test_confluent_kafka_with_unsecured_and_jwks_tokens(tmp_path):
    """`kraftpy server` with two SASL_PLAINTEXT listeners enabling OAUTHBEARER: DEV validates unsecured
    tokens (librdkafka's built-in unsecured JWT), IDP tokens signed by a key of a JWKS file (librdkafka's
    oauth_cb hands them over). A token signed by another key is refused."""
    import time

    from confluent_kafka import KafkaError, Producer

    from tests.helpers.deployments import Deployment, Proc, format_storage
    from tests.helpers.processes import free_ports

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pub = key.public_key().public_numbers()
    url = _jwks(tmp_path, [{"kty": "RSA", "kid": "k", "n": _int(pub.n), "e": _int(pub.e)}])
    dev, idp, controller = free_ports(3)
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {
        "process.roles": "broker,controller", "node.id": 1, "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"DEV://127.0.0.1:{dev},IDP://127.0.0.1:{idp},CONTROLLER://127.0.0.1:{controller}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,DEV:SASL_PLAINTEXT,IDP:SASL_PLAINTEXT",
        "inter.broker.listener.name": "DEV", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.dev.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="b" user_b="b";',
        "sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "listener.name.idp.sasl.oauthbearer.jwks.endpoint.url": url,
        "listener.name.idp.sasl.oauthbearer.expected.audience": "kafka",
        "log.dirs": tmp_path / "data", "num.partitions": 1, "default.replication.factor": 1,
        "offsets.topic.replication.factor": 1}.items()))

    class Node(Deployment):
        def start(self):
            format_storage([config])
            self.proc.start()
            self.proc.wait_for("broker running")

    node = Node()
    node.proc = Proc("oauth-node", ["server", "-c", str(config)], cond=node.cond)
    node.controllers = node.brokers = {1: node.proc}
    node.log_dir = tmp_path / "logs"

    def token(signing_key) -> tuple[str, float]:
        expiry = time.time() + 300
        claims = {"sub": "svc", "exp": expiry, "iat": time.time(), "aud": "kafka"}
        signed = f"{part({'alg': 'RS256', 'kid': 'k'})}.{part(claims)}"
        return f"{signed}.{b64(signing_key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256()))}", expiry

    def produce(conf: dict) -> list:
        errors: list = []
        producer = Producer({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                             "error_cb": errors.append, "log_level": 0, **conf})
        delivered: list = []
        producer.produce("oauth", value=b"v", on_delivery=lambda err, msg: delivered.append(err))
        for _ in range(40):
            producer.poll(0.5)
            if delivered or any(e.code() == KafkaError._AUTHENTICATION for e in errors):
                break
        return delivered if delivered else [e.code() for e in errors]

    with node:
        assert produce({"bootstrap.servers": f"127.0.0.1:{dev}", "enable.sasl.oauthbearer.unsecure.jwt": True,
                        "sasl.oauthbearer.config": "principal=alice"}) == [None]
        assert node.proc.find("SASL authenticated", where=lambda line: line.get("principal") == "User:alice")
        assert produce({"bootstrap.servers": f"127.0.0.1:{idp}", "oauth_cb": lambda _: token(key)}) == [None]
        assert node.proc.find("SASL authenticated", where=lambda line: line.get("principal") == "User:svc"
                              and line.get("listener") == "IDP")
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        refused = produce({"bootstrap.servers": f"127.0.0.1:{idp}", "oauth_cb": lambda _: token(other)})
        assert KafkaError._AUTHENTICATION in refused
        node.proc.wait_for("closing connection",
                           where=lambda line: "signature does not verify" in line.get("reason", ""))


def test_an_oauthbearer_jaas_config_that_does_not_parse_stops_the_broker_without_printing_it():
    from kraftpy.broker.settings import BrokerSettings
    from kraftpy.config import ConfigError, load_config

    secret = "s3cret-never-printed"
    props = ("process.roles=broker\nnode.id=4\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
             "controller.listener.names=CONTROLLER\nlisteners=SASL_PLAINTEXT://127.0.0.1:9092\n"
             "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT\n"
             "inter.broker.listener.name=SASL_PLAINTEXT\nlog.dirs=/tmp/unused\n"
             "sasl.enabled.mechanisms=OAUTHBEARER\n"
             "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
             'PlainLoginModule required username="b" password="b" user_b="b";\n'
             "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security."
             f'oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="x" secret="{secret}\n')
    with pytest.raises(ConfigError) as failed:
        BrokerSettings.from_config(load_config(text=props), cluster_id="MkU3OEVBNTcwNTJENDM2Qg")
    assert failed.value.key == "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"
    assert secret not in str(failed.value) and "unterminated" in failed.value.reason
