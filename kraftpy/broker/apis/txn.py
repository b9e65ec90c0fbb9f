"""Transactions on the wire: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, and the tools' APIs.

A transactional producer finds its coordinator with FindCoordinator key type 1 (kraftpy.broker.apis.groups)
and sends it the requests below; the `TxnCoordinator` decides each one and this module only maps
requests to its calls and its error codes to what the request's version knows
(`error_for_version`: PRODUCER_FENCED reaches older clients as INVALID_PRODUCER_EPOCH):

    InitProducerId        no transactional id: a fresh idempotent producer id (ProducerIdManager);
                          with one: the coordinator's id and epoch (a new epoch fences older producers)
    AddPartitionsToTxn    v0-3 from producers: one transaction, one error for all its partitions;
                          partitions of unknown topics: UNKNOWN_TOPIC_OR_PARTITION, the others then
                          OPERATION_NOT_ATTEMPTED (nothing is added). v4 from partition leaders: a
                          batch of transactions, each ``verify_only`` (KIP-890) or added.
    AddOffsetsToTxn       the group's __consumer_offsets partition joins the transaction
    EndTxn                answered once PREPARE_COMMIT / PREPARE_ABORT is written
    DescribeTransactions, ListTransactions    the coordinator's view of its transactional ids
    DescribeProducers     a partition leader's producer state: the producers it knows, and the
                          offset each one's open transaction started at

TxnOffsetCommit goes to the group coordinator (kraftpy.broker.apis.groups).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from kraftpy.broker.apis.common import leader_partition
from kraftpy.broker.authorization import (
    CLUSTER_ACTION,
    DESCRIBE,
    GROUP,
    NO_AUTHORIZATION,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    BrokerAuthorizer,
)
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.coordinator.txn_coordinator import TxnCoordinator
from kraftpy.coordinator.txn_state import ProducerIdAndEpoch, error_for_version
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeProducersResponse,
    EndTxnResponse,
    InitProducerIdResponse,
)
from kraftpy.rpc.kafka_server import Connection

_logger = structlog.get_logger(__name__)

#: The first InitProducerId version that carries the producer's current id and epoch (KIP-360).
_EXPECTED_SINCE = 3


class TxnApi:
    #: Set by the broker: WRITE on the transactional id (and on topics, READ on groups); see API_RULES.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, coordinator: TxnCoordinator, replicas: ReplicaManager, metadata: MetadataCache,
                 generate_producer_id: Callable[[], Awaitable[int]], *, node_id: int = -1) -> None:
        self.coordinator = coordinator
        self.replicas = replicas
        self.metadata = metadata
        self.generate_producer_id = generate_producer_id
        self._log = _logger.bind(node_id=node_id)

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
            ApiKey.DESCRIBE_PRODUCERS: self.handle_describe_producers,
        }

    # -- InitProducerId ---------------------------------------------------------------------------

    async def handle_init_producer_id(self, header: Any, request: Any, conn: Connection) -> InitProducerIdResponse:
        version = header.request_api_version
        if self.authz.enabled:
            if request.transactional_id is not None:
                if not self.authz.allows(conn, WRITE, TRANSACTIONAL_ID, request.transactional_id):
                    return InitProducerIdResponse(throttle_time_ms=0, producer_id=-1, producer_epoch=-1,
                                                  error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            elif not self.authz.may_produce_idempotently(conn):
                return InitProducerIdResponse(throttle_time_ms=0, producer_id=-1, producer_epoch=-1,
                                              error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if request.transactional_id is None:
            producer_id = await self.generate_producer_id()  # ControllerUnavailable: see forwarding
            return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id,
                                          producer_epoch=0)
        expected = None
        if version >= _EXPECTED_SINCE and request.producer_id != -1:
            expected = ProducerIdAndEpoch(request.producer_id, request.producer_epoch)
        result = await self.coordinator.init_producer_id(request.transactional_id, request.transaction_timeout_ms,
                                                         expected)
        error = error_for_version(result.error, ApiKey.INIT_PRODUCER_ID, version)
        if error != ErrorCode.NONE:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=error, producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                      producer_id=result.producer_id, producer_epoch=result.producer_epoch)

    # -- AddPartitionsToTxn -----------------------------------------------------------------------

    def _unknown(self, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
        topics = self.metadata.image.topics
        out = set()
        for name, index in partitions:
            topic = topics.get_by_name(name)
            if topic is None or index not in topic.partitions:
                out.add((name, index))
        return out

    async def handle_add_partitions_to_txn(self, header: Any, request: Any, conn: Connection
                                           ) -> AddPartitionsToTxnResponse:
        version = header.request_api_version
        if version < 4:
            partitions = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
            refused = self._refused_partitions(conn, request.v3_and_below_transactional_id, partitions)
            if refused is not None:
                return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_by_topic(refused))
            answer = await self._add(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                     request.v3_and_below_producer_epoch, partitions, version)
            return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_by_topic(answer))
        if not self.authz.allows_cluster(conn, CLUSTER_ACTION):  # v4+: brokers only (KIP-890)
            return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                              results_by_transaction=[])
        results = []
        for txn in request.transactions:
            partitions = [(t.name, p) for t in txn.topics for p in t.partitions]
            if txn.verify_only:
                answer = self.coordinator.verify_partitions(txn.transactional_id, txn.producer_id,
                                                            txn.producer_epoch, partitions)
            else:
                answer = await self._add(txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions,
                                         version)
            results.append(AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id, topic_results=_by_topic(answer)))
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                          results_by_transaction=results)

    def _refused_partitions(self, conn: Connection, transactional_id: str, partitions: list[tuple[str, int]]
                            ) -> dict[tuple[str, int], ErrorCode] | None:
        """A client's AddPartitionsToTxn: WRITE on the transactional id and on each topic; the answer when
        something is refused (the others OPERATION_NOT_ATTEMPTED), else None."""
        if not self.authz.enabled:
            return None
        if not self.authz.allows(conn, WRITE, TRANSACTIONAL_ID, transactional_id):
            return dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        denied = self.authz.denied(conn, WRITE, TOPIC, (name for name, _ in partitions))
        if not denied:
            return None
        return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in partitions}

    async def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: list[tuple[str, int]], version: int) -> dict[tuple[str, int], ErrorCode]:
        unknown = self._unknown(partitions)
        if unknown:
            return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                    for tp in partitions}
        error = await self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions)
        return dict.fromkeys(partitions, error_for_version(error, ApiKey.ADD_PARTITIONS_TO_TXN, version))

    # -- AddOffsetsToTxn, EndTxn ------------------------------------------------------------------

    async def handle_add_offsets_to_txn(self, header: Any, request: Any, conn: Connection) -> AddOffsetsToTxnResponse:
        if not self.authz.allows(conn, WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.authz.allows(conn, READ, GROUP, request.group_id):
            return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        error = await self.coordinator.add_offsets(request.transactional_id, request.producer_id,
                                                   request.producer_epoch, request.group_id)
        return AddOffsetsToTxnResponse(
            throttle_time_ms=0,
            error_code=error_for_version(error, ApiKey.ADD_OFFSETS_TO_TXN, header.request_api_version))

    async def handle_end_txn(self, header: Any, request: Any, conn: Connection) -> EndTxnResponse:
        if not self.authz.allows(conn, WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        error = await self.coordinator.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                               request.committed)
        return EndTxnResponse(throttle_time_ms=0,
                              error_code=error_for_version(error, ApiKey.END_TXN, header.request_api_version))

    # -- the tools' APIs --------------------------------------------------------------------------

    async def handle_describe_transactions(self, header: Any, request: Any, conn: Connection) -> Any:
        denied = self.authz.denied(conn, DESCRIBE, TRANSACTIONAL_ID, request.transactional_ids)
        if not denied:
            return await self.coordinator.describe_transactions(request)
        asked = list(request.transactional_ids)
        request.transactional_ids = [t for t in asked if t not in denied]
        response = await self.coordinator.describe_transactions(request)
        State = type(response).TransactionState
        response.transaction_states = list(response.transaction_states) + [
            State(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=t, transaction_state="",
                  transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])
            for t in asked if t in denied]
        return response

    async def handle_list_transactions(self, header: Any, request: Any, conn: Connection) -> Any:
        response = await self.coordinator.list_transactions(request)
        if self.authz.enabled:
            response.transaction_states = [
                s for s in response.transaction_states
                if self.authz.allows(conn, DESCRIBE, TRANSACTIONAL_ID, s.transactional_id, log_denied=False)]
        return response

    async def handle_describe_producers(self, header: Any, request: Any, conn: Connection
                                        ) -> DescribeProducersResponse:
        R = DescribeProducersResponse
        topics = []
        denied = self.authz.denied(conn, READ, TOPIC, (t.name for t in request.topics))
        for topic in request.topics:
            partitions = []
            for index in topic.partition_indexes:
                if topic.name in denied:
                    partitions.append(R.PartitionResponse(partition_index=index,
                                                          error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    continue
                part, error = leader_partition(self.replicas, self.metadata, topic.name, index)
                if part is None:
                    partitions.append(R.PartitionResponse(partition_index=index, error_code=error))
                    continue
                producers = [
                    R.ProducerState(producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
                                    last_sequence=entry.last_seq if entry.batches else -1,
                                    last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
                                    current_txn_start_offset=entry.current_txn_first_offset)
                    for entry in sorted(part.producer_state.producers.values(), key=lambda e: e.producer_id)]
                partitions.append(R.PartitionResponse(partition_index=index, error_code=ErrorCode.NONE,
                                                      active_producers=producers))
            topics.append(R.TopicResponse(name=topic.name, partitions=partitions))
        return R(throttle_time_ms=0, topics=topics)


def _by_topic(answer: dict[tuple[str, int], ErrorCode]) -> list[Any]:
    """Per-partition errors as AddPartitionsToTxn's topic results, topics in the order first named."""
    R = AddPartitionsToTxnResponse
    topics: dict[str, list[Any]] = {}
    for (name, index), code in answer.items():
        topics.setdefault(name, []).append(R.AddPartitionsToTxnPartitionResult(partition_index=index,
                                                                                partition_error_code=code))
    return [R.AddPartitionsToTxnTopicResult(name=name, results_by_partition=results)
            for name, results in topics.items()]
