"""SCRAM credentials created with AlterUserScramCredentials work on every broker of a 3+3 process
cluster once the metadata propagated, and a deleted one stops working on every broker. The brokers
replicate over SASL_PLAINTEXT (SCRAM-SHA-512, the broker user bootstrapped with `storage format
--add-scram`); an admin on the PLAINTEXT listener alters and describes the credentials with kraftpy's
admin client and `kraftpy configs`."""

from __future__ import annotations

import json

import trio

from kraftpy.admin.client import AdminClient
from kraftpy.broker.client import ConnectionClosed, KafkaConnection, SaslLogin
from kraftpy.config import load_config
from kraftpy.config.properties import format_properties, load_properties
from kraftpy.ids import random_uuid_str
from kraftpy.metadata.bootstrap import parse_add_scram, write_bootstrap
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import MetadataRequest
from kraftpy.storage.formatter import format_dirs
from tests.helpers import forkserver
from tests.helpers.deployments import ProcessCluster, create_topics
from tests.helpers.processes import free_ports

BROKER_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
               'password="broker-secret";')


class SaslCluster(ProcessCluster):
    """ProcessCluster whose brokers also listen on SASL_PLAINTEXT, which is their inter-broker listener."""

    def __init__(self, root):
        super().__init__(root)
        self.sasl_ports = dict(zip(self.BROKER_IDS, free_ports(3), strict=True))
        for broker_id in self.BROKER_IDS:
            path = root / f"broker-{broker_id}.properties"
            props = {e.key: e.value for e in load_properties(path)}
            listeners = f"{props['listeners']},SASL_PLAINTEXT://127.0.0.1:{self.sasl_ports[broker_id]}"
            props.update({"listeners": listeners, "advertised.listeners": listeners,
                          "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                                            "SASL_PLAINTEXT:SASL_PLAINTEXT",
                          "inter.broker.listener.name": "SASL_PLAINTEXT",
                          "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                          "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
                          "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": BROKER_JAAS})
            path.write_text(format_properties(props))

    def start(self):
        cluster_id = random_uuid_str()
        broker_user = parse_add_scram("SCRAM-SHA-512=[name=broker,password=broker-secret]")
        for path in self.configs:
            config = load_config(path, ())
            result = format_dirs(config.all_dirs, cluster_id, config.node_id)
            if config.is_controller and config.metadata_log_dir in result.formatted:
                write_bootstrap(config.metadata_log_dir, [broker_user])
        for proc in self.controllers.values():
            proc.start()
        marks = {broker_id: proc.start() for broker_id, proc in self.brokers.items()}
        for proc in self.brokers.values():
            proc.wait_for("broker running")
        self.wait_brokers_serving(marks)


async def _authenticates(port: int, login: SaslLogin) -> bool:
    try:
        conn = await KafkaConnection.connect("127.0.0.1", port, sasl=login)
    except ConnectionClosed:
        return False
    try:
        metadata = await conn.request(ApiKey.METADATA, 12, MetadataRequest(topics=None))
        return len(metadata.brokers) == 3
    finally:
        await conn.aclose()


async def _on_every_broker(cluster: SaslCluster, login: SaslLogin, want: bool) -> dict[int, int]:
    """Attempts each broker took to give ``want`` (each failed attempt waits out the broker's failed
    authentication delay, so a few cover one metadata propagation)."""
    attempts = {}
    for broker_id, port in cluster.sasl_ports.items():
        for attempt in range(1, 51):
            if await _authenticates(port, login) is want:
                attempts[broker_id] = attempt
                break
        else:
            raise AssertionError(f"broker {broker_id}: authentication never became {want}")
    return attempts


def test_altered_credentials_work_on_every_broker(tmp_path):
    with SaslCluster(tmp_path) as cluster:
        # Replication goes over the SASL inter-broker listener: the followers authenticate to the leaders.
        from confluent_kafka.admin import NewTopic

        create_topics(cluster.bootstrap, [NewTopic("replicated", 3, 3)], deployment=cluster)
        for proc in cluster.brokers.values():
            proc.wait_for("SASL authenticated", where=lambda line: line.get("principal") == "User:broker")
        bootstrap = [("127.0.0.1", port) for port in cluster.broker_ports.values()]
        alice = SaslLogin("SCRAM-SHA-256", "alice", "alice-secret")

        async def alter(upsertions, deletions):
            async with AdminClient(bootstrap) as admin:
                return await admin.alter_user_scram_credentials(upsertions, deletions)

        assert trio.run(alter, [("alice", "SCRAM-SHA-256", "alice-secret", 8192)], []) == [("alice", 0, None)]
        trio.run(_on_every_broker, cluster, alice, True)

        described = forkserver.run(["configs", "describe", "--entity-type", "users", "--bootstrap-server",
                                    cluster.bootstrap, "--json"], capture_output=True, text=True)
        assert described.returncode == 0, described.stderr
        users = {doc["entity_name"]: doc["scram_credentials"] for doc in json.loads(described.stdout)}
        assert users == {"alice": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}],
                         "broker": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}

        marks = {broker_id: proc.mark() for broker_id, proc in cluster.brokers.items()}
        deleted = forkserver.run(["configs", "alter", "--entity-type", "users", "--entity-name", "alice",
                                  "--delete-config", "SCRAM-SHA-256", "--bootstrap-server", cluster.bootstrap],
                                 capture_output=True, text=True)
        assert deleted.returncode == 0, deleted.stderr
        assert deleted.stdout.strip() == "Completed updating config for user alice."
        for broker_id, proc in cluster.brokers.items():
            proc.wait_for("scram credentials changed", since=marks[broker_id],
                          where=lambda line: "alice" not in line.get("users", ()))
        trio.run(_on_every_broker, cluster, alice, False)
