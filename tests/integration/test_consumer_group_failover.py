"""A KIP-848 consumer group outlives its coordinator: three controllers and three brokers, real processes.

Two confluent-kafka consumers with ``group.protocol=consumer`` read a replicated topic and commit what
they read. The broker coordinating the group is killed with -9. The new coordinator loads the group
from its ``ConsumerGroup*`` records: the members go on with their partitions (none is revoked), the
commits are all there, and no record is read again below an offset already committed.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

import pytest

from tests.helpers.deployments import ProcessCluster, create_topics
from tests.helpers.group_members import Member, stable_assignment, values_read_above_commits, wait_until
from tests.integration.test_groups_failover import PARTITIONS, TOPIC, committed_by_group, coordinator, produce

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402

pytestmark = pytest.mark.slow

SETTINGS = {"offsets.topic.num.partitions": 6, "group.coordinator.rebalance.protocols": "classic,consumer",
            "group.consumer.heartbeat.interval.ms": 500, "group.consumer.session.timeout.ms": 10000}
GROUP = "survivors"  # the name the imported helpers look the coordinator up for


def test_a_consumer_group_goes_on_after_its_coordinator_is_killed(tmp_path):
    with ProcessCluster(tmp_path, SETTINGS, log_level="info") as cluster, ExitStack() as stack:
        create_topics(cluster.bootstrap, [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)],
                      deployment=cluster)
        cond = threading.Condition()
        members = []
        for i in range(2):
            member = Member("confluent", cluster.bootstrap, TOPIC, GROUP, cond=cond, name=f"member-{i}")
            member.argv += ["--group-protocol", "consumer"]
            members.append(stack.enter_context(member))
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
        held = {m.name: m.partitions for m in members}
        marks = {m.name: len(m.lines) for m in members}

        victim = coordinator(cluster.bootstrap)
        assert victim in cluster.brokers
        cluster.brokers[victim].kill()
        assert committed_by_group(cluster.bootstrap) == {p: 10 for p in range(PARTITIONS)}
        assert coordinator(cluster.bootstrap) != victim

        second = [f"b{i}" for i in range(60)]
        produce(cluster.bootstrap, second)
        wait_until(members, lambda: committed() == {p: 20 for p in range(PARTITIONS)}, "the next records committed",
                   180)
        # The new coordinator knew the members: nobody gave up a partition.
        for m in members:
            assert m.partitions == held[m.name]
            assert not [line for line in m.lines[marks[m.name]:] if line["event"] == "revoked"], m.tail()
        assert values_read_above_commits(members) == set(first) | set(second)
        for m in members:
            m.stop()
