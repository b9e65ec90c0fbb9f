"""The consumer protocol's member assignment: what a classic consumer group's leader hands each member.

A classic group's coordinator stores and forwards the assignment as opaque bytes (SyncGroup,
DescribeGroups); only clients and tools read them. For ``protocol_type`` ``consumer`` (range,
roundrobin, sticky and cooperative-sticky all use it) the bytes are::

    int16   version                     0-3; a newer one is read with this layout (Kafka's rule)
    int32   number of topics
      string  topic                     int16 length + UTF-8
      int32   number of partitions
        int32 partition
    bytes   user data                   int32 length (-1: null); the assignor's own

`decode_assignment` returns ``{topic: [partition, ...]}``; `encode_assignment` is its inverse.

A member's subscription (JoinGroup's protocol metadata) has the same framing; later versions add
fields at the end::

    int16   version                     0-3
    int32   number of topics, each an int16-length string
    bytes   user data                   int32 length (-1: null)
    v1+     owned partitions            int32 count of (string topic, int32 count, int32 partition...)
    v2+     int32 generation id
    v3+     string rack id              int16 length (-1: null)

`decode_subscription` reads it (a coordinator serving classic members of a consumer group needs the
topics, the owned partitions and the rack).
"""

from __future__ import annotations

import struct

from kraftpy.protocol.schema import DecodeError, F, message

# fmt: off
ConsumerProtocolAssignment = message(
    "ConsumerProtocolAssignment", kind="data", versions="0-3", flexible="none", fields=[
        F("assigned_partitions", "[]TopicPartition", "0+", [
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
        F("user_data", "bytes", nullable="0+", default=None),
    ],
)
ConsumerProtocolSubscription = message(
    "ConsumerProtocolSubscription", kind="data", versions="0-3", flexible="none", fields=[
        F("topics", "[]string"),
        F("user_data", "bytes", nullable="0+", default=None),
        F("owned_partitions", "[]TopicPartition", "1+", [
            F("topic", "string", "1+"),
            F("partitions", "[]int32", "1+"),
        ]),
        F("generation_id", "int32", "2+", default=-1),
        F("rack_id", "string", "3+", nullable="3+", default=None),
    ],
)
# fmt: on

_VERSION = struct.Struct(">h")
assert _VERSION.size == 2
#: The version written; every version has the same layout.
ASSIGNMENT_VERSION = 3


class AssignmentError(ValueError):
    """Member assignment bytes that do not parse as the consumer protocol."""


def decode_assignment(data: bytes | memoryview | None) -> dict[str, list[int]]:
    """``{topic: sorted partitions}``; empty bytes (a member not yet assigned) give ``{}``."""
    if not data:
        return {}
    buf = memoryview(data)
    if len(buf) < _VERSION.size:
        raise AssignmentError(f"assignment of {len(buf)} bytes has no version")
    (version,) = _VERSION.unpack_from(buf, 0)
    if version < 0:
        raise AssignmentError(f"assignment version {version}")
    readable = min(version, ASSIGNMENT_VERSION)
    try:
        assignment, _ = ConsumerProtocolAssignment.SCHEMA.decode(readable, buf, _VERSION.size)
    except DecodeError as exc:
        raise AssignmentError(str(exc)) from None
    out: dict[str, list[int]] = {}
    for entry in assignment.assigned_partitions:
        out.setdefault(entry.topic, []).extend(entry.partitions)
    return {topic: sorted(parts) for topic, parts in out.items()}


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None,
                      version: int = ASSIGNMENT_VERSION) -> bytes:
    cls = ConsumerProtocolAssignment.TopicPartition
    value = ConsumerProtocolAssignment(
        assigned_partitions=[cls(topic=t, partitions=list(p)) for t, p in partitions.items()], user_data=user_data)
    return _VERSION.pack(version) + ConsumerProtocolAssignment.SCHEMA.to_bytes(version, value)


class SubscriptionError(ValueError):
    """Subscription bytes that do not parse as the consumer protocol."""


def subscription_version(data: bytes | memoryview) -> int:
    """The version a subscription is written in (what the member reads its assignment with)."""
    if len(data) < _VERSION.size:
        raise SubscriptionError(f"subscription of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise SubscriptionError(f"subscription version {version}")
    return version


def decode_subscription(data: bytes | memoryview):
    """The subscription (topics, user_data, owned_partitions, generation_id, rack_id); a version above 3
    is read with version 3's layout, as Kafka reads it."""
    buf = memoryview(data)
    readable = min(subscription_version(buf), ASSIGNMENT_VERSION)
    try:
        subscription, _ = ConsumerProtocolSubscription.SCHEMA.decode(readable, buf, _VERSION.size)
    except DecodeError as exc:
        raise SubscriptionError(str(exc)) from None
    return subscription
