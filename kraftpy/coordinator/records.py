"""The records of ``__consumer_offsets``, in Kafka's byte format, so Kafka's tools can read a kraftpy log.

Every record's key and value start with an int16 *version*; the fields of that version follow,
encoded as in the Kafka protocol (int16-length strings, int32-length bytes, int32-count arrays; the
flexible versions 4+ of the values use compact lengths and tagged fields). The key's version says
what the record is::

    key version  key fields                       value                 value versions
    0, 1         group, topic, partition          OffsetCommitValue     0-4 (writes 3; 1 with an expire timestamp)
    2            group                            GroupMetadataValue    0-4 (writes 3)
    other        (a record of a later Kafka, e.g. KIP-848's; skipped when loading)

A null value is a tombstone: that offset, or that group, was deleted.

Byte layout of what kraftpy writes (big-endian)::

    OffsetCommitKey v1     int16 1 | string group | string topic | int32 partition
    GroupMetadataKey v2    int16 2 | string group
    OffsetCommitValue v3   int16 3 | int64 offset | int32 leader_epoch | string metadata | int64 commit_timestamp
    OffsetCommitValue v1   int16 1 | int64 offset | string metadata | int64 commit_timestamp | int64 expire_timestamp
    GroupMetadataValue v3  int16 3 | string protocol_type | int32 generation | nullable string protocol
                           | nullable string leader | int64 current_state_timestamp
                           | int32 count, then per member: string member_id | nullable string group_instance_id
                             | string client_id | string client_host | int32 rebalance_timeout
                             | int32 session_timeout | bytes subscription | bytes assignment

The declarations below use the message DSL of :mod:`kraftpy.protocol.schema`; a test compares them
with Kafka's definitions field by field. Decoding never trusts the bytes: anything that does not
parse raises :class:`CoordinatorRecordError`.
"""

from __future__ import annotations

import struct

import attrs

from kraftpy.protocol.schema import DecodeError, F, message

# fmt: off
OffsetCommitKey = message(
    "OffsetCommitKey", kind="data", versions="0-1", flexible="none", fields=[
        F("group", "string", "0-1"),
        F("topic", "string", "0-1"),
        F("partition", "int32", "0-1"),
    ],
)

OffsetCommitValue = message(
    "OffsetCommitValue", kind="data", versions="0-4", flexible="4+", fields=[
        F("offset", "int64"),
        F("leader_epoch", "int32", "3+", default=-1),
        F("metadata", "string"),
        F("commit_timestamp", "int64"),
        F("expire_timestamp", "int64", "1", default=-1),
    ],
)

GroupMetadataKey = message(
    "GroupMetadataKey", kind="data", versions="2", flexible="none", fields=[
        F("group", "string", "2"),
    ],
)

GroupMetadataValue = message(
    "GroupMetadataValue", kind="data", versions="0-4", flexible="4+", fields=[
        F("protocol_type", "string"),
        F("generation", "int32"),
        F("protocol", "string", nullable="0+"),
        F("leader", "string", nullable="0+"),
        F("current_state_timestamp", "int64", "2+", default=-1),
        F("members", "[]MemberMetadata", "0+", [
            F("member_id", "string"),
            F("group_instance_id", "string", "3+", nullable="3+", default=None),
            F("client_id", "string"),
            F("client_host", "string"),
            F("rebalance_timeout", "int32", "1+", default=-1),
            F("session_timeout", "int32"),
            F("subscription", "bytes"),
            F("assignment", "bytes"),
        ]),
    ],
)
# fmt: on

MemberMetadata = GroupMetadataValue.MemberMetadata

#: The versions kraftpy writes (Kafka 3.6's, inter-broker protocol 3.6).
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
#: Written instead when a commit carries an expire timestamp (OffsetCommit v2-v4's retention time).
OFFSET_COMMIT_VALUE_EXPIRE_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3

_VERSION = struct.Struct(">h")
assert _VERSION.size == 2


class CoordinatorRecordError(ValueError):
    """A key or value of ``__consumer_offsets`` that does not parse."""


@attrs.frozen
class OffsetKey:
    """The key of a committed offset: (group, topic, partition)."""

    group: str
    topic: str
    partition: int


@attrs.frozen
class GroupKey:
    """The key of a group's metadata."""

    group: str


@attrs.frozen
class UnknownKey:
    """A key whose version this kraftpy does not know (loading skips it, as Kafka does)."""

    version: int


def _prefixed(version: int, schema_cls, obj) -> bytes:
    return _VERSION.pack(version) + schema_cls.SCHEMA.to_bytes(version, obj)


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _prefixed(OFFSET_COMMIT_KEY_VERSION, OffsetCommitKey,
                     OffsetCommitKey(group=group, topic=topic, partition=partition))


def group_metadata_key(group: str) -> bytes:
    return _prefixed(GROUP_METADATA_KEY_VERSION, GroupMetadataKey, GroupMetadataKey(group=group))


def offset_commit_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int,
                        expire_timestamp: int | None = None) -> bytes:
    """Version 3, or version 1 when the commit has an expire timestamp (the only version that has one)."""
    value = OffsetCommitValue(offset=offset, leader_epoch=leader_epoch, metadata=metadata,
                              commit_timestamp=commit_timestamp,
                              expire_timestamp=-1 if expire_timestamp is None else expire_timestamp)
    version = OFFSET_COMMIT_VALUE_VERSION if expire_timestamp is None else OFFSET_COMMIT_VALUE_EXPIRE_VERSION
    return _prefixed(version, OffsetCommitValue, value)


def group_metadata_value(value) -> bytes:
    """``value`` is a :data:`GroupMetadataValue` object; written at version 3."""
    return _prefixed(GROUP_METADATA_VALUE_VERSION, GroupMetadataValue, value)


def split_version(data: bytes | memoryview, what: str) -> tuple[int, memoryview]:
    buf = memoryview(data)
    if len(buf) < _VERSION.size:
        raise CoordinatorRecordError(f"{what} of {len(buf)} bytes has no version")
    (version,) = _VERSION.unpack_from(buf, 0)
    return version, buf[_VERSION.size:]


def decode_body(schema_cls, version: int, body: memoryview, what: str):
    try:
        return schema_cls.SCHEMA.from_bytes(version, body)
    except DecodeError as exc:
        raise CoordinatorRecordError(f"{what} v{version}: {exc}") from None


def decode_key(data: bytes | memoryview) -> OffsetKey | GroupKey | UnknownKey:
    version, body = split_version(data, "key")
    if version in OffsetCommitKey.SCHEMA.versions:
        key = decode_body(OffsetCommitKey, version, body, "OffsetCommitKey")
        return OffsetKey(key.group, key.topic, key.partition)
    if version in GroupMetadataKey.SCHEMA.versions:
        return GroupKey(decode_body(GroupMetadataKey, version, body, "GroupMetadataKey").group)
    return UnknownKey(version)


def decode_offset_value(data: bytes | memoryview):
    """An :data:`OffsetCommitValue` (``expire_timestamp`` is -1 unless the record is version 1)."""
    version, body = split_version(data, "OffsetCommitValue")
    if version not in OffsetCommitValue.SCHEMA.versions:
        raise CoordinatorRecordError(f"OffsetCommitValue has unknown version {version}")
    return decode_body(OffsetCommitValue, version, body, "OffsetCommitValue")


def decode_group_value(data: bytes | memoryview) -> tuple[int, object]:
    """``(version, GroupMetadataValue)``: version 0 has no rebalance timeout (Kafka then uses the session
    timeout), versions below 2 no state timestamp."""
    version, body = split_version(data, "GroupMetadataValue")
    if version not in GroupMetadataValue.SCHEMA.versions:
        raise CoordinatorRecordError(f"GroupMetadataValue has unknown version {version}")
    return version, decode_body(GroupMetadataValue, version, body, "GroupMetadataValue")
