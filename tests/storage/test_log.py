"""The log: leader and follower appends, reads, timestamps, roll, retention, truncation, flush policy."""

from __future__ import annotations

import os
import socket

import pytest

from kraftpy.protocol.batch_header import CorruptRecordError, iter_batches, set_max_timestamp
from kraftpy.protocol.records import Compression, SimpleRecord, build_batch, decode_batch
from kraftpy.storage.checkpoint import LogOffsets
from kraftpy.storage.log import (
    Log,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from kraftpy.storage.log_config import LogConfig

from ._support import ManualClock, batch, read_all


def open_log(tmp_path, clock=None, **config):
    return Log.open(tmp_path / "topic-0", LogConfig(**config), clock=clock or ManualClock())


def test_log_config_has_kafka_defaults():
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 604800000
    assert config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.index_interval_bytes == 4096
    assert config.flush_interval_messages == 2**63 - 1
    assert config.max_message_bytes == 1048588
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=0)


def test_leader_append_assigns_offsets_and_stamps_epoch_keeping_crc(tmp_path):
    log = open_log(tmp_path)
    info = log.append_as_leader(batch(3, base_offset=999) + batch(2, tag=1), leader_epoch=4)
    assert (info.first_offset, info.last_offset, info.record_count, info.batch_count) == (0, 4, 5, 2)
    info = log.append_as_leader(batch(1, tag=2), leader_epoch=4)
    assert (info.first_offset, info.last_offset) == (5, 5)
    data = log.read_bytes(0, 10**6)
    headers = [h for _, h in iter_batches(data)]  # verifies every CRC
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 4), (3, 4), (5, 4)]
    assert [r.offset for r in decode_batch(data, 0).records] == [0, 1, 2]
    assert log.leader_epoch_cache.entries[0].epoch == 4
    assert log.log_end_offset == 6
    log.close()


def test_follower_append_keeps_offsets_and_refuses_going_back(tmp_path):
    log = open_log(tmp_path)
    log.append_as_follower(batch(2, base_offset=0, epoch=1) + batch(2, base_offset=2, epoch=2))
    assert log.log_end_offset == 4
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [1, 2]
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(batch(1, base_offset=3, epoch=2))
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(batch(1, base_offset=6, epoch=2) + batch(1, base_offset=5, epoch=2))
    log.append_as_follower(batch(1, base_offset=10, epoch=2))  # a gap, as after compaction
    assert log.log_end_offset == 11
    assert [h.base_offset for _, h in iter_batches(log.read_bytes(5, 10**6))] == [10]
    log.close()


def test_appends_are_validated(tmp_path):
    log = open_log(tmp_path, max_message_bytes=500)
    bad = bytearray(batch(2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(bad), 0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(2)[:-3], 0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch(1, value_size=600), 0)
    with pytest.raises(ValueError):
        log.append_as_leader(b"", 0)
    assert log.log_end_offset == 0 and log.active_segment.size == 0
    log.close()


def test_append_is_one_write(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    writes = []
    real_write, real_writev = os.write, os.writev
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(fd) or real_write(fd, data))
    monkeypatch.setattr(os, "writev", lambda fd, parts: writes.append(fd) or real_writev(fd, parts))
    records = b"".join(batch(2, tag=i) for i in range(5))
    log.append_as_leader(records, 0)
    log.append_as_follower(batch(3, base_offset=10, epoch=0))
    monkeypatch.undo()
    # one write per append to the segment (the first epoch also writes its checkpoint file)
    assert writes.count(log.active_segment.fd) == 2
    assert records == b"".join(batch(2, tag=i) for i in range(5))  # the caller's buffer is not stamped
    log.close()


def test_read_bounds_and_errors(tmp_path):
    log = open_log(tmp_path)
    for i in range(10):
        log.append_as_leader(batch(2, tag=i), 0)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    assert log.read(20, 100).length == 0
    region = log.read(7, 1)  # the batch holding 7 is whole although larger than 1 byte
    assert [h.base_offset for _, h in iter_batches(region.read_bytes())] == [6]
    log.update_high_watermark(10)
    upto_hw = log.read_bytes(0, 10**6, max_offset=log.high_watermark)
    assert [h.last_offset for _, h in iter_batches(upto_hw)][-1] == 9
    log.close()


def test_region_is_sendfile_ready(tmp_path):
    log = open_log(tmp_path)
    for i in range(4):
        log.append_as_leader(batch(3, tag=i, value_size=200), 0)
    region = log.read(3, 10**6)
    left, right = socket.socketpair()
    try:
        assert region.sendfile(left.fileno()) == region.length
        received = b""
        while len(received) < region.length:
            received += right.recv(65536)
    finally:
        left.close()
        right.close()
    assert received == log.read_bytes(3, 10**6)
    log.close()


def test_roll_by_size_and_time(tmp_path):
    clock = ManualClock()
    one = len(batch(1, value_size=100))
    log = open_log(tmp_path, clock, segment_bytes=3 * one, segment_ms=1000)
    for i in range(7):
        log.append_as_leader(batch(1, value_size=100, tag=i, timestamp=clock.now), 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    # log.roll.ms counts from the first batch's timestamp, as in Kafka
    log.append_as_leader(batch(1, value_size=100, timestamp=clock.now + 999), 0)
    assert len(log.segments) == 3
    log.append_as_leader(batch(1, value_size=100, timestamp=clock.now + 1000), 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 8]
    assert log.recovery_point == 8  # rolling fsyncs the finished segment
    assert [b[0] for b in read_all(log)] == list(range(9))
    log.close()


def test_roll_by_time_without_timestamps_uses_the_clock(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path, clock, segment_ms=1000)
    log.append_as_leader(batch(1, timestamp=-1), 0)
    clock.advance(999)
    log.append_as_leader(batch(1, timestamp=-1), 0)
    assert len(log.segments) == 1
    clock.advance(1)
    log.append_as_leader(batch(1, timestamp=-1), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_explicit_roll_and_empty_roll(tmp_path):
    log = open_log(tmp_path)
    assert log.roll() is log.active_segment  # empty: nothing to do
    log.append_as_leader(batch(2), 0)
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert sorted(p.name for p in (tmp_path / "topic-0").glob("*.log")) == [
        "00000000000000000000.log", "00000000000000000002.log"]
    log.close()


def test_offset_for_timestamp_finds_the_first_record(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=50)
    for i in range(30):
        log.append_as_leader(batch(3, timestamp=1000 + 10 * i, tag=i), 0)
    assert len(log.segments) > 3
    for target, offset in [(0, 0), (1000, 0), (1001, 1), (1003, 3), (1102, 32), (1105, 33), (1292, 89)]:
        found = log.offset_for_timestamp(target)
        assert found.offset == offset, target
        assert found.timestamp >= target
    assert log.offset_for_timestamp(1293) is None
    log.update_high_watermark(30)
    log.delete_records_before(25)
    assert log.offset_for_timestamp(1000).offset == 25
    log.close()


def test_offset_for_timestamp_with_compression_and_log_append_time(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(4, timestamp=500, compression=Compression.ZSTD), 0)
    appended = bytearray(batch(2, timestamp=100))
    set_max_timestamp(appended, 0, 1, 900)
    log.append_as_leader(bytes(appended), 0)
    assert log.offset_for_timestamp(502).offset == 2
    assert log.offset_for_timestamp(600).offset == 4
    assert log.offset_for_timestamp(600).timestamp == 900
    log.close()


def test_truncate_to_cuts_segments_epochs_and_offsets(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(20):
        log.append_as_leader(batch(2, tag=i), i // 5)
    log.update_high_watermark(30)
    log.flush()
    assert len(log.segments) > 3
    assert log.truncate_to(13)  # drops the batch 12..13
    assert log.log_end_offset == 12
    assert log.high_watermark == 12 and log.recovery_point == 12
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [0, 1]
    assert all(s.base_offset <= 12 for s in log.segments)
    assert [b[0] for b in read_all(log)] == list(range(0, 12, 2))
    assert not log.truncate_to(50)
    log.append_as_leader(batch(1), 7)
    assert log.end_offset_for_epoch(1) == (1, 12)
    log.close()
    again = Log.open(tmp_path / "topic-0", LogConfig(segment_bytes=300), clock=ManualClock(), offsets=log.offsets,
                     clean_shutdown=True)
    assert [b[0] for b in read_all(again)] == [*range(0, 12, 2), 12]
    again.close()


def test_truncating_at_the_end_drops_an_epoch_begun_there_without_records(tmp_path):
    """A leader that lost its leadership before it appended anything in its epoch, now a follower: the
    new leader names where the logs diverge, at this log's end. Nothing is cut, but the empty epoch
    goes, so that the next fetch says the epoch of the last batch and is not told the same again."""
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), 1)
    log.leader_epoch_cache.assign(2, log.log_end_offset)  # led in epoch 2, appended nothing
    assert log.latest_epoch == 2
    assert not log.truncate_to(5)
    assert log.latest_epoch == 1 and log.log_end_offset == 5
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(1, 0)]
    log.close()


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), 3)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.leader_epoch_cache.entries == ()
    assert [p.name for p in (tmp_path / "topic-0").glob("*.log")] == ["00000000000000000100.log"]
    log.append_as_follower(batch(1, base_offset=100, epoch=5))
    log.close()
    again = Log.open(tmp_path / "topic-0", clock=ManualClock(), offsets=log.offsets, clean_shutdown=True)
    assert (again.log_start_offset, again.log_end_offset) == (100, 101)
    again.close()


def test_time_retention_deletes_old_segments_below_the_high_watermark(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path, clock, segment_bytes=250, retention_ms=10_000)
    for i in range(12):
        log.append_as_leader(batch(2, timestamp=clock.now, tag=i), 0)
        clock.advance(1000)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    assert log.delete_old_segments() == 0  # high watermark 0: nothing is committed
    log.update_high_watermark(log.log_end_offset)
    clock.advance(10_000 - 4000)  # segments whose newest batch is older than 10 s go
    deleted = log.delete_old_segments()
    assert deleted >= 1
    assert log.log_start_offset == log.segments[0].base_offset > 0
    for segment in log.segments[:-1]:
        assert clock.now - segment.largest_timestamp <= 10_000
    # The files of deleted segments are renamed at once and removed when the owner says so.
    renamed = list((tmp_path / "topic-0").glob("*.log.deleted"))
    assert len(renamed) == deleted and log.has_detached_segments
    assert log.delete_detached_segments() == deleted
    assert not list((tmp_path / "topic-0").glob("*.deleted")) and not log.has_detached_segments
    clock.advance(100_000)  # everything is old: the active segment is rolled and deleted too
    log.delete_old_segments()
    assert log.log_start_offset == log.log_end_offset == 24
    assert len(log.segments) == 1 and log.active_segment.is_empty
    log.append_as_leader(batch(1), 1)
    assert read_all(log)[0][0] == 24
    log.close()


def test_size_retention(tmp_path):
    clock = ManualClock()
    one = len(batch(1, value_size=100))
    log = open_log(tmp_path, clock, segment_bytes=2 * one, retention_bytes=3 * one, retention_ms=-1)
    for i in range(10):
        log.append_as_leader(batch(1, value_size=100, tag=i), 0)
    log.update_high_watermark(10)
    assert log.delete_old_segments() == 3
    assert log.size_in_bytes <= 4 * one
    assert log.log_start_offset == 6
    assert [b[0] for b in read_all(log)] == [6, 7, 8, 9]
    log.close()


def test_delete_records_before_moves_the_log_start(tmp_path):
    log = open_log(tmp_path, segment_bytes=250)
    for i in range(10):
        log.append_as_leader(batch(2, tag=i), i)
    log.update_high_watermark(15)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(16)
    assert log.delete_records_before(9) == 9
    assert all(s.base_offset <= 9 for s in log.segments[:1])
    assert log.segments[0].base_offset <= 9 < log.segments[0].next_offset or log.segments[0].base_offset == 9
    with pytest.raises(OffsetOutOfRangeError):
        log.read(8, 100)
    assert read_all(log)[0][0] == 8  # the batch holding offset 9 starts at 8
    assert log.leader_epoch_cache.entries[0].start_offset == 9
    assert log.delete_records_before(3) == 9  # never goes back
    log.close()
    assert not list((tmp_path / "topic-0").glob("*.deleted"))  # close removes detached segments
    again = Log.open(tmp_path / "topic-0", LogConfig(segment_bytes=250), clock=ManualClock(), offsets=log.offsets)
    assert again.log_start_offset == 9 and again.high_watermark == 15
    again.close()


def test_a_new_log_fsyncs_its_directory_at_its_first_flush_not_at_creation(tmp_path, monkeypatch):
    import kraftpy.storage.log as log_module

    synced = []
    real = log_module.fsync_dir
    monkeypatch.setattr(log_module, "fsync_dir", lambda path: synced.append(path) or real(path))
    log = open_log(tmp_path)
    assert synced == []  # creating thousands of partitions is not thousands of directory fsyncs
    log.append_as_leader(batch(1), 0)
    log.flush()
    assert synced == [tmp_path / "topic-0"]
    log.close()


def test_the_leader_epoch_file_holds_the_epochs_that_hold_records(tmp_path, monkeypatch):
    """An epoch begun at the log's end (a new leader's, before its first append) is not written: opening
    the log would drop it. So neither an empty log nor a leader that appended nothing rewrites the file."""
    import kraftpy.storage.leader_epoch as epochs

    path = tmp_path / "topic-0" / "leader-epoch-checkpoint"
    empty = open_log(tmp_path)
    empty.leader_epoch_cache.assign(1, 0)  # led, never written to
    empty.close()
    assert not path.exists()
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), leader_epoch=3)
    log.leader_epoch_cache.assign(4, log.log_end_offset)  # a new leader's epoch, no record yet
    log.leader_epoch_cache.flush()
    assert b"3 0" in path.read_bytes() and b"4 " not in path.read_bytes()
    offsets = log.offsets
    log.close()
    before = path.read_bytes()
    writes = []
    real_write = epochs.write_atomic
    monkeypatch.setattr(epochs, "write_atomic", lambda *args, **kwargs: (writes.append(args[0]),
                                                                          real_write(*args, **kwargs)))
    again = Log.open(tmp_path / "topic-0", LogConfig(), clock=ManualClock(), offsets=offsets, clean_shutdown=True)
    assert [(e.epoch, e.start_offset) for e in again.leader_epoch_cache.entries] == [(3, 0)]
    assert writes == [] and path.read_bytes() == before
    # Led again, in a new epoch, with no append: nothing to write at close.
    again.leader_epoch_cache.assign(4, again.log_end_offset)
    again.close()
    assert writes == []
    # Its first record is: the epoch is written, and read back.
    third = Log.open(tmp_path / "topic-0", LogConfig(), clock=ManualClock(), offsets=again.offsets,
                     clean_shutdown=True)
    third.leader_epoch_cache.assign(5, third.log_end_offset)
    third.flush()  # before its first record: the epoch is not written yet, and not forgotten either
    assert writes == []
    third.append_as_leader(batch(1), leader_epoch=5)
    offsets = third.offsets
    third.close()
    assert writes == [path]
    fourth = Log.open(tmp_path / "topic-0", LogConfig(), clock=ManualClock(), offsets=offsets, clean_shutdown=True)
    assert [(e.epoch, e.start_offset) for e in fourth.leader_epoch_cache.entries] == [(3, 0), (5, 2)]
    fourth.close()


def test_flush_policies(tmp_path, monkeypatch):
    clock = ManualClock()
    log = open_log(tmp_path, clock, flush_interval_messages=5)
    syncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: syncs.append(fd) or real_fsync(fd))
    log.append_as_leader(batch(2), 0)
    log.append_as_leader(batch(2), 0)
    data_fd = log.active_segment.fd
    assert log.recovery_point == 0 and not log.flush_due and data_fd not in syncs  # nothing fsynced per append
    log.append_as_leader(batch(1), 0)
    # The policy says a flush is due; the owner does it (an append never blocks on fsync).
    assert log.flush_due and log.recovery_point == 0 and data_fd not in syncs
    assert log.flush_if_due()
    assert log.recovery_point == 5 and data_fd in syncs and not log.flush_due
    log.close()

    timed = Log.open(tmp_path / "timed", LogConfig(flush_interval_ms=1000), clock=clock)
    timed.append_as_leader(batch(1), 0)
    assert timed.recovery_point == 0
    assert not timed.flush_if_due()
    clock.advance(1000)
    assert timed.flush_if_due() and timed.recovery_point == 1
    clock.advance(1000)
    timed.append_as_leader(batch(1), 0)
    assert timed.flush_due and timed.flush_if_due()
    assert timed.recovery_point == 2
    timed.append_as_leader(batch(1), 0)
    timed.flush(up_to_offset=2)
    assert timed.recovery_point == 2
    timed.flush()
    assert timed.recovery_point == 3
    timed.close()


def test_close_flushes_and_the_owner_records_the_offsets(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), 0)
    log.update_high_watermark(2)
    log.close()
    directory = tmp_path / "topic-0"
    assert log.offsets == LogOffsets(log_start_offset=0, recovery_point=2, high_watermark=2)
    # The log writes no offsets file of its own: its owner keeps them (kraftpy.storage.log_manager).
    assert sorted(p.name for p in directory.iterdir() if not p.name[0].isdigit()) == ["leader-epoch-checkpoint"]
    again = Log.open(directory, clock=ManualClock(), offsets=log.offsets, clean_shutdown=True)
    assert (again.recovery_point, again.high_watermark) == (2, 2)
    again.close()
    unknown = Log.open(directory, clock=ManualClock())  # nothing recorded: recovered from the start
    assert (unknown.log_start_offset, unknown.recovery_point, unknown.high_watermark) == (0, 2, 0)
    unknown.close()


def test_crc_is_checked_unless_the_caller_already_did(tmp_path):
    data = bytearray(build_batch([SimpleRecord(b"k", b"v")]))
    data[-1] ^= 0xFF  # the CRC no longer matches
    with Log.open(tmp_path / "p-0") as log:
        with pytest.raises(CorruptRecordError, match="CRC"):
            log.append_as_leader(data, 0)
        assert log.log_end_offset == 0
        info = log.append_as_leader(data, 0, crc_verified=True)  # the broker vouches for it
        assert (info.first_offset, log.log_end_offset) == (0, 1)
        with pytest.raises(CorruptRecordError, match="truncated"):
            log.append_as_leader(bytes(data[:-1]), 0, crc_verified=True)


def test_the_leftover_logs_fixture_closes_what_a_test_left_open(tmp_path):
    """tests.helpers.leftovers (autouse here): a log the test opened and did not close is closed when the
    test ends; one it closed is left as it is."""
    from tests.helpers.leftovers import close_leftover_logs

    with pytest.MonkeyPatch.context() as monkeypatch:
        fixture = close_leftover_logs(monkeypatch)
        next(fixture)
        left = open_log(tmp_path)
        closed = Log.open(tmp_path / "topic-1", LogConfig(), clock=ManualClock())
        closed.close()
        with pytest.raises(StopIteration):
            next(fixture)
    assert left.closed and closed.closed
