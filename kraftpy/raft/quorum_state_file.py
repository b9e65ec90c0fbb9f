"""The quorum-state file: the durable election state of a node, as Kafka lays it out.

Kafka's ``quorum-state`` file is one JSON object, the QuorumStateData record plus a
``data_version`` key. kraftpy writes version 0::

    {"clusterId": "", "leaderId": 1, "leaderEpoch": 5, "votedId": -1, "appliedOffset": 0,
     "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}

- ``leaderEpoch``: the current epoch (-1 in Kafka's default stands for "none yet", read as 0);
- ``leaderId``: the leader known in that epoch, -1 if none;
- ``votedId``: the vote given in that epoch, -1 if none; at most one of the two is set;
- ``currentVoters``: the static voter set, written for Kafka tools, checked on read when present;
- ``clusterId``, ``appliedOffset``: written as Kafka does, ignored on read.

Version 1 files (Kafka 3.8+: ``votedDirectoryId``, no voters, no clusterId) are read as well.
Pure functions only: the atomic write lives in kraftpy.raft.quorum_state_store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from kraftpy.raft.effects import ElectionState

DATA_VERSION = 0
SUPPORTED_VERSIONS = (0, 1)


class CorruptQuorumStateError(ValueError):
    """The quorum-state file cannot be read as a QuorumStateData object."""


def encode_quorum_state(state: ElectionState, voters: Iterable[int]) -> bytes:
    data = {
        "clusterId": "",
        "leaderId": -1 if state.leader_id is None else state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": -1 if state.voted_id is None else state.voted_id,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": v} for v in sorted(voters)],
        "data_version": DATA_VERSION,
    }
    return json.dumps(data, separators=(",", ":")).encode() + b"\n"


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
    if version not in SUPPORTED_VERSIONS:
        raise CorruptQuorumStateError(f"unsupported data_version {version!r}")
    try:
        leader_id = int(data.get("leaderId", -1))
        epoch = int(data.get("leaderEpoch", -1))
        voted_id = int(data.get("votedId", -1))
    except (TypeError, ValueError) as exc:
        raise CorruptQuorumStateError(f"bad field: {exc}") from exc
    if leader_id >= 0 and voted_id >= 0:
        raise CorruptQuorumStateError("both leaderId and votedId are set")
    file_voters = data.get("currentVoters")
    if voters is not None and file_voters is not None:
        named = sorted(int(v["voterId"]) for v in file_voters)
        if named != sorted(voters):
            raise CorruptQuorumStateError(f"file names voters {named}, configured {sorted(voters)}")
    return ElectionState(
        epoch=max(epoch, 0),
        leader_id=leader_id if leader_id >= 0 else None,
        voted_id=voted_id if voted_id >= 0 else None,
    )
