"""Committed offsets: commit, fetch, delete, expiry, and what survives a failover."""

from __future__ import annotations

import pytest
import trio

from kraftpy.coordinator import records
from kraftpy.coordinator.group import EMPTY, STABLE
from kraftpy.coordinator.runtime import CoordinatorWriteError
from kraftpy.protocol.errors import ErrorCode
from tests.helpers.offsets_log import GroupHarness, consumer_subscription, storage_error, trio_clock_ms

T0, T1 = ("t", 0), ("t", 1)


async def start(nursery, **kw) -> GroupHarness:
    h = GroupHarness(**kw)
    await h.start(nursery)
    return h


def offset_records(h: GroupHarness, group: str) -> list[tuple[tuple[str, int], object]]:
    out = []
    for log in h.logs.values():
        for _, key, value in log.records:
            k = records.decode_key(key)
            if isinstance(k, records.OffsetKey) and k.group == group:
                out.append(((k.topic, k.partition), None if value is None else records.decode_offset_value(value)))
    return out


async def test_standalone_commit_then_fetch(autojump_clock, nursery):
    h = await start(nursery)
    now = trio_clock_ms()
    assert await h.commit("g", {T0: 10, T1: 20}, metadata="m") == {T0: ErrorCode.NONE, T1: ErrorCode.NONE}
    assert await h.fetch("g", [T0, T1, ("t", 2)]) == ({T0: (10, 0), T1: (20, 0), ("t", 2): (-1, 0)}, 0)
    assert await h.fetch("g") == ({T0: (10, 0), T1: (20, 0)}, 0)  # null topics: every committed offset
    assert await h.fetch("g", [T0], version=1) == ({T0: (10, 0)}, 0)
    assert h.group("g").state is EMPTY and h.group("g").protocol_type is None
    [(tp, value), _] = offset_records(h, "g")
    assert (tp, value.offset, value.metadata, value.commit_timestamp) == (T0, 10, "m", now)


async def test_fetch_of_several_groups_at_v8(autojump_clock, nursery):
    h = GroupHarness(partitions=2)
    await h.start(nursery, elect=False)
    h.coordinator.on_elected(h.logs[0].writer())
    await h.loaded()
    here = next(g for g in (f"g{i}" for i in range(20)) if h.coordinator.partition_for(g) == 0)
    elsewhere = next(g for g in (f"g{i}" for i in range(20)) if h.coordinator.partition_for(g) == 1)
    await h.commit(here, {T0: 3})
    from kraftpy.protocol.messages import OffsetFetchRequest

    request = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None)
                                         for g in (here, elsewhere)])
    response = await h.coordinator.offset_fetch(h.ctx(8), request)
    assert [(g.group_id, g.error_code, [(t.name, [p.committed_offset for p in t.partitions]) for t in g.topics])
            for g in response.groups] == [(here, 0, [("t", [3])]), (elsewhere, ErrorCode.NOT_COORDINATOR, [])]


async def test_a_commit_is_answered_only_once_replicated(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("g", {T0: 1})
    log = h.logs[0]
    log.auto_commit = False
    answers = []

    async def commit() -> None:
        answers.append(await h.commit("g", {T0: 2}))

    nursery.start_soon(commit)
    await trio.testing.wait_all_tasks_blocked()
    assert answers == []
    assert await h.fetch("g", [T0]) == ({T0: (1, 0)}, 0)  # never an offset a failover could lose
    assert await h.fetch("g", [T0], version=7, require_stable=True) == (
        {T0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}, 0)
    log.commit()
    await trio.testing.wait_all_tasks_blocked()
    assert answers == [{T0: ErrorCode.NONE}]
    assert await h.fetch("g", [T0], version=7, require_stable=True) == ({T0: (2, 0)}, 0)


async def test_a_commit_whose_leadership_moves_is_not_coordinator_and_not_applied(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("g", {T0: 1})
    log = h.logs[0]
    log.auto_commit = False
    answers = []

    async def commit() -> None:
        answers.append(await h.commit("g", {T0: 2}))

    nursery.start_soon(commit)
    await trio.testing.wait_all_tasks_blocked()
    log.new_epoch()
    await trio.testing.wait_all_tasks_blocked()
    assert answers == [{T0: ErrorCode.NOT_COORDINATOR}]
    assert await h.fetch("g", [T0]) == ({T0: (1, 0)}, 0)


@pytest.mark.parametrize("error,expected", [
    (storage_error(), ErrorCode.NOT_COORDINATOR),
    (CoordinatorWriteError(ErrorCode.NOT_ENOUGH_REPLICAS), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (CoordinatorWriteError(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (CoordinatorWriteError(ErrorCode.REQUEST_TIMED_OUT), ErrorCode.REQUEST_TIMED_OUT),
    (CoordinatorWriteError(ErrorCode.MESSAGE_TOO_LARGE), ErrorCode.INVALID_COMMIT_OFFSET_SIZE),
])
async def test_write_errors_map_as_kafka_maps_them(autojump_clock, nursery, error, expected):
    h = await start(nursery)
    h.logs[0].fail_next.append(error)
    assert await h.commit("g", {T0: 5}) == {T0: expected}
    assert await h.fetch("g", [T0]) == ({T0: (-1, 0)}, 0)
    assert await h.commit("g", {T0: 6}) == {T0: ErrorCode.NONE}  # the next one goes through


async def test_too_large_metadata_fails_only_its_partition(autojump_clock, nursery):
    h = await start(nursery, offset_metadata_max_bytes=10)
    from kraftpy.protocol.messages import OffsetCommitRequest

    request = OffsetCommitRequest(group_id="g", topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
        OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata="x" * 11),
        OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=1, committed_offset=2, committed_metadata="ok"),
    ])])
    response = await h.coordinator.offset_commit(h.ctx(8), request)
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [
        (0, ErrorCode.OFFSET_METADATA_TOO_LARGE), (1, ErrorCode.NONE)]
    assert await h.commit("g", {T0: 1}, metadata="y" * 11) == {T0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert await h.fetch("g", [T0, T1]) == ({T0: (-1, 0), T1: (2, 0)}, 0)


async def test_commits_of_unknown_partitions_are_refused_per_partition(autojump_clock, nursery):
    h = await start(nursery, existing={T0})
    assert await h.commit("g", {T0: 1, T1: 2}) == {T0: ErrorCode.NONE, T1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert await h.fetch("g") == ({T0: (1, 0)}, 0)


async def test_concurrent_commits_share_batches(autojump_clock, nursery):
    h = await start(nursery)
    log = h.logs[0]
    log.auto_commit = False
    answers = []

    async def commit(i: int) -> None:
        answers.append(await h.commit(f"g{i}", {T0: i}))

    async with trio.open_nursery() as n:
        for i in range(100):
            n.start_soon(commit, i)
        await trio.testing.wait_all_tasks_blocked()
        log.commit()
        await trio.testing.wait_all_tasks_blocked()
        log.commit()
    assert len(answers) == 100 and all(a == {T0: ErrorCode.NONE} for a in answers)
    assert len(log.batches) <= 2 and sum(log.batches) == 100
    for i in (0, 57, 99):
        assert await h.fetch(f"g{i}", [T0]) == ({T0: (i, 0)}, 0)


async def test_member_commits_follow_the_generation(autojump_clock, nursery):
    h = await start(nursery)
    joined = await h.stable("g", 1)
    [m] = joined
    assert await h.commit("g", {T0: 1}, generation=1, member_id=m) == {T0: ErrorCode.NONE}
    assert await h.commit("g", {T0: 2}, generation=0, member_id=m) == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert await h.commit("g", {T0: 2}, generation=1, member_id="x") == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
    # Without member id and generation, only an Empty group takes commits.
    assert await h.commit("g", {T0: 2}) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
    assert await h.fetch("g", [T0]) == ({T0: (1, 0)}, 0)


async def test_retention_time_of_v2_is_written_as_an_expire_timestamp(autojump_clock, nursery):
    h = await start(nursery, offsets_retention_check_interval_ms=1000)
    now = trio_clock_ms()
    assert await h.commit("g", {T0: 1}, version=2, retention_time_ms=5000) == {T0: ErrorCode.NONE}
    [(_, value)] = offset_records(h, "g")
    assert value.expire_timestamp == now + 5000
    await trio.sleep(4)
    assert await h.fetch("g", [T0]) == ({T0: (1, 0)}, 0)
    await trio.sleep(3)
    assert await h.fetch("g", [T0]) == ({T0: (-1, 0)}, 0)
    assert offset_records(h, "g")[-1] == (T0, None)


async def test_standalone_offsets_expire_after_retention_and_the_group_goes(autojump_clock, nursery):
    h = await start(nursery, offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000)
    await h.commit("g", {T0: 1})
    await trio.sleep(30)
    await h.commit("g", {T1: 2})
    await trio.sleep(35)  # T0 is 65 s old, T1 35 s
    assert await h.fetch("g") == ({T1: (2, 0)}, 0)
    await trio.sleep(30)
    assert h.group("g") is None
    assert [tp for tp, v in offset_records(h, "g") if v is None] == [T0, T1]


async def test_offsets_of_an_empty_group_expire_retention_after_it_emptied(autojump_clock, nursery):
    h = await start(nursery, offsets_retention_minutes=1, offsets_retention_check_interval_ms=5_000)
    joined = await h.stable("g", 1, session_timeout_ms=60_000)
    [m] = joined
    await h.commit("g", {T0: 1}, generation=1, member_id=m)
    for _ in range(20):  # 100 s as a member: the commit is old, but the group is not empty
        await trio.sleep(5)
        await h.heartbeat("g", 1, m)
    assert await h.fetch("g", [T0]) == ({T0: (1, 0)}, 0)
    await h.leave("g", (m, None))
    await trio.sleep(50)
    assert await h.fetch("g", [T0]) == ({T0: (1, 0)}, 0)
    await trio.sleep(20)
    assert h.group("g") is None
    key = records.group_metadata_key("g")
    assert h.logs[0].live()[key] is None  # the group's metadata has its tombstone


async def test_a_stable_consumer_group_keeps_offsets_of_subscribed_topics(autojump_clock, nursery):
    h = await start(nursery, offsets_retention_minutes=1, offsets_retention_check_interval_ms=5_000)
    joined = await h.stable("g", 1, session_timeout_ms=60_000, protocols=[("range", consumer_subscription("t"))])
    [m] = joined
    await h.commit("g", {T0: 1, ("old", 0): 7}, generation=1, member_id=m)
    for _ in range(16):
        await trio.sleep(5)
        await h.heartbeat("g", 1, m)
    assert await h.fetch("g") == ({T0: (1, 0)}, 0)


async def test_offset_delete(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("empty", {T0: 1, T1: 2})
    assert await h.delete_offsets("empty", [T0]) == (0, {T0: ErrorCode.NONE})
    assert await h.fetch("empty") == ({T1: (2, 0)}, 0)
    assert offset_records(h, "empty")[-1] == (T0, None)
    assert await h.delete_offsets("nobody", [T0]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})

    joined = await h.stable("g", 1, protocols=[("range", consumer_subscription("t"))])
    [m] = joined
    await h.commit("g", {T0: 1, ("other", 0): 2}, generation=1, member_id=m)
    assert await h.delete_offsets("g", [T0, ("other", 0)]) == (
        0, {T0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): ErrorCode.NONE})
    assert await h.fetch("g") == ({T0: (1, 0)}, 0)

    joined = await h.stable("connect", 1, protocol_type="connect")
    assert await h.delete_offsets("connect", [T0]) == (ErrorCode.NON_EMPTY_GROUP, {})


async def test_delete_groups(autojump_clock, nursery):
    h = await start(nursery)
    await h.stable("busy", 1)
    await h.commit("idle", {T0: 1})
    [m] = await h.stable("was-busy", 1)
    await h.commit("was-busy", {T0: 4}, generation=1, member_id=m)
    await h.leave("was-busy", (m, None))
    assert await h.delete_groups("busy", "idle", "was-busy", "nobody", "idle") == {
        "busy": ErrorCode.NON_EMPTY_GROUP, "idle": ErrorCode.NONE, "was-busy": ErrorCode.NONE,
        "nobody": ErrorCode.GROUP_ID_NOT_FOUND}
    assert h.group("idle") is None and h.group("was-busy") is None and h.group("busy").state is STABLE
    live = h.logs[0].live()
    assert live[records.offset_commit_key("was-busy", "t", 0)] is None
    assert live[records.group_metadata_key("was-busy")] is None
    assert records.group_metadata_key("idle") not in live  # a standalone group never had metadata


async def test_a_new_coordinator_loads_every_commit_and_group(autojump_clock, nursery):
    h = await start(nursery, partitions=3)
    joined = await h.stable("members", 2, session_timeout_ms=30_000,
                            protocols=[("range", consumer_subscription("t"))])
    leader = next(iter(joined.values())).leader
    for i in range(10):
        await h.commit(f"solo-{i}", {("t", i): i * 10})
    await h.commit("members", {T0: 5}, generation=1, member_id=leader)
    await h.commit("gone", {T0: 1})
    await h.delete_groups("gone")
    await h.commit("solo-3", {("t", 3): 31})
    await h.delete_offsets("solo-4", [("t", 4)])

    # Failover: every partition's leadership moves to a new coordinator (a new epoch each).
    old = h.coordinator
    for p, log in h.logs.items():
        log.new_epoch()
        old.on_resigned(p, log.leader_epoch - 1)
    h.coordinator = h.new_coordinator()
    await h.start(nursery)

    for i in range(10):
        expected = {} if i == 4 else {("t", i): (31 if i == 3 else i * 10, 0)}
        assert await h.fetch(f"solo-{i}") == (expected, 0)
    assert await h.fetch("members", [T0]) == ({T0: (5, 0)}, 0)
    assert h.group("gone") is None and h.group("solo-4") is None
    group = h.group("members")
    assert (group.state, group.generation_id, set(group.members), group.leader_id) == (STABLE, 1, set(joined), leader)
    assert group.subscribed_topics == {"t"}
    for m in joined:
        assert (await h.heartbeat("members", 1, m)).error_code == ErrorCode.NONE
        assert (await h.sync("members", 1, m)).assignment == m.encode()
    group.check_invariants()


async def test_loaded_members_that_never_come_back_expire(autojump_clock, nursery):
    h = await start(nursery)
    joined = await h.stable("g", 2, session_timeout_ms=20_000)
    h.logs[0].new_epoch()
    h.coordinator.on_resigned(0, 0)
    h.coordinator = h.new_coordinator()
    await h.start(nursery)
    a, b = list(joined)
    for _ in range(5):
        await trio.sleep(5)
        await h.heartbeat("g", 1, a)
    assert h.group("g").has(a) and not h.group("g").has(b)


async def test_loading_a_compacted_log_gives_the_same_state(autojump_clock, nursery):
    h = await start(nursery)
    for round_ in range(5):
        for i in range(4):
            await h.commit(f"g{i}", {T0: round_ * 10 + i})
    await h.delete_groups("g2")
    before = {f"g{i}": await h.fetch(f"g{i}") for i in range(4)}
    h.logs[0].compact()
    h.logs[0].new_epoch()
    h.coordinator.on_resigned(0, 0)
    h.coordinator = h.new_coordinator()
    await h.start(nursery)
    assert {f"g{i}": await h.fetch(f"g{i}") for i in range(4)} == before


async def test_requests_wait_for_loading(autojump_clock, nursery):
    h = await start(nursery)
    [m] = await h.stable("g", 1)
    await h.commit("g", {T0: 9}, generation=1, member_id=m)
    log = h.logs[0]
    log.new_epoch()
    h.coordinator.on_resigned(0, 0)
    log.read_gate = trio.Event()
    h.coordinator.on_elected(log.writer())
    assert h.coordinator.owned_partitions() == {0}
    assert await h.fetch("g", [T0]) == ({}, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert (await h.join("g")).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert (await h.heartbeat("g", 1, m)).error_code == ErrorCode.NONE  # answered blindly
    assert (await h.sync("g", 1, m)).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert (await h.list_groups())[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    log.read_gate.set()
    await h.loaded()
    assert await h.fetch("g", [T0]) == ({T0: (9, 0)}, 0)


async def test_resignation_answers_parked_requests_and_drops_the_groups(autojump_clock, nursery):
    h = await start(nursery)
    joined = await h.stable("g", 2)
    leader = next(iter(joined.values())).leader
    got = []

    async def rejoin() -> None:
        got.append(await h.join("g", leader))

    nursery.start_soon(rejoin)
    await trio.testing.wait_all_tasks_blocked()
    h.coordinator.on_resigned(0, 5)  # stale? no: epoch 5 >= the shard's 0, so it resigns
    await trio.testing.wait_all_tasks_blocked()
    assert got[0].error_code == ErrorCode.NOT_COORDINATOR
    assert h.coordinator.owned_partitions() == set()
    assert (await h.heartbeat("g", 1, leader)).error_code == ErrorCode.NOT_COORDINATOR
    assert await h.commit("g", {T0: 1}) == {T0: ErrorCode.NOT_COORDINATOR}


async def test_stale_elections_and_resignations_are_ignored(autojump_clock, nursery):
    h = await start(nursery)
    await h.commit("g", {T0: 1})
    log = h.logs[0]
    log.new_epoch()
    h.coordinator.on_elected(log.writer())  # epoch 1 replaces epoch 0 (reloads)
    await h.loaded()
    h.coordinator.on_resigned(0, 0)  # an older epoch's resignation: ignored
    h.coordinator.on_elected(log.writer(leader_epoch=0))  # an older epoch's election: ignored
    assert h.coordinator.runtime.shards[0].leader_epoch == 1
    assert await h.fetch("g", [T0]) == ({T0: (1, 0)}, 0)


async def test_groups_of_partitions_led_elsewhere_are_not_coordinated_here(autojump_clock, nursery):
    h = GroupHarness(partitions=2)
    await h.start(nursery, elect=False)
    h.coordinator.on_elected(h.logs[0].writer())
    await h.loaded()
    elsewhere = next(g for g in (f"g{i}" for i in range(20)) if h.coordinator.partition_for(g) == 1)
    assert (await h.join(elsewhere)).error_code == ErrorCode.NOT_COORDINATOR
    assert await h.commit(elsewhere, {T0: 1}) == {T0: ErrorCode.NOT_COORDINATOR}
    # v1 has no group-level error: the partitions carry it.
    assert (await h.fetch(elsewhere, [T0], version=1))[0] == {T0: (-1, ErrorCode.NOT_COORDINATOR)}
    assert await h.fetch(elsewhere, [T0], version=2) == ({}, ErrorCode.NOT_COORDINATOR)
    assert await h.delete_groups(elsewhere) == {elsewhere: ErrorCode.NOT_COORDINATOR}
    assert (await h.describe(elsewhere)).error_code == ErrorCode.NOT_COORDINATOR
