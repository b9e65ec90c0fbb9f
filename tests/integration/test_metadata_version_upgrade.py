"""metadata.version raised online: three controllers and three brokers formatted at release 3.4-IV0 (level
8) are upgraded to 3.9-IV0 (21) with `kraftpy features upgrade --release-version 3.9` while an idempotent
acks=all producer writes. Nothing restarts and nothing acknowledged is lost; every broker applies the new
level; what the new level turns on (SCRAM credentials, from 3.5-IV2) is refused before and works after."""

from __future__ import annotations

import subprocess
import threading

import pytest

from kraftpy.config import load_config
from kraftpy.ids import random_uuid_str
from kraftpy.metadata.bootstrap import write_bootstrap
from kraftpy.metadata.records import FeatureLevelRecord
from kraftpy.storage.formatter import format_dirs
from tests.helpers import forkserver
from tests.helpers.deployments import ProcessCluster, create_topics

pytestmark = pytest.mark.slow

TOPIC = "upgraded"


class OldCluster(ProcessCluster):
    """A 3+3 cluster whose controllers were formatted with `storage format --release-version 3.4`."""

    def start(self) -> None:
        cluster_id = random_uuid_str()
        for path in self.configs:
            config = load_config(path, ())
            format_dirs(config.all_dirs, cluster_id, config.node_id)
            if config.is_controller:
                write_bootstrap(config.metadata_log_dir, [FeatureLevelRecord("metadata.version", 8)])
        for proc in self.controllers.values():
            proc.start()
        marks = {broker_id: proc.start() for broker_id, proc in self.brokers.items()}
        for proc in self.brokers.values():
            proc.wait_for("broker running")
        self.wait_brokers_serving(marks)


def kraftpy(*args: str) -> subprocess.CompletedProcess:
    return forkserver.run([*args], capture_output=True, text=True, timeout=120)


def add_user(bootstrap: str) -> subprocess.CompletedProcess:
    return kraftpy("configs", "alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
                   "SCRAM-SHA-512=[iterations=8192,password=alice-secret]", "--bootstrap-server", bootstrap)


class Writer(threading.Thread):
    """An idempotent acks=all producer writing numbered records until stopped; it keeps what was
    acknowledged and every delivery error."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5})
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._progress = threading.Condition()

    def _delivered(self, err, msg) -> None:
        with self._progress:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked.append(int(msg.value()))
            self._progress.notify_all()

    def wait_acked(self, count: int, timeout: float = 60) -> None:
        """Wait until ``count`` records are acknowledged (the timeout bounds a failure only)."""
        with self._progress:
            if not self._progress.wait_for(lambda: len(self.acked) >= count or self.errors, timeout):
                raise AssertionError(f"{len(self.acked)} of {count} records acknowledged in {timeout} s")

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(TOPIC, str(i).encode(), on_delivery=self._delivered)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.001)
        self.producer.flush(60)


def test_metadata_version_is_raised_online_under_load_and_turns_on_what_it_gates(tmp_path):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import NewTopic

    with OldCluster(tmp_path) as cluster:
        pids = {proc.name: proc.process.pid for proc in cluster.procs}
        described = kraftpy("features", "describe", "--bootstrap-server", cluster.bootstrap)
        assert described.returncode == 0, described.stderr
        assert "3.4-IV0" in described.stdout and "3.9-IV0" in described.stdout  # finalized, and supported max
        # SCRAM needs 3.5-IV2: refused at 3.4-IV0, as Kafka refuses it.
        refused = add_user(cluster.bootstrap)
        assert refused.returncode != 0 and "UNSUPPORTED_VERSION" in refused.stderr, refused.stderr
        assert "does not support SCRAM" in refused.stderr

        create_topics(cluster.bootstrap, [NewTopic(TOPIC, 3, 3)], deployment=cluster)
        writer = Writer(cluster.bootstrap)
        writer.start()
        try:
            writer.wait_acked(200)
            marks = {broker_id: proc.mark() for broker_id, proc in cluster.brokers.items()}
            upgraded = kraftpy("features", "upgrade", "--release-version", "3.9", "--bootstrap-server",
                               cluster.bootstrap)
            assert upgraded.returncode == 0, upgraded.stderr
            assert upgraded.stdout.strip() == "metadata.version was upgraded to 21."
            for broker_id, proc in cluster.brokers.items():
                line = proc.wait_for("features changed", since=marks[broker_id])
                assert (line["metadata_version"], line["release_version"]) == (21, "3.9-IV0")
            writer.wait_acked(len(writer.acked) + 200)  # writes go on after the upgrade
        finally:
            writer.stop.set()
            writer.join(90)
        assert writer.errors == []

        # The new level turns SCRAM on, with no restart.
        added = add_user(cluster.bootstrap)
        assert added.returncode == 0, added.stderr
        users = kraftpy("configs", "describe", "--entity-type", "users", "--bootstrap-server", cluster.bootstrap)
        assert "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192" in \
            users.stdout.splitlines()
        assert {proc.name: proc.process.pid for proc in cluster.procs} == pids
        assert all(proc.process.poll() is None for proc in cluster.procs)

        # Every acknowledged record is there, once.
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check",
                             "enable.auto.commit": False})
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(3)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        seen: list[int] = []
        while sum(ends.values()) > len(seen):
            message = consumer.poll(30)
            assert message is not None, f"read {len(seen)} of {sum(ends.values())} records"
            if message.error() is None:
                seen.append(int(message.value()))
        consumer.close()
        assert sorted(seen) == sorted(set(seen)) and set(writer.acked) <= set(seen)
