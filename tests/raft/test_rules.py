"""One scripted scenario per KRaft rule, each named after the rule it pins down.

Most drive a single `RaftCore` by hand (messages in, effects out); the multi-node ones use the
deterministic `SimCluster`.
"""

from __future__ import annotations

import random

import pytest

from kraftpy.raft import (
    Commit,
    ElectionState,
    FlushLog,
    LeaderChange,
    MemoryRaftLog,
    NotLeaderError,
    PersistQuorumState,
    RaftConfig,
    RaftCore,
    Received,
    Send,
    SnapshotId,
)
from kraftpy.raft.batch import parse_batches
from kraftpy.raft.control import decode_leader_change
from kraftpy.raft.core import error_response
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.log import RecordBatch
from kraftpy.raft.messages import (
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
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import Candidate, Follower, Leader, Prospective, Resigned, Unattached
from tests.helpers.raft_sim import SimCluster

CLUSTER = "c"
VOTERS = frozenset({1, 2, 3})


# -- helpers ---------------------------------------------------------------------------------------


def make_core(
    node_id: int = 1,
    voters: frozenset[int] = VOTERS,
    log: MemoryRaftLog | None = None,
    persisted: ElectionState | None = None,
    now: float = 0.0,
    wall_clock_ms: int = 1_700_000_000_000,
    **config: int,
) -> tuple[RaftCore, list]:
    raft_config = RaftConfig(node_id=node_id, voters=voters, cluster_id=CLUSTER, **config)
    core = RaftCore(raft_config, log or MemoryRaftLog(), rng=random.Random(node_id), now=now, persisted=persisted,
                    wall_clock=lambda: wall_clock_ms)
    return core, core.start(now)


def log_with(*batches: tuple[int, int]) -> MemoryRaftLog:
    """A flushed log of (epoch, record count) batches."""
    log = MemoryRaftLog()
    for epoch, count in batches:
        log.append_as_leader([b"r"] * count, epoch)
    log.flush(log.end_offset)
    return log


def batch_bytes(log: MemoryRaftLog) -> bytes:
    """The log's batches as a FetchResponse carries them."""
    return b"".join(batch.data for batch in log.read(log.start_offset, 1 << 30))


def sends(effects: list, kind: type | None = None) -> list[Send]:
    return [e for e in effects if isinstance(e, Send) and (kind is None or isinstance(e.message, kind))]


def answer(core: RaftCore, send: Send, response: Message, now: float) -> list:
    return core.step(Received(send.dest, send.correlation_id, response), now)


def request(core: RaftCore, source: int, message: Message, now: float, cid: int = 1) -> list:
    return core.step(Received(source, cid, message), now)


def the_response(effects: list, kind: type) -> Message:
    (send,) = sends(effects, kind)
    return send.message


def elect(core: RaftCore) -> tuple[float, list]:
    """Win pre-vote and vote with the fewest grants; returns (time, effects of the last step)."""
    now = core.next_deadline()
    effects = core.tick(now)
    while not core.is_leader:
        kind = "prevote" if isinstance(core.state, Prospective) else "vote"
        assert isinstance(core.state, Prospective | Candidate), core.state
        for send in sends(effects, VoteRequest):
            effects = answer(
                core, send, VoteResponse(0, -1, send.message.candidate_epoch - (kind == "prevote"), True), now
            )
            if not isinstance(core.state, Prospective if kind == "prevote" else Candidate):
                break
    return now, effects


def fetch(
    core: RaftCore, replica: int, offset: int, last_epoch: int, now: float, max_wait_ms: int = 0
) -> list:
    message = FetchRequest(CLUSTER, replica, max_wait_ms, core.epoch, offset, last_epoch)
    return request(core, replica, message, now, cid=1000 + replica)


def commits(effects: list) -> list[Commit]:
    return [e for e in effects if isinstance(e, Commit)]


# -- elections -------------------------------------------------------------------------------------


def test_election_timeout_is_randomized_between_t_and_2t() -> None:
    deadlines = []
    for seed in range(100):
        config = RaftConfig(node_id=1, voters=VOTERS, election_timeout_ms=1000)
        core = RaftCore(config, MemoryRaftLog(), rng=random.Random(seed), now=5.0)
        core.start(5.0)
        deadlines.append(core.next_deadline())
    assert all(6.0 <= d < 7.0 for d in deadlines)
    assert max(deadlines) - min(deadlines) > 0.5


def test_grants_one_vote_per_epoch() -> None:
    core, _ = make_core(1)
    first = request(core, 2, VoteRequest(CLUSTER, 1, 1, 2, 0, 0), 0.1)
    assert the_response(first, VoteResponse).vote_granted
    other = request(core, 3, VoteRequest(CLUSTER, 1, 1, 3, 0, 0), 0.2)
    assert not the_response(other, VoteResponse).vote_granted
    again = request(core, 2, VoteRequest(CLUSTER, 1, 1, 2, 0, 0), 0.3)
    assert the_response(again, VoteResponse).vote_granted
    assert core.election_state == ElectionState(1, voted_id=2)


def test_vote_is_persisted_before_the_response_leaves() -> None:
    core, _ = make_core(1)
    effects = request(core, 2, VoteRequest(CLUSTER, 1, 4, 2, 0, 0), 0.1)
    kinds = [type(e) for e in effects if isinstance(e, PersistQuorumState | Send)]
    assert kinds == [PersistQuorumState, Send]
    (persist,) = [e for e in effects if isinstance(e, PersistQuorumState)]
    assert persist == PersistQuorumState(ElectionState(4, voted_id=2))


@pytest.mark.parametrize(
    ("last_epoch", "last_offset", "granted"),
    [(2, 4, False), (1, 10, False), (2, 5, True), (2, 9, True), (3, 0, True)],
)
def test_rejects_vote_for_shorter_log(last_epoch: int, last_offset: int, granted: bool) -> None:
    # Our log: epoch 1 [0, 3), epoch 2 [3, 5).
    core, _ = make_core(1, log=log_with((1, 3), (2, 2)), persisted=ElectionState(2, leader_id=3))
    effects = request(core, 2, VoteRequest(CLUSTER, 1, 4, 2, last_epoch, last_offset), 0.1)
    assert the_response(effects, VoteResponse).vote_granted is granted
    assert core.epoch == 4  # the higher epoch is adopted either way (thesis §3.3)


def test_rejects_vote_with_stale_epoch() -> None:
    core, _ = make_core(1, persisted=ElectionState(5))
    effects = request(core, 2, VoteRequest(CLUSTER, 1, 4, 2, 9, 99), 0.1)
    response = the_response(effects, VoteResponse)
    assert (response.vote_granted, response.leader_epoch) == (False, 5)


def test_no_vote_in_an_epoch_whose_leader_is_known() -> None:
    core, _ = make_core(1, persisted=ElectionState(5, leader_id=3))
    effects = request(core, 2, VoteRequest(CLUSTER, 1, 5, 2, 9, 99), 0.1)
    assert not the_response(effects, VoteResponse).vote_granted


def test_prevote_does_not_bump_epoch() -> None:
    core, _ = make_core(1, persisted=ElectionState(3))
    effects = request(core, 2, VoteRequest(CLUSTER, 1, 9, 2, 0, 0, pre_vote=True), 0.1)
    assert the_response(effects, VoteResponse).vote_granted
    assert core.epoch == 3
    assert not any(isinstance(e, PersistQuorumState) for e in effects)


def test_prospective_bumps_epoch_only_after_majority_of_prevotes() -> None:
    core, _ = make_core(1, persisted=ElectionState(3))
    effects = core.tick(core.next_deadline())
    assert isinstance(core.state, Prospective) and core.epoch == 3
    prevotes = sends(effects, VoteRequest)
    assert {s.dest for s in prevotes} == {2, 3}
    assert all(s.message.pre_vote and s.message.candidate_epoch == 4 for s in prevotes)
    effects = answer(core, prevotes[0], VoteResponse(0, -1, 3, True), 2.5)
    assert isinstance(core.state, Candidate) and core.epoch == 4
    assert effects[0] == PersistQuorumState(ElectionState(4, voted_id=1))


def test_prevote_does_not_let_a_rejoining_node_disrupt_the_quorum() -> None:
    cluster = SimCluster(seed=7, voters=3)
    cluster.run_for(5.0)
    leader = cluster.leader()
    assert leader is not None and leader.core is not None
    epoch = leader.core.epoch
    isolated = next(n for n in cluster.nodes.values() if n is not leader)
    cluster.partition([{isolated.node_id}, set(cluster.nodes) - {isolated.node_id}])
    cluster.run_for(15.0)
    assert isolated.core is not None and isolated.core.epoch == epoch  # never bumped alone
    cluster.heal()
    cluster.run_for(5.0)
    assert cluster.leader() is leader and leader.core.epoch == epoch
    assert isinstance(isolated.core.state, Follower)


def test_follower_refuses_prevote_while_its_leader_answers() -> None:
    core, effects = make_core(2, persisted=ElectionState(3, leader_id=1))
    (fetch_send,) = sends(effects, FetchRequest)
    answer(core, fetch_send, FetchResponse(0, 1, 3, high_watermark=0, log_start_offset=0), 0.1)
    effects = request(core, 3, VoteRequest(CLUSTER, 2, 4, 3, 0, 0, pre_vote=True), 0.2)
    assert not the_response(effects, VoteResponse).vote_granted


def test_observer_never_votes() -> None:
    core, _ = make_core(9)
    effects = request(core, 2, VoteRequest(CLUSTER, 9, 1, 2, 0, 0), 0.1)
    response = the_response(effects, VoteResponse)
    assert (response.error_code, response.vote_granted) == (ErrorCode.INCONSISTENT_VOTER_SET, False)


def test_inconsistent_cluster_id_is_rejected() -> None:
    core, _ = make_core(1)
    effects = request(core, 2, VoteRequest("other", 1, 1, 2, 0, 0), 0.1)
    response = the_response(effects, VoteResponse)
    assert (response.error_code, response.vote_granted) == (ErrorCode.INCONSISTENT_CLUSTER_ID, False)
    elect(core)
    effects = request(core, 2, FetchRequest("other", 2, 0, core.epoch, 0, 0), 5.0)
    assert the_response(effects, FetchResponse).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


# -- becoming leader -----------------------------------------------------------------------------


def test_leader_appends_leader_change_record_when_elected() -> None:
    core, effects = make_core(1, voters=frozenset({1}))
    assert core.is_leader and core.epoch == 1
    (batch,) = core.log.read(0, 1 << 20)
    assert batch.is_control and batch.epoch == 1
    message = decode_leader_change(batch.records[0])
    assert (message.leader_id, message.voters, message.granting_voters) == (1, (1,), (1,))
    assert core.high_watermark == 1  # a single voter is its own majority


def test_begin_quorum_epoch_sent_by_new_leader_after_persist_and_flush() -> None:
    core, _ = make_core(1)
    _, effects = elect(core)
    kinds = [type(e) for e in effects if not isinstance(e, Commit)]
    assert kinds.index(PersistQuorumState) < kinds.index(FlushLog) < kinds.index(Send)
    begins = sends(effects, BeginQuorumEpochRequest)
    assert {s.dest for s in begins} == {2, 3}
    assert all(s.message.leader_id == 1 and s.message.leader_epoch == core.epoch for s in begins)


def test_begin_quorum_epoch_makes_a_voter_follow() -> None:
    core, _ = make_core(2)
    effects = request(core, 1, BeginQuorumEpochRequest(CLUSTER, 2, 1, 4), 0.1)
    assert core.state == Follower(4, 1)
    assert effects[0] == PersistQuorumState(ElectionState(4, leader_id=1))
    assert sends(effects, FetchRequest)[0].dest == 1


def test_restarted_leader_comes_back_resigned() -> None:
    core, _ = make_core(1, persisted=ElectionState(6, leader_id=1))
    assert isinstance(core.state, Resigned)
    with pytest.raises(NotLeaderError):
        core.propose([b"x"], 0.1)


def test_propose_on_follower_raises_not_leader_error_with_leader() -> None:
    core, _ = make_core(2, persisted=ElectionState(3, leader_id=1))
    with pytest.raises(NotLeaderError) as info:
        core.propose([b"x"], 0.1)
    assert (info.value.leader_id, info.value.epoch) == (1, 3)


# -- high watermark ------------------------------------------------------------------------------


def test_high_watermark_waits_for_current_epoch_entry() -> None:
    # Three uncommitted entries of epoch 1; node 1 wins epoch 2 and appends its leader-change at 3.
    core, _ = make_core(1, log=log_with((1, 3)), persisted=ElectionState(1))
    now, _ = elect(core)
    assert core.epoch == 2 and core.log.end_offset == 4
    effects = fetch(core, 2, 3, 1, now)  # follower has the old entries, not the new epoch's
    assert core.high_watermark == 0 and not commits(effects)
    effects = fetch(core, 2, 4, 2, now)
    assert core.high_watermark == 4
    (commit,) = commits(effects)
    assert [(b.base_offset, b.epoch) for b in commit.batches] == [(0, 1), (3, 2)]


def test_high_watermark_is_the_offset_on_a_majority_of_voters() -> None:
    voters = frozenset({1, 2, 3, 4, 5})
    core, _ = make_core(1, voters=voters)
    now, _ = elect(core)
    for _ in range(4):
        core.propose([b"x"], now)  # leader end 5
    fetch(core, 2, 5, 1, now)
    assert core.high_watermark == 0  # leader + 1 of 5
    fetch(core, 3, 2, 1, now)
    assert core.high_watermark == 2  # 5, 5, 2 -> majority has 2
    fetch(core, 4, 4, 1, now)
    assert core.high_watermark == 4


def test_high_watermark_never_goes_back() -> None:
    core, _ = make_core(1)
    now, _ = elect(core)
    core.propose([b"x"], now)
    fetch(core, 2, 2, 1, now)
    assert core.high_watermark == 2
    fetch(core, 2, 0, 0, now)  # a replica that lost its tail
    fetch(core, 3, 0, 0, now)
    assert core.high_watermark == 2


def test_observer_does_not_count_toward_high_watermark() -> None:
    core, _ = make_core(1)
    now, _ = elect(core)
    fetch(core, 9, 1, 1, now)
    assert core.high_watermark == 0
    fetch(core, 2, 1, 1, now)
    assert core.high_watermark == 1


def test_leader_counts_only_flushed_entries_and_flushes_before_commit() -> None:
    core, _ = make_core(1, voters=frozenset({1}))
    result = core.propose([b"a", b"b"], 1.0)
    kinds = [type(e) for e in result.effects]
    assert kinds == [FlushLog, Commit]
    assert result.effects[0] == FlushLog(3)


def test_commits_are_delivered_once_in_order() -> None:
    core, start = make_core(1, voters=frozenset({1}))
    delivered = [b for c in commits(start) for b in c.batches]
    for i in range(5):
        delivered += [b for c in commits(core.propose([b"%d" % i], 1.0 + i).effects) for b in c.batches]
    assert [b.base_offset for b in delivered] == list(range(6))


def test_follower_high_watermark_is_min_of_leader_and_own_log() -> None:
    core, effects = make_core(2, persisted=ElectionState(3, leader_id=1))
    (fetch_send,) = sends(effects, FetchRequest)
    records = batch_bytes(log_with((3, 2)))
    effects = answer(
        core, fetch_send, FetchResponse(0, 1, 3, high_watermark=10, log_start_offset=0, records=records), 0.1
    )
    assert core.high_watermark == 2
    kinds = [type(e) for e in effects]
    assert kinds.index(FlushLog) < kinds.index(Send)
    assert commits(effects)[0].high_watermark == 2


# -- log reconciliation --------------------------------------------------------------------------


def test_leader_answers_diverging_epoch() -> None:
    core, _ = make_core(1, log=log_with((1, 3)), persisted=ElectionState(2))
    now, _ = elect(core)  # epoch 3, leader-change at 3
    response = the_response(fetch(core, 2, 5, 2, now), FetchResponse)
    assert response.diverging_epoch == EpochEndOffset(1, 3)
    assert response.records == b""
    response = the_response(fetch(core, 3, 6, 3, now), FetchResponse)  # past our end in our epoch
    assert response.diverging_epoch == EpochEndOffset(3, 4)


def test_follower_truncates_on_diverging_epoch() -> None:
    log = log_with((1, 3), (2, 3))  # epoch 1 [0, 3), epoch 2 [3, 6)
    core, effects = make_core(2, log=log, persisted=ElectionState(3, leader_id=1))
    (first,) = sends(effects, FetchRequest)
    assert (first.message.fetch_offset, first.message.last_fetched_epoch) == (6, 2)
    effects = answer(core, first, FetchResponse(0, 1, 3, diverging_epoch=EpochEndOffset(1, 3)), 0.1)
    assert log.end_offset == 3
    (again,) = sends(effects, FetchRequest)
    assert (again.message.fetch_offset, again.message.last_fetched_epoch) == (3, 1)


def test_follower_never_truncates_below_its_high_watermark() -> None:
    """No leader can ask that (Leader Completeness): the answer is dropped, the fetch retried."""
    core, effects = make_core(2, persisted=ElectionState(3, leader_id=1))
    (first,) = sends(effects, FetchRequest)
    effects = answer(core, first, FetchResponse(0, 1, 3, high_watermark=4, records=batch_bytes(log_with((3, 4)))), 0.1)
    (second,) = sends(effects, FetchRequest)
    assert sends(answer(core, second, FetchResponse(0, 1, 3, diverging_epoch=EpochEndOffset(2, 1)), 0.2)) == []
    assert (core.log.end_offset, core.high_watermark) == (4, 4)
    (retry,) = sends(core.tick(core.next_deadline()), FetchRequest)
    assert retry.message.fetch_offset == 4


def test_leader_holds_an_empty_fetch_until_data_arrives() -> None:
    core, _ = make_core(1)
    now, _ = elect(core)
    # The first fetch moves the high watermark: answered at once so the follower learns it.
    assert len(sends(fetch(core, 2, 1, 1, now, max_wait_ms=500), FetchResponse)) == 1
    assert sends(fetch(core, 2, 1, 1, now, max_wait_ms=500)) == []
    result = core.propose([b"x"], now + 0.1)
    (response,) = [s.message for s in sends(result.effects, FetchResponse)]
    assert [b.base_offset for b in parse_batches(response.records)] == [1]
    fetch(core, 3, 2, 1, now + 0.2, max_wait_ms=500)  # moves the high watermark to 2: answered
    assert sends(fetch(core, 3, 2, 1, now + 0.2, max_wait_ms=500)) == []
    assert core.next_deadline() <= now + 0.7
    (expired,) = sends(core.tick(now + 0.7), FetchResponse)
    assert expired.dest == 3 and expired.message.records == b""


def test_a_fetch_from_the_end_is_answered_at_once_when_its_replica_was_not_told_the_high_watermark() -> None:
    """Node 2 got record 1 while the high watermark was 1; node 3's fetch then moved it to 2. Node 2's
    next fetch, from the log end, is answered at once with the new high watermark (held, node 2 would
    learn of the commit only when its long poll ran out); the one after that is held."""
    core, _ = make_core(1)
    now, _ = elect(core)
    fetch(core, 2, 1, 1, now, max_wait_ms=500)
    fetch(core, 3, 1, 1, now, max_wait_ms=500)
    assert core.high_watermark == 1
    assert sends(fetch(core, 2, 1, 1, now, max_wait_ms=500)) == []  # parked: nothing new
    result = core.propose([b"x"], now + 0.1)
    (data,) = [s.message for s in sends(result.effects, FetchResponse) if s.dest == 2]
    assert data.high_watermark == 1 and data.records
    assert len(sends(fetch(core, 3, 2, 1, now + 0.2, max_wait_ms=500), FetchResponse)) == 1
    assert core.high_watermark == 2
    (told,) = sends(fetch(core, 2, 2, 1, now + 0.2, max_wait_ms=500), FetchResponse)
    assert told.dest == 2 and told.message.high_watermark == 2 and told.message.records == b""
    assert sends(fetch(core, 2, 2, 1, now + 0.2, max_wait_ms=500)) == []


# -- snapshots -----------------------------------------------------------------------------------


def _leader_with_snapshot() -> tuple[RaftCore, SnapshotId]:
    core, _ = make_core(1, voters=frozenset({1}))
    for i in range(4):
        core.propose([b"v%d" % i], 1.0)
    core.log.flush(core.log.end_offset)  # what the driver does with the FlushLog effects
    result = core.create_snapshot(5, b"0123456789abcdef")
    assert result.effects == [FlushLog(5)]
    return core, result.snapshot_id


def test_fetch_below_log_start_returns_snapshot_id() -> None:
    core, snapshot_id = _leader_with_snapshot()
    assert snapshot_id == SnapshotId(5, 1)
    response = the_response(fetch(core, 9, 0, 0, 2.0), FetchResponse)
    assert response.snapshot_id == snapshot_id and response.records == b""
    response = the_response(fetch(core, 9, 5, 0, 2.0), FetchResponse)  # at the start, wrong epoch
    assert response.snapshot_id == snapshot_id


def test_fetch_snapshot_serves_chunks() -> None:
    core, snapshot_id = _leader_with_snapshot()
    req = FetchSnapshotRequest(CLUSTER, 9, core.epoch, snapshot_id, position=10, max_bytes=4)
    response = the_response(request(core, 9, req, 2.0), FetchSnapshotResponse)
    assert (response.size, response.position, response.unaligned_records) == (16, 10, b"abcd")
    missing = FetchSnapshotRequest(CLUSTER, 9, core.epoch, SnapshotId(3, 1), position=0)
    assert (
        the_response(request(core, 9, missing, 2.0), FetchSnapshotResponse).error_code
        == ErrorCode.SNAPSHOT_NOT_FOUND
    )


def test_follower_behind_log_start_downloads_snapshot_in_chunks() -> None:
    cluster = SimCluster(seed=3, voters=3, observers=1, snapshot_chunk_bytes=5)
    late = cluster.nodes[4]
    cluster.crash(late)
    cluster.run_for(4.0)
    for _ in range(10):
        cluster.propose()
        cluster.run_for(0.2)
    for node in cluster.nodes.values():
        if node.alive:
            cluster.take_snapshot(node, delete_prefix=True)
    start = cluster.leader().log.start_offset  # type: ignore[union-attr]
    assert start > 0
    cluster.restart(late)
    cluster.run_for(3.0)
    assert late.log.latest_snapshot_id is not None and late.log.start_offset >= start
    assert late.applied_end == cluster.checker.committed_end  # digest checked on load by the checker


def test_snapshot_must_be_committed_and_on_a_batch_boundary() -> None:
    core, _ = make_core(1, voters=frozenset({1}))
    core.propose([b"a", b"b"], 1.0)  # batch [1, 3)
    with pytest.raises(ValueError):
        core.create_snapshot(2, b"")
    with pytest.raises(ValueError):
        core.create_snapshot(4, b"")


# -- leaving an epoch ----------------------------------------------------------------------------


def test_leader_resigns_without_majority_fetches() -> None:
    """After 1.5 fetch timeouts (Kafka's check-quorum factor): a follower gives up on its leader after
    one, so a leader whose followers are only slow does not resign before they would."""
    core, _ = make_core(1)
    now, _ = elect(core)
    assert core.is_leader
    assert core.next_deadline() <= now + 3.0
    core.tick(now + 2.9)
    assert core.is_leader
    effects = core.tick(now + 3.0)
    assert isinstance(core.state, Resigned)
    assert {s.dest for s in sends(effects, EndQuorumEpochRequest)} == {2, 3}


def test_leader_with_majority_fetches_stays() -> None:
    core, _ = make_core(1)
    now, _ = elect(core)
    for i in range(1, 20):
        fetch(core, 2, 1, 1, now + i * 0.5)
        core.tick(now + i * 0.5)
    assert core.is_leader


def test_resign_sends_end_quorum_epoch_with_preferred_successors_by_end_offset() -> None:
    core, _ = make_core(1, voters=frozenset({1, 2, 3, 4, 5}))
    now, _ = elect(core)
    core.propose([b"x"], now)
    core.propose([b"y"], now)
    fetch(core, 4, 3, 1, now)
    fetch(core, 3, 2, 1, now)
    fetch(core, 2, 1, 1, now)
    effects = core.shutdown(now + 0.1)
    ends = sends(effects, EndQuorumEpochRequest)
    assert {s.dest for s in ends} == {2, 3, 4, 5}
    assert all(s.message.preferred_successors == (4, 3, 2, 5) for s in ends)
    assert isinstance(core.state, Resigned)


def test_end_quorum_epoch_first_successor_stands_at_once() -> None:
    core, _ = make_core(2, persisted=ElectionState(3, leader_id=1))
    effects = request(core, 1, EndQuorumEpochRequest(CLUSTER, 1, 3, (2, 3)), 0.1)
    assert isinstance(core.state, Prospective) and core.epoch == 3
    assert {s.dest for s in sends(effects, VoteRequest)} == {1, 3}


def test_end_quorum_epoch_later_successor_backs_off() -> None:
    core, _ = make_core(3, persisted=ElectionState(3, leader_id=1))
    request(core, 1, EndQuorumEpochRequest(CLUSTER, 1, 3, (2, 3)), 0.1)
    assert isinstance(core.state, Follower)
    deadline = core.next_deadline()
    assert deadline < 0.1 + 2.0
    core.tick(max(deadline, 0.1 + 0.5))
    assert isinstance(core.state, Prospective)


def test_follower_goes_prospective_after_fetch_timeout() -> None:
    core, _ = make_core(2, persisted=ElectionState(3, leader_id=1))
    core.tick(1.9)
    assert isinstance(core.state, Follower)
    effects = core.tick(2.0)
    assert core.state == Prospective(
        3, election_deadline=core.state.election_deadline, leader_id=1, granted=frozenset({2})
    )
    assert not any(isinstance(e, PersistQuorumState) for e in effects)
    assert all(s.message.pre_vote for s in sends(effects, VoteRequest))


def test_lost_prevote_goes_back_to_following() -> None:
    core, _ = make_core(2, persisted=ElectionState(3, leader_id=1))
    effects = core.tick(2.0)
    for send in sends(effects, VoteRequest):
        effects = answer(core, send, VoteResponse(0, 1, 3, False), 2.1)
    assert core.state == Follower(3, 1)


def test_observer_finds_the_leader_and_follows_it() -> None:
    cluster = SimCluster(seed=11, voters=3, observers=2)
    cluster.run_for(6.0)
    leader = cluster.leader()
    assert leader is not None
    for nid in (4, 5):
        core = cluster.nodes[nid].core
        assert core is not None and core.state == Follower(leader.core.epoch, leader.node_id)  # type: ignore[union-attr]
        assert not isinstance(core.state, Unattached | Leader)


def test_describe_quorum_reports_voters_and_observers() -> None:
    core, _ = make_core(1)
    now, _ = elect(core)
    fetch(core, 2, 1, 1, now + 0.5)
    fetch(core, 9, 0, 0, now + 0.6)
    response = the_response(request(core, 77, DescribeQuorumRequest(), now + 1.0), DescribeQuorumResponse)
    assert (response.error_code, response.leader_id, response.leader_epoch) == (0, 1, core.epoch)
    assert response.high_watermark == 1
    by_id = {r.replica_id: r for r in response.current_voters}
    assert by_id[1].log_end_offset == 1 and by_id[2].log_end_offset == 1 and by_id[3].log_end_offset == -1
    assert by_id[2].last_fetch_timestamp == int((now + 0.5) * 1000)
    assert by_id[3].last_fetch_timestamp == -1
    assert [r.replica_id for r in response.observers] == [9]
    follower, _ = make_core(2, persisted=ElectionState(3, leader_id=1))
    not_leader = the_response(request(follower, 77, DescribeQuorumRequest(), 0.1), DescribeQuorumResponse)
    assert (not_leader.error_code, not_leader.leader_id) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 1)


def test_clock_going_back_fires_no_timer_early() -> None:
    core, _ = make_core(2, persisted=ElectionState(3, leader_id=1), now=10.0)
    core.tick(11.0)
    core.tick(3.0)  # a clock that jumps back stands still
    assert isinstance(core.state, Follower)
    core.tick(12.0)
    assert isinstance(core.state, Prospective)


def test_follower_of_an_unreachable_leader_stands_for_election_within_an_election_timeout() -> None:
    core, effects = make_core(2, persisted=ElectionState(3, leader_id=1))
    (fetch_send,) = sends(effects, FetchRequest)
    effects = answer(core, fetch_send, FetchResponse(0, 1, 3, high_watermark=0, log_start_offset=0), 0.1)
    (fetch_send,) = sends(effects + core.tick(0.1), FetchRequest)
    core.unreachable(1, fetch_send.correlation_id, 0.2)  # connection refused: the leader's process is gone
    # It now grants pre-votes (it no longer vouches for the leader) ...
    effects = request(core, 3, VoteRequest(CLUSTER, 2, 4, 3, 0, 0, pre_vote=True), 0.25)
    assert the_response(effects, VoteResponse).vote_granted
    # ... and goes Prospective within one election timeout (1 s), not after the 2 s fetch timeout.
    now = 0.25
    while not isinstance(core.state, Prospective):
        now = core.next_deadline()
        core.tick(now)
    assert now < 0.2 + 1.0


def test_unreachable_non_leader_changes_nothing() -> None:
    core, effects = make_core(2, persisted=ElectionState(3, leader_id=1))
    (fetch_send,) = sends(effects, FetchRequest)
    assert core.unreachable(3, fetch_send.correlation_id, 0.1) == []
    assert isinstance(core.state, Follower)


def test_a_follower_that_only_lost_its_own_link_cannot_disrupt_a_live_leader() -> None:
    cluster = SimCluster(seed=11, voters=3)
    cluster.run_for(5.0)
    leader = cluster.leader()
    assert leader is not None and leader.core is not None
    epoch = leader.core.epoch
    cut = next(n for n in cluster.nodes.values() if n is not leader)
    cluster.block_one_way(cut.node_id, leader.node_id)  # cut's requests never reach the leader ...
    for _ in range(30):
        assert cut.core is not None
        fetch = cut.core._fetch
        if fetch is not None and fetch.in_flight is not None and fetch.target == leader.node_id:
            # ... and its transport says so at once (connection refused).
            cluster.apply(cut, cut.core.unreachable(leader.node_id, fetch.in_flight, cluster.local_time(cut)))
        cluster.run_for(0.5)
    # The third voter still hears from the leader and refuses cut's pre-votes: nothing changed.
    assert cluster.leader() is leader and leader.core.epoch == epoch
    assert cut.core is not None and cut.core.epoch == epoch


# -- the epoch prelude (one for every message, before any handler) -------------------------------

FIVE = ElectionState(5, leader_id=3)


def requests_of_epoch(epoch: int) -> list[Message]:
    return [
        VoteRequest(CLUSTER, 1, epoch, 2, 0, 0),
        VoteRequest(CLUSTER, 1, epoch, 2, 0, 0, pre_vote=True),
        BeginQuorumEpochRequest(CLUSTER, 1, 2, epoch),
        EndQuorumEpochRequest(CLUSTER, 2, epoch, (1,)),
        FetchRequest(CLUSTER, 2, 0, epoch, 0, 0),
        FetchSnapshotRequest(CLUSTER, 2, epoch, SnapshotId(5, 1), 0),
    ]


def responses_of_epoch(epoch: int, leader_id: int) -> list[Message]:
    return [
        VoteResponse(0, leader_id, epoch, True),
        BeginQuorumEpochResponse(0, leader_id, epoch),
        EndQuorumEpochResponse(0, leader_id, epoch),
        FetchResponse(0, leader_id, epoch),
        FetchSnapshotResponse(0, leader_id, epoch),
    ]


def durable(effects: list) -> list:
    return [e for e in effects if isinstance(e, PersistQuorumState | FlushLog)]


@pytest.mark.parametrize("message", requests_of_epoch(4), ids=lambda m: type(m).__name__)
def test_a_request_of_an_older_epoch_is_fenced_and_changes_nothing(message: Message) -> None:
    core, _ = make_core(1, persisted=FIVE)
    state = core.state
    effects = request(core, 2, message, 0.1)
    (send,) = sends(effects)
    assert (send.message.error_code, send.message.leader_id, send.message.leader_epoch) == (
        ErrorCode.FENCED_LEADER_EPOCH, 3, 5)
    assert core.state == state and durable(effects) == []


@pytest.mark.parametrize("epoch", [-1, 2**31])
@pytest.mark.parametrize("index", range(6))
def test_an_epoch_outside_int32_is_refused_before_it_touches_state(epoch: int, index: int) -> None:
    core, _ = make_core(1, persisted=FIVE)
    state = core.state
    effects = request(core, 2, requests_of_epoch(epoch)[index], 0.1)
    (send,) = sends(effects)
    assert send.message.error_code == ErrorCode.INVALID_REQUEST
    assert core.state == state and durable(effects) == []


@pytest.mark.parametrize("index", range(5))
def test_a_response_with_an_epoch_outside_int32_is_ignored(index: int) -> None:
    core, _ = make_core(1, persisted=FIVE)
    state = core.state
    assert request(core, 2, responses_of_epoch(2**31, 2)[index], 0.1) == []
    assert core.state == state


@pytest.mark.parametrize(
    "message",
    [VoteRequest(CLUSTER, 1, 9, 7, 0, 0), BeginQuorumEpochRequest(CLUSTER, 1, 7, 9),
     EndQuorumEpochRequest(CLUSTER, 7, 9, (1,))],
    ids=lambda m: type(m).__name__,
)
def test_a_candidate_or_leader_that_is_not_a_voter_is_refused(message: Message) -> None:
    core, _ = make_core(1, persisted=FIVE)
    state = core.state
    effects = request(core, 7, message, 0.1)
    assert the_response(effects, type(error_response_for(message))).error_code == ErrorCode.INCONSISTENT_VOTER_SET
    assert core.state == state and core.epoch == 5 and durable(effects) == []


def error_response_for(message: Message) -> Message:
    return error_response(message, 0, -1, 0)


@pytest.mark.parametrize("index", range(5))
def test_a_response_naming_a_leader_that_is_not_a_voter_is_ignored(index: int) -> None:
    core, _ = make_core(1, persisted=FIVE)
    state = core.state
    assert request(core, 7, responses_of_epoch(9, 7)[index], 0.1) == []
    assert core.state == state


@pytest.mark.parametrize(
    "message",
    [FetchRequest(CLUSTER, 2, 0, 9, 0, 0), FetchSnapshotRequest(CLUSTER, 2, 9, SnapshotId(5, 1), 0)],
    ids=lambda m: type(m).__name__,
)
def test_a_fetch_of_a_newer_epoch_is_answered_unknown_leader_epoch_without_a_transition(message: Message) -> None:
    core, _ = make_core(1, persisted=FIVE)
    state = core.state
    effects = request(core, 2, message, 0.1)
    (send,) = sends(effects)
    assert (send.message.error_code, send.message.leader_epoch) == (ErrorCode.UNKNOWN_LEADER_EPOCH, 5)
    assert core.state == state and durable(effects) == []


def test_a_prevote_of_a_newer_epoch_changes_no_state() -> None:
    core, _ = make_core(1, persisted=FIVE)
    state = core.state
    effects = request(core, 2, VoteRequest(CLUSTER, 1, 9, 2, 0, 0, pre_vote=True), 0.1)
    assert the_response(effects, VoteResponse).error_code == ErrorCode.NONE
    assert core.state == state and durable(effects) == []


@pytest.mark.parametrize("leader_id", [2, -1])
@pytest.mark.parametrize("index", range(5))
def test_a_response_of_a_newer_epoch_makes_the_node_follow_the_leader_it_names(leader_id: int, index: int) -> None:
    core, _ = make_core(1, persisted=FIVE)
    request(core, 2, responses_of_epoch(7, leader_id)[index], 0.1)
    assert core.epoch == 7
    assert core.state == Follower(7, 2) if leader_id == 2 else isinstance(core.state, Unattached)
    assert core.election_state == ElectionState(7, leader_id=2 if leader_id == 2 else None)


def test_a_request_of_a_newer_epoch_moves_the_node_by_its_type() -> None:
    core, _ = make_core(1, persisted=FIVE)
    request(core, 2, VoteRequest(CLUSTER, 1, 6, 2, 0, 0), 0.1)
    assert core.state.epoch == 6 and isinstance(core.state, Unattached)  # and voted, the log being empty
    request(core, 2, BeginQuorumEpochRequest(CLUSTER, 1, 2, 7), 0.2)
    assert core.state == Follower(7, 2)


def test_end_quorum_epoch_of_a_newer_epoch_follows_the_resigning_leader_then_stands_first() -> None:
    core, _ = make_core(2, persisted=ElectionState(3, leader_id=1))
    effects = request(core, 1, EndQuorumEpochRequest(CLUSTER, 1, 4, (2, 3)), 0.1)
    assert the_response(effects, EndQuorumEpochResponse).error_code == ErrorCode.NONE
    assert isinstance(core.state, Prospective) and core.epoch == 4  # followed 1 in epoch 4, then stood
    assert core.election_state == ElectionState(4, leader_id=1)


def test_a_stale_vote_response_is_not_counted() -> None:
    core, _ = make_core(1, voters=frozenset({1, 2, 3, 4, 5}), persisted=ElectionState(3))
    effects = core.tick(core.next_deadline())  # Prospective in 3: pre-votes for 4
    prevotes = sends(effects, VoteRequest)
    for send in prevotes[:2]:
        effects = answer(core, send, VoteResponse(0, -1, 2, True), 2.5)  # an older epoch's answer
    assert isinstance(core.state, Prospective)
    for send in prevotes[2:]:
        answer(core, send, VoteResponse(0, -1, 3, True), 2.6)
    assert isinstance(core.state, Candidate)


def test_a_vote_request_claiming_a_last_epoch_not_below_its_own_is_invalid() -> None:
    core, _ = make_core(1, persisted=FIVE)
    effects = request(core, 2, VoteRequest(CLUSTER, 1, 6, 2, 6, 10), 0.1)
    assert the_response(effects, VoteResponse).error_code == ErrorCode.INVALID_REQUEST
    assert core.epoch == 5


def test_an_observer_finds_the_leader_in_any_same_epoch_answer() -> None:
    core, effects = make_core(9, persisted=ElectionState(4))
    (fetch_send,) = sends(effects, FetchRequest)
    effects = answer(core, fetch_send, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 4), 0.1)
    assert core.state == Follower(4, 2)
    assert [s.dest for s in sends(effects, FetchRequest)] == [2]


# -- replicated bytes ------------------------------------------------------------------------------


def test_followers_append_the_leaders_bytes_as_they_are() -> None:
    leader, _ = make_core(1, wall_clock_ms=111)
    now, _ = elect(leader)
    leader.propose([b"x", b"y"], now)
    follower, effects = make_core(2, persisted=ElectionState(leader.epoch, leader_id=1), wall_clock_ms=999)
    (fetch_send,) = sends(effects, FetchRequest)
    response = the_response(fetch(leader, 2, 0, 0, now), FetchResponse)
    effects = answer(follower, fetch_send, response, now)
    assert [b.data for b in follower.log.read(0, 1 << 20)] == [b.data for b in leader.log.read(0, 1 << 20)]
    assert [b.timestamp_ms for b in follower.log.read(0, 1 << 20)] == [111, 111]
    assert response.records == b"".join(b.data for b in leader.log.read(0, 1 << 20))
    kinds = [type(e) for e in effects]
    assert kinds.index(FlushLog) < kinds.index(Send)


def _follower_fetching() -> tuple[RaftCore, Send]:
    core, effects = make_core(2, persisted=ElectionState(3, leader_id=1))
    (fetch_send,) = sends(effects, FetchRequest)
    return core, fetch_send


@pytest.mark.parametrize(
    "records",
    [
        lambda good: good[:-1],  # a partial batch
        lambda good: good[:30] + bytes([good[30] ^ 1]) + good[31:],  # a flipped bit under the CRC
        lambda good: RecordBatch.build([b"r"], base_offset=0, epoch=4).data,  # an epoch past the leader's
        lambda good: RecordBatch.build([b"r"], base_offset=0, epoch=3).data
        + RecordBatch.build([b"r"], base_offset=1, epoch=2).data,  # an epoch going back
        lambda good: RecordBatch.build([b"r"], base_offset=0, epoch=3).data
        + RecordBatch.build([b"r"], base_offset=5, epoch=3).data,  # a gap
    ],
    ids=["partial", "crc", "future-epoch", "epoch-back", "gap"],
)
def test_a_follower_refuses_records_it_cannot_trust(records) -> None:
    core, fetch_send = _follower_fetching()
    good = RecordBatch.build([b"r"], base_offset=0, epoch=3).data
    effects = answer(core, fetch_send, FetchResponse(0, 1, 3, high_watermark=1, records=records(good)), 0.1)
    assert core.log.end_offset == 0 and core.high_watermark == 0
    assert sends(effects, FetchRequest) == []  # retried after the back-off
    (retry,) = sends(core.tick(core.next_deadline()), FetchRequest)
    answer(core, retry, FetchResponse(0, 1, 3, high_watermark=1, records=good), 0.2)
    assert core.log.end_offset == 1 and core.high_watermark == 1


# -- the accumulator lives in the leader -----------------------------------------------------------


def test_proposals_within_the_linger_time_are_appended_as_one_batch() -> None:
    core, _ = make_core(1, voters=frozenset({1}), append_linger_ms=50)
    assert core.is_leader and core.next_offset == 1
    results = [core.propose([b"a%d" % i, b"b%d" % i], 1.0 + i * 0.01) for i in range(3)]
    assert [(r.base_offset, r.last_offset, r.effects) for r in results] == [(1, 2, []), (3, 4, []), (5, 6, [])]
    assert core.log.end_offset == 1 and core.next_offset == 7
    assert core.next_deadline() == pytest.approx(1.05)
    effects = core.tick(1.05)
    assert [type(e) for e in effects] == [FlushLog, Commit]
    (batch,) = commits(effects)[0].batches
    assert (batch.base_offset, batch.records) == (1, (b"a0", b"b0", b"a1", b"b1", b"a2", b"b2"))


def test_a_leader_change_drops_what_was_accumulated() -> None:
    core, _ = make_core(1, append_linger_ms=50)
    now, _ = elect(core)
    result = core.propose([b"lost"], now)
    assert result.base_offset == 1 and core.next_offset == 2
    request(core, 2, BeginQuorumEpochRequest(CLUSTER, 1, 2, core.epoch + 1), now + 0.01)
    assert isinstance(core.state, Follower)
    core.tick(now + 1.0)
    assert core.log.end_offset == 1 and core.next_offset == 1
    with pytest.raises(NotLeaderError):
        core.propose([b"x"], now + 1.0)


def test_a_proposal_larger_than_a_batch_is_refused() -> None:
    core, _ = make_core(1, voters=frozenset({1}), max_batch_bytes=1000)
    with pytest.raises(ValueError):
        core.propose([b"x" * 1000], 1.0)
    assert core.propose([b"x" * 100], 1.0).base_offset == 1


def test_a_restart_as_follower_of_a_known_leader_tells_the_listener() -> None:
    """The persisted election state names the leader: the first effects say so (LeaderChange), as
    an election would, so a restarted controller knows its leader before the next election."""
    _, effects = make_core(1, persisted=ElectionState(5, leader_id=3))
    assert LeaderChange(5, 3) in effects
    _, effects = make_core(1, persisted=ElectionState(5))  # no leader known: nothing to tell
    assert not any(isinstance(e, LeaderChange) for e in effects)
