"""The 61-byte batch header: parsing, CRC checks, iteration over a log buffer, stamping."""

from __future__ import annotations

import struct

import attrs
import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.protocol.batch_header import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PREFIX,
    BatchHeader,
    CorruptRecordError,
    UnsupportedMagicError,
    check_batch,
    compute_crc,
    iter_batches,
    pack_batch,
    read_header,
    set_max_timestamp,
    stamp,
)


def make_batch(
    records: bytes = b"\x00" * 20,
    *,
    base_offset: int = 0,
    epoch: int = -1,
    attributes: int = 0,
    last_offset_delta: int = 0,
    base_timestamp: int = 1_000,
    max_timestamp: int = 1_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    record_count: int = 1,
) -> bytearray:
    """A batch with an arbitrary records section (the header module never looks inside it)."""
    return bytearray(
        pack_batch(
            records,
            base_offset=base_offset,
            partition_leader_epoch=epoch,
            attributes=attributes,
            last_offset_delta=last_offset_delta,
            base_timestamp=base_timestamp,
            max_timestamp=max_timestamp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            record_count=record_count,
        )
    )


#: Kafka's header layout, written out here rather than taken from the module under test.
KAFKA_LAYOUT = [
    ("base_offset", 0, ">q"),
    ("batch_length", 8, ">i"),
    ("partition_leader_epoch", 12, ">i"),
    ("magic", 16, ">b"),
    ("crc", 17, ">I"),
    ("attributes", 21, ">h"),
    ("last_offset_delta", 23, ">i"),
    ("base_timestamp", 27, ">q"),
    ("max_timestamp", 35, ">q"),
    ("producer_id", 43, ">q"),
    ("producer_epoch", 51, ">h"),
    ("base_sequence", 53, ">i"),
    ("record_count", 57, ">i"),
]


def test_header_layout_matches_kafka():
    assert HEADER_SIZE == HEADER.size == 61
    assert LOG_OVERHEAD == 12
    assert PREFIX.size == 17
    offsets = {name: offset for name, offset, _ in KAFKA_LAYOUT}
    assert (BATCH_LENGTH_OFFSET, PARTITION_LEADER_EPOCH_OFFSET, MAGIC_OFFSET, CRC_OFFSET, ATTRIBUTES_OFFSET,
            MAX_TIMESTAMP_OFFSET) == (offsets["batch_length"], offsets["partition_leader_epoch"], offsets["magic"],
                                      offsets["crc"], offsets["attributes"], offsets["max_timestamp"])


def test_pack_batch_writes_every_field_where_kafka_reads_it():
    buf = make_batch(b"abc", base_offset=7, epoch=3, attributes=0x15, last_offset_delta=4, base_timestamp=1_000,
                     max_timestamp=1_004, producer_id=42, producer_epoch=5, base_sequence=9, record_count=5)
    expected = {
        "base_offset": 7, "batch_length": len(buf) - 12, "partition_leader_epoch": 3, "magic": 2,
        "crc": crc32c.crc32c(bytes(buf[21:])), "attributes": 0x15, "last_offset_delta": 4,
        "base_timestamp": 1_000, "max_timestamp": 1_004, "producer_id": 42, "producer_epoch": 5,
        "base_sequence": 9, "record_count": 5,
    }
    assert {name: struct.unpack_from(fmt, buf, offset)[0] for name, offset, fmt in KAFKA_LAYOUT} == expected
    assert buf[61:] == b"abc"
    assert attrs.asdict(check_batch(buf)) == expected


@given(st.binary(max_size=200), st.integers(-(2**63), 2**63 - 1), st.integers(0, 0x3F))
def test_pack_batch_round_trips_through_read_header(records, base_offset, attributes):
    buf = pack_batch(records, base_offset=base_offset, attributes=attributes, last_offset_delta=0,
                     base_timestamp=-1, max_timestamp=-1, record_count=1)
    header = check_batch(buf)
    assert (header.base_offset, header.attributes, header.size) == (base_offset, attributes, len(buf))
    assert buf[HEADER_SIZE:] == records


def test_read_header_fields_and_properties():
    buf = make_batch(
        b"x" * 30,
        base_offset=100,
        epoch=7,
        attributes=0x3 | 0x08 | 0x10 | 0x20,
        last_offset_delta=9,
        base_timestamp=5,
        max_timestamp=50,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        record_count=10,
    )
    header = read_header(buf)
    assert header == BatchHeader(
        base_offset=100,
        batch_length=len(buf) - 12,
        partition_leader_epoch=7,
        magic=2,
        crc=header.crc,
        attributes=0x3B,
        last_offset_delta=9,
        base_timestamp=5,
        max_timestamp=50,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        record_count=10,
    )
    assert header.size == len(buf)
    assert header.last_offset == 109
    assert header.next_offset == 110
    assert header.compression == 3
    assert header.timestamp_type == 1
    assert header.is_transactional
    assert header.is_control
    assert header.last_sequence == 19


def test_flags_clear():
    header = read_header(make_batch())
    assert header.compression == 0
    assert header.timestamp_type == 0
    assert not header.is_transactional
    assert not header.is_control
    assert header.last_sequence == -1


def test_last_sequence_wraps_at_int32():
    header = read_header(make_batch(base_sequence=2**31 - 2, last_offset_delta=4))
    assert header.last_sequence == 2


def test_read_header_at_position():
    buf = bytearray(b"junk") + make_batch(base_offset=77)
    assert read_header(buf, 4).base_offset == 77
    assert check_batch(buf, 4).base_offset == 77


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_refused(magic):
    buf = make_batch()
    buf[MAGIC_OFFSET] = magic
    with pytest.raises(UnsupportedMagicError, match=f"magic {magic}"):
        read_header(buf)
    with pytest.raises(CorruptRecordError):
        check_batch(buf)


def test_old_magic_is_refused_from_the_short_prefix():
    # A magic 0/1 message set is shorter than a v2 header: the magic alone decides.
    old = PREFIX.pack(0, 14, 0, 1) + b"\x00" * 4
    with pytest.raises(UnsupportedMagicError):
        read_header(old)


@pytest.mark.parametrize("magic", [3, 255])
def test_unknown_magic_is_corrupt_not_unsupported(magic):
    buf = make_batch()
    buf[MAGIC_OFFSET] = magic
    with pytest.raises(CorruptRecordError, match="invalid magic") as info:
        read_header(buf)
    assert not isinstance(info.value, UnsupportedMagicError)


@pytest.mark.parametrize("size", [0, 1, 16, 17, 60])
def test_truncated_header(size):
    with pytest.raises(CorruptRecordError, match="truncated batch header"):
        read_header(make_batch()[:size])


def test_batch_length_smaller_than_a_header():
    buf = make_batch()
    struct.pack_into(">i", buf, BATCH_LENGTH_OFFSET, 48)
    with pytest.raises(CorruptRecordError, match="smaller than a header"):
        read_header(buf)


def test_check_batch_truncated():
    buf = make_batch(b"y" * 10)
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        check_batch(buf[:-1])


def test_crc_covers_attributes_to_end():
    buf = make_batch(b"payload")
    header = check_batch(buf)
    assert header.crc == crc32c.crc32c(bytes(buf[21:]))
    assert compute_crc(buf, 0, len(buf)) == header.crc


@pytest.mark.parametrize("index", [ATTRIBUTES_OFFSET, 30, 45, 57, HEADER_SIZE, HEADER_SIZE + 5])
def test_crc_mismatch_detected(index):
    buf = make_batch(b"z" * 10)
    buf[index] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        check_batch(buf)
    assert info.value.position == 0
    read_header(buf)  # the header alone does not check the CRC


def test_corrupt_record_error_names_the_position():
    buf = bytearray(b"\x00" * 3) + make_batch()
    buf[3 + 30] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"at byte 3") as info:
        check_batch(buf, 3)
    assert info.value.position == 3


@given(
    base_offset=st.integers(0, 2**63 - 1),
    epoch=st.integers(-1, 2**31 - 1),
)
def test_stamp_keeps_crc_valid(base_offset, epoch):
    buf = make_batch(b"records", base_offset=0, epoch=-1)
    crc = read_header(buf).crc
    stamp(buf, 0, base_offset, epoch)
    header = check_batch(buf)
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == epoch
    assert header.crc == crc


def test_stamp_at_position_in_memoryview():
    buf = bytearray(b"\xff" * 5) + make_batch()
    stamp(memoryview(buf), 5, 123, 9)
    assert buf[:5] == b"\xff" * 5
    header = check_batch(buf, 5)
    assert (header.base_offset, header.partition_leader_epoch) == (123, 9)


def test_set_max_timestamp_log_append_time():
    buf = make_batch(attributes=0x04 | 0x10, max_timestamp=10)
    set_max_timestamp(buf, 0, 1, 999)
    header = check_batch(buf)
    assert header.max_timestamp == 999
    assert header.timestamp_type == 1
    assert header.compression == 4 and header.is_transactional
    set_max_timestamp(buf, 0, 0, 10)
    header = check_batch(buf)
    assert (header.timestamp_type, header.max_timestamp) == (0, 10)


def test_set_max_timestamp_needs_the_whole_batch():
    with pytest.raises(CorruptRecordError, match="truncated"):
        set_max_timestamp(make_batch()[:-1], 0, 1, 5)


def log_of(*batches: bytearray) -> bytearray:
    return bytearray(b"".join(batches))


def test_iter_batches_positions_and_headers():
    batches = [make_batch(b"a" * n, base_offset=i * 10) for i, n in enumerate((1, 20, 7))]
    buf = log_of(*batches)
    got = list(iter_batches(buf))
    assert [pos for pos, _ in got] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert [header.base_offset for _, header in got] == [0, 10, 20]


def test_iter_batches_empty():
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("cut", [1, 5, 11, 12, 17, 40, 61, 62])
def test_iter_batches_stops_quietly_at_a_partial_tail(verify, cut):
    whole = make_batch(b"first", base_offset=0)
    second = make_batch(b"second batch", base_offset=1)
    buf = log_of(whole, second[:cut])
    assert [header.base_offset for _, header in iter_batches(buf, verify)] == [0]


def test_iter_batches_verify_raises_on_bad_crc_in_a_whole_batch():
    first = make_batch(b"one")
    second = make_batch(b"two", base_offset=1)
    second[-1] ^= 1
    it = iter_batches(log_of(first, second))
    assert next(it)[1].base_offset == 0
    with pytest.raises(CorruptRecordError, match="CRC") as info:
        next(it)
    assert info.value.position == len(first)


def test_iter_batches_without_verify_skips_crc():
    buf = make_batch(b"one")
    buf[-1] ^= 1
    assert len(list(iter_batches(buf, verify=False))) == 1


def test_iter_batches_refuses_old_magic():
    buf = make_batch()
    buf[MAGIC_OFFSET] = 1
    with pytest.raises(UnsupportedMagicError):
        list(iter_batches(buf))
