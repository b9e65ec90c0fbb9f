"""Kafka clients against real kraftpy processes: `kraftpy dev`, and three controllers with three brokers.

The same assertions as tests/broker/test_clients.py (which runs them against the in-memory harness):
confluent-kafka producing in all five codecs with keys, headers and idempotence, read back by
confluent-kafka, kafka-python and kcat; kafka-python producing; admin create/describe/alter/grow/delete
of topics; ListOffsets by timestamp. One deployment of each kind serves the whole module.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from kraftpy.node.kraft_node import GC_THRESHOLDS
from tests.broker.test_clients import CODECS, QUIET, consume_confluent, consume_kafka_python, produce_all
from tests.helpers.deployments import Deployment, DevDeployment, ProcessCluster, create_topics

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["dev", "cluster"])
def deployment(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    with DevDeployment(root) if request.param == "dev" else ProcessCluster(root) as deployed:
        yield deployed


def create_topic(deployment: Deployment, name: str, partitions: int, **config: str) -> None:
    create_topics(deployment.bootstrap, [NewTopic(name, num_partitions=partitions,
                                                  replication_factor=deployment.replication_factor, config=config)])


def kcat_read(bootstrap: str, topic: str, partition: int) -> list[dict]:
    result = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", "beginning", "-e", "-J"],
        capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_with_keys_headers_idempotence_read_back_by_three_clients(deployment, codec):
    topic = f"events-{codec}"
    create_topic(deployment, topic, 2)
    messages = [
        {"key": b"key-%d" % i, "value": b"value-%d-" % i + b"x" * (i * 37), "partition": i % 2,
         "headers": [("h", b"%d" % i), ("codec", codec.encode())]}
        for i in range(40)
    ]
    delivered = produce_all(deployment.bootstrap, topic, messages, acks="all", **{
        "compression.type": codec, "enable.idempotence": True, "batch.num.messages": 7})
    assert [err for err, _, _ in delivered] == [None] * len(messages)
    for partition in (0, 1):
        expected = [m for m in messages if m["partition"] == partition]
        assert sorted(o for _, p, o in delivered if p == partition) == list(range(len(expected)))
        got = consume_confluent(deployment.bootstrap, topic, partition, len(expected))
        assert [(m.key(), m.value(), m.headers()) for m in got] == [
            (m["key"], m["value"], m["headers"]) for m in expected]
        assert [m.offset() for m in got] == list(range(len(expected)))
        got = consume_kafka_python(deployment.bootstrap, topic, partition, len(expected))
        assert [(r.key, r.value, [(k, bytes(v)) for k, v in r.headers]) for r in got] == [
            (m["key"], m["value"], m["headers"]) for m in expected]
        if shutil.which("kcat") is not None:
            got = kcat_read(deployment.bootstrap, topic, partition)
            assert [(r["key"], r["payload"], r["offset"]) for r in got] == [
                (m["key"].decode(), m["value"].decode(), i) for i, m in enumerate(expected)]
            assert [r.get("headers") for r in got] == [
                ["h", m["headers"][0][1].decode(), "codec", codec] for m in expected]


def test_kafka_python_produces_and_confluent_reads(deployment):
    from kafka import KafkaProducer

    create_topic(deployment, "kp", 1)
    producer = KafkaProducer(bootstrap_servers=deployment.bootstrap, acks="all", compression_type="gzip")
    try:
        futures = [producer.send("kp", key=b"k", value=b"m%d" % i, partition=0) for i in range(20)]
        producer.flush(60)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close()
    assert offsets == list(range(20))
    got = consume_confluent(deployment.bootstrap, "kp", 0, 20)
    assert [m.value() for m in got] == [b"m%d" % i for i in range(20)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_produces_and_confluent_reads(deployment):
    create_topic(deployment, "kc", 1)
    subprocess.run(["kcat", "-b", deployment.bootstrap, "-P", "-t", "kc", "-p", "0", "-X", "acks=all"],
                   input="one\ntwo\n", text=True, timeout=60, check=True)
    got = consume_confluent(deployment.bootstrap, "kc", 0, 2)
    assert [(m.value(), m.offset()) for m in got] == [(b"one", 0), (b"two", 1)]


def _every_broker_sees(deployment, topic: str, partitions: int | None) -> None:
    """Wait until each broker's metadata has ``topic`` with ``partitions`` partitions (none: no such
    topic): a committed change reaches the brokers one by one (Kafka's admin client says the same of its
    results), and a broker logs a deleted topic's logs before its Metadata answers leave the topic out."""
    admins = [AdminClient({"bootstrap.servers": address, **QUIET}) for address in deployment.bootstrap.split(",")]

    def sees(admin) -> bool:
        found = admin.list_topics(timeout=30).topics.get(topic)
        if partitions is None:
            return found is None
        return found is not None and found.error is None and len(found.partitions) == partitions

    what = f"every broker sees {topic}" if partitions is not None else f"no broker sees {topic}"
    deployment.eventually(lambda: all(sees(admin) for admin in admins), what)


def test_admin_create_describe_alter_grow_and_delete_topics(deployment):
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap, **QUIET})
    admin.list_topics(timeout=30)
    rf = deployment.replication_factor
    futures = admin.create_topics([
        NewTopic("admin-a", num_partitions=3, replication_factor=rf, config={"retention.ms": "3600000"}),
        NewTopic("admin-b", num_partitions=1, replication_factor=rf),
    ], operation_timeout=30)
    assert {name: f.exception(timeout=60) for name, f in futures.items()} == {"admin-a": None, "admin-b": None}
    _every_broker_sees(deployment, "admin-a", 3)
    _every_broker_sees(deployment, "admin-b", 1)

    error = admin.create_topics([NewTopic("admin-a", num_partitions=1, replication_factor=rf)])[
        "admin-a"].exception(timeout=60)
    assert error is not None and error.args[0].name() == "TOPIC_ALREADY_EXISTS"

    metadata = admin.list_topics(timeout=30)
    assert set(metadata.topics) >= {"admin-a", "admin-b"}
    partitions = metadata.topics["admin-a"].partitions
    assert len(partitions) == 3
    for p in partitions.values():
        assert len(p.replicas) == rf and set(p.replicas) <= set(deployment.brokers)
        assert p.leader in p.replicas and sorted(p.isrs) == sorted(p.replicas)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-a")
    configs = admin.describe_configs([resource])[resource].result(timeout=60)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"

    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-b")
    resource.add_incremental_config(ConfigEntry("max.message.bytes", "2048",
                                                incremental_operation=AlterConfigOpType.SET))
    admin.incremental_alter_configs([resource])[resource].result(timeout=60)
    marks = {b: proc.mark() for b, proc in deployment.brokers.items()}
    admin.create_partitions([NewPartitions("admin-b", 4)])["admin-b"].result(timeout=60)
    _every_broker_sees(deployment, "admin-b", 4)
    metadata = admin.list_topics(timeout=30)
    assert len(metadata.topics["admin-b"].partitions) == 4
    for b in metadata.topics["admin-b"].partitions[3].replicas:  # the new partition's replicas open its log
        deployment.brokers[b].wait_for("opened log", since=marks[b], partition="admin-b-3")
    configs = admin.describe_configs([resource])[resource].result(timeout=60)
    assert configs["max.message.bytes"].value == "2048"
    # Every broker applies the new limit: a batch over it is refused, one under it lands in the new partition.
    results = []
    producer = Producer({"bootstrap.servers": deployment.bootstrap, "acks": "all", "compression.type": "none",
                         "message.max.bytes": 100_000, **QUIET})
    assert len(producer.list_topics("admin-b", timeout=30).topics["admin-b"].partitions) == 4
    for size, partition in ((4000, 0), (100, 3)):
        producer.produce("admin-b", b"x" * size, partition=partition,
                         on_delivery=lambda err, msg: results.append((err, msg.partition(), msg.offset())))
        assert producer.flush(60) == 0
    assert results[0][0] is not None and results[0][0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert results[1] == (None, 3, 0)

    replicas = {p.id: p.replicas for p in metadata.topics["admin-a"].partitions.values()}
    directories = [deployment.data_dir(b) / f"admin-a-{pid}" for pid, rs in replicas.items() for b in rs]
    assert all(d.is_dir() for d in directories)
    marks = {b: proc.mark() for b, proc in deployment.brokers.items()}
    admin.delete_topics(["admin-a"], operation_timeout=30)["admin-a"].result(timeout=60)
    for pid, rs in replicas.items():
        for b in rs:
            deployment.brokers[b].wait_for("deleting log", since=marks[b], partition=f"admin-a-{pid}")
    _every_broker_sees(deployment, "admin-a", None)
    assert "admin-a" not in admin.list_topics(timeout=30).topics
    assert not any(d.exists() for d in directories)


def test_auto_create_from_metadata_and_offsets_by_timestamp(deployment):
    base = int(time.time() * 1000) - 100_000
    messages = [{"value": b"t%d" % i, "partition": 0, "timestamp": base + i * 1000} for i in range(10)]
    delivered = produce_all(deployment.bootstrap, "auto-created", messages, acks="all")
    assert [offset for _, _, offset in delivered] == list(range(10))
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap, **QUIET})
    partitions = admin.list_topics("auto-created", timeout=30).topics["auto-created"].partitions
    assert len(partitions[0].replicas) == deployment.replication_factor

    consumer = Consumer({"bootstrap.servers": deployment.bootstrap, "group.id": "ts", **QUIET})
    try:
        found = [consumer.offsets_for_times([TopicPartition("auto-created", 0, ts)], timeout=30)[0]
                 for ts in (base + 4500, base, base + 9000)]
        beyond = consumer.offsets_for_times([TopicPartition("auto-created", 0, base + 10**9)], timeout=30)[0]
        watermarks = consumer.get_watermark_offsets(TopicPartition("auto-created", 0), timeout=30)
    finally:
        consumer.close()
    assert [tp.offset for tp in found] == [5, 0, 9]
    assert beyond.offset == -1
    assert watermarks == (0, 10)


def test_every_node_process_freezes_what_it_made_at_start_once_ready(deployment):
    """`kraftpy dev`, `kraftpy controller` and `kraftpy broker` move what they made at start out of the
    garbage collector's reach once ready: no full collection walks it again (a pause of 50-80 ms under
    load every few seconds, the largest part of the produce latency's p99.9)."""
    for proc in deployment.procs:
        line = proc.wait_for("objects made at start frozen out of the garbage collector's reach")
        assert line["frozen"] > 10_000, proc.name
        # And it collects its young objects less often (GC_THRESHOLDS): each young collection walked
        # 5-10 ms of containers at 100,000 partitions.
        assert tuple(line["gc_thresholds"]) == GC_THRESHOLDS, proc.name
