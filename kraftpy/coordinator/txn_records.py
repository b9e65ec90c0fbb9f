"""The records of ``__transaction_state``, in Kafka's byte format, so Kafka's tools can read a kraftpy log.

One record per transactional id and state change; the topic is compacted, so the newest record of an
id is its state, and a null value (a tombstone) says the id expired. Key and value start with an
int16 *version*, then the fields of that version, encoded as in the Kafka protocol::

    key version  key fields          value                  value versions
    0            transactional_id    TransactionLogValue    0 (classic), 1 (flexible: compact lengths and
                                                            tagged fields; written from transaction.version 1)
    other        (a later Kafka's; reported as UnknownKey, skipped when loading)

Byte layout (big-endian)::

    TransactionLogKey v0    int16 0 | string transactional_id
    TransactionLogValue v0  int16 0 | int64 producer_id | int16 producer_epoch | int32 transaction_timeout_ms
                            | int8 transaction_status | int32 count (-1: null), then per topic:
                              string topic | int32 count | int32 partition...
                            | int64 transaction_last_update_timestamp_ms | int64 transaction_start_timestamp_ms
    TransactionLogValue v1  the same fields with compact (uvarint length + 1) strings and arrays, a 0 byte
                            closing each topic, then the tagged fields: 0 previous_producer_id,
                            1 next_producer_id (int64, written when not -1), 2 client_transaction_version
                            (int16, written when not 0)

The status byte is Kafka's ``TransactionState.id`` (:class:`TransactionStatus`). The partition list is
null in state Empty, as Kafka writes it, and a reader ignores it there, as Kafka's does. Version 0 has no
place for the tagged fields: they are dropped, as Kafka drops them below transaction.version 1.

The declarations use the message DSL of :mod:`kraftpy.protocol.schema`; a test compares them with
Kafka's definitions field by field. Decoding never trusts the bytes: anything that does not parse
raises :class:`~kraftpy.coordinator.records.CoordinatorRecordError`.
"""

from __future__ import annotations

import enum
import struct

import attrs

from kraftpy.coordinator.records import CoordinatorRecordError, UnknownKey, decode_body, split_version
from kraftpy.protocol.schema import F, message

# fmt: off
TransactionLogKey = message(
    "TransactionLogKey", kind="data", versions="0", flexible="none", fields=[
        F("transactional_id", "string", "0"),
    ],
)

TransactionLogValue = message(
    "TransactionLogValue", kind="data", versions="0-1", flexible="1+", fields=[
        F("producer_id", "int64"),
        F("previous_producer_id", "int64", "1+", tag=0, default=-1),
        F("next_producer_id", "int64", "1+", tag=1, default=-1),
        F("producer_epoch", "int16"),
        F("transaction_timeout_ms", "int32"),
        F("transaction_status", "int8"),
        F("transaction_partitions", "[]PartitionsSchema", "0+", [
            F("topic", "string"),
            F("partition_ids", "[]int32"),
        ], nullable="0+"),
        F("transaction_last_update_timestamp_ms", "int64"),
        F("transaction_start_timestamp_ms", "int64"),
        F("client_transaction_version", "int16", "1+", tag=2, default=0),
    ],
)
# fmt: on

PartitionsSchema = TransactionLogValue.PartitionsSchema

TRANSACTION_LOG_KEY_VERSION = 0
#: Kafka's value version below transaction.version 1, and kraftpy's default.
TRANSACTION_LOG_VALUE_VERSION = 0
#: The flexible version (Kafka writes it from transaction.version 1, KIP-890).
TRANSACTION_LOG_VALUE_FLEXIBLE_VERSION = 1

_VERSION = struct.Struct(">h")
assert _VERSION.size == 2


class TransactionStatus(enum.IntEnum):
    """The status byte of a TransactionLogValue: Kafka's ``TransactionState.id``.

    PREPARE_EPOCH_FENCE is a state Kafka holds in memory while it fences a producer; it is decoded if
    found but Kafka writes PREPARE_ABORT for it.
    """

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (``PrepareCommit``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@attrs.frozen
class TransactionKey:
    """The key of a transactional id's state."""

    transactional_id: str


def _sorted_partitions(value) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(set(value)))


@attrs.frozen
class TransactionLogEntry:
    """One TransactionLogValue: a transactional id's producer, state and partitions at one moment.

    Invariant: ``partitions`` is empty when ``status`` is EMPTY (writing refuses otherwise).
    """

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    status: TransactionStatus = attrs.field(converter=TransactionStatus)
    #: (topic, partition) pairs of the transaction, sorted, each once.
    partitions: tuple[tuple[str, int], ...] = attrs.field(converter=_sorted_partitions)
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def transaction_log_key(transactional_id: str) -> bytes:
    return _VERSION.pack(TRANSACTION_LOG_KEY_VERSION) + TransactionLogKey.SCHEMA.to_bytes(
        TRANSACTION_LOG_KEY_VERSION, TransactionLogKey(transactional_id=transactional_id))


def transaction_log_value(entry: TransactionLogEntry, version: int = TRANSACTION_LOG_VALUE_VERSION) -> bytes:
    """``entry`` at ``version`` (0, or 1 for the flexible form); partitions grouped by topic in name order."""
    if version not in TransactionLogValue.SCHEMA.versions:
        raise ValueError(f"TransactionLogValue has no version {version}")
    if entry.status is TransactionStatus.EMPTY and entry.partitions:
        raise ValueError(f"a transaction in state Empty has no partitions, got {list(entry.partitions)}")
    if entry.status is TransactionStatus.EMPTY:
        partitions = None
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in entry.partitions:
            by_topic.setdefault(topic, []).append(partition)
        partitions = [PartitionsSchema(topic=topic, partition_ids=ids) for topic, ids in by_topic.items()]
    value = TransactionLogValue(
        producer_id=entry.producer_id,
        previous_producer_id=entry.previous_producer_id,
        next_producer_id=entry.next_producer_id,
        producer_epoch=entry.producer_epoch,
        transaction_timeout_ms=entry.transaction_timeout_ms,
        transaction_status=int(entry.status),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=entry.last_update_timestamp_ms,
        transaction_start_timestamp_ms=entry.start_timestamp_ms,
        client_transaction_version=entry.client_transaction_version,
    )
    return _VERSION.pack(version) + TransactionLogValue.SCHEMA.to_bytes(version, value)


def decode_transaction_log_key(data: bytes | memoryview) -> TransactionKey | UnknownKey:
    """A :class:`TransactionKey`, or :class:`UnknownKey` for a key version this kraftpy does not know."""
    version, body = split_version(data, "TransactionLogKey")
    if version not in TransactionLogKey.SCHEMA.versions:
        return UnknownKey(version)
    return TransactionKey(decode_body(TransactionLogKey, version, body, "TransactionLogKey").transactional_id)


def decode_transaction_log_value(data: bytes | memoryview | None) -> TransactionLogEntry | None:
    """The entry, or None for a tombstone (the transactional id expired)."""
    if data is None:
        return None
    version, body = split_version(data, "TransactionLogValue")
    if version not in TransactionLogValue.SCHEMA.versions:
        raise CoordinatorRecordError(f"TransactionLogValue has unknown version {version}")
    value = decode_body(TransactionLogValue, version, body, "TransactionLogValue")
    try:
        status = TransactionStatus(value.transaction_status)
    except ValueError:
        raise CoordinatorRecordError(
            f"TransactionLogValue v{version}: unknown transaction status {value.transaction_status}") from None
    partitions = []
    if status is not TransactionStatus.EMPTY and value.transaction_partitions is not None:
        partitions = [(p.topic, i) for p in value.transaction_partitions for i in p.partition_ids]
    return TransactionLogEntry(
        producer_id=value.producer_id,
        producer_epoch=value.producer_epoch,
        transaction_timeout_ms=value.transaction_timeout_ms,
        status=status,
        partitions=partitions,
        last_update_timestamp_ms=value.transaction_last_update_timestamp_ms,
        start_timestamp_ms=value.transaction_start_timestamp_ms,
        previous_producer_id=value.previous_producer_id,
        next_producer_id=value.next_producer_id,
        client_transaction_version=value.client_transaction_version,
    )
