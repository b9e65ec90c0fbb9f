"""DescribeTopicPartitions (KIP-966) against real brokers: pages that follow the cursor, the broker's
partition limit, unknown and illegal names, a cursor the request does not name, offline replicas and a
leader that is not serving (a fenced broker), and what a caller without DESCRIBE sees."""

from __future__ import annotations

import uuid

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.metadata.messages import AclCreation, CreateAclsRequest
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeTopicPartitionsRequest
from kraftpy.protocol.types import ZERO_UUID
from kraftpy.security.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from tests.helpers.cluster import open_cluster

Request = DescribeTopicPartitionsRequest


def request(*names: str, limit: int = 2000, cursor: tuple[str, int] | None = None) -> Request:
    return Request(topics=[Request.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                   cursor=None if cursor is None else Request.Cursor(topic_name=cursor[0], partition_index=cursor[1]))


def pages(response) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.partition_index for p in t.partitions]) for t in response.topics]


def cursor_of(response) -> tuple[str, int] | None:
    c = response.next_cursor
    return None if c is None else (c.topic_name, c.partition_index)


async def describe(admin: AdminClient, req: Request):
    return await admin.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, req, version=0)


async def test_pages_follow_the_cursor_through_every_topic(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        for name, count in (("b", 3), ("a", 2), ("c", 4)):
            await cluster.create_topic(name, partitions=count)
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            seen: list[tuple[str, int]] = []
            req = request(limit=3)
            for _ in range(10):
                response = await describe(admin, req)
                assert all(t.error_code == ErrorCode.NONE for t in response.topics)
                seen += [(name, p) for name, ps in pages(response) for p in ps]
                if response.next_cursor is None:
                    break
                req = request(limit=3, cursor=cursor_of(response))
            assert seen == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("c", 0), ("c", 1), ("c", 2), ("c", 3)]

            # The first page: a's two partitions, then b cut after one; the cursor continues b at 1.
            first = await describe(admin, request(limit=3))
            assert pages(first) == [("a", [0, 1]), ("b", [0])]
            assert cursor_of(first) == ("b", 1)
            # A budget spent exactly at a topic's end: the next page starts at the next topic's partition 0.
            exact = await describe(admin, request(limit=2))
            assert pages(exact) == [("a", [0, 1])] and cursor_of(exact) == ("b", 0)
            topic = first.topics[0]
            assert topic.topic_id != ZERO_UUID and topic.is_internal is False
            partition = topic.partitions[0]
            assert (partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (1, [1], [1])
            assert partition.offline_replicas == [] and partition.eligible_leader_replicas == []


async def test_the_broker_limit_caps_the_request_limit_and_a_limit_below_one_is_one(tmp_path):
    async with open_cluster(tmp_path, brokers=1, max_request_partition_size_limit=2) as cluster:
        await cluster.create_topic("t", partitions=5)
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            response = await describe(admin, request("t", limit=1000))
            assert pages(response) == [("t", [0, 1])] and cursor_of(response) == ("t", 2)
            response = await describe(admin, request("t", limit=0, cursor=("t", 4)))
            assert pages(response) == [("t", [4])] and response.next_cursor is None


async def test_named_topics_unknown_illegal_and_a_cursor_outside_them(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("known", partitions=1)
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            missing = f"missing-{uuid.uuid4().hex[:6]}"
            response = await describe(admin, request("known", missing, "bad/name", "known"))
            errors = {t.name: t.error_code for t in response.topics}
            assert errors == {"known": ErrorCode.NONE, missing: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION}
            assert [t.name for t in response.topics] == sorted(errors)  # name order, each once
            # Topics before the cursor's topic are left out.
            response = await describe(admin, request("known", missing, cursor=(missing, 0)))
            assert [t.name for t in response.topics] == [missing]
            # A cursor naming a topic the request does not ask for, or a negative partition: invalid.
            for bad in (request("known", cursor=("other", 0)), request("known", cursor=("known", -1))):
                response = await describe(admin, bad)
                assert [(t.name, t.error_code) for t in response.topics] == [("known", ErrorCode.INVALID_REQUEST)]


async def test_a_fenced_broker_is_an_offline_replica_and_no_leader(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        await cluster.create_topic("solo", partitions=2, replication_factor=1)
        placement = {p: cluster.image.topics.get_by_name("solo").partitions[p].leader for p in (0, 1)}
        async with AdminClient(parse_addresses(f"127.0.0.1:{cluster.ports[1]}")) as admin:
            await cluster.fence(2)
            response = await describe(admin, request("solo"))
        partitions = {p.partition_index: p for p in response.topics[0].partitions}
        for index, leader in placement.items():
            p = partitions[index]
            assert p.error_code == ErrorCode.NONE
            if leader == 2:
                assert p.leader_id == -1 and p.offline_replicas == [2] and p.replica_nodes == [2]
            else:
                assert p.leader_id == 1 and p.offline_replicas == []


def acl(rtype: ResourceType, name: str, op: AclOperation) -> AclCreation:
    return AclCreation(int(rtype), name, int(PatternType.LITERAL), "User:ANONYMOUS", "*", int(op),
                       int(AclPermissionType.ALLOW))


async def test_topics_the_caller_may_not_describe(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        for name in ("open", "secret"):
            await cluster.create_topic(name)
        created = await cluster.controller.create_acls(CreateAclsRequest((acl(ResourceType.TOPIC, "open",
                                                                               AclOperation.READ),)))
        assert all(r.error_code == 0 for r in created.results)
        await cluster.caught_up()
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            # Every topic: the ones it may not describe are not mentioned.
            everything = await describe(admin, request())
            assert pages(everything) == [("open", [0])]
            assert everything.topics[0].topic_authorized_operations == (1 << AclOperation.READ) | (
                1 << AclOperation.DESCRIBE)
            # Named: refused without an id, existing or not, after the others.
            named = await describe(admin, request("secret", "open", "nowhere"))
            assert [(t.name, t.error_code, t.topic_id) for t in named.topics[1:]] == [
                ("nowhere", ErrorCode.TOPIC_AUTHORIZATION_FAILED, ZERO_UUID),
                ("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED, ZERO_UUID)]
            assert (named.topics[0].name, named.topics[0].error_code) == ("open", ErrorCode.NONE)
