"""Option parsing of the Spark data source: Spark's Kafka option names, clear errors. No Spark needed."""

from __future__ import annotations

import pytest

from kraftpy.spark.options import (
    Assign,
    Earliest,
    Latest,
    OptionError,
    SpecificOffsets,
    Subscribe,
    SubscribePattern,
    Timestamp,
    TimestampsByPartition,
    check_write_columns,
    parse_duration_ms,
    parse_read_options,
    parse_write_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def read(streaming=False, **options):
    return parse_read_options({**BOOT, **options}, streaming=streaming)


def test_defaults_follow_spark_kafka_source():
    batch = read(subscribe="a")
    assert batch.starting == Earliest() and batch.ending == Latest()
    assert batch.fail_on_data_loss and not batch.include_headers
    assert batch.min_partitions is None and batch.max_offsets_per_trigger is None
    stream = read(streaming=True, subscribe="a")
    assert stream.starting == Latest() and stream.ending is None


def test_option_names_are_case_insensitive():
    options = parse_read_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubScribe": "a", "STARTINGOFFSETS": "latest",
                                  "maxoffsetspertrigger": "10"}, streaming=True)
    assert options.bootstrap_servers == "h:1" and options.starting == Latest()
    assert options.max_offsets_per_trigger == 10


def test_missing_bootstrap_servers_named():
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse_read_options({"subscribe": "a"}, streaming=False)
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse_write_options({"topic": "a"})


def test_subscriptions():
    assert read(subscribe=" a, b ,a,").subscription == Subscribe(("a", "b"))
    pattern = read(subscribePattern="clicks-.*").subscription
    assert pattern == SubscribePattern("clicks-.*")
    assert pattern.matches("clicks-eu") and not pattern.matches("xclicks-eu")
    assert read(assign='{"b": [1, 0], "a": [2]}').subscription == Assign((("a", 2), ("b", 0), ("b", 1)))


@pytest.mark.parametrize("options, message", [
    ({}, "one of the options 'subscribe', 'subscribePattern' or 'assign'"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "only one of the options"),
    ({"subscribe": " , "}, "'subscribe'"),
    ({"subscribePattern": "(unclosed"}, "'subscribePattern'.*not a valid regular expression"),
    ({"assign": "[0]"}, "'assign'.*JSON object"),
    ({"assign": '{"a": [-1]}'}, "'assign'.*list of partition numbers"),
    ({"assign": "{nope"}, "'assign'.*not valid JSON"),
])
def test_subscription_errors_name_the_option(options, message):
    with pytest.raises(OptionError, match=message):
        read(**options)


def test_offsets_json_and_sentinels():
    options = read(startingOffsets='{"a": {"0": 5, "1": -2}}', endingOffsets='{"a": {"0": -1, "1": 9}}',
                   subscribe="a")
    assert options.starting == SpecificOffsets({("a", 0): 5, ("a", 1): -2})
    assert options.ending == SpecificOffsets({("a", 0): -1, ("a", 1): 9})
    stream = read(streaming=True, subscribe="a", startingOffsets='{"a": {"0": -1}}')
    assert stream.starting == SpecificOffsets({("a", 0): -1})


@pytest.mark.parametrize("options, message", [
    ({"startingOffsets": "latest"}, "'startingOffsets'='latest' is not allowed for batch"),
    ({"endingOffsets": "earliest"}, "'endingOffsets'='earliest'"),
    ({"startingOffsets": '{"a": {"0": -1}}'}, "a-0 can't start at latest"),
    ({"endingOffsets": '{"a": {"0": -2}}'}, "a-0 can't end at earliest"),
    ({"startingOffsets": '{"a": {"0": -3}}'}, "offset -3 of a-0 is invalid"),
    ({"startingOffsets": '{"a": {"x": 1}}'}, "'x' of topic 'a' is not a partition number"),
    ({"startingOffsets": '{"a": {"0": "1"}}'}, "offset '1' of a-0 is not an integer"),
    ({"startingOffsets": '{"a": [0]}'}, "'startingOffsets': topic 'a' needs an object"),
    ({"startingTimestamp": "soon"}, "'startingTimestamp'='soon': expected an integer"),
    ({"startingOffsetsByTimestamp": '{"a": {"0": -5}}'}, "'startingOffsetsByTimestamp'.*negative"),
    ({"startingOffsetsByTimestampStrategy": "closest"}, "'startingOffsetsByTimestampStrategy'"),
    ({"failOnDataLoss": "maybe"}, "'failOnDataLoss'='maybe': expected true or false"),
    ({"minPartitions": "0"}, "'minPartitions'=0: must be at least 1"),
    ({"maxOffsetsPerTrigger": "10"}, "'maxOffsetsPerTrigger' is only for streaming"),
    ({"kafka.auto.offset.reset": "earliest"}, "'kafka.auto.offset.reset' is not supported.*startingOffsets"),
    ({"kafka.enable.auto.commit": "true"}, "'kafka.enable.auto.commit' is not supported"),
    ({"kafka.value.deserializer": "x"}, "'kafka.value.deserializer'"),
])
def test_batch_read_errors_name_the_option(options, message):
    with pytest.raises(OptionError, match=message):
        read(subscribe="a", **options)


@pytest.mark.parametrize("options, message", [
    ({"endingOffsets": "latest"}, "'endingOffsets' is only for batch"),
    ({"maxOffsetsPerTrigger": "0"}, "'maxOffsetsPerTrigger'=0"),
    ({"maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"}, "'minOffsetsPerTrigger'=6 is larger"),
    ({"maxTriggerDelay": "1m"}, "'maxTriggerDelay' only has a meaning with 'minOffsetsPerTrigger'"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, "'maxTriggerDelay'='soon'"),
])
def test_stream_read_errors_name_the_option(options, message):
    with pytest.raises(OptionError, match=message):
        read(streaming=True, subscribe="a", **options)


def test_timestamps_win_over_offsets():
    options = read(subscribe="a", startingOffsets="earliest", startingTimestamp="1700000000000",
                   endingOffsetsByTimestamp='{"a": {"0": 1800000000000}}')
    assert options.starting == Timestamp(1_700_000_000_000)
    assert options.ending == TimestampsByPartition({("a", 0): 1_800_000_000_000})


def test_durations():
    assert parse_duration_ms("maxtriggerdelay", "15m") == 900_000
    assert parse_duration_ms("maxtriggerdelay", "30s") == 30_000
    assert parse_duration_ms("maxtriggerdelay", "250") == 250
    assert parse_duration_ms("maxtriggerdelay", "2h") == 7_200_000
    options = read(streaming=True, subscribe="a", minOffsetsPerTrigger="100", maxTriggerDelay="5s")
    assert options.min_offsets_per_trigger == 100 and options.max_trigger_delay_ms == 5000


def test_client_config_and_group_id():
    options = read(subscribe="a", **{"kafka.fetch.max.bytes": "1000", "kafka.group.id": "mine",
                                     "kafka.security.protocol": "PLAINTEXT"})
    assert options.group_id == "mine"
    config = options.consumer_config("generated")
    assert config["group.id"] == "mine" and config["fetch.max.bytes"] == "1000"
    assert config["enable.auto.commit"] is False and config["enable.partition.eof"] is True
    admin = options.admin_config()
    assert "fetch.max.bytes" not in admin and admin["security.protocol"] == "PLAINTEXT"
    assert read(subscribe="a").consumer_config("generated")["group.id"] == "generated"


def test_write_options():
    options = parse_write_options({**BOOT, "topic": "out", "kafka.compression.type": "zstd"})
    config = options.producer_config()
    assert options.topic == "out"
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert config["compression.type"] == "zstd" and config["partitioner"] == "murmur2_random"
    with pytest.raises(OptionError, match="'kafka.acks'='1' is not supported"):
        parse_write_options({**BOOT, "kafka.acks": "1"})
    with pytest.raises(OptionError, match="'kafka.key.serializer'"):
        parse_write_options({**BOOT, "kafka.key.serializer": "x"})
    with pytest.raises(OptionError, match="option 'topic' is empty"):
        parse_write_options({**BOOT, "topic": " "})


def test_write_columns():
    no_topic = parse_write_options(BOOT)
    with_topic = parse_write_options({**BOOT, "topic": "t"})
    columns = check_write_columns([("Value", "string"), ("key", "binary"), ("topic", "string"),
                                   ("partition", "int"), ("other", "double"),
                                   ("headers", "array<struct<key:string,value:binary>>")], no_topic)
    assert (columns.value, columns.key, columns.topic, columns.partition, columns.headers) == (
        "Value", "key", "topic", "partition", "headers")
    # The topic option wins over the column.
    assert check_write_columns([("value", "binary"), ("topic", "string")], with_topic).topic is None
    with pytest.raises(OptionError, match="needs a 'value' column"):
        check_write_columns([("key", "binary")], with_topic)
    with pytest.raises(OptionError, match="no topic to write to"):
        check_write_columns([("value", "binary")], no_topic)
    with pytest.raises(OptionError, match="column 'partition' has type bigint"):
        check_write_columns([("value", "binary"), ("partition", "bigint")], with_topic)
    with pytest.raises(OptionError, match="column 'headers' has type"):
        check_write_columns([("value", "binary"), ("headers", "map<string,binary>")], with_topic)
