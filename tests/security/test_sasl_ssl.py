"""SASL_SSL: SCRAM-SHA-512 over TLS on a real `kraftpy server` process. confluent-kafka, kafka-python and
aiokafka produce (acks=all) and consume on a SASL_SSL listener, the admin user coming from bootstrap
metadata (`--add-scram`); a wrong password is refused there too. Certificates are made by trustme."""

from __future__ import annotations

import pytest

from kraftpy.config import load_config
from kraftpy.metadata.bootstrap import parse_add_scram, write_bootstrap
from tests.helpers.client_round_trip import (
    aiokafka_round_trip,
    confluent_round_trip,
    kafka_python_round_trip,
    values,
)
from tests.helpers.deployments import format_storage
from tests.helpers.processes import free_ports
from tests.security.tls_support import Pki, TlsNode

PASSWORD = "admin-secret"


class SaslSslNode(TlsNode):
    def __init__(self, root, pki):
        (port,) = free_ports(1)
        self.sasl_ssl = f"127.0.0.1:{port}"
        super().__init__(root, pki, settings={"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
        text = self.config.read_text()
        lines = []
        for line in text.splitlines():
            if line.startswith("listeners="):
                line += f",SASL_SSL://{self.sasl_ssl}"
            elif line.startswith("listener.security.protocol.map="):
                line += ",SASL_SSL:SASL_SSL"
            lines.append(line)
        self.config.write_text("\n".join(lines) + "\n")

    def start(self):
        format_storage([self.config])
        config = load_config(self.config, ())
        write_bootstrap(config.metadata_log_dir, [parse_add_scram(f"SCRAM-SHA-512=[name=admin,password={PASSWORD}]")])
        self.proc.start()
        self.proc.wait_for("broker running")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    root = tmp_path_factory.mktemp("sasl-ssl")
    pki = Pki(root / "pki")
    with SaslSslNode(root / "node", pki) as deployment:
        deployment.pki = pki
        yield deployment


def _confluent(node, password=PASSWORD, **extra):
    return {"bootstrap.servers": node.sasl_ssl, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin", "sasl.password": password, "ssl.ca.location": str(node.pki.ca_file), **extra}


def test_confluent_kafka_over_sasl_ssl(node):
    assert confluent_round_trip(_confluent(node), "sasl-ssl-confluent", 3) == values(3)


def _auth(node) -> dict:
    return {"bootstrap_servers": node.sasl_ssl, "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "admin", "sasl_plain_password": PASSWORD}


def test_kafka_python_over_sasl_ssl(node):
    auth = {**_auth(node), "ssl_cafile": str(node.pki.ca_file)}
    assert kafka_python_round_trip(auth, "sasl-ssl-kafka-python", 3) == values(3)


def test_aiokafka_over_sasl_ssl(node):
    from aiokafka.helpers import create_ssl_context

    auth = {**_auth(node), "ssl_context": lambda: create_ssl_context(cafile=str(node.pki.ca_file))}
    assert aiokafka_round_trip(auth, "sasl-ssl-aiokafka", 3) == values(3)


def test_wrong_password_over_sasl_ssl(node):
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    mark = node.proc.mark()
    producer = Producer(_confluent(node, "wrong-one", error_cb=errors.append, log_level=0))
    for _ in range(60):
        producer.poll(0.5)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors)
    line = node.proc.wait_for("closing connection", since=mark,
                              where=lambda line: "SASL authentication failed" in line.get("reason", ""))
    assert "wrong-one" not in str(line)
