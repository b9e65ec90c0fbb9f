"""ACL changes on a 3+3 process cluster: an ACL created through one broker is applied by every broker
with the metadata change that carries it (each logs "acls changed"), and each then answers by it.

The cluster runs with authorizer.class.name=StandardAuthorizer and allow.everyone.if.no.acl.found=true:
its brokers and this test's clients are all User:ANONYMOUS (plaintext listeners), and a resource with no
ACL stays open to them (replica fetches included, as the cluster resource has none).
"""

from __future__ import annotations

import time

import pytest
import trio

from kraftpy.admin.client import AdminClient
from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.protocol.errors import ErrorCode
from kraftpy.security.authorizer import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.helpers.deployments import ProcessCluster, create_topics

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402

BOB_READS_SECRET = AclBinding(ResourceType.TOPIC, "secret", PatternType.LITERAL, "User:bob", "*",
                              AclOperation.READ, AclPermissionType.ALLOW)


def on_broker(cluster: ProcessCluster, broker_id: int, work):
    async def main():
        with trio.fail_after(60):
            async with AdminClient([("127.0.0.1", cluster.broker_ports[broker_id])]) as admin:
                return await work(admin)
    return trio.run(main)


def secret_error(cluster: ProcessCluster, broker_id: int) -> int:
    async def work(admin):
        response = await admin.metadata(["secret"])
        return response.topics[0].error_code
    return on_broker(cluster, broker_id, work)


def test_an_acl_made_through_one_broker_is_enforced_by_every_broker(tmp_path):
    settings = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with ProcessCluster(tmp_path, settings, log_level="info") as cluster:
        create_topics(cluster.bootstrap, [NewTopic("secret", 1, 3)], deployment=cluster)
        # The topic reaches each broker with its metadata: open to everybody (no ACL yet) once there.
        deadline = time.monotonic() + 60
        while not all(secret_error(cluster, b) == ErrorCode.NONE for b in cluster.BROKER_IDS):
            if time.monotonic() > deadline:  # a bound on a failure, not a measure of speed
                raise AssertionError("a broker never learned of the topic")
            with cluster.cond:  # asked again after the next log line of any node, or half a second
                cluster.cond.wait(0.5)

        marks = {b: proc.mark() for b, proc in cluster.brokers.items()}
        results = on_broker(cluster, 4, lambda admin: admin.create_acls([BOB_READS_SECRET]))
        assert results == [(ErrorCode.NONE, None)]
        for broker_id, proc in cluster.brokers.items():
            proc.wait_for("acls changed", since=marks[broker_id], added=1)
        # The topic now has an ACL, and none for User:ANONYMOUS: every broker refuses it.
        assert {b: secret_error(cluster, b) for b in cluster.BROKER_IDS} == dict.fromkeys(
            cluster.BROKER_IDS, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        assert on_broker(cluster, 6, lambda admin: admin.describe_acls(AclBindingFilter())) == [BOB_READS_SECRET]

        marks = {b: proc.mark() for b, proc in cluster.brokers.items()}
        deleted = on_broker(cluster, 5, lambda admin: admin.delete_acls([AclBindingFilter(principal="User:bob")]))
        assert deleted == [(ErrorCode.NONE, None, [BOB_READS_SECRET])]
        for broker_id, proc in cluster.brokers.items():
            proc.wait_for("acls changed", since=marks[broker_id], removed=1)
        assert all(secret_error(cluster, b) == ErrorCode.NONE for b in cluster.BROKER_IDS)
