"""A log directory that fails while the broker runs goes offline whole (Kafka's log-dir failure).

Brokers with two formatted log directories each, an in-process controller: an I/O error (EIO, not a
full disk) on one replica's files, or on the directory's own checkpoint files, takes every replica of
that directory offline — KAFKA_STORAGE_ERROR, no more writes — while the replicas of the other
directory go on; the heartbeat names the directory by its id and the controller moves leadership.
The last directory failing stops the broker with one line.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.fatal import FatalError, fatal_message
from kraftpy.metadata.messages import (
    AssignReplicasToDirsDirectory,
    AssignReplicasToDirsPartition,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsTopic,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeLogDirsRequest
from kraftpy.storage.log_manager import RECOVERY_POINT_CHECKPOINT_FILE
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, fetch, produce, values_of


def _fail_appends(part) -> None:
    def failing(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    part.log.append_as_leader = failing


def _dir_of(part) -> Path:
    return part.log.directory.parent


async def test_an_io_error_on_one_replica_takes_its_whole_log_dir_offline_and_the_other_dir_serves(tmp_path):
    async with open_cluster(tmp_path, brokers=1, log_dirs_per_broker=2) as cluster:
        await cluster.create_topic("t", partitions=4)
        broker = cluster.brokers[1]
        parts = {p: cluster.partition(1, "t", p) for p in range(4)}
        dirs = {p: _dir_of(part) for p, part in parts.items()}
        assert len(set(dirs.values())) == 2  # placed in both directories
        victim = 0
        failed_dir = dirs[victim]
        same_dir = [p for p in parts if dirs[p] == failed_dir]
        other_dir = [p for p in parts if dirs[p] != failed_dir]
        assert len(same_dir) == 2 and len(other_dir) == 2
        _fail_appends(parts[victim])
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            assert (await produce(conn, "t", victim, batch(b"x"))).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            for p in same_dir:
                assert broker.replicas.is_offline("t", p)
                assert (await produce(conn, "t", p, batch(b"y"))).error_code == ErrorCode.KAFKA_STORAGE_ERROR
                assert (await fetch(conn, "t", p, 0)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            for p in other_dir:
                assert not broker.replicas.is_offline("t", p)
                assert (await produce(conn, "t", p, batch(b"ok"))).error_code == ErrorCode.NONE
                assert values_of((await fetch(conn, "t", p, 0)).records) == [b"ok"]
            described = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
            errors = {Path(r.log_dir): r.error_code for r in described.results}
            assert errors[failed_dir] == ErrorCode.KAFKA_STORAGE_ERROR
            assert errors[dirs[other_dir[0]]] == ErrorCode.NONE
        ids = broker.replicas.log_manager.directory_ids()
        assert broker.offline_log_dirs() == (ids[failed_dir],)
        offline = {p for topic in broker.offline_replicas() for p in topic.partitions}
        assert offline == set(same_dir)
        # Closed, and nothing more written there: a checkpoint leaves the failed directory's files alone.
        with trio.fail_after(10):
            while not all(parts[p].log.closed for p in same_dir):
                await trio.lowlevel.checkpoint()
        before = (failed_dir / RECOVERY_POINT_CHECKPOINT_FILE).read_bytes() \
            if (failed_dir / RECOVERY_POINT_CHECKPOINT_FILE).exists() else None
        await broker.replicas.checkpoint_now()
        after = (failed_dir / RECOVERY_POINT_CHECKPOINT_FILE).read_bytes() \
            if (failed_dir / RECOVERY_POINT_CHECKPOINT_FILE).exists() else None
        assert before == after
        written = (dirs[other_dir[0]] / RECOVERY_POINT_CHECKPOINT_FILE).read_text()
        assert all(f"t {p} " in written for p in other_dir)


async def test_a_checkpoint_that_cannot_be_written_takes_its_dir_offline(tmp_path):
    async with open_cluster(tmp_path, brokers=1, log_dirs_per_broker=2) as cluster:
        await cluster.create_topic("t", partitions=2)
        broker = cluster.brokers[1]
        dirs = {p: _dir_of(cluster.partition(1, "t", p)) for p in range(2)}
        assert dirs[0] != dirs[1]
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for p in range(2):
                assert (await produce(conn, "t", p, batch(b"a"))).error_code == ErrorCode.NONE
        # The temporary file of the checkpoint is a directory: its open fails with EISDIR.
        (dirs[1] / (RECOVERY_POINT_CHECKPOINT_FILE + ".tmp")).mkdir()
        await broker.replicas.checkpoint_now()
        assert broker.replicas.is_offline("t", 1) and not broker.replicas.is_offline("t", 0)
        assert dirs[1] in broker.replicas.log_manager.offline_dirs
        assert "EISDIR" in broker.replicas.log_manager.offline_dirs[dirs[1]]


async def test_the_controller_moves_leadership_off_a_failed_dir(tmp_path):
    async with open_cluster(tmp_path, brokers=2, log_dirs_per_broker=2) as cluster:
        await cluster.create_topic("t", partitions=1, replication_factor=2)
        leader = cluster.leader("t")
        other = 3 - leader
        await cluster.wait_for(lambda: cluster.partition(other, "t") is not None)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader]) as conn:
            assert (await produce(conn, "t", 0, batch(b"a"))).error_code == ErrorCode.NONE
            _fail_appends(cluster.partition(leader, "t"))
            assert (await produce(conn, "t", 0, batch(b"b"))).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        cluster.controller.heartbeat(leader)
        await cluster.caught_up()
        assert cluster.leader("t") == other
        assert leader not in cluster.registration("t", 0).isr
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[other]) as conn:
            assert (await produce(conn, "t", 0, batch(b"c"), acks=1)).error_code == ErrorCode.NONE
            assert values_of((await fetch(conn, "t", 0, 0)).records) == [b"a", b"c"]


async def test_the_broker_stops_when_its_last_log_dir_fails(tmp_path):
    stopped = None
    try:
        async with open_cluster(tmp_path, brokers=1) as cluster:
            await cluster.create_topic("t", partitions=1)
            _fail_appends(cluster.partition(1, "t"))
            async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
                await produce(conn, "t", 0, batch(b"x"))
            with trio.fail_after(10):
                await trio.sleep_forever()
    except* FatalError as group:
        stopped = group
    assert stopped is not None
    message = fatal_message(stopped)
    assert "every log directory failed" in message and "EIO" in message and "\n" not in message


async def test_each_replica_is_placed_in_a_dir_and_the_controller_records_which(tmp_path):
    async with open_cluster(tmp_path, brokers=2, log_dirs_per_broker=2) as cluster:
        await cluster.create_topic("t", partitions=4, replication_factor=2)
        registered = {b: cluster.image.cluster.broker(b).directories for b in (1, 2)}
        assert all(len(dirs) == 2 for dirs in registered.values())

        def recorded_everywhere() -> bool:
            for p in range(4):
                reg = cluster.registration("t", p)
                for b in reg.replicas:
                    ids = cluster.brokers[b].replicas.log_manager.directory_ids()
                    if reg.directory_of(b) != ids[_dir_of(cluster.partition(b, "t", p))]:
                        return False
            return True

        # The controller's image records every placement; each broker drops what it sent once its
        # own metadata (or the controller's answer) shows it recorded: nothing stays pending.
        await cluster.wait_for(lambda: recorded_everywhere()
                               and not any(b.replicas.pending_dir_assignments for b in cluster.brokers.values()))


async def test_a_new_replica_goes_to_the_dir_the_metadata_records_for_it(tmp_path):
    async with open_cluster(tmp_path, brokers=1, log_dirs_per_broker=2) as cluster:
        broker = cluster.brokers[1]
        ids = broker.replicas.log_manager.directory_ids()
        second = list(ids)[1]
        await cluster.create_topic("a", partitions=1)
        # A replica recorded in the second directory and found in none is created there (not in the
        # directory holding the fewest partitions).
        await cluster.wait_for(lambda: cluster.registration("a", 0).directory_of(1) is not None
                               and not broker.replicas.pending_dir_assignments)
        part = cluster.partition(1, "a")
        assert ids[_dir_of(part)] == cluster.registration("a", 0).directory_of(1)
        topic_id = cluster.image.topics.get_by_name("a").id
        await cluster.stop_broker(1)
        # Recorded in the second directory while the broker is away (as if another copy had moved there).
        response = await cluster.controller.assign_replicas_to_dirs(AssignReplicasToDirsRequest(
            1, cluster.image.cluster.broker(1).epoch, (AssignReplicasToDirsDirectory(ids[second], (
                AssignReplicasToDirsTopic(topic_id, (AssignReplicasToDirsPartition(0),)),)),)))
        assert response.error_code == ErrorCode.NONE
        for child in list(_dir_of(part).iterdir()):
            if child.name.startswith("a-0"):
                shutil.rmtree(child)
        broker = await cluster.restart_broker(1)
        await cluster.wait_for(lambda: cluster.partition(1, "a") is not None)
        assert _dir_of(cluster.partition(1, "a")) == second
