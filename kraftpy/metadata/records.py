"""Metadata records (KIP-631): the only things the controller writes to ``__cluster_metadata``.

Each record is a frozen attrs class with Kafka's name and Kafka's fields (in snake_case, in the order
of Kafka's schema). A record value in the metadata log is one msgpack array::

    [type_tag, version, [field, field, ...]]

``type_tag`` is Kafka's ``apiKey`` for the record, ``version`` the schema version written, and the
fields follow in declaration order. Nested structures (endpoints, features) are arrays of their own
fields, ids are their 16 raw bytes, and sequences are arrays. Decoding refuses a tag or a version this
build does not know (``UnknownMetadataRecordError``, ``UnsupportedMetadataRecordVersionError``) and
anything malformed (``CorruptMetadataRecordError``): a log written by a newer kraftpy stops a reader
loudly instead of being misread.

Fields of Kafka's schemas deliberately left out are listed in ``OMITTED_KAFKA_FIELDS`` with the reason;
the version each class writes is the highest one whose other fields it carries. A class that gained
fields in a later version (always at the end) still reads its earlier versions (``MIN_VERSION``), the
missing fields taking their defaults: a metadata log written before keeps loading.

Log directories (KIP-858) are 16-byte ids like every other: ``PartitionRecord.directories`` holds the
directory of each replica in ``replicas`` order, ``PartitionChangeRecord.directories`` the new list
(None: unchanged), ``RegisterBrokerRecord.log_dirs`` a broker's online directories. Kafka's reserved
ids keep their meaning: `DIRECTORY_UNASSIGNED` (the broker has not said where the replica is yet),
`DIRECTORY_LOST` (it was in a directory now unknown) and `DIRECTORY_MIGRATING`.

``PartitionChangeRecord`` keeps Kafka's convention for "unchanged": ``None`` for the lists,
``NO_LEADER_CHANGE`` (-2) for the leader and -1 for the leader recovery state.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs
import msgpack

from kraftpy.ids import Uuid

#: ``Leader`` of a partition without a leader.
NO_LEADER = -1
#: ``Leader`` of a PartitionChangeRecord that does not change the leader.
NO_LEADER_CHANGE = -2


class LeaderRecoveryState(enum.IntEnum):
    """Whether the leader was elected from the ISR (RECOVERED) or uncleanly and is still recovering."""

    RECOVERED = 0
    RECOVERING = 1


#: ``LeaderRecoveryState`` of a PartitionChangeRecord that does not change it.
NO_LEADER_RECOVERY_STATE_CHANGE = -1

#: Kafka's ``DirectoryId.UNASSIGNED``: a replica whose broker has not reported its directory yet.
DIRECTORY_UNASSIGNED = Uuid(bytes(16))
#: Kafka's ``DirectoryId.LOST``: a replica in a directory that is no longer known.
DIRECTORY_LOST = Uuid(bytes(15) + b"\x01")
#: Kafka's ``DirectoryId.MIGRATING``: a replica whose directory was never chosen by this cluster.
DIRECTORY_MIGRATING = Uuid(bytes(15) + b"\x02")
#: Ids no directory may have.
RESERVED_DIRECTORY_IDS = frozenset({DIRECTORY_UNASSIGNED, DIRECTORY_LOST, DIRECTORY_MIGRATING})


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` codes."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    #: A consumer group's dynamic configs (KIP-848, Kafka 3.8+).
    GROUP = 32


class FencingChange(enum.IntEnum):
    """``BrokerRegistrationChangeRecord.fenced``."""

    UNFENCE = -1
    NONE = 0
    FENCE = 1


class InControlledShutdownChange(enum.IntEnum):
    """``BrokerRegistrationChangeRecord.in_controlled_shutdown``."""

    NONE = 0
    IN_CONTROLLED_SHUTDOWN = 1


OMITTED_KAFKA_FIELDS: dict[str, dict[str, str]] = {
    "RegisterBrokerRecord": {
        "IsMigratingZkBroker": "there is no ZooKeeper to migrate from",
    },
    "BrokerRegistrationChangeRecord": {
        "LogDirs": "a broker's directories change only when it registers again (RegisterBrokerRecord LogDirs); "
                   "a directory failing is reported in heartbeats (OfflineLogDirs)",
    },
    "PartitionRecord": {
        "EligibleLeaderReplicas": "eligible leader replicas (KIP-966) are not implemented",
        "LastKnownElr": "eligible leader replicas (KIP-966) are not implemented",
    },
    "PartitionChangeRecord": {
        "EligibleLeaderReplicas": "eligible leader replicas (KIP-966) are not implemented",
        "LastKnownElr": "eligible leader replicas (KIP-966) are not implemented",
    },
    "RegisterControllerRecord": {
        "ZkMigrationReady": "there is no ZooKeeper to migrate from",
    },
}


class MetadataRecordError(ValueError):
    """A metadata record value that cannot be decoded."""


class UnknownMetadataRecordError(MetadataRecordError):
    """The type tag names no record this build knows."""


class UnsupportedMetadataRecordVersionError(MetadataRecordError):
    """The record type is known but not at this version."""


class CorruptMetadataRecordError(MetadataRecordError):
    """Not a well-formed ``[tag, version, fields]`` array, or fields of the wrong shape."""


# -- field helpers -----------------------------------------------------------------------------------


def _int_tuple(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _optional_int_tuple(value: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(value)


def _is_int(_inst: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, got {value!r}")


def _is_bool(_inst: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be a bool, got {value!r}")


def _is_str(_inst: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str, got {value!r}")


def _is_optional_str(_inst: object, attribute: attrs.Attribute, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str or None, got {value!r}")


def _ints_only(_inst: object, attribute: attrs.Attribute, value: tuple[int, ...] | None) -> None:
    if value is not None and not all(isinstance(v, int) for v in value):
        raise TypeError(f"{attribute.name} must hold ints, got {value!r}")


def _int_field(**kw: Any) -> Any:
    return attrs.field(validator=_is_int, **kw)


def _ids_field(**kw: Any) -> Any:
    return attrs.field(converter=_int_tuple, validator=_ints_only, **kw)


def _optional_ids_field() -> Any:
    return attrs.field(default=None, converter=_optional_int_tuple, validator=_ints_only)


def _uuid_field() -> Any:
    return attrs.field(converter=Uuid.coerce)


def _uuid_tuple(value: Iterable[Any]) -> tuple[Uuid, ...]:
    return tuple(Uuid.coerce(v) for v in value)


def _optional_uuid_tuple(value: Iterable[Any] | None) -> tuple[Uuid, ...] | None:
    return None if value is None else _uuid_tuple(value)


T = TypeVar("T")


def _nested(cls: type[T]) -> Callable[[Iterable[Any]], tuple[T, ...]]:
    def convert(items: Iterable[Any]) -> tuple[T, ...]:
        return tuple(item if isinstance(item, cls) else cls(*item) for item in items)

    return convert


# -- nested structures ------------------------------------------------------------------------------


@attrs.frozen
class BrokerEndpoint:
    """A listener of a broker (or controller): ``PLAINTEXT://host:9092`` is name PLAINTEXT."""

    name: str = attrs.field(validator=_is_str)
    host: str = attrs.field(validator=_is_str)
    port: int = _int_field()
    security_protocol: int = _int_field(default=0)


@attrs.frozen
class BrokerFeature:
    """A feature range a node supports, e.g. ``metadata.version`` 1..7."""

    name: str = attrs.field(validator=_is_str)
    min_supported_version: int = _int_field()
    max_supported_version: int = _int_field()


@attrs.frozen
class ClientQuotaEntityData:
    """One part of a client-quota entity: ``entity_type`` is ``user`` or ``client-id``, ``entity_name``
    None for that type's default."""

    entity_type: str = attrs.field(validator=_is_str)
    entity_name: str | None = attrs.field(validator=_is_optional_str)


def _to_float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"must be a number, got {value!r}")
    return float(value)


# -- the records -----------------------------------------------------------------------------------

_REGISTRY: dict[int, type] = {}


def _record(type_tag: int, version: int, min_version: int | None = None) -> Callable[[type[T]], type[T]]:
    def register(cls: type[T]) -> type[T]:
        assert type_tag not in _REGISTRY, type_tag
        cls.RECORD_TYPE = type_tag  # type: ignore[attr-defined]
        cls.VERSION = version  # type: ignore[attr-defined]
        cls.MIN_VERSION = version if min_version is None else min_version  # type: ignore[attr-defined]
        _REGISTRY[type_tag] = cls
        return cls

    return register


@_record(type_tag=0, version=3, min_version=1)
@attrs.frozen
class RegisterBrokerRecord:
    """A broker registered (or re-registered) and got ``broker_epoch``: the offset of this record."""

    broker_id: int = _int_field()
    incarnation_id: Uuid = _uuid_field()
    broker_epoch: int = _int_field()
    end_points: tuple[BrokerEndpoint, ...] = attrs.field(converter=_nested(BrokerEndpoint))
    features: tuple[BrokerFeature, ...] = attrs.field(converter=_nested(BrokerFeature))
    rack: str | None = attrs.field(validator=_is_optional_str)
    fenced: bool = attrs.field(default=True, validator=_is_bool)
    in_controlled_shutdown: bool = attrs.field(default=False, validator=_is_bool)
    #: The ids of the broker's online log directories (KIP-858; version 3).
    log_dirs: tuple[Uuid, ...] = attrs.field(default=(), converter=_uuid_tuple)


@_record(type_tag=1, version=0)
@attrs.frozen
class UnregisterBrokerRecord:
    broker_id: int = _int_field()
    broker_epoch: int = _int_field()


@_record(type_tag=2, version=0)
@attrs.frozen
class TopicRecord:
    name: str = attrs.field(validator=_is_str)
    topic_id: Uuid = _uuid_field()


@_record(type_tag=3, version=1, min_version=0)
@attrs.frozen
class PartitionRecord:
    """The full state of one partition; ``replicas`` in preferred order (the first is the preferred leader)."""

    partition_id: int = _int_field()
    topic_id: Uuid = _uuid_field()
    replicas: tuple[int, ...] = _ids_field()
    isr: tuple[int, ...] = _ids_field()
    removing_replicas: tuple[int, ...] = _ids_field(default=())
    adding_replicas: tuple[int, ...] = _ids_field(default=())
    leader: int = _int_field(default=NO_LEADER)
    leader_recovery_state: int = _int_field(default=LeaderRecoveryState.RECOVERED)
    leader_epoch: int = _int_field(default=0)
    partition_epoch: int = _int_field(default=0)
    #: The log directory of each replica, in ``replicas`` order (version 1; empty from version 0:
    #: every replica `DIRECTORY_UNASSIGNED`).
    directories: tuple[Uuid, ...] = attrs.field(default=(), converter=_uuid_tuple)


@_record(type_tag=4, version=0)
@attrs.frozen
class ConfigRecord:
    """Set ``name`` on a resource, or delete it when ``value`` is None."""

    resource_type: int = _int_field()
    resource_name: str = attrs.field(validator=_is_str)
    name: str = attrs.field(validator=_is_str)
    value: str | None = attrs.field(validator=_is_optional_str)


@_record(type_tag=5, version=1, min_version=0)
@attrs.frozen
class PartitionChangeRecord:
    """A change to one partition; fields left at their defaults are unchanged. Replaying it bumps the
    partition epoch, and the leader epoch when ``leader`` is set."""

    partition_id: int = _int_field()
    topic_id: Uuid = _uuid_field()
    isr: tuple[int, ...] | None = _optional_ids_field()
    leader: int = _int_field(default=NO_LEADER_CHANGE)
    replicas: tuple[int, ...] | None = _optional_ids_field()
    removing_replicas: tuple[int, ...] | None = _optional_ids_field()
    adding_replicas: tuple[int, ...] | None = _optional_ids_field()
    leader_recovery_state: int = _int_field(default=NO_LEADER_RECOVERY_STATE_CHANGE)
    #: The new directory of each replica, in the (new) ``replicas`` order; None: unchanged (version 1).
    directories: tuple[Uuid, ...] | None = attrs.field(default=None, converter=_optional_uuid_tuple)


@_record(type_tag=7, version=0)
@attrs.frozen
class FenceBrokerRecord:
    id: int = _int_field()
    epoch: int = _int_field()


@_record(type_tag=8, version=0)
@attrs.frozen
class UnfenceBrokerRecord:
    id: int = _int_field()
    epoch: int = _int_field()


@_record(type_tag=9, version=0)
@attrs.frozen
class RemoveTopicRecord:
    """The topic and all its partitions (and its configs) are gone."""

    topic_id: Uuid = _uuid_field()


def _is_bytes(_inst: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"{attribute.name} must be bytes, got {type(value).__name__}")


@_record(type_tag=11, version=0)
@attrs.frozen(repr=False)
class UserScramCredentialRecord:
    """User ``name``'s SCRAM credential for ``mechanism`` (1 SCRAM-SHA-256, 2 SCRAM-SHA-512), adding it or
    replacing the one before. The keys are password equivalents for a server: kept out of ``repr``."""

    name: str = attrs.field(validator=_is_str)
    mechanism: int = _int_field()
    salt: bytes = attrs.field(validator=_is_bytes)
    stored_key: bytes = attrs.field(validator=_is_bytes)
    server_key: bytes = attrs.field(validator=_is_bytes)
    iterations: int = _int_field()

    def __repr__(self) -> str:
        return f"UserScramCredentialRecord(name={self.name!r}, mechanism={self.mechanism}, iterations={self.iterations})"


@_record(type_tag=22, version=0)
@attrs.frozen
class RemoveUserScramCredentialRecord:
    """User ``name`` has no ``mechanism`` credential any more."""

    name: str = attrs.field(validator=_is_str)
    mechanism: int = _int_field()


@_record(type_tag=12, version=0)
@attrs.frozen
class FeatureLevelRecord:
    """The finalized level of a feature; level 0 removes the feature."""

    name: str = attrs.field(validator=_is_str)
    feature_level: int = _int_field()


@_record(type_tag=14, version=0)
@attrs.frozen
class ClientQuotaRecord:
    """Set the quota ``key`` of a client-quota entity to ``value``, or remove it when ``remove``."""

    entity: tuple[ClientQuotaEntityData, ...] = attrs.field(converter=_nested(ClientQuotaEntityData))
    key: str = attrs.field(validator=_is_str)
    value: float = attrs.field(converter=_to_float)
    remove: bool = attrs.field(default=False, validator=_is_bool)


@_record(type_tag=15, version=0)
@attrs.frozen
class ProducerIdsRecord:
    """A block of producer ids went to ``broker_id``; the next block starts at ``next_producer_id``."""

    broker_id: int = _int_field()
    broker_epoch: int = _int_field()
    next_producer_id: int = _int_field()


@_record(type_tag=17, version=1)
@attrs.frozen
class BrokerRegistrationChangeRecord:
    broker_id: int = _int_field()
    broker_epoch: int = _int_field()
    fenced: int = _int_field(default=FencingChange.NONE)
    in_controlled_shutdown: int = _int_field(default=InControlledShutdownChange.NONE)


@_record(type_tag=18, version=0)
@attrs.frozen
class AccessControlEntryRecord:
    """An ACL (kraftpy.security.authorizer.AclBinding) and the id a RemoveAccessControlEntryRecord names it by.
    The enums carry Kafka's wire codes."""

    id: Uuid = _uuid_field()
    resource_type: int = _int_field()
    resource_name: str = attrs.field(validator=_is_str)
    pattern_type: int = _int_field()
    principal: str = attrs.field(validator=_is_str)
    host: str = attrs.field(validator=_is_str)
    operation: int = _int_field()
    permission_type: int = _int_field()


@_record(type_tag=19, version=0)
@attrs.frozen
class RemoveAccessControlEntryRecord:
    """The ACL of this id is gone."""

    id: Uuid = _uuid_field()


@_record(type_tag=20, version=0)
@attrs.frozen
class NoOpRecord:
    """Written by a new active controller so that its epoch has a committed entry."""


@_record(type_tag=27, version=0)
@attrs.frozen
class RegisterControllerRecord:
    controller_id: int = _int_field()
    incarnation_id: Uuid = _uuid_field()
    end_points: tuple[BrokerEndpoint, ...] = attrs.field(converter=_nested(BrokerEndpoint))
    features: tuple[BrokerFeature, ...] = attrs.field(converter=_nested(BrokerFeature))


MetadataRecord = (
    RegisterBrokerRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | ConfigRecord
    | PartitionChangeRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | RemoveTopicRecord
    | FeatureLevelRecord
    | ProducerIdsRecord
    | BrokerRegistrationChangeRecord
    | NoOpRecord
    | RegisterControllerRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | ClientQuotaRecord
)

#: Every record class, by Kafka type tag.
RECORD_TYPES: dict[int, type] = dict(sorted(_REGISTRY.items()))


# -- codec -----------------------------------------------------------------------------------------


def _to_wire(value: Any) -> Any:
    if isinstance(value, Uuid):
        return value.raw
    if isinstance(value, tuple):
        return [_to_wire(v) for v in value]
    if attrs.has(type(value)):
        return [_to_wire(getattr(value, f.name)) for f in attrs.fields(type(value))]
    if isinstance(value, enum.IntEnum):
        return int(value)
    return value


def encode_record(record: MetadataRecord) -> bytes:
    """The msgpack value of ``record`` as it is stored in the metadata log."""
    cls = type(record)
    if _REGISTRY.get(getattr(cls, "RECORD_TYPE", -1)) is not cls:
        raise TypeError(f"not a metadata record: {record!r}")
    return msgpack.packb([cls.RECORD_TYPE, cls.VERSION, _to_wire(record)], use_bin_type=True)


def decode_record(data: bytes) -> MetadataRecord:
    """The record whose value is ``data``; raises a ``MetadataRecordError`` subclass otherwise."""
    try:
        frame = msgpack.unpackb(data, raw=False, use_list=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CorruptMetadataRecordError(f"metadata record is not valid msgpack: {exc}") from exc
    if not (isinstance(frame, list) and len(frame) == 3 and isinstance(frame[2], list)):
        raise CorruptMetadataRecordError(f"metadata record is not [type, version, fields]: {frame!r}")
    tag, version, fields = frame
    if not isinstance(tag, int) or isinstance(tag, bool) or not isinstance(version, int):
        raise CorruptMetadataRecordError(f"metadata record type and version must be ints: {frame!r}")
    cls = _REGISTRY.get(tag)
    if cls is None:
        raise UnknownMetadataRecordError(f"unknown metadata record type {tag} (version {version})")
    if not cls.MIN_VERSION <= version <= cls.VERSION:
        readable = f"version {cls.VERSION}" if cls.MIN_VERSION == cls.VERSION else \
            f"versions {cls.MIN_VERSION}-{cls.VERSION}"
        raise UnsupportedMetadataRecordVersionError(
            f"{cls.__name__} (type {tag}) version {version} is not supported; this build reads {readable}"
        )
    if version < cls.VERSION and len(fields) > _field_count(cls, version):
        raise CorruptMetadataRecordError(f"malformed {cls.__name__}: too many fields for version {version}")
    try:
        return cls(*fields)
    except (TypeError, ValueError) as exc:
        raise CorruptMetadataRecordError(f"malformed {cls.__name__}: {exc}") from exc


#: Fields each class gained after its ``MIN_VERSION`` (always at the end), by the version that added them.
_ADDED_FIELDS: dict[str, dict[int, int]] = {
    "RegisterBrokerRecord": {3: 1},
    "PartitionRecord": {1: 1},
    "PartitionChangeRecord": {1: 1},
}


def _field_count(cls: type, version: int) -> int:
    """How many fields ``cls`` has at ``version`` (at most what it has now)."""
    added = _ADDED_FIELDS.get(cls.__name__, {})
    return len(attrs.fields(cls)) - sum(n for v, n in added.items() if v > version)
