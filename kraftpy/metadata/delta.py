"""``MetadataDelta``: records replayed on top of a ``MetadataImage``, then ``apply()``-ed into the next one.

Theory of operation. The delta never edits the image it started from. It keeps what the records
changed, area by area, and nothing else:

* topics: a ``_TopicDelta`` per topic a record touched (its name, id, the topic as it was in the
  image — None for a topic this delta created — and its changed partitions, each at its latest
  registration), and the image's topics that were removed (``_deleted``, as they were in the image);
* brokers, controllers and features (small maps: copied on first touch and edited), the config
  resources a record touched (each copied on first touch), the next producer id.

``apply()`` builds the next image from the old one by setting what changed in its persistent maps
(``persistent.py``) and editing the ``TopicsIndex`` (``topics_index.py``) for each changed partition,
so it costs O(changes · log n) whatever the size of the image; every untouched part is shared.

The same bookkeeping says what changed, for whoever follows the images: ``created_topics``,
``deleted_topics``, ``changed_partitions`` (old and new registration), ``changed_configs`` and
``changed_topic_configs``, ``changed_brokers``, and ``local_changes(broker_id)`` — Kafka's
``TopicsDelta.localChanges``: the replicas a broker must delete, lead and follow, found among the
changed partitions only. They read the delta as replayed so far, before or after ``apply()``.

``MetadataDelta.between(before, after)`` makes the delta that leads from one image to another when
no records connect them (a loaded snapshot, a new subscriber's first image from ``EMPTY_IMAGE``): it
compares the two (a scan, as loading a snapshot is anyway), and topics missing from ``after`` are
deletions (Kafka's ``finishSnapshot``).

The active controller, the standby controllers and the brokers replay the same records through this
one class, so they cannot drift. A record that contradicts the image (fencing an unknown broker, a
partition of a missing topic, a producer-id block going backwards) raises ``MetadataReplayError``: it
means the log and the image disagree, which no retry can fix.
"""

from __future__ import annotations

from types import MappingProxyType

import attrs

from kraftpy.ids import Uuid
from kraftpy.metadata.errors import MetadataReplayError
from kraftpy.metadata.image import (
    AclsImage,
    BrokerRegistration,
    ClientQuotasImage,
    ClusterImage,
    ConfigResource,
    ConfigurationsImage,
    ControllerRegistration,
    FeaturesImage,
    MetadataImage,
    MetadataProvenance,
    PartitionRegistration,
    ProducerIdsImage,
    ScramImage,
    TopicImage,
    TopicsImage,
    quota_entity,
)
from kraftpy.metadata.persistent import PersistentMap
from kraftpy.metadata.records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
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
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from kraftpy.security.authorizer import AclBinding, binding_from_codes

# -- what a delta changed ----------------------------------------------------------------------------


@attrs.frozen
class PartitionChange:
    """One partition a delta changed (or created): its registration before and after."""

    topic_id: Uuid
    topic_name: str
    partition: int
    #: None when the partition is new (a new topic, or CreatePartitions).
    old: PartitionRegistration | None
    new: PartitionRegistration


@attrs.frozen
class LocalPartition:
    """A partition as one broker hosts it (Kafka's ``LocalReplicaChanges.PartitionInfo``)."""

    topic_name: str
    topic_id: Uuid
    partition: int
    registration: PartitionRegistration


@attrs.frozen
class LocalReplicaChanges:
    """What a delta means for one broker's replicas. Each tuple is in (topic name, partition) order.
    Apply ``deletes`` first: a topic deleted and re-created under the same name is in ``deletes``
    (old id) and in ``leaders`` or ``followers`` (new id)."""

    #: Replicas the broker held and no longer holds (its topic deleted, or the broker taken out of the
    #: replicas); ``registration`` is the last one the broker had.
    deletes: tuple[LocalPartition, ...]
    #: Changed partitions the broker now leads.
    leaders: tuple[LocalPartition, ...]
    #: Changed partitions the broker now hosts and does not lead (leaderless ones included).
    followers: tuple[LocalPartition, ...]

    @property
    def is_empty(self) -> bool:
        return not (self.deletes or self.leaders or self.followers)


def _local_order(p: LocalPartition) -> tuple[str, int, Uuid]:
    return p.topic_name, p.partition, p.topic_id


class _TopicDelta:
    """One topic a delta touched. Invariant: ``changes`` holds each changed partition's latest
    registration; a partition absent from it is as in ``base`` (None: the topic is new here)."""

    __slots__ = ("name", "id", "base", "changes")

    def __init__(self, name: str, topic_id: Uuid, base: TopicImage | None) -> None:
        self.name = name
        self.id = topic_id
        self.base = base
        self.changes: dict[int, PartitionRegistration] = {}

    def get(self, pid: int) -> PartitionRegistration | None:
        part = self.changes.get(pid)
        if part is None and self.base is not None:
            part = self.base.partitions.get(pid)
        return part

    def old(self, pid: int) -> PartitionRegistration | None:
        return None if self.base is None else self.base.partitions.get(pid)


class MetadataDelta:
    def __init__(self, image: MetadataImage) -> None:
        #: The image the delta started from; never modified.
        self.image = image
        self._provenance = image.provenance
        self._features: dict[str, int] | None = None
        self._kraft_version: int | None = None
        self._brokers: dict[int, BrokerRegistration] | None = None
        #: Broker ids a record registered, changed or unregistered.
        self._touched_brokers: set[int] = set()
        self._controllers: dict[int, ControllerRegistration] | None = None
        #: Live topics a record touched, by id.
        self._topics: dict[Uuid, _TopicDelta] = {}
        #: Names of the topics this delta created (they are in ``_topics`` with base None).
        self._created_names: dict[str, Uuid] = {}
        #: Topics of ``image`` that were removed, as they were in ``image``.
        self._deleted: dict[Uuid, TopicImage] = {}
        #: Config resources a record touched: their overrides now (empty: none left).
        self._configs: dict[ConfigResource, dict[str, str]] = {}
        self._next_producer_id: int | None = None
        #: ACLs a record added (id -> binding) or removed (id -> None), as replayed so far.
        self._acls: dict[Uuid, AclBinding | None] = {}
        #: SCRAM credentials by user and mechanism, copied from the image on the first SCRAM record.
        self._scram: dict[str, dict[int, UserScramCredentialRecord]] | None = None
        #: Client quotas by entity, copied from the image on the first ClientQuotaRecord.
        self._client_quotas: dict | None = None

    @classmethod
    def between(cls, before: MetadataImage, after: MetadataImage) -> MetadataDelta:
        """The delta whose changes lead from ``before`` to ``after`` (``apply()`` gives an image equal to
        ``after``): a topic of ``before`` missing from ``after`` is deleted, one new in ``after`` is
        created with all its partitions. A comparison of the two images, O(size)."""
        delta = cls(before)
        delta._provenance = after.provenance
        if after.kraft_version != before.kraft_version:
            delta._kraft_version = after.kraft_version
        if after.features != before.features:
            delta._features = dict(after.features.levels)
        if after.cluster.brokers != before.cluster.brokers:
            delta._brokers = dict(after.cluster.brokers)
            delta._touched_brokers = {
                b for b in {*before.cluster.brokers, *after.cluster.brokers}
                if before.cluster.brokers.get(b) != after.cluster.brokers.get(b)
            }
        if after.cluster.controllers != before.cluster.controllers:
            delta._controllers = dict(after.cluster.controllers)
        if after.topics.by_id != before.topics.by_id:
            delta._diff_topics(before.topics, after.topics)
        if after.configs != before.configs:
            old, new = before.configs, after.configs
            for resource in {*old.resources, *new.resources}:
                if old.config(resource) != new.config(resource):
                    delta._configs[resource] = dict(new.config(resource))
        if after.producer_ids != before.producer_ids:
            delta._next_producer_id = after.producer_ids.next_producer_id
        if after.acls != before.acls:
            old_acls, new_acls = before.acls.by_id, after.acls.by_id
            delta._acls = {acl_id: new_acls.get(acl_id) for acl_id in {*old_acls, *new_acls}
                           if old_acls.get(acl_id) != new_acls.get(acl_id)}
        if after.scram != before.scram:
            delta._scram = {name: dict(creds) for name, creds in after.scram.users.items()}
        if after.client_quotas != before.client_quotas:
            delta._client_quotas = {e: dict(q) for e, q in after.client_quotas.entities.items()}
        return delta

    def _diff_topics(self, before: TopicsImage, after: TopicsImage) -> None:
        for topic_id, topic in before.by_id.items():
            now = after.by_id.get(topic_id)
            # A partition cannot disappear from a live topic; if one did, treat the topic as re-created.
            if now is None or now.name != topic.name or any(pid not in now.partitions for pid in topic.partitions):
                self._deleted[topic_id] = topic
        for topic_id, topic in after.by_id.items():
            was = None if topic_id in self._deleted else before.by_id.get(topic_id)
            if was is not None and was.partitions == topic.partitions:
                continue
            td = self._topics[topic_id] = _TopicDelta(topic.name, topic_id, was)
            if was is None:
                self._created_names[topic.name] = topic_id
                td.changes.update(topic.partitions.items())
            else:
                td.changes.update((pid, part) for pid, part in topic.partitions.items()
                                  if was.partitions.get(pid) != part)

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
        topics = old.topics if not (self._topics or self._deleted) else self._apply_topics(old.topics)
        changed_configs = self.changed_configs
        configs = old.configs
        if changed_configs:
            configs = ConfigurationsImage(old.configs.resources.update(
                {r: MappingProxyType(dict(self._configs[r])) for r in changed_configs if self._configs[r]},
                [r for r in changed_configs if not self._configs[r]],
            ))
        producer_ids = old.producer_ids
        if self._next_producer_id is not None:
            producer_ids = ProducerIdsImage(self._next_producer_id)
        acls = old.acls
        if self._acls:
            acls = AclsImage(old.acls.by_id.update(
                {i: b for i, b in self._acls.items() if b is not None}, [i for i, b in self._acls.items() if b is None]))
        scram = old.scram
        if self._scram is not None:
            scram = ScramImage({name: MappingProxyType(dict(c)) for name, c in self._scram.items() if c})
        client_quotas = old.client_quotas
        if self._client_quotas is not None:
            client_quotas = ClientQuotasImage({e: MappingProxyType(dict(q)) for e, q in self._client_quotas.items() if q})
        return MetadataImage(
            provenance=self._provenance,
            features=features,
            cluster=cluster,
            topics=topics,
            configs=configs,
            producer_ids=producer_ids,
            acls=acls,
            scram=scram,
            client_quotas=client_quotas,
            kraft_version=old.kraft_version if self._kraft_version is None else self._kraft_version,
        )

    def set_kraft_version(self, kraft_version: int) -> None:
        """The log's kraft.version changed (a KRaftVersionRecord, a Raft control record)."""
        self._kraft_version = kraft_version

    def _apply_topics(self, old: TopicsImage) -> TopicsImage:
        by_id, by_name, index = old.by_id.mutate(), old.by_name.mutate(), old.index.edit()
        # Deletions first: a name may be deleted and taken again by a new topic in the same delta.
        for topic_id, topic in self._deleted.items():
            del by_id[topic_id]
            if by_name.get(topic.name) is topic:
                del by_name[topic.name]
            index.remove_topic(topic)
        for td in self._topics.values():
            if td.base is None:
                partitions = PersistentMap(td.changes)
                index.add_name(td.name)
            else:
                partitions = td.base.partitions.update(td.changes)
            for pid, part in td.changes.items():
                index.change_partition((td.id, pid), td.old(pid), part)
            topic = TopicImage(name=td.name, id=td.id, partitions=partitions)
            by_id[td.id] = topic
            by_name[td.name] = topic
        return TopicsImage(
            by_id=PersistentMap(by_id.finish()), by_name=PersistentMap(by_name.finish()), index=index.finish()
        )

    # -- what changed -----------------------------------------------------------------------------

    @property
    def created_topics(self) -> dict[Uuid, str]:
        """Topics this delta created (and did not remove again): id -> name, in name order."""
        created = sorted((td.name, td.id) for td in self._topics.values() if td.base is None)
        return {topic_id: name for name, topic_id in created}

    @property
    def deleted_topics(self) -> dict[Uuid, str]:
        """Topics of the starting image this delta removed: id -> name, in name order."""
        return {topic_id: name for name, topic_id in sorted((t.name, t.id) for t in self._deleted.values())}

    @property
    def changed_partitions(self) -> tuple[PartitionChange, ...]:
        """Partitions created or changed, in (topic name, partition) order; those of deleted topics are
        not listed (see ``deleted_topics``)."""
        out = [
            PartitionChange(td.id, td.name, pid, td.old(pid), part)
            for td in self._topics.values() for pid, part in td.changes.items()
        ]
        out.sort(key=lambda c: (c.topic_name, c.partition))
        return tuple(out)

    @property
    def changed_configs(self) -> tuple[ConfigResource, ...]:
        """Config resources whose overrides differ from the starting image's, in order."""
        old = self.image.configs
        return tuple(sorted(r for r, entries in self._configs.items() if dict(old.config(r)) != entries))

    @property
    def changed_topic_configs(self) -> frozenset[str]:
        """Names of the topics whose overrides changed. A BROKER resource in ``changed_configs`` (the
        cluster default ``""`` or one broker) changes the effective configs of every topic besides."""
        return frozenset(r.name for r in self.changed_configs if r.type is ConfigResourceType.TOPIC)

    @property
    def changed_acls(self) -> dict[Uuid, AclBinding | None]:
        """ACLs added (id -> binding) or removed (id -> None) relative to the starting image."""
        old = self.image.acls.by_id
        return {acl_id: b for acl_id, b in self._acls.items() if old.get(acl_id) != b}

    @property
    def scram_changed(self) -> bool:
        """Whether a SCRAM credential was added, changed or removed."""
        return self._scram is not None

    @property
    def changed_brokers(self) -> tuple[int, ...]:
        """Broker ids whose registration was added, changed or removed, in order."""
        if self._brokers is None:
            return ()
        before = self.image.cluster.brokers
        return tuple(sorted(b for b in self._touched_brokers if before.get(b) != self._brokers.get(b)))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """What this delta means for ``broker_id``'s replicas (Kafka's ``TopicsDelta.localChanges``),
        found among the deleted topics and changed partitions only. From ``EMPTY_IMAGE`` it lists every
        replica the broker hosts."""
        deletes: list[LocalPartition] = []
        leaders: list[LocalPartition] = []
        followers: list[LocalPartition] = []
        for topic_id, topic in self._deleted.items():
            for pid, part in topic.partitions.items():
                if broker_id in part.replicas:
                    deletes.append(LocalPartition(topic.name, topic_id, pid, part))
        for td in self._topics.values():
            for pid, part in td.changes.items():
                if broker_id in part.replicas:
                    local = LocalPartition(td.name, td.id, pid, part)
                    (leaders if part.leader == broker_id else followers).append(local)
                elif (old := td.old(pid)) is not None and broker_id in old.replicas:
                    deletes.append(LocalPartition(td.name, td.id, pid, old))
        for found in (deletes, leaders, followers):
            found.sort(key=_local_order)
        return LocalReplicaChanges(tuple(deletes), tuple(leaders), tuple(followers))

    # -- copy on first touch ---------------------------------------------------------------------

    def _features_map(self) -> dict[str, int]:
        if self._features is None:
            self._features = dict(self.image.features.levels)
        return self._features

    def _brokers_map(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.image.cluster.brokers)
        return self._brokers

    def _set_broker(self, reg: BrokerRegistration) -> None:
        self._brokers_map()[reg.id] = reg
        self._touched_brokers.add(reg.id)

    def _controllers_map(self) -> dict[int, ControllerRegistration]:
        if self._controllers is None:
            self._controllers = dict(self.image.cluster.controllers)
        return self._controllers

    def _topic_id_named(self, name: str) -> Uuid | None:
        """The id of the live topic called ``name`` as replayed so far, or None."""
        created = self._created_names.get(name)
        if created is not None:
            return created
        topic = self.image.topics.by_name.get(name)
        return None if topic is None or topic.id in self._deleted else topic.id

    def _topic_exists(self, topic_id: Uuid) -> bool:
        return topic_id in self._topics or (topic_id in self.image.topics.by_id and topic_id not in self._deleted)

    def _topic(self, topic_id: Uuid) -> _TopicDelta:
        td = self._topics.get(topic_id)
        if td is None:
            base = None if topic_id in self._deleted else self.image.topics.by_id.get(topic_id)
            if base is None:
                raise MetadataReplayError(f"partition record for unknown topic id {topic_id}")
            td = self._topics[topic_id] = _TopicDelta(base.name, topic_id, base)
        return td

    def _config_of(self, resource: ConfigResource) -> dict[str, str]:
        config = self._configs.get(resource)
        if config is None:
            config = self._configs[resource] = dict(self.image.configs.config(resource))
        return config

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
        self._set_broker(BrokerRegistration.from_record(record))

    def _replay_unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        self._registered(record.broker_id, record.broker_epoch, "UnregisterBrokerRecord")
        del self._brokers_map()[record.broker_id]
        self._touched_brokers.add(record.broker_id)

    def _replay_fence_broker(self, record: FenceBrokerRecord) -> None:
        reg = self._registered(record.id, record.epoch, "FenceBrokerRecord")
        self._set_broker(attrs.evolve(reg, fenced=True))

    def _replay_unfence_broker(self, record: UnfenceBrokerRecord) -> None:
        reg = self._registered(record.id, record.epoch, "UnfenceBrokerRecord")
        self._set_broker(attrs.evolve(reg, fenced=False))

    def _replay_registration_change(self, record: BrokerRegistrationChangeRecord) -> None:
        reg = self._registered(record.broker_id, record.broker_epoch, "BrokerRegistrationChangeRecord")
        fenced = {FencingChange.FENCE: True, FencingChange.UNFENCE: False}.get(record.fenced, reg.fenced)
        shutting_down = reg.in_controlled_shutdown or (
            record.in_controlled_shutdown == InControlledShutdownChange.IN_CONTROLLED_SHUTDOWN
        )
        self._set_broker(attrs.evolve(reg, fenced=fenced, in_controlled_shutdown=shutting_down))

    def _replay_register_controller(self, record: RegisterControllerRecord) -> None:
        self._controllers_map()[record.controller_id] = ControllerRegistration.from_record(record)

    def _replay_topic(self, record: TopicRecord) -> None:
        if self._topic_exists(record.topic_id):
            raise MetadataReplayError(f"TopicRecord for existing topic id {record.topic_id}")
        if self._topic_id_named(record.name) is not None:
            raise MetadataReplayError(f"TopicRecord for existing topic name {record.name!r}")
        self._topics[record.topic_id] = _TopicDelta(record.name, record.topic_id, None)
        self._created_names[record.name] = record.topic_id

    def _replay_partition(self, record: PartitionRecord) -> None:
        self._topic(record.topic_id).changes[record.partition_id] = PartitionRegistration.from_record(record)

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        td = self._topic(record.topic_id)
        current = td.get(record.partition_id)
        if current is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord for unknown partition {record.partition_id} of topic {record.topic_id}"
            )
        td.changes[record.partition_id] = current.merge(record)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        if not self._topic_exists(record.topic_id):
            raise MetadataReplayError(f"RemoveTopicRecord for unknown topic id {record.topic_id}")
        td = self._topics.pop(record.topic_id, None)
        if td is not None and td.base is None:
            name = td.name
            del self._created_names[name]
        else:
            topic = self.image.topics.by_id[record.topic_id]
            self._deleted[record.topic_id] = topic
            name = topic.name
        # A topic's configs go with it, as in Kafka; a later topic of the same name starts clean.
        self._config_of(ConfigResource.topic(name)).clear()

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

    def _acl_exists(self, acl_id: Uuid) -> bool:
        if acl_id in self._acls:
            return self._acls[acl_id] is not None
        return acl_id in self.image.acls.by_id

    def _replay_access_control_entry(self, record: AccessControlEntryRecord) -> None:
        if self._acl_exists(record.id):
            raise MetadataReplayError(f"AccessControlEntryRecord for existing ACL id {record.id}")
        self._acls[record.id] = binding_from_codes(
            record.resource_type, record.resource_name, record.pattern_type, record.principal, record.host,
            record.operation, record.permission_type)

    def _replay_remove_access_control_entry(self, record: RemoveAccessControlEntryRecord) -> None:
        if not self._acl_exists(record.id):
            raise MetadataReplayError(f"RemoveAccessControlEntryRecord for unknown ACL id {record.id}")
        self._acls[record.id] = None

    def _scram_users(self) -> dict[str, dict[int, UserScramCredentialRecord]]:
        if self._scram is None:
            self._scram = {name: dict(creds) for name, creds in self.image.scram.users.items()}
        return self._scram

    def _replay_user_scram_credential(self, record: UserScramCredentialRecord) -> None:
        self._scram_users().setdefault(record.name, {})[record.mechanism] = record

    def _replay_remove_user_scram_credential(self, record: RemoveUserScramCredentialRecord) -> None:
        creds = self._scram_users().get(record.name, {})
        if creds.pop(record.mechanism, None) is None:
            raise MetadataReplayError(
                f"RemoveUserScramCredentialRecord removes {record.name}'s mechanism {record.mechanism}, which it has not"
            )

    @property
    def changed_scram_credentials(self) -> bool:
        """Whether a record added, replaced or removed a SCRAM credential."""
        return self._scram is not None

    def _replay_client_quota(self, record: ClientQuotaRecord) -> None:
        if self._client_quotas is None:
            self._client_quotas = {e: dict(q) for e, q in self.image.client_quotas.entities.items()}
        entity = quota_entity((part.entity_type, part.entity_name) for part in record.entity)
        quotas = self._client_quotas.setdefault(entity, {})
        if record.remove:
            quotas.pop(record.key, None)
        else:
            quotas[record.key] = record.value

    @property
    def changed_client_quotas(self) -> bool:
        """Whether a record set or removed a client quota."""
        return self._client_quotas is not None


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
    AccessControlEntryRecord: MetadataDelta._replay_access_control_entry,
    RemoveAccessControlEntryRecord: MetadataDelta._replay_remove_access_control_entry,
    UserScramCredentialRecord: MetadataDelta._replay_user_scram_credential,
    RemoveUserScramCredentialRecord: MetadataDelta._replay_remove_user_scram_credential,
    ClientQuotaRecord: MetadataDelta._replay_client_quota,
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
