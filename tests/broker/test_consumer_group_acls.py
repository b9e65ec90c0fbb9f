"""Kafka's authorization rules of ConsumerGroupHeartbeat and ConsumerGroupDescribe on a broker with an
authorizer: READ on the group and DESCRIBE on every subscribed topic for a heartbeat, DESCRIBE on each
group for a describe. Raw requests as User:ANONYMOUS, granted READ on group ``g`` and on topic ``t1``."""

from __future__ import annotations

import uuid

import pytest

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.metadata.messages import AclCreation, CreateAclsRequest
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from kraftpy.security.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from tests.helpers.cluster import open_cluster

ANONYMOUS = "User:ANONYMOUS"


def acl(rtype: ResourceType, name: str, op: AclOperation) -> AclCreation:
    return AclCreation(int(rtype), name, int(PatternType.LITERAL), ANONYMOUS, "*", int(op),
                       int(AclPermissionType.ALLOW))


def join(group: str, *topics: str) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(group_id=group, member_id=str(uuid.uuid4()), member_epoch=0,
                                         rebalance_timeout_ms=30000, subscribed_topic_names=list(topics),
                                         topic_partitions=[])


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER,
                            offsets_topic_num_partitions=2,
                            group_coordinator_rebalance_protocols=("classic", "consumer")) as cluster:
        await cluster.create_topic("t1", partitions=2)
        await cluster.create_topic("t2")
        response = await cluster.controller.create_acls(CreateAclsRequest((
            acl(ResourceType.GROUP, "g", AclOperation.READ),
            acl(ResourceType.TOPIC, "t1", AclOperation.READ))))
        assert all(r.error_code == 0 for r in response.results)
        await cluster.caught_up()
        yield cluster


async def test_heartbeat_needs_read_on_the_group_and_describe_on_its_topics(cluster):
    async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        refused = await admin.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, join("h", "t1"), version=1)
        assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        topics = await admin.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, join("g", "t1", "t2"), version=1)
        assert topics.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and "t2" in topics.error_message
        joined = await admin.coordinator_request("g", ApiKey.CONSUMER_GROUP_HEARTBEAT, join("g", "t1"), version=1)
        assert joined.error_code == ErrorCode.NONE and joined.member_epoch > 0
        assert [sorted(t.partitions) for t in joined.assignment.topic_partitions] == [[0, 1]]

        described = await admin.coordinator_request("g", ApiKey.CONSUMER_GROUP_DESCRIBE, ConsumerGroupDescribeRequest(
            group_ids=["g", "h"], include_authorized_operations=True))
        g, h = described.groups
        assert (g.group_id, g.error_code, len(g.members)) == ("g", ErrorCode.NONE, 1)
        assert g.members[0].assignment.topic_partitions[0].topic_name == "t1"
        assert g.authorized_operations == (1 << int(AclOperation.READ)) | (1 << int(AclOperation.DESCRIBE))
        assert (h.group_id, h.error_code) == ("h", ErrorCode.GROUP_AUTHORIZATION_FAILED)
