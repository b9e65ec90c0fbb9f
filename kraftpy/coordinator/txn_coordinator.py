"""The transaction coordinator: transactional ids by ``__transaction_state`` partition, on the coordinator runtime.

Theory of operation
-------------------
A transactional id belongs to the ``__transaction_state`` partition ``partition_for(id, N)``
(Kafka's ``Utils.abs(id.hashCode) % transaction.state.log.num.partitions``, the same function the
group coordinator places groups with) and is served by the broker that leads that partition. The
broker tells the coordinator when leadership arrives (:meth:`TxnCoordinator.on_elected`, with a
:class:`~kraftpy.coordinator.runtime.PartitionWriter`) and leaves (:meth:`on_resigned`); the
:class:`~kraftpy.coordinator.runtime.CoordinatorRuntime` loads a
:class:`~kraftpy.coordinator.txn_shard.TxnShard` per led partition. Every request is first routed::

    coordinator not running      -> COORDINATOR_NOT_AVAILABLE
    partition not led here       -> NOT_COORDINATOR
    partition still loading      -> COORDINATOR_LOAD_IN_PROGRESS

then handed to its shard. The broker passes in its collaborators: ``allocate_producer_id`` (the
controller-backed producer id manager) and a :class:`~kraftpy.coordinator.txn_shard.MarkerSender`
(WriteTxnMarkers to the partition leaders). The coordinator owns the nursery of the shards' loads,
timers and transaction completions; a shard's tasks end with its leadership.

Interface for the broker's handlers: InitProducerId, AddPartitionsToTxn (and its verify-only form),
AddOffsetsToTxn and EndTxn take plain arguments and return Kafka error codes (the handler maps
PRODUCER_FENCED for old clients with :func:`~kraftpy.coordinator.txn_state.error_for_version` and
builds its response); DescribeTransactions and ListTransactions take the request object and return
the response object.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import structlog
import trio

from kraftpy.coordinator.group_coordinator import partition_for
from kraftpy.coordinator.key_limits import too_long
from kraftpy.coordinator.runtime import CoordinatorRuntime, CoordinatorShard, PartitionWriter, ShardStatus
from kraftpy.coordinator.txn_shard import InitProducerIdResult, MarkerSender, TxnShard
from kraftpy.coordinator.txn_state import (
    ProducerIdAndEpoch,
    TopicPartition,
    TxnConfig,
    TxnState,
    state_from_kafka_name,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeTransactionsResponse, ListTransactionsResponse

_logger = structlog.get_logger(__name__)


class TxnCoordinator:
    def __init__(self, config: TxnConfig, *, clock: Callable[[], int],
                 allocate_producer_id: Callable[[], Awaitable[int]], marker_sender: MarkerSender,
                 offsets_topic_num_partitions: int = 50, node_id: int = -1) -> None:
        """``clock`` returns wall-clock milliseconds (transaction timestamps, timeouts, expiry); timers
        run on trio's clock. ``offsets_topic_num_partitions`` places a group's offsets for AddOffsetsToTxn."""
        self.config = config
        self.clock = clock
        self.allocate_producer_id = allocate_producer_id
        self.marker_sender = marker_sender
        self.offsets_topic_num_partitions = offsets_topic_num_partitions
        self.node_id = node_id
        self._log = _logger.bind(node_id=node_id)
        self._nursery: trio.Nursery | None = None
        self.runtime = CoordinatorRuntime(self._make_shard, log=self._log)

    def _make_shard(self, shard: CoordinatorShard) -> TxnShard:
        return TxnShard(shard, self.config, self.clock, allocate_producer_id=self.allocate_producer_id,
                        marker_sender=self.marker_sender, spawn=self._spawn, request_reload=self._reload,
                        log=self._log)

    def _reload(self, partition: int, leader_epoch: int) -> None:
        """Load the partition again in the same leader epoch (its memory may no longer follow its log):
        the shard of that epoch is closed and a new one loads on the same writer."""
        shard = self.runtime.shards.get(partition)
        if shard is None or shard.leader_epoch != leader_epoch or shard.status is ShardStatus.CLOSED:
            return
        self._log.info("transaction coordinator reloading its partition", partition=partition,
                       leader_epoch=leader_epoch)
        self.runtime.on_resigned(partition, leader_epoch)
        self.runtime.on_elected(shard.writer)

    def _spawn(self, fn, *args) -> None:
        assert self._nursery is not None, "the transaction coordinator is not running"
        self._nursery.start_soon(fn, *args)

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Own the nursery of loads, timers and completions; serve until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.runtime.run)
                task_status.started()
        finally:
            self._nursery = None

    def on_elected(self, writer: PartitionWriter) -> None:
        """This broker now leads partition writer.partition at writer.leader_epoch: start loading it."""
        self.runtime.on_elected(writer)

    def on_resigned(self, partition: int, leader_epoch: int) -> None:
        """Leadership of that partition left this broker: stop its completions and drop its ids."""
        self.runtime.on_resigned(partition, leader_epoch)

    def owned_partitions(self) -> set[int]:
        return self.runtime.owned_partitions()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.state_log_num_partitions)

    def shard_for(self, transactional_id: str) -> TxnShard | None:
        """The loaded shard serving ``transactional_id`` here, if any (for tests and tools)."""
        shard = self.runtime.shard(self.partition_for(transactional_id))
        return shard.machine if shard is not None and shard.active else None

    def _route(self, transactional_id: str) -> tuple[ErrorCode | None, TxnShard | None]:
        if not self.runtime.running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        shard = self.runtime.shard(self.partition_for(transactional_id))
        if shard is None:
            return ErrorCode.NOT_COORDINATOR, None
        if shard.status is ShardStatus.LOADING or shard.machine is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        return None, shard.machine

    # -- the producer's requests -----------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                               expected: ProducerIdAndEpoch | None = None) -> InitProducerIdResult:
        """InitProducerId with a transactional id; ``expected`` is the producer id and epoch the
        producer already has (KIP-360), None when it has none (-1/-1 on the wire)."""
        if not transactional_id or too_long(transactional_id):  # longer than its record key can hold
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        error, shard = self._route(transactional_id)
        if error is not None:
            return InitProducerIdResult(error)
        return await shard.init_producer_id(transactional_id, transaction_timeout_ms, expected)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        """AddPartitionsToTxn for one transaction: one error for all its partitions."""
        error, shard = self._route(transactional_id)
        if error is not None:
            return error
        return await shard.add_partitions(transactional_id, producer_id, producer_epoch, partitions)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn with verify_only (KIP-890 part 1): an error per partition."""
        parts = list(partitions)
        error, shard = self._route(transactional_id)
        if error is not None:
            return dict.fromkeys(parts, error)
        return shard.verify_partitions(transactional_id, producer_id, producer_epoch, parts)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        error, shard = self._route(transactional_id)
        if error is not None:
            return error
        offsets_partition = partition_for(group_id, self.offsets_topic_num_partitions)
        return await shard.add_offsets(transactional_id, producer_id, producer_epoch, offsets_partition)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: NONE once the decision (PREPARE_COMMIT/PREPARE_ABORT) is written."""
        error, shard = self._route(transactional_id)
        if error is not None:
            return error
        return await shard.end_txn(transactional_id, producer_id, producer_epoch, commit)

    # -- tools -----------------------------------------------------------------------------------

    async def describe_transactions(self, request) -> DescribeTransactionsResponse:
        """DescribeTransactions: each id's state, or why it cannot be described here."""
        cls = DescribeTransactionsResponse.TransactionState
        out = []
        for txn_id in request.transactional_ids:
            error, shard = self._route(txn_id)
            meta = shard.describe(txn_id) if shard is not None else None
            if error is None and meta is None:
                error = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            if error is not None:
                out.append(cls(error_code=error, transactional_id=txn_id, transaction_state="",
                               transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                               producer_epoch=-1))
                continue
            out.append(cls(
                error_code=ErrorCode.NONE, transactional_id=txn_id, transaction_state=meta.state.kafka_name,
                transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.txn_start_timestamp,
                producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                topics=[DescribeTransactionsResponse.TopicData(topic=t, partitions=ps)
                        for t, ps in meta.topics().items()]))
        return DescribeTransactionsResponse(transaction_states=out)

    async def list_transactions(self, request) -> ListTransactionsResponse:
        """ListTransactions: the ids of every loaded partition that pass the filters; while any
        partition loads, COORDINATOR_LOAD_IN_PROGRESS and no ids (as Kafka answers)."""
        if not self.runtime.running:
            return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        states: set[TxnState] = set()
        unknown: list[str] = []
        for name in request.state_filters:
            try:
                states.add(state_from_kafka_name(name))
            except ValueError:
                unknown.append(name)
        if self.runtime.is_loading():
            return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                            unknown_state_filters=unknown)
        duration = getattr(request, "duration_filter", -1)
        cls = ListTransactionsResponse.TransactionState
        listed = []
        if not (unknown and not states):
            for shard in self.runtime.active_shards():
                for meta in shard.machine.list_transactions(frozenset(states), frozenset(request.producer_id_filters),
                                                            duration):
                    listed.append(cls(transactional_id=meta.transactional_id, producer_id=meta.producer_id,
                                      transaction_state=meta.state.kafka_name))
        return ListTransactionsResponse(error_code=ErrorCode.NONE, unknown_state_filters=unknown,
                                        transaction_states=listed)
