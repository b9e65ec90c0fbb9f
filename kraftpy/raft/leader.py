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

Everything the leader keeps for its epoch is one `LeaderState`, created on election and dropped by
any transition (the accumulated proposals with it: those offsets never commit).
"""

from __future__ import annotations

import attrs

from kraftpy.raft.accumulator import BatchAccumulator
from kraftpy.raft.control import encode_leader_change
from kraftpy.raft.core_base import INF, CoreBase, PendingRequest, RequestKind
from kraftpy.raft.effects import Effect, Send
from kraftpy.raft.errors import ErrorCode, NotLeaderError, RaftInvariantError
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
)
from kraftpy.raft.quorum_state import Candidate, Leader
from kraftpy.raft.tracker import LeaderTracker


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
        self._log.append_as_leader(
            [encode_leader_change(self.node_id, self.config.voters, granting)],
            self.epoch,
            is_control=True,
            timestamp_ms=self._wall_clock(),
        )
        self._leader = LeaderState(
            LeaderTracker(self.node_id, self.config.voters, self.epoch, epoch_start, self._high_watermark, now),
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

    def _resign(self, now: float, out: list[Effect]) -> None:
        leader = self._leader
        assert leader is not None
        successors = leader.tracker.voters_by_end_offset()
        out += self._quorum.transition_to_resigned(successors, now)
        self._reset_role(now, out)
        for voter in self._other_voters():
            request = EndQuorumEpochRequest(
                self.config.cluster_id, self.node_id, self.epoch, preferred_successors=successors
            )
            self._send_request(voter, request, RequestKind.END_QUORUM_EPOCH, out)

    def _send_begin_quorum_epoch(self, voter: int, out: list[Effect]) -> None:
        request = BeginQuorumEpochRequest(self.config.cluster_id, voter, self.node_id, self.epoch)
        self._send_request(voter, request, RequestKind.BEGIN_QUORUM_EPOCH, out)

    def _handle_begin_quorum_epoch_response(
        self, src: int, pending: PendingRequest, resp: BeginQuorumEpochResponse, now: float
    ) -> None:
        if resp.error_code == ErrorCode.NONE and self._leader is not None:
            self._leader.tracker.record_contact(src, now)

    # -- timers ----------------------------------------------------------------------------------

    def _poll_leader(self, now: float, out: list[Effect]) -> None:
        leader = self._leader
        assert leader is not None
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
        return min(
            leader.begin_resend_at,
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

    def _append_accumulated(self, now: float, out: list[Effect]) -> None:
        """Append the batches the accumulator has ready, then flush once for all of them."""
        leader = self._leader
        assert leader is not None
        ready = leader.accumulator.drain(now)
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

    # -- the high watermark ----------------------------------------------------------------------

    def _maybe_advance_leader_hwm(self, now: float, out: list[Effect]) -> bool:
        leader = self._leader
        if leader is None or not leader.tracker.maybe_advance_high_watermark():
            return False
        tracker = leader.tracker
        if tracker.high_watermark > self._flushed:
            raise RaftInvariantError(f"high watermark {tracker.high_watermark} past the flushed log {self._flushed}")
        self._high_watermark = max(self._high_watermark, tracker.high_watermark)
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
                                                    self.epoch)))
            return
        answer = self._check_fetch_position(req)
        if answer is not None:
            leader.tracker.record_contact(src, now)
            out.append(Send(src, cid, answer))
            return
        leader.tracker.update_fetch(src, req.fetch_offset, self._log.end_offset, now)
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
        )
