"""The ``kraftpy`` Python data source: batch and streaming reads and writes of Kafka topics.

Shaped like Spark's built-in Kafka source and sink (same options, same columns), so a job moves
over by changing the format name. Planning (which offsets, how many tasks) runs in Spark's Python
planner on the driver; ``read`` and ``write`` run in the executors' Python workers, each task with
its own confluent-kafka consumer or producer:

* a read task assigns its one partition at the range's start offset, consumes until the range's
  end (partition EOF events tell it where the partition ends) and yields Arrow record batches;
* a write task produces every row with an idempotent ``acks=all`` producer and flushes before it
  reports success; the first delivery error fails the task, named by its Kafka error name.
"""

from __future__ import annotations

import bisect
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kraftpy.spark.offsets import (
    ClientOffsetLookup,
    OffsetRange,
    backlog_size,
    batch_ranges,
    from_json_offsets,
    rate_limit,
    report_data_loss,
    resolve_offsets,
    should_wait_for_more,
    split_ranges,
    stream_ranges,
    subscribed_partitions,
    to_json_offsets,
)
from kraftpy.spark.options import (
    OptionError,
    ReadOptions,
    WriteColumns,
    WriteOptions,
    check_write_columns,
    parse_read_options,
    parse_write_options,
)

log = logging.getLogger("kraftpy.spark")

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
# Kafka's TimestampType ids (CreateTime 0, LogAppendTime 1, none -1) from librdkafka's (1, 2, 0).
_TIMESTAMP_TYPES = {1: 0, 2: 1, 0: -1}
# Records a read task asks the consumer for at a time; each such slice becomes one Arrow batch.
_CONSUME_BATCH = 10_000


def kafka_schema(include_headers: bool = False) -> StructType:
    """The columns of Spark's Kafka source."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS))
    return StructType(fields)


class KafkaReadError(RuntimeError):
    """A consumer error that ends a read task."""


class KafkaWriteError(RuntimeError):
    """A produce that failed; the message starts with the Kafka error's name."""


class KraftpyDataSource(DataSource):
    """``spark.read.format("kraftpy")`` and friends; see docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "kraftpy"

    def _include_headers(self) -> bool:
        value = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        if str(value).strip().lower() not in ("true", "false"):
            raise OptionError(f"option 'includeHeaders'={value!r}: expected true or false")
        return str(value).strip().lower() == "true"

    def schema(self) -> StructType:
        return kafka_schema(self._include_headers())

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if schema != expected:
            raise OptionError(f"the kraftpy source has a fixed schema ({expected.simpleString()}) and can't "
                              f"read with a user-specified one ({schema.simpleString()})")

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        return KraftpyBatchReader(parse_read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        return KraftpyStreamReader(parse_read_options(self.options, streaming=True), schema)

    def _columns(self, schema: StructType, options: WriteOptions) -> WriteColumns:
        return check_write_columns([(f.name, f.dataType.simpleString()) for f in schema.fields], options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise OptionError("save mode 'overwrite' is not supported by the kraftpy sink: topics are "
                              "append-only; use mode 'append'")
        options = parse_write_options(self.options)
        return KraftpyBatchWriter(options, self._columns(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        # Every output mode appends the rows of each micro-batch, as Spark's Kafka sink does.
        options = parse_write_options(self.options)
        return KraftpyStreamWriter(options, self._columns(schema, options))


# -- reading ------------------------------------------------------------------------------------------


class KafkaInputPartition(InputPartition):
    """One Spark task: the records ``start <= offset < end`` of one topic-partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range


def _partitions(ranges: list[OffsetRange]) -> list[KafkaInputPartition]:
    return [KafkaInputPartition(r) for r in ranges]


def _group_id(options: ReadOptions, role: str) -> str:
    return f"{options.group_id_prefix}-{uuid.uuid4()}-{role}"


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _record_batch(messages: list, offsets: list[int], topic: str, partition: int, include_headers: bool,
                  schema: pa.Schema) -> pa.RecordBatch:
    n = len(messages)
    stamps = [m.timestamp() for m in messages]
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array([ts * 1000 for _, ts in stamps], pa.int64()).cast(schema.field("timestamp").type),
        pa.array([_TIMESTAMP_TYPES.get(kind, -1) for kind, _ in stamps], pa.int32()),
    ]
    if include_headers:
        # Spark's Kafka source gives null, not an empty array, for a record without headers.
        columns.append(pa.array([m.headers() or None for m in messages], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(options: ReadOptions, offset_range: OffsetRange, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``offset_range`` as Arrow batches of ``schema``."""
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as CKTopicPartition

    arrow_schema = _arrow_schema(schema)
    include_headers = "headers" in schema.fieldNames()
    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    poll_timeout_s = options.poll_timeout_ms / 1000
    consumer = Consumer(options.consumer_config(_group_id(options, "executor")))
    try:
        def watermarks() -> tuple[int, int]:
            return consumer.get_watermark_offsets(CKTopicPartition(topic, partition), timeout=poll_timeout_s,
                                                  cached=False)

        position = offset_range.start
        low, _ = watermarks()
        if position < low:
            report_data_loss(options.fail_on_data_loss, f"offsets {position} to {min(low, end)} of "
                                                        f"{topic}-{partition} were deleted before they were read")
            position = low
        if position >= end:
            return
        consumer.assign([CKTopicPartition(topic, partition, position)])
        last_progress = time.monotonic()
        while position < end:
            # consume() waits until it has num_messages (or an EOF event): never ask past the end.
            messages = consumer.consume(num_messages=min(_CONSUME_BATCH, end - position), timeout=1.0)
            reached_end = False
            if any(m.error() is not None for m in messages):
                good = []
                for m in messages:
                    error = m.error()
                    if error is None:
                        good.append(m)
                        continue
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        # Everything below the partition's end came before this event; past the
                        # range's end, offsets with no record (control records, compaction) end it.
                        reached_end = reached_end or m.offset() >= end
                        continue
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        low, high = watermarks()
                        if position < low:
                            report_data_loss(options.fail_on_data_loss,
                                             f"offsets {position} to {min(low, end)} of {topic}-{partition} "
                                             "were deleted while they were read")
                            position = low
                            consumer.assign([CKTopicPartition(topic, partition, position)])
                            good, reached_end = [], position >= end
                            break
                        raise KafkaReadError(f"{error.name()}: {error.str()} (reading {topic}-{partition} at "
                                             f"offset {position}; the partition holds {low} to {high})")
                    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                                KafkaError._UNKNOWN_TOPIC):
                        report_data_loss(options.fail_on_data_loss,
                                         f"{topic}-{partition} is gone ({error.name()}) with offsets "
                                         f"{position} to {end} not read")
                        return
                    if error.fatal() or not (error.retriable() or code < 0):
                        raise KafkaReadError(f"{error.name()}: {error.str()} (reading {topic}-{partition} "
                                             f"at offset {position})")
                    log.info("consumer error while reading %s-%d: %s", topic, partition, error)
                messages = good
            if messages:
                offsets = [m.offset() for m in messages]
                if offsets[-1] >= end:
                    cut = bisect.bisect_left(offsets, end)
                    messages, offsets = messages[:cut], offsets[:cut]
                    reached_end = True
                if messages:
                    yield _record_batch(messages, offsets, topic, partition, include_headers, arrow_schema)
                    position = offsets[-1] + 1
                last_progress = time.monotonic()
            if reached_end:
                break
            if time.monotonic() - last_progress > poll_timeout_s:
                low, high = watermarks()
                if high < end or position < low:
                    report_data_loss(options.fail_on_data_loss,
                                     f"offsets {max(position, high)} to {end} of {topic}-{partition} are gone "
                                     f"(the partition now holds {low} to {high})")
                    return
                raise KafkaReadError(f"no record of {topic}-{partition} at offset {position} within "
                                     f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms} although the "
                                     f"partition holds {low} to {high}")
    finally:
        consumer.close()


def _read(options: ReadOptions, partition: InputPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    # Spark plans one partition without a value when a read has no ranges at all.
    if not isinstance(partition, KafkaInputPartition):
        return iter(())
    return read_range(options, partition.range, schema)


class KraftpyBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[KafkaInputPartition]:
        options = self.options
        lookup = ClientOffsetLookup(options.admin_config(), options.fetch_offset_num_retries,
                                    options.fetch_offset_retry_interval_ms)
        tps = subscribed_partitions(options.subscription, lookup.topics())
        if not tps:
            return []
        assert options.ending is not None
        start = resolve_offsets(options.starting, tps, lookup, "starting", options.timestamp_strategy)
        end = resolve_offsets(options.ending, tps, lookup, "ending")
        ranges = batch_ranges(start, end, lookup.earliest(tps), lookup.latest(tps), options.fail_on_data_loss)
        return _partitions(split_ranges(ranges, options.min_partitions, options.max_records_per_partition))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, self.schema)


class KraftpyStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{topic: {"partition": offset}}``; partitions that appear between batches are
    read from their start; ``Trigger.AvailableNow`` reads up to the offsets it found when the query
    started."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._lookup: ClientOffsetLookup | None = None
        self._target: dict | None = None
        self._last_batch_ms = time.time() * 1000
        self._latest: dict | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"], state["schema"])

    @property
    def lookup(self) -> ClientOffsetLookup:
        if self._lookup is None:
            self._lookup = ClientOffsetLookup(self.options.admin_config(), self.options.fetch_offset_num_retries,
                                              self.options.fetch_offset_retry_interval_ms)
        return self._lookup

    def _partitions_now(self) -> list:
        return subscribed_partitions(self.options.subscription, self.lookup.topics())

    def initialOffset(self) -> dict:
        tps = self._partitions_now()
        start = resolve_offsets(self.options.starting, tps, self.lookup, "starting", self.options.timestamp_strategy)
        return to_json_offsets(start)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.lookup.latest(self._partitions_now())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json_offsets(start)
        latest = dict(self._target) if self._target is not None else self.lookup.latest(self._partitions_now())
        self._latest = latest
        new = [tp for tp in latest if tp not in begin]
        base = {**self.lookup.earliest(new), **{tp: o for tp, o in begin.items() if tp in latest}}
        now_ms = time.time() * 1000
        if (self._target is None and not isinstance(limit, ReadAllAvailable)
                and should_wait_for_more(backlog_size(base, latest), self.options.min_offsets_per_trigger,
                                         self._last_batch_ms, now_ms, self.options.max_trigger_delay_ms)):
            return start
        end = rate_limit(base, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else latest
        result = to_json_offsets(end)
        if result != start:
            self._last_batch_ms = now_ms
        return result

    def reportLatestOffset(self) -> dict | None:
        return to_json_offsets(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[KafkaInputPartition]:
        begin, finish = from_json_offsets(start), from_json_offsets(end)
        new = [tp for tp in finish if tp not in begin]
        ranges = stream_ranges(begin, finish, self.lookup.earliest(new) if new else {},
                               self.options.fail_on_data_loss)
        return _partitions(split_ranges(ranges, self.options.min_partitions,
                                        self.options.max_records_per_partition))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, self.schema)

    def commit(self, end: dict) -> None:
        log.debug("micro-batch done up to %s", end)

    def stop(self) -> None:
        self._lookup = None


# -- writing ------------------------------------------------------------------------------------------


@dataclass
class KraftpyCommitMessage(WriterCommitMessage):
    records: int


def _column(batch: pa.RecordBatch, name: str | None) -> list | None:
    if name is None:
        return None
    return batch.column(batch.schema.get_field_index(name)).to_pylist()


def write_batches(options: WriteOptions, columns: WriteColumns, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of ``batches``; the number written, or a ``KafkaWriteError``."""
    from confluent_kafka import KafkaException, Producer

    failures: list[tuple[Any, str, int]] = []

    def on_delivery(error, message) -> None:
        if error is not None and not failures:
            failures.append((error, message.topic(), message.partition()))

    def fail(error, topic: str | None, partition: int | None) -> KafkaWriteError:
        where = f"{topic}-{partition}" if partition is not None and partition >= 0 else topic
        return KafkaWriteError(f"{error.name()}: {error.str()} (writing to {where})")

    try:
        producer = Producer(options.producer_config())
    except KafkaException as exc:
        raise OptionError(f"the kafka.* options are not accepted by the client: {exc}") from exc
    produce = producer.produce
    written = 0
    for batch in batches:
        n = batch.num_rows
        values = _column(batch, columns.value)
        keys = _column(batch, columns.key) or [None] * n
        topics = _column(batch, columns.topic) or [options.topic] * n
        partitions = _column(batch, columns.partition) or [None] * n
        headers = _column(batch, columns.headers) or [None] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise KafkaWriteError("INVALID_TOPIC: a row has a null 'topic' and no 'topic' option is set")
            partition = partitions[i]
            row_headers = headers[i]
            kwargs: dict[str, Any] = {"value": values[i], "key": keys[i], "on_delivery": on_delivery}
            if partition is not None:
                kwargs["partition"] = partition
            if row_headers:
                kwargs["headers"] = [(h["key"], h["value"]) for h in row_headers]
            while True:
                try:
                    produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as exc:
                    raise fail(exc.args[0], topic, partition) from exc
            if failures:
                raise fail(*failures[0])
        written += n
        producer.poll(0)
    while producer.flush(1.0) > 0:
        if failures:
            break
    if failures:
        raise fail(*failures[0])
    return written


class KraftpyBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, columns: WriteColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KraftpyCommitMessage:
        return KraftpyCommitMessage(write_batches(self.options, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, KraftpyCommitMessage))
        log.info("wrote %d records", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Records already acknowledged stay in their topics: the sink is at-least-once.
        log.warning("write aborted; records written by tasks that finished stay in their topics")


class KraftpyStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions, columns: WriteColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KraftpyCommitMessage:
        return KraftpyCommitMessage(write_batches(self.options, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, KraftpyCommitMessage))
        log.info("micro-batch %d: wrote %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted; records written by tasks that finished stay in their topics", batchId)
