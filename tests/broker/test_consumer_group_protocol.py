"""KIP-848 consumer groups with real clients: confluent-kafka consumers using ``group.protocol=consumer``,
each in its own process (tests.helpers.group_consumer), against a broker whose
group.coordinator.rebalance.protocols includes ``consumer``.

One scenario, waited on through what the members print (never a clock): three members share six
partitions and read every record once; a member killed with -9 loses its partitions at the session
timeout and the others read them; partitions added to the topic while the group runs are assigned
and read.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from contextlib import ExitStack

import pytest
import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import ApiVersionsRequest
from tests.helpers.cluster import open_cluster
from tests.helpers.group_members import Member, stable_assignment, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions  # noqa: E402

from tests.helpers import forkserver  # noqa: E402

pytestmark = pytest.mark.slow

TOPIC = "events"
PARTITIONS = 6
SETTINGS = dict(offsets_topic_num_partitions=4, group_coordinator_rebalance_protocols=("classic", "consumer"),
                group_consumer_heartbeat_interval_ms=500, group_consumer_session_timeout_ms=3000)


def produce(bootstrap: str, values: list[str], partitions: int) -> None:
    """Value i to partition i % partitions, acks=all."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0})
    failures = []
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value.encode(), partition=i % partitions,
                         on_delivery=lambda err, msg: err and failures.append(err))
    assert producer.flush(30) == 0 and not failures, failures


def read(members: list[Member]) -> list[tuple[int, int, str]]:
    return [record for m in members for record in m.records()]


def consumer_member(stack: ExitStack, bootstrap: str, group: str, name: str, cond: threading.Condition) -> Member:
    member = Member("confluent", bootstrap, TOPIC, group, cond=cond, name=name)
    member.argv += ["--group-protocol", "consumer"]
    return stack.enter_context(member)


async def advertised(cluster) -> dict[int, tuple[int, int]]:
    async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1], client_id="t") as conn:
        response = await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                                client_software_version="1"))
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


async def test_the_consumer_protocol_is_advertised_only_when_turned_on(tmp_path):
    async with open_cluster(tmp_path / "off", brokers=1) as cluster:
        versions = await advertised(cluster)
        assert ApiKey.CONSUMER_GROUP_HEARTBEAT not in versions and ApiKey.CONSUMER_GROUP_DESCRIBE not in versions
        assert versions[ApiKey.OFFSET_COMMIT] == (0, 9)
    async with open_cluster(tmp_path / "on", brokers=1, **SETTINGS) as cluster:
        versions = await advertised(cluster)
        assert versions[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
        assert versions[ApiKey.CONSUMER_GROUP_DESCRIBE] == (0, 0)


async def test_three_consumer_protocol_members_a_killed_member_and_added_partitions(tmp_path):
    async with open_cluster(tmp_path, brokers=1, **SETTINGS) as cluster:
        await cluster.create_topic(TOPIC, partitions=PARTITIONS)
        bootstrap = cluster.bootstrap

        def scenario() -> None:
            cond = threading.Condition()
            with ExitStack() as stack:
                members = [consumer_member(stack, bootstrap, "kip848", f"member-{i}", cond) for i in range(3)]
                wait_until(members, lambda: stable_assignment(members, PARTITIONS),
                           "three members sharing the partitions")
                first = [f"a{i}" for i in range(60)]
                produce(bootstrap, first, PARTITIONS)
                wait_until(members, lambda: len(read(members)) >= len(first), "every record read")
                assert Counter(v for _, _, v in read(members)) == Counter(first), "a record read twice, or missed"
                for m in members:
                    assert not m.records_not_held(), m.tail()

                # A member killed: no leave; its session times out and the others take its partitions.
                victim, survivors = members[0], members[1:]
                orphaned = victim.partitions
                victim.kill()
                wait_until(survivors, lambda: stable_assignment(survivors, PARTITIONS), "the survivors taking over")
                admin = AdminClient({"bootstrap.servers": bootstrap})  # ConsumerGroupDescribe
                described = admin.describe_consumer_groups(["kip848"], request_timeout=10)["kip848"].result(timeout=15)
                assert len(described.members) == 2 and described.type.name == "CONSUMER"
                assert {tp.partition for m in described.members for tp in m.assignment.topic_partitions} == set(
                    range(PARTITIONS))
                # kraftpy's own tool describes it too (ConsumerGroupDescribe when DescribeGroups knows no such group).
                cli = forkserver.run(["groups", "describe", "--group", "kip848",
                                      "--members", "--json", "--bootstrap-server", bootstrap],
                                     capture_output=True, text=True, timeout=60)
                assert cli.returncode == 0, cli.stderr
                (doc,) = json.loads(cli.stdout)["groups"]
                assert doc["protocol_type"] == "consumer" and len(doc["members"]) == 2
                assert sorted(p for m in doc["members"] for p in m["assignment"].get(TOPIC, [])) == list(
                    range(PARTITIONS))
                before = len(read(survivors))
                second = [f"b{i}" for i in range(30)]
                produce(bootstrap, second, PARTITIONS)
                wait_until(survivors, lambda: Counter(v for _, _, v in read(survivors)) >= Counter(second),
                           "the orphaned partitions read")
                assert orphaned <= {p for p, _, _ in read(survivors)[before:]} | {
                    p for m in survivors for p, _, v in m.records() if v.startswith("b")}
                got_b = [v for _, _, v in read(survivors) if v.startswith("b")]
                assert Counter(got_b) == Counter(second), "a record of the second batch read twice, or missed"

                # Partitions added while the group runs: the broker sees them and assigns them.
                admin.create_partitions([NewPartitions(TOPIC, 9)])[TOPIC].result(timeout=30)
                wait_until(survivors, lambda: stable_assignment(survivors, 9), "the new partitions assigned")
                third = [f"c{i}" for i in range(27)]
                produce(bootstrap, third, 9)
                wait_until(survivors, lambda: len([1 for _, _, v in read(survivors) if v.startswith("c")]) >= 27,
                           "records of the new partitions read")
                got_c = [(p, v) for p, _, v in read(survivors) if v.startswith("c")]
                assert Counter(v for _, v in got_c) == Counter(third)
                assert {6, 7, 8} <= {p for p, _ in got_c}
                for m in survivors:
                    assert m.stop() == 0, m.tail()

        await trio.to_thread.run_sync(scenario)
