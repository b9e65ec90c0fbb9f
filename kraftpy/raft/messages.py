"""The KRaft RPCs, one frozen class each, with Kafka's names and fields (KIP-595, KIP-630, KIP-996).

Kafka nests every one of these in Topics[] / Partitions[] arrays; the only Raft partition kraftpy
runs is ``__cluster_metadata``-0, so the nesting is dropped and each message carries that one
partition's fields at the top. Per-partition and top-level error codes are folded into one
`error_code`.

Dynamic quorums (KIP-853) add what Kafka's later versions of these messages add: the directory ids
of the replicas involved (a candidate's and the voter's it asks in Vote, the voter's in
BeginQuorumEpoch, the fetching replica's in Fetch and FetchSnapshot), so that a replica whose disk
was replaced is told apart from the one it replaced; and the leader's endpoints in every message
that names it, so that a replica learns where a leader it has no record of listens. UpdateVoter is
a voter telling the leader its endpoints and kraft.version range (Kafka's UpdateRaftVoter). Adding
and removing voters are not Raft messages: an operator's request reaches the leader's core through
its driver (`RaftCore.add_voter`, `RaftCore.remove_voter`).

Requests carry `cluster_id`; a receiver answers INCONSISTENT_CLUSTER_ID when it is set and differs
from its own. Responses name the current leader (`leader_id`, `leader_epoch`, -1 when unknown) so
a node that is behind learns of the new epoch from any answer.

Integer fields are annotated with their type in Kafka's message definitions (``Int32`` for ids and
epochs, ``Int64`` for offsets and positions, ``Int16`` for error codes): the codec refuses a value
outside it before a message is built (kraftpy.rpc.wire_schema), and the core checks again what each
value means (kraftpy.raft.validation), since messages built in memory never pass the codec.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from kraftpy.ids import Uuid
from kraftpy.raft.log import SnapshotId
from kraftpy.raft.voters import Endpoint, VoterNode
from kraftpy.rpc.wire_schema import Int16, Int32, Int64

NO_LEADER = -1


@attrs.frozen
class VoteRequest:
    """Asks `voter_id` for its vote for `candidate_id` in `candidate_epoch`.

    With `pre_vote` (KIP-996) nothing is persisted or bumped on either side: `candidate_epoch` is the
    epoch the sender would stand in (its epoch + 1) and a grant only says "I would vote for you"."""

    is_request: ClassVar[bool] = True
    cluster_id: str | None
    voter_id: Int32
    candidate_epoch: Int32
    candidate_id: Int32
    last_offset_epoch: Int32
    last_offset: Int64
    pre_vote: bool = False
    candidate_directory_id: Uuid | None = None
    #: The directory id of the voter asked, as the candidate's voter set names it (None: unknown).
    voter_directory_id: Uuid | None = None


@attrs.frozen
class VoteResponse:
    is_request: ClassVar[bool] = False
    error_code: Int16
    leader_id: Int32
    leader_epoch: Int32
    vote_granted: bool
    leader_endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class BeginQuorumEpochRequest:
    """Sent by a newly elected leader to every voter so that they stop waiting for an election."""

    is_request: ClassVar[bool] = True
    cluster_id: str | None
    voter_id: Int32
    leader_id: Int32
    leader_epoch: Int32
    voter_directory_id: Uuid | None = None
    leader_endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class BeginQuorumEpochResponse:
    is_request: ClassVar[bool] = False
    error_code: Int16
    leader_id: Int32
    leader_epoch: Int32
    leader_endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class EndQuorumEpochRequest:
    """Sent by a leader that steps down; `preferred_successors` lists voters by log end offset,
    largest first, so the most up-to-date one starts the next election first."""

    is_request: ClassVar[bool] = True
    cluster_id: str | None
    leader_id: Int32
    leader_epoch: Int32
    preferred_successors: tuple[Int32, ...] = attrs.field(converter=tuple, default=())
    leader_endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class EndQuorumEpochResponse:
    is_request: ClassVar[bool] = False
    error_code: Int16
    leader_id: Int32
    leader_epoch: Int32
    leader_endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class FetchRequest:
    """Pull replication: `fetch_offset` is the fetcher's log end offset and `last_fetched_epoch`
    the epoch of the batch just below it; the leader checks the two against its own log."""

    is_request: ClassVar[bool] = True
    cluster_id: str | None
    replica_id: Int32
    max_wait_ms: Int32
    current_leader_epoch: Int32
    fetch_offset: Int64
    last_fetched_epoch: Int32
    log_start_offset: Int64 = -1
    max_bytes: Int32 = 0x7FFFFFFF
    replica_directory_id: Uuid | None = None


@attrs.frozen
class EpochEndOffset:
    epoch: Int32
    end_offset: Int64


@attrs.frozen
class FetchResponse:
    """Exactly one of: `records` (possibly empty), `diverging_epoch` (truncate and fetch again) or
    `snapshot_id` (fetch that snapshot first), unless `error_code` is set.

    `records` is Kafka's ``records`` field: the leader's batches from the fetch offset on, whole
    RecordBatch v2 batches back to back, exactly the bytes of the leader's log (kraftpy.raft.batch)."""

    is_request: ClassVar[bool] = False
    error_code: Int16
    leader_id: Int32
    leader_epoch: Int32
    high_watermark: Int64 = -1
    log_start_offset: Int64 = -1
    diverging_epoch: EpochEndOffset | None = None
    snapshot_id: SnapshotId | None = None
    records: bytes = b""
    leader_endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class FetchSnapshotRequest:
    is_request: ClassVar[bool] = True
    cluster_id: str | None
    replica_id: Int32
    current_leader_epoch: Int32
    snapshot_id: SnapshotId
    position: Int64
    max_bytes: Int32 = 0x7FFFFFFF
    replica_directory_id: Uuid | None = None


@attrs.frozen
class FetchSnapshotResponse:
    is_request: ClassVar[bool] = False
    error_code: Int16
    leader_id: Int32
    leader_epoch: Int32
    snapshot_id: SnapshotId | None = None
    size: Int64 = -1
    position: Int64 = -1
    unaligned_records: bytes = b""
    leader_endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class DescribeQuorumRequest:
    is_request: ClassVar[bool] = True


@attrs.frozen
class ReplicaState:
    replica_id: Int32
    log_end_offset: Int64
    #: Milliseconds on the leader's clock; -1 if never.
    last_fetch_timestamp: Int64 = -1
    last_caught_up_timestamp: Int64 = -1
    replica_directory_id: Uuid | None = None


@attrs.frozen
class DescribeQuorumResponse:
    is_request: ClassVar[bool] = False
    error_code: Int16
    leader_id: Int32 = NO_LEADER
    leader_epoch: Int32 = -1
    high_watermark: Int64 = -1
    current_voters: tuple[ReplicaState, ...] = attrs.field(converter=tuple, default=())
    observers: tuple[ReplicaState, ...] = attrs.field(converter=tuple, default=())
    error_message: str | None = None
    #: The voters with their endpoints and kraft.version ranges (DescribeQuorum v2's Nodes).
    nodes: tuple[VoterNode, ...] = attrs.field(converter=tuple, default=())
    kraft_version: Int16 = 0


@attrs.frozen
class UpdateVoterRequest:
    """A voter tells the leader of `current_leader_epoch` where it listens and which kraft.version
    levels it runs (Kafka's UpdateRaftVoter, sent by a voter that finds the voter set out of date)."""

    is_request: ClassVar[bool] = True
    cluster_id: str | None
    current_leader_epoch: Int32
    voter_id: Int32
    voter_directory_id: Uuid | None
    listeners: tuple[Endpoint, ...] = attrs.field(converter=tuple)
    kraft_versions: tuple[Int16, Int16] = attrs.field(converter=tuple)


@attrs.frozen
class UpdateVoterResponse:
    is_request: ClassVar[bool] = False
    error_code: Int16
    leader_id: Int32
    leader_epoch: Int32
    leader_endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | DescribeQuorumRequest
    | UpdateVoterRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | DescribeQuorumResponse
    | UpdateVoterResponse
)
Message = Request | Response


@attrs.frozen
class Received:
    """A message as handed to `RaftCore.step`: who sent it and the correlation id of the exchange.

    For a response, `correlation_id` is the one of the `Send` that carried the request; for a
    request, the core echoes it in the `Send` of its response."""

    source: int
    correlation_id: int
    message: Message
