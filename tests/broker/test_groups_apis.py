"""The group APIs on the wire, against real brokers: FindCoordinator (v0-v4) and the creation of
``__consumer_offsets``, each coordinator API through the broker's handlers, the coordinator's
load and resignation as clients see them, and commits acknowledged only once replicated."""

from __future__ import annotations

import structlog
import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.broker.group_support import OffsetsPartitionWriter
from kraftpy.coordinator.txn_state import TxnConfig
from kraftpy.metadata.image import ConfigResource
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from tests.helpers.cluster import open_cluster

OFFSETS = "__consumer_offsets"
#: Small test clusters: few offsets partitions, no initial rebalance delay, short sessions allowed.
GROUP_SETTINGS = dict(offsets_topic_num_partitions=4, group_initial_rebalance_delay_ms=0,
                      group_min_session_timeout_ms=100)
SERVED = {
    ApiKey.OFFSET_COMMIT: (0, 9), ApiKey.OFFSET_FETCH: (0, 9), ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9), ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5), ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5), ApiKey.LIST_GROUPS: (0, 5), ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
}


def java_partition(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions``, written out here independently."""
    h = 0
    for unit in group_id.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions  # Utils.abs: MIN_VALUE -> 0


def connect(cluster, broker_id: int) -> KafkaConnection:
    return KafkaConnection.connect("127.0.0.1", cluster.ports[broker_id], client_id="wire-test")


async def find(conn: KafkaConnection, *keys: str, version: int = 4, key_type: int = 0):
    if version >= 4:
        request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=list(keys))
    else:
        request = FindCoordinatorRequest(key=keys[0], key_type=key_type)
    return await conn.request(ApiKey.FIND_COORDINATOR, version, request)


async def coordinator_of(cluster, group: str) -> int:
    """The broker coordinating ``group`` once it has loaded its partition (FindCoordinator, then the
    coordinator's own state)."""
    async with await connect(cluster, min(cluster.brokers)) as conn:
        answer = (await find(conn, group)).coordinators[0]
    if answer.error_code != ErrorCode.NONE:
        await cluster.wait_for(lambda: cluster.image.topics.get_by_name(OFFSETS) is not None)
        async with await connect(cluster, min(cluster.brokers)) as conn:
            answer = (await find(conn, group)).coordinators[0]
    assert answer.error_code == ErrorCode.NONE, answer
    partition = java_partition(group, len(cluster.image.topics.get_by_name(OFFSETS).partitions))
    await until_loaded(cluster, answer.node_id, partition)
    return answer.node_id


async def until_loaded(cluster, broker_id: int, partition: int) -> None:
    """Wait until ``broker_id`` coordinates the groups of offsets ``partition`` (elected, then loaded)."""
    runtime = cluster.brokers[broker_id].coordinator.runtime
    await cluster.wait_for(lambda: runtime.shard(partition) is not None)
    shard = runtime.shard(partition)
    with trio.fail_after(30):
        await shard.loaded.wait()
    assert shard.active


async def join(conn, group: str, member_id: str = "", *, version: int = 9, instance_id: str | None = None,
               protocol_type: str = "consumer", protocols=(("range", b"meta"),), session_timeout_ms: int = 30_000):
    request = JoinGroupRequest(
        group_id=group, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=30_000, member_id=member_id,
        group_instance_id=instance_id, protocol_type=protocol_type, reason="test",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols])
    return await conn.request(ApiKey.JOIN_GROUP, version, request)


async def sync(conn, group: str, generation: int, member_id: str, assignments: dict[str, bytes], *,
               version: int = 5):
    request = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                               protocol_type="consumer", protocol_name="range", assignments=[
                                   SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                   for m, a in assignments.items()])
    return await conn.request(ApiKey.SYNC_GROUP, version, request)


async def commit(conn, group: str, offsets: dict[tuple[str, int], int], *, generation: int = -1,
                 member_id: str = "", version: int = 8):
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata="m"))
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                                  topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                                          for t, ps in by_topic.items()])
    response = await conn.request(ApiKey.OFFSET_COMMIT, version, request)
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def fetch_offsets(conn, group: str, topic: str, partitions: list[int], *, version: int = 7):
    if version >= 8:
        request = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=topic,
                                                                               partition_indexes=partitions)])])
        response = await conn.request(ApiKey.OFFSET_FETCH, version, request)
        group_answer = response.groups[0]
        return group_answer.error_code, {p.partition_index: p.committed_offset
                                         for t in group_answer.topics for p in t.partitions}
    request = OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)])
    response = await conn.request(ApiKey.OFFSET_FETCH, version, request)
    return response.error_code, {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}


# -- ApiVersions and FindCoordinator ---------------------------------------------------------------


async def test_api_versions_advertise_the_group_apis_at_kafka_3_6s_ranges(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster, await connect(cluster, 1) as conn:
        response = await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                                client_software_version="1"))
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert {k: ranges.get(k) for k in SERVED} == SERVED


async def test_find_coordinator_creates_the_offsets_topic_then_names_the_leader_at_every_version(tmp_path):
    async with open_cluster(tmp_path, brokers=3, **GROUP_SETTINGS) as cluster:
        async with await connect(cluster, 1) as conn:
            first = (await find(conn, "orders", version=4)).coordinators[0]
            assert first.error_code in (ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            topic = cluster.image.topics.get_by_name(OFFSETS)
            assert topic is not None and len(topic.partitions) == 4
            assert all(len(reg.replicas) == 3 for reg in topic.partitions.values())
            creations = [r for name, r in cluster.controller.requests if name == "create_topics"]
            assert len(creations) == 1
            created = creations[0].topics[0]
            assert (created.name, created.num_partitions, created.replication_factor) == (OFFSETS, 4, 3)
            assert {c.name: c.value for c in created.configs} == {
                "cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}

            groups = ["orders", "billing", "", "x" * 300, "grüße"]
            expected = {}
            for group in groups:
                leader = cluster.leader(OFFSETS, java_partition(group, 4))
                expected[group] = (leader, cluster.ports[leader])
            # v4: a batch of keys (KIP-699), each answered on its own.
            response = await find(conn, *groups, version=4)
            assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in response.coordinators] == [
                (g, ErrorCode.NONE, expected[g][0], "127.0.0.1", expected[g][1]) for g in groups]
            # v0-v3: one key; the same answer.
            for version in range(4):
                response = await find(conn, "billing", version=version)
                assert (response.error_code, response.node_id, response.port) == (
                    ErrorCode.NONE, *expected["billing"])
            assert len([n for n, _ in cluster.controller.requests if n == "create_topics"]) == 1  # once


async def test_concurrent_first_find_coordinators_create_the_offsets_topic_once(tmp_path):
    async with open_cluster(tmp_path, brokers=1, **GROUP_SETTINGS) as cluster:
        answers: list = []

        async def ask(i: int) -> None:
            async with await connect(cluster, 1) as conn:
                answers.append((await find(conn, f"group-{i}")).coordinators[0].error_code)

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(ask, i)
        assert len(answers) == 8
        assert set(answers) <= {ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert [name for name, _ in cluster.controller.requests].count("create_topics") == 1


async def test_offsets_topic_replication_is_capped_by_live_brokers_with_a_warning(tmp_path):
    async with open_cluster(tmp_path, brokers=2, **GROUP_SETTINGS) as cluster:  # offsets RF 3 by default
        async with await connect(cluster, 1) as conn:
            with structlog.testing.capture_logs() as logs:
                await find(conn, "g", version=3)
        topic = cluster.image.topics.get_by_name(OFFSETS)
        assert all(len(reg.replicas) == 2 for reg in topic.partitions.values())
        warnings = [entry for entry in logs if entry["log_level"] == "warning" and "replication" in entry["event"]]
        assert warnings and warnings[0]["replication_factor"] == 2 and warnings[0]["configured"] == 3


async def test_find_coordinator_refusals(tmp_path):
    async with open_cluster(tmp_path, brokers=1, transaction=TxnConfig(state_log_num_partitions=3),
                            **GROUP_SETTINGS) as cluster:
        async with await connect(cluster, 1) as conn:
            cluster.controller.available = False
            response = await find(conn, "g", version=2)
            assert (response.error_code, response.node_id, response.host, response.port) == (
                ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
            assert response.error_message == "The coordinator is not available."
            assert cluster.image.topics.get_by_name(OFFSETS) is None
            cluster.controller.available = True

            # Transactional ids: __transaction_state is made on the first ask (one broker: one replica,
            # min.insync.replicas capped at 1); an empty id is refused.
            response = await find(conn, "tx-1", version=3, key_type=1)
            assert (response.error_code, response.node_id) == (ErrorCode.NONE, 1)
            response = await find(conn, "tx-1", "", version=4, key_type=1)
            assert [c.error_code for c in response.coordinators] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
            txn_topic = cluster.image.topics.get_by_name("__transaction_state")
            assert len(txn_topic.partitions) == 3
            assert {r.replicas for r in txn_topic.partitions.values()} == {(1,)}
            assert cluster.image.configs.config(ConfigResource.topic("__transaction_state"))["min.insync.replicas"] == "1"
            assert cluster.image.topics.get_by_name(OFFSETS) is None  # no group key asked for yet
            # An unknown key type is a malformed request (Kafka's CoordinatorType.forId).
            response = await find(conn, "g", version=4, key_type=7)
            assert [c.error_code for c in response.coordinators] == [ErrorCode.INVALID_REQUEST]
            response = await find(conn, version=4)  # no keys: nothing to answer
            assert response.coordinators == []


# -- the coordinator APIs through the broker ---------------------------------------------------------


async def test_a_group_through_every_group_api(tmp_path):
    async with open_cluster(tmp_path, brokers=1, **GROUP_SETTINGS) as cluster:
        await cluster.create_topic("events", partitions=2)
        node = await coordinator_of(cluster, "g1")
        async with await connect(cluster, node) as conn:
            first = await join(conn, "g1")
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED  # KIP-394: the id comes from the coordinator
            member = first.member_id
            assert member.startswith("wire-test-")
            joined = await join(conn, "g1", member)
            assert (joined.error_code, joined.generation_id, joined.leader, joined.protocol_name) == (
                ErrorCode.NONE, 1, member, "range")
            assert [(m.member_id, m.metadata) for m in joined.members] == [(member, b"meta")]
            synced = await sync(conn, "g1", 1, member, {member: b"assignment"})
            assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, b"assignment")
            beat = await conn.request(ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="g1", generation_id=1,
                                                                            member_id=member))
            assert beat.error_code == ErrorCode.NONE

            assert await commit(conn, "g1", {("events", 0): 5, ("events", 1): 7}, generation=1, member_id=member) == {
                ("events", 0): ErrorCode.NONE, ("events", 1): ErrorCode.NONE}
            for version in (1, 5, 7, 8):
                assert await fetch_offsets(conn, "g1", "events", [0, 1], version=version) == (
                    ErrorCode.NONE, {0: 5, 1: 7})

            described = await conn.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=["g1"]))
            group = described.groups[0]
            assert (group.error_code, group.group_state, group.protocol_type, group.protocol_data) == (
                ErrorCode.NONE, "Stable", "consumer", "range")
            assert [(m.member_id, m.client_id, m.client_host, m.member_assignment) for m in group.members] == [
                (member, "wire-test", "/127.0.0.1", b"assignment")]

            listed = await conn.request(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=["Stable"]))
            assert [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups] == [
                ("g1", "consumer", "Stable")]
            listed = await conn.request(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=["Empty"]))
            assert listed.groups == []

            left = await conn.request(ApiKey.LEAVE_GROUP, 5, LeaveGroupRequest(group_id="g1", members=[
                LeaveGroupRequest.MemberIdentity(member_id=member, reason="done")]))
            assert left.error_code == ErrorCode.NONE
            assert [(m.member_id, m.error_code) for m in left.members] == [(member, ErrorCode.NONE)]
            described = await conn.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=["g1"]))
            assert described.groups[0].group_state == "Empty"

            deleted = await conn.request(ApiKey.OFFSET_DELETE, 0, OffsetDeleteRequest(group_id="g1", topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(name="events", partitions=[
                    OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]))
            assert deleted.error_code == ErrorCode.NONE
            assert [(p.partition_index, p.error_code) for t in deleted.topics for p in t.partitions] == [
                (0, ErrorCode.NONE)]
            assert await fetch_offsets(conn, "g1", "events", [0, 1]) == (ErrorCode.NONE, {0: -1, 1: 7})

            gone = await conn.request(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=["g1"]))
            assert [(r.group_id, r.error_code) for r in gone.results] == [("g1", ErrorCode.NONE)]
            listed = await conn.request(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=[]))
            assert listed.groups == []
            assert await fetch_offsets(conn, "g1", "events", [0, 1]) == (ErrorCode.NONE, {0: -1, 1: -1})


async def test_bad_group_requests_get_kafkas_errors_and_change_nothing(tmp_path):
    async with open_cluster(tmp_path, brokers=1, **GROUP_SETTINGS) as cluster:
        await cluster.create_topic("t")
        node = await coordinator_of(cluster, "g")
        async with await connect(cluster, node) as conn:
            member = (await join(conn, "g")).member_id
            joined = await join(conn, "g", member)
            assert joined.error_code == ErrorCode.NONE
            assert (await sync(conn, "g", 1, member, {member: b"a"})).error_code == ErrorCode.NONE

            assert (await join(conn, "", version=5)).error_code == ErrorCode.INVALID_GROUP_ID
            other = await join(conn, "g", protocol_type="connect")
            assert other.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            assert (await sync(conn, "g", 1, "stranger", {})).error_code == ErrorCode.UNKNOWN_MEMBER_ID
            assert await commit(conn, "g", {("t", 0): 1}, generation=0, member_id=member) == {
                ("t", 0): ErrorCode.ILLEGAL_GENERATION}
            # The broker's metadata says which partitions exist (Kafka 3.6 refuses commits of others).
            assert await commit(conn, "g", {("nope", 0): 1, ("t", 5): 1}, generation=1, member_id=member) == {
                ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("t", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}

            described = await conn.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=["g"]))
            group = described.groups[0]
            assert (group.group_state, [m.member_id for m in group.members]) == ("Stable", [member])
            assert await fetch_offsets(conn, "g", "t", [0]) == (ErrorCode.NONE, {0: -1})


async def test_requests_to_a_broker_that_is_not_the_coordinator_are_answered_not_coordinator(tmp_path):
    async with open_cluster(tmp_path, brokers=2, **GROUP_SETTINGS) as cluster:
        await cluster.create_topic("t")
        node = await coordinator_of(cluster, "g")
        other = next(b for b in cluster.brokers if b != node)
        async with await connect(cluster, other) as conn:
            assert (await join(conn, "g")).error_code == ErrorCode.NOT_COORDINATOR
            assert await commit(conn, "g", {("t", 0): 1}) == {("t", 0): ErrorCode.NOT_COORDINATOR}
            assert (await fetch_offsets(conn, "g", "t", [0], version=8))[0] == ErrorCode.NOT_COORDINATOR


async def test_load_in_progress_then_served_and_not_coordinator_after_leadership_moves(tmp_path, monkeypatch):
    """A new coordinator answers COORDINATOR_LOAD_IN_PROGRESS until its partition is replayed; the old
    one answers NOT_COORDINATOR as soon as its leadership is gone; the commits survive the move."""
    loading_may_finish = trio.Event()
    real_read = OffsetsPartitionWriter.read_committed

    async def held_read(self):
        await loading_may_finish.wait()
        async for record in real_read(self):
            yield record

    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000, **GROUP_SETTINGS) as cluster:
        await cluster.create_topic("t")
        old = await coordinator_of(cluster, "g")
        partition = java_partition("g", 4)
        new = next(b for b in cluster.brokers if b != old)
        await cluster.wait_for(lambda: set(cluster.registration(OFFSETS, partition).isr) == {old, new})
        async with await connect(cluster, old) as conn:
            assert await commit(conn, "g", {("t", 0): 42}) == {("t", 0): ErrorCode.NONE}

        monkeypatch.setattr(OffsetsPartitionWriter, "read_committed", held_read)
        await cluster.fence(old)
        assert cluster.leader(OFFSETS, partition) == new
        async with await connect(cluster, old) as conn:
            assert await commit(conn, "g", {("t", 0): 43}) == {("t", 0): ErrorCode.NOT_COORDINATOR}
        async with await connect(cluster, new) as conn:
            await cluster.wait_for(lambda: partition in cluster.brokers[new].coordinator.owned_partitions())
            assert await commit(conn, "g", {("t", 0): 44}) == {("t", 0): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
            assert (await fetch_offsets(conn, "g", "t", [0]))[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert (await join(conn, "g")).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            loading_may_finish.set()
            await until_loaded(cluster, new, partition)
            assert await fetch_offsets(conn, "g", "t", [0]) == (ErrorCode.NONE, {0: 42})


async def test_a_commit_is_acknowledged_only_once_every_isr_member_has_it(tmp_path):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000,
                            **{**GROUP_SETTINGS, "offsets_commit_timeout_ms": 30_000}) as cluster:
        await cluster.create_topic("t")
        node = await coordinator_of(cluster, "g")
        follower = next(b for b in cluster.brokers if b != node)
        partition = java_partition("g", 4)
        await cluster.wait_for(lambda: set(cluster.registration(OFFSETS, partition).isr) == {node, follower})
        leader_log = cluster.partition(node, OFFSETS, partition)
        end = leader_log.log_end_offset
        answers: list = []
        cluster.brokers[follower].fetchers.pause()
        async with await connect(cluster, node) as conn, trio.open_nursery() as nursery:
            async def committing() -> None:
                answers.append(await commit(conn, "g", {("t", 0): 9}))

            nursery.start_soon(committing)
            await cluster.wait_for(lambda: leader_log.log_end_offset > end)
            assert answers == []  # written by the coordinator's broker, not yet by its follower
            cluster.brokers[follower].fetchers.resume()
        assert answers == [{("t", 0): ErrorCode.NONE}]
        assert cluster.partition(follower, OFFSETS, partition).log_end_offset > end


async def test_a_commit_the_isr_does_not_take_in_time_fails_and_is_not_visible(tmp_path):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000,
                            **{**GROUP_SETTINGS, "offsets_commit_timeout_ms": 300}) as cluster:
        await cluster.create_topic("t")
        node = await coordinator_of(cluster, "g")
        follower = next(b for b in cluster.brokers if b != node)
        partition = java_partition("g", 4)
        await cluster.wait_for(lambda: set(cluster.registration(OFFSETS, partition).isr) == {node, follower})
        cluster.brokers[follower].fetchers.pause()
        async with await connect(cluster, node) as conn:
            # Kafka 3.6 passes the write's timeout on to the client (which retries the commit).
            assert await commit(conn, "g", {("t", 0): 9}) == {("t", 0): ErrorCode.REQUEST_TIMED_OUT}
            assert await fetch_offsets(conn, "g", "t", [0]) == (ErrorCode.NONE, {0: -1})


async def test_groups_are_placed_by_the_offsets_topics_own_partition_count(tmp_path):
    """A topic made under another offsets.topic.num.partitions: FindCoordinator and the coordinator both
    place groups by the partitions the topic has (Kafka's rule), so they agree."""
    async with open_cluster(tmp_path, brokers=2, **GROUP_SETTINGS) as cluster:  # 4 configured
        await cluster.create_topic(OFFSETS, partitions=3, replication_factor=2, configs={"cleanup.policy": "compact"})
        await cluster.create_topic("t")
        groups = [f"group-{i}" for i in range(8)]
        assert any(java_partition(g, 3) != java_partition(g, 4) for g in groups)
        for group in groups:
            node = await coordinator_of(cluster, group)
            assert node == cluster.leader(OFFSETS, java_partition(group, 3))
            async with await connect(cluster, node) as conn:
                assert await commit(conn, group, {("t", 0): 3}) == {("t", 0): ErrorCode.NONE}
