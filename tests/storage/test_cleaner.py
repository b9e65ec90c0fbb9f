"""The log cleaner, pass by pass: what a cleaned log keeps, what it drops, and where a pass stops."""

from __future__ import annotations

import os
import threading

import attrs
import pytest

from kraftpy.broker import producer_state as ps
from kraftpy.protocol.batch_header import CorruptRecordError, iter_batches, read_header
from kraftpy.protocol.compression import Compression
from kraftpy.protocol.records import SimpleRecord, build_batch, iter_decoded
from kraftpy.storage import offset_map
from kraftpy.storage.checkpoint import CheckpointError
from kraftpy.storage.cleaner import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    DELETE_HORIZON_BIT,
    Cleaner,
    CleanerConfig,
    CleaningAborted,
    Throttler,
    log_to_clean,
    read_cleaner_checkpoint,
    write_cleaner_checkpoint,
)
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.offset_map import OffsetMap

from ._support import ManualClock

DAY = 86_400_000


@pytest.fixture(params=["c", "python"] if offset_map.ACCELERATED else ["python"])
def accelerated(request) -> bool:
    """Every test runs with the C record loops and with the Python ones: both must answer alike."""
    return request.param == "c"


def compacted(segment_bytes: int = 1200, **overrides) -> LogConfig:
    return LogConfig(segment_bytes=segment_bytes, compact=True, delete=False, **overrides)


def keyed(*pairs: tuple[bytes | None, bytes | None], timestamp: int, **fields) -> bytes:
    return build_batch([SimpleRecord(key, value, timestamp=timestamp) for key, value in pairs], **fields)


def decoded(log: Log) -> list:
    """Every record of the log, every batch CRC-checked on the way."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 20, whole_batches=True)
        if not data:
            break
        for batch in iter_decoded(data):  # verifies CRCs
            out.extend(batch.records)
            offset = batch.next_offset
    return out


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record."""
    return [(r.offset, r.key, r.value) for r in decoded(log)]


def headers(log: Log):
    out = []
    for segment in log.segments:
        out.extend(header for _, header in segment.batches_from(0))
    return out


def clean(log: Log, clock: ManualClock, accelerated: bool, checkpoint: int | None = None, *,
          producers=None, memory: int = 1 << 20):
    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=memory), accelerated=accelerated)
    to_clean = log_to_clean(log, checkpoint, clock())
    result = cleaner.clean(log, to_clean, clock(), producers)
    swapped = result.swap_in(log)
    return result, swapped


def fill(log: Log, clock: ManualClock, count: int, keys: int, *, tombstone_every: int = 0) -> None:
    for i in range(count):
        value = None if tombstone_every and i % tombstone_every == tombstone_every - 1 else b"v%d" % i
        log.append_as_leader(keyed((b"k%d" % (i % keys), value), timestamp=clock()), 0)
        clock.advance(1)
    log.update_high_watermark(log.log_end_offset)


def last_values(recs) -> dict[bytes, tuple[int, bytes | None]]:
    out = {}
    for offset, key, value in recs:
        out[key] = (offset, value)
    return out


def test_a_pass_keeps_the_last_record_of_each_key_and_the_offsets(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(), clock=clock)
    fill(log, clock, 200, 9)
    before = records(log)
    result, swapped = clean(log, clock, accelerated)
    after = records(log)
    assert swapped >= 1
    cleaned_end = result.copied_up_to
    assert cleaned_end == log.active_segment.base_offset
    # Below the cleaned end: one record per key, each the last of its key; above: untouched.
    below = [r for r in after if r[0] < cleaned_end]
    assert len({key for _, key, _ in below}) == len(below)
    assert last_values(after) == last_values(before)
    assert [r for r in after if r[0] >= cleaned_end] == [r for r in before if r[0] >= cleaned_end]
    assert [r[0] for r in after] == sorted({r[0] for r in after})
    assert log.log_end_offset == 200 and log.log_start_offset == 0
    assert result.next_dirty_offset == cleaned_end
    assert result.stats.records_kept < result.stats.records_read
    log.close()
    reopened = Log.open(tmp_path, compacted(), clock=clock)
    assert records(reopened) == after
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".cleaned", ".swap", ".deleted"))]
    reopened.close()


def test_the_active_segment_and_the_segment_holding_the_high_watermark_are_never_cleaned(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=700), clock=clock)
    fill(log, clock, 120, 3)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    log.update_high_watermark(bases[2] + 1)  # inside the third segment
    before = records(log)
    result, _ = clean(log, clock, accelerated)
    assert result.copied_up_to == bases[2]
    after = records(log)
    assert [r for r in after if r[0] >= bases[2]] == [r for r in before if r[0] >= bases[2]]
    assert len([r for r in after if r[0] < bases[2]]) <= 3


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=700, min_compaction_lag_ms=60_000), clock=clock)
    fill(log, clock, 40, 2)
    clock.advance(120_000)
    young_from = log.log_end_offset
    fill(log, clock, 80, 2)
    before = records(log)
    to_clean = log_to_clean(log, None, clock())
    young_segment = max(s.base_offset for s in log.segments if s.base_offset <= young_from)
    assert to_clean.first_uncleanable_offset == young_segment
    result, _ = clean(log, clock, accelerated)
    after = records(log)
    assert [r for r in after if r[0] >= young_segment] == [r for r in before if r[0] >= young_segment]
    assert result.next_dirty_offset == young_segment


def test_the_dirty_ratio_and_max_compaction_lag_decide_when_a_log_is_due(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=700, max_compaction_lag_ms=3_600_000), clock=clock)
    fill(log, clock, 100, 5)
    fresh = log_to_clean(log, None, clock())
    assert fresh.clean_bytes == 0 and fresh.cleanable_ratio == 1.0 and fresh.due(0.5)
    active = log.active_segment.base_offset
    cleaned_up = log_to_clean(log, active, clock())
    assert cleaned_up.cleanable_bytes == 0 and not cleaned_up.due(0.5)
    second = log.segments[-2].base_offset  # the last segment before the active one is dirty
    mostly_clean = log_to_clean(log, second, clock())
    assert 0 < mostly_clean.cleanable_ratio < 0.9
    assert not mostly_clean.due(0.9) and not mostly_clean.needs_compaction_now
    clock.advance(3_600_001)
    overdue = log_to_clean(log, second, clock())
    assert overdue.needs_compaction_now and overdue.due(0.9)
    assert log_to_clean(log, active, clock(), earliest_horizon=clock() - 1).due(0.9)
    assert log_to_clean(log, 10**9, clock()).checkpoint_reset


def test_tombstones_get_a_delete_horizon_then_go_after_delete_retention(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=600, delete_retention_ms=DAY), clock=clock)
    log.append_as_leader(keyed((b"a", b"1"), (b"b", b"1"), timestamp=clock()), 0)
    log.append_as_leader(keyed((b"a", None), (b"c", b"1"), timestamp=clock()), 0)  # a deleted
    log.roll()
    log.append_as_leader(keyed((b"d", b"1"), timestamp=clock()), 0)
    log.update_high_watermark(log.log_end_offset)
    first, _ = clean(log, clock, accelerated)
    assert records(log)[:3] == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    tombstone_batch = headers(log)[1]
    assert tombstone_batch.attributes & DELETE_HORIZON_BIT
    assert tombstone_batch.base_timestamp == clock() + DAY == first.earliest_horizon
    assert tombstone_batch.base_offset == 2 and tombstone_batch.last_offset == 3
    clock.advance(DAY - 1)
    clean(log, clock, accelerated, first.next_dirty_offset)
    assert (2, b"a", None) in records(log)
    clock.advance(1)
    due = log_to_clean(log, first.next_dirty_offset, clock(), earliest_horizon=first.earliest_horizon)
    assert due.tombstones_due
    last, _ = clean(log, clock, accelerated, first.next_dirty_offset)
    assert [r for r in records(log) if r[1] == b"a"] == []
    assert last.earliest_horizon is None
    # The record timestamps survive the new base timestamp.
    assert {r.key: r.timestamp for r in decoded(log)} == {
        b"b": ManualClock().now, b"c": ManualClock().now, b"d": ManualClock().now}


def test_records_without_a_key_are_dropped(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=400), clock=clock)
    log.append_as_leader(keyed((None, b"x"), (b"a", b"1"), (None, b"y"), timestamp=clock()), 0)
    log.roll()
    log.append_as_leader(keyed((b"b", b"1"), timestamp=clock()), 0)
    log.update_high_watermark(log.log_end_offset)
    result, _ = clean(log, clock, accelerated)
    assert records(log) == [(1, b"a", b"1"), (3, b"b", b"1")]
    assert result.stats.keyless_dropped == 2
    batch = headers(log)[0]
    assert (batch.base_offset, batch.last_offset_delta, batch.record_count) == (0, 2, 1)


def test_the_last_batch_of_a_live_producer_stays_as_an_empty_batch(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=400), clock=clock)
    state = ps.ProducerStateManager()
    for sequence in range(3):
        data = keyed((b"a", b"p%d" % sequence), (b"b", b"p%d" % sequence), timestamp=clock(),
                     producer_id=7, producer_epoch=2, base_sequence=sequence * 2)
        info = log.append_as_leader(data, 0)
        state.update(read_header(data), info.first_offset)
    gone = keyed((b"x", b"1"), timestamp=clock(), producer_id=8, producer_epoch=0, base_sequence=0)
    info = log.append_as_leader(gone, 0)
    log.roll()
    # Newer values for every key above: every producer batch loses all of its records.
    log.append_as_leader(keyed((b"a", b"new"), (b"b", b"new"), (b"x", b"new"), timestamp=clock()), 0)
    log.roll()
    log.append_as_leader(keyed((b"z", b"1"), timestamp=clock()), 0)
    log.update_high_watermark(log.log_end_offset)

    def replayed() -> tuple:
        rebuilt = ps.ProducerStateManager()
        rebuilt.rebuild(None, headers(log))
        return rebuilt.snapshot_entries()

    before = replayed()
    # Producer 8 expired from the producer state: its batch may go entirely.
    result, _ = clean(log, clock, accelerated, producers={7: state.entry(7).last_offset})
    kept = [h for h in headers(log) if h.producer_id != -1]
    assert [(h.producer_id, h.base_offset, h.last_offset, h.base_sequence, h.record_count) for h in kept] == [
        (7, 4, 5, 4, 0)]
    assert result.stats.batches_emptied == 4
    assert [e for e in replayed() if e.producer_id == 7] == [e for e in before if e.producer_id == 7]
    assert records(log)[:3] == [(7, b"a", b"new"), (8, b"b", b"new"), (9, b"x", b"new")]


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches_are_recompressed_with_their_codec(tmp_path, accelerated, codec):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=500), clock=clock)
    log.append_as_leader(keyed((b"a", b"1"), (b"b", b"1"), (b"c", b"1"), timestamp=clock(), compression=codec), 3)
    log.append_as_leader(keyed((b"a", b"2"), timestamp=clock()), 3)
    log.roll()
    log.append_as_leader(keyed((b"q", b"1"), timestamp=clock()), 3)
    log.update_high_watermark(log.log_end_offset)
    clean(log, clock, accelerated)
    batches = headers(log)
    assert batches[0].compression == codec and batches[0].record_count == 2
    assert (batches[0].base_offset, batches[0].last_offset, batches[0].partition_leader_epoch) == (0, 2, 3)
    assert records(log) == [(1, b"b", b"1"), (2, b"c", b"1"), (3, b"a", b"2"), (4, b"q", b"1")]


def test_a_full_offset_map_cleans_up_to_where_it_ends_and_the_next_pass_goes_on(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=900), clock=clock)
    for i in range(60):  # 60 distinct keys, then each again
        log.append_as_leader(keyed((b"key-%02d" % i, b"v"), timestamp=clock()), 0)
    for i in range(60):
        log.append_as_leader(keyed((b"key-%02d" % i, b"w"), timestamp=clock()), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    before = records(log)
    # 64 slots (24 bytes each) at a load factor of 0.9: 57 keys at most.
    first, _ = clean(log, clock, accelerated, memory=64 * 24)
    assert first.next_dirty_offset == 57
    assert last_values(records(log)) == last_values(before)
    second, _ = clean(log, clock, accelerated, first.next_dirty_offset, memory=64 * 24)
    assert second.next_dirty_offset > 57
    while second.next_dirty_offset < log.active_segment.base_offset:
        second, _ = clean(log, clock, accelerated, second.next_dirty_offset, memory=64 * 24)
    third, _ = clean(log, clock, accelerated, second.next_dirty_offset, memory=64 * 24)
    assert [value for _, _, value in records(log)] == [b"w"] * 60
    assert third.stats.records_read == 60


def test_groups_stay_within_segment_bytes_and_int32_offsets(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=10_000), clock=clock)
    # A follower's log with huge offset gaps: each segment's offsets are 2^31 apart.
    for i in range(4):
        base = i * 2**31
        if i:
            log.roll(base)
        log.append_as_follower(keyed((b"k%d" % i, b"v"), timestamp=clock(), base_offset=base))
    log.roll(4 * 2**31)
    log.append_as_follower(keyed((b"z", b"v"), timestamp=clock(), base_offset=4 * 2**31))
    log.update_high_watermark(log.log_end_offset)
    result, _ = clean(log, clock, accelerated)
    for swap in result.swaps:
        assert swap.replaces[-1].base_offset + 2**31 - 1 - swap.cleaned.base_offset <= 2**31 - 1
    assert [s.base_offset for s in log.segments] == [0, 2**31, 2 * 2**31, 3 * 2**31, 4 * 2**31]
    small = Log.open(tmp_path / "small", compacted(segment_bytes=300), clock=clock)
    fill(small, clock, 30, 30)  # nothing to drop: groups can only merge segments up to segment.bytes
    clean(small, clock, accelerated)
    assert all(s.size <= 300 for s in small.segments[:-1])
    assert len(records(small)) == 30


def test_a_group_always_ends_with_a_segment_that_produced_output(tmp_path, accelerated):
    """The swap protocol's recovery finds what a swap replaced by its offsets: a group's last
    segment must leave a batch in it, or the group must be that one segment."""
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(segment_bytes=350), clock=clock)
    for round_ in range(6):
        fill(log, clock, 6, 3)  # every round rewrites the same three keys
        log.roll()
        log.append_as_leader(keyed((b"keep-%d" % round_, b"x"), timestamp=clock()), 0)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    before = records(log)
    result, _ = clean(log, clock, accelerated)
    assert len(result.swaps) >= 2
    for swap in result.swaps:
        if len(swap.replaces) > 1:
            assert swap.replaces[-1].base_offset < swap.cleaned.next_offset
    assert last_values(records(log)) == last_values(before)


def test_an_aborted_pass_leaves_no_file(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(), clock=clock)
    fill(log, clock, 200, 5)
    abort = threading.Event()
    abort.set()
    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 16), accelerated=accelerated)
    with pytest.raises(CleaningAborted):
        cleaner.clean(log, log_to_clean(log, None, clock()), clock(), {}, abort)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".cleaned")]


def test_a_damaged_batch_stops_the_pass_before_anything_is_swapped(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(), clock=clock)
    fill(log, clock, 200, 5)
    first = log.segments[0]
    second = first.read_header_at(0).size  # where the second batch starts
    with open(first.path, "r+b") as f:  # the last byte of its value: the map reads it, only the CRC can tell
        f.seek(second + first.read_header_at(second).size - 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 16), accelerated=accelerated)
    with pytest.raises(CorruptRecordError, match=rf"CRC mismatch in {first.path.name} \(at byte {second}\)"):
        cleaner.clean(log, log_to_clean(log, None, clock()), clock(), {})
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".cleaned")]


@pytest.mark.skipif(not offset_map.ACCELERATED, reason="the C record loops are not compiled")
def test_the_copys_crc32c_is_kafkas_with_and_without_the_processor_instruction():
    import crc32c

    from kraftpy.protocol import _record_scan

    data = os.urandom(3 * 8192 * 2 + 777)
    # Lengths around the blocks of three streams (768 and 24,576 bytes), from every alignment.
    for length in [*range(0, 80), 767, 768, 769, 2400, 24575, 24576, 24577, 50000]:
        for start in range(8):
            view = memoryview(data)[start: start + length]
            assert _record_scan.crc32c(view) == crc32c.crc32c(view) == _record_scan.crc32c(view, True)


def test_segments_that_changed_meanwhile_are_not_swapped_and_their_files_go(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, LogConfig(segment_bytes=600, compact=True, delete=True, retention_ms=1000),
                   clock=clock)
    fill(log, clock, 100, 5)
    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 16), accelerated=accelerated)
    result = cleaner.clean(log, log_to_clean(log, None, clock()), clock(), {})
    assert result.swaps
    clock.advance(10_000)
    assert log.delete_old_segments() > 0  # compact,delete: retention ran between the copy and the swap
    assert result.swap_in(log) == 0
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".cleaned", ".swap"))]


def test_retention_by_time_applies_only_with_the_delete_policy(tmp_path):
    clock = ManualClock()
    for policy, survives in (({"compact": True, "delete": False}, True), ({"compact": True, "delete": True}, False)):
        log = Log.open(tmp_path / str(survives), LogConfig(segment_bytes=300, retention_ms=1000, **policy),
                       clock=clock)
        fill(log, clock, 20, 20)
        clock.advance(10_000)
        assert log.retention_due() is not survives
        log.delete_old_segments()
        assert (log.log_start_offset == 0) is survives


def test_a_reader_holding_a_region_of_a_replaced_segment_still_reads_it(tmp_path, accelerated):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(), clock=clock)
    fill(log, clock, 100, 3)
    region = log.read(0, 1 << 20)
    expected = region.read_bytes()
    clean(log, clock, accelerated)
    assert region.read_bytes() == expected
    assert list(iter_batches(expected))
    assert log.delete_detached_segments() > 0


def test_the_cleaner_offset_checkpoint_round_trips_in_kafkas_format(tmp_path):
    offsets = {("__consumer_offsets", 7): 1234, ("table", 0): 0}
    write_cleaner_checkpoint(tmp_path, offsets)
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).read_text() == (
        "0\n2\n__consumer_offsets 7 1234\ntable 0 0\n")
    assert read_cleaner_checkpoint(tmp_path) == offsets
    assert read_cleaner_checkpoint(tmp_path / "nowhere") == {}
    (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).write_text("0\n1\ntable 0 -3\n")
    with pytest.raises(CheckpointError, match="cleaner-offset-checkpoint: line 3"):
        read_cleaner_checkpoint(tmp_path)


def test_the_throttler_sleeps_the_bytes_back_to_the_rate():
    now = [0.0]
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttler = Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    throttler.CHECK_INTERVAL_S = 0.25
    for _ in range(36):  # 500 bytes every 125 ms: four times the rate
        now[0] += 0.125
        throttler.maybe_throttle(500)
    # Checked every 0.25 s of the caller's time, each check sleeps what its bytes were owed.
    assert slept == pytest.approx([0.75] * 18)
    assert 36 * 500 / now[0] == pytest.approx(1000.0)
    calm = Throttler(10_000.0, clock=lambda: now[0], sleep=sleep)
    before = len(slept)
    for _ in range(10):
        now[0] += 0.1
        calm.maybe_throttle(100)
    assert len(slept) == before


def test_a_throttled_pass_takes_as_long_as_its_bytes_at_the_rate(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path, compacted(), clock=clock)
    fill(log, clock, 300, 10)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    throttler = Throttler(10_000.0, clock=lambda: now[0], sleep=sleep)
    throttler.CHECK_INTERVAL_S = 0.0
    cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 16, io_buffer_size=1024), throttler)
    result = cleaner.clean(log, log_to_clean(log, None, clock()), clock(), {})
    moved = result.stats.map_bytes_read + result.stats.bytes_read + result.stats.bytes_written
    assert now[0] == pytest.approx(moved / 10_000.0, rel=0.2)
    result.discard()


def test_an_offset_map_too_small_for_one_key_is_refused():
    with pytest.raises(ValueError, match="log.cleaner.dedupe.buffer.size"):
        OffsetMap(24)
    assert OffsetMap(1 << 20).capacity == int((1 << 15) * 0.9)


@pytest.mark.skipif(not offset_map.ACCELERATED, reason="the C record loops are not compiled")
def test_the_c_record_loops_answer_as_the_python_ones():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kraftpy.protocol.batch_header import HEADER_SIZE
    from kraftpy.protocol.records import decode_records

    record = st.tuples(st.sampled_from([None, b"a", b"b", b"c", b"long-key-" * 3]),
                       st.one_of(st.none(), st.binary(max_size=20)),
                       st.integers(-10**6, 10**6),
                       st.lists(st.tuples(st.sampled_from(["h", "ü"]), st.one_of(st.none(), st.binary(max_size=3))),
                                max_size=2))

    @settings(max_examples=200, deadline=None)
    @given(batches=st.lists(st.lists(record, min_size=1, max_size=12), min_size=1, max_size=6),
           latest_cut=st.integers(0, 80), first_dirty=st.integers(0, 80), retain_tombstones=st.booleans(),
           shift=st.integers(-10**9, 10**9))
    def check(batches, latest_cut, first_dirty, retain_tombstones, shift):
        encoded, offset = [], 0
        for records in batches:
            data = build_batch([SimpleRecord(k, v, headers=h, timestamp=1_700_000_000_000 + t) for k, v, t, h in records],
                               base_offset=offset)
            encoded.append((data, offset, len(records)))
            offset += len(records)
        maps = {}
        for accelerated in (True, False):
            m = OffsetMap(1 << 16, accelerated=accelerated)
            # Records below the first dirty offset are looked up by their keys' hashes, the others (in C)
            # in the bitmap of superseded offsets.
            first = min(first_dirty, offset)
            m.reset(offset - first, first)
            for data, base, count in encoded:
                assert m.put_records(data, HEADER_SIZE, count, base, first)[0] == count
            m.latest_offset = min(latest_cut, offset - 1)
            maps[accelerated] = m
        for data, base, count in encoded:
            c = maps[True].filter_records(data, HEADER_SIZE, count, base, retain_tombstones)
            py = maps[False].filter_records(data, HEADER_SIZE, count, base, retain_tombstones)
            assert c == py
            rewritten = {a: maps[a].rewrite_records(data, HEADER_SIZE, count, c.mask, shift) for a in (True, False)}
            assert decode_records(rewritten[True], c.kept) == decode_records(rewritten[False], c.kept)

    check()


@pytest.mark.skipif(not offset_map.ACCELERATED, reason="the C record loops are not compiled")
def test_the_offset_map_grows_as_keys_arrive_and_loses_none():
    from kraftpy.protocol.batch_header import HEADER_SIZE

    keys = 100 * (3 * offset_map.INITIAL_SLOTS // 100 + 1)  # the table has to double twice

    def every_key_once(first: int) -> list[tuple[bytes, int]]:
        """(batch, base offset): key-i at offset first + i, 100 records a batch."""
        return [(build_batch([SimpleRecord(b"key-%d" % (b * 100 + i), b"v", timestamp=0) for i in range(100)],
                             base_offset=first + b * 100), first + b * 100) for b in range(keys // 100)]

    clean_part, dirty_part = every_key_once(0), every_key_once(keys)
    dirty = b"".join(data for data, _ in dirty_part)
    maps = {}
    for accelerated in (True, False):
        m = OffsetMap(1 << 24, accelerated=accelerated)
        m.reset(keys, keys)
        position, latest, _, state = m.put_batches(dirty, 0, keys, -1)
        assert (position, latest, state) == (len(dirty), 2 * keys - 1, 0)
        assert m.size == keys
        m.latest_offset = latest
        maps[accelerated] = m
    assert maps[True].slots >= 4 * offset_map.INITIAL_SLOTS
    for m in maps.values():
        # Below the dirty part a record is looked up by its key: every key has a later record, found.
        assert {m.filter_records(data, HEADER_SIZE, 100, base, True).kept for data, base in clean_part} == {0}
        # In the dirty part every record is its key's last.
        assert {m.filter_records(data, HEADER_SIZE, 100, base, True).kept for data, base in dirty_part} == {100}
    # A map that fills stops inside a batch and says where.
    small = OffsetMap(64 * 24)
    small.reset(keys)
    position, latest, last_put, state = small.put_batches(b"".join(data for data, _ in clean_part), 0, 0, -1)
    assert state == 2 and small.size == int(64 * 0.9) and last_put == small.size - 1 and position == 0


@pytest.mark.skipif(not offset_map.ACCELERATED, reason="the C record loops are not compiled")
def test_the_c_copy_writes_the_bytes_the_python_copy_writes(tmp_path):
    """The copy in one C call per read and the copy batch by batch in Python decide alike and write the
    same bytes: two passes over the same log (the second at a time before, at or after the delete
    horizons the first set), with keyless records, tombstones, a producer's batches, compressed,
    transactional and control batches, maps that fill, and reads smaller than a batch."""
    import itertools

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    record = st.tuples(st.sampled_from([None, b"a", b"b", b"c", b"d", b"e"]),
                       st.one_of(st.none(), st.binary(max_size=6)), st.integers(-1000, 1000))
    kinds = ["plain", "plain", "producer", "producer", "gzip", "transactional", "control"]
    runs = itertools.count()

    def build(directory, batches) -> tuple[Log, ManualClock, dict[int, int]]:
        clock = ManualClock()
        log = Log.open(directory, compacted(segment_bytes=500, delete_retention_ms=DAY), clock=clock)
        producers, sequence = {}, 0
        for pairs, kind in batches:
            fields = {"compression": Compression.GZIP} if kind == "gzip" else {}
            if kind in ("producer", "transactional", "control"):
                fields.update(producer_id=5, producer_epoch=0, base_sequence=sequence,
                              is_transactional=kind != "producer", is_control=kind == "control")
                sequence += len(pairs)
            data = build_batch([SimpleRecord(k, v, timestamp=clock() + t) for k, v, t in pairs], **fields)
            info = log.append_as_leader(data, 2)
            if "producer_id" in fields:
                producers[5] = info.last_offset
            clock.advance(7)
        log.roll()
        log.append_as_leader(keyed((b"z", b"1"), timestamp=clock()), 2)
        log.update_high_watermark(log.log_end_offset)
        return log, clock, producers

    def files(log: Log) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir()) if p.suffix == ".log"}

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(batches=st.lists(st.tuples(st.lists(record, min_size=1, max_size=6), st.sampled_from(kinds)),
                            min_size=1, max_size=25),
           later=st.sampled_from([0, DAY - 1, DAY, 3 * DAY]), live=st.booleans(),
           memory=st.sampled_from([3 * 24, 1 << 16]), io_buffer=st.sampled_from([100, 4096]))
    def check(batches, later, live, memory, io_buffer):
        run = next(runs)
        outcomes = {}
        for accelerated in (True, False):
            log, clock, producers = build(tmp_path / f"{run}-{accelerated}", batches)
            producers = producers if live else {}
            cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=memory, io_buffer_size=io_buffer),
                              accelerated=accelerated)
            seen, checkpoint, horizon = [], None, None
            for advance in (0, later):
                clock.advance(advance)
                to_clean = log_to_clean(log, checkpoint, clock(), earliest_horizon=horizon)
                result = cleaner.clean(log, to_clean, clock(), producers)
                result.swap_in(log)
                checkpoint, horizon = result.next_dirty_offset, result.earliest_horizon
                seen.append((attrs.evolve(result.stats, elapsed_s=0.0, map_utilization=0.0), checkpoint, horizon,
                             result.copied_up_to, files(log)))
            outcomes[accelerated] = seen
            log.close()
        assert outcomes[True] == outcomes[False]

    check()
