"""The authorizer on a broker: real clients (confluent-kafka, kafka-python) and `kraftpy acls` against a
broker with authorizer.class.name set, its ACLs written through the controller.

Every client here connects over PLAINTEXT, so its principal is User:ANONYMOUS; the ACLs are granted to
that principal (or withheld from it). The cluster-level ACLs the tool needs (ALTER and DESCRIBE on the
cluster) are written through the in-process controller first, the way any CreateAcls ends.
"""

from __future__ import annotations

import json

import pytest
import trio

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.metadata.messages import AclCreation, CreateAclsRequest
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import CreateTopicsRequest, MetadataRequest
from kraftpy.security.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.helpers import forkserver
from tests.helpers.cluster import open_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

ANONYMOUS = "User:ANONYMOUS"
QUIET = {"log_level": 0}


def acl(rtype: ResourceType, name: str, op: AclOperation, *, principal: str = ANONYMOUS,
        pattern: PatternType = PatternType.LITERAL, permission: AclPermissionType = AclPermissionType.ALLOW,
        host: str = "*") -> AclCreation:
    return AclCreation(int(rtype), name, int(pattern), principal, host, int(op), int(permission))


async def grant(cluster, *creations: AclCreation) -> None:
    response = await cluster.controller.create_acls(CreateAclsRequest(creations))
    assert all(r.error_code == 0 for r in response.results), response
    await cluster.caught_up()


async def kraftpy_acls(cluster, *args: str) -> tuple[int, str, str]:
    result = await forkserver.run_async(["acls", *args, "--bootstrap-server", cluster.bootstrap])
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.fixture
async def secured(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        await grant(cluster, acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALTER),
                    acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.DESCRIBE))
        yield cluster


def produce_one(bootstrap: str, topic: str):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000, "enable.idempotence": False,
                         **QUIET})
    reports = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(30)
    assert len(reports) == 1
    return reports[0]


def listed_topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient as ConfluentAdmin

    return set(ConfluentAdmin({"bootstrap.servers": bootstrap, **QUIET}).list_topics(timeout=20).topics)


def consume_in_group(bootstrap: str, topic: str, group: str):
    """kafka-python: join ``group``, read the topic's first record (or raise the client's error)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             consumer_timeout_ms=20000, request_timeout_ms=30000)
    try:
        for record in consumer:
            return record.value
        return None
    finally:
        consumer.close()


async def test_without_acls_clients_are_refused_and_see_nothing_then_acls_add_lets_them_in(secured):
    cluster = secured
    await cluster.create_topic("orders")
    # Metadata of all topics hides the topic; named, it is TOPIC_AUTHORIZATION_FAILED.
    assert await trio.to_thread.run_sync(listed_topics, cluster.bootstrap) == set()
    async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        named = await admin.request(ApiKey.METADATA, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="orders")], allow_auto_topic_creation=False))
        assert [(t.name, t.error_code) for t in named.topics] == [("orders", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    error = await trio.to_thread.run_sync(produce_one, cluster.bootstrap, "orders")
    assert error is not None and error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
        await trio.to_thread.run_sync(consume_in_group, cluster.bootstrap, "orders", "readers")

    code, out, err = await kraftpy_acls(cluster, "add", "--allow-principal", ANONYMOUS, "--operation", "Write",
                                        "--operation", "Read", "--topic", "orders", "--json")
    assert code == 0, err
    assert {(e["operation"], e["resource_name"]) for e in json.loads(out)} == {("WRITE", "orders"), ("READ", "orders")}
    code, _, err = await kraftpy_acls(cluster, "add", "--allow-principal", ANONYMOUS, "--operation", "Read",
                                      "--group", "readers")
    assert code == 0, err

    assert await trio.to_thread.run_sync(listed_topics, cluster.bootstrap) == {"orders"}  # READ implies DESCRIBE
    assert await trio.to_thread.run_sync(produce_one, cluster.bootstrap, "orders") is None
    assert await trio.to_thread.run_sync(consume_in_group, cluster.bootstrap, "orders", "readers") == b"v"


async def test_deny_beats_allow_and_prefixed_acls_match_by_prefix(secured):
    cluster = secured
    for name in ("logs-app", "logs-secret", "other"):
        await cluster.create_topic(name)
    await grant(cluster,
                acl(ResourceType.TOPIC, "logs-", AclOperation.WRITE, pattern=PatternType.PREFIXED),
                acl(ResourceType.TOPIC, "logs-secret", AclOperation.WRITE, permission=AclPermissionType.DENY))
    assert await trio.to_thread.run_sync(produce_one, cluster.bootstrap, "logs-app") is None
    denied = await trio.to_thread.run_sync(produce_one, cluster.bootstrap, "logs-secret")
    assert denied is not None and denied.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    # WRITE implies DESCRIBE for the prefixed ones; the DENY of WRITE does not deny DESCRIBE, and
    # "other" has no ACL at all.
    assert await trio.to_thread.run_sync(listed_topics, cluster.bootstrap) == {"logs-app", "logs-secret"}


async def test_create_topics_by_cluster_create_or_topic_create(secured):
    cluster = secured

    async def create(*names: str) -> dict[str, int]:
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            Topic = CreateTopicsRequest.CreatableTopic
            response = await admin.request(ApiKey.CREATE_TOPICS, CreateTopicsRequest(
                topics=[Topic(name=n, num_partitions=1, replication_factor=1) for n in names], timeout_ms=10000))
        return {t.name: t.error_code for t in response.topics}

    assert await create("a1", "b1") == {"a1": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                         "b1": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    await grant(cluster, acl(ResourceType.TOPIC, "a", AclOperation.CREATE, pattern=PatternType.PREFIXED))
    assert await create("a1", "b1") == {"a1": ErrorCode.NONE, "b1": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    await grant(cluster, acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.CREATE))
    assert await create("b1", "c1") == {"b1": ErrorCode.NONE, "c1": ErrorCode.NONE}


async def test_super_users_and_allow_everyone_if_no_acl_found(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER,
                            super_users="User:admin;User:ANONYMOUS") as cluster:
        await cluster.create_topic("t")
        await grant(cluster, acl(ResourceType.TOPIC, "t", AclOperation.WRITE, permission=AclPermissionType.DENY))
        assert await trio.to_thread.run_sync(produce_one, cluster.bootstrap, "t") is None  # a super user
    async with open_cluster(tmp_path / "open", brokers=1, authorizer_class_name=STANDARD_AUTHORIZER,
                            allow_everyone_if_no_acl_found=True) as cluster:
        await cluster.create_topic("free")
        await cluster.create_topic("guarded")
        await grant(cluster, acl(ResourceType.TOPIC, "guarded", AclOperation.READ, principal="User:bob"))
        assert await trio.to_thread.run_sync(produce_one, cluster.bootstrap, "free") is None
        refused = await trio.to_thread.run_sync(produce_one, cluster.bootstrap, "guarded")
        assert refused is not None and refused.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


async def test_acls_cli_add_list_with_filters_and_remove(secured):
    cluster = secured
    code, _, err = await kraftpy_acls(cluster, "add", "--allow-principal", "User:alice", "--allow-principal",
                                      "User:bob", "--operation", "Read", "--topic", "orders", "--group", "g")
    assert code == 0, err
    code, _, err = await kraftpy_acls(cluster, "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9",
                                      "--operation", "Write", "--topic", "pay-", "--resource-pattern-type", "prefixed")
    assert code == 0, err

    async def listed(*args: str) -> set[tuple[str, ...]]:
        code, out, err = await kraftpy_acls(cluster, "list", *args, "--json")
        assert code == 0, err
        return {(a["resource_type"], a["resource_name"], a["pattern_type"], a["principal"], a["host"],
                 a["operation"], a["permission"]) for a in json.loads(out)}

    everything = await listed()
    assert ("TOPIC", "pay-", "PREFIXED", "User:bob", "10.0.0.9", "WRITE", "DENY") in everything
    assert len([a for a in everything if a[0] != "CLUSTER"]) == 5
    assert await listed("--topic", "orders") == {
        ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:bob", "*", "READ", "ALLOW")}
    assert {a[1] for a in await listed("--topic", "pay-now", "--resource-pattern-type", "match")} == {"pay-"}
    assert {(a[0], a[1]) for a in await listed("--principal", "User:bob")} == {
        ("TOPIC", "orders"), ("GROUP", "g"), ("TOPIC", "pay-")}

    code, _, err = await kraftpy_acls(cluster, "remove", "--topic", "orders")
    assert code == 2 and "--force" in err  # not on a terminal: no confirmation without --force
    code, out, err = await kraftpy_acls(cluster, "remove", "--topic", "orders", "--allow-principal", "User:alice",
                                        "--force", "--json")
    assert code == 0, err
    assert [a["principal"] for a in json.loads(out)["removed"]] == ["User:alice"]
    assert await listed("--topic", "orders") == {("TOPIC", "orders", "LITERAL", "User:bob", "*", "READ", "ALLOW")}

    code, _, err = await kraftpy_acls(cluster, "add", "--allow-principal", "alice", "--operation", "Read",
                                      "--topic", "x")
    assert code == 2 and "User:alice" in err


async def test_acl_apis_answer_security_disabled_without_an_authorizer(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        code, _, err = await kraftpy_acls(cluster, "list")
        assert code == 1 and "SECURITY_DISABLED" in err


async def test_metadata_auto_creation_needs_create(secured):
    cluster = secured

    async def ask(name: str) -> int:
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            response = await admin.request(ApiKey.METADATA, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=True))
        return response.topics[0].error_code

    await grant(cluster, acl(ResourceType.TOPIC, "auto-", AclOperation.DESCRIBE, pattern=PatternType.PREFIXED))
    assert await ask("auto-1") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert cluster.image.topics.get_by_name("auto-1") is None
    await grant(cluster, acl(ResourceType.TOPIC, "auto-", AclOperation.CREATE, pattern=PatternType.PREFIXED))
    assert await ask("auto-1") in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    assert cluster.image.topics.get_by_name("auto-1") is not None


async def test_cluster_apis_need_their_cluster_operation(secured):
    """DescribeAcls needs DESCRIBE on the cluster, CreateAcls ALTER; client quotas DESCRIBE_CONFIGS /
    ALTER_CONFIGS; the fixture granted ALTER and DESCRIBE only."""
    from kraftpy.protocol.messages import DescribeClientQuotasRequest, DescribeClusterRequest

    cluster = secured
    async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        quotas = await admin.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, DescribeClientQuotasRequest(components=[],
                                                                                              strict=False))
        assert quotas.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        described = await admin.request(ApiKey.DESCRIBE_CLUSTER, DescribeClusterRequest(
            include_cluster_authorized_operations=False))
        assert described.error_code == ErrorCode.NONE
    await grant(cluster, acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.DESCRIBE_CONFIGS))
    async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
        quotas = await admin.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, DescribeClientQuotasRequest(components=[],
                                                                                              strict=False))
        assert quotas.error_code == ErrorCode.NONE


def produce_kafka_python(bootstrap: str, topic: str) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=20000, request_timeout_ms=20000)
    try:
        return producer.send(topic, b"kp").get(timeout=30).offset
    finally:
        producer.close()


async def test_librdkafka_admin_acls_and_a_kafka_python_producer(secured):
    """confluent-kafka's AdminClient speaks CreateAcls / DescribeAcls / DeleteAcls to the broker; a
    kafka-python producer is refused the topic until its ACL exists."""
    from confluent_kafka.admin import AclBinding as CAclBinding
    from confluent_kafka.admin import AclBindingFilter as CAclBindingFilter
    from confluent_kafka.admin import AclOperation as COp
    from confluent_kafka.admin import AclPermissionType as CPerm
    from confluent_kafka.admin import AdminClient as ConfluentAdmin
    from confluent_kafka.admin import ResourcePatternType as CPattern
    from confluent_kafka.admin import ResourceType as CType

    cluster = secured
    await cluster.create_topic("kp")
    with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
        await trio.to_thread.run_sync(produce_kafka_python, cluster.bootstrap, "kp")

    def admin_calls():
        admin = ConfluentAdmin({"bootstrap.servers": cluster.bootstrap, **QUIET})
        binding = CAclBinding(CType.TOPIC, "kp", CPattern.LITERAL, ANONYMOUS, "*", COp.WRITE, CPerm.ALLOW)
        for future in admin.create_acls([binding]).values():
            future.result(timeout=30)
        described = admin.describe_acls(CAclBindingFilter(CType.TOPIC, None, CPattern.ANY, None, None, COp.ANY,
                                                          CPerm.ANY)).result(timeout=30)
        return admin, binding, described

    admin, binding, described = await trio.to_thread.run_sync(admin_calls)
    assert [(b.name, b.principal, b.operation) for b in described] == [("kp", ANONYMOUS, COp.WRITE)]
    assert await trio.to_thread.run_sync(produce_kafka_python, cluster.bootstrap, "kp") == 0

    def delete():
        everything = CAclBindingFilter(CType.TOPIC, "kp", CPattern.LITERAL, None, None, COp.ANY, CPerm.ANY)
        return [f.result(timeout=30) for f in admin.delete_acls([everything]).values()]

    (deleted,) = await trio.to_thread.run_sync(delete)
    assert [(b.name, b.operation) for b in deleted] == [("kp", COp.WRITE)]
    assert cluster.image.acls.by_id and all(b.resource_type is ResourceType.CLUSTER
                                            for b in cluster.image.acls.by_id.values())
