"""Produce: batches in, offsets out, with idempotence and transactions.

Produce checks the one batch of each partition as Kafka's LogValidator does
(:func:`kraftpy.protocol.record_validation.validate_produced_batch`: header, CRC, codec, and every
record in one pass that builds no object per record), then the partition checks min.insync.replicas
and the producer's sequence and appends it with one write (`Partition.append_as_leader`). A refused
batch changes nothing. A compressed batch whose records decompress past `INLINE_DECOMPRESSED_SIZE`
is validated in a worker thread, one at a time, so that neither the event loop nor memory pays for
it. With acks=all the request parks in the purgatory until every partition's high watermark passes
its batch, the leadership moves, or the timeout passes.

Internal topics (``__consumer_offsets``) are written by their coordinators only: a Produce to one is
answered INVALID_TOPIC_EXCEPTION, as Kafka does for every client but its own admin tools.

A transactional batch needs the request's ``transactional_id`` (without one the whole request is
answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka does). The first transactional batch of a
producer in a partition is verified first (KIP-890 part 1, transaction.partition.verification.enable):
the transaction coordinator must know the partition as part of the producer's ongoing transaction,
else the batch is refused (TRANSACTION_ABORTABLE from Produce v11, INVALID_TXN_STATE before, or
NOT_ENOUGH_REPLICAS for "ask again" answers), so a late or stray batch cannot open a transaction no
marker will ever close. The partitions of one request are verified together, before any is appended.

From v10 (KIP-951) a partition answered NOT_LEADER_OR_FOLLOWER carries its current leader and epoch,
and the answer the endpoints of those leaders on the request's listener: the producer redirects its
next batch without a metadata request.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog
import trio

from kraftpy.broker.apis.common import leader_partition, point_to_leaders
from kraftpy.broker.authorization import NO_AUTHORIZATION, TOPIC, TRANSACTIONAL_ID, WRITE, BrokerAuthorizer
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.partition import Partition
from kraftpy.broker.purgatory import wait_for_change
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.metadata.topic_names import is_internal_topic
from kraftpy.metrics import count_produced, waiting_remotely
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import ProduceResponse
from kraftpy.protocol.record_validation import (
    ACCELERATED,
    Accepted,
    InlineLimitExceeded,
    ProduceRules,
    Refusal,
    validate_produced_batch,
)
from kraftpy.rpc.kafka_server import BadRequest, Connection, allow_next_request

_logger = structlog.get_logger(__name__)

#: Asks whether partitions are part of a producer's ongoing transaction: (transactional id, producer
#: id, producer epoch, partitions) -> an error per partition (NONE: it is).
Verify = Callable[[str, int, int, Iterable[tuple[str, int]]], Awaitable[dict[tuple[str, int], ErrorCode]]]

#: The client id Kafka's own tools use; only they may produce to internal topics (AdminUtils.ADMIN_CLIENT_ID).
ADMIN_CLIENT_ID = "__admin_client"


#: The decompressed records a produced batch may take on the event loop; a larger one is validated
#: in a worker thread (decompressing 8 MiB takes a few milliseconds, gzip about 25).
INLINE_DECOMPRESSED_SIZE = 8 * 1024 * 1024


#: The first Produce version whose producers know TRANSACTION_ABORTABLE (KIP-890).
TRANSACTION_ABORTABLE_PRODUCE_VERSION = 11


def for_produce_version(code: ErrorCode, version: int) -> ErrorCode:
    """A transaction verification's error as a Produce of ``version`` may carry it: TRANSACTION_ABORTABLE
    from v11, INVALID_TXN_STATE (which older producers abort the transaction on too) before."""
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < TRANSACTION_ABORTABLE_PRODUCE_VERSION:
        return ErrorCode.INVALID_TXN_STATE
    return code

class ProduceApi:
    #: Set by the broker: WRITE on each topic, and on the transactional id of transactional batches.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, replicas: ReplicaManager, metadata: MetadataCache, clock: Callable[[], int], *,
                 node_id: int = -1, verify: Verify | None = None) -> None:
        """``verify``: asks the transaction coordinator about a producer's first transactional batches
        (`kraftpy.broker.txn_support.TxnVerifier.verify`); None appends them unverified."""
        self.replicas = replicas
        self.metadata = metadata
        self.verify = verify
        self.clock = clock
        self._log = _logger.bind(node_id=node_id)
        #: Large compressed batches are validated one at a time, off the event loop.
        self._large_batches: trio.CapacityLimiter | None = None
        if not ACCELERATED:
            self._log.warning("produced records are checked in Python, over a hundred times slower: the C module "
                              "kraftpy/protocol/_record_scan.c was not compiled when kraftpy was installed")

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.PRODUCE: self.handle_produce}

    # -- Produce ------------------------------------------------------------------------------------

    async def handle_produce(self, header: Any, request: Any, conn: Connection) -> ProduceResponse | None:
        acks = request.acks
        version = header.request_api_version
        now = self.clock()
        PartitionResponse = ProduceResponse.PartitionProduceResponse
        #: One answer per entry of the request, in its order; ``waiting`` is keyed by the answer's place.
        results: list[Any] = []
        waiting: dict[int, tuple[Partition, int, int]] = {}
        order: list[tuple[str, list[Any]]] = []
        duplicates = self._named_twice(request)
        internal_refused = header.client_id != ADMIN_CLIENT_ID
        no_transactional_id = request.transactional_id is None
        #: The batches that passed validation, appended once the transactional ones are verified.
        accepted: list[tuple[Any, str, Any, Partition, Accepted]] = []
        unauthorized = self.authz.denied(conn, WRITE, TOPIC, (t.name for t in request.topic_data))
        for topic in request.topic_data:
            answers: list[Any] = []
            order.append((topic.name, answers))
            for data in topic.partition_data:
                key = len(results)
                result = PartitionResponse(index=data.index, error_code=ErrorCode.NONE, base_offset=-1)
                results.append(result)
                answers.append(result)
                if acks not in (0, 1, -1):
                    result.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                    continue
                if duplicates and (topic.name, data.index) in duplicates:
                    # Which batch would an answer be for? None is appended (Kafka silently keeps the last).
                    result.error_code = ErrorCode.INVALID_REQUEST
                    result.error_message = "the partition is named more than once in this request"
                    continue
                if topic.name in unauthorized:
                    result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                if internal_refused and is_internal_topic(topic.name):
                    # Only the group and transaction coordinators write their topics (as in Kafka).
                    result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                    result.error_message = f"Cannot append to internal topic {topic.name}"
                    continue
                part, error = leader_partition(self.replicas, self.metadata, topic.name, data.index)
                if part is None:
                    result.error_code = error
                    continue
                try:
                    verdict = validate_produced_batch(data.records, part.produce_rules, now, produce_version=version,
                                                      inline_limit=INLINE_DECOMPRESSED_SIZE)
                except InlineLimitExceeded:
                    verdict = await self._validate_large(data.records, part.produce_rules, now, version)
                if isinstance(verdict, Refusal):
                    result.error_code, result.error_message = verdict.error, verdict.message
                    result.record_errors = [
                        ProduceResponse.BatchIndexAndErrorMessage(batch_index=e.batch_index,
                                                                  batch_index_error_message=e.message)
                        for e in verdict.record_errors
                    ]
                    continue
                accepted.append((key, topic.name, data, part, verdict))
        if no_transactional_id and any(v.header.is_transactional for _, _, _, _, v in accepted):
            # Kafka answers the whole request so (its authorization of the transactional id).
            for result in results:
                result.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                result.error_message = "a transactional batch needs the request's transactional id"
            accepted = []
        elif (not no_transactional_id and any(v.header.is_transactional for _, _, _, _, v in accepted)
              and not self.authz.allows(conn, WRITE, TRANSACTIONAL_ID, request.transactional_id)):
            for result in results:
                result.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            accepted = []
        guards = await self._verify(request.transactional_id, accepted, results, version) if accepted else {}
        for key, topic_name, data, part, verdict in accepted:
            result = results[key]
            if result.error_code != ErrorCode.NONE:
                continue  # its verification failed
            epoch = part.leader_epoch
            try:
                appended = await part.append_as_leader(verdict.records, verdict.header, acks=acks, now=now,
                                                        verification_guard=guards.get(key))
            except OSError as exc:
                self._log.error("append failed", partition=str(part.tp), error=str(exc))
                result.error_code, result.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
                continue
            result.error_code, result.error_message = appended.error, appended.message
            if appended.error == ErrorCode.NONE:
                count_produced(part.node_id, topic_name, len(data.records),
                               appended.next_offset - appended.base_offset)
            result.base_offset = appended.base_offset
            result.log_append_time_ms = appended.log_append_time_ms
            result.log_start_offset = part.log_start_offset
            if appended.error == ErrorCode.NONE and acks == -1:
                waiting[key] = (part, epoch, appended.next_offset)
        if waiting:
            # The connection's next Produce may be appended while these wait (answered after them).
            allow_next_request()
            with waiting_remotely():
                await self._await_replication(waiting, results, request.timeout_ms / 1000)
        node_endpoints = self._current_leaders(order, conn.listener) if version >= 10 else []
        if acks == 0:
            if any(r.error_code != ErrorCode.NONE for r in results):
                # The producer reads no answer: closing the connection is how it learns (as in Kafka).
                raise BadRequest("acks=0 produce failed")
            return None
        return ProduceResponse(responses=[
            ProduceResponse.TopicProduceResponse(name=name, partition_responses=answers) for name, answers in order
        ], node_endpoints=node_endpoints)

    def _current_leaders(self, order: list[tuple[str, list[Any]]], listener: str) -> list[Any]:
        """KIP-951 (Produce v10+): each NOT_LEADER_OR_FOLLOWER answer names the partition's leader and
        epoch as this broker's metadata has them, and the answer lists those leaders' endpoints on the
        request's listener, so the producer sends its next batch there without asking for metadata."""
        refused = [(name, result.index, result) for name, answers in order for result in answers
                   if result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER]
        return point_to_leaders(self.metadata, refused, listener, ProduceResponse.NodeEndpoint)

    async def _verify(self, transactional_id: str | None, accepted: list, results: list,
                      version: int) -> dict[int, object]:
        """Verify the transactional batches that would open a transaction in their partition; the
        verification guard of each by its answer's place. A partition that is not in the transaction
        gets its error in ``results``."""
        if self.verify is None or transactional_id is None:
            return {}
        asking = [(key, part, verdict.header) for key, _, _, part, verdict in accepted
                  if part.needs_verification(verdict.header)]
        if not asking:
            return {}
        guards = {key: part.verification_guard(header.producer_id) for key, part, header in asking}
        by_producer: dict[tuple[int, int], list[tuple[int, Partition]]] = {}
        for key, part, header in asking:
            by_producer.setdefault((header.producer_id, header.producer_epoch), []).append((key, part))
        for (producer_id, producer_epoch), entries in by_producer.items():
            answer = await self.verify(transactional_id, producer_id, producer_epoch,
                                       [(p.tp.topic, p.tp.partition) for _, p in entries])
            for key, part in entries:
                code = for_produce_version(
                    answer.get((part.tp.topic, part.tp.partition), ErrorCode.TRANSACTION_ABORTABLE), version)
                if code != ErrorCode.NONE:
                    results[key].error_code = code
                    results[key].error_message = (
                        f"the transaction of {transactional_id!r} does not include {part.tp} "
                        f"({code.name} from its coordinator)")
        return guards

    @staticmethod
    def _named_twice(request: Any) -> set[tuple[str, int]]:
        """The partitions a Produce request names more than once."""
        seen: set[tuple[str, int]] = set()
        twice: set[tuple[str, int]] = set()
        for topic in request.topic_data:
            for data in topic.partition_data:
                key = (topic.name, data.index)
                if key in seen:
                    twice.add(key)
                seen.add(key)
        return twice

    async def _validate_large(self, records: Any, rules: ProduceRules, now: int, version: int) -> Accepted | Refusal:
        """Validate a batch whose records decompress past INLINE_DECOMPRESSED_SIZE in a worker thread."""
        if self._large_batches is None:
            self._large_batches = trio.CapacityLimiter(1)
        check = functools.partial(validate_produced_batch, records, rules, now, produce_version=version)
        return await trio.to_thread.run_sync(check, limiter=self._large_batches)

    @staticmethod
    async def _await_replication(waiting: dict, results: list, timeout_s: float) -> None:
        """acks=all: park until each partition's high watermark reaches its batch's end (or it fails)."""
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
