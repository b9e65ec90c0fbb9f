"""The KIP-848 consumer groups' records of ``__consumer_offsets``, in Kafka's byte format.

Like the classic records (:mod:`kraftpy.coordinator.records`), key and value start with an int16
version; the key's version says what the record is. The values are flexible (compact lengths,
tagged fields)::

    key version  key fields         value                                      what it holds
    3            group              ConsumerGroupMetadataValue v0              the group epoch
    4            group              ConsumerGroupPartitionMetadataValue v0     the subscribed topics' ids and counts
    5            group, member      ConsumerGroupMemberMetadataValue v0        a member's ids, subscriptions, assignor
                                                                           (a classic member: its session
                                                                           timeout and protocols, tagged)
    6            group              ConsumerGroupTargetAssignmentMetadataValue v0   the assignment epoch
    7            group, member      ConsumerGroupTargetAssignmentMemberValue v0     a member's target partitions
    8            group, member      ConsumerGroupCurrentMemberAssignmentValue v0    a member's epochs, state, partitions

A null value is a tombstone. A group's records are written when a heartbeat (or a timeout) changes
them, and replayed on load: the last record of each key wins, as compaction keeps it.
"""

from __future__ import annotations

import uuid

from kraftpy.coordinator.records import _VERSION, CoordinatorRecordError, decode_body, split_version
from kraftpy.protocol.schema import F, message


def _topic_partitions(name: str) -> F:
    return F(name, "[]TopicPartitions", "0+", [
        F("topic_id", "uuid"),
        F("partitions", "[]int32"),
    ])


# fmt: off
ConsumerGroupMetadataKey = message(
    "ConsumerGroupMetadataKey", kind="data", versions="3", flexible="none", fields=[
        F("group_id", "string", "3"),
    ],
)
ConsumerGroupMetadataValue = message(
    "ConsumerGroupMetadataValue", kind="data", versions="0", flexible="0+", fields=[
        F("epoch", "int32"),
    ],
)
ConsumerGroupPartitionMetadataKey = message(
    "ConsumerGroupPartitionMetadataKey", kind="data", versions="4", flexible="none", fields=[
        F("group_id", "string", "4"),
    ],
)
ConsumerGroupPartitionMetadataValue = message(
    "ConsumerGroupPartitionMetadataValue", kind="data", versions="0", flexible="0+", fields=[
        F("topics", "[]TopicMetadata", "0+", [
            F("topic_id", "uuid"),
            F("topic_name", "string"),
            F("num_partitions", "int32"),
            F("partition_metadata", "[]PartitionMetadata", "0+", [
                F("partition", "int32"),
                F("racks", "[]string"),
            ]),
        ]),
    ],
)
ConsumerGroupMemberMetadataKey = message(
    "ConsumerGroupMemberMetadataKey", kind="data", versions="5", flexible="none", fields=[
        F("group_id", "string", "5"),
        F("member_id", "string", "5"),
    ],
)
ConsumerGroupMemberMetadataValue = message(
    "ConsumerGroupMemberMetadataValue", kind="data", versions="0", flexible="0+", fields=[
        F("instance_id", "string", nullable="0+"),
        F("rack_id", "string", nullable="0+"),
        F("client_id", "string"),
        F("client_host", "string"),
        F("subscribed_topic_names", "[]string"),
        F("subscribed_topic_regex", "string", nullable="0+"),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("server_assignor", "string", nullable="0+"),
        F("classic_member_metadata", "ClassicMemberMetadata", "0+", [
            F("session_timeout_ms", "int32"),
            F("supported_protocols", "[]ClassicProtocol", "0+", [
                F("name", "string"),
                F("metadata", "bytes"),
            ]),
        ], nullable="0+", default=None, tag=0, tagged="0+"),
    ],
)
ConsumerGroupTargetAssignmentMetadataKey = message(
    "ConsumerGroupTargetAssignmentMetadataKey", kind="data", versions="6", flexible="none", fields=[
        F("group_id", "string", "6"),
    ],
)
ConsumerGroupTargetAssignmentMetadataValue = message(
    "ConsumerGroupTargetAssignmentMetadataValue", kind="data", versions="0", flexible="0+", fields=[
        F("assignment_epoch", "int32"),
    ],
)
ConsumerGroupTargetAssignmentMemberKey = message(
    "ConsumerGroupTargetAssignmentMemberKey", kind="data", versions="7", flexible="none", fields=[
        F("group_id", "string", "7"),
        F("member_id", "string", "7"),
    ],
)
ConsumerGroupTargetAssignmentMemberValue = message(
    "ConsumerGroupTargetAssignmentMemberValue", kind="data", versions="0", flexible="0+", fields=[
        F("topic_partitions", "[]TopicPartition", "0+", [
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ]),
    ],
)
ConsumerGroupCurrentMemberAssignmentKey = message(
    "ConsumerGroupCurrentMemberAssignmentKey", kind="data", versions="8", flexible="none", fields=[
        F("group_id", "string", "8"),
        F("member_id", "string", "8"),
    ],
)
ConsumerGroupCurrentMemberAssignmentValue = message(
    "ConsumerGroupCurrentMemberAssignmentValue", kind="data", versions="0", flexible="0+", fields=[
        F("member_epoch", "int32"),
        F("previous_member_epoch", "int32"),
        F("state", "int8"),
        _topic_partitions("assigned_partitions"),
        _topic_partitions("partitions_pending_revocation"),
    ],
)
# fmt: on

#: key version -> (key class, value class)
BY_KEY_VERSION = {
    3: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    4: (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    5: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    6: (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    7: (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    8: (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
}
METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = range(3, 9)
VALUE_VERSION = 0


def key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    cls = BY_KEY_VERSION[version][0]
    obj = cls(group_id=group_id) if member_id is None else cls(group_id=group_id, member_id=member_id)
    return _VERSION.pack(version) + cls.SCHEMA.to_bytes(version, obj)


def value(key_version: int, obj) -> bytes:
    cls = BY_KEY_VERSION[key_version][1]
    return _VERSION.pack(VALUE_VERSION) + cls.SCHEMA.to_bytes(VALUE_VERSION, obj)


def decode_key(version: int, data: bytes | memoryview) -> tuple[str, str | None]:
    """(group id, member id or None) of a consumer-group key of ``version``."""
    _, body = split_version(data, "key")
    cls = BY_KEY_VERSION[version][0]
    k = decode_body(cls, version, body, cls.SCHEMA.name)
    return k.group_id, getattr(k, "member_id", None)


def decode_value(key_version: int, data: bytes | memoryview):
    cls = BY_KEY_VERSION[key_version][1]
    version, body = split_version(data, cls.SCHEMA.name)
    if version not in cls.SCHEMA.versions:
        raise CoordinatorRecordError(f"{cls.SCHEMA.name} has unknown version {version}")
    return decode_body(cls, version, body, cls.SCHEMA.name)


def topic_partitions(cls, assignment: dict[uuid.UUID, frozenset[int]]) -> list:
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))]


def assignment_of(entries) -> dict[uuid.UUID, frozenset[int]]:
    return {e.topic_id: frozenset(e.partitions) for e in entries if e.partitions}
