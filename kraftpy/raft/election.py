"""Elections: the Unattached, Prospective, Candidate and Resigned states, and the Vote RPC.

Theory of operation (Raft thesis §3.4, §3.6.1; KIP-595 "Vote"; KIP-996 pre-vote):

- An Unattached voter waits a randomized election timeout in [T, 2T), then goes Prospective.
- Prospective asks every voter for a pre-vote (VoteRequest with ``pre_vote``, for its epoch + 1)
  without bumping its epoch or persisting anything; a majority makes it Candidate, a majority of
  refusals or the timeout sends it back where it came from (Follower of the leader it knew, else
  Unattached with the vote it had given).
- Candidate bumps the epoch, votes for itself (persisted), and asks for votes; a majority makes it
  Leader (kraftpy.raft.leader); the timeout makes it Prospective again.
- Resigned (a leader that gave up) waits out an election timeout, then goes Prospective; one that is
  no longer a voter (it removed itself, KIP-853) goes Unattached as an observer instead.

A voter grants at most one vote per epoch, never once it knows the epoch's leader, and only to a
candidate whose log is at least as up to date as its own; a granted vote is persisted before the
response leaves (`transition_to_unattached_voted` returns the PersistQuorumState first). Pre-votes
change nothing, and are refused by a follower that still hears from its leader.

Replicas, not ids, vote (KIP-853): a Vote names the candidate's directory id and the directory id
the candidate's voter set has for the voter asked; a replica asked under another directory id (its
disk was replaced since) refuses (INVALID_VOTER_KEY, in the prelude), and a vote given to a replica
is not given to another replica of the same id. A candidate counts only the voters of its own set.
In a dynamic quorum a replica that is not a voter in its own log may still vote: its log may lag the
candidate's, in which it is one.

The epoch prelude (kraftpy.raft.core) has already compared the message's epoch with ours when a
handler here runs: a VoteRequest's candidate epoch is ours (a standard vote) or at least ours (a
pre-vote), and a VoteResponse's epoch is ours.
"""

from __future__ import annotations

from kraftpy.raft.core_base import CoreBase, PendingRequest, RequestKind
from kraftpy.raft.effects import Effect, Send
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.messages import VoteRequest, VoteResponse
from kraftpy.raft.quorum_state import Candidate, Follower, Prospective, Resigned, Unattached
from kraftpy.raft.validation import MAX_EPOCH


class ElectionRole(CoreBase):
    # -- timers ----------------------------------------------------------------------------------

    def _poll_election(self, now: float, out: list[Effect]) -> None:
        """Fire the election timer of an Unattached, Prospective, Candidate or Resigned voter."""
        match self._quorum.state:
            case Prospective(election_deadline=deadline) if now >= deadline:
                self._after_lost_prevote(now, out)
            case Unattached(election_deadline=deadline) | Candidate(election_deadline=deadline) | Resigned(
                election_deadline=deadline
            ) if deadline is not None and now >= deadline:
                if self._quorum.may_stand:
                    self._become_prospective(now, out)
                else:
                    # Not a voter any more (its removal is committed, KIP-853): an observer now.
                    out += self._quorum.transition_observer_to_unattached(now)
                    self._reset_role(now, out)
                    self._start_observer_search(now, out)

    def _election_deadline(self) -> float | None:
        match self._quorum.state:
            case Unattached(election_deadline=deadline):
                return deadline
            case Prospective(election_deadline=deadline) | Candidate(election_deadline=deadline):
                return deadline
            case Resigned(election_deadline=deadline):
                return deadline
        return None

    # -- transitions -----------------------------------------------------------------------------

    def _become_prospective(self, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_to_prospective(now)
        self._reset_role(now, out)
        if self.epoch >= MAX_EPOCH:
            # No epoch is left to stand in (int32): the pre-vote times out and the node waits as it did.
            return
        if self._quorum.has_majority_granted():
            self._become_candidate(now, out)
            return
        for voter in self._other_voters():
            request = self._vote_request(voter, self.epoch + 1, pre_vote=True)
            self._send_request(voter, request, RequestKind.PRE_VOTE, out)

    def _after_lost_prevote(self, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_after_lost_prevote(now)
        self._reset_role(now, out)
        if isinstance(self._quorum.state, Follower):
            self._start_following(now, out)
        elif not self._quorum.may_stand:
            out += self._quorum.transition_observer_to_unattached(now)
            self._reset_role(now, out)
            self._start_observer_search(now, out)

    def _become_candidate(self, now: float, out: list[Effect]) -> None:
        out += self._quorum.transition_to_candidate(now)
        self._reset_role(now, out)
        if self._quorum.has_majority_granted():
            self._become_leader(now, out)
            return
        for voter in self._other_voters():
            request = self._vote_request(voter, self.epoch, pre_vote=False)
            self._send_request(voter, request, RequestKind.VOTE, out)

    # -- the Vote RPC ----------------------------------------------------------------------------

    def _vote_request(self, voter: int, epoch: int, *, pre_vote: bool) -> VoteRequest:
        key = self.voters.key_of(voter)
        return VoteRequest(
            cluster_id=self.config.cluster_id,
            voter_id=voter,
            candidate_epoch=epoch,
            candidate_id=self.node_id,
            last_offset_epoch=self._log.last_fetched_epoch,
            last_offset=self._log.end_offset,
            pre_vote=pre_vote,
            candidate_directory_id=self.config.directory_id,
            voter_directory_id=key.directory_id if key is not None else None,
        )

    def _log_is_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        """Raft thesis §3.6.1: the candidate's log is at least as up to date as ours - a larger last
        epoch, or the same one and an end offset at least as large."""
        return (last_epoch, end_offset) >= (self._log.last_fetched_epoch, self._log.end_offset)

    def _handle_vote_request(self, src: int, cid: int, req: VoteRequest, now: float, out: list[Effect]) -> None:
        log_ok = self._log_is_up_to_date(req.last_offset_epoch, req.last_offset)
        if req.pre_vote:
            # KIP-996: a pre-vote changes nothing here, whatever its epoch.
            has_fetched = self._fetch is not None and self._fetch.has_fetched
            granted = req.candidate_epoch > self.epoch and log_ok and self._quorum.can_grant_prevote(has_fetched)
        else:
            granted = log_ok and self._quorum.can_grant_vote(req.candidate_id, req.candidate_directory_id)
            state = self._quorum.state
            if granted and not (isinstance(state, Unattached) and state.voted_id == req.candidate_id):
                # One vote per epoch (thesis §3.4), persisted before the response leaves.
                out += self._quorum.transition_to_unattached_voted(req.candidate_id, now, req.candidate_directory_id)
                self._reset_role(now, out)
                if not self._quorum.may_stand:
                    self._start_observer_search(now, out)
        out.append(Send(src, cid, VoteResponse(ErrorCode.NONE, self._leader_or_none(), self.epoch, granted,
                                               leader_endpoints=self._leader_endpoints())))

    def _handle_vote_response(
        self, src: int, pending: PendingRequest, resp: VoteResponse, now: float, out: list[Effect]
    ) -> None:
        if resp.error_code != ErrorCode.NONE:
            return
        state = self._quorum.state
        if pending.kind is RequestKind.PRE_VOTE and isinstance(state, Prospective):
            self._quorum.record_vote(src, resp.vote_granted)
            if self._quorum.has_majority_granted():
                self._become_candidate(now, out)
            elif self._quorum.has_majority_rejected():
                self._after_lost_prevote(now, out)
        elif pending.kind is RequestKind.VOTE and isinstance(state, Candidate):
            self._quorum.record_vote(src, resp.vote_granted)
            if self._quorum.has_majority_granted():
                self._become_leader(now, out)
