"""AlterConfigs (the legacy form older clients send): a resource's dynamic configuration becomes exactly
the entries named, validate_only changes nothing, other resource types are refused, and ALTER_CONFIGS
is checked as for IncrementalAlterConfigs. Against one real broker, at each version."""

from __future__ import annotations

import pytest

from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.broker.client import KafkaConnection
from kraftpy.metadata.messages import AclCreation, CreateAclsRequest
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kraftpy.security.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from tests.helpers.cluster import open_cluster

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8


def alter(resource_type: int, name: str, configs: dict[str, str | None], validate_only: bool = False):
    return AlterConfigsRequest(validate_only=validate_only, resources=[AlterConfigsRequest.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=[AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in configs.items()])])


async def dynamic(conn, resource_type: int, name: str) -> dict[str, str]:
    """The resource's dynamic overrides, as DescribeConfigs reports them."""
    describe = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=None)])
    result = (await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, describe)).results[0]
    assert result.error_code == ErrorCode.NONE, result.error_message
    wanted = {1} if resource_type == TOPIC else {2}  # DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG
    return {c.name: c.value for c in result.configs if c.config_source in wanted}


@pytest.fixture
async def conn(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t", partitions=1)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as c:
            c.cluster = cluster
            yield c


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_alter_configs_replaces_a_topics_dynamic_configuration(conn, version):
    incremental = IncrementalAlterConfigsRequest(validate_only=False, resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=TOPIC, resource_name="t", configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name="cleanup.policy", config_operation=0,
                                                           value="compact")])])
    assert (await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, incremental)).responses[0].error_code == 0
    assert await dynamic(conn, TOPIC, "t") == {"cleanup.policy": "compact"}

    answer = await conn.request(ApiKey.ALTER_CONFIGS, version, alter(TOPIC, "t", {"retention.ms": "1000"}))
    assert [(r.error_code, r.resource_type, r.resource_name) for r in answer.responses] == [(0, TOPIC, "t")]
    # cleanup.policy, not named, is back at its default: the set named is the whole dynamic configuration.
    assert await dynamic(conn, TOPIC, "t") == {"retention.ms": "1000"}
    assert conn.cluster.partition(1, "t").log.config.retention_ms == 1000

    validated = await conn.request(ApiKey.ALTER_CONFIGS, version, alter(TOPIC, "t", {"retention.ms": "5"}, True))
    assert validated.responses[0].error_code == ErrorCode.NONE
    assert await dynamic(conn, TOPIC, "t") == {"retention.ms": "1000"}

    emptied = await conn.request(ApiKey.ALTER_CONFIGS, version, alter(TOPIC, "t", {}))
    assert emptied.responses[0].error_code == ErrorCode.NONE
    assert await dynamic(conn, TOPIC, "t") == {}


async def test_alter_configs_checks_values_and_names_like_incremental_alter_configs(conn):
    bad = await conn.request(ApiKey.ALTER_CONFIGS, 2, alter(TOPIC, "t", {"retention.ms": "soon"}))
    assert bad.responses[0].error_code == ErrorCode.INVALID_CONFIG and "retention.ms" in bad.responses[0].error_message
    missing = await conn.request(ApiKey.ALTER_CONFIGS, 2, alter(TOPIC, "nope", {"retention.ms": "1"}))
    assert missing.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert await dynamic(conn, TOPIC, "t") == {}


async def test_alter_configs_sets_a_brokers_configuration_and_refuses_broker_loggers(conn):
    request = alter(BROKER, "1", {"log.retention.ms": "7200000"})
    request.resources.append(AlterConfigsRequest.AlterConfigsResource(
        resource_type=BROKER_LOGGER, resource_name="1", configs=[]))
    answer = await conn.request(ApiKey.ALTER_CONFIGS, 2, request)
    assert [(r.resource_type, r.error_code) for r in answer.responses] == [
        (BROKER, ErrorCode.NONE), (BROKER_LOGGER, ErrorCode.INVALID_REQUEST)]
    assert (await dynamic(conn, BROKER, "1")).get("log.retention.ms") == "7200000"


async def test_alter_configs_needs_alter_configs_on_each_topic(tmp_path):
    grant = AclCreation(int(ResourceType.TOPIC), "open", int(PatternType.LITERAL), "User:ANONYMOUS", "*",
                        int(AclOperation.ALTER_CONFIGS), int(AclPermissionType.ALLOW))
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        await cluster.create_topic("open")
        await cluster.create_topic("closed")
        assert all(r.error_code == 0 for r in (await cluster.controller.create_acls(CreateAclsRequest((grant,)))).results)
        await cluster.caught_up()
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            request = alter(TOPIC, "open", {"retention.ms": "1000"})
            request.resources += alter(TOPIC, "closed", {"retention.ms": "1000"}).resources
            answer = await conn.request(ApiKey.ALTER_CONFIGS, 2, request)
        assert [(r.resource_name, r.error_code) for r in answer.responses] == [
            ("open", ErrorCode.NONE), ("closed", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
