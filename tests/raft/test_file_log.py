"""FileRaftLog (segments on disk) behaves exactly as MemoryRaftLog, the reference, touches files only
in flush, and survives reopening, crashes and torn writes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kraftpy.protocol.batch_header import iter_batches
from kraftpy.raft.file_log import METADATA_LOG_DIR_NAME, FileRaftLog
from kraftpy.raft.log import RaftLog, RecordBatch, SnapshotId
from kraftpy.raft.memory_log import MemoryRaftLog
from kraftpy.storage.log import LogConfig
from tests.helpers.raft_sim import FileWriteInCoreCall, forbid_file_writes

SMALL_SEGMENTS = LogConfig(segment_bytes=600)


def open_log(directory: Path) -> FileRaftLog:
    return FileRaftLog.open(directory, SMALL_SEGMENTS)


def read_all(log: RaftLog) -> list[RecordBatch]:
    """Every batch: a read may stop at a segment's end, as fetches do."""
    out: list[RecordBatch] = []
    offset = log.start_offset
    while offset < log.end_offset:
        batches = log.read(offset, 1 << 30)
        assert batches and batches[0].base_offset == offset
        out += batches
        offset = batches[-1].next_offset
    return out


def segment_bytes(directory: Path) -> bytes:
    """The metadata log's segments, concatenated in offset order."""
    return b"".join(p.read_bytes() for p in sorted((directory / METADATA_LOG_DIR_NAME).glob("*.log")))


def same(a: RaftLog, b: RaftLog) -> None:
    assert (a.start_offset, a.end_offset, a.last_fetched_epoch) == (b.start_offset, b.end_offset, b.last_fetched_epoch)
    assert a.latest_snapshot_id == b.latest_snapshot_id
    if a.end_offset > a.start_offset:
        assert read_all(a) == read_all(b)
    for epoch in range(0, 60, 3):
        assert a.end_offset_for_epoch(epoch) == b.end_offset_for_epoch(epoch), epoch


def test_satisfies_the_protocol(tmp_path: Path) -> None:
    assert isinstance(open_log(tmp_path), RaftLog)


def test_batches_are_the_leaders_recordbatch_v2_bytes_with_control_marked(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    control = log.append_as_leader([b"leader-change"], 1, is_control=True, timestamp_ms=1000)
    data = log.append_as_leader([b"a", b"b"], 1, timestamp_ms=1001)
    log.flush(log.end_offset)
    assert log.read(0, 1 << 20) == [control, data]
    assert (control.base_offset, control.is_control, data.base_offset, data.records) == (0, True, 1, (b"a", b"b"))
    raw = segment_bytes(tmp_path)
    assert raw == control.data + data.data  # on disk exactly as built
    headers = [header for _, header in iter_batches(raw)]
    assert [(h.is_control, h.partition_leader_epoch, h.max_timestamp) for h in headers] == [
        (True, 1, 1000), (False, 1, 1001)]
    log.close()


def test_a_follower_stores_the_leaders_bytes(tmp_path: Path) -> None:
    leader = MemoryRaftLog()
    leader.append_as_leader([b"x"], 2, timestamp_ms=5)
    leader.append_as_leader([b"y", b"z"], 3, timestamp_ms=6)
    follower = open_log(tmp_path)
    follower.append_as_follower(leader.read(0, 1 << 20))
    follower.flush(follower.end_offset)
    assert segment_bytes(tmp_path) == b"".join(b.data for b in leader.read(0, 1 << 20))
    with pytest.raises(ValueError):  # must continue the log
        follower.append_as_follower(leader.read(0, 1 << 20))
    follower.close()


def test_only_flush_touches_files(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (1, 1, 2):
        log.append_as_leader([b"x" * 50, b"y"], epoch)
    log.flush(log.end_offset)
    with forbid_file_writes():
        log.append_as_leader([b"z" * 200], 3)  # would roll a segment were it written
        log.truncate_to(4)
        log.append_as_leader([b"w"], 4)
        log.create_snapshot(SnapshotId(2, 1), b"state at 2")
        log.delete_before_snapshot(SnapshotId(2, 1))
        assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (2, 5, 4)
        assert [b.base_offset for b in read_all(log)] == [2, 4]
        assert log.read_snapshot(SnapshotId(2, 1), 0, 100) == b"state at 2"
    with pytest.raises(FileWriteInCoreCall), forbid_file_writes():
        log.flush(log.end_offset)
    log.flush(log.end_offset)
    log.close()
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.last_fetched_epoch) == (2, 5, 4)
    assert again.read_snapshot(SnapshotId(2, 1), 0, 100) == b"state at 2"
    again.close()


def test_reads_honour_a_pending_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (1, 2, 3):
        log.append_as_leader([b"a", b"b"], epoch)  # [0,2) [2,4) [4,6)
    log.flush(6)
    log.truncate_to(3)  # inside [2,4): that batch goes whole
    assert (log.end_offset, log.last_fetched_epoch, log.flushed_offset) == (2, 1, 2)
    assert [b.base_offset for b in read_all(log)] == [0]
    log.append_as_leader([b"c"], 5)
    assert [(b.base_offset, b.epoch) for b in read_all(log)] == [(0, 1), (2, 5)]
    assert log.end_offset_for_epoch(3).offset == 2
    log.flush(log.end_offset)
    assert [(b.base_offset, b.epoch) for b in read_all(log)] == [(0, 1), (2, 5)]
    log.close()


def test_reopen_keeps_log_and_snapshots(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (1, 1, 2, 3):
        log.append_as_leader([b"x" * 50, b"y"], epoch)
    log.flush(log.end_offset)
    snap = SnapshotId(4, 2)
    log.create_snapshot(snap, b"state at 4")
    log.delete_before_snapshot(snap)
    log.close()
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.last_fetched_epoch) == (4, 8, 3)
    assert again.latest_snapshot_id == snap
    assert again.read_snapshot(snap, 0, 100) == b"state at 4"
    assert again.end_offset_for_epoch(2).offset == 6
    again.close()


def test_crash_loses_what_was_not_flushed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader([b"a"], 1)
    log.append_as_leader([b"b"], 1)
    log.flush(2)
    log.append_as_leader([b"c"], 2)
    log.truncate_to(1)  # pending: a crash brings [1, 2) back
    log.create_snapshot(SnapshotId(1, 1), b"s")
    log.write_snapshot_chunk(SnapshotId(10, 4), 0, b"half")
    log.crash()
    again = open_log(tmp_path)
    assert [b.records for b in read_all(again)] == [(b"a",), (b"b",)]
    assert again.latest_snapshot_id is None
    assert not list((tmp_path / METADATA_LOG_DIR_NAME).glob("*.checkpoint*"))
    again.close()


@pytest.mark.parametrize("kept", ["none", "a byte", "half a batch", "one batch", "one batch and a byte", "all"])
@pytest.mark.parametrize("garbage", [b"", b"\x00" * 7, b"\xff" * 90])
def test_a_torn_flush_keeps_the_whole_batches_it_wrote(tmp_path: Path, kept: str, garbage: bytes) -> None:
    log = open_log(tmp_path)
    log.append_as_leader([b"old"], 1)
    log.append_as_leader([b"gone"], 1)
    log.flush(2)
    log.truncate_to(1)
    first = log.append_as_leader([b"n" * 10], 2)
    second = log.append_as_leader([b"m" * 10], 2)
    size = first.size_in_bytes
    length = {"none": 0, "a byte": 1, "half a batch": size // 2, "one batch": size,
              "one batch and a byte": size + 1, "all": 2 * size}[kept]
    log.crash(torn=lambda tail: tail[:length] + garbage)
    again = open_log(tmp_path)
    batches = read_all(again)
    whole = length // size
    assert batches[1:] == [first, second][:whole]  # the cut was on disk before the tail was written
    assert batches[0].records == (b"old",)
    again.append_as_leader([b"after"], 3)  # and the log goes on from the recovered end
    again.flush(again.end_offset)
    again.close()


def test_snapshot_download_resets_the_log_at_flush(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader([b"old"], 1)
    log.flush(1)
    snap = SnapshotId(50, 3)
    with forbid_file_writes():
        log.write_snapshot_chunk(snap, 0, b"abc")
        log.write_snapshot_chunk(snap, 3, b"def")
        log.finish_snapshot_download(snap)
        assert (log.start_offset, log.end_offset, log.last_fetched_epoch, log.flushed_offset) == (50, 50, 3, 50)
        assert log.read_snapshot(snap, 0, 100) == b"abcdef"
        log.append_as_follower([RecordBatch.build([b"next"], base_offset=50, epoch=4)])
    log.flush(log.end_offset)
    log.close()
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.latest_snapshot_id) == (50, 51, snap)
    again.close()


def test_a_download_not_flushed_is_lost_in_a_crash(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader([b"old"], 1)
    log.flush(1)
    snap = SnapshotId(50, 3)
    log.write_snapshot_chunk(snap, 0, b"abc")
    log.finish_snapshot_download(snap)
    log.crash()
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.latest_snapshot_id) == (0, 1, None)
    again.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("lead"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("follow"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("truncate"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        st.tuples(st.just("snapshot"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(ops)
# A snapshot at the log end moves the epoch's start up to it, where no record is yet; the record appended
# after a flush must still have its epoch written, or the reopened log starts the epoch a record late.
@example([("lead", 0, 1), ("snapshot", 0, 0), ("flush", 0, 0), ("lead", 0, 1), ("reopen", 0, 0), ("lead", 0, 1)])
def test_matches_memory_log(script: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        file_log, memory = open_log(Path(tmp)), MemoryRaftLog()
        epoch = 1
        for op, a, b in script:
            if op in ("lead", "follow"):
                epoch += a
                records = [bytes([i]) * 10 for i in range(b)]
                if op == "lead":
                    assert file_log.append_as_leader(records, epoch) == memory.append_as_leader(records, epoch)
                else:
                    batch = RecordBatch.build(records, base_offset=memory.end_offset, epoch=epoch)
                    file_log.append_as_follower([batch])
                    memory.append_as_follower([batch])
            elif op == "truncate":
                target = max(memory.start_offset, min(a, memory.end_offset))
                file_log.truncate_to(target)
                memory.truncate_to(target)
            elif op == "flush":
                file_log.flush(memory.end_offset)
                memory.flush(memory.end_offset)
            elif op == "snapshot":
                batch = memory.batch_containing(min(a, memory.end_offset - 1)) if memory.end_offset else None
                if batch is None or batch.next_offset <= memory.start_offset:
                    continue
                file_log.flush(memory.end_offset)
                memory.flush(memory.end_offset)
                snap = SnapshotId(batch.next_offset, batch.epoch)
                file_log.create_snapshot(snap, b"s%d" % snap.end_offset)
                memory.create_snapshot(snap, b"s%d" % snap.end_offset)
                file_log.delete_before_snapshot(snap)
                memory.delete_before_snapshot(snap)
            elif op == "reopen":
                file_log.close()
                file_log = open_log(Path(tmp))
            same(file_log, memory)
        file_log.close()
