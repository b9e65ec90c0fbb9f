"""WriteTxnMarkers: the transaction coordinator has this broker end a transaction in the partitions it leads.

Each marker of a request names a producer, its epoch, the coordinator's epoch, the outcome
(``transaction_result``: true COMMIT, false ABORT) and the partitions the transaction wrote to. For
each partition led here the leader appends the marker (`Partition.append_txn_marker`: the producer
and coordinator epochs checked against the producer state, min.insync.replicas as for acks=all);
the answer comes once every appended marker is replicated to the ISR (the high watermark passed it),
or when ``timeout_ms`` has passed, as Kafka answers through its delayed produce. Per-partition
errors are Kafka's:

* UNKNOWN_TOPIC_OR_PARTITION — no such partition; NOT_LEADER_OR_FOLLOWER — not led here (also
  when leadership moves before the marker is replicated); KAFKA_STORAGE_ERROR — its log failed;
* INVALID_PRODUCER_EPOCH — an older producer epoch than the partition's;
  TRANSACTION_COORDINATOR_FENCED — an older coordinator epoch than the producer's last marker;
* NOT_ENOUGH_REPLICAS(_AFTER_APPEND) — the ISR is below min.insync.replicas; REQUEST_TIMED_OUT —
  not replicated in time (the coordinator retries: a marker appended twice closes nothing the
  second time).

Kafka serves it to other brokers only; here, as there, it is on the broker listener.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from kraftpy.broker.apis.common import leader_partition
from kraftpy.broker.authorization import CLUSTER_ACTION, NO_AUTHORIZATION, BrokerAuthorizer
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.partition import Partition, TopicPartition
from kraftpy.broker.purgatory import wait_for_change
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.metrics import waiting_remotely
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import WriteTxnMarkersResponse
from kraftpy.rpc.kafka_server import Connection

#: How long a marker may take to reach the ISR before REQUEST_TIMED_OUT (Kafka's request.timeout.ms default).
DEFAULT_TIMEOUT_MS = 30_000

#: Told of each marker once it is replicated: (producer id, committed, each partition it ended with
#: the marker's offset there).
MarkersWritten = Callable[[int, bool, list[tuple[TopicPartition, int]]], None]


class TxnMarkersApi:
    #: Set by the broker: CLUSTER_ACTION on the cluster (the transaction coordinators' brokers).
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, replicas: ReplicaManager, metadata: MetadataCache, clock: Callable[[], int], *,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS, on_markers_written: MarkersWritten | None = None) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.clock = clock
        self.timeout_ms = timeout_ms
        #: The group coordinator completes the transactional offset commits of a producer here (Kafka's
        #: onTransactionCompleted for the ``__consumer_offsets`` partitions of a marker).
        self.on_markers_written = on_markers_written

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.WRITE_TXN_MARKERS: self.handle_write_txn_markers}

    async def handle_write_txn_markers(self, header: Any, request: Any, conn: Connection) -> WriteTxnMarkersResponse:
        Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
        TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
        PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult
        results = []
        #: (partition result, partition, offset the high watermark must reach, marker index)
        waiting: list[tuple[Any, Partition, int, int]] = []
        now = self.clock()
        cluster_denied = not self.authz.allows_cluster(conn, CLUSTER_ACTION)
        for marker in request.markers:
            result = Result(producer_id=marker.producer_id)
            results.append(result)
            for topic in marker.topics:
                topic_result = TopicResult(name=topic.name)
                result.topics.append(topic_result)
                for index in topic.partition_indexes:
                    out = PartitionResult(partition_index=index, error_code=ErrorCode.NONE)
                    topic_result.partitions.append(out)
                    if cluster_denied:
                        out.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                        continue
                    part, error = leader_partition(self.replicas, self.metadata, topic.name, index)
                    if part is None:
                        out.error_code = error
                        continue
                    try:
                        appended = await part.append_txn_marker(
                            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                            marker.transaction_result, now=now)
                    except OSError:
                        out.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                        continue
                    if appended.error != ErrorCode.NONE:
                        out.error_code = appended.error
                        continue
                    waiting.append((out, part, appended.next_offset, len(results) - 1))
        await self._await_replication(waiting)
        if self.on_markers_written is not None:
            for i, marker in enumerate(request.markers):
                ended = [(part.tp, next_offset - 1) for out, part, next_offset, m in waiting
                         if m == i and out.error_code == ErrorCode.NONE]
                if ended:
                    self.on_markers_written(marker.producer_id, marker.transaction_result, ended)
        return WriteTxnMarkersResponse(markers=results)

    async def _await_replication(self, waiting: list[tuple[Any, Partition, int, int]]) -> None:
        """acks=all for every appended marker: until the high watermark passes it, its partition stops
        being led here in that epoch, or the timeout."""
        epochs = {id(part): part.leader_epoch for _, part, _, _ in waiting}
        deadline = trio.current_time() + self.timeout_ms / 1000
        pending = list(waiting)
        while True:
            still = []
            for item in pending:
                out, part, required, _ = item
                if not part.is_leader or part.leader_epoch != epochs[id(part)]:
                    out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif part.high_watermark >= required:
                    if len(part.isr) < part.min_insync_replicas:
                        out.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                else:
                    still.append(item)
            pending = still
            if not pending:
                return
            if trio.current_time() >= deadline:
                for out, _, _, _ in pending:
                    out.error_code = ErrorCode.REQUEST_TIMED_OUT
                return
            with waiting_remotely():
                await wait_for_change([part.hw_watchers for _, part, _, _ in pending], deadline)
