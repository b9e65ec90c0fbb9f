"""Valid-looking but hostile batches against a live broker: refused with Kafka's code, nothing written.

Each batch below carries a correct CRC, so only the broker's record validation can catch it. For
each: the produce answer has the expected error (and, from Produce v8, which records and why), the
log end offset and the log's bytes do not move, the producer state does not learn the batch, a
valid produce afterwards is appended right behind the last good one, and real consumers
(librdkafka and kafka-python) read back exactly the records that were acknowledged.
"""

from __future__ import annotations

import pytest
import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.metadata.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.records import ConfigResourceType
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.batch_header import CONTROL_BIT, TRANSACTIONAL_BIT
from kraftpy.protocol.compression import Compression
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import ProduceRequest
from tests.helpers.batches import now_ms, raw_record, record, records_section, sealed
from tests.helpers.cluster import open_cluster
from tests.helpers.metadata import WallClock
from tests.helpers.protocol import batch, fetch, produce, values_of

HOUR = 3_600_000
PRODUCER = dict(producer_id=1000, producer_epoch=0, base_sequence=0)


def _header_key_length_minus_one() -> bytes:
    # A header whose key is null (length -1): key varint 01 after the header count 02 (one header).
    return sealed(raw_record(b"\x00\x00\x00\x02k\x02v\x02\x01\x00"), 1)


#: name -> (a hostile batch, the error it gets, the indexes of record_errors or None for none)
HOSTILE = {
    "unknown codec 5": (lambda: sealed(records_section(2), 2, attributes=5),
                        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, None),
    "unknown codec 7": (lambda: sealed(records_section(2), 2, attributes=7),
                        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, None),
    "gzip flag on raw records": (lambda: sealed(records_section(2), 2, codec=Compression.GZIP, compressed=False),
                                 ErrorCode.CORRUPT_MESSAGE, None),
    "records that do not parse": (lambda: sealed(record(0) + raw_record(b"\x00\x00\x02\x03\x02v\x00"), 2),
                                  ErrorCode.INVALID_RECORD, [1]),
    "record_count above the records": (lambda: sealed(records_section(2), 3), ErrorCode.INVALID_RECORD, [2]),
    "record_count below the records": (lambda: sealed(records_section(3), 2), ErrorCode.INVALID_RECORD, None),
    "last_offset_delta 2^31-1 on one record": (lambda: sealed(record(0), 1, last_offset_delta=2**31 - 1),
                                               ErrorCode.INVALID_RECORD, None),
    "offset deltas 0, 2": (lambda: sealed(record(0) + record(2), 2), ErrorCode.INVALID_RECORD, [1]),
    "offset deltas 0, 2 in lz4": (lambda: sealed(record(0) + record(2), 2, codec=Compression.LZ4),
                                  ErrorCode.INVALID_RECORD, [1]),
    "timestamp two hours ahead": (lambda: sealed(record(0) + record(1, timestamp_delta=2 * HOUR), 2),
                                  ErrorCode.INVALID_TIMESTAMP, [1]),
    "control batch from a client": (lambda: sealed(records_section(1), 1, attributes=CONTROL_BIT),
                                    ErrorCode.INVALID_RECORD, None),
    "transactional batch in a request without a transactional id": (
        lambda: sealed(records_section(1), 1, attributes=TRANSACTIONAL_BIT, **PRODUCER),
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None),
    "header key not UTF-8": (lambda: sealed(record(0, headers=((b"\xc3\x28", b"v"),)), 1),
                             ErrorCode.INVALID_RECORD, [0]),
    "header key null": (_header_key_length_minus_one, ErrorCode.INVALID_RECORD, [0]),
    "idempotent batch with a record cut short": (lambda: sealed(record(0) + record(1)[:-1], 2, **PRODUCER),
                                                 ErrorCode.INVALID_RECORD, [1]),
}


async def connect(cluster, broker_id: int = 1) -> KafkaConnection:
    return await KafkaConnection.connect("127.0.0.1", cluster.ports[broker_id])


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_a_hostile_batch_is_refused_and_changes_nothing(tmp_path, case):
    make, error, indexes = HOSTILE[case]
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t")
        part = cluster.partition(1, "t")
        async with await connect(cluster) as conn:
            assert (await produce(conn, "t", 0, batch(b"before"))).error_code == ErrorCode.NONE
            before = (part.log_end_offset, part.log.read_bytes(0, 1 << 20), dict(part.producer_state.producers))

            result = await produce(conn, "t", 0, make())
            assert result.error_code == error, result
            assert result.base_offset == -1
            assert result.error_message
            assert [e.batch_index for e in result.record_errors] == (indexes or [])
            assert all(e.batch_index_error_message for e in result.record_errors)
            assert (part.log_end_offset, part.log.read_bytes(0, 1 << 20), dict(part.producer_state.producers)) == before

            # The same producer's first sequence is still new: the refused batch left no trace.
            after = batch(b"after", **PRODUCER)
            assert (await produce(conn, "t", 0, after)).base_offset == 1
            assert values_of((await fetch(conn, "t", 0, 0)).records) == [b"before", b"after"]


async def test_produce_before_v8_gets_the_error_without_record_errors(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t")
        async with await connect(cluster) as conn:
            hostile = sealed(record(0) + record(2), 2)
            old = await produce(conn, "t", 0, hostile, version=7)
            assert old.error_code == ErrorCode.INVALID_RECORD
            assert old.record_errors == [] and old.error_message is None  # not in v7's schema
            new = await produce(conn, "t", 0, hostile, version=8)
            assert [e.batch_index for e in new.record_errors] == [1]
            assert "offset delta 2" in new.record_errors[0].batch_index_error_message
            assert new.error_message.startswith("1 of the batch's 2 records refused")


async def test_timestamp_bounds_are_broker_and_topic_configs(tmp_path):
    clock = WallClock()  # the broker's time, which record timestamps are held against
    async with open_cluster(tmp_path, brokers=1, clock=clock,
                            static_configs={"log.message.timestamp.before.max.ms": "60000"}) as cluster:
        await cluster.create_topic("strict", configs={"message.timestamp.after.max.ms": "0"})
        await cluster.create_topic("default")
        async with await connect(cluster) as conn:

            async def at(topic: str, timestamp: int) -> int:
                return (await produce(conn, topic, 0, sealed(records_section(1), 1, base_timestamp=timestamp))).error_code

            now = clock.now
            # The broker's own setting: an hour ahead (Kafka 4's default), a minute behind (this broker's).
            assert await at("default", now + HOUR) == ErrorCode.NONE
            assert await at("default", now + HOUR + 1) == ErrorCode.INVALID_TIMESTAMP
            assert await at("default", now - 60_000) == ErrorCode.NONE
            assert await at("default", now - 60_001) == ErrorCode.INVALID_TIMESTAMP
            # The topic's own: nothing ahead of the broker's time.
            assert await at("strict", now) == ErrorCode.NONE
            assert await at("strict", now + 1) == ErrorCode.INVALID_TIMESTAMP

            response = await cluster.controller.incremental_alter_configs(IncrementalAlterConfigsRequest((
                AlterConfigsResource(ConfigResourceType.TOPIC, "strict", (
                    AlterableConfig("message.timestamp.after.max.ms", AlterConfigOp.SET, "1000"),)),)))
            assert response.responses[0].error_code == 0
            await cluster.caught_up()
            assert await at("strict", now + 1000) == ErrorCode.NONE
            assert cluster.partition(1, "strict").log_end_offset == 2


async def test_a_compacted_topic_refuses_records_without_a_key(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("table", configs={"cleanup.policy": "compact"})
        async with await connect(cluster) as conn:
            keyless = sealed(record(0) + record(1, key=None), 2)
            result = await produce(conn, "table", 0, keyless)
            assert result.error_code == ErrorCode.INVALID_RECORD
            assert [e.batch_index for e in result.record_errors] == [1]
            assert (await produce(conn, "table", 0, sealed(records_section(2), 2))).base_offset == 0


async def test_a_wrong_max_timestamp_is_corrected_before_it_is_stored(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t")
        async with await connect(cluster) as conn:
            base = now_ms()
            lying = sealed(record(0) + record(1, timestamp_delta=7), 2, base_timestamp=base,
                           max_timestamp=base + 10**12)
            assert (await produce(conn, "t", 0, lying)).error_code == ErrorCode.NONE
            assert cluster.partition(1, "t").log.active_segment.max_timestamp == base + 7


async def test_real_consumers_read_every_acknowledged_record(tmp_path):
    """The probe's failure: after a hostile batch was acknowledged, confluent-kafka stopped silently
    and kafka-python raised, and records acknowledged after it could not be read."""
    from tests.broker.test_clients import consume_confluent, consume_kafka_python, produce_all

    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t")
        acknowledged = []
        async with await connect(cluster) as conn:
            for i, case in enumerate(sorted(HOSTILE)):
                value = b"good %d" % i
                assert (await produce(conn, "t", 0, batch(value))).error_code == ErrorCode.NONE
                acknowledged.append(value)
                make, error, _ = HOSTILE[case]
                assert (await produce(conn, "t", 0, make())).error_code == error, case
        values = [b"client %d" % i for i in range(20)]
        delivered = await trio.to_thread.run_sync(produce_all, cluster.bootstrap, "t", [{"value": v} for v in values])
        assert [err for err, _, _ in delivered] == [None] * len(values)
        acknowledged += values

        confluent = await trio.to_thread.run_sync(consume_confluent, cluster.bootstrap, "t", 0, len(acknowledged))
        assert [m.value() for m in confluent] == acknowledged
        assert [m.offset() for m in confluent] == list(range(len(acknowledged)))
        kafka_python = await trio.to_thread.run_sync(consume_kafka_python, cluster.bootstrap, "t", 0,
                                                     len(acknowledged))
        assert [r.value for r in kafka_python] == acknowledged
        assert cluster.partition(1, "t").log_end_offset == len(acknowledged)


async def test_a_batch_that_decompresses_to_more_than_the_inline_limit_is_validated_in_a_worker(tmp_path):
    from kraftpy.broker.apis.produce import INLINE_DECOMPRESSED_SIZE

    big = bytes(INLINE_DECOMPRESSED_SIZE + 1024)  # zeros: a few hundred bytes in zstd
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t")
        async with await connect(cluster) as conn:
            produce_api = cluster.brokers[1].apis.handlers[ApiKey.PRODUCE].__self__
            data = sealed(record(0, value=big), 1, codec=Compression.ZSTD)
            assert len(data) < 4096
            assert produce_api._large_batches is None
            assert (await produce(conn, "t", 0, data)).base_offset == 0
            assert produce_api._large_batches is not None  # made for the first batch over the limit
            bad = sealed(record(0, value=big) + record(3), 2, codec=Compression.ZSTD)
            result = await produce(conn, "t", 0, bad)
            assert result.error_code == ErrorCode.INVALID_RECORD
            assert [e.batch_index for e in result.record_errors] == [1]
            assert values_of((await fetch(conn, "t", 0, 0)).records) == [big]


async def test_a_partition_named_twice_in_one_request_is_refused_for_each_entry(tmp_path):
    """Which batch would one answer be for? Every entry of that partition is INVALID_REQUEST and none
    is appended; the request's other partitions are served."""
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t", partitions=2)
        async with await connect(cluster) as conn:
            Data = ProduceRequest.PartitionProduceData
            request = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[
                ProduceRequest.TopicProduceData(name="t", partition_data=[
                    Data(index=0, records=batch(b"first")), Data(index=1, records=batch(b"other")),
                    Data(index=0, records=sealed(records_section(2), 2, attributes=7))])])
            response = await conn.request(ApiKey.PRODUCE, 9, request)
            answers = response.responses[0].partition_responses
            assert [(a.index, a.error_code) for a in answers] == [
                (0, ErrorCode.INVALID_REQUEST), (1, ErrorCode.NONE), (0, ErrorCode.INVALID_REQUEST)]
            assert cluster.partition(1, "t", 0).log_end_offset == 0
            assert cluster.partition(1, "t", 1).log_end_offset == 1
