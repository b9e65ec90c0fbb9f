"""log.writeback.interval.bytes: appended data handed to the kernel's write-back as the log grows."""

from __future__ import annotations

import errno
import mmap
import os
import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import structlog
import trio

from kraftpy.storage.descriptors import DESCRIPTORS
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.log_manager import LogManager
from kraftpy.storage.writeback import Writeback, kernel_start_write

from ._support import ManualClock, batch

INTERVAL = 4096


class Recorder:
    """A ``start_write`` that notes each call (thread, file, range) and, like the kernel's, starts
    nothing; ``covered`` is set once the ranges of the file `expect` names reach the bytes it says."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, int]] = []
        self.covered = threading.Event()
        self._lock = threading.Lock()
        #: The furthest byte the ranges reached, by inode.
        self._reached: dict[int, int] = {}
        self._expected: tuple[int | None, int] | None = None

    def __call__(self, fd: int, offset: int, length: int) -> None:
        inode = os.fstat(fd).st_ino
        with self._lock:
            self.calls.append((threading.get_ident(), inode, offset, length))
            self._reached[inode] = max(self._reached.get(inode, 0), offset + length)
            self._check()

    def expect(self, path: Path | None, until: int) -> None:
        """Set ``covered`` once the ranges of the file at ``path`` (None: of any file) reach ``until``,
        or at once if they did already."""
        with self._lock:
            self._expected = (None if path is None else os.stat(path).st_ino, until)
            self._check()

    def _check(self) -> None:
        if self._expected is not None:
            inode, until = self._expected
            reached = max(self._reached.values(), default=0) if inode is None else self._reached.get(inode, 0)
            if reached >= until:
                self.covered.set()


async def covered(recorder: Recorder) -> None:
    """Wait until ``recorder`` saw its range; a test that fails here fails, it does not hang."""
    with trio.fail_after(30):
        await trio.to_thread.run_sync(recorder.covered.wait, abandon_on_cancel=True)


def open_log(tmp_path, writeback: Writeback, segment_bytes: int = 1 << 30):
    manager = LogManager([tmp_path], clock=ManualClock(), writeback=writeback)
    manager.load()
    return manager.open_log(tmp_path / "orders-0", LogConfig(segment_bytes=segment_bytes))


@asynccontextmanager
async def running(tmp_path, segment_bytes: int = 1 << 30):
    """A log whose write-back runs (its runner stopped on exit), with a `Recorder` for the kernel call."""
    recorder = Recorder()
    writeback = Writeback(INTERVAL, start_write=recorder)
    log = open_log(tmp_path, writeback, segment_bytes)
    async with trio.open_nursery() as nursery:
        await nursery.start(writeback.run)
        yield recorder, writeback, log
        nursery.cancel_scope.cancel()


async def test_appended_ranges_are_handed_over_in_order_from_a_worker_thread(tmp_path):
    async with running(tmp_path) as (recorder, writeback, log):
        record = batch(10, value_size=100)
        while log.active_segment.size < 10 * INTERVAL:
            log.append_as_leader(record, leader_epoch=1)
            await trio.lowlevel.checkpoint()
        segment = log.active_segment
        recorder.expect(segment.path, segment.writeback_from)  # the end of the last range queued
        await covered(recorder)
    assert threading.get_ident() not in {thread for thread, *_ in recorder.calls}
    assert {inode for _, inode, *_ in recorder.calls} == {os.stat(segment.path).st_ino}
    # Contiguous from the start of the file, each range at least the interval, none past the data.
    position = 0
    for _, _, offset, length in recorder.calls:
        assert offset == position and length >= INTERVAL
        position += length
    assert segment.writeback_from == position <= segment.size < position + INTERVAL + mmap.PAGESIZE + len(record)
    assert writeback.requested_bytes == position and writeback.errors == 0


async def test_ranges_end_on_a_page_boundary_short_of_the_page_still_appended_into(tmp_path):
    # The kernel locks a page while it writes it back, and an append into it would wait on the event
    # loop: the last page, still being filled, is never asked for.
    async with running(tmp_path) as (recorder, _, log):
        record = batch(3, value_size=333)  # not a divisor of the page: the log's end falls inside pages
        ends = []
        while log.active_segment.size < 20 * INTERVAL:
            log.append_as_leader(record, leader_epoch=1)
            ends.append(log.active_segment.size)
            await trio.lowlevel.checkpoint()
        segment = log.active_segment
        recorder.expect(segment.path, segment.writeback_from)
        await covered(recorder)
    assert any(end % mmap.PAGESIZE for end in ends)
    assert recorder.calls
    for _, _, offset, length in recorder.calls:
        assert (offset + length) % mmap.PAGESIZE == 0
    # The data past the last range asked for reaches into the page it ends before: not asked for.
    assert segment.writeback_from % mmap.PAGESIZE == 0
    assert segment.writeback_from <= segment.size - segment.size % mmap.PAGESIZE


async def test_each_segment_is_written_back_on_its_own(tmp_path):
    async with running(tmp_path, segment_bytes=3 * INTERVAL) as (recorder, _, log):
        record = batch(10, value_size=100)
        while len(log.segments) < 4:
            log.append_as_leader(record, leader_epoch=1)
            await trio.lowlevel.checkpoint()
        last_full = log.segments[-2]
        recorder.expect(last_full.path, last_full.writeback_from)
        await covered(recorder)
    inodes = {os.stat(s.path).st_ino: s for s in log.segments}
    for full in log.segments[:-1]:
        ranges = [(offset, length) for _, inode, offset, length in recorder.calls
                  if inodes.get(inode) is full]
        assert ranges and ranges[0][0] == 0 and sum(length for _, length in ranges) == full.writeback_from


async def test_off_when_zero_and_quiet_without_the_runner(tmp_path):
    recorder = Recorder()
    off = Writeback(0, start_write=recorder)
    assert not off.enabled
    with trio.fail_after(1):
        await off.run()  # returns at once: nothing to run
    log = open_log(tmp_path, off)
    log.append_as_leader(batch(100, value_size=100), leader_epoch=1)
    # On, but its runner not started (a log opened by a tool, or before the broker runs): nothing queued.
    idle = Writeback(INTERVAL, start_write=recorder)
    other = open_log(tmp_path / "other", idle)
    other.append_as_leader(batch(100, value_size=100), leader_epoch=1)
    assert recorder.calls == [] and other.active_segment.writeback_from == 0
    assert Writeback(INTERVAL, start_write=None).enabled is (kernel_start_write() is not None)


async def test_truncation_moves_the_mark_back(tmp_path):
    async with running(tmp_path) as (_, _, log):
        for _ in range(10):
            log.append_as_leader(batch(10, value_size=100), leader_epoch=1)
        assert log.active_segment.writeback_from > 0
        log.truncate_to(1)
        assert log.active_segment.writeback_from == log.active_segment.size


async def test_a_segment_whose_descriptor_was_closed_is_skipped(tmp_path):
    recorder = Recorder()
    writeback = Writeback(INTERVAL, start_write=recorder)
    log = open_log(tmp_path, writeback)
    segment = log.active_segment
    DESCRIPTORS.closed(segment)  # as the descriptor cache does beyond log.open.segments.max
    writeback._write_out({segment: (0, INTERVAL)})
    assert recorder.calls == [] and writeback.requested_bytes == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_kernel_call(tmp_path):
    start_write = kernel_start_write()
    assert start_write is not None
    path = tmp_path / "data"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x" * 65536)
        start_write(fd, 0, 65536)  # starts the write; nothing to wait for
    finally:
        os.close(fd)
    with pytest.raises(OSError) as refused:
        start_write(fd, 0, 65536)
    assert refused.value.errno == errno.EBADF


async def test_a_failed_call_is_counted_and_the_next_range_still_goes(tmp_path):
    calls = []

    def failing(fd: int, offset: int, length: int) -> None:
        calls.append(offset)
        if len(calls) == 1:
            raise OSError(errno.EIO, "I/O error")

    writeback = Writeback(INTERVAL, start_write=failing)
    log = open_log(tmp_path, writeback)
    segment = log.active_segment
    log.append_as_leader(batch(100, value_size=100), leader_epoch=1)
    writeback._write_out({segment: (0, INTERVAL)})
    writeback._write_out({segment: (INTERVAL, 2 * INTERVAL)})
    assert calls == [0, INTERVAL]
    assert writeback.errors == 1 and writeback.requested_bytes == INTERVAL


async def test_a_brokers_leader_and_follower_logs_are_written_back(tmp_path):
    """Two brokers of the in-memory harness, log.writeback.interval.bytes=4096: acks=all produces to
    a partition of replication factor 2 reach the kernel's write-back on both, leader and follower."""
    from kraftpy.broker.client import KafkaConnection
    from tests.helpers.cluster import open_cluster
    from tests.helpers.protocol import produce

    async with open_cluster(tmp_path, brokers=2, log_writeback_interval_bytes=INTERVAL) as cluster:
        await cluster.create_topic("orders", partitions=1, replication_factor=2)
        recorders = {}
        for broker_id, broker in cluster.brokers.items():
            writeback = broker.replicas.writeback
            assert writeback.interval_bytes == INTERVAL and writeback.enabled
            recorders[broker_id] = recorder = Recorder()
            recorder.expect(None, 2 * INTERVAL)  # well within what 16 batches leave handed over, however replicated
            writeback._start_write = recorder
        leader = cluster.image.topics.get_by_name("orders").partitions[0].leader
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader]) as conn:
            for i in range(16):
                answer = await produce(conn, "orders", 0, batch(10, value_size=100, tag=i))
                assert answer.error_code == 0
        for recorder in recorders.values():
            await covered(recorder)
            assert recorder.calls[0][2] == 0


async def test_a_descriptor_that_cannot_be_duplicated_is_counted_not_raised(tmp_path):
    """os.dup fails with EMFILE at the open-file limit (EBADF here): the range is skipped and counted,
    the runner goes on (an exception would end the broker's nursery)."""
    recorder = Recorder()
    writeback = Writeback(INTERVAL, start_write=recorder)
    log = open_log(tmp_path, writeback)
    log.append_as_leader(batch(100, value_size=100), leader_epoch=1)
    fd = os.open(tmp_path / "gone", os.O_RDWR | os.O_CREAT)
    os.close(fd)

    class Closed:
        """A holder whose descriptor number no longer names an open file."""
        _fd, _pins, path = fd, 0, tmp_path / "gone"

    writeback._write_out({Closed(): (0, INTERVAL), log.active_segment: (0, INTERVAL)})
    assert writeback.errors == 1 and writeback.requested_bytes == INTERVAL
    assert [(offset, length) for _, _, offset, length in recorder.calls] == [(0, INTERVAL)]


async def test_a_file_system_that_takes_no_write_back_is_told_once_not_counted(tmp_path):
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    writeback = Writeback(INTERVAL, start_write=unsupported)
    log = open_log(tmp_path, writeback)
    log.append_as_leader(batch(100, value_size=100), leader_epoch=1)
    with structlog.testing.capture_logs() as logs:
        writeback._write_out({log.active_segment: (0, INTERVAL)})
        writeback._write_out({log.active_segment: (INTERVAL, 2 * INTERVAL)})
    assert writeback.errors == 0 and writeback.requested_bytes == 0
    told = [line for line in logs if "does not take write-back requests" in line["event"]]
    assert len(told) == 1 and told[0]["log_level"] == "info"


async def test_an_append_on_a_worker_thread_wakes_the_runner(tmp_path):
    async with running(tmp_path) as (recorder, _, log):
        def append_elsewhere() -> None:
            for i in range(10):
                log.append_as_leader(batch(10, value_size=100, tag=i), leader_epoch=1)

        await trio.to_thread.run_sync(append_elsewhere)
        segment = log.active_segment
        assert segment.writeback_from > 0
        recorder.expect(segment.path, segment.writeback_from)
        await covered(recorder)


def test_the_logs_import_no_trio():
    """Only the write-back's runner is a trio task: the logs and their manager stay blocking code."""
    import subprocess

    probe = "import sys, kraftpy.storage.log_manager, kraftpy.storage.log; print('trio' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
