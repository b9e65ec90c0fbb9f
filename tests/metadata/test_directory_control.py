"""KIP-858 directory assignment in the controller: brokers register their log directories, partitions
record the directory of each replica, AssignReplicasToDirs changes it, and a heartbeat's OfflineLogDirs
takes exactly the replicas recorded in those directories offline."""

from __future__ import annotations

import attrs

from kraftpy.ids import Uuid
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import MetadataProvenance
from kraftpy.metadata.messages import (
    AlterPartitionReassignmentsRequest,
    AssignReplicasToDirsDirectory,
    AssignReplicasToDirsPartition,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsTopic,
    BrokerHeartbeatRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kraftpy.metadata.records import DIRECTORY_LOST, DIRECTORY_UNASSIGNED, PartitionChangeRecord
from kraftpy.metadata.snapshot import decode_snapshot, encode_snapshot
from tests.metadata.conftest import Cluster, registration_request


def dir_id(broker_id: int, k: int) -> Uuid:
    return Uuid(bytes([broker_id, k]) + b"d" * 14)


def cluster_with_dirs(dirs_per_broker: int = 2) -> Cluster:
    c = Cluster()
    for b in (1, 2, 3):
        request = attrs.evolve(registration_request(b), log_dirs=tuple(dir_id(b, k) for k in range(dirs_per_broker)))
        response = c.commit(c.controller.handle_broker_registration(request, c.now, c.next_offset))
        assert response.error_code == Errors.NONE, response
        assert not c.heartbeat(b).is_fenced
    return c


def assign(c: Cluster, broker_id: int, directory: Uuid, topic: str, *pids: int, epoch: int | None = None):
    reg = c.image.cluster.broker(broker_id)
    topic_id = c.topic(topic).id if topic in c.image.topics.by_name else Uuid(b"x" * 16)
    request = AssignReplicasToDirsRequest(broker_id, reg.epoch if epoch is None else epoch, (
        AssignReplicasToDirsDirectory(directory, (
            AssignReplicasToDirsTopic(topic_id, tuple(AssignReplicasToDirsPartition(p) for p in pids)),)),))
    return c.commit(c.controller.handle_assign_replicas_to_dirs(request))


def test_a_registration_records_the_brokers_log_dirs():
    c = cluster_with_dirs()
    assert c.image.cluster.broker(2).directories == (dir_id(2, 0), dir_id(2, 1))


def test_reserved_or_repeated_directory_ids_are_an_invalid_registration():
    c = Cluster()
    for dirs in [(DIRECTORY_UNASSIGNED,), (DIRECTORY_LOST,), (dir_id(1, 0), dir_id(1, 0))]:
        request = attrs.evolve(registration_request(1), log_dirs=dirs)
        response = c.commit(c.controller.handle_broker_registration(request, c.now, c.next_offset))
        assert response.error_code == Errors.INVALID_REGISTRATION
    assert c.image.cluster.broker(1) is None


def test_a_new_replica_is_recorded_in_the_only_dir_of_its_broker_or_unassigned():
    single = cluster_with_dirs(1)
    single.create_topic("t", assignments=[[1, 2]])
    assert single.partition("t").directories == (dir_id(1, 0), dir_id(2, 0))
    several = cluster_with_dirs(2)
    several.create_topic("t", assignments=[[1, 2]])
    assert several.partition("t").directories == (DIRECTORY_UNASSIGNED, DIRECTORY_UNASSIGNED)


def test_assign_replicas_to_dirs_records_the_directory_of_that_brokers_replica():
    c = cluster_with_dirs()
    c.create_topic("t", assignments=[[1, 2], [2, 3]])
    before = c.partition("t", 0)
    response = assign(c, 2, dir_id(2, 1), "t", 0, 1)
    assert response.error_code == Errors.NONE
    assert [p.error_code for p in response.directories[0].topics[0].partitions] == [Errors.NONE, Errors.NONE]
    after = c.partition("t", 0)
    assert after.directories == (DIRECTORY_UNASSIGNED, dir_id(2, 1))
    assert c.partition("t", 1).directories == (dir_id(2, 1), DIRECTORY_UNASSIGNED)
    # Only the directories change: leadership, ISR and leader epoch stay.
    assert (after.leader, after.isr, after.leader_epoch) == (before.leader, before.isr, before.leader_epoch)
    written = len(c.log)
    assign(c, 2, dir_id(2, 1), "t", 0)  # the same again: nothing to write
    assert len(c.log) == written


def test_assign_replicas_to_dirs_errors():
    c = cluster_with_dirs()
    c.create_topic("t", assignments=[[1, 2]])
    assert assign(c, 3, dir_id(3, 0), "t", 0).directories[0].topics[0].partitions[0].error_code == \
        Errors.NOT_LEADER_OR_FOLLOWER
    assert assign(c, 1, dir_id(1, 0), "t", 7).directories[0].topics[0].partitions[0].error_code == \
        Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert assign(c, 1, dir_id(1, 0), "nope", 0).directories[0].topics[0].partitions[0].error_code == \
        Errors.UNKNOWN_TOPIC_ID
    assert assign(c, 1, dir_id(1, 0), "t", 0, epoch=12345).error_code == Errors.STALE_BROKER_EPOCH


def test_a_replica_assigned_to_a_dir_the_broker_did_not_register_loses_its_leadership():
    c = cluster_with_dirs()
    c.create_topic("t", assignments=[[1, 2]])
    assign(c, 1, Uuid(b"z" * 16), "t", 0)
    part = c.partition("t")
    assert part.leader == 2 and part.isr == (2,) and part.directories[0] == Uuid(b"z" * 16)


def test_offline_log_dirs_take_exactly_the_replicas_recorded_there_offline():
    c = cluster_with_dirs()
    c.create_topic("t", assignments=[[1, 2], [1, 2], [2, 1]])
    assign(c, 1, dir_id(1, 0), "t", 0, 2)
    assign(c, 1, dir_id(1, 1), "t", 1)
    reg = c.image.cluster.broker(1)
    request = BrokerHeartbeatRequest(1, reg.epoch, c.next_offset - 1, offline_log_dirs=(dir_id(1, 0),))
    response = c.commit(c.controller.handle_broker_heartbeat(request, c.now))
    assert response.error_code == Errors.NONE and not response.is_fenced
    assert c.partition("t", 0).leader == 2 and c.partition("t", 0).isr == (2,)
    assert c.partition("t", 2).leader == 2 and c.partition("t", 2).isr == (2,)
    assert c.partition("t", 1).leader == 1 and c.partition("t", 1).isr == (1, 2)  # in the other dir
    written = len(c.log)
    c.commit(c.controller.handle_broker_heartbeat(attrs.evolve(request, current_metadata_offset=c.next_offset - 1),
                                                  c.now))
    assert len(c.log) == written  # repeated in every heartbeat: nothing more


def test_a_reassignment_keeps_the_directories_of_replicas_that_stay():
    c = cluster_with_dirs()
    c.create_topic("t", assignments=[[1, 2]])
    assign(c, 1, dir_id(1, 1), "t", 0)
    response = c.commit(c.controller.handle_alter_partition_reassignments(AlterPartitionReassignmentsRequest((
        ReassignableTopic("t", (ReassignablePartition(0, (1, 3)),)),))))
    assert response.error_code == Errors.NONE, response
    part = c.partition("t")
    assert part.directory_of(1) == dir_id(1, 1) and part.directory_of(3) == DIRECTORY_UNASSIGNED
    assert len(part.directories) == len(part.replicas)


def test_a_snapshot_keeps_the_directories():
    c = cluster_with_dirs()
    c.create_topic("t", assignments=[[1, 2]])
    assign(c, 2, dir_id(2, 1), "t", 0)
    image = decode_snapshot(encode_snapshot(c.image), MetadataProvenance(c.next_offset - 1, 1))
    assert image.topics.get_by_name("t").partitions[0].directories == (DIRECTORY_UNASSIGNED, dir_id(2, 1))
    assert image.cluster.broker(2).directories == (dir_id(2, 0), dir_id(2, 1))


def test_a_change_record_without_directories_leaves_them():
    c = cluster_with_dirs()
    c.create_topic("t", assignments=[[1, 2]])
    assign(c, 1, dir_id(1, 0), "t", 0)
    part = c.partition("t")
    merged = part.merge(PartitionChangeRecord(0, c.topic("t").id, isr=(1,)))
    assert merged.directories == part.directories
