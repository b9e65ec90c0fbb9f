"""Hand-made RecordBatches for tests of what a broker accepts: any field, any record bytes, a valid CRC.

`records_section` lays records out byte by byte (so a test can write what no client would: a wrong
offset delta, a negative header key length); `sealed` wraps a section in a header of chosen fields;
`resealed` changes header fields of an existing batch. Each returns a batch whose CRC-32C matches,
so only the rule under test can refuse it.
"""

from __future__ import annotations

import time

import attrs

from kraftpy.protocol.batch_header import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
    pack_batch,
)
from kraftpy.protocol.compression import compress
from kraftpy.protocol.varint import encode_varint, encode_varlong

Headers = tuple[tuple[bytes, bytes | None], ...]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def record(offset_delta: int, key: bytes | None = b"k", value: bytes | None = b"v", *, timestamp_delta: int = 0,
           headers: Headers = (), attributes: int = 0) -> bytes:
    """One record as it sits in a records section (header keys as raw bytes, so they may be bad UTF-8)."""
    body = bytearray([attributes])
    body += encode_varlong(timestamp_delta) + encode_varint(offset_delta)
    body += encode_varint(-1) if key is None else encode_varint(len(key)) + key
    body += encode_varint(-1) if value is None else encode_varint(len(value)) + value
    body += encode_varint(len(headers))
    for header_key, header_value in headers:
        body += encode_varint(len(header_key)) + header_key
        body += encode_varint(-1) if header_value is None else encode_varint(len(header_value)) + header_value
    return encode_varint(len(body)) + bytes(body)


def raw_record(body: bytes) -> bytes:
    """A record of exactly ``body`` (whatever it holds) behind its length."""
    return encode_varint(len(body)) + body


def records_section(count: int, value: bytes = b"v") -> bytes:
    """``count`` well-formed records with offset deltas 0..count-1."""
    return b"".join(record(i, b"k%d" % i, value) for i in range(count))


def sealed(section: bytes, record_count: int, *, last_offset_delta: int | None = None, codec: int = 0,
           attributes: int = 0, base_timestamp: int | None = None, max_timestamp: int | None = None,
           producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1, base_offset: int = 0,
           compressed: bool = True) -> bytes:
    """A batch around ``section`` (compressed with ``codec`` unless ``compressed`` is false) with a
    valid CRC; by default its timestamps are now and its last offset delta is ``record_count - 1``."""
    if base_timestamp is None:
        base_timestamp = now_ms()
    if codec and compressed:
        section = compress(codec, section)
    return pack_batch(
        section,
        base_offset=base_offset,
        attributes=attributes | codec,
        last_offset_delta=record_count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=base_timestamp if max_timestamp is None else max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=record_count,
    )


def resealed(batch: bytes, **fields) -> bytes:
    """``batch`` with header fields replaced (any of BatchHeader's but batch_length and crc) and its CRC
    recomputed."""
    header = attrs.evolve(BatchHeader(*HEADER.unpack_from(batch)), **fields)
    out = bytearray(HEADER.pack(*attrs.astuple(header)) + batch[HEADER_SIZE:])
    header = attrs.evolve(header, crc=compute_crc(out, 0, header.batch_length + LOG_OVERHEAD))
    out[:HEADER_SIZE] = HEADER.pack(*attrs.astuple(header))
    return bytes(out)
