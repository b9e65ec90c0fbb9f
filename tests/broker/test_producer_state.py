"""Producer state: idempotence checks, the state update, expiry, snapshots, rebuild and truncation."""

from __future__ import annotations

import struct
from collections import deque

import attrs
import crc32c
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kraftpy.broker.producer_state import (
    MAX_SEQUENCE,
    SNAPSHOT_ENTRY,
    SNAPSHOT_HEADER,
    AppendOutcome,
    BatchMetadata,
    CorruptSnapshotError,
    LoadedSnapshot,
    ProducerStateManager,
    SnapshotEntry,
    decode_snapshot,
    delete_snapshots_above,
    delete_snapshots_below,
    encode_snapshot,
    in_sequence,
    load_latest,
    snapshot_offsets,
    snapshot_path,
    take_snapshot,
    truncate_and_reload,
)
from kraftpy.protocol.batch_header import BatchHeader, iter_batches, read_header, stamp
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import SimpleRecord, build_batch

PID = 1000
T0 = 1_700_000_000_000


def make_batch(
    pid: int = PID,
    epoch: int = 0,
    seq: int = 0,
    n: int = 1,
    *,
    offset: int = 0,
    ts: int = T0,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    records = [SimpleRecord(b"k", b"v%d" % i, timestamp=ts + i) for i in range(n)]
    return build_batch(
        records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        base_offset=offset,
        base_timestamp=ts,
        is_transactional=transactional,
        is_control=control,
    )


def make_header(*args, **kwargs) -> BatchHeader:
    return read_header(make_batch(*args, **kwargs))


class Replica:
    """A partition replica in memory: a log buffer and its producer state."""

    def __init__(self, expiration_ms: int = 10**12) -> None:
        self.state = ProducerStateManager(max_batches=5, expiration_ms=expiration_ms)
        self.log = bytearray()
        self.end_offset = 0

    def produce(self, batch: bytes, now_ms: int = T0):
        """The leader's path: validate, then append and update; returns (check, first offset)."""
        header = read_header(batch)
        check = self.state.validate_append(header, now_ms)
        if check.is_duplicate:
            return check, check.duplicate.first_offset
        if not check.should_append:
            return check, None
        first_offset = self.end_offset
        stamped = bytearray(batch)
        stamp(stamped, 0, first_offset, 0)
        self.log += stamped
        self.state.update(header, first_offset)
        self.end_offset = header.last_offset_delta + first_offset + 1
        return check, first_offset

    def replicate_from(self, leader: Replica) -> None:
        """The follower's path: append what the leader has beyond our end, update without checks."""
        for pos, header in iter_batches(leader.log):
            if header.base_offset >= self.end_offset:
                self.log += leader.log[pos : pos + header.size]
                self.state.update(header)
                self.end_offset = header.next_offset


def headers_of(log: bytes | bytearray) -> list[BatchHeader]:
    return [header for _, header in iter_batches(log)]


def fresh_replay(headers, max_batches: int = 5) -> ProducerStateManager:
    state = ProducerStateManager(max_batches=max_batches)
    for header in headers:
        state.update(header)
    return state


# ---------------------------------------------------------------------------------------------
# validate_append and update, rule by rule


def test_non_idempotent_batches_are_always_accepted():
    leader = Replica()
    for _ in range(3):
        check, _ = leader.produce(make_batch(pid=-1, epoch=-1, seq=-1))
        assert check.outcome is AppendOutcome.APPEND and check.error is ErrorCode.NONE
    assert leader.end_offset == 3 and not leader.state.producers
    assert leader.state.map_end_offset == 3


def test_unknown_producer_starting_at_sequence_zero_is_accepted():
    check = ProducerStateManager().validate_append(make_header(seq=0), T0)
    assert check.should_append


def test_unknown_producer_not_starting_at_sequence_zero_gets_unknown_producer_id():
    check = ProducerStateManager().validate_append(make_header(seq=7), T0)
    assert check.outcome is AppendOutcome.REJECT
    assert check.error is ErrorCode.UNKNOWN_PRODUCER_ID


def test_next_sequence_is_accepted():
    leader = Replica()
    assert leader.produce(make_batch(seq=0, n=3))[1] == 0
    check, offset = leader.produce(make_batch(seq=3, n=2))
    assert check.should_append and offset == 3


@pytest.mark.parametrize("which", range(5))
def test_duplicate_of_a_cached_batch_is_answered_with_its_original_offset(which):
    leader = Replica()
    sent = []
    seq = 0
    for n in (1, 2, 3, 1, 2):
        batch = make_batch(seq=seq, n=n)
        sent.append((batch, leader.produce(batch)[1]))
        seq += n
    end = leader.end_offset
    batch, original_offset = sent[which]
    check, offset = leader.produce(batch)
    assert check.outcome is AppendOutcome.DUPLICATE and check.error is ErrorCode.NONE
    assert offset == original_offset == check.duplicate.first_offset
    header = read_header(batch)
    assert check.duplicate.last_offset == original_offset + header.last_offset_delta
    assert leader.end_offset == end, "a duplicate appends nothing"


def test_resend_older_than_the_cached_batches_is_out_of_order():
    leader = Replica()
    first = make_batch(seq=0)
    for seq in range(6):
        leader.produce(make_batch(seq=seq))
    check, _ = leader.produce(first)
    assert check.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_batch_overlapping_a_cached_batch_is_not_a_duplicate():
    leader = Replica()
    leader.produce(make_batch(seq=0, n=3))
    check, _ = leader.produce(make_batch(seq=0, n=2))
    assert check.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_gap_is_out_of_order():
    leader = Replica()
    leader.produce(make_batch(seq=0, n=2))
    check, offset = leader.produce(make_batch(seq=3))
    assert check.outcome is AppendOutcome.REJECT and offset is None
    assert check.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_old_epoch_is_invalid_producer_epoch():
    leader = Replica()
    leader.produce(make_batch(epoch=3, seq=0))
    check, _ = leader.produce(make_batch(epoch=2, seq=1))
    assert check.error is ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_sequence_zero():
    leader = Replica()
    leader.produce(make_batch(epoch=0, seq=0, n=4))
    check, _ = leader.produce(make_batch(epoch=1, seq=4))
    assert check.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    check, offset = leader.produce(make_batch(epoch=1, seq=0))
    assert check.should_append and offset == 4
    assert leader.state.entry(PID).producer_epoch == 1


def test_epoch_bump_forgets_the_batches_of_the_old_epoch():
    leader = Replica()
    old = make_batch(epoch=0, seq=0)
    leader.produce(old)
    leader.produce(make_batch(epoch=1, seq=0))
    assert [b.first_offset for b in leader.state.entry(PID).batches] == [1]
    check, _ = leader.produce(old)
    assert check.error is ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequence_wraps_from_max_to_zero():
    assert in_sequence(MAX_SEQUENCE, 0) and in_sequence(-1, 0) and not in_sequence(MAX_SEQUENCE, 1)
    state = ProducerStateManager()
    # The producer's history, as recovery replays it: its last batch ends at 2^31-2.
    state.update(make_header(seq=MAX_SEQUENCE - 2, n=1, offset=0))
    spanning = make_header(seq=MAX_SEQUENCE - 1, n=3)  # sequences 2^31-2, 2^31-1, 0
    assert spanning.last_sequence == 0
    assert state.validate_append(spanning, T0).should_append
    state.update(spanning, 1)
    entry = state.entry(PID)
    assert (entry.batches[-1].first_seq, entry.batches[-1].last_seq) == (MAX_SEQUENCE - 1, 0)
    assert state.validate_append(make_header(seq=1), T0).should_append
    assert state.validate_append(spanning, T0).is_duplicate
    assert state.validate_append(make_header(seq=0), T0).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    ends_at_max = ProducerStateManager()
    ends_at_max.update(make_header(seq=MAX_SEQUENCE - 1, n=2, offset=0))
    assert ends_at_max.entry(PID).last_seq == MAX_SEQUENCE
    assert ends_at_max.validate_append(make_header(seq=0), T0).should_append


def test_entry_keeps_epoch_last_five_batches_and_last_timestamp():
    leader = Replica()
    for i in range(7):
        leader.produce(make_batch(epoch=2, seq=2 * i, n=2, ts=T0 + 100 * i))
    entry = leader.state.entry(PID)
    assert entry.producer_epoch == 2
    assert list(entry.batches) == [
        BatchMetadata(first_seq=2 * i, last_seq=2 * i + 1, first_offset=2 * i, last_offset=2 * i + 1,
                      max_timestamp=T0 + 100 * i + 1)
        for i in range(2, 7)
    ]  # fmt: skip
    assert entry.last_timestamp == T0 + 601


def test_validate_append_changes_nothing():
    leader = Replica()
    leader.produce(make_batch(seq=0))
    before = {pid: entry.copy() for pid, entry in leader.state.producers.items()}
    for header in (make_header(seq=1), make_header(seq=5), make_header(epoch=1), make_header(pid=7, seq=0)):
        leader.state.validate_append(header, T0)
    assert dict(leader.state.producers) == before and leader.state.map_end_offset == 1


def test_update_applies_every_batch_without_validation():
    follower = ProducerStateManager()
    follower.update(make_header(seq=5, offset=0))  # the leader knew this producer; we did not
    follower.update(make_header(seq=9, offset=1))  # a gap is the leader's business, not ours
    entry = follower.entry(PID)
    assert [(b.first_seq, b.first_offset) for b in entry.batches] == [(9, 1)]
    assert follower.map_end_offset == 2


def test_update_refuses_a_batch_below_the_state_end():
    state = ProducerStateManager()
    state.update(make_header(seq=0, n=3, offset=10))
    with pytest.raises(ValueError):
        state.update(make_header(seq=3, offset=12))


def test_batch_without_sequence_or_epoch_from_a_producer_is_invalid_record():
    state = ProducerStateManager()
    assert state.validate_append(make_header(seq=-1), T0).error is ErrorCode.INVALID_RECORD
    assert state.validate_append(make_header(epoch=-1), T0).error is ErrorCode.INVALID_RECORD


def test_control_batch_checks_only_the_epoch_and_closes_the_transaction():
    state = ProducerStateManager(expiration_ms=1000)
    state.update(make_header(epoch=4, seq=0, offset=0, transactional=True))
    assert state.entry(PID).current_txn_first_offset == 0
    assert state.remove_expired(T0 + 10_000) == [], "an open transaction keeps its producer"
    marker = make_header(epoch=4, seq=-1, offset=1, control=True, ts=T0 + 5)
    assert state.validate_append(marker, T0).should_append
    assert state.validate_append(make_header(epoch=3, seq=-1, control=True), T0).error is (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    state.update(marker, coordinator_epoch=7)
    entry = state.entry(PID)
    assert (entry.current_txn_first_offset, entry.coordinator_epoch, entry.last_timestamp) == (-1, 7, T0 + 5)
    assert len(entry.batches) == 1


def test_producers_idle_for_expiration_ms_are_removed():
    state = ProducerStateManager(expiration_ms=1000)
    state.update(make_header(pid=1, seq=0, offset=0, ts=T0))
    state.update(make_header(pid=2, seq=0, offset=1, ts=T0 + 500))
    assert state.remove_expired(T0 + 999) == []
    assert state.remove_expired(T0 + 1000) == [1]
    assert list(state.producers) == [2]
    assert state.remove_expired(T0 + 1500) == [2]


def test_expired_producer_counts_as_unknown_before_it_is_removed():
    state = ProducerStateManager(expiration_ms=1000)
    state.update(make_header(seq=0, n=2, offset=0, ts=T0))
    last = state.entry(PID).last_timestamp
    assert last == T0 + 1, "the max timestamp of the last batch"
    assert state.validate_append(make_header(seq=2), last + 999).should_append
    assert state.validate_append(make_header(seq=2), last + 1000).error is ErrorCode.UNKNOWN_PRODUCER_ID
    assert PID in state.producers
    restart = make_header(seq=0, ts=last + 1000)
    assert state.validate_append(restart, last + 1000).should_append
    state.update(restart, 2)
    assert [(b.first_seq, b.first_offset) for b in state.entry(PID).batches] == [(0, 2)]


def test_a_producer_backfilling_old_records_keeps_its_state_while_it_writes():
    """Record timestamps a week old (a backfill): the producer is idle from its last append here, not from
    its records' time, so its next batch continues the sequence instead of being UNKNOWN_PRODUCER_ID. Idle
    for expiration_ms after that append, it expires as any other."""
    day = 86_400_000
    state = ProducerStateManager(expiration_ms=day)
    old = T0 - 7 * day
    state.update(make_header(seq=0, n=2, offset=0, ts=old), now_ms=T0)
    assert state.validate_append(make_header(seq=2, ts=old + 2), T0 + 1).should_append
    state.update(make_header(seq=2, offset=2, ts=old + 2), now_ms=T0 + 1)
    assert state.remove_expired(T0 + day) == []
    assert state.validate_append(make_header(seq=3, ts=old + 3), T0 + day).should_append
    assert state.validate_append(make_header(seq=3, ts=old + 3), T0 + 1 + day).error is ErrorCode.UNKNOWN_PRODUCER_ID
    assert state.remove_expired(T0 + 1 + day) == [PID]
    # Rebuilt from the log (no append time), the records' timestamps are all there is, as in Kafka.
    rebuilt = ProducerStateManager(expiration_ms=day)
    rebuilt.update(make_header(seq=0, n=2, offset=0, ts=old))
    assert rebuilt.validate_append(make_header(seq=2, ts=old + 2), T0).error is ErrorCode.UNKNOWN_PRODUCER_ID


# ---------------------------------------------------------------------------------------------
# Snapshot format and files

snapshot_entries = st.lists(
    st.builds(
        SnapshotEntry,
        producer_id=st.integers(0, 2**63 - 1),
        producer_epoch=st.integers(-1, 2**15 - 1),
        last_sequence=st.integers(-1, MAX_SEQUENCE),
        last_offset=st.integers(-1, 2**63 - 1),
        offset_delta=st.integers(0, MAX_SEQUENCE),
        timestamp=st.integers(-1, 2**63 - 1),
        coordinator_epoch=st.integers(-1, MAX_SEQUENCE),
        current_txn_first_offset=st.integers(-1, 2**63 - 1),
    ),
    max_size=8,
    unique_by=lambda e: e.producer_id,
).map(lambda entries: tuple(sorted(entries, key=lambda e: e.producer_id)))


def test_snapshot_bytes_follow_kafkas_layout():
    entry = SnapshotEntry(42, 3, 17, 1234, 4, T0, 9, -1)
    data = encode_snapshot([entry])
    assert SNAPSHOT_HEADER.size == 10 and SNAPSHOT_ENTRY.size == 46 and len(data) == 56
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 42, 3, 17, 1234, 4, T0, 9, -1)
    assert data == struct.pack(">hI", 1, crc32c.crc32c(body)) + body


@given(snapshot_entries)
def test_snapshot_round_trips(entries):
    assert decode_snapshot(encode_snapshot(entries)) == entries


@given(snapshot_entries.filter(bool), st.data())
def test_corrupt_snapshot_raises(entries, data):
    encoded = bytearray(encode_snapshot(entries))
    damage = data.draw(st.sampled_from(["flip", "cut", "extend"]))
    if damage == "flip":
        pos = data.draw(st.integers(0, len(encoded) - 1))
        encoded[pos] ^= 1 << data.draw(st.integers(0, 7))
    elif damage == "cut":
        del encoded[data.draw(st.integers(0, len(encoded) - 1)) :]
    else:
        encoded += b"\x00"
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(encoded))


def test_snapshot_file_is_named_by_offset_and_reloads(tmp_path):
    leader = Replica()
    for seq in range(3):
        leader.produce(make_batch(seq=seq, ts=T0 + seq))
    path = take_snapshot(tmp_path, leader.state)
    assert path == snapshot_path(tmp_path, 3) and path.name == "00000000000000000003.snapshot"
    assert snapshot_offsets(tmp_path) == [3]
    assert not list(tmp_path.glob("*.tmp"))
    loaded = load_latest(tmp_path, 3)
    assert loaded == LoadedSnapshot(3, (SnapshotEntry(PID, 0, 2, 2, 0, T0 + 2, -1, -1),))


def test_take_snapshot_refuses_an_offset_below_the_state_end(tmp_path):
    state = ProducerStateManager()
    state.update(make_header(seq=0, n=2, offset=0))
    with pytest.raises(ValueError):
        take_snapshot(tmp_path, state, 1)
    take_snapshot(tmp_path, state, 5)  # batches 2..4 had no producer id
    assert snapshot_offsets(tmp_path) == [5]


def test_state_from_a_snapshot_keeps_each_producers_last_batch():
    leader = Replica()
    for seq in range(4):
        leader.produce(make_batch(seq=seq))
    restored = ProducerStateManager()
    restored.load_snapshot(
        LoadedSnapshot(4, decode_snapshot(encode_snapshot(leader.state.snapshot_entries())))
    )
    assert restored.map_end_offset == 4
    assert list(restored.entry(PID).batches) == [leader.state.entry(PID).batches[-1]]
    assert restored.validate_append(make_header(seq=3), T0).duplicate.first_offset == 3
    assert restored.validate_append(make_header(seq=4), T0).should_append


def test_load_latest_takes_the_newest_snapshot_at_or_below_the_offset(tmp_path):
    state = ProducerStateManager()
    for offset in (0, 10, 20):
        take_snapshot(tmp_path, state, offset)
    (tmp_path / "00000000000000000015.snapshot.tmp").write_bytes(b"torn")
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    assert snapshot_offsets(tmp_path) == [0, 10, 20]
    assert load_latest(tmp_path, 19).offset == 10
    assert load_latest(tmp_path, 20).offset == 20
    assert load_latest(tmp_path, -1) is None


def test_corrupt_snapshot_is_skipped_for_an_older_one(tmp_path):
    state = ProducerStateManager()
    state.update(make_header(seq=0, offset=0))
    take_snapshot(tmp_path, state, 1)
    state.update(make_header(seq=1, offset=1))
    path = take_snapshot(tmp_path, state, 2)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    loaded = load_latest(tmp_path, 2)
    assert loaded.offset == 1 and loaded.entries[0].last_sequence == 0


def test_delete_snapshots_above_and_below(tmp_path):
    state = ProducerStateManager()
    for offset in (0, 10, 20, 30):
        take_snapshot(tmp_path, state, offset)
    assert delete_snapshots_above(tmp_path, 20) == [30]
    assert delete_snapshots_below(tmp_path, 10) == [0]
    assert snapshot_offsets(tmp_path) == [10, 20]


# ---------------------------------------------------------------------------------------------
# Rebuild and truncation


def test_truncate_and_reload_uses_the_snapshot_and_replays_the_log(tmp_path):
    leader = Replica()
    for seq in range(8):
        leader.produce(make_batch(pid=PID + seq % 2, seq=seq // 2))
        if seq in (2, 5):
            take_snapshot(tmp_path, leader.state)
    take_snapshot(tmp_path, leader.state)  # at 8: above the truncation point, must go
    headers = headers_of(leader.log)
    reads = []

    def read_batches(from_offset):
        reads.append(from_offset)
        return (h for h in headers if h.base_offset >= from_offset)

    used = truncate_and_reload(leader.state, tmp_path, 7, read_batches)
    assert used.offset == 6 and reads == [6]
    assert snapshot_offsets(tmp_path) == [3, 6]
    assert leader.state.map_end_offset == 7
    assert dict(leader.state.producers) == dict(fresh_replay(headers[:7]).producers)


def test_truncate_and_reload_with_corrupt_snapshots_rebuilds_from_the_log_start(tmp_path):
    leader = Replica()
    for seq in range(6):
        leader.produce(make_batch(seq=seq))
    path = take_snapshot(tmp_path, leader.state, 6)
    path.write_bytes(path.read_bytes()[:-3])
    headers = headers_of(leader.log)
    cold = ProducerStateManager()
    used = truncate_and_reload(
        cold, tmp_path, 6, lambda start: (h for h in headers if h.base_offset >= start)
    )
    assert used is None
    assert dict(cold.producers) == dict(fresh_replay(headers).producers)
    assert len(cold.entry(PID).batches) == 5


def test_rebuild_drops_producers_already_expired():
    state = ProducerStateManager(expiration_ms=1000)
    headers = [make_header(pid=1, seq=0, offset=0, ts=T0), make_header(pid=2, seq=0, offset=1, ts=T0 + 900)]
    state.rebuild(None, headers, now_ms=T0 + 1200)
    assert list(state.producers) == [2]


# A log: producers continue, bump their epoch, restart at 0 after expiry; some batches carry no id.
log_steps = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["next"] * 6 + ["bump", "restart"]), st.integers(1, 3)),
    min_size=1,
    max_size=40,
)


def build_log(steps) -> list[BatchHeader]:
    headers, offset, producers = [], 0, {}
    for who, kind, n in steps:
        if who == 3:
            headers.append(make_header(pid=-1, epoch=-1, seq=-1, n=n, offset=offset))
        else:
            epoch, seq = producers.get(who, (0, 0))
            if kind == "bump" and who in producers:
                epoch, seq = epoch + 1, 0
            elif kind == "restart":
                seq = 0
            headers.append(make_header(pid=who, epoch=epoch, seq=seq, n=n, offset=offset, ts=T0 + offset))
            producers[who] = (epoch, seq + n)
        offset += n
    return headers


@settings(max_examples=150)
@given(log_steps, st.data())
def test_rebuild_after_truncation_equals_a_fresh_replay_of_the_surviving_batches(steps, data):
    headers = build_log(steps)
    cut = data.draw(st.integers(0, len(headers)), label="batches kept")
    snap_at = data.draw(st.integers(0, cut), label="batches in the snapshot")

    def offset_of(index: int) -> int:
        return headers[index].base_offset if index < len(headers) else headers[-1].next_offset

    offset, snap_offset = offset_of(cut), offset_of(snap_at)
    snapshot_state = fresh_replay(headers[:snap_at])
    snapshot = LoadedSnapshot(
        snap_offset, decode_snapshot(encode_snapshot(snapshot_state.snapshot_entries()))
    )
    fresh = fresh_replay(headers[:cut])

    # Without a snapshot, a rebuild is a fresh replay.
    cold = ProducerStateManager()
    cold.rebuild(None, headers, end_offset=offset)
    assert dict(cold.producers) == dict(fresh.producers)
    assert cold.map_end_offset == offset

    # From a snapshot, the state holds what Kafka's snapshot holds.
    cold.rebuild(snapshot, headers[snap_at:], end_offset=offset)
    assert cold.snapshot_entries() == fresh.snapshot_entries()
    assert cold.map_end_offset == offset

    # A live state cut at ``offset`` keeps the batches it still cached: the same state as a
    # fresh replay wherever those batches were still cached before the cut, else a suffix of it.
    live = fresh_replay(headers)
    before = {pid: entry.copy() for pid, entry in live.producers.items()}
    live.truncate_to(offset, snapshot, headers[snap_at:])
    assert live.map_end_offset == offset
    assert live.producers.keys() == fresh.producers.keys()
    for pid, expected in fresh.producers.items():
        got = live.producers[pid]
        assert attrs.evolve(got, batches=deque()) == attrs.evolve(expected, batches=deque())
        got_batches, expected_batches = list(got.batches), list(expected.batches)
        assert bool(got_batches) == bool(expected_batches)
        assert expected_batches[len(expected_batches) - len(got_batches) :] == got_batches
        assert all(b in got_batches for b in expected_batches if b.first_offset >= snap_offset)
        if set(expected_batches) <= set(before[pid].batches):
            assert got_batches == expected_batches


def test_leader_change_follower_deduplicates_resends_like_the_old_leader():
    old_leader, follower = Replica(), Replica()
    old_leader.produce(make_batch(pid=7, seq=0, n=2))  # another producer, for company
    in_flight = [make_batch(seq=seq * 2, n=2) for seq in range(6)]
    answers = [old_leader.produce(batch)[1] for batch in in_flight]
    follower.replicate_from(old_leader)
    assert dict(follower.state.producers) == dict(old_leader.state.producers)

    # The old leader dies before its answers reach the producer, which resends all in flight.
    for batch, answer in zip(in_flight, answers, strict=True):
        old_check = old_leader.state.validate_append(read_header(batch), T0)
        new_check, offset = follower.produce(batch)
        assert new_check == old_check
        if new_check.is_duplicate:
            assert offset == answer
    assert follower.end_offset == old_leader.end_offset, "nothing appended twice"
    check, offset = follower.produce(make_batch(seq=12))
    assert check.should_append and offset == old_leader.end_offset


def test_leader_change_with_a_partly_replicated_follower():
    old_leader, follower = Replica(), Replica()
    batches = [make_batch(seq=seq) for seq in range(5)]
    for batch in batches[:3]:
        old_leader.produce(batch)
    follower.replicate_from(old_leader)
    for batch in batches[3:]:
        old_leader.produce(batch)  # written on the old leader only, never acknowledged
    answers = [follower.produce(batch) for batch in batches]
    assert [(c.outcome, o) for c, o in answers] == [
        (AppendOutcome.DUPLICATE, 0),
        (AppendOutcome.DUPLICATE, 1),
        (AppendOutcome.DUPLICATE, 2),
        (AppendOutcome.APPEND, 3),
        (AppendOutcome.APPEND, 4),
    ]


# ---------------------------------------------------------------------------------------------
# Random interleavings against a simple model


@attrs.define
class ModelProducer:
    pid: int
    epoch: int = 0
    #: Every batch the leader appended for this producer: (epoch, first_seq, last_seq, n, first_offset).
    appended: list = attrs.field(factory=list)
    #: Every batch this producer sent, appended or not: (epoch, seq, n).
    sent: list = attrs.field(factory=list)

    def next_seq(self) -> int:
        if not self.appended or self.appended[-1][0] != self.epoch:
            return 0
        return (self.appended[-1][2] + 1) & MAX_SEQUENCE

    def expected(self, epoch: int, seq: int, n: int):
        """What a broker must answer, from the definition of the rules."""
        if not self.appended:
            return ("append", None) if seq == 0 else ("reject", ErrorCode.UNKNOWN_PRODUCER_ID)
        current = self.appended[-1][0]
        last = (seq + n - 1) & MAX_SEQUENCE
        window = [a for a in self.appended if a[0] == current][-5:]
        for a_epoch, a_first, a_last, _, a_offset in window:
            if (a_epoch, a_first, a_last) == (epoch, seq, last):
                return ("duplicate", a_offset)
        if epoch < current:
            return ("reject", ErrorCode.INVALID_PRODUCER_EPOCH)
        if epoch > current:
            return ("append", None) if seq == 0 else ("reject", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        if seq == ((self.appended[-1][2] + 1) & MAX_SEQUENCE):
            return ("append", None)
        return ("reject", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


actions = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.sampled_from(["next", "next", "next", "resend", "resend", "gap", "bump", "bad_bump", "zombie"]),
        st.integers(1, 3),
        st.integers(0, 100),
    ),
    min_size=1,
    max_size=50,
)


@settings(max_examples=200)
@given(actions, st.lists(st.sampled_from([0, MAX_SEQUENCE - 3, MAX_SEQUENCE]), min_size=3, max_size=3))
def test_random_interleavings_are_exactly_once_and_in_order(steps, starts):
    leader = Replica()
    producers = [ModelProducer(pid) for pid in (11, 12, 13)]
    for model, start in zip(producers, starts, strict=True):
        if start:
            # History from before: replayed by recovery, ending just before ``start``.
            header = make_header(pid=model.pid, seq=start - 1, offset=leader.end_offset)
            leader.log += make_batch(pid=model.pid, seq=start - 1, offset=leader.end_offset)
            leader.state.update(header)
            model.appended.append((0, start - 1, start - 1, 1, leader.end_offset))
            leader.end_offset += 1

    for who, kind, n, pick in steps:
        model = producers[who]
        epoch, seq = model.epoch, model.next_seq()
        if kind == "resend" and model.sent:
            epoch, seq, n = model.sent[-1 - pick % min(5, len(model.sent))]
        elif kind == "gap":
            seq = (seq + 1 + pick) & MAX_SEQUENCE
        elif kind == "bump":
            model.epoch += 1
            epoch, seq = model.epoch, 0
        elif kind == "bad_bump":
            epoch, seq = model.epoch + 1, 1 + pick
        elif kind == "zombie" and model.epoch > 0:
            epoch = model.epoch - 1 - pick % model.epoch
        expected = model.expected(epoch, seq, n)
        check, offset = leader.produce(make_batch(pid=model.pid, epoch=epoch, seq=seq, n=n))
        model.sent.append((epoch, seq, n))
        event(f"{kind}: {expected[0]}")
        if expected[0] == "append":
            assert check.outcome is AppendOutcome.APPEND, (kind, check)
            model.appended.append((epoch, seq, (seq + n - 1) & MAX_SEQUENCE, n, offset))
        elif expected[0] == "duplicate":
            assert check.outcome is AppendOutcome.DUPLICATE, (kind, check)
            assert offset == expected[1]
        else:
            assert check.outcome is AppendOutcome.REJECT and check.error is expected[1], (kind, check)

    # Exactly once and in order: per producer and epoch, the log holds each sequence once,
    # consecutively, from 0 (or from the recovered history).
    records: dict[tuple[int, int], list[int]] = {}
    for header in headers_of(leader.log):
        seqs = records.setdefault((header.producer_id, header.producer_epoch), [])
        seqs.extend((header.base_sequence + i) & MAX_SEQUENCE for i in range(header.last_offset_delta + 1))
    for (pid, _epoch), seqs in records.items():
        start = seqs[0]
        assert start == 0 or start == starts[pid - 11] - 1
        assert seqs == [(start + i) & MAX_SEQUENCE for i in range(len(seqs))]

    # A follower replaying the log has the leader's state, and a snapshot keeps its last batches.
    follower = Replica()
    follower.replicate_from(leader)
    assert dict(follower.state.producers) == dict(leader.state.producers)
    assert (
        decode_snapshot(encode_snapshot(leader.state.snapshot_entries())) == leader.state.snapshot_entries()
    )
