"""End-transaction marker batches: the bytes are Kafka's, built here field by field, and reading refuses
anything that is not exactly one marker."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.batch_header import CorruptRecordError, read_header
from kraftpy.protocol.control_records import (
    EndTxnMarker,
    build_end_txn_marker,
    is_end_txn_marker_header,
    read_end_txn_marker,
)
from kraftpy.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    control_key,
    end_txn_marker_value,
)


def hand_built_marker(*, base_offset: int, leader_epoch: int, producer_id: int, producer_epoch: int, kind: int,
                      coordinator_epoch: int, timestamp: int, attributes: int = 0x30) -> bytes:
    key = struct.pack(">hh", 0, kind)  # control key v0, type
    value = struct.pack(">hi", 0, coordinator_epoch)  # marker value v0
    body = (b"\x00"  # record attributes
            + b"\x00"  # timestamp delta 0 (zig-zag varlong)
            + b"\x00"  # offset delta 0
            + b"\x08" + key  # key length 4, zig-zag
            + b"\x0c" + value  # value length 6, zig-zag
            + b"\x00")  # no headers
    assert len(body) == 16
    records = b"\x20" + body  # record length 16, zig-zag
    covered = (struct.pack(">h", attributes) + struct.pack(">i", 0)  # last offset delta
               + struct.pack(">qq", timestamp, timestamp) + struct.pack(">qh", producer_id, producer_epoch)
               + struct.pack(">ii", -1, 1)  # base sequence -1, one record
               + records)
    return (struct.pack(">qi", base_offset, 49 + len(records)) + struct.pack(">i", leader_epoch) + b"\x02"
            + struct.pack(">I", crc32c.crc32c(covered)) + covered)


def test_commit_marker_is_kafkas_bytes():
    expected = hand_built_marker(base_offset=0, leader_epoch=-1, producer_id=4001, producer_epoch=7, kind=1,
                                 coordinator_epoch=12, timestamp=1_700_000_000_000)
    built = build_end_txn_marker(producer_id=4001, producer_epoch=7, committed=True, coordinator_epoch=12,
                                 timestamp=1_700_000_000_000)
    assert built == expected
    assert len(built) == 78


def test_abort_marker_read_from_hand_built_bytes():
    data = hand_built_marker(base_offset=250, leader_epoch=3, producer_id=9, producer_epoch=0, kind=0,
                             coordinator_epoch=2, timestamp=5000)
    assert read_end_txn_marker(data) == EndTxnMarker(producer_id=9, producer_epoch=0, committed=False,
                                                     coordinator_epoch=2, offset=250, timestamp=5000)
    assert read_end_txn_marker(data).control_type is ControlRecordType.ABORT
    assert is_end_txn_marker_header(read_header(data))


def test_marker_at_a_position_in_a_buffer():
    first = build_batch([SimpleRecord(b"k", b"v")], producer_id=9, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
    marker = build_end_txn_marker(producer_id=9, producer_epoch=0, committed=True, coordinator_epoch=1,
                                  timestamp=10, base_offset=1)
    assert read_end_txn_marker(first + marker, len(first)).offset == 1


@pytest.mark.parametrize("attributes, match", [
    (0x20, "not a transaction marker"),  # control without the transactional bit: KRaft's own control batches
    (0x10, "not a transaction marker"),  # transactional data
])
def test_batches_that_are_not_markers_are_refused(attributes, match):
    data = hand_built_marker(base_offset=0, leader_epoch=0, producer_id=1, producer_epoch=0, kind=1,
                             coordinator_epoch=0, timestamp=0, attributes=attributes)
    assert not is_end_txn_marker_header(read_header(data))
    with pytest.raises(CorruptRecordError, match=match):
        read_end_txn_marker(data)


def test_other_control_types_and_record_counts_are_refused():
    leader_change = hand_built_marker(base_offset=0, leader_epoch=0, producer_id=1, producer_epoch=0, kind=2,
                                      coordinator_epoch=0, timestamp=0)
    with pytest.raises(CorruptRecordError, match="type 2 is not ABORT or COMMIT"):
        read_end_txn_marker(leader_change)
    record = SimpleRecord(control_key(ControlRecordType.COMMIT), end_txn_marker_value(1))
    two = build_batch([record, record], producer_id=1, producer_epoch=0, is_transactional=True, is_control=True)
    with pytest.raises(CorruptRecordError, match="holds 1 record, not 2"):
        read_end_txn_marker(two)
    short_value = build_batch([SimpleRecord(control_key(ControlRecordType.ABORT), b"\x00\x00")], producer_id=1,
                              producer_epoch=0, is_transactional=True, is_control=True)
    with pytest.raises(CorruptRecordError, match="at least 6 bytes"):
        read_end_txn_marker(short_value)


def test_a_damaged_marker_fails_its_crc():
    data = bytearray(build_end_txn_marker(producer_id=1, producer_epoch=0, committed=True, coordinator_epoch=0,
                                          timestamp=0))
    data[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        read_end_txn_marker(bytes(data))


def test_a_marker_needs_a_producer():
    with pytest.raises(ValueError, match="producer id and epoch"):
        build_end_txn_marker(producer_id=-1, producer_epoch=0, committed=True, coordinator_epoch=0, timestamp=0)


@settings(max_examples=50, deadline=None, database=None)
@given(producer_id=st.integers(0, 2**63 - 1), producer_epoch=st.integers(0, 2**15 - 1), committed=st.booleans(),
       coordinator_epoch=st.integers(-(2**31), 2**31 - 1), timestamp=st.integers(0, 2**62),
       base_offset=st.integers(0, 2**62))
def test_markers_round_trip(producer_id, producer_epoch, committed, coordinator_epoch, timestamp, base_offset):
    data = build_end_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch, committed=committed,
                                coordinator_epoch=coordinator_epoch, timestamp=timestamp, base_offset=base_offset)
    assert read_end_txn_marker(data) == EndTxnMarker(producer_id, producer_epoch, committed, coordinator_epoch,
                                                     base_offset, timestamp)
