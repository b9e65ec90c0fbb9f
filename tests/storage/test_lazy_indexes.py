"""Indexes read on first use (KIP-263): a log opened after a clean stop leaves its old segments' index
files unread until a read, a timestamp lookup, retention or a truncation needs them; what they then
answer is what an eagerly loaded log answers, a garbled index is rebuilt, and two threads touching
a segment at once see it loaded once and whole."""

from __future__ import annotations

import threading

import attrs

from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.segment import segment_file_name

from ._support import ManualClock, batch, read_all

CONFIG = LogConfig(segment_bytes=300, index_interval_bytes=50)


def written_log(tmp_path, clock: ManualClock, count: int = 40) -> tuple[list, object]:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    for i in range(count):
        log.append_as_leader(batch(2, tag=i, timestamp=clock.now + 10 * i), leader_epoch=1)
    log.update_high_watermark(log.log_end_offset)
    expected = read_all(log)
    offsets = log.offsets
    log.close()
    return expected, offsets


def reopen(tmp_path, clock, offsets, clean=True) -> Log:
    return Log.open(tmp_path / "t-0", CONFIG, clock=clock, offsets=offsets, clean_shutdown=clean)


def deferred(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments if s._deferred]


def test_a_clean_open_defers_every_segment_but_the_active_one(tmp_path):
    clock = ManualClock()
    expected, offsets = written_log(tmp_path, clock)
    log = reopen(tmp_path, clock, offsets)
    assert len(log.segments) > 5
    assert deferred(log) == [s.base_offset for s in log.segments[:-1]]
    assert log.log_end_offset == 80
    # A read from the middle loads the segments it reaches, and only those.
    middle = log.segments[len(log.segments) // 2]
    data = log.read_bytes(middle.base_offset, 100)
    assert data
    assert middle.base_offset not in deferred(log)
    assert log.segments[0].base_offset in deferred(log)
    # Everything reads back as written.
    assert read_all(log) == expected
    assert deferred(log) == []
    log.close()


def test_lookups_by_timestamp_and_retention_see_what_an_eager_load_sees(tmp_path):
    clock = ManualClock()
    expected, offsets = written_log(tmp_path, clock)
    # Not a clean stop and a recovery point of 0: every segment is recovered, nothing deferred.
    eager = reopen(tmp_path, clock, attrs.evolve(offsets, recovery_point=0), clean=False)
    assert deferred(eager) == []
    answers = [eager.offset_for_timestamp(clock.now + t) for t in (0, 55, 205, 395)]
    eager.close()
    lazy = reopen(tmp_path, clock, offsets)
    assert [lazy.offset_for_timestamp(clock.now + t) for t in (0, 55, 205, 395)] == answers
    # Retention by time reads the segments' largest timestamps (loading them) and deletes the old ones.
    clock.advance(7 * 24 * 3600 * 1000 + 1000)
    lazy.config = LogConfig(segment_bytes=300, index_interval_bytes=50, retention_ms=1000)
    assert lazy.delete_old_segments() > 0
    lazy.delete_detached_segments()
    assert lazy.log_start_offset == lazy.segments[0].base_offset > 0
    lazy.close()


def test_a_truncation_into_a_deferred_segment_cuts_where_it_should(tmp_path):
    clock = ManualClock()
    expected, offsets = written_log(tmp_path, clock)
    log = reopen(tmp_path, clock, offsets)
    target = log.segments[2]
    assert target._deferred
    cut = target.base_offset + 2
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert read_all(log) == [b for b in expected if b[1] < cut]
    log.close()


def test_a_garbled_index_of_a_deferred_segment_is_rebuilt_on_first_use(tmp_path):
    clock = ManualClock()
    expected, offsets = written_log(tmp_path, clock)
    first = tmp_path / "t-0" / segment_file_name(0, ".index")
    assert first.stat().st_size > 0
    first.write_bytes(b"\xff" * 12)  # not a whole entry: fails the index's checks
    log = reopen(tmp_path, clock, offsets)
    assert log.segments[0]._deferred
    assert read_all(log) == expected
    assert len(log.segments[0].index) > 0
    log.close()


def test_two_threads_loading_one_segment_see_it_whole(tmp_path):
    clock = ManualClock()
    expected, offsets = written_log(tmp_path, clock, count=60)
    for _ in range(5):
        log = reopen(tmp_path, clock, offsets)
        barrier = threading.Barrier(2)
        results: list = [None, None]

        def reader(slot: int, log: Log = log, barrier: threading.Barrier = barrier, results: list = results) -> None:
            barrier.wait()
            results[slot] = read_all(log)

        threads = [threading.Thread(target=reader, args=(slot,)) for slot in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [expected, expected]
        log.close()


def test_closing_a_log_leaves_deferred_segments_and_their_files_untouched(tmp_path):
    clock = ManualClock()
    expected, offsets = written_log(tmp_path, clock)
    index = tmp_path / "t-0" / segment_file_name(0, ".index")
    before = index.read_bytes()
    log = reopen(tmp_path, clock, offsets)
    log.close()
    assert index.read_bytes() == before
    again = reopen(tmp_path, clock, log.offsets)
    assert read_all(again) == expected
    again.close()


def test_opening_a_log_opens_no_segment_file_and_an_empty_one_reads_no_index(tmp_path, monkeypatch):
    """A broker opens every log at a start, most of them idle: opening one lists its directory once and
    opens no segment file (the descriptor cache opens it at the first read or append); an empty active
    segment's index files are not read, and an index file holding garbage beside an empty segment is
    cut at the next save instead of answering lookups."""
    from kraftpy.storage.descriptors import DESCRIPTORS
    from kraftpy.storage.segment import INDEX_SUFFIX

    clock = ManualClock()
    log = Log.open(tmp_path / "e-0", CONFIG, clock=clock)
    offsets = log.offsets
    log.close()
    index_file = tmp_path / "e-0" / segment_file_name(0, INDEX_SUFFIX)
    index_file.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10")  # an entry no empty segment can have
    listings = []
    real_listdir = __import__("os").listdir
    monkeypatch.setattr("kraftpy.storage.log.os.listdir", lambda p: listings.append(p) or real_listdir(p))
    before = len(DESCRIPTORS)
    log = Log.open(tmp_path / "e-0", CONFIG, clock=clock, offsets=offsets, clean_shutdown=True)
    assert len(listings) == 1
    assert len(DESCRIPTORS) == before
    assert log.segments[-1]._fd == -1
    assert len(log.segments[-1].index) == 0
    log.append_as_leader(batch(2, tag=1, timestamp=clock.now), leader_epoch=1)
    assert log.segments[-1]._fd >= 0  # opened by the append
    assert log.log_end_offset == 2
    log.flush()
    log.close()
    assert b"\x00\x00\x00\x05\x00\x00\x00\x10" not in index_file.read_bytes()
    reopened = Log.open(tmp_path / "e-0", CONFIG, clock=clock, offsets=log.offsets, clean_shutdown=True)
    assert reopened.log_end_offset == 2
    assert reopened.read_bytes(0, 1000)
    reopened.close()
