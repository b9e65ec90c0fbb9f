"""authorized_operations (KIP-430): what the caller may do on a topic, the cluster and a group, as
confluent-kafka's AdminClient reads it (describe_topics, describe_cluster, describe_consumer_groups with
include_authorized_operations=True), and the raw fields as Kafka fills them.

Every client here connects over PLAINTEXT, so its principal is User:ANONYMOUS; the ACLs are granted to
it through the in-process controller.
"""

from __future__ import annotations

import pytest
import trio

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.broker.authorization import AUTHORIZED_OPERATIONS_OMITTED, STANDARD_AUTHORIZER
from kraftpy.metadata.messages import AclCreation, CreateAclsRequest
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import DescribeClusterRequest, DescribeGroupsRequest, MetadataRequest
from kraftpy.security.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.helpers.cluster import open_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")

ANONYMOUS = "User:ANONYMOUS"
QUIET = {"log_level": 0}


def acl(rtype: ResourceType, name: str, op: AclOperation,
        permission: AclPermissionType = AclPermissionType.ALLOW) -> AclCreation:
    return AclCreation(int(rtype), name, int(PatternType.LITERAL), ANONYMOUS, "*", int(op), int(permission))


def bits(*ops: AclOperation) -> int:
    return sum(1 << int(op) for op in set(ops))


def described(bootstrap: str, topic: str, group: str) -> tuple[set[str], set[str], set[str]]:
    """The operation names confluent-kafka reports on the topic, the cluster and the group."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient as ConfluentAdmin

    admin = ConfluentAdmin({"bootstrap.servers": bootstrap, **QUIET})
    topic_future = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                         request_timeout=20)[topic]
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=20).result()
    group_desc = admin.describe_consumer_groups([group], include_authorized_operations=True,
                                                request_timeout=20)[group].result()
    return ({op.name for op in topic_future.result().authorized_operations},
            {op.name for op in cluster.authorized_operations},
            {op.name for op in group_desc.authorized_operations})


async def test_confluent_admin_reads_the_operations_its_acls_allow(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        await cluster.create_topic("orders")
        response = await cluster.controller.create_acls(CreateAclsRequest((
            acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.DESCRIBE),
            acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALTER_CONFIGS),
            acl(ResourceType.TOPIC, "orders", AclOperation.READ),
            acl(ResourceType.TOPIC, "orders", AclOperation.WRITE),
            acl(ResourceType.TOPIC, "orders", AclOperation.DELETE, AclPermissionType.DENY),
            acl(ResourceType.GROUP, "readers", AclOperation.READ),
        )))
        assert all(r.error_code == 0 for r in response.results), response
        await cluster.caught_up()
        topic_ops, cluster_ops, group_ops = await trio.to_thread.run_sync(
            described, cluster.bootstrap, "orders", "readers")
        # READ and WRITE imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS.
        assert topic_ops == {"READ", "WRITE", "DESCRIBE"}
        assert cluster_ops == {"DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}
        assert group_ops == {"READ", "DESCRIBE"}


async def test_raw_fields_follow_kafka_asked_not_asked_and_refused(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        await cluster.create_topic("orders")
        await cluster.create_topic("hidden")
        response = await cluster.controller.create_acls(CreateAclsRequest((
            acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE),
            acl(ResourceType.TOPIC, "orders", AclOperation.DESCRIBE_CONFIGS),
            acl(ResourceType.TOPIC, "orders", AclOperation.DESCRIBE),
            acl(ResourceType.GROUP, "g", AclOperation.DELETE),
        )))
        assert all(r.error_code == 0 for r in response.results), response
        await cluster.caught_up()
        Topic = MetadataRequest.MetadataRequestTopic
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            asked = MetadataRequest(topics=[Topic(name="orders"), Topic(name="hidden")],
                                    allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
                                    include_topic_authorized_operations=True)
            meta = await admin.request(ApiKey.METADATA, asked, version=10)
            ops = {t.name: t.topic_authorized_operations for t in meta.topics}
            assert ops == {"orders": bits(AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS), "hidden": 0}
            # Without DESCRIBE on the cluster, Kafka answers 0 whatever else is allowed there; DescribeCluster
            # itself is answered (anyone may describe the cluster).
            assert meta.cluster_authorized_operations == 0
            described = await admin.request(ApiKey.DESCRIBE_CLUSTER, DescribeClusterRequest(
                include_cluster_authorized_operations=True), version=1)
            assert described.error_code == 0 and [b.broker_id for b in described.brokers] == [1]
            assert described.cluster_authorized_operations == 0

            meta = await admin.request(ApiKey.METADATA, MetadataRequest(
                topics=[Topic(name="orders")], allow_auto_topic_creation=False), version=10)
            assert meta.topics[0].topic_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
            assert meta.cluster_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED

            groups = await admin.coordinator_request("g", ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(
                groups=["g"], include_authorized_operations=True), version=5)
            assert [(g.group_id, g.authorized_operations) for g in groups.groups] == [
                ("g", bits(AclOperation.DELETE, AclOperation.DESCRIBE))]
            groups = await admin.coordinator_request("g", ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(
                groups=["g"], include_authorized_operations=False), version=5)
            assert groups.groups[0].authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


async def test_without_an_authorizer_every_supported_operation_is_reported(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("orders")
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            meta = await admin.request(ApiKey.METADATA, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name="orders")], allow_auto_topic_creation=False,
                include_cluster_authorized_operations=True, include_topic_authorized_operations=True), version=9)
            assert meta.topics[0].topic_authorized_operations == bits(
                AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)
            cluster_ops = bits(AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                               AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                               AclOperation.DESCRIBE)
            assert meta.cluster_authorized_operations == cluster_ops
            described = await admin.request(ApiKey.DESCRIBE_CLUSTER, DescribeClusterRequest(
                include_cluster_authorized_operations=True), version=0)
            assert described.cluster_authorized_operations == cluster_ops
