"""The KRaft consensus core: a pure state machine, messages and clock readings in, effects out.

Theory of operation
-------------------

`RaftCore` is one node of a Raft quorum replicating one log (Kafka's ``__cluster_metadata``),
following KIP-595 (Kafka's Raft: pull replication, epochs, BeginQuorumEpoch / EndQuorumEpoch),
KIP-630 (snapshots and FetchSnapshot) and KIP-996 (pre-vote). It does no I/O of its own: it never
awaits, never reads a clock, never opens a socket or a file. Its driver

1. calls `start(now)` once, then, in a loop,
2. waits for a message or until `next_deadline()`, whichever comes first, and hands the message to
   `step(Received(source, correlation_id, message), now)` or calls `tick(now)`;
3. applies the effects returned, in order, finishing each before the next (kraftpy.raft.effects):
   `PersistQuorumState` and `FlushLog` are durable before any later `Send` leaves.

Writes enter through `propose(records, now)` on the leader. Committed batches leave through
`Commit` effects, in order and exactly once per process lifetime; after a restart (or a snapshot
download) the state machine first reloads the latest snapshot (`SnapshotLoaded`) and commits
resume from its end offset.

The log is injected (`RaftLog`); the core appends to and truncates it directly (page cache, not
disk) and asks for durability with `FlushLog`. Anything the core tells another node about its log
(a vote's last offset and epoch, a fetch offset) has been flushed first, and the leader counts its
own log toward the high watermark only up to what it flushed.

Who does what in each state (states and every transition: kraftpy.raft.quorum_state):

- Unattached voter: waits a randomized election timeout, then goes Prospective.
- Prospective: sends pre-votes (VoteRequest with pre_vote=True, KIP-996); a majority makes it
  Candidate, a majority of refusals or the timeout sends it back where it came from.
- Candidate: bumps the epoch, votes for itself, sends VoteRequests; a majority makes it Leader.
- Leader: appends a leader-change control record, sends BeginQuorumEpoch, answers Fetch (holding
  empty ones up to max_wait), advances the high watermark, resigns without a majority of fetches
  within the fetch timeout.
- Follower / observer: fetches from the leader, truncates on a diverging epoch, downloads a
  snapshot when told to, goes Prospective (voter) or looks for a leader again (observer) when the
  leader stops answering for the fetch timeout.
- Resigned: has sent EndQuorumEpoch; waits out an election timeout, then goes Prospective.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs

from kraftpy.raft.config import RaftConfig
from kraftpy.raft.control import encode_leader_change
from kraftpy.raft.effects import (
    Commit,
    Effect,
    ElectionState,
    FlushLog,
    PersistQuorumState,
    Send,
    SnapshotLoaded,
)
from kraftpy.raft.errors import ErrorCode, NotLeaderError, RaftInvariantError
from kraftpy.raft.log import RaftLog, SnapshotId
from kraftpy.raft.messages import (
    NO_LEADER,
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
    Received,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import (
    Candidate,
    EpochState,
    Follower,
    Leader,
    Prospective,
    QuorumState,
    Resigned,
    Unattached,
)
from kraftpy.raft.tracker import LeaderTracker

INF = float("inf")
_READ_ALL = 1 << 62


@attrs.frozen
class ProposeResult:
    """Where `propose` put the records, and the effects the driver must apply."""

    epoch: int
    base_offset: int
    last_offset: int
    effects: list[Effect]


@attrs.define
class FetchProgress:
    """A follower's (or a leaderless observer's) fetch loop. Lives as long as one Follower state
    (or one observer Unattached state)."""

    #: The node fetched from: the leader, or for a leaderless observer a voter picked at random.
    target: int
    #: Correlation id of the Fetch / FetchSnapshot in flight, None when none is.
    in_flight: int | None = None
    in_flight_deadline: float = INF
    #: When to send the next request if none is in flight.
    next_fetch_at: float = 0.0
    #: Follower only: without a successful answer by then, the leader is presumed gone.
    fetch_deadline: float = INF
    #: A response from the leader arrived in this state (KIP-996: then refuse pre-votes).
    has_fetched: bool = False
    #: Snapshot being downloaded and bytes received so far (KIP-630).
    snapshot_id: SnapshotId | None = None
    snapshot_position: int = 0


@attrs.define
class _Pending:
    dest: int
    kind: str
    epoch: int


@attrs.define
class _ParkedFetch:
    source: int
    correlation_id: int
    request: FetchRequest
    deadline: float


class RaftCore:
    """One node of the quorum. See the module banner for how a driver runs it."""

    def __init__(
        self,
        config: RaftConfig,
        log: RaftLog,
        *,
        rng: random.Random,
        now: float,
        persisted: ElectionState | None = None,
    ) -> None:
        self.config = config
        self._log = log
        self._rng = rng
        self._now = now
        self._election_timeout = config.election_timeout_ms / 1000
        self._fetch_timeout = config.fetch_timeout_ms / 1000
        self._request_timeout = config.request_timeout_ms / 1000
        self._retry_backoff = config.retry_backoff_ms / 1000
        self._quorum = QuorumState(config.node_id, config.voters, self._election_timeout, rng, persisted, now)
        snapshot = log.latest_snapshot_id
        #: Invariant: never decreases in one process lifetime; `log.start_offset <= _high_watermark
        #: <= _flushed`; everything below it is committed (on a majority of voters, durably).
        self._high_watermark = max(log.start_offset, snapshot.end_offset if snapshot else 0)
        #: Invariant: `_applied <= _high_watermark`; Commit effects delivered everything below it.
        self._applied = log.start_offset
        #: The last high watermark a Commit effect announced.
        self._reported_hwm = self._high_watermark
        #: Invariant: the log is durable below `_flushed` once the effects already returned are
        #: applied. A restarted log is durable to its end.
        self._flushed = log.end_offset
        self._leader: LeaderTracker | None = None
        self._fetch: FetchProgress | None = None
        self._pending: dict[int, _Pending] = {}
        self._parked: dict[int, _ParkedFetch] = {}
        self._begin_resend_at = INF
        self._next_correlation_id = rng.getrandbits(30)
        self._started = False

    # -- read-only view --------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def state(self) -> EpochState:
        return self._quorum.state

    @property
    def epoch(self) -> int:
        return self._quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self._quorum.leader_id

    @property
    def is_leader(self) -> bool:
        return isinstance(self._quorum.state, Leader)

    @property
    def is_voter(self) -> bool:
        return self._quorum.is_voter

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def election_state(self) -> ElectionState:
        return self._quorum.persisted

    @property
    def log(self) -> RaftLog:
        return self._log

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
            self._start_following(now, out)
        elif not self.is_voter:
            self._start_observer_search(now, out)
        elif len(self.config.voters) == 1:
            self._become_prospective(now, out)
        return self._finish(out)

    def step(self, received: Received, now: float) -> list[Effect]:
        """Handle one message from node `received.source`."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        src, cid, msg = received.source, received.correlation_id, received.message
        match msg:
            case VoteRequest():
                self._handle_vote_request(src, cid, msg, now, out)
            case VoteResponse():
                self._handle_vote_response(src, cid, msg, now, out)
            case BeginQuorumEpochRequest():
                self._handle_begin_quorum_epoch_request(src, cid, msg, now, out)
            case BeginQuorumEpochResponse():
                self._handle_begin_quorum_epoch_response(src, cid, msg, now, out)
            case EndQuorumEpochRequest():
                self._handle_end_quorum_epoch_request(src, cid, msg, now, out)
            case EndQuorumEpochResponse():
                self._pending.pop(cid, None)
                self._observe_leader(msg.leader_id, msg.leader_epoch, now, out)
            case FetchRequest():
                self._handle_fetch_request(src, cid, msg, now, out)
            case FetchResponse():
                self._handle_fetch_response(src, cid, msg, now, out)
            case FetchSnapshotRequest():
                self._handle_fetch_snapshot_request(src, cid, msg, now, out)
            case FetchSnapshotResponse():
                self._handle_fetch_snapshot_response(src, cid, msg, now, out)
            case DescribeQuorumRequest():
                out.append(Send(src, cid, self.describe_quorum(now)))
            case DescribeQuorumResponse():
                pass
            case _:
                raise TypeError(f"not a Raft message: {msg!r}")
        return self._finish(out)

    def tick(self, now: float) -> list[Effect]:
        """Let time pass: fire whatever timers are due at `now`."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        state = self._quorum.state
        match state:
            case Leader():
                self._poll_leader(now, out)
            case Unattached(election_deadline=deadline) if deadline is not None and now >= deadline:
                self._become_prospective(now, out)
            case Prospective(election_deadline=deadline) if now >= deadline:
                self._after_lost_prevote(now, out)
            case Candidate(election_deadline=deadline) | Resigned(election_deadline=deadline) if (
                now >= deadline
            ):
                self._become_prospective(now, out)
            case Follower() if self._fetch is not None and now >= self._fetch.fetch_deadline:
                if self.is_voter:
                    self._become_prospective(now, out)
                else:
                    out += self._quorum.transition_observer_to_unattached(now)
                    self._reset_role(now, out)
                    self._start_observer_search(now, out)
        self._poll_fetch(now, out)
        return self._finish(out)

    def next_deadline(self) -> float:
        """The clock time at which `tick` has something to do (inf: only a message can wake it)."""
        deadlines = [INF]
        state = self._quorum.state
        match state:
            case Leader():
                tracker = self._leader
                assert tracker is not None
                deadlines.append(self._begin_resend_at)
                deadlines.append(tracker.majority_contact_time() + self._fetch_timeout)
                deadlines.extend(p.deadline for p in self._parked.values())
            case Unattached(election_deadline=deadline) if deadline is not None:
                deadlines.append(deadline)
            case Prospective(election_deadline=deadline) | Candidate(election_deadline=deadline):
                deadlines.append(deadline)
            case Resigned(election_deadline=deadline):
                deadlines.append(deadline)
        fetch = self._fetch
        if fetch is not None:
            deadlines.append(fetch.fetch_deadline)
            deadlines.append(fetch.in_flight_deadline if fetch.in_flight is not None else fetch.next_fetch_at)
        return min(deadlines)

    def propose(self, records: Sequence[bytes], now: float) -> ProposeResult:
        """Append `records` as one batch of the leader's epoch. Raises NotLeaderError elsewhere."""
        now = self._advance_clock(now)
        if not isinstance(self._quorum.state, Leader):
            raise NotLeaderError(self.leader_id, self.epoch)
        if not records:
            raise ValueError("nothing to propose")
        batch = self._log.append_as_leader(list(records), self.epoch)
        out: list[Effect] = []
        self._flush(out)
        self._maybe_advance_leader_hwm(now, out)
        self._complete_parked(now, out)
        return ProposeResult(self.epoch, batch.base_offset, batch.last_offset, self._finish(out))

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
        out: list[Effect] = []
        fetch = self._take_fetch_answer(dest, correlation_id)
        if fetch is not None:
            self._fetch_failed(fetch, now)
            state = self._quorum.state
            if isinstance(state, Follower) and state.leader_id == dest and self.is_voter:
                fetch.has_fetched = False
                soon = now + self._rng.random() * self._election_timeout
                fetch.fetch_deadline = min(fetch.fetch_deadline, soon)
        return self._finish(out)

    def resign(self, now: float) -> list[Effect]:
        """Graceful shutdown: a leader gives up its epoch and tells the voters to elect at once
        (EndQuorumEpoch, KIP-595). Does nothing on a node that is not leader."""
        now = self._advance_clock(now)
        out: list[Effect] = []
        if isinstance(self._quorum.state, Leader):
            self._resign(now, out)
        return self._finish(out)

    shutdown = resign

    def create_snapshot(self, end_offset: int, data: bytes) -> SnapshotId:
        """Store the state machine's snapshot of everything below `end_offset` (KIP-630).

        `end_offset` must be committed and already delivered by a Commit, and be a batch boundary."""
        log = self._log
        latest = log.latest_snapshot_id
        if end_offset > self._applied or end_offset <= log.start_offset:
            raise ValueError(f"snapshot end {end_offset} not in ({log.start_offset}, {self._applied}]")
        if latest is not None and end_offset <= latest.end_offset:
            raise ValueError(f"snapshot end {end_offset} not past the latest snapshot {latest}")
        last = log.read(end_offset - 1, 1)[0]
        if last.next_offset != end_offset:
            raise ValueError(f"snapshot end {end_offset} is not a batch boundary")
        snapshot_id = SnapshotId(end_offset=end_offset, epoch=last.epoch)
        log.create_snapshot(snapshot_id, data)
        return snapshot_id

    def delete_log_before_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Drop the log prefix a snapshot covers; replicas behind it will fetch the snapshot."""
        self._log.delete_before_snapshot(snapshot_id)

    def describe_quorum(self, now: float) -> DescribeQuorumResponse:
        """The leader's view of the quorum (DescribeQuorum); an error elsewhere."""
        tracker = self._leader
        if tracker is None or not isinstance(self._quorum.state, Leader):
            return DescribeQuorumResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                self._leader_or_none(),
                self.epoch,
                error_message="not the leader",
            )
        tracker.update_local(self._flushed, now)
        voters, observers = tracker.describe()
        return DescribeQuorumResponse(
            ErrorCode.NONE,
            leader_id=self.node_id,
            leader_epoch=self.epoch,
            high_watermark=self._high_watermark,
            current_voters=voters,
            observers=observers,
        )

    # -- plumbing --------------------------------------------------------------------------------

    def _advance_clock(self, now: float) -> float:
        # A clock that jumps back is treated as standing still: timers only ever fire late.
        if now > self._now:
            self._now = now
        return self._now

    def _finish(self, out: list[Effect]) -> list[Effect]:
        self._deliver_commits(out)
        return _coalesce(out)

    def _new_correlation_id(self) -> int:
        cid = self._next_correlation_id
        self._next_correlation_id = (cid + 1) & 0x7FFFFFFF
        return cid

    def _send_request(self, dest: int, message: Message, kind: str, out: list[Effect]) -> None:
        cid = self._new_correlation_id()
        self._pending[cid] = _Pending(dest, kind, self.epoch)
        out.append(Send(dest, cid, message))

    def _take_pending(self, cid: int, source: int, kind: str) -> _Pending | None:
        pending = self._pending.get(cid)
        if pending is None or pending.dest != source or pending.kind != kind:
            return None
        del self._pending[cid]
        return pending

    def _leader_or_none(self) -> int:
        leader = self._quorum.leader_id
        return NO_LEADER if leader is None else leader

    def _cluster_ok(self, cluster_id: str | None) -> bool:
        return cluster_id is None or cluster_id == self.config.cluster_id

    def _other_voters(self) -> list[int]:
        return sorted(v for v in self.config.voters if v != self.node_id)

    def _flush(self, out: list[Effect]) -> None:
        end = self._log.end_offset
        out.append(FlushLog(end))
        self._flushed = end
        if self._leader is not None:
            self._leader.update_local(end, self._now)

    def _deliver_commits(self, out: list[Effect]) -> None:
        """Hand every newly committed batch to the state machine, in order (Raft thesis §3.5:
        apply entries once they are committed)."""
        batches = []
        while self._applied < self._high_watermark:
            chunk = self._log.read(self._applied, _READ_ALL)
            progressed = False
            for batch in chunk:
                if batch.next_offset > self._high_watermark:
                    break
                batches.append(batch)
                self._applied = batch.next_offset
                progressed = True
            if not progressed:
                break
        if batches or self._high_watermark > self._reported_hwm:
            self._reported_hwm = self._high_watermark
            out.append(Commit(self._high_watermark, tuple(batches)))

    def _set_follower_high_watermark(self, leader_hwm: int) -> None:
        # A follower's log matches the leader's up to its end after a valid fetch, so it may
        # commit up to min(leader's high watermark, own end) - and never back (KIP-595).
        new = min(leader_hwm, self._log.end_offset, self._flushed)
        if new > self._high_watermark:
            self._high_watermark = new

    # -- transitions (each calls exactly one QuorumState.transition_to_*) -----------------------

    def _reset_role(self, now: float, out: list[Effect]) -> None:
        """Forget everything tied to the previous state: requests in flight, the leader's tracker
        (answering the fetches it held), the fetch loop."""
        parked, self._parked = self._parked, {}
        for p in parked.values():
            out.append(
                Send(
                    p.source,
                    p.correlation_id,
                    FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, self._leader_or_none(), self.epoch),
                )
            )
        self._pending.clear()
        self._leader = None
        self._fetch = None
        self._begin_resend_at = INF

    def _become_unattached(self, epoch: int, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_to_unattached(epoch, now)
        self._reset_role(now, out)
        if not self.is_voter:
            self._start_observer_search(now, out)

    def _become_follower(self, epoch: int, leader_id: int, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_to_follower(epoch, leader_id)
        self._reset_role(now, out)
        self._start_following(now, out)

    def _become_prospective(self, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_to_prospective(now)
        self._reset_role(now, out)
        if self._quorum.has_majority_granted():
            self._become_candidate(now, out)
            return
        for voter in self._other_voters():
            self._send_request(
                voter, self._vote_request(voter, self.epoch + 1, pre_vote=True), "prevote", out
            )

    def _after_lost_prevote(self, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_after_lost_prevote(now)
        self._reset_role(now, out)
        if isinstance(self._quorum.state, Follower):
            self._start_following(now, out)

    def _become_candidate(self, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_to_candidate(now)
        self._reset_role(now, out)
        if self._quorum.has_majority_granted():
            self._become_leader(now, out)
            return
        for voter in self._other_voters():
            self._send_request(voter, self._vote_request(voter, self.epoch, pre_vote=False), "vote", out)

    def _become_leader(self, now: float, out: list[Effect]) -> None:
        state = self._quorum.state
        assert isinstance(state, Candidate)
        granting = state.granted
        out += self._quorum.transition_to_leader()
        self._reset_role(now, out)
        epoch_start = self._log.end_offset
        # KIP-595: the first batch of an epoch is the leader-change control record; until it is
        # on a majority, nothing of earlier epochs is committed by counting (thesis §3.6.2).
        self._log.append_as_leader(
            [encode_leader_change(self.node_id, self.config.voters, granting)], self.epoch, is_control=True
        )
        self._leader = LeaderTracker(
            self.node_id, self.config.voters, self.epoch, epoch_start, self._high_watermark, now
        )
        self._flush(out)
        for voter in self._other_voters():
            self._send_begin_quorum_epoch(voter, out)
        self._begin_resend_at = now + self._request_timeout
        self._maybe_advance_leader_hwm(now, out)

    def _resign(self, now: float, out: list[Effect]) -> None:
        tracker = self._leader
        assert tracker is not None
        successors = tracker.voters_by_end_offset()
        out += self._quorum.transition_to_resigned(successors, now)
        self._reset_role(now, out)
        for voter in self._other_voters():
            request = EndQuorumEpochRequest(
                self.config.cluster_id, self.node_id, self.epoch, preferred_successors=successors
            )
            self._send_request(voter, request, "end", out)

    def _observe_leader(self, leader_id: int, epoch: int, now: float, out: list[Effect]) -> bool:
        """A message named `leader_id` (-1: none) as leader of `epoch`. Move to it if that is news
        (Raft thesis §3.3: a larger term always wins). True if the state changed."""
        if epoch > self.epoch:
            if leader_id not in (NO_LEADER, self.node_id):
                self._become_follower(epoch, leader_id, now, out)
            else:
                self._become_unattached(epoch, now, out)
            return True
        if (
            epoch == self.epoch
            and leader_id not in (NO_LEADER, self.node_id)
            and self._quorum.leader_id is None
            and isinstance(self._quorum.state, Unattached | Prospective | Candidate)
        ):
            self._become_follower(epoch, leader_id, now, out)
            return True
        return False

    # -- elections -------------------------------------------------------------------------------

    def _vote_request(self, voter: int, epoch: int, *, pre_vote: bool) -> VoteRequest:
        return VoteRequest(
            cluster_id=self.config.cluster_id,
            voter_id=voter,
            candidate_epoch=epoch,
            candidate_id=self.node_id,
            last_offset_epoch=self._log.last_fetched_epoch,
            last_offset=self._log.end_offset,
            pre_vote=pre_vote,
        )

    def _log_is_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        """Raft thesis §3.6.1: the candidate's log is at least as up to date as ours - a larger last
        epoch, or the same one and an end offset at least as large."""
        return (last_epoch, end_offset) >= (self._log.last_fetched_epoch, self._log.end_offset)

    def _handle_vote_request(
        self, src: int, cid: int, req: VoteRequest, now: float, out: list[Effect]
    ) -> None:
        def reply(error: int, granted: bool) -> None:
            response = VoteResponse(error, self._leader_or_none(), self.epoch, granted)
            out.append(Send(src, cid, response))

        if not self._cluster_ok(req.cluster_id):
            reply(ErrorCode.INCONSISTENT_CLUSTER_ID, False)
            return
        if (
            not self.is_voter
            or req.candidate_id not in self.config.voters
            or req.voter_id not in (NO_LEADER, self.node_id)
        ):
            reply(ErrorCode.INCONSISTENT_VOTER_SET, False)
            return
        log_ok = self._log_is_up_to_date(req.last_offset_epoch, req.last_offset)
        if req.pre_vote:
            # KIP-996: a pre-vote changes nothing here, whatever its epoch.
            has_fetched = self._fetch is not None and self._fetch.has_fetched
            granted = (
                req.candidate_epoch > self.epoch and log_ok and self._quorum.can_grant_prevote(has_fetched)
            )
            reply(ErrorCode.NONE, granted)
            return
        if req.candidate_epoch < self.epoch:
            reply(ErrorCode.NONE, False)
            return
        if req.candidate_epoch > self.epoch:
            self._become_unattached(req.candidate_epoch, now, out)
        granted = log_ok and self._quorum.can_grant_vote(req.candidate_id)
        state = self._quorum.state
        if granted and not (isinstance(state, Unattached) and state.voted_id == req.candidate_id):
            # One vote per epoch (thesis §3.4), persisted before the response leaves.
            out += self._quorum.transition_to_unattached_voted(req.candidate_id, now)
            self._reset_role(now, out)
        reply(ErrorCode.NONE, granted)

    def _handle_vote_response(
        self, src: int, cid: int, resp: VoteResponse, now: float, out: list[Effect]
    ) -> None:
        pending = self._pending.get(cid)
        kind = pending.kind if pending is not None else ""
        pending = self._take_pending(cid, src, kind) if kind in ("vote", "prevote") else None
        if self._observe_leader(resp.leader_id, resp.leader_epoch, now, out):
            return
        if pending is None or pending.epoch != self.epoch or resp.error_code != ErrorCode.NONE:
            return
        state = self._quorum.state
        if kind == "prevote" and isinstance(state, Prospective):
            self._quorum.record_vote(src, resp.vote_granted)
            if self._quorum.has_majority_granted():
                self._become_candidate(now, out)
            elif self._quorum.has_majority_rejected():
                self._after_lost_prevote(now, out)
        elif kind == "vote" and isinstance(state, Candidate) and resp.leader_epoch == self.epoch:
            self._quorum.record_vote(src, resp.vote_granted)
            if self._quorum.has_majority_granted():
                self._become_leader(now, out)

    # -- BeginQuorumEpoch / EndQuorumEpoch -------------------------------------------------------

    def _send_begin_quorum_epoch(self, voter: int, out: list[Effect]) -> None:
        request = BeginQuorumEpochRequest(self.config.cluster_id, voter, self.node_id, self.epoch)
        self._send_request(voter, request, "begin", out)

    def _handle_begin_quorum_epoch_request(
        self, src: int, cid: int, req: BeginQuorumEpochRequest, now: float, out: list[Effect]
    ) -> None:
        if not self._cluster_ok(req.cluster_id):
            error = ErrorCode.INCONSISTENT_CLUSTER_ID
        elif req.leader_epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        else:
            self._observe_leader(req.leader_id, req.leader_epoch, now, out)
            error = ErrorCode.NONE
        out.append(Send(src, cid, BeginQuorumEpochResponse(error, self._leader_or_none(), self.epoch)))

    def _handle_begin_quorum_epoch_response(
        self, src: int, cid: int, resp: BeginQuorumEpochResponse, now: float, out: list[Effect]
    ) -> None:
        pending = self._take_pending(cid, src, "begin")
        if self._observe_leader(resp.leader_id, resp.leader_epoch, now, out):
            return
        if (
            pending is not None
            and pending.epoch == self.epoch
            and resp.error_code == ErrorCode.NONE
            and self._leader is not None
        ):
            self._leader.record_contact(src, now)

    def _handle_end_quorum_epoch_request(
        self, src: int, cid: int, req: EndQuorumEpochRequest, now: float, out: list[Effect]
    ) -> None:
        if not self._cluster_ok(req.cluster_id):
            error = ErrorCode.INCONSISTENT_CLUSTER_ID
        elif req.leader_epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        else:
            error = ErrorCode.NONE
            if req.leader_epoch > self.epoch:
                # The epoch is news but its leader is already gone: no leader to follow.
                self._become_unattached(req.leader_epoch, now, out)
            state = self._quorum.state
            fetch = self._fetch
            if isinstance(state, Follower) and state.leader_id == req.leader_id and fetch is not None:
                # The leader is gone: pre-votes may be granted again (KIP-996).
                fetch.has_fetched = False
            if (
                isinstance(state, Follower)
                and state.leader_id == req.leader_id
                and self.is_voter
                and fetch is not None
                and self.node_id in req.preferred_successors
            ):
                # KIP-595: the most up-to-date voter stands at once, the others back off by rank.
                position = req.preferred_successors.index(self.node_id)
                if position == 0:
                    self._become_prospective(now, out)
                else:
                    backoff = min(
                        self.config.election_backoff_max_ms, self.config.retry_backoff_ms * 2**position
                    )
                    jitter = self._rng.random() * self._retry_backoff
                    fetch.fetch_deadline = min(fetch.fetch_deadline, now + backoff / 1000 + jitter)
        out.append(Send(src, cid, EndQuorumEpochResponse(error, self._leader_or_none(), self.epoch)))

    # -- the leader ------------------------------------------------------------------------------

    def _poll_leader(self, now: float, out: list[Effect]) -> None:
        tracker = self._leader
        assert tracker is not None
        expired = [rid for rid, p in self._parked.items() if p.deadline <= now]
        for rid in expired:
            parked = self._parked.pop(rid)
            self._answer_fetch(parked.source, parked.correlation_id, parked.request, now, out)
        if now >= tracker.majority_contact_time() + self._fetch_timeout:
            # KIP-595 check quorum: a leader cut off from a majority must not linger.
            self._resign(now, out)
            return
        if now >= self._begin_resend_at:
            for voter in sorted(tracker.unacknowledged):
                self._send_begin_quorum_epoch(voter, out)
            self._begin_resend_at = now + self._request_timeout if tracker.unacknowledged else INF

    def _maybe_advance_leader_hwm(self, now: float, out: list[Effect]) -> bool:
        tracker = self._leader
        if tracker is None or not tracker.maybe_advance_high_watermark():
            return False
        if tracker.high_watermark > self._flushed:
            raise RaftInvariantError(
                f"high watermark {tracker.high_watermark} past the flushed log {self._flushed}"
            )
        self._high_watermark = max(self._high_watermark, tracker.high_watermark)
        self._complete_parked(now, out)
        return True

    def _complete_parked(self, now: float, out: list[Effect]) -> None:
        parked, self._parked = self._parked, {}
        for p in parked.values():
            self._answer_fetch(p.source, p.correlation_id, p.request, now, out)

    def _validate_leader_request(self, cluster_id: str | None, epoch: int) -> int:
        if not self._cluster_ok(cluster_id):
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        if epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if not isinstance(self._quorum.state, Leader):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def _check_fetch_position(self, req: FetchRequest) -> FetchResponse | None:
        """None if (fetch offset, last fetched epoch) matches the leader's log, else the answer
        that sends the fetcher elsewhere: a snapshot (KIP-630) or a diverging epoch (KIP-595)."""
        log = self._log
        offset, last_epoch = req.fetch_offset, req.last_fetched_epoch
        earliest = log.earliest_snapshot_id
        if earliest is not None and (
            offset < log.start_offset
            or (offset == log.start_offset and last_epoch != earliest.epoch)
            or last_epoch < earliest.epoch
        ):
            return self._fetch_answer(snapshot_id=log.latest_snapshot_id)
        end = log.end_offset_for_epoch(last_epoch)
        if end.epoch != last_epoch or end.offset < offset:
            return self._fetch_answer(diverging_epoch=EpochEndOffset(end.epoch, end.offset))
        return None

    def _fetch_answer(self, **kwargs: object) -> FetchResponse:
        return FetchResponse(
            ErrorCode.NONE,
            self.node_id,
            self.epoch,
            high_watermark=self._high_watermark,
            log_start_offset=self._log.start_offset,
            **kwargs,  # type: ignore[arg-type]
        )

    def _answer_fetch(self, src: int, cid: int, req: FetchRequest, now: float, out: list[Effect]) -> None:
        """Answer a fetch whose position was already recorded (never parks)."""
        answer = self._check_fetch_position(req)
        if answer is None:
            max_bytes = min(req.max_bytes, self.config.fetch_max_bytes)
            records = self._log.read(req.fetch_offset, max_bytes)
            answer = self._fetch_answer(records=records)
        out.append(Send(src, cid, answer))

    def _handle_fetch_request(
        self, src: int, cid: int, req: FetchRequest, now: float, out: list[Effect]
    ) -> None:
        error = self._validate_leader_request(req.cluster_id, req.current_leader_epoch)
        if error == ErrorCode.NONE and (req.fetch_offset < 0 or req.last_fetched_epoch < 0):
            error = ErrorCode.INVALID_REQUEST
        if error != ErrorCode.NONE:
            out.append(Send(src, cid, FetchResponse(error, self._leader_or_none(), self.epoch)))
            return
        tracker = self._leader
        assert tracker is not None
        answer = self._check_fetch_position(req)
        if answer is not None:
            tracker.record_contact(src, now)
            out.append(Send(src, cid, answer))
            return
        tracker.update_fetch(src, req.fetch_offset, self._log.end_offset, now)
        moved = self._maybe_advance_leader_hwm(now, out)
        if req.fetch_offset == self._log.end_offset and req.max_wait_ms > 0 and not moved:
            # Long poll: hold the fetch until there is data, the high watermark moves, or max wait.
            wait = min(req.max_wait_ms, self.config.fetch_max_wait_ms) / 1000
            self._parked[src] = _ParkedFetch(src, cid, req, now + wait)
            return
        self._answer_fetch(src, cid, req, now, out)

    def _handle_fetch_snapshot_request(
        self, src: int, cid: int, req: FetchSnapshotRequest, now: float, out: list[Effect]
    ) -> None:
        def reply(error: int, **kwargs: object) -> None:
            response = FetchSnapshotResponse(error, self._leader_or_none(), self.epoch, **kwargs)  # type: ignore[arg-type]
            out.append(Send(src, cid, response))

        error = self._validate_leader_request(req.cluster_id, req.current_leader_epoch)
        if error != ErrorCode.NONE:
            reply(error)
            return
        assert self._leader is not None
        self._leader.record_contact(src, now)
        size = self._log.snapshot_size(req.snapshot_id)
        if size is None:
            reply(ErrorCode.SNAPSHOT_NOT_FOUND, snapshot_id=req.snapshot_id)
            return
        if not 0 <= req.position <= size:
            reply(ErrorCode.POSITION_OUT_OF_RANGE, snapshot_id=req.snapshot_id, size=size)
            return
        max_bytes = min(req.max_bytes, self.config.snapshot_chunk_bytes)
        chunk = self._log.read_snapshot(req.snapshot_id, req.position, max_bytes)
        reply(
            ErrorCode.NONE,
            snapshot_id=req.snapshot_id,
            size=size,
            position=req.position,
            unaligned_records=chunk,
        )

    # -- followers and observers -----------------------------------------------------------------

    def _start_following(self, now: float, out: list[Effect]) -> None:
        state = self._quorum.state
        assert isinstance(state, Follower)
        self._fetch = FetchProgress(target=state.leader_id, fetch_deadline=now + self._fetch_timeout)
        self._send_fetch(now, out)

    def _start_observer_search(self, now: float, out: list[Effect]) -> None:
        self._fetch = FetchProgress(target=self._rng.choice(sorted(self.config.voters)))
        self._send_fetch(now, out)

    def _poll_fetch(self, now: float, out: list[Effect]) -> None:
        fetch = self._fetch
        if fetch is None:
            return
        if fetch.in_flight is not None and now >= fetch.in_flight_deadline:
            fetch.in_flight = None
            if isinstance(self._quorum.state, Unattached):
                fetch.target = self._rng.choice(sorted(self.config.voters))
        if fetch.in_flight is None and now >= fetch.next_fetch_at:
            self._send_fetch(now, out)

    def _send_fetch(self, now: float, out: list[Effect]) -> None:
        fetch = self._fetch
        assert fetch is not None
        cid = self._new_correlation_id()
        fetch.in_flight = cid
        fetch.in_flight_deadline = now + self._request_timeout + self.config.fetch_max_wait_ms / 1000
        message: Message
        if fetch.snapshot_id is not None:
            message = FetchSnapshotRequest(
                self.config.cluster_id,
                self.node_id,
                self.epoch,
                fetch.snapshot_id,
                fetch.snapshot_position,
                max_bytes=self.config.snapshot_chunk_bytes,
            )
        else:
            message = FetchRequest(
                self.config.cluster_id,
                self.node_id,
                max_wait_ms=self.config.fetch_max_wait_ms,
                current_leader_epoch=self.epoch,
                fetch_offset=self._log.end_offset,
                last_fetched_epoch=self._log.last_fetched_epoch,
                log_start_offset=self._log.start_offset,
                max_bytes=self.config.fetch_max_bytes,
            )
        out.append(Send(fetch.target, cid, message))

    def _take_fetch_answer(self, src: int, cid: int) -> FetchProgress | None:
        fetch = self._fetch
        if fetch is None or fetch.in_flight != cid or fetch.target != src:
            return None
        fetch.in_flight = None
        return fetch

    def _fetch_failed(self, fetch: FetchProgress, now: float) -> None:
        fetch.next_fetch_at = now + self._retry_backoff
        if isinstance(self._quorum.state, Unattached):
            fetch.target = self._rng.choice(sorted(self.config.voters))

    def _is_from_my_leader(self, leader_id: int, epoch: int) -> bool:
        state = self._quorum.state
        return isinstance(state, Follower) and state.leader_id == leader_id and state.epoch == epoch

    def _handle_fetch_response(
        self, src: int, cid: int, resp: FetchResponse, now: float, out: list[Effect]
    ) -> None:
        fetch = self._take_fetch_answer(src, cid)
        if self._observe_leader(resp.leader_id, resp.leader_epoch, now, out) or fetch is None:
            return
        if resp.error_code != ErrorCode.NONE or not self._is_from_my_leader(
            resp.leader_id, resp.leader_epoch
        ):
            self._fetch_failed(fetch, now)
            return
        fetch.has_fetched = True
        fetch.fetch_deadline = now + self._fetch_timeout
        log = self._log
        if resp.diverging_epoch is not None:
            # KIP-595 log reconciliation: cut back to where the two logs can still agree, then
            # fetch again from there; repeated until the leader accepts the position.
            diverging = resp.diverging_epoch
            local = log.end_offset_for_epoch(diverging.epoch)
            truncate_to = min(local.offset, diverging.end_offset)
            if truncate_to < self._high_watermark or truncate_to < log.start_offset:
                raise RaftInvariantError(
                    f"node {self.node_id}: told to truncate to {truncate_to}, below the high watermark "
                    f"{self._high_watermark} or log start {log.start_offset}"
                )
            log.truncate_to(truncate_to)
            self._flushed = min(self._flushed, log.end_offset)
        elif resp.snapshot_id is not None:
            # KIP-630: the leader no longer has the log where we are; download its snapshot.
            fetch.snapshot_id = resp.snapshot_id
            fetch.snapshot_position = 0
        else:
            records = resp.records
            if not records or records[0].base_offset == log.end_offset:
                if records:
                    log.append_as_follower(records)
                    self._flush(out)
                self._set_follower_high_watermark(resp.high_watermark)
        self._send_fetch(now, out)

    def _handle_fetch_snapshot_response(
        self, src: int, cid: int, resp: FetchSnapshotResponse, now: float, out: list[Effect]
    ) -> None:
        fetch = self._take_fetch_answer(src, cid)
        if self._observe_leader(resp.leader_id, resp.leader_epoch, now, out) or fetch is None:
            return
        snapshot_id = fetch.snapshot_id
        if (
            resp.error_code != ErrorCode.NONE
            or snapshot_id is None
            or resp.snapshot_id != snapshot_id
            or resp.position != fetch.snapshot_position
            or not self._is_from_my_leader(resp.leader_id, resp.leader_epoch)
            or (not resp.unaligned_records and resp.position < resp.size)
        ):
            # Start over with a Fetch: the leader names its current snapshot.
            fetch.snapshot_id = None
            self._fetch_failed(fetch, now)
            return
        fetch.has_fetched = True
        fetch.fetch_deadline = now + self._fetch_timeout
        self._log.write_snapshot_chunk(snapshot_id, resp.position, resp.unaligned_records)
        fetch.snapshot_position += len(resp.unaligned_records)
        if fetch.snapshot_position >= resp.size:
            self._log.finish_snapshot_download(snapshot_id)
            fetch.snapshot_id = None
            self._flushed = self._log.end_offset
            # The snapshot holds only committed state (KIP-630), so its end is committed.
            self._high_watermark = max(self._high_watermark, snapshot_id.end_offset)
            if snapshot_id.end_offset >= self._applied:
                self._applied = snapshot_id.end_offset
                out.append(SnapshotLoaded(snapshot_id))
        self._send_fetch(now, out)


def _coalesce(effects: list[Effect]) -> list[Effect]:
    """Drop a PersistQuorumState that a later one overrides before any message leaves."""
    out: list[Effect | None] = []
    unsent_persist: int | None = None
    for effect in effects:
        if isinstance(effect, PersistQuorumState):
            if unsent_persist is not None:
                out[unsent_persist] = None
            unsent_persist = len(out)
        elif isinstance(effect, Send):
            unsent_persist = None
        out.append(effect)
    return [e for e in out if e is not None]
