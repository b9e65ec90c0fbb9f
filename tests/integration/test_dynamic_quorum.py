"""A dynamic controller quorum (KIP-853) changed under load, the way docs/operations.md says to: one
controller (formatted --standalone) grows to three, one controller's disk is replaced (killed, wiped,
formatted again with --no-initial-controllers, the old replica removed and the new one added), then the
quorum shrinks to one, the leader removing itself on the way; meanwhile an idempotent acks=all producer
writes to two brokers, which only ever knew controller.quorum.bootstrap.servers.

Afterwards: no delivery failed and every acknowledged record is in the log at the offset acknowledged;
the brokers were never fenced for as long as a session timeout; the voters are the one left, with its
new directory id. The numbers (records acknowledged, fenced stretches, the changes' duration) are
printed (`-s` shows them).

Also: a static quorum (controller.quorum.voters) moves to kraft.version 1 with `kraftpy features upgrade`.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers.deployments import DevDeployment, DynamicQuorumCluster, create_topics, kraftpy_cli
from tests.helpers.roll import IdempotentProducer

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

pytestmark = pytest.mark.slow
TOPIC = "through-changes"
PARTITIONS = 2


def kafka_voter_change(cluster: DynamicQuorumCluster, voter: int, directory: str, adding: bool,
                       through_broker: bool = False):
    """AddRaftVoter or RemoveRaftVoter v0 over the Kafka protocol, sent to the quorum leader's controller
    listener as kafka-metadata-quorum.sh --bootstrap-controller add-controller / remove-controller sends it,
    or to a broker (``through_broker``: --bootstrap-server), which forwards it."""
    import uuid

    import trio

    from kraftpy.broker.client import KafkaConnection
    from kraftpy.ids import Uuid
    from kraftpy.protocol.api_keys import ApiKey
    from kraftpy.protocol.messages import AddRaftVoterRequest, RemoveRaftVoterRequest

    directory_id = uuid.UUID(bytes=Uuid.from_base64(directory).raw)
    if adding:
        api, request = ApiKey.ADD_RAFT_VOTER, AddRaftVoterRequest(
            cluster_id=cluster.cluster_id, timeout_ms=30_000, voter_id=voter, voter_directory_id=directory_id,
            listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="127.0.0.1",
                                                    port=cluster.controller_ports[voter])])
    else:
        api, request = ApiKey.REMOVE_RAFT_VOTER, RemoveRaftVoterRequest(
            cluster_id=cluster.cluster_id, voter_id=voter, voter_directory_id=directory_id)
    if through_broker:
        port = int(cluster.bootstrap.split(",")[0].rsplit(":", 1)[1])
    else:
        port = cluster.controller_ports[cluster.status()["leader_id"]]

    async def go():
        with trio.fail_after(60):  # bounds a failure only
            async with await KafkaConnection.connect("127.0.0.1", port) as conn:
                return await conn.request(api, 0, request)

    answer = trio.run(go)
    return answer.error_code, answer.error_message


def read_back(bootstrap: str, partitions: int) -> dict[int, dict[int, int]]:
    """Every record of TOPIC up to each partition's high watermark: partition -> {offset: value}."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-back", "enable.auto.commit": False,
                         "log_level": 0})
    out: dict[int, dict[int, int]] = {}
    try:
        for partition in range(partitions):
            _low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)
            consumer.assign([TopicPartition(TOPIC, partition, 0)])
            records: dict[int, int] = {}
            while len(records) < high:
                for message in consumer.consume(1000, 5.0):
                    assert message.error() is None, message.error()
                    records[message.offset()] = int(message.value())
            out[partition] = records
    finally:
        consumer.close()
    return out


def test_grow_replace_and_shrink_the_controller_quorum_under_a_producer(tmp_path) -> None:
    with DynamicQuorumCluster(tmp_path) as cluster:
        create_topics(cluster.bootstrap, [NewTopic(TOPIC, PARTITIONS, 2)], deployment=cluster)
        producer = IdempotentProducer(cluster.bootstrap, TOPIC, PARTITIONS)
        producer.start()
        producer.wait_acked(200)
        started = time.monotonic()
        steps: list[tuple[str, float]] = []

        def step(what: str) -> None:
            steps.append((what, time.monotonic() - started))
            producer.wait_acked(producer.acked_count() + 50)  # it keeps being served between changes

        # Grow: 2 and 3 run as observers (formatted --no-initial-controllers); each is added once caught up.
        first = cluster.directory_id(1)
        assert cluster.voters() == {1: first}
        cluster.add_controller(2)
        cluster.add_controller(3)
        assert set(cluster.voters()) == {1, 2, 3}
        step("grown to three")

        # Replace controller 2's disk: the new disk is a new replica, removed from nothing, added anew.
        old = cluster.replace_disk(2)
        new = cluster.directory_id(2)
        assert new != old
        cluster.remove_controller(2, old)
        assert cluster.voters() == {1: first, 3: cluster.directory_id(3)}
        # Added back with Kafka's AddRaftVoter, as kafka-metadata-quorum.sh add-controller sends it.
        cluster.wait_caught_up(2)
        assert kafka_voter_change(cluster, 2, new, adding=True) == (0, None)
        assert cluster.voters() == {1: first, 2: new, 3: cluster.directory_id(3)}
        step("controller 2's disk replaced")

        # Shrink to one: remove 3 (with Kafka's RemoveRaftVoter, sent to a broker, which forwards it), then
        # the leader (it hands over once its removal is committed).
        assert kafka_voter_change(cluster, 3, cluster.directory_id(3), adding=False, through_broker=True) == (0, None)
        # The leader's refusal comes back through the broker with its code.
        from kraftpy.protocol.errors import ErrorCode

        again = kafka_voter_change(cluster, 3, cluster.directory_id(3), adding=False, through_broker=True)
        assert again[0] == ErrorCode.VOTER_NOT_FOUND, again
        leader = cluster.status()["leader_id"]
        cluster.remove_controller(leader, cluster.directory_id(leader))
        left = ({1, 2} - {leader}).pop()
        status = cluster.status()
        assert {v["id"]: v["directory_id"] for v in status["voters"]} == {left: cluster.directory_id(left)}
        assert status["leader_id"] == left and status["kraft_version"] == 1
        step("shrunk to one")

        acked_before_stop = producer.acked_count()
        producer.stop()
        assert not producer.failed and not producer.fatal, (producer.failed[:3], producer.fatal)
        stored = read_back(cluster.bootstrap, PARTITIONS)
        lost = [(p, seq, offset) for p, acks in producer.acked.items() for seq, offset in acks
                if stored.get(p, {}).get(offset) != seq]
        fenced = cluster.broker_fenced_intervals()
        acked = producer.acked_count()
        print(f"\n{acked} records acknowledged ({acked_before_stop} before the producer stopped), {len(lost)} lost; "
              f"steps {[(w, round(t, 1)) for w, t in steps]}; brokers' fenced stretches {fenced}")
        assert lost == []
        assert all(d < cluster.session_timeout_s for stretches in fenced.values() for d in stretches), fenced


def test_a_static_quorum_moves_to_kraft_version_1_with_features_upgrade(tmp_path) -> None:
    """controller.quorum.voters, kraft.version 0: the voters report their directory ids to the leader,
    and `kraftpy features upgrade --feature kraft.version=1` writes them into the log."""
    with DevDeployment(tmp_path) as dev:
        controller = f"127.0.0.1:{dev.controller_address[1]}"
        directory = next(line.split("=", 1)[1].strip() for line in (dev.directory / "data" / "meta.properties")
                         .read_text().splitlines() if line.startswith("directory.id="))
        remove = ("quorum", "remove-controller", "--controller-id", 1, "--controller-directory-id", directory,
                  "--bootstrap-controller", controller)

        def describe() -> dict:
            return json.loads(kraftpy_cli("quorum", "describe", "--status", "--json", "--bootstrap-controller",
                                          controller))

        assert describe()["kraft_version"] == 0
        assert "UNSUPPORTED_VERSION: kraft.version is 0" in kraftpy_cli(*remove, expect_exit=1)
        out = kraftpy_cli("features", "upgrade", "--feature", "kraft.version=1", "--bootstrap-server", dev.bootstrap)
        assert "kraft.version was upgraded to 1." in out
        after = describe()
        assert after["kraft_version"] == 1 and [v["directory_id"] for v in after["voters"]] == [directory]
        assert after["endpoints"] == {"1": [{"name": "CONTROLLER", "host": "127.0.0.1",
                                             "port": dev.controller_address[1]}]}
        features = json.loads(kraftpy_cli("features", "describe", "--json", "--bootstrap-server", dev.bootstrap))
        assert {r["feature"]: r["finalized_version_level"] for r in features}["kraft.version"] == 1
        # The voters are the log's now: a change is judged as such (this one would leave none).
        assert "INVALID_REQUEST: the last voter cannot be removed" in kraftpy_cli(*remove, expect_exit=1)
        again = kraftpy_cli("features", "upgrade", "--feature", "kraft.version=1", "--bootstrap-server", dev.bootstrap)
        assert "kraft.version was upgraded to 1." in again  # nothing to do: at 1 already
