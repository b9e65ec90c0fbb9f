"""MetadataDelta: replay rules per record type, and images that never change once made."""

from __future__ import annotations

import pytest

from kraftpy.ids import Uuid
from kraftpy.metadata.delta import MetadataDelta, replay_records
from kraftpy.metadata.errors import MetadataReplayError
from kraftpy.metadata.image import EMPTY_IMAGE, ConfigResource, MetadataProvenance
from kraftpy.metadata.records import (
    NO_LEADER,
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    FenceBrokerRecord,
    FencingChange,
    InControlledShutdownChange,
    LeaderRecoveryState,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

T1 = Uuid(b"\x01" * 16)


def broker(broker_id: int, epoch: int = 10, fenced: bool = True) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(broker_id, Uuid(bytes([broker_id]) * 16), epoch,
                                (BrokerEndpoint("PLAINTEXT", "h", 9092, 0),), (), None, fenced, False)


def topic_with_partition() -> list:
    return [TopicRecord("t", T1), PartitionRecord(0, T1, (1, 2, 3), (1, 2, 3), leader=1)]


def test_replay_builds_image_and_leaves_the_old_one_untouched():
    base = replay_records(EMPTY_IMAGE, [broker(1), *topic_with_partition()])
    after = replay_records(base, [PartitionChangeRecord(0, T1, isr=(1, 2))])
    assert base.topics.get_by_id(T1).partitions[0].isr == (1, 2, 3)
    assert after.topics.get_by_name("t").partitions[0].isr == (1, 2)
    assert after.cluster is base.cluster  # untouched areas are shared


def test_image_mappings_are_read_only():
    image = replay_records(EMPTY_IMAGE, topic_with_partition())
    with pytest.raises(TypeError):
        image.topics.by_name["x"] = None  # type: ignore[index]


def test_provenance_tracks_last_offset_and_epoch():
    image = replay_records(EMPTY_IMAGE, [NoOpRecord(), NoOpRecord()], last_offset=41, last_epoch=3)
    assert image.provenance == MetadataProvenance(41, 3)


def test_partition_change_bumps_partition_epoch_and_leader_epoch_only_with_new_leader():
    image = replay_records(EMPTY_IMAGE, topic_with_partition())
    isr_only = replay_records(image, [PartitionChangeRecord(0, T1, isr=(1, 2))]).topics.by_id[T1].partitions[0]
    assert (isr_only.leader, isr_only.leader_epoch, isr_only.partition_epoch) == (1, 0, 1)
    moved = replay_records(image, [PartitionChangeRecord(0, T1, leader=2)]).topics.by_id[T1].partitions[0]
    assert (moved.leader, moved.leader_epoch, moved.partition_epoch) == (2, 1, 1)
    offline = replay_records(image, [PartitionChangeRecord(0, T1, leader=NO_LEADER, leader_recovery_state=1)])
    part = offline.topics.by_id[T1].partitions[0]
    assert part.leader == NO_LEADER and part.leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_fence_unfence_and_registration_change_set_broker_state():
    image = replay_records(EMPTY_IMAGE, [broker(1), UnfenceBrokerRecord(1, 10)])
    assert image.cluster.is_active(1)
    image = replay_records(image, [BrokerRegistrationChangeRecord(
        1, 10, in_controlled_shutdown=InControlledShutdownChange.IN_CONTROLLED_SHUTDOWN)])
    assert image.cluster.brokers[1].in_controlled_shutdown and not image.cluster.is_active(1)
    image = replay_records(image, [FenceBrokerRecord(1, 10)])
    assert image.cluster.brokers[1].fenced
    image = replay_records(image, [BrokerRegistrationChangeRecord(1, 10, fenced=FencingChange.UNFENCE)])
    assert not image.cluster.brokers[1].fenced


@pytest.mark.parametrize(
    "record",
    [
        FenceBrokerRecord(1, 11),  # wrong epoch
        UnfenceBrokerRecord(2, 10),  # unknown broker
        UnregisterBrokerRecord(1, 9),
        PartitionRecord(0, Uuid(b"\x09" * 16), (1,), (1,)),  # unknown topic
        PartitionChangeRecord(5, T1, isr=(1,)),  # unknown partition
        RemoveTopicRecord(Uuid(b"\x09" * 16)),
        TopicRecord("t", Uuid(b"\x02" * 16)),  # name taken
        ProducerIdsRecord(1, 10, 0),  # not forward
    ],
    ids=lambda r: type(r).__name__,
)
def test_contradicting_record_is_a_replay_error(record):
    image = replay_records(EMPTY_IMAGE, [broker(1), *topic_with_partition()])
    delta = MetadataDelta(image)
    with pytest.raises(MetadataReplayError):
        delta.replay(record)


def test_remove_topic_drops_partitions_and_configs():
    image = replay_records(EMPTY_IMAGE, [*topic_with_partition(),
                                         ConfigRecord(ConfigResourceType.TOPIC, "t", "retention.ms", "1")])
    image = replay_records(image, [RemoveTopicRecord(T1)])
    assert image.topics.get_by_name("t") is None and image.topics.by_id == {}
    assert ConfigResource.topic("t") not in image.configs.resources


def test_config_record_sets_and_deletes():
    resource = ConfigResource.broker("")
    image = replay_records(EMPTY_IMAGE, [ConfigRecord(ConfigResourceType.BROKER, "", "log.retention.ms", "5")])
    assert image.configs.config(resource) == {"log.retention.ms": "5"}
    image = replay_records(image, [ConfigRecord(ConfigResourceType.BROKER, "", "log.retention.ms", None)])
    assert resource not in image.configs.resources


def test_feature_level_zero_removes_the_feature():
    image = replay_records(EMPTY_IMAGE, [FeatureLevelRecord("metadata.version", 7), FeatureLevelRecord("x", 2)])
    assert image.features.metadata_version == 7 and image.features.levels["x"] == 2
    assert "x" not in replay_records(image, [FeatureLevelRecord("x", 0)]).features.levels


def test_unregister_and_controller_registration():
    image = replay_records(EMPTY_IMAGE, [broker(1), RegisterControllerRecord(3000, T1, (), ())])
    image = replay_records(image, [UnregisterBrokerRecord(1, 10)])
    assert image.cluster.brokers == {} and 3000 in image.cluster.controllers


def test_producer_ids_move_forward():
    image = replay_records(EMPTY_IMAGE, [ProducerIdsRecord(1, 10, 1000), ProducerIdsRecord(2, 11, 2000)])
    assert image.producer_ids.next_producer_id == 2000


# -- what a delta changed, and what it means for one broker ---------------------------------------

T2 = Uuid(b"\x02" * 16)


def two_topics():
    """t: p0 led by 1 (replicas 1,2,3), p1 led by 2 (replicas 2,3,1); u: p0 led by 3 (replicas 3,1)."""
    return replay_records(EMPTY_IMAGE, [
        TopicRecord("t", T1),
        PartitionRecord(0, T1, (1, 2, 3), (1, 2, 3), leader=1),
        PartitionRecord(1, T1, (2, 3, 1), (2, 3, 1), leader=2),
        TopicRecord("u", T2),
        PartitionRecord(0, T2, (3, 1), (3, 1), leader=3),
    ])


def local(delta: MetadataDelta, broker_id: int):
    changes = delta.local_changes(broker_id)
    return tuple([(p.topic_name, p.partition, p.registration.leader) for p in found]
                 for found in (changes.deletes, changes.leaders, changes.followers))


def delta_of(image, *records) -> MetadataDelta:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta


def test_local_changes_leader_to_follower_and_follower_to_leader():
    delta = delta_of(two_topics(), PartitionChangeRecord(0, T1, leader=2))
    assert local(delta, 1) == ([], [], [("t", 0, 2)])
    assert local(delta, 2) == ([], [("t", 0, 2)], [])
    assert local(delta, 3) == ([], [], [("t", 0, 2)])
    assert delta.local_changes(4).is_empty  # hosts nothing


def test_local_changes_only_name_changed_partitions():
    delta = delta_of(two_topics(), PartitionChangeRecord(1, T1, isr=(2, 3)))
    assert local(delta, 1) == ([], [], [("t", 1, 2)])  # out of the ISR, still a replica: still a follower
    assert local(delta, 3) == ([], [], [("t", 1, 2)])
    assert [(c.topic_name, c.partition, c.old.isr, c.new.isr) for c in delta.changed_partitions] == [
        ("t", 1, (2, 3, 1), (2, 3))]


def test_local_changes_when_a_broker_is_removed_from_the_replicas():
    image = two_topics()
    delta = delta_of(image, PartitionChangeRecord(0, T1, replicas=(1, 2), isr=(1, 2)))
    changes = delta.local_changes(3)
    assert local(delta, 3) == ([("t", 0, 1)], [], [])
    assert changes.deletes[0].registration == image.topics.by_id[T1].partitions[0]  # the last one it had
    assert local(delta, 1) == ([], [("t", 0, 1)], [])


def test_local_changes_when_a_topic_is_deleted():
    image = two_topics()
    delta = delta_of(image, PartitionChangeRecord(0, T1, leader=2), RemoveTopicRecord(T1))
    assert local(delta, 1) == ([("t", 0, 1), ("t", 1, 2)], [], [])  # registrations as the broker had them
    assert local(delta, 3) == ([("t", 0, 1), ("t", 1, 2)], [], [])
    assert delta.deleted_topics == {T1: "t"} and delta.created_topics == {}
    assert delta.changed_partitions == ()


def test_local_changes_with_no_leader_are_followers():
    delta = delta_of(two_topics(), PartitionChangeRecord(0, T2, leader=NO_LEADER, isr=(3,)))
    assert local(delta, 3) == ([], [], [("u", 0, NO_LEADER)])
    assert local(delta, 1) == ([], [], [("u", 0, NO_LEADER)])


def test_topic_deleted_and_its_name_taken_again_in_one_delta():
    t3 = Uuid(b"\x03" * 16)
    delta = delta_of(two_topics(), RemoveTopicRecord(T1), TopicRecord("t", t3),
                     PartitionRecord(0, t3, (1,), (1,), leader=1))
    changes = delta.local_changes(1)
    assert [(p.topic_id, p.partition) for p in changes.deletes] == [(T1, 0), (T1, 1)]
    assert [(p.topic_id, p.partition) for p in changes.leaders] == [(t3, 0)]
    assert delta.created_topics == {t3: "t"} and delta.deleted_topics == {T1: "t"}
    image = delta.apply()
    assert image.topics.get_by_name("t").id == t3 and T1 not in image.topics.by_id


def test_topic_created_and_removed_in_one_delta_leaves_no_trace():
    t3 = Uuid(b"\x03" * 16)
    image = two_topics()
    delta = delta_of(image, TopicRecord("v", t3), PartitionRecord(0, t3, (1,), (1,), leader=1),
                     RemoveTopicRecord(t3))
    assert delta.created_topics == {} and delta.deleted_topics == {} and delta.local_changes(1).is_empty
    assert delta.apply().topics == image.topics


def test_delta_from_the_empty_image_gives_every_local_replica():
    image = two_topics()
    delta = MetadataDelta.between(EMPTY_IMAGE, image)
    assert local(delta, 1) == ([], [("t", 0, 1)], [("t", 1, 2), ("u", 0, 3)])
    assert local(delta, 3) == ([], [("u", 0, 3)], [("t", 0, 1), ("t", 1, 2)])
    assert delta.created_topics == {T1: "t", T2: "u"}
    assert delta.apply().topics == image.topics


def test_between_images_finds_vanished_topics_and_changed_partitions():
    before = two_topics()
    after = replay_records(before, [RemoveTopicRecord(T2), PartitionChangeRecord(1, T1, leader=3)])
    delta = MetadataDelta.between(before, after)
    assert delta.deleted_topics == {T2: "u"}
    assert local(delta, 1) == ([("u", 0, 3)], [], [("t", 1, 3)])
    assert local(delta, 3) == ([("u", 0, 3)], [("t", 1, 3)], [])
    assert delta.apply() == after
    assert MetadataDelta.between(after, after).local_changes(1).is_empty


def test_changed_configs_and_topic_configs():
    image = replay_records(two_topics(), [ConfigRecord(ConfigResourceType.TOPIC, "u", "retention.ms", "1")])
    delta = delta_of(image, ConfigRecord(ConfigResourceType.TOPIC, "t", "retention.ms", "5"),
                     ConfigRecord(ConfigResourceType.TOPIC, "u", "retention.ms", "1"),  # no change
                     ConfigRecord(ConfigResourceType.BROKER, "", "log.retention.ms", "7"))
    assert delta.changed_topic_configs == frozenset({"t"})
    assert delta.changed_configs == (ConfigResource.topic("t"), ConfigResource.broker(""))
    unchanged = delta_of(image, ConfigRecord(ConfigResourceType.TOPIC, "u", "retention.ms", "1"))
    assert unchanged.changed_configs == () and unchanged.apply().configs is image.configs


def test_changed_brokers():
    image = replay_records(EMPTY_IMAGE, [broker(1), broker(2)])
    delta = delta_of(image, UnfenceBrokerRecord(1, 10), broker(3), UnregisterBrokerRecord(2, 10))
    assert delta.changed_brokers == (1, 2, 3)
    assert delta_of(image, NoOpRecord()).changed_brokers == ()


def test_applying_a_partition_change_shares_every_other_topic_and_partition():
    image = two_topics()
    after = replay_records(image, [PartitionChangeRecord(0, T1, isr=(1, 2))])
    assert after.topics.by_id[T2] is image.topics.by_id[T2]
    assert after.topics.by_id[T1].partitions[1] is image.topics.by_id[T1].partitions[1]
    assert after.configs is image.configs and after.cluster is image.cluster
