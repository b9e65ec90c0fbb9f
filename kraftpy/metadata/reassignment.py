"""Partition reassignments (KIP-455), as Kafka's KRaft controller does them, as pure functions.

Theory of operation. A reassignment of a partition from its current replicas to a target is one
PartitionChangeRecord that sets (Kafka's ``PartitionReassignmentReplicas``)::

    replicas          = target + [current replicas not in target]     (target order first)
    adding_replicas   = [target replicas not in current]
    removing_replicas = [current replicas not in target]

The adding replicas are replicas from then on: their brokers open the log, fetch from the leader and
join the ISR through AlterPartition like any follower. Every change the controller builds for a
partition with adding or removing replicas (``PartitionChangeBuilder``) first tries to complete the
move; the one that sees every adding replica in the ISR writes ``replicas = target``, the ISR without
the removing replicas, both sets empty, and a new leader from the target's ISR when the leader was
being removed. Brokers that left the replica list then stop their replica and delete its log.

A move with nothing to add (a shrink, or a reorder) completes in its first record. A new target for a
partition already moving starts from its current (union) replicas, so replicas being added that the
new target keeps go on catching up, and those it drops are removed.

Cancelling (``replicas`` null in the request) reverts to the replicas before the move: the current
ones minus the adding ones, the ISR likewise (Kafka's ``PartitionReassignmentRevert``); when only
adding replicas were in the ISR, the revert needs an unclean election and is refused unless the topic
allows one.

A request names partitions one by one and each is answered on its own: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT (an empty list, a broker named twice, a broker not registered or fenced),
NO_REASSIGNMENT_IN_PROGRESS (a cancel with none). A partition named twice takes each change in turn.

Listing the moves in progress reads the named partitions, or with none named every partition of the
image: a rare operator read, not worth an index kept on every change.
"""

from __future__ import annotations

from collections import Counter

from kraftpy.ids import Uuid
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.errors import ControllerError, Errors
from kraftpy.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftpy.metadata.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from kraftpy.metadata.partition_change import PartitionChangeBuilder
from kraftpy.metadata.records import LeaderRecoveryState, MetadataRecord, PartitionChangeRecord
from kraftpy.metadata.replication_control import unclean_election_allowed
from kraftpy.metadata.result import ControllerResult


def is_reassigning(part: PartitionRegistration) -> bool:
    return bool(part.adding_replicas or part.removing_replicas)


def reassignment_replicas(
    current: tuple[int, ...], target: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(replicas, adding, removing) of a move from ``current`` to ``target`` (see the module doc)."""
    removing = tuple(r for r in current if r not in target)
    adding = tuple(r for r in target if r not in current)
    return (*target, *removing), adding, removing


def original_replicas(part: PartitionRegistration) -> tuple[int, ...]:
    """The replicas a partition had before its move began (all of them when it is not moving)."""
    return tuple(r for r in part.replicas if r not in part.adding_replicas)


def target_replicas(part: PartitionRegistration) -> tuple[int, ...]:
    """Where a partition is going: its replicas without the ones being removed."""
    return tuple(r for r in part.replicas if r not in part.removing_replicas)


def _validate_target(image: MetadataImage, replicas: tuple[int, ...]) -> None:
    if not replicas:
        raise ControllerError(Errors.INVALID_REPLICA_ASSIGNMENT,
                              "The manual partition assignment includes an empty replica list.")
    for broker, count in Counter(replicas).items():
        if count > 1:
            raise ControllerError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                  f"The manual partition assignment includes the broker {broker} more than once.")
        if broker < 0 or (reg := image.cluster.broker(broker)) is None:
            raise ControllerError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                  f"The manual partition assignment includes broker {broker}, but no such broker "
                                  "is registered.")
        if reg.fenced:
            raise ControllerError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                  f"The manual partition assignment includes broker {broker}, which is fenced.")


def _change(
    image: MetadataImage, config: ControllerConfig, topic: TopicImage, pid: int, part: PartitionRegistration,
    target: tuple[int, ...] | None,
) -> PartitionChangeRecord | None:
    builder = PartitionChangeBuilder(topic.id, pid, part, image.cluster,
                                     unclean_allowed=unclean_election_allowed(image, config, topic.name))
    if target is None:
        if not is_reassigning(part):
            raise ControllerError(Errors.NO_REASSIGNMENT_IN_PROGRESS,
                                  f"No reassignment is in progress for partition {topic.name}-{pid}.")
        replicas = original_replicas(part)
        isr = tuple(r for r in part.isr if r not in part.adding_replicas)
        if not isr:
            if not unclean_election_allowed(image, config, topic.name):
                raise ControllerError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                      f"Unable to revert partition assignment for {topic.name}:{pid} because it "
                                      "would require an unclean leader election.")
            isr = replicas[:1]
            builder.set_target_leader_recovery_state(LeaderRecoveryState.RECOVERING)
        builder.set_target_replicas(replicas).set_target_isr(isr).set_target_adding(()).set_target_removing(())
        return builder.build()
    _validate_target(image, target)
    replicas, adding, removing = reassignment_replicas(part.replicas, target)
    builder.set_target_replicas(replicas).set_target_adding(adding).set_target_removing(removing)
    return builder.build()


def alter_partition_reassignments(
    image: MetadataImage, request: AlterPartitionReassignmentsRequest, config: ControllerConfig
) -> ControllerResult[AlterPartitionReassignmentsResponse]:
    """Start, replace or cancel the moves the request names; each partition is answered on its own."""
    records: list[MetadataRecord] = []
    #: Partitions changed by earlier entries of this request, as those changes leave them.
    changed: dict[tuple[Uuid, int], PartitionRegistration] = {}
    responses = []
    for entry in request.topics:
        topic = image.topics.get_by_name(entry.name)
        results = []
        for wanted in entry.partitions:
            pid = wanted.partition_index
            part = None if topic is None else changed.get((topic.id, pid), topic.partitions.get(pid))
            try:
                if topic is None:
                    raise ControllerError(Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                          f"Unable to find a topic named {entry.name}.")
                if part is None:
                    raise ControllerError(Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                          f"Unable to find partition {entry.name}:{pid}.")
                target = None if wanted.replicas is None else tuple(wanted.replicas)
                change = _change(image, config, topic, pid, part, target)
            except ControllerError as exc:
                results.append(ReassignablePartitionResponse(pid, exc.api_error.code, exc.api_error.message))
                continue
            if change is not None:
                records.append(change)
                changed[(topic.id, pid)] = part.merge(change)
            results.append(ReassignablePartitionResponse(pid, Errors.NONE))
        responses.append(ReassignableTopicResponse(entry.name, tuple(results)))
    return ControllerResult(records, AlterPartitionReassignmentsResponse(Errors.NONE, None, tuple(responses)))


def _ongoing(pid: int, part: PartitionRegistration) -> OngoingPartitionReassignment:
    return OngoingPartitionReassignment(pid, part.replicas, part.adding_replicas, part.removing_replicas)


def list_partition_reassignments(
    image: MetadataImage, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    """The moves in progress among the named partitions (unknown ones are left out, as Kafka does), or
    among every partition when none are named; topics in name order."""
    found: dict[str, list[OngoingPartitionReassignment]] = {}
    if request.topics is None:
        for topic in sorted(image.topics.by_id.values(), key=lambda t: t.name):
            for pid in sorted(topic.partitions):
                part = topic.partitions[pid]
                if is_reassigning(part):
                    found.setdefault(topic.name, []).append(_ongoing(pid, part))
    else:
        for entry in request.topics:
            topic = image.topics.get_by_name(entry.name)
            if topic is None:
                continue
            for pid in entry.partition_indexes:
                part = topic.partitions.get(pid)
                if part is not None and is_reassigning(part):
                    found.setdefault(topic.name, []).append(_ongoing(pid, part))
    topics = tuple(OngoingTopicReassignment(name, tuple(parts)) for name, parts in found.items())
    return ListPartitionReassignmentsResponse(Errors.NONE, None, topics)
