"""A consumer group outlives its coordinator: three controllers and three brokers, real processes.

Two confluent-kafka consumers read a replicated topic in one group and commit what they read. The
broker leading the group's ``__consumer_offsets`` partition is killed with -9. The group finds the
new coordinator (the partition's new leader, which loads the partition), its committed offsets are
all there, and it goes on reading: no record is delivered again below an offset already committed.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

import pytest

from tests.helpers.deployments import ProcessCluster, create_topics, retry_coordinator
from tests.helpers.group_members import Member, stable_assignment, values_read_above_commits, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.slow

TOPIC = "events"
GROUP = "survivors"
PARTITIONS = 6
OFFSETS_PARTITIONS = 6
SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500,
            "offsets.topic.num.partitions": OFFSETS_PARTITIONS}
QUIET = {"log_level": 0}


def java_partition(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions``."""
    h = 0
    for ch in group_id:  # the test's group ids are ASCII: one UTF-16 unit each
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions  # Utils.abs: MIN_VALUE -> 0


def produce(bootstrap: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 120_000, **QUIET})
    failures = []
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value.encode(), partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: err and failures.append(err))
    assert producer.flush(150) == 0 and not failures, failures


def committed_by_group(bootstrap: str) -> dict[int, int]:
    """What the coordinator answers for the group's offsets (OffsetFetch through a plain consumer)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False, **QUIET})
    try:
        # Just after the coordinator died, a broker may still answer NOT_COORDINATOR: asked again, as
        # Kafka's clients do.
        answer = retry_coordinator(
            lambda: consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=60))
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in answer}


def coordinator(bootstrap: str) -> int:
    """The broker leading the group's __consumer_offsets partition."""
    metadata = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics("__consumer_offsets", timeout=30)
    return metadata.topics["__consumer_offsets"].partitions[java_partition(GROUP, OFFSETS_PARTITIONS)].leader


def test_the_group_goes_on_after_its_coordinator_is_killed(tmp_path):
    with ProcessCluster(tmp_path, SETTINGS, log_level="info") as cluster, ExitStack() as stack:
        create_topics(cluster.bootstrap, [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)], deployment=cluster)
        cond = threading.Condition()
        members = [stack.enter_context(Member("confluent", cluster.bootstrap, TOPIC, GROUP, session_timeout_ms=6000,
                                              cond=cond, name=f"member-{i}")) for i in range(2)]
        wait_until(members, lambda: stable_assignment(members, PARTITIONS), "two members sharing the partitions", 120)

        def committed() -> dict[int, int]:
            out: dict[int, int] = {}
            for m in members:
                for p, o in m.committed().items():
                    out[p] = max(out.get(p, 0), o)
            return out

        first = [f"a{i}" for i in range(60)]
        produce(cluster.bootstrap, first)
        wait_until(members, lambda: committed() == {p: 10 for p in range(PARTITIONS)}, "the first records committed",
                   120)

        victim = coordinator(cluster.bootstrap)
        assert victim in cluster.brokers
        cluster.brokers[victim].kill()
        # The new coordinator loaded the partition: every commit is there.
        assert committed_by_group(cluster.bootstrap) == {p: 10 for p in range(PARTITIONS)}
        assert coordinator(cluster.bootstrap) != victim

        second = [f"b{i}" for i in range(60)]
        produce(cluster.bootstrap, second)
        wait_until(members, lambda: committed() == {p: 20 for p in range(PARTITIONS)}, "the next records committed",
                   180)
        assert committed_by_group(cluster.bootstrap) == {p: 20 for p in range(PARTITIONS)}

        # Every record read; none read again below an offset the group had committed when it was read.
        assert values_read_above_commits(members) == set(first) | set(second)
        for m in members:
            m.stop()
