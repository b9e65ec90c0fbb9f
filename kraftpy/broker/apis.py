"""The Kafka API handlers of the data plane: one frame in, the response frame's parts out.

Theory of operation
-------------------
`KafkaApis.handle` is the `KafkaServer` handler. It parses the frame (``parse_request``), finds
the handler for the api key, awaits it and encodes the response. A frame that does not parse, an
API this broker does not serve, or a handler that fails closes that one connection (`BadRequest`),
as Kafka does; every other connection is unaffected. Two refusals are answered instead: an
ApiVersions request of an unknown version gets a v0 response with UNSUPPORTED_VERSION and the
supported ranges (KIP-511), and a Produce below v3 gets UNSUPPORTED_VERSION for each partition.

Data path, batches not records:

* Produce checks the one batch of each partition by its 61-byte header and CRC only, asks the
  producer state whether it is the next batch of its producer, appends it with one write, and
  for acks=all parks in the purgatory until the high watermark passes it.
* Fetch reads file regions of segment files (``Log.read``) and hands them to the response
  encoder, so the server sends record data with ``os.sendfile``; a long poll parks in the
  purgatory until enough bytes are readable — below the high watermark for consumers, up to the
  log end for followers — or ``max_wait_ms`` passes.

Metadata writes (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs, and
auto-creation from Metadata requests) go to the controller through the `ControllerChannel`;
reads (Metadata, DescribeConfigs, DescribeCluster) are answered from the local metadata image.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import structlog
import trio

from kraftpy.broker.controller_channel import ControllerUnavailable
from kraftpy.broker.partition import Partition
from kraftpy.broker.purgatory import wait_for_change
from kraftpy.ids import Uuid
from kraftpy.metadata import config_control
from kraftpy.metadata import configs as config_defs
from kraftpy.metadata import messages as m
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.records import NO_LEADER
from kraftpy.protocol.api_keys import API_VERSIONS, ApiKey
from kraftpy.protocol.batch_header import (
    CorruptRecordError,
    UnsupportedMagicError,
    check_batch,
    read_header,
    set_max_timestamp,
)
from kraftpy.protocol.errors import ErrorCode, InvalidRequestError, UnsupportedVersionError
from kraftpy.protocol.frames import encode_response, parse_request
from kraftpy.protocol.messages import (
    REQUESTS,
    ApiVersionsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    FetchResponse,
    IncrementalAlterConfigsResponse,
    InitProducerIdResponse,
    ListOffsetsResponse,
    MetadataResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
)
from kraftpy.protocol.types import ZERO_UUID, FileRegion
from kraftpy.rpc.kafka_server import BadRequest, Connection
from kraftpy.storage.log import OffsetOutOfRangeError

if TYPE_CHECKING:
    from kraftpy.broker.server import BrokerServer

_logger = structlog.get_logger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
#: How long an admin request waits for its committed change to reach this broker's metadata.
METADATA_PROPAGATION_WAIT_S = 5.0
#: Resource types of DescribeConfigs / IncrementalAlterConfigs.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


@attrs.frozen(eq=False)
class SendfileRegion(FileRegion):
    """A file region on a descriptor of its own (a dup of the segment's), closed when the region goes.

    The response is written after the handler returns; by then retention or a truncation may have
    closed the segment, and its descriptor number may even name another file. A duplicated
    descriptor keeps the data of the region readable until it is sent.
    """

    def fileno(self) -> int:
        return self.fd

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _region(segment_region) -> SendfileRegion:
    return SendfileRegion(os.dup(segment_region.fd), segment_region.position, segment_region.length)


def _to_wire_uuid(topic_id: Uuid | None) -> uuid.UUID:
    return ZERO_UUID if topic_id is None else uuid.UUID(bytes=topic_id.raw)


def _from_wire_uuid(value: uuid.UUID) -> Uuid | None:
    return None if value == ZERO_UUID else Uuid(value.bytes)


Handler = Callable[[Any, Any, Connection], Awaitable[Any]]


class KafkaApis:
    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self.settings = server.settings
        self.replicas = server.replicas
        self.channel = server.channel
        self._log = _logger.bind(node_id=self.settings.node_id)
        self.handlers: dict[int, Handler] = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
        }

    @property
    def image(self) -> MetadataImage:
        return self.replicas.image

    def register(self, api_key: ApiKey, handler: Handler) -> None:
        """Serve another API (the group coordinator's, say) through this handler table."""
        self.handlers[api_key] = handler

    def supported_versions(self) -> list[tuple[int, int, int]]:
        return sorted((int(k), r.min_version, r.max_version) for k, r in API_VERSIONS.items() if k in self.handlers)

    # -- dispatch ---------------------------------------------------------------------------------

    async def handle(self, frame: bytes | memoryview, conn: Connection) -> list | None:
        try:
            header, request = parse_request(frame, allow_trailing_bytes=True)
        except UnsupportedVersionError as exc:
            return self._answer_unsupported_version(frame, exc)
        except InvalidRequestError as exc:
            raise BadRequest(str(exc)) from None
        api_key = header.request_api_key
        handler = self.handlers.get(api_key)
        if handler is None:
            raise BadRequest(f"{ApiKey(api_key).name} is not served by this broker")
        try:
            response = await handler(header, request, conn)
        except BadRequest:
            raise
        except Exception as exc:
            self._log.exception("request handler failed", api=ApiKey(api_key).name, peer=conn.peer)
            raise BadRequest(f"{ApiKey(api_key).name} failed: {exc}") from exc
        if response is None:
            return None
        return encode_response(header.correlation_id, api_key, header.request_api_version, response)

    def _answer_unsupported_version(self, frame, exc: UnsupportedVersionError) -> list:
        if exc.api_key == ApiKey.API_VERSIONS and exc.correlation_id is not None:
            response = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self._api_version_list())
            return encode_response(exc.correlation_id, ApiKey.API_VERSIONS, 0, response)
        cls = REQUESTS.get(exc.api_key) if exc.api_key is not None else None
        if exc.api_key == ApiKey.PRODUCE and cls is not None and exc.api_version in cls.SCHEMA.versions:
            # Produce v0-v2 parse (the schema knows them) but are refused, per partition.
            try:
                from kraftpy.protocol.frames import _REQUEST_HEADER

                buf = memoryview(frame)
                _, pos = _REQUEST_HEADER.decode(1, buf, 0)
                request, _ = cls.SCHEMA.decode(exc.api_version, buf, pos)
            except Exception as decode_exc:
                raise BadRequest(str(exc)) from decode_exc
            response = ProduceResponse(responses=[
                ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=[
                    ProduceResponse.PartitionProduceResponse(
                        index=p.index, error_code=ErrorCode.UNSUPPORTED_VERSION, base_offset=-1)
                    for p in t.partition_data])
                for t in request.topic_data])
            if request.acks == 0:
                raise BadRequest(str(exc))
            return encode_response(exc.correlation_id, ApiKey.PRODUCE, exc.api_version, response)
        raise BadRequest(str(exc))

    # -- helpers ----------------------------------------------------------------------------------

    def _partition_error(self, topic: str, index: int) -> ErrorCode:
        """The error for a partition this broker does not lead."""
        topic_image = self.image.topics.get_by_name(topic)
        if topic_image is None or index not in topic_image.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    @staticmethod
    def _epoch_error(part: Partition, current_leader_epoch: int) -> ErrorCode:
        if current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < part.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def _leader(self, topic: str, index: int, current_leader_epoch: int = -1) -> tuple[Partition | None, ErrorCode]:
        part = self.replicas.get(topic, index)
        if part is None or not part.is_leader:
            return None, self._partition_error(topic, index)
        error = self._epoch_error(part, current_leader_epoch)
        return (part, error) if error == ErrorCode.NONE else (None, error)

    async def _wait_for_metadata(self, done: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            while not done(self.image):
                await self.server.metadata_changed.wait()
            return True
        return False

    # -- ApiVersions --------------------------------------------------------------------------------

    def _api_version_list(self) -> list:
        return [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in self.supported_versions()]

    async def handle_api_versions(self, header, request, conn) -> ApiVersionsResponse:
        response = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=self._api_version_list())
        levels = self.image.features.levels
        if levels:
            response.finalized_features_epoch = max(self.image.provenance.last_offset, 0)
            response.finalized_features = [
                ApiVersionsResponse.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
                for name, level in sorted(levels.items())
            ]
        return response

    # -- Produce --------------------------------------------------------------------------------------

    async def handle_produce(self, header, request, conn) -> ProduceResponse | None:
        acks = request.acks
        now = self.server.clock()
        results: dict[tuple[str, int], Any] = {}
        waiting: dict[tuple[str, int], tuple[Partition, int, int]] = {}
        PartitionResponse = ProduceResponse.PartitionProduceResponse
        order: list[tuple[str, list[int]]] = []
        for topic in request.topic_data:
            indexes = []
            order.append((topic.name, indexes))
            for data in topic.partition_data:
                key = (topic.name, data.index)
                indexes.append(data.index)
                result = PartitionResponse(index=data.index, error_code=ErrorCode.NONE, base_offset=-1)
                results[key] = result
                if acks not in (0, 1, -1):
                    result.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                    continue
                part, error = self._leader(topic.name, data.index)
                if part is None:
                    result.error_code = error
                    continue
                result.log_start_offset = part.log_start_offset
                error, message, required = self._append(part, data.records, acks, now, result)
                result.error_code = error
                result.error_message = message
                if error == ErrorCode.NONE and acks == -1:
                    waiting[key] = (part, part.leader_epoch, required)

        if waiting:
            await self._await_replication(waiting, results, request.timeout_ms / 1000)
        if acks == 0:
            if any(r.error_code != ErrorCode.NONE for r in results.values()):
                # The producer reads no answer: closing the connection is how it learns (as in Kafka).
                raise BadRequest("acks=0 produce failed")
            return None
        return ProduceResponse(responses=[
            ProduceResponse.TopicProduceResponse(name=name, partition_responses=[results[(name, i)] for i in indexes])
            for name, indexes in order
        ])

    def _append(self, part: Partition, records, acks: int, now: int, result) -> tuple[ErrorCode, str | None, int]:
        """Validate and append one partition's batch; returns (error, message, offset acks=all waits for)."""
        if records is None or not len(records):
            return ErrorCode.INVALID_RECORD, "Produce requests must contain a record batch", -1
        try:
            header = check_batch(records, 0)
        except UnsupportedMagicError as exc:
            return ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(exc), -1
        except CorruptRecordError as exc:
            return ErrorCode.CORRUPT_MESSAGE, str(exc), -1
        if header.size != len(records):
            return (ErrorCode.INVALID_RECORD,
                    "Produce requests with version 3 or later must contain exactly one record batch", -1)
        if header.last_offset_delta < 0 or header.record_count <= 0:
            return ErrorCode.CORRUPT_MESSAGE, "batch with a negative offset delta or no records", -1
        if header.size > part.log.config.max_message_bytes:
            return (ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {header.size} bytes is larger than max.message.bytes={part.log.config.max_message_bytes}",
                    -1)
        if acks == -1 and len(part.isr) < part.min_insync_replicas:
            return (ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"ISR {list(part.isr)} is smaller than min.insync.replicas={part.min_insync_replicas}", -1)
        check = part.producer_state.validate_append(header, now)
        if check.is_duplicate:
            assert check.duplicate is not None
            result.base_offset = check.duplicate.first_offset
            return ErrorCode.NONE, None, check.duplicate.last_offset + 1
        if not check.should_append:
            return check.error, check.message or None, -1
        data = records
        if part.log_append_time:
            data = bytearray(records)
            set_max_timestamp(data, 0, 1, now)
            header = read_header(data, 0)
            result.log_append_time_ms = now
        try:
            info = part.append_as_leader(data, header)
        except OSError as exc:
            self._log.error("append failed", partition=str(part.tp), error=str(exc))
            return ErrorCode.KAFKA_STORAGE_ERROR, str(exc), -1
        result.base_offset = info.first_offset
        result.log_start_offset = part.log_start_offset
        return ErrorCode.NONE, None, info.last_offset + 1

    async def _await_replication(self, waiting: dict, results: dict, timeout_s: float) -> None:
        deadline = trio.current_time() + max(timeout_s, 0)
        while True:
            for key, (part, epoch, required) in list(waiting.items()):
                if not part.is_leader or part.leader_epoch != epoch:
                    results[key].error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    del waiting[key]
                elif part.high_watermark >= required:
                    if len(part.isr) < part.min_insync_replicas:
                        results[key].error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                    del waiting[key]
            if not waiting:
                return
            if trio.current_time() >= deadline:
                for key in waiting:
                    results[key].error_code = ErrorCode.REQUEST_TIMED_OUT
                return
            await wait_for_change([p.hw_watchers for p, _, _ in waiting.values()], deadline)

    # -- Fetch ----------------------------------------------------------------------------------------

    async def handle_fetch(self, header, request, conn) -> FetchResponse:
        version = header.request_api_version
        if request.session_id != 0 or request.session_epoch > 0:
            # Fetch sessions (KIP-227) are not kept: every fetch is a full one.
            return FetchResponse(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        replica_id = request.replica_id
        is_replica = replica_id >= 0
        items = []  # (topic response, partition request, Partition | None, error)
        responses = []
        for topic in request.topics:
            if version >= 13:
                topic_id = _from_wire_uuid(topic.topic_id)
                topic_image = self.image.topics.get_by_id(topic_id) if topic_id is not None else None
                name = topic_image.name if topic_image is not None else None
                unknown = ErrorCode.UNKNOWN_TOPIC_ID
            else:
                name = topic.topic
                unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topic_response = FetchResponse.FetchableTopicResponse(topic=topic.topic, topic_id=topic.topic_id)
            responses.append(topic_response)
            for fp in topic.partitions:
                if name is None:
                    items.append((topic_response, fp, None, unknown))
                    continue
                part, error = self._leader(name, fp.partition, fp.current_leader_epoch)
                if part is not None and is_replica:
                    error = self._follower_fetch_error(part, replica_id, fp)
                items.append((topic_response, fp, part, error))

        diverging: dict[int, tuple[int, int]] = {}
        if is_replica:
            for i, (_, fp, part, error) in enumerate(items):
                if part is None or error != ErrorCode.NONE:
                    continue
                divergence = self._divergence(part, fp)
                if divergence is not None:
                    diverging[i] = divergence
                elif part.log_start_offset <= fp.fetch_offset <= part.log_end_offset:
                    if part.update_follower_fetch(replica_id, fp.fetch_offset) is not None:
                        self.replicas.maybe_expand_isr(part, replica_id)

        deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
        while True:
            total, datas, answer_now = self._read_fetch(items, request.max_bytes, is_replica, diverging)
            if (
                total >= request.min_bytes
                or answer_now
                or request.max_wait_ms <= 0
                or trio.current_time() >= deadline
            ):
                break
            parts = [part for _, _, part, error in items if part is not None and error == ErrorCode.NONE]
            if not parts:
                break
            watchers = [p.append_watchers if is_replica else p.hw_watchers for p in parts]
            await wait_for_change(watchers, deadline)
        for (topic_response, _, _, _), data in zip(items, datas, strict=True):
            topic_response.partitions.append(data)
        return FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=responses)

    @staticmethod
    def _follower_fetch_error(part: Partition, replica_id: int, fp) -> ErrorCode:
        if replica_id not in part.replicas:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    @staticmethod
    def _divergence(part: Partition, fp) -> tuple[int, int] | None:
        """Where a follower's log diverges from ours, from the epoch of its last batch (KIP-320), if it does."""
        if fp.last_fetched_epoch < 0:
            return None
        epoch, end = part.log.end_offset_for_epoch(fp.last_fetched_epoch)
        if epoch < 0 or end < 0:
            # Our history knows no epoch at or below the follower's: keep only what lies below our start.
            return -1, part.log_start_offset
        if epoch < fp.last_fetched_epoch or end < fp.fetch_offset:
            return epoch, end
        return None

    def _read_fetch(self, items, max_bytes: int, is_replica: bool, diverging: dict[int, tuple[int, int]]):
        """Read every partition as it stands; returns (bytes readable, partition data, answer at once)."""
        total = 0
        answer_now = False
        datas = []
        PartitionData = FetchResponse.PartitionData
        for i, (_, fp, part, error) in enumerate(items):
            # Never a null record set, even with an error: librdkafka rejects MessageSetSize -1 as a
            # parse failure and drops the whole response, so its consumer would never see the error
            # (and retry the same fetch forever). Kafka answers errors with empty records too.
            data = PartitionData(partition_index=fp.partition, error_code=error, high_watermark=-1,
                                 last_stable_offset=-1, log_start_offset=-1, records=b"")
            datas.append(data)
            if part is None or error != ErrorCode.NONE:
                answer_now = True
                continue
            if not part.is_leader:
                data.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                answer_now = True
                continue
            log = part.log
            high_watermark = part.high_watermark
            data.high_watermark = high_watermark
            data.last_stable_offset = high_watermark
            data.log_start_offset = log.log_start_offset
            if i in diverging:
                data.diverging_epoch.epoch, data.diverging_epoch.end_offset = diverging[i]
                answer_now = True
                continue
            offset = fp.fetch_offset
            if offset < log.log_start_offset or offset > log.log_end_offset:
                data.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                answer_now = True
                continue
            if not is_replica and offset >= high_watermark:
                continue
            budget = min(fp.partition_max_bytes, max_bytes - total)
            if budget <= 0 and total > 0:
                continue
            try:
                region = log.read(offset, max(budget, 0), max_offset=None if is_replica else high_watermark,
                                  min_one_batch=total == 0, whole_batches=is_replica)
            except OffsetOutOfRangeError:
                data.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                data.records = b""
                answer_now = True
                continue
            if region.length:
                data.records = _region(region)
                total += region.length
        return total, datas, answer_now

    # -- ListOffsets --------------------------------------------------------------------------------

    async def handle_list_offsets(self, header, request, conn) -> ListOffsetsResponse:
        version = header.request_api_version
        is_consumer = request.replica_id < 0
        topics = []
        for topic in request.topics:
            out = ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name)
            topics.append(out)
            for lp in topic.partitions:
                result = ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=lp.partition_index, error_code=ErrorCode.NONE)
                out.partitions.append(result)
                part, error = self._leader(topic.name, lp.partition_index, lp.current_leader_epoch)
                if part is None:
                    result.error_code = error
                    continue
                self._list_offset(part, lp.timestamp, is_consumer, version, result)
        return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    @staticmethod
    def _list_offset(part: Partition, timestamp: int, is_consumer: bool, version: int, result) -> None:
        log = part.log
        upper = part.high_watermark if is_consumer else log.log_end_offset
        cache = log.leader_epoch_cache
        if timestamp == EARLIEST_TIMESTAMP:
            result.offset = log.log_start_offset
            epoch = cache.epoch_for_offset(log.log_start_offset)
            result.leader_epoch = epoch if epoch is not None else -1
        elif timestamp == LATEST_TIMESTAMP:
            result.offset = upper
            result.leader_epoch = log.latest_epoch if log.latest_epoch is not None else -1
        elif timestamp == MAX_TIMESTAMP and version >= 7:
            best = None
            for segment in log.segments:
                if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                    best = segment
            if best is not None and log.log_start_offset <= best.offset_of_max_timestamp < upper:
                result.timestamp = best.max_timestamp
                result.offset = best.offset_of_max_timestamp
                epoch = cache.epoch_for_offset(best.offset_of_max_timestamp)
                result.leader_epoch = epoch if epoch is not None else -1
        elif timestamp < 0:
            result.error_code = ErrorCode.INVALID_REQUEST
        else:
            found = log.offset_for_timestamp(timestamp)
            if found is not None and found.offset < upper:
                result.timestamp = found.timestamp
                result.offset = found.offset
                result.leader_epoch = found.leader_epoch

    # -- OffsetForLeaderEpoch -----------------------------------------------------------------------

    async def handle_offset_for_leader_epoch(self, header, request, conn) -> OffsetForLeaderEpochResponse:
        topics = []
        Result = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
        for topic in request.topics:
            out = Result(topic=topic.topic)
            topics.append(out)
            for p in topic.partitions:
                entry = OffsetForLeaderEpochResponse.EpochEndOffset(error_code=ErrorCode.NONE, partition=p.partition)
                out.partitions.append(entry)
                part, error = self._leader(topic.topic, p.partition, p.current_leader_epoch)
                if part is None:
                    entry.error_code = error
                    continue
                entry.leader_epoch, entry.end_offset = part.log.end_offset_for_epoch(p.leader_epoch)
        return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

    # -- DeleteRecords ------------------------------------------------------------------------------

    async def handle_delete_records(self, header, request, conn) -> DeleteRecordsResponse:
        topics = []
        Result = DeleteRecordsResponse.DeleteRecordsTopicResult
        for topic in request.topics:
            out = Result(name=topic.name)
            topics.append(out)
            for p in topic.partitions:
                entry = DeleteRecordsResponse.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                                            error_code=ErrorCode.NONE)
                out.partitions.append(entry)
                part, error = self._leader(topic.name, p.partition_index)
                if part is None:
                    entry.error_code = error
                    continue
                offset = part.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > part.high_watermark:
                    entry.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    continue
                entry.low_watermark = part.log.delete_records_before(offset)
        return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    # -- Metadata and DescribeCluster ------------------------------------------------------------------

    def _alive_brokers(self, listener: str) -> list[tuple[int, str, int, str | None]]:
        out = []
        for broker_id, reg in sorted(self.image.cluster.brokers.items()):
            if reg.fenced:
                continue
            for endpoint in reg.listeners:
                if endpoint.name == listener:
                    out.append((broker_id, endpoint.host, endpoint.port, reg.rack))
                    break
        return out

    async def handle_metadata(self, header, request, conn) -> MetadataResponse:
        version = header.request_api_version
        brokers = self._alive_brokers(conn.listener)
        if request.topics is None or (version == 0 and not request.topics):
            wanted = [(name, None) for name in sorted(self.image.topics.by_name)]
            may_create = False
        else:
            wanted = []
            for t in request.topics:
                topic_id = _from_wire_uuid(t.topic_id) if version >= 10 else None
                wanted.append((t.name, topic_id))
            may_create = self.settings.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
        missing = [name for name, topic_id in wanted
                   if topic_id is None and name is not None and self.image.topics.get_by_name(name) is None]
        create_errors: dict[str, ErrorCode] = {}
        if may_create and missing:
            create_errors = await self._auto_create(missing)
        image = self.image
        Topic = MetadataResponse.MetadataResponseTopic
        topics = []
        for name, topic_id in wanted:
            topic_image = image.topics.get_by_id(topic_id) if topic_id is not None else image.topics.get_by_name(name)
            if topic_image is None:
                if topic_id is not None:
                    error = ErrorCode.UNKNOWN_TOPIC_ID
                elif name in create_errors:
                    error = create_errors[name]
                else:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(Topic(error_code=error, name=name, topic_id=_to_wire_uuid(topic_id)))
                continue
            topics.append(self._topic_metadata(image, topic_image))
        controller_id = brokers[0][0] if brokers else -1
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=b, host=h, port=p, rack=r) for b, h, p, r in brokers],
            cluster_id=self.settings.cluster_id,
            controller_id=controller_id,
            topics=topics,
        )

    @staticmethod
    def _topic_metadata(image: MetadataImage, topic_image) -> Any:
        Topic = MetadataResponse.MetadataResponseTopic
        out = Topic(error_code=ErrorCode.NONE, name=topic_image.name, topic_id=_to_wire_uuid(topic_image.id),
                    is_internal=topic_image.name.startswith("__"))
        for pid, reg in sorted(topic_image.partitions.items()):
            offline = [r for r in reg.replicas if not image.cluster.is_active(r)]
            out.partitions.append(MetadataResponse.MetadataResponsePartition(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE if reg.leader == NO_LEADER else ErrorCode.NONE,
                partition_index=pid,
                leader_id=reg.leader,
                leader_epoch=reg.leader_epoch,
                replica_nodes=list(reg.replicas),
                isr_nodes=list(reg.isr),
                offline_replicas=offline,
            ))
        return out

    async def _auto_create(self, names: list[str]) -> dict[str, ErrorCode]:
        """Create unknown topics with the cluster defaults; their errors (LEADER_NOT_AVAILABLE while in flight)."""
        request = m.CreateTopicsRequest(tuple(m.CreatableTopic(name) for name in names))
        errors: dict[str, ErrorCode] = {}
        try:
            response = await self.channel.create_topics(request)
        except ControllerUnavailable:
            return {name: ErrorCode.LEADER_NOT_AVAILABLE for name in names}
        created = []
        for result in response.topics:
            if result.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                errors[result.name] = ErrorCode.LEADER_NOT_AVAILABLE
                created.append(result.name)
            else:
                errors[result.name] = ErrorCode(result.error_code)
        if created:
            self._log.info("auto-created topics", topics=created)
            await self._wait_for_metadata(
                lambda image: all(image.topics.get_by_name(n) is not None for n in created), METADATA_PROPAGATION_WAIT_S
            )
        return errors

    async def handle_describe_cluster(self, header, request, conn) -> DescribeClusterResponse:
        if header.request_api_version >= 1 and request.endpoint_type != 1:
            return DescribeClusterResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                           error_message="only broker endpoints are described",
                                           endpoint_type=request.endpoint_type, cluster_id=self.settings.cluster_id)
        brokers = self._alive_brokers(conn.listener)
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            cluster_id=self.settings.cluster_id,
            controller_id=brokers[0][0] if brokers else -1,
            brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=b, host=h, port=p, rack=r)
                     for b, h, p, r in brokers],
        )

    # -- topics -----------------------------------------------------------------------------------

    async def handle_create_topics(self, header, request, conn) -> CreateTopicsResponse:
        version = header.request_api_version
        mreq = m.CreateTopicsRequest(
            tuple(
                m.CreatableTopic(
                    t.name, t.num_partitions, t.replication_factor,
                    tuple(m.CreatableReplicaAssignment(a.partition_index, tuple(a.broker_ids)) for a in t.assignments),
                    tuple(m.CreatableTopicConfig(c.name, c.value) for c in t.configs),
                )
                for t in request.topics
            ),
            validate_only=request.validate_only,
        )
        Result = CreateTopicsResponse.CreatableTopicResult
        try:
            mresp = await self.channel.create_topics(mreq)
        except ControllerUnavailable as exc:
            return CreateTopicsResponse(throttle_time_ms=0, topics=[
                Result(name=t.name, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc)) for t in request.topics
            ])
        created = [r.name for r in mresp.topics if r.error_code == ErrorCode.NONE]
        if created and not request.validate_only:
            await self._wait_for_metadata(
                lambda image: all(image.topics.get_by_name(n) is not None for n in created),
                min(request.timeout_ms / 1000, METADATA_PROPAGATION_WAIT_S),
            )
        by_name = {t.name: t for t in request.topics}
        topics = []
        for r in mresp.topics:
            out = Result(name=r.name, topic_id=_to_wire_uuid(r.topic_id), error_code=r.error_code,
                         error_message=r.error_message, num_partitions=r.num_partitions,
                         replication_factor=r.replication_factor)
            if version >= 5 and r.error_code == ErrorCode.NONE:
                out.configs = self._created_topic_configs(r.name, by_name.get(r.name))
            topics.append(out)
        return CreateTopicsResponse(throttle_time_ms=0, topics=topics)

    def _created_topic_configs(self, name: str, requested) -> list:
        given = {c.name: c.value for c in requested.configs} if requested is not None else {}
        Config = CreateTopicsResponse.CreatableTopicConfigs
        out = []
        for key in sorted(config_defs.TOPIC_CONFIGS):
            if key in given:
                value, source = given[key], m.ConfigSource.TOPIC_CONFIG
            else:
                value, source = config_defs.effective_topic_config(
                    self.image, dict(self.settings.static_broker_configs), name, key)
            out.append(Config(name=key, value=value, read_only=False, config_source=int(source), is_sensitive=False))
        return out

    async def handle_delete_topics(self, header, request, conn) -> DeleteTopicsResponse:
        version = header.request_api_version
        if version >= 6:
            states = tuple(m.DeleteTopicState(t.name, _from_wire_uuid(t.topic_id)) for t in request.topics)
        else:
            states = tuple(m.DeleteTopicState(name) for name in request.topic_names)
        Result = DeleteTopicsResponse.DeletableTopicResult
        try:
            mresp = await self.channel.delete_topics(m.DeleteTopicsRequest(states))
        except ControllerUnavailable as exc:
            return DeleteTopicsResponse(throttle_time_ms=0, responses=[
                Result(name=s.name, topic_id=_to_wire_uuid(s.topic_id), error_code=ErrorCode.REQUEST_TIMED_OUT,
                       error_message=str(exc)) for s in states
            ])
        deleted = [r.topic_id for r in mresp.responses if r.error_code == ErrorCode.NONE and r.topic_id is not None]
        if deleted:
            await self._wait_for_metadata(
                lambda image: all(image.topics.get_by_id(t) is None for t in deleted),
                min(request.timeout_ms / 1000, METADATA_PROPAGATION_WAIT_S),
            )
        return DeleteTopicsResponse(throttle_time_ms=0, responses=[
            Result(name=r.name, topic_id=_to_wire_uuid(r.topic_id), error_code=r.error_code,
                   error_message=r.error_message)
            for r in mresp.responses
        ])

    async def handle_create_partitions(self, header, request, conn) -> CreatePartitionsResponse:
        mreq = m.CreatePartitionsRequest(
            tuple(
                m.CreatePartitionsTopic(
                    t.name, t.count,
                    None if t.assignments is None else tuple(tuple(a.broker_ids) for a in t.assignments),
                )
                for t in request.topics
            ),
            validate_only=request.validate_only,
        )
        Result = CreatePartitionsResponse.CreatePartitionsTopicResult
        try:
            mresp = await self.channel.create_partitions(mreq)
        except ControllerUnavailable as exc:
            return CreatePartitionsResponse(throttle_time_ms=0, results=[
                Result(name=t.name, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc))
                for t in request.topics
            ])
        grown = {r.name: t.count for r, t in zip(mresp.results, request.topics, strict=False)
                 if r.error_code == ErrorCode.NONE and r.name == t.name}
        if grown and not request.validate_only:
            await self._wait_for_metadata(
                lambda image: all(
                    (ti := image.topics.get_by_name(n)) is not None and len(ti.partitions) >= c for n, c in grown.items()
                ),
                min(request.timeout_ms / 1000, METADATA_PROPAGATION_WAIT_S),
            )
        return CreatePartitionsResponse(throttle_time_ms=0, results=[
            Result(name=r.name, error_code=r.error_code, error_message=r.error_message) for r in mresp.results
        ])

    # -- configs ----------------------------------------------------------------------------------

    async def handle_describe_configs(self, header, request, conn) -> DescribeConfigsResponse:
        mreq = m.DescribeConfigsRequest(tuple(
            m.DescribeConfigsResource(
                r.resource_type, r.resource_name,
                None if r.configuration_keys is None else tuple(r.configuration_keys),
            )
            for r in request.resources
        ))
        config = ControllerConfig(cluster_id=self.settings.cluster_id,
                                  static_broker_configs=dict(self.settings.static_broker_configs))
        mresp = config_control.describe_configs(self.image, mreq, config)
        Result = DescribeConfigsResponse.DescribeConfigsResult
        results = []
        for r in mresp.results:
            results.append(Result(
                error_code=r.error_code, error_message=r.error_message, resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=[
                    DescribeConfigsResponse.DescribeConfigsResourceResult(
                        name=c.name, value=c.value, read_only=c.read_only, config_source=int(c.config_source),
                        is_sensitive=c.is_sensitive,
                    )
                    for c in r.configs
                ],
            ))
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    async def handle_incremental_alter_configs(self, header, request, conn) -> IncrementalAlterConfigsResponse:
        mreq = m.IncrementalAlterConfigsRequest(
            tuple(
                m.AlterConfigsResource(
                    r.resource_type, r.resource_name,
                    tuple(m.AlterableConfig(c.name, c.config_operation, c.value) for c in r.configs),
                )
                for r in request.resources
            ),
            validate_only=request.validate_only,
        )
        Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        try:
            mresp = await self.channel.incremental_alter_configs(mreq)
        except ControllerUnavailable as exc:
            return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
                Result(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc), resource_type=r.resource_type,
                       resource_name=r.resource_name)
                for r in request.resources
            ])
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
            Result(error_code=r.error_code, error_message=r.error_message, resource_type=r.resource_type,
                   resource_name=r.resource_name)
            for r in mresp.responses
        ])

    # -- producer ids -----------------------------------------------------------------------------

    async def handle_init_producer_id(self, header, request, conn) -> InitProducerIdResponse:
        if request.transactional_id is not None:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                          producer_id=-1, producer_epoch=-1)
        try:
            producer_id = await self.server.producer_ids.generate()
        except ControllerUnavailable as exc:
            self._log.warning("no producer id block", error=str(exc))
            return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                          producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id,
                                      producer_epoch=0)
