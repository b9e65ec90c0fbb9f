"""What a partition leader checks in a produced RecordBatch before anything is written: Kafka's LogValidator.

Theory of operation
-------------------
A Produce request (v3 and later) carries one RecordBatch per partition, and the leader stores that
batch as the producer sent it: the bytes are stamped with an offset and a leader epoch, written,
replicated and served to consumers as they are. So whatever a consumer will read must be checked
here, once: a batch acknowledged with records that do not parse, or with offsets that disagree with
its header, stops every consumer at that offset and hides every record acknowledged after it.

:func:`validate_produced_batch` runs these checks in this order; the first that fails decides the
answer, and a refused batch leaves the log and the producer state untouched::

    check                                             refused with
    ------------------------------------------------  -------------------------------------------
    a batch is present                                INVALID_RECORD
    whole header, magic 2                             CORRUPT_MESSAGE (magic 0 or 1: INVALID_RECORD)
    exactly one batch                                 INVALID_RECORD
    size <= max.message.bytes                         MESSAGE_TOO_LARGE
    CRC-32C                                           CORRUPT_MESSAGE
    base offset 0                                     INVALID_RECORD
    record_count >= 1, last_offset_delta + 1 equal    INVALID_RECORD
    not a control batch                               INVALID_RECORD
    producer id -1, or >= 0 with epoch and base
      sequence >= 0; a transactional batch has one    INVALID_RECORD
    codec 0-4 (zstd from Produce v7)                  UNSUPPORTED_COMPRESSION_TYPE
    timestamp type CreateTime                         INVALID_TIMESTAMP
    the records section decompresses, within
      max_decompressed_size                           CORRUPT_MESSAGE
    exactly record_count records that parse           INVALID_RECORD, record_errors
    offset deltas 0, 1, 2, ...                        INVALID_RECORD, record_errors
    a key on every record of a compacted topic        INVALID_RECORD, record_errors
    CreateTime timestamps within [now - before,
      now + after] (message.timestamp.*.max.ms)       INVALID_TIMESTAMP, record_errors

The rules are Kafka's (``UnifiedLog.analyzeAndValidateRecords``, ``ProduceRequest.validateRecords``
and ``LogValidator``) with three differences, each because kraftpy never rewrites a batch: offset
deltas must already be 0, 1, 2, ... (Kafka renumbers a compressed batch's records and trusts an
uncompressed one's); an unknown codec is UNSUPPORTED_COMPRESSION_TYPE for that partition (Kafka
fails the whole request with UNKNOWN_SERVER_ERROR); a LogAppendTime flag from a producer is
refused whatever the topic's timestamp type. Records that do not decompress are CORRUPT_MESSAGE.

Like Kafka, the leader then makes the batch's max_timestamp the largest record timestamp when
the producer wrote another one (a CreateTime topic), recomputing the CRC: retention and the time
index read it, so it must be true.

Cost
----
The header and CRC are batch-level. The records are read in one pass that builds no object per
record: :mod:`kraftpy.protocol._record_scan` (C) walks them, checks their structure and offset
deltas, and returns the smallest and largest timestamp delta and the number of null keys, which
are then checked against the topic's rules once per batch. Only when something is wrong does
Python decode the records (:func:`kraftpy.protocol.records.decode_records`) to name each bad one.
Without the C module (an install that could not compile it) the same rules run in Python, more
slowly. A compressed batch is decompressed once; a caller that must not block for long passes
``inline_limit`` and gets :class:`InlineLimitExceeded` for a batch whose records decompress past
it, then validates that one where blocking does not matter (a worker thread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import attrs

from kraftpy.protocol.batch_header import (
    CODEC_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptRecordError,
    UnsupportedMagicError,
    compute_crc,
    read_header,
    set_max_timestamp,
)
from kraftpy.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    DecompressedTooLargeError,
    decompress,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import MalformedRecordError, decode_records

try:
    from kraftpy.protocol._record_scan import scan as _c_scan
except ImportError:  # not compiled: the Python scan below does the same
    _c_scan = None

__all__ = [
    "ACCELERATED",
    "Accepted",
    "InlineLimitExceeded",
    "ProduceRules",
    "RecordError",
    "Refusal",
    "scan_records",
    "scan_records_py",
    "validate_produced_batch",
]

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
#: A record timestamp of -1 means "none" and is never out of range (Kafka's NO_TIMESTAMP).
NO_TIMESTAMP = -1
#: At most this many record errors go back in a response (the count of all is in the message).
MAX_RECORD_ERRORS = 100
#: The Produce version that first allows zstd (KIP-110).
ZSTD_MIN_PRODUCE_VERSION = 7
LATEST_PRODUCE_VERSION = 9
#: Attribute bits a producer may not set: timestamp type (LogAppendTime), control.
_REFUSED_FLAGS = TIMESTAMP_TYPE_BIT | CONTROL_BIT


@attrs.frozen
class ProduceRules:
    """What one topic's configs say about the batches it takes."""

    #: max.message.bytes
    max_message_bytes: int = 1048588
    #: message.timestamp.type=LogAppendTime: record timestamps are the broker's, not checked.
    log_append_time: bool = False
    #: message.timestamp.before.max.ms and message.timestamp.after.max.ms (KIP-937; Kafka 4's defaults).
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = 3_600_000
    #: cleanup.policy includes compact: every record needs a key.
    compacted: bool = False
    #: Largest records section a compressed batch may decompress to.
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE


@attrs.frozen
class RecordError:
    """One refused record: its index in the batch and why (ProduceResponse ``record_errors``)."""

    batch_index: int
    message: str


@attrs.frozen
class Refusal:
    """Why a batch is refused: the partition's error code and message, and the records at fault."""

    error: ErrorCode
    message: str
    record_errors: tuple[RecordError, ...] = ()


class Accepted(NamedTuple):
    """A batch that passed: its header and bytes (a corrected copy when its max timestamp was wrong).
    A tuple, because one is made for every produced batch."""

    header: BatchHeader
    records: bytes | bytearray | memoryview


class InlineLimitExceeded(Exception):
    """The batch's records decompress past the caller's ``inline_limit``: validate it without one."""


# -- the records scan ----------------------------------------------------------------------------

Summary = tuple[int, int, int]


def scan_records_py(buffer: bytes | bytearray | memoryview, start: int, count: int) -> Summary | None:
    """What ``_record_scan.scan`` answers, by the Python decoder: ``(smallest timestamp delta, largest
    timestamp delta, null keys)`` of the ``count`` records filling ``buffer[start:]``, or None when
    they do not parse or their offset deltas are not 0, 1, 2, ..."""
    if start < 0 or start > len(buffer) or count < 0:
        raise ValueError("start must lie in the buffer and count must not be negative")
    try:
        records = decode_records(bytes(memoryview(buffer)[start:]), count)
    except CorruptRecordError:
        return None
    if not records:
        return 0, 0, 0
    low = high = records[0].timestamp
    null_keys = 0
    for index, record in enumerate(records):
        if record.offset != index:
            return None
        if record.timestamp < low:
            low = record.timestamp
        elif record.timestamp > high:
            high = record.timestamp
        if record.key is None:
            null_keys += 1
    return low, high, null_keys


#: The scan the validator uses: the C one when it is compiled.
scan_records: Callable[[bytes | bytearray | memoryview, int, int], Summary | None] = _c_scan or scan_records_py
#: Whether the C scan is in use.
ACCELERATED = _c_scan is not None


# -- the validator -------------------------------------------------------------------------------


def validate_produced_batch(
    records: bytes | bytearray | memoryview | None,
    rules: ProduceRules,
    now_ms: int,
    *,
    produce_version: int = LATEST_PRODUCE_VERSION,
    inline_limit: int | None = None,
) -> Accepted | Refusal:
    """Check the records field of one partition of a Produce request against ``rules`` at ``now_ms``.

    Pure: reads ``records`` and returns. Raises :class:`InlineLimitExceeded` only when
    ``inline_limit`` is given and the batch's records decompress past it.
    """
    if records is None or not len(records):
        return Refusal(ErrorCode.INVALID_RECORD, "a produce request must carry one record batch for each partition")
    try:
        header = read_header(records, 0)
    except UnsupportedMagicError as exc:
        return Refusal(ErrorCode.INVALID_RECORD,
                       f"Produce v{produce_version} takes record batches of magic 2 only: {exc}")
    except CorruptRecordError as exc:
        return Refusal(ErrorCode.CORRUPT_MESSAGE, str(exc))
    size = header.size
    if size < len(records):
        return Refusal(ErrorCode.INVALID_RECORD,
                       f"Produce v{produce_version} takes exactly one record batch for each partition")
    if size > len(records):
        return Refusal(ErrorCode.CORRUPT_MESSAGE,
                       f"truncated batch: {size} bytes announced, {len(records)} present")
    if size > rules.max_message_bytes:
        return Refusal(ErrorCode.MESSAGE_TOO_LARGE,
                       f"batch of {size} bytes is larger than max.message.bytes={rules.max_message_bytes}")
    crc = compute_crc(records, 0, size)
    if crc != header.crc:
        return Refusal(ErrorCode.CORRUPT_MESSAGE, f"CRC mismatch: stored {header.crc:#010x}, computed {crc:#010x}")
    count = header.record_count
    attributes = header.attributes
    codec = attributes & CODEC_MASK
    producer_id = header.producer_id
    # One test for the usual batch; _check_header says what is wrong with any other.
    if (header.base_offset or count <= 0 or count != header.last_offset_delta + 1 or attributes & _REFUSED_FLAGS
            or codec > Compression.ZSTD or (codec == Compression.ZSTD and produce_version < ZSTD_MIN_PRODUCE_VERSION)
            or (producer_id != NO_PRODUCER_ID
                and (producer_id < 0 or header.producer_epoch < 0 or header.base_sequence < 0))
            or (producer_id == NO_PRODUCER_ID and attributes & TRANSACTIONAL_BIT)):
        refusal = _check_header(header, produce_version)
        if refusal is not None:
            return refusal

    if codec == Compression.NONE:
        section: bytes | bytearray | memoryview = records
        start = HEADER_SIZE
    else:
        limit = rules.max_decompressed_size
        if inline_limit is not None and inline_limit < limit:
            limit = inline_limit
        try:
            section = decompress(codec, bytes(memoryview(records)[HEADER_SIZE:size]), limit)
        except DecompressedTooLargeError as exc:
            if limit < rules.max_decompressed_size:
                raise InlineLimitExceeded(str(exc)) from None
            return Refusal(ErrorCode.CORRUPT_MESSAGE, f"the records section does not decompress: {exc}")
        except CorruptRecordError as exc:
            return Refusal(ErrorCode.CORRUPT_MESSAGE, f"the records section does not decompress: {exc}")
        start = 0

    summary = scan_records(section, start, count)
    if summary is None:
        return _refusal_by_record(section, start, header, rules, now_ms) or Refusal(
            ErrorCode.CORRUPT_MESSAGE, "the records section does not parse")
    low, high, null_keys = summary
    base = header.base_timestamp
    if rules.compacted and null_keys:
        refusal = _refusal_by_record(section, start, header, rules, now_ms)
        if refusal is not None:
            return refusal
    if rules.log_append_time:
        return Accepted(header, records)  # the partition stamps its own time
    first, last = base + low, base + high
    if (first < now_ms - rules.timestamp_before_max_ms or last > now_ms + rules.timestamp_after_max_ms
            or first < LONG_MIN or last > LONG_MAX):
        # Out of range, unless only records without a timestamp (-1) are: those are looked at one by one.
        refusal = _refusal_by_record(section, start, header, rules, now_ms)
        if refusal is not None:
            return refusal
    if header.max_timestamp != last:
        fixed = bytearray(records)
        set_max_timestamp(fixed, 0, 0, last)
        return Accepted(read_header(fixed, 0), fixed)
    return Accepted(header, records)


def _check_header(header: BatchHeader, produce_version: int) -> Refusal | None:
    """The batch-level rules, from the header alone."""
    if header.base_offset != 0:
        return Refusal(ErrorCode.INVALID_RECORD, f"a produced batch has base offset 0, not {header.base_offset}")
    count, last_delta = header.record_count, header.last_offset_delta
    if count <= 0 or last_delta < 0 or count != last_delta + 1:
        return Refusal(ErrorCode.INVALID_RECORD,
                       f"record_count {count} and last_offset_delta {last_delta} disagree: a batch of n records "
                       f"has offset deltas 0 to n-1")
    if header.is_control:
        return Refusal(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    producer_id = header.producer_id
    if header.is_transactional and producer_id == NO_PRODUCER_ID:
        return Refusal(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")
    if producer_id != NO_PRODUCER_ID:
        if producer_id < 0:
            return Refusal(ErrorCode.INVALID_RECORD, f"invalid producer id {producer_id}")
        if header.producer_epoch < 0:
            return Refusal(ErrorCode.INVALID_RECORD,
                           f"producer {producer_id} sent invalid producer epoch {header.producer_epoch}")
        if header.base_sequence < 0:
            return Refusal(ErrorCode.INVALID_RECORD,
                           f"producer {producer_id} sent invalid base sequence {header.base_sequence}")
    codec = header.compression
    if codec > Compression.ZSTD:
        return Refusal(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
    if codec == Compression.ZSTD and produce_version < ZSTD_MIN_PRODUCE_VERSION:
        return Refusal(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                       f"Produce v{produce_version} may not carry zstd batches (v{ZSTD_MIN_PRODUCE_VERSION} or later)")
    if header.timestamp_type:
        return Refusal(ErrorCode.INVALID_TIMESTAMP, "a producer may not set the LogAppendTime timestamp type")
    return None


def _timestamp_range(rules: ProduceRules, now_ms: int) -> tuple[int, int]:
    """The CreateTime timestamps a record may carry at ``now_ms``, within int64."""
    return max(now_ms - rules.timestamp_before_max_ms, LONG_MIN), min(now_ms + rules.timestamp_after_max_ms, LONG_MAX)


def _refusal_by_record(section: bytes | bytearray | memoryview, start: int, header: BatchHeader,
                       rules: ProduceRules, now_ms: int) -> Refusal | None:
    """Decode the records and name each one the rules refuse; None when none is."""
    count = header.record_count
    try:
        records = decode_records(bytes(memoryview(section)[start:]), count, header.base_timestamp)
    except MalformedRecordError as exc:
        if exc.index >= count:
            return Refusal(ErrorCode.INVALID_RECORD, f"the batch's {count} records do not fill it: {exc.reason}")
        return Refusal(ErrorCode.INVALID_RECORD, f"record {exc.index} of the batch does not parse: {exc.reason}",
                       (RecordError(exc.index, exc.reason),))
    check_time = not rules.log_append_time
    earliest, latest = _timestamp_range(rules, now_ms)
    errors: list[RecordError] = []
    refused = 0
    timestamps = False
    for index, record in enumerate(records):
        if record.offset != index:
            message = f"offset delta {record.offset}; the records of a batch have offset deltas 0, 1, 2, ..."
        elif rules.compacted and record.key is None:
            message = "a compacted topic takes no record without a key"
        elif check_time and record.timestamp != NO_TIMESTAMP and not earliest <= record.timestamp <= latest:
            message = f"timestamp {record.timestamp} is out of range: it must lie within [{earliest}, {latest}]"
            timestamps = True
        else:
            continue
        refused += 1
        if len(errors) < MAX_RECORD_ERRORS:
            errors.append(RecordError(index, message))
    if not refused:
        return None
    shown = "; ".join(f"record {e.batch_index}: {e.message}" for e in errors[:3])
    more = ", ..." if refused > 3 else ""
    error = ErrorCode.INVALID_TIMESTAMP if timestamps else ErrorCode.INVALID_RECORD
    return Refusal(error, f"{refused} of the batch's {count} records refused: {shown}{more}", tuple(errors))
