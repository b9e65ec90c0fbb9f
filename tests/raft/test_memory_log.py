"""MemoryRaftLog against a plain list model, plus its crash semantics and snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.raft.log import OffsetAndEpoch, RaftLog, RecordBatch, SnapshotId
from kraftpy.raft.memory_log import MemoryRaftLog


def build(epochs_and_sizes: list[tuple[int, int]]) -> MemoryRaftLog:
    log = MemoryRaftLog()
    for epoch, size in epochs_and_sizes:
        log.append_as_leader([b"v"] * size, epoch)
    return log


def test_satisfies_the_protocol() -> None:
    assert isinstance(MemoryRaftLog(), RaftLog)


def test_empty_log() -> None:
    log = MemoryRaftLog()
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (0, 0, 0)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(0, 0)
    assert log.read(0, 100) == []


def test_end_offset_for_epoch_follows_kafka() -> None:
    log = build([(1, 2), (1, 1), (3, 2), (5, 1)])  # epoch 1: [0,3), 3: [3,5), 5: [5,6)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(3, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(3, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(6, 5)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)


def test_read_returns_the_batch_holding_the_offset_and_respects_max_bytes() -> None:
    log = build([(1, 3), (1, 3), (2, 3)])
    assert [b.base_offset for b in log.read(4, 1)] == [3]
    assert [b.base_offset for b in log.read(0, 10**6)] == [0, 3, 6]


def test_truncate_inside_a_batch_removes_it_whole() -> None:
    log = build([(1, 3), (2, 3)])
    log.flush(6)
    log.truncate_to(4)
    assert log.end_offset == 3
    assert log.flushed_offset == 3
    assert log.last_fetched_epoch == 1


def test_crash_loses_the_unflushed_tail() -> None:
    log = build([(1, 2), (1, 2)])
    log.flush(2)
    log.append_as_leader([b"x"], 2)
    log.crash()
    assert log.end_offset == 2
    assert log.last_fetched_epoch == 1


def test_follower_append_must_continue_the_log() -> None:
    log = build([(1, 2)])
    with pytest.raises(ValueError):  # a gap
        log.append_as_follower([RecordBatch.build([b"x"], base_offset=5, epoch=1)])
    with pytest.raises(ValueError):  # an epoch going back
        log.append_as_follower([RecordBatch.build([b"x"], base_offset=2, epoch=0)])
    with pytest.raises(ValueError):  # not contiguous within the append
        log.append_as_follower([RecordBatch.build([b"x"], base_offset=2, epoch=1),
                                RecordBatch.build([b"y"], base_offset=4, epoch=1)])
    assert log.end_offset == 2
    batch = RecordBatch.build([b"x", b"y"], base_offset=2, epoch=3, timestamp_ms=123)
    log.append_as_follower([batch])
    assert log.read(2, 1) == [batch] and log.read(2, 1)[0].data == batch.data  # kept as it came


def test_snapshot_and_prefix_deletion() -> None:
    log = build([(1, 2), (2, 2), (3, 2)])
    log.flush(6)
    sid = SnapshotId(4, 2)
    log.create_snapshot(sid, b"state")
    assert log.earliest_snapshot_id is None
    log.delete_before_snapshot(sid)
    assert (log.start_offset, log.end_offset) == (4, 6)
    assert log.earliest_snapshot_id == sid == log.latest_snapshot_id
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(4, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(6, 3)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(4, 1)
    assert log.read_snapshot(sid, 1, 3) == b"tat"


def test_snapshot_download_resets_the_log_and_survives_a_crash() -> None:
    log = build([(1, 2)])
    sid = SnapshotId(10, 4)
    log.write_snapshot_chunk(sid, 0, b"ab")
    log.write_snapshot_chunk(sid, 2, b"cd")
    log.finish_snapshot_download(sid)
    log.crash()
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (10, 10, 4)
    assert log.read_snapshot(sid, 0, 100) == b"abcd"


def test_partial_download_is_lost_on_crash() -> None:
    log = MemoryRaftLog()
    sid = SnapshotId(10, 4)
    log.write_snapshot_chunk(sid, 0, b"ab")
    log.crash()
    with pytest.raises(ValueError):
        log.write_snapshot_chunk(sid, 2, b"cd")


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4), st.integers(0, 2)),
        st.tuples(st.just("truncate"), st.integers(0, 40), st.just(0)),
        st.tuples(st.just("flush"), st.integers(0, 40), st.just(0)),
        st.tuples(st.just("crash"), st.just(0), st.just(0)),
    ),
    max_size=40,
)


@given(ops)
def test_matches_a_list_model(script: list[tuple[str, int, int]]) -> None:
    log = MemoryRaftLog()
    model: list[tuple[int, int]] = []  # (epoch, batch id) per offset
    batch_starts: list[int] = []
    flushed = 0
    epoch = 1
    for op, a, b in script:
        if op == "append":
            epoch += b
            start = len(model)
            log.append_as_leader([b"%d" % i for i in range(a)], epoch)
            batch_starts.append(start)
            model.extend((epoch, start) for _ in range(a))
        elif op == "truncate":
            if a < len(model):
                cut = model[a][1]  # the batch holding `a` goes whole
                del model[cut:]
                batch_starts = [s for s in batch_starts if s < cut]
            log.truncate_to(a)
            flushed = min(flushed, len(model))
        elif op == "flush":
            log.flush(a)
            flushed = max(flushed, min(a, len(model)))
        else:
            log.crash()
            if flushed < len(model):
                flushed = model[flushed][1]  # a batch flushed only in part is torn: it goes whole
                del model[flushed:]
            batch_starts = [s for s in batch_starts if s < flushed]
        assert log.end_offset == len(model)
        assert log.flushed_offset == flushed
        assert log.last_fetched_epoch == (model[-1][0] if model else 0)
        assert [bt.base_offset for bt in log.read(0, 10**9)] == batch_starts
        for e in range(0, epoch + 2):
            expected_epochs = [ep for ep, _ in model if ep <= e]
            if not expected_epochs:
                continue
            floor = max(expected_epochs)
            end = next((i for i, (ep, _) in enumerate(model) if ep > floor), len(model))
            assert log.end_offset_for_epoch(e) == OffsetAndEpoch(end, floor)
