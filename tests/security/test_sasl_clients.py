"""SASL against a real `kraftpy` broker process: confluent-kafka (librdkafka), kafka-python and aiokafka
produce and consume over SASL_PLAINTEXT with SCRAM-SHA-512 and PLAIN; the first admin's SCRAM
credential comes from `kraftpy storage format --add-scram`; a wrong password is refused and logged
without it; a client skipping the handshake is closed and logged; re-authentication (KIP-368) on a
listener with connections.max.reauth.ms.

One controller and one broker. The broker's listeners: SASL_PLAINTEXT (also the inter-broker one, the
broker authenticating with PLAIN as user ``broker``) and REAUTH (SASL_PLAINTEXT with
connections.max.reauth.ms=1500).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kraftpy.config import load_config
from kraftpy.storage.formatter import format_dirs
from tests.helpers import forkserver
from tests.helpers.client_round_trip import (
    aiokafka_round_trip,
    confluent_round_trip,
    kafka_python_round_trip,
    values,
)
from tests.helpers.deployments import Deployment, Proc
from tests.helpers.processes import free_ports, write_properties

ADMIN_PASSWORD = "admin-secret"
BOB_PASSWORD = "bob-secret"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_bob="bob-secret";')


class SaslDeployment(Deployment):
    name = "sasl"

    def __init__(self, root: Path) -> None:
        super().__init__()
        controller_port, port, reauth_port = free_ports(3)
        common = {"controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
                  "controller.listener.names": "CONTROLLER", "num.partitions": 1,
                  "default.replication.factor": 1, "offsets.topic.replication.factor": 1,
                  "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
                  "group.initial.rebalance.delay.ms": 0}
        self.controller_config = write_properties(root / "controller.properties", {
            "process.roles": "controller", "node.id": 1, "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
            "log.dirs": root / "controller", **common})
        listeners = f"SASL_PLAINTEXT://127.0.0.1:{port},REAUTH://127.0.0.1:{reauth_port}"
        self.broker_config = write_properties(root / "broker.properties", {
            "process.roles": "broker", "node.id": 2, "listeners": listeners, "advertised.listeners": listeners,
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                              "REAUTH:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.reauth.plain.sasl.jaas.config": JAAS,
            "listener.name.reauth.connections.max.reauth.ms": 1500,
            "log.dirs": root / "broker", **common})
        self.controllers[1] = Proc("controller-1", ["controller", "-c", str(self.controller_config)], cond=self.cond)
        self.brokers[2] = Proc("broker-2", ["broker", "-c", str(self.broker_config)], cond=self.cond)
        self.bootstrap = f"127.0.0.1:{port}"
        self.reauth_bootstrap = f"127.0.0.1:{reauth_port}"
        self.port = port
        self.log_dir = root / "logs"

    def start(self) -> None:
        cluster_id = forkserver.run(["storage", "random-uuid"], check=True,
                                    capture_output=True, text=True).stdout.strip()
        formatted = forkserver.run(["storage", "format", "-c", str(self.controller_config), "-t",
                                    cluster_id, "--add-scram", f"SCRAM-SHA-512=[name=admin,password={ADMIN_PASSWORD}]"],
                                   capture_output=True, text=True)
        assert formatted.returncode == 0, formatted.stderr
        assert "SCRAM credentials for admin" in formatted.stdout
        broker = load_config(self.broker_config, ())
        format_dirs(broker.all_dirs, cluster_id, broker.node_id)
        self.controllers[1].start()
        self.brokers[2].start()
        self.brokers[2].wait_for("broker running")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SaslDeployment(tmp_path_factory.mktemp("sasl")) as deployment:
        yield deployment


def confluent(bootstrap: str, mechanism: str, user: str, password: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, **extra}


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("SCRAM-SHA-512", "admin", ADMIN_PASSWORD),
    ("PLAIN", "bob", BOB_PASSWORD),
])
def test_confluent_kafka_produces_and_consumes(cluster, mechanism, user, password):
    topic = f"confluent-{mechanism.lower()}"
    assert confluent_round_trip(confluent(cluster.bootstrap, mechanism, user, password), topic) == values(5)


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("SCRAM-SHA-512", "admin", ADMIN_PASSWORD),
    ("PLAIN", "bob", BOB_PASSWORD),
])
def test_kafka_python_produces_and_consumes(cluster, mechanism, user, password):
    auth = {"bootstrap_servers": cluster.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
    assert kafka_python_round_trip(auth, f"kafka-python-{mechanism.lower()}") == values(5)


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("SCRAM-SHA-512", "admin", ADMIN_PASSWORD),
    ("PLAIN", "bob", BOB_PASSWORD),
])
def test_aiokafka_produces_and_consumes(cluster, mechanism, user, password):
    auth = {"bootstrap_servers": cluster.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
    assert aiokafka_round_trip(auth, f"aiokafka-{mechanism.lower()}") == values(5)


def test_wrong_password_is_refused_and_logged_without_it(cluster):
    from confluent_kafka import KafkaError, Producer

    wrong = f"wrong-{uuid.uuid4().hex}"
    errors: list = []
    mark = cluster.brokers[2].mark()
    producer = Producer(confluent(cluster.bootstrap, "SCRAM-SHA-512", "admin", wrong,
                                  error_cb=errors.append, log_level=0))
    for _ in range(60):  # error callbacks are served by poll, which waits for them
        producer.poll(0.5)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    auth_errors = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth_errors and "invalid credentials with SASL mechanism SCRAM-SHA-512" in auth_errors[0].str()
    line = cluster.brokers[2].wait_for("closing connection", since=mark,
                                       where=lambda line: "SASL authentication failed" in line.get("reason", ""))
    assert "SCRAM-SHA-512" in line["reason"] and "User:admin" in line["reason"] and line.get("peer")
    assert not any(wrong in str(logged) for logged in cluster.brokers[2].lines[mark:])


def test_client_skipping_the_handshake_is_closed_and_logged(cluster):
    from kraftpy.protocol.api_keys import ApiKey
    from kraftpy.protocol.frames import encode_request, join_frame
    from kraftpy.protocol.messages import MetadataRequest

    mark = cluster.brokers[2].mark()
    frame = join_frame(encode_request(ApiKey.METADATA, 12, 1, "skipper", MetadataRequest(topics=None)))
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as sock:
        sock.sendall(frame)
        assert sock.recv(4) == b""  # closed without an answer
    cluster.brokers[2].wait_for("closing connection", since=mark, where=lambda line: line.get("reason") == (
        "Unexpected Kafka request of type Metadata during SASL handshake."))


def test_unknown_mechanism_is_refused(cluster):
    from kraftpy.protocol.api_keys import ApiKey
    from kraftpy.protocol.errors import ErrorCode
    from kraftpy.protocol.frames import decode_response, encode_request, join_frame
    from kraftpy.protocol.messages import SaslHandshakeRequest

    frame = join_frame(encode_request(ApiKey.SASL_HANDSHAKE, 1, 7, "t", SaslHandshakeRequest(mechanism="GSSAPI")))
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as sock:
        sock.sendall(frame)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        _, answer = decode_response(ApiKey.SASL_HANDSHAKE, 1, sock.recv(size, socket.MSG_WAITALL))
        assert sock.recv(1) == b""  # then closed
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_librdkafka_reauthenticates_before_its_session_expires(cluster):
    """On the REAUTH listener sessions last 1.5 s: librdkafka re-authenticates on the same connection
    (KIP-368) and keeps producing across several session lifetimes."""
    from confluent_kafka import Producer

    mark = cluster.brokers[2].mark()
    producer = Producer(confluent(cluster.reauth_bootstrap, "SCRAM-SHA-512", "admin", ADMIN_PASSWORD,
                                  acks="all"))
    delivered: list = []

    def produce() -> None:
        producer.produce("reauth", value=b"x", on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0

    def reauthentications() -> int:
        return sum(1 for line in cluster.brokers[2].lines[mark:]
                   if line.get("event") == "SASL re-authenticated" and line.get("listener") == "REAUTH")

    produce()
    cluster.wait_until(lambda: reauthentications() >= 2, "two re-authentications on the REAUTH listener", 30)
    produce()
    assert delivered == [None, None]
    assert not [line for line in cluster.brokers[2].lines[mark:] if "expired" in line.get("reason", "")]


def test_a_session_past_its_lifetime_is_closed(cluster):
    """A client that never re-authenticates (raw protocol here) is closed at its first request after
    its session ended, and the broker says why."""
    from kraftpy.protocol.api_keys import ApiKey
    from kraftpy.protocol.frames import decode_response, encode_request, join_frame
    from kraftpy.protocol.messages import MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest
    from kraftpy.security.plain import plain_message

    host, port = cluster.reauth_bootstrap.split(":")

    def call(sock, api_key, version, request, correlation):
        sock.sendall(join_frame(encode_request(api_key, version, correlation, "t", request)))
        head = sock.recv(4, socket.MSG_WAITALL)
        if not head:
            return None
        size = struct.unpack(">i", head)[0]
        return decode_response(api_key, version, sock.recv(size, socket.MSG_WAITALL))[1]

    mark = cluster.brokers[2].mark()
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        assert call(sock, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        answer = call(sock, ApiKey.SASL_AUTHENTICATE, 1,
                      SaslAuthenticateRequest(auth_bytes=plain_message("bob", BOB_PASSWORD)), 2)
        assert answer.error_code == 0 and answer.session_lifetime_ms == 1500
        assert call(sock, ApiKey.METADATA, 12, MetadataRequest(topics=None), 3) is not None
        # Wait (on the broker's log, not the clock) until a later session on this listener ended: some
        # other connection's 1.5 s lifetime passing is a witness that ours, opened before, has too.
        witness = socket.create_connection((host, int(port)), timeout=20)
        try:
            call(witness, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"), 1)
            call(witness, ApiKey.SASL_AUTHENTICATE, 1,
                 SaslAuthenticateRequest(auth_bytes=plain_message("bob", BOB_PASSWORD)), 2)
            # Requests one after the other until the broker closes the witness at its session's end.
            while call(witness, ApiKey.METADATA, 12, MetadataRequest(topics=None), 3) is not None:
                pass
        finally:
            witness.close()
        assert call(sock, ApiKey.METADATA, 12, MetadataRequest(topics=None), 4) is None
    cluster.brokers[2].wait_for("closing connection", since=mark,
                                where=lambda line: "SASL session of User:bob expired" in line.get("reason", ""))


def test_admin_tool_over_sasl_creates_a_user_who_can_produce(cluster, tmp_path):
    """`kraftpy configs` with a --command-config of Kafka's client keys authenticates with SCRAM as the
    bootstrapped admin and creates a SCRAM-SHA-256 user, who then produces with librdkafka."""
    command_config = tmp_path / "admin.properties"
    command_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{ADMIN_PASSWORD}";\n')
    base = [sys.executable, "-m", "kraftpy", "configs"]
    where = ["--bootstrap-server", cluster.bootstrap, "--command-config", str(command_config)]
    altered = subprocess.run([*base, "alter", "--entity-type", "users", "--entity-name", "carol", "--add-config",
                              "SCRAM-SHA-256=[iterations=8192,password=carol-secret]", *where],
                             capture_output=True, text=True)
    assert altered.returncode == 0, altered.stderr
    described = subprocess.run([*base, "describe", "--entity-type", "users", "--entity-name", "carol", *where],
                               capture_output=True, text=True)
    assert "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=8192" in \
        described.stdout.splitlines()
    got = confluent_round_trip(confluent(cluster.bootstrap, "SCRAM-SHA-256", "carol", "carol-secret"), "carol", 2)
    assert got == [b"m0", b"m1"]
    command_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                              "sasl.username=admin\nsasl.password=not-it\n")
    refused = subprocess.run([*base, "describe", "--entity-type", "users", *where], capture_output=True, text=True)
    assert refused.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "not-it" not in refused.stderr
