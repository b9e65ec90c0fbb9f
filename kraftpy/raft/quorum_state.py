"""The epoch states of a KRaft node and the one place that moves between them.

States (frozen; a transition replaces the state object, it never mutates one)::

                     higher epoch seen (from any state)
          +------------------------------------------------------------+
          v                                                            |
    +------------+  election timeout  +-------------+  majority of  +-----------+  majority  +--------+
    | Unattached | -----------------> | Prospective | -- pre-votes ->| Candidate | -- votes ->| Leader |
    +------------+ <------------------ +-------------+               +-----------+            +--------+
      |    ^  (grant vote:               |   ^   | lost / timed out,     |   |  election          |
      |    |   same epoch,               |   |   | leader was known      |   |  timeout           | resign():
      |    |   voted_id set)             |   |   v                       |   v                    | fetch timeout
      |    +--- lost / timed out, -------+   | +----------+              | Prospective            | or shutdown
      |         no leader known              +-| Follower |<-------------+ (leader seen at       v
      |                          fetch timeout | (leader  |                our epoch or later) +----------+
      +--------------------------------------->|  known)  |<---------------------------------- | Resigned |
           leader seen at this epoch or later  +----------+      leader seen at a later epoch  +----------+
                                                                                  election timeout -> Prospective

- Unattached(epoch, voted_id): no leader known in `epoch`; may have voted (`voted_id`).
- Prospective(epoch, leader_id, voted_id): asking for pre-votes (KIP-996) without bumping the epoch;
  remembers the leader or vote it came with so that losing puts it back where it was.
- Candidate(epoch): has bumped the epoch and voted for itself (Raft thesis §3.4).
- Leader(epoch): won a majority of `epoch`; followers' progress lives in `LeaderTracker`.
- Follower(epoch, leader_id): fetches from `leader_id`.
- Resigned(epoch): was leader of `epoch` and gave it up (KIP-595 EndQuorumEpoch).

Observers (nodes not in the voter set) only ever are Unattached or Follower, and may go from
Follower back to Unattached in the same epoch when the leader stops answering. A leader that removed
itself from the voter set (KIP-853) resigns once the removal is committed, and as Resigned it is an
observer: at its election timeout it goes Unattached in the same epoch, keeping itself as the vote of
that epoch (it led it: it must never vote for another candidate in it).

The voter set (`voter_set`) is not part of a state: it is the newest one in the node's log (kraftpy.raft
.voter_history), and the core sets it here whenever the log changes it. A replica is a voter when its
key - node id and metadata log directory id - is in the set. In a dynamic quorum (`dynamic`) a replica
that is not a voter may still grant a vote (its log may be behind the candidate's: it may already be a
voter in the candidate's set); in a static one it may not.

Who may stand (`may_stand`): a voter, and a replica whose own removal is the newest voter change in
its log and not committed yet (`removal_pending`). Raft counts an election by the candidate's latest
configuration, whether or not the candidate is in it (thesis §4.1): a leader that removed itself and
lost its leadership before the removal was committed may be the only replica whose log holds that
record, and the voters of the old set that lack it cannot win without its vote, which the log check
refuses them. Standing, it is elected by the new set, commits the removal, and hands over. A replica
that may not stand keeps no election timer; one that stops being allowed to while it has one
(its removal got committed) goes observer at the next timer (`transition_observer_to_unattached`).

Persistence: every state maps to an `ElectionState` (epoch, leader_id | voted_id). A transition is
persisted exactly when that changes, i.e. on every epoch change, on granting a vote, on becoming
Candidate (new epoch, vote for self), Leader or Follower (leader now known), and Resigned →
Prospective (the leader record becomes a self-vote). Entering Prospective from Unattached or
Follower, leaving it after a lost pre-vote, Leader → Resigned and Candidate → Prospective change
nothing durable and write nothing: that is what keeps a pre-vote from costing an fsync.

Safety rules enforced here (violations raise IllegalTransitionError):

- the epoch never decreases, and never passes int32 (`MAX_EPOCH`: messages claiming more are
  refused before they get here, and no election starts in the last epoch);
- within one epoch there is at most one leader: a node never follows two leaders, never becomes
  leader of an epoch in which it knew another leader, and never grants a vote once it knows the
  epoch's leader (Raft thesis §3.6.1, "Election Safety");
- within one epoch a node grants at most one vote (Raft thesis §3.4; KIP-595 "Vote").
"""

from __future__ import annotations

import random

import attrs

from kraftpy.ids import Uuid
from kraftpy.raft.effects import Effect, ElectionState, LeaderChange, PersistQuorumState
from kraftpy.raft.errors import IllegalTransitionError
from kraftpy.raft.validation import MAX_EPOCH
from kraftpy.raft.voters import ReplicaKey, VoterSet


@attrs.frozen
class Unattached:
    epoch: int
    voted_id: int | None = None
    #: When to start a pre-vote; None for observers, which never stand.
    election_deadline: float | None = None
    #: The directory id of the replica voted for, when known (KIP-853).
    voted_directory_id: Uuid | None = None


@attrs.frozen
class Prospective:
    epoch: int
    election_deadline: float
    leader_id: int | None = None
    voted_id: int | None = None
    #: Voters that granted / refused a pre-vote in this round (self is in `granted`).
    granted: frozenset[int] = frozenset()
    rejected: frozenset[int] = frozenset()
    voted_directory_id: Uuid | None = None


@attrs.frozen
class Candidate:
    epoch: int
    election_deadline: float
    granted: frozenset[int] = frozenset()
    rejected: frozenset[int] = frozenset()


@attrs.frozen
class Leader:
    epoch: int


@attrs.frozen
class Follower:
    epoch: int
    leader_id: int


@attrs.frozen
class Resigned:
    epoch: int
    election_deadline: float
    preferred_successors: tuple[int, ...] = ()


EpochState = Unattached | Prospective | Candidate | Leader | Follower | Resigned


def election_state_of(state: EpochState, local_id: int, local_directory_id: Uuid | None = None) -> ElectionState:
    """The durable part of `state`."""
    match state:
        case Unattached(epoch=epoch, voted_id=voted, voted_directory_id=directory):
            return ElectionState(epoch, voted_id=voted, voted_directory_id=directory if voted is not None else None)
        case Prospective(epoch=epoch, leader_id=leader, voted_id=voted, voted_directory_id=directory):
            if leader is not None:
                return ElectionState(epoch, leader_id=leader)
            return ElectionState(epoch, voted_id=voted, voted_directory_id=directory if voted is not None else None)
        case Candidate(epoch=epoch):
            return ElectionState(epoch, voted_id=local_id, voted_directory_id=local_directory_id)
        case Leader(epoch=epoch) | Resigned(epoch=epoch):
            return ElectionState(epoch, leader_id=local_id)
        case Follower(epoch=epoch, leader_id=leader):
            return ElectionState(epoch, leader_id=leader)
    raise TypeError(state)


def leader_of(state: EpochState, local_id: int) -> int | None:
    """The leader `state` knows of in its epoch, if any (a Resigned node no longer leads)."""
    match state:
        case Leader():
            return local_id
        case Follower(leader_id=leader) | Prospective(leader_id=leader):
            return leader
    return None


class QuorumState:
    """Holds the current epoch state and makes every transition.

    Each `transition_to_*` returns the effects the change calls for, in order: a
    `PersistQuorumState` when the durable election state changed (the driver writes it before any
    message that follows), then a `LeaderChange` when the known leader of the known epoch changed.

    Invariant: `persisted` is the election state of the last persisted transition, and equals
    `election_state_of(state)` whenever control is outside this class.
    """

    def __init__(
        self,
        local_id: int,
        voters: VoterSet | frozenset[int],
        election_timeout: float,
        rng: random.Random,
        persisted: ElectionState | None,
        now: float,
        *,
        directory_id: Uuid | None = None,
        dynamic: bool = False,
        removal_pending: bool = False,
    ) -> None:
        self.local_id = local_id
        self.local_key = ReplicaKey(local_id, directory_id)
        self.voter_set = voters if isinstance(voters, VoterSet) else VoterSet.of_ids(voters)
        self._is_voter = self.voter_set.is_voter(self.local_key)
        self.dynamic = dynamic
        #: The newest voter change in the log removes this replica and is not committed (set by the core).
        self.removal_pending = removal_pending
        self.election_timeout = election_timeout
        self._rng = rng
        self.persisted = persisted or ElectionState(0)
        self.state: EpochState = self._initial_state(self.persisted, now)

    @property
    def voters(self) -> frozenset[int]:
        return self.voter_set.ids

    @property
    def is_voter(self) -> bool:
        return self._is_voter

    @property
    def may_vote(self) -> bool:
        """May this replica grant votes (a voter, or any replica of a dynamic quorum)?"""
        return self.is_voter or self.dynamic

    @property
    def may_stand(self) -> bool:
        """May this replica stand for election (see the module doc)?"""
        return self.is_voter or self.removal_pending

    def update_voters(self, voters: VoterSet, dynamic: bool) -> None:
        """The log's voter set changed (an append, a truncation, a snapshot). No transition: the
        roles that depend on it read it when they next act (a follower's fetch timeout, a leader's
        count of its majority)."""
        self.voter_set = voters
        self._is_voter = voters.is_voter(self.local_key)
        self.dynamic = dynamic

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        return leader_of(self.state, self.local_id)

    def random_election_deadline(self, now: float) -> float:
        """now + a timeout drawn from [T, 2T) (Raft thesis §3.4, randomized election timeouts)."""
        return now + self.election_timeout * (1.0 + self._rng.random())

    def _initial_state(self, persisted: ElectionState, now: float) -> EpochState:
        if not self.dynamic and persisted.leader_id is not None and persisted.leader_id not in self.voters:
            # A leader that is not a voter (a file written before messages were checked): no one
            # led that epoch. The vote this node may have given in it before is forgotten, so it
            # must give none in it now: it starts as if it had voted for that node.
            persisted = ElectionState(persisted.epoch, voted_id=persisted.leader_id)
            self.persisted = persisted
        # After a restart a node never resumes leadership: it cannot know what its followers saw.
        if persisted.leader_id == self.local_id:
            return Resigned(persisted.epoch, self.random_election_deadline(now))
        if persisted.leader_id is not None:
            return Follower(persisted.epoch, persisted.leader_id)
        deadline = self.random_election_deadline(now) if self.may_stand else None
        return Unattached(persisted.epoch, voted_id=persisted.voted_id, election_deadline=deadline,
                          voted_directory_id=persisted.voted_directory_id)

    # -- the one switch --------------------------------------------------------------------------

    def _switch(self, new: EpochState) -> list[Effect]:
        old = self.state
        if new.epoch < old.epoch:
            raise IllegalTransitionError(f"{old} -> {new}: epoch goes back")
        if new.epoch > MAX_EPOCH:
            raise IllegalTransitionError(f"{old} -> {new}: epoch past int32")
        old_leader = leader_of(old, self.local_id)
        new_leader = leader_of(new, self.local_id)
        if new.epoch == old.epoch and old_leader is not None and new_leader not in (None, old_leader):
            raise IllegalTransitionError(f"{old} -> {new}: a second leader in epoch {new.epoch}")
        self.state = new
        effects: list[Effect] = []
        durable = election_state_of(new, self.local_id, self.local_key.directory_id)
        if durable != self.persisted:
            self.persisted = durable
            effects.append(PersistQuorumState(durable))
        if (old.epoch, old_leader) != (new.epoch, new_leader) or (
            isinstance(old, Leader) and not isinstance(new, Leader)
        ):
            effects.append(LeaderChange(new.epoch, new_leader))
        return effects

    def _require(self, condition: bool, target: str) -> None:
        if not condition:
            raise IllegalTransitionError(f"{self.state} -> {target}")

    # -- transitions -----------------------------------------------------------------------------

    def transition_to_unattached(self, epoch: int, now: float) -> list[Effect]:
        """A higher epoch was seen with no leader named (from any state)."""
        self._require(epoch > self.epoch, f"Unattached({epoch})")
        deadline = self.random_election_deadline(now) if self.may_stand else None
        return self._switch(Unattached(epoch, election_deadline=deadline))

    def transition_to_unattached_voted(
        self, candidate_id: int, now: float, candidate_directory_id: Uuid | None = None
    ) -> list[Effect]:
        """Grant the vote of the current epoch to `candidate_id` (Unattached or Prospective with no
        leader known and no other vote given). Persisted before the VoteResponse leaves."""
        state = self.state
        self._require(
            self.may_vote
            and isinstance(state, Unattached | Prospective)
            and self.leader_id is None
            and state.voted_id in (None, candidate_id),
            f"Unattached(voted={candidate_id})",
        )
        directory = candidate_directory_id
        if state.voted_id == candidate_id and state.voted_directory_id is not None:
            directory = state.voted_directory_id
        deadline = self.random_election_deadline(now) if self.may_stand else None
        return self._switch(
            Unattached(state.epoch, voted_id=candidate_id, election_deadline=deadline, voted_directory_id=directory)
        )

    def transition_to_prospective(self, now: float) -> list[Effect]:
        """Election timeout (Unattached, Candidate, Resigned) or fetch timeout / EndQuorumEpoch
        (Follower): ask for pre-votes in the current epoch (KIP-996)."""
        state = self.state
        self._require(self.may_stand and not isinstance(state, Prospective | Leader), "Prospective")
        directory = None
        match state:
            case Unattached(voted_id=voted, voted_directory_id=voted_directory):
                leader, vote, directory = None, voted, voted_directory
            case Follower(leader_id=leader):
                vote = None
            case _:  # Candidate, Resigned: voted for self in this epoch
                leader, vote, directory = None, self.local_id, self.local_key.directory_id
        return self._switch(
            Prospective(
                state.epoch,
                election_deadline=self.random_election_deadline(now),
                leader_id=leader,
                voted_id=vote,
                granted=frozenset({self.local_id}),
                voted_directory_id=directory,
            )
        )

    def transition_after_lost_prevote(self, now: float) -> list[Effect]:
        """A Prospective that lost or timed out goes back to what it was: Follower of the leader it
        knew, else Unattached with the vote it had given (KIP-996)."""
        state = self.state
        self._require(isinstance(state, Prospective), "Unattached|Follower after pre-vote")
        assert isinstance(state, Prospective)
        if state.leader_id is not None:
            return self._switch(Follower(state.epoch, state.leader_id))
        return self._switch(
            Unattached(
                state.epoch, voted_id=state.voted_id, election_deadline=self.random_election_deadline(now),
                voted_directory_id=state.voted_directory_id,
            )
        )

    def transition_to_candidate(self, now: float) -> list[Effect]:
        """A majority granted the pre-vote: bump the epoch and vote for self (Raft thesis §3.4)."""
        self._require(isinstance(self.state, Prospective), "Candidate")
        return self._switch(
            Candidate(
                self.epoch + 1,
                election_deadline=self.random_election_deadline(now),
                granted=frozenset({self.local_id}),
            )
        )

    def transition_to_leader(self) -> list[Effect]:
        state = self.state
        self._require(isinstance(state, Candidate) and len(state.granted & self.voters) * 2 > len(self.voters),
                      "Leader")
        return self._switch(Leader(self.epoch))

    def transition_to_follower(self, epoch: int, leader_id: int) -> list[Effect]:
        """A leader of `epoch` is known: a later epoch from any state, or the current epoch from a
        state that knows no leader yet (or the same one)."""
        self._require(leader_id != self.local_id, f"Follower({epoch}, self)")
        state = self.state
        same_epoch_ok = epoch == self.epoch and (
            isinstance(state, Unattached | Candidate)
            or (isinstance(state, Prospective) and state.leader_id in (None, leader_id))
        )
        self._require(epoch > self.epoch or same_epoch_ok, f"Follower({epoch}, {leader_id})")
        return self._switch(Follower(epoch, leader_id))

    def transition_to_resigned(self, preferred_successors: tuple[int, ...], now: float) -> list[Effect]:
        """The leader gives up its epoch (shutdown or no majority heard, KIP-595)."""
        self._require(isinstance(self.state, Leader), "Resigned")
        return self._switch(
            Resigned(
                self.epoch, self.random_election_deadline(now), preferred_successors=preferred_successors
            )
        )

    def transition_observer_to_unattached(self, now: float) -> list[Effect]:
        """An observer lost its leader: look for one again, same epoch. A replica that may no longer
        stand does the same from an election state: a Resigned leader or a Candidate (it removed
        itself) keeping itself as the epoch's vote, an Unattached or Prospective one the vote it gave."""
        state = self.state
        self._require(not self.may_stand and not isinstance(state, Leader), "Unattached (observer)")
        match state:
            case Resigned() | Candidate():
                return self._switch(Unattached(self.epoch, voted_id=self.local_id,
                                               voted_directory_id=self.local_key.directory_id))
            case Unattached(voted_id=voted, voted_directory_id=directory) | Prospective(
                leader_id=None, voted_id=voted, voted_directory_id=directory
            ):
                return self._switch(Unattached(self.epoch, voted_id=voted, voted_directory_id=directory))
            case Prospective(leader_id=leader) if leader is not None:
                return self._switch(Follower(self.epoch, leader))
        return self._switch(Unattached(self.epoch))

    # -- bookkeeping inside a state --------------------------------------------------------------

    def record_vote(self, voter_id: int, granted: bool) -> None:
        """Count a (pre-)vote answer in the current Prospective or Candidate state."""
        state = self.state
        if not isinstance(state, Prospective | Candidate) or voter_id not in self.voters:
            return
        if granted:
            self.state = attrs.evolve(
                state, granted=state.granted | {voter_id}, rejected=state.rejected - {voter_id}
            )
        elif voter_id not in state.granted:
            self.state = attrs.evolve(state, rejected=state.rejected | {voter_id})

    def has_majority_granted(self) -> bool:
        state = self.state
        return isinstance(state, Prospective | Candidate) and len(state.granted & self.voters) * 2 > len(self.voters)

    def has_majority_rejected(self) -> bool:
        state = self.state
        return isinstance(state, Prospective | Candidate) and (
            len(self.voters) - len(state.rejected)
        ) * 2 <= len(self.voters)

    def can_grant_vote(self, candidate_id: int, candidate_directory_id: Uuid | None = None) -> bool:
        """May a standard vote of the current epoch go to `candidate_id` (log check aside)? A vote
        given to a replica is not given again to another replica of the same id (KIP-853)."""
        state = self.state
        if not self.may_vote or self.leader_id is not None:
            return False
        match state:
            case Unattached(voted_id=voted, voted_directory_id=directory) | Prospective(
                voted_id=voted, voted_directory_id=directory
            ):
                if voted is None:
                    return True
                return voted == candidate_id and directory in (None, candidate_directory_id)
            case Candidate():
                return candidate_id == self.local_id
        return False

    def can_grant_prevote(self, has_fetched_from_leader: bool) -> bool:
        """May a pre-vote be granted (log check aside)? Not by a leader, nor by a follower that has
        heard from its leader in this epoch: that is what stops a rejoining node from disrupting a
        healthy quorum (KIP-996)."""
        state = self.state
        if not self.may_vote or isinstance(state, Leader):
            return False
        if isinstance(state, Follower):
            return not has_fetched_from_leader
        return True
