"""Faults on demand: kill, stop and restart a broker, pause one, cut one off from the others; an
application's producer (acks=all, idempotent) keeps every record through each, and each broker comes
back in sync.

From the helpers on, this module's code is the example docs/testing.md shows under "Faults on demand",
as it is (tests/testing/test_docs.py checks that): a suite run with ``--kraftpy-brokers 3``, where the
plugin restores the cluster after each test. Here a module fixture of the same name stands in for the
session's cluster, with brokers fenced 1.5 s after their last heartbeat (3 s by default), and restores it.
"""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kraftpy.testing import Cluster, cluster
from kraftpy.testing.faults import process_state

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kraftpy_cluster(tmp_path_factory) -> Cluster:
    with cluster(brokers=3, directory=tmp_path_factory.mktemp("faults"), broker_session_timeout_ms=1500,
                 replica_lag_time_max_ms=1500) as c:
        yield c


@pytest.fixture(autouse=True)
def restored(kraftpy_cluster: Cluster) -> None:
    yield
    kraftpy_cluster.restore()


# --- the example of docs/testing.md --------------------------------------------------------------


def produce(bootstrap, topic, values):
    """Produce each value (acks=all) and wait for every delivery; the errors of those that failed."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000})
    failed = []
    for i in values:
        producer.produce(topic, b"%d" % i, on_delivery=lambda err, _: err and failed.append(err.name()))
    assert producer.flush(90) == 0
    return failed


def consume(bootstrap, topic, count):
    """The first ``count`` values of the topic's partition 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    while len(values) < count:
        message = consumer.poll(30)
        assert message is not None, f"{len(values)} of {count} read"
        if message.error() is None:
            values.append(int(message.value()))
    consumer.close()
    return values


def test_kill_the_leader_then_start_it_again(kraftpy_cluster, kraftpy_topic):
    topic = kraftpy_topic(replication_factor=3, config={"min.insync.replicas": 2})
    assert not produce(kraftpy_cluster.bootstrap_servers, topic, range(0, 50))
    leader = kraftpy_cluster.leader(topic)
    pid = leader.pid
    leader.kill()  # SIGKILL
    assert leader.state == "stopped" and process_state(pid) in (None, "Z")
    # Elected once the controller has fenced the dead broker (broker.session.timeout.ms):
    assert kraftpy_cluster.leader(topic, not_on=leader) != leader
    assert not produce(kraftpy_cluster.bootstrap_servers, topic, range(50, 100))
    leader.start()  # returns once it is back in sync
    assert set(kraftpy_cluster.describe_topic(topic).partitions[0].isr) == {1, 2, 3}
    assert consume(kraftpy_cluster.bootstrap_servers, topic, 100) == list(range(100))


def test_a_graceful_stop_hands_the_leadership_over(kraftpy_cluster, kraftpy_topic):
    topic = kraftpy_topic(replication_factor=3, config={"min.insync.replicas": 2})
    assert not produce(kraftpy_cluster.bootstrap_servers, topic, range(0, 20))
    leader = kraftpy_cluster.leader(topic)
    leader.stop()  # SIGTERM: a controlled shutdown moves its leaderships before it exits
    assert leader.state == "stopped"
    assert kraftpy_cluster.leader(topic, not_on=leader, timeout=5) != leader
    assert not produce(kraftpy_cluster.bootstrap_servers, topic, range(20, 40))
    leader.restart()
    assert set(kraftpy_cluster.describe_topic(topic).partitions[0].isr) == {1, 2, 3}
    assert consume(kraftpy_cluster.bootstrap_servers, topic, 40) == list(range(40))


def test_pause_the_leader(kraftpy_cluster, kraftpy_topic):
    topic = kraftpy_topic(replication_factor=3, config={"min.insync.replicas": 2})
    assert not produce(kraftpy_cluster.bootstrap_servers, topic, range(0, 20))
    leader = kraftpy_cluster.leader(topic)
    leader.pause()  # SIGSTOP: frozen, its connections open and silent
    assert leader.state == "paused" and process_state(leader.pid) == "T"
    # Fenced once its heartbeats have stopped for broker.session.timeout.ms:
    assert kraftpy_cluster.leader(topic, not_on=leader) != leader
    assert not produce(kraftpy_cluster.bootstrap_servers, topic, range(20, 40))
    leader.resume()  # SIGCONT; returns once it is back in sync
    assert set(kraftpy_cluster.describe_topic(topic).partitions[0].isr) == {1, 2, 3}
    assert consume(kraftpy_cluster.bootstrap_servers, topic, 40) == list(range(40))


def test_cut_the_leader_off_from_the_other_nodes(kraftpy_cluster, kraftpy_topic):
    topic = kraftpy_topic(replication_factor=3, config={"min.insync.replicas": 2})
    assert not produce(kraftpy_cluster.bootstrap_servers, topic, range(0, 20))
    leader = kraftpy_cluster.leader(topic)
    leader.isolate()  # from the controller and the other brokers; clients still reach it
    assert kraftpy_cluster.leader(topic, not_on=leader) != leader  # fenced: no heartbeat gets through
    with socket.create_connection(("127.0.0.1", leader.port), timeout=10):
        pass  # clients still reach it
    others = ",".join(b.address for b in kraftpy_cluster.brokers if b is not leader)
    assert not produce(others, topic, range(20, 40))  # the rest of the cluster serves without it
    leader.heal()  # reconnected; returns once it is back in sync
    assert set(kraftpy_cluster.describe_topic(topic).partitions[0].isr) == {1, 2, 3}
    assert consume(kraftpy_cluster.bootstrap_servers, topic, 40) == list(range(40))


def test_restore_undoes_every_fault(kraftpy_cluster):
    first, second, third = kraftpy_cluster.brokers
    first.kill()
    second.pause()
    third.isolate()
    assert sorted(kraftpy_cluster.restore()) == ["broker-1", "broker-2", "broker-3"]
    assert [(b.state, b.isolated) for b in kraftpy_cluster.brokers] == [("running", False)] * 3
    assert kraftpy_cluster.status()["proxy"]["unidentified"] == 0  # every node's connection was told apart
