"""Followers and observers: the fetch loop, and BeginQuorumEpoch / EndQuorumEpoch from a leader.

Theory of operation (KIP-595 pull replication, log reconciliation; KIP-630; KIP-996):

- A Follower sends Fetch(its log end offset, the epoch of its last batch) to its leader, one at a
  time; an observer (a broker, not a voter) without a leader sends it to voters picked at random
  until an answer names the leader.
- The answer holds the leader's batches as bytes. They are checked (whole batches, CRC-32C, offsets
  continuing the log, epochs never going back and never past the leader's) and appended as they
  are, then flushed before the next fetch vouches for them; a bad answer is dropped and the fetch
  retried after the back-off. The follower's high watermark is the leader's, bounded by its own log.
- A diverging epoch truncates the log to where the two logs can agree, never below the high
  watermark; a snapshot id starts a snapshot download (kraftpy.raft.snapshots). An answer that no
  leader could give (a divergence below the high watermark, an epoch newer than the leader's, a
  snapshot ending before what is committed here) is dropped and the fetch retried: the core trusts
  no message, not even its leader's.
- Control batches (the kraft.version and voters records, KIP-853) are read before they are
  appended (one that cannot be read drops the whole answer) and change the voter set this node uses
  as soon as they are in its log; a truncation that removes one brings the previous set back.
- A voter that finds its own record in the voter set out of date (its endpoints or kraft.version
  range), or at kraft.version 0 has not told this epoch's leader its directory id yet, sends the
  leader UpdateVoter once per epoch (again after an error, after the request timeout).
- An observer without a leader asks the voters it knows of and the bootstrap servers
  (controller.quorum.bootstrap.servers) in turn. A follower with bootstrap servers whose fetch
  failed sends the next one to a bootstrap server, then returns to its leader: the answer of a
  later epoch moves it on (a lagging voter of a dynamic quorum may know no other way to learn it).
- Without a successful answer for the fetch timeout a voter goes Prospective, an observer looks
  for a leader again. EndQuorumEpoch from the leader shortens that wait by the voter's rank among
  the preferred successors; a transport that cannot reach the leader at all shortens it to a
  random share of the election timeout (`RaftCore.unreachable`).

The epoch prelude (kraftpy.raft.core) has already made the node follow any leader a message names
for a later epoch (or for the current one, when it knew none), so the handlers here see messages
of the current epoch only.
"""

from __future__ import annotations

import attrs

from kraftpy.raft.batch import CorruptRecordError, parse_batches
from kraftpy.raft.core_base import INF, CoreBase, PendingRequest, RequestKind
from kraftpy.raft.effects import Effect, Send
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.log import SnapshotId
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    Message,
    UpdateVoterRequest,
    UpdateVoterResponse,
)
from kraftpy.raft.quorum_state import Follower, Unattached
from kraftpy.raft.voter_history import VoterHistory
from kraftpy.raft.voters import KRAFT_VERSION_STATIC, ControlRecordError


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
    #: The size the leader announced for it (-1 before the first chunk).
    snapshot_size: int = -1
    #: UpdateVoter to this leader: None not sent, "sent", "done"; and when to try again after an error.
    update_voter: str | None = None
    update_voter_retry_at: float = 0.0


class FollowerRole(CoreBase):
    # -- the fetch loop --------------------------------------------------------------------------

    def _start_following(self, now: float, out: list[Effect]) -> None:
        state = self._quorum.state
        assert isinstance(state, Follower)
        self._fetch = FetchProgress(target=state.leader_id, fetch_deadline=now + self._fetch_timeout)
        self._send_fetch(now, out)

    def _start_observer_search(self, now: float, out: list[Effect]) -> None:
        self._fetch = FetchProgress(target=self._search_target())
        self._send_fetch(now, out)

    def _search_target(self) -> int:
        """A node to ask for the leader: one of the voters this node knows of or a bootstrap server."""
        candidates = [v for v in sorted(self.voters.ids) if v != self.node_id] + list(self.config.bootstrap_ids)
        if not candidates:
            candidates = sorted(self.voters.ids) or [self.node_id]
        return self._rng.choice(candidates)

    def _poll_follower(self, now: float, out: list[Effect]) -> None:
        """The fetch timeout of a Follower: a voter stands for election, an observer looks again."""
        fetch = self._fetch
        if not isinstance(self._quorum.state, Follower) or fetch is None or now < fetch.fetch_deadline:
            return
        if self._quorum.may_stand:
            self._become_prospective(now, out)
        else:
            out += self._quorum.transition_observer_to_unattached(now)
            self._reset_role(now, out)
            self._start_observer_search(now, out)

    def _poll_fetch(self, now: float, out: list[Effect]) -> None:
        fetch = self._fetch
        if fetch is None:
            return
        if fetch.in_flight is not None and now >= fetch.in_flight_deadline:
            fetch.in_flight = None
            self._retarget_after_failure(fetch)
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
                replica_directory_id=self.config.directory_id,
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
                replica_directory_id=self.config.directory_id,
            )
        out.append(Send(fetch.target, cid, message))

    def _take_fetch_answer(self, src: int, cid: int) -> FetchProgress | None:
        """The fetch loop, if this is the answer to its request in flight (which it retires)."""
        fetch = self._fetch
        if fetch is None or fetch.in_flight != cid or fetch.target != src:
            return None
        fetch.in_flight = None
        return fetch

    def _fetch_failed(self, fetch: FetchProgress, now: float) -> None:
        fetch.next_fetch_at = now + self._retry_backoff
        self._retarget_after_failure(fetch)

    def _retarget_after_failure(self, fetch: FetchProgress) -> None:
        """Where the fetch after a failed one goes: a leaderless observer tries another node; a
        follower with bootstrap servers asks one of them once, then its leader again (as Kafka does,
        KAFKA-17030). In a dynamic quorum a lagging voter's own voter set may not name the replicas
        that moved on to a later epoch, and its leader may be gone for good: the bootstrap servers'
        answers carry that epoch, without which its pre-votes would count for nothing."""
        state = self._quorum.state
        if isinstance(state, Unattached):
            fetch.target = self._search_target()
        elif isinstance(state, Follower) and self.config.bootstrap_ids:
            fetch.target = (self._rng.choice(self.config.bootstrap_ids) if fetch.target == state.leader_id
                            else state.leader_id)

    def _is_from_my_leader(self, leader_id: int) -> bool:
        state = self._quorum.state
        return isinstance(state, Follower) and state.leader_id == leader_id

    def _unreachable(self, dest: int, correlation_id: int, now: float) -> None:
        fetch = self._take_fetch_answer(dest, correlation_id)
        if fetch is None:
            return
        self._fetch_failed(fetch, now)
        state = self._quorum.state
        if isinstance(state, Follower) and state.leader_id == dest and self._quorum.may_stand:
            fetch.has_fetched = False
            soon = now + self._rng.random() * self._election_timeout
            fetch.fetch_deadline = min(fetch.fetch_deadline, soon)

    # -- Fetch responses -------------------------------------------------------------------------

    def _handle_fetch_response(
        self, src: int, fetch: FetchProgress, resp: FetchResponse, now: float, out: list[Effect]
    ) -> None:
        if (
            resp.error_code != ErrorCode.NONE
            or not self._is_from_my_leader(resp.leader_id)
            or not self._fetch_answer_is_possible(resp)
        ):
            self._fetch_failed(fetch, now)
            return
        fetch.has_fetched = True
        fetch.fetch_deadline = now + self._fetch_timeout
        fetch.target = resp.leader_id  # the leader itself, also when a bootstrap server was asked
        log = self._log
        if resp.diverging_epoch is not None:
            # KIP-595 log reconciliation: cut back to where the two logs can still agree, then
            # fetch again from there; repeated until the leader accepts the position.
            log.truncate_to(self._divergence_point(resp.diverging_epoch))
            self._flushed = min(self._flushed, log.end_offset)
            if self._history.truncate_new(log.end_offset):
                self._voters_changed(now, out)
        elif resp.snapshot_id is not None:
            # KIP-630: the leader no longer has the log where we are; download its snapshot.
            fetch.snapshot_id = resp.snapshot_id
            fetch.snapshot_position = 0
            fetch.snapshot_size = -1
        elif not self._append_fetched(resp, now, out):
            self._fetch_failed(fetch, now)
            return
        self._maybe_update_voter(fetch, now, out)
        self._send_fetch(now, out)

    def _divergence_point(self, diverging: EpochEndOffset) -> int:
        """Where the log must be cut so that it agrees with the leader's (KIP-595)."""
        return min(self._log.end_offset_for_epoch(diverging.epoch).offset, diverging.end_offset)

    def _fetch_answer_is_possible(self, resp: FetchResponse) -> bool:
        """Whether a Fetch answer of this epoch's leader says something a leader can say: at most one
        of a divergence, a snapshot and records; a divergence of an epoch no newer than the leader's
        that cuts nothing committed (Leader Completeness: the leader holds every committed entry); a
        snapshot no newer than the leader's epoch that ends at or past what is committed here. An
        answer that cannot be true is dropped like a lost one, and the fetch retried."""
        if (resp.diverging_epoch is not None) + (resp.snapshot_id is not None) + bool(resp.records) > 1:
            return False
        diverging, snapshot = resp.diverging_epoch, resp.snapshot_id
        if diverging is not None:
            if not (0 <= diverging.epoch <= resp.leader_epoch and diverging.end_offset >= 0):
                return False
            cut = self._divergence_point(diverging)
            return cut >= self._high_watermark and cut >= self._log.start_offset
        if snapshot is not None:
            return 0 <= snapshot.epoch <= resp.leader_epoch and snapshot.end_offset >= max(self._high_watermark, 1)
        return True

    def _append_fetched(self, resp: FetchResponse, now: float, out: list[Effect]) -> bool:
        """Append the leader's batches as they are; False if they cannot be trusted."""
        log = self._log
        if resp.records:
            try:
                batches = parse_batches(resp.records)
            except CorruptRecordError:
                return False
            if batches[0].base_offset != log.end_offset:
                return True  # an answer about another position: ask again from ours
            if batches[-1].epoch > resp.leader_epoch:
                return False
            try:
                for batch in batches:
                    if batch.is_control:
                        VoterHistory.decode_batch(batch)  # a control record that cannot be read: refuse all
            except ControlRecordError:
                return False
            try:
                log.append_as_follower(batches)
            except ValueError:  # not continuing the log, an epoch going back, too large
                return False
            changed = False
            for batch in batches:
                changed = self._history.add_batch(batch) or changed
            if changed:
                self._voters_changed(now, out)
            self._flush(out)
        # A follower's log matches the leader's up to its end after a valid fetch, so it may
        # commit up to min(leader's high watermark, own end) - and never back (KIP-595).
        new = min(resp.high_watermark, log.end_offset, self._flushed)
        if new > self._high_watermark:
            self._high_watermark = new
        return True

    # -- UpdateVoter (KIP-853) -------------------------------------------------------------------

    def _maybe_update_voter(self, fetch: FetchProgress, now: float, out: list[Effect]) -> None:
        """After a good fetch answer: tell the leader this voter's endpoints and kraft.version range
        when its voter record is out of date (kraft.version 1) or the leader may not know its directory
        id yet (kraft.version 0, for an upgrade)."""
        state = self._quorum.state
        if fetch.update_voter == "done" or (fetch.update_voter == "sent" and now < fetch.update_voter_retry_at):
            return
        if not isinstance(state, Follower) or self.config.directory_id is None or not self.is_voter:
            return
        if self.kraft_version > KRAFT_VERSION_STATIC:
            me = self.voters.node(self.node_id)
            local = self.config.local_node
            if not self.config.endpoints or me is None or (
                    me.endpoints == local.endpoints and me.kraft_versions == local.kraft_versions):
                return
        fetch.update_voter = "sent"
        fetch.update_voter_retry_at = now + self._request_timeout
        local = self.config.local_node
        request = UpdateVoterRequest(self.config.cluster_id, self.epoch, self.node_id, self.config.directory_id,
                                     local.endpoints, local.kraft_versions)
        self._send_request(state.leader_id, request, RequestKind.UPDATE_VOTER, out)

    def _handle_update_voter_response(self, src: int, pending: PendingRequest, resp: UpdateVoterResponse,
                                      now: float) -> None:
        fetch = self._fetch
        if fetch is not None and self._is_from_my_leader(src) and resp.error_code == ErrorCode.NONE:
            fetch.update_voter = "done"

    # -- BeginQuorumEpoch / EndQuorumEpoch -------------------------------------------------------

    def _handle_begin_quorum_epoch_request(
        self, src: int, cid: int, req: BeginQuorumEpochRequest, now: float, out: list[Effect]
    ) -> None:
        # The prelude made this node follow the new leader; all that is left is to say so.
        out.append(Send(src, cid, BeginQuorumEpochResponse(ErrorCode.NONE, self._leader_or_none(), self.epoch,
                                                           leader_endpoints=self._leader_endpoints())))

    def _handle_end_quorum_epoch_request(
        self, src: int, cid: int, req: EndQuorumEpochRequest, now: float, out: list[Effect]
    ) -> None:
        state = self._quorum.state
        fetch = self._fetch
        if isinstance(state, Follower) and state.leader_id == req.leader_id and fetch is not None:
            # The leader is gone: pre-votes may be granted again (KIP-996).
            fetch.has_fetched = False
            if self._quorum.may_stand and self.node_id in req.preferred_successors:
                # KIP-595: the most up-to-date voter stands at once, the others back off by rank.
                position = req.preferred_successors.index(self.node_id)
                if position == 0:
                    self._become_prospective(now, out)
                else:
                    backoff = min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms * 2**position)
                    jitter = self._rng.random() * self._retry_backoff
                    fetch.fetch_deadline = min(fetch.fetch_deadline, now + backoff / 1000 + jitter)
        out.append(Send(src, cid, EndQuorumEpochResponse(ErrorCode.NONE, self._leader_or_none(), self.epoch,
                                                         leader_endpoints=self._leader_endpoints())))
