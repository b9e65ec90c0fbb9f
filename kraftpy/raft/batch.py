"""`RecordBatch`: one Raft batch as bytes — the leader's RecordBatch v2, kept as it was built.

Every Raft batch is one Kafka RecordBatch of magic 2 (the 61-byte header of
kraftpy.protocol.batch_header, then the records). The fields Raft gives a meaning to::

    base_offset             the offset of the batch's first record in the Raft log
    partition_leader_epoch  the epoch of the leader that appended the batch (the batch's epoch)
    attributes bit 5        control batch: written by Raft itself (the leader-change record of a new
                            epoch, KIP-595; the kraft.version and voters records, KIP-853), each
                            record's key being Kafka's control key of its type
    last_offset_delta       record_count - 1: a Raft batch holds consecutive offsets, none compacted
    base/max_timestamp      the leader's wall clock when it appended the batch (every record of the
                            batch carries the base timestamp)
    records                 one per Raft record: key null (control: the control key), value = the
                            record's opaque bytes (msgpack metadata records for __cluster_metadata;
                            kraftpy.raft.control and kraftpy.raft.voters for control records)

Theory of operation. The leader encodes a batch exactly once, when it appends it
(`RecordBatch.build`). From then on a batch is those bytes: the leader's log holds them, a
FetchResponse carries them (``records``: whole batches back to back, Kafka's ``records`` field, one
msgpack bin on the control plane), and every follower and observer checks them (`parse_batches`:
whole batches, magic 2, CRC-32C) and appends them as they are. So every replica holds the leader's
bytes and CRCs, which `kraftpy dump-log` shows. A `RecordBatch` reads its header once (one struct
unpack); record values are decoded only when a state machine asks for them (`records`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kraftpy.protocol.batch_header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    check_batch,
    read_header,
)
from kraftpy.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    control_key,
    decode_batch,
    parse_control_key,
)

__all__ = ["NO_TIMESTAMP", "CorruptRecordError", "RecordBatch", "encoded_size_bound", "parse_batches"]

#: Kafka's RecordBatch.NO_TIMESTAMP: a batch appended without a clock.
NO_TIMESTAMP = -1
_LEADER_CHANGE_KEY = control_key(ControlRecordType.LEADER_CHANGE)
#: A record's bytes besides its value, at most, in a batch built here: length, attributes,
#: timestamp delta (0), offset delta, key length (null), value length, header count (0).
_RECORD_OVERHEAD_BOUND = 5 + 1 + 1 + 5 + 1 + 5 + 1


def encoded_size_bound(records: Sequence[bytes]) -> int:
    """An upper bound on the size of the data batch `RecordBatch.build` makes of `records`."""
    return HEADER_SIZE + sum(len(r) + _RECORD_OVERHEAD_BOUND for r in records)


class RecordBatch:
    """A view over the bytes of one whole, checked batch. Equal when the bytes are equal.

    Build one with `RecordBatch.build` (the leader) or `parse_batches` (anything received or read).
    """

    __slots__ = ("_header", "_records", "data")

    def __init__(self, data: bytes, header: BatchHeader | None = None) -> None:
        #: The batch exactly as the leader encoded it.
        self.data = bytes(data)
        self._header = header if header is not None else read_header(self.data)
        self._records: tuple[bytes, ...] | None = None
        if self._header.size != len(self.data):
            raise CorruptRecordError(f"batch of {len(self.data)} bytes announces {self._header.size}")

    @classmethod
    def build(
        cls,
        records: Sequence[bytes],
        *,
        base_offset: int,
        epoch: int,
        is_control: bool = False,
        timestamp_ms: int = NO_TIMESTAMP,
        control_types: Sequence[ControlRecordType] | None = None,
    ) -> RecordBatch:
        """Encode `records` as one batch starting at `base_offset`, stamped with `epoch`. A control
        batch (`is_control`, or `control_types` given: one type per record) keys each record with its
        control type, LEADER_CHANGE when none is given."""
        if not records:
            raise ValueError("a batch holds at least one record")
        if control_types is not None:
            if len(control_types) != len(records):
                raise ValueError(f"{len(control_types)} control types for {len(records)} records")
            is_control = True
            keys: list[bytes | None] = [control_key(t) for t in control_types]
        else:
            keys = [_LEADER_CHANGE_KEY if is_control else None] * len(records)
        data = build_batch(
            [SimpleRecord(key, bytes(value)) for key, value in zip(keys, records, strict=True)],
            base_offset=base_offset,
            partition_leader_epoch=epoch,
            base_timestamp=timestamp_ms,
            is_control=is_control,
        )
        batch = cls(data)
        batch._records = tuple(bytes(value) for value in records)
        return batch

    # -- the header ------------------------------------------------------------------------------

    @property
    def header(self) -> BatchHeader:
        return self._header

    @property
    def base_offset(self) -> int:
        return self._header.base_offset

    @property
    def epoch(self) -> int:
        """The epoch of the leader that appended the batch (partition_leader_epoch)."""
        return self._header.partition_leader_epoch

    @property
    def is_control(self) -> bool:
        """Written by Raft itself (today only a new leader's leader-change record, KIP-595); state
        machines skip such batches."""
        return self._header.is_control

    @property
    def last_offset(self) -> int:
        return self._header.last_offset

    @property
    def next_offset(self) -> int:
        return self._header.next_offset

    @property
    def record_count(self) -> int:
        return self._header.record_count

    @property
    def crc(self) -> int:
        return self._header.crc

    @property
    def timestamp_ms(self) -> int:
        return self._header.max_timestamp

    @property
    def size_in_bytes(self) -> int:
        return len(self.data)

    # -- the records -----------------------------------------------------------------------------

    @property
    def records(self) -> tuple[bytes, ...]:
        """The record values, decoded on first use."""
        if self._records is None:
            decoded = decode_batch(self.data, verify_crc=False)
            self._records = tuple(record.value or b"" for record in decoded.records)
        return self._records

    def control_records(self) -> list[tuple[int, bytes]]:
        """(control type, value) of each record of a control batch (decoded each time: rare).
        Raises CorruptRecordError for a record without a control key."""
        decoded = decode_batch(self.data, verify_crc=False)
        out = []
        for record in decoded.records:
            try:
                _version, kind = parse_control_key(record.key)
            except ValueError as exc:
                raise CorruptRecordError(f"control record at {self.base_offset}: {exc}") from None
            out.append((int(kind), record.value or b""))
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordBatch):
            return NotImplemented
        return self.data == other.data

    def __hash__(self) -> int:
        return hash(self.data)

    def __repr__(self) -> str:
        control = " control" if self.is_control else ""
        return (
            f"RecordBatch(base_offset={self.base_offset}, epoch={self.epoch}, count={self.record_count}"
            f"{control}, crc={self.crc:#010x})"
        )


def parse_batches(data: bytes | bytearray | memoryview, *, verify: bool = True) -> list[RecordBatch]:
    """The batches of `data`, which must be whole batches back to back, each holding consecutive
    offsets. With `verify` each batch's CRC-32C is checked (bytes from the network); without, only
    the headers are read (bytes the log checked when it stored or recovered them).

    Raises CorruptRecordError on a partial batch, a bad magic or CRC, or a batch whose record count
    does not match its offsets."""
    view = memoryview(data)
    out: list[RecordBatch] = []
    position = 0
    while position < len(view):
        if len(view) - position < LOG_OVERHEAD:
            raise CorruptRecordError("partial batch at the end", position)
        header = check_batch(view, position) if verify else read_header(view, position)
        if not verify and len(view) - position < header.size:
            raise CorruptRecordError("partial batch at the end", position)
        if header.last_offset_delta < 0 or header.record_count != header.last_offset_delta + 1:
            raise CorruptRecordError(
                f"{header.record_count} records for offsets {header.base_offset}..{header.last_offset}", position
            )
        out.append(RecordBatch(view[position : position + header.size], header))
        position += header.size
    return out
