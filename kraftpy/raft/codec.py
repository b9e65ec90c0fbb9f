"""Raft messages to and from plain msgpack-able values (dicts, lists, ints, str, bytes, bool, None).

Every class that may travel is registered under a type tag, its class name, in a control-plane
`WireCodec` (kraftpy.rpc.wire): an encoded object is a dict whose key ``"@"`` holds the tag and whose
other keys are the attrs field names. Decoding is strict: an unknown tag, a missing or unexpected
field, a value of another type than the field declares or an integer outside its Kafka type's range
(kraftpy.rpc.wire_schema) raises `CodecError`, before any message is built.

    >>> decode(encode(DescribeQuorumRequest()))
    DescribeQuorumRequest()
"""

from __future__ import annotations

from typing import Any

from kraftpy.ids import Uuid
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.log import SnapshotId
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    ReplicaState,
    UpdateVoterRequest,
    UpdateVoterResponse,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.voters import Endpoint, ReplicaKey, VoterNode
from kraftpy.rpc.wire import WireCodec, WireError
from kraftpy.rpc.wire_schema import WireSchema

TAG_KEY = "@"

#: The message types, by tag.
MESSAGE_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        VoteRequest,
        VoteResponse,
        BeginQuorumEpochRequest,
        BeginQuorumEpochResponse,
        EndQuorumEpochRequest,
        EndQuorumEpochResponse,
        FetchRequest,
        FetchResponse,
        FetchSnapshotRequest,
        FetchSnapshotResponse,
        DescribeQuorumRequest,
        DescribeQuorumResponse,
        UpdateVoterRequest,
        UpdateVoterResponse,
    )
}

#: Structures nested inside messages, by tag.
STRUCT_TYPES: dict[str, type] = {
    cls.__name__: cls for cls in (SnapshotId, EpochEndOffset, ReplicaState, Uuid, Endpoint, ReplicaKey, VoterNode)
}

_WIRE = WireCodec([*MESSAGE_TYPES.values(), *STRUCT_TYPES.values(), ErrorCode])
_SCHEMA = WireSchema()

CodecError = WireError


def encode(message: Message) -> dict[str, Any]:
    """A msgpack-able dict for `message`."""
    if type(message) not in MESSAGE_TYPES.values():
        raise CodecError(f"not a Raft message: {type(message).__name__}")
    return _WIRE.encode(message)


def decode(value: Any) -> Message:
    """The message `encode` made `value` from."""
    if not isinstance(value, dict) or value.get(TAG_KEY) not in MESSAGE_TYPES:
        raise CodecError(f"not an encoded Raft message: {value!r:.80}")
    _SCHEMA.check(value, MESSAGE_TYPES[value[TAG_KEY]])
    return _WIRE.decode(value)
