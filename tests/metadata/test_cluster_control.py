"""Broker registration, heartbeats, sessions, fencing and controlled shutdown."""

from __future__ import annotations

from kraftpy.metadata.cluster_control import BrokerHeartbeatManager
from kraftpy.metadata.controller_config import LATEST_METADATA_VERSION, ControllerConfig
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import BrokerHeartbeatRequest, UnregisterBrokerRequest
from kraftpy.metadata.records import (
    NO_LEADER,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

SESSION = 9.0  # broker.session.timeout.ms default, in seconds


def test_registration_epoch_is_the_offset_of_the_registration_record(cluster):
    offset = cluster.next_offset
    response = cluster.register(1)
    assert response.error_code == Errors.NONE and response.broker_epoch == offset
    assert cluster.log[offset] == RegisterBrokerRecord(
        1, cluster.log[offset].incarnation_id, offset, cluster.log[offset].end_points,
        cluster.log[offset].features, None, fenced=True, in_controlled_shutdown=False,
    )
    reg = cluster.image.cluster.broker(1)
    assert reg.epoch == offset and reg.fenced and reg.listeners[0].host == "broker1"


def test_registration_keeps_listeners_and_rack(cluster):
    cluster.register(4, rack="rack-a")
    reg = cluster.image.cluster.broker(4)
    assert reg.rack == "rack-a" and reg.listeners[0].name == "PLAINTEXT" and reg.listeners[0].port == 9096


def test_registration_with_another_cluster_id_is_refused(cluster):
    response = cluster.register(1, cluster_id="someone-else")
    assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID and response.broker_epoch == -1
    assert cluster.image.cluster.broker(1) is None


def test_registration_of_broker_without_the_finalized_metadata_version_is_refused(cluster):
    response = cluster.register(1, features=[BrokerFeature("metadata.version", 1, 6)])
    assert response.error_code == Errors.UNSUPPORTED_VERSION


def test_second_incarnation_is_refused_while_the_first_session_is_alive(cluster):
    cluster.add_broker(1)
    cluster.advance(SESSION / 2)
    response = cluster.register(1, generation=1)
    assert response.error_code == Errors.DUPLICATE_BROKER_REGISTRATION


def test_a_broker_restarting_after_a_controlled_shutdown_registers_at_once(cluster3):
    """The shutdown fenced the old incarnation, and a fenced broker has no live session (as in Kafka):
    the restarted broker does not wait out broker.session.timeout.ms."""
    c = cluster3
    c.heartbeat(1, want_shut_down=True)
    assert c.heartbeat(1, want_shut_down=True).should_shut_down and c.image.cluster.broker(1).fenced
    c.advance(SESSION / 10)
    response = c.register(1, generation=1)
    assert response.error_code == Errors.NONE


def test_second_incarnation_is_accepted_once_the_session_expired(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    c.advance(SESSION + 1)
    c.keep_alive(2, 3)
    old_epoch = c.image.cluster.broker(1).epoch
    response = c.register(1, generation=1)
    assert response.error_code == Errors.NONE and response.broker_epoch > old_epoch
    reg = c.image.cluster.broker(1)
    assert reg.fenced and reg.incarnation_id != c.log[old_epoch].incarnation_id
    part = c.partition("t")
    assert part.leader == 2 and 1 not in part.isr  # the old incarnation's leadership went away


def test_reregistration_with_the_same_incarnation_is_idempotent(cluster):
    first = cluster.register(1)
    log_length = cluster.next_offset
    again = cluster.register(1)
    assert again.error_code == Errors.NONE and again.broker_epoch == first.broker_epoch
    assert cluster.next_offset == log_length


def test_reregistration_with_the_same_incarnation_and_new_details_gets_a_new_epoch(cluster):
    first = cluster.register(1)
    changed = cluster.register(1, port=19092)
    assert changed.error_code == Errors.NONE and changed.broker_epoch > first.broker_epoch
    assert cluster.image.cluster.broker(1).listeners[0].port == 19092


def test_new_broker_stays_fenced_until_it_reaches_its_registration_offset(cluster):
    epoch = cluster.register(1).broker_epoch
    behind = cluster.heartbeat(1, offset=epoch - 1)
    assert behind.error_code == Errors.NONE and behind.is_fenced and not behind.is_caught_up
    assert cluster.image.cluster.broker(1).fenced
    caught_up = cluster.heartbeat(1, offset=epoch)
    assert not caught_up.is_fenced and caught_up.is_caught_up and not caught_up.should_shut_down
    assert cluster.log[-1] == UnfenceBrokerRecord(1, epoch)
    assert cluster.image.cluster.is_active(1)


def test_heartbeat_from_unregistered_broker_is_refused(cluster):
    assert cluster.heartbeat(5, epoch=3).error_code == Errors.BROKER_ID_NOT_REGISTERED


def test_heartbeat_with_stale_broker_epoch_is_refused(cluster):
    epoch = cluster.add_broker(1)
    response = cluster.heartbeat(1, epoch=epoch - 1)
    assert response.error_code == Errors.STALE_BROKER_EPOCH and response.is_fenced


def test_session_expiry_fences_broker_and_moves_its_leaderships(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    c.advance(SESSION - 1)
    c.keep_alive(2, 3)
    assert c.commit(c.controller.tick(c.now)) == ()
    c.advance(2)
    fenced = c.commit(c.controller.tick(c.now))
    assert fenced == (1,)
    epoch = c.image.cluster.broker(1).epoch
    assert FenceBrokerRecord(1, epoch) in c.log
    part = c.partition("t")
    assert part.leader == 2 and part.isr == (2, 3) and part.leader_epoch == 1
    assert c.image.cluster.broker(1).fenced


def test_fencing_the_last_isr_member_leaves_the_partition_offline_with_that_member(cluster3):
    c = cluster3
    c.create_topic("solo", assignments=[[1]])
    c.advance(SESSION + 1)
    c.keep_alive(2, 3)
    c.commit(c.controller.tick(c.now))
    part = c.partition("solo")
    assert part.leader == NO_LEADER and part.isr == (1,)


def test_fencing_several_brokers_at_once_never_elects_a_fenced_one(cluster3):
    c = cluster3
    c.add_broker(4)
    c.create_topic("t", assignments=[[1, 2, 3]])
    c.advance(SESSION + 1)
    c.keep_alive(3, 4)
    assert c.commit(c.controller.tick(c.now)) == (1, 2)
    part = c.partition("t")
    assert part.leader == 3 and part.isr == (3,) and part.leader_epoch == 1
    assert sum(isinstance(r, PartitionChangeRecord) for r in c.log) == 1


def test_returning_broker_leads_its_offline_partition_again(cluster3):
    c = cluster3
    c.create_topic("solo", assignments=[[1]])
    c.advance(SESSION + 1)
    c.keep_alive(2, 3)
    c.commit(c.controller.tick(c.now))
    response = c.heartbeat(1)
    assert not response.is_fenced
    part = c.partition("solo")
    assert part.leader == 1 and part.leader_epoch == 2


def test_want_fence_fences_an_active_broker(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    response = c.heartbeat(1, want_fence=True)
    assert response.is_fenced and c.image.cluster.broker(1).fenced
    assert c.partition("t").leader == 2


def test_controlled_shutdown_moves_leaderships_before_allowing_shutdown(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3], [2, 1, 3]])
    first = c.heartbeat(1, want_shut_down=True)
    assert not first.should_shut_down and not first.is_fenced
    epoch = c.image.cluster.broker(1).epoch
    assert BrokerRegistrationChangeRecord(1, epoch, in_controlled_shutdown=1) in c.log
    assert c.partition("t", 0).leader == 2 and 1 not in c.partition("t", 0).isr
    assert 1 not in c.partition("t", 1).isr
    second = c.heartbeat(1, want_shut_down=True)
    assert second.should_shut_down and second.is_fenced
    assert c.image.cluster.broker(1).fenced


def test_controlled_shutdown_keeps_a_leadership_nobody_else_can_take_until_shutdown(cluster3):
    c = cluster3
    c.create_topic("solo", assignments=[[1]])
    c.heartbeat(1, want_shut_down=True)
    assert c.partition("solo").leader == 1  # still served while the broker runs
    response = c.heartbeat(1, want_shut_down=True)
    assert response.should_shut_down
    assert c.partition("solo").leader == NO_LEADER


def test_controlled_shutdown_waits_for_a_leadership_that_becomes_movable(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    c.heartbeat(2, want_fence=True)  # 2 leaves the ISR: 1 leads alone
    c.heartbeat(1, want_shut_down=True)
    assert c.partition("t").leader == 1
    c.heartbeat(2)  # 2 is back, but not yet in the ISR: nothing to move
    assert c.heartbeat(1, want_shut_down=True).should_shut_down


def test_fenced_broker_asking_to_shut_down_is_told_to_at_once(cluster):
    cluster.register(1)
    response = cluster.heartbeat(1, offset=0, want_shut_down=True)
    assert response.should_shut_down and response.is_fenced


def test_heartbeats_keep_the_session_alive(cluster3):
    c = cluster3
    for _ in range(5):
        c.advance(SESSION * 0.8)
        c.keep_alive(1, 2, 3)
        assert c.commit(c.controller.tick(c.now)) == ()
    assert all(c.image.cluster.is_active(b) for b in (1, 2, 3))


def test_a_session_has_run_out_at_the_deadline_the_timer_is_given():
    """The controller's timer sleeps until ``next_expiry`` and then ticks: at that very time the session
    must count as expired, or the timer finds nothing to do, wakes again at once, and spins (for ever
    on a virtual clock) until the clock moves past it."""
    sessions = BrokerHeartbeatManager(session_timeout=9.0)
    sessions.touch(1, 100.1)
    sessions.touch(2, 100.2)
    deadline = sessions.next_expiry()
    assert deadline == 100.1 + 9.0
    assert sessions.has_valid_session(1, deadline - 1e-9) and sessions.expired(deadline - 1e-9) == []
    assert not sessions.has_valid_session(1, deadline) and sessions.expired(deadline) == [1]
    assert sessions.has_valid_session(2, deadline)


def test_the_controller_fences_at_its_own_next_deadline(cluster3):
    c = cluster3
    c.keep_alive(1, 2, 3)
    c.now = c.controller.next_deadline()
    assert set(c.commit(c.controller.tick(c.now))) == {1, 2, 3}


def test_session_timeout_comes_from_config(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", broker_session_timeout_ms=2000))
    c.add_broker(1)
    c.advance(2.5)
    assert c.commit(c.controller.tick(c.now)) == (1,)


def test_unregister_broker_takes_it_out_of_partitions(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    epoch = c.image.cluster.broker(1).epoch
    # A running broker is refused: nothing is written.
    running = c.commit(c.controller.handle_unregister_broker(UnregisterBrokerRequest(1)))
    assert running.error_code == Errors.INVALID_REQUEST and "running" in running.error_message
    assert c.image.cluster.broker(1) is not None and c.partition("t").isr == (1, 2)
    c.heartbeat(1, want_fence=True)
    response = c.commit(c.controller.handle_unregister_broker(UnregisterBrokerRequest(1)))
    assert response.error_code == Errors.NONE and c.log[-1] == UnregisterBrokerRecord(1, epoch)
    assert c.image.cluster.broker(1) is None and c.partition("t").isr == (2,)
    again = c.commit(c.controller.handle_unregister_broker(UnregisterBrokerRequest(1)))
    assert again.error_code == Errors.BROKER_ID_NOT_REGISTERED


def test_activation_gives_registered_brokers_a_fresh_session(cluster3):
    from kraftpy.metadata.controller import QuorumController

    c = cluster3
    c.advance(100.0)
    successor = QuorumController(c.config, rng=c.controller.rng, image=c.image)
    assert successor.activate(c.now).records == ()  # metadata.version already set
    assert successor.fence_stale_brokers(c.now).response == ()
    assert successor.next_deadline() == c.now + SESSION
    assert successor.fence_stale_brokers(c.now + SESSION + 0.5).response == (1, 2, 3)


def test_a_prefix_of_a_fencing_or_an_unfencing_is_finished_later(cluster3):
    """Fencings and unfencings are not atomic (written in bounded batches): if the controller's
    leadership ends after only a prefix committed, what is left is correct and finished. A fencing's
    FenceBrokerRecord comes last, so the broker is still unfenced and its next fencing moves the rest;
    the next active controller elects the partitions an unfencing's prefix left without a leader."""
    from kraftpy.metadata.controller import QuorumController

    c = cluster3
    c.create_topic("led", assignments=[[1, 2], [1, 3], [1, 2]])
    c.create_topic("solo", assignments=[[1], [1]])
    c.advance(SESSION + 1)
    c.keep_alive(2, 3)
    result = c.controller.tick(c.now)
    assert not result.atomic and isinstance(result.records[-1], FenceBrokerRecord)
    c.commit(type(result)(result.records[:2], result.response))  # a prefix: two partition changes
    assert not c.image.cluster.broker(1).fenced
    successor = QuorumController(c.config, rng=c.controller.rng, image=c.image)  # the leadership moved
    c.controller = successor
    c.commit(successor.activate(c.now))
    c.advance(SESSION + 1)
    c.keep_alive(2, 3)
    assert c.commit(successor.tick(c.now)) == (1,)
    assert all(p.leader != 1 and 1 not in p.isr for p in c.topic("led").partitions.values())
    assert all(p.leader == NO_LEADER for p in c.topic("solo").partitions.values())

    unfence = successor.handle_broker_heartbeat(BrokerHeartbeatRequest(
        1, c.image.cluster.broker(1).epoch, c.next_offset - 1, False, False), c.now)
    assert not unfence.atomic and len(unfence.records) == 3  # the unfencing, then two elections
    c.commit(type(unfence)(unfence.records[:2], unfence.response))  # a prefix: one partition still offline
    assert [p.leader for p in c.topic("solo").partitions.values()].count(NO_LEADER) == 1
    after = QuorumController(c.config, rng=c.controller.rng, image=c.image)
    c.controller = after
    c.commit(after.activate(c.now))
    assert [p.leader for p in c.topic("solo").partitions.values()] == [1, 1]


def test_bootstrap_writes_metadata_version_first(cluster):
    assert cluster.log[0].name == "metadata.version"
    assert cluster.image.features.metadata_version == LATEST_METADATA_VERSION == 21  # 3.9-IV0


def test_bootstrap_starts_at_the_formatted_release_version_then_the_other_bootstrap_records():
    from kraftpy.metadata.feature_control import bootstrap_records
    from kraftpy.metadata.records import FeatureLevelRecord, UserScramCredentialRecord

    scram = UserScramCredentialRecord("admin", 2, b"s", b"k" * 64, b"v" * 64, 4096)
    assert bootstrap_records((scram, FeatureLevelRecord("metadata.version", 11))) == [
        FeatureLevelRecord("metadata.version", 11), scram]
    assert bootstrap_records(()) == [FeatureLevelRecord("metadata.version", LATEST_METADATA_VERSION)]
