"""A 3+3 process cluster with TLS and ``ssl.client.auth=required`` on the controller listener (Raft,
registration, heartbeats) and on the inter-broker listener (replica fetches): it replicates with
acks=all, and a broker without a certificate cannot join — its connections to the controllers are
refused and it never registers."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kraftpy.config.properties import format_properties
from kraftpy.storage.formatter import format_dirs
from kraftpy.storage.meta_properties import read_meta_properties
from tests.helpers.deployments import Proc, create_topics
from tests.helpers.processes import free_ports
from tests.security.tls_support import Pki, TlsCluster, load_properties_dict

HANDSHAKE_FAILED = "closing connection: TLS handshake failed"
RECORDS = 200


@pytest.fixture
def cluster(tmp_path):
    root = tmp_path / "cluster"
    root.mkdir()
    with TlsCluster(root, Pki(tmp_path / "pki")) as deployment:
        yield deployment


def test_cluster_replicates_over_tls_and_a_node_without_a_certificate_cannot_join(cluster, tmp_path):
    # Every broker serves its inter-broker listener over TLS.
    for broker_id, proc in cluster.brokers.items():
        line = proc.find("broker serving")
        assert line is not None and line["listeners"]["INTERNAL"] == f"SSL:{cluster.internal_ports[broker_id]}"

    create_topics(cluster.bootstrap, [NewTopic("replicated", 1, 3)], deployment=cluster)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce("replicated", str(i).encode())
    assert producer.flush(30) == 0
    # A record is only readable once every ISR member fetched it, over the TLS inter-broker listener.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["replicated"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            got.append(int(message.value()))
    consumer.close()
    assert got == list(range(RECORDS))
    partition = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=20).topics["replicated"]
    assert sorted(partition.partitions[0].isrs) == [4, 5, 6]

    # Broker 7 trusts the CA but has no certificate of its own: the controllers refuse it.
    port = free_ports(1)[0]
    props = {entry: value for entry, value in cluster.tls_settings(None).items()}
    props.update({"process.roles": "broker", "node.id": "7", "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                  "inter.broker.listener.name": "PLAINTEXT", "log.dirs": str(tmp_path / "broker-7"),
                  "controller.quorum.voters": ",".join(f"{i}@{h}:{p}" for i, (h, p) in cluster.voters.items()),
                  "controller.listener.names": "CONTROLLER", "broker.heartbeat.interval.ms": "300",
                  "broker.session.timeout.ms": "3000"})
    config = tmp_path / "broker-7.properties"
    config.write_text(format_properties(props))
    cluster_id = read_meta_properties(cluster.data_dir(4)).cluster_id
    format_dirs([tmp_path / "broker-7"], cluster_id, 7)
    marks = {node_id: proc.mark() for node_id, proc in cluster.controllers.items()}
    outsider = Proc("broker-7", ["broker", "-c", str(config)], cond=cluster.cond)
    outsider.start()
    try:
        def refusals() -> int:
            return sum(1 for node_id, proc in cluster.controllers.items()
                       for line in proc.lines[marks[node_id]:] if line.get("event") == HANDSHAKE_FAILED)

        # Every controller refuses it, again and again (it retries): it neither fetches nor registers.
        cluster.wait_until(lambda: refusals() >= 10 and all(
            proc.find(HANDSHAKE_FAILED, since=marks[node_id]) for node_id, proc in cluster.controllers.items()),
            "the controllers refusing broker 7's handshakes", timeout=30)
        assert outsider.running and outsider.find("registered") is None
        brokers = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=20).brokers
        assert sorted(brokers) == [4, 5, 6]
    finally:
        outsider.kill()

    # A controller whose certificate no trusted CA signed cannot take part: the others refuse its
    # fetches and votes, and the quorum goes on without it.
    leaders = [line["leader_id"] for proc in cluster.controllers.values() for line in proc.lines
               if line.get("event") == "leader changed" and line.get("leader_id") is not None]
    follower = next(node_id for node_id in (3, 2, 1) if node_id != leaders[-1])
    others = {node_id: proc for node_id, proc in cluster.controllers.items() if node_id != follower}
    proc = cluster.controllers[follower]
    proc.stop()
    config = next(path for path in cluster.configs if path.name == f"controller-{follower}.properties")
    props = load_properties_dict(config)
    props["ssl.keystore.location"] = str(Pki(tmp_path / "rogue", "rogue").server(f"rogue-{follower}"))
    config.write_text(format_properties(props))
    marks = {node_id: other.mark() for node_id, other in others.items()}
    proc.start()
    cluster.wait_until(lambda: all(sum(1 for line in other.lines[marks[node_id]:]
                                       if line.get("event") == HANDSHAKE_FAILED) >= 5
                                   for node_id, other in others.items()),
                       f"controllers {sorted(others)} refusing controller {follower}", timeout=30)
    for node_id, other in others.items():
        assert other.find("leader changed", since=marks[node_id]) is None  # no vote got through
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce("replicated", b"after")
    assert producer.flush(30) == 0
