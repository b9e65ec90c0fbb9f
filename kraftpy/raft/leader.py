"""The leader: appending, answering fetches, moving the high watermark, checking its quorum.

Theory of operation (KIP-595; Raft thesis §3.5, §3.6.2):

- Taking office: the first batch of the epoch is a leader-change control record; until it is on a
  majority nothing is committed by counting, so entries of earlier epochs commit only with it
  (thesis §3.6.2). BeginQuorumEpoch goes to every voter and is sent again until each answered
  or fetched.
- Writes: `propose` adds records to the `BatchAccumulator` and answers with the offsets they will
  take; the accumulated batch is encoded once (`RecordBatch.build`, with the injected wall clock's
  time), appended and flushed when the linger time is up (at once without one). The leader counts
  its own log only up to what it flushed.
- Fetch: a follower's (fetch offset, last fetched epoch) is checked against the log; the answer is
  the leader's batches as bytes, a diverging epoch (truncate and fetch again) or a snapshot id
  (fetch that first). A fetch with nothing new is held up to its max wait (long poll) and answered
  when data arrives, the high watermark moves, or the wait ends.
- The high watermark is the largest offset a majority of voters (observers never count) has, once
  it covers this epoch's first batch; it never goes back.
- Check quorum: without fetches from a majority for the fetch timeout the leader resigns; so does a
  leader shutting down, sending EndQuorumEpoch with its preferred successors, most up to date first.

Voter changes (KIP-853; Raft thesis §4.1, one server at a time). The leader adds or removes one voter
by appending a VotersRecord holding the whole new set; the new set counts from the moment it is
appended (for the high watermark, the check quorum, BeginQuorumEpoch), not once it is committed, on
the leader and on every replica that appends it. Two rules keep any two sets in use overlapping:

- at most one change is uncommitted: a change is refused while the newest VotersRecord is not below
  the high watermark, or another operator change is pending;
- a new leader changes nothing until its own epoch's first record is committed (the high watermark
  passed `epoch_start_offset`): that fences every change an earlier leader may have left half
  replicated (the bug Ongaro's single-server changes had without this rule).

A voter to add must be a caught-up observer (it fetched, at the leader's end, within the fetch
timeout, with the directory id given). An operator's change answers (`VoterChangeDone`) once its
record is committed, or when given up after `voter_change_timeout_ms`; a leader that removed itself
resigns once the removal is committed, handing over with EndQuorumEpoch to the new voters. A voter
tells the leader its endpoints and kraft.version range with UpdateVoter: recorded in a VotersRecord at
kraft.version 1, kept in memory at 0 for an upgrade (`upgrade_kraft_version` writes the static voters,
with the directory ids they reported, as the first VotersRecord). At kraft.version 1 a new leader
whose own record is missing or out of date (or whose set came from the bootstrap snapshot) writes
the set with itself updated in its epoch's first batch: same membership, so no majority changes.

Everything the leader keeps for its epoch is one `LeaderState`, created on election and dropped by
any transition (the accumulated proposals with it: those offsets never commit; a pending voter
change is answered NOT_LEADER_OR_FOLLOWER, its record may still commit under the next leader).
"""

from __future__ import annotations

import attrs

from kraftpy.protocol.records import ControlRecordType
from kraftpy.raft.accumulator import BatchAccumulator
from kraftpy.raft.control import encode_leader_change
from kraftpy.raft.core_base import INF, CoreBase, PendingRequest, RequestKind
from kraftpy.raft.effects import Effect, Send, VoterChangeDone
from kraftpy.raft.errors import ErrorCode, NotLeaderError, RaftInvariantError
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    UpdateVoterRequest,
    UpdateVoterResponse,
)
from kraftpy.raft.quorum_state import Candidate, Leader
from kraftpy.raft.tracker import LeaderTracker
from kraftpy.raft.voters import (
    KRAFT_VERSION_STATIC,
    SUPPORTED_KRAFT_VERSIONS,
    ReplicaKey,
    VoterNode,
    VoterSet,
    encode_kraft_version_record,
    encode_voters_record,
)


@attrs.frozen
class ProposeResult:
    """Where `propose` put (or will put) the records, and the effects the driver must apply."""

    epoch: int
    base_offset: int
    last_offset: int
    effects: list[Effect]


@attrs.define
class ParkedFetch:
    """A fetch with nothing new to answer, held until data arrives or `deadline` (long poll)."""

    source: int
    correlation_id: int
    request: FetchRequest
    deadline: float


@attrs.define
class PendingVoterChange:
    """An operator's voter change (or kraft.version upgrade) whose record is appended, not committed."""

    operation: int
    #: The offset of its last record: done once the high watermark is past it.
    offset: int
    deadline: float


@attrs.define
class LeaderState:
    """What a leader keeps for one epoch (Kafka's LeaderState)."""

    tracker: LeaderTracker
    accumulator: BatchAccumulator
    #: Held fetches, one per replica.
    parked: dict[int, ParkedFetch] = attrs.Factory(dict)
    #: The high watermark in the last Fetch answer sent to each replica: one that fetches from the log
    #: end and was not told the current high watermark is answered at once, not held. Without this, a
    #: replica whose answer was on its way when the high watermark moved learned of the commit only when
    #: its next fetch's long poll ran out (fetch max wait): half of the metadata commits reached the
    #: brokers 500 ms late (the problem Kafka's KIP-1166 solves on the wire; here the leader remembers).
    told_high_watermark: dict[int, int] = attrs.Factory(dict)
    #: When to send BeginQuorumEpoch again to the voters that have not acknowledged it.
    begin_resend_at: float = INF
    #: The operator's voter change in flight (at most one).
    voter_change: PendingVoterChange | None = None
    #: The leader is no longer a voter and its removal is committed: resign at the next poll.
    resign_requested: bool = False


class LeaderRole(CoreBase):
    def _leader_state(self) -> LeaderState:
        leader = self._leader
        if leader is None or not isinstance(self._quorum.state, Leader):
            raise NotLeaderError(self.leader_id, self.epoch)
        return leader

    # -- taking and leaving office ---------------------------------------------------------------

    def _become_leader(self, now: float, out: list[Effect]) -> None:
        state = self._quorum.state
        assert isinstance(state, Candidate)
        granting = state.granted
        out += self._quorum.transition_to_leader()
        self._reset_role(now, out)
        epoch_start = self._log.end_offset
        # KIP-595: the first batch of an epoch is the leader-change control record; until it is on a
        # majority, nothing of earlier epochs is committed by counting (thesis §3.6.2).
        records = [encode_leader_change(self.node_id, self.voters.ids, granting)]
        types = [ControlRecordType.LEADER_CHANGE]
        refreshed = self._voters_with_self_refreshed()
        if refreshed is not None:
            records += [encode_kraft_version_record(self.kraft_version), encode_voters_record(refreshed)]
            types += [ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS]
        batch = self._log.append_as_leader(records, self.epoch, control_types=types, timestamp_ms=self._wall_clock())
        if self._history.add_batch(batch):
            self._quorum.update_voters(self._history.voters, self._history.is_dynamic)
        self._leader = LeaderState(
            LeaderTracker(self.local_key, self.voters, self.epoch, epoch_start, self._high_watermark, now),
            BatchAccumulator(
                self.epoch,
                self._log.end_offset,
                linger=self.config.append_linger_ms / 1000,
                max_batch_bytes=self.config.max_batch_bytes,
                max_batch_records=self.config.max_batch_records,
            ),
            begin_resend_at=now + self._request_timeout,
        )
        self._flush(out)
        for voter in self._other_voters():
            self._send_begin_quorum_epoch(voter, out)
        self._maybe_advance_leader_hwm(now, out)

    def _voters_with_self_refreshed(self) -> VoterSet | None:
        """At kraft.version 1, the voter set to write in a new epoch's first batch: the current one
        with this leader's endpoints and kraft.version range brought up to date, when its record is
        out of date or the set is not in the log yet (only in the bootstrap snapshot). None: nothing
        to write."""
        history = self._history
        if history.kraft_version == KRAFT_VERSION_STATIC or not self.config.endpoints:
            return None
        voters = history.voters
        me = voters.node(self.node_id)
        local = self.config.local_node
        needs_update = me is not None and (me.endpoints != local.endpoints or me.kraft_versions != local.kraft_versions)
        latest = history.latest_offset
        if not needs_update and latest is not None and latest >= 0:
            return None
        return voters.update(local) or voters

    def _resign(self, now: float, out: list[Effect]) -> None:
        leader = self._leader
        assert leader is not None
        successors = leader.tracker.voters_by_end_offset()
        out += self._quorum.transition_to_resigned(successors, now)
        self._reset_role(now, out)
        for voter in self._other_voters():
            request = EndQuorumEpochRequest(
                self.config.cluster_id, self.node_id, self.epoch, preferred_successors=successors,
                leader_endpoints=self.config.endpoints,
            )
            self._send_request(voter, request, RequestKind.END_QUORUM_EPOCH, out)

    def _send_begin_quorum_epoch(self, voter: int, out: list[Effect]) -> None:
        key = self.voters.key_of(voter)
        request = BeginQuorumEpochRequest(
            self.config.cluster_id, voter, self.node_id, self.epoch,
            voter_directory_id=key.directory_id if key is not None else None,
            leader_endpoints=self.config.endpoints,
        )
        self._send_request(voter, request, RequestKind.BEGIN_QUORUM_EPOCH, out)

    def _leader_voters_changed(self, now: float, out: list[Effect]) -> None:
        leader = self._leader
        assert leader is not None
        tracker = leader.tracker
        before = set(tracker.unacknowledged)
        tracker.update_voters(self.voters)
        for voter in sorted(tracker.unacknowledged - before):
            self._send_begin_quorum_epoch(voter, out)
        if tracker.unacknowledged:
            leader.begin_resend_at = min(leader.begin_resend_at, now + self._request_timeout)

    def _handle_begin_quorum_epoch_response(
        self, src: int, pending: PendingRequest, resp: BeginQuorumEpochResponse, now: float
    ) -> None:
        if resp.error_code == ErrorCode.NONE and self._leader is not None:
            self._leader.tracker.record_contact(src, now)

    # -- timers ----------------------------------------------------------------------------------

    def _poll_leader(self, now: float, out: list[Effect]) -> None:
        leader = self._leader
        assert leader is not None
        if leader.resign_requested:
            # Removed from the voters, and the removal is committed: hand over (KIP-853).
            self._resign(now, out)
            return
        change = leader.voter_change
        if change is not None and now >= change.deadline:
            leader.voter_change = None
            out.append(VoterChangeDone(change.operation, ErrorCode.REQUEST_TIMED_OUT,
                                       f"the record at offset {change.offset} was not committed in time"))
        if leader.accumulator.due(now):
            self._append_accumulated(now, out)
        for rid in [rid for rid, p in leader.parked.items() if p.deadline <= now]:
            parked = leader.parked.pop(rid)
            self._answer_fetch(parked.source, parked.correlation_id, parked.request, out)
        if now >= leader.tracker.majority_contact_time() + self._check_quorum_timeout:
            # KIP-595 check quorum: a leader cut off from a majority must not linger.
            self._resign(now, out)
            return
        if now >= leader.begin_resend_at:
            for voter in sorted(leader.tracker.unacknowledged):
                self._send_begin_quorum_epoch(voter, out)
            leader.begin_resend_at = now + self._request_timeout if leader.tracker.unacknowledged else INF

    def _leader_deadline(self) -> float:
        leader = self._leader
        assert leader is not None
        if leader.resign_requested:
            return self._now
        return min(
            leader.begin_resend_at,
            leader.voter_change.deadline if leader.voter_change is not None else INF,
            leader.tracker.majority_contact_time() + self._check_quorum_timeout,
            leader.accumulator.next_deadline(),
            *(p.deadline for p in leader.parked.values()),
        )

    # -- writes ----------------------------------------------------------------------------------

    def _propose(self, records: list[bytes], now: float) -> ProposeResult:
        leader = self._leader_state()
        base = leader.accumulator.append(records, now)
        out: list[Effect] = []
        if leader.accumulator.due(now):
            self._append_accumulated(now, out)
        return ProposeResult(self.epoch, base, base + len(records) - 1, self._finish(out))

    def _append_accumulated(self, now: float, out: list[Effect], everything: bool = False) -> None:
        """Append the batches the accumulator has ready (`everything`: the open one too), then flush
        once for all of them."""
        leader = self._leader
        assert leader is not None
        ready = leader.accumulator.drain(now, everything=everything)
        if not ready:
            return
        for base_offset, records in ready:
            batch = self._log.append_as_leader(records, self.epoch, timestamp_ms=self._wall_clock())
            if batch.base_offset != base_offset:
                raise RaftInvariantError(
                    f"accumulated records were promised offset {base_offset}, the log put them at {batch.base_offset}"
                )
        self._flush(out)
        self._maybe_advance_leader_hwm(now, out)
        self._complete_parked(out)

    def _append_control(self, records: list[bytes], types: list[ControlRecordType], now: float,
                        out: list[Effect]) -> int:
        """Append a control batch (kraft.version, voters) after everything accumulated, apply what it
        changes at once, flush; returns the offset of its last record."""
        leader = self._leader
        assert leader is not None
        self._append_accumulated(now, out, everything=True)
        batch = self._log.append_as_leader(records, self.epoch, control_types=types, timestamp_ms=self._wall_clock())
        leader.accumulator.next_offset = self._log.end_offset
        if self._history.add_batch(batch):
            self._voters_changed(now, out)
        self._flush(out)
        self._maybe_advance_leader_hwm(now, out)
        self._complete_parked(out)
        return batch.last_offset

    # -- voter changes (KIP-853) -----------------------------------------------------------------

    def _voter_change_refused(self, leader: LeaderState | None, minimum_kraft_version: int = 1) -> tuple[int, str] | None:
        """Why no voter change may start now (KIP-853's order of checks), None when one may."""
        if leader is None or not isinstance(self._quorum.state, Leader):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader"
        if leader.voter_change is not None:
            return ErrorCode.REQUEST_TIMED_OUT, "waiting for the previous voter change to be committed"
        if self._high_watermark <= leader.tracker.epoch_start_offset:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    "the leader has not committed its epoch's first record yet (fencing earlier changes)")
        if self.kraft_version < minimum_kraft_version:
            return (ErrorCode.UNSUPPORTED_VERSION,
                    f"kraft.version is {self.kraft_version}: the voters are controller.quorum.voters (upgrade "
                    "with kraftpy features upgrade --feature kraft.version=1)")
        latest = self._history.latest_offset
        if latest is not None and latest >= self._high_watermark:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    f"the voter change at offset {latest} is not committed yet (high watermark {self._high_watermark})")
        return None

    def _change_voters(self, operation: int, kind: str, node: VoterNode, now: float, out: list[Effect]) -> None:
        leader = self._leader
        refused = self._voter_change_refused(leader)
        if refused is None:
            assert leader is not None
            voters = self.voters
            if kind == "add":
                refused = self._add_refused(leader, voters, node, now)
                new = voters.add(node)
            else:
                new = voters.remove(node.key)
                if new is None:
                    refused = (ErrorCode.VOTER_NOT_FOUND, f"{node.key} is not a voter of {voters}") if (
                        not voters.is_voter(node.key) or voters.key_of(node.id) != node.key) else (
                        ErrorCode.INVALID_REQUEST, "the last voter cannot be removed")
        if refused is not None:
            out.append(VoterChangeDone(operation, *refused))
            return
        assert leader is not None and new is not None
        offset = self._append_control([encode_voters_record(new)], [ControlRecordType.KRAFT_VOTERS], now, out)
        if self._leader is leader:
            leader.voter_change = PendingVoterChange(operation, offset, now + self.config.voter_change_timeout_ms / 1000)
            self._maybe_complete_voter_change(out)
        else:
            out.append(VoterChangeDone(operation, ErrorCode.NOT_LEADER_OR_FOLLOWER, "the leadership ended"))

    def _add_refused(self, leader: LeaderState, voters: VoterSet, node: VoterNode, now: float) -> tuple[int, str] | None:
        if node.id in voters:
            return ErrorCode.DUPLICATE_VOTER, f"node {node.id} is a voter already ({voters.key_of(node.id)})"
        if node.key.directory_id is None:
            return ErrorCode.INVALID_REQUEST, f"voter {node.id} needs a directory id"
        if not node.supports(self.kraft_version):
            return (ErrorCode.INVALID_REQUEST,
                    f"voter {node.key} runs kraft.version {list(node.kraft_versions)}, not {self.kraft_version}")
        if node.endpoint(self.config.listener_name) is None:
            return ErrorCode.INVALID_REQUEST, f"voter {node.key} has no {self.config.listener_name} endpoint"
        progress = leader.tracker.observer(node.key)
        caught_up = progress.last_caught_up_time if progress is not None else None
        if caught_up is None or now - caught_up > self._fetch_timeout:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    f"replica {node.key} has not caught up as an observer (it must fetch the log up to its end first)")
        return None

    def _upgrade_kraft_version(self, operation: int, kraft_version: int, now: float, out: list[Effect],
                               validate_only: bool) -> None:
        leader = self._leader
        current = self.kraft_version
        refused: tuple[int, str] | None = None
        if kraft_version not in SUPPORTED_KRAFT_VERSIONS:
            refused = ErrorCode.INVALID_UPDATE_VERSION, f"kraft.version {kraft_version} is not one of {SUPPORTED_KRAFT_VERSIONS}"
        elif kraft_version < current:
            refused = ErrorCode.INVALID_UPDATE_VERSION, f"kraft.version cannot go down from {current} to {kraft_version}"
        elif kraft_version == current:
            # Done only once the upgrade is committed: an appended one may still be truncated away.
            committed = self._history.kraft_version_at(self._high_watermark - 1)
            out.append(VoterChangeDone(operation, ErrorCode.NONE, f"kraft.version is {current} already")
                       if committed >= kraft_version else
                       VoterChangeDone(operation, ErrorCode.REQUEST_TIMED_OUT,
                                       f"the upgrade to kraft.version {kraft_version} is not committed yet "
                                       f"(high watermark {self._high_watermark})"))
            return
        else:
            refused = self._voter_change_refused(leader, minimum_kraft_version=KRAFT_VERSION_STATIC)
        nodes: list[VoterNode] = []
        if refused is None:
            assert leader is not None
            for voter in self.voters.nodes:
                node = self.config.local_node if voter.id == self.node_id else leader.tracker.reported.get(voter.id)
                if node is None or node.key.directory_id is None:
                    refused = (ErrorCode.INVALID_UPDATE_VERSION,
                               f"voter {voter.id} has not told the leader its directory id in this epoch")
                    break
                if not node.supports(kraft_version):
                    refused = (ErrorCode.INVALID_UPDATE_VERSION,
                               f"voter {voter.id} runs kraft.version {list(node.kraft_versions)} only")
                    break
                nodes.append(node)
        if refused is not None or validate_only:
            out.append(VoterChangeDone(operation, *(refused or (ErrorCode.NONE, None))))
            return
        assert leader is not None
        offset = self._append_control(
            [encode_kraft_version_record(kraft_version), encode_voters_record(VoterSet(tuple(nodes)))],
            [ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS], now, out)
        if self._leader is leader:
            leader.voter_change = PendingVoterChange(operation, offset, now + self.config.voter_change_timeout_ms / 1000)
            self._maybe_complete_voter_change(out)
        else:
            out.append(VoterChangeDone(operation, ErrorCode.NOT_LEADER_OR_FOLLOWER, "the leadership ended"))

    def _maybe_complete_voter_change(self, out: list[Effect]) -> None:
        """The high watermark moved: answer the pending change once its record is committed, and
        resign once a committed voter set no longer holds this leader."""
        leader = self._leader
        if leader is None:
            return
        change = leader.voter_change
        if change is not None and self._high_watermark > change.offset:
            leader.voter_change = None
            out.append(VoterChangeDone(change.operation, ErrorCode.NONE))
        latest = self._history.latest_offset
        if not self.is_voter and latest is not None and latest < self._high_watermark:
            leader.resign_requested = True

    def _handle_update_voter_request(self, src: int, cid: int, req: UpdateVoterRequest, now: float,
                                     out: list[Effect]) -> None:
        """A voter's endpoints and kraft.version range (Kafka's UpdateRaftVoter handler)."""
        leader = self._leader

        def reply(error: int) -> None:
            out.append(Send(src, cid, UpdateVoterResponse(error, self._leader_or_none(), self.epoch,
                                                          leader_endpoints=self._leader_endpoints())))

        if leader is None or not isinstance(self._quorum.state, Leader):
            reply(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        key = ReplicaKey(req.voter_id, req.voter_directory_id)
        node = VoterNode(key, req.listeners, req.kraft_versions)
        voters = self.voters
        if not voters.is_voter(key):
            reply(ErrorCode.VOTER_NOT_FOUND)
            return
        if self.kraft_version == KRAFT_VERSION_STATIC:
            # Kept for an upgrade to kraft.version 1, which writes what the voters reported.
            leader.tracker.reported[req.voter_id] = node
            reply(ErrorCode.NONE)
            return
        refused = self._voter_change_refused(leader)
        if refused is not None:
            reply(refused[0])
            return
        if not node.supports(self.kraft_version) or node.endpoint(self.config.listener_name) is None:
            reply(ErrorCode.INVALID_REQUEST)
            return
        updated = voters.update(VoterNode(voters.key_of(req.voter_id) or key, req.listeners, req.kraft_versions))
        if updated is not None and updated != voters:
            self._append_control([encode_voters_record(updated)], [ControlRecordType.KRAFT_VOTERS], now, out)
        reply(ErrorCode.NONE)

    # -- the high watermark ----------------------------------------------------------------------

    def _maybe_advance_leader_hwm(self, now: float, out: list[Effect]) -> bool:
        leader = self._leader
        if leader is None or not leader.tracker.maybe_advance_high_watermark():
            return False
        tracker = leader.tracker
        if tracker.high_watermark > self._flushed:
            raise RaftInvariantError(f"high watermark {tracker.high_watermark} past the flushed log {self._flushed}")
        self._high_watermark = max(self._high_watermark, tracker.high_watermark)
        self._maybe_complete_voter_change(out)
        self._complete_parked(out)
        return True

    def _complete_parked(self, out: list[Effect]) -> None:
        leader = self._leader
        assert leader is not None
        parked, leader.parked = leader.parked, {}
        for p in parked.values():
            self._answer_fetch(p.source, p.correlation_id, p.request, out)

    # -- Fetch -----------------------------------------------------------------------------------

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
            leader_endpoints=self.config.endpoints,
            **kwargs,  # type: ignore[arg-type]
        )

    def _answer_fetch(self, src: int, cid: int, req: FetchRequest, out: list[Effect]) -> None:
        """Answer a fetch whose position was already recorded (never parks): the leader's batches
        from the fetch offset on, as the bytes its log holds."""
        answer = self._check_fetch_position(req)
        if answer is None:
            max_bytes = min(req.max_bytes, self.config.fetch_max_bytes)
            batches = self._log.read(req.fetch_offset, max_bytes)
            answer = self._fetch_answer(records=b"".join(batch.data for batch in batches))
        leader = self._leader
        if leader is not None:
            leader.told_high_watermark[src] = self._high_watermark
        out.append(Send(src, cid, answer))

    def _handle_fetch_request(self, src: int, cid: int, req: FetchRequest, now: float, out: list[Effect]) -> None:
        leader = self._leader
        if leader is None or not isinstance(self._quorum.state, Leader):
            out.append(Send(src, cid, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, self._leader_or_none(),
                                                    self.epoch, leader_endpoints=self._leader_endpoints())))
            return
        answer = self._check_fetch_position(req)
        if answer is not None:
            leader.tracker.record_contact(src, now)
            out.append(Send(src, cid, answer))
            return
        key = ReplicaKey(src, req.replica_directory_id)
        leader.tracker.update_fetch(key, req.fetch_offset, self._log.end_offset, now)
        moved = self._maybe_advance_leader_hwm(now, out)
        told = leader.told_high_watermark.get(src, -1) >= self._high_watermark
        if req.fetch_offset == self._log.end_offset and req.max_wait_ms > 0 and not moved and told:
            # Long poll: hold the fetch until there is data, the high watermark moves, or max wait.
            wait = min(req.max_wait_ms, self.config.fetch_max_wait_ms) / 1000
            leader.parked[src] = ParkedFetch(src, cid, req, now + wait)
            return
        self._answer_fetch(src, cid, req, out)

    # -- DescribeQuorum --------------------------------------------------------------------------

    def _describe_quorum(self, now: float) -> DescribeQuorumResponse:
        leader = self._leader
        if leader is None or not isinstance(self._quorum.state, Leader):
            return DescribeQuorumResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                self._leader_or_none(),
                self.epoch,
                error_message="not the leader",
            )
        leader.tracker.update_local(self._flushed, now)
        leader.tracker.forget_inactive_observers(now)
        voters, observers = leader.tracker.describe()
        return DescribeQuorumResponse(
            ErrorCode.NONE,
            leader_id=self.node_id,
            leader_epoch=self.epoch,
            high_watermark=self._high_watermark,
            current_voters=voters,
            observers=observers,
            nodes=self.voters.nodes,
            kraft_version=self.kraft_version,
        )
