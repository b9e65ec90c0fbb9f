"""Topics, partitions, ISRs and leaders: the controller's replication rules as pure functions.

Each entry point takes the current ``MetadataImage`` (plus the static config and, where placement is
random, an injected ``random.Random``) and returns a ``ControllerResult``: the records to append and
the response. Nothing here changes state; the records do, once replayed.

Topic creation follows Kafka's ``ReplicationControlManager.createTopic``: name rules, collisions,
manual assignments or placement (``placement.py``) over active brokers, topic configs, then one
TopicRecord, the ConfigRecords and one PartitionRecord per partition, whose ISR is the active replicas
and whose leader is the first of them.

Leadership and ISR changes all go through ``PartitionChangeBuilder`` (``partition_change.py``), so
fencing, controlled shutdown, unfencing, AlterPartition and elections follow one set of rules. None of
them scans the cluster: the partitions a broker is in, the leaderless ones and those off their preferred
leader come from the image's ``TopicsIndex`` (``topics_index.py``), and CreateTopics checks names against
its collision index, so each costs what it touches.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence

import attrs

from kraftpy.ids import Uuid
from kraftpy.metadata import configs as config_defs
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.errors import ControllerError, Errors
from kraftpy.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftpy.metadata.messages import (
    AlterPartitionPartitionData,
    AlterPartitionPartitionResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopicResult,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    OfflineReplicaTopic,
    PartitionResult,
    ReplicaElectionResult,
)
from kraftpy.metadata.partition_change import Election, PartitionChangeBuilder, isr_without
from kraftpy.metadata.placement import PlacementBroker, PlacementError, assign_replicas
from kraftpy.metadata.records import (
    DIRECTORY_UNASSIGNED,
    ConfigRecord,
    ConfigResourceType,
    LeaderRecoveryState,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kraftpy.metadata.result import ControllerResult
from kraftpy.metadata.topic_names import reserved_topic_error, topic_name_error, unify_collision_chars

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"


def unclean_election_allowed(image: MetadataImage, config: ControllerConfig, topic: str) -> bool:
    return config_defs.topic_config_bool(image, config.static_broker_configs, topic, UNCLEAN_LEADER_ELECTION_ENABLE)


def _builder(image: MetadataImage, config: ControllerConfig, topic: TopicImage, pid: int) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(
        topic.id, pid, topic.partitions[pid], image.cluster,
        unclean_allowed=unclean_election_allowed(image, config, topic.name),
    )


class _Builders:
    """`_builder` for many partitions of one image: a topic's unclean.leader.election.enable (a lookup
    through its configs, the brokers' and the static ones) is read once, not once a partition."""

    def __init__(self, image: MetadataImage, config: ControllerConfig) -> None:
        self.image = image
        self.config = config
        self._unclean: dict[str, bool] = {}

    def __call__(self, topic: TopicImage, pid: int) -> PartitionChangeBuilder:
        unclean = self._unclean.get(topic.name)
        if unclean is None:
            unclean = self._unclean[topic.name] = unclean_election_allowed(self.image, self.config, topic.name)
        return PartitionChangeBuilder(topic.id, pid, topic.partitions[pid], self.image.cluster,
                                      unclean_allowed=unclean)


# -- CreateTopics ---------------------------------------------------------------------------------


class _NewTopicNames:
    """Names and ids taken so far: the image's (looked up in its ``TopicsIndex``, not copied) plus
    this request's."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.unified: dict[str, str] = {}
        self.ids: set[Uuid] = set()

    def check(self, name: str) -> None:
        existing = self.unified.get(unify_collision_chars(name))
        if existing is None:
            taken = self.image.topics.names_colliding_with(name)
            existing = name if name in taken else (taken[0] if taken else None)
        if existing == name:
            raise ControllerError(Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if existing is not None:
            raise ControllerError(
                Errors.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {existing}"
            )

    def is_taken(self, topic_id: Uuid) -> bool:
        return topic_id in self.ids or topic_id in self.image.topics.by_id

    def take(self, name: str, topic_id: Uuid) -> None:
        self.unified[unify_collision_chars(name)] = name
        self.ids.add(topic_id)


def _validate_topic_configs(
    entries: Iterable[tuple[str, str | None]],
) -> list[tuple[str, str]]:
    seen: set[str] = set()
    result = []
    for name, value in entries:
        if name in seen:
            raise ControllerError(Errors.INVALID_REQUEST, f"Duplicate topic config name: {name}")
        seen.add(name)
        key = config_defs.TOPIC_CONFIGS.get(name)
        if key is None:
            raise ControllerError(Errors.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            raise ControllerError(Errors.INVALID_CONFIG, f"Null value not supported for topic configs: {name}")
        reason = config_defs.validate(key, value)
        if reason is not None:
            raise ControllerError(Errors.INVALID_CONFIG, reason)
        result.append((name, value))
    return result


def _validate_manual_assignment(
    image: MetadataImage, partition: int, replicas: tuple[int, ...], expected_rf: int | None
) -> None:
    if not replicas:
        raise ControllerError(
            Errors.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment for partition {partition} is empty."
        )
    if expected_rf is not None and len(replicas) != expected_rf:
        raise ControllerError(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
            f"not consistent with previous partitions, which have {expected_rf} replica(s).",
        )
    for broker, count in Counter(replicas).items():
        if count > 1:
            raise ControllerError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {broker} more than once.",
            )
        if image.cluster.broker(broker) is None:
            raise ControllerError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {broker}, but no such broker is registered.",
            )
    if not any(image.cluster.is_active(b) for b in replicas):
        raise ControllerError(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"All brokers specified in the manual partition assignment for partition {partition} are fenced "
            "or in controlled shutdown.",
        )


def _placement_brokers(image: MetadataImage) -> list[PlacementBroker]:
    return [PlacementBroker(reg.id, reg.rack) for reg in image.cluster.active_brokers()]


def _place(
    image: MetadataImage, count: int, rf: int, rng: random.Random, *, fixed_start_index: int = -1,
    start_partition_id: int = 0,
) -> list[tuple[int, ...]]:
    try:
        return assign_replicas(
            _placement_brokers(image), count, rf, rng,
            fixed_start_index=fixed_start_index, start_partition_id=start_partition_id,
        )
    except PlacementError as exc:
        raise ControllerError(
            Errors.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): {exc}"
        ) from None


def _new_partition_record(image: MetadataImage, topic_id: Uuid, pid: int, replicas: tuple[int, ...]) -> PartitionRecord:
    isr = tuple(b for b in replicas if image.cluster.is_active(b))
    return PartitionRecord(
        partition_id=pid, topic_id=topic_id, replicas=replicas, isr=isr, leader=isr[0],
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0, partition_epoch=0,
        directories=tuple(_default_directory(image, b) for b in replicas),
    )


def _default_directory(image: MetadataImage, broker_id: int) -> Uuid:
    """Where a new replica on ``broker_id`` is recorded until the broker reports where it placed it."""
    reg = image.cluster.broker(broker_id)
    return reg.default_directory() if reg is not None else DIRECTORY_UNASSIGNED


def _create_topic(
    image: MetadataImage, topic: CreatableTopic, config: ControllerConfig, rng: random.Random, names: _NewTopicNames
) -> tuple[list[MetadataRecord], CreatableTopicResult]:
    reason = topic_name_error(topic.name)
    if reason is not None:
        raise ControllerError(Errors.INVALID_TOPIC_EXCEPTION, reason)
    reason = reserved_topic_error(topic.name)
    if reason is not None:
        raise ControllerError(Errors.INVALID_REQUEST, reason)
    names.check(topic.name)
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise ControllerError(
                Errors.INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions or replicationFactor was not "
                "set to -1.",
            )
        by_index = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
        if sorted(by_index) != list(range(len(topic.assignments))):
            raise ControllerError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        assignment = [by_index[i] for i in range(len(by_index))]
        for pid, replicas in enumerate(assignment):
            _validate_manual_assignment(image, pid, replicas, len(assignment[0]))
    else:
        count = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        rf = config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        if count <= 0:
            raise ControllerError(Errors.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
        if rf <= 0:
            raise ControllerError(Errors.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        assignment = _place(image, count, rf, rng)
    topic_configs = _validate_topic_configs((c.name, c.value) for c in topic.configs)
    topic_id = Uuid.random(rng)
    while names.is_taken(topic_id):
        topic_id = Uuid.random(rng)
    names.take(topic.name, topic_id)
    records: list[MetadataRecord] = [TopicRecord(topic.name, topic_id)]
    records += [ConfigRecord(ConfigResourceType.TOPIC, topic.name, k, v) for k, v in topic_configs]
    records += [_new_partition_record(image, topic_id, pid, replicas) for pid, replicas in enumerate(assignment)]
    result = CreatableTopicResult(
        name=topic.name, error_code=Errors.NONE, topic_id=topic_id,
        num_partitions=len(assignment), replication_factor=len(assignment[0]),
    )
    return records, result


def create_topics(
    image: MetadataImage, request: CreateTopicsRequest, config: ControllerConfig, rng: random.Random
) -> ControllerResult[CreateTopicsResponse]:
    """Create each topic that passes validation; a failing topic does not stop the others."""
    records: list[MetadataRecord] = []
    results = []
    counts = Counter(t.name for t in request.topics)
    names = _NewTopicNames(image)
    for topic in request.topics:
        if counts[topic.name] > 1:
            results.append(CreatableTopicResult(topic.name, Errors.INVALID_REQUEST, "Duplicate topic name."))
            continue
        try:
            topic_records, result = _create_topic(image, topic, config, rng, names)
        except ControllerError as exc:
            err = exc.api_error
            results.append(CreatableTopicResult(topic.name, err.code, err.message))
            continue
        records += topic_records
        results.append(result)
    return ControllerResult([] if request.validate_only else records, CreateTopicsResponse(tuple(results)))


# -- DeleteTopics ---------------------------------------------------------------------------------


def delete_topics(
    image: MetadataImage, request: DeleteTopicsRequest, config: ControllerConfig
) -> ControllerResult[DeleteTopicsResponse]:
    records: list[MetadataRecord] = []
    results = []
    deleted: set[Uuid] = set()
    for entry in request.topics:
        topic = image.topics.get_by_name(entry.name) if entry.name is not None else (
            image.topics.get_by_id(entry.topic_id) if entry.topic_id is not None else None
        )
        if not config.delete_topic_enable:
            results.append(DeletableTopicResult(entry.name, entry.topic_id, Errors.TOPIC_DELETION_DISABLED,
                                                "Topic deletion is disabled."))
        elif topic is None:
            error = Errors.UNKNOWN_TOPIC_OR_PARTITION if entry.name is not None else Errors.UNKNOWN_TOPIC_ID
            results.append(DeletableTopicResult(entry.name, entry.topic_id, error, error.name))
        elif topic.id in deleted:
            results.append(DeletableTopicResult(entry.name, entry.topic_id, Errors.INVALID_REQUEST,
                                                "Duplicate topic in request."))
        else:
            deleted.add(topic.id)
            records.append(RemoveTopicRecord(topic.id))
            results.append(DeletableTopicResult(topic.name, topic.id, Errors.NONE))
    return ControllerResult(records, DeleteTopicsResponse(tuple(results)))


# -- CreatePartitions ------------------------------------------------------------------------------


def _create_partitions_for(
    image: MetadataImage, request: CreatePartitionsTopic, rng: random.Random
) -> list[MetadataRecord]:
    topic = image.topics.get_by_name(request.name)
    if topic is None:
        raise ControllerError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{request.name}' does not exist.")
    current = len(topic.partitions)
    if request.count < current:
        raise ControllerError(
            Errors.INVALID_PARTITIONS,
            f"The topic {request.name} currently has {current} partition(s); {request.count} would not be an increase.",
        )
    if request.count == current:
        raise ControllerError(Errors.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    added = request.count - current
    rf = len(topic.partitions[0].replicas)
    if request.assignments is not None:
        if len(request.assignments) != added:
            raise ControllerError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {added} additional partition(s), but only {len(request.assignments)} "
                "assignment(s) were specified.",
            )
        assignment = [tuple(a) for a in request.assignments]
        for i, replicas in enumerate(assignment):
            _validate_manual_assignment(image, current + i, replicas, rf)
    else:
        # Continue the round robin where the topic's placement left it (Kafka's AdminZkClient.addPartitions).
        ordered = sorted(b.id for b in _placement_brokers(image))
        first_leader = topic.partitions[0].replicas[0]
        start = next((i for i, b in enumerate(ordered) if b >= first_leader), 0)
        assignment = _place(image, added, rf, rng, fixed_start_index=start, start_partition_id=current)
    return [_new_partition_record(image, topic.id, current + i, r) for i, r in enumerate(assignment)]


def create_partitions(
    image: MetadataImage, request: CreatePartitionsRequest, config: ControllerConfig, rng: random.Random
) -> ControllerResult[CreatePartitionsResponse]:
    records: list[MetadataRecord] = []
    results = []
    counts = Counter(t.name for t in request.topics)
    for topic in request.topics:
        if counts[topic.name] > 1:
            results.append(CreatePartitionsTopicResult(topic.name, Errors.INVALID_REQUEST, "Duplicate topic name."))
            continue
        try:
            records += _create_partitions_for(image, topic, rng)
        except ControllerError as exc:
            results.append(CreatePartitionsTopicResult(topic.name, exc.api_error.code, exc.api_error.message))
            continue
        results.append(CreatePartitionsTopicResult(topic.name, Errors.NONE))
    return ControllerResult([] if request.validate_only else records, CreatePartitionsResponse(tuple(results)))


# -- AlterPartition ---------------------------------------------------------------------------------


def _alter_partition_error(
    image: MetadataImage, broker_id: int, part: PartitionRegistration | None, data: AlterPartitionPartitionData
) -> Errors:
    """Kafka's ``validateAlterPartitionData``, check for check."""
    if part is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION
    # Epochs from the future: this controller is behind, most likely no longer active.
    if data.leader_epoch > part.leader_epoch or data.partition_epoch > part.partition_epoch:
        return Errors.NOT_CONTROLLER
    if broker_id != part.leader:
        return Errors.INVALID_REQUEST
    if data.leader_epoch < part.leader_epoch:
        return Errors.FENCED_LEADER_EPOCH
    if data.partition_epoch < part.partition_epoch:
        return Errors.INVALID_UPDATE_VERSION
    new_isr = [s.broker_id for s in data.new_isr_with_epochs]
    if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(part.replicas) or part.leader not in new_isr:
        return Errors.INVALID_REQUEST
    if data.leader_recovery_state == LeaderRecoveryState.RECOVERING and len(new_isr) > 1:
        return Errors.INVALID_REQUEST
    if (part.leader_recovery_state == LeaderRecoveryState.RECOVERED
            and data.leader_recovery_state == LeaderRecoveryState.RECOVERING):
        return Errors.INVALID_REQUEST
    for state in data.new_isr_with_epochs:
        reg = image.cluster.broker(state.broker_id)
        if reg is None or reg.fenced or reg.in_controlled_shutdown:
            return Errors.INELIGIBLE_REPLICA
        if state.broker_epoch != -1 and state.broker_epoch != reg.epoch:
            return Errors.INELIGIBLE_REPLICA
    return Errors.NONE


def alter_partition(
    image: MetadataImage, request: AlterPartitionRequest, config: ControllerConfig
) -> ControllerResult[AlterPartitionResponse]:
    """ISR changes sent by partition leaders, checked against broker, leader and partition epochs."""
    reg = image.cluster.broker(request.broker_id)
    if reg is None or reg.epoch != request.broker_epoch:
        return ControllerResult([], AlterPartitionResponse(Errors.STALE_BROKER_EPOCH))
    records: list[MetadataRecord] = []
    topics = []
    for topic_data in request.topics:
        topic = image.topics.get_by_id(topic_data.topic_id)
        results = []
        for data in topic_data.partitions:
            if topic is None:
                results.append(AlterPartitionPartitionResult(data.partition_index, Errors.UNKNOWN_TOPIC_ID))
                continue
            part = topic.partitions.get(data.partition_index)
            error = _alter_partition_error(image, request.broker_id, part, data)
            if error is not Errors.NONE:
                results.append(AlterPartitionPartitionResult(data.partition_index, error))
                continue
            assert part is not None
            builder = _builder(image, config, topic, data.partition_index)
            builder.set_target_isr(tuple(s.broker_id for s in data.new_isr_with_epochs))
            builder.set_target_leader_recovery_state(LeaderRecoveryState(data.leader_recovery_state))
            change = builder.build()
            after = part if change is None else part.merge(change)
            if change is not None:
                records.append(change)
            error = Errors.NONE if after.leader == part.leader else Errors.NEW_LEADER_ELECTED
            results.append(
                AlterPartitionPartitionResult(
                    partition_index=data.partition_index,
                    error_code=error,
                    leader_id=after.leader,
                    leader_epoch=after.leader_epoch,
                    isr=after.isr,
                    leader_recovery_state=int(after.leader_recovery_state),
                    partition_epoch=after.partition_epoch,
                )
            )
        topics.append(AlterPartitionTopicResult(topic_data.topic_id, tuple(results)))
    return ControllerResult(records, AlterPartitionResponse(Errors.NONE, tuple(topics)))


# -- broker state changes -------------------------------------------------------------------------


# Each of these looks its partitions up in the image's TopicsIndex (the broker's ISR memberships and
# leaderships, the leaderless partitions, the partitions off their preferred leader), so its cost is
# proportional to the partitions involved, not to the cluster. Records come out in (topic name,
# partition) order, as a scan would give them.


def fence_brokers_changes(
    image: MetadataImage, broker_ids: set[int] | frozenset[int], config: ControllerConfig
) -> list[PartitionChangeRecord]:
    """Take ``broker_ids`` (already fenced, or gone, in ``image``) out of every ISR and leadership."""
    if len(broker_ids) == 1:
        involved = image.topics.partitions_of_broker(next(iter(broker_ids)))
    else:
        seen: dict[tuple[Uuid, int], tuple[TopicImage, int, PartitionRegistration]] = {}
        for broker_id in broker_ids:
            for entry in image.topics.partitions_of_broker(broker_id):
                seen[(entry[0].id, entry[1])] = entry
        involved = sorted(seen.values(), key=lambda e: (e[0].name, e[1]))
    changes = []
    builders = _Builders(image, config)
    for topic, pid, part in involved:
        if part.leader not in broker_ids and not broker_ids.intersection(part.isr):
            continue
        builder = builders(topic, pid).set_target_isr(isr_without(part.isr, broker_ids, part.leader))
        change = builder.build()
        if change is not None:
            changes.append(change)
    return changes


def offline_replica_changes(
    image: MetadataImage, broker_id: int, offline: Iterable[OfflineReplicaTopic], config: ControllerConfig
) -> list[PartitionChangeRecord]:
    """Take ``broker_id`` out of the ISR and the leadership of the partitions whose replica on it is
    offline (its log failed there), as Kafka's controller does for the replicas in a failed log dir:
    another ISR member leads; with none, the partition has no leader and keeps its ISR (KIP-841), so
    the replica can lead again once it is back. Replicas the broker does not hold, and partitions
    already without it, are left alone: a broker repeats its list in every heartbeat."""
    reg = image.cluster.broker(broker_id)
    if reg is None:
        return []
    # The elections below must not pick the broker for these partitions: they see it as fenced.
    cluster = attrs.evolve(image.cluster, brokers={**image.cluster.brokers, broker_id: attrs.evolve(reg, fenced=True)})
    changes = []
    seen: set[tuple[Uuid, int]] = set()
    for entry in offline:
        topic = image.topics.get_by_id(entry.topic_id)
        if topic is None:
            continue
        for pid in entry.partitions:
            part = topic.partitions.get(pid)
            if part is None or (topic.id, pid) in seen or broker_id not in part.replicas:
                continue
            seen.add((topic.id, pid))
            if part.leader != broker_id and broker_id not in part.isr:
                continue
            builder = PartitionChangeBuilder(topic.id, pid, part, cluster,
                                             unclean_allowed=unclean_election_allowed(image, config, topic.name))
            change = builder.set_target_isr(isr_without(part.isr, {broker_id}, part.leader)).build()
            if change is not None:
                changes.append(change)
    return changes


def _has_successor(image: MetadataImage, part: PartitionRegistration, broker_id: int) -> bool:
    return any(r != broker_id and image.cluster.is_active(r) for r in part.isr)


def controlled_shutdown_changes(
    image: MetadataImage, broker_id: int, config: ControllerConfig
) -> list[PartitionChangeRecord]:
    """Move leaderships off ``broker_id`` (in controlled shutdown in ``image``) to another ISR member, and
    take it out of ISRs it follows in. A partition it leads with no successor stays with it."""
    changes = []
    builders = _Builders(image, config)
    for topic, pid, part in image.topics.partitions_of_broker(broker_id):
        if broker_id not in part.isr:
            continue
        if part.leader == broker_id and not _has_successor(image, part, broker_id):
            continue
        target = tuple(r for r in part.isr if r != broker_id)
        if not target:
            continue
        change = builders(topic, pid).set_target_isr(target).build()
        if change is not None:
            changes.append(change)
    return changes


def movable_leaderships(image: MetadataImage, broker_id: int) -> int:
    """How many partitions ``broker_id`` leads that another active ISR member could lead instead."""
    return sum(
        1 for _, _, part in image.topics.partitions_led_by(broker_id)
        if _has_successor(image, part, broker_id)
    )


def elect_leaderless_partitions(image: MetadataImage, config: ControllerConfig) -> list[PartitionChangeRecord]:
    """Give a leader to every partition without one that can have one now (after an unfencing)."""
    changes = []
    builders = _Builders(image, config)
    for topic, pid, _ in image.topics.partitions_without_leader():
        change = builders(topic, pid).build()
        if change is not None:
            changes.append(change)
    return changes


def preferred_leader_changes(
    image: MetadataImage, config: ControllerConfig, limit: int | None = None
) -> list[PartitionChangeRecord]:
    """Move leadership back to the preferred replica wherever it is an active ISR member."""
    changes: list[PartitionChangeRecord] = []
    builders = _Builders(image, config)
    for topic, pid, part in image.topics.partitions_off_preferred():
        if limit is not None and len(changes) >= limit:
            break
        change = builders(topic, pid).set_election(Election.PREFERRED).build()
        if change is not None and change.leader == part.preferred_leader:
            changes.append(change)
    return changes


# -- ElectLeaders ---------------------------------------------------------------------------------


def _elect_one(
    image: MetadataImage, config: ControllerConfig, topic: TopicImage, pid: int, election_type: ElectionType
) -> tuple[Errors, str | None, PartitionChangeRecord | None]:
    part = topic.partitions[pid]
    if election_type is ElectionType.PREFERRED:
        if part.leader == part.preferred_leader:
            return Errors.ELECTION_NOT_NEEDED, "Leader is already the preferred replica.", None
        preferred = part.preferred_leader
        if preferred not in part.isr or not image.cluster.is_active(preferred):
            return Errors.PREFERRED_LEADER_NOT_AVAILABLE, f"Preferred replica {preferred} is not available.", None
        change = _builder(image, config, topic, pid).set_election(Election.PREFERRED).build()
        return Errors.NONE, None, change
    if part.has_leader and image.cluster.is_active(part.leader):
        return Errors.ELECTION_NOT_NEEDED, "The partition has a leader.", None
    change = _builder(image, config, topic, pid).set_election(Election.UNCLEAN).build()
    if change is None or change.leader == -1:
        return Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, "No replica of the partition is available.", None
    return Errors.NONE, None, change


def _election_candidates(image: MetadataImage, election_type: ElectionType) -> list[tuple[str, list[int]]]:
    """The partitions where an election of ``election_type`` may be needed, by topic in name order: for
    PREFERRED those off their preferred leader; for UNCLEAN those without a leader or led by a broker
    that is not active. Every other partition would answer ELECTION_NOT_NEEDED."""
    if election_type is ElectionType.PREFERRED:
        entries = image.topics.partitions_off_preferred()
    else:
        found = {(t.id, pid): (t, pid, p) for t, pid, p in image.topics.partitions_without_leader()}
        for broker_id in image.topics.brokers_in_partitions():
            if not image.cluster.is_active(broker_id):
                found.update(((t.id, pid), (t, pid, p)) for t, pid, p in image.topics.partitions_led_by(broker_id))
        entries = sorted(found.values(), key=lambda e: (e[0].name, e[1]))
    wanted: list[tuple[str, list[int]]] = []
    for topic, pid, _ in entries:
        if wanted and wanted[-1][0] == topic.name:
            wanted[-1][1].append(pid)
        else:
            wanted.append((topic.name, [pid]))
    return wanted


def elect_leaders(
    image: MetadataImage, request: ElectLeadersRequest, config: ControllerConfig
) -> ControllerResult[ElectLeadersResponse]:
    """Preferred or unclean elections on request. With no partitions named, every partition is tried and
    only those where an election was needed are reported (as Kafka does)."""
    election_type = ElectionType(request.election_type)
    records: list[MetadataRecord] = []
    results = []
    if request.topic_partitions is None:
        wanted = _election_candidates(image, election_type)
    else:
        wanted = [(tp.topic, list(tp.partitions)) for tp in request.topic_partitions]
    for name, pids in wanted:
        topic = image.topics.get_by_name(name)
        partition_results = []
        for pid in pids:
            if topic is None or pid not in topic.partitions:
                partition_results.append(PartitionResult(pid, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                                         "The partition does not exist."))
                continue
            error, message, change = _elect_one(image, config, topic, pid, election_type)
            if change is not None:
                records.append(change)
            if request.topic_partitions is None and error is Errors.ELECTION_NOT_NEEDED:
                continue
            partition_results.append(PartitionResult(pid, error, message))
        if partition_results or request.topic_partitions is not None:
            results.append(ReplicaElectionResult(name, tuple(partition_results)))
    return ControllerResult(records, ElectLeadersResponse(Errors.NONE, tuple(results)), atomic=False)


# -- reporting ------------------------------------------------------------------------------------


@attrs.frozen
class UncleanElection:
    """A leader elected from outside the ISR: what the operator is told about it."""

    topic: str
    partition: int
    old_leader: int
    old_isr: tuple[int, ...]
    new_leader: int


def unclean_elections(before: MetadataImage, records: Sequence[MetadataRecord]) -> list[UncleanElection]:
    """The unclean elections among ``records`` (to be applied to ``before``): changes that give a partition
    a leader in the RECOVERING state. Records the old ISR held past the new leader's log end offset are
    lost; only that broker knows the offset, and it logs it when it takes the leadership."""
    out = []
    for record in records:
        if not isinstance(record, PartitionChangeRecord) or record.leader < 0:
            continue
        if record.leader_recovery_state != int(LeaderRecoveryState.RECOVERING):
            continue
        topic = before.topics.get_by_id(record.topic_id)
        part = topic.partitions.get(record.partition_id) if topic is not None else None
        if topic is None or part is None:
            continue
        out.append(UncleanElection(topic.name, record.partition_id, part.leader, part.isr, record.leader))
    return out

