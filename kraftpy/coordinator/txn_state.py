"""The transaction coordinator's state machine: one transactional id's metadata and every decision on it.

Theory of operation
-------------------
A transactional id has one :class:`TxnMetadata`, kept by the coordinator that leads the id's
``__transaction_state`` partition and written there (as a TransactionLogValue) on every change.
Nothing in this module awaits, opens a file or reads a clock: each decision takes the current
metadata (``None`` for an id the coordinator does not know) and the time, and returns either

* a :class:`Reply`: the answer, with nothing to write (an error, or ``NONE`` for a request that is
  already done, such as a resent EndTxn of a committed transaction); or
* a :class:`Transition`: the metadata to write to ``__transaction_state`` before it becomes current.

The coordinator makes every transition in two steps, as Kafka's prepareTransitionTo /
completeTransitionTo do::

    t = end_txn(meta, ...)                   # a Transition
    table[id] = t.pending                    # the old metadata, marked "a write is in flight":
                                             #   every other request on the id is answered
                                             #   CONCURRENT_TRANSACTIONS until the write ends
    ok = await write(t.target)               # the log is the truth
    table[id] = t.apply(table[id]) if ok else t.abandon(table[id])

so a failed write leaves the metadata as it was, and what is current was always written first.
``apply`` checks again that the target follows from the metadata it was decided on (Kafka's
checks in completeTransitionTo) and raises :class:`IllegalTransitionError` otherwise: a bug, never
a client's doing. A write whose outcome is unknown (a timeout) may still reach the log: the
coordinator must then reload the partition rather than abandon the transition, so that the log
stays the truth.

States and transitions (the byte is TransactionLogValue.TransactionStatus)::

        InitProducerId                 AddPartitions / AddOffsets
    (none) ──► EMPTY(0) ─────────────────────────► ONGOING(1) ◄──┐ more partitions
                ▲  ▲                                  │  │  └─────┘
                │  │ InitProducerId        EndTxn(commit)  EndTxn(abort), or InitProducerId /
                │  │ (epoch bump)              │  │       timeout with an epoch bump (the fence:
                │  │                           ▼  ▼       pending PREPARE_EPOCH_FENCE(7))
                │  │          PREPARE_COMMIT(2)  PREPARE_ABORT(3)     ─ markers written to every
                │  │                  │                 │               partition, then complete()
                │  │                  ▼                 ▼
                │  └───── COMPLETE_COMMIT(4)  COMPLETE_ABORT(5) ──► ONGOING (next transaction)
                │                     │                 │
                └─────────────────────┴─────────────────┴──► DEAD(6): idle past
                                                             transactional.id.expiration.ms;
                                                             written as a tombstone, then forgotten

PREPARE_EPOCH_FENCE is never written: it is the pending state while the abort that fences an
ongoing transaction's producer is written (Kafka writes PREPARE_ABORT with the bumped epoch too).

Epochs (KIP-360): InitProducerId bumps the epoch (``last_producer_epoch`` remembers the one before,
so that a retry of a bump that succeeded is answered without a second bump); an epoch at 32766 or
above is exhausted and the next InitProducerId takes a new producer id at epoch 0. Every other
request must carry the current producer id and epoch: another id is INVALID_PRODUCER_ID_MAPPING,
another epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH to clients too old to know it, see
:func:`error_for_version`). These are the transactions of clients before KIP-890 part 2
(transaction version 0/1): the epoch does not change at the end of each transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from kraftpy.coordinator.txn_records import TransactionLogEntry, TransactionStatus
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: The largest producer epoch (a Java short).
MAX_EPOCH = 2**15 - 1
#: The internal topic of consumer-group offsets, whose partitions AddOffsetsToTxn adds.
OFFSETS_TOPIC = "__consumer_offsets"

TopicPartition = tuple[str, int]


#: A transaction's state: the status byte of its TransactionLogValue (one definition, with the records).
TxnState = TransactionStatus

#: The states in which an idle id may expire (no transaction is open).
EXPIRATION_ALLOWED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


def state_from_kafka_name(name: str) -> TxnState:
    """The state a ListTransactions filter names (``Ongoing``, ...); ValueError for an unknown name."""
    for state in TxnState:
        if state.kafka_name == name:
            return state
    raise ValueError(f"unknown transaction state {name!r}")


S = TxnState

#: For each state, the states it may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def epoch_exhausted(epoch: int) -> bool:
    """Whether no further epoch may be handed to a client: one is always kept to fence with."""
    return epoch >= MAX_EPOCH - 1


@attrs.frozen
class TxnConfig:
    """The coordinator's settings (Kafka's key names; defaults are Kafka's)."""

    #: transaction.max.timeout.ms: the longest transaction.timeout.ms a producer may ask for.
    transaction_max_timeout_ms: int = 900000
    #: transactional.id.expiration.ms: how long an id with no open transaction is kept idle.
    transactional_id_expiration_ms: int = 604800000
    #: transaction.abort.timed.out.transaction.cleanup.interval.ms: how often timed-out
    #: transactions are looked for and aborted.
    abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    #: transaction.remove.expired.transaction.cleanup.interval.ms: how often expired ids are removed.
    remove_expired_transaction_cleanup_interval_ms: int = 3600000
    #: transaction.state.log.num.partitions: partitions of __transaction_state.
    state_log_num_partitions: int = 50
    #: transaction.state.log.replication.factor: replicas of __transaction_state when created.
    state_log_replication_factor: int = 3
    #: transaction.state.log.min.isr: min.insync.replicas of __transaction_state.
    state_log_min_isr: int = 2
    #: transaction.state.log.segment.bytes: segment size of __transaction_state.
    state_log_segment_bytes: int = 104857600

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TxnConfig:
        """From a loaded configuration (anything indexed by Kafka's key names)."""
        return cls(
            transaction_max_timeout_ms=config["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_timed_out_transaction_cleanup_interval_ms=config[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_expired_transaction_cleanup_interval_ms=config[
                "transaction.remove.expired.transaction.cleanup.interval.ms"],
            state_log_num_partitions=config["transaction.state.log.num.partitions"],
            state_log_replication_factor=config["transaction.state.log.replication.factor"],
            state_log_min_isr=config["transaction.state.log.min.isr"],
            state_log_segment_bytes=config["transaction.state.log.segment.bytes"],
        )


@attrs.frozen
class ProducerIdAndEpoch:
    """The producer id and epoch an InitProducerId request says the producer has (KIP-360)."""

    producer_id: int
    epoch: int


@attrs.frozen
class TxnMetadata:
    """One transactional id's state, as written in its TransactionLogValue (plus ``pending_state``,
    which is never written)."""

    transactional_id: str
    #: The producer id in use. Invariant: >= 0.
    producer_id: int
    #: The current epoch; NO_PRODUCER_EPOCH only before the first InitProducerId completes.
    producer_epoch: int
    #: transaction.timeout.ms of the producer that last initialized the id.
    timeout_ms: int
    state: TxnState
    #: When the metadata last changed (ms): what expiry of idle ids is measured from.
    txn_last_update_timestamp: int
    #: The partitions of the open transaction. Invariant: empty unless ONGOING or PREPARE_*.
    partitions: frozenset[TopicPartition] = frozenset()
    #: When the first partition of the open transaction was added (ms); -1 in EMPTY.
    txn_start_timestamp: int = -1
    #: The producer id before the last InitProducerId (or the same one after an epoch bump).
    previous_producer_id: int = NO_PRODUCER_ID
    #: The producer id the next transaction will use (transaction version 2 only; kept as read).
    next_producer_id: int = NO_PRODUCER_ID
    #: The epoch before the last bump, so that a retried InitProducerId is recognised.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    #: The state a write in flight will bring; None when no write is in flight.
    pending_state: TxnState | None = None

    def topics(self) -> dict[str, list[int]]:
        """The partitions by topic, sorted (the TransactionPartitions of the log value)."""
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            out.setdefault(topic, []).append(partition)
        return out


def log_entry(meta: TxnMetadata) -> TransactionLogEntry:
    """The TransactionLogValue to write for ``meta`` (a DEAD id is written as a tombstone instead)."""
    if meta.state is TxnState.DEAD:
        raise ValueError(f"transactional id {meta.transactional_id!r} is DEAD: write a tombstone")
    return TransactionLogEntry(
        producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, transaction_timeout_ms=meta.timeout_ms,
        status=meta.state, partitions=meta.partitions, last_update_timestamp_ms=meta.txn_last_update_timestamp,
        start_timestamp_ms=meta.txn_start_timestamp, previous_producer_id=meta.previous_producer_id,
        next_producer_id=meta.next_producer_id)


def from_log_entry(transactional_id: str, entry: TransactionLogEntry) -> TxnMetadata:
    """The metadata a loaded TransactionLogValue says. The last epoch is not in the log: after a
    reload a retried InitProducerId bumps again, as in Kafka."""
    return TxnMetadata(
        transactional_id=transactional_id, producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
        timeout_ms=entry.transaction_timeout_ms, state=entry.status,
        txn_last_update_timestamp=entry.last_update_timestamp_ms,
        partitions=frozenset(entry.partitions) if entry.status is not TxnState.EMPTY else frozenset(),
        txn_start_timestamp=entry.start_timestamp_ms, previous_producer_id=entry.previous_producer_id,
        next_producer_id=entry.next_producer_id)


@attrs.frozen
class Reply:
    """An answer with nothing to write: ``error`` (NONE for a request already done) and a one-line
    reason."""

    error: ErrorCode
    message: str = ""


class IllegalTransitionError(Exception):
    """A transition that Kafka's state table forbids: a bug in the coordinator, never a client's doing."""


@attrs.frozen
class Transition:
    """Metadata to write to ``__transaction_state`` before it becomes current.

    ``base`` is the metadata the decision was made on (for an id seen for the first time, the
    metadata it is created with); ``created`` says the id was not known before. After a
    successful write the coordinator answers ``reply`` (NONE, or CONCURRENT_TRANSACTIONS after a
    fence, so that the producer retries and then gets the epoch the fence did not hand out) and,
    when ``target`` is PREPARE_*, writes the markers and then calls :func:`complete`.
    """

    base: TxnMetadata
    target: TxnMetadata
    created: bool = False
    reply: ErrorCode = ErrorCode.NONE
    #: The state shown as pending while the write is in flight.
    pending_as: TxnState | None = None

    def __attrs_post_init__(self) -> None:
        _check_transition(self.base, self.target, self.pending_as)

    @property
    def pending(self) -> TxnMetadata:
        """The current metadata while the write is in flight: unchanged, but marked pending."""
        return attrs.evolve(self.base, pending_state=self.pending_as or self.target.state)

    @property
    def tombstone(self) -> bool:
        """Whether the write is the id's tombstone (expiry) rather than a TransactionLogValue."""
        return self.target.state is TxnState.DEAD

    def apply(self, current: TxnMetadata | None) -> TxnMetadata | None:
        """The metadata after the write succeeded; None when the id is gone (a tombstone)."""
        if current != self.pending:
            raise IllegalTransitionError(
                f"transactional id {self.base.transactional_id}: the metadata changed while its write "
                f"to {self.target.state.name} was in flight")
        return None if self.tombstone else self.target

    def abandon(self, current: TxnMetadata | None) -> TxnMetadata | None:
        """The metadata after the write failed: as it was before (None for an id created by it)."""
        if current != self.pending:
            raise IllegalTransitionError(
                f"transactional id {self.base.transactional_id}: the metadata changed while its write "
                f"to {self.target.state.name} was in flight")
        return None if self.created else self.base


Decision = Reply | Transition


def _check_transition(base: TxnMetadata, target: TxnMetadata, pending_as: TxnState | None) -> None:
    """Kafka's checks of prepareTransitionTo and completeTransitionTo, made when a transition is built."""

    def fail(why: str) -> None:
        raise IllegalTransitionError(
            f"transactional id {base.transactional_id}: {base.state.name} -> {target.state.name}: {why}")

    if base.pending_state is not None:
        fail(f"a write to {base.pending_state.name} is already in flight")
    if target.pending_state is not None:
        fail("the target has a pending state")
    if target.transactional_id != base.transactional_id:
        fail("another transactional id")
    if target.producer_id < 0:
        fail(f"producer id {target.producer_id}")
    if target.state is not S.DEAD and not 0 <= target.producer_epoch <= MAX_EPOCH:
        fail(f"producer epoch {target.producer_epoch}")
    via = pending_as if pending_as is not None else base.state
    if pending_as is not None and base.state not in VALID_PREVIOUS[pending_as]:
        fail(f"{pending_as.name} cannot follow {base.state.name}")
    if via not in VALID_PREVIOUS[target.state]:
        fail("not in Kafka's state table")
    if target.txn_last_update_timestamp < base.txn_last_update_timestamp:
        fail("the update time goes back")
    same_producer = (target.producer_id, target.producer_epoch) == (base.producer_id, base.producer_epoch)
    state = target.state
    if state is S.EMPTY:
        bumped = (target.producer_id == base.producer_id and target.producer_epoch == base.producer_epoch + 1)
        rotated = target.producer_id != base.producer_id and target.producer_epoch == 0
        if not (same_producer or bumped or rotated):
            fail("the epoch is neither kept, bumped nor restarted with a new producer id")
        if target.partitions or target.txn_start_timestamp != -1:
            fail("an empty transaction with partitions or a start time")
    elif state is S.ONGOING:
        if not same_producer or not base.partitions <= target.partitions or target.timeout_ms != base.timeout_ms:
            fail("the producer, the timeout or the partitions differ")
        if target.txn_start_timestamp < 0:
            fail("no start time")
    elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        fence = pending_as is S.PREPARE_EPOCH_FENCE
        epoch_ok = (target.producer_epoch == base.producer_epoch + 1 and
                    target.producer_id == base.producer_id) if fence else same_producer
        if not epoch_ok:
            fail("the producer epoch is not the one of the transaction" + (" + 1" if fence else ""))
        if (target.partitions != base.partitions or target.timeout_ms != base.timeout_ms
                or target.txn_start_timestamp != base.txn_start_timestamp):
            fail("the partitions, the timeout or the start time differ")
    elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        if not same_producer or target.timeout_ms != base.timeout_ms or target.txn_start_timestamp == -1:
            fail("the producer or the timeout differ, or no start time")
        if target.partitions:
            fail("a completed transaction keeps partitions")


def _live(meta: TxnMetadata | None) -> TxnMetadata | None:
    """The metadata of a known id: an id being removed (DEAD) is unknown."""
    return None if meta is None or meta.state is S.DEAD else meta


def _check_producer(meta: TxnMetadata | None, transactional_id: str, producer_id: int,
                    producer_epoch: int) -> Reply | TxnMetadata:
    meta = _live(meta)
    if meta is None:
        return Reply(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                     f"transactional id {transactional_id!r} is not known to its coordinator")
    if meta.producer_id != producer_id:
        return Reply(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                     f"producer id {producer_id} is not the one of transactional id {transactional_id!r} "
                     f"({meta.producer_id})")
    if meta.producer_epoch != producer_epoch:
        return Reply(ErrorCode.PRODUCER_FENCED,
                     f"producer epoch {producer_epoch} of transactional id {transactional_id!r} is fenced "
                     f"by epoch {meta.producer_epoch}")
    return meta


def _concurrent(meta: TxnMetadata) -> Reply:
    what = meta.pending_state.name if meta.pending_state is not None else meta.state.name
    return Reply(ErrorCode.CONCURRENT_TRANSACTIONS,
                 f"transactional id {meta.transactional_id!r} is completing a change ({what}); retry")


def _invalid_state(meta: TxnMetadata, commit: bool) -> Reply:
    return Reply(ErrorCode.INVALID_TXN_STATE,
                 f"transactional id {meta.transactional_id!r} is {meta.state.kafka_name}; "
                 f"it cannot {'commit' if commit else 'abort'}")


# --- InitProducerId

def init_producer_id(meta: TxnMetadata | None, transactional_id: str, timeout_ms: int,
                     expected: ProducerIdAndEpoch | None, now: int,
                     allocate_producer_id: Callable[[], int], config: TxnConfig) -> Decision:
    """InitProducerId with a transactional id (Kafka's handleInitProducerId / prepareInitProducerIdTransit).

    ``expected`` is the producer id and epoch the producer already has (KIP-360; None when it has
    none). ``allocate_producer_id`` returns a new producer id; it is called only when one is needed.
    A Transition to EMPTY hands out its target's producer id and epoch once written; one to
    PREPARE_ABORT is the fence of an open transaction (answer CONCURRENT_TRANSACTIONS once written,
    then abort it; the producer's retry bumps the epoch again).
    """
    if not transactional_id:
        return Reply(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
    if not 0 < timeout_ms <= config.transaction_max_timeout_ms:
        return Reply(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                     f"transaction.timeout.ms {timeout_ms} is not in (0, transaction.max.timeout.ms "
                     f"{config.transaction_max_timeout_ms}]")
    meta = _live(meta)
    created = meta is None
    if meta is None:
        meta = TxnMetadata(transactional_id=transactional_id, producer_id=allocate_producer_id(),
                           producer_epoch=NO_PRODUCER_EPOCH, timeout_ms=timeout_ms, state=S.EMPTY,
                           txn_last_update_timestamp=now)
    if meta.pending_state is not None:
        return _concurrent(meta)
    if expected is not None and not (
        meta.producer_epoch == NO_PRODUCER_EPOCH
        or expected.producer_id == meta.producer_id
        or (expected.producer_id == meta.previous_producer_id and epoch_exhausted(expected.epoch))
    ):
        return Reply(ErrorCode.PRODUCER_FENCED,
                     f"producer id {expected.producer_id} of transactional id {transactional_id!r} was "
                     f"replaced by {meta.producer_id}")
    if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return _concurrent(meta)
    if meta.state is S.ONGOING:
        return _fence(meta, now)
    # EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
    if epoch_exhausted(meta.producer_epoch) and (expected is None or expected.epoch == meta.producer_epoch):
        target = _reset(meta, now, producer_id=allocate_producer_id(), epoch=0, timeout_ms=timeout_ms,
                        last_epoch=meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH)
        return Transition(meta, target, created=created)
    if expected is None:
        epoch, last = meta.producer_epoch + 1, NO_PRODUCER_EPOCH
    elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected.epoch == meta.producer_epoch:
        epoch, last = meta.producer_epoch + 1, meta.producer_epoch
    elif expected.epoch == meta.last_producer_epoch:
        # A retry of a bump that succeeded: hand out the same epoch again.
        epoch, last = meta.producer_epoch, meta.last_producer_epoch
    else:
        return Reply(ErrorCode.PRODUCER_FENCED,
                     f"producer epoch {expected.epoch} of transactional id {transactional_id!r} is neither "
                     f"the current {meta.producer_epoch} nor the previous {meta.last_producer_epoch}")
    target = _reset(meta, now, producer_id=meta.producer_id, epoch=epoch, timeout_ms=timeout_ms, last_epoch=last)
    return Transition(meta, target, created=created)


def _reset(meta: TxnMetadata, now: int, *, producer_id: int, epoch: int, timeout_ms: int,
           last_epoch: int) -> TxnMetadata:
    return attrs.evolve(meta, producer_id=producer_id, previous_producer_id=meta.producer_id,
                        next_producer_id=NO_PRODUCER_ID, producer_epoch=epoch, last_producer_epoch=last_epoch,
                        timeout_ms=timeout_ms, state=S.EMPTY, partitions=frozenset(), txn_start_timestamp=-1,
                        txn_last_update_timestamp=max(now, meta.txn_last_update_timestamp))


def _fence(meta: TxnMetadata, now: int) -> Transition:
    """Abort the open transaction with the epoch bumped, so that its producer can no longer end it.
    The bumped epoch is never handed to a client: InitProducerId bumps once more."""
    if meta.producer_epoch >= MAX_EPOCH:
        raise IllegalTransitionError(
            f"transactional id {meta.transactional_id}: cannot fence epoch {meta.producer_epoch}")
    target = attrs.evolve(meta, producer_epoch=meta.producer_epoch + 1, last_producer_epoch=NO_PRODUCER_EPOCH,
                          state=S.PREPARE_ABORT,
                          txn_last_update_timestamp=max(now, meta.txn_last_update_timestamp))
    return Transition(meta, target, reply=ErrorCode.CONCURRENT_TRANSACTIONS, pending_as=S.PREPARE_EPOCH_FENCE)


# --- AddPartitionsToTxn, AddOffsetsToTxn

def add_partitions(meta: TxnMetadata | None, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: Iterable[TopicPartition], now: int) -> Decision:
    """AddPartitionsToTxn: the partitions join the open transaction (which this may open)."""
    if not transactional_id:
        return Reply(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
    checked = _check_producer(meta, transactional_id, producer_id, producer_epoch)
    if isinstance(checked, Reply):
        return checked
    meta = checked
    if meta.pending_state is not None or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return _concurrent(meta)
    added = frozenset(partitions)
    if meta.state is S.ONGOING and added <= meta.partitions:
        return Reply(ErrorCode.NONE, "already in the transaction")
    start = now if meta.state is not S.ONGOING else meta.txn_start_timestamp
    target = attrs.evolve(meta, state=S.ONGOING, partitions=meta.partitions | added, txn_start_timestamp=start,
                          txn_last_update_timestamp=max(now, meta.txn_last_update_timestamp))
    return Transition(meta, target)


def add_offsets(meta: TxnMetadata | None, transactional_id: str, producer_id: int, producer_epoch: int,
                offsets_partition: int, now: int) -> Decision:
    """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition (``partition_for(group_id)`` of
    the group coordinator) joins the transaction, so that its offset commits get the markers."""
    return add_partitions(meta, transactional_id, producer_id, producer_epoch,
                          [(OFFSETS_TOPIC, offsets_partition)], now)


def verify_partitions(meta: TxnMetadata | None, transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """The verify-only AddPartitionsToTxn a partition leader sends before it appends a transactional
    batch (KIP-890 part 1): NONE for a partition in the open transaction, TRANSACTION_ABORTABLE for
    one that is not; an error of the producer or of the state for every partition."""
    parts = list(partitions)

    def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
        return dict.fromkeys(parts, code)

    if not transactional_id:
        return every(ErrorCode.INVALID_REQUEST)
    checked = _check_producer(meta, transactional_id, producer_id, producer_epoch)
    if isinstance(checked, Reply):
        return every(checked.error)
    if checked.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return every(ErrorCode.CONCURRENT_TRANSACTIONS)
    # The pending state is not looked at: a partition is in the metadata only once its addition is
    # written, and leaves it only once its marker is.
    return {tp: ErrorCode.NONE if tp in checked.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in parts}


# --- EndTxn and the markers

def end_txn(meta: TxnMetadata | None, transactional_id: str, producer_id: int, producer_epoch: int,
            commit: bool, now: int) -> Decision:
    """EndTxn from the producer: PREPARE_COMMIT or PREPARE_ABORT of the open transaction. A resend
    of the same decision is answered as Kafka does: NONE once it completed, CONCURRENT_TRANSACTIONS
    while it completes; the other decision is INVALID_TXN_STATE."""
    if not transactional_id:
        return Reply(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
    checked = _check_producer(meta, transactional_id, producer_id, producer_epoch)
    if isinstance(checked, Reply):
        return checked
    meta = checked
    if meta.pending_state is not None:
        return _concurrent(meta)
    state = meta.state
    if state is S.ONGOING:
        target = attrs.evolve(meta, state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                              txn_last_update_timestamp=max(now, meta.txn_last_update_timestamp))
        return Transition(meta, target)
    if state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
        return Reply(ErrorCode.NONE, f"already {state.kafka_name}")
    if state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
        return _concurrent(meta)
    return _invalid_state(meta, commit)


def complete(meta: TxnMetadata | None, now: int) -> Decision:
    """PREPARE_COMMIT -> COMPLETE_COMMIT and PREPARE_ABORT -> COMPLETE_ABORT, once every partition
    of the transaction has its marker."""
    meta = _live(meta)
    if meta is None or meta.pending_state is not None or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        what = "unknown" if meta is None else (meta.pending_state or meta.state).name
        return Reply(ErrorCode.INVALID_TXN_STATE, f"no transaction is waiting for its markers ({what})")
    done = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    target = attrs.evolve(meta, state=done, partitions=frozenset(),
                          txn_last_update_timestamp=max(now, meta.txn_last_update_timestamp))
    return Transition(meta, target)


# --- timeouts and expiry

def timed_out(txns: Iterable[TxnMetadata], now: int) -> list[TxnMetadata]:
    """The open transactions older than their timeout, to abort (Kafka's timedOutTransactions)."""
    return [m for m in txns if m.state is S.ONGOING and m.pending_state is None
            and m.txn_start_timestamp + m.timeout_ms < now]


def abort_timed_out(meta: TxnMetadata | None, producer_id: int, now: int) -> Decision:
    """Abort a transaction found by :func:`timed_out`, bumping the epoch so that its producer is
    fenced (Kafka's abortTimedOutTransactions). Declined when the id has changed since."""
    meta = _live(meta)
    if meta is None or meta.producer_id != producer_id:
        return Reply(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "the producer id changed")
    if meta.pending_state is not None:
        return _concurrent(meta)
    if meta.state is not S.ONGOING:
        return _invalid_state(meta, commit=False)
    return _fence(meta, now)


def expired_ids(txns: Iterable[TxnMetadata], now: int, expiration_ms: int) -> list[str]:
    """Ids with no open transaction, unchanged for transactional.id.expiration.ms."""
    return [m.transactional_id for m in txns if m.state in EXPIRATION_ALLOWED and m.pending_state is None
            and m.txn_last_update_timestamp <= now - expiration_ms]


def expire(meta: TxnMetadata | None, now: int, expiration_ms: int) -> Decision:
    """The id's tombstone (DEAD), if it is still expired; once written the id is forgotten."""
    meta = _live(meta)
    if meta is None:
        return Reply(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "unknown transactional id")
    if not expired_ids([meta], now, expiration_ms):
        return Reply(ErrorCode.INVALID_TXN_STATE,
                     f"transactional id {meta.transactional_id!r} is not expired ({meta.state.kafka_name})")
    return Transition(meta, attrs.evolve(meta, state=S.DEAD, partitions=frozenset()))


# --- the errors older clients understand

#: The first version of each API whose clients know PRODUCER_FENCED (KIP-588); older ones get
#: INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis answers them.
PRODUCER_FENCED_SINCE: dict[ApiKey, int] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
}


def error_for_version(error: ErrorCode, api_key: ApiKey, version: int) -> ErrorCode:
    """``error`` as a client of ``api_key`` at ``version`` understands it."""
    since = PRODUCER_FENCED_SINCE.get(api_key)
    if error is ErrorCode.PRODUCER_FENCED and since is not None and version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
