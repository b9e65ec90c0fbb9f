"""Transactional offset commits (TxnOffsetCommit): pending in the producer's transaction until its
marker, committed or dropped by it, replayed alike on load; require_stable; Kafka's member checks."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from kraftpy.coordinator import records
from kraftpy.protocol.errors import ErrorCode
from tests.helpers.offsets_log import GroupHarness, consumer_subscription, storage_error

T0, T1 = ("t", 0), ("t", 1)
PID, OTHER = 4000, 4001


async def start(nursery, **kw) -> GroupHarness:
    h = GroupHarness(**kw)
    await h.start(nursery)
    return h


def mark(h: GroupHarness, producer_id: int, committed: bool, *, epoch: int = 0) -> None:
    """The partition gets the producer's marker, and the broker tells the coordinator (as its marker path will)."""
    offset = h.logs[0].append_marker(producer_id, epoch, committed)
    assert h.coordinator.complete_transaction(0, producer_id, committed, offset) == ErrorCode.NONE


async def failover(h: GroupHarness, nursery) -> None:
    """Leadership of every partition moves to a new coordinator, which loads the log."""
    old = h.coordinator
    for p, log in h.logs.items():
        log.new_epoch()
        old.on_resigned(p, log.leader_epoch - 1)
    h.coordinator = h.new_coordinator()
    await h.start(nursery)


async def test_written_as_a_transactional_batch_of_the_producer(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("g", {T0: 1})
    assert await h.txn_commit("g", {T0: 5, T1: 6}, producer_id=PID, producer_epoch=3) == {
        T0: ErrorCode.NONE, T1: ErrorCode.NONE}
    log = h.logs[0]
    assert log.batches == [1, 2]  # never coalesced with the plain commit
    assert log.transactional == {1: (PID, 3), 2: (PID, 3)}
    [(_, key, value)] = [r for r in log.records if r[0] == 2]
    assert records.decode_key(key) == records.OffsetKey("g", "t", 1)
    assert records.decode_offset_value(value).offset == 6


async def test_pending_offsets_are_invisible_until_the_commit_marker(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("g", {T0: 1})
    await h.txn_commit("g", {T0: 5, T1: 6}, producer_id=PID)
    assert await h.fetch("g", [T0, T1]) == ({T0: (1, 0), T1: (-1, 0)}, 0)
    assert await h.fetch("g") == ({T0: (1, 0)}, 0)
    mark(h, OTHER, committed=True)  # another producer's marker decides nothing here
    assert await h.fetch("g", [T0, T1]) == ({T0: (1, 0), T1: (-1, 0)}, 0)
    mark(h, PID, committed=True)
    assert await h.fetch("g", [T0, T1]) == ({T0: (5, 0), T1: (6, 0)}, 0)
    assert h.group("g").pending_txn_offsets == {} and PID not in h.shard("g").producer_groups


async def test_abort_drops_the_pending_offsets(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("g", {T0: 1})
    await h.txn_commit("g", {T0: 5, T1: 6}, producer_id=PID)
    mark(h, PID, committed=False)
    assert await h.fetch("g", [T0, T1], require_stable=True) == ({T0: (1, 0), T1: (-1, 0)}, 0)
    assert h.group("g").pending_txn_offsets == {}


async def test_a_plain_commit_written_after_the_transactional_one_wins(autojump_clock, nursery):
    h = await start(nursery)
    await h.txn_commit("g", {T0: 5}, producer_id=PID)
    await h.commit("g", {T0: 9})
    mark(h, PID, committed=True)
    assert await h.fetch("g", [T0]) == ({T0: (9, 0)}, 0)


async def test_require_stable_answers_unstable_while_a_transaction_holds_the_partition(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("g", {T0: 1, T1: 2})
    await h.txn_commit("g", {T0: 5}, producer_id=PID)
    assert await h.fetch("g", [T0, T1], version=7, require_stable=True) == (
        {T0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), T1: (2, 0)}, 0)
    assert await h.fetch("g", None, version=8, require_stable=True) == (
        {T0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), T1: (2, 0)}, 0)
    # Before v7 there is no require_stable: the last committed offset.
    assert await h.fetch("g", [T0], version=6, require_stable=True) == ({T0: (1, 0)}, 0)
    mark(h, PID, committed=True)
    assert await h.fetch("g", [T0, T1], version=7, require_stable=True) == ({T0: (5, 0), T1: (2, 0)}, 0)


async def test_load_replays_pending_committed_and_aborted_transactions(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("g", {T0: 1, T1: 2})
    await h.txn_commit("g", {T0: 10}, producer_id=PID)  # committed below
    await h.txn_commit("g", {T1: 20}, producer_id=OTHER)  # aborted below
    await h.txn_commit("txn-only", {T0: 7}, producer_id=OTHER)
    mark(h, PID, committed=True)
    mark(h, OTHER, committed=False)
    await h.txn_commit("g", {T1: 30}, producer_id=PID)  # the producer's next transaction: still open
    await h.txn_commit("fresh", {T0: 3}, producer_id=PID)

    await failover(h, nursery)
    assert await h.fetch("g", [T0, T1], require_stable=True) == (
        {T0: (10, 0), T1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}, 0)
    assert await h.fetch("g", [T1]) == ({T1: (2, 0)}, 0)
    assert await h.fetch("txn-only", [T0]) == ({T0: (-1, 0)}, 0)
    assert await h.fetch("fresh", [T0]) == ({T0: (-1, 0)}, 0)  # a group with only pending offsets is loaded
    assert "fresh" in h.shard("fresh").groups

    # The loaded pending offsets are decided by the producer's marker, as before the failover.
    mark(h, PID, committed=True)
    assert await h.fetch("g", [T0, T1], require_stable=True) == ({T0: (10, 0), T1: (30, 0)}, 0)
    assert await h.fetch("fresh", [T0]) == ({T0: (3, 0)}, 0)

    # And the same state loads again from the log.
    await failover(h, nursery)
    assert await h.fetch("g", [T0, T1], require_stable=True) == ({T0: (10, 0), T1: (30, 0)}, 0)
    assert await h.fetch("fresh", [T0]) == ({T0: (3, 0)}, 0)


async def test_a_marker_before_later_offsets_leaves_them_pending(autojump_clock, nursery):
    """The broker may report a marker the load already replayed: offsets written after it stay."""
    h = await start(nursery)
    await h.txn_commit("g", {T0: 5}, producer_id=PID)
    marker = h.logs[0].append_marker(PID, 0, True)
    await h.txn_commit("g", {T0: 6}, producer_id=PID)
    await failover(h, nursery)
    assert h.coordinator.complete_transaction(0, PID, True, marker) == ErrorCode.NONE
    assert await h.fetch("g", [T0], require_stable=True) == ({T0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}, 0)
    mark(h, PID, committed=True)
    assert await h.fetch("g", [T0], require_stable=True) == ({T0: (6, 0)}, 0)


async def test_a_commit_marker_before_the_write_is_acknowledged_commits_it_once_it_is(autojump_clock, nursery):
    h = await start(nursery)
    log = h.logs[0]
    log.auto_commit = False
    results: list = []
    done = trio.Event()

    async def commit() -> None:
        results.append(await h.txn_commit("g", {T0: 5}, producer_id=PID))
        done.set()

    nursery.start_soon(commit)
    await trio.testing.wait_all_tasks_blocked()
    assert log.transactional == {0: (PID, 0)} and log.high_watermark == 0  # written, not yet replicated
    marker = log.append_marker(PID, 0, True)
    log.commit()
    # The marker's news comes before the write's acknowledgement: committed, yet still unstable.
    assert h.coordinator.complete_transaction(0, PID, True, marker) == ErrorCode.NONE
    assert h.group("g").has_pending_offset_commits_for(T0)
    await done.wait()
    assert results == [{T0: ErrorCode.NONE}]
    assert await h.fetch("g", [T0], require_stable=True) == ({T0: (5, 0)}, 0)


async def test_a_failed_write_leaves_nothing_pending(autojump_clock, nursery):
    h = await start(nursery)
    h.logs[0].fail_next.append(storage_error())
    assert await h.txn_commit("g", {T0: 5}, producer_id=PID) == {T0: ErrorCode.NOT_COORDINATOR}
    assert await h.fetch("g", [T0], require_stable=True) == ({T0: (-1, 0)}, 0)
    assert h.group("g") is None or h.group("g").pending_txn_offsets == {}


async def test_too_large_metadata_is_refused(autojump_clock, nursery):
    h = await start(nursery, offset_metadata_max_bytes=4)
    assert await h.txn_commit("g", {T0: 5}, producer_id=PID, metadata="x" * 5) == {
        T0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert h.group("g") is None


async def test_deleting_the_offsets_drops_the_pending_ones(autojump_clock, nursery):
    h = await start(nursery)
    await h.txn_commit("g", {T0: 5}, producer_id=PID)
    assert await h.delete_offsets("g", [T0]) == (ErrorCode.NONE, {T0: ErrorCode.NONE})
    mark(h, PID, committed=True)
    assert await h.fetch("g", [T0], require_stable=True) == ({T0: (-1, 0)}, 0)


# -- validation (Kafka's validateOffsetCommit for transactional commits) -------------------------------

async def test_member_checks_of_v3(autojump_clock, nursery):
    h = await start(nursery)
    joined = await h.stable("g", 1, session_timeout_ms=30_000, protocols=[("range", consumer_subscription("t"))],
                            instance_id="i1")
    member = next(iter(joined))
    generation = joined[member].generation_id
    ok = await h.txn_commit("g", {T0: 1}, producer_id=PID, generation=generation, member_id=member, instance_id="i1")
    assert ok == {T0: ErrorCode.NONE}
    cases = [
        (dict(generation=generation, member_id="stranger"), ErrorCode.UNKNOWN_MEMBER_ID),
        (dict(generation=generation + 1, member_id=member, instance_id="i1"), ErrorCode.ILLEGAL_GENERATION),
        (dict(generation=generation, member_id="stranger", instance_id="i1"), ErrorCode.FENCED_INSTANCE_ID),
        (dict(generation=generation, member_id=member, instance_id="i2"), ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    for kw, expected in cases:
        assert await h.txn_commit("g", {T1: 2}, producer_id=OTHER, **kw) == {T1: expected}, kw
    assert OTHER not in h.group("g").pending_txn_offsets
    # No member named (v0-2, or v3 without one): accepted even though the group has members.
    assert await h.txn_commit("g", {T1: 2}, producer_id=OTHER, version=2) == {T1: ErrorCode.NONE}
    assert await h.txn_commit("g", {T1: 3}, producer_id=OTHER, version=3) == {T1: ErrorCode.NONE}


async def test_v0_carries_no_member_and_makes_the_group(autojump_clock, nursery):
    """A v0-2 request has no member fields: the group is made for it (Kafka adds it as Empty)."""
    h = await start(nursery)
    assert await h.txn_commit("new", {T0: 1}, producer_id=PID, version=0) == {T0: ErrorCode.NONE}
    assert PID in h.group("new").pending_txn_offsets


async def test_a_member_of_an_unknown_group_is_unknown(autojump_clock, nursery):
    h = await start(nursery)
    assert await h.txn_commit("nobody", {T0: 1}, producer_id=PID, generation=1, member_id="m") == {
        T0: ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.group("nobody") is None


@pytest.mark.parametrize("elect", [False, True])
async def test_coordinator_errors(autojump_clock, nursery, elect):
    h = GroupHarness(existing={T0})
    await h.start(nursery, elect=False)
    if elect:
        h.logs[0].read_gate = trio.Event()
        h.coordinator.on_elected(h.logs[0].writer())
        expected = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    else:
        expected = ErrorCode.NOT_COORDINATOR
    assert await h.txn_commit("g", {T0: 1, T1: 1}, producer_id=PID) == {
        T0: expected, T1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert await h.txn_commit("", {T0: 1}, producer_id=PID) == {T0: ErrorCode.INVALID_GROUP_ID}
    if not elect:
        assert h.coordinator.complete_transaction(0, PID, True) == ErrorCode.NOT_COORDINATOR


async def test_a_marker_that_arrives_while_the_partition_loads_is_applied_once_loaded(autojump_clock, nursery):
    h = await start(nursery)
    await h.txn_commit("g", {T0: 5}, producer_id=PID)
    await h.txn_commit("g", {T1: 6}, producer_id=OTHER)
    log = h.logs[0]
    old = h.coordinator
    log.new_epoch()
    old.on_resigned(0, log.leader_epoch - 1)
    h.coordinator = h.new_coordinator()
    await h.start(nursery, elect=False)
    log.read_gate = trio.Event()
    h.coordinator.on_elected(log.writer())
    await trio.testing.wait_all_tasks_blocked()  # loading, up to the high watermark before the markers
    for producer_id, committed in ((PID, True), (OTHER, False)):
        marker = log.append_marker(producer_id, 0, committed)
        assert h.coordinator.complete_transaction(0, producer_id, committed, marker) == ErrorCode.NONE
    assert h.shard("g") is None
    log.read_gate.set()
    await h.loaded()
    assert await h.fetch("g", [T0, T1], require_stable=True) == ({T0: (5, 0), T1: (-1, 0)}, 0)
