"""KIP-848 consumer groups: the assignors, the reconciliation and ConsumerGroupHeartbeat request by request.

The heartbeat tests run the real coordinator over in-memory ``__consumer_offsets`` partitions on
trio's virtual clock (session and rebalance timeouts cost nothing). A ``Client`` plays an obedient
consumer: it owns what the last assignment gave it and reports it in every heartbeat.
"""

from __future__ import annotations

import uuid

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.coordinator import records
from kraftpy.coordinator.assignors import range_, uniform
from kraftpy.coordinator.consumer_group import ConsumerGroupState, MemberState
from kraftpy.coordinator.consumer_protocol import match_topics
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ListGroupsRequest,
    OffsetFetchRequest,
)
from tests.helpers.offsets_log import GroupHarness

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


# -- assignors ---------------------------------------------------------------------------------------


def _flatten(assignment):
    return [(t, p) for a in assignment.values() for t, ps in a.items() for p in ps]


@settings(max_examples=200, deadline=None)
@given(members=st.integers(1, 6), counts=st.lists(st.integers(1, 12), min_size=1, max_size=3),
       data=st.data())
def test_every_assignor_gives_each_subscribed_partition_to_exactly_one_subscriber(members, counts, data):
    names = [f"t{i}" for i in range(len(counts))]
    topics = {n: (uuid.UUID(int=i + 1), c) for i, (n, c) in enumerate(zip(names, counts, strict=True))}
    subs = {f"m{i}": frozenset(data.draw(st.sets(st.sampled_from(names), min_size=1))) for i in range(members)}
    for assignor in (uniform, range_):
        out = assignor(subs, topics, {})
        flat = _flatten(out)
        assert len(flat) == len(set(flat))
        wanted = {(topics[n][0], p) for n in set().union(*subs.values()) for p in range(topics[n][1])}
        assert set(flat) == wanted
        by_id = {tid: n for n, (tid, _) in topics.items()}
        for m, a in out.items():
            assert {by_id[t] for t in a} <= subs[m]


@settings(max_examples=100, deadline=None)
@given(members=st.integers(1, 7), partitions=st.integers(1, 30), leaving=st.integers(0, 6))
def test_uniform_is_even_for_equal_subscriptions_and_keeps_what_it_can(members, partitions, leaving):
    topics = {"t": (T1, partitions)}
    subs = {f"m{i}": frozenset({"t"}) for i in range(members)}
    first = uniform(subs, topics, {})
    sizes = [sum(len(ps) for ps in a.values()) for a in first.values()]
    assert max(sizes) - min(sizes) <= 1
    # A member more: every member keeps what it had, except what the newcomer needs to be even.
    subs2 = {**subs, "new": frozenset({"t"})}
    second = uniform(subs2, topics, first)
    sizes = [sum(len(ps) for ps in a.values()) for a in second.values()]
    assert max(sizes) - min(sizes) <= 1
    moved = sum(len(first[m].get(T1, frozenset()) - second[m].get(T1, frozenset())) for m in subs)
    assert moved == sum(len(ps) for ps in second["new"].values())
    # A member fewer: only its partitions move.
    gone = f"m{leaving % members}"
    third = uniform({m: s for m, s in subs.items() if m != gone}, topics, first)
    for m in third:
        kept = first[m].get(T1, frozenset()) - third[m].get(T1, frozenset())
        assert not kept, f"{m} lost partitions though only {gone} left"


@pytest.mark.parametrize("members,partitions,expected", [
    (["a", "b", "c"], 7, {"a": {0, 1, 2}, "b": {3, 4}, "c": {5, 6}}),
    (["b", "a"], 4, {"a": {0, 1}, "b": {2, 3}}),
    (["a", "b", "c"], 2, {"a": {0}, "b": {1}, "c": set()}),
])
def test_range_gives_contiguous_ranges_in_member_id_order(members, partitions, expected):
    out = range_({m: frozenset({"t"}) for m in members}, {"t": (T1, partitions)}, {})
    assert {m: set(a.get(T1, ())) for m, a in out.items()} == expected


def test_regex_matches_whole_names_and_never_internal_topics():
    names = ["orders", "orders-eu", "payments", "__consumer_offsets", "xorders"]
    assert match_topics("orders.*", names) == {"orders", "orders-eu"}
    assert match_topics(".*", names) == {"orders", "orders-eu", "payments", "xorders"}


# -- heartbeats over the coordinator -------------------------------------------------------------------


class Client:
    """An obedient consumer: owns its last assignment, reports it, revokes what the answer leaves out."""

    def __init__(self, h: GroupHarness, group: str, topics: tuple[str, ...] = ("t",), *, instance_id=None,
                 assignor=None, regex=None, member_id: str | None = None) -> None:
        self.h, self.group, self.topics = h, group, topics
        self.instance_id, self.assignor, self.regex = instance_id, assignor, regex
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.last = None
        #: False: a client that ignores the assignments it is sent (keeps what it owns).
        self.obeys = True

    async def beat(self, *, epoch: int | None = None, full: bool = False):
        joining = self.epoch == 0
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch if epoch is None else epoch,
            instance_id=self.instance_id, rebalance_timeout_ms=60000 if joining or full else -1,
            subscribed_topic_names=list(self.topics) if joining or full else None,
            subscribed_topic_regex=self.regex if joining or full else None,
            server_assignor=self.assignor,
            topic_partitions=[ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=sorted(ps))
                              for t, ps in self.owned.items()])
        response = await self.h.coordinator.consumer_group_heartbeat(self.h.ctx(1), request, self.h.lookup,
                                                                     self.h.match)
        self.last = response
        if response.error_code == ErrorCode.NONE and response.member_epoch >= 0:
            self.epoch = response.member_epoch
            if response.assignment is not None and self.obeys:
                self.owned = {t.topic_id: frozenset(t.partitions) for t in response.assignment.topic_partitions
                              if t.partitions}
        return response

    async def leave(self, epoch: int = -1):
        return await self.beat(epoch=epoch)

    def partitions(self, topic_id=T1) -> set[int]:
        return set(self.owned.get(topic_id, ()))


class Topics:
    """The broker's topics as the coordinator looks them up."""

    def __init__(self, **counts: int) -> None:
        self.counts = dict(counts)
        self.ids = {name: uuid.UUID(int=i + 1) for i, name in enumerate(sorted(counts))}

    def add(self, name: str, partitions: int) -> None:
        self.counts[name] = partitions
        self.ids.setdefault(name, uuid.UUID(int=len(self.ids) + 1))

    def lookup(self, name: str):
        return (self.ids[name], self.counts[name]) if name in self.counts else None

    def match(self, regex: str):
        return match_topics(regex, self.counts)


async def harness(nursery, topics: Topics, **config) -> GroupHarness:
    config = {"group_consumer_heartbeat_interval_ms": 1000, "group_consumer_session_timeout_ms": 10000, **config}
    h = GroupHarness(**config)
    h.lookup, h.match = topics.lookup, topics.match
    await h.start(nursery)
    return h


async def settle(clients: list[Client], rounds: int = 6) -> None:
    for _ in range(rounds):
        for c in clients:
            await c.beat()


def check(h: GroupHarness, group: str) -> None:
    h.shard(group).consumer.groups[group].check_invariants()


async def test_a_second_member_gets_partitions_only_after_the_first_revoked_them(autojump_clock, nursery):
    topics = Topics(t=6)
    h = await harness(nursery, topics)
    a = Client(h, "g")
    first = await a.beat()
    assert first.error_code == ErrorCode.NONE and first.member_id == a.member_id
    assert first.heartbeat_interval_ms == 1000 and first.member_epoch == 1  # one join, one new epoch
    assert a.partitions() == set(range(6))
    b = Client(h, "g")
    joined = await b.beat()
    # B is at the new epoch, but everything is still A's: B waits for A to revoke.
    assert joined.assignment is not None and b.partitions() == set()
    group = h.shard("g").consumer.groups["g"]
    assert group.members[b.member_id].state is MemberState.UNRELEASED_PARTITIONS
    assert group.state is ConsumerGroupState.RECONCILING
    revoke = await a.beat()
    # A is told to keep three: the other three are pending revocation, its epoch unchanged.
    assert len(a.partitions()) == 3 and revoke.member_epoch < joined.member_epoch
    assert group.members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    check(h, "g")
    await a.beat()  # reports the revocation: A catches up with the epoch
    assert a.epoch == b.epoch
    await b.beat()
    assert b.partitions() == set(range(6)) - a.partitions() and len(b.partitions()) == 3
    assert group.state is ConsumerGroupState.STABLE
    check(h, "g")


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["join", "leave", "beat", "grow"]), st.integers(0, 9)),
                      min_size=1, max_size=30))
def test_random_membership_never_assigns_a_partition_twice_and_converges(steps):
    async def main():
        topics = Topics(t=4, u=3)
        async with trio.open_nursery() as nursery:
            h = await harness(nursery, topics)
            clients: list[Client] = []
            for action, n in steps:
                if action == "join" or not clients:
                    clients.append(Client(h, "g", ("t", "u") if n % 2 else ("t",)))
                    await clients[-1].beat()
                elif action == "leave":
                    gone = clients.pop(n % len(clients))
                    await gone.leave()
                elif action == "grow":
                    topics.add("t", topics.counts["t"] + 1)
                    await clients[n % len(clients)].beat()
                else:
                    await clients[n % len(clients)].beat()
                if "g" in h.shard("g").consumer.groups:
                    check(h, "g")
                # What the clients hold never overlaps either.
                held = [(t, p) for c in clients for t, ps in c.owned.items() for p in ps]
                assert len(held) == len(set(held))
            if clients:
                await settle(clients, rounds=4)
                held = {(t, p) for c in clients for t, ps in c.owned.items() for p in ps}
                subscribed = set().union(*(set(c.topics) for c in clients))
                assert held == {(topics.ids[n], p) for n in subscribed for p in range(topics.counts[n])}
                assert h.shard("g").consumer.groups["g"].state is ConsumerGroupState.STABLE
            # What was written is what a new coordinator loads.
            groups = h.shard("g").consumer.groups
            before = {gid: _snapshot(g) for gid, g in groups.items()}
            await failover(h, nursery)
            assert {gid: _snapshot(g) for gid, g in h.shard("g").consumer.groups.items()} == before
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _snapshot(group) -> tuple:
    return (group.group_epoch, group.assignment_epoch, group.subscription_metadata, group.target,
            {m.member_id: (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation,
                           m.subscribed_topics()) for m in group.members.values()})


async def test_epochs_are_checked(autojump_clock, nursery):
    h = await harness(nursery, Topics(t=2))
    a = Client(h, "g")
    await a.beat()
    assert (await a.beat(epoch=a.epoch + 1)).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    stranger = Client(h, "g")
    stranger.epoch = 3
    assert (await stranger.beat()).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    missing = Client(h, "nope")
    missing.epoch = 1
    assert (await missing.beat()).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # A member that did not get its last answer may heartbeat the previous epoch while it owns no more.
    b = Client(h, "g")
    await b.beat()
    await settle([a, b])
    member = h.shard("g").consumer.groups["g"].members[a.member_id]
    previous = member.previous_member_epoch
    assert (await a.beat(epoch=previous)).error_code == ErrorCode.NONE
    bad = Client(h, "g", assignor="sticky")
    assert (await bad.beat()).error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    no_topics = Client(h, "g")
    no_topics.topics = None
    request = ConsumerGroupHeartbeatRequest(group_id="g", member_id="x", member_epoch=0)
    response = await h.coordinator.consumer_group_heartbeat(h.ctx(1), request, h.lookup, h.match)
    assert response.error_code == ErrorCode.INVALID_REQUEST and "RebalanceTimeoutMs" in response.error_message


async def test_a_silent_member_is_removed_at_its_session_timeout(autojump_clock, nursery):
    h = await harness(nursery, Topics(t=4), group_consumer_session_timeout_ms=5000)
    a, b = Client(h, "g"), Client(h, "g")
    await a.beat()
    await b.beat()
    await settle([a, b])
    assert len(a.partitions()) == 2
    for _ in range(8):  # A heartbeats, B is gone without a word
        await trio.sleep(1)
        await a.beat()
    assert set(h.shard("g").consumer.groups["g"].members) == {a.member_id}
    await settle([a], rounds=2)
    assert a.partitions() == {0, 1, 2, 3}
    assert h.timer_failures() == 0


async def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed(autojump_clock, nursery):
    h = await harness(nursery, Topics(t=4))
    a = Client(h, "g")
    await a.beat()
    a_member = h.shard("g").consumer.groups["g"].members[a.member_id]
    a_member.rebalance_timeout_ms = 3000
    b = Client(h, "g")
    await b.beat()
    a.obeys = False  # a client that keeps what it is told to revoke
    await a.beat()
    assert a_member.state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(5):
        await trio.sleep(1)
        await b.beat()
        if a.member_id in h.shard("g").consumer.groups["g"].members:
            await a.beat()
    assert a.member_id not in h.shard("g").consumer.groups["g"].members
    await settle([b], rounds=2)
    assert b.partitions() == {0, 1, 2, 3}


async def test_a_static_member_leaving_with_minus_two_comes_back_to_its_partitions(autojump_clock, nursery):
    h = await harness(nursery, Topics(t=4))
    a, b = Client(h, "g", instance_id="pod-a"), Client(h, "g", instance_id="pod-b")
    await a.beat()
    await b.beat()
    await settle([a, b])
    held = a.partitions()
    assert (await a.leave(-2)).member_epoch == -2
    await settle([b], rounds=2)
    assert b.partitions() == {0, 1, 2, 3} - held  # A's partitions wait for it
    again = Client(h, "g", instance_id="pod-a")
    answer = await again.beat()
    assert answer.error_code == ErrorCode.NONE and again.partitions() == held
    # The instance id is taken while its member is there.
    twin = Client(h, "g", instance_id="pod-b")
    assert (await twin.beat()).error_code == ErrorCode.UNRELEASED_INSTANCE_ID


async def test_leaving_and_the_group_max_size(autojump_clock, nursery):
    h = await harness(nursery, Topics(t=2), group_consumer_max_size=2)
    a, b = Client(h, "g"), Client(h, "g")
    await a.beat()
    await b.beat()
    assert (await Client(h, "g").beat()).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert (await b.leave()).member_epoch == -1
    await settle([a], rounds=2)
    assert a.partitions() == {0, 1}


async def test_partitions_added_and_topics_created_reach_the_members(autojump_clock, nursery):
    topics = Topics(t=2)
    h = await harness(nursery, topics)
    a = Client(h, "g", ("t", "later"))
    r = Client(h, "g", (), regex="ev.*")
    r.topics = ()
    await a.beat()
    await r.beat()
    await settle([a, r])
    assert a.partitions() == {0, 1} and r.owned == {}
    topics.add("t", 3)
    topics.add("later", 1)
    topics.add("events", 2)
    await settle([a, r])
    assert a.partitions() == {0, 1, 2} and a.partitions(topics.ids["later"]) == {0}
    assert r.partitions(topics.ids["events"]) == {0, 1}
    group = h.shard("g").consumer.groups["g"]
    assert group.members[r.member_id].subscribed_topics() == {"events"}
    bad = Client(h, "g", regex="(")
    assert (await bad.beat()).error_code == ErrorCode.INVALID_REGULAR_EXPRESSION


async def test_classic_and_consumer_groups_mix_only_as_the_migration_policy_says(autojump_clock, nursery):
    h = await harness(nursery, Topics(t=2))
    a = Client(h, "consumers")
    await a.beat()
    # A classic member may join a consumer group with members (Kafka 3.9), if its subscription parses.
    joined = await h.join_new("consumers")
    assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await h.join("consumers", protocol_type="connect")).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # group.consumer.migration.policy=disabled (the default): a classic group with members stays one.
    await h.stable("classics", 1)
    refused = await Client(h, "classics").beat()
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # An empty classic group becomes a consumer group: its metadata is tombstoned, its offsets kept.
    [classic_member] = (await h.stable("was-classic", 1)).keys()
    await h.commit("was-classic", {("t", 1): 9}, generation=1, member_id=classic_member)
    await h.leave("was-classic", (classic_member, None))
    convert = Client(h, "was-classic")
    assert (await convert.beat()).error_code == ErrorCode.NONE
    fetched, _ = await h.fetch("was-classic", [("t", 1)])
    assert fetched == {("t", 1): (9, ErrorCode.NONE)}
    await trio.testing.wait_all_tasks_blocked()
    key = records.group_metadata_key("was-classic")
    assert [v for _, k, v in h.logs[0].records if k == key][-1] is None
    # An empty consumer group becomes a classic one when a classic member joins.
    await a.leave()
    assert (await h.join("consumers")).error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert "consumers" not in h.shard("consumers").consumer.groups


async def test_commits_check_the_member_epoch_and_describe_shows_the_group(autojump_clock, nursery):
    topics = Topics(t=2)
    h = await harness(nursery, topics)
    a = Client(h, "g")
    await a.beat()
    ok = await h.commit("g", {("t", 0): 7}, generation=a.epoch, member_id=a.member_id, version=9)
    assert ok == {("t", 0): ErrorCode.NONE}
    stale = await h.commit("g", {("t", 0): 8}, generation=a.epoch + 1, member_id=a.member_id, version=9)
    assert stale == {("t", 0): ErrorCode.STALE_MEMBER_EPOCH}
    old = await h.commit("g", {("t", 0): 8}, generation=a.epoch, member_id=a.member_id, version=8)
    assert old == {("t", 0): ErrorCode.UNSUPPORTED_VERSION}
    assert (await h.commit("g", {("t", 0): 8}, member_id="who", version=9)) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    fetched, error = await h.fetch("g", [("t", 0)], version=9)
    assert (fetched, error) == ({("t", 0): (7, ErrorCode.NONE)}, ErrorCode.NONE)
    assert await h.list_groups() == (ErrorCode.NONE, {"g": "Stable"})
    await h.commit("classic", {("t", 0): 1})
    listed = await h.coordinator.list_groups(h.ctx(5), ListGroupsRequest(types_filter=["Consumer"]))
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups] == [
        ("g", "consumer", "Stable", "consumer")]
    listed = await h.coordinator.list_groups(h.ctx(5), ListGroupsRequest())
    assert {g.group_id: g.group_type for g in listed.groups} == {"g": "consumer", "classic": "classic"}
    # OffsetFetch v9: a member names itself and its epoch; an admin names neither.
    for member_id, epoch, expected in [(a.member_id, a.epoch, ErrorCode.NONE), (None, -1, ErrorCode.NONE),
                                       (a.member_id, a.epoch + 1, ErrorCode.STALE_MEMBER_EPOCH),
                                       ("who", 1, ErrorCode.UNKNOWN_MEMBER_ID)]:
        fetch = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id="g", member_id=member_id, member_epoch=epoch, topics=None)])
        assert (await h.coordinator.offset_fetch(h.ctx(9), fetch)).groups[0].error_code == expected
    assert (await h.describe("g")).error_code == ErrorCode.GROUP_ID_NOT_FOUND  # DescribeGroups is for classic groups
    response = await h.coordinator.consumer_group_describe(
        h.ctx(0), ConsumerGroupDescribeRequest(group_ids=["g", "none"]), lambda t: "t" if t == T1 else None)
    g, none = response.groups
    assert (g.error_code, g.group_state, g.assignor_name) == (ErrorCode.NONE, "Stable", "uniform")
    assert g.group_epoch == g.assignment_epoch == g.members[0].member_epoch
    assert [(tp.topic_name, tp.partitions) for tp in g.members[0].assignment.topic_partitions] == [("t", [0, 1])]
    assert none.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert await h.delete_groups("g") == {"g": ErrorCode.NON_EMPTY_GROUP}


async def failover(h: GroupHarness, nursery) -> None:
    """Every partition's leadership moves to a new coordinator, which loads the log."""
    old = h.coordinator
    for p, log in h.logs.items():
        log.new_epoch()
        old.on_resigned(p, log.leader_epoch - 1)
    h.coordinator = h.new_coordinator()
    await h.start(nursery)


async def test_a_new_coordinator_loads_the_groups_from_their_records(autojump_clock, nursery):
    topics = Topics(t=4, events=2)
    h = await harness(nursery, topics)
    a = Client(h, "g", instance_id="pod-a")
    b = Client(h, "g", regex="ev.*")
    b.topics = ("t",)
    await a.beat()
    await b.beat()
    await settle([a, b])
    gone = Client(h, "g")
    await gone.beat()
    await gone.leave()
    await settle([a, b])
    deleted = Client(h, "deleted")
    await deleted.beat()
    await deleted.leave()
    assert await h.delete_groups("deleted") == {"deleted": ErrorCode.NONE}
    before = h.shard("g").consumer.groups["g"]
    state = {m.member_id: (m.member_epoch, m.assigned, m.subscribed_topics(), m.instance_id)
             for m in before.members.values()}
    epochs = (before.group_epoch, before.assignment_epoch)

    await failover(h, nursery)
    after = h.shard("g").consumer.groups["g"]
    assert {m.member_id: (m.member_epoch, m.assigned, m.subscribed_topics(), m.instance_id)
            for m in after.members.values()} == state
    assert (after.group_epoch, after.assignment_epoch) == epochs
    assert after.target == before.target and after.state is ConsumerGroupState.STABLE
    assert "deleted" not in h.shard("deleted").consumer.groups
    # The members go on with their epochs: no rebalance.
    await settle([a, b], rounds=2)
    assert (after.group_epoch, after.assignment_epoch) == epochs
    t = topics.ids["t"]
    assert a.partitions(t) | b.partitions(t) == {0, 1, 2, 3} and b.partitions(topics.ids["events"]) == {0, 1}
    # A member that never comes back is removed at its session timeout.
    for _ in range(12):
        await trio.sleep(1)
        await a.beat()
    assert set(after.members) == {a.member_id}
    await failover(h, nursery)
    assert set(h.shard("g").consumer.groups["g"].members) == {a.member_id}
    assert h.timer_failures() == 0


async def test_a_groups_own_session_timeout_and_heartbeat_interval_win(autojump_clock, nursery):
    h = await harness(nursery, Topics(t=2), group_consumer_session_timeout_ms=45000)
    a = Client(h, "g")
    request = ConsumerGroupHeartbeatRequest(group_id="g", member_id=a.member_id, member_epoch=0,
                                            rebalance_timeout_ms=60000, subscribed_topic_names=["t"])
    response = await h.coordinator.consumer_group_heartbeat(h.ctx(1), request, h.lookup, h.match,
                                                            lambda group_id: (6000, 2000))
    assert (response.error_code, response.heartbeat_interval_ms) == (ErrorCode.NONE, 2000)
    await trio.sleep(7)  # past the group's 6 s session, far from the broker's 45 s
    assert h.shard("g").consumer.groups["g"].members == {}


async def test_an_empty_consumer_group_goes_with_its_last_offsets(autojump_clock, nursery):
    h = await harness(nursery, Topics(t=1), offsets_retention_minutes=1)
    a, b = Client(h, "kept"), Client(h, "bare")
    await a.beat()
    await b.beat()
    assert await h.commit("kept", {("t", 0): 3}, generation=a.epoch, member_id=a.member_id, version=9) == {
        ("t", 0): ErrorCode.NONE}
    await a.leave()
    await b.leave()
    h.coordinator.expire_offsets()  # the offsets are younger than the retention: only "bare" goes
    assert set(h.shard("kept").consumer.groups) == {"kept"}
    await trio.sleep(61)
    h.coordinator.expire_offsets()
    assert h.shard("kept").consumer.groups == {}
    await trio.testing.wait_all_tasks_blocked()  # the tombstones written
    await failover(h, nursery)
    assert h.shard("kept").consumer.groups == {}
