"""The produce validator (Kafka's LogValidator rules) and its C records scan, without a broker.

A batch built by the project's own builder always passes; a batch that breaks one rule, with its
CRC recomputed so that only that rule can catch it, is refused with Kafka's code; and the C scan
answers exactly what the Python decoder does, on good and damaged bytes. Every test of the
validator runs with the C scan and with the Python one.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kraftpy.protocol import record_validation as rv
from kraftpy.protocol.batch_header import CONTROL_BIT, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, read_header
from kraftpy.protocol.compression import Compression, zstd_compress
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.record_validation import (
    Accepted,
    InlineLimitExceeded,
    ProduceRules,
    Refusal,
    scan_records_py,
    validate_produced_batch,
)
from kraftpy.protocol.records import (
    CorruptRecordError,
    SimpleRecord,
    build_batch,
    decode_batch,
    decode_records,
)
from kraftpy.protocol.varint import encode_varint, encode_varlong
from tests.helpers.batches import raw_record, record, records_section, resealed, sealed

NOW = 1_700_000_000_000
RULES = ProduceRules()
HOUR = 3_600_000

try:
    from kraftpy.protocol._record_scan import scan as c_scan
except ImportError:  # pragma: no cover - an install without a compiler
    c_scan = None

needs_c = pytest.mark.skipif(c_scan is None, reason="kraftpy.protocol._record_scan is not compiled")


@pytest.fixture(autouse=True, params=["c", "python"])
def scanner(request, monkeypatch):
    """Run each test with the C scan and with the Python one."""
    if request.param == "c":
        if c_scan is None:
            pytest.skip("kraftpy.protocol._record_scan is not compiled")
        monkeypatch.setattr(rv, "scan_records", c_scan)
    else:
        monkeypatch.setattr(rv, "scan_records", scan_records_py)
    return request.param


def batch_of(count: int = 3, **kwargs) -> bytes:
    return sealed(records_section(count), count, base_timestamp=NOW, **kwargs)


def check(batch: bytes, rules: ProduceRules = RULES, now: int = NOW, **kwargs):
    return validate_produced_batch(batch, rules, now, **kwargs)


def refused(batch: bytes, error: ErrorCode, rules: ProduceRules = RULES, **kwargs) -> Refusal:
    verdict = check(batch, rules, **kwargs)
    assert isinstance(verdict, Refusal), verdict
    assert verdict.error == error, verdict
    assert verdict.message
    return verdict


# -- what passes ---------------------------------------------------------------------------------

headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3)
records = st.lists(
    st.builds(SimpleRecord, key=st.none() | st.binary(max_size=40), value=st.none() | st.binary(max_size=200),
              headers=headers, timestamp=st.none() | st.integers(NOW - 10**12, NOW + HOUR)),
    min_size=1, max_size=80,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records, st.sampled_from(list(Compression)), st.booleans(), st.integers(0, 2**31 - 1))
def test_every_batch_the_builder_makes_passes_unchanged(records, codec, idempotent, base_sequence):
    ids = dict(producer_id=7, producer_epoch=1, base_sequence=base_sequence) if idempotent else {}
    data = build_batch(records, compression=codec, base_timestamp=None if records[0].timestamp else NOW, **ids)
    verdict = check(data)
    assert isinstance(verdict, Accepted), verdict
    assert bytes(verdict.records) == data
    assert verdict.header == read_header(data)


def test_a_memoryview_of_a_bigger_buffer_passes():
    data = batch_of(5)
    assert isinstance(check(memoryview(data)), Accepted)


# -- batch-level refusals ------------------------------------------------------------------------


def test_no_batch_is_invalid_record():
    refused(b"", ErrorCode.INVALID_RECORD)
    refused(None, ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_invalid_record(magic):
    data = bytearray(batch_of())
    data[16] = magic
    refused(bytes(data), ErrorCode.INVALID_RECORD)


def test_unknown_magic_and_short_headers_are_corrupt():
    data = bytearray(batch_of())
    data[16] = 3
    refused(bytes(data), ErrorCode.CORRUPT_MESSAGE)
    refused(batch_of()[:40], ErrorCode.CORRUPT_MESSAGE)


def test_two_batches_are_invalid_and_a_cut_batch_corrupt():
    refused(batch_of() + batch_of(), ErrorCode.INVALID_RECORD)
    refused(batch_of()[:-1], ErrorCode.CORRUPT_MESSAGE)


def test_too_large():
    refused(batch_of(50), ErrorCode.MESSAGE_TOO_LARGE, ProduceRules(max_message_bytes=200))


def test_bad_crc_is_corrupt():
    data = bytearray(batch_of())
    data[-1] ^= 1
    refused(bytes(data), ErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (dict(base_offset=5), ErrorCode.INVALID_RECORD),
        (dict(record_count=2), ErrorCode.INVALID_RECORD),
        (dict(record_count=4), ErrorCode.INVALID_RECORD),
        (dict(record_count=0, last_offset_delta=-1), ErrorCode.INVALID_RECORD),
        (dict(record_count=-3), ErrorCode.INVALID_RECORD),
        (dict(last_offset_delta=2**31 - 1), ErrorCode.INVALID_RECORD),
        (dict(last_offset_delta=1), ErrorCode.INVALID_RECORD),
        (dict(attributes=CONTROL_BIT), ErrorCode.INVALID_RECORD),
        (dict(attributes=TRANSACTIONAL_BIT), ErrorCode.INVALID_RECORD),  # transactional without a producer id
        (dict(attributes=TIMESTAMP_TYPE_BIT), ErrorCode.INVALID_TIMESTAMP),
        (dict(attributes=5), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
        (dict(attributes=6), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
        (dict(attributes=7), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
        (dict(producer_id=-5), ErrorCode.INVALID_RECORD),
        (dict(producer_id=9, producer_epoch=-1, base_sequence=0), ErrorCode.INVALID_RECORD),
        (dict(producer_id=9, producer_epoch=0, base_sequence=-1), ErrorCode.INVALID_RECORD),
    ],
)
def test_header_fields_that_break_a_rule(fields, error):
    refused(resealed(batch_of(3), **fields), error)


def test_a_one_record_batch_claiming_two_billion_offsets_is_refused():
    # The probe's batch: it moved a log end offset to 2,147,483,658 when only its CRC was checked.
    one = sealed(record(0), 1, last_offset_delta=2**31 - 1, base_timestamp=NOW)
    assert refused(one, ErrorCode.INVALID_RECORD).record_errors == ()


def test_zstd_needs_produce_v7():
    data = sealed(records_section(3), 3, codec=Compression.ZSTD, base_timestamp=NOW)
    refused(data, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, produce_version=6)
    assert isinstance(check(data, produce_version=7), Accepted)


def test_idempotent_sequences_wrap():
    data = batch_of(3, producer_id=4, producer_epoch=0, base_sequence=2**31 - 2)
    assert isinstance(check(data), Accepted)


# -- compression ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_a_codec_flag_on_raw_records_is_corrupt(codec):
    data = sealed(records_section(3), 3, codec=codec, compressed=False, base_timestamp=NOW)
    refused(data, ErrorCode.CORRUPT_MESSAGE)


def test_compressed_records_are_checked_like_plain_ones():
    bad = record(0) + record(5)
    data = sealed(bad, 2, codec=Compression.LZ4, base_timestamp=NOW)
    verdict = refused(data, ErrorCode.INVALID_RECORD)
    assert [e.batch_index for e in verdict.record_errors] == [1]


def test_a_decompression_bomb_is_refused():
    bomb = sealed(record(0, value=bytes(2_000_000)), 1, codec=Compression.ZSTD, base_timestamp=NOW)
    refused(bomb, ErrorCode.CORRUPT_MESSAGE, ProduceRules(max_decompressed_size=1_000_000))


def test_a_large_compressed_batch_is_left_to_the_caller_past_the_inline_limit():
    data = sealed(record(0, value=bytes(300_000)), 1, codec=Compression.ZSTD, base_timestamp=NOW)
    with pytest.raises(InlineLimitExceeded):
        check(data, inline_limit=100_000)
    assert isinstance(check(data, inline_limit=1_000_000), Accepted)
    assert isinstance(check(data), Accepted)


def test_a_concatenation_of_zstd_frames_is_one_section():
    section = records_section(4)
    data = sealed(zstd_compress(section[:9]) + zstd_compress(section[9:]), 4, codec=Compression.ZSTD,
                  compressed=False, base_timestamp=NOW)
    assert isinstance(check(data), Accepted)


# -- records -------------------------------------------------------------------------------------


def record_errors(verdict: Refusal) -> list[int]:
    return [e.batch_index for e in verdict.record_errors]


def test_offset_deltas_must_count_from_zero():
    data = sealed(record(0) + record(1) + record(1), 3, base_timestamp=NOW)
    verdict = refused(data, ErrorCode.INVALID_RECORD)
    assert record_errors(verdict) == [2]
    assert "offset delta 1" in verdict.record_errors[0].message
    shifted = sealed(record(1) + record(2), 2, base_timestamp=NOW)
    assert record_errors(refused(shifted, ErrorCode.INVALID_RECORD)) == [0, 1]


@pytest.mark.parametrize(
    ("section", "count", "index"),
    [
        (record(0), 2, 1),  # fewer records than the header says
        (record(0) + record(1), 1, None),  # bytes after the last record
        (record(0)[:-1], 1, 0),  # cut short
        (raw_record(b"\x00\x00\x00\x03\x02v\x00"), 1, 0),  # key length -2
        (raw_record(b"\x00\x00\x00\x20k\x02v\x00"), 1, 0),  # key runs past the record
        (raw_record(b"\x00\x00\x00\x02k\x05\x00"), 1, 0),  # value length -3
        (raw_record(b"\x00\x00\x00\x02k\x02v\x01"), 1, 0),  # header count -1
        (raw_record(b"\x00\x00\x00\x02k\x02v\x02\x01\x00"), 1, 0),  # header key length -1: a null key
        (record(0, headers=((b"\xff", b"x"),)), 1, 0),  # header key not UTF-8
        (raw_record(b"\x00\x00\x00\x02k\x02v\x02\x02h\x03"), 1, 0),  # header value length -2
        (raw_record(b"\x00\x00\x00\x02k\x02v\x02\x02h\x0ax"), 1, 0),  # header value runs past
        (raw_record(b"\x00\x00\x00\x02k\x02v\x00\x00"), 1, 0),  # a byte the fields do not take
        (b"\x01" + record(0), 1, 0),  # record length -1
        (record(0) + bytes.fromhex("ffffffffff0f"), 2, 1),  # a varint out of the int32 range
        (record(0) + b"\x80" * 12, 2, 1),  # a varint that never ends
    ],
)
def test_records_that_do_not_parse_are_invalid(section, count, index):
    verdict = refused(sealed(section, count, base_timestamp=NOW), ErrorCode.INVALID_RECORD)
    if index is None:
        assert verdict.record_errors == ()
    else:
        assert record_errors(verdict) == [index]


def test_headers_may_have_null_values_but_not_null_keys():
    good = sealed(record(0, headers=((b"trace", None), (b"", b"x"))), 1, base_timestamp=NOW)
    assert isinstance(check(good), Accepted)


def test_a_compacted_topic_takes_no_record_without_a_key():
    data = sealed(record(0) + record(1, key=None) + record(2), 3, base_timestamp=NOW)
    assert isinstance(check(data), Accepted)
    verdict = refused(data, ErrorCode.INVALID_RECORD, ProduceRules(compacted=True))
    assert record_errors(verdict) == [1]


# -- timestamps ----------------------------------------------------------------------------------


def timed(*deltas: int, base: int = NOW) -> bytes:
    section = b"".join(record(i, timestamp_delta=d) for i, d in enumerate(deltas))
    return sealed(section, len(deltas), base_timestamp=base, max_timestamp=base + max(deltas))


def test_timestamps_after_the_bound_are_refused_record_by_record():
    verdict = refused(timed(0, HOUR, HOUR + 1, 5 * HOUR), ErrorCode.INVALID_TIMESTAMP)
    assert record_errors(verdict) == [2, 3]
    assert f"[{NOW - rv.LONG_MAX}, {NOW + HOUR}]" in verdict.record_errors[0].message
    assert isinstance(check(timed(0, HOUR)), Accepted)


def test_timestamps_before_the_bound_are_refused_when_one_is_set():
    rules = ProduceRules(timestamp_before_max_ms=1000)
    verdict = refused(timed(0, -1000, -1001), ErrorCode.INVALID_TIMESTAMP, rules)
    assert record_errors(verdict) == [2]
    assert isinstance(check(timed(-10**12)), Accepted)  # Kafka's default: any past


def test_a_record_without_a_timestamp_is_never_out_of_range():
    rules = ProduceRules(timestamp_before_max_ms=0, timestamp_after_max_ms=0)
    assert isinstance(check(timed(0, base=-1), rules), Accepted)
    assert record_errors(refused(timed(0, 1, base=-1), ErrorCode.INVALID_TIMESTAMP, rules)) == [1]


def test_timestamps_past_int64_are_refused():
    rules = ProduceRules(timestamp_after_max_ms=rv.LONG_MAX)
    section = record(0) + record(1, timestamp_delta=2**62)
    data = sealed(section, 2, base_timestamp=2**62, max_timestamp=rv.LONG_MAX)
    assert record_errors(refused(data, ErrorCode.INVALID_TIMESTAMP, rules)) == [1]


def test_a_log_append_time_topic_ignores_record_timestamps():
    rules = ProduceRules(log_append_time=True)
    assert isinstance(check(timed(0, 100 * HOUR), rules), Accepted)


def test_a_timestamp_error_beside_an_offset_error_makes_the_batch_invalid_timestamp():
    section = record(0, timestamp_delta=2 * HOUR) + record(5)
    verdict = refused(sealed(section, 2, base_timestamp=NOW), ErrorCode.INVALID_TIMESTAMP)
    assert record_errors(verdict) == [0, 1]


def test_the_max_timestamp_is_made_true():
    data = sealed(record(0, timestamp_delta=5) + record(1, timestamp_delta=9), 2, base_timestamp=NOW,
                  max_timestamp=NOW + 10**9)
    verdict = check(data)
    assert isinstance(verdict, Accepted)
    assert verdict.header.max_timestamp == NOW + 9
    assert decode_batch(bytes(verdict.records)).header.max_timestamp == NOW + 9  # CRC recomputed


def test_record_errors_are_capped_but_counted():
    count = rv.MAX_RECORD_ERRORS + 50
    section = b"".join(record(i, timestamp_delta=2 * HOUR) for i in range(count))
    verdict = refused(sealed(section, count, base_timestamp=NOW, max_timestamp=NOW + 2 * HOUR),
                      ErrorCode.INVALID_TIMESTAMP)
    assert len(verdict.record_errors) == rv.MAX_RECORD_ERRORS
    assert verdict.message.startswith(f"{count} of the batch's {count} records refused")


# -- any rule broken, with the CRC recomputed ----------------------------------------------------


def oracle(batch: bytes, rules: ProduceRules = RULES, now: int = NOW) -> bool:
    """Whether the batch keeps every rule, decided by the project's decoder and the rules read plainly."""
    header = read_header(batch)
    if header.record_count <= 0 or header.record_count != header.last_offset_delta + 1:
        return False
    try:
        decoded = decode_records(batch[61:], header.record_count, header.base_timestamp)
    except CorruptRecordError:
        return False
    return all(
        r.offset == i and (r.timestamp == -1 or now - rules.timestamp_before_max_ms <= r.timestamp
                           <= now + rules.timestamp_after_max_ms)
        for i, r in enumerate(decoded)
    )


@st.composite
def mutated_sections(draw):
    """A valid records section, then one kind of damage: flipped bytes, bytes cut or added, a
    varint replaced."""
    count = draw(st.integers(1, 12))
    section = bytearray(b"".join(
        record(i, draw(st.none() | st.binary(max_size=6)), draw(st.none() | st.binary(max_size=30)),
               timestamp_delta=draw(st.integers(-5, 5)),
               headers=tuple(draw(st.lists(st.tuples(st.binary(max_size=4), st.none() | st.binary(max_size=4)),
                                           max_size=2))))
        for i in range(count)))
    kind = draw(st.sampled_from(["flip", "cut", "add", "varint"]))
    at = draw(st.integers(0, len(section) - 1))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 3))):
            section[draw(st.integers(0, len(section) - 1))] ^= draw(st.integers(1, 255))
    elif kind == "cut":
        del section[at : at + draw(st.integers(1, 4))]
    elif kind == "add":
        section[at:at] = draw(st.binary(min_size=1, max_size=4))
    else:
        section[at : at + 1] = draw(st.sampled_from([encode_varint(-2), encode_varint(2**30), encode_varlong(-(2**62)),
                                                     b"\x80\x80\x80\x80\x80\x01", b"\xff" * 10 + b"\x01"]))
    return bytes(section), count + draw(st.integers(-1, 1))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated_sections())
def test_a_damaged_batch_is_refused_unless_it_still_keeps_every_rule(damaged):
    section, count = damaged
    assume(count >= 1)
    data = sealed(section, count, base_timestamp=NOW, max_timestamp=NOW + 5)
    verdict = check(data)
    if oracle(data):
        assert isinstance(verdict, Accepted), verdict
    else:
        assert isinstance(verdict, Refusal)
        assert verdict.error in (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(-2, 6) | st.integers(-(2**31), 2**31 - 1), st.integers(-2, 6) | st.integers(-(2**31), 2**31 - 1),
       st.integers(0, 0x7F) | st.integers(-(2**15), 2**15 - 1))
def test_a_header_with_other_counts_or_attributes_is_refused_unless_it_keeps_every_rule(count, last, attributes):
    data = resealed(batch_of(4), record_count=count, last_offset_delta=last, attributes=attributes)
    verdict = check(data)
    # Bits 0-5 are codec, timestamp type, transactional and control; the rest are not a producer's concern.
    keeps = count == 4 and last == 3 and attributes & 0x3F == 0
    assert isinstance(verdict, Accepted) == keeps, verdict


# -- the C scan is the Python decoder ------------------------------------------------------------


@needs_c
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated_sections())
def test_the_c_scan_answers_what_the_python_decoder_does(damaged):
    section, count = damaged
    assume(count >= 0)
    assert c_scan(section, 0, count) == scan_records_py(section, 0, count)
    padded = b"\x00" * 7 + section
    assert c_scan(padded, 7, count) == scan_records_py(padded, 7, count)


@needs_c
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records)
def test_the_c_scan_summarises_good_batches_like_the_python_decoder(records):
    data = build_batch(records, base_timestamp=NOW)
    count = read_header(data).record_count
    summary = c_scan(data, 61, count)
    assert summary is not None
    assert summary == scan_records_py(data, 61, count)


@needs_c
def test_the_c_scan_checks_its_arguments():
    with pytest.raises(ValueError):
        c_scan(b"abc", 4, 1)
    with pytest.raises(ValueError):
        c_scan(b"abc", 0, -1)
    with pytest.raises(TypeError):
        c_scan("text", 0, 1)
    assert c_scan(b"", 0, 0) == (0, 0, 0)
    assert c_scan(b"\x00", 0, 0) is None


def test_the_install_compiled_the_c_record_scan():
    """The Makefile installs a C compiler and Python's headers before installing kraftpy (build-deps),
    so the install compiled the scan: without it a broker checks records in Python, far more slowly."""
    assert c_scan is not None, "kraftpy.protocol._record_scan was not compiled by the install"
