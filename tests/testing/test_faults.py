"""Faults on demand, as docs/testing.md shows them: kill, stop and restart a broker, pause one, cut one
off from the others; an application's producer (acks=all, idempotent) keeps every record through
each, and each broker comes back in sync. One cluster of three brokers serves the module; each test
leaves it restored."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kraftpy.testing import Cluster, cluster
from kraftpy.testing.faults import process_state

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> Cluster:
    # A broker is fenced 1.5 s after its last heartbeat here (3 s by default): the faults show sooner.
    with cluster(brokers=3, directory=tmp_path_factory.mktemp("faults"), broker_session_timeout_ms=1500,
                 replica_lag_time_max_ms=1500) as c:
        yield c


@pytest.fixture
def c(three: Cluster) -> Cluster:
    yield three
    three.restore()


def send(bootstrap: str, topic: str, values: range, **settings: object) -> list[str]:
    """Produce ``values`` (acks=all) and wait for every delivery; the errors of those that failed."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000, **settings})
    failed: list[str] = []
    for i in values:
        producer.produce(topic, value=b"%d" % i, on_delivery=lambda err, _msg: err and failed.append(err.name()))
    assert producer.flush(90) == 0
    return failed


def read(bootstrap: str, topic: str, count: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[int] = []
    try:
        for _ in range(200):  # bounds a failure only: each poll returns as soon as a record arrives
            if len(values) >= count:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(int(message.value()))
    finally:
        consumer.close()
    return values


def replicated(c: Cluster, topic: str) -> str:
    c.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    return topic


def test_kill_the_leader_then_start_it_again(c: Cluster):
    topic = replicated(c, "kill")
    assert not send(c.bootstrap_servers, topic, range(0, 50))
    leader = c.leader(topic)
    pid = leader.pid
    leader.kill()
    assert leader.state == "stopped" and process_state(pid) in (None, "Z")
    assert c.leader(topic, not_on=leader) != leader  # elected once the controller fenced the dead broker
    assert not send(c.bootstrap_servers, topic, range(50, 100))
    leader.start()
    assert leader.state == "running" and leader.pid != pid
    assert set(c.describe_topic(topic).partitions[0].isr) == {1, 2, 3}  # caught up again
    assert read(c.bootstrap_servers, topic, 100) == list(range(100))


def test_a_graceful_stop_hands_the_leadership_over(c: Cluster):
    topic = replicated(c, "stop")
    assert not send(c.bootstrap_servers, topic, range(0, 20))
    leader = c.leader(topic)
    leader.stop()  # SIGTERM: a controlled shutdown moves its leaderships before it exits
    assert leader.state == "stopped"
    assert c.leader(topic, not_on=leader, timeout=5) != leader
    assert not send(c.bootstrap_servers, topic, range(20, 40))
    leader.restart()
    assert set(c.describe_topic(topic).partitions[0].isr) == {1, 2, 3}
    assert read(c.bootstrap_servers, topic, 40) == list(range(40))


def test_pause_the_leader(c: Cluster):
    topic = replicated(c, "pause")
    assert not send(c.bootstrap_servers, topic, range(0, 20))
    leader = c.leader(topic)
    leader.pause()
    assert leader.state == "paused" and process_state(leader.pid) == "T"
    assert c.leader(topic, not_on=leader) != leader  # a paused broker misses its heartbeats and is fenced
    assert not send(c.bootstrap_servers, topic, range(20, 40))
    leader.resume()
    assert leader.state == "running" and process_state(leader.pid) in ("R", "S")
    assert set(c.describe_topic(topic).partitions[0].isr) == {1, 2, 3}
    assert read(c.bootstrap_servers, topic, 40) == list(range(40))


def test_cut_the_leader_off_from_the_other_nodes(c: Cluster):
    topic = replicated(c, "isolate")
    assert not send(c.bootstrap_servers, topic, range(0, 20))
    leader = c.leader(topic)
    leader.isolate()
    assert leader.isolated
    assert c.leader(topic, not_on=leader) != leader  # fenced: its heartbeats no longer reach the controller
    # Clients still reach it, and nobody can tell it that it no longer leads: it takes the write but
    # can never commit it (no follower fetches from it), so acks=all never acknowledges it.
    assert send(leader.address, topic, range(1000, 1001), **{"message.timeout.ms": 1500}) == ["_MSG_TIMED_OUT"]
    others = ",".join(b.address for b in c.brokers if b is not leader)
    assert not send(others, topic, range(20, 40))
    leader.heal()
    assert not leader.isolated
    assert c.status()["proxy"]["unidentified"] == 0  # every node-to-node connection was told apart
    assert set(c.describe_topic(topic).partitions[0].isr) == {1, 2, 3}
    assert read(c.bootstrap_servers, topic, 40) == list(range(40))  # the unacknowledged write is gone


def test_restore_undoes_every_fault(c: Cluster):
    first, second, third = c.brokers
    first.kill()
    second.pause()
    third.isolate()
    assert sorted(c.restore()) == ["broker-1", "broker-2", "broker-3"]
    assert [(b.state, b.isolated) for b in c.brokers] == [("running", False)] * 3
    assert c.restore() == []
