"""`kraftpy configs describe | alter` against a real `kraftpy dev`: topics, brokers (one broker and the
cluster default) and consumer groups, Kafka's error codes, and a dynamic broker config that the broker
runs with at once (no restart).
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from kraftpy.cli.configs import parse_add_config
from tests.helpers import forkserver
from tests.helpers.deployments import DevDeployment

ck = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevDeployment(tmp_path_factory.mktemp("configs") / "dev") as deployment:
        yield deployment


def name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kraftpy(dev, *args: object) -> subprocess.CompletedProcess:
    return forkserver.run([*(str(a) for a in args), "--bootstrap-server",
                           dev.bootstrap], capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def configs(dev, *args: object) -> subprocess.CompletedProcess:
    return kraftpy(dev, "configs", *args)


def described(dev, entity_type: str, *args: object) -> dict[str, tuple[str, str]]:
    """--json describe of one entity: name -> (value, source)."""
    result = configs(dev, "describe", "--entity-type", entity_type, *args, "--json")
    assert result.returncode == 0, result.stderr
    return {c["name"]: (c["value"], c["source"]) for c in json.loads(result.stdout)["configs"]}


def test_topic_configs(dev):
    topic = name()
    assert kraftpy(dev, "topics", "create", "--topic", topic, "--config", "retention.ms=60000").returncode == 0
    assert described(dev, "topics", "--entity-name", topic) == {"retention.ms": ("60000", "DYNAMIC_TOPIC_CONFIG")}

    result = configs(dev, "alter", "--entity-type", "topics", "--entity-name", topic,
                     "--add-config", "cleanup.policy=[compact,delete],segment.ms=3600000",
                     "--delete-config", "retention.ms")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"Completed updating config for topic {topic}."
    every = described(dev, "topics", "--entity-name", topic, "--all")
    assert every["cleanup.policy"] == ("compact,delete", "DYNAMIC_TOPIC_CONFIG")
    assert every["segment.ms"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert every["retention.ms"] == ("604800000", "DEFAULT_CONFIG")
    assert every["min.insync.replicas"] == ("1", "STATIC_BROKER_CONFIG")

    # Piped: a title line, then a tab-separated header and rows.
    lines = configs(dev, "describe", "--entity-type", "topics", "--entity-name", topic).stdout.splitlines()
    assert lines[0] == f"# Dynamic configs for topic {topic}"
    assert lines[1].split("\t") == ["Name", "Value", "Source", "Sensitive", "ReadOnly"]
    assert sorted(line.split("\t")[0] for line in lines[2:]) == ["cleanup.policy", "segment.ms"]

    dry = configs(dev, "alter", "--entity-type", "topics", "--entity-name", topic, "--add-config",
                  "segment.ms=1000", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert described(dev, "topics", "--entity-name", topic)["segment.ms"][0] == "3600000"


def test_errors_name_kafkas_code_and_the_key(dev):
    topic = name()
    assert kraftpy(dev, "topics", "create", "--topic", topic).returncode == 0
    bad = configs(dev, "alter", "--entity-type", "topics", "--entity-name", topic, "--add-config",
                  "retention.ms=soon,segment.ms=1000")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (f"kraftpy: topic {topic}: INVALID_CONFIG: Invalid value soon for configuration "
                                  "retention.ms: Not a number of type LONG")
    assert described(dev, "topics", "--entity-name", topic) == {}  # all or nothing

    unknown = configs(dev, "alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", "colour=red")
    assert unknown.returncode == 1 and "INVALID_CONFIG" in unknown.stderr and "colour" in unknown.stderr
    # A broker key only the properties file sets is named as such, not as unknown.
    static = configs(dev, "alter", "--entity-type", "brokers", "--entity-name", 1, "--add-config", "log.dirs=/x")
    assert static.returncode == 1
    assert static.stderr == "kraftpy: broker 1: INVALID_CONFIG: Cannot update these configs dynamically: log.dirs\n"
    made_up = configs(dev, "alter", "--entity-type", "brokers", "--entity-default", "--add-config", "colour=red")
    assert made_up.returncode == 1
    assert made_up.stderr == "kraftpy: default broker: INVALID_CONFIG: Unknown broker config name: colour\n"

    missing = name("missing")
    for result in (configs(dev, "describe", "--entity-type", "topics", "--entity-name", missing),
                   configs(dev, "alter", "--entity-type", "topics", "--entity-name", missing,
                           "--add-config", "retention.ms=1")):
        assert result.returncode == 1
        assert f"topic {missing}: UNKNOWN_TOPIC_OR_PARTITION" in result.stderr

    for args in (["alter", "--entity-type", "topics", "--entity-name", topic],
                 ["alter", "--entity-type", "topics", "--entity-default", "--add-config", "a=1"],
                 ["alter", "--entity-type", "brokers", "--entity-name", "one", "--add-config", "a=1"],
                 ["alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", "a=[1"],
                 ["alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", "a=1",
                  "--delete-config", "a"],
                 ["describe", "--entity-type", "groups"],
                 ["describe", "--entity-type", "clients", "--entity-name", "app", "--entity-default"]):
        result = configs(dev, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_dynamic_broker_configs_take_effect_without_a_restart(dev):
    topic = name()
    assert kraftpy(dev, "topics", "create", "--topic", topic).returncode == 0
    producer = ck.Producer({"bootstrap.servers": dev.bootstrap, "log_level": 0, "linger.ms": 0,
                            "message.send.max.retries": 0})

    def produce(size: int) -> object:
        outcome: list[object] = []
        producer.produce(topic, b"x" * size, on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(30)
        return outcome[0]

    assert produce(4000) is None
    try:
        # The cluster default, then broker 1's own value, which wins on broker 1.
        assert configs(dev, "alter", "--entity-type", "brokers", "--entity-default",
                       "--add-config", "log.retention.ms=3600000").returncode == 0
        assert configs(dev, "alter", "--entity-type", "brokers", "--entity-name", 1,
                       "--add-config", "message.max.bytes=1000").returncode == 0
        assert described(dev, "brokers", "--entity-default") == {
            "log.retention.ms": ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
        assert described(dev, "brokers", "--entity-name", 1) == {
            "message.max.bytes": ("1000", "DYNAMIC_BROKER_CONFIG")}
        every = described(dev, "topics", "--entity-name", topic, "--all")
        assert every["retention.ms"] == ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        assert every["max.message.bytes"] == ("1000", "DYNAMIC_BROKER_CONFIG")

        error = produce(4000)
        assert error is not None and error.code() == ck.KafkaError.MSG_SIZE_TOO_LARGE
        assert produce(100) is None
    finally:
        assert configs(dev, "alter", "--entity-type", "brokers", "--entity-name", 1,
                       "--delete-config", "message.max.bytes").returncode == 0
        assert configs(dev, "alter", "--entity-type", "brokers", "--entity-default",
                       "--delete-config", "log.retention.ms").returncode == 0
    assert produce(4000) is None
    assert described(dev, "topics", "--entity-name", topic, "--all")["retention.ms"] == ("604800000",
                                                                                        "DEFAULT_CONFIG")


def test_group_configs(dev):
    group = name("g")
    assert described(dev, "groups", "--entity-name", group, "--all") == {
        "consumer.heartbeat.interval.ms": ("5000", "DEFAULT_CONFIG"),
        "consumer.session.timeout.ms": ("45000", "DEFAULT_CONFIG")}
    result = configs(dev, "alter", "--entity-type", "groups", "--entity-name", group,
                     "--add-config", "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")
    assert result.returncode == 0, result.stderr
    assert described(dev, "groups", "--entity-name", group) == {
        "consumer.heartbeat.interval.ms": ("6000", "DYNAMIC_GROUP_CONFIG"),
        "consumer.session.timeout.ms": ("50000", "DYNAMIC_GROUP_CONFIG")}
    bad = configs(dev, "alter", "--entity-type", "groups", "--entity-name", group,
                  "--add-config", "consumer.session.timeout.ms=1000")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        f"kraftpy: group {group}: INVALID_CONFIG: Invalid value 1000 for configuration consumer.session.timeout.ms: "
        "must be at least group.consumer.min.session.timeout.ms=45000")
    assert configs(dev, "alter", "--entity-type", "groups", "--entity-name", group,
                   "--delete-config", "consumer.session.timeout.ms").returncode == 0
    assert described(dev, "groups", "--entity-name", group) == {
        "consumer.heartbeat.interval.ms": ("6000", "DYNAMIC_GROUP_CONFIG")}


def test_parse_add_config():
    assert parse_add_config("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    assert parse_add_config("cleanup.policy=[compact]") == {"cleanup.policy": "compact"}
