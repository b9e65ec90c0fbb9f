"""The 61-byte header of a Kafka RecordBatch (magic 2), the unit of the log on disk and on the wire.

Byte layout (big-endian), as Kafka defines it::

    offset  size  field
    0       8     base_offset             stamped by the leader; not covered by the CRC
    8       4     batch_length            bytes after this field (total size - 12)
    12      4     partition_leader_epoch  stamped by the leader; not covered by the CRC
    16      1     magic                   2
    17      4     crc                     CRC-32C (Castagnoli) of bytes 21..end
    21      2     attributes              bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23      4     last_offset_delta
    27      8     base_timestamp
    35      8     max_timestamp
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     record_count
    61            records (compressed as a whole when the codec is not none)

This module is the one place that knows these offsets and formats. Everything here is pure:
functions take a buffer and an offset into it, or, for :func:`pack_batch`, the fields and the
records section. The broker reads and stamps headers without decoding records, which is what
keeps batches, not records, on the hot path.
"""

from __future__ import annotations

import struct

import attrs
import crc32c

#: The whole header, one format character a field, in the order of the table above.
HEADER = struct.Struct(">qiiBIhiqqqhii")
assert HEADER.size == 61
HEADER_SIZE = HEADER.size
#: Bytes before ``batch_length`` counts: base_offset and batch_length themselves.
LOG_OVERHEAD = 12

BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
#: Where the part the CRC covers starts.
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
# A field's offset is the size of the fields before it (field i is HEADER.format[i + 1]).
assert [struct.calcsize(HEADER.format[: i + 1]) for i in (1, 2, 3, 4, 5, 8)] == [
    BATCH_LENGTH_OFFSET, PARTITION_LEADER_EPOCH_OFFSET, MAGIC_OFFSET, CRC_OFFSET, ATTRIBUTES_OFFSET,
    MAX_TIMESTAMP_OFFSET,
]

#: The smallest prefix that tells a reader the batch's size and magic: base_offset to magic.
PREFIX = struct.Struct(HEADER.format[:5])
assert PREFIX.size == 17
#: base_offset to crc, then attributes to record_count (the header's part of what the CRC covers).
_UNCOVERED = struct.Struct(HEADER.format[:6])
_COVERED = struct.Struct(">" + HEADER.format[6:])
assert _UNCOVERED.size == ATTRIBUTES_OFFSET and _COVERED.size == HEADER_SIZE - ATTRIBUTES_OFFSET

_BASE_OFFSET = struct.Struct(">q")
_BATCH_LENGTH = struct.Struct(">i")
_PARTITION_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


class CorruptRecordError(ValueError):
    """A batch that cannot be trusted: bad size, magic or CRC. ``position`` is where it starts."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message if position is None else f"{message} (at byte {position})")
        self.position = position


class UnsupportedMagicError(CorruptRecordError):
    """A message set of magic 0 or 1: refused, as Kafka 4 refuses them."""


@attrs.frozen
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; checks that the whole header is present and the magic is 2."""
    if len(buf) - pos < PREFIX.size:
        raise CorruptRecordError("truncated batch header", pos)
    magic = buf[pos + MAGIC_OFFSET]
    if magic != 2:
        if magic in (0, 1):
            raise UnsupportedMagicError(f"message format magic {magic} is not supported; only magic 2", pos)
        raise CorruptRecordError(f"invalid magic byte {magic}", pos)
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError("truncated batch header", pos)
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {header.batch_length} is smaller than a header", pos)
    return header


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of the batch at ``pos`` of ``size`` bytes, over attributes to the end."""
    return crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def pack_batch(
    records: bytes | bytearray | memoryview,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    attributes: int = 0,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    record_count: int,
) -> bytes:
    """A whole batch: a header of these fields, then ``records``, the records section as stored
    (compressed when the codec in ``attributes`` says so). Magic, batch_length and CRC are filled in."""
    covered = _COVERED.pack(
        attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
        record_count,
    )
    crc = crc32c.crc32c(records, crc32c.crc32c(covered))
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(records)
    return _UNCOVERED.pack(base_offset, batch_length, partition_leader_epoch, 2, crc) + covered + records


def check_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and verify the batch at ``pos``: whole batch present, magic 2, CRC matches."""
    header = read_header(buf, pos)
    if len(buf) - pos < header.size:
        raise CorruptRecordError(
            f"truncated batch: {header.size} bytes announced, {len(buf) - pos} present", pos
        )
    actual = compute_crc(buf, pos, header.size)
    if actual != header.crc:
        raise CorruptRecordError(f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}", pos)
    return header


def iter_batches(buf: bytes | bytearray | memoryview, verify: bool = True):
    """Yield ``(position, header)`` for each whole batch in ``buf``, stopping at a partial tail.

    A partial tail is what a fetch response may end with: fewer bytes than the last batch's
    ``batch_length`` announces, or too few to hold that length. It ends the iteration quietly,
    whether or not ``verify`` is set; a whole batch that is bad raises CorruptRecordError.
    """
    pos = 0
    end = len(buf)
    while end - pos >= LOG_OVERHEAD:
        (batch_length,) = _BATCH_LENGTH.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
        if batch_length >= HEADER_SIZE - LOG_OVERHEAD and end - pos < batch_length + LOG_OVERHEAD:
            return
        header = check_batch(buf, pos) if verify else read_header(buf, pos)
        yield pos, header
        pos += header.size


def stamp(buf: bytearray | memoryview, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Write base offset and leader epoch into a batch in place; the CRC does not cover them."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _PARTITION_LEADER_EPOCH.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_max_timestamp(buf: bytearray | memoryview, pos: int, timestamp_type: int, max_timestamp: int) -> None:
    """Set the timestamp type bit and the max timestamp in place, then recompute the CRC.

    This is how a leader applies ``LogAppendTime``: readers then give every record of the batch
    ``max_timestamp``. The batch must be whole in ``buf``.
    """
    header = read_header(buf, pos)
    if len(buf) - pos < header.size:
        raise CorruptRecordError(
            f"truncated batch: {header.size} bytes announced, {len(buf) - pos} present", pos
        )
    attributes = header.attributes & ~TIMESTAMP_TYPE_BIT
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_BIT
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
    _MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    _CRC.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, header.size))
