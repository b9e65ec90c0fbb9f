"""The transaction coordinator on in-memory ``__transaction_state`` partitions: InitProducerId, AddPartitions,
AddOffsets, EndTxn with markers before COMPLETE, failover mid-commit, fencing, timeouts, expiry, routing."""

from __future__ import annotations

import attrs
import pytest
import trio

from kraftpy.coordinator.group_coordinator import partition_for
from kraftpy.coordinator.runtime import CoordinatorWriteError
from kraftpy.coordinator.txn_coordinator import TxnCoordinator
from kraftpy.coordinator.txn_records import decode_transaction_log_value, transaction_log_key
from kraftpy.coordinator.txn_state import OFFSETS_TOPIC, ProducerIdAndEpoch, TxnConfig, TxnState
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeTransactionsRequest, ListTransactionsRequest
from tests.helpers.offsets_log import OffsetsLog, trio_clock_ms

TXN = "txn-1"
FIRST_PID = 4000


@attrs.frozen
class MarkerCall:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: frozenset
    #: The id's last state in the log when the markers were sent.
    logged_state: TxnState | None


class RecordingMarkerSender:
    """Records every send (with what the log said of the id at that moment). ``failures`` sends raise
    first; while ``gate`` is an unset event, sends wait on it (a partition leader that does not answer)."""

    def __init__(self, logs: dict[int, OffsetsLog]) -> None:
        self.logs = logs
        self.attempts = 0
        self.calls: list[MarkerCall] = []
        self.failures = 0
        self.gate: trio.Event | None = None

    async def send(self, transactional_id, producer_id, producer_epoch, coordinator_epoch, committed, partitions):
        self.attempts += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise ConnectionError("partition leader unreachable")
        self.calls.append(MarkerCall(transactional_id, producer_id, producer_epoch, coordinator_epoch, committed,
                                     frozenset(partitions), logged_states(self.logs, transactional_id)[-1]))


def logged_states(logs: dict[int, OffsetsLog], txn_id: str) -> list[TxnState | None]:
    """The id's records in its partition's log, in order (None: its tombstone)."""
    key = transaction_log_key(txn_id)
    out = []
    for log in logs.values():
        for _, k, v in log.records:
            if k == key:
                entry = decode_transaction_log_value(v)
                out.append(None if entry is None else entry.status)
    return out or [None]


class TxnHarness:
    def __init__(self, *, partitions: int = 1, **config) -> None:
        self.config = TxnConfig(state_log_num_partitions=partitions, **config)
        self.logs = {p: OffsetsLog(p) for p in range(partitions)}
        self.sender = RecordingMarkerSender(self.logs)
        self.allocated: list[int] = []
        self.coordinator = self.new_coordinator()

    async def allocate(self) -> int:
        self.allocated.append(FIRST_PID + len(self.allocated))
        return self.allocated[-1]

    def new_coordinator(self) -> TxnCoordinator:
        return TxnCoordinator(self.config, clock=trio_clock_ms, allocate_producer_id=self.allocate,
                              marker_sender=self.sender, node_id=1)

    async def start(self, nursery, coordinator=None, partitions=None) -> TxnCoordinator:
        coordinator = coordinator or self.coordinator
        await nursery.start(coordinator.run)
        for p in self.logs if partitions is None else partitions:
            coordinator.on_elected(self.logs[p].writer())
        for shard in list(coordinator.runtime.shards.values()):
            await shard.loaded.wait()
        return coordinator

    def meta(self, txn_id: str = TXN, coordinator=None):
        shard = (coordinator or self.coordinator).shard_for(txn_id)
        return None if shard is None else shard.txns.get(txn_id)

    async def wait_logged(self, state: TxnState | None, txn_id: str = TXN) -> None:
        """Until the id's last committed record is ``state`` (None: its tombstone); bounded."""
        log = self.logs[partition_for(txn_id, self.config.state_log_num_partitions)]
        with trio.fail_after(120):
            while logged_states(self.logs, txn_id)[-1] is not state or log.high_watermark < log.log_end_offset:
                await log.wait_changed()

    async def begin(self, txn_id: str = TXN, partitions=(("t", 0), ("t", 1)), coordinator=None):
        c = coordinator or self.coordinator
        init = await c.init_producer_id(txn_id, 60000)
        assert init.error == ErrorCode.NONE, init
        assert await c.add_partitions(txn_id, init.producer_id, init.producer_epoch, partitions) == ErrorCode.NONE
        return init


async def test_commit_writes_prepare_then_markers_then_complete(autojump_clock, nursery):
    h = TxnHarness()
    await h.start(nursery)
    c = h.coordinator
    init = await c.init_producer_id(TXN, 60000)
    assert (init.error, init.producer_id, init.producer_epoch) == (ErrorCode.NONE, FIRST_PID, 0)
    pid = init.producer_id
    assert await c.add_partitions(TXN, pid, 0, [("t", 0), ("t", 1)]) == ErrorCode.NONE
    assert await c.add_offsets(TXN, pid, 0, "group-a") == ErrorCode.NONE
    offsets_tp = (OFFSETS_TOPIC, partition_for("group-a", 50))
    assert h.meta().partitions == {("t", 0), ("t", 1), offsets_tp}
    assert c.verify_partitions(TXN, pid, 0, [("t", 0), ("u", 0)]) == {
        ("t", 0): ErrorCode.NONE, ("u", 0): ErrorCode.TRANSACTION_ABORTABLE}
    assert await c.end_txn(TXN, pid, 0, commit=True) == ErrorCode.NONE
    await h.wait_logged(TxnState.COMPLETE_COMMIT)
    assert h.sender.calls == [MarkerCall(TXN, pid, 0, 0, True, frozenset({("t", 0), ("t", 1), offsets_tp}),
                                         TxnState.PREPARE_COMMIT)]
    assert logged_states(h.logs, TXN) == [TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING,
                                          TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    meta = h.meta()
    assert (meta.state, meta.partitions, meta.pending_state) == (TxnState.COMPLETE_COMMIT, frozenset(), None)
    # A resent EndTxn of the same decision is answered NONE; the other decision is refused.
    assert await c.end_txn(TXN, pid, 0, commit=True) == ErrorCode.NONE
    assert await c.end_txn(TXN, pid, 0, commit=False) == ErrorCode.INVALID_TXN_STATE


async def test_abort_sends_abort_markers_and_the_next_transaction_starts(autojump_clock, nursery):
    h = TxnHarness()
    await h.start(nursery)
    init = await h.begin()
    assert await h.coordinator.end_txn(TXN, init.producer_id, 0, commit=False) == ErrorCode.NONE
    await h.wait_logged(TxnState.COMPLETE_ABORT)
    assert [(m.committed, m.logged_state) for m in h.sender.calls] == [(False, TxnState.PREPARE_ABORT)]
    assert await h.coordinator.add_partitions(TXN, init.producer_id, 0, [("t", 2)]) == ErrorCode.NONE
    assert h.meta().state is TxnState.ONGOING and h.meta().partitions == {("t", 2)}


async def test_markers_are_retried_and_complete_waits_for_them(autojump_clock, nursery):
    h = TxnHarness()
    await h.start(nursery)
    init = await h.begin()
    h.sender.failures = 3
    assert await h.coordinator.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.NONE
    await h.wait_logged(TxnState.COMPLETE_COMMIT)
    assert h.sender.attempts == 4 and len(h.sender.calls) == 1
    assert h.sender.calls[0].logged_state is TxnState.PREPARE_COMMIT
    assert logged_states(h.logs, TXN).count(TxnState.COMPLETE_COMMIT) == 1


async def test_requests_during_completion_are_concurrent(autojump_clock, nursery):
    h = TxnHarness()
    await h.start(nursery)
    init = await h.begin()
    h.sender.gate = trio.Event()
    assert await h.coordinator.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.NONE
    c = h.coordinator
    assert await c.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert await c.add_partitions(TXN, init.producer_id, 0, [("t", 5)]) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert (await c.init_producer_id(TXN, 60000)).error == ErrorCode.CONCURRENT_TRANSACTIONS
    h.sender.gate.set()
    await h.wait_logged(TxnState.COMPLETE_COMMIT)


async def test_failover_mid_commit_resumes_the_markers_then_completes(autojump_clock, nursery):
    h = TxnHarness()
    old = await h.start(nursery)
    init = await h.begin()
    h.sender.gate = trio.Event()  # the markers do not get through before the coordinator fails
    assert await old.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.NONE
    assert logged_states(h.logs, TXN)[-1] is TxnState.PREPARE_COMMIT
    # Another broker becomes the leader of the partition; the old one learns it lost it.
    h.logs[0].new_epoch()
    old.on_resigned(0, 0)
    new = await h.start(nursery, h.new_coordinator())
    h.sender.gate.set()
    await h.wait_logged(TxnState.COMPLETE_COMMIT)
    # Only the new coordinator's markers completed, with its coordinator epoch.
    assert [(m.coordinator_epoch, m.committed, m.logged_state) for m in h.sender.calls] == [
        (1, True, TxnState.PREPARE_COMMIT)]
    assert logged_states(h.logs, TXN).count(TxnState.COMPLETE_COMMIT) == 1
    assert h.meta(coordinator=new).state is TxnState.COMPLETE_COMMIT
    assert await old.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.NOT_COORDINATOR
    assert await new.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.NONE


async def test_a_new_producer_fences_the_zombie_and_aborts_its_transaction(autojump_clock, nursery):
    h = TxnHarness()
    await h.start(nursery)
    c = h.coordinator
    zombie = await h.begin()
    # The new instance's first InitProducerId aborts the open transaction with the epoch bumped...
    assert (await c.init_producer_id(TXN, 60000)).error == ErrorCode.CONCURRENT_TRANSACTIONS
    await h.wait_logged(TxnState.COMPLETE_ABORT)
    assert [(m.producer_epoch, m.committed, m.partitions) for m in h.sender.calls] == [
        (1, False, frozenset({("t", 0), ("t", 1)}))]
    # ...and its retry gets the epoch after that one.
    retry = await c.init_producer_id(TXN, 60000)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.NONE, zombie.producer_id, 2)
    pid = zombie.producer_id
    assert await c.end_txn(TXN, pid, 0, commit=True) == ErrorCode.PRODUCER_FENCED
    assert await c.add_partitions(TXN, pid, 0, [("t", 0)]) == ErrorCode.PRODUCER_FENCED
    assert c.verify_partitions(TXN, pid, 0, [("t", 0)]) == {("t", 0): ErrorCode.PRODUCER_FENCED}
    assert await c.add_partitions(TXN, pid, 2, [("t", 0)]) == ErrorCode.NONE


async def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(autojump_clock, nursery):
    h = TxnHarness(abort_timed_out_transaction_cleanup_interval_ms=1000)
    await h.start(nursery)
    c = h.coordinator
    init = await c.init_producer_id(TXN, 5000)
    assert await c.add_partitions(TXN, init.producer_id, 0, [("t", 0)]) == ErrorCode.NONE
    started = trio.current_time()
    await h.wait_logged(TxnState.COMPLETE_ABORT)
    assert 5 <= trio.current_time() - started <= 7  # the first check after the timeout
    assert [(m.producer_epoch, m.committed) for m in h.sender.calls] == [(1, False)]
    assert await c.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.PRODUCER_FENCED


async def test_an_idle_id_expires_with_a_tombstone(autojump_clock, nursery):
    h = TxnHarness(transactional_id_expiration_ms=60000, remove_expired_transaction_cleanup_interval_ms=10000)
    await h.start(nursery)
    c = h.coordinator
    init = await h.begin()
    assert await c.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.NONE
    await h.wait_logged(TxnState.COMPLETE_COMMIT)
    await trio.sleep(30)
    assert (await c.init_producer_id("txn-2", 60000)).error == ErrorCode.NONE  # not idle long enough
    await h.wait_logged(None)
    assert h.meta() is None and h.meta("txn-2") is not None
    described = await c.describe_transactions(DescribeTransactionsRequest(transactional_ids=[TXN]))
    assert described.transaction_states[0].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    # A coordinator loading the log does not know the id either (the tombstone removes it).
    h.logs[0].new_epoch()
    c.on_resigned(0, 0)
    again = await h.start(nursery, h.new_coordinator())
    assert again.shard_for(TXN).txns.keys() == {"txn-2"}


async def test_routing_errors_not_running_not_coordinator_and_loading(autojump_clock, nursery):
    h = TxnHarness(partitions=2)
    c = h.coordinator
    here, elsewhere = "txn-1", next(f"x{i}" for i in range(100) if partition_for(f"x{i}", 2) != partition_for("txn-1", 2))
    assert (await c.init_producer_id(here, 60000)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    await nursery.start(c.run)
    log = h.logs[partition_for(here, 2)]
    log.read_gate = trio.Event()  # a slow load
    c.on_elected(log.writer())
    assert (await c.init_producer_id(here, 60000)).error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert await c.end_txn(here, 1, 0, commit=True) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert c.verify_partitions(here, 1, 0, [("t", 0)]) == {("t", 0): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    listed = await c.list_transactions(ListTransactionsRequest(state_filters=[], producer_id_filters=[]))
    assert listed.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert (await c.init_producer_id(elsewhere, 60000)).error == ErrorCode.NOT_COORDINATOR
    log.read_gate.set()
    await c.runtime.shards[log.partition].loaded.wait()
    assert (await c.init_producer_id(here, 60000)).error == ErrorCode.NONE
    assert (await c.init_producer_id(here, 60000, ProducerIdAndEpoch(FIRST_PID, 0))).producer_epoch == 1


async def test_a_failed_write_leaves_the_state_unchanged(autojump_clock, nursery):
    h = TxnHarness()
    await h.start(nursery)
    c = h.coordinator
    log = h.logs[0]
    log.fail_next = [CoordinatorWriteError(ErrorCode.NOT_ENOUGH_REPLICAS, "isr too small")]
    assert (await c.init_producer_id(TXN, 60000)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.meta() is None  # the id the write would have created is not known
    init = await c.init_producer_id(TXN, 60000)
    before = h.meta()
    log.fail_next = [CoordinatorWriteError(ErrorCode.NOT_ENOUGH_REPLICAS, "isr too small")]
    assert await c.add_partitions(TXN, init.producer_id, 0, [("t", 0)]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.meta() == before and before.state is TxnState.EMPTY and before.pending_state is None
    assert await c.add_partitions(TXN, init.producer_id, 0, [("t", 0)]) == ErrorCode.NONE
    log.fail_next = [CoordinatorWriteError(ErrorCode.KAFKA_STORAGE_ERROR, "disk gone")]
    assert await c.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.NOT_COORDINATOR
    assert h.meta().state is TxnState.ONGOING and h.meta().pending_state is None
    assert h.sender.attempts == 0


async def test_a_write_of_unknown_outcome_reloads_the_partition(autojump_clock, nursery):
    h = TxnHarness()
    await h.start(nursery)
    c = h.coordinator
    init = await h.begin()
    first = c.runtime.shards[0]
    h.logs[0].fail_next = [CoordinatorWriteError(ErrorCode.REQUEST_TIMED_OUT, "not replicated in time")]
    assert await c.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    reloaded = c.runtime.shards[0]
    assert reloaded is not first and reloaded.leader_epoch == first.leader_epoch
    await reloaded.loaded.wait()
    assert h.meta().state is TxnState.ONGOING and h.meta().pending_state is None  # what the log says
    assert await c.end_txn(TXN, init.producer_id, 0, commit=True) == ErrorCode.NONE
    await h.wait_logged(TxnState.COMPLETE_COMMIT)


async def test_describe_and_list_transactions(autojump_clock, nursery):
    h = TxnHarness()
    await h.start(nursery)
    c = h.coordinator
    a = await h.begin("a", partitions=[("t", 1), ("t", 0), ("u", 3)])
    await trio.sleep(5)
    b = await c.init_producer_id("b", 30000)
    described = await c.describe_transactions(DescribeTransactionsRequest(transactional_ids=["a", "b", "zz"]))
    da, db, dz = described.transaction_states
    assert (da.error_code, da.transaction_state, da.producer_id, da.producer_epoch, da.transaction_timeout_ms) == (
        ErrorCode.NONE, "Ongoing", a.producer_id, 0, 60000)
    assert [(t.topic, t.partitions) for t in da.topics] == [("t", [0, 1]), ("u", [3])]
    assert (db.transaction_state, db.transaction_start_time_ms, db.topics) == ("Empty", -1, [])
    assert dz.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    async def listed(states=(), pids=(), duration=-1):
        r = await c.list_transactions(ListTransactionsRequest(state_filters=list(states),
                                                              producer_id_filters=list(pids),
                                                              duration_filter=duration))
        return r.error_code, sorted(r.unknown_state_filters), sorted(
            (t.transactional_id, t.transaction_state) for t in r.transaction_states)

    assert await listed() == (ErrorCode.NONE, [], [("a", "Ongoing"), ("b", "Empty")])
    assert await listed(["Ongoing", "Bogus"]) == (ErrorCode.NONE, ["Bogus"], [("a", "Ongoing")])
    assert await listed(["Bogus"]) == (ErrorCode.NONE, ["Bogus"], [])
    assert await listed(pids=[b.producer_id]) == (ErrorCode.NONE, [], [("b", "Empty")])
    assert await listed(duration=4000) == (ErrorCode.NONE, [], [("a", "Ongoing"), ("b", "Empty")])
    assert await listed(["Ongoing"], duration=6000) == (ErrorCode.NONE, [], [])


@pytest.mark.parametrize("timeout_ms", [0, 900001])
async def test_a_timeout_outside_the_maximum_is_refused(autojump_clock, nursery, timeout_ms):
    h = TxnHarness()
    await h.start(nursery)
    assert (await h.coordinator.init_producer_id(TXN, timeout_ms)).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.logs[0].records == []


async def test_a_transactional_id_longer_than_its_record_key_is_refused_before_any_write(autojump_clock, nursery):
    """Found by the protocol fuzzer (make soak, seed 1): a 40,000-byte id, which
    InitProducerId v2+ can carry, failed encoding its __transaction_state key and the handler failed."""
    h = TxnHarness()
    await h.start(nursery)
    assert (await h.coordinator.init_producer_id("t" * 40000, 60000)).error == ErrorCode.INVALID_REQUEST
    assert (await h.coordinator.init_producer_id("é" * 16384, 60000)).error == ErrorCode.INVALID_REQUEST  # bytes count
    assert all(log.records == [] for log in h.logs.values())
    assert (await h.coordinator.init_producer_id("t" * 32767, 60000)).error == ErrorCode.NONE  # the longest key


async def test_no_producer_id_block_is_answered_load_in_progress(autojump_clock, nursery):
    h = TxnHarness()

    async def refuse() -> int:
        raise ConnectionError("controller unreachable")

    h.coordinator = TxnCoordinator(h.config, clock=trio_clock_ms, allocate_producer_id=refuse,
                                   marker_sender=h.sender)
    await h.start(nursery)
    assert (await h.coordinator.init_producer_id(TXN, 60000)).error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert h.logs[0].records == [] and h.meta() is None
