"""Online migration of a live group between the classic and the consumer protocol, with real clients
(group.consumer.migration.policy=bidirectional), each member in its own process
(tests.helpers.group_consumer), waited on through what the members print (never a clock).

Two kafka-python consumers (classic protocol) share the topic; a confluent-kafka consumer with
``group.protocol=consumer`` joins: the group becomes a consumer group (``kraftpy groups describe``
says so), the classic members go on inside it and the three share the partitions, every record read
once. The consumer member leaves: the group is a classic group again and the two classic members
take every partition back and go on reading.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from contextlib import ExitStack

import pytest
import trio

from tests.broker.test_consumer_group_protocol import SETTINGS, TOPIC, produce, read
from tests.helpers import forkserver
from tests.helpers.cluster import open_cluster
from tests.helpers.group_members import Member, stable_assignment, wait_until

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

pytestmark = pytest.mark.slow

PARTITIONS = 6
GROUP = "migrating"


def describe(bootstrap: str) -> dict:
    cli = forkserver.run(["groups", "describe", "--group", GROUP, "--members",
                          "--json", "--bootstrap-server", bootstrap], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    (doc,) = json.loads(cli.stdout)["groups"]
    return doc


def values(members: list[Member], prefix: str) -> Counter:
    return Counter(v for _, _, v in read(members) if v.startswith(prefix))


async def test_classic_members_upgraded_by_a_consumer_member_and_downgraded_when_it_leaves(tmp_path):
    async with open_cluster(tmp_path, brokers=1, group_consumer_migration_policy="bidirectional",
                            **SETTINGS) as cluster:
        await cluster.create_topic(TOPIC, partitions=PARTITIONS)
        bootstrap = cluster.bootstrap

        def scenario() -> None:
            cond = threading.Condition()
            with ExitStack() as stack:
                classics = [stack.enter_context(Member("kafka-python", bootstrap, TOPIC, GROUP, cond=cond,
                                                       name=f"classic-{i}")) for i in range(2)]
                wait_until(classics, lambda: stable_assignment(classics, PARTITIONS), "a classic group of two")
                first = [f"a{i}" for i in range(60)]
                produce(bootstrap, first, PARTITIONS)
                wait_until(classics, lambda: sum(values(classics, "a").values()) >= len(first), "every record read")
                assert describe(bootstrap).get("group_protocol") is None  # a classic group

                # A consumer-protocol member joins: the group becomes a consumer group, the classic
                # members stay in it and give up partitions for the newcomer.
                newcomer = Member("confluent", bootstrap, TOPIC, GROUP, cond=cond, name="consumer")
                newcomer.argv += ["--group-protocol", "consumer"]
                stack.enter_context(newcomer)
                everyone = [*classics, newcomer]
                wait_until(everyone, lambda: stable_assignment(everyone, PARTITIONS), "the three sharing the partitions")
                doc = describe(bootstrap)
                assert doc["group_protocol"] == "consumer" and len(doc["members"]) == 3
                assert sorted(p for m in doc["members"] for p in m["assignment"].get(TOPIC, [])) == list(
                    range(PARTITIONS))
                second = [f"b{i}" for i in range(60)]
                produce(bootstrap, second, PARTITIONS)
                wait_until(everyone, lambda: sum(values(everyone, "b").values()) >= len(second),
                           "the second batch read")
                assert values(everyone, "a") == Counter(first) and values(everyone, "b") == Counter(second), \
                    "a record read twice, or missed"
                assert {p for p, _, v in newcomer.records() if v.startswith("b")}, "the consumer member read nothing"

                # The consumer member leaves: a classic group again, the classic members take over.
                assert newcomer.stop() == 0, newcomer.tail()
                wait_until(classics, lambda: stable_assignment(classics, PARTITIONS), "the classic members taking over")
                doc = describe(bootstrap)
                assert doc.get("group_protocol") is None and doc["state"] == "Stable" and len(doc["members"]) == 2
                third = [f"c{i}" for i in range(60)]
                produce(bootstrap, third, PARTITIONS)
                wait_until(classics, lambda: sum(values(classics, "c").values()) >= len(third), "the third batch read")
                assert values(classics, "c") == Counter(third), "a record of the third batch read twice, or missed"
                assert values(everyone, "a") == Counter(first) and values(everyone, "b") == Counter(second)
                for m in classics:
                    assert m.stop() == 0, m.tail()

        await trio.to_thread.run_sync(scenario)
