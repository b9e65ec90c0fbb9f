"""RecordBatch v2 inputs for Produce: valid batches, and batches whose header and records lie.

Every mutated batch gets its CRC-32C recomputed over the bytes as mutated, so it passes the CRC
check and reaches whatever the broker does next: this is how a batch that is "valid-looking" but
garbage is made. The records section is written here record by record (rather than with
``build_batch``) so that each length, delta and count can be told to lie; with no lie the bytes are
exactly what ``build_batch`` writes.

A mutation is named by its class (``batch:codec``, ``batch:record-count``, ...): the campaign counts
outcomes per class, and a class that finds a bug can be skipped by name until the fix lands.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from kraftpy.protocol.batch_header import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TRANSACTIONAL_BIT,
    compute_crc,
    pack_batch,
)
from kraftpy.protocol.compression import Compression, compress
from kraftpy.protocol.records import ControlRecordType, control_key, end_txn_marker_value
from kraftpy.protocol.varint import encode_varint, encode_varlong

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
#: A fixed "now" keeps generated batches a function of the seed alone (about 2025-01-01).
BASE_TIMESTAMP = 1_735_689_600_000

_CRC = struct.Struct(">I")


class RecordSpec:
    """One record as it will be written, every field free to lie."""

    __slots__ = ("attributes", "timestamp_delta", "offset_delta", "key", "value", "headers",
                 "length_lie", "key_length", "value_length", "header_count", "tail")

    def __init__(self, offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[bytes, bytes | None]]) -> None:
        self.attributes = 0
        self.timestamp_delta = timestamp_delta
        self.offset_delta = offset_delta
        self.key = key
        self.value = value
        self.headers = headers
        #: Added to the record's true length when writing its length varint.
        self.length_lie = 0
        #: When set, written instead of the true key / value length / header count.
        self.key_length: int | None = None
        self.value_length: int | None = None
        self.header_count: int | None = None
        #: Raw bytes appended inside the record (after the headers), counted in its length.
        self.tail = b""

    def encode(self) -> bytes:
        parts = [bytes((self.attributes & 0xFF,)), encode_varlong(self.timestamp_delta),
                 encode_varint(self.offset_delta)]
        for data, lie in ((self.key, self.key_length), (self.value, self.value_length)):
            if data is None:
                parts.append(encode_varint(-1 if lie is None else lie))
            else:
                parts.append(encode_varint(len(data) if lie is None else lie))
                parts.append(data)
        parts.append(encode_varint(len(self.headers) if self.header_count is None else self.header_count))
        for hkey, hvalue in self.headers:
            parts += [encode_varint(len(hkey)), hkey]
            if hvalue is None:
                parts.append(encode_varint(-1))
            else:
                parts += [encode_varint(len(hvalue)), hvalue]
        parts.append(self.tail)
        body = b"".join(parts)
        return encode_varint(len(body) + self.length_lie) + body


class BatchSpec:
    """A batch as fields plus records; `encode` writes header, (compressed) records and the CRC."""

    def __init__(self, records: list[RecordSpec], *, codec: int = 0, base_timestamp: int = BASE_TIMESTAMP,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> None:
        self.records = records
        self.attributes = codec
        self.base_offset = 0
        self.partition_leader_epoch = -1
        self.base_timestamp = base_timestamp
        self.max_timestamp = base_timestamp + max((r.timestamp_delta for r in records), default=0)
        self.last_offset_delta = len(records) - 1
        self.record_count = len(records)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        #: The codec used to compress the section (normally the attributes' codec; may differ).
        self.compress_with: int | None = None
        #: When set, the records section as stored (already compressed), instead of the records.
        self.raw_section: bytes | None = None

    def section(self) -> bytes:
        if self.raw_section is not None:
            return self.raw_section
        plain = b"".join(r.encode() for r in self.records)
        codec = self.attributes & 0x07 if self.compress_with is None else self.compress_with
        return compress(codec, plain) if codec in CODECS and codec else plain

    def encode(self) -> bytes:
        return pack_batch(
            self.section(), base_offset=self.base_offset, partition_leader_epoch=self.partition_leader_epoch,
            attributes=self.attributes, last_offset_delta=self.last_offset_delta,
            base_timestamp=self.base_timestamp, max_timestamp=self.max_timestamp, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, base_sequence=self.base_sequence, record_count=self.record_count)


def recompute_crc(batch: bytearray) -> bytearray:
    """Set the CRC of the one batch filling ``batch`` to match its bytes (as far as they reach)."""
    if len(batch) >= HEADER_SIZE:
        _CRC.pack_into(batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return batch


# -- valid batches -----------------------------------------------------------------------------------


def random_bytes(rng: random.Random, n: int) -> bytes:
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n else b""


def random_records(rng: random.Random, count: int | None = None) -> list[RecordSpec]:
    count = rng.choice((1, 1, 1, 2, 3, 5, 10)) if count is None else count
    records = []
    for i in range(count):
        key = None if rng.random() < 0.3 else random_bytes(rng, rng.randrange(0, 12))
        value = None if rng.random() < 0.05 else random_bytes(rng, rng.choice((0, 8, 100, 100, 300)))
        headers = [(f"h{j}".encode(), None if rng.random() < 0.2 else random_bytes(rng, rng.randrange(0, 6)))
                   for j in range(rng.choice((0, 0, 0, 1, 2)))]
        records.append(RecordSpec(i, rng.randrange(0, 50) * i, key, value, headers))
    return records


def valid_batch(rng: random.Random, *, idempotent: bool | None = None) -> BatchSpec:
    """A batch a well-behaved producer could send: random codec, records, maybe a producer id."""
    codec = rng.choice(CODECS) if rng.random() < 0.4 else Compression.NONE
    spec = BatchSpec(random_records(rng), codec=codec)
    if idempotent if idempotent is not None else rng.random() < 0.2:
        # Producer ids the broker never handed out: refused or accepted as a new producer, as it says.
        # From a pool, so the producer state a long campaign leaves stays bounded.
        spec.producer_id = rng.choice((0, 1, 1000, 1 << 40)) + rng.randrange(8)
        spec.producer_epoch = rng.choice((0, 0, 1))
        spec.base_sequence = rng.choice((0, 0, 5))
    return spec


# -- mutations ---------------------------------------------------------------------------------------


def _codec(rng: random.Random, spec: BatchSpec) -> str:
    choice = rng.randrange(4)
    old = spec.attributes & 0x07
    if choice == 0:
        new = rng.choice((5, 6, 7))
        spec.attributes = (spec.attributes & ~0x07) | new
        spec.compress_with = Compression.NONE
        return f"codec {new} (unknown) on plain records"
    if choice == 1:
        new = rng.choice(CODECS[1:])
        spec.attributes = (spec.attributes & ~0x07) | new
        spec.compress_with = Compression.NONE
        return f"codec {Compression(new).name} flag on uncompressed records"
    if choice == 2:
        new = rng.choice([c for c in CODECS[1:] if c != old])
        spec.compress_with = new
        return f"records compressed with {Compression(new).name}, attributes say codec {old}"
    new = rng.choice(CODECS[1:])
    spec.attributes = (spec.attributes & ~0x07) | new
    spec.raw_section = compress(new, random_bytes(rng, rng.randrange(1, 200)))
    return f"{Compression(new).name} stream of random bytes"


def _record_count(rng: random.Random, spec: BatchSpec) -> str:
    n = len(spec.records)
    spec.record_count = rng.choice((0, -1, n + 1, n - 1, n + 5, INT32_MAX, INT32_MIN))
    return f"record_count {spec.record_count} for {n} records"


def _last_offset_delta(rng: random.Random, spec: BatchSpec) -> str:
    n = len(spec.records)
    spec.last_offset_delta = rng.choice((-1, n, n - 2, n + 100, INT32_MAX, INT32_MIN, 2**30))
    return f"last_offset_delta {spec.last_offset_delta} for {n} records"


def _offset_deltas(rng: random.Random, spec: BatchSpec) -> str:
    i = rng.randrange(len(spec.records))
    record = spec.records[i]
    record.offset_delta = rng.choice((-1, 0 if i else 1, i + 1, INT32_MAX, INT32_MIN, i + 1000))
    return f"record {i} offset_delta {record.offset_delta}"


def _varint_lengths(rng: random.Random, spec: BatchSpec) -> str:
    i = rng.randrange(len(spec.records))
    record = spec.records[i]
    what = rng.randrange(6)
    if what == 0:
        record.length_lie = rng.choice((-1, 1, 5, -1000, INT32_MAX // 2))
        return f"record {i} length off by {record.length_lie}"
    if what == 1:
        record.key_length = rng.choice((-2, INT32_MIN, INT32_MAX, len(record.key or b"") + 1))
        return f"record {i} key length {record.key_length}"
    if what == 2:
        record.value_length = rng.choice((-2, INT32_MIN, INT32_MAX, len(record.value or b"") + 1))
        return f"record {i} value length {record.value_length}"
    if what == 3:
        record.tail = random_bytes(rng, rng.randrange(1, 8))
        return f"record {i} with {len(record.tail)} trailing bytes"
    if what == 4:
        # An overlong varint: ten continuation bytes where a length should be.
        record.tail = b""
        spec.raw_section = b"".join(r.encode() for r in spec.records[:i]) + b"\xff" * 10 + b"\x01"
        spec.compress_with = Compression.NONE
        spec.attributes &= ~0x07
        return f"overlong varint at record {i}"
    spec.raw_section = b"".join(r.encode() for r in spec.records)[: -rng.randrange(1, 4)]
    spec.compress_with = Compression.NONE
    spec.attributes &= ~0x07
    return "records section cut short"


def _timestamps(rng: random.Random, spec: BatchSpec) -> str:
    what = rng.randrange(5)
    if what == 0:
        spec.base_timestamp = rng.choice((-1, -2, 0, INT64_MAX, INT64_MIN, BASE_TIMESTAMP + 10 * 365 * 86400_000))
        spec.max_timestamp = spec.base_timestamp
        return f"base/max timestamp {spec.base_timestamp}"
    if what == 1:
        spec.max_timestamp = rng.choice((-1, spec.base_timestamp - 1, INT64_MAX, INT64_MIN))
        return f"max_timestamp {spec.max_timestamp} (base {spec.base_timestamp})"
    if what == 2:
        record = rng.choice(spec.records)
        record.timestamp_delta = rng.choice((INT64_MAX, INT64_MIN, -spec.base_timestamp - 1, 10**15))
        return f"timestamp_delta {record.timestamp_delta}"
    if what == 3:
        spec.attributes |= 0x08
        return "LogAppendTime bit set by the producer"
    spec.base_timestamp = BASE_TIMESTAMP - rng.choice((365, 3650)) * 86400_000
    spec.max_timestamp = spec.base_timestamp
    return f"timestamps {spec.base_timestamp} (years old)"


def _producer(rng: random.Random, spec: BatchSpec) -> str:
    what = rng.randrange(5)
    if what == 0:
        spec.producer_id, spec.base_sequence = -1, rng.choice((0, 7, INT32_MAX))
        return f"no producer id, base_sequence {spec.base_sequence}"
    if what == 1:
        spec.producer_id = rng.choice((0, 5, INT64_MAX))
        spec.producer_epoch, spec.base_sequence = 0, -1
        return f"producer id {spec.producer_id} without a sequence"
    if what == 2:
        spec.producer_id, spec.producer_epoch = rng.choice((0, 7)), rng.choice((-1, -2, 32767))
        spec.base_sequence = 0
        return f"producer epoch {spec.producer_epoch}"
    if what == 3:
        spec.producer_id, spec.producer_epoch = rng.choice((0, 9)), 0
        spec.base_sequence = rng.choice((INT32_MAX, INT32_MAX - 1, -2, INT32_MIN))
        return f"base_sequence {spec.base_sequence} (wraps or negative)"
    spec.producer_id, spec.producer_epoch, spec.base_sequence = INT64_MIN, INT32_MIN >> 16, INT32_MIN
    return "producer id/epoch/sequence at their minimum"


def _flags(rng: random.Random, spec: BatchSpec) -> str:
    what = rng.randrange(5)
    if what == 0:
        spec.attributes |= CONTROL_BIT
        return "control bit on a data batch"
    if what == 1:
        spec.attributes |= TRANSACTIONAL_BIT
        return "transactional bit without a transaction"
    if what == 2:
        spec.attributes |= CONTROL_BIT | TRANSACTIONAL_BIT
        spec.producer_id, spec.producer_epoch = 3, 0
        key = control_key(rng.choice(list(ControlRecordType)))
        spec.records = [RecordSpec(0, 0, key, end_txn_marker_value(0), [])]
        spec.last_offset_delta, spec.record_count = 0, 1
        return "a transaction marker sent by a producer"
    if what == 3:
        spec.attributes |= rng.choice((0x40, 0x80, 0x4000, 0x8000))
        detail = f"unused attribute bits {spec.attributes:#06x}"
        if spec.attributes & 0x8000:
            spec.attributes -= 0x10000  # the int16 it is on the wire
        return detail
    record = rng.choice(spec.records)
    record.attributes = rng.choice((1, 0x80, 0xFF))
    return f"record attributes {record.attributes}"


def _headers(rng: random.Random, spec: BatchSpec) -> str:
    i = rng.randrange(len(spec.records))
    record = spec.records[i]
    what = rng.randrange(4)
    if what == 0:
        record.header_count = rng.choice((-1, -2, INT32_MAX, len(record.headers) + 1))
        return f"record {i} header count {record.header_count}"
    if what == 1:
        record.headers = [*record.headers, (b"\xff\xfe", b"v")]
        return f"record {i} header key not UTF-8"
    if what == 2:
        record.headers = [*record.headers, (b"", None)]
        return f"record {i} empty header key"
    record.headers = [(b"k", b"v")] * rng.choice((100, 1000))
    return f"record {i} with {len(record.headers)} headers"


def _counts_after_compression(rng: random.Random, spec: BatchSpec) -> str:
    codec = rng.choice(CODECS[1:])
    spec.attributes = (spec.attributes & ~0x07) | codec
    spec.record_count += rng.choice((1, -1, 2))
    return f"{Compression(codec).name} batch with record_count {spec.record_count} for {len(spec.records)}"


def _many_records(rng: random.Random, spec: BatchSpec) -> str:
    n = rng.choice((1000, 5000))
    spec.records = [RecordSpec(i, 0, None, b"", []) for i in range(n)]
    spec.record_count = rng.choice((n, n - 1))
    spec.last_offset_delta = n - 1
    return f"{n} empty records, record_count {spec.record_count}"


# Mutations of the batch as fields (the bytes are rewritten, CRC and all).
SPEC_MUTATIONS: dict[str, Callable[[random.Random, BatchSpec], str]] = {
    "batch:codec": _codec,
    "batch:record-count": _record_count,
    "batch:last-offset-delta": _last_offset_delta,
    "batch:offset-deltas": _offset_deltas,
    "batch:varint-lengths": _varint_lengths,
    "batch:timestamps": _timestamps,
    "batch:producer": _producer,
    "batch:flags": _flags,
    "batch:headers": _headers,
    "batch:compressed-counts": _counts_after_compression,
    "batch:many-records": _many_records,
}


def _magic(rng: random.Random, data: bytearray) -> str:
    data[MAGIC_OFFSET] = rng.choice((0, 1, 3, 0xFF))
    return f"magic {data[MAGIC_OFFSET]}"


def _batch_length(rng: random.Random, data: bytearray) -> str:
    (length,) = struct.unpack_from(">i", data, 8)
    new = rng.choice((length + 1, length - 1, length + 1000, HEADER_SIZE - LOG_OVERHEAD - 1, -1, INT32_MAX))
    struct.pack_into(">i", data, 8, new)
    return f"batch_length {new} for {length}"


def _two_batches(rng: random.Random, data: bytearray) -> str:
    other = valid_batch(rng).encode()
    data += other
    return "two batches in one partition's records"


def _stamped_fields(rng: random.Random, data: bytearray) -> str:
    base_offset = rng.choice((-1, 5, INT64_MAX, INT64_MIN))
    epoch = rng.choice((-2, 7, INT32_MAX))
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, 12, epoch)
    return f"producer-set base_offset {base_offset}, partition_leader_epoch {epoch}"


def _bitflip(rng: random.Random, data: bytearray) -> str:
    flips = []
    for _ in range(rng.choice((1, 1, 2, 4))):
        pos = rng.randrange(ATTRIBUTES_OFFSET, len(data))
        bit = rng.randrange(8)
        data[pos] ^= 1 << bit
        flips.append(pos)
    return f"bits flipped at {flips}, CRC recomputed"


def _truncate(rng: random.Random, data: bytearray) -> str:
    cut = rng.randrange(1, max(2, len(data) - HEADER_SIZE + 1))
    del data[len(data) - cut:]
    return f"last {cut} bytes cut off (batch_length kept)"


# Mutations of the encoded batch; the CRC is recomputed afterwards (except where it cannot cover).
BYTE_MUTATIONS: dict[str, Callable[[random.Random, bytearray], str]] = {
    "batch:magic": _magic,
    "batch:batch-length": _batch_length,
    "batch:two-batches": _two_batches,
    "batch:stamped-fields": _stamped_fields,
    "batch:bitflip": _bitflip,
    "batch:truncated": _truncate,
}

MUTATION_CLASSES = (*SPEC_MUTATIONS, *BYTE_MUTATIONS)


def mutated_batch(rng: random.Random, klass: str | None = None) -> tuple[bytes, str, str]:
    """``(batch bytes, mutation class, what was done)`` with the CRC recomputed."""
    klass = klass or rng.choice(MUTATION_CLASSES)
    spec = valid_batch(rng)
    if klass in SPEC_MUTATIONS:
        detail = SPEC_MUTATIONS[klass](rng, spec)
        data = bytearray(spec.encode())
    else:
        data = bytearray(spec.encode())
        detail = BYTE_MUTATIONS[klass](rng, data)
    if klass not in ("batch:magic",):
        first = HEADER.unpack_from(data, 0) if len(data) >= HEADER_SIZE else None
        size = first[1] + LOG_OVERHEAD if first else len(data)
        # The CRC covers the first batch as far as its own length says (and the bytes are there).
        head = bytearray(data[: min(size, len(data))]) if size > 0 else data
        recompute_crc(head)
        data[: len(head)] = head
    return bytes(data), klass, detail
