"""Building and sending Kafka requests to a test broker with the protocol codec."""

from __future__ import annotations

import time
import uuid

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.batch_header import iter_batches
from kraftpy.protocol.messages import (
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from kraftpy.protocol.records import SimpleRecord, build_batch, decode_batch


def batch(*values: bytes, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
          timestamp: int | None = None, compression: int = 0) -> bytes:
    ts = timestamp if timestamp is not None else time.time_ns() // 1_000_000
    return build_batch([SimpleRecord(b"k", v, timestamp=ts) for v in values], compression=compression,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)


def produce_request(topic: str, partition: int, records: bytes | None, *, acks: int = -1,
                    timeout_ms: int = 10000) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records)])])


async def produce(conn: KafkaConnection, topic: str, partition: int, records: bytes | None, *,
                  acks: int = -1, timeout_ms: int = 10000, version: int = 9):
    """Send one produce and return its only partition response."""
    response = await conn.request(ApiKey.PRODUCE, version,
                                  produce_request(topic, partition, records, acks=acks, timeout_ms=timeout_ms))
    return response.responses[0].partition_responses[0]


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
                  max_bytes: int = 50 * 1024 * 1024, partition_max_bytes: int = 1024 * 1024,
                  current_leader_epoch: int = -1, replica_id: int = -1, topic_id: uuid.UUID | None = None,
                  last_fetched_epoch: int = -1) -> FetchRequest:
    return FetchRequest(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        topics=[FetchRequest.FetchTopic(topic=topic, topic_id=topic_id or uuid.UUID(int=0), partitions=[
                            FetchRequest.FetchPartition(partition=partition, current_leader_epoch=current_leader_epoch,
                                                        fetch_offset=offset, last_fetched_epoch=last_fetched_epoch,
                                                        partition_max_bytes=partition_max_bytes)])])


async def fetch(conn: KafkaConnection, topic: str, partition: int, offset: int, *, version: int = 12, **kwargs):
    """Send one fetch and return its only partition's data."""
    response = await conn.request(ApiKey.FETCH, version, fetch_request(topic, partition, offset, **kwargs))
    return response.responses[0].partitions[0]


def values_of(records) -> list[bytes]:
    """The record values of the whole batches in a fetched records field."""
    if not records:
        return []
    data = bytes(records)
    out = []
    for position, header in iter_batches(data):
        out += [r.value for r in decode_batch(data[position:position + header.size]).records]
    return out


async def list_offset(conn: KafkaConnection, topic: str, partition: int, timestamp: int, *, version: int = 7,
                      replica_id: int = -1):
    request = ListOffsetsRequest(replica_id=replica_id, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)])])
    response = await conn.request(ApiKey.LIST_OFFSETS, version, request)
    return response.topics[0].partitions[0]


async def metadata(conn: KafkaConnection, topics: list[str] | None, *, version: int = 12, auto_create: bool = True):
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=auto_create)
    return await conn.request(ApiKey.METADATA, version, request)
