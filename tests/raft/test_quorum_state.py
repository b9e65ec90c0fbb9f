"""The transition graph of kraftpy.raft.quorum_state: legal moves, persistence, refusals."""

from __future__ import annotations

import random

import pytest

from kraftpy.raft.effects import ElectionState, LeaderChange, PersistQuorumState
from kraftpy.raft.errors import IllegalTransitionError
from kraftpy.raft.quorum_state import (
    Candidate,
    Follower,
    Leader,
    Prospective,
    QuorumState,
    Resigned,
    Unattached,
)

VOTERS = frozenset({1, 2, 3})


def quorum(persisted: ElectionState | None = None, local_id: int = 1) -> QuorumState:
    return QuorumState(local_id, VOTERS, 1.0, random.Random(0), persisted, now=0.0)


def persisted(effects: list) -> list[ElectionState]:
    return [e.state for e in effects if isinstance(e, PersistQuorumState)]


def test_fresh_voter_is_unattached_with_a_randomized_deadline_in_t_to_2t() -> None:
    deadlines = [QuorumState(1, VOTERS, 1.0, random.Random(s), None, 10.0).state for s in range(200)]
    assert all(isinstance(s, Unattached) and 11.0 <= s.election_deadline < 12.0 for s in deadlines)
    assert len({s.election_deadline for s in deadlines}) > 150


def test_restart_restores_the_persisted_role() -> None:
    assert quorum(ElectionState(4, leader_id=2)).state == Follower(4, 2)
    assert isinstance(quorum(ElectionState(4, leader_id=1)).state, Resigned)
    assert quorum(ElectionState(4, voted_id=3)).state.voted_id == 3  # type: ignore[union-attr]
    observer = QuorumState(9, VOTERS, 1.0, random.Random(0), None, 0.0)
    assert observer.state == Unattached(0, election_deadline=None)


def test_full_election_path_and_what_is_persisted() -> None:
    q = quorum()
    assert persisted(q.transition_to_prospective(0.0)) == []  # pre-vote writes nothing
    assert isinstance(q.state, Prospective)
    q.record_vote(2, True)
    assert q.has_majority_granted()
    assert persisted(q.transition_to_candidate(0.0)) == [ElectionState(1, voted_id=1)]
    q.record_vote(3, True)
    effects = q.transition_to_leader()
    assert persisted(effects) == [ElectionState(1, leader_id=1)]
    assert LeaderChange(1, 1) in effects
    assert persisted(q.transition_to_resigned((2, 3), 0.0)) == []
    assert persisted(q.transition_to_prospective(0.0)) == [ElectionState(1, voted_id=1)]


def test_leader_needs_a_majority() -> None:
    q = quorum()
    q.transition_to_prospective(0.0)
    q.record_vote(2, True)
    q.transition_to_candidate(0.0)
    with pytest.raises(IllegalTransitionError):
        q.transition_to_leader()


def test_epoch_never_goes_back() -> None:
    q = quorum(ElectionState(5))
    with pytest.raises(IllegalTransitionError):
        q.transition_to_unattached(4, 0.0)
    with pytest.raises(IllegalTransitionError):
        q.transition_to_follower(4, 2)


def test_never_two_leaders_in_one_epoch() -> None:
    q = quorum(ElectionState(5, leader_id=2))
    with pytest.raises(IllegalTransitionError):
        q.transition_to_follower(5, 3)


def test_one_vote_per_epoch() -> None:
    q = quorum(ElectionState(5))
    assert persisted(q.transition_to_unattached_voted(2, 0.0)) == [ElectionState(5, voted_id=2)]
    assert not q.can_grant_vote(3)
    assert q.can_grant_vote(2)
    with pytest.raises(IllegalTransitionError):
        q.transition_to_unattached_voted(3, 0.0)


def test_no_vote_once_the_epoch_has_a_leader() -> None:
    q = quorum(ElectionState(5, leader_id=2))
    q.transition_to_prospective(0.0)
    assert not q.can_grant_vote(3)


def test_lost_prevote_returns_to_the_known_leader_without_writing() -> None:
    q = quorum(ElectionState(5, leader_id=2))
    q.transition_to_prospective(0.0)
    assert persisted(q.transition_after_lost_prevote(0.0)) == []
    assert q.state == Follower(5, 2)


def test_candidate_times_out_into_prospective_keeping_its_vote() -> None:
    q = quorum()
    q.transition_to_prospective(0.0)
    q.record_vote(2, True)
    q.transition_to_candidate(0.0)
    assert isinstance(q.state, Candidate)
    assert persisted(q.transition_to_prospective(0.0)) == []
    assert not q.can_grant_vote(2)


def test_observers_never_stand() -> None:
    q = QuorumState(9, VOTERS, 1.0, random.Random(0), None, 0.0)
    with pytest.raises(IllegalTransitionError):
        q.transition_to_prospective(0.0)
    q.transition_to_follower(1, 2)
    q.transition_observer_to_unattached(0.0)
    assert q.state == Unattached(1)
    assert not q.can_grant_vote(2)


def test_prevote_refused_by_leader_and_by_follower_that_heard_from_its_leader() -> None:
    q = quorum(ElectionState(5, leader_id=2))
    assert not q.can_grant_prevote(has_fetched_from_leader=True)
    assert q.can_grant_prevote(has_fetched_from_leader=False)
    q2 = quorum()
    q2.transition_to_prospective(0.0)
    q2.record_vote(2, True)
    q2.transition_to_candidate(0.0)
    q2.record_vote(2, True)
    q2.transition_to_leader()
    assert isinstance(q2.state, Leader)
    assert not q2.can_grant_prevote(False)
