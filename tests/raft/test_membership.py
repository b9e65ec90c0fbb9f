"""Dynamic quorums (KIP-853), one rule per test: voters in the log and in snapshots, replicas told
apart by directory id, one voter change at a time taking effect when appended, the leader removing
itself, UpdateVoter, and the kraft.version upgrade of a static quorum.

Single cores are driven by hand where a rule is about one node; the rest run on the deterministic
`SimCluster` (tests/helpers/raft_sim.py) in membership mode, with no faults unless the test makes one.
"""

from __future__ import annotations

import random

import msgpack
import pytest

from kraftpy.ids import Uuid
from kraftpy.protocol.records import ControlRecordType
from kraftpy.raft import ElectionState, MemoryRaftLog, RaftConfig, RaftCore, Received, Send
from kraftpy.raft.effects import VoterChangeDone
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.log import SnapshotId
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    UpdateVoterRequest,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import Follower, Leader, Resigned, Unattached
from kraftpy.raft.quorum_state_file import decode_quorum_state, encode_quorum_state
from kraftpy.raft.snapshot_control import BOOTSTRAP_SNAPSHOT_ID, control_batch, split_snapshot
from kraftpy.raft.voter_history import VoterHistory
from kraftpy.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    ControlRecordError,
    Endpoint,
    ReplicaKey,
    VoterNode,
    VoterSet,
    decode_kraft_version_record,
    decode_voters_record,
    encode_kraft_version_record,
    encode_voters_record,
)
from tests.helpers.raft_sim import SimCluster, SimNode

CLUSTER = "sim-cluster"
D1, D2, D3, D4 = (Uuid(bytes([i]) * 16) for i in range(1, 5))


def node(nid: int, directory: Uuid | None, port: int = 0) -> VoterNode:
    return VoterNode(ReplicaKey(nid, directory), (Endpoint("CONTROLLER", f"h{nid}", port or 9000 + nid),))


THREE = VoterSet((node(1, D1), node(2, D2), node(3, D3)))


# -- the voter set and its records -----------------------------------------------------------------


def test_a_voter_set_changes_one_voter_at_a_time_and_refuses_what_is_not_one() -> None:
    four = THREE.add(node(4, D4))
    assert four is not None and four.ids == {1, 2, 3, 4} and four.majority == 3
    assert THREE.add(node(2, D4)) is None  # that id votes already
    assert THREE.remove(ReplicaKey(2, D2)) == VoterSet((node(1, D1), node(3, D3)))
    assert THREE.remove(ReplicaKey(2, D4)) is None  # another replica of node 2
    assert VoterSet((node(1, D1),)).remove(ReplicaKey(1, D1)) is None  # the last voter
    moved = THREE.update(node(2, D2, port=7777))
    assert moved is not None and moved.node(2).endpoint("CONTROLLER") == Endpoint("CONTROLLER", "h2", 7777)
    assert THREE.update(node(2, D4)) is None


def test_sets_one_change_apart_overlap_and_two_changes_apart_may_not() -> None:
    four = THREE.add(node(4, D4))
    assert four is not None and THREE.overlaps(four) and four.overlaps(THREE)
    two = THREE.remove(ReplicaKey(3, D3))
    assert two is not None and THREE.overlaps(two)
    five = four.add(node(5, None))
    assert five is not None and not THREE.overlaps(five)  # {1, 2} and {3, 4, 5} are both majorities
    # A static voter (no directory id) is its id's replica.
    assert VoterSet.of_ids({1, 2, 3}).overlaps(THREE)


def test_a_replica_is_its_node_id_and_directory_id() -> None:
    assert THREE.is_voter(ReplicaKey(2, D2)) and not THREE.is_voter(ReplicaKey(2, D4))
    static = VoterSet.of_ids({1, 2, 3})
    assert static.is_voter(ReplicaKey(2, D4))  # kraft.version 0: any directory of voter 2


def test_the_control_records_round_trip_and_refuse_what_they_do_not_hold() -> None:
    assert decode_voters_record(encode_voters_record(THREE)) == THREE
    assert decode_kraft_version_record(encode_kraft_version_record(1)) == 1
    record = msgpack.unpackb(encode_voters_record(THREE))
    bad = [
        b"\xc1",
        msgpack.packb([1, 2]),
        msgpack.packb({**record, "version": 7}),
        msgpack.packb({**record, "voters": []}),
        msgpack.packb({**record, "extra": 1}),
        msgpack.packb({**record, "voters": [{**record["voters"][0], "voter_id": -1}]}),
        msgpack.packb({**record, "voters": [{**record["voters"][0], "voter_directory_id": b"short"}]}),
        msgpack.packb({**record, "voters": [record["voters"][0], record["voters"][0]]}),
        msgpack.packb({**record, "voters": [{**record["voters"][0], "endpoints": [{"name": "C", "host": "h",
                                                                                    "port": 70000}]}]}),
    ]
    for value in bad:
        with pytest.raises(ControlRecordError):
            decode_voters_record(value)
    with pytest.raises(ControlRecordError):
        decode_kraft_version_record(msgpack.packb({"version": 0, "kraft_version": "1"}))


def test_the_history_follows_appends_and_truncations_and_answers_by_offset() -> None:
    history = VoterHistory(static=None)
    history.add_kraft_version(-1, 1)
    history.add_voters(-1, THREE)
    four = THREE.add(node(4, D4))
    assert four is not None
    history.add_voters(10, four)
    assert history.voters == four and history.latest_offset == 10
    assert history.voters_at(9) == THREE and history.voters_at(10) == four
    assert history.truncate_new(10)  # the uncommitted add is cut: the previous set is back
    assert history.voters == THREE and history.latest_offset == -1
    history.add_voters(12, four)
    history.truncate_old(20)
    assert history.voters_at(19) == four


def test_a_snapshot_carries_the_voters_in_a_control_batch_before_the_state_machine_bytes() -> None:
    snapshot_id = SnapshotId(42, 3)
    data = control_batch(KRAFT_VERSION_DYNAMIC, THREE, snapshot_id) + b"state machine bytes"
    control, payload = split_snapshot(data)
    assert control is not None and (control.kraft_version, control.voters) == (1, THREE)
    assert payload == b"state machine bytes"
    assert split_snapshot(b"state machine bytes") == (None, b"state machine bytes")


# -- a dynamic quorum from its bootstrap snapshot --------------------------------------------------


def dynamic_cluster(seed: int = 3, voters: int = 3, spares: int = 1, **kwargs: object) -> SimCluster:
    cluster = SimCluster(seed, voters=voters, spares=spares, membership=True, **kwargs)  # type: ignore[arg-type]
    cluster.run_for(5.0)
    assert cluster.leader() is not None
    return cluster


def leader_of(cluster: SimCluster) -> SimNode:
    leader = cluster.leader()
    assert leader is not None and leader.core is not None
    return leader


def finish(cluster: SimCluster, operation: int | None, seconds: float = 10.0) -> tuple[int, str | None]:
    """Run until the operation is answered; its (error code, message)."""
    assert operation is not None
    for _ in range(int(seconds * 10)):
        if operation in cluster.outcomes:
            break
        cluster.run_for(0.1)
    return cluster.outcomes[operation]


def control_types(batch: object) -> list[int]:
    return [kind for kind, _ in batch.control_records()]  # type: ignore[attr-defined]


def test_the_first_leader_writes_the_bootstrap_voters_into_the_log_once() -> None:
    """The voters of `storage format --initial-controllers` are only in the bootstrap snapshot; the
    first leader puts them into its epoch's first batch, so that a replica formatted with
    --no-initial-controllers learns them by fetching."""
    cluster = dynamic_cluster()
    leader = leader_of(cluster)
    first = leader.log.read(0, 1 << 20)[0]
    assert control_types(first) == [ControlRecordType.LEADER_CHANGE, ControlRecordType.KRAFT_VERSION,
                                    ControlRecordType.KRAFT_VOTERS]
    assert leader.core.voters == cluster.initial_voter_set
    cluster.resign(leader)
    cluster.run_for(5.0)
    second = leader_of(cluster)
    epoch_start = second.core._leader.tracker.epoch_start_offset
    assert control_types(second.log.batch_containing(epoch_start)) == [ControlRecordType.LEADER_CHANGE]


def test_a_spare_formatted_without_voters_finds_the_leader_through_the_bootstrap_servers() -> None:
    cluster = dynamic_cluster()
    spare = cluster.nodes[4]
    assert spare.core is not None and not spare.core.is_voter
    assert spare.core.voters == cluster.initial_voter_set  # learned from the log
    assert isinstance(spare.core.state, Follower) and spare.core.state.leader_id == leader_of(cluster).node_id


def test_adding_a_caught_up_observer_takes_effect_when_appended_and_answers_when_committed() -> None:
    cluster = dynamic_cluster()
    leader, spare = leader_of(cluster), cluster.nodes[4]
    operation = cluster.add_voter(spare)
    # Appended at once: the leader counts by the new set before it is committed (thesis §4.1).
    assert leader.core.voters.ids == {1, 2, 3, 4} and operation not in cluster.outcomes
    assert leader.core._leader.tracker.majority == 3
    assert finish(cluster, operation) == (ErrorCode.NONE, None)
    assert spare.core.is_voter and cluster.nodes[2].core.voters.ids == {1, 2, 3, 4}


def test_a_new_voter_must_first_catch_up_as_an_observer() -> None:
    cluster = dynamic_cluster()
    spare = cluster.nodes[4]
    cluster.partition([{4}, {1, 2, 3}])
    cluster.run_for(cluster.nodes[1].config.fetch_timeout_ms / 1000 + 1)
    code, why = finish(cluster, cluster.add_voter(spare))
    assert code == ErrorCode.REQUEST_TIMED_OUT and "not caught up" in (why or "")
    assert 4 not in leader_of(cluster).core.voters
    cluster.heal()
    cluster.run_for(2.0)
    assert finish(cluster, cluster.add_voter(spare))[0] == ErrorCode.NONE


def test_only_one_voter_change_is_in_flight() -> None:
    cluster = dynamic_cluster(spares=2)
    leader = leader_of(cluster)
    cluster.block_one_way(2, leader.node_id)  # two voters of four must fetch: slow the commit down
    cluster.block_one_way(3, leader.node_id)
    first = cluster.add_voter(cluster.nodes[4])
    code, why = cluster.outcomes[cluster.add_voter(cluster.nodes[5])]
    assert code == ErrorCode.REQUEST_TIMED_OUT and "previous voter change" in (why or "")
    cluster.heal()
    assert finish(cluster, first)[0] == ErrorCode.NONE
    assert finish(cluster, cluster.add_voter(cluster.nodes[5]))[0] == ErrorCode.NONE
    assert leader_of(cluster).core.voters.ids == {1, 2, 3, 4, 5}


@pytest.mark.parametrize(("change", "code"), [
    ("duplicate", ErrorCode.DUPLICATE_VOTER),
    ("unknown replica", ErrorCode.VOTER_NOT_FOUND),
    ("other directory", ErrorCode.VOTER_NOT_FOUND),
    ("no directory", ErrorCode.INVALID_REQUEST),
    ("no controller endpoint", ErrorCode.INVALID_REQUEST),
    ("kraft.version 0 only", ErrorCode.INVALID_REQUEST),
])
def test_a_voter_change_that_cannot_be_is_refused_at_once(change: str, code: int) -> None:
    cluster = dynamic_cluster()
    leader = leader_of(cluster)
    spare = cluster.nodes[4].config.local_node
    now = cluster.local_time(leader)
    match change:
        case "duplicate":
            effects = leader.core.add_voter(7, VoterNode(ReplicaKey(2, D4), spare.endpoints), now)
        case "unknown replica":
            effects = leader.core.remove_voter(7, ReplicaKey(9, D4), now)
        case "other directory":
            effects = leader.core.remove_voter(7, ReplicaKey(2, D4), now)
        case "no directory":
            effects = leader.core.add_voter(7, VoterNode(ReplicaKey(4), spare.endpoints), now)
        case "no controller endpoint":
            effects = leader.core.add_voter(7, VoterNode(spare.key, (Endpoint("OTHER", "h", 1),)), now)
        case _:
            effects = leader.core.add_voter(7, VoterNode(spare.key, spare.endpoints, (0, 0)), now)
    (done,) = [e for e in effects if isinstance(e, VoterChangeDone)]
    assert (done.operation, done.error_code) == (7, code)
    assert leader.core.voters == cluster.initial_voter_set and leader.core.voter_history.latest_offset < 3


def test_a_follower_is_told_to_ask_the_leader() -> None:
    cluster = dynamic_cluster()
    follower = next(n for n in cluster.nodes.values() if n.core is not None and isinstance(n.core.state, Follower))
    (done,) = follower.core.add_voter(1, cluster.nodes[4].config.local_node, cluster.now)
    assert done.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def bootstrapped_core(node_id: int, directory: Uuid, voters: VoterSet = THREE,
                      bootstrap_servers: tuple[tuple[str, int], ...] = ()) -> RaftCore:
    """A core of a dynamic quorum formatted with `voters` (its bootstrap snapshot), started."""
    config = RaftConfig(node_id=node_id, voters=frozenset(), cluster_id=CLUSTER, directory_id=directory,
                        endpoints=voters.node(node_id).endpoints if node_id in voters else (),
                        bootstrap_servers=bootstrap_servers)
    log = MemoryRaftLog()
    log.create_snapshot(BOOTSTRAP_SNAPSHOT_ID, control_batch(1, voters, BOOTSTRAP_SNAPSHOT_ID))
    core = RaftCore(config, log, rng=random.Random(node_id), now=0.0)
    core.start(0.0)
    return core


def test_a_follower_whose_leader_fails_asks_a_bootstrap_server_and_learns_a_later_epoch() -> None:
    """A lagging voter whose own (stale) voter set is {1, 3}, following 1 in epoch 1, while 1's disk was
    replaced and 2 went on to epoch 2: its leader's answers are errors, and nothing it knows of would
    tell it of epoch 2 - its pre-vote grants to 2, answered in epoch 1, would count for nothing. The
    bootstrap servers do tell it (as Kafka's followers ask them, KAFKA-17030)."""
    stale = VoterSet((node(1, D1), node(3, D3)))
    core = bootstrapped_core(3, D3, stale, bootstrap_servers=(("h1", 9001), ("h2", 9002)))
    effects = core.step(Received(1, 1, BeginQuorumEpochRequest(CLUSTER, 3, 1, 1, D3)), 0.1)
    assert core.state == Follower(1, 1)
    fetch = next(e for e in effects if isinstance(e, Send) and isinstance(e.message, FetchRequest))
    assert fetch.dest == 1
    # 1 now runs on a new disk, of epoch 0: it answers no fetch.
    core.step(Received(1, fetch.correlation_id, FetchResponse(ErrorCode.UNKNOWN_LEADER_EPOCH, -1, 0)), 0.2)
    now, sent = 0.2, []
    while not sent:
        now = core.next_deadline()
        sent = [e for e in core.tick(now) if isinstance(e, Send) and isinstance(e.message, FetchRequest)]
    (fetch,) = sent
    assert fetch.dest in core.config.bootstrap_ids and core.state == Follower(1, 1)
    # The bootstrap server is 2, in epoch 2: its refusal moves this replica to epoch 2 ...
    core.step(Received(fetch.dest, fetch.correlation_id, FetchResponse(ErrorCode.FENCED_LEADER_EPOCH, 1, 2)), now)
    assert core.epoch == 2
    # ... where its grant of 2's pre-vote counts (2 knows more of the log than it does).
    effects = core.step(Received(2, 5, VoteRequest(CLUSTER, 3, 3, 2, 2, 40, pre_vote=True, candidate_directory_id=D2,
                                                   voter_directory_id=D3)), now + 1.0)
    vote = next(e.message for e in effects if isinstance(e, Send) and isinstance(e.message, VoteResponse))
    assert (vote.vote_granted, vote.leader_epoch) == (True, 2)


def elect_by_hand(core: RaftCore) -> float:
    """Win the pre-vote, then the vote, with one other voter's grant each; the time it happened."""
    now = core.next_deadline()
    effects = core.tick(now)
    while not core.is_leader:
        send = next(e for e in effects if isinstance(e, Send) and isinstance(e.message, VoteRequest))
        epoch = send.message.candidate_epoch - (1 if send.message.pre_vote else 0)
        effects = core.step(Received(send.dest, send.correlation_id, VoteResponse(0, -1, epoch, True)), now)
    return now


def test_a_new_leader_changes_no_voter_before_it_committed_its_epoch() -> None:
    """What fences a change an earlier leader left half replicated (Ongaro's single-server bug)."""
    core = bootstrapped_core(1, D1)
    now = elect_by_hand(core)
    epoch_start = core._leader.tracker.epoch_start_offset
    assert core.high_watermark <= epoch_start
    (done,) = [e for e in core.add_voter(1, node(4, D4), now) if isinstance(e, VoterChangeDone)]
    assert done.error_code == ErrorCode.REQUEST_TIMED_OUT and "first record" in (done.message or "")
    # A voter fetches the epoch's first batch: the epoch is committed, and the next refusal is about 4.
    end = core.log.end_offset
    core.step(Received(2, 9, FetchRequest(CLUSTER, 2, 0, core.epoch, end, core.epoch, replica_directory_id=D2)),
              now + 0.1)
    assert core.high_watermark == end
    (done,) = [e for e in core.add_voter(2, node(4, D4), now + 0.2) if isinstance(e, VoterChangeDone)]
    assert done.error_code == ErrorCode.REQUEST_TIMED_OUT and "not caught up" in (done.message or "")
    # 4 fetches to the end as an observer: now it is added, and counts at once.
    core.step(Received(4, 10, FetchRequest(CLUSTER, 4, 0, core.epoch, end, core.epoch, replica_directory_id=D4)),
              now + 0.3)
    effects = core.add_voter(3, node(4, D4), now + 0.4)
    assert not [e for e in effects if isinstance(e, VoterChangeDone)] and core.voters.ids == {1, 2, 3, 4}
    assert core._leader.tracker.majority == 3


def test_removing_the_leader_hands_over_once_the_removal_is_committed() -> None:
    cluster = dynamic_cluster()
    leader = leader_of(cluster)
    operation = cluster.remove_voter(cluster.replica_key(leader))
    # Appended: it leads on without counting itself, until the new set commits the record.
    assert not leader.core.is_voter and leader.core.is_leader
    assert finish(cluster, operation) == (ErrorCode.NONE, None)
    cluster.run_for(0.01)
    assert isinstance(leader.core.state, Resigned)
    cluster.run_for(5.0)
    successor = leader_of(cluster)
    assert successor is not leader and successor.core.voters.ids == {1, 2, 3} - {leader.node_id}
    # The old leader follows as an observer, and never stands again.
    assert isinstance(leader.core.state, Follower | Unattached) and not leader.core._quorum.may_stand
    assert cluster.propose() is not None
    cluster.run_for(2.0)
    assert leader.applied_end == cluster.checker.committed_end


def test_a_removed_leader_that_lost_office_before_the_commit_may_still_stand() -> None:
    """Voter 1 of {1, 2} removes itself; 2 is away, so the removal is not committed and 1 resigns
    (check quorum). 2's log lacks the removal: {1, 2} needs 1's vote, which 1 refuses (its log is
    longer). 1 may stand, counting by {2}: it wins, commits the removal, and hands over to 2."""
    cluster = dynamic_cluster(seed=11, voters=1, spares=1)
    assert finish(cluster, cluster.add_voter(cluster.nodes[2]))[0] == ErrorCode.NONE
    first = cluster.nodes[1]
    assert leader_of(cluster) is first
    cluster.crash(cluster.nodes[2])
    cluster.remove_voter(cluster.replica_key(first))
    assert first.core._quorum.may_stand and not first.core.is_voter
    cluster.run_for(5.0)
    assert not first.core.is_leader  # check quorum: {2} did not fetch
    cluster.restart(cluster.nodes[2])
    cluster.run_for(15.0)
    leader = leader_of(cluster)
    assert leader is cluster.nodes[2] and leader.core.voters.ids == {2}
    assert not first.core._quorum.may_stand


def test_a_replaced_disk_is_a_new_replica_that_votes_and_counts_for_nothing_until_added() -> None:
    cluster = dynamic_cluster()
    leader = leader_of(cluster)
    victim = next(n for n in cluster.nodes.values() if n is not leader and n.node_id in cluster.voters)
    old = cluster.replica_key(victim)
    cluster.replace_disk(victim)
    cluster.run_for(3.0)
    new = cluster.replica_key(victim)
    assert new != old and not victim.core.is_voter
    tracker = leader.core._leader.tracker
    assert tracker.replicas[victim.node_id].key == old and tracker.observer(new) is not None
    # Asked for its vote as the old replica, it refuses: its promises died with the disk.
    vote = VoteRequest(CLUSTER, victim.node_id, victim.core.epoch + 1, leader.node_id, 0, 0,
                       candidate_directory_id=leader.config.directory_id, voter_directory_id=old.directory_id)
    effects = victim.core.step(Received(leader.node_id, 5, vote), cluster.local_time(victim))
    (send,) = [e for e in effects if isinstance(e, Send)]
    assert send.message.error_code == ErrorCode.INVALID_VOTER_KEY and victim.core.epoch == vote.candidate_epoch - 1
    # The old replica goes, the new one comes: the disk is replaced without downtime.
    assert finish(cluster, cluster.remove_voter(old))[0] == ErrorCode.NONE
    assert finish(cluster, cluster.add_voter(victim))[0] == ErrorCode.NONE
    assert leader_of(cluster).core.voters.key_of(victim.node_id) == new


def test_a_begin_quorum_epoch_for_another_replica_of_this_node_is_refused() -> None:
    config = RaftConfig(node_id=2, voters=frozenset(), cluster_id=CLUSTER, directory_id=D2)
    log = MemoryRaftLog()
    log.create_snapshot(BOOTSTRAP_SNAPSHOT_ID, control_batch(1, THREE, BOOTSTRAP_SNAPSHOT_ID))
    core = RaftCore(config, log, rng=random.Random(1), now=0.0)
    core.start(0.0)
    effects = core.step(Received(1, 1, BeginQuorumEpochRequest(CLUSTER, 2, 1, 4, voter_directory_id=D4)), 0.1)
    (send,) = [e for e in effects if isinstance(e, Send)]
    assert send.message.error_code == ErrorCode.INVALID_VOTER_KEY and core.epoch == 0


def test_a_vote_given_to_one_replica_is_not_given_to_another_replica_of_the_same_node() -> None:
    config = RaftConfig(node_id=1, voters=frozenset(), cluster_id=CLUSTER, directory_id=D1)
    log = MemoryRaftLog()
    log.create_snapshot(BOOTSTRAP_SNAPSHOT_ID, control_batch(1, THREE, BOOTSTRAP_SNAPSHOT_ID))
    core = RaftCore(config, log, rng=random.Random(1), now=0.0)
    core.start(0.0)
    granted = core.step(Received(2, 1, VoteRequest(CLUSTER, 1, 1, 2, 0, 0, candidate_directory_id=D2)), 0.1)
    assert [e.message.vote_granted for e in granted if isinstance(e, Send)] == [True]
    assert core.election_state == ElectionState(1, voted_id=2, voted_directory_id=D2)
    other = core.step(Received(2, 2, VoteRequest(CLUSTER, 1, 1, 2, 0, 0, candidate_directory_id=D4)), 0.2)
    assert [e.message.vote_granted for e in other if isinstance(e, Send)] == [False]


def test_a_voter_on_a_new_endpoint_tells_the_leader_which_records_it() -> None:
    cluster = dynamic_cluster()
    leader = leader_of(cluster)
    mover = next(n for n in cluster.nodes.values() if n is not leader and n.node_id in cluster.voters)
    cluster.move_endpoint(mover)
    cluster.run_for(3.0)
    recorded = leader.core.voters.node(mover.node_id)
    assert recorded is not None and recorded.endpoints == mover.config.endpoints
    assert any(isinstance(m, UpdateVoterRequest) for _, _, m in
               cluster.last_requests.get(mover.node_id, {}).values())
    assert leader.core.address_of(mover.node_id) == ("node-" + str(mover.node_id), mover.config.endpoints[0].port)


def test_an_update_voter_from_a_replica_that_is_not_a_voter_is_refused() -> None:
    cluster = dynamic_cluster()
    leader = leader_of(cluster)
    spare = cluster.nodes[4].config.local_node
    request = UpdateVoterRequest(CLUSTER, leader.core.epoch, 4, spare.key.directory_id, spare.endpoints, (0, 1))
    effects = leader.core.step(Received(4, 9, request), cluster.local_time(leader))
    (send,) = [e for e in effects if isinstance(e, Send)]
    assert send.message.error_code == ErrorCode.VOTER_NOT_FOUND and 4 not in leader.core.voters


def test_snapshots_carry_the_voters_and_a_replica_that_loads_one_learns_them() -> None:
    cluster = dynamic_cluster()
    assert finish(cluster, cluster.add_voter(cluster.nodes[4]))[0] == ErrorCode.NONE
    for _ in range(5):
        cluster.propose()
        cluster.run_for(0.3)
    for n in cluster.alive_nodes():
        cluster.take_snapshot(n, delete_prefix=True)
    leader = leader_of(cluster)
    snapshot = leader.log.latest_snapshot_id
    assert snapshot is not None
    control, _ = split_snapshot(leader.log.read_snapshot(snapshot, 0, 1 << 20))
    assert control is not None and control.voters.ids == {1, 2, 3, 4}
    # A brand new replica knows nothing, downloads the snapshot, and learns the voters from it.
    cluster.replace_disk(cluster.nodes[4])
    cluster.run_for(5.0)
    assert cluster.nodes[4].core.voters.ids == {1, 2, 3, 4}
    assert cluster.nodes[4].applied_end == cluster.checker.committed_end


# -- a static quorum, and its upgrade ----------------------------------------------------------------


def test_a_static_quorum_refuses_voter_changes() -> None:
    cluster = SimCluster(2, voters=3, spares=1, membership=True, upgrade=True)
    cluster.run_for(5.0)
    code, why = cluster.outcomes[cluster.add_voter(cluster.nodes[4])]
    assert code == ErrorCode.UNSUPPORTED_VERSION and "kraft.version is 0" in (why or "")


def test_a_static_quorum_is_upgraded_with_the_directory_ids_its_voters_reported() -> None:
    cluster = SimCluster(2, voters=3, spares=1, membership=True, upgrade=True)
    cluster.run_for(5.0)
    leader = leader_of(cluster)
    assert leader.core.kraft_version == 0 and leader.core.voter_history.latest_offset is None
    assert set(leader.core._leader.tracker.reported) == {1, 2, 3} - {leader.node_id}  # UpdateVoter at 0
    assert finish(cluster, cluster.upgrade_kraft_version()) == (ErrorCode.NONE, None)
    cluster.run_for(1.0)
    for n in cluster.alive_nodes():
        assert n.core.kraft_version == 1
        assert n.core.voters.keys() == tuple(ReplicaKey(v, cluster.directory_ids[v]) for v in (1, 2, 3))
    # Voters change from now on.
    assert finish(cluster, cluster.add_voter(cluster.nodes[4]))[0] == ErrorCode.NONE
    assert finish(cluster, cluster.upgrade_kraft_version())[0] == ErrorCode.NONE  # at 1 already


def test_the_upgrade_is_done_only_once_committed_even_when_asked_again() -> None:
    """Asked again while the first upgrade is appended but not committed (a new leader may still
    truncate it away), the leader says so rather than that kraft.version is 1 already."""
    cluster = SimCluster(2, voters=3, spares=0, membership=True, upgrade=True)
    cluster.run_for(5.0)
    leader = leader_of(cluster)
    first = cluster.upgrade_kraft_version(leader)
    again = cluster.upgrade_kraft_version(leader)  # at once: nobody has fetched the first yet
    assert leader.core.kraft_version == 1 and first not in cluster.outcomes
    code, why = cluster.outcomes[again]
    assert code == ErrorCode.REQUEST_TIMED_OUT and "not committed yet" in (why or "")
    assert finish(cluster, first) == (ErrorCode.NONE, None)
    assert finish(cluster, cluster.upgrade_kraft_version(leader)) == (ErrorCode.NONE, "kraft.version is 1 already")


def test_the_upgrade_waits_for_every_voter_to_report_its_directory_id() -> None:
    cluster = SimCluster(2, voters=3, spares=0, membership=True, upgrade=True)
    cluster.run_for(5.0)
    leader = leader_of(cluster)
    absent = next(v for v in (1, 2, 3) if v != leader.node_id)
    cluster.crash(cluster.nodes[absent])
    cluster.resign(leader)
    cluster.run_for(5.0)
    code, why = finish(cluster, cluster.upgrade_kraft_version())
    assert code == ErrorCode.INVALID_UPDATE_VERSION and f"voter {absent} has not told" in (why or "")
    assert leader_of(cluster).core.kraft_version == 0


def test_the_quorum_state_file_of_a_dynamic_quorum_names_the_directory_voted_for() -> None:
    state = ElectionState(5, voted_id=2, voted_directory_id=D2)
    raw = encode_quorum_state(state, None)
    assert b'"data_version":1' in raw and D2.to_base64().encode() in raw and b"currentVoters" not in raw
    assert decode_quorum_state(raw) == state
    assert decode_quorum_state(encode_quorum_state(ElectionState(5, leader_id=1), None)) == ElectionState(5, 1)
    assert b'"data_version":0' in encode_quorum_state(ElectionState(5, voted_id=2), [1, 2, 3])


def test_observers_fetch_with_their_directory_id_and_leaders_send_their_endpoints() -> None:
    cluster = dynamic_cluster()
    fetches = [m for _, _, m in cluster.last_requests.get(4, {}).values() if isinstance(m, FetchRequest)]
    assert fetches and fetches[0].replica_directory_id == cluster.directory_ids[4]
    leader = leader_of(cluster)
    cluster.resign(leader)
    ends = [m for _, _, m in cluster.last_requests.get(leader.node_id, {}).values()
            if isinstance(m, EndQuorumEpochRequest)]
    assert ends and ends[0].leader_endpoints == leader.config.endpoints


def test_a_response_naming_a_leader_outside_a_dynamic_quorums_log_is_followed() -> None:
    """A voter just added may lead before a lagging replica has fetched its VotersRecord."""
    config = RaftConfig(node_id=2, voters=frozenset(), cluster_id=CLUSTER, directory_id=D2)
    log = MemoryRaftLog()
    log.create_snapshot(BOOTSTRAP_SNAPSHOT_ID, control_batch(1, THREE, BOOTSTRAP_SNAPSHOT_ID))
    core = RaftCore(config, log, rng=random.Random(1), now=0.0)
    core.start(0.0)
    endpoints = (Endpoint("CONTROLLER", "h7", 9007),)
    core.step(Received(1, 1, VoteResponse(ErrorCode.NONE, 7, 3, False, leader_endpoints=endpoints)), 0.1)
    assert core.state == Follower(3, 7) and core.address_of(7) == ("h7", 9007)
    assert not isinstance(core.state, Leader)
