"""The transaction coordinator's state machine: Kafka's transitions and errors, one by one, then
random clients (zombies included) against it with its invariants checked after every step."""

from __future__ import annotations

import itertools

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kraftpy.config.loader import build_config, defaults
from kraftpy.config.properties import parse_properties
from kraftpy.coordinator import txn_state as ts
from kraftpy.coordinator.txn_records import decode_transaction_log_value, transaction_log_value
from kraftpy.coordinator.txn_state import (
    MAX_EPOCH,
    IllegalTransitionError,
    ProducerIdAndEpoch,
    Reply,
    Transition,
    TxnConfig,
    TxnMetadata,
)
from kraftpy.coordinator.txn_state import TxnState as S
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode as E

CFG = TxnConfig()
TID = "tx"
T0, T1 = ("t", 0), ("t", 1)


def allocator(start: int = 1000):
    counter = itertools.count(start)
    return lambda: next(counter)


def written(decision) -> TxnMetadata | None:
    """The metadata after the decision's write succeeded."""
    assert isinstance(decision, Transition), decision
    return decision.apply(decision.pending)


def meta(state=S.EMPTY, *, pid=7, epoch=3, partitions=(), start=-1, updated=100, **kw) -> TxnMetadata:
    if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and start < 0:
        start = 50
    return TxnMetadata(transactional_id=TID, producer_id=pid, producer_epoch=epoch, timeout_ms=60000,
                       state=state, txn_last_update_timestamp=updated, partitions=frozenset(partitions),
                       txn_start_timestamp=start, **kw)


def init(m, *, timeout=60000, expected=None, now=1000, alloc=None):
    return ts.init_producer_id(m, TID, timeout, expected, now, alloc or allocator(), CFG)


# --- the states

def test_state_ids_and_names_are_kafkas():
    assert [(s.value, s.kafka_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert all(ts.state_from_kafka_name(s.kafka_name) is s for s in S)
    with pytest.raises(ValueError):
        ts.state_from_kafka_name("Committed")
    assert ts.EXPIRATION_ALLOWED == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


def test_valid_previous_states_are_kafkas_table():
    assert ts.VALID_PREVIOUS == {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }


# --- InitProducerId

def test_init_of_a_new_id_allocates_a_producer_id_at_epoch_0():
    d = init(None, now=1234, alloc=allocator(42))
    assert d.created and d.reply is E.NONE
    m = written(d)
    assert (m.producer_id, m.producer_epoch, m.last_producer_epoch, m.state) == (42, 0, -1, S.EMPTY)
    assert (m.timeout_ms, m.txn_last_update_timestamp, m.partitions, m.txn_start_timestamp) == (60000, 1234,
                                                                                               frozenset(), -1)


def test_init_without_expected_epoch_bumps_and_forgets_the_last():
    m = written(init(meta(S.COMPLETE_COMMIT, epoch=3, partitions=()), timeout=5000))
    assert (m.producer_id, m.producer_epoch, m.last_producer_epoch, m.state, m.timeout_ms) == (7, 4, -1, S.EMPTY, 5000)
    assert m.previous_producer_id == 7 and m.txn_start_timestamp == -1


def test_init_with_the_current_epoch_bumps_and_a_retry_gets_the_same_epoch():
    m = written(init(meta(epoch=3), expected=ProducerIdAndEpoch(7, 3)))
    assert (m.producer_epoch, m.last_producer_epoch) == (4, 3)
    again = written(init(m, expected=ProducerIdAndEpoch(7, 3)))
    assert (again.producer_id, again.producer_epoch, again.last_producer_epoch) == (7, 4, 3)


@pytest.mark.parametrize("expected", [ProducerIdAndEpoch(7, 1), ProducerIdAndEpoch(8, 3)])
def test_init_with_a_stale_producer_is_fenced(expected):
    d = init(meta(epoch=3, last_producer_epoch=2), expected=expected)
    assert isinstance(d, Reply) and d.error is E.PRODUCER_FENCED and d.message


def test_init_with_an_expected_producer_on_a_new_id_gets_the_new_producer():
    m = written(init(None, expected=ProducerIdAndEpoch(5, 9), alloc=allocator(77)))
    assert (m.producer_id, m.producer_epoch) == (77, 0)


@pytest.mark.parametrize("timeout", [0, -1, CFG.transaction_max_timeout_ms + 1])
def test_init_refuses_a_timeout_past_the_maximum(timeout):
    d = init(None, timeout=timeout)
    assert d.error is E.INVALID_TRANSACTION_TIMEOUT and "transaction.max.timeout.ms" in d.message
    assert init(None, timeout=CFG.transaction_max_timeout_ms).reply is E.NONE
    small = TxnConfig(transaction_max_timeout_ms=1000)
    assert ts.init_producer_id(None, TID, 1001, None, 0, allocator(), small).error is E.INVALID_TRANSACTION_TIMEOUT


def test_init_with_an_empty_id_is_an_invalid_request():
    assert ts.init_producer_id(None, "", 1000, None, 0, allocator(), CFG).error is E.INVALID_REQUEST


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_init_while_markers_are_written_is_concurrent(state):
    assert init(meta(state, partitions=[T0])).error is E.CONCURRENT_TRANSACTIONS


def test_init_while_a_write_is_in_flight_is_concurrent():
    d = init(None)
    assert init(d.pending).error is E.CONCURRENT_TRANSACTIONS


def test_init_during_an_open_transaction_fences_it_then_bumps_again():
    ongoing = meta(S.ONGOING, epoch=3, partitions=[T0, T1])
    fence = init(ongoing, now=2000)
    assert fence.reply is E.CONCURRENT_TRANSACTIONS
    assert fence.pending.pending_state is S.PREPARE_EPOCH_FENCE
    t = fence.target
    assert (t.state, t.producer_epoch, t.last_producer_epoch, t.partitions) == (S.PREPARE_ABORT, 4, -1,
                                                                                 frozenset({T0, T1}))
    # the zombie cannot end its transaction, neither while the fence is written nor after
    assert ts.end_txn(fence.pending, TID, 7, 3, True, 2001).error is E.CONCURRENT_TRANSACTIONS
    aborting = fence.apply(fence.pending)
    assert ts.end_txn(aborting, TID, 7, 3, True, 2001).error is E.PRODUCER_FENCED
    # the new producer retries: still CONCURRENT until the abort's markers are out
    assert init(aborting).error is E.CONCURRENT_TRANSACTIONS
    aborted = written(ts.complete(aborting, 2002))
    assert (aborted.state, aborted.partitions) == (S.COMPLETE_ABORT, frozenset())
    fresh = written(init(aborted, now=2003))
    assert (fresh.producer_epoch, fresh.state) == (5, S.EMPTY)


def test_an_exhausted_epoch_takes_a_new_producer_id():
    m = meta(S.COMPLETE_COMMIT, epoch=MAX_EPOCH - 1)
    rotated = written(init(m, alloc=allocator(900)))
    assert (rotated.producer_id, rotated.producer_epoch, rotated.previous_producer_id,
            rotated.last_producer_epoch) == (900, 0, 7, -1)
    # with the producer's expectation, the last epoch is kept so that a retry is recognised
    d = init(m, expected=ProducerIdAndEpoch(7, MAX_EPOCH - 1), alloc=allocator(901))
    rotated = written(d)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.last_producer_epoch) == (901, 0, MAX_EPOCH - 1)
    retry = written(init(rotated, expected=ProducerIdAndEpoch(7, MAX_EPOCH - 1), alloc=allocator(902)))
    assert (retry.producer_id, retry.producer_epoch) == (901, 0)


def test_fencing_at_the_last_usable_epoch_uses_the_reserved_one_then_rotates():
    ongoing = meta(S.ONGOING, epoch=MAX_EPOCH - 1, partitions=[T0])
    aborting = written(init(ongoing))
    assert aborting.producer_epoch == MAX_EPOCH
    done = written(ts.complete(aborting, 2000))
    fresh = written(init(done, alloc=allocator(555)))
    assert (fresh.producer_id, fresh.producer_epoch) == (555, 0)


# --- AddPartitionsToTxn, AddOffsetsToTxn, verification

def add(m, parts, *, pid=7, epoch=3, now=1000):
    return ts.add_partitions(m, TID, pid, epoch, parts, now)


@pytest.mark.parametrize(("m", "pid", "epoch", "error"), [
    (None, 7, 3, E.INVALID_PRODUCER_ID_MAPPING),
    (meta(), 8, 3, E.INVALID_PRODUCER_ID_MAPPING),
    (meta(), 7, 2, E.PRODUCER_FENCED),
    (meta(), 7, 4, E.PRODUCER_FENCED),
    (meta(S.PREPARE_COMMIT, partitions=[T0]), 7, 3, E.CONCURRENT_TRANSACTIONS),
    (meta(S.PREPARE_ABORT, partitions=[T0]), 7, 3, E.CONCURRENT_TRANSACTIONS),
    (meta(S.DEAD), 7, 3, E.INVALID_PRODUCER_ID_MAPPING),
])
def test_add_partitions_errors(m, pid, epoch, error):
    d = add(m, [T0], pid=pid, epoch=epoch)
    assert isinstance(d, Reply) and d.error is error and d.message


def test_add_partitions_opens_then_grows_the_transaction():
    m = written(add(meta(S.EMPTY), [T0], now=500))
    assert (m.state, m.partitions, m.txn_start_timestamp, m.txn_last_update_timestamp) == (
        S.ONGOING, frozenset({T0}), 500, 500)
    m = written(add(m, [T1], now=600))
    assert (m.partitions, m.txn_start_timestamp, m.txn_last_update_timestamp) == (frozenset({T0, T1}), 500, 600)
    same = add(m, [T1, T0], now=700)
    assert same == Reply(E.NONE, same.message)


def test_add_partitions_after_a_completed_transaction_starts_a_new_one():
    m = written(add(meta(S.COMPLETE_ABORT, start=50), [T1], now=900))
    assert (m.state, m.partitions, m.txn_start_timestamp) == (S.ONGOING, frozenset({T1}), 900)


def test_add_partitions_while_a_write_is_in_flight_is_concurrent():
    d = add(meta(), [T0])
    assert add(d.pending, [T1]).error is E.CONCURRENT_TRANSACTIONS


def test_add_offsets_adds_the_groups_offsets_partition():
    m = written(ts.add_offsets(meta(), TID, 7, 3, 17, 1000))
    assert m.partitions == {("__consumer_offsets", 17)}
    assert ts.add_offsets(meta(), TID, 7, 2, 17, 1000).error is E.PRODUCER_FENCED


def test_verify_partitions():
    m = meta(S.ONGOING, partitions=[T0])
    assert ts.verify_partitions(m, TID, 7, 3, [T0, T1]) == {T0: E.NONE, T1: E.TRANSACTION_ABORTABLE}
    assert ts.verify_partitions(m, TID, 7, 2, [T0, T1]) == {T0: E.PRODUCER_FENCED, T1: E.PRODUCER_FENCED}
    assert ts.verify_partitions(None, TID, 7, 3, [T0]) == {T0: E.INVALID_PRODUCER_ID_MAPPING}
    assert ts.verify_partitions(m, "", 7, 3, [T0]) == {T0: E.INVALID_REQUEST}
    assert ts.verify_partitions(meta(S.PREPARE_COMMIT, partitions=[T0]), TID, 7, 3, [T0]) == {
        T0: E.CONCURRENT_TRANSACTIONS}
    assert ts.verify_partitions(meta(S.EMPTY), TID, 7, 3, [T0]) == {T0: E.TRANSACTION_ABORTABLE}


# --- EndTxn

@pytest.mark.parametrize(("state", "commit", "expected"), [
    (S.ONGOING, True, S.PREPARE_COMMIT),
    (S.ONGOING, False, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, True, E.NONE),
    (S.COMPLETE_COMMIT, False, E.INVALID_TXN_STATE),
    (S.COMPLETE_ABORT, False, E.NONE),
    (S.COMPLETE_ABORT, True, E.INVALID_TXN_STATE),
    (S.PREPARE_COMMIT, True, E.CONCURRENT_TRANSACTIONS),
    (S.PREPARE_COMMIT, False, E.INVALID_TXN_STATE),
    (S.PREPARE_ABORT, False, E.CONCURRENT_TRANSACTIONS),
    (S.PREPARE_ABORT, True, E.INVALID_TXN_STATE),
    (S.EMPTY, True, E.INVALID_TXN_STATE),
    (S.EMPTY, False, E.INVALID_TXN_STATE),
])
def test_end_txn_table(state, commit, expected):
    parts = [T0] if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT) else []
    m = meta(state, partitions=parts)
    d = ts.end_txn(m, TID, 7, 3, commit, 2000)
    if isinstance(expected, S):
        after = written(d)
        assert (after.state, after.partitions, after.producer_epoch, after.txn_start_timestamp,
                after.txn_last_update_timestamp) == (expected, m.partitions, 3, m.txn_start_timestamp, 2000)
    else:
        assert isinstance(d, Reply) and d.error is expected


@pytest.mark.parametrize(("m", "pid", "epoch", "error"), [
    (None, 7, 3, E.INVALID_PRODUCER_ID_MAPPING),
    (meta(S.ONGOING, partitions=[T0]), 9, 3, E.INVALID_PRODUCER_ID_MAPPING),
    (meta(S.ONGOING, partitions=[T0]), 7, 2, E.PRODUCER_FENCED),
    (meta(S.COMPLETE_COMMIT), 7, 2, E.PRODUCER_FENCED),
])
def test_end_txn_from_another_producer(m, pid, epoch, error):
    assert ts.end_txn(m, TID, pid, epoch, True, 2000).error is error


def test_end_txn_while_a_write_is_in_flight_is_concurrent():
    d = add(meta(S.ONGOING, partitions=[T0]), [T1])
    assert ts.end_txn(d.pending, TID, 7, 3, True, 2000).error is E.CONCURRENT_TRANSACTIONS


def test_complete_after_the_markers():
    m = written(ts.complete(meta(S.PREPARE_COMMIT, partitions=[T0, T1]), 3000))
    assert (m.state, m.partitions, m.producer_epoch, m.txn_last_update_timestamp) == (
        S.COMPLETE_COMMIT, frozenset(), 3, 3000)
    assert written(ts.complete(meta(S.PREPARE_ABORT, partitions=[T0]), 3000)).state is S.COMPLETE_ABORT
    for state in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT):
        assert ts.complete(meta(state, partitions=[T0] if state is S.ONGOING else []), 3000).error is \
            E.INVALID_TXN_STATE
    assert ts.complete(None, 3000).error is E.INVALID_TXN_STATE


# --- timeouts and expiry

def test_timed_out_transactions_are_aborted_with_an_epoch_bump():
    late = meta(S.ONGOING, partitions=[T0], start=1000)  # timeout 60000
    on_time = attrs.evolve(late, transactional_id="other", txn_start_timestamp=30000)
    assert ts.timed_out([late, on_time, meta(S.EMPTY)], 61000) == []
    assert ts.timed_out([late, on_time, meta(S.EMPTY)], 61001) == [late]
    assert ts.timed_out([attrs.evolve(late, pending_state=S.PREPARE_COMMIT)], 99999) == []
    d = ts.abort_timed_out(late, 7, 61001)
    assert d.reply is E.CONCURRENT_TRANSACTIONS and d.pending.pending_state is S.PREPARE_EPOCH_FENCE
    aborting = written(d)
    assert (aborting.state, aborting.producer_epoch) == (S.PREPARE_ABORT, 4)
    assert ts.end_txn(aborting, TID, 7, 3, True, 61002).error is E.PRODUCER_FENCED
    # declined when the id moved on meanwhile
    assert ts.abort_timed_out(late, 8, 61001).error is E.INVALID_PRODUCER_ID_MAPPING
    assert ts.abort_timed_out(aborting, 7, 61001).error is E.INVALID_TXN_STATE
    assert ts.abort_timed_out(d.pending, 7, 61001).error is E.CONCURRENT_TRANSACTIONS


def test_idle_ids_expire_with_a_tombstone():
    day = 86_400_000
    idle = [meta(state, updated=0, partitions=[T0] if state in (S.ONGOING, S.PREPARE_COMMIT) else [])
            for state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.ONGOING, S.PREPARE_COMMIT)]
    idle = [attrs.evolve(m, transactional_id=f"id{i}") for i, m in enumerate(idle)]
    assert ts.expired_ids(idle, day, day) == ["id0", "id1", "id2"]
    assert ts.expired_ids(idle, day - 1, day) == []
    d = ts.expire(idle[0], day, day)
    assert d.tombstone and d.target.state is S.DEAD
    assert d.apply(d.pending) is None
    assert ts.expire(idle[3], day, day).error is E.INVALID_TXN_STATE
    assert ts.expire(idle[0], day - 1, day).error is E.INVALID_TXN_STATE
    # a request during the tombstone's write waits; a failed write keeps the id
    assert init(d.pending).error is E.CONCURRENT_TRANSACTIONS
    assert d.abandon(d.pending) == idle[0]


# --- persist, then apply

def test_a_failed_write_leaves_the_metadata_as_it_was():
    m = meta(S.ONGOING, partitions=[T0])
    for d in (add(m, [T1]), ts.end_txn(m, TID, 7, 3, False, 2000), init(m)):
        assert d.abandon(d.pending) == m
    created = init(None)
    assert created.abandon(created.pending) is None


def test_apply_refuses_metadata_that_changed_during_the_write():
    m = meta(S.ONGOING, partitions=[T0])
    d = ts.end_txn(m, TID, 7, 3, True, 2000)
    with pytest.raises(IllegalTransitionError):
        d.apply(m)  # never marked pending
    with pytest.raises(IllegalTransitionError):
        d.apply(attrs.evolve(d.pending, partitions=frozenset({T1})))
    with pytest.raises(IllegalTransitionError):
        d.abandon(None)


@pytest.mark.parametrize(("base", "target"), [
    (meta(S.EMPTY), meta(S.PREPARE_COMMIT)),                                    # not in the table
    (meta(S.ONGOING, partitions=[T0]), meta(S.COMPLETE_COMMIT)),                # markers skipped
    (meta(S.EMPTY), meta(S.EMPTY, epoch=5)),                                    # epoch jumps by 2
    (meta(S.EMPTY), meta(S.EMPTY, epoch=2)),                                    # epoch goes back
    (meta(S.ONGOING, partitions=[T0, T1]), meta(S.ONGOING, partitions=[T0])),   # partitions lost
    (meta(S.ONGOING, partitions=[T0]), meta(S.PREPARE_COMMIT, partitions=[T0], epoch=4)),
    (meta(S.ONGOING, partitions=[T0], pending_state=S.PREPARE_ABORT), meta(S.PREPARE_COMMIT, partitions=[T0])),
    (meta(S.EMPTY, updated=100), meta(S.EMPTY, updated=99)),                    # time goes back
])
def test_transitions_outside_kafkas_rules_are_refused(base, target):
    with pytest.raises(IllegalTransitionError):
        Transition(base, target)


@pytest.mark.parametrize("m", [
    meta(S.EMPTY, previous_producer_id=6, last_producer_epoch=2),
    meta(S.ONGOING, partitions=[T0, T1, ("a", 3)], start=40),
    meta(S.PREPARE_ABORT, partitions=[T0]),
    meta(S.COMPLETE_COMMIT, start=40),
])
@pytest.mark.parametrize("version", [0, 1])
def test_metadata_survives_the_log(m, version):
    entry = decode_transaction_log_value(transaction_log_value(ts.log_entry(m), version))
    loaded = ts.from_log_entry(TID, entry)
    # the last epoch is not written, and version 0 has no previous producer id
    want = attrs.evolve(m, last_producer_epoch=-1, previous_producer_id=m.previous_producer_id if version else -1)
    assert loaded == want
    with pytest.raises(ValueError):
        ts.log_entry(meta(S.DEAD))


# --- configuration and versions

def test_config_is_read_from_kafkas_keys():
    assert TxnConfig.from_config(defaults()) == TxnConfig()
    text = ("process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@localhost:9093\n"
            "controller.listener.names=CONTROLLER\n"
            "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\ntransaction.max.timeout.ms=1000\n"
            "transactional.id.expiration.ms=5000\ntransaction.state.log.num.partitions=3\n")
    cfg = TxnConfig.from_config(build_config(parse_properties(text, "server.properties"), "server.properties"))
    assert (cfg.transaction_max_timeout_ms, cfg.transactional_id_expiration_ms, cfg.state_log_num_partitions) == (
        1000, 5000, 3)
    assert (cfg.state_log_replication_factor, cfg.state_log_min_isr, cfg.state_log_segment_bytes) == (
        3, 2, 104857600)
    assert (cfg.abort_timed_out_transaction_cleanup_interval_ms,
            cfg.remove_expired_transaction_cleanup_interval_ms) == (10000, 3600000)


@pytest.mark.parametrize(("api", "version", "expected"), [
    (ApiKey.INIT_PRODUCER_ID, 3, E.INVALID_PRODUCER_EPOCH),
    (ApiKey.INIT_PRODUCER_ID, 4, E.PRODUCER_FENCED),
    (ApiKey.END_TXN, 1, E.INVALID_PRODUCER_EPOCH),
    (ApiKey.END_TXN, 2, E.PRODUCER_FENCED),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 1, E.INVALID_PRODUCER_EPOCH),
    (ApiKey.ADD_OFFSETS_TO_TXN, 2, E.PRODUCER_FENCED),
])
def test_old_clients_get_invalid_producer_epoch(api, version, expected):
    assert ts.error_for_version(E.PRODUCER_FENCED, api, version) is expected
    assert ts.error_for_version(E.CONCURRENT_TRANSACTIONS, api, 0) is E.CONCURRENT_TRANSACTIONS


def test_topics_groups_partitions_for_the_log_value():
    assert meta(S.ONGOING, partitions=[("b", 2), ("a", 1), ("b", 0)]).topics() == {"a": [1], "b": [0, 2]}


# --- random clients, zombies included

IDS = ("a", "b")
PARTS = [("t", 0), ("t", 1), ("u", 0)]
WRITES = st.sampled_from(["ok", "ok", "ok", "ok", "fail", "later"])
CLIENT = st.integers(0, 3)  # clients 0 and 2 share id "a", 1 and 3 id "b"


class TxnClients(RuleBasedStateMachine):
    """Producers (several per transactional id, so older ones become zombies) and the coordinator's
    own steps in random order; every write may fail, and another request may arrive while one is
    in flight.

    The coordinator is modelled as Kafka's is: ``table`` holds the current metadata, ``log`` what
    was written last; a decision's write goes in flight (the metadata marked pending) and later
    succeeds or fails.
    """

    @initialize()
    def setup(self):
        self.now = 0
        self.alloc = allocator(100)
        self.table: dict[str, TxnMetadata] = {}
        self.log: dict[str, bytes] = {}                     # id -> the TransactionLogValue written last
        self.in_flight: dict[str, tuple[Transition, TxnMetadata | None]] = {}
        self.clients: list[tuple[str, int, int] | None] = [None] * 4  # (id, producer id, epoch)
        self.max_epoch: dict[int, int] = {}                 # producer id -> highest epoch written
        self.txn_serial: dict[str, int] = dict.fromkeys(IDS, 0)
        self.decided: dict[tuple[str, int], S] = {}          # (id, transaction) -> PREPARE_* written
        self.completed: set[tuple[str, int]] = set()
        self.waiting: dict[str, int] = {}                    # id -> client whose InitProducerId is written

    def _start(self, tid: str, d, write: str = "later") -> None:
        """Start the decision's write; ``write`` says whether it succeeds or fails at once, or later."""
        if isinstance(d, Transition):
            assert tid not in self.in_flight, "a second write while one is in flight"
            before = self.table.get(tid)
            self.in_flight[tid] = (d, before)
            self.table[tid] = d.pending
            if write != "later":
                self._end_write(tid, write == "ok")

    def _client(self, c):
        return self.clients[c] or (IDS[c % 2], -1, -1)

    @rule(c=CLIENT, with_expected=st.booleans(), timeout=st.sampled_from([1000, 60000]), write=WRITES)
    def init(self, c, with_expected, timeout, write):
        tid, pid, epoch = self._client(c)
        expected = ProducerIdAndEpoch(pid, epoch) if with_expected and pid >= 0 else None
        d = ts.init_producer_id(self.table.get(tid), tid, timeout, expected, self.now, self.alloc, CFG)
        if isinstance(d, Transition) and d.reply is E.NONE:
            self.waiting[tid] = c  # the client learns its producer once the write succeeds
        self._start(tid, d, write)

    def _producer(self, data) -> tuple[str, int, int]:
        """A client that has been given a producer (maybe since fenced: a zombie)."""
        return data.draw(st.sampled_from([c for c in self.clients if c is not None]))

    @precondition(lambda self: any(self.clients))
    @rule(data=st.data(), parts=st.lists(st.sampled_from(PARTS), min_size=1, max_size=2), write=WRITES)
    def add(self, data, parts, write):
        tid, pid, epoch = self._producer(data)
        self._start(tid, ts.add_partitions(self.table.get(tid), tid, pid, epoch, parts, self.now), write)

    @precondition(lambda self: any(self.clients))
    @rule(data=st.data(), commit=st.booleans(), write=WRITES)
    def end(self, data, commit, write):
        tid, pid, epoch = self._producer(data)
        m = self.table.get(tid)
        d = ts.end_txn(m, tid, pid, epoch, commit, self.now)
        if isinstance(d, Transition):
            # a fenced epoch never ends a transaction
            assert epoch == self.max_epoch.get(pid, epoch) and (m.producer_id, m.producer_epoch) == (pid, epoch)
        self._start(tid, d, write)

    @rule(tid=st.sampled_from(IDS), write=WRITES)
    def markers_written(self, tid, write):
        m = self.table.get(tid)
        if m is not None and m.pending_state is None and m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            self._start(tid, ts.complete(m, self.now), write)

    @rule(ms=st.sampled_from([1, 10, 100, 2000]))
    def time_passes(self, ms):
        self.now += ms

    @rule(write=WRITES)
    def abort_timed_out(self, write):
        for m in ts.timed_out(list(self.table.values()), self.now):
            assert m.state is S.ONGOING and m.txn_start_timestamp + m.timeout_ms < self.now
            self._start(m.transactional_id, ts.abort_timed_out(m, m.producer_id, self.now), write)

    @rule(write=WRITES)
    def expire(self, write):
        for tid in ts.expired_ids(list(self.table.values()), self.now, 3000):
            self._start(tid, ts.expire(self.table[tid], self.now, 3000), write)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), ok=st.booleans())
    def write_ends(self, data, ok):
        self._end_write(data.draw(st.sampled_from(sorted(self.in_flight))), ok)

    def _end_write(self, tid: str, ok: bool) -> None:
        d, before = self.in_flight.pop(tid)
        current = self.table[tid]
        if not ok:
            after = d.abandon(current)
            assert after == before, "a failed write changed the metadata"
        else:
            after = d.apply(current)
            self._written(tid, d.target, after)
        if after is None:
            self.table.pop(tid, None)
        else:
            self.table[tid] = after
        c = self.waiting.pop(tid, None)
        if ok and c is not None:
            self.clients[c] = (tid, d.target.producer_id, d.target.producer_epoch)

    def _written(self, tid: str, target: TxnMetadata, after: TxnMetadata | None) -> None:
        prev = self.table.get(tid)  # still the pending metadata: the state before this write
        # epochs only go up for a producer id
        pid = target.producer_id
        if target.state is not S.DEAD:
            assert target.producer_epoch >= self.max_epoch.get(pid, -1), "an epoch went back"
            self.max_epoch[pid] = target.producer_epoch
        # a transaction ends at most once, the way it was decided
        if target.state is S.ONGOING and (prev is None or prev.state is not S.ONGOING):
            self.txn_serial[tid] += 1
        key = (tid, self.txn_serial[tid])
        if target.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            assert key not in self.decided, f"transaction {key} decided twice"
            self.decided[key] = target.state
        if target.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert key not in self.completed, f"transaction {key} completed twice"
            want = S.COMPLETE_COMMIT if self.decided[key] is S.PREPARE_COMMIT else S.COMPLETE_ABORT
            assert target.state is want
            self.completed.add(key)
        if after is None:
            self.log.pop(tid, None)
        else:
            self.log[tid] = transaction_log_value(ts.log_entry(target), 1)

    @invariant()
    def current_is_what_was_written(self):
        if not hasattr(self, "table"):
            return
        for tid in IDS:
            if tid in self.in_flight:
                assert self.table[tid].pending_state is not None
                continue
            current = self.table.get(tid)
            # what a coordinator loading the partition would find (the last epoch is not written)
            loaded = ts.from_log_entry(tid, decode_transaction_log_value(self.log[tid])) if tid in self.log else None
            assert (current and attrs.evolve(current, last_producer_epoch=-1)) == loaded


TestTxnClients = TxnClients.TestCase
TestTxnClients.settings = settings(max_examples=150, stateful_step_count=80, deadline=None)


# --- librdkafka's abort after a failed send (EndTxn(abort), then the KIP-360 epoch bump)

def test_an_abortable_error_is_aborted_then_the_epoch_bumped_with_the_producers_own_epoch():
    """The sequence librdkafka sends after its records timed out: EndTxn(abort) with its epoch, then
    InitProducerId naming its producer id and epoch, retried while the abort completes."""
    ongoing = meta(S.ONGOING, partitions=[T0])
    aborting = written(ts.end_txn(ongoing, TID, 7, 3, False, 2000))
    assert aborting.state is S.PREPARE_ABORT
    mine = ProducerIdAndEpoch(7, 3)
    assert init(aborting, expected=mine, now=2001).error is E.CONCURRENT_TRANSACTIONS
    aborted = written(ts.complete(aborting, 2002))
    bumped = written(init(aborted, expected=mine, now=2003))
    assert (bumped.state, bumped.producer_id, bumped.producer_epoch) == (S.EMPTY, 7, 4)
    # its retry (the answer was lost) gets the same epoch; the next transaction opens with it
    assert written(init(bumped, expected=mine, now=2004)).producer_epoch == 4
    assert written(add(bumped, [T1], epoch=4)).state is S.ONGOING


def test_an_abort_of_a_transaction_the_coordinator_never_recorded_is_invalid_as_in_kafka():
    """librdkafka sends EndTxn(abort) once it sent an AddPartitionsToTxn, even one that failed: the
    coordinator still holds the transaction before. Kafka's coordinator answers INVALID_TXN_STATE in
    COMPLETE_COMMIT and EMPTY (NONE in COMPLETE_ABORT), and so does this one; a new producer (no
    expected epoch) continues with the next epoch."""
    for state, error in ((S.COMPLETE_COMMIT, E.INVALID_TXN_STATE), (S.EMPTY, E.INVALID_TXN_STATE),
                         (S.COMPLETE_ABORT, E.NONE)):
        before = meta(state)
        assert ts.end_txn(before, TID, 7, 3, False, 2000).error is error
        fresh = written(init(before, now=2001))
        assert (fresh.state, fresh.producer_id, fresh.producer_epoch) == (S.EMPTY, 7, 4)


def test_a_transaction_the_coordinator_timed_out_fences_its_producer_abort_and_bump_alike():
    """The coordinator's abort of a timed-out transaction bumps the epoch and forgets the last one
    (Kafka's prepareFenceProducerEpoch): the producer's EndTxn(abort) and its InitProducerId with its
    own epoch are both PRODUCER_FENCED, never INVALID_TXN_STATE; a new producer continues."""
    fenced = written(ts.abort_timed_out(meta(S.ONGOING, partitions=[T0], start=0), 7, 70000))
    mine = ProducerIdAndEpoch(7, 3)
    assert ts.end_txn(fenced, TID, 7, 3, False, 70001).error is E.PRODUCER_FENCED
    assert init(fenced, expected=mine, now=70001).error is E.CONCURRENT_TRANSACTIONS  # markers on their way
    aborted = written(ts.complete(fenced, 70002))
    assert ts.end_txn(aborted, TID, 7, 3, False, 70003).error is E.PRODUCER_FENCED
    assert init(aborted, expected=mine, now=70003).error is E.PRODUCER_FENCED
    assert written(init(aborted, now=70004)).producer_epoch == 5
