"""The immutable ``MetadataImage``: the cluster's metadata as of one offset of the metadata log.

An image is never changed. A ``MetadataDelta`` (``delta.py``) replays records on top of one and
``apply()`` returns the next image, so a reader holding an image always sees one consistent state.
Every mapping inside an image is read-only; the classes below are plain values compared by content,
which is what lets a test say "replaying the log gives the same image as loading the snapshot".

The maps that grow with the cluster (topics by id and by name, each topic's partitions, the config
resources) are ``PersistentMap``s (``persistent.py``): the next image shares every untouched topic and
partition with this one, so applying a delta costs what it changed, not the size of the image. The
small ones (features, brokers, controllers, one resource's configs) are frozen dicts.

Areas, as in Kafka: features, cluster (broker and controller registrations), topics (by id and by name,
with their partitions, and the ``TopicsIndex`` the controller's rules look partitions up in),
configurations (by resource), producer ids, and the provenance (the offset and epoch of the last record
the image reflects).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from kraftpy.ids import Uuid
from kraftpy.metadata.persistent import PersistentMap, persistent
from kraftpy.metadata.records import (
    DIRECTORY_UNASSIGNED,
    NO_LEADER,
    NO_LEADER_CHANGE,
    NO_LEADER_RECOVERY_STATE_CHANGE,
    BrokerEndpoint,
    BrokerFeature,
    ConfigResourceType,
    LeaderRecoveryState,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UserScramCredentialRecord,
)
from kraftpy.metadata.topics_index import PartitionKey, TopicsIndex
from kraftpy.security.authorizer import AclBinding

METADATA_VERSION = "metadata.version"


def _frozen_map(value: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(value))


def _map_field() -> Any:
    return attrs.field(factory=dict, converter=_frozen_map)


def _persistent_field() -> Any:
    return attrs.field(factory=PersistentMap, converter=persistent)


@attrs.frozen
class MetadataProvenance:
    """The last record an image reflects: its offset in the metadata log and the Raft epoch it was
    written in. ``-1`` for both before any record."""

    last_offset: int = -1
    last_epoch: int = -1


# -- features ------------------------------------------------------------------------------------


@attrs.frozen
class FeaturesImage:
    """Finalized feature levels by name; a feature absent here is at level 0 (not enabled)."""

    levels: Mapping[str, int] = _map_field()

    @property
    def metadata_version(self) -> int:
        return self.levels.get(METADATA_VERSION, 0)


# -- cluster ---------------------------------------------------------------------------------------


@attrs.frozen
class BrokerRegistration:
    """What the cluster knows of a broker: its current incarnation, epoch, listeners and state.

    A broker is *active* (may lead, may join an ISR) when it is neither fenced nor in controlled
    shutdown."""

    id: int
    epoch: int
    incarnation_id: Uuid
    listeners: tuple[BrokerEndpoint, ...]
    features: tuple[BrokerFeature, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    #: The ids of its online log directories when it registered (KIP-858), in ``log.dirs`` order.
    directories: tuple[Uuid, ...] = ()

    @property
    def is_active(self) -> bool:
        return not self.fenced and not self.in_controlled_shutdown

    def supported_range(self, feature: str) -> tuple[int, int] | None:
        for f in self.features:
            if f.name == feature:
                return f.min_supported_version, f.max_supported_version
        return None

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            listeners=record.end_points,
            features=record.features,
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            directories=record.log_dirs,
        )

    def default_directory(self) -> Uuid:
        """Where a new replica on this broker is recorded before the broker says (Kafka's
        ``ClusterControlManager.defaultDir``): its only directory, or `DIRECTORY_UNASSIGNED`."""
        return self.directories[0] if len(self.directories) == 1 else DIRECTORY_UNASSIGNED

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(
            broker_id=self.id,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            end_points=self.listeners,
            features=self.features,
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
            log_dirs=self.directories,
        )


@attrs.frozen
class ControllerRegistration:
    id: int
    incarnation_id: Uuid
    listeners: tuple[BrokerEndpoint, ...]
    features: tuple[BrokerFeature, ...]

    @classmethod
    def from_record(cls, record: RegisterControllerRecord) -> ControllerRegistration:
        return cls(record.controller_id, record.incarnation_id, record.end_points, record.features)

    def to_record(self) -> RegisterControllerRecord:
        return RegisterControllerRecord(self.id, self.incarnation_id, self.listeners, self.features)


@attrs.frozen
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = _map_field()
    controllers: Mapping[int, ControllerRegistration] = _map_field()

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def is_active(self, broker_id: int) -> bool:
        """Registered, unfenced and not shutting down: may lead and may be in an ISR."""
        reg = self.brokers.get(broker_id)
        return reg is not None and reg.is_active

    def active_brokers(self) -> list[BrokerRegistration]:
        """Active brokers in id order: the ones new replicas are placed on."""
        return [reg for _, reg in sorted(self.brokers.items()) if reg.is_active]


# -- topics ----------------------------------------------------------------------------------------


@attrs.frozen
class PartitionRegistration:
    """One partition's replicas (preferred order), ISR, leader and epochs.

    Invariants kept by the controller: ``leader`` is NO_LEADER or a member of ``isr``; ``isr`` is a
    non-empty subset of ``replicas``; ``partition_epoch`` grows with every change, ``leader_epoch``
    with every leader election."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    leader_epoch: int = 0
    partition_epoch: int = 0
    #: The log directory of each replica on its broker, in ``replicas`` order (KIP-858); always as
    #: long as ``replicas`` (`DIRECTORY_UNASSIGNED` where no broker reported one).
    directories: tuple[Uuid, ...] = attrs.field(default=())

    def __attrs_post_init__(self) -> None:
        if len(self.directories) != len(self.replicas):
            object.__setattr__(self, "directories", (DIRECTORY_UNASSIGNED,) * len(self.replicas))

    def directory_of(self, broker_id: int) -> Uuid | None:
        """The directory of ``broker_id``'s replica (None if it holds none)."""
        try:
            return self.directories[self.replicas.index(broker_id)]
        except ValueError:
            return None

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=record.replicas,
            isr=record.isr,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
            leader=record.leader,
            leader_recovery_state=LeaderRecoveryState(record.leader_recovery_state),
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            directories=record.directories,
        )

    def to_record(self, topic_id: Uuid, partition_id: int) -> PartitionRecord:
        return PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=self.replicas,
            isr=self.isr,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader=self.leader,
            leader_recovery_state=int(self.leader_recovery_state),
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            directories=self.directories,
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after ``change``: the partition epoch always moves on, the leader epoch
        when the record names a leader (Kafka's ``PartitionRegistration.merge``)."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader != NO_LEADER_CHANGE:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        recovery = self.leader_recovery_state
        if change.leader_recovery_state != NO_LEADER_RECOVERY_STATE_CHANGE:
            recovery = LeaderRecoveryState(change.leader_recovery_state)
        replicas = self.replicas if change.replicas is None else change.replicas
        if change.directories is not None:
            directories = change.directories
        else:  # replicas that stay keep their directory, new ones have none yet
            directories = _directories_for(replicas, self.replicas, self.directories)
        return PartitionRegistration(
            replicas=replicas,
            directories=directories,
            isr=self.isr if change.isr is None else change.isr,
            removing_replicas=self.removing_replicas if change.removing_replicas is None else change.removing_replicas,
            adding_replicas=self.adding_replicas if change.adding_replicas is None else change.adding_replicas,
            leader=leader,
            leader_recovery_state=recovery,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
        )


def _directories_for(replicas: tuple[int, ...], old_replicas: tuple[int, ...],
                     old_directories: tuple[Uuid, ...]) -> tuple[Uuid, ...]:
    """The directory of each of ``replicas``: the old one of a replica that was there, else unassigned."""
    known = dict(zip(old_replicas, old_directories, strict=True)) if len(old_replicas) == len(old_directories) \
        else {}
    return tuple(known.get(r, DIRECTORY_UNASSIGNED) for r in replicas)


@attrs.frozen
class TopicImage:
    name: str
    id: Uuid
    partitions: PersistentMap[int, PartitionRegistration] = _persistent_field()


#: One partition as the topics area's iterators yield it.
PartitionEntry = tuple[TopicImage, int, PartitionRegistration]


def _entry_order(entry: PartitionEntry) -> tuple[str, int]:
    return entry[0].name, entry[1]


@attrs.frozen
class TopicsImage:
    """Topics by id and by name, and the index over their partitions.

    Invariants: ``by_id`` and ``by_name`` hold the same ``TopicImage`` objects; ``index`` is the
    ``TopicsIndex`` of exactly these topics (a delta keeps it so; an image made by hand gets one
    built). The index is derived, so it takes no part in comparing images."""

    by_id: PersistentMap[Uuid, TopicImage] = _persistent_field()
    by_name: PersistentMap[str, TopicImage] = _persistent_field()
    index: TopicsIndex = attrs.field(default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.index is None:
            object.__setattr__(self, "index", TopicsIndex.build(self.by_id.values()))

    def get_by_name(self, name: str) -> TopicImage | None:
        return self.by_name.get(name)

    def get_by_id(self, topic_id: Uuid) -> TopicImage | None:
        return self.by_id.get(topic_id)

    def partitions(self) -> Iterator[PartitionEntry]:
        """Every partition, topics in name order, partitions in id order (a full scan)."""
        for _, topic in sorted(self.by_name.items()):
            for pid, part in sorted(topic.partitions.items()):
                yield topic, pid, part

    # -- looked up in the index: cost proportional to the partitions returned ----------------------

    def _entries(self, keys: Iterable[PartitionKey]) -> list[PartitionEntry]:
        by_id = self.by_id
        entries = []
        for topic_id, pid in keys:
            topic = by_id[topic_id]
            entries.append((topic, pid, topic.partitions[pid]))
        entries.sort(key=_entry_order)
        return entries

    def partitions_of_broker(self, broker_id: int) -> list[PartitionEntry]:
        """The partitions whose ISR holds ``broker_id`` or which it leads, in name and id order."""
        return self._entries(self.index.of_broker(broker_id))

    def partitions_led_by(self, broker_id: int) -> list[PartitionEntry]:
        """The partitions ``broker_id`` leads, in name and id order."""
        return self._entries(key for key, leads in self.index.of_broker(broker_id).items() if leads)

    def partitions_without_leader(self) -> list[PartitionEntry]:
        """The partitions whose leader is NO_LEADER, in name and id order."""
        return self._entries(self.index.leaderless)

    def partitions_off_preferred(self) -> list[PartitionEntry]:
        """The partitions not led by their first replica (leaderless ones included), in name and id order."""
        return self._entries(self.index.off_preferred)

    def brokers_in_partitions(self) -> list[int]:
        """Every broker id some partition has in its ISR or as its leader, in id order."""
        return sorted(self.index.by_broker)

    def names_colliding_with(self, name: str) -> tuple[str, ...]:
        """Existing topic names equal to ``name`` once '.' and '_' are unified (``name`` itself included)."""
        return self.index.names_like(name)


# -- configs and producer ids --------------------------------------------------------------------


@attrs.frozen(order=True)
class ConfigResource:
    """A configurable thing: a topic by name, or a broker by id (``""`` names the cluster-wide default)."""

    type: ConfigResourceType = attrs.field(converter=ConfigResourceType)
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, name: str | int = "") -> ConfigResource:
        return cls(ConfigResourceType.BROKER, str(name))


def _config_resources(value: Mapping[ConfigResource, Mapping[str, str]]) -> PersistentMap:
    if isinstance(value, PersistentMap):
        return value
    return PersistentMap({resource: _frozen_map(entries) for resource, entries in value.items()})


@attrs.frozen
class ConfigurationsImage:
    """Dynamic configuration overrides by resource; a resource without overrides is absent.

    Invariant: every value in ``resources`` is a non-empty read-only mapping."""

    resources: PersistentMap[ConfigResource, Mapping[str, str]] = attrs.field(
        factory=PersistentMap, converter=_config_resources
    )

    def config(self, resource: ConfigResource) -> Mapping[str, str]:
        return self.resources.get(resource, _EMPTY_CONFIG)


_EMPTY_CONFIG: Mapping[str, str] = MappingProxyType({})


@attrs.frozen
class ProducerIdsImage:
    """The first producer id of the next block the controller will hand out."""

    next_producer_id: int = 0


# -- client quotas --------------------------------------------------------------------------------

#: A client-quota entity: its (entity type, entity name) pairs sorted by type, a None name being the
#: type's default; ``(("client-id", None), ("user", "alice"))`` is /users/alice/clients/<default>.
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The canonical (sorted by type) form of an entity."""
    return tuple(sorted(((t, n) for t, n in parts), key=lambda part: part[0]))


@attrs.frozen
class ClientQuotasImage:
    """Client quotas (ClientQuotaRecord) by entity.

    Invariant: every value in ``entities`` is a non-empty read-only mapping of quota key to value."""

    entities: Mapping[QuotaEntity, Mapping[str, float]] = _map_field()

    def quotas(self, entity: QuotaEntity) -> Mapping[str, float]:
        return self.entities.get(entity, _EMPTY_QUOTAS)


_EMPTY_QUOTAS: Mapping[str, float] = MappingProxyType({})


# -- SCRAM credentials ---------------------------------------------------------------------------


@attrs.frozen
class ScramImage:
    """Users' SCRAM credentials (UserScramCredentialRecord): ``users[name][mechanism]`` is the record
    that set it (mechanism 1 SCRAM-SHA-256, 2 SCRAM-SHA-512).

    Invariant: every value in ``users`` is a non-empty read-only mapping."""

    users: Mapping[str, Mapping[int, UserScramCredentialRecord]] = _map_field()

    def credential(self, name: str, mechanism: int) -> UserScramCredentialRecord | None:
        return self.users.get(name, _NO_CREDENTIALS).get(mechanism)


_NO_CREDENTIALS: Mapping[int, UserScramCredentialRecord] = MappingProxyType({})


# -- ACLs ------------------------------------------------------------------------------------------


@attrs.frozen
class AclsImage:
    """The ACLs (AccessControlEntryRecord) by the id their record gave them. The broker's authorizer
    keeps its ``AclIndex`` from the deltas' ``changed_acls``; this map is what snapshots carry."""

    by_id: PersistentMap[Uuid, AclBinding] = _persistent_field()


# -- the whole image -----------------------------------------------------------------------------


@attrs.frozen
class MetadataImage:
    provenance: MetadataProvenance = MetadataProvenance()
    features: FeaturesImage = FeaturesImage()
    scram: ScramImage = ScramImage()
    cluster: ClusterImage = ClusterImage()
    topics: TopicsImage = TopicsImage()
    configs: ConfigurationsImage = ConfigurationsImage()
    producer_ids: ProducerIdsImage = ProducerIdsImage()
    acls: AclsImage = AclsImage()
    client_quotas: ClientQuotasImage = ClientQuotasImage()
    #: The kraft.version of the log as of this image (a Raft control record, not a metadata record:
    #: KIP-853's dynamic quorum is 1), reported with the finalized features as Kafka's brokers do.
    kraft_version: int = 0

    @property
    def is_empty(self) -> bool:
        return self == MetadataImage(provenance=self.provenance, kraft_version=self.kraft_version)

    @property
    def finalized_features(self) -> dict[str, int]:
        """The finalized feature levels, kraft.version among them once it is above 0."""
        levels = dict(self.features.levels)
        if self.kraft_version:
            levels["kraft.version"] = self.kraft_version
        return levels


EMPTY_IMAGE = MetadataImage()
