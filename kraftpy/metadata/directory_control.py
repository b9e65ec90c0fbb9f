"""Log directories of brokers (KIP-858): which directory holds each replica, and what a failed one means.

A broker registers the ids (``directory.id`` of ``meta.properties``) of its online log directories
(``RegisterBrokerRecord.log_dirs``). A partition records the directory of each replica
(``PartitionRecord.directories``, in ``replicas`` order): a new replica is recorded in its broker's
only directory, or `DIRECTORY_UNASSIGNED` when the broker has several, until the broker says where it
placed it — AssignReplicasToDirs, answered here with a PartitionChangeRecord that sets the new
``directories``. A broker's heartbeat names its offline directories (OfflineLogDirs); the replicas
recorded in one of them are the offline ones, and they lose their leadership and ISR places as any
offline replica does (:func:`kraftpy.metadata.replication_control.offline_replica_changes`).

Like the rest of the controller, these are pure functions of (image, request) returning records.
"""

from __future__ import annotations

from collections.abc import Iterable

from kraftpy.ids import Uuid
from kraftpy.metadata import replication_control
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.delta import replay_records
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.messages import (
    AssignReplicasToDirsDirectoryResult,
    AssignReplicasToDirsPartitionResult,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    AssignReplicasToDirsTopicResult,
    BrokerRegistrationRequest,
    OfflineReplicaTopic,
)
from kraftpy.metadata.records import RESERVED_DIRECTORY_IDS, MetadataRecord, PartitionChangeRecord
from kraftpy.metadata.result import ControllerResult


def registration_directories_error(request: BrokerRegistrationRequest) -> str | None:
    """Why the log directories a broker registers cannot be taken (Kafka answers INVALID_REGISTRATION)."""
    seen: set[Uuid] = set()
    for directory in request.log_dirs:
        if directory in RESERVED_DIRECTORY_IDS:
            return f"Reserved directory ID in registration: {directory}"
        if directory in seen:
            return f"Duplicate directory ID in registration: {directory}"
        seen.add(directory)
    return None


def assign_replicas_to_dirs(
    image: MetadataImage, request: AssignReplicasToDirsRequest, config: ControllerConfig
) -> ControllerResult[AssignReplicasToDirsResponse]:
    """Record the directory a broker placed each of its replicas in. A replica assigned to a
    directory the broker did not register as online loses its leadership and ISR place as well
    (Kafka does the same). Per partition: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, or
    NOT_LEADER_OR_FOLLOWER when the broker holds no replica of it."""
    reg = image.cluster.broker(request.broker_id)
    if reg is None:
        return ControllerResult([], AssignReplicasToDirsResponse(Errors.BROKER_ID_NOT_REGISTERED))
    if reg.epoch != request.broker_epoch:
        return ControllerResult([], AssignReplicasToDirsResponse(Errors.STALE_BROKER_EPOCH))
    records: list[MetadataRecord] = []
    #: Partition -> its directories as changed so far by this request (one record per partition).
    changed: dict[tuple[Uuid, int], list[Uuid]] = {}
    offline: dict[Uuid, list[int]] = {}
    results = []
    for directory in request.directories:
        topic_results = []
        for topic_data in directory.topics:
            topic = image.topics.get_by_id(topic_data.topic_id)
            partition_results = []
            for data in topic_data.partitions:
                index = data.partition_index
                if topic is None:
                    error = Errors.UNKNOWN_TOPIC_ID
                elif (part := topic.partitions.get(index)) is None:
                    error = Errors.UNKNOWN_TOPIC_OR_PARTITION
                elif request.broker_id not in part.replicas:
                    error = Errors.NOT_LEADER_OR_FOLLOWER
                else:
                    error = Errors.NONE
                    dirs = changed.setdefault((topic.id, index), list(part.directories))
                    dirs[part.replicas.index(request.broker_id)] = directory.id
                    if directory.id not in reg.directories:
                        offline.setdefault(topic.id, []).append(index)
                partition_results.append(AssignReplicasToDirsPartitionResult(index, error))
            topic_results.append(AssignReplicasToDirsTopicResult(topic_data.topic_id, tuple(partition_results)))
        results.append(AssignReplicasToDirsDirectoryResult(directory.id, tuple(topic_results)))
    for (topic_id, index), dirs in changed.items():
        part = image.topics.get_by_id(topic_id).partitions[index]
        if tuple(dirs) != part.directories:
            records.append(PartitionChangeRecord(index, topic_id, directories=tuple(dirs)))
    if offline:
        after = replay_records(image, records) if records else image
        records += replication_control.offline_replica_changes(
            after, request.broker_id, [OfflineReplicaTopic(t, tuple(ps)) for t, ps in offline.items()], config)
    return ControllerResult(records, AssignReplicasToDirsResponse(Errors.NONE, tuple(results)))


def replicas_in_directories(image: MetadataImage, broker_id: int, directories: Iterable[Uuid]) -> list[OfflineReplicaTopic]:
    """The replicas of ``broker_id`` recorded in one of ``directories`` (the offline ones it reports)."""
    wanted = set(directories)
    if not wanted:
        return []
    out: dict[Uuid, list[int]] = {}
    for topic, pid, part in image.topics.partitions_of_broker(broker_id):
        if part.directory_of(broker_id) in wanted:
            out.setdefault(topic.id, []).append(pid)
    return [OfflineReplicaTopic(topic_id, tuple(sorted(pids))) for topic_id, pids in out.items()]
