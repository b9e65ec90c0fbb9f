"""preallocate / log.preallocate: a new segment's disk blocks reserved when it is created, the file's
size unchanged, and what it did not use given back when it is rolled."""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

from kraftpy.storage import fsutil
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.segment import RESERVED_SLACK_BYTES, LogSegment

from ._support import ManualClock, batch, read_all

SEGMENT = 4 << 20


def allocated(path) -> int:
    """The bytes of disk the file holds (its blocks), whatever its size says."""
    return os.stat(path).st_blocks * 512


def _reserves(directory) -> bool:
    path = directory / "probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        return fsutil.reserve_blocks(fd, 1 << 20)
    finally:
        os.close(fd)
        path.unlink()


@pytest.fixture
def disk(tmp_path):
    """A directory on a file system that reserves blocks (Linux fallocate), else the test is skipped."""
    if not _reserves(tmp_path):
        pytest.skip("this file system does not reserve blocks (fallocate)")
    return tmp_path


def open_log(directory, *, preallocate: bool = True, segment_bytes: int = SEGMENT) -> Log:
    return Log.open(directory / "orders-0", LogConfig(segment_bytes=segment_bytes, preallocate=preallocate),
                    clock=ManualClock())


def test_a_new_segment_holds_its_whole_size_on_disk_and_its_size_is_its_data(disk):
    log = open_log(disk)
    segment = log.active_segment
    assert segment.reserved
    assert os.stat(segment.path).st_size == 0 and allocated(segment.path) >= SEGMENT
    written = [batch(10, value_size=100, tag=i) for i in range(20)]
    for data in written:
        log.append_as_leader(data, leader_epoch=1)
    assert os.stat(segment.path).st_size == segment.size == sum(len(b) for b in written)
    assert allocated(segment.path) >= SEGMENT
    assert len(read_all(log)) == 20 and log.log_end_offset == 200
    log.close()


def test_the_roll_gives_back_what_the_segment_did_not_use_and_the_next_one_reserves(disk):
    log = open_log(disk, segment_bytes=1 << 20)
    while len(log.segments) < 3:
        log.append_as_leader(batch(10, value_size=1000), leader_epoch=1)
    for finished in log.segments[:-1]:
        assert not finished.reserved
        assert finished.size > 900_000
        assert allocated(finished.path) < finished.size + RESERVED_SLACK_BYTES
        assert allocated(finished.path) < (1 << 20)
    assert log.active_segment.reserved and allocated(log.active_segment.path) >= 1 << 20
    log.close()


def test_off_by_default_nothing_is_reserved(disk):
    log = Log.open(disk / "orders-0", LogConfig(segment_bytes=SEGMENT), clock=ManualClock())
    log.append_as_leader(batch(10, value_size=100), leader_epoch=1)
    segment = log.active_segment
    assert not LogConfig().preallocate and not segment.reserved
    assert allocated(segment.path) < 64 * 1024
    log.close()


def test_a_reopened_log_finds_its_reservation_and_its_roll_gives_it_back(disk):
    log = open_log(disk)
    log.append_as_leader(batch(10, value_size=100), leader_epoch=1)
    log.close()
    log = open_log(disk)  # the same directory after a clean stop
    active = log.active_segment
    assert active.reserved and allocated(active.path) >= SEGMENT
    log.append_as_leader(batch(10, value_size=100, tag=1), leader_epoch=1)
    log.roll()
    assert not active.reserved and allocated(active.path) < RESERVED_SLACK_BYTES
    assert [b[0] for b in read_all(log)] == [0, 10]
    log.close()


def test_after_a_crash_recovery_cuts_a_torn_tail_and_appends_go_on(disk):
    log = open_log(disk)
    for i in range(5):
        log.append_as_leader(batch(10, value_size=100, tag=i), leader_epoch=1)
    path = log.active_segment.path
    good = log.active_segment.size
    log.abandon()  # as a kill -9 leaves it
    with open(path, "ab") as torn:
        torn.write(batch(10, value_size=100, base_offset=50)[:-7])  # the last batch cut short
    log = open_log(disk)
    assert log.log_end_offset == 50 and os.stat(path).st_size == good
    log.append_as_leader(batch(10, value_size=100, tag=9), leader_epoch=1)
    assert [b[0] for b in read_all(log)] == [0, 10, 20, 30, 40, 50]
    log.close()


def test_truncation_gives_the_reservation_back(disk):
    log = open_log(disk)
    for i in range(5):
        log.append_as_leader(batch(10, value_size=100, tag=i), leader_epoch=1)
    log.truncate_to(30)
    segment = log.active_segment
    assert log.log_end_offset == 30 and not segment.reserved
    assert allocated(segment.path) < RESERVED_SLACK_BYTES
    log.close()


def _failing_fallocate(code: int):
    def fallocate(fd, mode, offset, length):
        ctypes.set_errno(code)
        return -1
    return fallocate


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EOPNOTSUPP])
def test_a_disk_that_cannot_reserve_leaves_the_segment_as_without(tmp_path, monkeypatch, code):
    # The system call's answer stood in for: filling the test machine's disk is not an option.
    monkeypatch.setattr(fsutil, "_fallocate", _failing_fallocate(code))
    log = open_log(tmp_path)
    assert not log.active_segment.reserved
    log.append_as_leader(batch(10, value_size=100), leader_epoch=1)
    assert log.log_end_offset == 10
    log.close()


def test_an_io_error_while_reserving_is_raised_and_leaves_no_descriptor(tmp_path, monkeypatch):
    monkeypatch.setattr(fsutil, "_fallocate", _failing_fallocate(errno.EIO))
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    with pytest.raises(OSError) as raised:
        LogSegment.create(tmp_path, 0, 4096, 0, reserve_bytes=SEGMENT)
    assert raised.value.errno == errno.EIO
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before


def test_a_disk_that_runs_out_part_of_the_way_keeps_nothing_reserved(disk, monkeypatch):
    # A file system that runs out of room part of the way keeps what it allocated: here the real call
    # reserves half, then the answer is ENOSPC, as a nearly full disk gives it.
    real = fsutil._fallocate

    def half_then_full(fd, mode, offset, length):
        real(fd, mode, offset, length // 2)
        ctypes.set_errno(errno.ENOSPC)
        return -1

    monkeypatch.setattr(fsutil, "_fallocate", half_then_full)
    log = open_log(disk)
    segment = log.active_segment
    assert not segment.reserved and allocated(segment.path) < RESERVED_SLACK_BYTES
    log.close()


def test_a_segment_that_leaves_the_log_gives_its_reservation_back_at_once(disk):
    # Its files stay for file.delete.delay.ms (readers may hold regions of it): its reservation does not.
    log = open_log(disk)
    log.append_as_leader(batch(10, value_size=100), leader_epoch=1)
    replaced = log.active_segment
    log.truncate_fully_and_start_at(100)  # a follower far behind the leader's log start
    assert log.has_detached_segments and replaced.path.name.endswith(".deleted")
    assert not replaced.reserved and allocated(replaced.path) < RESERVED_SLACK_BYTES
    assert log.active_segment.reserved and log.log_end_offset == 100
    log.close()
