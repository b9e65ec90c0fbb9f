"""Raft messages to and from plain msgpack-able values (dicts, lists, ints, str, bytes, bool, None).

Every class that may travel is registered under a type tag, its class name. An encoded object is a
dict whose key ``"@"`` holds the tag and whose other keys are the attrs field names; tuples become
lists; bytes stay bytes (the frame packer must use msgpack's bin type). Decoding is strict: an
unknown tag, a missing or unexpected field raises `CodecError`.

    >>> decode(encode(DescribeQuorumRequest()))
    DescribeQuorumRequest()
"""

from __future__ import annotations

from typing import Any

import attrs

from kraftpy.raft.log import RecordBatch, SnapshotId
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
    VoteRequest,
    VoteResponse,
)

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
    )
}

#: Structures nested inside messages, by tag.
STRUCT_TYPES: dict[str, type] = {
    cls.__name__: cls for cls in (RecordBatch, SnapshotId, EpochEndOffset, ReplicaState)
}

_REGISTRY: dict[str, type] = {**MESSAGE_TYPES, **STRUCT_TYPES}
_FIELD_NAMES: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in attrs.fields(cls)) for cls in _REGISTRY.values()
}


class CodecError(ValueError):
    """The value does not decode to a known Raft message."""


def _encode_value(value: Any) -> Any:
    cls = type(value)
    if cls in _FIELD_NAMES:
        out: dict[str, Any] = {TAG_KEY: cls.__name__}
        for name in _FIELD_NAMES[cls]:
            out[name] = _encode_value(getattr(value, name))
        return out
    if cls is tuple or cls is list:
        return [_encode_value(v) for v in value]
    if value is None or cls in (int, str, bytes, bool):
        return value
    raise CodecError(f"cannot encode {cls.__name__}")


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        tag = value.get(TAG_KEY)
        cls = _REGISTRY.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise CodecError(f"unknown type tag {tag!r}")
        names = _FIELD_NAMES[cls]
        extra = set(value) - set(names) - {TAG_KEY}
        if extra:
            raise CodecError(f"{tag}: unexpected fields {sorted(extra)}")
        try:
            return cls(**{name: _decode_value(value[name]) for name in names if name in value})
        except (TypeError, ValueError) as exc:
            raise CodecError(f"{tag}: {exc}") from exc
    if isinstance(value, list):
        return tuple(_decode_value(v) for v in value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def encode(message: Message) -> dict[str, Any]:
    """A msgpack-able dict for `message`."""
    if type(message) not in MESSAGE_TYPES.values():
        raise CodecError(f"not a Raft message: {type(message).__name__}")
    return _encode_value(message)


def decode(value: Any) -> Message:
    """The message `encode` made `value` from."""
    if not isinstance(value, dict) or value.get(TAG_KEY) not in MESSAGE_TYPES:
        raise CodecError(f"not an encoded Raft message: {value!r:.80}")
    return _decode_value(value)
