"""RecordBatch v2 records: varints, building and decoding, malformed input, control records."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.batch_header import (
    HEADER_SIZE,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    check_batch,
    pack_batch,
    read_header,
    stamp,
)
from kraftpy.protocol.records import (
    Compression,
    ControlRecordType,
    CorruptRecordError,
    DecodedBatch,
    Record,
    SimpleRecord,
    UnsupportedMagicError,
    build_batch,
    control_key,
    decode_batch,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    end_txn_marker_value,
    iter_decoded,
    parse_control_key,
    parse_end_txn_marker_value,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
CODECS = list(Compression)


# -- varints ---------------------------------------------------------------------------------

KNOWN_VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (300, "d804"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN_VARINTS)
def test_varint_known_encodings(value, encoded):
    assert encode_varint(value).hex() == encoded
    assert encode_varlong(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)
    assert decode_varlong(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (INT64_MAX, "feffffffffffffffff01"),
        (INT64_MIN, "ffffffffffffffffff01"),
        (INT32_MAX + 1, "8080808010"),
        (INT32_MIN - 1, "8180808010"),
    ],
)
def test_varlong_known_encodings(value, encoded):
    assert encode_varlong(value).hex() == encoded
    assert decode_varlong(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1, INT64_MAX])
def test_encode_varint_refuses_values_past_int32(value):
    with pytest.raises(ValueError, match="int32"):
        encode_varint(value)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_encode_varlong_refuses_values_past_int64(value):
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(value)


@given(st.integers(INT32_MIN, INT32_MAX), st.binary(max_size=3))
def test_varint_round_trip(value, suffix):
    encoded = encode_varint(value)
    assert 1 <= len(encoded) <= 5
    assert decode_varint(b"\xaa" + encoded + suffix, 1) == (value, 1 + len(encoded))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value):
    encoded = encode_varlong(value)
    assert 1 <= len(encoded) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))


@pytest.mark.parametrize("encoded", ["", "80", "ffff", "ffffffff"])
def test_truncated_varint(encoded):
    with pytest.raises(CorruptRecordError, match="truncated varint"):
        decode_varint(bytes.fromhex(encoded))


def test_truncated_varlong():
    with pytest.raises(CorruptRecordError, match="truncated varint"):
        decode_varlong(bytes.fromhex("ffffffffffffffffff"))


def test_varint_longer_than_five_bytes():
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_varint(bytes.fromhex("808080808000"))
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_varlong(bytes.fromhex("8080808080808080808000"))


def test_varint_errors_name_where_the_varint_starts():
    with pytest.raises(CorruptRecordError, match=r"truncated varint \(at byte 2\)") as info:
        decode_varlong(b"\x00\x00\xff", 2)
    assert info.value.position == 2
    with pytest.raises(CorruptRecordError) as info:
        decode_varint(b"\x00" + bytes.fromhex("808080808000"), 1)
    assert info.value.position == 1


def test_varint_past_int32_range():
    # Five bytes carry 35 bits; a varint must fit 32 of them.
    with pytest.raises(CorruptRecordError, match="int32 range"):
        decode_varint(bytes.fromhex("ffffffff1f"))
    with pytest.raises(CorruptRecordError, match="int64 range"):
        decode_varlong(bytes.fromhex("ffffffffffffffffff03"))
    # A non-minimal but in-range encoding is accepted, as Kafka does.
    assert decode_varint(bytes.fromhex("8000")) == (0, 2)


# -- building and decoding -------------------------------------------------------------------


def test_record_section_layout_byte_by_byte():
    batch = build_batch([SimpleRecord(b"k", b"v", (("h", b"x"),), timestamp=1000)])
    # length 12, attributes 0, timestamp delta 0, offset delta 0, key "k", value "v", 1 header h=x
    assert batch[HEADER_SIZE:].hex() == "18000000026b02760202680278"
    header = check_batch(batch)
    assert header.record_count == 1
    assert header.last_offset_delta == 0
    assert header.base_timestamp == header.max_timestamp == 1000
    assert header.attributes == 0
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.partition_leader_epoch == -1


def test_null_key_value_and_header_value_are_minus_one():
    batch = build_batch([SimpleRecord(None, None, (("n", None),), timestamp=5)])
    assert batch[HEADER_SIZE:].hex() == "12000000010102026e01"
    (record,) = decode_batch(batch).records
    assert record == Record(0, 5, None, None, (("n", None),))


def test_empty_key_and_value_are_not_null():
    (record,) = decode_batch(build_batch([SimpleRecord(b"", b"", (("", b""),), 1)])).records
    assert record.key == b"" and record.value == b""
    assert record.headers == (("", b""),)


def test_offsets_and_timestamps_are_absolute():
    records = [SimpleRecord(b"a", b"1", timestamp=5000), SimpleRecord(b"b", b"2", timestamp=4000)]
    records.append(SimpleRecord(b"c", b"3", timestamp=9000))
    batch = decode_batch(build_batch(records, base_offset=100))
    assert [(r.offset, r.timestamp) for r in batch.records] == [(100, 5000), (101, 4000), (102, 9000)]
    assert batch.header.base_timestamp == 5000  # the first record's, as Kafka's producer does
    assert batch.header.max_timestamp == 9000
    assert batch.header.last_offset_delta == 2
    assert batch.base_offset == 100 and batch.next_offset == 103
    assert len(batch) == 3 and list(batch) == list(batch.records)


def test_explicit_base_timestamp_and_missing_record_timestamps():
    records = [SimpleRecord(b"a", b"1"), SimpleRecord(b"b", b"2", timestamp=700)]
    batch = decode_batch(build_batch(records, base_timestamp=500))
    assert [r.timestamp for r in batch.records] == [500, 700]
    assert batch.header.base_timestamp == 500
    assert batch.header.max_timestamp == 700


def test_base_timestamp_defaults_to_the_first_given_timestamp():
    records = [SimpleRecord(b"a", b"1"), SimpleRecord(b"b", b"2", timestamp=700)]
    batch = decode_batch(build_batch(records))
    assert [r.timestamp for r in batch.records] == [700, 700]


def test_no_timestamps_at_all_means_now():
    before = time.time_ns() // 1_000_000
    batch = decode_batch(build_batch([SimpleRecord(b"a", b"1")]))
    after = time.time_ns() // 1_000_000
    assert before <= batch.records[0].timestamp <= after


def test_header_fields_from_arguments():
    batch = build_batch(
        [SimpleRecord(b"k", b"v", timestamp=1)] * 3,
        compression=Compression.LZ4,
        base_offset=2**40,
        partition_leader_epoch=12,
        producer_id=9_000_000_000,
        producer_epoch=7,
        base_sequence=2**31 - 2,
        is_transactional=True,
    )
    header = check_batch(batch)
    assert header.base_offset == 2**40
    assert header.partition_leader_epoch == 12
    assert header.compression == Compression.LZ4
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9_000_000_000, 7, 2**31 - 2)
    assert header.last_sequence == 0
    assert header.record_count == 3


def test_log_append_time_gives_every_record_the_max_timestamp():
    records = [SimpleRecord(b"a", b"1", timestamp=10), SimpleRecord(b"b", b"2", timestamp=30)]
    batch = decode_batch(build_batch(records, timestamp_type=1))
    assert batch.header.timestamp_type == 1
    assert [r.timestamp for r in batch.records] == [30, 30]


def test_build_refuses_bad_arguments():
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(ValueError, match="timestamp type"):
        build_batch([SimpleRecord(b"a", b"b", timestamp=1)], timestamp_type=2)
    with pytest.raises(ValueError):
        build_batch([SimpleRecord(b"a", b"b", timestamp=1)], compression=6)


def test_records_are_frozen_and_hashable():
    record = Record(1, 2, b"k", b"v", [["h", b"x"]])
    assert record.headers == (("h", b"x"),)
    assert hash(record) == hash(Record(1, 2, b"k", b"v", (("h", b"x"),)))
    simple = SimpleRecord(b"k", b"v", [("h", None)])
    assert simple.headers == (("h", None),) and simple.timestamp is None
    with pytest.raises(AttributeError):
        record.offset = 5  # type: ignore[misc]


def test_large_values_and_many_headers():
    value = bytes(range(256)) * 1000
    headers = tuple((f"header-{i}", bytes([i]) * i) for i in range(100))
    for codec in CODECS:
        (record,) = decode_batch(
            build_batch([SimpleRecord(b"k" * 300, value, headers, 1)], compression=codec)
        )
        assert (record.key, record.value, record.headers) == (b"k" * 300, value, headers)


def test_unicode_header_keys():
    headers = (("clé", b"1"), ("键", None), ("🙂", b""))
    (record,) = decode_batch(build_batch([SimpleRecord(None, b"v", headers, 1)])).records
    assert record.headers == headers


keys = st.none() | st.binary(max_size=40)
header_values = st.none() | st.binary(max_size=20)
simple_records = st.builds(
    SimpleRecord,
    key=keys,
    value=st.none() | st.binary(max_size=300),
    headers=st.lists(st.tuples(st.text(max_size=12), header_values), max_size=4).map(tuple),
    timestamp=st.none() | st.integers(0, 2**50),
)


@settings(max_examples=150)
@given(
    records=st.lists(simple_records, min_size=1, max_size=12),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
    base_timestamp=st.none() | st.integers(0, 2**50),
    epoch=st.integers(-1, INT32_MAX),
    producer=st.tuples(st.integers(-1, INT64_MAX), st.integers(-1, 2**15 - 1), st.integers(-1, INT32_MAX)),
    transactional=st.booleans(),
)
def test_round_trip(records, codec, base_offset, base_timestamp, epoch, producer, transactional):
    producer_id, producer_epoch, base_sequence = producer
    data = build_batch(
        records,
        compression=codec,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        base_timestamp=base_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    decoded = decode_batch(data)
    header = decoded.header
    assert header.size == len(data)
    assert header.compression == codec
    assert header.is_transactional == transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.partition_leader_epoch == epoch
    assert header.record_count == len(records)
    base = header.base_timestamp
    if base_timestamp is not None:
        assert base == base_timestamp
    expected = tuple(
        Record(base_offset + i, base if r.timestamp is None else r.timestamp, r.key, r.value, r.headers)
        for i, r in enumerate(records)
    )
    assert decoded.records == expected
    assert header.max_timestamp == max(r.timestamp for r in expected)
    assert list(iter_decoded(data)) == [decoded]


@settings(max_examples=40)
@given(
    batches=st.lists(
        st.tuples(st.lists(simple_records, min_size=1, max_size=4), st.sampled_from(CODECS)),
        min_size=1,
        max_size=5,
    ),
    cut=st.integers(0, 60),
)
def test_iter_decoded_over_a_log(batches, cut):
    parts, expected, offset = [], [], 0
    for records, codec in batches:
        parts.append(build_batch(records, compression=codec, base_offset=offset))
        expected.append([r.key for r in records])
        offset += len(records)
    log = b"".join(parts)
    assert [[r.key for r in batch.records] for batch in iter_decoded(log)] == expected
    # A partial batch at the end (as a fetch response may carry) is left out quietly.
    truncated = log[: len(log) - 1 - cut]
    assert [[r.key for r in b.records] for b in iter_decoded(truncated)] == expected[: len(batches) - 1]


@given(base_offset=st.integers(0, 2**62), epoch=st.integers(0, INT32_MAX), codec=st.sampled_from(CODECS))
@settings(max_examples=30)
def test_stamping_keeps_the_crc_valid(base_offset, epoch, codec):
    records = [SimpleRecord(b"k%d" % i, b"v", timestamp=i) for i in range(3)]
    data = bytearray(build_batch(records, compression=codec))
    crc = read_header(data).crc
    stamp(data, 0, base_offset, epoch)
    decoded = decode_batch(data)
    assert decoded.header.crc == crc
    assert decoded.header.partition_leader_epoch == epoch
    assert [r.offset for r in decoded.records] == [base_offset, base_offset + 1, base_offset + 2]


def test_decode_at_position_and_from_memoryview():
    data = build_batch([SimpleRecord(b"k", b"v", timestamp=1)], base_offset=3)
    buf = memoryview(b"\x00" * 9 + data + b"trailing")
    assert decode_batch(buf, 9).records == (Record(3, 1, b"k", b"v"),)
    assert decode_batch(bytearray(data)).records == (Record(3, 1, b"k", b"v"),)


# -- damaged input ---------------------------------------------------------------------------


def reseal(section: bytes, record_count: int, attributes: int = 0, base_offset: int = 0) -> bytes:
    """A batch around a hand-made records section, with a valid CRC."""
    return pack_batch(
        section,
        base_offset=base_offset,
        attributes=attributes,
        last_offset_delta=max(record_count - 1, 0),
        base_timestamp=0,
        max_timestamp=0,
        record_count=record_count,
    )


def record_bytes(body_hex: str) -> bytes:
    body = bytes.fromhex(body_hex)
    return encode_varint(len(body)) + body


GOOD = "000000026b027600"  # key "k", value "v", no headers


def test_reseal_helper_makes_valid_batches():
    assert decode_batch(reseal(record_bytes(GOOD) * 2, 2)).records == (
        Record(0, 0, b"k", b"v"),
        Record(0, 0, b"k", b"v"),  # both offset delta 0: decoding reports what the bytes say
    )


@pytest.mark.parametrize(
    ("section", "count", "message"),
    [
        (record_bytes(GOOD), 2, "truncated record 1 of 2"),
        (record_bytes(GOOD) * 2, 1, "bytes left after"),
        (record_bytes(GOOD)[:-1], 1, "runs past the records section"),
        (bytes.fromhex("ffffffffff0f"), 1, "longer than 5 bytes|out of the int32 range"),
        (bytes.fromhex("8080808080"), 1, "longer than 5 bytes|truncated varint"),
        (bytes.fromhex("01") + bytes.fromhex(GOOD), 1, "record length -1"),
        (record_bytes("00 00 00 03 0276 00"), 1, "invalid key length -2"),
        (record_bytes("00 00 00 20 6b 0276 00"), 1, "key length 16 runs past the record"),
        (record_bytes("00 00 00 026b 05 00"), 1, "invalid value length -3"),
        (record_bytes("00 00 00 026b 10 76 00"), 1, "value length 8 runs past the record"),
        (record_bytes("00 00 00 026b 0276 01"), 1, "invalid header count -1"),
        (record_bytes("00 00 00 026b 0276 7e 0268 00"), 1, "invalid header count 63"),
        (record_bytes("00 00 00 026b 0276 02 01 00"), 1, "invalid header key length -1"),
        (record_bytes("00 00 00 026b 0276 02 0aff 00"), 1, "invalid header key length 5"),
        (record_bytes("00 00 00 026b 0276 02 02ff 00"), 1, "not valid UTF-8"),
        (record_bytes("00 00 00 026b 0276 02 0268 03"), 1, "invalid header value length -2"),
        (record_bytes("00 00 00 026b 0276 02 0268 0a 78"), 1, "header value length 5 runs past"),
        (record_bytes(GOOD + "00"), 1, "record declares 9 bytes but its fields take 8"),
        (record_bytes(GOOD)[:-2] + b"\x00" * 8, 1, "bytes|declares|past"),
        (b"", 1, "record count 1 does not fit 0 bytes"),
        (record_bytes(GOOD), 10_000_000, "record count 10000000 does not fit"),
    ],
)
def test_malformed_records_are_corrupt(section, count, message):
    with pytest.raises(CorruptRecordError, match=message):
        decode_batch(reseal(section, count))


def test_negative_record_count():
    with pytest.raises(CorruptRecordError, match="negative record count"):
        decode_batch(reseal(record_bytes(GOOD), -1))


def test_zero_records_in_an_empty_section_is_valid():
    # What compaction leaves when it removes every record but must keep producer state.
    assert decode_batch(reseal(b"", 0)).records == ()


def test_corrupt_error_names_the_batch_and_position():
    buf = b"\x00" * 7 + reseal(record_bytes(GOOD), 2, base_offset=42)
    with pytest.raises(CorruptRecordError, match="batch at offset 42") as info:
        decode_batch(buf, 7)
    assert info.value.position == 7


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_attributes(codec):
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec {codec}"):
        decode_batch(reseal(record_bytes(GOOD), 1, attributes=codec))


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
def test_garbage_compressed_section(codec):
    with pytest.raises(CorruptRecordError, match="batch at offset 0"):
        decode_batch(reseal(b"\x00\x11garbage\xff" * 4, 1, attributes=codec))


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
def test_decompression_size_guard(codec):
    record = SimpleRecord(b"k", b"\x00" * 200_000, timestamp=0)
    data = build_batch([record], compression=codec)
    assert len(data) < 20_000
    assert decode_batch(data, max_decompressed_size=300_000).records[0].value == record.value
    with pytest.raises(CorruptRecordError, match="decompresses to more than 100000 bytes"):
        decode_batch(data, max_decompressed_size=100_000)
    with pytest.raises(CorruptRecordError, match="more than"):
        list(iter_decoded(data, max_decompressed_size=100_000))


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_refused(magic):
    data = bytearray(build_batch([SimpleRecord(b"k", b"v", timestamp=1)]))
    data[MAGIC_OFFSET] = magic
    with pytest.raises(UnsupportedMagicError):
        decode_batch(data)
    with pytest.raises(UnsupportedMagicError):
        decode_batch(data, verify_crc=False)
    with pytest.raises(UnsupportedMagicError):
        list(iter_decoded(data))


def test_a_v1_message_set_is_refused():
    # A magic 1 message: offset, size, crc, magic 1, attributes, timestamp, key -1, value "hi".
    message = struct.pack(">IbbqiI", 0, 1, 0, 1000, -1, 2) + b"hi"
    v1 = struct.pack(">qi", 0, len(message)) + message
    with pytest.raises(UnsupportedMagicError, match="magic 1"):
        decode_batch(v1)


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_is_detected(codec):
    records = [SimpleRecord(b"key%d" % i, b"value" * i, (("h", b"1"),), i) for i in range(5)]
    data = build_batch(records, compression=codec)
    for size in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_batch(data[:size])
        with pytest.raises(CorruptRecordError):
            decode_batch(data[:size], verify_crc=False)
        assert list(iter_decoded(data[:size])) == []


@pytest.mark.parametrize("codec", CODECS)
def test_every_flipped_bit_under_the_crc_is_detected(codec):
    records = [SimpleRecord(b"key%d" % i, b"value" * i, (("h", b"1"),), i) for i in range(3)]
    data = build_batch(records, compression=codec)
    for index in range(8, len(data)):
        if PARTITION_LEADER_EPOCH_OFFSET <= index < MAGIC_OFFSET:
            continue  # the leader epoch, stamped after the CRC is computed
        damaged = bytearray(data)
        damaged[index] ^= 0x10
        with pytest.raises(CorruptRecordError):
            decode_batch(damaged)


@settings(max_examples=200)
@given(
    codec=st.sampled_from(CODECS),
    damage=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_damage_without_crc_check_raises_only_corrupt_record_error(codec, damage):
    records = [SimpleRecord(b"key%d" % i, b"value %d" % i * 3, (("h", b"x"),), i) for i in range(4)]
    data = bytearray(build_batch(records, compression=codec))
    for index, mask in damage:
        data[HEADER_SIZE + index % (len(data) - HEADER_SIZE)] ^= mask
    try:
        decoded = decode_batch(data, verify_crc=False)
    except CorruptRecordError:
        return
    assert isinstance(decoded, DecodedBatch)
    assert len(decoded.records) == 4  # the header is intact: a batch that decodes has all its records


@settings(max_examples=200)
@given(section=st.binary(max_size=80), count=st.integers(0, 5), codec=st.sampled_from(CODECS))
def test_random_sections_raise_only_corrupt_record_error(section, count, codec):
    try:
        decoded = decode_batch(reseal(section, count, attributes=codec))
    except CorruptRecordError:
        return
    assert len(decoded.records) == count  # what decodes holds exactly the records its header names


# -- control records -------------------------------------------------------------------------


def test_control_record_types():
    assert {t.name: int(t) for t in ControlRecordType} == {
        "ABORT": 0,
        "COMMIT": 1,
        "LEADER_CHANGE": 2,
        "SNAPSHOT_HEADER": 3,
        "SNAPSHOT_FOOTER": 4,
        "KRAFT_VERSION": 5,
        "KRAFT_VOTERS": 6,
    }


@pytest.mark.parametrize("type_", list(ControlRecordType))
def test_control_key_round_trip(type_):
    key = control_key(type_)
    assert key == struct.pack(">hh", 0, type_)
    version, parsed = parse_control_key(key)
    assert version == 0 and parsed is type_


def test_control_key_unknown_type_and_newer_version():
    assert parse_control_key(struct.pack(">hh", 0, 99)) == (0, 99)
    # A newer key version is read by its first four bytes, as Kafka does.
    assert parse_control_key(struct.pack(">hh", 1, 1) + b"extra") == (1, ControlRecordType.COMMIT)


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00"])
def test_control_key_too_short(key):
    with pytest.raises(CorruptRecordError, match="at least 4 bytes"):
        parse_control_key(key)


def test_control_key_negative_version():
    with pytest.raises(CorruptRecordError, match="version -1"):
        parse_control_key(struct.pack(">hh", -1, 0))


def test_end_txn_marker_value():
    value = end_txn_marker_value(17)
    assert value == struct.pack(">hi", 0, 17)
    assert parse_end_txn_marker_value(value) == (0, 17)
    with pytest.raises(CorruptRecordError):
        parse_end_txn_marker_value(b"\x00\x00")
    with pytest.raises(CorruptRecordError):
        parse_end_txn_marker_value(struct.pack(">hi", -1, 0))


def test_commit_marker_batch():
    marker = SimpleRecord(control_key(ControlRecordType.COMMIT), end_txn_marker_value(3), timestamp=99)
    data = build_batch(
        [marker], base_offset=50, producer_id=1000, producer_epoch=2, is_transactional=True, is_control=True
    )
    decoded = decode_batch(data)
    assert decoded.is_control and decoded.header.is_transactional
    (record,) = decoded.records
    assert parse_control_key(record.key) == (0, ControlRecordType.COMMIT)
    assert parse_end_txn_marker_value(record.value) == (0, 3)
    assert record.offset == 50
