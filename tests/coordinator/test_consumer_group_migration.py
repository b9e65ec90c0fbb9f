"""Online migration between classic and consumer groups (group.consumer.migration.policy, KIP-848).

The real coordinator over in-memory ``__consumer_offsets`` partitions on trio's virtual clock. Classic
members speak JoinGroup/SyncGroup/Heartbeat as an eager consumer does (everything revoked before it
rejoins; its subscription names no owned partitions); consumer members are the obedient ``Client`` of
the consumer group tests.
"""

from __future__ import annotations

import struct

import trio

from kraftpy.coordinator import consumer_group_records as cgr
from kraftpy.coordinator import records
from kraftpy.coordinator.consumer_group import ConsumerGroupState, MemberState
from kraftpy.coordinator.group import PREPARING_REBALANCE, STABLE
from kraftpy.protocol.consumer_protocol import (
    ConsumerProtocolSubscription,
    decode_assignment,
    encode_assignment,
)
from kraftpy.protocol.errors import ErrorCode
from tests.coordinator.test_consumer_group import Client, Topics, harness
from tests.helpers.offsets_log import consumer_subscription

SUBSCRIPTION = consumer_subscription("t")
PROTOCOLS = (("range", SUBSCRIPTION),)


class ClassicClient:
    """An eager classic consumer of a group the coordinator serves as a consumer group: it heartbeats,
    and on REBALANCE_IN_PROGRESS gives up what it owns, rejoins and takes what SyncGroup gives it."""

    def __init__(self, h, group: str, member_id: str, generation: int, owned: dict[str, list[int]]) -> None:
        self.h, self.group, self.member_id, self.generation, self.owned = h, group, member_id, generation, owned

    async def rejoin(self):
        self.owned = {}
        joined = await self.h.join(self.group, self.member_id, protocols=PROTOCOLS)
        assert joined.error_code == ErrorCode.NONE, joined
        assert (joined.leader, joined.members, joined.protocol_name) == ("", [], "range")
        self.generation = joined.generation_id
        synced = await self.h.sync(self.group, self.generation, self.member_id)
        if synced.error_code == ErrorCode.NONE:
            self.owned = decode_assignment(synced.assignment)
        return synced

    async def beat(self) -> ErrorCode:
        error = (await self.h.heartbeat(self.group, self.generation, self.member_id)).error_code
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            await self.rejoin()
        return error

    def partitions(self) -> set[int]:
        return set(self.owned.get("t", ()))


async def classic_group(h, topics: Topics, group: str = "g") -> list[ClassicClient]:
    """A Stable classic group of two consumers, partitions 0-1 and 2-3 of t, an offset committed."""
    h.coordinator.topic_lookup = topics.lookup
    split = {}
    joined = await h.join_all(group, ["", ""], protocols=PROTOCOLS)
    for i, member_id in enumerate(sorted(joined)):
        split[member_id] = {"t": [2 * i, 2 * i + 1]}
    synced = await h.sync_all(group, joined, assign=lambda m: encode_assignment(split[m]))
    assert all(s.error_code == ErrorCode.NONE for s in synced.values())
    generation = next(iter(joined.values())).generation_id
    first = sorted(joined)[0]
    committed = await h.commit(group, {("t", 0): 42}, generation=generation, member_id=first)
    assert committed == {("t", 0): ErrorCode.NONE}
    return [ClassicClient(h, group, m, generation, split[m]) for m in sorted(joined)]


async def settle(classics: list[ClassicClient], consumers: list[Client], rounds: int = 6) -> None:
    for _ in range(rounds):
        for c in classics:
            await c.beat()
        for c in consumers:
            await c.beat()


def owners(classics: list[ClassicClient], consumers: list[Client], topic_id) -> list[int]:
    out = [p for c in classics for p in c.partitions()]
    return sorted(out + [p for c in consumers for p in c.partitions(topic_id)])


def last_value(h, key: bytes):
    return [v for _, k, v in h.logs[0].records if k == key][-1]


async def test_a_consumer_member_joining_upgrades_a_stable_classic_group(autojump_clock, nursery):
    topics = Topics(t=4)
    h = await harness(nursery, topics, group_consumer_migration_policy="bidirectional")
    a, b = await classic_group(h, topics)
    generation = a.generation
    c = Client(h, "g")
    joined = await c.beat()
    assert joined.error_code == ErrorCode.NONE
    shard = h.shard("g")
    group = shard.consumer.groups["g"]
    # The classic members are classic members of the consumer group, at epoch = their generation,
    # with the partitions they had; the newcomer waits for partitions to be released.
    assert {m.member_id for m in group.classic_members()} == {a.member_id, b.member_id}
    assert group.group_epoch == joined.member_epoch == generation + 1
    for x in (a, b):
        member = group.members[x.member_id]
        assert member.member_epoch == generation and member.classic.session_timeout_ms == 10000
        assert member.assigned == {topics.ids["t"]: frozenset(x.partitions())}
    assert c.partitions() == set()
    assert shard.groups["g"].size() == 0 and "g" in shard.consumer.groups
    await trio.testing.wait_all_tasks_blocked()
    assert last_value(h, records.group_metadata_key("g")) is None
    assert last_value(h, cgr.key(cgr.METADATA, "g")) is not None
    # Revocations reach the classic members as REBALANCE_IN_PROGRESS: they rejoin, give up
    # partitions, and the consumer member gets them; nobody holds a partition twice.
    assert (await a.h.heartbeat("g", a.generation, a.member_id)).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    await settle([a, b], [c])
    group.check_invariants()
    assert owners([a, b], [c], topics.ids["t"]) == [0, 1, 2, 3]
    assert c.partitions() and a.partitions() and b.partitions()
    assert group.state is ConsumerGroupState.STABLE
    assert a.generation == b.generation == c.epoch == group.group_epoch
    assert (await h.heartbeat("g", a.generation, a.member_id)).error_code == ErrorCode.NONE
    # Offsets stay the group's; a classic member commits with its generation.
    fetched, _ = await h.fetch("g", [("t", 0)])
    assert fetched == {("t", 0): (42, ErrorCode.NONE)}
    assert await h.commit("g", {("t", 1): 5}, generation=a.generation, member_id=a.member_id) == {
        ("t", 1): ErrorCode.NONE}
    assert await h.commit("g", {("t", 1): 6}, generation=a.generation - 1, member_id=a.member_id) == {
        ("t", 1): ErrorCode.ILLEGAL_GENERATION}
    # Wrong generation, wrong protocol and unknown members are refused as Kafka does.
    assert (await h.heartbeat("g", a.generation + 1, a.member_id)).error_code == ErrorCode.ILLEGAL_GENERATION
    assert (await h.sync("g", a.generation, a.member_id, protocol_name="roundrobin")).error_code == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await h.heartbeat("g", c.epoch, c.member_id)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # A classic member leaving: one new epoch, its partitions go to the others.
    left = await h.leave("g", (b.member_id, None))
    assert [(m.member_id, m.error_code) for m in left.members] == [(b.member_id, ErrorCode.NONE)]
    await settle([a], [c])
    assert owners([a], [c], topics.ids["t"]) == [0, 1, 2, 3]
    assert h.timer_failures() == 0


async def test_the_last_consumer_member_leaving_downgrades_the_group(autojump_clock, nursery):
    topics = Topics(t=4)
    h = await harness(nursery, topics, group_consumer_migration_policy="bidirectional")
    a, b = await classic_group(h, topics)
    c = Client(h, "g")
    await c.beat()
    await settle([a, b], [c])
    epoch = h.shard("g").consumer.groups["g"].group_epoch
    left = await c.leave()
    assert left.error_code == ErrorCode.NONE
    shard = h.shard("g")
    assert "g" not in shard.consumer.groups
    group = shard.groups["g"]
    # A classic group again: at generation = the group epoch, rebalancing so that the members rejoin.
    assert set(group.members) == {a.member_id, b.member_id}
    assert group.generation_id == epoch and group.is_(PREPARING_REBALANCE)
    assert last_value(h, cgr.key(cgr.METADATA, "g")) is None
    assert last_value(h, records.group_metadata_key("g")) is not None
    assert (await h.heartbeat("g", epoch, a.member_id)).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    joined = await h.join_all("g", [a.member_id, b.member_id], protocols=PROTOCOLS)
    assert {r.error_code for r in joined.values()} == {ErrorCode.NONE}
    leader = next(iter(joined.values())).leader
    assert len(joined[leader].members) == 2  # the leader assigns again, as in any classic group
    synced = await h.sync_all("g", joined, assign=lambda m: encode_assignment({"t": [0, 1] if m == leader else [2, 3]}))
    assert {s.error_code for s in synced.values()} == {ErrorCode.NONE}
    assert group.is_(STABLE) and group.generation_id == epoch + 1
    fetched, _ = await h.fetch("g", [("t", 0)])
    assert fetched == {("t", 0): (42, ErrorCode.NONE)}


async def test_a_fenced_last_consumer_member_downgrades_the_group_too(autojump_clock, nursery):
    topics = Topics(t=4)
    h = await harness(nursery, topics, group_consumer_migration_policy="downgrade")
    # Only the downgrade is allowed: a consumer member may not upgrade a classic group with members...
    a, b = await classic_group(h, topics)
    refused = await Client(h, "g").beat()
    assert (refused.error_code, refused.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                           "Group g is not a consumer group.")
    # ... but a consumer group whose classic members joined it goes back to classic when its last
    # consumer member's session times out.
    c = Client(h, "mixed")
    await c.beat()
    d = ClassicClient(h, "mixed", "", 0, {})
    first = await h.join("mixed", protocols=PROTOCOLS)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    d.member_id = first.member_id
    await d.rejoin()
    await settle([d], [c])
    assert sorted(d.partitions() | c.partitions(topics.ids["t"])) == [0, 1, 2, 3]
    for _ in range(12):  # c goes silent; d keeps heartbeating
        await trio.sleep(1)
        await h.heartbeat("mixed", d.generation, d.member_id)
    shard = h.shard("mixed")
    assert "mixed" not in shard.consumer.groups
    assert set(shard.groups["mixed"].members) == {d.member_id}
    assert h.timer_failures() == 0


async def test_policy_upgrade_only_keeps_a_consumer_group_of_classic_members(autojump_clock, nursery):
    topics = Topics(t=4)
    h = await harness(nursery, topics, group_consumer_migration_policy="upgrade")
    a, b = await classic_group(h, topics)
    c = Client(h, "g")
    assert (await c.beat()).error_code == ErrorCode.NONE
    await settle([a, b], [c])
    await c.leave()
    group = h.shard("g").consumer.groups["g"]
    assert set(group.members) == {a.member_id, b.member_id} and h.shard("g").groups["g"].size() == 0
    await settle([a, b], [])
    assert owners([a, b], [], topics.ids["t"]) == [0, 1, 2, 3]


async def test_disabled_policy_refuses_the_upgrade(autojump_clock, nursery):
    topics = Topics(t=4)
    h = await harness(nursery, topics)
    a, b = await classic_group(h, topics)
    refused = await Client(h, "g").beat()
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.shard("g").groups["g"].is_(STABLE) and "g" not in h.shard("g").consumer.groups
    assert (await h.heartbeat("g", a.generation, a.member_id)).error_code == ErrorCode.NONE


async def failover(h, nursery, topics: Topics) -> None:
    old = h.coordinator
    for p, log in h.logs.items():
        log.new_epoch()
        old.on_resigned(p, log.leader_epoch - 1)
    h.coordinator = h.new_coordinator()
    h.coordinator.topic_lookup = topics.lookup
    await h.start(nursery)


async def test_a_new_coordinator_loads_the_converted_group(autojump_clock, nursery):
    topics = Topics(t=4)
    h = await harness(nursery, topics, group_consumer_migration_policy="bidirectional")
    a, b = await classic_group(h, topics)
    c = Client(h, "g")
    await c.beat()
    await settle([a, b], [c])
    before = h.shard("g").consumer.groups["g"]
    state = {m.member_id: (m.member_epoch, m.assigned, m.classic, m.state) for m in before.members.values()}

    await failover(h, nursery, topics)
    shard = h.shard("g")
    after = shard.consumer.groups["g"]
    assert {m.member_id: (m.member_epoch, m.assigned, m.classic, m.state) for m in after.members.values()} == state
    assert shard.groups["g"].size() == 0  # no classic group beside it
    assert all(m.state is MemberState.STABLE for m in after.members.values())
    # The classic members go on at their generation, no rebalance.
    for x in (a, b):
        assert (await h.heartbeat("g", x.generation, x.member_id)).error_code == ErrorCode.NONE

    t = topics.ids["t"]
    targets = {m: sorted(ps.get(t, ())) for m, ps in h.shard("g").consumer.groups["g"].target.items()
               if m != c.member_id}
    await c.leave()
    generation = h.shard("g").groups["g"].generation_id
    await trio.testing.wait_all_tasks_blocked()
    await failover(h, nursery, topics)
    shard = h.shard("g")
    assert "g" not in shard.consumer.groups
    loaded = shard.groups["g"]
    assert set(loaded.members) == {a.member_id, b.member_id} and loaded.generation_id == generation
    # Each member's assignment as the consumer group's target had it (the rebalance that follows
    # assigns what the leaving member had).
    assert {m.member_id: decode_assignment(m.assignment).get("t", []) for m in loaded.members.values()} == targets
    fetched, _ = await h.fetch("g", [("t", 0)])
    assert fetched == {("t", 0): (42, ErrorCode.NONE)}


async def test_no_upgrade_past_group_consumer_max_size(autojump_clock, nursery):
    topics = Topics(t=4)
    h = await harness(nursery, topics, group_consumer_migration_policy="upgrade", group_consumer_max_size=2)
    a, b = await classic_group(h, topics)
    refused = await Client(h, "g").beat()
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    # Nothing was converted: the classic group goes on.
    assert h.shard("g").groups["g"].is_(STABLE) and "g" not in h.shard("g").consumer.groups
    assert (await h.heartbeat("g", a.generation, a.member_id)).error_code == ErrorCode.NONE


def cooperative_subscription(owned: dict[str, list[int]]) -> bytes:
    """A version-1 subscription naming the partitions the member still owns (a cooperative consumer)."""
    cls = ConsumerProtocolSubscription
    value = cls(topics=["t"], owned_partitions=[cls.TopicPartition(topic=t, partitions=ps) for t, ps in owned.items()])
    return struct.pack(">h", 1) + cls.SCHEMA.to_bytes(1, value)


class CooperativeClient(ClassicClient):
    """Rejoins without giving anything up first, and says what it owns: it revokes only what it lost."""

    async def rejoin(self):
        joined = await self.h.join(self.group, self.member_id, protocols=(
            ("cooperative-sticky", cooperative_subscription(self.owned)),))
        assert joined.error_code == ErrorCode.NONE, joined
        self.generation = joined.generation_id
        synced = await self.h.sync(self.group, self.generation, self.member_id, protocol_name="cooperative-sticky")
        if synced.error_code == ErrorCode.NONE:
            self.kept_through_rebalance = set(self.partitions()) & set(decode_assignment(synced.assignment).get("t", ()))
            self.owned = decode_assignment(synced.assignment)
        return synced


async def test_a_cooperative_classic_member_keeps_what_it_still_owns(autojump_clock, nursery):
    topics = Topics(t=6)
    h = await harness(nursery, topics, group_consumer_migration_policy="upgrade")
    c = Client(h, "coop")
    await c.beat()
    h.coordinator.topic_lookup = topics.lookup
    first = await h.join("coop", protocols=(("cooperative-sticky", cooperative_subscription({})),))
    a = CooperativeClient(h, "coop", first.member_id, 0, {})
    await a.rejoin()
    await settle([a], [c])
    owned_before = a.partitions()
    assert len(owned_before) == 3 and sorted(owned_before | c.partitions(topics.ids["t"])) == list(range(6))
    # A third member: each of the two gives up one partition; the cooperative member keeps its other
    # two through the rebalance (its first rejoin's SyncGroup still gives them).
    d = Client(h, "coop")
    await d.beat()
    assert (await h.heartbeat("coop", a.generation, a.member_id)).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    await a.rejoin()
    assert len(a.kept_through_rebalance) == 2 and a.kept_through_rebalance < owned_before
    group = h.shard("coop").consumer.groups["coop"]
    assert group.members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    await settle([a], [c, d])
    group.check_invariants()
    assert owners([a], [c, d], topics.ids["t"]) == list(range(6)) and group.state is ConsumerGroupState.STABLE
