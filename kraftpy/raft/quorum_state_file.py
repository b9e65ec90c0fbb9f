"""The quorum-state file: the durable election state of a node, as Kafka lays it out.

Kafka's ``quorum-state`` file is one JSON object, the QuorumStateData record plus a
``data_version`` key. For a static quorum (kraft.version 0) kraftpy writes version 0::

    {"clusterId": "", "leaderId": 1, "leaderEpoch": 5, "votedId": -1, "appliedOffset": 0,
     "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}

- ``leaderEpoch``: the current epoch (-1 in Kafka's default stands for "none yet", read as 0);
- ``leaderId``: the leader known in that epoch, -1 if none;
- ``votedId``: the vote given in that epoch, -1 if none; at most one of the two is set;
- ``currentVoters``: the static voter set, written for Kafka tools, checked on read when present;
- ``clusterId``, ``appliedOffset``: written as Kafka does, ignored on read.

For a dynamic quorum (KIP-853) it writes version 1, as Kafka 3.9 does: no voter list (the voters are
in the log), and ``votedDirectoryId``, the directory id of the replica voted for (Kafka's base64 form;
all zeros for none)::

    {"leaderId": -1, "leaderEpoch": 5, "votedId": 2, "votedDirectoryId": "b0ZVxJ1mTcmhgy3LBqaJSw",
     "data_version": 1}

Both versions are read, whichever is written.

The file is trusted no more than a message: every field read is checked (an integer, not a float or
a string; an epoch in [-1, 2**31 - 1], ids in [-1, 2**31 - 1]; a voter list of voter ids) and a bad
one stops the reader with a `CorruptQuorumStateError` naming the field, e.g. ``leaderEpoch
2147483653 is out of range``; the store adds the file's path. The writer refuses such a state too,
so that no node ever persists what it could not read back.
Pure functions only: the atomic write lives in kraftpy.raft.quorum_state_store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kraftpy.fatal import FatalError
from kraftpy.ids import ZERO_UUID, Uuid
from kraftpy.raft.effects import ElectionState
from kraftpy.rpc.wire_schema import INT32

DATA_VERSION = 0
SUPPORTED_VERSIONS = (0, 1)
#: -1 stands for "none" in every field.
_NONE = -1


class CorruptQuorumStateError(FatalError, ValueError):
    """The quorum-state file cannot be read as a QuorumStateData object (or a state could not be
    written as one). Fatal: a node must not guess its epoch or its vote; the process stops with this
    one line (kraftpy.fatal) and the operator repairs or removes the file."""


def _check_state(state: ElectionState) -> None:
    for name, value in (("leaderEpoch", state.epoch), ("leaderId", state.leader_id), ("votedId", state.voted_id)):
        if value is not None and not 0 <= value <= INT32.high:
            raise CorruptQuorumStateError(f"refusing to write {name} {value}: out of range (0 to {INT32.high})")


def encode_quorum_state(state: ElectionState, voters: Iterable[int] | None) -> bytes:
    """Version 0 with the static `voters`; version 1 when `voters` is None (a dynamic quorum)."""
    _check_state(state)
    data: dict[str, Any]
    if voters is None:
        directory = state.voted_directory_id or ZERO_UUID
        data = {
            "leaderId": _NONE if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": _NONE if state.voted_id is None else state.voted_id,
            "votedDirectoryId": directory.to_base64(),
            "data_version": 1,
        }
        return json.dumps(data, separators=(",", ":")).encode() + b"\n"
    data = {
        "clusterId": "",
        "leaderId": _NONE if state.leader_id is None else state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": _NONE if state.voted_id is None else state.voted_id,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": v} for v in sorted(voters)],
        "data_version": DATA_VERSION,
    }
    return json.dumps(data, separators=(",", ":")).encode() + b"\n"


def _int_field(data: dict[str, Any], name: str) -> int:
    """The int32 field `name` of the file, -1 (none) when absent."""
    value = data.get(name, _NONE)
    if type(value) is not int:
        raise CorruptQuorumStateError(f"{name} {json.dumps(value)[:40]} is not an integer")
    if not _NONE <= value <= INT32.high:
        raise CorruptQuorumStateError(f"{name} {value} is out of range ({_NONE} to {INT32.high})")
    return value


def _voters_field(data: dict[str, Any]) -> list[int] | None:
    voters = data.get("currentVoters")
    if voters is None:
        return None
    if not isinstance(voters, list) or not all(isinstance(v, dict) and "voterId" in v for v in voters):
        raise CorruptQuorumStateError(f"currentVoters {json.dumps(voters)[:60]} is not a list of voters")
    ids = sorted(_int_field(v, "voterId") for v in voters)
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise CorruptQuorumStateError(f"currentVoters {ids} holds an id that is negative or repeated")
    return ids


def decode_quorum_state(raw: bytes, voters: Iterable[int] | None = None) -> ElectionState:
    """The election state in `raw`; if `voters` is given and the file names a voter set, they must
    agree."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptQuorumStateError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptQuorumStateError("not a JSON object")
    version = data.get("data_version")
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        raise CorruptQuorumStateError(f"unsupported data_version {json.dumps(version)[:40]}")
    leader_id = _int_field(data, "leaderId")
    epoch = _int_field(data, "leaderEpoch")
    voted_id = _int_field(data, "votedId")
    if leader_id >= 0 and voted_id >= 0:
        raise CorruptQuorumStateError(f"both leaderId {leader_id} and votedId {voted_id} are set")
    if (leader_id >= 0 or voted_id >= 0) and epoch < 0:
        raise CorruptQuorumStateError(f"leaderEpoch {epoch} with a leader or a vote")
    named = _voters_field(data)
    if voters is not None and named is not None and named != sorted(voters):
        raise CorruptQuorumStateError(f"currentVoters {named} differ from the configured voters {sorted(voters)}")
    directory = _directory_field(data) if voted_id >= 0 else None
    return ElectionState(
        epoch=max(epoch, 0),
        leader_id=leader_id if leader_id >= 0 else None,
        voted_id=voted_id if voted_id >= 0 else None,
        voted_directory_id=directory,
    )


def _directory_field(data: dict[str, Any]) -> Uuid | None:
    """votedDirectoryId (version 1): Kafka's base64 form, all zeros (or absent) for none."""
    value = data.get("votedDirectoryId")
    if value is None:
        return None
    if not isinstance(value, str):
        raise CorruptQuorumStateError(f"votedDirectoryId {json.dumps(value)[:40]} is not an id")
    try:
        directory = Uuid.from_base64(value)
    except ValueError as exc:
        raise CorruptQuorumStateError(f"votedDirectoryId: {exc}") from None
    return None if directory == ZERO_UUID else directory
