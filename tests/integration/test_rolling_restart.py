"""A rolling restart loses nothing: three controllers and three brokers, every broker then every
controller restarted one at a time with SIGTERM (tests.helpers.roll: each waited for on its readiness
and, for controllers, the quorum caught up), while an idempotent acks=all producer and a consumer
group (subscribe, auto-commit off, a synchronous commit after each batch it processed) run.

Afterwards: no delivery failed; every acknowledged record was read by the group (at least once: a
rebalance or a coordinator moving re-delivers from the last commit), with the value acknowledged at
its offset; per partition the group read offsets in order, never skipping one (it only goes back, to
a committed offset); and the producer's acknowledgements follow its send order. The roll's duration
is printed (`-s` shows it; bench/roll.py measures it under load).

The controllers run with auto.leader.rebalance.enable (Kafka's default) and a short
leader.imbalance.check.interval.seconds: a roll leaves the last broker restarted leading nothing, and the
controller gives every partition back to its preferred replica by itself, with no election asked for.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from tests.helpers.deployments import ProcessCluster, create_topics
from tests.helpers.roll import IdempotentProducer, roll

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

pytestmark = pytest.mark.slow
QUIET = {"log_level": 0}
TOPIC = "rolled"
PARTITIONS = 6
#: leader.imbalance.check.interval.seconds: how often the active controller moves leaders back.
IMBALANCE_CHECK_S = 2


class GroupReader:
    """A consumer-group member in a thread: subscribe, auto-commit off, process a batch (record it),
    then commit it synchronously. Records every (partition, offset, value) it was given, in order."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.cond = threading.Condition()
        self.read: dict[int, list[tuple[int, int]]] = defaultdict(list)  # partition -> [(offset, seq)]
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._crash: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="roll-reader", daemon=True)

    def _run(self) -> None:
        try:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                 "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                 "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000, **QUIET})
            consumer.subscribe([TOPIC])
            while not self._stop.is_set():
                batch = consumer.consume(500, 0.5)
                records = [m for m in batch if m.error() is None]
                self.errors += [str(m.error()) for m in batch if m.error() is not None
                                and m.error().code() != KafkaError._PARTITION_EOF]
                if not records:
                    continue
                with self.cond:
                    for m in records:
                        self.read[m.partition()].append((m.offset(), int(m.value())))
                    self.cond.notify_all()
                self._commit(consumer, records)
            consumer.close()
        except BaseException as exc:  # surfaced by stop()
            self._crash = exc

    def _commit(self, consumer: Any, records: list[Any]) -> None:
        """Commit what was processed; a commit that fails during a coordinator move is not retried
        (the next batch's commit covers it; anything read again is read at least once)."""
        from confluent_kafka import KafkaException

        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            self.errors.append(f"commit: {exc}")

    def wait_caught_up(self, acked: dict[int, list[tuple[int, int]]], timeout: float = 60.0) -> None:
        """Until the group has read every acknowledged offset."""
        want = {p: max(o for _, o in v) for p, v in acked.items() if v}
        with self.cond:
            ok = self.cond.wait_for(lambda: all(self.read[p] and max(o for o, _ in self.read[p]) >= last
                                                for p, last in want.items()), timeout)
        assert ok, f"group read up to { {p: max((o for o, _ in v), default=-1) for p, v in self.read.items()} }" \
                   f", acked up to {want}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the consumer did not finish"
        if self._crash is not None:
            raise self._crash


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("roll")
    with ProcessCluster(root, {"auto.leader.rebalance.enable": "true",
                               "leader.imbalance.check.interval.seconds": IMBALANCE_CHECK_S},
                        metrics=True, log_level="info") as deployed:
        yield deployed


def leaders_off_preferred(bootstrap: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, preferred replica) for each partition of TOPIC led by another replica."""
    from confluent_kafka.admin import AdminClient

    topic = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(TOPIC, timeout=10).topics[TOPIC]
    return {p: (m.leader, m.replicas[0]) for p, m in topic.partitions.items() if m.leader != m.replicas[0]}


def wait_until_leaders_preferred(cluster: Any, timeout: float) -> None:
    """Until every partition of TOPIC is led by its preferred replica; checked after each new log line of
    any node, at least every half second (the check asks a broker, outside the deployment's lock)."""
    deadline = time.monotonic() + timeout
    while off := leaders_off_preferred(cluster.bootstrap):
        left = deadline - time.monotonic()
        assert left > 0, f"leaders not back on their preferred replicas (partition: (leader, preferred)): {off}"
        with cluster.cond:
            cluster.cond.wait(min(left, 0.5))


def test_a_rolling_restart_of_every_node_loses_nothing_and_keeps_order(cluster):
    create_topics(cluster.bootstrap, [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)], deployment=cluster)
    producer = IdempotentProducer(cluster.bootstrap, TOPIC, PARTITIONS, in_flight=20)
    reader = GroupReader(cluster.bootstrap, "rolling")
    producer.start()
    reader.start()
    try:
        producer.wait_acked(500)
        restarted = []

        def between(node: Any) -> None:
            """Progress after each node is back: the cluster serves again before the next one stops."""
            restarted.append(node)
            producer.wait_acked(producer.acked_count() + 200)

        done = roll(cluster, on_node=between)
    finally:
        producer.stop()
    try:
        reader.wait_caught_up(producer.acked)
    finally:
        reader.stop()

    print(f"\nrolling restart of {len(done.nodes)} nodes: {done.total_s:.1f} s; "
          + ", ".join(f"{n.name} {n.back_s:.1f} s" for n in done.nodes)
          + f"; {producer.acked_count()} records acknowledged, {len(producer.failed)} failed")
    assert [n.name for n in done.nodes] == ["broker-4", "broker-5", "broker-6",
                                            "controller-1", "controller-2", "controller-3"]
    assert producer.failed == [], producer.failed[:5]
    assert producer.fatal == [], producer.fatal
    assert producer.acked_count() == producer.sent
    for partition in range(PARTITIONS):
        acked = sorted(producer.acked[partition])  # by send sequence
        offsets = [offset for _, offset in acked]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), "acks out of send order"
        read = reader.read[partition]
        at: dict[int, int] = {}
        previous = -1
        for offset, seq in read:
            assert offset <= previous + 1, f"partition {partition}: the group skipped from {previous} to {offset}"
            assert at.setdefault(offset, seq) == seq, f"partition {partition}: offset {offset} read twice, different"
            previous = offset
        missing = [(seq, offset) for seq, offset in acked if at.get(offset) != seq]
        assert missing == [], f"partition {partition}: acknowledged but not read: {missing[:5]}"
    # No `kraftpy leaders elect`: the controller's imbalance check moves leadership back.
    wait_until_leaders_preferred(cluster, timeout=10 * IMBALANCE_CHECK_S + 10)
