"""SASL_SSL: SCRAM-SHA-512 over TLS on a real `kraftpy server` process. confluent-kafka, kafka-python and
aiokafka produce (acks=all) and consume on a SASL_SSL listener, the admin user coming from bootstrap
metadata (`--add-scram`); a wrong password is refused there too. Certificates are made by trustme."""

from __future__ import annotations

import asyncio

import pytest

from kraftpy.config import load_config
from kraftpy.metadata.bootstrap import parse_add_scram, write_bootstrap
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
    from confluent_kafka import Consumer, Producer

    producer = Producer({**_confluent(node), "acks": "all"})
    for i in range(3):
        producer.produce("sasl-ssl-confluent", value=f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**_confluent(node), "group.id": "g1", "auto.offset.reset": "earliest"})
    consumer.subscribe(["sasl-ssl-confluent"])
    got = []
    for _ in range(120):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
        if len(got) == 3:
            break
    consumer.close()
    assert got == [b"m0", b"m1", b"m2"]


def test_kafka_python_over_sasl_ssl(node):
    from kafka import KafkaConsumer, KafkaProducer

    auth = {"bootstrap_servers": node.sasl_ssl, "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "admin", "sasl_plain_password": PASSWORD, "ssl_cafile": str(node.pki.ca_file)}
    producer = KafkaProducer(acks="all", **auth)
    for i in range(3):
        producer.send("sasl-ssl-kafka-python", f"m{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer("sasl-ssl-kafka-python", group_id="g2", auto_offset_reset="earliest",
                             consumer_timeout_ms=20000, **auth)
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 3:
            break
    consumer.close()
    assert got == [b"m0", b"m1", b"m2"]


def test_aiokafka_over_sasl_ssl(node):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run():
        auth = {"bootstrap_servers": node.sasl_ssl, "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin", "sasl_plain_password": PASSWORD,
                "ssl_context": create_ssl_context(cafile=str(node.pki.ca_file))}
        producer = AIOKafkaProducer(acks="all", **auth)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait("sasl-ssl-aiokafka", f"m{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("sasl-ssl-aiokafka", group_id="g3", auto_offset_reset="earliest", **auth)
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(30):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == 3:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [b"m0", b"m1", b"m2"]


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
