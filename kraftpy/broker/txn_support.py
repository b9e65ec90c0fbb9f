"""What the broker gives the transaction coordinator, and what a partition leader asks of it.

The transaction coordinator (kraftpy.coordinator.txn_coordinator) decides; the broker carries its
decisions to the partitions and brings partitions' questions to it, both over the Kafka protocol to
the brokers concerned (this one included), as Kafka's TransactionMarkerChannelManager and
AddPartitionsToTxnManager do:

* `TxnMarkerSender` is the coordinator's `MarkerSender`: it writes a transaction's COMMIT or ABORT
  marker to every partition the transaction wrote to, with WriteTxnMarkers to each partition's
  leader, the leaders in parallel. A partition whose topic was deleted counts as done; any other
  failure (no leader, a leader that moved, a broker that cannot be reached, min.insync.replicas)
  makes ``send`` raise, and the coordinator tries again with backoff. Partitions that took their
  marker are remembered between tries of the same decision, so a retry writes only the missing
  markers.
* `TxnVerifier` answers a leader's question of KIP-890 part 1 before it appends a producer's first
  transactional batch in a partition: is this partition part of the producer's ongoing transaction?
  The coordinator of the transactional id answers it, in this broker when it leads the id's
  ``__transaction_state`` partition, else through AddPartitionsToTxn v4 ``verify_only``; questions
  to one coordinator broker that arrive while one is in flight go together in the next request (v4
  carries many transactions). Errors that mean "ask again" (no coordinator, coordinator loading or
  moved, concurrent transactions, broker unreachable) reach the producer as NOT_ENOUGH_REPLICAS, which
  every client retries, as Kafka answers them.
* `BrokerConnections` holds one connection per destination broker on the inter-broker listener,
  one request at a time on each, reconnecting after a failure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs
import structlog
import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.coordinator.group_coordinator import partition_for
from kraftpy.coordinator.txn_coordinator import TxnCoordinator
from kraftpy.metadata.records import NO_LEADER
from kraftpy.metadata.topic_names import TRANSACTION_STATE_TOPIC_NAME
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import AddPartitionsToTxnRequest, WriteTxnMarkersRequest

_logger = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]

#: How long one inter-broker request may take (Kafka's request.timeout.ms default).
REQUEST_TIMEOUT_S = 30.0
#: WriteTxnMarkers v1 and AddPartitionsToTxn v4: the versions kraftpy brokers speak to each other.
WRITE_TXN_MARKERS_VERSION = 1
VERIFY_VERSION = 4

#: Coordinator answers to a verification that mean "ask again later" (Kafka's mapping for Produce).
_RETRIABLE_VERIFICATION = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.UNKNOWN_SERVER_ERROR,
})


#: Above this many remembered decisions, those no try used for _PROGRESS_IDLE_S are forgotten.
_PROGRESS_SWEEP_SIZE = 1000
_PROGRESS_IDLE_S = 600.0


class MarkersNotWritten(Exception):
    """Some partitions of a transaction did not take its marker yet (the coordinator retries)."""


class BrokerConnections:
    """One connection per destination broker, used one request at a time."""

    def __init__(self, replicas: ReplicaManager, *, client_id: str) -> None:
        self.replicas = replicas
        self.client_id = client_id
        self._connections: dict[int, KafkaConnection] = {}
        self._locks: dict[int, trio.Lock] = {}

    async def request(self, node_id: int, api_key: ApiKey, version: int, request, *,
                      timeout_s: float = REQUEST_TIMEOUT_S):
        """The answer of broker ``node_id``; raises ConnectionClosed when it cannot be had in time."""
        lock = self._locks.setdefault(node_id, trio.Lock())
        async with lock:
            endpoint = self.replicas.leader_endpoint(node_id)
            if endpoint is None:
                raise ConnectionClosed(f"broker {node_id} has no endpoint on the inter-broker listener")
            with trio.move_on_after(timeout_s) as scope:
                try:
                    conn = self._connections.get(node_id)
                    if conn is None:
                        conn = await KafkaConnection.connect(*endpoint, client_id=self.client_id,
                                                             max_frame_bytes=2**31 - 1,
                                                             tls=self.replicas.settings.inter_broker_tls,
                                                             sasl=self.replicas.settings.inter_broker_sasl)
                        self._connections[node_id] = conn
                    return await conn.request(api_key, version, request)
                except (ConnectionClosed, OSError):
                    await self._drop(node_id)
                    raise
            # Timed out: the connection may still carry the late answer, so it is not used again.
            await self._drop(node_id)
            assert scope.cancelled_caught
            raise ConnectionClosed(f"broker {node_id} did not answer within {timeout_s:g}s")

    async def _drop(self, node_id: int) -> None:
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.aclose()

    async def aclose(self) -> None:
        for node_id in list(self._connections):
            await self._drop(node_id)


@attrs.define
class _Progress:
    """The partitions that took the marker of one decision (producer id, epoch, outcome, coordinator epoch)."""

    decision: tuple[int, int, bool, int]
    done: set[TopicPartition] = attrs.field(factory=set)
    #: When a try last used it (trio's clock): decisions no coordinator retries any more are dropped.
    used: float = 0.0


class TxnMarkerSender:
    """The transaction coordinator's `MarkerSender` (see the module doc)."""

    def __init__(self, metadata: MetadataCache, connections: BrokerConnections, *, node_id: int = -1) -> None:
        self.metadata = metadata
        self.connections = connections
        self._log = _logger.bind(node_id=node_id)
        self._progress: dict[str, _Progress] = {}

    async def send(self, transactional_id: str, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                   committed: bool, partitions: frozenset[TopicPartition]) -> None:
        decision = (producer_id, producer_epoch, committed, coordinator_epoch)
        now = trio.current_time()
        if len(self._progress) > _PROGRESS_SWEEP_SIZE:
            # Completions that stopped (the coordinator moved away) leave theirs behind.
            self._progress = {k: p for k, p in self._progress.items() if now - p.used < _PROGRESS_IDLE_S}
        progress = self._progress.get(transactional_id)
        if progress is None or progress.decision != decision:
            progress = self._progress[transactional_id] = _Progress(decision)
        progress.used = now
        image = self.metadata.image
        by_leader: dict[int, list[TopicPartition]] = {}
        missing: list[str] = []
        for tp in sorted(partitions - progress.done):
            topic = image.topics.get_by_name(tp[0])
            reg = topic.partitions.get(tp[1]) if topic is not None else None
            if reg is None:
                progress.done.add(tp)  # deleted: nothing is left to end there
            elif reg.leader == NO_LEADER:
                missing.append(f"{tp[0]}-{tp[1]}: no leader")
            else:
                by_leader.setdefault(reg.leader, []).append(tp)
        failures: list[str] = list(missing)

        async def to_leader(leader: int, tps: list[TopicPartition]) -> None:
            topics: dict[str, list[int]] = {}
            for topic, index in tps:
                topics.setdefault(topic, []).append(index)
            request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=committed,
                topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                        for name, indexes in topics.items()],
                coordinator_epoch=coordinator_epoch)])
            try:
                response = await self.connections.request(leader, ApiKey.WRITE_TXN_MARKERS,
                                                           WRITE_TXN_MARKERS_VERSION, request)
            except ConnectionClosed as exc:
                failures.append(f"broker {leader}: {exc}")
                return
            for result in response.markers:
                for topic_result in result.topics:
                    for p in topic_result.partitions:
                        tp = (topic_result.name, p.partition_index)
                        code = ErrorCode(p.error_code)
                        if code == ErrorCode.NONE:
                            progress.done.add(tp)
                        elif code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and \
                                self.metadata.image.topics.get_by_name(tp[0]) is None:
                            progress.done.add(tp)
                        else:
                            failures.append(f"{tp[0]}-{tp[1]} on broker {leader}: {code.name}")

        async with trio.open_nursery() as nursery:
            for leader, tps in by_leader.items():
                nursery.start_soon(to_leader, leader, tps)
        if partitions <= progress.done:
            if self._progress.get(transactional_id) is progress:
                del self._progress[transactional_id]
            return
        raise MarkersNotWritten(f"{'COMMIT' if committed else 'ABORT'} markers of {transactional_id!r} "
                                f"(producer {producer_id}, epoch {producer_epoch}) not all written: "
                                + "; ".join(failures[:5]))


@attrs.define
class _Question:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]
    answered: trio.Event = attrs.field(factory=trio.Event)
    answer: dict[TopicPartition, ErrorCode] = attrs.field(factory=dict)


class TxnVerifier:
    """Asks the transaction coordinator whether partitions are in a producer's transaction (see the module doc)."""

    def __init__(self, metadata: MetadataCache, connections: BrokerConnections, coordinator: TxnCoordinator, *,
                 node_id: int = -1) -> None:
        self.metadata = metadata
        self.connections = connections
        self.coordinator = coordinator
        self.node_id = node_id
        self._pending: dict[int, list[_Question]] = {}
        self._sending: set[int] = set()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep(math.inf)
        finally:
            self._nursery = None

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """An error per partition: NONE when it is in the transaction; NOT_ENOUGH_REPLICAS to retry;
        TRANSACTION_ABORTABLE when it is not (the Produce handler tells it as the request's version knows)."""
        parts = list(partitions)
        image = self.metadata.image
        topic = image.topics.get_by_name(TRANSACTION_STATE_TOPIC_NAME)
        if topic is None or not topic.partitions:
            return dict.fromkeys(parts, ErrorCode.NOT_ENOUGH_REPLICAS)
        index = partition_for(transactional_id, len(topic.partitions))
        if index in self.coordinator.owned_partitions():
            answer = self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, parts)
            return {tp: _for_producer(code) for tp, code in answer.items()}
        reg = topic.partitions.get(index)
        if reg is None or reg.leader == NO_LEADER or reg.leader == self.node_id or self._nursery is None:
            return dict.fromkeys(parts, ErrorCode.NOT_ENOUGH_REPLICAS)
        question = _Question(transactional_id, producer_id, producer_epoch, parts)
        self._pending.setdefault(reg.leader, []).append(question)
        if reg.leader not in self._sending:
            self._sending.add(reg.leader)
            self._nursery.start_soon(self._send_loop, reg.leader)
        await question.answered.wait()
        return question.answer

    async def _send_loop(self, node_id: int) -> None:
        """Send the questions queued for ``node_id`` in batches, one request in flight, until none wait."""
        try:
            while self._pending.get(node_id):
                batch: list[_Question] = []
                later: list[_Question] = []
                ids: set[str] = set()
                for q in self._pending.pop(node_id):
                    # One entry per transactional id in a request: a second question waits for the next.
                    (later if q.transactional_id in ids else batch).append(q)
                    ids.add(q.transactional_id)
                if later:
                    self._pending[node_id] = later + self._pending.get(node_id, [])
                await self._ask(node_id, batch)
        finally:
            self._sending.discard(node_id)
            for q in self._pending.pop(node_id, []):
                q.answer = dict.fromkeys(q.partitions, ErrorCode.NOT_ENOUGH_REPLICAS)
                q.answered.set()

    async def _ask(self, node_id: int, batch: list[_Question]) -> None:
        Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        transactions = []
        for q in batch:
            topics: dict[str, list[int]] = {}
            for name, index in q.partitions:
                topics.setdefault(name, []).append(index)
            transactions.append(Txn(transactional_id=q.transactional_id, producer_id=q.producer_id,
                                    producer_epoch=q.producer_epoch, verify_only=True,
                                    topics=[Topic(name=name, partitions=indexes) for name, indexes in topics.items()]))
        try:
            response = await self.connections.request(node_id, ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION,
                                                      AddPartitionsToTxnRequest(transactions=transactions))
        except ConnectionClosed:
            response = None
        answers: dict[str, dict[TopicPartition, ErrorCode]] = {}
        top = ErrorCode.NETWORK_EXCEPTION if response is None else ErrorCode(response.error_code)
        if response is not None:
            for result in response.results_by_transaction:
                answers[result.transactional_id] = {
                    (t.name, p.partition_index): _for_producer(ErrorCode(p.partition_error_code))
                    for t in result.topic_results for p in t.results_by_partition}
        for q in batch:
            got = answers.get(q.transactional_id, {})
            q.answer = {tp: got.get(tp, _for_producer(top if top != ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR))
                        for tp in q.partitions}
            q.answered.set()


def _for_producer(code: ErrorCode) -> ErrorCode:
    """A verification's answer as a Produce tells it, as Kafka answers them: retriable ones as
    NOT_ENOUGH_REPLICAS, PRODUCER_FENCED as INVALID_PRODUCER_EPOCH. TRANSACTION_ABORTABLE stays: Produce
    v11 carries it, and the Produce handler makes it INVALID_TXN_STATE for the versions before."""
    if code in _RETRIABLE_VERIFICATION:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED else code

