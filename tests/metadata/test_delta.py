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
