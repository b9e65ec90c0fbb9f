"""``MetadataDelta``: records replayed on top of a ``MetadataImage``, then ``apply()``-ed into the next one.

Theory of operation: the delta copies an area of the image (features, brokers, topics, one topic's
partitions, one resource's configs) the first time a record touches it and edits the copy; the image it
started from is never modified, and ``apply()`` freezes the copies into a new image that shares every
untouched part with the old one. The active controller, the standby controllers and the brokers replay
the same records through this one class, so they cannot drift.

A record that contradicts the image (fencing an unknown broker, a partition of a missing topic, a
producer-id block going backwards) raises ``MetadataReplayError``: it means the log and the image
disagree, which no retry can fix.
"""

from __future__ import annotations

import attrs

from kraftpy.ids import Uuid
from kraftpy.metadata.errors import MetadataReplayError
from kraftpy.metadata.image import (
    BrokerRegistration,
    ClusterImage,
    ConfigResource,
    ConfigurationsImage,
    ControllerRegistration,
    FeaturesImage,
    MetadataImage,
    MetadataProvenance,
    PartitionRegistration,
    ProducerIdsImage,
    TopicImage,
    TopicsImage,
)
from kraftpy.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    FenceBrokerRecord,
    FencingChange,
    InControlledShutdownChange,
    MetadataRecord,
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


class MetadataDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._provenance = image.provenance
        self._features: dict[str, int] | None = None
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._controllers: dict[int, ControllerRegistration] | None = None
        self._topics: dict[Uuid, TopicImage] | None = None
        # Topics whose partitions were touched: their editable partition maps.
        self._partitions: dict[Uuid, dict[int, PartitionRegistration]] = {}
        self._configs: dict[ConfigResource, dict[str, str]] | None = None
        self._touched_configs: set[ConfigResource] = set()
        self._next_producer_id: int | None = None

    # -- entry points -----------------------------------------------------------------------------

    def replay(self, record: MetadataRecord, offset: int | None = None, epoch: int | None = None) -> None:
        """Apply one record. ``offset``/``epoch``, when given, are where the record sits in the log."""
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise MetadataReplayError(f"no replay rule for {type(record).__name__}")
        handler(self, record)
        if offset is not None:
            self._provenance = MetadataProvenance(
                last_offset=max(offset, self._provenance.last_offset),
                last_epoch=self._provenance.last_epoch if epoch is None else max(epoch, self._provenance.last_epoch),
            )

    def set_provenance(self, provenance: MetadataProvenance) -> None:
        """Say which offset and epoch the image will reflect (used when loading a snapshot)."""
        self._provenance = provenance

    def apply(self) -> MetadataImage:
        """The image after every replayed record; the delta's starting image is untouched."""
        old = self.image
        features = old.features if self._features is None else FeaturesImage(self._features)
        cluster = old.cluster
        if self._brokers is not None or self._controllers is not None:
            cluster = ClusterImage(
                brokers=old.cluster.brokers if self._brokers is None else self._brokers,
                controllers=old.cluster.controllers if self._controllers is None else self._controllers,
            )
        topics = old.topics
        if self._topics is not None or self._partitions:
            by_id = dict(old.topics.by_id if self._topics is None else self._topics)
            for topic_id, parts in self._partitions.items():
                if topic_id in by_id:
                    by_id[topic_id] = attrs.evolve(by_id[topic_id], partitions=parts)
            topics = TopicsImage(by_id=by_id, by_name={t.name: t for t in by_id.values()})
        configs = old.configs
        if self._configs is not None:
            resources = dict(self._configs)
            for resource in self._touched_configs:
                if not resources.get(resource):
                    resources.pop(resource, None)
            configs = ConfigurationsImage(resources)
        producer_ids = old.producer_ids
        if self._next_producer_id is not None:
            producer_ids = ProducerIdsImage(self._next_producer_id)
        return MetadataImage(
            provenance=self._provenance,
            features=features,
            cluster=cluster,
            topics=topics,
            configs=configs,
            producer_ids=producer_ids,
        )

    # -- copy on first touch ---------------------------------------------------------------------

    def _features_map(self) -> dict[str, int]:
        if self._features is None:
            self._features = dict(self.image.features.levels)
        return self._features

    def _brokers_map(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.image.cluster.brokers)
        return self._brokers

    def _controllers_map(self) -> dict[int, ControllerRegistration]:
        if self._controllers is None:
            self._controllers = dict(self.image.cluster.controllers)
        return self._controllers

    def _topics_map(self) -> dict[Uuid, TopicImage]:
        if self._topics is None:
            self._topics = dict(self.image.topics.by_id)
        return self._topics

    def _partitions_of(self, topic_id: Uuid) -> dict[int, PartitionRegistration]:
        parts = self._partitions.get(topic_id)
        if parts is None:
            topic = self._topics_map().get(topic_id)
            if topic is None:
                raise MetadataReplayError(f"partition record for unknown topic id {topic_id}")
            parts = self._partitions[topic_id] = dict(topic.partitions)
        return parts

    def _config_of(self, resource: ConfigResource) -> dict[str, str]:
        if self._configs is None:
            self._configs = dict(self.image.configs.resources)
        if resource not in self._touched_configs:
            self._configs[resource] = dict(self._configs.get(resource, {}))
            self._touched_configs.add(resource)
        return self._configs[resource]

    def _registered(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        reg = self._brokers_map().get(broker_id)
        if reg is None:
            raise MetadataReplayError(f"{what} for unregistered broker {broker_id}")
        if reg.epoch != epoch:
            raise MetadataReplayError(f"{what} for broker {broker_id} epoch {epoch}, but its epoch is {reg.epoch}")
        return reg

    # -- one rule per record type ---------------------------------------------------------------

    def _replay_feature_level(self, record: FeatureLevelRecord) -> None:
        levels = self._features_map()
        if record.feature_level == 0:
            levels.pop(record.name, None)
        else:
            levels[record.name] = record.feature_level

    def _replay_register_broker(self, record: RegisterBrokerRecord) -> None:
        self._brokers_map()[record.broker_id] = BrokerRegistration.from_record(record)

    def _replay_unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        self._registered(record.broker_id, record.broker_epoch, "UnregisterBrokerRecord")
        del self._brokers_map()[record.broker_id]

    def _replay_fence_broker(self, record: FenceBrokerRecord) -> None:
        reg = self._registered(record.id, record.epoch, "FenceBrokerRecord")
        self._brokers_map()[record.id] = attrs.evolve(reg, fenced=True)

    def _replay_unfence_broker(self, record: UnfenceBrokerRecord) -> None:
        reg = self._registered(record.id, record.epoch, "UnfenceBrokerRecord")
        self._brokers_map()[record.id] = attrs.evolve(reg, fenced=False)

    def _replay_registration_change(self, record: BrokerRegistrationChangeRecord) -> None:
        reg = self._registered(record.broker_id, record.broker_epoch, "BrokerRegistrationChangeRecord")
        fenced = {FencingChange.FENCE: True, FencingChange.UNFENCE: False}.get(record.fenced, reg.fenced)
        shutting_down = reg.in_controlled_shutdown or (
            record.in_controlled_shutdown == InControlledShutdownChange.IN_CONTROLLED_SHUTDOWN
        )
        self._brokers_map()[record.broker_id] = attrs.evolve(
            reg, fenced=fenced, in_controlled_shutdown=shutting_down
        )

    def _replay_register_controller(self, record: RegisterControllerRecord) -> None:
        self._controllers_map()[record.controller_id] = ControllerRegistration.from_record(record)

    def _replay_topic(self, record: TopicRecord) -> None:
        topics = self._topics_map()
        if record.topic_id in topics:
            raise MetadataReplayError(f"TopicRecord for existing topic id {record.topic_id}")
        if any(t.name == record.name for t in topics.values()):
            raise MetadataReplayError(f"TopicRecord for existing topic name {record.name!r}")
        topics[record.topic_id] = TopicImage(name=record.name, id=record.topic_id)
        self._partitions[record.topic_id] = {}

    def _replay_partition(self, record: PartitionRecord) -> None:
        self._partitions_of(record.topic_id)[record.partition_id] = PartitionRegistration.from_record(record)

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        parts = self._partitions_of(record.topic_id)
        current = parts.get(record.partition_id)
        if current is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord for unknown partition {record.partition_id} of topic {record.topic_id}"
            )
        parts[record.partition_id] = current.merge(record)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic = self._topics_map().pop(record.topic_id, None)
        if topic is None:
            raise MetadataReplayError(f"RemoveTopicRecord for unknown topic id {record.topic_id}")
        self._partitions.pop(record.topic_id, None)
        # A topic's configs go with it, as in Kafka; a later topic of the same name starts clean.
        self._config_of(ConfigResource.topic(topic.name)).clear()

    def _replay_config(self, record: ConfigRecord) -> None:
        try:
            resource = ConfigResource(ConfigResourceType(record.resource_type), record.resource_name)
        except ValueError as exc:
            raise MetadataReplayError(f"ConfigRecord for unknown resource type {record.resource_type}") from exc
        config = self._config_of(resource)
        if record.value is None:
            config.pop(record.name, None)
        else:
            config[record.name] = record.value

    def _replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        current = self.image.producer_ids.next_producer_id if self._next_producer_id is None else self._next_producer_id
        if record.next_producer_id <= current:
            raise MetadataReplayError(
                f"ProducerIdsRecord moves the next producer id back from {current} to {record.next_producer_id}"
            )
        self._next_producer_id = record.next_producer_id

    def _replay_no_op(self, record: NoOpRecord) -> None:
        pass


_HANDLERS = {
    FeatureLevelRecord: MetadataDelta._replay_feature_level,
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    UnregisterBrokerRecord: MetadataDelta._replay_unregister_broker,
    FenceBrokerRecord: MetadataDelta._replay_fence_broker,
    UnfenceBrokerRecord: MetadataDelta._replay_unfence_broker,
    BrokerRegistrationChangeRecord: MetadataDelta._replay_registration_change,
    RegisterControllerRecord: MetadataDelta._replay_register_controller,
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    ConfigRecord: MetadataDelta._replay_config,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    NoOpRecord: MetadataDelta._replay_no_op,
}


def replay_records(
    image: MetadataImage, records: list[MetadataRecord] | tuple[MetadataRecord, ...], last_offset: int | None = None,
    last_epoch: int | None = None,
) -> MetadataImage:
    """``image`` after ``records``; when ``last_offset`` is given the records sit at the offsets ending there."""
    delta = MetadataDelta(image)
    first = None if last_offset is None else last_offset - len(records) + 1
    for i, record in enumerate(records):
        delta.replay(record, None if first is None else first + i, last_epoch)
    return delta.apply()
