"""Consumer-group configs (resource type GROUP, KIP-848) and a per-broker override as a topic's value."""

from __future__ import annotations

import pytest

from kraftpy.broker.replica_manager import log_settings_for
from kraftpy.metadata import configs as config_defs
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
from tests.metadata.conftest import CLUSTER_ID, Cluster

TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE


def alter(c, resource_type, name, *ops):
    configs = tuple(AlterableConfig(k, int(op), v) for k, op, v in ops)
    request = IncrementalAlterConfigsRequest((AlterConfigsResource(resource_type, name, configs),), False)
    return c.commit(c.controller.handle_incremental_alter_configs(request)).responses[0]


def describe(c, resource_type, name, broker=None):
    from kraftpy.metadata import config_control

    request = DescribeConfigsRequest((DescribeConfigsResource(resource_type, name, None),))
    result = config_control.describe_configs(c.image, request, c.config, broker).results[0]
    return {e.name: (e.value, e.config_source) for e in result.configs}, result


def test_group_config_set_describe_and_delete():
    c = Cluster()
    entries, result = describe(c, GROUP, "g")
    assert result.error_code == Errors.NONE
    assert entries == {"consumer.heartbeat.interval.ms": ("5000", ConfigSource.DEFAULT_CONFIG),
                       "consumer.session.timeout.ms": ("45000", ConfigSource.DEFAULT_CONFIG)}
    assert alter(c, GROUP, "g", ("consumer.session.timeout.ms", SET, "50000")).error_code == Errors.NONE
    assert c.log[-1] == ConfigRecord(GROUP, "g", "consumer.session.timeout.ms", "50000")
    assert describe(c, GROUP, "g")[0]["consumer.session.timeout.ms"] == ("50000", ConfigSource.GROUP_CONFIG)
    assert describe(c, GROUP, "other")[0]["consumer.session.timeout.ms"][0] == "45000"
    assert alter(c, GROUP, "g", ("consumer.session.timeout.ms", DELETE, None)).error_code == Errors.NONE
    assert describe(c, GROUP, "g")[0]["consumer.session.timeout.ms"] == ("45000", ConfigSource.DEFAULT_CONFIG)


def test_group_config_outside_the_broker_bounds_is_refused():
    c = Cluster()
    before = len(c.log)
    result = alter(c, GROUP, "g", ("consumer.session.timeout.ms", SET, "70000"))
    assert result.error_code == Errors.INVALID_CONFIG
    assert "group.consumer.max.session.timeout.ms=60000" in result.error_message
    result = alter(c, GROUP, "g", ("consumer.heartbeat.interval.ms", SET, "100"))
    assert result.error_code == Errors.INVALID_CONFIG
    assert "group.consumer.min.heartbeat.interval.ms=5000" in result.error_message
    assert alter(c, GROUP, "g", ("consumer.heartbeat.interval.ms", SET, "x")).error_code == Errors.INVALID_CONFIG
    assert alter(c, GROUP, "g", ("session.timeout.ms", SET, "1")).error_code == Errors.INVALID_CONFIG
    assert alter(c, GROUP, "", ("consumer.session.timeout.ms", SET, "50000")).error_code == Errors.INVALID_REQUEST
    assert len(c.log) == before


def test_group_heartbeat_must_stay_below_the_session_timeout():
    static = {"group.consumer.min.session.timeout.ms": "6000", "group.consumer.max.heartbeat.interval.ms": "60000",
              "group.consumer.session.timeout.ms": "10000"}
    c = Cluster(ControllerConfig(cluster_id=CLUSTER_ID, static_broker_configs=static))
    assert describe(c, GROUP, "g")[0]["consumer.session.timeout.ms"] == ("10000", ConfigSource.STATIC_BROKER_CONFIG)
    result = alter(c, GROUP, "g", ("consumer.heartbeat.interval.ms", SET, "10000"))
    assert result.error_code == Errors.INVALID_CONFIG
    assert "must be less than consumer.session.timeout.ms=10000" in result.error_message
    # Both at once: judged on the values the request leaves.
    assert alter(c, GROUP, "g", ("consumer.heartbeat.interval.ms", SET, "10000"),
                 ("consumer.session.timeout.ms", SET, "30000")).error_code == Errors.NONE


def test_a_per_broker_override_is_the_topic_value_on_that_broker_only(cluster3):
    c = cluster3
    c.create_topic("t", 1, 1)
    assert alter(c, BROKER, "", ("log.retention.ms", SET, "1000")).error_code == Errors.NONE
    assert alter(c, BROKER, "2", ("log.retention.ms", SET, "2000")).error_code == Errors.NONE
    assert describe(c, TOPIC, "t", broker=2)[0]["retention.ms"] == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert describe(c, TOPIC, "t", broker=1)[0]["retention.ms"] == (
        "1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert log_settings_for(c.image, {}, "t", broker=2).config.retention_ms == 2000
    assert log_settings_for(c.image, {}, "t", broker=1).config.retention_ms == 1000
    alter(c, TOPIC, "t", ("retention.ms", SET, "3000"))
    assert log_settings_for(c.image, {}, "t", broker=2).config.retention_ms == 3000
    assert config_defs.effective_topic_config(c.image, {}, "t", "retention.ms", 2) == (
        "3000", ConfigSource.TOPIC_CONFIG)


def test_preallocate_is_the_topics_value_or_the_brokers_log_preallocate(cluster3):
    from kraftpy.config import ConfigError, load_config

    c = cluster3
    c.create_topic("t", 1, 1)
    assert log_settings_for(c.image, {}, "t").config.preallocate is False  # Kafka's default
    properties = ("process.roles=broker\nnode.id=4\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
                  "listeners=PLAINTEXT://127.0.0.1:9092\ncontroller.listener.names=CONTROLLER\n"
                  "log.dirs=/tmp/a\nlog.preallocate=true\n")
    static = config_defs.static_broker_configs(load_config(text=properties))
    assert static["log.preallocate"] == "true"
    assert log_settings_for(c.image, static, "t").config.preallocate is True
    assert alter(c, TOPIC, "t", ("preallocate", SET, "false")).error_code == Errors.NONE
    assert log_settings_for(c.image, static, "t").config.preallocate is False
    with pytest.raises(ConfigError) as refused:
        load_config(text=properties.replace("log.preallocate=true", "log.preallocate=maybe"))
    assert "log.preallocate" in str(refused.value) and "maybe" in str(refused.value)
