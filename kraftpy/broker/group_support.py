"""What the broker gives the group coordinator: its `__consumer_offsets` partitions, and word of their leadership.

The group coordinator (kraftpy.coordinator) is a state machine over `__consumer_offsets`; like Kafka's
coordinator runtime it writes and reads its partitions through a `PartitionWriter` and is told when
this broker starts or stops leading one. This module is the broker's side of that contract:

* `OffsetsPartitionWriter` is one `__consumer_offsets` partition led here in one leader epoch.
  ``append`` writes the coordinator's records as one uncompressed batch through the partition's
  ordinary leader append (the same path as a Produce: producer state, segment rolls in a worker
  thread, min.insync.replicas) and returns only once the high watermark has passed it, as an
  acks=all produce waits, bounded by offsets.commit.timeout.ms. A transactional append (a
  TxnOffsetCommit's records) is a transactional batch of the producer's id and epoch, so the
  partition's producer state opens the producer's transaction and fences an older epoch
  (INVALID_PRODUCER_EPOCH); it is numbered as the producer's next batch in this partition (Kafka's
  coordinator writes sequence 0 and skips the check; numbering it passes the ordinary one).
  ``read_committed`` replays the
  partition up to its high watermark, reading and decoding in a worker thread a buffer at a time
  (offsets.load.buffer.size), transactional records and markers marked as such; on a new leader it first waits until the high watermark covers every
  record of the earlier leader epochs (a new leader learns its high watermark from its followers'
  fetches, so it may start below records that were acknowledged).
* `OffsetsLeadership` compares, after every metadata change the replicas applied (and after the
  broker is fenced or unfenced), the `__consumer_offsets` partitions this broker leads with those the
  coordinator was last told of, and calls ``on_elected`` with a new writer for each partition newly
  led or led in a new leader epoch, ``on_resigned`` for each one no longer led in the epoch it was
  given. Its work is proportional to the offsets topic's partitions, never to the whole image.

Invariant: a writer acts only in its leader epoch. Every call checks that the partition is still led
here in that epoch and raises `NotLeaderError` otherwise, so a coordinator that lost a partition
never has a write acknowledged by it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

import structlog
import trio

from kraftpy.broker.partition import Partition
from kraftpy.broker.producer_state import MAX_SEQUENCE
from kraftpy.broker.purgatory import wait_for_change
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.broker.settings import BrokerSettings
from kraftpy.coordinator.group_coordinator import GroupConfig
from kraftpy.coordinator.runtime import (
    NO_PRODUCER_ID,
    CoordinatorWriteError,
    LoadedRecord,
    NotLeaderError,
    TxnMarker,
    TxnRecord,
)
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.topic_names import GROUP_METADATA_TOPIC_NAME
from kraftpy.protocol.batch_header import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    CorruptRecordError,
    iter_batches,
    read_header,
)
from kraftpy.protocol.control_records import is_end_txn_marker_header, read_end_txn_marker
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import SimpleRecord, build_batch, decode_batch
from kraftpy.storage.log import LogClosedError, OffsetOutOfRangeError, RecordTooLargeError

_logger = structlog.get_logger(__name__)

#: What `read_committed` reads at a time when the broker's settings do not say (offsets.load.buffer.size).
DEFAULT_LOAD_BUFFER_BYTES = 5 * 1024 * 1024


def group_config(settings: BrokerSettings) -> GroupConfig:
    """The coordinator's settings from the broker's (Kafka's key names in `GroupConfig`)."""
    return GroupConfig(
        offsets_topic_num_partitions=settings.offsets_topic_num_partitions,
        offsets_retention_minutes=settings.offsets_retention_minutes,
        offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
        offsets_commit_timeout_ms=settings.offsets_commit_timeout_ms,
        offset_metadata_max_bytes=settings.offset_metadata_max_bytes,
        group_initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        group_min_session_timeout_ms=settings.group_min_session_timeout_ms,
        group_max_session_timeout_ms=settings.group_max_session_timeout_ms,
        group_max_size=settings.group_max_size,
        group_coordinator_rebalance_protocols=settings.group_coordinator_rebalance_protocols,
        group_consumer_session_timeout_ms=settings.group_consumer_session_timeout_ms,
        group_consumer_heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
        group_consumer_max_size=settings.group_consumer_max_size,
        group_consumer_assignors=settings.group_consumer_assignors,
        group_consumer_migration_policy=settings.group_consumer_migration_policy,
    )


class OffsetsPartitionWriter:
    """One `__consumer_offsets` partition led by this broker in one leader epoch (the coordinator's
    `PartitionWriter`)."""

    def __init__(self, part: Partition, *, commit_timeout_ms: int, clock: Callable[[], int],
                 load_buffer_bytes: int = DEFAULT_LOAD_BUFFER_BYTES) -> None:
        self.partition = part.tp.partition
        self.leader_epoch = part.leader_epoch
        self._part = part
        self._commit_timeout_s = commit_timeout_ms / 1000
        self._clock = clock
        self._load_buffer_bytes = max(load_buffer_bytes, 1)

    def __repr__(self) -> str:
        return f"OffsetsPartitionWriter({self._part.tp}, leader_epoch={self.leader_epoch})"

    @property
    def still_leader(self) -> bool:
        part = self._part
        return part.is_leader and part.leader_epoch == self.leader_epoch and not part.log.closed

    def _leader_or_raise(self) -> Partition:
        if not self.still_leader:
            raise NotLeaderError(f"{self._part.tp} is no longer led by this broker in leader epoch "
                                 f"{self.leader_epoch}")
        return self._part

    async def append(self, records: Sequence[tuple[bytes, bytes | None]], *, producer_id: int = NO_PRODUCER_ID,
                     producer_epoch: int = NO_PRODUCER_EPOCH, transactional: bool = False) -> int:
        """Append ``records`` as one batch and wait until it is committed; its last offset. With
        ``producer_id`` (and ``transactional``), a batch of that producer's (transaction)."""
        if not records:
            raise ValueError("an append to __consumer_offsets needs at least one record")
        if transactional and producer_id == NO_PRODUCER_ID:
            raise ValueError("a transactional append needs a producer id")
        part = self._leader_or_raise()
        now = self._clock()
        base_sequence = NO_SEQUENCE
        if producer_id != NO_PRODUCER_ID:
            base_sequence = self._next_sequence(part, producer_id, producer_epoch, now)
        batch = build_batch([SimpleRecord(key, value, timestamp=now) for key, value in records], base_timestamp=now,
                            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                            is_transactional=transactional)
        header = read_header(batch, 0)
        try:
            appended = await part.append_as_leader(batch, header, acks=-1, now=now,
                                                    leader_epoch=self.leader_epoch)
        except OSError as exc:
            raise CoordinatorWriteError(ErrorCode.KAFKA_STORAGE_ERROR, f"{part.tp}: {exc}") from exc
        except RecordTooLargeError as exc:
            raise CoordinatorWriteError(ErrorCode.MESSAGE_TOO_LARGE, f"{part.tp}: {exc}") from exc
        if appended.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise NotLeaderError(f"{part.tp} is no longer led by this broker")
        if appended.error != ErrorCode.NONE:
            raise CoordinatorWriteError(appended.error, appended.message or f"{part.tp}: {appended.error.name}")
        await self._await_commit(part, appended.next_offset)
        return appended.next_offset - 1

    @staticmethod
    def _next_sequence(part: Partition, producer_id: int, producer_epoch: int, now: int) -> int:
        """The sequence the producer's next batch in this partition has (0 to start or in a new epoch)."""
        state = part.producer_state
        entry = state.entry(producer_id)
        if entry is None or state.is_expired(entry, now) or entry.producer_epoch != producer_epoch \
                or not entry.batches:
            return 0
        return (entry.last_seq + 1) & MAX_SEQUENCE

    async def _await_commit(self, part: Partition, required: int) -> None:
        """acks=all: until the high watermark reaches ``required`` (or leadership moves, or the timeout)."""
        deadline = trio.current_time() + self._commit_timeout_s
        while True:
            self._leader_or_raise()
            if part.high_watermark >= required:
                if len(part.isr) < part.min_insync_replicas:
                    raise CoordinatorWriteError(
                        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                        f"{part.tp}: ISR {list(part.isr)} is smaller than min.insync.replicas={part.min_insync_replicas}")
                return
            if trio.current_time() >= deadline:
                raise CoordinatorWriteError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{part.tp}: not replicated to the ISR {list(part.isr)} within offsets.commit.timeout.ms")
            await wait_for_change([part.hw_watchers], deadline)

    async def read_committed(self) -> AsyncIterator[LoadedRecord]:
        """Every record from the log start to the high watermark, as (offset, key, value), a `TxnRecord`
        for a record of a transactional batch, a `TxnMarker` for a transaction marker (other control
        batches are skipped); each buffer is read and decoded in a worker thread.

        A new leader's high watermark may lag behind records that were committed, and acknowledged,
        under the previous leader: it learns the true one only once its followers fetch from it in its
        epoch. So the replay first waits until the high watermark reaches the offset this leader
        epoch started at (every record the previous leaders committed lies below it), then reads up
        to the high watermark as it is then."""
        part = self._leader_or_raise()
        while part.high_watermark < part.leader_epoch_start_offset:
            await wait_for_change([part.hw_watchers], math.inf)
            self._leader_or_raise()
        log = part.log
        end = part.high_watermark
        offset = log.log_start_offset
        while offset < end:
            self._leader_or_raise()
            try:
                records, next_offset = await trio.to_thread.run_sync(self._read_chunk, offset, end)
            except LogClosedError as exc:
                raise NotLeaderError(f"{part.tp}: its log was closed") from exc
            except OffsetOutOfRangeError:
                start = log.log_start_offset
                if start <= offset:
                    raise
                offset = start  # the log start moved up while loading: what was below it is gone
                continue
            except CorruptRecordError as exc:
                raise CoordinatorWriteError(ErrorCode.CORRUPT_MESSAGE, f"{part.tp}: {exc}") from exc
            for record in records:
                yield record
            if next_offset <= offset:
                break
            offset = next_offset

    def _read_chunk(self, offset: int, end: int) -> tuple[list[LoadedRecord], int]:
        """Blocking: the records of the whole batches from ``offset`` below ``end``, and the offset after them."""
        data = self._part.log.read_bytes(offset, self._load_buffer_bytes, max_offset=end, whole_batches=True)
        out: list[LoadedRecord] = []
        next_offset = offset
        for pos, header in iter_batches(data):
            next_offset = header.next_offset
            if header.is_control:
                if is_end_txn_marker_header(header) and offset <= header.base_offset < end:
                    marker = read_end_txn_marker(data, pos, verify_crc=False)
                    out.append(TxnMarker(marker.offset, marker.producer_id, marker.producer_epoch, marker.committed))
                continue
            batch = decode_batch(data, pos, verify_crc=False)
            for record in batch.records:
                if offset <= record.offset < end:
                    if header.is_transactional:
                        out.append(TxnRecord(record.offset, record.key, record.value, header.producer_id,
                                             header.producer_epoch))
                    else:
                        out.append((record.offset, record.key, record.value))
        return out, next_offset


class LeadershipListener(Protocol):
    def on_elected(self, writer: OffsetsPartitionWriter) -> None: ...

    def on_resigned(self, partition: int, leader_epoch: int) -> None: ...


class OffsetsLeadership:
    """Tells a coordinator which partitions of its internal topic (`__consumer_offsets` for the group
    coordinator, ``topic`` for another) this broker leads (see the module doc)."""

    def __init__(self, replicas: ReplicaManager, listener: LeadershipListener, settings: BrokerSettings,
                 clock: Callable[[], int], *, topic: str = GROUP_METADATA_TOPIC_NAME,
                 role: str = "group coordinator") -> None:
        self.replicas = replicas
        self.listener = listener
        self.settings = settings
        self.clock = clock
        self.topic = topic
        self.role = role
        self._log = _logger.bind(node_id=settings.node_id)
        #: partition -> the leader epoch the coordinator was last told this broker leads it in.
        self.led: dict[int, int] = {}

    def sync(self, image: MetadataImage) -> None:
        """Compare what is led now with what the coordinator knows; tell it the difference (trio thread)."""
        topic = image.topics.get_by_name(self.topic)
        leading: dict[int, Partition] = {}
        if topic is not None:
            for index in topic.partitions:
                part = self.replicas.get(self.topic, index)
                if part is not None and part.topic_id == topic.id and part.is_leader and not part.log.closed:
                    leading[index] = part
        for index, epoch in list(self.led.items()):
            part = leading.get(index)
            if part is None or part.leader_epoch != epoch:
                del self.led[index]
                self._log.info(f"resigned as {self.role}", partition=index, leader_epoch=epoch)
                self.listener.on_resigned(index, epoch)
        for index, part in sorted(leading.items()):
            if index in self.led:
                continue
            self.led[index] = part.leader_epoch
            self._log.info(f"elected {self.role}", partition=index, leader_epoch=part.leader_epoch)
            self.listener.on_elected(OffsetsPartitionWriter(
                part, commit_timeout_ms=self.settings.offsets_commit_timeout_ms, clock=self.clock,
                load_buffer_bytes=self.settings.offsets_load_buffer_size))
