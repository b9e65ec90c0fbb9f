"""The transactional ids of one ``__transaction_state`` partition: loaded, served, driven to completion.

Theory of operation
-------------------
A :class:`TxnShard` is the state machine of one :class:`~kraftpy.coordinator.runtime.CoordinatorShard`.
Loading replays the partition's records into ``txns`` (the last record of an id wins; a tombstone
removes the id). Every decision is made by the pure functions of :mod:`kraftpy.coordinator.txn_state`;
this module only drives them::

    decision = txn_state.end_txn(txns[id], ...)      # a Reply: answered at once
    txns[id] = t.pending                             # a Transition: other requests on the id are
    shard.write([(key, value)], done)                #   answered CONCURRENT_TRANSACTIONS meanwhile
    done: txns[id] = t.apply(...) | t.abandon(...)   # the log first, then memory

A transition to PREPARE_COMMIT or PREPARE_ABORT (an EndTxn, the fence of an InitProducerId, the abort
of a timed-out transaction) starts the *completion* of the transaction, a task per id::

    PREPARE_* written ──► MarkerSender.send(...)   retried (backoff) until it returns, while this
                                                   shard serves the partition
                      ──► COMPLETE_* written       retried until written, or leadership is lost

so a COMPLETE record is never written before every partition of the transaction has its marker.
A shard that loads an id in PREPARE_* (the coordinator before it failed between the two writes)
starts the same completion: markers are idempotent at the partition leaders (same producer epoch,
same coordinator epoch), so sending them twice is harmless, and leaving them unsent is not.

A write that failed for certain (NOT_ENOUGH_REPLICAS before the append, a batch too large) leaves
the metadata as it was. A write whose outcome is unknown (timed out waiting for replication: it
may still commit) leaves the id pending and asks the coordinator to load the partition again, so
that memory follows the log and not a guess.

Timers (on the shard's :class:`~kraftpy.coordinator.runtime.Timers`, dying with it): every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` open transactions older than their
timeout are aborted with the epoch bumped (their producer is fenced); every
``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle past
``transactional.id.expiration.ms`` get their tombstone.

The coordinator epoch of the markers is the leader epoch of the shard's partition, as in Kafka: a
partition leader refuses markers from an older coordinator epoch, so a deposed coordinator cannot
complete a transaction its successor decided otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

import attrs
import structlog
import trio

from kraftpy.coordinator import txn_state
from kraftpy.coordinator.records import CoordinatorRecordError, UnknownKey
from kraftpy.coordinator.runtime import CoordinatorShard, CoordinatorWriteError, NotLeaderError, Waiter
from kraftpy.coordinator.txn_records import (
    decode_transaction_log_key,
    decode_transaction_log_value,
    transaction_log_key,
    transaction_log_value,
)
from kraftpy.coordinator.txn_state import (
    ProducerIdAndEpoch,
    Reply,
    TopicPartition,
    Transition,
    TxnConfig,
    TxnMetadata,
    TxnState,
)
from kraftpy.protocol.errors import ErrorCode

_logger = structlog.get_logger(__name__)

#: The first wait before a failed marker send or COMPLETE write is tried again; it doubles up to the cap.
RETRY_BACKOFF_SECONDS = 0.1
RETRY_BACKOFF_MAX_SECONDS = 2.0

_PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})

#: Append errors after which the record may still be committed (it is in the leader's log).
_OUTCOME_UNKNOWN = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                              ErrorCode.UNKNOWN_SERVER_ERROR})


class MarkerSender(Protocol):
    """Writes a transaction's COMMIT or ABORT marker to every one of its partitions (WriteTxnMarkers to
    their leaders). Returns once every partition has its marker; raises when some do not (the shard
    tries again). Partitions that no longer exist count as done."""

    async def send(self, transactional_id: str, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                   committed: bool, partitions: frozenset[TopicPartition]) -> None: ...


@attrs.frozen
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = txn_state.NO_PRODUCER_ID
    producer_epoch: int = txn_state.NO_PRODUCER_EPOCH


def write_error(error: BaseException) -> ErrorCode:
    """What a client is told of a failed ``__transaction_state`` append (Kafka's TransactionStateManager)."""
    if isinstance(error, NotLeaderError):
        return ErrorCode.NOT_COORDINATOR
    code = error.error_code if isinstance(error, CoordinatorWriteError) else ErrorCode.UNKNOWN_SERVER_ERROR
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _outcome_unknown(error: BaseException) -> bool:
    if isinstance(error, NotLeaderError):
        return False
    code = error.error_code if isinstance(error, CoordinatorWriteError) else ErrorCode.UNKNOWN_SERVER_ERROR
    return code in _OUTCOME_UNKNOWN


class _NeedProducerId(Exception):
    """The decision needs a new producer id: allocate one (it may wait) and decide again."""


class TxnShard:
    """The transactional ids of one ``__transaction_state`` partition (a ShardStateMachine)."""

    def __init__(self, shard: CoordinatorShard, config: TxnConfig, clock: Callable[[], int], *,
                 allocate_producer_id: Callable[[], Awaitable[int]], marker_sender: MarkerSender,
                 spawn: Callable[..., None], request_reload: Callable[[int, int], None], log=None) -> None:
        """``clock`` returns wall-clock milliseconds; ``spawn(fn, *args)`` starts a task in the
        coordinator's nursery; ``request_reload(partition, leader_epoch)`` asks for this partition to be
        loaded again."""
        self.shard = shard
        self.timers = shard.timers
        self.config = config
        self.clock = clock
        self.allocate_producer_id = allocate_producer_id
        self.marker_sender = marker_sender
        self._spawn = spawn
        self._request_reload = request_reload
        self.log = (log or _logger).bind(partition=shard.partition, coordinator_epoch=shard.leader_epoch)
        #: Every known transactional id. Invariant: no value is DEAD (a written tombstone removes the id).
        self.txns: dict[str, TxnMetadata] = {}
        #: The completion task of each id in PREPARE_* (its cancel scope).
        self._completing: dict[str, trio.CancelScope] = {}
        self._closed = False
        self.skipped_records = 0

    @property
    def coordinator_epoch(self) -> int:
        return self.shard.leader_epoch

    # -- loading ---------------------------------------------------------------------------------

    def replay(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            self.skipped_records += 1
            self.log.warning("__transaction_state record without a key skipped", offset=offset)
            return
        try:
            decoded = decode_transaction_log_key(key)
            if isinstance(decoded, UnknownKey):
                self.skipped_records += 1
                return
            entry = decode_transaction_log_value(value)
        except CoordinatorRecordError as exc:
            self.skipped_records += 1
            self.log.warning("__transaction_state record skipped", offset=offset, error=str(exc))
            return
        txn_id = decoded.transactional_id
        if entry is None or entry.status is TxnState.DEAD:
            self.txns.pop(txn_id, None)
        else:
            self.txns[txn_id] = txn_state.from_log_entry(txn_id, entry)

    def on_loaded(self) -> None:
        self._schedule_abort_check()
        self._schedule_expiry_check()
        for meta in list(self.txns.values()):
            if meta.state in _PREPARED:
                self.log.info("resuming the completion of a prepared transaction",
                              transactional_id=meta.transactional_id, state=meta.state.kafka_name)
                self._start_completion(meta.transactional_id)

    def on_unloaded(self) -> None:
        self._closed = True
        for scope in self._completing.values():
            scope.cancel()
        self._completing.clear()
        self.txns.clear()

    # -- the write of a transition ---------------------------------------------------------------

    def _set(self, txn_id: str, meta: TxnMetadata | None) -> None:
        if meta is None:
            self.txns.pop(txn_id, None)
        else:
            self.txns[txn_id] = meta

    def _transit(self, t: Transition, on_done: Callable[[ErrorCode], None]) -> None:
        """Write ``t`` and make it current once committed; ``on_done`` gets the answer for the client."""
        txn_id = t.base.transactional_id
        self.txns[txn_id] = t.pending
        value = None if t.tombstone else transaction_log_value(txn_state.log_entry(t.target))

        def done(_offset: int, error: BaseException | None) -> None:
            if self._closed or isinstance(error, NotLeaderError):
                on_done(ErrorCode.NOT_COORDINATOR)
                return
            current = self.txns.get(txn_id)
            if error is None:
                try:
                    after = t.apply(current)
                except txn_state.IllegalTransitionError:
                    # A bug: memory no longer follows the log. Answer, and load the partition again.
                    self.log.exception("transaction state changed under a write", transactional_id=txn_id)
                    self._request_reload(self.shard.partition, self.shard.leader_epoch)
                    on_done(ErrorCode.UNKNOWN_SERVER_ERROR)
                    return
                self._set(txn_id, after)
                on_done(t.reply)
                if after is not None and after.state in _PREPARED:
                    self._start_completion(txn_id)
                return
            code = write_error(error)
            if _outcome_unknown(error):
                # The record may still commit: keep the id pending (CONCURRENT_TRANSACTIONS) and load
                # the partition again rather than guess.
                self.log.warning("__transaction_state write of unknown outcome: reloading",
                                 transactional_id=txn_id, target=t.target.state.kafka_name, error=str(error))
                self._request_reload(self.shard.partition, self.shard.leader_epoch)
            else:
                try:
                    self._set(txn_id, t.abandon(current))
                except txn_state.IllegalTransitionError:
                    self.log.exception("transaction state changed under a write", transactional_id=txn_id)
                    self._request_reload(self.shard.partition, self.shard.leader_epoch)
            on_done(code)

        self.shard.write([(transaction_log_key(txn_id), value)], done)

    async def _transit_and_wait(self, t: Transition) -> ErrorCode:
        waiter: Waiter[ErrorCode] = Waiter()
        self._transit(t, waiter.set)
        return await waiter.wait()

    # -- InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn -----------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: ProducerIdAndEpoch | None) -> InitProducerIdResult:
        """InitProducerId with a transactional id: the producer id and epoch once written, or the error."""
        allocated: int | None = None

        def allocate() -> int:
            if allocated is None:
                raise _NeedProducerId
            return allocated

        while True:
            try:
                decision = txn_state.init_producer_id(self.txns.get(transactional_id), transactional_id, timeout_ms,
                                                      expected, self.clock(), allocate, self.config)
                break
            except _NeedProducerId:
                try:
                    allocated = await self.allocate_producer_id()
                except Exception as exc:
                    # Kafka answers so while no producer id block is available: the client retries.
                    self.log.warning("no producer id to hand out", error=f"{type(exc).__name__}: {exc}")
                    return InitProducerIdResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                if self._closed:
                    return InitProducerIdResult(ErrorCode.NOT_COORDINATOR)
        if isinstance(decision, Reply):
            return InitProducerIdResult(decision.error)
        code = await self._transit_and_wait(decision)
        if code != ErrorCode.NONE:
            return InitProducerIdResult(code)
        return InitProducerIdResult(ErrorCode.NONE, decision.target.producer_id, decision.target.producer_epoch)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        """AddPartitionsToTxn: one answer for every partition named."""
        decision = txn_state.add_partitions(self.txns.get(transactional_id), transactional_id, producer_id,
                                            producer_epoch, partitions, self.clock())
        if isinstance(decision, Reply):
            return decision.error
        return await self._transit_and_wait(decision)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """The verify-only AddPartitionsToTxn of a partition leader (KIP-890 part 1); writes nothing."""
        return txn_state.verify_partitions(self.txns.get(transactional_id), transactional_id, producer_id,
                                           producer_epoch, partitions)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          offsets_partition: int) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        decision = txn_state.add_offsets(self.txns.get(transactional_id), transactional_id, producer_id,
                                         producer_epoch, offsets_partition, self.clock())
        if isinstance(decision, Reply):
            return decision.error
        return await self._transit_and_wait(decision)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: answered once PREPARE_COMMIT/PREPARE_ABORT is written; the markers follow."""
        decision = txn_state.end_txn(self.txns.get(transactional_id), transactional_id, producer_id,
                                     producer_epoch, commit, self.clock())
        if isinstance(decision, Reply):
            return decision.error
        return await self._transit_and_wait(decision)

    # -- completion: markers, then COMPLETE_* ------------------------------------------------------

    def _start_completion(self, txn_id: str) -> None:
        if self._closed or txn_id in self._completing:
            return
        scope = trio.CancelScope()
        self._completing[txn_id] = scope
        self._spawn(self._complete_transaction, txn_id, scope)

    async def _complete_transaction(self, txn_id: str, scope: trio.CancelScope) -> None:
        try:
            with scope:
                if await self._send_markers(txn_id):
                    await self._write_complete(txn_id)
        finally:
            if self._completing.get(txn_id) is scope:
                del self._completing[txn_id]

    def _prepared(self, txn_id: str) -> TxnMetadata | None:
        meta = self.txns.get(txn_id)
        if self._closed or meta is None or meta.state not in _PREPARED:
            return None
        return meta

    async def _send_markers(self, txn_id: str) -> bool:
        """Send the markers until every partition has its own; False when there is nothing to complete."""
        backoff = RETRY_BACKOFF_SECONDS
        while True:
            meta = self._prepared(txn_id)
            if meta is None:
                return False
            try:
                await self.marker_sender.send(txn_id, meta.producer_id, meta.producer_epoch, self.coordinator_epoch,
                                              meta.state is TxnState.PREPARE_COMMIT, meta.partitions)
                return True
            except Exception as exc:
                self.log.info("transaction markers not all written, retrying", transactional_id=txn_id,
                              error=f"{type(exc).__name__}: {exc}", retry_in_s=backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_SECONDS)

    async def _write_complete(self, txn_id: str) -> None:
        """Write COMPLETE_COMMIT/COMPLETE_ABORT until it is written or the partition is no longer served here."""
        backoff = RETRY_BACKOFF_SECONDS
        while True:
            meta = self._prepared(txn_id)
            if meta is None or meta.pending_state is not None:
                # Gone, or a write of unknown outcome is being resolved by a reload.
                return
            decision = txn_state.complete(meta, self.clock())
            if isinstance(decision, Reply):
                self.log.error("transaction cannot complete", transactional_id=txn_id, reason=decision.message)
                return
            code = await self._transit_and_wait(decision)
            if code == ErrorCode.NONE:
                self.log.debug("transaction completed", transactional_id=txn_id,
                               state=decision.target.state.kafka_name)
                return
            if self._closed:
                return
            self.log.info("transaction completion not written, retrying", transactional_id=txn_id,
                          error=code.name, retry_in_s=backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_SECONDS)

    # -- timeouts and expiry -----------------------------------------------------------------------

    def _schedule_abort_check(self) -> None:
        self.timers.schedule("abort-timed-out", self.config.abort_timed_out_transaction_cleanup_interval_ms / 1000,
                             self._abort_check)

    def _abort_check(self) -> None:
        self._schedule_abort_check()
        self.abort_timed_out()

    def _schedule_expiry_check(self) -> None:
        self.timers.schedule("expire-ids", self.config.remove_expired_transaction_cleanup_interval_ms / 1000,
                             self._expiry_check)

    def _expiry_check(self) -> None:
        self._schedule_expiry_check()
        self.expire_ids()

    def abort_timed_out(self) -> list[str]:
        """Abort (with the epoch bumped) every open transaction older than its timeout; returns their ids."""
        now = self.clock()
        aborted = []
        for meta in txn_state.timed_out(list(self.txns.values()), now):
            decision = txn_state.abort_timed_out(meta, meta.producer_id, now)
            if isinstance(decision, Transition):
                txn_id = meta.transactional_id
                self.log.info("aborting a timed-out transaction", transactional_id=txn_id,
                              producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                              timeout_ms=meta.timeout_ms)
                self._transit(decision, lambda code, txn_id=txn_id: self._log_background(
                    "timed-out transaction abort", txn_id, code))
                aborted.append(txn_id)
        return aborted

    def expire_ids(self) -> list[str]:
        """Write the tombstone of every id idle past transactional.id.expiration.ms; returns their ids."""
        now = self.clock()
        expiration = self.config.transactional_id_expiration_ms
        expired = []
        for txn_id in txn_state.expired_ids(list(self.txns.values()), now, expiration):
            decision = txn_state.expire(self.txns.get(txn_id), now, expiration)
            if isinstance(decision, Transition):
                self._transit(decision, lambda code, txn_id=txn_id: self._log_background(
                    "transactional id expiry", txn_id, code))
                expired.append(txn_id)
        return expired

    def _log_background(self, what: str, txn_id: str, code: ErrorCode) -> None:
        if code not in (ErrorCode.NONE, ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_COORDINATOR):
            self.log.warning(f"{what} not written", transactional_id=txn_id, error=code.name)

    # -- DescribeTransactions, ListTransactions ----------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        """The id's metadata (None: not known here)."""
        return self.txns.get(transactional_id)

    def list_transactions(self, states: frozenset[TxnState], producer_ids: frozenset[int],
                          min_duration_ms: int) -> list[TxnMetadata]:
        """The ids that pass every filter (an empty filter passes all; ``min_duration_ms`` -1 passes all),
        as Kafka's TransactionStateManager.listTransactionStates selects them."""
        now = self.clock()
        out = []
        for meta in self.txns.values():
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if states and meta.state not in states:
                continue
            if min_duration_ms >= 0 and now - meta.txn_start_timestamp <= min_duration_ms:
                continue
            out.append(meta)
        return out
