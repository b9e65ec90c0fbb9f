"""The classic group protocol, request by request, on a coordinator over an in-memory offsets log.

Every test runs on trio's virtual clock: sleeping a session timeout costs nothing and fires exactly
the timers Kafka's purgatories would.
"""

from __future__ import annotations

import pytest
import trio

from kraftpy.coordinator import records
from kraftpy.coordinator.group import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from kraftpy.protocol.errors import ErrorCode
from tests.helpers.offsets_log import GroupHarness, consumer_subscription


async def start(nursery, **kw) -> GroupHarness:
    h = GroupHarness(**kw)
    await h.start(nursery)
    return h


async def stable(h: GroupHarness, group: str, n: int, **kw) -> dict[str, object]:
    joined = await h.stable(group, n, **kw)
    assert h.group(group).state is STABLE
    return joined


def group_records(h: GroupHarness, group: str) -> list:
    """The group's metadata values in the log, in order (None: tombstone)."""
    out = []
    key = records.group_metadata_key(group)
    for log in h.logs.values():
        for _, k, v in log.records:
            if k == key:
                out.append(None if v is None else records.decode_group_value(v)[1])
    return out


async def test_first_member_gets_an_id_then_leads_a_stable_generation(autojump_clock, nursery):
    h = await start(nursery)
    first = await h.join("g")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-")
    joined = await h.join("g", first.member_id, protocols=[("range", b"sub-a")])
    assert joined.error_code == ErrorCode.NONE
    assert (joined.generation_id, joined.leader, joined.protocol_name) == (1, first.member_id, "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, b"sub-a")]
    assert h.group("g").state is COMPLETING_REBALANCE

    synced = await h.sync("g", 1, first.member_id, {first.member_id: b"assignment-a"})
    assert (synced.error_code, synced.assignment, synced.protocol_name) == (ErrorCode.NONE, b"assignment-a", "range")
    assert h.group("g").state is STABLE
    assert (await h.heartbeat("g", 1, first.member_id)).error_code == ErrorCode.NONE
    # The generation's assignment is durable before the SyncGroup is answered.
    [value] = group_records(h, "g")
    assert (value.generation, value.protocol, value.leader) == (1, "range", first.member_id)
    assert [(m.member_id, m.subscription, m.assignment) for m in value.members] == [
        (first.member_id, b"sub-a", b"assignment-a")]
    assert h.timer_failures() == 0


async def test_a_second_member_starts_a_rebalance_the_first_must_join(autojump_clock, nursery):
    h = await start(nursery)
    [a] = await stable(h, "g", 1)
    b_join = None

    async def b_joins() -> None:
        nonlocal b_join
        b_join = await h.join_new("g", client_id="b")

    nursery.start_soon(b_joins)
    await trio.testing.wait_all_tasks_blocked()
    assert h.group("g").state is PREPARING_REBALANCE
    assert (await h.heartbeat("g", 1, a)).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    # A commit of the old generation still passes while the group prepares.
    assert await h.commit("g", {("t", 0): 5}, generation=1, member_id=a) == {("t", 0): ErrorCode.NONE}
    a_join = await h.join("g", a)
    while b_join is None:
        await trio.sleep(0.001)
    assert a_join.generation_id == b_join.generation_id == 2
    assert a_join.leader == b_join.leader == a  # the old leader stays leader
    assert {m.member_id for m in a_join.members} == {a, b_join.member_id}
    assert b_join.members == []  # only the leader sees the members' metadata
    synced = await h.sync_all("g", {a: a_join, b_join.member_id: b_join})
    assert synced[b_join.member_id].assignment == b_join.member_id.encode()
    assert h.group("g").state is STABLE


async def test_a_follower_sync_waits_for_the_leaders_assignment(autojump_clock, nursery):
    h = await start(nursery)
    joined = await h.join_all("g", ["", ""])
    leader = next(iter(joined.values())).leader
    follower = next(m for m in joined if m != leader)
    got = []

    async def follower_syncs() -> None:
        got.append(await h.sync("g", 1, follower))

    nursery.start_soon(follower_syncs)
    await trio.testing.wait_all_tasks_blocked()
    assert got == []
    await h.sync("g", 1, leader, {leader: b"L", follower: b"F"})
    await trio.testing.wait_all_tasks_blocked()
    assert got[0].assignment == b"F"


async def test_leave_rebalances_the_rest(autojump_clock, nursery):
    h = await start(nursery)
    joined = await stable(h, "g", 2)
    a, b = list(joined)
    left = await h.leave("g", (b, None))
    assert left.error_code == ErrorCode.NONE
    assert [(m.member_id, m.error_code) for m in left.members] == [(b, ErrorCode.NONE)]
    assert h.group("g").state is PREPARING_REBALANCE
    rejoined = await h.join("g", a)
    assert (rejoined.generation_id, [m.member_id for m in rejoined.members]) == (2, [a])


async def test_last_member_leaving_leaves_an_empty_group_that_is_written(autojump_clock, nursery):
    h = await start(nursery)
    [a] = await stable(h, "g", 1)
    await h.leave("g", (a, None))
    await trio.sleep(0.01)
    assert h.group("g").state is EMPTY
    assert h.group("g").generation_id == 2
    last = group_records(h, "g")[-1]
    assert (last.generation, last.members, last.protocol) == (2, [], None)


async def test_leave_group_v0_names_one_member(autojump_clock, nursery):
    h = await start(nursery)
    [a] = await stable(h, "g", 1)
    assert (await h.leave("g", ("nobody", None), version=0)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await h.leave("g", (a, None), version=0)).error_code == ErrorCode.NONE


async def test_session_timeout_removes_a_silent_member(autojump_clock, nursery):
    h = await start(nursery)
    joined = await stable(h, "g", 2, session_timeout_ms=10_000)
    a, b = list(joined)
    # a keeps heartbeating, b goes silent.
    for _ in range(3):
        await trio.sleep(4)
        assert (await h.heartbeat("g", 1, a)).error_code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    assert not h.group("g").has(b)
    assert h.group("g").state is PREPARING_REBALANCE
    assert (await h.heartbeat("g", 1, b)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    rejoined = await h.join("g", a)
    assert [m.member_id for m in rejoined.members] == [a]


async def test_heartbeats_keep_a_member_past_many_session_timeouts(autojump_clock, nursery):
    h = await start(nursery)
    [a] = await stable(h, "g", 1, session_timeout_ms=6000)
    for _ in range(20):
        await trio.sleep(5)
        assert (await h.heartbeat("g", 1, a)).error_code == ErrorCode.NONE
    assert h.group("g").state is STABLE


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(autojump_clock, nursery):
    h = await start(nursery)
    joined = await stable(h, "g", 2, session_timeout_ms=60_000, rebalance_timeout_ms=20_000)
    leader = next(iter(joined.values())).leader
    follower = next(m for m in joined if m != leader)
    start_time = trio.current_time()
    # The leader rejoins (a rebalance starts); the follower never does, though its session is long.
    rejoined = await h.join("g", leader, session_timeout_ms=60_000, rebalance_timeout_ms=20_000)
    assert trio.current_time() - start_time == pytest.approx(20, abs=0.1)
    assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [leader]
    assert not h.group("g").has(follower)


async def test_sync_timeout_drops_members_that_never_sync(autojump_clock, nursery):
    h = await start(nursery)
    joined = await h.join_all("g", ["", ""], rebalance_timeout_ms=15_000, session_timeout_ms=60_000)
    leader = next(iter(joined.values())).leader
    other = next(m for m in joined if m != leader)
    await h.sync("g", 1, leader, {leader: b"x", other: b"y"})
    await trio.sleep(16)
    group = h.group("g")
    assert not group.has(other) and group.state is PREPARING_REBALANCE


async def test_static_member_restart_takes_its_place_without_a_rebalance(autojump_clock, nursery):
    h = await start(nursery)
    results = {}

    async def join(name: str, instance_id: str | None) -> None:
        results[name] = await h.join_new("g", instance_id=instance_id)

    async with trio.open_nursery() as n:
        n.start_soon(join, "static", "pod-1")
        n.start_soon(join, "dyn-1", None)
        n.start_soon(join, "dyn-2", None)
    everyone = {r.member_id: r for r in results.values()}
    synced = await h.sync_all("g", everyone, assign=lambda m: b"for-" + m.encode())
    static = results["static"]
    generation = static.generation_id
    records_before = len(group_records(h, "g"))

    restarted = await h.join("g", instance_id="pod-1", version=8)
    assert restarted.error_code == ErrorCode.NONE
    assert restarted.member_id != static.member_id and restarted.member_id.startswith("pod-1-")
    assert restarted.generation_id == generation  # no new generation
    assert h.group("g").state is STABLE
    for name in ("dyn-1", "dyn-2"):
        assert (await h.heartbeat("g", generation, results[name].member_id)).error_code == ErrorCode.NONE
    again = await h.sync("g", generation, restarted.member_id, instance_id="pod-1")
    assert again.assignment == synced[static.member_id].assignment  # the old assignment, kept
    # The new member id is durable (a failover must not resurrect the old one).
    assert len(group_records(h, "g")) == records_before + 1
    assert restarted.member_id in {m.member_id for m in group_records(h, "g")[-1].members}


async def test_static_restart_at_v9_tells_a_leader_to_skip_assignment(autojump_clock, nursery):
    h = await start(nursery)
    leader = await h.join("g", instance_id="pod-1")
    await h.sync("g", leader.generation_id, leader.member_id, {leader.member_id: b"a"}, instance_id="pod-1")
    restarted = await h.join("g", instance_id="pod-1", version=9)
    assert restarted.leader == restarted.member_id and restarted.skip_assignment
    assert [m.member_id for m in restarted.members] == [restarted.member_id]
    assert h.group("g").state is STABLE and h.group("g").generation_id == leader.generation_id


async def test_the_old_incarnation_of_a_static_member_is_fenced(autojump_clock, nursery):
    h = await start(nursery)
    old = await h.join("g", instance_id="pod-1")
    await h.sync("g", old.generation_id, old.member_id, {old.member_id: b"a"}, instance_id="pod-1")
    new = await h.join("g", instance_id="pod-1")
    gen = new.generation_id
    assert (await h.heartbeat("g", gen, old.member_id, instance_id="pod-1")).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert (await h.sync("g", gen, old.member_id, instance_id="pod-1")).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert (await h.commit("g", {("t", 0): 1}, generation=gen, member_id=old.member_id, instance_id="pod-1")
            ) == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    assert (await h.heartbeat("g", gen, new.member_id, instance_id="pod-1")).error_code == ErrorCode.NONE


async def test_a_static_member_with_new_protocols_rebalances(autojump_clock, nursery):
    h = await start(nursery)
    a = await h.join("g", instance_id="pod-1", protocols=[("range", b"1")])
    await h.sync("g", a.generation_id, a.member_id, {a.member_id: b"x"}, instance_id="pod-1")
    # Every member (one) would now pick another protocol: that needs a new generation.
    again = await h.join("g", instance_id="pod-1", protocols=[("roundrobin", b"1"), ("range", b"1")])
    assert again.generation_id == a.generation_id + 1 and again.protocol_name == "roundrobin"


async def test_initial_rebalance_delay_gathers_members(autojump_clock, nursery):
    h = await start(nursery, group_initial_rebalance_delay_ms=3000)
    t0 = trio.current_time()
    results = []

    async def member(delay: float) -> None:
        await trio.sleep(delay)
        results.append((await h.join_new("g", rebalance_timeout_ms=60_000), trio.current_time() - t0))

    async with trio.open_nursery() as n:
        n.start_soon(member, 0)
        n.start_soon(member, 2)  # arrives during the delay: the delay is extended once
    assert {r.generation_id for r, _ in results} == {1}
    assert all(len(r.members) in (0, 2) for r, _ in results)
    assert [round(t) for _, t in results] == [6, 6]


async def test_group_max_size_turns_away_the_extra_member(autojump_clock, nursery):
    h = await start(nursery, group_max_size=2)
    await stable(h, "g", 2)
    extra = await h.join_new("g")
    assert extra.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.group("g").size() == 2 and h.group("g").state is STABLE


async def test_an_unused_member_id_is_forgotten_after_the_session_timeout(autojump_clock, nursery):
    h = await start(nursery)
    first = await h.join("g", session_timeout_ms=5000)
    assert h.group("g").is_pending_member(first.member_id)
    await trio.sleep(6)
    assert not h.group("g").is_pending_member(first.member_id)
    assert (await h.join("g", first.member_id)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_join_v3_adds_a_member_at_once(autojump_clock, nursery):
    h = await start(nursery)
    joined = await h.join("g", version=3)
    assert joined.error_code == ErrorCode.NONE and joined.leader == joined.member_id


async def test_join_v0_uses_the_session_timeout_as_rebalance_timeout_and_empty_protocol_name(autojump_clock, nursery):
    h = await start(nursery)
    joined = await h.join("g", version=0, session_timeout_ms=7000, rebalance_timeout_ms=-1)
    assert joined.error_code == ErrorCode.NONE
    assert h.group("g").get(joined.member_id).rebalance_timeout_ms == 7000
    refused = await h.join("g", "nobody", version=0)
    assert refused.protocol_name == ""  # not null before v7


async def test_the_common_protocol_most_members_prefer_is_chosen(autojump_clock, nursery):
    h = await start(nursery, group_initial_rebalance_delay_ms=1000)
    joined = await h.join_all("g", ["", "", ""], protocols=[("cooperative-sticky", b"c"), ("range", b"r")])
    assert {r.protocol_name for r in joined.values()} == {"cooperative-sticky"}
    leader = next(r for r in joined.values() if r.members)
    assert {m.metadata for m in leader.members} == {b"c"}


async def test_the_leader_rejoining_a_stable_group_rebalances_it(autojump_clock, nursery):
    h = await start(nursery)
    joined = await stable(h, "g", 2)
    leader = next(iter(joined.values())).leader
    follower = next(m for m in joined if m != leader)
    # A follower rejoining with the same metadata just gets the generation back.
    same = await h.join("g", follower)
    assert (same.generation_id, h.group("g").state) == (1, STABLE)
    got = []

    async def rejoin_leader() -> None:
        got.append(await h.join("g", leader))

    nursery.start_soon(rejoin_leader)
    await trio.testing.wait_all_tasks_blocked()
    assert h.group("g").state is PREPARING_REBALANCE
    await h.join("g", follower)
    await trio.testing.wait_all_tasks_blocked()
    assert got[0].generation_id == 2


async def test_describe_and_list(autojump_clock, nursery):
    h = await start(nursery)
    joined = await stable(h, "g", 1, protocols=[("range", consumer_subscription("t"))])
    [m] = joined
    described = await h.describe("g", include_operations=True)
    assert (described.error_code, described.group_state, described.protocol_type, described.protocol_data) == (
        ErrorCode.NONE, "Stable", "consumer", "range")
    assert [(x.member_id, x.client_host, x.member_metadata, x.member_assignment) for x in described.members] == [
        (m, "/127.0.0.1", consumer_subscription("t"), m.encode())]
    assert described.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    assert (await h.describe("g")).authorized_operations == -(2**31)
    assert (await h.describe("nope")).group_state == "Dead"
    await h.commit("solo", {("t", 0): 1})
    assert await h.list_groups() == (ErrorCode.NONE, {"g": "Stable", "solo": "Empty"})
    assert await h.list_groups("Empty") == (ErrorCode.NONE, {"solo": "Empty"})
    assert await h.list_groups("stable", version=3) == (ErrorCode.NONE, {"g": "Stable", "solo": "Empty"})


async def test_a_duplicate_join_answers_the_first_request(autojump_clock, nursery):
    h = await start(nursery)
    joined = await stable(h, "g", 2)
    leader = next(iter(joined.values())).leader
    follower = next(m for m in joined if m != leader)
    got = []

    async def join_leader() -> None:
        got.append(await h.join("g", leader))

    nursery.start_soon(join_leader)
    await trio.testing.wait_all_tasks_blocked()
    nursery.start_soon(join_leader)  # the leader retries while its first join is parked
    await trio.testing.wait_all_tasks_blocked()
    assert [r.error_code for r in got] == [ErrorCode.REBALANCE_IN_PROGRESS]
    await h.join("g", follower)
    await trio.testing.wait_all_tasks_blocked()
    assert [r.error_code for r in got] == [ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.NONE]
    h.group("g").check_invariants()


async def test_a_static_member_restarting_before_its_sync_does_not_cost_a_rebalance(autojump_clock, nursery):
    h = await start(nursery)
    got = {}

    async def join(name: str, instance_id: str | None) -> None:
        got[name] = await h.join_new("g", instance_id=instance_id, rebalance_timeout_ms=20_000,
                                     session_timeout_ms=60_000)

    async with trio.open_nursery() as n:
        n.start_soon(join, "leader", None)
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(join, "static", "pod-1")
    leader, static = got["leader"], got["static"]
    assert leader.leader == leader.member_id
    await h.sync("g", 1, leader.member_id, {leader.member_id: b"L", static.member_id: b"S"})
    assert h.group("g").state is STABLE
    # The static member restarts before it ever sent its SyncGroup.
    restarted = await h.join("g", instance_id="pod-1", session_timeout_ms=60_000, rebalance_timeout_ms=20_000)
    assert (await h.sync("g", 1, restarted.member_id, instance_id="pod-1")).assignment == b"S"
    await trio.sleep(25)  # past the generation's sync deadline
    assert h.group("g").state is STABLE and h.group("g").generation_id == 1


async def test_leave_group_v3_removes_several_members_at_once(autojump_clock, nursery):
    h = await start(nursery)
    results = {}

    async def join(name: str, instance_id: str | None) -> None:
        results[name] = await h.join_new("g", instance_id=instance_id)

    async with trio.open_nursery() as n:
        n.start_soon(join, "a", None)
        n.start_soon(join, "b", "pod-b")
        n.start_soon(join, "c", None)
    await h.sync_all("g", {r.member_id: r for r in results.values()})
    a, b, c = results["a"].member_id, results["b"].member_id, results["c"].member_id
    # One member by id, one static member by instance id only (an administrator's removal), one stranger.
    response = await h.leave("g", (a, None), ("", "pod-b"), ("stranger", None))
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in response.members] == [
        (a, None, ErrorCode.NONE), ("", "pod-b", ErrorCode.NONE), ("stranger", None, ErrorCode.UNKNOWN_MEMBER_ID)]
    assert set(h.group("g").members) == {c} and b not in h.group("g").members
    assert h.group("g").state is PREPARING_REBALANCE
