"""AlterReplicaLogDirs: a replica moves to another log directory of its broker while it serves.

One broker with two formatted log directories and an in-process controller: a move under produce
loses nothing and ends with the log in the target directory (the old one removed, the controller told
the new directory); DescribeLogDirs lists the future log while it is copied; Kafka's errors.
"""

from __future__ import annotations

from pathlib import Path

import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import AlterReplicaLogDirsRequest, DescribeLogDirsRequest
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, fetch, produce, values_of

NO_DELAY = {"file.delete.delay.ms": "0", "segment.bytes": "4096"}


def alter_request(path: Path, topic: str, *partitions: int) -> AlterReplicaLogDirsRequest:
    return AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(
        path=str(path), topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=topic,
                                                                                 partitions=list(partitions))])])


def errors_of(response) -> dict[tuple[str, int], int]:
    return {(t.topic_name, p.partition_index): p.error_code for t in response.results for p in t.partitions}


async def read_all(conn, topic: str) -> list[bytes]:
    values: list[bytes] = []
    while True:
        data = await fetch(conn, topic, 0, len(values), partition_max_bytes=1 << 20)
        assert data.error_code == ErrorCode.NONE, data
        got = values_of(data.records)
        if not got:
            return values
        values += got


async def test_a_move_under_produce_loses_nothing_and_ends_in_the_target_dir(tmp_path):
    async with open_cluster(tmp_path, brokers=1, log_dirs_per_broker=2) as cluster:
        await cluster.create_topic("t", configs=NO_DELAY)
        broker = cluster.brokers[1]
        part = cluster.partition(1, "t")
        source = part.log.directory.parent
        (target,) = [d for d in broker.replicas.log_manager.dirs if d != source]
        acknowledged: list[bytes] = []
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for i in range(200):  # several segments to copy
                value = b"before-%04d" % i
                assert (await produce(conn, "t", 0, batch(value))).error_code == ErrorCode.NONE
                acknowledged.append(value)
            moved = trio.Event()

            async def producer() -> None:
                async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as writer:
                    i = 0
                    while not moved.is_set() or i < 20:
                        value = b"during-%04d" % i
                        result = await produce(writer, "t", 0, batch(value))
                        assert result.error_code == ErrorCode.NONE, result
                        acknowledged.append(value)
                        i += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(producer)
                response = await conn.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, alter_request(target, "t", 0))
                assert errors_of(response) == {("t", 0): ErrorCode.NONE}
                await cluster.wait_for(lambda: cluster.partition(1, "t").log.directory.parent == target)
                moved.set()
            assert await read_all(conn, "t") == acknowledged
            new_log = cluster.partition(1, "t").log
            assert new_log.log_end_offset == len(acknowledged)
            ids = broker.replicas.log_manager.directory_ids()
            await cluster.wait_for(lambda: cluster.registration("t", 0).directory_of(1) == ids[target])
            with trio.fail_after(10):  # the old directory goes after file.delete.delay.ms (0 here)
                while any(child.name.startswith("t-0") for child in source.iterdir()):
                    await broker.replicas.deleted.wait()
            assert not broker.replicas.mover.futures
            described = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
            where = {Path(r.log_dir): [(t.name, p.partition_index, p.is_future_key) for t in r.topics
                                       for p in t.partitions] for r in described.results}
            assert where == {source: [], target: [("t", 0, False)]}


async def test_describe_log_dirs_shows_the_future_log_while_it_copies(tmp_path):
    async with open_cluster(tmp_path, brokers=1, log_dirs_per_broker=2) as cluster:
        await cluster.create_topic("t", configs=NO_DELAY)
        broker = cluster.brokers[1]
        source = cluster.partition(1, "t").log.directory.parent
        (target,) = [d for d in broker.replicas.log_manager.dirs if d != source]
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for i in range(50):
                assert (await produce(conn, "t", 0, batch(b"v%d" % i))).error_code == ErrorCode.NONE
            # The swap needs the log directories' lock: held here, the copy catches up and waits.
            async with broker.replicas._log_manager_lock:
                response = await conn.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, alter_request(target, "t", 0))
                assert errors_of(response) == {("t", 0): ErrorCode.NONE}
                future = broker.replicas.mover.futures[cluster.partition(1, "t").tp]
                with trio.fail_after(10):
                    while future.lag:
                        await broker.replicas.mover.progressed.wait()
                described = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
                by_dir = {Path(r.log_dir): {(p.partition_index, p.is_future_key): p for t in r.topics
                                            for p in t.partitions} for r in described.results}
                assert set(by_dir[source]) == {(0, False)} and set(by_dir[target]) == {(0, True)}
                assert by_dir[target][(0, True)].offset_lag == 0
                assert by_dir[target][(0, True)].partition_size == by_dir[source][(0, False)].partition_size
                assert future.log.directory.name.startswith("t-0.") and future.log.directory.name.endswith("-future")
            await cluster.wait_for(lambda: cluster.partition(1, "t").log.directory.parent == target)
            assert values_of((await fetch(conn, "t", 0, 0, partition_max_bytes=1 << 20)).records)[:1] == [b"v0"]


async def test_kafka_errors(tmp_path):
    async with open_cluster(tmp_path, brokers=1, log_dirs_per_broker=2) as cluster:
        await cluster.create_topic("t", partitions=1)
        broker = cluster.brokers[1]
        source = cluster.partition(1, "t").log.directory.parent
        (target,) = [d for d in broker.replicas.log_manager.dirs if d != source]
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            async def ask(path, topic, *parts):
                return errors_of(await conn.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, alter_request(path, topic, *parts)))

            assert await ask(tmp_path / "elsewhere", "t", 0) == {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND}
            assert await ask(Path("relative"), "t", 0) == {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND}
            assert await ask(target, "nope", 0) == {("nope", 0): ErrorCode.REPLICA_NOT_AVAILABLE}
            assert await ask(target, "t", 5) == {("t", 5): ErrorCode.REPLICA_NOT_AVAILABLE}
            assert await ask(source, "t", 0) == {("t", 0): ErrorCode.NONE}  # already there
            broker.replicas.fail_log_dir(target, f"{target}: Input/output error (EIO)")
            assert await ask(target, "t", 0) == {("t", 0): ErrorCode.KAFKA_STORAGE_ERROR}
            assert cluster.partition(1, "t").log.directory.parent == source
