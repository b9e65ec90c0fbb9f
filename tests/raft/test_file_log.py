"""FileRaftLog (segments on disk) behaves exactly as MemoryRaftLog, the reference, and survives reopening."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.records import decode_batch
from kraftpy.raft.file_log import FileRaftLog
from kraftpy.raft.log import RaftLog, RecordBatch, SnapshotId
from kraftpy.raft.memory_log import MemoryRaftLog
from kraftpy.storage.log import LogConfig

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


def same(a: RaftLog, b: RaftLog) -> None:
    assert (a.start_offset, a.end_offset, a.last_fetched_epoch) == (b.start_offset, b.end_offset, b.last_fetched_epoch)
    assert a.latest_snapshot_id == b.latest_snapshot_id
    if a.end_offset > a.start_offset:
        assert read_all(a) == read_all(b)
    for epoch in range(0, 60, 3):
        assert a.end_offset_for_epoch(epoch) == b.end_offset_for_epoch(epoch), epoch


def test_satisfies_the_protocol(tmp_path: Path) -> None:
    assert isinstance(open_log(tmp_path), RaftLog)


def test_batches_are_recordbatch_v2_with_control_marked(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader([b"leader-change"], 1, is_control=True)
    log.append_as_leader([b"a", b"b"], 1)
    assert log.read(0, 1 << 20) == [
        RecordBatch(0, 1, (b"leader-change",), is_control=True),
        RecordBatch(1, 1, (b"a", b"b")),
    ]
    raw = (tmp_path / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    first = decode_batch(raw)
    assert first.header.is_control and first.header.partition_leader_epoch == 1
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


def test_crash_keeps_at_least_the_flushed_prefix_and_drops_partial_downloads(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader([b"a"], 1)
    log.append_as_leader([b"b"], 1)
    log.flush(2)
    log.append_as_leader([b"c"], 2)
    log.write_snapshot_chunk(SnapshotId(10, 4), 0, b"half")
    log.storage.abandon()
    again = open_log(tmp_path)
    assert again.end_offset >= 2
    assert [b.records for b in again.read(0, 1 << 20)][:2] == [(b"a",), (b"b",)]
    assert not list((tmp_path / "__cluster_metadata-0").glob("*.part"))


def test_snapshot_download_resets_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader([b"old"], 1)
    snap = SnapshotId(50, 3)
    log.write_snapshot_chunk(snap, 0, b"abc")
    log.write_snapshot_chunk(snap, 3, b"def")
    log.finish_snapshot_download(snap)
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (50, 50, 3)
    assert log.read_snapshot(snap, 0, 100) == b"abcdef"
    log.append_as_follower([RecordBatch(50, 4, (b"next",))])
    log.close()
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.latest_snapshot_id) == (50, 51, snap)


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
def test_matches_memory_log(script: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        file_log, memory = open_log(Path(tmp)), MemoryRaftLog()
        epoch = 1
        for op, a, b in script:
            if op in ("lead", "follow"):
                epoch += a
                records = [bytes([i]) * 10 for i in range(b)]
                if op == "lead":
                    file_log.append_as_leader(records, epoch)
                    memory.append_as_leader(records, epoch)
                else:
                    batch = RecordBatch(memory.end_offset, epoch, records)
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
