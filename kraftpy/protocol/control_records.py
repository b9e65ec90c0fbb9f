"""End-transaction markers: the control batch that commits or aborts a producer's transaction in a partition.

The transaction coordinator has each partition leader of a transaction append one marker batch (through
WriteTxnMarkers); a read_committed consumer sees a transaction's records once its COMMIT marker is in
the log, and skips them once its ABORT marker is. The marker is a RecordBatch v2 with one record::

    batch header   attributes          control (bit 5) | transactional (bit 4), no compression, CreateTime
                   producer_id/epoch   the transaction's producer
                   base_sequence       -1 (markers carry no sequence; idempotence does not count them)
                   record_count        1
    record key     int16 version 0 | int16 type      0 = ABORT, 1 = COMMIT (:class:`ControlRecordType`)
    record value   int16 version 0 | int32 coordinator_epoch

The key and value primitives live in :mod:`kraftpy.protocol.records` (as Kafka, a newer key or value
version is read by its first fields); this module builds and reads whole marker batches with the batch
codec. Reading never trusts the bytes: anything that is not one well-formed marker raises
:class:`~kraftpy.protocol.batch_header.CorruptRecordError`.
"""

from __future__ import annotations

import attrs

from kraftpy.protocol.batch_header import (
    NO_PARTITION_LEADER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    CorruptRecordError,
)
from kraftpy.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    control_key,
    decode_batch,
    end_txn_marker_value,
    parse_control_key,
    parse_end_txn_marker_value,
)

_MARKER_TYPES = (ControlRecordType.ABORT, ControlRecordType.COMMIT)


@attrs.frozen
class EndTxnMarker:
    """A decoded marker batch: whose transaction, how it ended, at which offset."""

    producer_id: int
    producer_epoch: int
    #: True for COMMIT, False for ABORT (WriteTxnMarkers' ``transaction_result``).
    committed: bool
    coordinator_epoch: int
    #: The marker's offset in the partition (the batch's base offset; 0 before the leader stamps it).
    offset: int
    timestamp: int

    @property
    def control_type(self) -> ControlRecordType:
        return ControlRecordType.COMMIT if self.committed else ControlRecordType.ABORT


def build_end_txn_marker(
    *,
    producer_id: int,
    producer_epoch: int,
    committed: bool,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The bytes of one marker batch (see the module docstring), ready for the leader to stamp and append."""
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(f"a transaction marker needs a producer id and epoch, got {producer_id}/{producer_epoch}")
    record = SimpleRecord(
        key=control_key(ControlRecordType.COMMIT if committed else ControlRecordType.ABORT),
        value=end_txn_marker_value(coordinator_epoch),
        timestamp=timestamp,
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        base_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
    )


def is_end_txn_marker_header(header: BatchHeader) -> bool:
    """Whether a batch's header says it is a marker (control and transactional), without reading its record.

    A control batch that is not transactional is KRaft's own (leader change, snapshot header...).
    """
    return header.is_control and header.is_transactional


def read_end_txn_marker(buf: bytes | bytearray | memoryview, pos: int = 0, verify_crc: bool = True) -> EndTxnMarker:
    """Decode the marker batch at ``pos``; raises CorruptRecordError for anything else."""
    batch = decode_batch(buf, pos, verify_crc=verify_crc)
    header = batch.header
    where = f"batch at offset {header.base_offset}"
    if not is_end_txn_marker_header(header):
        raise CorruptRecordError(f"{where} is not a transaction marker (attributes {header.attributes:#06x})", pos)
    if header.record_count != 1:
        raise CorruptRecordError(f"{where}: a transaction marker holds 1 record, not {header.record_count}", pos)
    (record,) = batch.records
    _version, type_ = parse_control_key(record.key)
    if type_ not in _MARKER_TYPES:
        raise CorruptRecordError(f"{where}: control record type {int(type_)} is not ABORT or COMMIT", pos)
    _value_version, coordinator_epoch = parse_end_txn_marker_value(record.value)
    return EndTxnMarker(
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        committed=type_ is ControlRecordType.COMMIT,
        coordinator_epoch=coordinator_epoch,
        offset=record.offset,
        timestamp=record.timestamp,
    )
