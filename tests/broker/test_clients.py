"""Real clients against real brokers: confluent-kafka (librdkafka), kafka-python and kcat.

Blocking client calls run in ``trio.to_thread.run_sync`` so the brokers keep serving in this
process; the tests wait on client results, never on sleeps, and every client timeout is generous
(30 s or more): it only bounds a failure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
import trio

from tests.helpers.cluster import open_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic  # noqa: E402

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
QUIET = {"log_level": 0}


def produce_all(bootstrap: str, topic: str, messages: list[dict], **config) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET, **config})
    delivered: list = []

    def report(err, msg):
        delivered.append((err, msg.partition(), msg.offset()))

    for message in messages:
        producer.produce(topic, on_delivery=report, **message)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages not delivered"
    return delivered


def consume_confluent(bootstrap: str, topic: str, partition: int, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False,
                         **QUIET})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out = []
    try:
        while len(out) < count:
            msg = consumer.poll(30)
            assert msg is not None, f"no message after {len(out)}"
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        consumer.close()
    return out


def consume_kafka_python(bootstrap: str, topic: str, partition: int, count: int) -> list:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=30_000)
    tp = KTopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    out = []
    try:
        while len(out) < count:
            batch = consumer.poll(timeout_ms=30_000, max_records=count - len(out))
            assert batch, f"no records after {len(out)}"
            for records in batch.values():
                out.extend(records)
    finally:
        consumer.close()
    return out


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as c:
        yield c


@pytest.mark.parametrize("codec", CODECS)
async def test_confluent_produce_every_codec_read_back_by_both_clients(cluster, codec):
    await cluster.create_topic("events", partitions=2)
    messages = [
        {"key": b"key-%d" % i, "value": b"value-%d-" % i + b"x" * (i * 37), "partition": i % 2,
         "headers": [("h", b"%d" % i), ("codec", codec.encode())]}
        for i in range(40)
    ]
    delivered = await trio.to_thread.run_sync(lambda: produce_all(
        cluster.bootstrap, "events", messages, **{"compression.type": codec, "enable.idempotence": True,
                                                   "batch.num.messages": 7}))
    assert all(err is None for err, _, _ in delivered)
    for partition in (0, 1):
        expected = [m for m in messages if m["partition"] == partition]
        got = await trio.to_thread.run_sync(consume_confluent, cluster.bootstrap, "events", partition, len(expected))
        assert [(m.key(), m.value(), m.headers()) for m in got] == [
            (m["key"], m["value"], m["headers"]) for m in expected]
        assert [m.offset() for m in got] == list(range(len(expected)))
        got = await trio.to_thread.run_sync(consume_kafka_python, cluster.bootstrap, "events", partition,
                                            len(expected))
        assert [(r.key, r.value, [(k, bytes(v)) for k, v in r.headers]) for r in got] == [
            (m["key"], m["value"], m["headers"]) for m in expected]


async def test_kafka_python_produces_and_confluent_reads(cluster):
    from kafka import KafkaProducer

    await cluster.create_topic("kp")

    def run():
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", compression_type="gzip")
        futures = [producer.send("kp", key=b"k", value=b"m%d" % i, partition=0) for i in range(20)]
        producer.flush(30)
        offsets = [f.get(timeout=30).offset for f in futures]
        producer.close()
        return offsets

    offsets = await trio.to_thread.run_sync(run)
    assert offsets == list(range(20))
    got = await trio.to_thread.run_sync(consume_confluent, cluster.bootstrap, "kp", 0, 20)
    assert [m.value() for m in got] == [b"m%d" % i for i in range(20)]


async def test_confluent_consumer_sees_fetch_errors(cluster):
    """A fetch error reaches librdkafka: the broker answers it with an empty record set, not a null
    one, which librdkafka takes for a parse failure (the consumer then retried the same fetch forever
    without ever seeing the error)."""
    await cluster.create_topic("oor")
    await trio.to_thread.run_sync(lambda: produce_all(cluster.bootstrap, "oor", [{"value": b"only", "partition": 0}]))

    def poll_past_the_end():
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "oor", "enable.auto.commit": False,
                             "auto.offset.reset": "error", **QUIET})
        consumer.assign([TopicPartition("oor", 0, 5)])
        try:
            return consumer.poll(30)
        finally:
            consumer.close()

    msg = await trio.to_thread.run_sync(poll_past_the_end)
    assert msg is not None, "the consumer saw neither records nor an error"
    assert msg.error() is not None and msg.error().code() == confluent_kafka.KafkaError._AUTO_OFFSET_RESET, msg.error()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
async def test_kcat_reads_what_confluent_wrote(cluster):
    await cluster.create_topic("kc")
    messages = [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": 0} for i in range(5)]
    await trio.to_thread.run_sync(lambda: produce_all(cluster.bootstrap, "kc", messages))

    def read():
        result = subprocess.run(
            ["kcat", "-b", cluster.bootstrap, "-C", "-t", "kc", "-p", "0", "-o", "beginning", "-e", "-J"],
            capture_output=True, text=True, timeout=60, check=True)
        return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]

    got = await trio.to_thread.run_sync(read)
    assert [(r["key"], r["payload"], r["offset"]) for r in got] == [(f"k{i}", f"v{i}", i) for i in range(5)]

    def write():
        subprocess.run(["kcat", "-b", cluster.bootstrap, "-P", "-t", "kc", "-p", "0"], input="from-kcat\n",
                       text=True, timeout=60, check=True)

    await trio.to_thread.run_sync(write)
    got = await trio.to_thread.run_sync(consume_confluent, cluster.bootstrap, "kc", 0, 6)
    assert got[-1].value() == b"from-kcat"


async def test_admin_create_describe_grow_and_delete_topics(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})

    def create():
        futures = admin.create_topics([
            NewTopic("admin-a", num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"}),
            NewTopic("admin-b", num_partitions=1, replication_factor=1),
        ], operation_timeout=30)
        return {name: f.exception(timeout=60) for name, f in futures.items()}

    assert await trio.to_thread.run_sync(create) == {"admin-a": None, "admin-b": None}

    def again():
        futures = admin.create_topics([NewTopic("admin-a", num_partitions=1, replication_factor=1)])
        return futures["admin-a"].exception(timeout=60)

    error = await trio.to_thread.run_sync(again)
    assert error is not None and error.args[0].name() == "TOPIC_ALREADY_EXISTS"

    def describe():
        metadata = admin.list_topics(timeout=30)
        resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-a")
        configs = admin.describe_configs([resource])[resource].result(timeout=60)
        return metadata, configs

    metadata, configs = await trio.to_thread.run_sync(describe)
    assert set(metadata.topics) >= {"admin-a", "admin-b"}
    assert len(metadata.topics["admin-a"].partitions) == 3
    assert metadata.topics["admin-a"].partitions[0].leader == 1
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"

    def alter_and_grow():
        resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-b")
        resource.add_incremental_config(confluent_kafka.admin.ConfigEntry(
            "max.message.bytes", "2048",
            incremental_operation=confluent_kafka.admin.AlterConfigOpType.SET))
        admin.incremental_alter_configs([resource])[resource].result(timeout=60)
        admin.create_partitions([NewPartitions("admin-b", 4)])["admin-b"].result(timeout=60)
        return admin.list_topics(timeout=30)

    metadata = await trio.to_thread.run_sync(alter_and_grow)
    assert len(metadata.topics["admin-b"].partitions) == 4
    assert cluster.partition(1, "admin-b", 3) is not None
    assert cluster.partition(1, "admin-b").log.config.max_message_bytes == 2048

    directory = cluster.partition(1, "admin-a", 0).log.directory

    def delete():
        futures = admin.delete_topics(["admin-a"], operation_timeout=30)
        futures["admin-a"].result(timeout=60)
        return admin.list_topics(timeout=30)

    metadata = await trio.to_thread.run_sync(delete)
    assert "admin-a" not in metadata.topics
    assert cluster.partition(1, "admin-a", 0) is None
    assert not directory.exists()


async def test_auto_create_from_metadata_and_offsets_by_timestamp(cluster):
    base = int(time.time() * 1000) - 100_000
    messages = [{"value": b"t%d" % i, "partition": 0, "timestamp": base + i * 1000} for i in range(10)]
    delivered = await trio.to_thread.run_sync(lambda: produce_all(cluster.bootstrap, "auto-created", messages))
    assert [offset for _, _, offset in delivered] == list(range(10))
    assert cluster.image.topics.get_by_name("auto-created") is not None

    def lookup():
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ts", **QUIET})
        try:
            found = [consumer.offsets_for_times([TopicPartition("auto-created", 0, ts)], timeout=30)[0]
                     for ts in (base + 4500, base)]
            future = consumer.offsets_for_times([TopicPartition("auto-created", 0, base + 10**9)], timeout=30)
            low, high = consumer.get_watermark_offsets(TopicPartition("auto-created", 0), timeout=30)
            return [tp.offset for tp in found], future[0].offset, (low, high)
        finally:
            consumer.close()

    offsets, beyond, watermarks = await trio.to_thread.run_sync(lookup)
    assert offsets == [5, 0]
    assert beyond == -1
    assert watermarks == (0, 10)


async def test_three_brokers_acks_all_with_min_insync_replicas(tmp_path):
    async with open_cluster(tmp_path, brokers=3, static_configs={"min.insync.replicas": "2"}) as cluster:
        await cluster.create_topic("replicated", partitions=3, replication_factor=3)
        messages = [{"key": b"%d" % i, "value": b"r%d" % i, "partition": i % 3} for i in range(60)]
        delivered = await trio.to_thread.run_sync(lambda: produce_all(
            cluster.bootstrap, "replicated", messages, acks="all", **{"enable.idempotence": True,
                                                                        "compression.type": "zstd"}))
        assert all(err is None for err, _, _ in delivered)
        for partition in range(3):
            got = await trio.to_thread.run_sync(consume_confluent, cluster.bootstrap, "replicated", partition, 20)
            assert [m.value() for m in got] == [b"r%d" % i for i in range(partition, 60, 3)]
        await cluster.wait_for(lambda: all(
            cluster.partition(b, "replicated", p).high_watermark == 20 for b in cluster.brokers for p in range(3)))
