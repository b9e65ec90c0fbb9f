"""One client against a running kraftpy: each feature of the compatibility matrix, tried and recorded.

    python probe.py CLIENT BOOTSTRAP PREFIX

CLIENT is confluent-kafka, kafka-python, aiokafka or kcat. The script imports nothing but the standard
library and that client (it runs in a venv of its own, with the client at the version under test) and
prints one JSON object: the client's version (and librdkafka's), and for each feature of FEATURES
{"result": "pass" | "fail" | "unsupported", "detail": "..."}. A feature is ``unsupported`` when this
version of the client has no such setting or API (found by asking the client, never by its version
number), ``fail`` with the error when kraftpy or the client got it wrong.

The topics PREFIX-data (3 partitions), PREFIX-txn, PREFIX-hdr, PREFIX-ts, PREFIX-gzip, PREFIX-snappy,
PREFIX-lz4, PREFIX-zstd and PREFIX-more (1 partition each) exist beforehand; the admin feature creates
PREFIX-admin itself (configs alters it, delete-topic deletes it). admin-more grows PREFIX-more, deletes
the records of PREFIX-hdr below offset 2 and, last, deletes the group of the group feature.
Every wait is bounded (TIMEOUT) and ends as soon as the client has what it waits for.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import shutil
import subprocess
import sys
import time

FEATURES = ("produce", "idempotence", "group", "commit", "admin", "groups-admin", "configs", "delete-topic",
            "admin-more", "headers", "timestamps", "transactions", "consumer-protocol", "gzip", "snappy", "lz4", "zstd")
CODECS = ("gzip", "snappy", "lz4", "zstd")
TIMEOUT = 30.0
RECORDS = 30
PARTITIONS = 3


class Unsupported(Exception):
    """This version of the client has no such feature."""


def values(tag: str, n: int = RECORDS) -> list[str]:
    return [f"{tag}-{i}" for i in range(n)]


def deadline() -> float:
    return time.monotonic() + TIMEOUT


def expect(got: list[str], want: list[str], what: str) -> None:
    if sorted(got) != sorted(want):
        missing = sorted(set(want) - set(got))[:3]
        extra = sorted(set(got) - set(want))[:3]
        raise AssertionError(f"{what}: read {len(got)} of {len(want)} records (missing {missing}, unexpected {extra})")


#: The topic setting the configs feature changes, and its new value.
CONFIG_KEY, CONFIG_VALUE = "retention.ms", "3600000"
#: Create times the timestamps feature gives its records (ms: 2023-11-14, one second apart), in two
#: batches of five (each flushed before the next), as a producer backfilling old records does.
BASE_TIMESTAMP = 1_700_000_000_000


def config_value(described, key: str):
    """The value of ``key`` in a client's DescribeConfigs answer, whatever its shape (dicts, lists of
    entries as tuples, objects): the first (key, value) pair found."""
    if isinstance(described, dict):
        if described.get("name") == key or described.get("config_names") == key:
            return described.get("value", described.get("config_value"))
        if key in described:
            entry = described[key]
            return getattr(entry, "value", entry.get("value") if isinstance(entry, dict) else entry)
        items = described.values()
    elif isinstance(described, (list, tuple)):
        if len(described) >= 2 and described[0] == key and isinstance(described[1], (str, type(None))):
            return described[1]
        items = described
    elif hasattr(described, "to_object"):
        items = [described.to_object()]
    elif hasattr(described, "__dict__"):
        items = [vars(described)]
    else:
        return None
    for item in items:
        found = config_value(item, key)
        if found is not None:
            return found
    return None


def committed_total(answer) -> int:
    """The sum of the committed offsets in a client's answer (OffsetAndMetadata values, nested anyhow)."""
    if hasattr(answer, "offset") and hasattr(answer, "metadata"):
        return answer.offset
    if isinstance(answer, dict):
        return sum(committed_total(v) for v in answer.values())
    if isinstance(answer, (list, tuple)):
        return sum(committed_total(v) for v in answer)
    return 0


def first_at_or_after(timestamps: list[int], wanted: int) -> int:
    """The offset ListOffsets gives for ``wanted``: the first record whose timestamp is at or after it."""
    return next((i for i, ts in enumerate(timestamps) if ts >= wanted), len(timestamps))


def wait_for(check, what: str) -> None:
    """Until ``check()`` holds (metadata reaching a client's view), bounded by TIMEOUT."""
    end = deadline()
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"no {what} after {TIMEOUT:g} s")
        time.sleep(0.1)


class Steps:
    """Several admin calls of one feature: each named, run in order; the feature fails at the first
    that fails (naming it), is unsupported when the client has none, and passes naming them all."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, object]] = []

    def add(self, name: str):
        def register(call):
            self.steps.append((name, call))
            return call
        return register

    def _check(self) -> None:
        if not self.steps:
            raise Unsupported("none of these admin calls in this version")

    def _outcome(self, failed: list[str]) -> str:
        passed = [name for name, _ in self.steps if not any(f.startswith(f"{name}: ") for f in failed)]
        if failed:
            raise AssertionError("; ".join(failed) + (f" (passed: {', '.join(passed)})" if passed else ""))
        return ", ".join(passed)

    def run(self) -> str:
        """Every step, even after one failed: the feature names each that failed and those that passed."""
        self._check()
        failed = []
        for name, call in self.steps:
            try:
                call()
            except Exception as exc:
                failed.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return self._outcome(failed)

    async def run_async(self) -> str:
        self._check()
        failed = []
        for name, call in self.steps:
            try:
                await call()
            except Exception as exc:
                failed.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return self._outcome(failed)


class Probe:
    """Runs each feature and records its outcome."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.results: dict[str, dict[str, str]] = {}
        self.info: dict[str, str] = {}
        #: What PREFIX-data holds: the values of every produce that passed.
        self.sent: list[str] = []

    def topic(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def record(self, feature: str, call, *args) -> None:
        try:
            detail = call(*args)
        except Unsupported as exc:
            self.results[feature] = {"result": "unsupported", "detail": str(exc)}
        except Exception as exc:  # a failure of any kind is this feature's result
            # The probe's own checks say what they found; a client's error keeps its type's name.
            text = str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"
            line = re.sub(r"\b(\w+): \1: ", r"\1: ", text.splitlines()[0] if text else type(exc).__name__)[:300]
            # Where the client is installed says nothing about kraftpy: only a file's name is kept.
            line = re.sub(r" \(/[^()]*\)", "", line)
            line = re.sub(r"/(?:[^/\s'\"]+/)+([^/\s'\"]+)", r"\1", line)
            self.results[feature] = {"result": "fail", "detail": line}
        else:
            self.results[feature] = {"result": "pass", "detail": detail or ""}

    def skip(self, feature: str, because: str) -> None:
        self.results[feature] = {"result": "fail", "detail": because}

    def report(self) -> dict:
        return {**self.info, "features": {f: self.results.get(f, {"result": "fail", "detail": "not run"})
                                          for f in FEATURES}}


# --- confluent-kafka (librdkafka) --------------------------------------------------------------------

def confluent(probe: Probe) -> None:
    import confluent_kafka
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    probe.info.update(version=getattr(confluent_kafka, "__version__", confluent_kafka.version()[0]),
                      librdkafka=confluent_kafka.libversion()[0])
    base = {"bootstrap.servers": probe.bootstrap, "log_level": 0}

    def settable(key: str, value: str) -> None:
        try:
            Consumer({**base, "group.id": probe.topic("g"), key: value}).close()
        except KafkaException as exc:
            if "No such configuration property" in str(exc) or "Invalid value" in str(exc):
                raise Unsupported(f"no {key}={value} in librdkafka {probe.info['librdkafka']}") from None
            raise

    def produce(topic: str, items: list[str], **config) -> None:
        producer = Producer({**base, "linger.ms": 5, **config})
        errors: list = []
        for i, value in enumerate(items):
            producer.produce(topic, value=value.encode(), key=str(i).encode(),
                             on_delivery=lambda err, msg: err and errors.append(err))
        left = producer.flush(TIMEOUT)
        if left or errors:
            raise AssertionError(f"{left} undelivered, errors {errors[:3]}")

    def read(consumer, want: int) -> list[str]:
        got: list[str] = []
        end = deadline()
        while len(got) < want and time.monotonic() < end:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            got.append(msg.value().decode())
        return got

    data = probe.topic("data")

    def produce_acks_all() -> str:
        produce(data, values("a"), acks="all")
        probe.sent += values("a")
        return "acks=all"

    def idempotence() -> str:
        produce(data, values("i"), acks="all", **{"enable.idempotence": True})
        probe.sent += values("i")
        return "enable.idempotence=true"

    state: dict = {}

    def group() -> str:
        consumer = Consumer({**base, "group.id": probe.topic("g"), "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe([data])
        state["consumer"] = consumer
        expect(read(consumer, len(probe.sent)), probe.sent, "subscribe()")
        return "subscribe(), range"

    def commit() -> str:
        consumer = state.get("consumer")
        if consumer is None:
            raise AssertionError("no group member (group failed)")
        consumer.commit(asynchronous=False)
        consumer.close()
        again = Consumer({**base, "group.id": probe.topic("g"), "enable.auto.commit": False})
        committed = again.committed([TopicPartition(data, p) for p in range(PARTITIONS)], timeout=TIMEOUT)
        again.close()
        total = sum(tp.offset for tp in committed)
        if total != len(probe.sent):
            raise AssertionError(f"committed offsets add up to {total}, not {len(probe.sent)}")
        return "commit(), committed() from a new consumer"

    def admin() -> str:
        client = AdminClient(base)
        name = probe.topic("admin")
        client.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])[name].result(TIMEOUT)
        end = deadline()
        while True:
            meta = client.list_topics(name, timeout=TIMEOUT).topics[name]
            if meta.error is None and len(meta.partitions) == 2:
                break
            if time.monotonic() > end:
                raise AssertionError(f"{name}: metadata says {meta.error} with {len(meta.partitions)} partitions")
            time.sleep(0.1)
        how = "create_topics, list_topics"
        if hasattr(client, "describe_topics"):
            from confluent_kafka import TopicCollection

            described = client.describe_topics(TopicCollection([name]))[name].result(TIMEOUT)
            if len(described.partitions) != 2:
                raise AssertionError(f"describe_topics: {len(described.partitions)} partitions")
            how += ", describe_topics"
        return how

    def transactions() -> str:
        topic = probe.topic("txn")
        producer = Producer({**base, "transactional.id": probe.topic("tx"), "linger.ms": 5})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        for value in values("committed", 10):
            producer.produce(topic, value=value.encode())
        producer.commit_transaction(TIMEOUT)
        producer.begin_transaction()
        for value in values("aborted", 5):
            producer.produce(topic, value=value.encode())
        producer.flush(TIMEOUT)
        producer.abort_transaction(TIMEOUT)
        consumer = Consumer({**base, "group.id": probe.topic("txn-reader"), "isolation.level": "read_committed",
                             "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[str] = []
        end = deadline()
        while time.monotonic() < end:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    break
                raise KafkaException(msg.error())
            got.append(msg.value().decode())
        consumer.close()
        expect(got, values("committed", 10), "read_committed")
        return "commit and abort; read_committed sees the committed only"

    def consumer_protocol() -> str:
        settable("group.protocol", "consumer")
        consumer = Consumer({**base, "group.id": probe.topic("g848"), "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([data])
        try:
            expect(read(consumer, len(probe.sent)), probe.sent, "group.protocol=consumer")
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return "group.protocol=consumer: subscribe(), commit()"

    def admin_more() -> str:
        from confluent_kafka.admin import NewPartitions

        client = AdminClient(base)
        more, hdr, group_id = probe.topic("more"), probe.topic("hdr"), probe.topic("g")
        steps = Steps()

        @steps.add("create_partitions")
        def grow() -> None:
            client.create_partitions([NewPartitions(more, 2)])[more].result(TIMEOUT)
            wait_for(lambda: len(client.list_topics(more, timeout=TIMEOUT).topics[more].partitions) == 2,
                     f"{more} with 2 partitions in metadata")

        if hasattr(client, "describe_cluster"):
            @steps.add("describe_cluster")
            def cluster() -> None:
                described = client.describe_cluster().result(TIMEOUT)
                if not described.cluster_id or not described.nodes:
                    raise AssertionError(f"describe_cluster: {described}")

        if hasattr(client, "list_offsets"):
            @steps.add("list_offsets")
            def latest() -> None:
                from confluent_kafka.admin import OffsetSpec

                futures = client.list_offsets({TopicPartition(hdr, 0): OffsetSpec.latest()})
                if [f.result(TIMEOUT).offset for f in futures.values()] != [5]:
                    raise AssertionError("list_offsets: latest is not 5")

        if hasattr(client, "delete_records"):
            @steps.add("delete_records")
            def delete_records() -> None:
                futures = client.delete_records([TopicPartition(hdr, 0, 2)])
                if [f.result(TIMEOUT).low_watermark for f in futures.values()] != [2]:
                    raise AssertionError("delete_records: the low watermark is not 2")

        @steps.add("alter_consumer_group_offsets")
        def alter_offsets() -> None:
            from confluent_kafka import ConsumerGroupTopicPartitions

            request = ConsumerGroupTopicPartitions(group_id, [TopicPartition(probe.topic("data"), 0, 1)])
            client.alter_consumer_group_offsets([request])[group_id].result(TIMEOUT)
            got = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
                group_id, [TopicPartition(probe.topic("data"), 0)])])[group_id].result(TIMEOUT)
            if [tp.offset for tp in got.topic_partitions] != [1]:
                raise AssertionError(f"committed offset after alter_consumer_group_offsets: {got.topic_partitions}")

        @steps.add("delete_consumer_groups")
        def delete_group() -> None:
            client.delete_consumer_groups([group_id])[group_id].result(TIMEOUT)
            listed = client.list_consumer_groups().result(TIMEOUT)
            if group_id in {g.group_id for g in listed.valid}:
                raise AssertionError(f"{group_id} still listed after delete_consumer_groups")

        return steps.run()

    def codec(name: str) -> str:
        topic = probe.topic(name)
        produce(topic, values(name, 10), **{"compression.type": name})
        consumer = Consumer({**base, "group.id": probe.topic(f"r-{name}"), "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            expect(read(consumer, 10), values(name, 10), name)
        finally:
            consumer.close()
        return ""

    def groups_admin() -> str:
        client = AdminClient(base)
        group_id = probe.topic("g")
        listed = client.list_consumer_groups().result(TIMEOUT)
        if group_id not in {g.group_id for g in listed.valid}:
            raise AssertionError(f"list_consumer_groups: {group_id} not among {[g.group_id for g in listed.valid]}")
        described = client.describe_consumer_groups([group_id])[group_id].result(TIMEOUT)
        if described.group_id != group_id or described.members:
            raise AssertionError(f"describe_consumer_groups: {described}")
        from confluent_kafka import ConsumerGroupTopicPartitions

        offsets = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)])[group_id]
        total = sum(tp.offset for tp in offsets.result(TIMEOUT).topic_partitions)
        if total != len(probe.sent):
            raise AssertionError(f"list_consumer_group_offsets: offsets add up to {total}, not {len(probe.sent)}")
        return "list_consumer_groups, describe_consumer_groups, list_consumer_group_offsets"

    def configs() -> str:
        from confluent_kafka.admin import ConfigResource

        client = AdminClient(base)
        name = probe.topic("admin")
        if hasattr(client, "incremental_alter_configs"):
            from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

            how = "incremental_alter_configs"
            change = ConfigResource("topic", name, incremental_configs=[
                ConfigEntry(CONFIG_KEY, CONFIG_VALUE, incremental_operation=AlterConfigOpType.SET)])
            futures = client.incremental_alter_configs([change])
        else:
            how = "alter_configs"
            futures = client.alter_configs([ConfigResource("topic", name, set_config={CONFIG_KEY: CONFIG_VALUE})])
        for future in futures.values():
            future.result(TIMEOUT)
        resource = ConfigResource("topic", name)
        described = client.describe_configs([resource])[resource].result(TIMEOUT)
        if described[CONFIG_KEY].value != CONFIG_VALUE:
            raise AssertionError(f"describe_configs after {how}: {CONFIG_KEY}={described[CONFIG_KEY].value}")
        return f"{how}, describe_configs"

    def delete_topic() -> str:
        client = AdminClient(base)
        name = probe.topic("admin")
        client.delete_topics([name], operation_timeout=TIMEOUT)[name].result(TIMEOUT)
        end = deadline()
        while name in client.list_topics(timeout=TIMEOUT).topics:
            if time.monotonic() > end:
                raise AssertionError(f"{name} still listed after delete_topics")
            time.sleep(0.1)
        return "delete_topics"

    def headers() -> str:
        topic = probe.topic("hdr")
        producer = Producer({**base, "acks": "all"})
        for i in range(5):
            producer.produce(topic, value=b"v", headers=[("h", f"{i}".encode()), ("k", b"")])
        if producer.flush(TIMEOUT):
            raise AssertionError("undelivered")
        consumer = Consumer({**base, "group.id": probe.topic("r-hdr"), "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        end = deadline()
        while len(got) < 5 and time.monotonic() < end:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                got.append([(k, v.decode()) for k, v in msg.headers() or []])
        consumer.close()
        if got != [[("h", f"{i}"), ("k", "")] for i in range(5)]:
            raise AssertionError(f"headers read back: {got}")
        return ""

    def timestamps() -> str:
        topic = probe.topic("ts")
        producer = Producer({**base, "acks": "all", "linger.ms": 1000})
        for half in (range(5), range(5, 10)):
            for i in half:
                producer.produce(topic, value=b"v", timestamp=BASE_TIMESTAMP + 1000 * i)
            if producer.flush(TIMEOUT):
                raise AssertionError("undelivered")
        consumer = Consumer({**base, "group.id": probe.topic("r-ts"), "enable.auto.commit": False})
        try:
            for wanted, offset in ((BASE_TIMESTAMP + 4500, 5), (BASE_TIMESTAMP, 0), (BASE_TIMESTAMP + 60_000, -1)):
                got = consumer.offsets_for_times([TopicPartition(topic, 0, wanted)], timeout=TIMEOUT)[0]
                if got.error or got.offset != offset:
                    raise AssertionError(f"offsets_for_times({wanted}): {got.offset} {got.error}, not {offset}")
        finally:
            consumer.close()
        return "offsets_for_times"

    probe.record("produce", produce_acks_all)
    probe.record("idempotence", idempotence)
    probe.record("group", group)
    probe.record("commit", commit)
    probe.record("groups-admin", groups_admin)
    probe.record("admin", admin)
    probe.record("configs", configs)
    probe.record("delete-topic", delete_topic)
    probe.record("headers", headers)
    probe.record("timestamps", timestamps)
    probe.record("admin-more", admin_more)
    probe.record("transactions", transactions)
    probe.record("consumer-protocol", consumer_protocol)
    for name in CODECS:
        probe.record(name, codec, name)


# --- kafka-python ------------------------------------------------------------------------------------

def kafka_python(probe: Probe) -> None:
    import kafka
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    probe.info.update(version=kafka.__version__)
    base = {"bootstrap_servers": probe.bootstrap}
    data = probe.topic("data")

    def has(kind, key: str) -> None:
        if key not in kind.DEFAULT_CONFIG:
            raise Unsupported(f"KafkaProducer has no {key}" if kind is KafkaProducer else f"{kind.__name__} has no {key}")

    def produce(topic: str, items: list[str], **config) -> None:
        producer = KafkaProducer(**base, linger_ms=5, **config)
        try:
            futures = [producer.send(topic, value=v.encode(), key=str(i).encode()) for i, v in enumerate(items)]
            producer.flush(TIMEOUT)
            for future in futures:
                future.get(TIMEOUT)
        finally:
            producer.close(TIMEOUT)

    def read(consumer, want: int) -> list[str]:
        got: list[str] = []
        end = deadline()
        while len(got) < want and time.monotonic() < end:
            for records in consumer.poll(timeout_ms=1000).values():
                got += [r.value.decode() for r in records]
        return got

    def produce_acks_all() -> str:
        produce(data, values("a"), acks="all")
        probe.sent += values("a")
        return "acks=all"

    def idempotence() -> str:
        has(KafkaProducer, "enable_idempotence")
        produce(data, values("i"), acks="all", enable_idempotence=True)
        probe.sent += values("i")
        return "enable_idempotence=True"

    state: dict = {}

    def group() -> str:
        consumer = KafkaConsumer(**base, group_id=probe.topic("g"), auto_offset_reset="earliest",
                                 enable_auto_commit=False)
        consumer.subscribe([data])
        state["consumer"] = consumer
        want = probe.sent
        expect(read(consumer, len(want)), want, "subscribe()")
        return "subscribe()"

    def commit() -> str:
        consumer = state.get("consumer")
        if consumer is None:
            raise AssertionError("no group member (group failed)")
        consumer.commit()
        positions = {p: consumer.position(TopicPartition(data, p)) for p in range(PARTITIONS)}
        consumer.close()
        again = KafkaConsumer(**base, group_id=probe.topic("g"), enable_auto_commit=False)
        try:
            committed = {p: again.committed(TopicPartition(data, p)) for p in range(PARTITIONS)}
        finally:
            again.close()
        if committed != positions:
            raise AssertionError(f"committed {committed}, positions were {positions}")
        return "commit(), committed() from a new consumer"

    def admin() -> str:
        from kafka.admin import KafkaAdminClient, NewTopic

        client = KafkaAdminClient(**base)
        name = probe.topic("admin")
        try:
            client.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)], timeout_ms=int(TIMEOUT * 1000))
            described = client.describe_topics([name])
        finally:
            client.close()
        found = [t for t in described if name in (t.get("topic"), t.get("name"))]
        if not found or len(found[0]["partitions"]) != 2:
            raise AssertionError(f"describe_topics: {described}")
        return "create_topics, describe_topics"

    def transactions() -> str:
        has(KafkaProducer, "transactional_id")
        has(KafkaConsumer, "isolation_level")
        topic = probe.topic("txn")
        producer = KafkaProducer(**base, transactional_id=probe.topic("tx"), linger_ms=5)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            for value in values("committed", 10):
                producer.send(topic, value=value.encode())
            producer.commit_transaction()
            producer.begin_transaction()
            for value in values("aborted", 5):
                producer.send(topic, value=value.encode())
            producer.flush(TIMEOUT)
            producer.abort_transaction()
        finally:
            producer.close(TIMEOUT)
        consumer = KafkaConsumer(**base, isolation_level="read_committed", enable_auto_commit=False)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end_offset = consumer.end_offsets([tp])[tp]
        got: list[str] = []
        stop = deadline()
        while consumer.position(tp) < end_offset and time.monotonic() < stop:
            for records in consumer.poll(timeout_ms=1000).values():
                got += [r.value.decode() for r in records]
        consumer.close()
        expect(got, values("committed", 10), "read_committed")
        return "commit and abort; read_committed sees the committed only"

    def consumer_protocol() -> str:
        has(KafkaConsumer, "group_protocol")
        consumer = KafkaConsumer(**base, group_id=probe.topic("g848"), group_protocol="consumer",
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        consumer.subscribe([data])
        try:
            read(consumer, 1)
        finally:
            consumer.close()
        return "group_protocol=consumer"

    def admin_more() -> str:
        from kafka.admin import KafkaAdminClient, NewPartitions

        client = KafkaAdminClient(**base)
        more, hdr, group_id = probe.topic("more"), probe.topic("hdr"), probe.topic("g")
        steps = Steps()

        def partitions(topic: str) -> int:
            meta = client.describe_topics([topic])
            return len(meta[0]["partitions"]) if meta and not meta[0].get("error_code") else 0

        def low_watermark(topic: str) -> int:
            consumer = KafkaConsumer(**base)
            try:
                tp = TopicPartition(topic, 0)
                return consumer.beginning_offsets([tp])[tp]
            finally:
                consumer.close()

        @steps.add("create_partitions")
        def grow() -> None:
            client.create_partitions({more: NewPartitions(2)})
            wait_for(lambda: partitions(more) == 2, f"{more} with 2 partitions in metadata")

        @steps.add("describe_cluster")
        def cluster() -> None:
            described = client.describe_cluster()
            if not described.get("cluster_id") or not described.get("brokers"):
                raise AssertionError(f"describe_cluster: {described}")

        if hasattr(client, "delete_records"):
            @steps.add("delete_records")
            def delete_records() -> None:
                client.delete_records({TopicPartition(hdr, 0): 2})
                if low_watermark(hdr) != 2:
                    raise AssertionError(f"delete_records: the low watermark is {low_watermark(hdr)}, not 2")

        if hasattr(client, "describe_log_dirs"):
            @steps.add("describe_log_dirs")
            def log_dirs() -> None:
                if more not in repr(client.describe_log_dirs()):
                    raise AssertionError(f"describe_log_dirs does not list {more}")

        for name in ("describe_features", "describe_metadata_quorum", "list_transactions"):
            if hasattr(client, name):
                steps.add(name)(getattr(client, name))

        delete = getattr(client, "delete_groups", None) or client.delete_consumer_groups
        listing = getattr(client, "list_groups", None) or client.list_consumer_groups

        @steps.add(delete.__name__)
        def delete_group() -> None:
            delete([group_id])
            if group_id in repr(listing()):
                raise AssertionError(f"{group_id} still listed after {delete.__name__}")

        try:
            return steps.run()
        finally:
            client.close()

    def codec(name: str) -> str:
        topic = probe.topic(name)
        produce(topic, values(name, 10), compression_type=name)
        consumer = KafkaConsumer(**base, enable_auto_commit=False)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        try:
            expect(read(consumer, 10), values(name, 10), name)
        finally:
            consumer.close()
        return ""

    def groups_admin() -> str:
        from kafka.admin import KafkaAdminClient

        client = KafkaAdminClient(**base)
        group_id = probe.topic("g")
        try:
            if hasattr(client, "list_groups"):
                how = "list_groups, describe_groups, list_group_offsets"
                listed, described = client.list_groups(), client.describe_groups([group_id])
                offsets = client.list_group_offsets([group_id])
            else:
                how = "list_consumer_groups, describe_consumer_groups, list_consumer_group_offsets"
                listed, described = client.list_consumer_groups(), client.describe_consumer_groups([group_id])
                offsets = client.list_consumer_group_offsets(group_id)
        finally:
            client.close()
        if group_id not in repr(listed):
            raise AssertionError(f"listing has no {group_id}: {listed!r:.200}")
        if group_id not in repr(described) or "Empty" not in repr(described):
            raise AssertionError(f"described: {described!r:.200}")
        if committed_total(offsets) != len(probe.sent):
            raise AssertionError(f"offsets add up to {committed_total(offsets)}, not {len(probe.sent)}")
        return how

    def configs() -> str:
        from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

        client = KafkaAdminClient(**base)
        name = probe.topic("admin")
        try:
            client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={CONFIG_KEY: CONFIG_VALUE})])
            described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        finally:
            client.close()
        if config_value(described, CONFIG_KEY) != CONFIG_VALUE:
            raise AssertionError(f"describe_configs after alter_configs: {CONFIG_KEY}={config_value(described, CONFIG_KEY)}")
        return "alter_configs, describe_configs"

    def delete_topic() -> str:
        from kafka.admin import KafkaAdminClient

        client = KafkaAdminClient(**base)
        name = probe.topic("admin")
        try:
            client.delete_topics([name])
            end = deadline()
            while name in client.list_topics():
                if time.monotonic() > end:
                    raise AssertionError(f"{name} still listed after delete_topics")
                time.sleep(0.1)
        finally:
            client.close()
        return "delete_topics"

    def headers() -> str:
        topic = probe.topic("hdr")
        producer = KafkaProducer(**base, acks="all")
        try:
            sent = [producer.send(topic, value=b"v", headers=[("h", f"{i}".encode()), ("k", b"")]) for i in range(5)]
            producer.flush(TIMEOUT)
            for future in sent:
                future.get(TIMEOUT)
        finally:
            producer.close(TIMEOUT)
        consumer = KafkaConsumer(**base, enable_auto_commit=False)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list = []
        end = deadline()
        while len(got) < 5 and time.monotonic() < end:
            for records in consumer.poll(timeout_ms=1000).values():
                got += [[(k, v.decode()) for k, v in r.headers] for r in records]
        consumer.close()
        if got != [[("h", f"{i}"), ("k", "")] for i in range(5)]:
            raise AssertionError(f"headers read back: {got}")
        return ""

    def timestamps() -> str:
        topic = probe.topic("ts")
        producer = KafkaProducer(**base, acks="all", linger_ms=1000)
        try:
            offsets = []
            for half in (range(5), range(5, 10)):
                sent = [producer.send(topic, value=b"v", timestamp_ms=BASE_TIMESTAMP + 1000 * i) for i in half]
                producer.flush(TIMEOUT)
                offsets += [future.get(TIMEOUT).offset for future in sent]
            if offsets != list(range(10)):
                raise AssertionError(f"records written at offsets {offsets}")
        finally:
            producer.close(TIMEOUT)
        consumer = KafkaConsumer(**base, enable_auto_commit=False)
        tp = TopicPartition(topic, 0)
        try:
            for wanted, offset in ((BASE_TIMESTAMP + 4500, 5), (BASE_TIMESTAMP, 0), (BASE_TIMESTAMP + 60_000, None)):
                found = consumer.offsets_for_times({tp: wanted})[tp]
                got = None if found is None else found.offset
                if got != offset:
                    raise AssertionError(f"offsets_for_times({wanted}): {got}, not {offset}")
        finally:
            consumer.close()
        return "offsets_for_times"

    probe.record("produce", produce_acks_all)
    probe.record("idempotence", idempotence)
    probe.record("group", group)
    probe.record("commit", commit)
    probe.record("groups-admin", groups_admin)
    probe.record("admin", admin)
    probe.record("configs", configs)
    probe.record("delete-topic", delete_topic)
    probe.record("headers", headers)
    probe.record("timestamps", timestamps)
    probe.record("admin-more", admin_more)
    probe.record("transactions", transactions)
    probe.record("consumer-protocol", consumer_protocol)
    for name in CODECS:
        probe.record(name, codec, name)


# --- aiokafka ----------------------------------------------------------------------------------------

def aiokafka_client(probe: Probe) -> None:
    import aiokafka
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    probe.info.update(version=aiokafka.__version__)
    data = probe.topic("data")
    loop = asyncio.new_event_loop()

    def run(coro_fn):
        def call(*args):
            return loop.run_until_complete(asyncio.wait_for(coro_fn(*args), 3 * TIMEOUT))
        return call

    def has(kind, key: str) -> None:
        if key not in inspect.signature(kind.__init__).parameters:
            raise Unsupported(f"{kind.__name__} has no {key}")

    async def produce(topic: str, items: list[str], **config) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=probe.bootstrap, linger_ms=5, **config)
        await producer.start()
        try:
            for i, value in enumerate(items):
                await producer.send(topic, value=value.encode(), key=str(i).encode())
            await producer.flush()
        finally:
            await producer.stop()

    async def read(consumer, want: int) -> list[str]:
        got: list[str] = []
        end = deadline()
        while len(got) < want and time.monotonic() < end:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got += [r.value.decode() for r in records]
        return got

    @run
    async def produce_acks_all() -> str:
        await produce(data, values("a"), acks="all")
        probe.sent += values("a")
        return "acks=all"

    @run
    async def idempotence() -> str:
        has(AIOKafkaProducer, "enable_idempotence")
        await produce(data, values("i"), acks="all", enable_idempotence=True)
        probe.sent += values("i")
        return "enable_idempotence=True"

    state: dict = {}

    @run
    async def group() -> str:
        consumer = AIOKafkaConsumer(data, bootstrap_servers=probe.bootstrap, group_id=probe.topic("g"),
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        state["consumer"] = consumer
        want = probe.sent
        expect(await read(consumer, len(want)), want, "subscribe")
        return "subscribe, round-robin"

    @run
    async def commit() -> str:
        consumer = state.get("consumer")
        if consumer is None:
            raise AssertionError("no group member (group failed)")
        await consumer.commit()
        positions = {p: await consumer.position(TopicPartition(data, p)) for p in range(PARTITIONS)}
        await consumer.stop()
        again = AIOKafkaConsumer(bootstrap_servers=probe.bootstrap, group_id=probe.topic("g"),
                                 enable_auto_commit=False)
        await again.start()
        try:
            committed = {p: await again.committed(TopicPartition(data, p)) for p in range(PARTITIONS)}
        finally:
            await again.stop()
        if committed != positions:
            raise AssertionError(f"committed {committed}, positions were {positions}")
        return "commit(), committed() from a new consumer"

    @run
    async def admin() -> str:
        try:
            from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        except ImportError:
            raise Unsupported("no aiokafka.admin in this version") from None
        client = AIOKafkaAdminClient(bootstrap_servers=probe.bootstrap)
        await client.start()
        name = probe.topic("admin")
        try:
            await client.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
            described = await client.describe_topics([name])
        finally:
            await client.close()
        found = [t for t in described if name in (t.get("topic"), t.get("name"))]
        if not found or len(found[0]["partitions"]) != 2:
            raise AssertionError(f"describe_topics: {described}")
        return "create_topics, describe_topics"

    @run
    async def transactions() -> str:
        has(AIOKafkaProducer, "transactional_id")
        topic = probe.topic("txn")
        producer = AIOKafkaProducer(bootstrap_servers=probe.bootstrap, transactional_id=probe.topic("tx"))
        await producer.start()
        try:
            async with producer.transaction():
                for value in values("committed", 10):
                    await producer.send(topic, value=value.encode())
            await producer.begin_transaction()
            for value in values("aborted", 5):
                await producer.send(topic, value=value.encode())
            await producer.flush()
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=probe.bootstrap, isolation_level="read_committed",
                                    enable_auto_commit=False)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end_offset = (await consumer.end_offsets([tp]))[tp]
        got: list[str] = []
        stop = deadline()
        try:
            while await consumer.position(tp) < end_offset and time.monotonic() < stop:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got += [r.value.decode() for r in records]
        finally:
            await consumer.stop()
        expect(got, values("committed", 10), "read_committed")
        return "commit and abort; read_committed sees the committed only"

    def consumer_protocol() -> str:
        has(AIOKafkaConsumer, "group_protocol")
        raise AssertionError("aiokafka names group_protocol: the probe does not try it yet")

    @run
    async def admin_more() -> str:
        from aiokafka.admin import AIOKafkaAdminClient
        try:
            from aiokafka.admin import NewPartitions
        except ImportError:  # aiokafka before 0.9 takes kafka-python's
            from kafka.admin import NewPartitions

        client = AIOKafkaAdminClient(bootstrap_servers=probe.bootstrap)
        await client.start()
        more, hdr = probe.topic("more"), probe.topic("hdr")
        steps = Steps()

        async def partitions(topic: str) -> int:
            meta = await client.describe_topics([topic])
            return len(meta[0]["partitions"]) if meta and not meta[0].get("error_code") else 0

        @steps.add("create_partitions")
        async def grow() -> None:
            await client.create_partitions({more: NewPartitions(2)})
            end = deadline()
            while await partitions(more) != 2:
                if time.monotonic() > end:
                    raise AssertionError(f"{more} has not 2 partitions in metadata")
                await asyncio.sleep(0.1)

        @steps.add("describe_cluster")
        async def cluster() -> None:
            described = await client.describe_cluster()
            if not described.get("cluster_id") or not described.get("brokers"):
                raise AssertionError(f"describe_cluster: {described}")

        if hasattr(client, "delete_records"):
            @steps.add("delete_records")
            async def delete_records() -> None:
                from aiokafka.admin import RecordsToDelete

                low = await client.delete_records({TopicPartition(hdr, 0): RecordsToDelete(2)})
                if list(low.values()) != [2]:
                    raise AssertionError(f"delete_records: low watermarks {low}")

        try:
            return await steps.run_async()
        finally:
            await client.close()

    def codec(name: str) -> str:
        @run
        async def go() -> str:
            topic = probe.topic(name)
            await produce(topic, values(name, 10), compression_type=name)
            consumer = AIOKafkaConsumer(bootstrap_servers=probe.bootstrap, enable_auto_commit=False)
            await consumer.start()
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            try:
                expect(await read(consumer, 10), values(name, 10), name)
            finally:
                await consumer.stop()
            return ""
        return go()

    @run
    async def groups_admin() -> str:
        from aiokafka.admin import AIOKafkaAdminClient

        client = AIOKafkaAdminClient(bootstrap_servers=probe.bootstrap)
        await client.start()
        group_id = probe.topic("g")
        try:
            listed = await client.list_consumer_groups()
            described = await client.describe_consumer_groups([group_id])
            offsets = await client.list_consumer_group_offsets(group_id)
        finally:
            await client.close()
        if group_id not in repr(listed):
            raise AssertionError(f"listing has no {group_id}: {listed!r:.200}")
        if group_id not in repr(described) or "Empty" not in repr(described):
            raise AssertionError(f"described: {described!r:.200}")
        if committed_total(offsets) != len(probe.sent):
            raise AssertionError(f"offsets add up to {committed_total(offsets)}, not {len(probe.sent)}")
        return "list_consumer_groups, describe_consumer_groups, list_consumer_group_offsets"

    @run
    async def configs() -> str:
        from aiokafka.admin import AIOKafkaAdminClient
        try:
            from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
        except ImportError:  # aiokafka before 0.9 takes kafka-python's
            from kafka.admin import ConfigResource, ConfigResourceType

        client = AIOKafkaAdminClient(bootstrap_servers=probe.bootstrap)
        await client.start()
        name = probe.topic("admin")
        try:
            await client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                                       configs={CONFIG_KEY: CONFIG_VALUE})])
            described = await client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        finally:
            await client.close()
        if config_value(described, CONFIG_KEY) != CONFIG_VALUE:
            raise AssertionError(f"describe_configs after alter_configs: {CONFIG_KEY}={config_value(described, CONFIG_KEY)}")
        return "alter_configs, describe_configs"

    @run
    async def delete_topic() -> str:
        from aiokafka.admin import AIOKafkaAdminClient

        client = AIOKafkaAdminClient(bootstrap_servers=probe.bootstrap)
        await client.start()
        name = probe.topic("admin")
        try:
            await client.delete_topics([name])
            end = deadline()
            while name in await client.list_topics():
                if time.monotonic() > end:
                    raise AssertionError(f"{name} still listed after delete_topics")
                await asyncio.sleep(0.1)
        finally:
            await client.close()
        return "delete_topics"

    @run
    async def headers() -> str:
        topic = probe.topic("hdr")
        producer = AIOKafkaProducer(bootstrap_servers=probe.bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(5):
                await producer.send(topic, value=b"v", headers=[("h", f"{i}".encode()), ("k", b"")])
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=probe.bootstrap, enable_auto_commit=False)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list = []
        end = deadline()
        try:
            while len(got) < 5 and time.monotonic() < end:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got += [[(k, v.decode()) for k, v in r.headers] for r in records]
        finally:
            await consumer.stop()
        if got != [[("h", f"{i}"), ("k", "")] for i in range(5)]:
            raise AssertionError(f"headers read back: {got}")
        return ""

    @run
    async def timestamps() -> str:
        topic = probe.topic("ts")
        producer = AIOKafkaProducer(bootstrap_servers=probe.bootstrap, acks="all", linger_ms=1000)
        await producer.start()
        try:
            for half in (range(5), range(5, 10)):
                sent = [await producer.send(topic, value=b"v", timestamp_ms=BASE_TIMESTAMP + 1000 * i) for i in half]
                await producer.flush()
                for future in sent:
                    await future
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=probe.bootstrap, enable_auto_commit=False)
        await consumer.start()
        tp = TopicPartition(topic, 0)
        try:
            for wanted, offset in ((BASE_TIMESTAMP + 4500, 5), (BASE_TIMESTAMP, 0), (BASE_TIMESTAMP + 60_000, None)):
                found = (await consumer.offsets_for_times({tp: wanted}))[tp]
                got = None if found is None else found.offset
                if got != offset:
                    raise AssertionError(f"offsets_for_times({wanted}): {got}, not {offset}")
        finally:
            await consumer.stop()
        return "offsets_for_times"

    probe.record("produce", produce_acks_all)
    probe.record("idempotence", idempotence)
    probe.record("group", group)
    probe.record("commit", commit)
    probe.record("groups-admin", groups_admin)
    probe.record("admin", admin)
    probe.record("configs", configs)
    probe.record("delete-topic", delete_topic)
    probe.record("headers", headers)
    probe.record("timestamps", timestamps)
    probe.record("admin-more", admin_more)
    probe.record("transactions", transactions)
    probe.record("consumer-protocol", consumer_protocol)
    for name in CODECS:
        probe.record(name, codec, name)
    loop.close()


# --- kcat --------------------------------------------------------------------------------------------

def kcat(probe: Probe) -> None:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    if exe is None:
        raise SystemExit("kcat is not on PATH")
    banner = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=TIMEOUT).stdout
    version = re.search(r"Version (\S+)", banner)
    librdkafka = re.search(r"librdkafka (\S+)", banner)
    probe.info.update(version=version[1] if version else "?", librdkafka=librdkafka[1] if librdkafka else "?")
    data = probe.topic("data")

    def run(*argv: str, stdin: str = "") -> str:
        done = subprocess.run([exe, "-b", probe.bootstrap, "-X", "log_level=0", *argv], input=stdin,
                              capture_output=True, text=True, timeout=2 * TIMEOUT)
        if done.returncode != 0:
            text = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise RuntimeError(f"kcat exited {done.returncode}: {text[-1] if text else ''}")
        return done.stdout

    def unknown_property(key: str, value: str) -> None:
        done = subprocess.run([exe, "-b", probe.bootstrap, "-X", f"{key}={value}", "-L", "-m", "1"],
                              capture_output=True, text=True, timeout=TIMEOUT)
        if "No such configuration property" in done.stderr or "Invalid value" in done.stderr:
            raise Unsupported(f"no {key}={value} in librdkafka {probe.info['librdkafka']}")

    def produce(topic: str, items: list[str], *extra: str) -> None:
        run("-P", "-t", topic, "-X", "acks=all", *extra, stdin="".join(v + "\n" for v in items))

    def consume_group(group: str, *extra: str) -> list[str]:
        out = run("-G", group, "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", "%s\n", *extra, data)
        return out.splitlines()

    def produce_acks_all() -> str:
        produce(data, values("a"))
        probe.sent += values("a")
        return "-P -X acks=all"

    def idempotence() -> str:
        unknown_property("enable.idempotence", "true")
        produce(data, values("i"), "-X", "enable.idempotence=true")
        probe.sent += values("i")
        return "-X enable.idempotence=true"

    def group() -> str:
        expect(consume_group(probe.topic("g")), probe.sent, "-G")
        return "-G (balanced consumer)"

    def commit() -> str:
        again = consume_group(probe.topic("g"))
        if again:
            raise AssertionError(f"a second -G run read {len(again)} records again instead of resuming at its commits")
        return "-G resumes at its commits"

    def admin() -> str:
        raise Unsupported("kcat has no admin operations, only a metadata listing")

    def transactions() -> str:
        unknown_property("transactional.id", "probe")
        produce(probe.topic("txn"), values("committed", 10), "-X", f"transactional.id={probe.topic('tx')}")
        out = run("-C", "-t", probe.topic("txn"), "-o", "beginning", "-e", "-q", "-f", "%s\n",
                  "-X", "isolation.level=read_committed")
        expect(out.splitlines(), values("committed", 10), "read_committed")
        return "-X transactional.id (commits at the end); read_committed"

    def consumer_protocol() -> str:
        unknown_property("group.protocol", "consumer")
        got = consume_group(probe.topic("g848"), "-X", "group.protocol=consumer")
        expect(got, probe.sent, "group.protocol=consumer")
        return "-G -X group.protocol=consumer"

    def admin_more() -> str:
        raise Unsupported("kcat has no admin operations")

    def codec(name: str) -> str:
        produce(probe.topic(name), values(name, 10), "-z", name)
        out = run("-C", "-t", probe.topic(name), "-o", "beginning", "-e", "-q", "-f", "%s\n")
        expect(out.splitlines(), values(name, 10), name)
        return ""

    def groups_admin() -> str:
        raise Unsupported("kcat has no admin operations")

    def configs() -> str:
        raise Unsupported("kcat has no admin operations")

    def delete_topic() -> str:
        raise Unsupported("kcat has no admin operations")

    def headers() -> str:
        topic = probe.topic("hdr")
        produce(topic, ["v"] * 5, "-H", "h=x", "-H", "k=")
        out = run("-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%h\n")
        if out.splitlines() != ["h=x,k="] * 5:
            raise AssertionError(f"headers read back: {out.splitlines()}")
        return "-H, -f %h"

    def timestamps() -> str:
        topic = probe.topic("ts")
        produce(topic, [f"t{i}" for i in range(10)])
        stamps = [int(t) for t in run("-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%T\n").split()]
        for wanted in (stamps[5], stamps[0], stamps[-1] + 1):
            out = run("-Q", "-t", f"{topic}:0:{wanted}")
            found = re.search(r"offset (-?\d+)", out)
            expected = first_at_or_after(stamps, wanted)
            got = int(found[1]) if found else None
            if got != (expected if expected < len(stamps) else -1):
                raise AssertionError(f"-Q {wanted}: {out.strip()!r}, not offset {expected}")
        return "-Q (offsets by timestamp)"

    probe.record("produce", produce_acks_all)
    probe.record("idempotence", idempotence)
    probe.record("group", group)
    probe.record("commit", commit)
    probe.record("groups-admin", groups_admin)
    probe.record("admin", admin)
    probe.record("configs", configs)
    probe.record("delete-topic", delete_topic)
    probe.record("headers", headers)
    probe.record("timestamps", timestamps)
    probe.record("admin-more", admin_more)
    probe.record("transactions", transactions)
    probe.record("consumer-protocol", consumer_protocol)
    for name in CODECS:
        probe.record(name, codec, name)


CLIENTS = {"confluent-kafka": confluent, "kafka-python": kafka_python, "aiokafka": aiokafka_client, "kcat": kcat}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in CLIENTS:
        print(f"usage: probe.py {{{','.join(CLIENTS)}}} BOOTSTRAP PREFIX", file=sys.stderr)
        return 2
    client, bootstrap, prefix = argv
    probe = Probe(bootstrap, prefix)
    CLIENTS[client](probe)
    print(json.dumps({"client": client, **probe.report()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
