"""Producer state with transactions: open, commit and abort; the LSO; markers; snapshots; truncation."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kraftpy.broker.producer_state import (
    CompletedTxn,
    LoadedSnapshot,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    take_snapshot,
    truncate_and_reload,
)
from kraftpy.protocol.batch_header import BatchHeader, iter_batches, read_header, stamp
from kraftpy.protocol.control_records import build_end_txn_marker, read_end_txn_marker
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import SimpleRecord, build_batch

T0 = 1_700_000_000_000
COMMIT, ABORT = True, False


def data_batch(pid: int, epoch: int = 0, seq: int = 0, n: int = 1, *, transactional: bool = True,
               ts: int = T0) -> bytes:
    records = [SimpleRecord(b"k", b"v%d" % i, timestamp=ts) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, base_timestamp=ts,
                       is_transactional=transactional)


def marker_batch(pid: int, committed: bool, coordinator_epoch: int = 0, epoch: int = 0, *, ts: int = T0) -> bytes:
    return build_end_txn_marker(producer_id=pid, producer_epoch=epoch, committed=committed,
                                coordinator_epoch=coordinator_epoch, timestamp=ts)


class Log:
    """A partition's log in memory with its producer state, appended as a leader appends."""

    def __init__(self, expiration_ms: int = 10**12) -> None:
        self.state = ProducerStateManager(expiration_ms=expiration_ms)
        self.buf = bytearray()
        self.end = 0

    def append(self, batch: bytes, now_ms: int = T0) -> tuple[BatchHeader, CompletedTxn | None]:
        """Validate (as the leader), stamp at the log end, apply; the stamped header and the answer."""
        header = read_header(batch)
        if header.is_control:
            check = self.state.validate_marker(header, read_end_txn_marker(batch), now_ms)
        else:
            check = self.state.validate_append(header, now_ms)
        assert check.should_append, check
        stamped = bytearray(batch)
        stamp(stamped, 0, self.end, 0)
        self.buf += stamped
        header = read_header(stamped)
        marker = read_end_txn_marker(stamped) if header.is_control else None
        completed = self.state.update(header, marker=marker)
        self.end = header.next_offset
        return header, completed

    def replay_items(self, from_offset: int = 0, *, with_markers: bool = True):
        for pos, header in iter_batches(self.buf):
            if header.last_offset < from_offset:
                continue
            if header.is_control and with_markers:
                yield header, read_end_txn_marker(self.buf, pos)
            else:
                yield header


# ---------------------------------------------------------------------------------------------
# Open, commit, abort


def test_transactional_batches_open_the_transaction_and_a_commit_marker_completes_it():
    log = Log()
    log.append(data_batch(1, seq=0, n=2))
    log.append(data_batch(1, seq=2, n=3))
    assert log.state.entry(1).current_txn_first_offset == 0, "the second batch continues the transaction"
    assert log.state.open_transactions() == [(0, 1)]
    header, completed = log.append(marker_batch(1, COMMIT, coordinator_epoch=4))
    assert header.base_offset == 5
    assert completed == CompletedTxn(1, first_offset=0, last_offset=5, is_aborted=False, last_stable_offset=6)
    assert log.state.open_transactions() == []
    assert log.state.entry(1).current_txn_first_offset == -1
    assert log.state.entry(1).coordinator_epoch == 4


def test_abort_marker_reports_an_aborted_transaction():
    log = Log()
    log.append(data_batch(1))
    _, completed = log.append(marker_batch(1, ABORT))
    assert completed == CompletedTxn(1, 0, 1, is_aborted=True, last_stable_offset=2)


def test_marker_without_open_transaction_completes_nothing_but_keeps_the_coordinator_epoch():
    log = Log()
    log.append(data_batch(1, transactional=False))
    _, completed = log.append(marker_batch(1, ABORT, coordinator_epoch=9))
    assert completed is None
    assert log.state.entry(1).coordinator_epoch == 9
    assert log.state.first_unstable_offset() is None


def test_header_only_replay_closes_the_transaction_without_reporting_it():
    log = Log()
    log.append(data_batch(1))
    header, _ = log.append(marker_batch(1, COMMIT))
    replica = ProducerStateManager()
    for item in log.replay_items(with_markers=False):
        assert replica.update(item) is None
    assert replica.open_transactions() == []
    assert replica.first_unstable_offset() == 0, "closed, but its marker is above the high watermark"
    replica.on_high_watermark_update(header.next_offset)
    assert replica.first_unstable_offset() is None


# ---------------------------------------------------------------------------------------------
# The leader's checks


def test_transactional_batch_from_an_older_epoch_is_invalid_producer_epoch():
    log = Log()
    log.append(data_batch(1, epoch=3))
    check = log.state.validate_append(read_header(data_batch(1, epoch=2, seq=1)), T0)
    assert check.error is ErrorCode.INVALID_PRODUCER_EPOCH


def test_non_transactional_batch_while_a_transaction_is_open_is_invalid_txn_state():
    log = Log()
    log.append(data_batch(1, seq=0))
    check = log.state.validate_append(read_header(data_batch(1, seq=1, transactional=False)), T0)
    assert check.error is ErrorCode.INVALID_TXN_STATE
    bumped = log.state.validate_append(read_header(data_batch(1, epoch=1, seq=0, transactional=False)), T0)
    assert bumped.error is ErrorCode.INVALID_TXN_STATE, "a new epoch does not close the transaction"
    assert log.state.validate_append(read_header(data_batch(1, seq=1)), T0).should_append
    log.append(marker_batch(1, COMMIT))
    assert log.state.validate_append(read_header(data_batch(1, seq=1, transactional=False)), T0).should_append


def test_marker_from_an_older_coordinator_epoch_is_fenced():
    log = Log()
    log.append(data_batch(1, epoch=2))
    log.append(marker_batch(1, COMMIT, coordinator_epoch=5, epoch=2))
    state = log.state

    def check(coordinator_epoch: int, epoch: int = 2) -> ErrorCode:
        batch = marker_batch(1, ABORT, coordinator_epoch, epoch)
        return state.validate_marker(read_header(batch), read_end_txn_marker(batch), T0).error

    assert check(4) is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert check(5) is ErrorCode.NONE
    assert check(6) is ErrorCode.NONE
    assert check(6, epoch=1) is ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(ValueError, match="not a control batch"):
        state.validate_marker(read_header(data_batch(1, epoch=2, seq=1)), read_end_txn_marker(marker_batch(1, COMMIT, 5, 2)), T0)


# ---------------------------------------------------------------------------------------------
# The last stable offset


def test_lso_with_several_producers_and_the_high_watermark():
    log = Log()
    log.append(data_batch(1, seq=0))  # 0: producer 1 opens
    log.append(data_batch(2, seq=0, transactional=False))  # 1: idempotent only
    log.append(data_batch(3, seq=0))  # 2: producer 3 opens
    state = log.state
    state.on_high_watermark_update(3)
    assert (state.first_unstable_offset(), state.last_stable_offset, state.last_stable_offset_lag) == (0, 0, 3)
    _, commit = log.append(marker_batch(1, COMMIT))  # 3
    assert commit.last_stable_offset == 2, "producer 3's transaction is still open"
    assert state.first_undecided_offset() == 2
    assert state.last_stable_offset == 0, "the commit marker is not below the high watermark yet"
    state.on_high_watermark_update(4)
    assert state.last_stable_offset == 2
    _, abort = log.append(marker_batch(3, ABORT))  # 4
    assert abort == CompletedTxn(3, 2, 4, is_aborted=True, last_stable_offset=5)
    assert state.first_undecided_offset() is None
    assert state.last_stable_offset == 2
    state.on_high_watermark_update(5)
    assert (state.first_unstable_offset(), state.last_stable_offset, state.last_stable_offset_lag) == (None, 5, 0)


def test_lso_never_above_the_high_watermark():
    log = Log()
    log.append(data_batch(1, transactional=False, n=4))
    log.state.on_high_watermark_update(2)
    assert log.state.last_stable_offset == 2
    log.append(data_batch(2))  # 4
    log.state.on_high_watermark_update(5)
    assert log.state.last_stable_offset == 4


def test_expiry_never_removes_a_producer_with_an_open_transaction():
    log = Log(expiration_ms=1000)
    log.append(data_batch(1, ts=T0))
    log.append(data_batch(2, ts=T0, transactional=False))
    assert log.state.remove_expired(T0 + 10_000) == [2]
    assert log.state.open_transactions() == [(0, 1)]
    log.append(marker_batch(1, COMMIT, ts=T0 + 1), now_ms=T0 + 10_000)
    assert log.state.remove_expired(T0 + 10_000) == [1]


# ---------------------------------------------------------------------------------------------
# Snapshots, restart, truncation, replication


def test_snapshot_round_trip_restores_open_transactions(tmp_path):
    log = Log()
    log.append(data_batch(1, seq=0, n=2))  # 0-1: producer 1 opens
    log.append(data_batch(2, seq=0))  # 2: producer 2 opens
    log.append(marker_batch(2, ABORT, coordinator_epoch=3))  # 3
    log.append(data_batch(3, seq=0))  # 4: producer 3 opens
    take_snapshot(tmp_path, log.state)
    entries = decode_snapshot(encode_snapshot(log.state.snapshot_entries()))
    assert {e.producer_id: e.current_txn_first_offset for e in entries} == {1: 0, 2: -1, 3: 4}

    restarted = ProducerStateManager()
    truncate_and_reload(restarted, tmp_path, log.end, log.replay_items)
    assert restarted.open_transactions() == [(0, 1), (4, 3)]
    assert restarted.entry(2).coordinator_epoch == 3
    restarted.on_high_watermark_update(log.end)
    assert restarted.last_stable_offset == 0
    log.state = restarted
    _, completed = log.append(marker_batch(1, COMMIT))
    assert completed == CompletedTxn(1, 0, 5, is_aborted=False, last_stable_offset=4)


def test_replay_from_a_snapshot_reopens_and_closes_as_the_log_says():
    log = Log()
    log.append(data_batch(1, seq=0))  # 0
    snapshot = LoadedSnapshot(1, log.state.snapshot_entries())
    log.append(marker_batch(1, COMMIT, coordinator_epoch=2))  # 1
    log.append(data_batch(1, seq=1))  # 2: a new transaction
    log.append(data_batch(2, seq=0))  # 3
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(snapshot, log.replay_items(1))
    assert rebuilt.open_transactions() == log.state.open_transactions() == [(2, 1), (3, 2)]
    assert rebuilt.entry(1).coordinator_epoch == 2
    assert rebuilt.first_unstable_offset() == 0, "the commit at 1 is not known to be replicated"


def test_truncation_drops_transactions_opened_above_it_and_reopens_those_whose_marker_is_cut():
    log = Log()
    log.append(data_batch(1, seq=0))  # 0: producer 1 opens
    log.append(data_batch(2, seq=0))  # 1: producer 2 opens
    log.append(marker_batch(1, COMMIT))  # 2
    log.append(data_batch(3, seq=0))  # 3: producer 3 opens
    log.state.on_high_watermark_update(2)
    state = log.state
    state.truncate_to(2, None, log.replay_items())
    assert state.open_transactions() == [(0, 1), (1, 2)], "the marker at 2 is gone: producer 1 is open again"
    assert state.entry(3) is None
    assert state.map_end_offset == 2
    assert state.last_stable_offset == 0


def test_truncation_keeps_a_closed_transaction_unstable_until_the_high_watermark_passes_its_marker():
    log = Log()
    log.append(data_batch(1, seq=0))  # 0
    log.append(marker_batch(1, ABORT))  # 1
    log.append(data_batch(2, seq=0, transactional=False))  # 2
    snapshot = LoadedSnapshot(3, log.state.snapshot_entries())
    log.append(data_batch(2, seq=1, transactional=False))  # 3
    log.append(data_batch(2, seq=2, transactional=False))  # 4
    state = log.state
    state.on_high_watermark_update(1)
    # The snapshot at 3 no longer knows the transaction closed at 1; the state before did.
    state.truncate_to(4, snapshot, log.replay_items(3))
    assert state.first_unstable_offset() == 0
    assert state.last_stable_offset == 0
    state.on_high_watermark_update(2)
    assert state.last_stable_offset == 2


def test_truncation_below_the_high_watermark_lowers_it():
    log = Log()
    log.append(data_batch(1, transactional=False, n=3))
    log.state.on_high_watermark_update(3)
    log.state.truncate_to(1, None, log.replay_items())
    assert log.state.high_watermark == 1 and log.state.last_stable_offset == 1


def test_a_follower_copying_the_log_gets_the_leaders_transaction_state():
    leader = Log()
    leader.append(data_batch(1, seq=0, n=2))
    leader.append(data_batch(2, seq=0))
    leader.append(marker_batch(1, ABORT, coordinator_epoch=1))
    leader.append(data_batch(3, seq=0, transactional=False))
    leader.append(data_batch(1, seq=2))
    follower = ProducerStateManager()
    completed = []
    for pos, header in iter_batches(leader.buf):  # the follower appends the leader's bytes as they are
        marker = read_end_txn_marker(leader.buf, pos) if header.is_control else None
        completed.append(follower.update(header, marker=marker))
    assert [c for c in completed if c] == [CompletedTxn(1, 0, 3, is_aborted=True, last_stable_offset=2)]
    assert follower.open_transactions() == leader.state.open_transactions() == [(2, 2), (5, 1)]
    assert follower.snapshot_entries() == leader.state.snapshot_entries()
    for state in (leader.state, follower):
        state.on_high_watermark_update(6)
    assert follower.last_stable_offset == leader.state.last_stable_offset == 2


# ---------------------------------------------------------------------------------------------
# A random walk against a model


PIDS = (1, 2, 3)


class TxnModel(RuleBasedStateMachine):
    """Data batches, markers, high watermark advances, snapshots, truncations and restarts in random
    order; after every step the LSO and the open transactions equal a plain model's, and the LSO never
    passes an open transaction's first offset.

    The model is the list of (offset, producer, kind) appended. Snapshots are taken as segment rolls
    take them, also right after a marker, so that truncations and restarts start from snapshots above
    closed but unreplicated transactions. A restart from a snapshot forgets that
    closed transactions whose marker lies below the snapshot are unreplicated (the snapshot format
    cannot say so, as in Kafka): the model lists those markers as ``forgotten``.
    """

    @initialize()
    def start(self) -> None:
        self.log = Log()
        self.events: list[tuple[int, int, str]] = []
        self.forgotten: set[int] = set()
        self.snapshots: dict[int, LoadedSnapshot] = {}
        self.hw = 0

    # -- the model ----------------------------------------------------------------------------

    def model(self) -> tuple[dict[int, int], list[tuple[int, int]]]:
        """Open transactions (producer → first offset) and closed ones (first offset, marker offset)."""
        open_txns: dict[int, int] = {}
        closed = []
        for offset, pid, kind in self.events:
            if kind == "txn":
                open_txns.setdefault(pid, offset)
            elif kind in ("commit", "abort") and pid in open_txns:
                closed.append((open_txns.pop(pid), offset))
        return open_txns, closed

    def model_lso(self) -> int:
        open_txns, closed = self.model()
        unstable = list(open_txns.values()) + [
            first for first, marker in closed if marker >= self.hw and marker not in self.forgotten
        ]
        return min([self.hw, *unstable])

    def next_seq(self, pid: int) -> int:
        return sum(1 for _, p, kind in self.events if p == pid and kind in ("txn", "data"))

    # -- steps --------------------------------------------------------------------------------

    @rule(pid=st.sampled_from(PIDS), transactional=st.booleans())
    def data(self, pid: int, transactional: bool) -> None:
        open_txns, _ = self.model()
        batch = data_batch(pid, seq=self.next_seq(pid), transactional=transactional)
        if pid in open_txns and not transactional:
            assert self.log.state.validate_append(read_header(batch), T0).error is ErrorCode.INVALID_TXN_STATE
            return
        self.events.append((self.log.end, pid, "txn" if transactional else "data"))
        self.log.append(batch)

    @rule(pid=st.sampled_from(PIDS), abort=st.booleans(), roll=st.booleans())
    def marker(self, pid: int, abort: bool, roll: bool) -> None:
        open_txns, _ = self.model()
        offset = self.log.end
        _, completed = self.log.append(marker_batch(pid, ABORT if abort else COMMIT))
        self.events.append((offset, pid, "abort" if abort else "commit"))
        if pid in open_txns:
            others = [first for p, first in open_txns.items() if p != pid]
            assert completed == CompletedTxn(pid, open_txns[pid], offset, abort, min(others, default=offset + 1))
        else:
            assert completed is None
        if roll:  # a segment roll right after the marker snapshots the state, as the partition does
            self.snapshot()

    @rule(step=st.integers(1, 4))
    def advance_high_watermark(self, step: int) -> None:
        self.hw = min(self.log.end, self.hw + step)
        self.log.state.on_high_watermark_update(self.hw)

    @rule()
    def snapshot(self) -> None:
        entries = decode_snapshot(encode_snapshot(self.log.state.snapshot_entries()))
        self.snapshots[self.log.end] = LoadedSnapshot(self.log.end, entries)

    def latest_snapshot(self, offset: int) -> LoadedSnapshot | None:
        below = [o for o in self.snapshots if o <= offset]
        return self.snapshots[max(below)] if below else None

    @precondition(lambda self: self.log.end > self.hw)
    @rule(data=st.data())
    def truncate(self, data) -> None:
        offset = data.draw(st.integers(self.hw, self.log.end - 1))
        snapshot = self.latest_snapshot(offset)
        self.log.state.truncate_to(offset, snapshot, self.log.replay_items(snapshot.offset if snapshot else 0))
        self.log.buf = bytearray(b"".join(
            bytes(self.log.buf[pos : pos + h.size]) for pos, h in iter_batches(self.log.buf) if h.base_offset < offset
        ))
        self.log.end = offset
        self.events = [e for e in self.events if e[0] < offset]
        # A replay from below a forgotten marker learns its transaction again (the snapshot it starts
        # from is older than the marker, or there is none and the whole log is replayed).
        replayed_from = snapshot.offset if snapshot else 0
        self.forgotten = {m for m in self.forgotten if m < offset and m < replayed_from}
        self.snapshots = {o: s for o, s in self.snapshots.items() if o <= offset}

    @rule()
    def restart(self) -> None:
        snapshot = self.latest_snapshot(self.log.end)
        state = ProducerStateManager(expiration_ms=10**12)
        state.rebuild(snapshot, self.log.replay_items(snapshot.offset if snapshot else 0), end_offset=self.log.end)
        state.on_high_watermark_update(self.hw)
        self.log.state = state
        if snapshot is not None:
            _, closed = self.model()
            self.forgotten |= {marker for _, marker in closed if marker < snapshot.offset}

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def lso_is_the_models(self) -> None:
        state = self.log.state
        open_txns, _ = self.model()
        assert state.open_transactions() == sorted((first, pid) for pid, first in open_txns.items())
        assert state.last_stable_offset == self.model_lso()
        assert all(state.last_stable_offset <= first for first in open_txns.values())
        assert state.last_stable_offset <= self.hw


TestTxnModel = TxnModel.TestCase
TestTxnModel.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
