"""One ``--command-config`` file for the admin commands and for those on librdkafka (console, perf).

The translation of Kafka's client keys is checked on its own, then on a real process serving an SSL
listener: the file the admin commands use there (security.protocol=SSL, a PEM truststore) lets
`kraftpy console produce`, `kraftpy console consume` and `kraftpy perf produce` speak TLS too, and a
file the admin client refuses is refused by them in the same one line.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from kraftpy.cli.client_properties import librdkafka_settings
from tests.helpers.deployments import create_topics
from tests.security.tls_support import Pki, TlsNode

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.helpers import forkserver

SCRAM = ("sasl.jaas.config", 'org.apache.kafka.common.security.scram.ScramLoginModule required username="ops" '
         'password="s3cret";')


def test_kafkas_client_keys_become_librdkafkas(tmp_path: Path):
    pki = Pki(tmp_path)
    ca, me = str(pki.ca_file), str(pki.issue("me", common_name="me"))
    assert librdkafka_settings({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", SCRAM[0]: SCRAM[1],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": me,
        "ssl.endpoint.identification.algorithm": "", "client.id": "ops", "default.api.timeout.ms": "5000",
        "linger.ms": "5",
    }) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ops",
        "sasl.password": "s3cret", "ssl.ca.location": ca, "ssl.certificate.location": me,
        "ssl.key.location": me, "ssl.endpoint.identification.algorithm": "none",
        "client.id": "ops", "linger.ms": "5",
    }
    # librdkafka's own names pass as they are.
    assert librdkafka_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca"}) == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
        "ssl.ca.location": "/ca"}


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS", "ssl.truststore.location": "/ca.jks"},
     "ssl.truststore.type=JKS"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"}, "sasl.jaas.config"),
    ({"security.protocol": "TLS"}, "security.protocol=TLS"),
])
def test_what_the_admin_client_refuses_is_refused_the_same_way(props, message):
    with pytest.raises(ValueError, match=message) as refused:
        librdkafka_settings(props)
    assert "s3cret" not in str(refused.value)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    pki = Pki(tmp_path_factory.mktemp("pki"))
    with TlsNode(tmp_path_factory.mktemp("node"), pki) as deployment:
        deployment.pki = pki
        yield deployment


def kraftpy(*args: object, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return forkserver.run([*(str(a) for a in args)], input=stdin,
                          capture_output=True, timeout=90)


def test_the_admin_commands_file_serves_console_and_perf_over_tls(node, tmp_path: Path):
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    create_topics(node.bootstrap, [NewTopic(topic, 1, 1)], deployment=node)
    settings = tmp_path / "ssl.properties"
    settings.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={node.pki.ca_file}\n")
    ssl_port = ("--bootstrap-server", node.endpoints["SSL"], "--command-config", settings)
    listed = kraftpy("topics", "list", *ssl_port)
    assert listed.returncode == 0 and topic in listed.stdout.decode().split()

    sent = kraftpy("console", "produce", "--topic", topic, "--json", *ssl_port, stdin=b"a\nb\n")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {"topic": topic, "records_delivered": 2}
    read = kraftpy("console", "consume", "--topic", topic, "--from-beginning", "--max-messages", 2, *ssl_port)
    assert read.returncode == 0, read.stderr
    assert read.stdout == b"a\nb\n"
    perf = kraftpy("perf", "produce", "--topic", topic, "--num-records", 100, "--json", *ssl_port)
    assert perf.returncode == 0, perf.stderr
    assert json.loads(perf.stdout)["records"] == 100

    # Without the file, librdkafka speaks plaintext to the TLS port and gets no answer: exit 3.
    plain = kraftpy("console", "consume", "--topic", topic, "--max-messages", 1, "--bootstrap-server",
                    node.endpoints["SSL"])
    assert plain.returncode == 3, plain.stderr
    # A store kraftpy cannot read is refused by console as by the admin commands: one line, exit 2.
    settings.write_text("security.protocol=SSL\nssl.truststore.type=JKS\nssl.truststore.location=/ca.jks\n")
    for command in (["topics", "list"], ["console", "consume", "--topic", topic]):
        refused = kraftpy(*command, *ssl_port)
        assert refused.returncode == 2, (command, refused.stderr)
        lines = refused.stderr.decode().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"kraftpy: --command-config={settings}: ssl.truststore.type=JKS")
