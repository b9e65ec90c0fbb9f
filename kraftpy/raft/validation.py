"""What a Raft message must say before it may touch a node's state: the checks that need no state.

A message is untrusted input. The codec (kraftpy.raft.codec) already refuses a value of the wrong
type or outside its Kafka type's range; the core cannot rely on that (the simulation hands it
messages built in memory), so it checks both again here, then what the values mean. Kafka's
KafkaRaftClient makes the same checks in its handlers; kraftpy makes them in one place, in the
epoch prelude (kraftpy.raft.core), before any handler runs and before any transition:

- every integer is within its Kafka type (epochs and ids int32, offsets int64);
- epochs are not negative; ids are not negative (Kafka: INVALID_REQUEST for a negative candidate or
  leader id); a request names its sender as the candidate, leader or fetching replica, and never
  the receiving node itself (a node sends itself no requests);
- Vote: the candidate's last offset and last epoch are not negative and that epoch is older than
  the one it stands in (Kafka's rule);
- Fetch: offset and last fetched epoch are not negative, the last fetched epoch is not newer than
  the epoch fetched in, wait and size limits are not negative (Kafka's rule); FetchSnapshot: the
  snapshot id and the size limit are not negative;
- EndQuorumEpoch: the preferred successors are distinct voters other than the resigning leader;
- UpdateVoter: a kraft.version range that is one (0 <= min <= max);
- in a static quorum (kraft.version 0) a candidate or leader must be a voter (INCONSISTENT_VOTER_SET,
  as Kafka before dynamic quorums). In a dynamic one (`voters` None) it need not be one of the
  receiver's voters: the sender's log may hold a newer voter set than the receiver's (a voter just
  added), and Raft lets a replica vote for, and follow, a node its own configuration does not name
  yet (thesis §4.1); the candidate counts only the votes of its own voter set.

Each failure is answered INVALID_REQUEST (or INCONSISTENT_VOTER_SET), and nothing is persisted.
Responses are checked the same way (`response_is_valid`); a bad one is dropped as if lost. What only
the receiving role can judge — a diverging epoch below the follower's high watermark, a snapshot
chunk past the announced size — is checked by the handler that reads it (kraftpy.raft.follower,
kraftpy.raft.snapshots) with the same effect: the answer is dropped and the fetch retried.
"""

from __future__ import annotations

from collections.abc import Set

from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    UpdateVoterRequest,
    UpdateVoterResponse,
    VoteRequest,
    VoteResponse,
)
from kraftpy.rpc.wire_schema import INT32, out_of_range

#: The largest epoch there can be (Kafka's epochs are int32): no election can start beyond it.
MAX_EPOCH = INT32.high

#: Each response type, by the request it answers.
RESPONSE_TYPES: dict[type, type] = {
    VoteRequest: VoteResponse,
    BeginQuorumEpochRequest: BeginQuorumEpochResponse,
    EndQuorumEpochRequest: EndQuorumEpochResponse,
    FetchRequest: FetchResponse,
    FetchSnapshotRequest: FetchSnapshotResponse,
    DescribeQuorumRequest: DescribeQuorumResponse,
    UpdateVoterRequest: UpdateVoterResponse,
}


def request_error(message: Message, source: int, local_id: int, voters: Set[int] | None) -> tuple[int, str] | None:
    """Why `message`, a request from node `source` to node `local_id`, must be refused before it is
    looked at any further: (error code, reason), or None when it may go on to the epoch checks.
    `voters` is the static voter set, None in a dynamic quorum (no membership checks)."""
    problem = out_of_range(message)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem
    named: int | None = None
    match message:
        case VoteRequest(candidate_epoch=epoch, candidate_id=named, last_offset=offset, last_offset_epoch=last):
            if offset < 0 or last < 0 or last >= epoch:
                return ErrorCode.INVALID_REQUEST, f"last offset {offset} of epoch {last} for epoch {epoch}"
        case BeginQuorumEpochRequest(leader_epoch=epoch, leader_id=named):
            pass
        case EndQuorumEpochRequest(leader_epoch=epoch, leader_id=named, preferred_successors=successors):
            allowed = (voters - {named}) if voters is not None else None
            if len(set(successors)) != len(successors) or named in successors or any(s < 0 for s in successors) or (
                    allowed is not None and not set(successors) <= allowed):
                return ErrorCode.INVALID_REQUEST, f"preferred successors {list(successors)}"
        case FetchRequest(current_leader_epoch=epoch, replica_id=named, fetch_offset=offset, last_fetched_epoch=last):
            if offset < 0 or last < 0 or last > epoch:
                return ErrorCode.INVALID_REQUEST, f"fetch offset {offset} of epoch {last} in epoch {epoch}"
            if message.max_wait_ms < 0 or message.max_bytes < 0:
                return ErrorCode.INVALID_REQUEST, "negative max_wait_ms or max_bytes"
        case FetchSnapshotRequest(current_leader_epoch=epoch, replica_id=named, snapshot_id=snapshot):
            if snapshot.end_offset < 0 or snapshot.epoch < 0 or message.max_bytes < 0:
                return ErrorCode.INVALID_REQUEST, f"snapshot {snapshot} with max_bytes {message.max_bytes}"
        case UpdateVoterRequest(current_leader_epoch=epoch, voter_id=named, kraft_versions=versions):
            if not 0 <= versions[0] <= versions[1]:
                return ErrorCode.INVALID_REQUEST, f"kraft.version range {list(versions)}"
        case DescribeQuorumRequest():
            return None
        case _:
            return ErrorCode.INVALID_REQUEST, f"{type(message).__name__} is not a request"
    if epoch < 0:
        return ErrorCode.INVALID_REQUEST, f"epoch {epoch}"
    if named < 0 or named != source or named == local_id:
        return ErrorCode.INVALID_REQUEST, f"node {named} named by node {source}"
    if voters is not None and not isinstance(message, FetchRequest | FetchSnapshotRequest | UpdateVoterRequest) \
            and named not in voters:
        return ErrorCode.INCONSISTENT_VOTER_SET, f"node {named} is not a voter"
    return None


def response_is_valid(message: Message, voters: Set[int] | None) -> bool:
    """Whether `message`, a response, says nothing impossible about epochs and leaders: every integer
    within its type, the epoch not negative, the leader a voter (of a static quorum; `voters` None: a
    dynamic one, any node id) or none. (Whether it may name the receiving node as leader depends on
    that node's state: the prelude checks it.)"""
    if out_of_range(message) is not None:
        return False
    match message:
        case (
            VoteResponse(leader_epoch=epoch, leader_id=leader)
            | BeginQuorumEpochResponse(leader_epoch=epoch, leader_id=leader)
            | EndQuorumEpochResponse(leader_epoch=epoch, leader_id=leader)
            | FetchResponse(leader_epoch=epoch, leader_id=leader)
            | FetchSnapshotResponse(leader_epoch=epoch, leader_id=leader)
            | UpdateVoterResponse(leader_epoch=epoch, leader_id=leader)
        ):
            if voters is None:
                return epoch >= 0 and (leader == NO_LEADER or leader >= 0)
            return epoch >= 0 and (leader == NO_LEADER or leader in voters)
        case DescribeQuorumResponse():
            return True
    return False
