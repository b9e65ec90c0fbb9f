"""Consumer groups as real clients use them: confluent-kafka (librdkafka), kafka-python and aiokafka
consumers, each in its own process (tests.helpers.group_consumer), against real brokers.

Each member prints what it is assigned, what it reads and what it commits; the tests wait on those
lines (never on a clock) and check, across the members of a group: every record read exactly once,
the group resuming at its commits after a restart, a member killed with -9 losing its partitions at
its session timeout, a static member (group.instance.id) coming back without a rebalance, and
cooperative-sticky moving only the partitions it must.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections import Counter
from contextlib import ExitStack

import pytest
import trio

from tests.helpers.cluster import open_cluster
from tests.helpers.group_members import Member, balanced_assignment, stable_assignment, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")
pytest.importorskip("aiokafka")
from confluent_kafka import Producer  # noqa: E402

pytestmark = pytest.mark.slow

TOPIC = "events"
PARTITIONS = 6
#: No initial rebalance delay, sessions as short as the tests want, few offsets partitions.
GROUP_SETTINGS = dict(offsets_topic_num_partitions=4, group_initial_rebalance_delay_ms=0,
                      group_min_session_timeout_ms=500)


def produce(bootstrap: str, values: list[str]) -> None:
    """Send ``values`` round-robin over the partitions (value i to partition i % PARTITIONS), acks=all."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0})
    failures = []
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value.encode(), partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: err and failures.append(err))
    assert producer.flush(30) == 0 and not failures, failures


def read(members: list[Member]) -> list[tuple[int, int, str]]:
    return [record for m in members for record in m.records()]


def committed(members: list[Member]) -> dict[int, int]:
    out: dict[int, int] = {}
    for m in members:
        for partition, offset in m.committed().items():
            out[partition] = max(out.get(partition, 0), offset)
    return out


def start_group(stack: ExitStack, client: str, bootstrap: str, group: str, count: int = 3, *, cond=None,
                **options) -> list[Member]:
    cond = cond or threading.Condition()
    return [stack.enter_context(Member(client, bootstrap, TOPIC, group, cond=cond, name=f"{client}-{i}", **options))
            for i in range(count)]


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, brokers=1, **GROUP_SETTINGS) as c:
        await c.create_topic(TOPIC, partitions=PARTITIONS)
        yield c


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
async def test_a_group_of_three_reads_every_record_once_and_a_restarted_group_resumes_at_its_commits(
        cluster, client):
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        first = [f"a{i}" for i in range(60)]
        second = [f"b{i}" for i in range(30)]
        with ExitStack() as stack:
            members = start_group(stack, client, bootstrap, "readers")
            wait_until(members, lambda: stable_assignment(members, PARTITIONS), "three members sharing the partitions")
            produce(bootstrap, first)
            wait_until(members, lambda: len(read(members)) >= len(first), "every record read")
            got = read(members)
            assert Counter(v for _, _, v in got) == Counter(first), "a record read twice, or missed"
            for m in members:  # each read only what it was assigned
                assert not m.records_not_held(), m.tail()
            wait_until(members, lambda: committed(members) == {p: 10 for p in range(PARTITIONS)}, "every commit")
            for m in members:
                assert m.stop() == 0, m.tail()

        produce(bootstrap, second)
        with ExitStack() as stack:
            members = start_group(stack, client, bootstrap, "readers")
            wait_until(members, lambda: committed(members) == {p: 15 for p in range(PARTITIONS)},
                       "the new records read and committed")
            got = read(members)
            assert Counter(v for _, _, v in got) == Counter(second), "the restarted group re-read or skipped"
            assert {p: min(o for q, o, _ in got if q == p) for p in range(PARTITIONS)} == {
                p: 10 for p in range(PARTITIONS)}
            for m in members:
                m.stop()

    await trio.to_thread.run_sync(scenario)


def group_members(bootstrap: str, group: str) -> int:
    """How many members the group's coordinator counts (DescribeGroups through librdkafka's admin client)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return len(described.members)


async def test_a_member_killed_with_sigkill_loses_its_partitions_at_its_session_timeout(cluster):
    session_ms = 3000
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        with ExitStack() as stack:
            members = start_group(stack, "confluent", bootstrap, "crashers", session_timeout_ms=session_ms)
            wait_until(members, lambda: stable_assignment(members, PARTITIONS), "three members sharing the partitions")
            victim, survivors = members[0], members[1:]
            orphaned = victim.partitions
            victim.kill()
            # No LeaveGroup came: the coordinator still counts the dead member (its session has most of
            # its time to run) until the session expires.
            assert group_members(bootstrap, "crashers") == 3
            wait_until(survivors, lambda: stable_assignment(survivors, PARTITIONS), "the survivors taking over")
            assert group_members(bootstrap, "crashers") == 2
            values = [f"v{i}" for i in range(30)]
            produce(bootstrap, values)
            wait_until(survivors, lambda: len(read(survivors)) >= len(values), "the orphaned partitions read")
            assert Counter(v for _, _, v in read(survivors)) == Counter(values)
            assert orphaned <= {p for p, _, _ in read(survivors)}
            for m in survivors:
                m.stop()

    await trio.to_thread.run_sync(scenario)


async def test_a_static_member_restarts_without_a_rebalance(cluster):
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        cond = threading.Condition()
        with ExitStack() as stack:
            members = [stack.enter_context(Member("confluent", bootstrap, TOPIC, "statics", instance_id=f"id-{i}",
                                                  session_timeout_ms=60_000, cond=cond, name=f"static-{i}"))
                       for i in range(3)]
            wait_until(members, lambda: stable_assignment(members, PARTITIONS), "three static members")
            leaving, staying = members[0], members[1:]
            held = leaving.partitions
            rebalances = [m.rebalances for m in staying]
            assert leaving.stop() == 0  # a static member's close sends no LeaveGroup
            back = stack.enter_context(Member("confluent", bootstrap, TOPIC, "statics", instance_id="id-0",
                                              session_timeout_ms=60_000, cond=cond, name="static-0-again"))
            wait_until([back, *staying], lambda: back.partitions, "the static member back")
            assert back.partitions == held
            values = [f"s{i}" for i in range(30)]
            produce(bootstrap, values)
            group = [back, *staying]
            wait_until(group, lambda: len(read(group)) >= len(values), "every record read")
            assert Counter(v for _, _, v in read(group)) == Counter(values)
            assert [m.rebalances for m in staying] == rebalances, "the other members went through a rebalance"
            for m in group:
                m.stop()

    await trio.to_thread.run_sync(scenario)


async def test_cooperative_sticky_moves_only_the_partitions_it_must(cluster):
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        cond = threading.Condition()
        with ExitStack() as stack:
            def member(i: int) -> Member:
                return stack.enter_context(Member("confluent", bootstrap, TOPIC, "sticky", assignor="cooperative-sticky",
                                                  cond=cond, name=f"sticky-{i}"))

            pair = [member(0), member(1)]
            wait_until(pair, lambda: balanced_assignment(pair, PARTITIONS), "two members sharing the partitions")
            before = {m.name: m.partitions for m in pair}
            marks = {m.name: len(m.lines) for m in pair}
            third = member(2)
            trio_ = [*pair, third]
            # Not only stable: librdkafka's leader may revoke from one member in one generation and from
            # the other in the next, with a stable 2/3/1 assignment in between.
            wait_until(trio_, lambda: balanced_assignment(trio_, PARTITIONS), "three members sharing the partitions")
            for m in pair:
                assert m.partitions <= before[m.name], f"{m.name} was given a partition it did not have"
                revoked = [set(line["removed"]) for line in m.lines[marks[m.name]:] if line["event"] == "revoked"]
                # Incremental: only what moved to the newcomer is revoked, never the whole assignment.
                assert set().union(*revoked) == before[m.name] - m.partitions
                assert len(before[m.name] - m.partitions) == 1
            assert len(third.partitions) == 2
            for m in trio_:
                m.stop()

    await trio.to_thread.run_sync(scenario)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
async def test_kcat_balanced_consumer_reads_in_a_group_and_commits(cluster):
    bootstrap = cluster.bootstrap

    def scenario() -> None:
        values = [f"k{i}" for i in range(12)]
        produce(bootstrap, values)
        command = ["kcat", "-b", bootstrap, "-G", "kcat-readers", "-X", "auto.offset.reset=earliest", "-e", "-q",
                   TOPIC]
        first = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        assert sorted(first.stdout.split()) == sorted(values)
        produce(bootstrap, ["after"])
        again = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        assert again.stdout.split() == ["after"]  # the group's commits: only what is new

    await trio.to_thread.run_sync(scenario)
