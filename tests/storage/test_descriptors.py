"""The bounded cache of open segment descriptors (log.open.segments.max): logs of many segments
stay readable and writable with few files open, a pinned descriptor is never closed, and a closed
one is opened again by the segment's current name."""

from __future__ import annotations

import os
import resource
import threading

import pytest

from kraftpy.storage.checkpoint import LogOffsets
from kraftpy.storage.descriptors import (
    DESCRIPTORS,
    DescriptorCache,
    close_descriptors,
    configure_descriptors,
    default_capacity,
)
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig

from ._support import ManualClock, batch, read_all


@pytest.fixture
def capacity():
    """Set the process cache's capacity for a test; trims to it at the end, then restores it."""
    saved = DESCRIPTORS.capacity

    def set_capacity(value: int) -> None:
        DESCRIPTORS.capacity = value

    yield set_capacity
    DESCRIPTORS.capacity = saved


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def segment_fds(log: Log) -> set[int]:
    return {segment._fd for segment in log.segments if segment._fd >= 0}


def test_a_log_of_many_segments_is_read_and_written_with_few_descriptors_open(tmp_path, capacity):
    capacity(4)
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), clock=ManualClock())
    written = []
    for i in range(40):
        log.append_as_leader(batch(1, tag=i), leader_epoch=0)
        written.append(i)
    assert len(log.segments) >= 20
    DESCRIPTORS.trim()
    assert len(segment_fds(log)) <= 4
    # Every record reads back, each segment opened again as the read reaches it; then trimmed again.
    before = DESCRIPTORS.reopens
    assert [base for base, *_ in read_all(log)] == written
    assert DESCRIPTORS.reopens - before >= len(log.segments) - 4
    DESCRIPTORS.trim()
    assert len(segment_fds(log)) <= 4
    # An append after the active segment's descriptor was closed writes where it should.
    for segment in log.segments:
        DESCRIPTORS.pin(segment)
        DESCRIPTORS.unpin(segment)
    DESCRIPTORS.trim(0)
    assert segment_fds(log) == set()
    log.append_as_leader(batch(1, tag=99), leader_epoch=0)
    assert [base for base, *_ in read_all(log)] == [*written, 40]
    offsets = log.offsets
    log.close()

    # Opened again (cleanly), the 20-odd segments do not hold a descriptor each.
    held = len(open_fds())
    again = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), clock=ManualClock(), offsets=offsets,
                     clean_shutdown=True)
    assert len(open_fds()) - held <= 4 + 1
    assert [base for base, *_ in read_all(again)] == [*written, 40]
    again.close()


def test_recovery_and_retention_work_on_segments_whose_descriptors_were_closed(tmp_path, capacity):
    capacity(2)
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200, retention_ms=1000), clock=clock)
    for i in range(12):
        log.append_as_leader(batch(1, tag=i, timestamp=clock.now), leader_epoch=0)
    log.close()
    # Not closed cleanly: every segment past the recovery point (0) is recovered, CRCs checked.
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200, retention_ms=1000), clock=clock,
                   offsets=LogOffsets(log_start_offset=0, recovery_point=0, high_watermark=12))
    assert log.log_end_offset == 12
    DESCRIPTORS.trim()
    assert len(segment_fds(log)) <= 2
    clock.advance(5000)
    # Retention renames every expired segment for deletion (the active one too, after a roll), then
    # closes and removes them, those whose descriptors were closed included.
    expired = len(log.segments)
    assert expired > 2
    assert log.delete_old_segments() == expired
    assert log.delete_detached_segments() == expired
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (12, 12, 1)
    assert not [name for name in os.listdir(tmp_path / "t-0") if name.endswith(".deleted")]
    log.close()


def test_a_closed_descriptor_is_opened_again_under_the_segments_new_name(tmp_path, capacity):
    capacity(1)
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), clock=ManualClock())
    for i in range(6):
        log.append_as_leader(batch(1, tag=i), leader_epoch=0)
    first = log.segments[0]
    first.rename_to_deleted()
    DESCRIPTORS.trim(0)
    assert first._fd == -1
    assert first.path.name.endswith(".log.deleted")
    header = first.read_header_at(0)
    assert header.base_offset == 0
    log.close()


def test_trim_never_closes_a_pinned_descriptor(tmp_path, capacity):
    capacity(0)
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), clock=ManualClock())
    for i in range(4):
        log.append_as_leader(batch(1, tag=i), leader_epoch=0)
    segment = log.segments[0]
    with DESCRIPTORS.pinned(segment) as fd:
        DESCRIPTORS.trim()
        assert segment._fd == fd
        assert os.pread(fd, 8, 0) == (0).to_bytes(8, "big")
    DESCRIPTORS.trim()
    assert segment._fd == -1
    log.close()


def test_worker_threads_read_while_the_event_loop_thread_trims(tmp_path, capacity):
    """Reads from worker threads (read_bytes pins the segment) never see a descriptor closed under
    them, however often another thread trims the cache to nothing."""
    capacity(0)
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300), clock=ManualClock())
    for i in range(30):
        log.append_as_leader(batch(2, tag=i), leader_epoch=0)
    expected = read_all(log)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                assert read_all(log) == expected
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3000):
            DESCRIPTORS.trim()
            if stop.is_set():
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    log.close()


def test_the_capacity_defaults_to_half_the_open_file_limit_raised_to_the_hard_one():
    saved = DESCRIPTORS.capacity
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if soft > 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        capacity, limit = configure_descriptors(0)
        assert limit == resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
        assert capacity == default_capacity(hard) == max(64, hard // 2)
        assert configure_descriptors(77) == (77, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        DESCRIPTORS.capacity = saved


def test_a_cache_counts_what_it_closed_and_opened_again(tmp_path):
    cache = DescriptorCache(1)

    class Holder:
        def __init__(self, path):
            self.path, self._pins = path, 0
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            cache.opened(self)

        def _reopen(self):
            return os.open(self.path, os.O_RDWR)

    a, b = Holder(tmp_path / "a"), Holder(tmp_path / "b")
    assert cache.trim() == 1 and a._fd == -1 and b._fd >= 0 and len(cache) == 1
    cache.pin(a)
    cache.unpin(a)
    assert (cache.evictions, cache.reopens, len(cache)) == (1, 1, 2)
    assert cache.trim() == 1 and b._fd == -1  # b is now the least recently used
    cache.closed(a)
    cache.closed(b)
    assert len(cache) == 0


def test_evicted_descriptors_stay_open_for_their_closer_and_their_segments_open_their_files_again(
        tmp_path, capacity):
    capacity(3)
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200), clock=ManualClock())
    for i in range(30):
        log.append_as_leader(batch(1, tag=i), leader_epoch=0)
    held = segment_fds(log)
    assert len(held) > 3
    detached = DESCRIPTORS.evict()
    assert len(detached) == len(held) - 3 and set(detached) <= held
    assert set(detached) <= open_fds()  # still open: the caller closes them
    assert len(segment_fds(log)) == 3 and not set(detached) & segment_fds(log)
    close_descriptors(detached)
    for fd in detached:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed (nothing opened since could have taken its number)
    assert [base for base, *_ in read_all(log)] == list(range(30))  # every segment opens its file again
    log.close()
