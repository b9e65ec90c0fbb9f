"""DescribeConfigs and IncrementalAlterConfigs for topics and brokers."""

from __future__ import annotations

import pytest

from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigSource,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.records import ConfigRecord

TOPIC, BROKER = 2, 4


def alter(c, resource_type, name, *ops, validate_only=False):
    configs = tuple(AlterableConfig(k, int(op), v) for k, op, v in ops)
    request = IncrementalAlterConfigsRequest((AlterConfigsResource(resource_type, name, configs),), validate_only)
    response = c.commit(c.controller.handle_incremental_alter_configs(request))
    return response.responses[0]


def describe(c, resource_type, name, keys=None):
    return c.controller.describe_configs(
        DescribeConfigsRequest((DescribeConfigsResource(resource_type, name, keys),))
    ).results[0]


@pytest.fixture
def c(cluster3):
    cluster3.create_topic("t", 1, 1)
    return cluster3


def test_set_and_delete_topic_config(c):
    assert alter(c, TOPIC, "t", ("retention.ms", AlterConfigOp.SET, "1000")).error_code == Errors.NONE
    assert c.log[-1] == ConfigRecord(TOPIC, "t", "retention.ms", "1000")
    assert describe(c, TOPIC, "t", ("retention.ms",)).entry("retention.ms").value == "1000"
    assert alter(c, TOPIC, "t", ("retention.ms", AlterConfigOp.DELETE, None)).error_code == Errors.NONE
    assert c.log[-1] == ConfigRecord(TOPIC, "t", "retention.ms", None)
    assert describe(c, TOPIC, "t").value("retention.ms") == "604800000"


def test_append_and_subtract_list_config(c):
    alter(c, TOPIC, "t", ("cleanup.policy", AlterConfigOp.APPEND, "compact"))
    assert describe(c, TOPIC, "t").value("cleanup.policy") == "delete,compact"
    alter(c, TOPIC, "t", ("cleanup.policy", AlterConfigOp.SUBTRACT, "delete"))
    assert describe(c, TOPIC, "t").value("cleanup.policy") == "compact"


def test_subtracting_the_last_cleanup_policy_is_refused(c):
    result = alter(c, TOPIC, "t", ("cleanup.policy", AlterConfigOp.SUBTRACT, "delete"))
    assert result.error_code == Errors.INVALID_CONFIG


def test_append_to_a_non_list_config_is_refused(c):
    result = alter(c, TOPIC, "t", ("retention.ms", AlterConfigOp.APPEND, "5"))
    assert result.error_code == Errors.INVALID_CONFIG and "not LIST" in result.error_message


@pytest.mark.parametrize(
    ("ops", "error"),
    [
        ((("retention.ms", AlterConfigOp.SET, "-7"),), Errors.INVALID_CONFIG),
        ((("no.such.key", AlterConfigOp.SET, "1"),), Errors.INVALID_CONFIG),
        ((("retention.ms", AlterConfigOp.SET, None),), Errors.INVALID_CONFIG),
        ((("retention.ms", 9, "1"),), Errors.INVALID_REQUEST),
        ((("retention.ms", AlterConfigOp.SET, "1"), ("retention.ms", AlterConfigOp.DELETE, None)),
         Errors.INVALID_REQUEST),
    ],
)
def test_invalid_alteration_changes_nothing(c, ops, error):
    start = c.next_offset
    ops = (("segment.bytes", AlterConfigOp.SET, "1024"), *ops)
    assert alter(c, TOPIC, "t", *ops).error_code == error
    assert c.next_offset == start


def test_altering_an_unknown_topic_is_refused(c):
    assert alter(c, TOPIC, "nope", ("retention.ms", 0, "1")).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_altering_an_unsupported_resource_type_is_refused(c):
    assert alter(c, 8, "x", ("retention.ms", 0, "1")).error_code == Errors.INVALID_REQUEST


def test_broker_resource_must_be_an_id_or_the_default(c):
    assert alter(c, BROKER, "one", ("log.retention.ms", 0, "1")).error_code == Errors.INVALID_REQUEST
    assert alter(c, BROKER, "1", ("log.retention.ms", 0, "1")).error_code == Errors.NONE


def test_validate_only_alteration_writes_nothing(c):
    start = c.next_offset
    assert alter(c, TOPIC, "t", ("retention.ms", 0, "1"), validate_only=True).error_code == Errors.NONE
    assert c.next_offset == start


def test_describe_topic_reports_value_sources(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
                                      static_broker_configs={"log.segment.bytes": "2048"}))
    c.add_broker(1)
    c.create_topic("t", 1, 1, configs={"retention.ms": "10"})
    alter(c, BROKER, "", ("log.retention.bytes", 0, "99"))
    result = describe(c, TOPIC, "t")
    assert result.error_code == Errors.NONE
    assert result.entry("retention.ms").config_source is ConfigSource.TOPIC_CONFIG
    assert (result.value("retention.bytes"), result.entry("retention.bytes").config_source) == (
        "99", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert (result.value("segment.bytes"), result.entry("segment.bytes").config_source) == (
        "2048", ConfigSource.STATIC_BROKER_CONFIG)
    assert result.entry("min.insync.replicas").config_source is ConfigSource.DEFAULT_CONFIG


def test_describe_broker_and_cluster_default(c):
    alter(c, BROKER, "", ("log.retention.ms", 0, "5"))
    alter(c, BROKER, "2", ("log.retention.ms", 0, "6"))
    default = describe(c, BROKER, "")
    assert [e.name for e in default.configs] == ["log.retention.ms"]
    assert describe(c, BROKER, "2", ("log.retention.ms",)).entry("log.retention.ms").config_source is (
        ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert describe(c, BROKER, "1").value("log.retention.ms") == "5"


def test_describe_unknown_topic(c):
    assert describe(c, TOPIC, "nope").error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
