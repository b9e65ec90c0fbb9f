"""Kafka clients over TLS on a real kraftpy process serving a PLAINTEXT, an SSL and a mutual-TLS
listener: confluent-kafka, kafka-python and aiokafka produce and consume on each TLS listener, told
that listener's endpoints; refused handshakes (expired certificate, unknown CA, no certificate where one
is required, a plaintext client) are logged and leave the broker serving; the admin CLI over SSL."""

from __future__ import annotations

import json
import uuid

import pytest
import trio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers import forkserver
from tests.helpers.client_round_trip import aiokafka_round_trip, confluent_round_trip, kafka_python_round_trip
from tests.helpers.deployments import create_topics
from tests.security.tls_support import Pki, TlsNode

RECORDS = 20
HANDSHAKE_FAILED = "closing connection: TLS handshake failed"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    with TlsNode(tmp_path_factory.mktemp("node"), pki, {"ssl.reload.check.interval.ms": 200}) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def alice(pki):
    return pki.issue("alice", common_name="alice")


def new_topic(node: TlsNode) -> str:
    name = f"tls-{uuid.uuid4().hex[:8]}"
    create_topics(node.bootstrap, [NewTopic(name, 1, 1)], deployment=node)
    return name


def confluent_config(node: TlsNode, pki: Pki, listener: str, keystore=None) -> dict:
    conf = {"bootstrap.servers": node.endpoints[listener], "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_file)}
    if keystore is not None:
        conf.update({"ssl.certificate.location": str(keystore), "ssl.key.location": str(keystore)})
    return conf


def run_confluent(node, pki, listener, keystore, topic) -> list[bytes]:
    conf = confluent_config(node, pki, listener, keystore)
    brokers = AdminClient(conf).list_topics(timeout=20).brokers
    assert f"{brokers[1].host}:{brokers[1].port}" == node.endpoints[listener]  # this listener's endpoint
    return confluent_round_trip(conf, topic, RECORDS, prefix=f"{listener}-")


def run_kafka_python(node, pki, listener, keystore, topic) -> list[bytes]:
    conf = {"bootstrap_servers": node.endpoints[listener], "security_protocol": "SSL",
            "ssl_cafile": str(pki.ca_file)}
    if keystore is not None:
        conf.update({"ssl_certfile": str(keystore), "ssl_keyfile": str(keystore)})

    def told_this_listener(producer) -> None:
        assert {f"{b.host}:{b.port}" for b in producer._metadata.brokers()} == {node.endpoints[listener]}

    return kafka_python_round_trip(conf, topic, RECORDS, prefix=f"{listener}-", check_producer=told_this_listener)


def run_aiokafka(node, pki, listener, keystore, topic) -> list[bytes]:
    from aiokafka.helpers import create_ssl_context

    def context():
        return create_ssl_context(cafile=str(pki.ca_file), certfile=str(keystore) if keystore else None,
                                  keyfile=str(keystore) if keystore else None)

    def told_this_listener(producer) -> None:
        assert {f"{b.host}:{b.port}" for b in producer.client.cluster.brokers()} == {node.endpoints[listener]}

    conf = {"bootstrap_servers": node.endpoints[listener], "security_protocol": "SSL", "ssl_context": context}
    return aiokafka_round_trip(conf, topic, RECORDS, prefix=f"{listener}-", check_producer=told_this_listener)


CLIENTS = {"confluent-kafka": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
@pytest.mark.parametrize("client", list(CLIENTS))
def test_clients_produce_and_consume_over_tls(node, pki, alice, client, listener):
    topic = new_topic(node)
    keystore = alice if listener == "MTLS" else None
    got = CLIENTS[client](node, pki, listener, keystore, topic)
    assert got == [f"{listener}-{i}".encode() for i in range(RECORDS)]


async def _handshake(port: int, context) -> None:
    """Connect, handshake and ask something; the refusal may come as the first read (TLSv1.3)."""
    stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context)
    try:
        await stream.send_all(b"\x00\x00\x00\x08\x00\x12\x00\x03\x00\x00\x00\x01")
        if not await stream.receive_some(4):
            raise trio.BrokenResourceError("closed")
    finally:
        await trio.aclose_forcefully(stream)


def refused(node: TlsNode, listener: str, context, reason: str) -> None:
    mark = node.proc.mark()
    with pytest.raises((trio.BrokenResourceError, OSError)):
        trio.run(_handshake, int(node.endpoints[listener].rsplit(":", 1)[1]), context)
    line = node.proc.wait_for(HANDSHAKE_FAILED, since=mark, listener=listener, timeout=20)
    assert reason.lower() in line["reason"].lower(), line
    assert line["peer"].startswith("127.0.0.1:")


def test_refused_handshakes_are_logged_and_the_broker_keeps_serving(node, pki, tmp_path):
    import ssl

    def context(keystore=None):
        ctx = ssl.create_default_context(cafile=str(pki.ca_file))
        if keystore is not None:
            ctx.load_cert_chain(str(keystore))
        return ctx

    refused(node, "MTLS", context(pki.issue("expired", common_name="old", expired=True)), "expired")
    rogue = Pki(tmp_path / "rogue", "rogue")
    refused(node, "MTLS", context(rogue.issue("mallory", common_name="mallory")), "unable to get local issuer")
    refused(node, "MTLS", context(), "certificate")

    # A plaintext Kafka client on the TLS port: a frame that is no TLS record.
    mark = node.proc.mark()
    producer = Producer({"bootstrap.servers": node.endpoints["SSL"], "message.timeout.ms": 3000})
    producer.produce("never", b"x")
    producer.flush(5)
    node.proc.wait_for(HANDSHAKE_FAILED, since=mark, listener="SSL", timeout=20)

    # Nothing else was affected: the PLAINTEXT and SSL listeners still serve.
    topic = new_topic(node)
    assert run_confluent(node, pki, "SSL", None, topic) == [f"SSL-{i}".encode() for i in range(RECORDS)]
    assert node.proc.running


def test_admin_cli_over_ssl_with_command_config(node, pki, tmp_path):
    topic = new_topic(node)
    settings = tmp_path / "ssl.properties"
    settings.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={pki.ca_file}\n")
    out = forkserver.run(["topics", "list", "--bootstrap-server",
                          node.endpoints["SSL"], "--command-config", str(settings)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert topic in out.stdout.split()
    # DescribeCluster on the SSL listener names the brokers' SSL endpoints.
    out = forkserver.run(["cluster", "describe", "--json", "--bootstrap-server",
                          node.endpoints["SSL"], "--command-config", str(settings)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [f"{b['host']}:{b['port']}" for b in json.loads(out.stdout)["brokers"]] == [node.endpoints["SSL"]]
    # Without the SSL settings the admin client cannot speak to the TLS port: one line, no traceback.
    plain = tmp_path / "plain.properties"
    plain.write_text("client.id=plain\nrequest.timeout.ms=10000\n")
    out = forkserver.run(["topics", "list", "--bootstrap-server",
                          node.endpoints["SSL"], "--command-config", str(plain)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    settings.write_text("security.protocol=SSL\nssl.truststore.type=JKS\n")
    out = forkserver.run(["topics", "list", "--bootstrap-server",
                          node.endpoints["SSL"], "--command-config", str(settings)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "ssl.truststore.type=JKS" in out.stderr and "Traceback" not in out.stderr


def test_a_renewed_certificate_is_served_to_new_connections_without_a_restart(node, pki):
    import ssl

    def served_subject() -> str:
        async def main() -> str:
            stream = await trio.open_ssl_over_tcp_stream(
                "127.0.0.1", int(node.endpoints["SSL"].rsplit(":", 1)[1]),
                ssl_context=ssl.create_default_context(cafile=str(pki.ca_file)))
            await stream.do_handshake()
            cert = stream.getpeercert()
            await trio.aclose_forcefully(stream)
            return dict(rdn[0] for rdn in cert["subject"])["commonName"]

        return trio.run(main)

    assert served_subject() == "server"
    pid = node.proc.pid
    mark = node.proc.mark()
    renewed = pki.server("renewed")
    keystore = pki.directory / "server.pem"
    tmp = keystore.with_suffix(".tmp")
    tmp.write_bytes(renewed.read_bytes())
    tmp.replace(keystore)  # as a renewal tool does it: a new file renamed over the old one
    line = node.proc.wait_for("ssl certificates reloaded", since=mark, listener="SSL", side="server", timeout=20)
    assert line["subject"].startswith("CN=renewed,") and line["not_after"]
    assert served_subject() == "renewed"
    assert node.proc.pid == pid and node.proc.running
    # A broken file: logged once, the renewed certificate stays.
    mark = node.proc.mark()
    keystore.write_text("-----BEGIN PRIVATE KEY-----\ncut short\n")
    line = node.proc.wait_for("ssl certificates not reloaded, keeping the old ones", since=mark, listener="SSL",
                              timeout=20)
    assert line["key"] == "ssl.keystore.location"
    assert served_subject() == "renewed"
    keystore.write_bytes(renewed.read_bytes())
    node.proc.wait_for("ssl certificates reloaded", since=mark, listener="SSL", timeout=20)
