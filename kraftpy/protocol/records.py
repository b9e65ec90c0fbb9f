"""RecordBatch v2 (magic 2): the records inside a batch, their varints, compression and control records.

A batch is the 61-byte header laid out in :mod:`kraftpy.protocol.batch_header`, then the records
section: ``record_count`` records back to back, compressed as one unit when the codec in the
attributes is not none.

One record (varint = zig-zag varint of an int32, varlong = zig-zag varint of an int64)::

    length            varint    bytes of the record after this field
    attributes        int8      unused, 0
    timestamp_delta   varlong   timestamp - base_timestamp
    offset_delta      varint    offset - base_offset
    key_length        varint    -1 for a null key
    key               bytes
    value_length      varint    -1 for a null value
    value             bytes
    header_count      varint
    headers, each:
        key_length    varint    never negative
        key           utf-8
        value_length  varint    -1 for a null value
        value         bytes

The varints are laid out in :mod:`kraftpy.protocol.varint`.

A control batch (attribute bit 5) holds one record whose key is ``version int16, type int16``
(:class:`ControlRecordType`); for ABORT and COMMIT the value is ``version int16,
coordinator_epoch int32``. With LogAppendTime (attribute bit 3) every record's timestamp is the
batch's max_timestamp, whatever its delta says.

Decoding builds one object per record: it is for clients, tools and tests, not for the broker's
data path, which moves whole batches (see :mod:`kraftpy.protocol.batch_header`).
"""

from __future__ import annotations

import enum
import struct
import time
from collections.abc import Iterator, Sequence

import attrs

from kraftpy.protocol.batch_header import (
    CODEC_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptRecordError,
    UnsupportedMagicError,
    check_batch,
    iter_batches,
    pack_batch,
    read_header,
)
from kraftpy.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, decompress
from kraftpy.protocol.varint import (
    SMALL_VARINT_VALUES,
    SMALL_VARINTS,
    VarintError,
    encode_varint,
    encode_varlong,
    read_varint,
    read_varlong,
)

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "BatchHeader",
    "Compression",
    "ControlRecordType",
    "CorruptRecordError",
    "DecodedBatch",
    "MalformedRecordError",
    "Record",
    "SimpleRecord",
    "UnsupportedMagicError",
    "build_batch",
    "control_key",
    "decode_batch",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "end_txn_marker_value",
    "iter_decoded",
    "parse_control_key",
    "parse_end_txn_marker_value",
]

Header = tuple[str, bytes | None]


# -- varints ---------------------------------------------------------------------------------


def _corrupt(exc: VarintError) -> CorruptRecordError:
    return CorruptRecordError(exc.reason, exc.position)


class MalformedRecordError(CorruptRecordError):
    """A record that does not parse. ``reason`` says why; ``index`` is the record's place in its
    batch (the record count when bytes follow the last record); ``position`` is where it starts."""

    def __init__(self, reason: str, position: int | None = None, index: int = -1) -> None:
        super().__init__(reason, position)
        self.reason = reason
        self.index = index


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag varint (int32) at ``pos``; return ``(value, position after it)``."""
    try:
        return read_varint(buf, pos)
    except VarintError as exc:
        raise _corrupt(exc) from None


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zig-zag varlong (int64) at ``pos``; return ``(value, position after it)``."""
    try:
        return read_varlong(buf, pos)
    except VarintError as exc:
        raise _corrupt(exc) from None


# -- records ---------------------------------------------------------------------------------


def _headers_converter(headers) -> tuple[Header, ...]:
    if not headers and type(headers) in (list, tuple):
        return ()  # most records: no headers
    if type(headers) is tuple:
        for header in headers:
            if type(header) is not tuple:
                break
        else:
            return headers
    return tuple((key, value) for key, value in headers)


@attrs.frozen
class Record:
    """A decoded record: absolute offset and timestamp (the batch's base plus the deltas)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = attrs.field(default=(), converter=_headers_converter)


@attrs.frozen
class SimpleRecord:
    """What a producer hands to :func:`build_batch`; ``timestamp`` None means the batch's base."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = attrs.field(default=(), converter=_headers_converter)
    timestamp: int | None = None


@attrs.frozen
class DecodedBatch:
    header: BatchHeader
    records: tuple[Record, ...]

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)


def _decode_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> tuple[Record, ...]:
    """Parse exactly ``count`` records filling ``data``.

    Varints are inlined for their one-byte case (``b < 0x80``, value ``zz[b]``) and read by a call
    for the rest: most lengths and deltas fit one byte, and a call for each would make decoding
    about a quarter slower.
    """
    records = []
    append = records.append
    zz = SMALL_VARINT_VALUES
    varint, varlong = read_varint, read_varlong
    end = len(data)
    pos = 0
    try:
        for _ in range(count):
            start = pos
            b = data[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            else:
                length, pos = varint(data, pos)
            if length < 0 or pos + length > end:
                raise MalformedRecordError(f"record length {length} runs past the records section", start)
            record_end = pos + length
            pos += 1  # attributes: unused
            b = data[pos]
            if b < 0x80:
                timestamp_delta = zz[b]
                pos += 1
            else:
                timestamp_delta, pos = varlong(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            else:
                offset_delta, pos = varint(data, pos)

            b = data[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            else:
                n, pos = varint(data, pos)
            if n < 0:
                if n != -1:
                    raise MalformedRecordError(f"invalid key length {n}", start)
                key = None
            else:
                if pos + n > record_end:
                    raise MalformedRecordError(f"key length {n} runs past the record", start)
                key = data[pos : pos + n]
                pos += n

            b = data[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            else:
                n, pos = varint(data, pos)
            if n < 0:
                if n != -1:
                    raise MalformedRecordError(f"invalid value length {n}", start)
                value = None
            else:
                if pos + n > record_end:
                    raise MalformedRecordError(f"value length {n} runs past the record", start)
                value = data[pos : pos + n]
                pos += n

            b = data[pos]
            if b < 0x80:
                header_count = zz[b]
                pos += 1
            else:
                header_count, pos = varint(data, pos)
            if header_count == 0:
                headers = ()
            else:
                if header_count < 0 or header_count > record_end - pos:
                    raise MalformedRecordError(f"invalid header count {header_count}", start)
                header_list = []
                for _h in range(header_count):
                    b = data[pos]
                    if b < 0x80:
                        n = zz[b]
                        pos += 1
                    else:
                        n, pos = varint(data, pos)
                    if n < 0 or pos + n > record_end:
                        raise MalformedRecordError(f"invalid header key length {n}", start)
                    try:
                        header_key = data[pos : pos + n].decode()
                    except UnicodeDecodeError:
                        raise MalformedRecordError("header key is not valid UTF-8", start) from None
                    pos += n
                    b = data[pos]
                    if b < 0x80:
                        n = zz[b]
                        pos += 1
                    else:
                        n, pos = varint(data, pos)
                    if n < 0:
                        if n != -1:
                            raise MalformedRecordError(f"invalid header value length {n}", start)
                        header_list.append((header_key, None))
                    else:
                        if pos + n > record_end:
                            raise MalformedRecordError(f"header value length {n} runs past the record", start)
                        header_list.append((header_key, data[pos : pos + n]))
                        pos += n
                headers = tuple(header_list)

            if pos != record_end:
                raise MalformedRecordError(
                    f"record declares {length} bytes but its fields take {pos - (record_end - length)}", start
                )
            timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
            append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    except MalformedRecordError as exc:
        exc.index = len(records)
        raise
    except IndexError:
        raise MalformedRecordError(f"truncated record {len(records)} of {count}", pos, len(records)) from None
    except VarintError as exc:
        raise MalformedRecordError(exc.reason, exc.position, len(records)) from None
    if pos != end:
        raise MalformedRecordError(f"{end - pos} bytes left after the batch's {count} records", pos, count)
    return tuple(records)


def decode_records(section: bytes, count: int, base_timestamp: int = 0) -> tuple[Record, ...]:
    """The ``count`` records filling an uncompressed records ``section``, with their offset deltas as
    offsets and ``base_timestamp`` plus their deltas as timestamps. :class:`MalformedRecordError`
    names the first record that does not parse."""
    return _decode_records(section, count, 0, base_timestamp, None)


def decode_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> DecodedBatch:
    """Decode the whole batch at ``pos``: header, decompression, every record.

    Raises :class:`UnsupportedMagicError` for magic 0/1 and :class:`CorruptRecordError` for a
    truncated batch, a CRC mismatch (unless ``verify_crc`` is false), a bad codec, data that
    decompresses past ``max_decompressed_size`` or malformed records.
    """
    if verify_crc:
        header = check_batch(buf, pos)
    else:
        header = read_header(buf, pos)
        if len(buf) - pos < header.size:
            raise CorruptRecordError(
                f"truncated batch: {header.size} bytes announced, {len(buf) - pos} present", pos
            )
    if header.record_count < 0:
        raise CorruptRecordError(f"negative record count {header.record_count}", pos)
    section = bytes(memoryview(buf)[pos + HEADER_SIZE : pos + header.size])
    codec = header.attributes & CODEC_MASK
    if codec != Compression.NONE:
        try:
            section = decompress(codec, section, max_decompressed_size)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"batch at offset {header.base_offset}: {exc}", pos) from None
    # Every record takes at least 7 bytes, so a count above the byte count is refused before looping.
    if header.record_count > len(section):
        raise CorruptRecordError(
            f"record count {header.record_count} does not fit {len(section)} bytes of records", pos
        )
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
    try:
        records = _decode_records(
            section, header.record_count, header.base_offset, header.base_timestamp, log_append_time
        )
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"batch at offset {header.base_offset}: {exc}", pos) from None
    return DecodedBatch(header, records)


def iter_decoded(
    buf: bytes | bytearray | memoryview,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[DecodedBatch]:
    """Decode each whole batch in ``buf`` in order, stopping quietly at a partial batch at the end
    (a fetch response may cut the last batch short)."""
    for pos, _header in iter_batches(buf, verify_crc):
        yield decode_batch(buf, pos, verify_crc=False, max_decompressed_size=max_decompressed_size)


# -- building --------------------------------------------------------------------------------


def _encode_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None, headers
) -> bytes:
    one = SMALL_VARINTS
    parts = [
        b"\x00",
        one.get(timestamp_delta) or encode_varlong(timestamp_delta),
        one.get(offset_delta) or encode_varint(offset_delta),
    ]
    if key is None:
        parts.append(b"\x01")
    else:
        parts.append(one.get(len(key)) or encode_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(one.get(len(value)) or encode_varint(len(value)))
        parts.append(value)
    parts.append(one.get(len(headers)) or encode_varint(len(headers)))
    for header_key, header_value in headers:
        raw_key = header_key.encode()
        parts.append(one.get(len(raw_key)) or encode_varint(len(raw_key)))
        parts.append(raw_key)
        if header_value is None:
            parts.append(b"\x01")
        else:
            parts.append(one.get(len(header_value)) or encode_varint(len(header_value)))
            parts.append(header_value)
    body = b"".join(parts)
    return (one.get(len(body)) or encode_varint(len(body))) + body


def build_batch(
    records: Sequence[SimpleRecord],
    *,
    compression: Compression | int = Compression.NONE,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    base_timestamp: int | None = None,
    timestamp_type: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode ``records`` as one batch with consecutive offsets from ``base_offset``.

    ``base_timestamp`` defaults to the first record timestamp given, or the current time when no
    record has one; a record without a timestamp gets the base timestamp. The max timestamp,
    offset and timestamp deltas, record count and CRC-32C are computed here.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    codec = Compression(compression)
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
    if base_timestamp is None:
        base_timestamp = next((r.timestamp for r in records if r.timestamp is not None), None)
        if base_timestamp is None:
            base_timestamp = time.time_ns() // 1_000_000
    max_timestamp = -1
    parts = []
    for offset_delta, record in enumerate(records):
        timestamp = base_timestamp if record.timestamp is None else record.timestamp
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        parts.append(
            _encode_record(offset_delta, timestamp - base_timestamp, record.key, record.value, record.headers)
        )
    section = b"".join(parts)
    if codec != Compression.NONE:
        section = compress(codec, section)

    attributes = codec | (TIMESTAMP_TYPE_BIT if timestamp_type else 0)
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    return pack_batch(
        section,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=len(records) - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=len(records),
    )


# -- control records -------------------------------------------------------------------------


class ControlRecordType(enum.IntEnum):
    """The ``type`` of a control record key. 0-1 end transactions; 2-6 are KRaft's own records."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


def control_key(type: ControlRecordType | int, version: int = CONTROL_KEY_VERSION) -> bytes:
    """The 4-byte key of a control record."""
    return _CONTROL_KEY.pack(version, type)


def parse_control_key(key: bytes | None) -> tuple[int, ControlRecordType | int]:
    """``(version, type)`` of a control record key; the type is a ControlRecordType when known.

    Like Kafka, a newer key version is read by its first four bytes.
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key must be at least 4 bytes, got {key!r}")
    version, type_ = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"invalid control record key version {version}")
    try:
        return version, ControlRecordType(type_)
    except ValueError:
        return version, type_


def end_txn_marker_value(coordinator_epoch: int, version: int = END_TXN_MARKER_VERSION) -> bytes:
    """The value of an ABORT or COMMIT control record: ``version int16, coordinator_epoch int32``."""
    return _END_TXN_MARKER.pack(version, coordinator_epoch)


def parse_end_txn_marker_value(value: bytes | None) -> tuple[int, int]:
    """``(version, coordinator_epoch)`` of an ABORT or COMMIT control record value."""
    if value is None or len(value) < _END_TXN_MARKER.size:
        raise CorruptRecordError(f"end transaction marker must be at least 6 bytes, got {value!r}")
    version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"invalid end transaction marker version {version}")
    return version, coordinator_epoch
