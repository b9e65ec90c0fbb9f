"""Kafka's authorization rules of the group APIs, request by request, on a broker with an authorizer.

Raw requests (kraftpy's admin client) to a one-broker in-process cluster; every connection is
User:ANONYMOUS, granted READ on group ``g`` and on topic ``t1`` (the ACLs written through the in-process
controller), and nothing on the cluster.
"""

from __future__ import annotations

import pytest

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.metadata.messages import AclCreation, CreateAclsRequest, DeleteAclsFilter, DeleteAclsRequest
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kraftpy.security.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.helpers.cluster import open_cluster

ANONYMOUS = "User:ANONYMOUS"
GAF = ErrorCode.GROUP_AUTHORIZATION_FAILED
TAF = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def acl(rtype: ResourceType, name: str, op: AclOperation) -> AclCreation:
    return AclCreation(int(rtype), name, int(PatternType.LITERAL), ANONYMOUS, "*", int(op),
                       int(AclPermissionType.ALLOW))


def commit_request(group: str, *topics: str) -> OffsetCommitRequest:
    Topic, Partition = OffsetCommitRequest.OffsetCommitRequestTopic, OffsetCommitRequest.OffsetCommitRequestPartition
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        Topic(name=t, partitions=[Partition(partition_index=0, committed_offset=5, committed_metadata="")])
        for t in topics])


def commit_errors(response) -> dict[str, int]:
    return {t.name: t.partitions[0].error_code for t in response.topics}


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        await cluster.create_topic("t1")
        await cluster.create_topic("t2")
        response = await cluster.controller.create_acls(CreateAclsRequest((
            acl(ResourceType.GROUP, "g", AclOperation.READ),
            acl(ResourceType.GROUP, "h", AclOperation.READ),
            acl(ResourceType.TOPIC, "t1", AclOperation.READ),
            acl(ResourceType.TOPIC, "t2", AclOperation.READ))))
        assert all(r.error_code == 0 for r in response.results)
        await cluster.caught_up()
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            for group in ("g", "h"):  # both groups get committed offsets while they may
                answer = await admin.coordinator_request(group, ApiKey.OFFSET_COMMIT, commit_request(group, "t1", "t2"))
                assert commit_errors(answer) == {"t1": 0, "t2": 0}
        # Now only g and t1 stay readable.
        await cluster.controller.delete_acls(DeleteAclsRequest((
            DeleteAclsFilter(int(ResourceType.GROUP), "h", int(PatternType.LITERAL), None, None,
                             int(AclOperation.ANY), int(AclPermissionType.ANY)),
            DeleteAclsFilter(int(ResourceType.TOPIC), "t2", int(PatternType.LITERAL), None, None,
                             int(AclOperation.ANY), int(AclPermissionType.ANY)))))
        await cluster.caught_up()
        yield cluster


async def test_offset_commit_refuses_the_group_or_the_topics_not_allowed(cluster):
    async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        allowed = await admin.request(ApiKey.OFFSET_COMMIT, commit_request("g", "t1", "t2"))
        assert commit_errors(allowed) == {"t1": ErrorCode.NONE, "t2": TAF}
        refused = await admin.request(ApiKey.OFFSET_COMMIT, commit_request("h", "t1"))
        assert commit_errors(refused) == {"t1": GAF}


async def test_offset_fetch_hides_or_refuses_topics_and_refuses_groups(cluster):
    async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        Group, Topics = OffsetFetchRequest.OffsetFetchRequestGroup, OffsetFetchRequest.OffsetFetchRequestTopics
        v8 = await admin.request(ApiKey.OFFSET_FETCH, OffsetFetchRequest(groups=[
            Group(group_id="g", topics=None), Group(group_id="h", topics=None),
            Group(group_id="g", topics=[Topics(name="t2", partition_indexes=[0])])]), version=8)
        by_group = [(g.group_id, g.error_code, {t.name: t.partitions[0].error_code for t in g.topics})
                    for g in v8.groups]
        assert ("g", 0, {"t1": 0}) in by_group  # all topics asked: t2 is left out
        assert ("h", GAF, {}) in by_group
        Topic = OffsetFetchRequest.OffsetFetchRequestTopic
        v7 = await admin.request(ApiKey.OFFSET_FETCH, OffsetFetchRequest(group_id="g", topics=[
            Topic(name="t1", partition_indexes=[0]), Topic(name="t2", partition_indexes=[0])]), version=7)
        assert {t.name: (t.partitions[0].error_code, t.partitions[0].committed_offset) for t in v7.topics} == {
            "t1": (0, 5), "t2": (TAF, -1)}
        denied = await admin.request(ApiKey.OFFSET_FETCH, OffsetFetchRequest(group_id="h", topics=None), version=7)
        assert denied.error_code == GAF and denied.topics == []


async def test_list_describe_and_delete_groups_see_only_the_groups_allowed(cluster):
    async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        listed = await admin.request(ApiKey.LIST_GROUPS, ListGroupsRequest())
        assert [g.group_id for g in listed.groups] == ["g"]  # h exists, but may not be described
    # DESCRIBE on the cluster (ALTER implies it) lists every group.
    await cluster.controller.create_acls(CreateAclsRequest((acl(ResourceType.CLUSTER, CLUSTER_NAME,
                                                                 AclOperation.ALTER),)))
    await cluster.caught_up()
    async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        listed = await admin.request(ApiKey.LIST_GROUPS, ListGroupsRequest())
        assert sorted(g.group_id for g in listed.groups) == ["g", "h"]
        described = await admin.request(ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=["g", "h"]))
        assert {g.group_id: g.error_code for g in described.groups} == {"g": 0, "h": GAF}
        deleted = await admin.request(ApiKey.DELETE_GROUPS, DeleteGroupsRequest(groups_names=["g", "h"]))
        # READ does not allow DELETE on g; nothing on h.
        assert {r.group_id: r.error_code for r in deleted.results} == {"g": GAF, "h": GAF}


def run_transaction(bootstrap: str, transactional_id: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "log_level": 0,
                         "transaction.timeout.ms": 30000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    producer.commit_transaction(30)


async def test_a_transactional_producer_needs_write_on_its_transactional_id(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    import trio

    with pytest.raises(confluent_kafka.KafkaException) as refused:
        await trio.to_thread.run_sync(run_transaction, cluster.bootstrap, "tx", "t1")
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Write on the transactional id and the topic; ClusterAction for the brokers' own requests (the
    # coordinator's markers, the leader's verification), as they are User:ANONYMOUS here too.
    await cluster.controller.create_acls(CreateAclsRequest((
        acl(ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.WRITE),
        acl(ResourceType.TOPIC, "t1", AclOperation.WRITE),
        acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.CLUSTER_ACTION))))
    await cluster.caught_up()
    await trio.to_thread.run_sync(run_transaction, cluster.bootstrap, "tx", "t1")
    # The coordinator's commit marker reaches the partition (WriteTxnMarkers, allowed by ClusterAction).
    partition = cluster.partition(1, "t1")
    await cluster.wait_for(lambda: partition.last_stable_offset == partition.high_watermark == 2)
