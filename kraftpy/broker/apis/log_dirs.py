"""DescribeLogDirs and AlterReplicaLogDirs: this broker's log directories, the partitions in each, and
moving a replica from one to another, as Kafka's kafka-log-dirs.sh, kafka-reassign-partitions.sh and
admin clients use them.

Each entry of ``log.dirs`` is one result, named by its absolute path, in the order configured. An
offline directory (it failed to load, or failed while serving) is answered KAFKA_STORAGE_ERROR with no
partitions. An online one lists the partitions whose log it holds — every one, or those the request
names — each with the bytes of its segments and its offset lag (how far the log end is below the high
watermark, never negative: 0 for a healthy replica), and, from version 4, the total and usable bytes of
the volume (what ``statvfs`` says to an unprivileged writer). A replica being moved to another
directory is listed twice: in its current directory, and in the target one as the *future* log
(``is_future_key``) with its size so far and its lag (how many offsets it is behind the current log).
The caller needs DESCRIBE on the cluster (Kafka's rule); refused, the whole answer is
CLUSTER_AUTHORIZATION_FAILED with no results.

AlterReplicaLogDirs (versions 1-2) moves each named replica of this broker to the directory named by
its absolute path (kraftpy.broker.log_dir_mover): answered once the move has started, per partition
with Kafka's errors — LOG_DIR_NOT_FOUND (not one of this broker's ``log.dirs``), KAFKA_STORAGE_ERROR
(that directory or the replica is offline), REPLICA_NOT_AVAILABLE (this broker holds no replica of
it). The caller needs ALTER on the cluster; refused, every partition is answered
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

from kraftpy.broker.authorization import ALTER, DESCRIBE, NO_AUTHORIZATION, BrokerAuthorizer, cluster_refusal
from kraftpy.broker.partition import TopicPartition
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import AlterReplicaLogDirsResponse, DescribeLogDirsResponse
from kraftpy.rpc.kafka_server import Connection

Result = DescribeLogDirsResponse.DescribeLogDirsResult
Topic = DescribeLogDirsResponse.DescribeLogDirsTopic
Partition = DescribeLogDirsResponse.DescribeLogDirsPartition


def _volume(path: Path) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path``; (-1, -1) when it cannot be read."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1, -1
    return usage.total, usage.free


class LogDirsApi:
    #: Set by the broker: DESCRIBE on the cluster.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs,
                ApiKey.ALTER_REPLICA_LOG_DIRS: self.handle_alter_replica_log_dirs}

    async def handle_alter_replica_log_dirs(self, header: Any, request: Any, conn: Connection
                                            ) -> AlterReplicaLogDirsResponse:
        allowed = self.authz.allows_cluster(conn, ALTER)
        by_path = {os.path.abspath(path): path for path in self.replicas.log_manager.dirs}
        results: dict[str, dict[int, int]] = defaultdict(dict)
        for entry in request.dirs:
            target = by_path.get(os.path.abspath(entry.path)) if os.path.isabs(entry.path) else None
            for topic in entry.topics:
                for index in topic.partitions:
                    if not allowed:
                        error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    elif target is None:
                        error = ErrorCode.LOG_DIR_NOT_FOUND
                    else:
                        error = await self.replicas.alter_replica_log_dir(TopicPartition(topic.name, index), target)
                    results[topic.name][index] = error
        return AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
            AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult(topic_name=name, partitions=[
                AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult(partition_index=i, error_code=e)
                for i, e in sorted(parts.items())])
            for name, parts in results.items()])

    async def handle_describe_log_dirs(self, header: Any, request: Any, conn: Connection) -> DescribeLogDirsResponse:
        if (refused := cluster_refusal(self.authz, conn, DESCRIBE, ApiKey.DESCRIBE_LOG_DIRS)) is not None:
            return refused
        wanted = None if request.topics is None else {
            (t.topic, p) for t in request.topics for p in t.partitions}
        manager = self.replicas.log_manager
        by_dir: dict[Path, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
        for tp, partition in list(self.replicas.partitions.items()):
            if wanted is not None and (tp.topic, tp.partition) not in wanted:
                continue
            log = partition.log
            if log is None:
                continue
            lag = max(log.high_watermark - log.log_end_offset, 0)
            by_dir[Path(log.directory).parent][tp.topic].append(Partition(
                partition_index=tp.partition, partition_size=log.size_in_bytes, offset_lag=lag, is_future_key=False))
        for tp, future in list(self.replicas.mover.futures.items()):
            if wanted is not None and (tp.topic, tp.partition) not in wanted:
                continue
            by_dir[future.target][tp.topic].append(Partition(
                partition_index=tp.partition, partition_size=future.log.size_in_bytes, offset_lag=future.lag,
                is_future_key=True))
        offline = manager.offline_dirs
        results = []
        for path in manager.dirs:
            name = os.path.abspath(path)
            if path in offline:
                results.append(Result(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=name))
                continue
            total, usable = await trio.to_thread.run_sync(_volume, path)
            topics = [Topic(name=topic, partitions=sorted(parts, key=lambda p: (p.partition_index, p.is_future_key)))
                      for topic, parts in sorted(by_dir.get(path, {}).items())]
            results.append(Result(error_code=ErrorCode.NONE, log_dir=name, topics=topics, total_bytes=total,
                                  usable_bytes=usable))
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)
