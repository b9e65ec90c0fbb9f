"""Topics, partitions, ISR changes and leader elections."""

from __future__ import annotations

import pytest

from kraftpy.ids import Uuid
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import ConfigResource
from kraftpy.metadata.messages import (
    AlterableConfig,
    AlterConfigsResource,
    AlterPartitionPartitionData,
    AlterPartitionRequest,
    AlterPartitionTopicData,
    BrokerState,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DeleteTopicState,
    ElectionType,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    TopicPartitions,
)
from kraftpy.metadata.records import (
    NO_LEADER,
    ConfigRecord,
    LeaderRecoveryState,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kraftpy.metadata.replication_control import UncleanElection, unclean_elections

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
SESSION = 9.0


# -- CreateTopics -----------------------------------------------------------------------------------


def test_create_topic_writes_topic_and_partition_records(cluster3):
    c = cluster3
    start = c.next_offset
    result = c.create_topic("orders", 3, 2)
    assert result.error_code == Errors.NONE and result.num_partitions == 3 and result.replication_factor == 2
    written = c.log[start:]
    assert written[0] == TopicRecord("orders", result.topic_id)
    assert [type(r) for r in written[1:]] == [PartitionRecord] * 3
    for part in c.topic("orders").partitions.values():
        assert len(part.replicas) == 2 and part.isr == part.replicas and part.leader == part.replicas[0]
        assert (part.leader_epoch, part.partition_epoch) == (0, 0)
    assert c.image.topics.get_by_id(result.topic_id).name == "orders"


def test_topic_id_is_random_and_never_starts_with_a_dash(cluster3):
    ids = {cluster3.create_topic(f"t{i}").topic_id for i in range(30)}
    assert len(ids) == 30 and not any(str(i).startswith("-") for i in ids)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "caf\u00e9", "a/b", "a:b"])
def test_illegal_topic_name_is_refused(cluster3, name):
    assert cluster3.create_topic(name).error_code == Errors.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("name", ["x" * 249, "a.b-c_d", "...", "A9"])
def test_legal_topic_name_is_accepted(cluster3, name):
    assert cluster3.create_topic(name).error_code == Errors.NONE


def test_the_metadata_log_name_is_reserved(cluster3):
    """``__cluster_metadata-0`` is the metadata log's directory: a topic of that name would share it."""
    result = cluster3.create_topic("__cluster_metadata")
    assert result.error_code == Errors.INVALID_REQUEST and "prohibited" in result.error_message
    assert cluster3.create_topic("__cluster_metadata_x").error_code == Errors.NONE


def test_existing_topic_is_refused(cluster3):
    cluster3.create_topic("t")
    assert cluster3.create_topic("t").error_code == Errors.TOPIC_ALREADY_EXISTS


def test_topic_colliding_on_dot_and_underscore_is_refused(cluster3):
    cluster3.create_topic("metrics.cpu")
    result = cluster3.create_topic("metrics_cpu")
    assert result.error_code == Errors.INVALID_TOPIC_EXCEPTION and "collides" in result.error_message


def test_collision_within_one_request_is_refused(cluster3):
    request = CreateTopicsRequest((CreatableTopic("a.b"), CreatableTopic("a_b")))
    response = cluster3.commit(cluster3.controller.handle_create_topics(request))
    assert [t.error_code for t in response.topics] == [Errors.NONE, Errors.INVALID_TOPIC_EXCEPTION]


def test_duplicate_topic_in_request_is_refused(cluster3):
    request = CreateTopicsRequest((CreatableTopic("x"), CreatableTopic("x")))
    response = cluster3.commit(cluster3.controller.handle_create_topics(request))
    assert [t.error_code for t in response.topics] == [Errors.INVALID_REQUEST] * 2


def test_replication_factor_above_unfenced_brokers_is_refused(cluster3):
    cluster3.register(4)  # registered, still fenced: not counted
    result = cluster3.create_topic("t", 1, 4)
    assert result.error_code == Errors.INVALID_REPLICATION_FACTOR
    assert "only 3 broker(s)" in result.error_message


def test_replicas_are_never_placed_on_fenced_or_shutting_down_brokers(cluster3):
    c = cluster3
    c.register(4)
    c.heartbeat(3, want_shut_down=True)
    c.create_topic("t", 8, 2)
    assert all(set(p.replicas) == {1, 2} for p in c.topic("t").partitions.values())


def test_non_positive_partition_count_is_refused(cluster3):
    assert cluster3.create_topic("t", 0, 1).error_code == Errors.INVALID_PARTITIONS


def test_non_positive_replication_factor_is_refused(cluster3):
    assert cluster3.create_topic("t", 1, 0).error_code == Errors.INVALID_REPLICATION_FACTOR


def test_defaults_come_from_num_partitions_and_default_replication_factor(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id=CLUSTER_ID, num_partitions=4, default_replication_factor=2))
    c.add_brokers(1, 2, 3)
    result = c.create_topic("t")
    assert (result.num_partitions, result.replication_factor) == (4, 2)


def test_computed_assignment_spreads_leaders_round_robin(cluster3):
    c = cluster3
    c.create_topic("t", 6, 3)
    leaders = [c.partition("t", p).leader for p in range(6)]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    assert all(leaders[i] != leaders[i + 1] for i in range(5))


def test_rack_aware_assignment_spreads_each_partition_over_racks(make_cluster):
    c = make_cluster()
    c.add_brokers(1, 2, 3, 4, racks={1: "a", 2: "a", 3: "b", 4: "b"})
    c.create_topic("t", 8, 2)
    for part in c.topic("t").partitions.values():
        assert {1: "a", 2: "a", 3: "b", 4: "b"}[part.replicas[0]] != {1: "a", 2: "a", 3: "b", 4: "b"}[part.replicas[1]]


def test_manual_assignment_is_used_as_given_with_isr_of_active_replicas(cluster3):
    c = cluster3
    c.register(4)  # fenced
    result = c.create_topic("t", assignments=[[4, 2, 3], [3, 4, 1]])
    assert result.error_code == Errors.NONE
    p0, p1 = c.partition("t", 0), c.partition("t", 1)
    assert p0.replicas == (4, 2, 3) and p0.isr == (2, 3) and p0.leader == 2
    assert p1.replicas == (3, 4, 1) and p1.isr == (3, 1) and p1.leader == 3


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"partitions": 2, "assignments": [[1]]}, Errors.INVALID_REQUEST),
        ({"assignments": [[1, 1]]}, Errors.INVALID_REPLICA_ASSIGNMENT),
        ({"assignments": [[1, 9]]}, Errors.INVALID_REPLICA_ASSIGNMENT),
        ({"assignments": [[1, 2], [3]]}, Errors.INVALID_REPLICA_ASSIGNMENT),
        ({"assignments": [[]]}, Errors.INVALID_REPLICA_ASSIGNMENT),
        ({"assignments": [[4]]}, Errors.INVALID_REPLICA_ASSIGNMENT),  # only a fenced broker
    ],
)
def test_invalid_manual_assignment_is_refused(cluster3, kwargs, error):
    cluster3.register(4)
    assert cluster3.create_topic("t", **kwargs).error_code == error


def test_manual_assignment_partitions_must_be_consecutive_from_zero(cluster3):
    from kraftpy.metadata.messages import CreatableReplicaAssignment

    topic = CreatableTopic("t", assignments=(CreatableReplicaAssignment(1, (1,)),))
    response = cluster3.controller.handle_create_topics(CreateTopicsRequest((topic,))).response
    assert response.topics[0].error_code == Errors.INVALID_REPLICA_ASSIGNMENT


def test_topic_configs_are_written_as_config_records(cluster3):
    c = cluster3
    start = c.next_offset
    c.create_topic("t", configs={"cleanup.policy": "compact,delete", "retention.ms": "1000"})
    assert ConfigRecord(2, "t", "cleanup.policy", "compact,delete") in c.log[start:]
    assert dict(c.image.configs.config(ConfigResource.topic("t"))) == {
        "cleanup.policy": "compact,delete", "retention.ms": "1000"}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cleanup.policy", "shred"),
        ("cleanup.policy", ""),
        ("retention.ms", "-2"),
        ("retention.ms", "soon"),
        ("retention.bytes", "1.5"),
        ("segment.bytes", "13"),
        ("segment.bytes", str(2**31)),
        ("min.insync.replicas", "0"),
        ("unclean.leader.election.enable", "yes"),
        ("max.message.bytes", "-1"),
        ("compression.type", "brotli"),
        ("no.such.config", "1"),
        ("retention.ms", None),
    ],
)
def test_invalid_topic_config_is_refused(cluster3, key, value):
    result = cluster3.create_topic("t", configs={key: value})
    assert result.error_code == Errors.INVALID_CONFIG
    assert cluster3.image.topics.get_by_name("t") is None


@pytest.mark.parametrize(
    ("key", "value"),
    [("cleanup.policy", "compact"), ("retention.ms", "-1"), ("retention.bytes", "-1"), ("segment.bytes", "14"),
     ("min.insync.replicas", "2"), ("unclean.leader.election.enable", "TRUE"), ("max.message.bytes", "0"),
     ("compression.type", "zstd")],
)
def test_valid_topic_config_is_accepted(cluster3, key, value):
    assert cluster3.create_topic("t", configs={key: value}).error_code == Errors.NONE


def test_validate_only_creates_nothing(cluster3):
    request = CreateTopicsRequest((CreatableTopic("t", 2, 2),), validate_only=True)
    result = cluster3.controller.handle_create_topics(request)
    assert result.records == () and result.response.topics[0].error_code == Errors.NONE


# -- DeleteTopics and CreatePartitions -------------------------------------------------------------


def test_delete_topics_by_name_and_by_id(cluster3):
    c = cluster3
    a = c.create_topic("a").topic_id
    b = c.create_topic("b").topic_id
    request = DeleteTopicsRequest((DeleteTopicState(name="a"), DeleteTopicState(topic_id=b),
                                   DeleteTopicState(name="nope"), DeleteTopicState(topic_id=Uuid(b"\x05" * 16))))
    response = c.commit(c.controller.handle_delete_topics(request))
    assert [r.error_code for r in response.responses] == [
        Errors.NONE, Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID]
    assert RemoveTopicRecord(a) in c.log and RemoveTopicRecord(b) in c.log
    assert c.image.topics.by_name == {}


def test_delete_topics_refused_when_deletion_is_disabled(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id=CLUSTER_ID, delete_topic_enable=False))
    c.add_broker(1)
    c.create_topic("a")
    response = c.commit(c.controller.handle_delete_topics(DeleteTopicsRequest((DeleteTopicState(name="a"),))))
    assert response.responses[0].error_code == Errors.TOPIC_DELETION_DISABLED
    assert c.image.topics.get_by_name("a") is not None


def test_deleted_topic_name_can_be_reused_with_a_new_id(cluster3):
    c = cluster3
    first = c.create_topic("a", configs={"retention.ms": "5"}).topic_id
    c.commit(c.controller.handle_delete_topics(DeleteTopicsRequest((DeleteTopicState(name="a"),))))
    second = c.create_topic("a").topic_id
    assert second != first and c.image.configs.resources == {}


def test_create_partitions_adds_partitions_continuing_the_round_robin(cluster3):
    c = cluster3
    c.create_topic("t", 3, 2)
    request = CreatePartitionsRequest((CreatePartitionsTopic("t", 6),))
    response = c.commit(c.controller.handle_create_partitions(request))
    assert response.results[0].error_code == Errors.NONE
    parts = c.topic("t").partitions
    assert len(parts) == 6 and all(len(p.replicas) == 2 for p in parts.values())
    assert sorted(p.leader for p in parts.values()) == [1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        (CreatePartitionsTopic("t", 2), Errors.INVALID_PARTITIONS),
        (CreatePartitionsTopic("t", 1), Errors.INVALID_PARTITIONS),
        (CreatePartitionsTopic("nope", 3), Errors.UNKNOWN_TOPIC_OR_PARTITION),
        (CreatePartitionsTopic("t", 4, ((1, 2),)), Errors.INVALID_REPLICA_ASSIGNMENT),
        (CreatePartitionsTopic("t", 3, ((1,),)), Errors.INVALID_REPLICA_ASSIGNMENT),
        (CreatePartitionsTopic("t", 3, ((1, 7),)), Errors.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_invalid_create_partitions_is_refused(cluster3, topic, error):
    cluster3.create_topic("t", 2, 2)
    response = cluster3.controller.handle_create_partitions(CreatePartitionsRequest((topic,))).response
    assert response.results[0].error_code == error


def test_create_partitions_with_explicit_assignment(cluster3):
    c = cluster3
    c.create_topic("t", 1, 2)
    c.commit(c.controller.handle_create_partitions(CreatePartitionsRequest((CreatePartitionsTopic("t", 2, ((3, 1),)),))))
    assert c.partition("t", 1).replicas == (3, 1) and c.partition("t", 1).leader == 3


# -- AlterPartition --------------------------------------------------------------------------------


def alter(c, topic: str, *, isr, broker=None, leader_epoch=None, partition_epoch=None, epochs=None,
          recovery=LeaderRecoveryState.RECOVERED, broker_epoch=None, pid=0):
    part = c.partition(topic, pid)
    broker = part.leader if broker is None else broker
    data = AlterPartitionPartitionData(
        partition_index=pid,
        leader_epoch=part.leader_epoch if leader_epoch is None else leader_epoch,
        new_isr_with_epochs=tuple(BrokerState(b, (epochs or {}).get(b, -1)) for b in isr),
        partition_epoch=part.partition_epoch if partition_epoch is None else partition_epoch,
        leader_recovery_state=recovery,
    )
    reg = c.image.cluster.broker(broker)
    request = AlterPartitionRequest(
        broker, reg.epoch if broker_epoch is None and reg else (broker_epoch if broker_epoch is not None else -1),
        (AlterPartitionTopicData(c.topic(topic).id, (data,)),),
    )
    return c.commit(c.controller.handle_alter_partition(request))


def test_alter_partition_shrinks_and_expands_isr_bumping_partition_epoch(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    response = alter(c, "t", isr=(1, 2))
    result = response.partition(c.topic("t").id, 0)
    assert result.error_code == Errors.NONE and result.isr == (1, 2) and result.partition_epoch == 1
    assert result.leader_id == 1 and result.leader_epoch == 0
    assert c.partition("t").isr == (1, 2) and isinstance(c.log[-1], PartitionChangeRecord)
    response = alter(c, "t", isr=(1, 2, 3))
    assert response.partition(c.topic("t").id, 0).partition_epoch == 2 and c.partition("t").isr == (1, 2, 3)


def test_alter_partition_with_stale_broker_epoch_is_refused(cluster3):
    cluster3.create_topic("t", assignments=[[1, 2]])
    assert alter(cluster3, "t", isr=(1,), broker_epoch=0).error_code == Errors.STALE_BROKER_EPOCH


def test_alter_partition_from_a_non_leader_is_refused(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    assert alter(c, "t", isr=(2,), broker=2).partition(c.topic("t").id, 0).error_code == Errors.INVALID_REQUEST


def test_alter_partition_with_old_leader_epoch_is_fenced(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    c.heartbeat(1, want_fence=True)
    c.heartbeat(1)  # back, not leader any more
    alter(c, "t", isr=(2, 3, 1))
    c.commit(c.controller.handle_elect_leaders(ElectLeadersRequest(ElectionType.PREFERRED, None)))
    assert c.partition("t").leader == 1 and c.partition("t").leader_epoch == 2
    result = alter(c, "t", isr=(1, 2), leader_epoch=1).partition(c.topic("t").id, 0)
    assert result.error_code == Errors.FENCED_LEADER_EPOCH


def test_alter_partition_with_old_partition_epoch_is_refused(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    alter(c, "t", isr=(1, 2))
    result = alter(c, "t", isr=(1,), partition_epoch=0).partition(c.topic("t").id, 0)
    assert result.error_code == Errors.INVALID_UPDATE_VERSION


def test_alter_partition_from_the_future_answers_not_controller(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    result = alter(c, "t", isr=(1,), leader_epoch=5).partition(c.topic("t").id, 0)
    assert result.error_code == Errors.NOT_CONTROLLER


def test_alter_partition_adding_a_fenced_replica_is_ineligible(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    c.heartbeat(3, want_fence=True)
    result = alter(c, "t", isr=(1, 2, 3)).partition(c.topic("t").id, 0)
    assert result.error_code == Errors.INELIGIBLE_REPLICA


def test_alter_partition_adding_a_shutting_down_replica_is_ineligible(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    c.heartbeat(3, want_shut_down=True)
    result = alter(c, "t", isr=(1, 2, 3)).partition(c.topic("t").id, 0)
    assert result.error_code == Errors.INELIGIBLE_REPLICA


def test_alter_partition_naming_a_stale_replica_epoch_is_ineligible(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    result = alter(c, "t", isr=(1, 2), epochs={2: 0}).partition(c.topic("t").id, 0)
    assert result.error_code == Errors.INELIGIBLE_REPLICA
    ok = alter(c, "t", isr=(1, 2), epochs={2: c.image.cluster.broker(2).epoch}).partition(c.topic("t").id, 0)
    assert ok.error_code == Errors.NONE


@pytest.mark.parametrize("isr", [(2, 3), (1, 4), (1, 1, 2)])
def test_alter_partition_with_malformed_isr_is_refused(cluster3, isr):
    c = cluster3
    c.add_broker(4)
    c.create_topic("t", assignments=[[1, 2, 3]])
    assert alter(c, "t", isr=isr).partition(c.topic("t").id, 0).error_code == Errors.INVALID_REQUEST


def test_alter_partition_for_unknown_topic_or_partition(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    reg = c.image.cluster.broker(1)
    data = AlterPartitionPartitionData(0, 0, (BrokerState(1),), 0)
    unknown = Uuid(b"\x07" * 16)
    request = AlterPartitionRequest(1, reg.epoch, (AlterPartitionTopicData(unknown, (data,)),
                                                   AlterPartitionTopicData(c.topic("t").id, (
                                                       AlterPartitionPartitionData(9, 0, (BrokerState(1),), 0),))))
    response = c.controller.handle_alter_partition(request).response
    assert response.partition(unknown, 0).error_code == Errors.UNKNOWN_TOPIC_ID
    assert response.partition(c.topic("t").id, 9).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


# -- elections -------------------------------------------------------------------------------------


def fence(c, *brokers):
    for b in brokers:
        c.heartbeat(b, want_fence=True)


def test_fenced_leader_is_replaced_by_first_live_isr_member_in_replica_order(cluster3):
    c = cluster3
    c.add_broker(4)
    c.create_topic("t", assignments=[[1, 4, 3, 2]])
    alter(c, "t", isr=(1, 3, 2))  # 4 out of sync
    fence(c, 1)
    part = c.partition("t")
    assert part.leader == 3 and part.isr == (3, 2) and part.leader_epoch == 1


def test_no_live_isr_member_leaves_the_partition_offline(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    alter(c, "t", isr=(1,))
    fence(c, 1)
    part = c.partition("t")
    assert part.leader == NO_LEADER and part.isr == (1,)


def test_unclean_election_picks_first_live_replica_when_enabled_for_the_topic(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 3, 2]], configs={"unclean.leader.election.enable": "true"})
    alter(c, "t", isr=(1,))
    fence(c, 1)
    part = c.partition("t")
    assert part.leader == 3 and part.isr == (3,)
    assert part.leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_unclean_elections_are_reported_with_the_old_isr_and_the_new_leader(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 3, 2]], configs={"unclean.leader.election.enable": "true"})
    c.create_topic("clean", assignments=[[1, 3, 2]])  # a clean election on the same fencing
    alter(c, "t", isr=(1,))
    before = c.image
    start = len(c.log)
    fence(c, 1)
    records = c.log[start:]
    assert unclean_elections(before, records) == [UncleanElection("t", 0, old_leader=1, old_isr=(1,), new_leader=3)]


def test_unclean_election_follows_the_cluster_wide_dynamic_default(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    c.commit(c.controller.handle_incremental_alter_configs(IncrementalAlterConfigsRequest((
        AlterConfigsResource(4, "", (AlterableConfig("unclean.leader.election.enable", 0, "true"),)),))))
    alter(c, "t", isr=(1,))
    fence(c, 1)
    assert c.partition("t").leader == 2


def test_unclean_election_follows_the_static_broker_config(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id=CLUSTER_ID,
                                      static_broker_configs={"unclean.leader.election.enable": "true"}))
    c.add_brokers(1, 2)
    c.create_topic("t", assignments=[[1, 2]])
    alter(c, "t", isr=(1,))
    fence(c, 1)
    assert c.partition("t").leader == 2


def test_recovering_leader_reports_recovery_and_may_not_go_back(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 3, 2]], configs={"unclean.leader.election.enable": "true"})
    alter(c, "t", isr=(1,))
    fence(c, 1)
    tid = c.topic("t").id
    bad = alter(c, "t", isr=(3, 2), recovery=LeaderRecoveryState.RECOVERING).partition(tid, 0)
    assert bad.error_code == Errors.INVALID_REQUEST
    done = alter(c, "t", isr=(3,), recovery=LeaderRecoveryState.RECOVERED).partition(tid, 0)
    assert done.error_code == Errors.NONE and done.leader_recovery_state == 0
    again = alter(c, "t", isr=(3,), recovery=LeaderRecoveryState.RECOVERING).partition(tid, 0)
    assert again.error_code == Errors.INVALID_REQUEST


def test_preferred_leader_election_on_request(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3], [2, 3, 1]])
    fence(c, 1)
    c.heartbeat(1)
    alter(c, "t", isr=(2, 3, 1), pid=0)
    request = ElectLeadersRequest(ElectionType.PREFERRED, (TopicPartitions("t", (0, 1, 7)),))
    response = c.commit(c.controller.handle_elect_leaders(request))
    assert response.partition("t", 0).error_code == Errors.NONE
    assert response.partition("t", 1).error_code == Errors.ELECTION_NOT_NEEDED
    assert response.partition("t", 7).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert c.partition("t", 0).leader == 1


def test_preferred_leader_not_in_isr_is_not_available(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    fence(c, 1)
    c.heartbeat(1)  # unfenced but not back in the ISR
    request = ElectLeadersRequest(ElectionType.PREFERRED, (TopicPartitions("t", (0,)),))
    response = c.commit(c.controller.handle_elect_leaders(request))
    assert response.partition("t", 0).error_code == Errors.PREFERRED_LEADER_NOT_AVAILABLE


def test_elect_all_partitions_reports_only_those_that_needed_it(cluster3):
    c = cluster3
    c.create_topic("a", assignments=[[1, 2]])
    c.create_topic("b", assignments=[[2, 1]])
    fence(c, 1)
    c.heartbeat(1)
    alter(c, "a", isr=(2, 1))
    response = c.commit(c.controller.handle_elect_leaders(ElectLeadersRequest(ElectionType.PREFERRED, None)))
    assert [(r.topic, [p.partition_id for p in r.partition_result]) for r in response.replica_election_results] == [
        ("a", [0])]


def test_unclean_election_on_request_for_an_offline_partition(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    alter(c, "t", isr=(1,))
    fence(c, 1)
    request = ElectLeadersRequest(ElectionType.UNCLEAN, (TopicPartitions("t", (0,)),))
    response = c.commit(c.controller.handle_elect_leaders(request))
    assert response.partition("t", 0).error_code == Errors.NONE
    part = c.partition("t")
    assert part.leader == 2 and part.leader_recovery_state is LeaderRecoveryState.RECOVERING
    again = c.commit(c.controller.handle_elect_leaders(request))
    assert again.partition("t", 0).error_code == Errors.ELECTION_NOT_NEEDED


def test_unclean_election_without_live_replicas_is_not_possible(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1]])
    fence(c, 1)
    request = ElectLeadersRequest(ElectionType.UNCLEAN, (TopicPartitions("t", (0,)),))
    response = c.commit(c.controller.handle_elect_leaders(request))
    assert response.partition("t", 0).error_code == Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_auto_leader_rebalance_moves_leaders_back_after_the_check_interval(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    fence(c, 1)
    c.heartbeat(1)
    alter(c, "t", isr=(2, 1))
    assert c.partition("t").leader == 2
    c.advance(299)
    c.keep_alive(1, 2, 3)
    c.commit(c.controller.tick(c.now))
    assert c.partition("t").leader == 2
    c.advance(2)
    c.keep_alive(1, 2, 3)
    c.commit(c.controller.tick(c.now))
    assert c.partition("t").leader == 1


def test_auto_leader_rebalance_can_be_disabled(make_cluster):
    c = make_cluster(ControllerConfig(cluster_id=CLUSTER_ID, auto_leader_rebalance_enable=False))
    c.add_brokers(1, 2)
    c.create_topic("t", assignments=[[1, 2]])
    fence(c, 1)
    c.heartbeat(1)
    alter(c, "t", isr=(2, 1))
    c.advance(301)
    c.keep_alive(1, 2)
    c.commit(c.controller.tick(c.now))
    assert c.partition("t").leader == 2
