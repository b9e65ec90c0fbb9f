"""Offsets: ListOffsets (by time, earliest, latest, max timestamp), OffsetForLeaderEpoch, DeleteRecords.

A consumer's ListOffsets with ``isolation_level`` READ_COMMITTED (v2+) answers "latest" with the last
stable offset, and finds offsets by time only below it, as Kafka does.

Each handler walks the partitions a request names in turns (kraftpy.broker.apis.pacing), so a request
naming a million partitions does not hold up other connections. A partition named twice in one
ListOffsets request is answered INVALID_REQUEST each time, as Kafka does.

The special timestamps and the first version that may name them: -1 latest and -2 earliest (v1),
-3 the record with the largest timestamp (v7, KIP-734), -4 the start of the local log (v8, KIP-405)
and -5 the last offset in tiered storage (v9, KIP-1005). kraftpy keeps no tiered storage, so it
answers as Kafka does when remote storage is off: -4 is the log start offset (as -2), and -5 is
offset -1 with timestamp -1 and leader epoch -1. Any other negative timestamp, or one named by an
older version, is answered UNSUPPORTED_VERSION, as Kafka does. v10's TimeoutMs only bounds a wait
on remote storage; kraftpy answers at once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio

from kraftpy.broker.apis.common import leader_partition
from kraftpy.broker.apis.pacing import Pacer
from kraftpy.broker.authorization import (
    CLUSTER_ACTION,
    DELETE,
    DESCRIBE,
    NO_AUTHORIZATION,
    TOPIC,
    BrokerAuthorizer,
)
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.partition import Partition
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DeleteRecordsResponse, ListOffsetsResponse, OffsetForLeaderEpochResponse
from kraftpy.rpc.kafka_server import Connection

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
#: The first ListOffsets version that may name each special timestamp (Kafka's KafkaApis table).
TIMESTAMP_MIN_VERSION = {
    LATEST_TIMESTAMP: 1,
    EARLIEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
}
#: ``isolation_level``: READ_COMMITTED consumers see offsets below the last stable offset only.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


def timestamp_supported(timestamp: int, version: int) -> bool:
    """Whether ListOffsets ``version`` may name ``timestamp``: any time, or a special timestamp from
    its first version on (Kafka answers the rest UNSUPPORTED_VERSION)."""
    return timestamp >= 0 or version >= TIMESTAMP_MIN_VERSION.get(timestamp, version + 1)


def list_offset(part: Partition, timestamp: int, is_consumer: bool, version: int, result: Any,
                isolation_level: int = READ_UNCOMMITTED) -> None:
    """Fill ``result`` with the offset ListOffsets names for ``timestamp``: consumers see below the HW,
    or below the last stable offset with READ_COMMITTED (Kafka's upper bound for both)."""
    log = part.log
    if not is_consumer:
        upper = log.log_end_offset
    elif isolation_level == READ_COMMITTED:
        upper = part.last_stable_offset
    else:
        upper = part.high_watermark
    cache = log.leader_epoch_cache
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):  # no tiered storage: the local log is the log
        result.offset = log.log_start_offset
        epoch = cache.epoch_for_offset(log.log_start_offset)
        result.leader_epoch = epoch if epoch is not None else -1
    elif timestamp == LATEST_TIMESTAMP:
        result.offset = upper
        result.leader_epoch = log.latest_epoch if log.latest_epoch is not None else -1
    elif timestamp == LATEST_TIERED_TIMESTAMP:
        result.timestamp, result.offset, result.leader_epoch = -1, -1, -1  # nothing is tiered
    elif timestamp == MAX_TIMESTAMP:
        best = None
        for segment in log.segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is not None and log.log_start_offset <= best.offset_of_max_timestamp < upper:
            result.timestamp = best.max_timestamp
            result.offset = best.offset_of_max_timestamp
            epoch = cache.epoch_for_offset(best.offset_of_max_timestamp)
            result.leader_epoch = epoch if epoch is not None else -1
    else:
        found = log.offset_for_timestamp(timestamp)
        if found is not None and found.offset < upper:
            result.timestamp = found.timestamp
            result.offset = found.offset
            result.leader_epoch = found.leader_epoch


class OffsetsApi:
    #: Set by the broker: DESCRIBE on each topic (ListOffsets, OffsetForLeaderEpoch), DELETE (DeleteRecords).
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, replicas: ReplicaManager, metadata: MetadataCache) -> None:
        self.replicas = replicas
        self.metadata = metadata

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
        }

    def _leader(self, topic: str, index: int, current_leader_epoch: int = -1) -> tuple[Partition | None, ErrorCode]:
        return leader_partition(self.replicas, self.metadata, topic, index, current_leader_epoch)

    async def handle_list_offsets(self, header: Any, request: Any, conn: Connection) -> ListOffsetsResponse:
        version = header.request_api_version
        is_consumer = request.replica_id < 0
        pace = Pacer()
        named: Counter[tuple[str, int]] = Counter()
        for topic in request.topics:
            named.update((topic.name, lp.partition_index) for lp in topic.partitions)
            if pace.due(len(topic.partitions)):
                await trio.lowlevel.checkpoint()
        topics = []
        unauthorized = self.authz.denied(conn, DESCRIBE, TOPIC, (t.name for t in request.topics))
        for topic in request.topics:
            out = ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name)
            topics.append(out)
            for lp in topic.partitions:
                result = ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=lp.partition_index, error_code=ErrorCode.NONE)
                out.partitions.append(result)
                if pace.due():
                    await trio.lowlevel.checkpoint()
                if topic.name in unauthorized:
                    result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                if named[topic.name, lp.partition_index] > 1:
                    result.error_code = ErrorCode.INVALID_REQUEST
                    continue
                if not timestamp_supported(lp.timestamp, version):
                    result.error_code = ErrorCode.UNSUPPORTED_VERSION
                    continue
                part, error = self._leader(topic.name, lp.partition_index, lp.current_leader_epoch)
                if part is None:
                    result.error_code = error
                    continue
                list_offset(part, lp.timestamp, is_consumer, version, result, request.isolation_level)
        return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    async def handle_offset_for_leader_epoch(self, header: Any, request: Any,
                                             conn: Connection) -> OffsetForLeaderEpochResponse:
        topics = []
        pace = Pacer()
        Result = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
        if request.replica_id >= 0:  # a follower broker: CLUSTER_ACTION, every topic or none
            everything = {t.topic for t in request.topics}
            unauthorized = set() if self.authz.allows_cluster(conn, CLUSTER_ACTION) else everything
        else:
            unauthorized = self.authz.denied(conn, DESCRIBE, TOPIC, (t.topic for t in request.topics))
        for topic in request.topics:
            out = Result(topic=topic.topic)
            topics.append(out)
            for p in topic.partitions:
                entry = OffsetForLeaderEpochResponse.EpochEndOffset(error_code=ErrorCode.NONE, partition=p.partition)
                out.partitions.append(entry)
                if pace.due():
                    await trio.lowlevel.checkpoint()
                if topic.topic in unauthorized:
                    entry.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                part, error = self._leader(topic.topic, p.partition, p.current_leader_epoch)
                if part is None:
                    entry.error_code = error
                    continue
                entry.leader_epoch, entry.end_offset = part.log.end_offset_for_epoch(p.leader_epoch)
        return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

    async def handle_delete_records(self, header: Any, request: Any, conn: Connection) -> DeleteRecordsResponse:
        """Move log start offsets up; answered once the new starts are in the log directories'
        checkpoint, so deleted records do not come back after a crash (Kafka writes that file only
        every minute)."""
        topics = []
        moved = False
        pace = Pacer()
        Result = DeleteRecordsResponse.DeleteRecordsTopicResult
        PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult
        unauthorized = self.authz.denied(conn, DELETE, TOPIC, (t.name for t in request.topics))
        for topic in request.topics:
            out = Result(name=topic.name)
            topics.append(out)
            for p in topic.partitions:
                entry = PartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=ErrorCode.NONE)
                out.partitions.append(entry)
                if pace.due():
                    await trio.lowlevel.checkpoint()
                if topic.name in unauthorized:
                    entry.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                part, error = self._leader(topic.name, p.partition_index)
                if part is None:
                    entry.error_code = error
                    continue
                offset = part.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > part.high_watermark:
                    entry.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    continue
                before = part.log_start_offset
                try:
                    entry.low_watermark = await part.delete_records_before(offset)
                except OSError:
                    entry.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
                moved = moved or entry.low_watermark > before
        if moved:
            await self.replicas.checkpoint_now()
        return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
