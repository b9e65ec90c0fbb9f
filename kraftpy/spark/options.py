"""Options of the ``kraftpy`` Spark data source, parsed and checked before anything runs.

The option names and their meaning follow Spark's built-in Kafka source and sink, so that a job
moves over by changing the format name. Spark hands options over case-insensitively; they are
looked up here by their lower-cased names. Every error names the option and the value at fault.

Options prefixed ``kafka.`` go to the client (librdkafka, through confluent-kafka) with the
prefix removed; the few that would break the connector's own bookkeeping are refused.

This module is pure: no Spark, no client, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TopicPartition = tuple[str, int]

#: ListOffsets' sentinel offsets in Spark's JSON offsets: -2 is earliest, -1 is latest.
EARLIEST = -2
LATEST = -1

BOOTSTRAP = "kafka.bootstrap.servers"

# kafka.* keys that the connector sets itself, with the reason given to the user.
_REFUSED_CONSUMER = {
    "group.id": None,  # allowed, see below
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "the connector never commits offsets; progress lives in Spark's checkpoint",
    "key.deserializer": "keys are always read as binary; cast the key column in the query",
    "value.deserializer": "values are always read as binary; cast the value column in the query",
    "interceptor.classes": "interceptors are not supported",
    "enable.partition.eof": "the connector uses partition EOF events to know where a range ends",
    "isolation.level": "only read_uncommitted is supported",
}
_REFUSED_PRODUCER = {
    "key.serializer": "keys are written as binary; give a binary or string key column",
    "value.serializer": "values are written as binary; give a binary or string value column",
    "interceptor.classes": "interceptors are not supported",
    "transactional.id": "the sink writes at-least-once without transactions",
}

_SUBSCRIPTIONS = ("assign", "subscribe", "subscribepattern")
_STRATEGIES = ("error", "latest")

# Options that exist in Spark's Kafka source but make no sense for this source (or for batch or
# streaming only); naming them is better than silently ignoring them.
_STREAM_ONLY = ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")
_BATCH_ONLY = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
_SPARK_NAMES = {
    "startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp", "endingtimestamp": "endingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "subscribepattern": "subscribePattern", "failondataloss": "failOnDataLoss",
    "includeheaders": "includeHeaders", "minpartitions": "minPartitions",
    "maxrecordsperpartition": "maxRecordsPerPartition", "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "minoffsetspertrigger": "minOffsetsPerTrigger", "maxtriggerdelay": "maxTriggerDelay",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
    "fetchoffset.numretries": "fetchOffset.numRetries",
    "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
    "groupidprefix": "groupIdPrefix",
}


class OptionError(ValueError):
    """An option of the kraftpy data source is missing, malformed, or not allowed here."""


def _name(key: str) -> str:
    return _SPARK_NAMES.get(key, key)


# -- where to start and stop --------------------------------------------------------------------------


@dataclass(frozen=True)
class Earliest:
    """The first offset still in each partition."""


@dataclass(frozen=True)
class Latest:
    """The high watermark of each partition: only records produced from now on."""


@dataclass(frozen=True)
class SpecificOffsets:
    """An offset per partition; -2 means earliest and -1 latest."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class Timestamp:
    """The first offset whose timestamp is at or after ``timestamp`` (ms), in every partition."""

    timestamp: int


@dataclass(frozen=True)
class TimestampsByPartition:
    """Like ``Timestamp``, with a timestamp (ms) per partition."""

    timestamps: Mapping[TopicPartition, int]


OffsetSpec = Earliest | Latest | SpecificOffsets | Timestamp | TimestampsByPartition


# -- subscriptions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    partitions: tuple[TopicPartition, ...]


Subscription = Subscribe | SubscribePattern | Assign


# -- parsed option sets -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    bootstrap_servers: str
    client_config: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # None for streaming reads
    timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    group_id_prefix: str = "spark-kafka-source"
    group_id: str | None = None

    def consumer_config(self, group_id: str) -> dict[str, Any]:
        """The configuration of a consumer that reads with ``assign``, never commits."""
        return {
            **self.client_config,
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id or group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }

    def admin_config(self) -> dict[str, Any]:
        return {**_admin_safe(self.client_config), "bootstrap.servers": self.bootstrap_servers}


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    client_config: Mapping[str, str]
    topic: str | None = None

    def producer_config(self) -> dict[str, Any]:
        return {
            # murmur2 for keyed records, like the Java producer Spark's Kafka sink uses, so a key
            # lands in the same partition as it did there.
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            **self.client_config,
            "bootstrap.servers": self.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
        }


# Settings an AdminClient rejects although a consumer takes them.
_CONSUMER_ONLY_PREFIXES = ("fetch.", "queued.", "auto.commit", "session.timeout", "heartbeat.",
                           "max.poll", "partition.assignment", "group.", "check.crcs", "consume.",
                           "coordinator.", "enable.auto", "offset.store", "allow.auto.create")


def _admin_safe(config: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if not k.startswith(_CONSUMER_ONLY_PREFIXES)}


# -- parsing ------------------------------------------------------------------------------------------


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered in out and out[lowered] != value:
            raise OptionError(f"option {key!r} is given twice with different values")
        out[lowered] = "" if value is None else str(value)
    return out


def _bootstrap(opts: Mapping[str, str]) -> str:
    value = opts.get(BOOTSTRAP, "").strip()
    if not value:
        raise OptionError(f"option '{BOOTSTRAP}' must be specified: the brokers to connect to, "
                          "as host:port[,host:port...]")
    return value


def _client_config(opts: Mapping[str, str], refused: Mapping[str, str | None]) -> dict[str, str]:
    config = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == BOOTSTRAP:
            continue
        name = key[len("kafka."):]
        if refused.get(name) is not None:
            raise OptionError(f"option 'kafka.{name}' is not supported: {refused[name]}")
        if name == "acks" and value.strip().lower() not in ("all", "-1"):
            raise OptionError(f"option 'kafka.acks'={value!r} is not supported: the sink always writes "
                              "with acks=all")
        config[name] = value
    return config


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    value = opts[key].strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise OptionError(f"option '{_name(key)}'={opts[key]!r}: expected true or false")


def _int(opts: Mapping[str, str], key: str, minimum: int) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key].strip())
    except ValueError:
        raise OptionError(f"option '{_name(key)}'={opts[key]!r}: expected an integer") from None
    if value < minimum:
        raise OptionError(f"option '{_name(key)}'={value}: must be at least {minimum}")
    return value


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


_DURATION_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                   "d": 86_400_000}


def parse_duration_ms(key: str, text: str) -> int:
    """Spark's time strings: ``500``/``500ms``, ``30s``, ``15m``/``15min``, ``1h``, ``1d``."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if match is None or match.group(2) not in ("", *_DURATION_UNITS):
        raise OptionError(f"option '{_name(key)}'={text!r}: expected a duration such as 500ms, 30s, 15m or 1h")
    return int(int(match.group(1)) * _DURATION_UNITS.get(match.group(2) or "ms", 1))


def _json_object(key: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option '{_name(key)}'={text!r} is not valid JSON: {exc}") from None
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option '{_name(key)}'={text!r}: expected a non-empty JSON object")
    return value


def _partition_map(key: str, text: str, what: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 23, "1": -2}}`` into ``{("topic", 0): 23, ("topic", 1): -2}``."""
    out: dict[TopicPartition, int] = {}
    for topic, partitions in _json_object(key, text).items():
        if not isinstance(partitions, dict) or not partitions:
            raise OptionError(f"option '{_name(key)}': topic {topic!r} needs an object of partition to {what}, "
                              f"like {{\"{topic}\": {{\"0\": 23}}}}")
        for partition, number in partitions.items():
            try:
                index = int(partition)
            except (TypeError, ValueError):
                raise OptionError(f"option '{_name(key)}': {partition!r} of topic {topic!r} is not a "
                                  "partition number") from None
            if index < 0:
                raise OptionError(f"option '{_name(key)}': partition {index} of topic {topic!r} is negative")
            if isinstance(number, bool) or not isinstance(number, int):
                raise OptionError(f"option '{_name(key)}': {what} {number!r} of {topic}-{index} is not an integer")
            out[(topic, index)] = number
    return out


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in _SUBSCRIPTIONS if k in opts]
    if not given:
        raise OptionError("one of the options 'subscribe', 'subscribePattern' or 'assign' must be specified")
    if len(given) > 1:
        raise OptionError("only one of the options 'subscribe', 'subscribePattern' and 'assign' may be "
                          f"specified, got {', '.join(_name(k) for k in given)}")
    key = given[0]
    text = opts[key]
    if key == "subscribe":
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise OptionError(f"option 'subscribe'={text!r}: no topics to subscribe to")
        return Subscribe(tuple(dict.fromkeys(topics)))
    if key == "subscribepattern":
        if not text.strip():
            raise OptionError("option 'subscribePattern' is empty: give a regular expression of topic names")
        try:
            re.compile(text)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern'={text!r} is not a valid regular expression: {exc}") from None
        return SubscribePattern(text)
    partitions: list[TopicPartition] = []
    for topic, indexes in _json_object("assign", text).items():
        if not isinstance(indexes, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                    for i in indexes):
            raise OptionError(f"option 'assign': topic {topic!r} needs a list of partition numbers, "
                              f"like {{\"{topic}\": [0, 1]}}")
        partitions.extend((topic, i) for i in indexes)
    if not partitions:
        raise OptionError(f"option 'assign'={text!r}: no partitions to read")
    return Assign(tuple(sorted(set(partitions))))


def _offset_spec(opts: Mapping[str, str], role: str, streaming: bool) -> OffsetSpec:
    """``role`` is "starting" or "ending". Timestamps win over offsets, as in Spark."""
    ts_key, by_ts_key, offsets_key = f"{role}timestamp", f"{role}offsetsbytimestamp", f"{role}offsets"
    if ts_key in opts:
        value = _int(opts, ts_key, 0)
        assert value is not None
        return Timestamp(value)
    if by_ts_key in opts:
        stamps = _partition_map(by_ts_key, opts[by_ts_key], "timestamp")
        for tp, stamp in stamps.items():
            if stamp < 0:
                raise OptionError(f"option '{_name(by_ts_key)}': timestamp {stamp} of {tp[0]}-{tp[1]} is negative")
        return TimestampsByPartition(stamps)
    text = opts.get(offsets_key)
    if text is None:
        return Latest() if (role == "ending" or streaming) else Earliest()
    word = text.strip().lower()
    if word == "earliest":
        if role == "ending":
            raise OptionError("option 'endingOffsets'='earliest' is not allowed: a read would end before it starts")
        return Earliest()
    if word == "latest":
        if role == "starting" and not streaming:
            raise OptionError("option 'startingOffsets'='latest' is not allowed for batch queries: "
                              "the read would be empty")
        return Latest()
    offsets = _partition_map(offsets_key, text, "offset")
    for (topic, index), offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(f"option '{_name(offsets_key)}': offset {offset} of {topic}-{index} is invalid; "
                              "use an offset, -2 for earliest or -1 for latest")
        if role == "starting" and offset == LATEST and not streaming:
            raise OptionError(f"option 'startingOffsets': {topic}-{index} can't start at latest (-1) "
                              "in a batch query")
        if role == "ending" and offset == EARLIEST:
            raise OptionError(f"option 'endingOffsets': {topic}-{index} can't end at earliest (-2)")
    return SpecificOffsets(offsets)


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    opts = _lower(options)
    bootstrap = _bootstrap(opts)
    client_config = _client_config(opts, _REFUSED_CONSUMER)
    group_id = client_config.pop("group.id", None)
    subscription = _subscription(opts)
    for key in (_BATCH_ONLY if streaming else _STREAM_ONLY):
        if key in opts:
            raise OptionError(f"option '{_name(key)}' is only for "
                              f"{'batch' if streaming else 'streaming'} queries")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in _STRATEGIES:
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy'={strategy!r}: expected error or latest")
    max_per_trigger = _int(opts, "maxoffsetspertrigger", 1)
    min_per_trigger = _int(opts, "minoffsetspertrigger", 1)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise OptionError(f"option 'minOffsetsPerTrigger'={min_per_trigger} is larger than "
                          f"'maxOffsetsPerTrigger'={max_per_trigger}")
    delay = opts.get("maxtriggerdelay")
    if delay is not None and min_per_trigger is None:
        raise OptionError("option 'maxTriggerDelay' only has a meaning with 'minOffsetsPerTrigger'")
    prefix = opts.get("groupidprefix", "spark-kafka-source").strip()
    if not prefix:
        raise OptionError("option 'groupIdPrefix' is empty")
    return ReadOptions(
        bootstrap_servers=bootstrap,
        client_config=client_config,
        subscription=subscription,
        starting=_offset_spec(opts, "starting", streaming),
        ending=None if streaming else _offset_spec(opts, "ending", streaming),
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        include_headers=_bool(opts, "includeheaders", False),
        min_partitions=_int(opts, "minpartitions", 1),
        max_records_per_partition=_int(opts, "maxrecordsperpartition", 1),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=parse_duration_ms("maxtriggerdelay", delay) if delay is not None else 15 * 60 * 1000,
        poll_timeout_ms=_default(_int(opts, "kafkaconsumer.polltimeoutms", 1), 120_000),
        fetch_offset_num_retries=_default(_int(opts, "fetchoffset.numretries", 0), 3),
        fetch_offset_retry_interval_ms=_default(_int(opts, "fetchoffset.retryintervalms", 0), 10),
        group_id_prefix=prefix,
        group_id=group_id,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    bootstrap = _bootstrap(opts)
    client_config = _client_config(opts, _REFUSED_PRODUCER)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    return WriteOptions(bootstrap_servers=bootstrap, client_config=client_config,
                        topic=topic.strip() if topic is not None else None)


# -- the sink's input columns -------------------------------------------------------------------------

HEADERS_TYPE = "array<struct<key:string,value:binary>>"
_WRITE_COLUMNS = {
    "key": ("string", "binary"),
    "value": ("string", "binary"),
    "topic": ("string",),
    "partition": ("int",),
    "headers": (HEADERS_TYPE,),
}


@dataclass(frozen=True)
class WriteColumns:
    """Which input columns the sink uses, by their name in the DataFrame."""

    value: str
    key: str | None = None
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None


def check_write_columns(columns: list[tuple[str, str]], options: WriteOptions) -> WriteColumns:
    """``columns`` are (name, Spark simple type string) pairs of the DataFrame to write.

    Columns are matched case-insensitively, as Spark resolves names; other columns are ignored.
    """
    found: dict[str, tuple[str, str]] = {}
    for name, type_string in columns:
        lowered = name.lower()
        if lowered not in _WRITE_COLUMNS:
            continue
        if lowered in found:
            raise OptionError(f"the DataFrame has two columns named {lowered!r}")
        allowed = _WRITE_COLUMNS[lowered]
        normalized = type_string.replace(" ", "").lower()
        if normalized not in allowed:
            raise OptionError(f"column {name!r} has type {type_string}; the kraftpy sink needs "
                              f"{' or '.join(allowed)}")
        found[lowered] = (name, normalized)
    if "value" not in found:
        raise OptionError("the DataFrame to write needs a 'value' column (string or binary)")
    if options.topic is None and "topic" not in found:
        raise OptionError("no topic to write to: set the option 'topic' or give the DataFrame a 'topic' column")
    return WriteColumns(
        value=found["value"][0],
        key=found["key"][0] if "key" in found else None,
        # The topic option wins over the column, as in Spark's Kafka sink.
        topic=found["topic"][0] if "topic" in found and options.topic is None else None,
        partition=found["partition"][0] if "partition" in found else None,
        headers=found["headers"][0] if "headers" in found else None,
    )
