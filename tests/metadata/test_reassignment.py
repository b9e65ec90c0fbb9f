"""Partition reassignments (KIP-455): (image, request) -> (records, response), then the ISR changes that
complete them."""

from __future__ import annotations

from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
    ReassignablePartition,
    ReassignableTopic,
)
from kraftpy.metadata.reassignment import reassignment_replicas
from kraftpy.metadata.records import LeaderRecoveryState, PartitionChangeRecord
from tests.metadata.test_replication_control import alter


def reassign(c, topic: str, moves: dict[int, tuple[int, ...] | None]):
    request = AlterPartitionReassignmentsRequest((
        ReassignableTopic(topic, tuple(ReassignablePartition(pid, target) for pid, target in moves.items())),))
    return c.commit(c.controller.handle_alter_partition_reassignments(request))


def result_of(response, pid: int = 0):
    return next(p for t in response.responses for p in t.partitions if p.partition_index == pid)


def listed(c, topics=None):
    return c.controller.list_partition_reassignments(ListPartitionReassignmentsRequest(topics))


def test_reassignment_replicas_put_the_target_first_then_the_removed():
    assert reassignment_replicas((1, 2), (2, 3)) == ((2, 3, 1), (3,), (1,))
    assert reassignment_replicas((1,), (1, 2, 3)) == ((1, 2, 3), (2, 3), ())
    assert reassignment_replicas((1, 2, 3), (3, 1)) == ((3, 1, 2), (), (2,))


def test_a_move_writes_the_union_with_adding_and_removing_and_keeps_the_leader(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    start = c.next_offset
    response = reassign(c, "t", {0: (2, 3)})
    assert response.error_code == Errors.NONE and result_of(response).error_code == Errors.NONE
    [record] = c.log[start:]
    assert isinstance(record, PartitionChangeRecord)
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == ((2, 3, 1), (3,), (1,))
    part = c.partition("t")
    assert part.replicas == (2, 3, 1) and part.isr == (1, 2) and part.leader == 1
    ongoing = listed(c).topics
    assert [(t.name, [(p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas) for p in t.partitions])
            for t in ongoing] == [("t", [(0, (2, 3, 1), (3,), (1,))])]


def test_the_isr_change_adding_the_last_new_replica_completes_the_move_and_moves_the_leader(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    reassign(c, "t", {0: (2, 3)})
    response = alter(c, "t", isr=(1, 2, 3))
    result = response.partition(c.topic("t").id, 0)
    part = c.partition("t")
    assert part.replicas == (2, 3) and part.isr == (2, 3)
    assert part.adding_replicas == () and part.removing_replicas == ()
    assert part.leader == 2  # the old leader was removed: the first target replica in the ISR leads
    assert result.error_code == Errors.NEW_LEADER_ELECTED
    assert listed(c).topics == ()


def test_a_move_not_yet_caught_up_stays_in_progress(cluster3):
    c = cluster3
    c.add_brokers(4)
    c.create_topic("t", assignments=[[1, 2]])
    reassign(c, "t", {0: (3, 4)})
    alter(c, "t", isr=(1, 2, 3))  # 4 has not caught up
    part = c.partition("t")
    assert part.adding_replicas == (3, 4) and part.replicas == (3, 4, 1, 2) and part.leader == 1
    alter(c, "t", isr=(1, 2, 3, 4))
    part = c.partition("t")
    assert part.replicas == (3, 4) and part.isr == (3, 4) and part.leader == 3


def test_increasing_the_replication_factor(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1]])
    reassign(c, "t", {0: (1, 2, 3)})
    assert c.partition("t").adding_replicas == (2, 3)
    alter(c, "t", isr=(1, 2))
    alter(c, "t", isr=(1, 2, 3))
    part = c.partition("t")
    assert part.replicas == (1, 2, 3) and part.isr == (1, 2, 3) and part.leader == 1
    assert (part.adding_replicas, part.removing_replicas) == ((), ())


def test_a_move_with_nothing_to_add_completes_at_once(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2, 3]])
    start = c.next_offset
    reassign(c, "t", {0: (3, 2)})
    [record] = c.log[start:]
    assert record.replicas == (3, 2) and record.isr == (2, 3) and record.leader == 3
    part = c.partition("t")
    assert part.replicas == (3, 2) and (part.adding_replicas, part.removing_replicas) == ((), ())


def test_the_same_replicas_write_nothing(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    start = c.next_offset
    assert result_of(reassign(c, "t", {0: (1, 2)})).error_code == Errors.NONE
    assert c.next_offset == start


def test_cancel_reverts_to_the_original_replicas(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    reassign(c, "t", {0: (2, 3)})
    alter(c, "t", isr=(1, 2))  # nothing new, but the partition epoch moves
    response = reassign(c, "t", {0: None})
    assert result_of(response).error_code == Errors.NONE
    part = c.partition("t")
    assert part.replicas == (2, 1) and part.isr == (1, 2) and part.leader == 1
    assert (part.adding_replicas, part.removing_replicas) == ((), ())
    assert listed(c).topics == ()


def test_cancel_takes_added_replicas_out_of_the_isr(cluster3):
    c = cluster3
    c.add_brokers(4)
    c.create_topic("t", assignments=[[1, 2]])
    reassign(c, "t", {0: (3, 4)})
    alter(c, "t", isr=(1, 2, 3))
    reassign(c, "t", {0: None})
    part = c.partition("t")
    assert part.replicas == (1, 2) and part.isr == (1, 2) and part.leader == 1


def test_cancel_without_a_move_is_no_reassignment_in_progress(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    start = c.next_offset
    result = result_of(reassign(c, "t", {0: None}))
    assert result.error_code == Errors.NO_REASSIGNMENT_IN_PROGRESS and c.next_offset == start


def test_a_new_target_replaces_a_move_in_progress(cluster3):
    c = cluster3
    c.add_brokers(4)
    c.create_topic("t", assignments=[[1, 2]])
    reassign(c, "t", {0: (2, 3)})
    reassign(c, "t", {0: (2, 4)})
    part = c.partition("t")
    assert part.replicas == (2, 4, 3, 1) and part.adding_replicas == (4,) and part.removing_replicas == (3, 1)


def test_errors_are_answered_per_partition_with_kafkas_codes(cluster3):
    c = cluster3
    c.create_topic("t", 2, 1)
    c.heartbeat(3, want_fence=True)
    start = c.next_offset
    request = AlterPartitionReassignmentsRequest((
        ReassignableTopic("t", (ReassignablePartition(0, ()), ReassignablePartition(1, (1, 1)),
                                ReassignablePartition(5, (1,)), ReassignablePartition(0, (1, 9)),
                                ReassignablePartition(1, (3,)), ReassignablePartition(-1, (1,)))),
        ReassignableTopic("missing", (ReassignablePartition(0, (1,)),)),
    ))
    response = c.commit(c.controller.handle_alter_partition_reassignments(request))
    codes = [(t.name, p.partition_index, p.error_code) for t in response.responses for p in t.partitions]
    assert codes == [
        ("t", 0, Errors.INVALID_REPLICA_ASSIGNMENT), ("t", 1, Errors.INVALID_REPLICA_ASSIGNMENT),
        ("t", 5, Errors.UNKNOWN_TOPIC_OR_PARTITION), ("t", 0, Errors.INVALID_REPLICA_ASSIGNMENT),
        ("t", 1, Errors.INVALID_REPLICA_ASSIGNMENT), ("t", -1, Errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("missing", 0, Errors.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    messages = [p.error_message for t in response.responses for p in t.partitions]
    assert "empty" in messages[0] and "more than once" in messages[1] and "no such broker" in messages[3]
    assert "fenced" in messages[4]
    assert c.next_offset == start


def test_fencing_an_adding_replica_keeps_the_move_going(cluster3):
    c = cluster3
    c.create_topic("t", assignments=[[1, 2]])
    reassign(c, "t", {0: (1, 3)})
    c.heartbeat(3, want_fence=True)
    part = c.partition("t")
    assert part.adding_replicas == (3,) and part.removing_replicas == (2,) and part.leader == 1


def test_list_names_only_moving_partitions_of_the_named_topics(cluster3):
    c = cluster3
    c.create_topic("a", assignments=[[1], [2]])
    c.create_topic("b", assignments=[[1]])
    reassign(c, "a", {1: (3,)})
    reassign(c, "b", {0: (2,)})
    everything = listed(c).topics
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in everything] == [("a", [1]), ("b", [0])]
    some = listed(c, (ListPartitionReassignmentsTopics("a", (0, 1, 7)), ListPartitionReassignmentsTopics("zz", (0,))))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in some.topics] == [("a", [1])]


def test_a_revert_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it(cluster3):
    c = cluster3
    for name, configs in (("strict", None), ("lax", {"unclean.leader.election.enable": "true"})):
        c.create_topic(name, assignments=[[1]], configs=configs)
        reassign(c, name, {0: (2, 3)})
        alter(c, name, isr=(1, 2))
    c.heartbeat(1, want_fence=True)  # only the adding replica 2 stays in the ISRs
    assert c.partition("strict").isr == (2,) and c.partition("strict").leader == 2
    refused = result_of(reassign(c, "strict", {0: None}))
    assert refused.error_code == Errors.INVALID_REPLICA_ASSIGNMENT and "unclean" in refused.error_message
    assert c.partition("strict").adding_replicas == (2, 3)
    assert result_of(reassign(c, "lax", {0: None})).error_code == Errors.NONE
    part = c.partition("lax")
    assert part.replicas == (1,) and part.isr == (1,) and part.adding_replicas == ()
    assert part.leader_recovery_state is LeaderRecoveryState.RECOVERING
