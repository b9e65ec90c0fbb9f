"""The ``kraftpy`` Spark data source in a local SparkSession (local[2]) against ``kraftpy dev``.

Records are produced and checked with confluent-kafka; Spark reads and writes them with the data
source. Streaming queries run with ``trigger(availableNow=True)`` and are waited on with
``awaitTermination``; nothing waits on a clock.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"log_level": 0}


_admins: dict[str, AdminClient] = {}


def admin(kraft) -> AdminClient:
    """One AdminClient per cluster, kept alive: a collected client fails its pending futures."""
    if kraft.bootstrap not in _admins:
        _admins[kraft.bootstrap] = AdminClient({"bootstrap.servers": kraft.bootstrap, **QUIET})
    return _admins[kraft.bootstrap]


def create_topic(kraft, name: str, partitions: int = 1, **config: str) -> None:
    admin(kraft).create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)


def produce(kraft, topic: str, messages: list[dict]) -> list[tuple[int, int]]:
    """Produce with acks=all; the (partition, offset) of each message, in order."""
    producer = Producer({"bootstrap.servers": kraft.bootstrap, "acks": "all", "linger.ms": 5, **QUIET})
    reports: dict[int, tuple[int, int]] = {}
    for i, message in enumerate(messages):
        def report(err, msg, i=i):
            assert err is None, err
            reports[i] = (msg.partition(), msg.offset())
        producer.produce(topic, on_delivery=report, **message)
    assert producer.flush(30) == 0
    return [reports[i] for i in range(len(messages))]


def consume(kraft, topic: str, partition: int, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": kraft.bootstrap, "group.id": "checker", "enable.auto.commit": False,
                         **QUIET})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out = []
    try:
        while len(out) < count:
            msg = consumer.poll(30)
            assert msg is not None, f"no message after {len(out)}"
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        consumer.close()
    return out


def reader(spark, kraft, **options):
    r = spark.read.format("kraftpy").option("kafka.bootstrap.servers", kraft.bootstrap)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def stream(spark, kraft, **options):
    r = spark.readStream.format("kraftpy").option("kafka.bootstrap.servers", kraft.bootstrap)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def run_available_now(df, path: Path, checkpoint: Path, fmt: str = "parquet", **options):
    writer = df.writeStream.format(fmt).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    if fmt == "parquet":
        writer = writer.option("path", str(path))
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination(240)
    assert not query.isActive, "the availableNow query did not finish"
    if query.exception() is not None:
        raise query.exception()
    return query


def now_ms() -> int:
    return int(time.time() * 1000)


# -- batch reads --------------------------------------------------------------------------------------


def test_batch_read_equals_what_was_produced(spark, kraft):
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, TimestampType

    create_topic(kraft, "events", 3)
    base = now_ms() - 60_000
    messages = [
        {"key": None if i % 7 == 0 else b"key-%d" % i, "value": b"value-%d-" % i + b"x" * (i % 50),
         "partition": i % 3, "timestamp": base + i,
         "headers": [("h", b"%d" % i), ("n", None)] if i % 2 else None}
        for i in range(300)
    ]
    placed = produce(kraft, "events", messages)

    df = reader(spark, kraft, subscribe="events", includeHeaders="true", minPartitions="7")
    types = {f.name: f.dataType for f in df.schema.fields}
    assert list(types) == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert (types["key"], types["value"], types["topic"], types["partition"], types["offset"]) == (
        BinaryType(), BinaryType(), StringType(), IntegerType(), LongType())
    assert types["timestamp"] == TimestampType() and types["timestampType"] == IntegerType()
    assert isinstance(types["headers"], ArrayType)
    # minPartitions splits the three 100-record ranges into more tasks.
    assert df.rdd.getNumPartitions() >= 7

    rows = df.selectExpr("key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ms",
                         "timestampType", "headers").collect()
    got = {(r.partition, r.offset): r for r in rows}
    assert len(rows) == len(got) == 300
    for message, (partition, offset) in zip(messages, placed, strict=True):
        row = got[(partition, offset)]
        assert (row.key, row.value, row.topic, row.ms, row.timestampType) == (
            message["key"], message["value"], "events", message["timestamp"], 0)
        headers = [(h.key, h.value) for h in row.headers] if row.headers is not None else None
        assert headers == message["headers"]


def test_batch_offsets_timestamps_assign_and_pattern(spark, kraft):
    create_topic(kraft, "ts-a", 2)
    create_topic(kraft, "ts-b", 1)
    base = now_ms() - 3_600_000
    for topic, partitions in (("ts-a", 2), ("ts-b", 1)):
        produce(kraft, topic, [{"value": b"%d" % i, "partition": p, "timestamp": base + i * 1000}
                               for p in range(partitions) for i in range(20)])

    def offsets(df):
        return sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())

    got = offsets(reader(spark, kraft, assign='{"ts-a": [1]}', startingOffsets='{"ts-a": {"1": 5}}',
                         endingOffsets='{"ts-a": {"1": -1}}'))
    assert got == [("ts-a", 1, o) for o in range(5, 20)]

    got = offsets(reader(spark, kraft, subscribe="ts-a", startingTimestamp=str(base + 10_000),
                         endingOffsetsByTimestamp=json.dumps({"ts-a": {"0": base + 15_000, "1": base + 10**9}})))
    assert got == [("ts-a", 0, o) for o in range(10, 15)] + [("ts-a", 1, o) for o in range(10, 20)]

    got = offsets(reader(spark, kraft, subscribePattern="ts-.*", startingOffsets=json.dumps(
        {"ts-a": {"0": -2, "1": 18}, "ts-b": {"0": 19}})))
    assert got == ([("ts-a", 0, o) for o in range(20)] + [("ts-a", 1, 18), ("ts-a", 1, 19)] + [("ts-b", 0, 19)])

    with pytest.raises(Exception, match="no record at or after the timestamp"):
        reader(spark, kraft, subscribe="ts-b", startingTimestamp=str(base + 10**9)).collect()
    with pytest.raises(Exception, match="'startingOffsets' must name every partition.*missing: ts-a-1"):
        reader(spark, kraft, subscribe="ts-a", startingOffsets='{"ts-a": {"0": 0}}').collect()
    with pytest.raises(Exception, match="one of the options 'subscribe', 'subscribePattern' or 'assign'"):
        reader(spark, kraft).collect()
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        spark.read.format("kraftpy").option("subscribe", "ts-a").load().collect()


def test_batch_read_fail_on_data_loss(spark, kraft):
    create_topic(kraft, "trimmed", 1)
    produce(kraft, "trimmed", [{"value": b"%d" % i} for i in range(30)])
    admin(kraft).delete_records([TopicPartition("trimmed", 0, 10)])[TopicPartition("trimmed", 0, 10)].result(30)
    start = '{"trimmed": {"0": 0}}'
    with pytest.raises(Exception, match="before its earliest offset 10.*failOnDataLoss"):
        reader(spark, kraft, subscribe="trimmed", startingOffsets=start).collect()
    rows = reader(spark, kraft, subscribe="trimmed", startingOffsets=start, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(10, 30))


# -- streaming reads ----------------------------------------------------------------------------------


def test_stream_available_now_twice_reads_every_record_once(spark, kraft, tmp_path):
    create_topic(kraft, "clicks", 2)
    first = [{"key": b"u%d" % (i % 5), "value": b"first-%d" % i, "partition": i % 2} for i in range(100)]
    produced = produce(kraft, "clicks", first)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = stream(spark, kraft, subscribe="clicks", startingOffsets="earliest", maxOffsetsPerTrigger="30")

    query = run_available_now(df, out, checkpoint)
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(batches) == 100 and max(batches) <= 30 and len(batches) >= 4
    end = query.lastProgress["sources"][0]["endOffset"]
    assert (json.loads(end) if isinstance(end, str) else end) == {"clicks": {"0": 50, "1": 50}}

    # A new partition and a second round of records, produced while no query runs.
    admin(kraft).create_partitions([NewPartitions("clicks", 3)])["clicks"].result(30)
    second = [{"key": b"u%d" % i, "value": b"second-%d" % i, "partition": i % 3} for i in range(60)]
    produced += produce(kraft, "clicks", second)
    run_available_now(df, out, checkpoint)

    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    seen = Counter((r.partition, r.offset) for r in rows)
    assert [k for k, n in seen.items() if n > 1] == []
    assert set(seen) == set(produced)
    by_place = {(r.partition, r.offset): r.value for r in rows}
    assert [by_place[p] for p in produced] == [m["value"] for m in first + second]


def test_stream_fail_on_data_loss_when_retention_removed_unread_offsets(spark, kraft, tmp_path):
    create_topic(kraft, "aged", 1)
    produce(kraft, "aged", [{"value": b"a%d" % i} for i in range(20)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def query_df(fail_on_data_loss: str):
        return stream(spark, kraft, subscribe="aged", startingOffsets="earliest", failOnDataLoss=fail_on_data_loss)

    run_available_now(query_df("true"), out, checkpoint)
    produce(kraft, "aged", [{"value": b"b%d" % i} for i in range(20)])
    admin(kraft).delete_records([TopicPartition("aged", 0, 30)])[TopicPartition("aged", 0, 30)].result(30)

    with pytest.raises(Exception, match="offsets 20 to 30 of aged-0 were deleted.*failOnDataLoss"):
        run_available_now(query_df("true"), out, checkpoint)
    run_available_now(query_df("false"), out, checkpoint)
    offsets = sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect())
    assert offsets == list(range(20)) + list(range(30, 40))


# -- writes -------------------------------------------------------------------------------------------


def test_batch_write_then_read_back(spark, kraft):
    create_topic(kraft, "w-one", 2)
    create_topic(kraft, "w-two", 1)
    rows = [(f"k{i}", b"v%d" % i, i % 2, [("idx", b"%d" % i)] if i % 3 else None) for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int, "
                                     "headers array<struct<key:string,value:binary>>")
    df.write.format("kraftpy").mode("append").option("kafka.bootstrap.servers", kraft.bootstrap) \
        .option("topic", "w-one").save()
    routed = spark.createDataFrame([("w-two" if i % 2 else "w-one", f"routed-{i}") for i in range(10)],
                                   "topic string, value string")
    routed.write.format("kraftpy").mode("append").option("kafka.bootstrap.servers", kraft.bootstrap).save()

    back = reader(spark, kraft, subscribe="w-one,w-two", includeHeaders="true").collect()
    got = {(r.topic, r.value): (r.key, r.partition, [(h.key, h.value) for h in r.headers or []]) for r in back}
    assert len(got) == len(back) == 50
    expected = {("w-one", v): (k.encode(), p, h or []) for k, v, p, h in rows}
    # Rows without a partition column go where the partitioner puts them; w-two has one partition.
    expected |= {("w-two" if i % 2 else "w-one", b"routed-%d" % i):
                 (None, 0 if i % 2 else got.get(("w-one", b"routed-%d" % i), (None, -1))[1], [])
                 for i in range(10)}
    assert got == expected


def test_write_broker_error_fails_the_task_with_its_name(spark, kraft):
    create_topic(kraft, "tiny", 1, **{"max.message.bytes": "200"})
    df = spark.createDataFrame([("x" * 1000,)], "value string")
    with pytest.raises(Exception, match="MSG_SIZE_TOO_LARGE"):
        df.write.format("kraftpy").mode("append").option("kafka.bootstrap.servers", kraft.bootstrap) \
            .option("topic", "tiny").save()
    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.createDataFrame([("k",)], "key string").write.format("kraftpy").mode("append") \
            .option("kafka.bootstrap.servers", kraft.bootstrap).option("topic", "tiny").save()


def test_stream_write_copies_a_topic(spark, kraft, tmp_path):
    create_topic(kraft, "src", 2)
    create_topic(kraft, "copy", 1)
    produced = produce(kraft, "src", [{"key": b"k%d" % i, "value": b"m%d" % i, "partition": i % 2}
                                      for i in range(50)])
    df = stream(spark, kraft, subscribe="src", startingOffsets="earliest").selectExpr(
        "key", "concat(value, '!') AS value", "array(named_struct('key', 'from', 'value', "
        "cast(concat(topic, '-', partition, '-', offset) AS binary))) AS headers")
    run_available_now(df, None, tmp_path / "checkpoint", fmt="kraftpy",
                      **{"kafka.bootstrap.servers": kraft.bootstrap, "topic": "copy"})
    got = consume(kraft, "copy", 0, len(produced))
    assert sorted(m.headers()[0][1] for m in got) == sorted(b"src-%d-%d" % p for p in produced)
    assert sorted(m.value() for m in got) == sorted(b"m%d!" % i for i in range(50))


# -- the example job ----------------------------------------------------------------------------------


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_page_counts(spark, kraft, tmp_path):
    generator = load_example("clickstream_generator")
    job = load_example("page_counts_stream")
    generator.ensure_topic(kraft.bootstrap, "pageviews", 2)
    minute = 60_000
    start = (now_ms() // minute - 30) * minute
    # 180 events over three minutes, then one ten minutes later that moves the watermark past them.
    assert generator.generate(kraft.bootstrap, "pageviews", 180, start_ms=start, step_ms=1000) == 180
    generator.generate(kraft.bootstrap, "pageviews", 1, seed=99, start_ms=start + 10 * minute, step_ms=0)

    out = tmp_path / "counts"
    query = job.start_query(spark, kraft.bootstrap, "pageviews", str(out), str(tmp_path / "checkpoint"),
                            available_now=True)
    query.awaitTermination(240)
    assert query.exception() is None

    expected: Counter = Counter()
    for i, (_, page, _) in zip(range(180), generator.events(1), strict=False):
        expected[((start + i * 1000) // minute * minute, page)] += 1
    rows = spark.read.parquet(str(out)).selectExpr("unix_millis(minute) AS minute", "page", "views").collect()
    assert {(r.minute, r.page): r.views for r in rows} == dict(expected)
