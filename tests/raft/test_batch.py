"""RecordBatch: a view over the leader's RecordBatch v2 bytes, checked on the way in."""

from __future__ import annotations

import pytest

from kraftpy.protocol.batch_header import CRC_OFFSET, CorruptRecordError, check_batch
from kraftpy.protocol.records import ControlRecordType, decode_batch, parse_control_key
from kraftpy.raft.batch import NO_TIMESTAMP, RecordBatch, encoded_size_bound, parse_batches


def test_build_encodes_a_recordbatch_v2_with_the_raft_fields() -> None:
    batch = RecordBatch.build([b"a", b"bc"], base_offset=7, epoch=3, timestamp_ms=1_700_000_000_123)
    header = check_batch(batch.data)
    assert (header.base_offset, header.partition_leader_epoch, header.record_count) == (7, 3, 2)
    assert (batch.base_offset, batch.epoch, batch.last_offset, batch.next_offset) == (7, 3, 8, 9)
    assert (batch.is_control, batch.size_in_bytes, batch.crc) == (False, len(batch.data), header.crc)
    decoded = decode_batch(batch.data)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decoded.records] == [
        (7, None, b"a", 1_700_000_000_123), (8, None, b"bc", 1_700_000_000_123)]
    assert batch.timestamp_ms == 1_700_000_000_123


def test_a_control_batch_carries_the_leader_change_key() -> None:
    batch = RecordBatch.build([b"lc"], base_offset=0, epoch=1, is_control=True)
    (record,) = decode_batch(batch.data).records
    assert batch.is_control and parse_control_key(record.key)[1] == ControlRecordType.LEADER_CHANGE
    assert batch.timestamp_ms == NO_TIMESTAMP


def test_records_are_decoded_only_when_asked() -> None:
    built = RecordBatch.build([b"x", b"", b"z" * 300], base_offset=0, epoch=1)
    (view,) = parse_batches(built.data)
    assert view._records is None
    assert view.records == (b"x", b"", b"z" * 300)
    assert view == built and hash(view) == hash(built)


def test_equal_only_when_the_bytes_are() -> None:
    a = RecordBatch.build([b"x"], base_offset=0, epoch=1, timestamp_ms=1)
    b = RecordBatch.build([b"x"], base_offset=0, epoch=1, timestamp_ms=2)  # another clock: other bytes
    assert a != b and a.records == b.records


def test_parse_batches_splits_checks_and_refuses() -> None:
    first = RecordBatch.build([b"a"], base_offset=0, epoch=1)
    second = RecordBatch.build([b"b", b"c"], base_offset=1, epoch=2)
    data = first.data + second.data
    assert parse_batches(data) == [first, second]
    assert parse_batches(b"") == []
    with pytest.raises(CorruptRecordError):
        parse_batches(data[:-1])  # a partial batch
    with pytest.raises(CorruptRecordError):
        parse_batches(data + b"\x00" * 5)
    corrupt = bytearray(data)
    corrupt[len(first.data) + CRC_OFFSET + 10] ^= 0x01  # a byte under the second batch's CRC
    with pytest.raises(CorruptRecordError):
        parse_batches(bytes(corrupt))
    assert len(parse_batches(bytes(corrupt), verify=False)) == 2  # headers only: for bytes already checked


def test_size_bound_holds() -> None:
    for records in ([b""], [b"x"] * 100, [b"y" * 70_000], [b"z" * 129, b"w" * 16_385]):
        assert RecordBatch.build(records, base_offset=2**40, epoch=2**31 - 1).size_in_bytes <= encoded_size_bound(
            records)
