"""Offline replicas in broker heartbeats: the controller moves leadership and ISR places off them, as
Kafka's does for the replicas of a failed log directory; and a combined process's own broker
registers again at once after the process died."""

from __future__ import annotations

import random

from kraftpy.ids import Uuid
from kraftpy.metadata.controller import QuorumController
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import BrokerHeartbeatRequest, OfflineReplicaTopic
from kraftpy.metadata.records import NO_LEADER, PartitionChangeRecord
from tests.metadata.conftest import CLUSTER_ID, Cluster, registration_request

SESSION = 9.0


def offline_heartbeat(c: Cluster, broker_id: int, *parts: tuple[str, int]):
    reg = c.image.cluster.broker(broker_id)
    by_topic: dict = {}
    for name, pid in parts:
        by_topic.setdefault(c.topic(name).id, []).append(pid)
    request = BrokerHeartbeatRequest(broker_id, reg.epoch, c.next_offset - 1, offline_replicas=tuple(
        OfflineReplicaTopic(topic_id, tuple(pids)) for topic_id, pids in by_topic.items()))
    return c.commit(c.controller.handle_broker_heartbeat(request, c.now))


def test_an_offline_leader_replica_hands_its_leadership_to_another_isr_member(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3], [1, 2, 3]])
    before = c.partition("t", 0)
    response = offline_heartbeat(c, 1, ("t", 0))
    assert response.error_code == Errors.NONE and not response.is_fenced
    after = c.partition("t", 0)
    assert after.leader == 2 and after.isr == (2, 3) and after.leader_epoch > before.leader_epoch
    # The broker's other partitions are not touched: it stays their leader, in their ISR.
    assert c.partition("t", 1).leader == 1 and c.partition("t", 1).isr == (1, 2, 3)
    assert not c.image.cluster.broker(1).fenced


def test_an_offline_follower_replica_leaves_the_isr(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    offline_heartbeat(c, 3, ("t", 0))
    assert c.partition("t").leader == 1 and c.partition("t").isr == (1, 2)


def test_the_report_repeated_in_every_heartbeat_writes_nothing_more(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    offline_heartbeat(c, 1, ("t", 0))
    written = len(c.log)
    for _ in range(3):
        offline_heartbeat(c, 1, ("t", 0))
    assert len(c.log) == written


def test_the_last_isr_member_offline_leaves_the_partition_leaderless_with_its_isr(cluster3):
    """KIP-841: the ISR is never empty; the partition waits for its replica to come back."""
    c = cluster3
    c.create_topic("t", assignments=[[2]])
    offline_heartbeat(c, 2, ("t", 0))
    part = c.partition("t")
    assert part.leader == NO_LEADER and part.isr == (2,)
    written = len(c.log)
    offline_heartbeat(c, 2, ("t", 0))
    assert len(c.log) == written


def test_unclean_election_may_pick_another_replica_but_never_the_offline_one(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id=CLUSTER_ID,
                                      static_broker_configs={"unclean.leader.election.enable": "true"}))
    c.add_brokers(1, 2)
    c.create_topic("t", assignments=[[1, 2]])
    offline_heartbeat(c, 2, ("t", 0))  # the follower leaves the ISR: [1]
    offline_heartbeat(c, 1, ("t", 0))
    part = c.partition("t")
    assert part.leader == 2 and part.isr == (2,)


def test_replicas_the_broker_does_not_hold_and_unknown_topics_are_ignored(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    reg = c.image.cluster.broker(3)
    request = BrokerHeartbeatRequest(3, reg.epoch, c.next_offset - 1, offline_replicas=(
        OfflineReplicaTopic(c.topic("t").id, (0, 7)), OfflineReplicaTopic(Uuid(bytes(16)), (0,))))
    written = len(c.log)
    assert c.commit(c.controller.handle_broker_heartbeat(request, c.now)).error_code == Errors.NONE
    assert len(c.log) == written and c.partition("t").isr == (1, 2)


def test_a_broker_unfenced_with_an_offline_replica_does_not_lead_it(make_cluster):
    """The heartbeat that unfences a restarted broker elects leaderless partitions; the same heartbeat's
    offline list takes the partitions whose replica failed there away from it again."""
    c = make_cluster()
    c.add_brokers(1)
    c.create_topic("t", assignments=[[1]])
    c.create_topic("u", assignments=[[1]])
    c.heartbeat(1, want_shut_down=True)
    assert c.heartbeat(1, want_shut_down=True).should_shut_down
    assert c.register(1, generation=1).error_code == Errors.NONE
    reg = c.image.cluster.broker(1)
    request = BrokerHeartbeatRequest(1, reg.epoch, c.next_offset - 1,
                                     offline_replicas=(OfflineReplicaTopic(c.topic("t").id, (0,)),))
    response = c.commit(c.controller.handle_broker_heartbeat(request, c.now))
    assert not response.is_fenced
    assert c.partition("t").leader == NO_LEADER and c.partition("u").leader == 1
    assert isinstance(c.log[-1], PartitionChangeRecord)


def restarted(c: Cluster) -> QuorumController:
    """A new active controller on the same metadata (the process of the old one died)."""
    controller = QuorumController(c.config, rng=random.Random(1), image=c.image)
    assert not controller.activate(c.now).records
    return controller


def test_after_a_crash_of_a_combined_process_its_broker_registers_at_once(make_cluster):
    """A combined process's controller knows its own broker: an incarnation registered before the
    controller became active ran in a process that is gone, so it has no session to wait out."""
    c = make_cluster(ControllerConfig(cluster_id=CLUSTER_ID, local_broker_id=1))
    c.add_brokers(1)
    c.create_topic("t", assignments=[[1]])
    assert not c.image.cluster.broker(1).fenced  # killed: no controlled shutdown fenced it
    controller = restarted(c)
    result = controller.handle_broker_registration(registration_request(1, generation=1), c.now, c.next_offset)
    assert result.response.error_code == Errors.NONE


def test_other_brokers_keep_their_session_when_a_combined_controller_becomes_active(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id=CLUSTER_ID, local_broker_id=1))
    c.add_brokers(1, 2)
    controller = restarted(c)
    result = controller.handle_broker_registration(registration_request(2, generation=1), c.now + SESSION / 2,
                                                   c.next_offset)
    assert result.response.error_code == Errors.DUPLICATE_BROKER_REGISTRATION


def test_without_a_local_broker_every_registered_broker_gets_a_session(make_cluster):
    c = make_cluster()
    c.add_brokers(1)
    controller = restarted(c)
    result = controller.handle_broker_registration(registration_request(1, generation=1), c.now + SESSION / 2,
                                                   c.next_offset)
    assert result.response.error_code == Errors.DUPLICATE_BROKER_REGISTRATION
    later = controller.handle_broker_registration(registration_request(1, generation=1), c.now + SESSION + 1,
                                                  c.next_offset)
    assert later.response.error_code == Errors.NONE
