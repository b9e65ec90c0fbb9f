"""Transactions as real clients use them: a confluent-kafka (librdkafka) transactional producer, read by
confluent-kafka, kafka-python and aiokafka consumers under read_committed and read_uncommitted.

- Three transactions over several partitions of two topics, with the offsets of a consumer group sent
  inside them: the first committed, the second aborted, the third committed. read_committed readers
  see exactly the committed records (never an aborted one), read_uncommitted readers see all of them,
  and the group's committed offset is the one sent only once its transaction commits.
- A zombie: a second producer with the same transactional.id fences the first, whose open
  transaction is aborted and whose next send and commit fail fenced.
- A transaction left open past its transaction.timeout.ms is aborted by the coordinator: readers get
  past it and the producer's commit fails.
- The last stable offset never passes an open transaction (ListOffsets latest, both isolation levels).
- An abort after records timed out while every AddPartitionsToTxn failed (the coordinator could not
  write its log): librdkafka's EndTxn(abort) meets a coordinator that never recorded the
  transaction and is answered INVALID_TXN_STATE, as Kafka answers it (fatal to librdkafka); a new
  producer with the same transactional.id goes on.
- kill -9 of the transactional id's coordinator, and of the leader of one of its partitions, right after
  commit_transaction is called, on three controllers and three brokers (real processes): the
  transaction ends committed or aborted as a whole, never half.

Clients run in threads (``trio.to_thread``) beside the in-memory cluster, or against real processes.
Every wait is on data arriving (a consumer's poll, a log line), bounded by a timeout, never a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import trio

from kraftpy.coordinator.group_coordinator import partition_for
from kraftpy.coordinator.txn_state import TxnConfig, TxnState
from tests.helpers.cluster import open_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")
pytest.importorskip("aiokafka")
from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

pytestmark = pytest.mark.slow

QUIET = {"log_level": 0}
SOURCE = "source"
#: The topics a transaction writes to, with their partitions.
OUTPUTS = {"out-a": 3, "out-b": 2}
GROUP = "etl"
COMMITTED, UNCOMMITTED = "read_committed", "read_uncommitted"
#: How librdkafka surfaces a fenced producer: its own fatal _FENCED, or the broker's codes.
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
#: Few internal partitions, no initial rebalance delay, timed-out transactions looked for often.
SETTINGS = dict(offsets_topic_num_partitions=4, group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=500,
                transaction=TxnConfig(state_log_num_partitions=4, state_log_replication_factor=1, state_log_min_isr=1,
                                      abort_timed_out_transaction_cleanup_interval_ms=200))

Record = tuple[str, int, int, str]  # topic, partition, offset, value


# -- clients ----------------------------------------------------------------------------------------


def transactional_producer(bootstrap: str, transactional_id: str, **config) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         **QUIET, **config})
    producer.init_transactions(60)
    return producer


def produce_plain(bootstrap: str, records: list[tuple[str, int, str]]) -> None:
    """Non-transactional records (topic, partition, value), acks=all, idempotent."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 60_000, **QUIET})
    failures: list[KafkaError] = []
    for topic, partition, value in records:
        producer.produce(topic, value=value.encode(), partition=partition,
                         on_delivery=lambda err, msg: err and failures.append(err))
    assert producer.flush(90) == 0 and not failures, failures


def read(client: str, bootstrap: str, partitions: list[tuple[str, int]], isolation: str,
         until: Callable[[list[Record]], bool], timeout: float = 60.0) -> list[Record]:
    """Read ``partitions`` from the beginning with ``client`` (assigned, no group) until ``until(records)``
    holds; fails if it does not within ``timeout``. Each poll waits for data (a long-poll Fetch)."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    READERS[client](bootstrap, partitions, isolation, records, lambda: until(records) or time.monotonic() > deadline)
    assert until(records), (f"{client} {isolation}: the records awaited did not arrive within {timeout}s; "
                            f"read {records}")
    return records


def _read_confluent(bootstrap, partitions, isolation, records, done) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": isolation, **QUIET})
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in partitions])
        while not done():
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    records.append((msg.topic(), msg.partition(), msg.offset(), msg.value().decode()))
    finally:
        consumer.close()


def _read_kafka_python(bootstrap, partitions, isolation, records, done) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             isolation_level=isolation, auto_offset_reset="earliest")
    try:
        consumer.assign([KTopicPartition(t, p) for t, p in partitions])
        consumer.seek_to_beginning()
        while not done():
            for tp, batch in consumer.poll(timeout_ms=200).items():
                records.extend((tp.topic, tp.partition, r.offset, r.value.decode()) for r in batch)
    finally:
        consumer.close()


def _read_aiokafka(bootstrap, partitions, isolation, records, done) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def main() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    isolation_level=isolation, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(t, p) for t, p in partitions])
            await consumer.seek_to_beginning()
            while not done():
                for tp, batch in (await consumer.getmany(timeout_ms=200)).items():
                    records.extend((tp.topic, tp.partition, r.offset, r.value.decode()) for r in batch)
        finally:
            await consumer.stop()

    asyncio.run(main())


READERS = {"confluent": _read_confluent, "kafka-python": _read_kafka_python, "aiokafka": _read_aiokafka}


def values(records: list[Record]) -> Counter[str]:
    return Counter(v for _, _, _, v in records)


def has_all(expected: set[str]) -> Callable[[list[Record]], bool]:
    return lambda records: expected <= {v for _, _, _, v in records}


def committed_offset(bootstrap: str, group: str, topic: str, partition: int, *, stable: bool) -> int:
    """The group's committed offset as OffsetFetch answers it to a librdkafka consumer. ``stable``: a
    read_committed consumer, which asks with require_stable and is answered once no transaction holds
    an offset of the partition pending (librdkafka asks again on UNSTABLE_OFFSET_COMMIT); otherwise a
    read_uncommitted one, answered at once with what is committed (pending offsets are not)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": COMMITTED if stable else UNCOMMITTED, **QUIET})
    try:
        return consumer.committed([TopicPartition(topic, partition)], timeout=30)[0].offset
    finally:
        consumer.close()


def latest_offsets(bootstrap: str, topic: str, partition: int) -> dict[str, int]:
    """ListOffsets latest under each isolation level (the LSO under read_committed, the high watermark
    under read_uncommitted)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    tp = TopicPartition(topic, partition)
    out = {}
    for name, level in ((COMMITTED, IsolationLevel.READ_COMMITTED), (UNCOMMITTED, IsolationLevel.READ_UNCOMMITTED)):
        answer = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level, request_timeout=30)
        out[name] = answer[tp].result(30).offset
    return out


def names(tag: str, per_partition: int = 4) -> set[str]:
    """The values of a transaction ``tag``: ``per_partition`` to every partition of both output topics."""
    return {f"{tag}-{topic}-{p}-{i}" for topic, partitions in OUTPUTS.items() for p in range(partitions)
            for i in range(per_partition)}


def send(producer: Producer, values: set[str]) -> None:
    """Send the values `names` made, each to the partition it names."""
    for value in sorted(values):
        _, topic_a, topic_b, p, _ = value.split("-")
        producer.produce(f"{topic_a}-{topic_b}", value=value.encode(), partition=int(p))


class Reading:
    """`read` in a thread of its own, started now: a reader that is polling while the records come."""

    def __init__(self, *args, **kwargs) -> None:
        self._result: list[Record] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=args, kwargs=kwargs, name="reader")
        self._thread.start()

    def _run(self, *args, **kwargs) -> None:
        try:
            self._result = read(*args, **kwargs)
        except BaseException as exc:  # re-raised by result()
            self._error = exc

    def result(self) -> list[Record]:
        self._thread.join(120)
        assert not self._thread.is_alive(), "the reader did not finish"
        if self._error is not None:
            raise self._error
        return self._result


def output_partitions() -> list[tuple[str, int]]:
    return [(t, p) for t, n in OUTPUTS.items() for p in range(n)]


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, brokers=1, **SETTINGS) as c:
        await c.create_topic(SOURCE, partitions=1)
        for topic, partitions in OUTPUTS.items():
            await c.create_topic(topic, partitions=partitions)
        yield c


# -- committed, aborted, committed ------------------------------------------------------------------


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
async def test_read_committed_sees_exactly_the_committed_transactions_and_the_offsets_commit_with_them(
        cluster, client):
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        first, aborted, third = names("t1"), names("t2"), names("t3")
        # Readers polling while the transactions are written and end, and readers that come after.
        live = [Reading(client, bootstrap, output_partitions(), COMMITTED, has_all(third)),
                Reading(client, bootstrap, output_partitions(), UNCOMMITTED, has_all(first | aborted | third))]
        produce_plain(bootstrap, [(SOURCE, 0, f"in-{i}") for i in range(10)])
        source = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest", "session.timeout.ms": 6000, **QUIET})
        producer = transactional_producer(bootstrap, f"etl-{client}")
        try:
            source.subscribe([SOURCE])
            consumed = []
            deadline = time.monotonic() + 60
            while len(consumed) < 10 and time.monotonic() < deadline:
                consumed += [m for m in source.consume(10, timeout=0.2) if m.error() is None]
            assert len(consumed) == 10, f"the source consumer read {len(consumed)} of 10"
            group = source.consumer_group_metadata()

            # 1: committed, with the source offset 5.
            producer.begin_transaction()
            send(producer, first)
            producer.send_offsets_to_transaction([TopicPartition(SOURCE, 0, 5)], group, 30)
            assert committed_offset(bootstrap, GROUP, SOURCE, 0, stable=False) < 0, "an offset committed before its transaction"
            producer.commit_transaction(60)
            assert committed_offset(bootstrap, GROUP, SOURCE, 0, stable=True) == 5

            # 2: aborted, with the source offset 10: the group stays at 5.
            producer.begin_transaction()
            send(producer, aborted)
            producer.send_offsets_to_transaction([TopicPartition(SOURCE, 0, 10)], group, 30)
            assert producer.flush(30) == 0
            producer.abort_transaction(60)
            assert committed_offset(bootstrap, GROUP, SOURCE, 0, stable=True) == 5, "an aborted transaction's offset committed"

            # 3: committed after the aborted one, with the source offset 10.
            producer.begin_transaction()
            send(producer, third)
            producer.send_offsets_to_transaction([TopicPartition(SOURCE, 0, 10)], group, 30)
            producer.commit_transaction(60)
            assert committed_offset(bootstrap, GROUP, SOURCE, 0, stable=True) == 10
        finally:
            source.close()

        # A partition is read in offset order: once a reader has the third transaction's records, it
        # has passed the second's.
        for when, (got, everything) in (
                ("while the transactions ended", [reading.result() for reading in live]),
                ("after the transactions ended",
                 [read(client, bootstrap, output_partitions(), COMMITTED, has_all(third)),
                  read(client, bootstrap, output_partitions(), UNCOMMITTED, has_all(first | aborted | third))])):
            leaked = sorted(set(values(got)) & aborted)
            assert not leaked, (f"read_committed ({client}, reading {when}) read {len(leaked)} records of the "
                                f"aborted transaction: {leaked[:4]}")
            assert values(got) == Counter(first | third), f"read_committed ({client}, {when}): {sorted(values(got))}"
            assert values(everything) == Counter(first | aborted | third), (
                f"read_uncommitted ({client}, {when}): {sorted(values(everything))}")
            for records in (got, everything):  # offsets go up in each partition; markers leave gaps
                for topic, partition in output_partitions():
                    offsets = [o for t, p, o, _ in records if (t, p) == (topic, partition)]
                    assert offsets == sorted(set(offsets)), (topic, partition, offsets)

    await trio.to_thread.run_sync(scenario)


# -- a zombie ---------------------------------------------------------------------------------------


async def test_a_second_producer_with_the_same_transactional_id_fences_the_first(cluster):
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        zombie = transactional_producer(bootstrap, "zombie")
        zombie.begin_transaction()
        for p in range(OUTPUTS["out-a"]):
            zombie.produce("out-a", value=f"zombie-{p}".encode(), partition=p)
        assert zombie.flush(30) == 0

        # The same id again: the epoch is bumped and the zombie's open transaction aborted.
        successor = transactional_producer(bootstrap, "zombie")
        successor.begin_transaction()
        fresh = set()
        for p in range(OUTPUTS["out-a"]):
            successor.produce("out-a", value=f"fresh-{p}".encode(), partition=p)
            fresh.add(f"fresh-{p}")
        successor.commit_transaction(60)

        late_reports: list[KafkaError | None] = []
        with pytest.raises(KafkaException) as failure:
            zombie.produce("out-a", value=b"late", partition=0, on_delivery=lambda err, msg: late_reports.append(err))
            zombie.commit_transaction(30)
        error = failure.value.args[0]
        assert error.code() in FENCED, f"the zombie's commit failed with {error.name()}: {error.str()}"
        zombie.flush(10)
        assert all(err is not None for err in late_reports), "the zombie's late record was acknowledged"

        partitions = [("out-a", p) for p in range(OUTPUTS["out-a"])]
        got = read("confluent", bootstrap, partitions, COMMITTED, has_all(fresh))
        assert values(got) == Counter(fresh), f"read_committed read {sorted(values(got))}"
        everything = read("confluent", bootstrap, partitions, UNCOMMITTED, has_all(fresh))
        assert values(everything) == Counter(fresh | {f"zombie-{p}" for p in range(OUTPUTS["out-a"])}), (
            f"read_uncommitted read {sorted(values(everything))}")

    await trio.to_thread.run_sync(scenario)


# -- a transaction past its timeout -----------------------------------------------------------------


async def test_a_transaction_open_past_its_timeout_is_aborted_by_the_coordinator(cluster):
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        producer = transactional_producer(bootstrap, "forgetful", **{"transaction.timeout.ms": 1000})
        producer.begin_transaction()
        producer.produce("out-a", value=b"open", partition=0)
        assert producer.flush(30) == 0
        # A record after the open transaction: a read_committed reader gets to it only once the
        # transaction has ended, which nothing but the coordinator's timeout can do here.
        produce_plain(bootstrap, [("out-a", 0, "after")])
        got = read("confluent", bootstrap, [("out-a", 0)], COMMITTED, has_all({"after"}), timeout=30)
        assert values(got) == Counter({"after"}), f"read_committed read {sorted(values(got))}"
        assert values(read("confluent", bootstrap, [("out-a", 0)], UNCOMMITTED, has_all({"after"}))) == Counter(
            {"open", "after"})
        with pytest.raises(KafkaException) as failure:
            producer.commit_transaction(30)
        error = failure.value.args[0]
        assert error.code() in FENCED, f"the timed-out producer's commit failed with {error.name()}: {error.str()}"

    await trio.to_thread.run_sync(scenario)


# -- the last stable offset -------------------------------------------------------------------------


async def test_the_last_stable_offset_never_passes_an_open_transaction(cluster):
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        produce_plain(bootstrap, [("out-b", 0, f"before-{i}") for i in range(3)])  # offsets 0-2
        assert latest_offsets(bootstrap, "out-b", 0) == {COMMITTED: 3, UNCOMMITTED: 3}
        producer = transactional_producer(bootstrap, "holder")
        producer.begin_transaction()
        for i in range(2):  # offsets 3-4
            producer.produce("out-b", value=f"open-{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        assert latest_offsets(bootstrap, "out-b", 0) == {COMMITTED: 3, UNCOMMITTED: 5}
        produce_plain(bootstrap, [("out-b", 0, "beside")])  # offset 5, outside the transaction
        assert latest_offsets(bootstrap, "out-b", 0) == {COMMITTED: 3, UNCOMMITTED: 6}
        got = read("confluent", bootstrap, [("out-b", 0)], COMMITTED, has_all({"before-2"}))
        assert values(got) == Counter({f"before-{i}" for i in range(3)})

        producer.commit_transaction(60)
        # The commit marker (offset 6) is written after EndTxn is answered: a read_committed reader
        # reaches "beside" once it is.
        got = read("confluent", bootstrap, [("out-b", 0)], COMMITTED, has_all({"beside"}))
        assert [v for _, _, _, v in got] == ["before-0", "before-1", "before-2", "open-0", "open-1", "beside"]
        assert latest_offsets(bootstrap, "out-b", 0) == {COMMITTED: 7, UNCOMMITTED: 7}

    await trio.to_thread.run_sync(scenario)


# -- kill -9 in the middle of a commit, three controllers and three brokers -------------------------

KILL_PARTITIONS = 3
PER_PARTITION = 50
PROCESS_SETTINGS = {
    "transaction.state.log.num.partitions": 3, "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2, "offsets.topic.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}


@pytest.fixture(scope="module")
def processes(tmp_path_factory) -> Iterator:
    from tests.helpers.deployments import ProcessCluster

    with ProcessCluster(tmp_path_factory.mktemp("txn-kill"), PROCESS_SETTINGS, metrics=True,
                        log_level="info") as cluster:
        yield cluster


def every_broker_back(cluster) -> None:
    """Restart a broker an earlier test killed, and wait until no partition is under-replicated."""
    from tests.helpers.roll import under_replicated, wait_until

    for broker_id, proc in cluster.brokers.items():
        if not proc.running:
            cluster.restart_broker(broker_id)
    wait_until(cluster, lambda: under_replicated(cluster) == 0, "no under-replicated partition", 60)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(topic, timeout=30)
    return {p: m.leader for p, m in metadata.topics[topic].partitions.items()}


def commit_through_a_kill(cluster, topic: str, transactional_id: str, victim: Callable[[], int],
                          when: str = "called") -> None:
    """Send a transaction to every partition of ``topic``, call commit_transaction, kill -9 the broker
    ``victim()`` names right after the call (``when`` "called") or right after its answer ("answered":
    PREPARE_COMMIT is written, the markers are on their way), and check that the transaction ended as
    a whole."""
    from tests.helpers.deployments import create_topics

    bootstrap = cluster.bootstrap
    create_topics(bootstrap, [NewTopic(topic, num_partitions=KILL_PARTITIONS, replication_factor=3)], timeout=5)
    producer = transactional_producer(bootstrap, transactional_id, **{"transaction.timeout.ms": 60_000})
    producer.begin_transaction()
    sent = set()
    for p in range(KILL_PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{transactional_id}-{p}-{i}"
            producer.produce(topic, value=value.encode(), partition=p)
            sent.add(value)
    assert producer.flush(60) == 0
    killed = victim()

    called = threading.Event()
    outcome: list[KafkaError | None] = []

    def commit() -> None:
        called.set()
        try:
            producer.commit_transaction(90)
            outcome.append(None)
        except KafkaException as exc:
            outcome.append(exc.args[0])

    committer = threading.Thread(target=commit, name="committer")
    committer.start()
    if when == "answered":
        committer.join(120)
    called.wait()
    cluster.brokers[killed].kill()
    committer.join(120)
    assert not committer.is_alive(), "commit_transaction did not return"
    error = outcome[0]
    if error is not None and error.txn_requires_abort():
        producer.abort_transaction(60)
    # A producer with the same id: its InitProducerId ends whatever its predecessor left (aborts an
    # open transaction, waits for a prepared one to complete).
    transactional_producer(bootstrap, transactional_id).flush(10)

    # Records after the transaction in every partition: read_committed reaches them only once every
    # partition has its marker.
    after = {f"after-{transactional_id}-{p}" for p in range(KILL_PARTITIONS)}
    produce_plain(bootstrap, [(topic, p, f"after-{transactional_id}-{p}") for p in range(KILL_PARTITIONS)])
    partitions = [(topic, p) for p in range(KILL_PARTITIONS)]
    got = read("confluent", bootstrap, partitions, COMMITTED, has_all(after), timeout=90)
    seen = set(values(got)) - after
    by_partition = {p: sum(1 for t, q, _, v in got if q == p and v in sent) for p in range(KILL_PARTITIONS)}
    resumed = any(proc.find("resuming the completion of a prepared transaction", transactional_id=transactional_id)
                  for proc in cluster.brokers.values())
    print(f"{transactional_id}: broker {killed} killed after commit_transaction was {when}; it "
          f"{'returned' if error is None else 'failed: ' + error.str()}; read_committed read {by_partition}; "
          f"a new coordinator {'resumed' if resumed else 'did not resume'} a prepared commit")
    assert seen in (set(), sent), (
        f"half a transaction: read_committed read {by_partition} of {PER_PARTITION} per partition "
        f"(commit_transaction {'returned' if error is None else 'failed: ' + error.str()})")
    if error is None:
        assert seen == sent, f"commit_transaction returned but read_committed read {by_partition}"
    everything = read("confluent", bootstrap, partitions, UNCOMMITTED, has_all(sent | after), timeout=30)
    assert set(values(everything)) == sent | after


@pytest.mark.parametrize("when", ["called", "answered"])
def test_kill_9_of_the_coordinator_mid_commit_ends_the_transaction_as_a_whole(processes, when):
    every_broker_back(processes)
    txn_id = f"killed-coordinator-{when}"

    def coordinator() -> int:
        partition = partition_for(txn_id, PROCESS_SETTINGS["transaction.state.log.num.partitions"])
        return leaders(processes.bootstrap, "__transaction_state")[partition]

    commit_through_a_kill(processes, f"kill-coordinator-{when}", txn_id, coordinator, when)


def test_kill_9_of_a_partition_leader_mid_commit_ends_the_transaction_as_a_whole(processes):
    every_broker_back(processes)
    txn_id = "killed-leader"
    topic = "kill-leader"

    def a_leader_not_the_coordinator() -> int:
        partition = partition_for(txn_id, PROCESS_SETTINGS["transaction.state.log.num.partitions"])
        coordinator = leaders(processes.bootstrap, "__transaction_state")[partition]
        led = leaders(processes.bootstrap, topic)
        return next((b for b in led.values() if b != coordinator), led[0])

    commit_through_a_kill(processes, topic, txn_id, a_leader_not_the_coordinator)


def test_the_transaction_log_is_compacted_replicated_three_times_and_needs_two_in_sync(processes):
    """``__transaction_state`` as the first transactional producer makes it on three brokers: the
    configured partitions, three replicas (transaction.state.log.replication.factor, all brokers alive),
    min.insync.replicas 2 (transaction.state.log.min.isr), compacted."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    every_broker_back(processes)
    transactional_producer(processes.bootstrap, "state-log").flush(10)
    admin = AdminClient({"bootstrap.servers": processes.bootstrap, **QUIET})
    topic = admin.list_topics("__transaction_state", timeout=30).topics["__transaction_state"]
    assert topic.error is None, topic.error
    assert len(topic.partitions) == PROCESS_SETTINGS["transaction.state.log.num.partitions"]
    assert {len(p.replicas) for p in topic.partitions.values()} == {3}
    resource = ConfigResource(ResourceType.TOPIC, "__transaction_state")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert {k: configs[k].value for k in ("cleanup.policy", "min.insync.replicas", "unclean.leader.election.enable")} \
        == {"cleanup.policy": "compact", "min.insync.replicas": "2", "unclean.leader.election.enable": "false"}


# -- an abort of a transaction its coordinator never recorded ---------------------------------------


class _Lines(logging.Handler):
    """librdkafka's log lines, as its ``logger`` hands them over."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_an_abort_whose_partitions_never_joined_is_answered_as_kafka_does_and_a_new_producer_recovers(
        tmp_path):
    """librdkafka sends EndTxn(abort) once it has sent an AddPartitionsToTxn, even when every one
    failed: it counts them as possibly received. Here they fail because the coordinator cannot
    write __transaction_state (its ISR below min.insync.replicas while the other broker is fenced),
    the transaction's record times out unsent, and the coordinator still holds the transaction before,
    COMPLETE_COMMIT. It answers EndTxn(abort) INVALID_TXN_STATE, as Kafka's coordinator does in that
    state, which librdkafka makes fatal; a new producer with the same transactional.id goes on, and
    readers see only committed records."""
    txn = TxnConfig(state_log_num_partitions=1, state_log_replication_factor=2, state_log_min_isr=2)
    async with open_cluster(tmp_path, brokers=2, offsets_topic_num_partitions=1, transaction=txn) as c:
        await c.create_topic("out", partitions=1, replication_factor=2)
        bootstrap = c.bootstrap
        logger = logging.getLogger(f"{__name__}.never-joined")
        lines = _Lines()
        logger.addHandler(lines)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        first = await trio.to_thread.run_sync(lambda: transactional_producer(
            bootstrap, "never-joined", logger=logger, debug="eos,protocol", **{"message.timeout.ms": 3000}))

        def committed_then_open() -> None:
            first.begin_transaction()
            first.produce("out", value=b"committed-1", partition=0)
            first.commit_transaction(30)

        await trio.to_thread.run_sync(committed_then_open)
        state = c.image.topics.get_by_name("__transaction_state").partitions[0]
        assert len(state.replicas) == 2
        shard = c.brokers[state.leader].txn_coordinator.shard_for("never-joined")
        # The commit's markers are written and its COMPLETE_COMMIT too: no transaction is open.
        await c.wait_for(lambda: shard.describe("never-joined").state is TxnState.COMPLETE_COMMIT)
        follower = next(b for b in state.replicas if b != state.leader)
        await c.fence(follower)  # the coordinator's writes now fail: NOT_ENOUGH_REPLICAS

        def abort_unrecorded() -> None:
            reports: list = []
            first.begin_transaction()
            first.produce("out", value=b"never-joined", partition=0, on_delivery=lambda err, _m: reports.append(err))
            first.flush(30)
            assert len(reports) == 1 and reports[0] is not None and \
                reports[0].code() == KafkaError._MSG_TIMED_OUT, reports
            assert any("AddPartitionsToTxn response" in line and "Coordinator not available" in line
                       for line in lines.lines), \
                "no AddPartitionsToTxn failed:\n" + "\n".join(lines.lines[-60:])
            with pytest.raises(KafkaException) as failure:
                first.abort_transaction(30)
            error = failure.value.args[0]
            assert error.code() == KafkaError.INVALID_TXN_STATE and error.fatal(), error
            with contextlib.suppress(KafkaException):  # a fatal producer raises its error once more
                first.poll(0)  # serves the log lines queued meanwhile
            assert any("EndTxn returned INVALID_TXN_STATE" in line for line in lines.lines), \
                "the abort's EndTxn was not the request refused:\n" + "\n".join(
                    lines.lines[next(i for i, line in enumerate(lines.lines) if "abort_transaction" in line):])

        await trio.to_thread.run_sync(abort_unrecorded)
        assert shard.describe("never-joined").state is TxnState.COMPLETE_COMMIT
        await c.unfence(follower)

        def recover() -> None:
            second = transactional_producer(bootstrap, "never-joined")
            second.begin_transaction()
            second.produce("out", value=b"committed-2", partition=0)
            second.commit_transaction(30)
            got = read("confluent", bootstrap, [("out", 0)], COMMITTED, has_all({"committed-1", "committed-2"}))
            assert values(got) == Counter({"committed-1", "committed-2"}), sorted(values(got))

        await trio.to_thread.run_sync(recover)
