"""Client quotas on a running broker: AlterClientQuotas and DescribeClientQuotas over the Kafka protocol,
and enforcement — a confluent-kafka producer held to producer_byte_rate and a consumer to
consumer_byte_rate, measured from the broker's bytes, with the throttle time seen by the client."""

from __future__ import annotations

import time

import pytest
import trio

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.metrics import TOPIC_BYTES_IN, TOPIC_BYTES_OUT
from kraftpy.protocol.errors import ErrorCode
from tests.helpers.cluster import open_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")

QUIET = {"log_level": 0}


async def test_alter_then_describe_client_quotas(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster, \
            AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        answers = await admin.alter_client_quotas([
            ({"user": "alice"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
            ({"user": None, "client-id": None}, {"request_percentage": 25.5}),
            ({"client-id": "app"}, {"producer_byte_rate": 10.5}),  # not an integer: refused alone
            ({"ip": "10.0.0.1"}, {"connection_creation_rate": 5}),
        ])
        assert [code for code, _ in answers] == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.INVALID_REQUEST,
                                                 ErrorCode.INVALID_REQUEST]
        assert "producer_byte_rate is not an integer" in answers[2][1]
        # Answered once this broker's image holds the change: the next read here sees it.
        everything = await admin.describe_client_quotas([])
        assert sorted(everything, key=repr) == sorted([
            ({"user": "alice"}, {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}),
            ({"client-id": None, "user": None}, {"request_percentage": 25.5}),
        ], key=repr)
        assert await admin.describe_client_quotas([("user", 0, "alice")], strict=True) == [
            ({"user": "alice"}, {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0})]
        assert await admin.describe_client_quotas([("client-id", 1, None)]) == [
            ({"client-id": None, "user": None}, {"request_percentage": 25.5})]
        # Removing a key.
        assert await admin.alter_client_quotas([({"user": "alice"}, {"consumer_byte_rate": None})]) == [
            (ErrorCode.NONE, None)]
        assert await admin.describe_client_quotas([("user", 0, "alice")]) == [
            ({"user": "alice"}, {"producer_byte_rate": 1024.0})]
        # A malformed filter is the response's error.
        from kraftpy.admin.client import KafkaError
        with pytest.raises(KafkaError) as info:
            await admin.describe_client_quotas([("user", 0, None)])
        assert info.value.code == ErrorCode.INVALID_REQUEST
        # validate_only writes nothing.
        assert await admin.alter_client_quotas([({"user": "bob"}, {"producer_byte_rate": 1})],
                                               validate_only=True) == [(ErrorCode.NONE, None)]
        assert await admin.describe_client_quotas([("user", 0, "bob")]) == []


QUOTA = 100_000  # bytes per second
MEASURE_S = 10.0


def _produce_flat_out(bootstrap: str, topic: str, stop: list[bool], throttles: list[int]) -> int:
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "client.id": "quota-producer", "linger.ms": 5,
        "batch.size": 16384, "compression.type": "none", "acks": 1,
        "throttle_cb": lambda event: throttles.append(event.throttle_time), **QUIET})
    value = b"x" * 1000
    sent = 0
    while not stop[0]:
        try:
            producer.produce(topic, value)
            sent += 1
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.purge()
    producer.flush(5)
    return sent


async def test_producer_held_to_its_byte_rate(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster, \
            AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        await cluster.create_topic("quota-produce")
        assert await admin.alter_client_quotas([({"client-id": "quota-producer"},
                                                 {"producer_byte_rate": QUOTA})]) == [(ErrorCode.NONE, None)]
        produced = TOPIC_BYTES_IN.labels("1", "quota-produce")
        stop, throttles = [False], []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: trio.to_thread.run_sync(
                _produce_flat_out, cluster.bootstrap, "quota-produce", stop, throttles, abandon_on_cancel=True))
            # Measured from the producer's first bytes (its first requests go out together, before any
            # answer could throttle it) over ten seconds of real time, by nature of the test.
            await cluster.wait_for(lambda: produced._value.get() > 0)
            before, started = 0, time.monotonic()
            await trio.sleep(MEASURE_S)
            after, ended = produced._value.get(), time.monotonic()
            stop[0] = True
        rate = (after - before) / (ended - started)
        print(f"produce rate {rate:.0f} B/s over {ended - started:.1f} s, quota {QUOTA} B/s")
        assert abs(rate - QUOTA) / QUOTA <= 0.10, f"{rate:.0f} B/s against a quota of {QUOTA}"
        quotas = cluster.brokers[1].quotas
        assert quotas.throttled_ms["Produce"] > 0
        assert throttles and max(throttles) > 0  # librdkafka saw throttle_time_ms


def _consume(bootstrap: str, topic: str, stop: list[bool], throttles: list[int]) -> int:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "client.id": "quota-consumer", "group.id": "quota-group",
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.max.bytes": 16384,
        "message.max.bytes": 16384,
        "max.partition.fetch.bytes": 16384, "fetch.wait.max.ms": 100,
        "throttle_cb": lambda event: throttles.append(event.throttle_time), **QUIET})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = 0
    while not stop[0]:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            got += 1
    consumer.close()
    return got


async def test_consumer_held_to_its_byte_rate(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster, \
            AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        await cluster.create_topic("quota-fetch")
        await trio.to_thread.run_sync(_fill, cluster.bootstrap, "quota-fetch", 2_000_000)
        assert await admin.alter_client_quotas([({"client-id": "quota-consumer"},
                                                 {"consumer_byte_rate": QUOTA})]) == [(ErrorCode.NONE, None)]
        fetched = TOPIC_BYTES_OUT.labels("1", "quota-fetch")
        stop, throttles = [False], []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: trio.to_thread.run_sync(
                _consume, cluster.bootstrap, "quota-fetch", stop, throttles, abandon_on_cancel=True))
            # A rate over real time: five seconds of consuming after two (the consumer connects and starts).
            await trio.sleep(2.0)
            before, started = fetched._value.get(), time.monotonic()
            await trio.sleep(5.0)
            after, ended = fetched._value.get(), time.monotonic()
            stop[0] = True
        rate = (after - before) / (ended - started)
        print(f"fetch rate {rate:.0f} B/s over {ended - started:.1f} s, quota {QUOTA} B/s")
        assert abs(rate - QUOTA) / QUOTA <= 0.10, f"{rate:.0f} B/s against a quota of {QUOTA}"
        assert cluster.brokers[1].quotas.throttled_ms["Fetch"] > 0
        assert throttles and max(throttles) > 0


def _fill(bootstrap: str, topic: str, size: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 16384,
                                       **QUIET})
    value = b"y" * 1000
    for _ in range(size // len(value)):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(30) == 0


async def test_every_broker_holds_the_quotas_and_a_controller_outage_is_answered_per_entry(tmp_path):
    from kraftpy.protocol.api_keys import ApiKey
    from kraftpy.protocol.messages import DescribeClientQuotasRequest

    async with open_cluster(tmp_path, brokers=2) as cluster, \
            AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        assert await admin.alter_client_quotas([({"user": "carol"}, {"producer_byte_rate": 5000})]) == [
            (ErrorCode.NONE, None)]
        await cluster.wait_for(lambda: all(
            b.metadata.image.client_quotas.entities for b in cluster.brokers.values()))
        for node in (1, 2):
            response = await admin.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, DescribeClientQuotasRequest(
                strict=False, components=[DescribeClientQuotasRequest.ComponentData(
                    entity_type="user", match_type=0, match="carol")]), node_id=node)
            assert [(e.entity[0].entity_name, e.values[0].value) for e in response.entries] == [("carol", 5000.0)]
        cluster.controller.available = False
        answers = await admin.alter_client_quotas([({"user": "dave"}, {"producer_byte_rate": 1}),
                                                   ({"client-id": "x"}, {"consumer_byte_rate": 2})])
        assert [code for code, _ in answers] == [ErrorCode.REQUEST_TIMED_OUT] * 2


async def test_controller_mutation_rate_refuses_topics_over_the_quota(tmp_path):
    from kraftpy.protocol.api_keys import ApiKey
    from kraftpy.protocol.messages import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest

    def create(*topics: tuple[str, int]) -> CreateTopicsRequest:
        return CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=n, replication_factor=1)
            for name, n in topics])

    async with open_cluster(tmp_path, brokers=1) as cluster, \
            AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        assert await admin.alter_client_quotas([({"client-id": "kraftpy-admin"},
                                                 {"controller_mutation_rate": 2})]) == [(ErrorCode.NONE, None)]
        # The broker's quota clock stands still, so the rate does not depend on how fast this test runs.
        cluster.brokers[1].quotas.clock = lambda: 1000.0
        # v7 (strict): the first topic takes the client over its 2 partitions/s and is created; the next
        # ones are refused with THROTTLING_QUOTA_EXCEEDED, and the response carries the throttle time.
        response = await admin.request(ApiKey.CREATE_TOPICS, create(("m1", 3), ("m2", 1), ("m3", 1)), version=7)
        codes = {t.name: t.error_code for t in response.topics}
        assert codes == {"m1": ErrorCode.NONE, "m2": ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                         "m3": ErrorCode.THROTTLING_QUOTA_EXCEEDED}
        assert response.throttle_time_ms > 0
        assert cluster.image.topics.get_by_name("m2") is None
        # Still over: CreatePartitions v3 and DeleteTopics v6 are refused the same way.
        grown = await admin.request(ApiKey.CREATE_PARTITIONS, CreatePartitionsRequest(
            timeout_ms=5000, validate_only=False, topics=[CreatePartitionsRequest.CreatePartitionsTopic(
                name="m1", count=4, assignments=None)]), version=3)
        assert [r.error_code for r in grown.results] == [ErrorCode.THROTTLING_QUOTA_EXCEEDED]
        deleted = await admin.request(ApiKey.DELETE_TOPICS, DeleteTopicsRequest(
            timeout_ms=5000, topics=[DeleteTopicsRequest.DeleteTopicState(name="m1")]), version=6)
        assert [r.error_code for r in deleted.responses] == [ErrorCode.THROTTLING_QUOTA_EXCEEDED]
        assert len(cluster.image.topics.get_by_name("m1").partitions) == 3
        # An older version (v5) is not refused, only throttled.
        older = await admin.request(ApiKey.CREATE_TOPICS, create(("m4", 1)), version=5)
        assert [t.error_code for t in older.topics] == [ErrorCode.NONE] and older.throttle_time_ms > 0
        assert cluster.brokers[1].quotas.throttled_ms["ControllerMutation"] > 0
