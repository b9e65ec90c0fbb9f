"""The core trusts no message (kraftpy.raft.validation and the checks in the handlers): one test per
rule, each showing that the refused message changes nothing — no transition, nothing persisted."""

from __future__ import annotations

import pytest

from kraftpy.raft import ElectionState, PersistQuorumState, SnapshotId
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import Follower, Prospective, Unattached
from kraftpy.raft.validation import MAX_EPOCH, RESPONSE_TYPES, request_error, response_is_valid
from tests.raft.test_rules import (
    CLUSTER,
    FIVE,
    VOTERS,
    answer,
    batch_bytes,
    durable,
    elect,
    log_with,
    make_core,
    request,
    sends,
)


def refused_with(message: Message, source: int, error: int, persisted: ElectionState = FIVE) -> None:
    """`message` from `source` to node 1 is answered `error` and changes nothing."""
    core, _ = make_core(1, persisted=persisted)
    state = core.state
    effects = request(core, source, message, 0.1)
    (send,) = sends(effects)
    assert (send.dest, type(send.message), send.message.error_code) == (source, RESPONSE_TYPES[type(message)], error)
    assert core.state == state and core.election_state == persisted and durable(effects) == []


# -- the probe's messages --------------------------------------------------------------------------


def test_a_vote_for_an_epoch_past_int32_is_refused_and_nothing_is_persisted() -> None:
    """The probe: candidate_epoch 2**31 + 5 was granted, persisted, and killed the node at every start."""
    refused_with(VoteRequest(CLUSTER, 1, 2**31 + 5, 2, 0, 0), 2, ErrorCode.INVALID_REQUEST)


def test_a_begin_quorum_epoch_naming_a_leader_that_is_not_a_voter_is_refused() -> None:
    """The probe: BeginQuorumEpoch naming leader 999 was accepted and written."""
    refused_with(BeginQuorumEpochRequest(CLUSTER, 1, 999, 9), 999, ErrorCode.INCONSISTENT_VOTER_SET)


# -- requests --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        VoteRequest(CLUSTER, 1, 9, 3, 0, 0),
        BeginQuorumEpochRequest(CLUSTER, 1, 3, 9),
        EndQuorumEpochRequest(CLUSTER, 3, 9),
        FetchRequest(CLUSTER, 3, 0, 5, 0, 0),
        FetchSnapshotRequest(CLUSTER, 3, 5, SnapshotId(5, 1), 0),
    ],
    ids=lambda m: type(m).__name__,
)
def test_a_request_whose_sender_is_not_the_node_it_names_is_refused(message: Message) -> None:
    refused_with(message, 2, ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize(
    "message",
    [VoteRequest(CLUSTER, 1, 9, 1, 0, 0), BeginQuorumEpochRequest(CLUSTER, 1, 1, 9), EndQuorumEpochRequest(CLUSTER, 1, 9)],
    ids=lambda m: type(m).__name__,
)
def test_a_request_claiming_to_come_from_the_receiver_itself_is_refused(message: Message) -> None:
    refused_with(message, 1, ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize(
    "message",
    [VoteRequest(CLUSTER, 1, 9, -3, 0, 0), BeginQuorumEpochRequest(CLUSTER, 1, -3, 9), FetchRequest(CLUSTER, -3, 0, 5, 0, 0)],
    ids=lambda m: type(m).__name__,
)
def test_a_negative_node_id_is_refused(message: Message) -> None:
    refused_with(message, -3, ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (VoteRequest(CLUSTER, 1, 9, 2, 0, 2**63), "last offset outside int64"),
        (VoteRequest(CLUSTER, 1, 9, 2, 9, 0), "last epoch not older than the epoch stood in"),
        (VoteRequest(CLUSTER, 2**31, 9, 2, 0, 0), "voter key outside int32"),
        (FetchRequest(CLUSTER, 2, 0, 5, 0, 6), "last fetched epoch newer than the epoch fetched in"),
        (FetchRequest(CLUSTER, 2, -1, 5, 0, 0), "negative max wait"),
        (FetchRequest(CLUSTER, 2, 0, 5, 0, 0, max_bytes=-1), "negative max bytes"),
        (FetchRequest(CLUSTER, 2, 0, 5, 2**70, 0), "fetch offset outside int64"),
        (FetchSnapshotRequest(CLUSTER, 2, 5, SnapshotId(-1, 1), 0), "negative snapshot end"),
        (FetchSnapshotRequest(CLUSTER, 2, 5, SnapshotId(5, 1), 2**63), "position outside int64"),
        (EndQuorumEpochRequest(CLUSTER, 2, 5, (999,)), "a successor that is not a voter"),
        (EndQuorumEpochRequest(CLUSTER, 2, 5, (3, 3)), "a successor twice"),
        (EndQuorumEpochRequest(CLUSTER, 2, 5, (2, 3)), "the resigning leader as its own successor"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_a_request_with_fields_that_cannot_be_true_is_refused(message: Message, reason: str) -> None:
    refused_with(message, 2, ErrorCode.INVALID_REQUEST)
    assert request_error(message, 2, 1, VOTERS) is not None


def test_a_vote_for_the_last_epoch_there_is_can_be_granted_but_no_election_goes_past_it() -> None:
    core, _ = make_core(1)
    effects = request(core, 2, VoteRequest(CLUSTER, 1, MAX_EPOCH, 2, 0, 0), 0.1)
    assert sends(effects)[0].message.vote_granted and core.epoch == MAX_EPOCH
    # Its election timeout: a pre-vote would be for epoch 2**31, which no message can carry.
    effects = core.tick(core.next_deadline())
    assert isinstance(core.state, Prospective) and sends(effects) == [] and durable(effects) == []
    core.tick(core.next_deadline())
    assert isinstance(core.state, Unattached) and core.epoch == MAX_EPOCH


def test_a_single_voter_in_the_last_epoch_waits_instead_of_crashing() -> None:
    core, effects = make_core(1, voters=frozenset({1}), persisted=ElectionState(MAX_EPOCH, voted_id=1))
    assert isinstance(core.state, Prospective) and core.epoch == MAX_EPOCH
    for _ in range(3):
        core.tick(core.next_deadline())
    assert core.epoch == MAX_EPOCH and not core.is_leader


# -- responses -------------------------------------------------------------------------------------


def test_a_response_naming_the_receiver_as_leader_of_a_newer_epoch_is_ignored() -> None:
    core, _ = make_core(1, persisted=FIVE)
    assert request(core, 2, VoteResponse(0, 1, 6, False), 0.1) == []
    assert core.state == Follower(5, 3)


@pytest.mark.parametrize(
    "response",
    [
        FetchResponse(0, 3, 5, high_watermark=2**63),
        BeginQuorumEpochResponse(0, -3, 6),
        VoteResponse(2**15, 3, 6, False),
    ],
    ids=lambda m: type(m).__name__,
)
def test_a_response_with_a_field_out_of_range_is_ignored(response: Message) -> None:
    assert not response_is_valid(response, VOTERS)
    core, _ = make_core(1, persisted=FIVE)
    assert request(core, 2, response, 0.1) == [] and core.state == Follower(5, 3)


def follower_after_first_fetch() -> tuple:
    """Node 2, follower of 1 in epoch 3, holding four committed records; and its next Fetch."""
    core, effects = make_core(2, persisted=ElectionState(3, leader_id=1))
    (first,) = sends(effects, FetchRequest)
    effects = answer(core, first, FetchResponse(0, 1, 3, high_watermark=4, records=batch_bytes(log_with((3, 4)))), 0.1)
    (second,) = sends(effects, FetchRequest)
    return core, second


@pytest.mark.parametrize(
    "response",
    [
        FetchResponse(0, 1, 3, diverging_epoch=EpochEndOffset(4, 9)),
        FetchResponse(0, 1, 3, diverging_epoch=EpochEndOffset(3, -1)),
        FetchResponse(0, 1, 3, snapshot_id=SnapshotId(2, 3)),
        FetchResponse(0, 1, 3, snapshot_id=SnapshotId(9, 4)),
        FetchResponse(0, 1, 3, diverging_epoch=EpochEndOffset(3, 9), snapshot_id=SnapshotId(9, 3)),
        FetchResponse(0, 1, 3, high_watermark=9, records=b"\x00garbage"),
    ],
    ids=["divergence-newer-than-the-leader", "negative-divergence", "snapshot-before-the-high-watermark",
         "snapshot-newer-than-the-leader", "divergence-and-snapshot", "records-that-are-no-batches"],
)
def test_a_fetch_answer_no_leader_could_give_is_dropped_and_the_fetch_retried(response: FetchResponse) -> None:
    core, second = follower_after_first_fetch()
    effects = answer(core, second, response, 0.2)
    assert sends(effects) == [] and durable(effects) == []
    assert (core.log.end_offset, core.high_watermark, core.state) == (4, 4, Follower(3, 1))
    (retry,) = sends(core.tick(core.next_deadline()), FetchRequest)
    assert retry.message.fetch_offset == 4


@pytest.mark.parametrize(
    ("size", "chunk"),
    [(-1, b"x"), (100, b"x" * 9), (3, b"abcd")],
    ids=["negative-size", "chunk-larger-than-asked", "chunk-past-the-size"],
)
def test_an_impossible_snapshot_chunk_restarts_the_download(size: int, chunk: bytes) -> None:
    core, effects = make_core(2, persisted=ElectionState(3, leader_id=1), snapshot_chunk_bytes=8)
    (first,) = sends(effects, FetchRequest)
    effects = answer(core, first, FetchResponse(0, 1, 3, snapshot_id=SnapshotId(10, 3)), 0.1)
    (ask,) = sends(effects, FetchSnapshotRequest)
    effects = answer(core, ask, FetchSnapshotResponse(0, 1, 3, SnapshotId(10, 3), size, 0, chunk), 0.2)
    assert sends(effects) == [] and core.log.latest_snapshot_id is None
    (again,) = sends(core.tick(core.next_deadline()))
    assert isinstance(again.message, FetchRequest)  # starts over: the leader names its snapshot again


def test_a_leader_ignores_a_fetch_past_its_end_for_its_high_watermark() -> None:
    core, _ = make_core(1)
    now, _ = elect(core)
    effects = request(core, 2, FetchRequest(CLUSTER, 2, 0, core.epoch, 10**9, core.epoch), now, cid=7)
    (send,) = sends(effects, FetchResponse)
    assert send.message.diverging_epoch is not None and core.high_watermark == 0


# -- the quorum-state a node starts from -----------------------------------------------------------


def test_a_persisted_leader_that_is_not_a_voter_gives_no_vote_in_its_epoch() -> None:
    """A file written before messages were checked: nobody led epoch 9; this node may have voted in
    it before, so it votes for no one in it now, and stands in epoch 10."""
    core, _ = make_core(1, persisted=ElectionState(9, leader_id=999))
    assert core.state == Unattached(9, voted_id=999, election_deadline=core.state.election_deadline)
    effects = request(core, 2, VoteRequest(CLUSTER, 1, 9, 2, 0, 0), 0.1)
    assert not sends(effects)[0].message.vote_granted and durable(effects) == []
    effects = core.tick(core.next_deadline())
    assert [s.message.candidate_epoch for s in sends(effects, VoteRequest)] == [10, 10]
    assert not any(isinstance(e, PersistQuorumState) for e in effects)


def test_observers_that_stopped_fetching_are_forgotten() -> None:
    """Fetches from ever new replica ids must not grow the leader's bookkeeping without bound: as in
    Kafka, an observer silent for five minutes is dropped (when another one appears, or on describe)."""
    core, _ = make_core(1, voters=frozenset({1}))
    assert core.is_leader
    end, epoch = core.log.end_offset, core.epoch
    for replica in range(100, 200):
        request(core, replica, FetchRequest(CLUSTER, replica, 0, epoch, end, epoch), 1.0)
    request(core, 7, FetchRequest(CLUSTER, 7, 0, epoch, end, epoch), 250.0)
    assert len(core.describe_quorum(250.0).observers) == 101
    request(core, 8, FetchRequest(CLUSTER, 8, 0, epoch, end, epoch), 302.0)
    assert [o.replica_id for o in core.describe_quorum(302.0).observers] == [7, 8]
    assert [o.replica_id for o in core.describe_quorum(552.0).observers] == [8]
