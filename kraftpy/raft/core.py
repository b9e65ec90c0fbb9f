"""The KRaft consensus core: a pure state machine, messages and clock readings in, effects out.

Theory of operation
-------------------

`RaftCore` is one node of a Raft quorum replicating one log (Kafka's ``__cluster_metadata``),
following KIP-595 (Kafka's Raft: pull replication, epochs, BeginQuorumEpoch / EndQuorumEpoch),
KIP-630 (snapshots and FetchSnapshot) and KIP-996 (pre-vote). It does no I/O of its own: it never
awaits, never reads a clock but the ones it is given, never opens, writes, syncs, renames or deletes
a file. Its driver

1. calls `start(now)` once, then, in a loop,
2. waits for a message or until `next_deadline()`, whichever comes first, and hands the message to
   `step(Received(source, correlation_id, message), now)` or calls `tick(now)`;
3. applies the effects returned, in order, finishing each before the next (kraftpy.raft.effects).

Writes enter through `propose(records, now)` on the leader, which answers with the offsets the
records will take; they are gathered for controller.quorum.append.linger.ms and appended as one
batch (`BatchAccumulator`, kept in the leader's state; `tick` drains it when `next_deadline` says).
Committed batches leave through `Commit` effects, in order and exactly once per process lifetime;
after a restart (or a snapshot download) the state machine first reloads the latest snapshot
(`SnapshotLoaded`) and commits resume from its end offset.

Where durable work happens. The log is injected (`RaftLog`), and every method the core calls on it
changes memory only: an append, a truncation, a snapshot stored or downloaded, a prefix dropped.
All of it becomes durable through one effect, `FlushLog`, which the driver carries out off the
event loop (a worker thread) before it applies the next effect; the quorum-state file likewise
(`PersistQuorumState`). Anything the core tells another node about its log (a vote's last offset
and epoch, a fetch offset) was flushed first, and the leader counts its own log toward the high
watermark only up to what it flushed. Reads of the log inside a call are bounded page-cache reads:
a fetch answer reads at most fetch_max_bytes, and committed batches are delivered at most about
fetch_max_bytes per call (a longer backlog makes `next_deadline` "now"). This is etcd's
Ready/Advance split in Kafka's shape: the core decides, the driver does the slow part, in order.

Replicated bytes. The leader encodes each batch once (RecordBatch v2, kraftpy.raft.batch) with the
time of an injected wall clock; Fetch carries those bytes and every replica appends them as they
are, so every log holds the leader's bytes and CRCs.

The epoch prelude. `step` first runs one prelude for every message, as etcd's Step does before it
dispatches (``m.Term > r.Term``). Messages are untrusted: before anything else it refuses a request
from another cluster and one whose fields cannot be true (kraftpy.raft.validation: an integer outside
its Kafka type, a negative epoch or id, a sender that is not the node the request names, offsets and
epochs that contradict each other, a candidate or leader that is not a voter), and drops such a
response, all without a transition or a write; answers a request of an older epoch with
FENCED_LEADER_EPOCH and ignores a response of one; and on a newer epoch moves the node on by the
message type's rule (KIP-595, Kafka's ``maybeTransition``):

==========================  ======================================================================
message                     a newer epoch ...
==========================  ======================================================================
VoteRequest                 Unattached in it (a pre-vote changes nothing)
BeginQuorumEpochRequest     Follower of the leader it names
EndQuorumEpochRequest       Follower of the (resigning) leader it names, then the successor rule
FetchRequest, FetchSnapshot answered UNKNOWN_LEADER_EPOCH, no transition (the fetcher knows more)
any response                Follower of the leader it names, else Unattached
==========================  ======================================================================

A message of the current epoch that names a leader the node does not know yet makes it Follower
too. Only then does the message reach its handler, which may assume the epochs line up. Handlers
live with their role (kraftpy.raft.core_base explains the split):

- Unattached, Prospective, Candidate, Resigned: kraftpy.raft.election;
- Leader: kraftpy.raft.leader; Follower and observers: kraftpy.raft.follower;
- snapshots: kraftpy.raft.snapshots. States and every transition: kraftpy.raft.quorum_state.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from kraftpy.raft.core_base import INF, PendingRequest, RequestKind
from kraftpy.raft.effects import Effect, LeaderChange, Send, SnapshotLoaded
from kraftpy.raft.election import ElectionRole
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.follower import FetchProgress, FollowerRole
from kraftpy.raft.leader import LeaderRole, ProposeResult
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
    Received,
    UpdateVoterRequest,
    UpdateVoterResponse,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import Candidate, Follower, Leader, Prospective, Resigned, Unattached
from kraftpy.raft.snapshots import SnapshotResult, SnapshotRole
from kraftpy.raft.validation import request_error, response_is_valid
from kraftpy.raft.voters import Endpoint, ReplicaKey, VoterNode

__all__ = ["ProposeResult", "RaftCore", "SnapshotResult"]

class OnNewerEpoch(enum.Enum):
    """What a message of a newer epoch does to the receiving node (the table in the module doc)."""

    #: Follower of the leader the message names; Unattached when it names none.
    FOLLOW = "follow"
    #: Unattached: the epoch has no leader yet (a candidate asking for votes).
    UNATTACHED = "unattached"
    #: Nothing: answer UNKNOWN_LEADER_EPOCH (a request for the leader of an epoch we do not know).
    REFUSE = "refuse"
    #: Nothing at all (a pre-vote, KIP-996).
    IGNORE = "ignore"


@attrs.frozen
class EpochClaim:
    """What a message says about epochs and leaders, which the prelude checks."""

    epoch: int
    #: The leader of `epoch` the message names, None when it names none.
    leader_id: int | None
    on_newer: OnNewerEpoch


def epoch_claim(message: Message) -> EpochClaim | None:
    """The prelude's view of `message`; None for DescribeQuorum, which carries no epoch."""
    match message:
        case VoteRequest(candidate_epoch=epoch, pre_vote=pre_vote):
            return EpochClaim(epoch, None, OnNewerEpoch.IGNORE if pre_vote else OnNewerEpoch.UNATTACHED)
        case BeginQuorumEpochRequest(leader_epoch=epoch, leader_id=leader) | EndQuorumEpochRequest(
            leader_epoch=epoch, leader_id=leader
        ):
            return EpochClaim(epoch, leader, OnNewerEpoch.FOLLOW)
        case FetchRequest(current_leader_epoch=epoch) | FetchSnapshotRequest(current_leader_epoch=epoch) | (
            UpdateVoterRequest(current_leader_epoch=epoch)
        ):
            return EpochClaim(epoch, None, OnNewerEpoch.REFUSE)
        case (
            VoteResponse(leader_epoch=epoch, leader_id=leader)
            | BeginQuorumEpochResponse(leader_epoch=epoch, leader_id=leader)
            | EndQuorumEpochResponse(leader_epoch=epoch, leader_id=leader)
            | FetchResponse(leader_epoch=epoch, leader_id=leader)
            | FetchSnapshotResponse(leader_epoch=epoch, leader_id=leader)
            | UpdateVoterResponse(leader_epoch=epoch, leader_id=leader)
        ):
            named = None if leader == NO_LEADER else leader
            return EpochClaim(epoch, named, OnNewerEpoch.FOLLOW)
        case DescribeQuorumRequest() | DescribeQuorumResponse():
            return None
    raise TypeError(f"not a Raft message: {message!r}")


def error_response(request: Message, error: int, leader_id: int, epoch: int,
                   leader_endpoints: tuple[Endpoint, ...] = ()) -> Message:
    """The response to `request` that carries only `error` and the receiver's leader (with its
    endpoints) and epoch."""
    endpoints = leader_endpoints if leader_id != NO_LEADER else ()
    match request:
        case VoteRequest():
            return VoteResponse(error, leader_id, epoch, vote_granted=False, leader_endpoints=endpoints)
        case BeginQuorumEpochRequest():
            return BeginQuorumEpochResponse(error, leader_id, epoch, leader_endpoints=endpoints)
        case EndQuorumEpochRequest():
            return EndQuorumEpochResponse(error, leader_id, epoch, leader_endpoints=endpoints)
        case FetchRequest():
            return FetchResponse(error, leader_id, epoch, leader_endpoints=endpoints)
        case FetchSnapshotRequest():
            return FetchSnapshotResponse(error, leader_id, epoch, leader_endpoints=endpoints)
        case UpdateVoterRequest():
            return UpdateVoterResponse(error, leader_id, epoch, leader_endpoints=endpoints)
    return DescribeQuorumResponse(error, leader_id, epoch)


#: Which of our requests each response type may answer (Fetch and FetchSnapshot: the fetch loop's).
_ANSWERS: dict[type, tuple[RequestKind, ...]] = {
    VoteResponse: (RequestKind.PRE_VOTE, RequestKind.VOTE),
    BeginQuorumEpochResponse: (RequestKind.BEGIN_QUORUM_EPOCH,),
    EndQuorumEpochResponse: (RequestKind.END_QUORUM_EPOCH,),
    UpdateVoterResponse: (RequestKind.UPDATE_VOTER,),
}


class RaftCore(ElectionRole, LeaderRole, FollowerRole, SnapshotRole):
    """One node of the quorum. See the module banner for how a driver runs it.

    Built as ``RaftCore(config, log, *, rng, now, persisted=None, wall_clock=...)`` (see `CoreBase`):
    `wall_clock` gives the milliseconds stamped on the batches this node appends as leader (the
    simulation passes a deterministic one)."""

    # -- driver entry points ---------------------------------------------------------------------

    def start(self, now: float) -> list[Effect]:
        """First call after construction: reload the latest snapshot and start the state's loop."""
        if self._started:
            raise RuntimeError("start() called twice")
        self._started = True
        now = self._advance_clock(now)
        out: list[Effect] = []
        snapshot = self._log.latest_snapshot_id
        if snapshot is not None:
            out.append(SnapshotLoaded(snapshot))
            self._applied = snapshot.end_offset
        state = self._quorum.state
        if isinstance(state, Follower):
            # A leader known from the persisted election state: the listener hears of it as of any
            # other (the next election would be the first it hears of otherwise).
            out.append(LeaderChange(state.epoch, state.leader_id))
            self._start_following(now, out)
        elif isinstance(state, Resigned) and not self._quorum.may_stand:
            # It led this epoch, then removed itself from the voters: an observer now (KIP-853).
            out += self._quorum.transition_observer_to_unattached(now)
            self._reset_role(now, out)
            self._start_observer_search(now, out)
        elif not self._quorum.may_stand:
            self._start_observer_search(now, out)
        elif self.voters.ids == {self.node_id}:
            self._become_prospective(now, out)
        return self._finish(out)

    def step(self, received: Received, now: float) -> list[Effect]:
        """Handle one message from node `received.source`: the epoch prelude, then its handler."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        src, cid, msg = received.source, received.correlation_id, received.message
        claim = epoch_claim(msg)
        if msg.is_request:
            error = self._request_prelude(src, msg, claim, now, out)
            if error != ErrorCode.NONE:
                out.append(Send(src, cid, error_response(msg, error, self._leader_or_none(), self.epoch,
                                                         self._leader_endpoints())))
            else:
                self._dispatch_request(src, cid, msg, now, out)
        else:
            answered = self._retire_request(src, cid, msg)
            if self._response_prelude(msg, claim, answered, now, out) and answered is not None:
                self._dispatch_response(src, answered, msg, now, out)
        return self._finish(out)

    def tick(self, now: float) -> list[Effect]:
        """Let time pass: fire whatever timers are due at `now`."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        if isinstance(self._quorum.state, Leader):
            self._poll_leader(now, out)
        elif isinstance(self._quorum.state, Follower):
            self._poll_follower(now, out)
        else:
            self._poll_election(now, out)
        self._poll_fetch(now, out)
        return self._finish(out)

    def next_deadline(self) -> float:
        """The clock time at which `tick` has something to do (inf: only a message can wake it)."""
        if self._commit_backlog:
            return self._now
        if self._leader is not None:
            return self._leader_deadline()
        election = self._election_deadline()
        deadline = INF if election is None else election
        fetch = self._fetch
        if fetch is not None:
            retry = fetch.in_flight_deadline if fetch.in_flight is not None else fetch.next_fetch_at
            deadline = min(deadline, fetch.fetch_deadline, retry)
        return deadline

    def propose(self, records: Sequence[bytes], now: float) -> ProposeResult:
        """Add `records` to the leader's next batch; they will take the offsets returned, in this
        epoch, and are appended at once without a linger time. Raises NotLeaderError elsewhere,
        ValueError for nothing or for more than one batch can hold."""
        now = self._advance_clock(now)
        return self._propose(list(records), now)

    @property
    def next_offset(self) -> int:
        """The offset the next proposed record will take on this leader (the log end elsewhere)."""
        leader = self._leader
        return leader.accumulator.next_offset if leader is not None else self._log.end_offset

    def unreachable(self, dest: int, correlation_id: int, now: float) -> list[Effect]:
        """The transport could not deliver request `correlation_id` to `dest`: the connection was
        refused or reset, so nothing listens there (a timeout is not this: the node may be slow).

        A fetch is retried after the back-off, as for any failed fetch. When the unreachable node
        is this follower's leader, the follower stops vouching for it (it grants pre-votes again,
        KIP-996) and stands for election after a random share of the election timeout instead of
        waiting out the whole fetch timeout. Kafka waits for the fetch timeout; a crashed leader is
        replaced about twice as fast this way, and pre-vote still keeps a follower that merely lost
        its own link to a live leader from disrupting the quorum: the others, still fetching, refuse."""
        now = self._advance_clock(now)
        self._unreachable(dest, correlation_id, now)
        return self._finish([])

    def resign(self, now: float) -> list[Effect]:
        """Graceful shutdown: a leader gives up its epoch and tells the voters to elect at once
        (EndQuorumEpoch, KIP-595). Does nothing on a node that is not leader."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        if isinstance(self._quorum.state, Leader):
            self._resign(now, out)
        return self._finish(out)

    shutdown = resign

    def describe_quorum(self, now: float) -> DescribeQuorumResponse:
        """The leader's view of the quorum (DescribeQuorum); an error elsewhere."""
        return self._describe_quorum(self._advance_clock(now))

    # -- changing the voters (KIP-853) -------------------------------------------------------------

    def add_voter(self, operation: int, voter: VoterNode, now: float) -> list[Effect]:
        """Add `voter` (a replica that has caught up as an observer) to the voter set. The outcome
        comes back as a `VoterChangeDone(operation, ...)` effect: at once when refused, else once
        the new VotersRecord is committed (or the change is given up). Leader only."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        self._change_voters(operation, "add", voter, now, out)
        return self._finish(out)

    def remove_voter(self, operation: int, key: ReplicaKey, now: float) -> list[Effect]:
        """Remove replica `key` from the voter set (the leader itself included: it hands over once
        the removal is committed). The outcome comes back as a `VoterChangeDone(operation, ...)`."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        self._change_voters(operation, "remove", VoterNode(key), now, out)
        return self._finish(out)

    def upgrade_kraft_version(self, operation: int, kraft_version: int, now: float,
                              validate_only: bool = False) -> list[Effect]:
        """Raise the kraft.version (0 -> 1: the static voters, with the directory ids and endpoints they
        reported, are written into the log and can change from then on). The outcome comes back as a
        `VoterChangeDone(operation, ...)`."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        self._upgrade_kraft_version(operation, kraft_version, now, out, validate_only)
        return self._finish(out)

    # -- the epoch prelude -----------------------------------------------------------------------

    def _request_prelude(
        self, src: int, msg: Message, claim: EpochClaim | None, now: float, out: list[Effect]
    ) -> int:
        """Check a request against this node's cluster, voters and epoch, and move to a newer epoch
        as its type says. Returns the error to answer with (NONE: go on to the handler)."""
        cluster_id = getattr(msg, "cluster_id", None)
        if cluster_id is not None and cluster_id != self.config.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        refused = request_error(msg, src, self.node_id, self._static_voter_ids())
        if refused is not None:
            return refused[0]
        if claim is None:
            return ErrorCode.NONE
        match msg:
            case VoteRequest() if not self._quorum.may_vote:
                return ErrorCode.INCONSISTENT_VOTER_SET
            case VoteRequest(voter_id=voter, voter_directory_id=directory) | BeginQuorumEpochRequest(
                voter_id=voter, voter_directory_id=directory
            ) if voter not in (NO_LEADER, self.node_id) or directory not in (None, self.config.directory_id):
                # Meant for another replica: another node, or this node's id on a replaced disk (KIP-853).
                return ErrorCode.INVALID_VOTER_KEY
        if claim.epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if claim.epoch > self.epoch:
            match claim.on_newer:
                case OnNewerEpoch.REFUSE:
                    return ErrorCode.UNKNOWN_LEADER_EPOCH
                case OnNewerEpoch.UNATTACHED:
                    self._become_unattached(claim.epoch, now, out)
                case OnNewerEpoch.FOLLOW:
                    self._learn_endpoints(claim.leader_id, getattr(msg, "leader_endpoints", ()))
                    self._follow_newer_epoch(claim.epoch, claim.leader_id, now, out)
        elif claim.on_newer is OnNewerEpoch.FOLLOW:
            self._learn_endpoints(claim.leader_id, getattr(msg, "leader_endpoints", ()))
            self._maybe_follow_known_leader(claim.leader_id, now, out)
        return ErrorCode.NONE

    def _retire_request(self, src: int, cid: int, msg: Message) -> PendingRequest | FetchProgress | None:
        """The request of ours that `msg` answers, no longer outstanding; None if it answers none."""
        if isinstance(msg, FetchResponse | FetchSnapshotResponse):
            return self._take_fetch_answer(src, cid)
        kinds = _ANSWERS.get(type(msg))
        return None if kinds is None else self._take_pending(cid, src, kinds)

    def _response_prelude(
        self,
        msg: Message,
        claim: EpochClaim | None,
        answered: PendingRequest | FetchProgress | None,
        now: float,
        out: list[Effect],
    ) -> bool:
        """Check a response's epoch and leader, and move to a newer epoch (from any response, even
        one to a request no longer outstanding: Raft thesis §3.3). True if the handler should see it."""
        if claim is None:
            return False
        valid = response_is_valid(msg, self._static_voter_ids()) and (
            # A node knows of its own leadership before anyone else: never of a newer epoch from them.
            claim.leader_id != self.node_id or claim.epoch <= self.epoch
        )
        if not valid or claim.epoch < self.epoch:
            if isinstance(answered, FetchProgress):
                self._fetch_failed(answered, now)
            return False
        self._learn_endpoints(claim.leader_id, getattr(msg, "leader_endpoints", ()))
        if claim.epoch > self.epoch:
            self._follow_newer_epoch(claim.epoch, claim.leader_id, now, out)
            return False
        return not self._maybe_follow_known_leader(claim.leader_id, now, out)

    def _follow_newer_epoch(self, epoch: int, leader_id: int | None, now: float, out: list[Effect]) -> None:
        """A larger epoch always wins (Raft thesis §3.3): follow its leader if the message names one."""
        if leader_id is not None and leader_id != self.node_id:
            self._become_follower(epoch, leader_id, now, out)
        else:
            self._become_unattached(epoch, now, out)

    def _maybe_follow_known_leader(self, leader_id: int | None, now: float, out: list[Effect]) -> bool:
        """A message of this epoch names its leader: follow it if this node knew none (and is not one
        that cannot, a Leader or Resigned). True if the state changed."""
        if leader_id is None or leader_id == self.node_id or self._quorum.leader_id is not None:
            return False
        if not isinstance(self._quorum.state, Unattached | Prospective | Candidate):
            return False
        self._become_follower(self.epoch, leader_id, now, out)
        return True

    # -- dispatch --------------------------------------------------------------------------------

    def _dispatch_request(self, src: int, cid: int, msg: Message, now: float, out: list[Effect]) -> None:
        match msg:
            case VoteRequest():
                self._handle_vote_request(src, cid, msg, now, out)
            case BeginQuorumEpochRequest():
                self._handle_begin_quorum_epoch_request(src, cid, msg, now, out)
            case EndQuorumEpochRequest():
                self._handle_end_quorum_epoch_request(src, cid, msg, now, out)
            case FetchRequest():
                self._handle_fetch_request(src, cid, msg, now, out)
            case FetchSnapshotRequest():
                self._handle_fetch_snapshot_request(src, cid, msg, now, out)
            case DescribeQuorumRequest():
                out.append(Send(src, cid, self._describe_quorum(now)))
            case UpdateVoterRequest():
                self._handle_update_voter_request(src, cid, msg, now, out)

    def _dispatch_response(
        self, src: int, answered: PendingRequest | FetchProgress, msg: Message, now: float, out: list[Effect]
    ) -> None:
        match msg, answered:
            case VoteResponse(), PendingRequest():
                self._handle_vote_response(src, answered, msg, now, out)
            case BeginQuorumEpochResponse(), PendingRequest():
                self._handle_begin_quorum_epoch_response(src, answered, msg, now)
            case UpdateVoterResponse(), PendingRequest():
                self._handle_update_voter_response(src, answered, msg, now)
            case FetchResponse(), FetchProgress():
                self._handle_fetch_response(src, answered, msg, now, out)
            case FetchSnapshotResponse(), FetchProgress():
                self._handle_fetch_snapshot_response(src, answered, msg, now, out)
