"""Requests the coordinator refuses: each gets Kafka's error code, and nothing else in the group changes."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from kraftpy.protocol.errors import ErrorCode
from tests.helpers.offsets_log import GroupHarness, consumer_subscription

T0 = ("t", 0)


async def snapshot(h: GroupHarness) -> object:
    """Once every task has settled (writes appended, timers armed), everything a refused request must leave as it was: every group's state, members, assignments,
    offsets and pending ids, and the log."""
    await trio.testing.wait_all_tasks_blocked()
    groups = {}
    for shard in h.coordinator.runtime.active_shards():
        for gid, g in shard.machine.groups.items():
            groups[gid] = (
                g.state, g.generation_id, g.leader_id, g.protocol_type, g.protocol_name,
                {m.member_id: (m.group_instance_id, m.assignment, tuple(m.protocols), m.session_timeout_ms,
                               m.rebalance_timeout_ms, m.is_awaiting_join, m.is_awaiting_sync)
                 for m in g.members.values()},
                {tp: (c.record_offset, c.value) for tp, c in g.offsets.items()},
                frozenset(g.pending_members), frozenset(g.pending_sync_members))
    return groups, {p: list(log.records) for p, log in h.logs.items()}


@pytest.fixture
async def stable_group(nursery):
    """A Stable consumer group "g" of two members at generation 1, with a committed offset."""
    h = GroupHarness()
    await h.start(nursery)
    joined = await h.stable("g", 2, protocols=[("range", consumer_subscription("t"))])
    leader = next(iter(joined.values())).leader
    await h.commit("g", {T0: 42}, generation=1, member_id=leader)
    return h, joined, leader


async def test_join_with_another_protocol_type(autojump_clock, stable_group):
    h, _, _ = stable_group
    before = await snapshot(h)
    response = await h.join_new("g", protocol_type="connect")
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert await snapshot(h) == before


async def test_join_with_no_protocol_in_common(autojump_clock, stable_group):
    h, _, _ = stable_group
    before = await snapshot(h)
    assert (await h.join_new("g", protocols=[("sticky", b"")])).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert await snapshot(h) == before


async def test_join_of_a_new_group_without_protocol_type_or_protocols(autojump_clock, stable_group):
    h, _, _ = stable_group
    before = await snapshot(h)
    assert (await h.join("new", protocol_type="")).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await h.join("new", protocols=[])).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert await snapshot(h) == before  # and no group "new" was left behind


async def test_a_group_id_longer_than_its_record_key_is_invalid(autojump_clock, stable_group):
    """Found by the protocol fuzzer (make soak, seed 1): JoinGroup v6+ carries
    ids longer than a __consumer_offsets key (an int16-length string) can hold."""
    h, _, _ = stable_group
    before = await snapshot(h)
    assert (await h.join("g" * 40000)).error_code == ErrorCode.INVALID_GROUP_ID
    assert await h.commit("g" * 40000, {T0: 1}, generation=-1, member_id="") == {T0: ErrorCode.INVALID_GROUP_ID}
    assert await snapshot(h) == before


async def test_commit_for_a_generation_that_ended(autojump_clock, stable_group):
    h, joined, leader = stable_group
    # A member of generation 1 commits after the group moved on to generation 2 without it.
    follower = next(m for m in joined if m != leader)
    await h.leave("g", (follower, None))
    await h.join("g", leader)
    await h.sync("g", 2, leader, {leader: b"all"})
    before = await snapshot(h)
    assert await h.commit("g", {T0: 99}, generation=1, member_id=leader) == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert await h.commit("g", {T0: 99}, generation=1, member_id=follower) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
    # The group emptied: a member's commit for any generation is refused.
    await h.leave("g", (leader, None))
    await h.sync("g", 2, leader)  # (refused too)
    before = await snapshot(h)
    assert await h.commit("g", {T0: 99}, generation=2, member_id=leader) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
    # ... and a commit naming a generation of a group this coordinator does not know.
    assert await h.commit("unknown", {T0: 99}, generation=3, member_id="m") == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert await snapshot(h) == before
    assert await h.fetch("g", [T0]) == ({T0: (42, 0)}, 0)


async def test_sync_from_a_non_member(autojump_clock, stable_group):
    h, _, _ = stable_group
    before = await snapshot(h)
    assert (await h.sync("g", 1, "not-a-member", {"not-a-member": b"x"})).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await h.sync("nope", 1, "not-a-member")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert await snapshot(h) == before


async def test_sync_with_another_generation_or_protocol(autojump_clock, stable_group):
    h, joined, leader = stable_group
    before = await snapshot(h)
    assert (await h.sync("g", 7, leader)).error_code == ErrorCode.ILLEGAL_GENERATION
    assert (await h.sync("g", 1, leader, protocol_name="roundrobin")).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await h.sync("g", 1, leader, protocol_type="connect")).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # v5 requires both fields (KafkaApis refuses before the coordinator sees it).
    assert (await h.sync("g", 1, leader, protocol_type=None)).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert await snapshot(h) == before
    # v4 has neither field: it passes.
    assert (await h.sync("g", 1, leader, version=4, protocol_type=None, protocol_name=None)).error_code == 0


async def test_heartbeat_of_another_generation_or_member(autojump_clock, stable_group):
    h, joined, leader = stable_group
    before = await snapshot(h)
    assert (await h.heartbeat("g", 2, leader)).error_code == ErrorCode.ILLEGAL_GENERATION
    assert (await h.heartbeat("g", 1, "stranger")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await h.heartbeat("g", 1, leader, instance_id="pod-9")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await h.heartbeat("nope", 1, leader)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert await snapshot(h) == before


async def test_join_with_an_unknown_member_id(autojump_clock, stable_group):
    h, _, _ = stable_group
    before = await snapshot(h)
    assert (await h.join("g", "forged-id")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await h.join("fresh", "forged-id")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert await snapshot(h) == before


@pytest.mark.parametrize("timeout_ms", [999, 1_800_001])
async def test_session_timeout_out_of_bounds(autojump_clock, stable_group, timeout_ms):
    h, _, leader = stable_group
    before = await snapshot(h)
    assert (await h.join_new("g", session_timeout_ms=timeout_ms)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await h.join("g", leader, session_timeout_ms=timeout_ms)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert await snapshot(h) == before


async def test_leave_of_strangers_changes_nothing(autojump_clock, stable_group):
    h, _, _ = stable_group
    before = await snapshot(h)
    response = await h.leave("g", ("stranger", None), ("", "pod-unknown"))
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in response.members] == [
        ("stranger", None, ErrorCode.UNKNOWN_MEMBER_ID), ("", "pod-unknown", ErrorCode.UNKNOWN_MEMBER_ID)]
    assert await snapshot(h) == before


async def test_empty_group_id(autojump_clock, stable_group):
    """Kafka refuses the empty group id for group management, and keeps it for offsets (a relic of
    simple consumers), DescribeGroups and DeleteGroups."""
    h, _, leader = stable_group
    before = await snapshot(h)
    assert (await h.join("")).error_code == ErrorCode.INVALID_GROUP_ID
    assert (await h.sync("", 1, leader)).error_code == ErrorCode.INVALID_GROUP_ID
    assert (await h.heartbeat("", 1, leader)).error_code == ErrorCode.INVALID_GROUP_ID
    assert (await h.leave("", (leader, None))).error_code == ErrorCode.INVALID_GROUP_ID
    assert (await h.delete_offsets("", [T0]))[0] == ErrorCode.INVALID_GROUP_ID
    assert await snapshot(h) == before
    assert await h.commit("", {T0: 5}) == {T0: ErrorCode.NONE}
    assert await h.fetch("", [T0]) == ({T0: (5, 0)}, 0)
    assert (await h.describe("")).group_state == "Empty"
    assert await h.delete_groups("") == {"": ErrorCode.NONE}


async def test_a_long_group_id_is_served_as_kafka_serves_it(autojump_clock, nursery):
    """Kafka's brokers put no limit on a group id's length below the protocol's (32767 bytes); nor
    does kraftpy (a client's group id must work unchanged)."""
    h = GroupHarness()
    await h.start(nursery)
    group = "g" * 300 + "é" * 100
    assert len(group.encode()) == 500
    joined = await h.stable(group, 1)
    [m] = joined
    assert await h.commit(group, {T0: 7}, generation=1, member_id=m) == {T0: ErrorCode.NONE}
    assert await h.fetch(group, [T0]) == ({T0: (7, 0)}, 0)


async def test_commit_with_a_member_but_no_generation(autojump_clock, stable_group):
    h, _, leader = stable_group
    before = await snapshot(h)
    # generation -1 with a member id: the member must be current, and the generation must match.
    assert await h.commit("g", {T0: 1}, generation=-1, member_id=leader) == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert await h.commit("g", {T0: 1}, generation=-1, instance_id="pod") == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
    assert await snapshot(h) == before


async def test_delete_of_a_group_with_members(autojump_clock, stable_group):
    h, _, _ = stable_group
    before = await snapshot(h)
    assert await h.delete_groups("g") == {"g": ErrorCode.NON_EMPTY_GROUP}
    assert await h.delete_groups("never") == {"never": ErrorCode.GROUP_ID_NOT_FOUND}
    assert await snapshot(h) == before
