"""Topic and dynamic broker configuration keys: types, defaults, validation, and effective values.

A topic's effective value for a key comes from the first of: the topic's own override (TOPIC_CONFIG),
the cluster-wide dynamic broker default for the key's broker synonym (the BROKER resource named ``""``,
DYNAMIC_DEFAULT_BROKER_CONFIG), the controller's properties file (STATIC_BROKER_CONFIG), and Kafka's
default (DEFAULT_CONFIG). A broker's adds its own per-broker override (DYNAMIC_BROKER_CONFIG) first,
and so does a topic's as a broker runs it: ``log.retention.ms`` set on broker 4 alone is the retention
of every topic without its own ``retention.ms`` on broker 4's replicas.

A consumer group's (the GROUP resource, KIP-848) comes from the group's override (GROUP_CONFIG), the
``group.consumer.*`` key of the properties file (STATIC_BROKER_CONFIG), or Kafka's default, and must lie
within the ``group.consumer.min/max.*`` bounds.

Values are validated as Kafka's ``ConfigDef`` does, with its messages: ``Invalid value X for
configuration K: reason``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from kraftpy.metadata.image import ConfigResource, MetadataImage
from kraftpy.metadata.messages import ConfigSource
from kraftpy.metadata.records import ConfigResourceType

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class ConfigType(enum.Enum):
    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"


Parsed = bool | int | float | str | list[str]


@attrs.frozen
class ConfigKey:
    name: str
    type: ConfigType
    default: str
    #: The broker config that supplies the cluster-wide default.
    broker_synonym: str
    #: Returns why a parsed value is refused, or None.
    check: Callable[[Parsed], str | None] | None = None

    @property
    def is_list(self) -> bool:
        return self.type is ConfigType.LIST


def at_least(minimum: int | float) -> Callable[[Parsed], str | None]:
    def check(value: Parsed) -> str | None:
        return None if value >= minimum else f"Value must be at least {minimum}"  # type: ignore[operator]

    return check


def between(low: float, high: float) -> Callable[[Parsed], str | None]:
    def check(value: Parsed) -> str | None:
        if value < low:  # type: ignore[operator]
            return f"Value must be at least {low}"
        if value > high:  # type: ignore[operator]
            return f"Value must be no more than {high}"
        return None

    return check


def one_of(*allowed: str) -> Callable[[Parsed], str | None]:
    def check(value: Parsed) -> str | None:
        return None if value in allowed else f"String must be one of: {', '.join(allowed)}"

    return check


def list_of(*allowed: str) -> Callable[[Parsed], str | None]:
    def check(value: Parsed) -> str | None:
        assert isinstance(value, list)
        if not value:
            return "List must not be empty"
        for item in value:
            if item not in allowed:
                return f"Invalid value {item} for configuration: String must be one of: {', '.join(allowed)}"
        return None

    return check


def throttled_replicas(value: Parsed) -> str | None:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` entries."""
    items = value if isinstance(value, list) else [str(value)]
    if items == ["*"]:
        return None
    for item in items:
        partition, sep, broker = item.partition(":")
        if not (sep and partition.strip().isdigit() and broker.strip().isdigit()):
            return "must be the literal '*' or a list of replicas in the format [PartitionId]:[BrokerId],..."
    return None


def _key(name: str, type_: ConfigType, default: str, synonym: str, check: Callable[[Parsed], str | None] | None = None) -> ConfigKey:
    return ConfigKey(name, type_, default, synonym, check)


_T = ConfigType
TOPIC_CONFIGS: Mapping[str, ConfigKey] = {
    k.name: k
    for k in [
        _key("cleanup.policy", _T.LIST, "delete", "log.cleanup.policy", list_of("compact", "delete")),
        _key("compression.type", _T.STRING, "producer", "compression.type",
             one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        _key("delete.retention.ms", _T.LONG, "86400000", "log.cleaner.delete.retention.ms", at_least(0)),
        _key("file.delete.delay.ms", _T.LONG, "60000", "log.segment.delete.delay.ms", at_least(0)),
        _key("flush.messages", _T.LONG, str(LONG_MAX), "log.flush.interval.messages", at_least(1)),
        _key("flush.ms", _T.LONG, str(LONG_MAX), "log.flush.interval.ms", at_least(0)),
        _key("index.interval.bytes", _T.INT, "4096", "log.index.interval.bytes", at_least(0)),
        _key("max.compaction.lag.ms", _T.LONG, str(LONG_MAX), "log.cleaner.max.compaction.lag.ms", at_least(1)),
        _key("max.message.bytes", _T.INT, "1048588", "message.max.bytes", at_least(0)),
        _key("message.timestamp.after.max.ms", _T.LONG, "3600000", "log.message.timestamp.after.max.ms",
             at_least(0)),
        _key("message.timestamp.before.max.ms", _T.LONG, str(LONG_MAX), "log.message.timestamp.before.max.ms",
             at_least(0)),
        _key("message.timestamp.type", _T.STRING, "CreateTime", "log.message.timestamp.type",
             one_of("CreateTime", "LogAppendTime")),
        _key("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", "log.cleaner.min.cleanable.ratio", between(0.0, 1.0)),
        _key("min.compaction.lag.ms", _T.LONG, "0", "log.cleaner.min.compaction.lag.ms", at_least(0)),
        _key("min.insync.replicas", _T.INT, "1", "min.insync.replicas", at_least(1)),
        _key("preallocate", _T.BOOLEAN, "false", "log.preallocate"),
        _key("retention.bytes", _T.LONG, "-1", "log.retention.bytes"),
        _key("retention.ms", _T.LONG, "604800000", "log.retention.ms", at_least(-1)),
        # 14 bytes is the smallest record Kafka has ever had (a v0 record's overhead).
        _key("segment.bytes", _T.INT, "1073741824", "log.segment.bytes", at_least(14)),
        _key("segment.index.bytes", _T.INT, "10485760", "log.index.size.max.bytes", at_least(4)),
        _key("segment.jitter.ms", _T.LONG, "0", "log.roll.jitter.ms", at_least(0)),
        _key("segment.ms", _T.LONG, "604800000", "log.roll.ms", at_least(1)),
        _key("unclean.leader.election.enable", _T.BOOLEAN, "false", "unclean.leader.election.enable"),
        # Replication throttles (Kafka's QuotaConfigs): no broker-level default.
        _key("leader.replication.throttled.replicas", _T.LIST, "", "", throttled_replicas),
        _key("follower.replication.throttled.replicas", _T.LIST, "", "", throttled_replicas),
    ]
}

#: Broker configs that can be changed at run time (per broker, or for all brokers with the name "").
BROKER_CONFIGS: Mapping[str, ConfigKey] = {
    **{k.broker_synonym: attrs.evolve(k, name=k.broker_synonym) for k in TOPIC_CONFIGS.values() if k.broker_synonym},
    # The replication throttles' rates, in bytes per second (Kafka's QuotaConfigs), broker keys only.
    **{k.name: k for k in [
        _key("leader.replication.throttled.rate", _T.LONG, str(LONG_MAX), "", at_least(0)),
        _key("follower.replication.throttled.rate", _T.LONG, str(LONG_MAX), "", at_least(0)),
    ]},
}

_TOPIC_BY_SYNONYM = {k.broker_synonym: k for k in TOPIC_CONFIGS.values()}

#: A consumer group's dynamic configs (ConfigResource type GROUP, Kafka 3.8+), each defaulting to the
#: broker key named as its synonym. They apply to groups using the consumer protocol (KIP-848); a
#: classic-protocol member's timeouts are the ones its client sends, as in Kafka.
GROUP_CONFIGS: Mapping[str, ConfigKey] = {
    k.name: k
    for k in [
        _key("consumer.heartbeat.interval.ms", _T.INT, "5000", "group.consumer.heartbeat.interval.ms", at_least(1)),
        _key("consumer.session.timeout.ms", _T.INT, "45000", "group.consumer.session.timeout.ms", at_least(1)),
    ]
}

#: The broker keys bounding each group config (lowest, highest), with Kafka's defaults.
GROUP_CONFIG_BOUNDS: Mapping[str, tuple[tuple[str, int], tuple[str, int]]] = {
    "consumer.heartbeat.interval.ms": (("group.consumer.min.heartbeat.interval.ms", 5000),
                                       ("group.consumer.max.heartbeat.interval.ms", 15000)),
    "consumer.session.timeout.ms": (("group.consumer.min.session.timeout.ms", 45000),
                                    ("group.consumer.max.session.timeout.ms", 60000)),
}

#: Broker keys of the properties file that group configs read (their defaults and bounds).
GROUP_BROKER_KEYS = (
    *(k.broker_synonym for k in GROUP_CONFIGS.values()),
    *(name for bounds in GROUP_CONFIG_BOUNDS.values() for name, _ in bounds),
)


def parse(key: ConfigKey, value: str) -> Parsed:
    """The typed value of ``value`` for ``key``; raises ``ValueError`` with Kafka's wording."""
    text = value.strip()
    kind = key.type
    if kind is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return text.lower() == "true"
    if kind in (ConfigType.INT, ConfigType.LONG):
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"Not a number of type {kind.value.upper()}") from None
        low, high = (INT_MIN, INT_MAX) if kind is ConfigType.INT else (LONG_MIN, LONG_MAX)
        if not low <= number <= high:
            raise ValueError(f"Not a number of type {kind.value.upper()}")
        return number
    if kind is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
    if kind is ConfigType.LIST:
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def validate(key: ConfigKey, value: str) -> str | None:
    """None if ``value`` is acceptable for ``key``, else Kafka's message saying why not."""
    try:
        parsed = parse(key, value)
    except ValueError as exc:
        return f"Invalid value {value} for configuration {key.name}: {exc}"
    if key.check is not None:
        reason = key.check(parsed)
        if reason is not None:
            return f"Invalid value {value} for configuration {key.name}: {reason}"
    return None


CLUSTER_DEFAULT = ConfigResource.broker("")


def effective_topic_config(
    image: MetadataImage, static_broker_configs: Mapping[str, str], topic: str, name: str,
    broker: int | str | None = None,
) -> tuple[str, ConfigSource]:
    """The value a topic has for ``name`` (a key of TOPIC_CONFIGS) and where it comes from; on broker
    ``broker`` (an id) when given, whose own dynamic override of the key's synonym then counts."""
    key = TOPIC_CONFIGS[name]
    override = image.configs.config(ConfigResource.topic(topic)).get(name)
    if override is not None:
        return override, ConfigSource.TOPIC_CONFIG
    if not key.broker_synonym:
        return key.default, ConfigSource.DEFAULT_CONFIG
    return _broker_level_value(image, static_broker_configs, None if broker is None else str(broker),
                               key.broker_synonym)


def effective_group_config(
    image: MetadataImage, static_broker_configs: Mapping[str, str], group: str, name: str
) -> tuple[str, ConfigSource]:
    """The value group ``group`` has for ``name`` (a key of GROUP_CONFIGS) and where it comes from."""
    key = GROUP_CONFIGS[name]
    override = image.configs.config(ConfigResource(ConfigResourceType.GROUP, group)).get(name)
    if override is not None:
        return override, ConfigSource.GROUP_CONFIG
    value = static_broker_configs.get(key.broker_synonym)
    if value is not None:
        return value, ConfigSource.STATIC_BROKER_CONFIG
    return key.default, ConfigSource.DEFAULT_CONFIG


def group_config_problem(values: Mapping[str, str], static_broker_configs: Mapping[str, str]) -> str | None:
    """Why a group's effective configs ``values`` (every key of GROUP_CONFIGS) are refused, or None:
    each within its broker bounds, and the heartbeat interval below the session timeout (Kafka's
    ``GroupConfig.validateValues``)."""
    parsed: dict[str, int] = {}
    for name, key in GROUP_CONFIGS.items():
        reason = validate(key, values[name])
        if reason is not None:
            return reason
        number = parse(key, values[name])
        assert isinstance(number, int)
        parsed[name] = number
        (low_key, low_default), (high_key, high_default) = GROUP_CONFIG_BOUNDS[name]
        low = int(static_broker_configs.get(low_key, low_default))
        high = int(static_broker_configs.get(high_key, high_default))
        if number < low:
            return f"Invalid value {values[name]} for configuration {name}: must be at least {low_key}={low}"
        if number > high:
            return f"Invalid value {values[name]} for configuration {name}: must be at most {high_key}={high}"
    heartbeat, session = parsed["consumer.heartbeat.interval.ms"], parsed["consumer.session.timeout.ms"]
    if heartbeat >= session:
        return (f"consumer.heartbeat.interval.ms={heartbeat} must be less than "
                f"consumer.session.timeout.ms={session}")
    return None


def effective_broker_config(
    image: MetadataImage, static_broker_configs: Mapping[str, str], broker: str, name: str
) -> tuple[str, ConfigSource]:
    """The value broker ``broker`` (an id, or ``""`` for the cluster default) has for a BROKER_CONFIGS key."""
    return _broker_level_value(image, static_broker_configs, broker or None, name)


def _broker_level_value(
    image: MetadataImage, static_broker_configs: Mapping[str, str], broker: str | None, name: str
) -> tuple[str, ConfigSource]:
    if broker is not None:
        value = image.configs.config(ConfigResource.broker(broker)).get(name)
        if value is not None:
            return value, ConfigSource.DYNAMIC_BROKER_CONFIG
    value = image.configs.config(CLUSTER_DEFAULT).get(name)
    if value is not None:
        return value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    value = static_broker_configs.get(name)
    if value is not None:
        return value, ConfigSource.STATIC_BROKER_CONFIG
    return BROKER_CONFIGS[name].default, ConfigSource.DEFAULT_CONFIG


def static_broker_configs(config: Any) -> dict[str, str]:
    """The broker-level defaults of topic and group configs a node's properties file sets
    (STATIC_BROKER_CONFIG), by broker key name, as written in the file: every key of BROKER_CONFIGS and
    GROUP_BROKER_KEYS it sets, and ``log.retention.ms`` / ``log.roll.ms`` when only their hours or
    minutes forms are set.

    The one derivation for controllers (the defaults topics they create inherit, and what
    DescribeConfigs reports) and brokers (the configs their logs run with), so the two never disagree.
    ``config`` is a validated ``kraftpy.config.KraftConfig``."""
    out: dict[str, str] = {}
    for name in BROKER_CONFIGS:
        if name in config.raw:
            out[name] = config.raw[name].strip()
    if "log.retention.ms" not in out and (config.is_set("log.retention.hours") or config.is_set("log.retention.minutes")):
        out["log.retention.ms"] = str(config.log_retention_ms)
    if "log.roll.ms" not in out and config.is_set("log.roll.hours"):
        out["log.roll.ms"] = str(config.log_roll_ms)
    for name in GROUP_BROKER_KEYS:
        if name in config.raw:
            out[name] = config.raw[name].strip()
    return out


def topic_config_bool(image: MetadataImage, static_broker_configs: Mapping[str, str], topic: str, name: str) -> bool:
    value, _ = effective_topic_config(image, static_broker_configs, topic, name)
    return value.strip().lower() == "true"
