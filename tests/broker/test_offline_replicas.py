"""A replica whose log cannot be opened is offline, not a leader that refuses every request.

Three real brokers with an in-process controller: one broker is stopped, its copy of a partition
damaged on disk (the directory replaced by a file, or a segment that cannot be opened), and started
again. The partition is then offline on it — Produce, Fetch and ListOffsets answer
KAFKA_STORAGE_ERROR, its Metadata names it in offline_replicas — and its heartbeat takes it out of
the ISR through the controller, while producers go on with the other replicas. Once the damage is
repaired and the broker restarted, it catches up and every acknowledged record is there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kraftpy.broker.client import KafkaConnection
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import CreatableReplicaAssignment, CreatableTopic, CreateTopicsRequest
from kraftpy.protocol.errors import ErrorCode
from tests.helpers.cluster import open_cluster
from tests.helpers.filesystems import fill, small_filesystem
from tests.helpers.protocol import batch, fetch, list_offset, metadata, produce, values_of

MIN_ISR = {"min.insync.replicas": "2"}


async def produce_values(cluster, topic: str, values: list[bytes]) -> None:
    """acks=all to the current leader, one record per request, each acknowledged."""
    async with await KafkaConnection.connect("127.0.0.1", cluster.ports[cluster.leader(topic)]) as conn:
        for value in values:
            result = await produce(conn, topic, 0, batch(value), acks=-1)
            assert result.error_code == ErrorCode.NONE, result


async def read_values(cluster, topic: str, broker_id: int) -> list[bytes]:
    async with await KafkaConnection.connect("127.0.0.1", cluster.ports[broker_id]) as conn:
        data = await fetch(conn, topic, 0, 0)
        assert data.error_code == ErrorCode.NONE, data
        return values_of(data.records)


def replace_dir_by_file(partition_dir: Path) -> tuple[Path, Path]:
    aside = partition_dir.with_name(partition_dir.name + ".aside")
    partition_dir.rename(aside)
    partition_dir.write_bytes(b"not a directory")
    return partition_dir, aside


def unopenable_segment(partition_dir: Path) -> tuple[Path, Path]:
    """The first segment becomes a directory: opening it fails with EISDIR (as root too)."""
    segment = partition_dir / "00000000000000000000.log"
    aside = partition_dir.with_name(segment.name + ".aside")
    segment.rename(aside)
    segment.mkdir()
    return segment, aside


def repair(damaged: Path, aside: Path) -> None:
    if damaged.is_dir():
        shutil.rmtree(damaged)
    else:
        damaged.unlink()
    aside.rename(damaged)


@pytest.mark.parametrize("damage", [replace_dir_by_file, unopenable_segment])
async def test_a_replica_whose_log_cannot_be_opened_is_offline_and_leadership_moves(tmp_path, damage):
    async with open_cluster(tmp_path, brokers=3, static_configs=MIN_ISR) as cluster:
        await cluster.create_topic("t", partitions=1, replication_factor=3)
        acknowledged = [b"a%d" % i for i in range(5)]
        await produce_values(cluster, "t", acknowledged)
        victim = cluster.leader("t")
        await cluster.wait_for(lambda: all(cluster.partition(b, "t").high_watermark == 5 for b in cluster.brokers))

        await cluster.stop_broker(victim)
        damaged, aside = damage(tmp_path / f"broker-{victim}" / "t-0")
        broker = await cluster.restart_broker(victim)
        assert broker.replicas.is_offline("t", 0) and broker.replicas.get("t", 0) is None
        assert str(damaged) in next(iter(broker.replicas.offline.values())).reason

        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[victim]) as conn:
            assert (await produce(conn, "t", 0, batch(b"x"))).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert (await fetch(conn, "t", 0, 0)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert (await list_offset(conn, "t", 0, -1)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            partition = (await metadata(conn, ["t"], auto_create=False)).topics[0].partitions[0]
            assert victim in partition.offline_replicas

        # The heartbeat reports it: the controller takes the replica out of the ISR.
        cluster.controller.heartbeat(victim)
        await cluster.caught_up()
        assert victim not in cluster.registration("t", 0).isr and cluster.leader("t") != victim

        more = [b"b%d" % i for i in range(5)]
        await produce_values(cluster, "t", more)  # min.insync.replicas=2: the two others are enough

        await cluster.stop_broker(victim)
        repair(damaged, aside)
        await cluster.restart_broker(victim)
        assert not cluster.brokers[victim].replicas.offline
        await cluster.wait_for(lambda: victim in cluster.registration("t", 0).isr)
        await cluster.wait_for(lambda: cluster.partition(victim, "t").log_end_offset == 10)
        assert await read_values(cluster, "t", cluster.leader("t")) == acknowledged + more
        assert cluster.partition(victim, "t").log.read_bytes(0, 1 << 30, max_offset=10) == \
            cluster.partition(cluster.leader("t"), "t").log.read_bytes(0, 1 << 30, max_offset=10)


async def test_a_follower_replica_that_fails_leaves_the_isr_and_the_leader_keeps_serving(tmp_path):
    async with open_cluster(tmp_path, brokers=3) as cluster:
        await cluster.create_topic("t", partitions=1, replication_factor=3)
        await produce_values(cluster, "t", [b"a"])
        leader = cluster.leader("t")
        victim = next(b for b in cluster.registration("t", 0).replicas if b != leader)
        await cluster.stop_broker(victim)
        unopenable_segment(tmp_path / f"broker-{victim}" / "t-0")
        await cluster.restart_broker(victim)
        cluster.controller.heartbeat(victim)
        await cluster.caught_up()
        assert cluster.leader("t") == leader and victim not in cluster.registration("t", 0).isr
        await produce_values(cluster, "t", [b"b"])
        assert await read_values(cluster, "t", leader) == [b"a", b"b"]


async def test_a_log_that_fails_while_open_goes_offline(tmp_path):
    """An I/O error other than a full disk (EIO here) on an append takes the replica offline at once;
    the producer gets KAFKA_STORAGE_ERROR, and so does the next request. (The broker has a second
    log directory: with its last one failed it would stop.)"""
    async with open_cluster(tmp_path, brokers=1, log_dirs_per_broker=2) as cluster:
        await cluster.create_topic("t", partitions=1, replication_factor=1)
        await produce_values(cluster, "t", [b"a"])
        part = cluster.partition(1, "t")

        def failing_append(*args, **kwargs):
            raise OSError(5, "Input/output error")  # EIO from the disk

        part.log.append_as_leader = failing_append
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            assert (await produce(conn, "t", 0, batch(b"b"))).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert cluster.brokers[1].replicas.is_offline("t", 0)
            assert (await produce(conn, "t", 0, batch(b"c"))).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert (await fetch(conn, "t", 0, 0)).error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert cluster.brokers[1].offline_replicas()[0].partitions == (0,)


async def test_a_full_disk_fails_appends_but_keeps_the_replica_and_its_reads(tmp_path):
    """A real ENOSPC (a small tmpfs): Produce gets KAFKA_STORAGE_ERROR, the replica stays online and
    serves every acknowledged record; once space is freed, produces succeed again."""
    data = tmp_path / "data"
    with small_filesystem(data, "1m"):
        async with open_cluster(data, brokers=1) as cluster:
            await cluster.create_topic("t", partitions=1, replication_factor=1)
            acknowledged = []
            filler = fill(data)
            async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
                for i in range(200):  # 200 records of 1 KiB: the page the log ends in fills up first
                    value = b"%04d" % i + bytes(1020)
                    result = await produce(conn, "t", 0, batch(value), acks=-1)
                    if result.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                        break
                    assert result.error_code == ErrorCode.NONE, result
                    acknowledged.append(value)
                else:
                    pytest.fail("the file system never filled up")
                assert not cluster.brokers[1].replicas.offline
                assert values_of((await fetch(conn, "t", 0, 0, partition_max_bytes=1 << 20)).records) == acknowledged

                filler.unlink()
                result = await produce(conn, "t", 0, batch(b"after"), acks=-1)
                assert result.error_code == ErrorCode.NONE and result.base_offset == len(acknowledged)
                values = values_of((await fetch(conn, "t", 0, 0, partition_max_bytes=1 << 20)).records)
                assert values == [*acknowledged, b"after"]


async def test_a_follower_on_a_full_disk_waits_and_catches_up_once_there_is_space(tmp_path):
    """The follower's appends fail with ENOSPC: it retries later, stays online and in service, and
    holds every record once space is freed."""
    with small_filesystem(tmp_path / "broker-2", "1m") as follower_dir:
        async with open_cluster(tmp_path, brokers=2) as cluster:
            response = await cluster.controller.create_topics(CreateTopicsRequest((CreatableTopic(
                "t", assignments=(CreatableReplicaAssignment(0, (1, 2)),)),)))  # led by 1, followed by 2
            assert response.result("t").error_code == Errors.NONE
            await cluster.wait_for(lambda: cluster.partition(1, "t") is not None and cluster.partition(1, "t").is_leader
                                   and cluster.partition(2, "t") is not None)
            filler = fill(follower_dir)
            async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
                for i in range(20):
                    result = await produce(conn, "t", 0, batch(b"%04d" % i + bytes(1020)), acks=1)
                    assert result.error_code == ErrorCode.NONE
            await cluster.fetch_rounds(2, 3)  # each one's append fails: the follower's log cannot grow
            assert cluster.partition(2, "t").log_end_offset == 0
            assert not cluster.brokers[2].replicas.offline
            filler.unlink()
            await cluster.wait_for(lambda: cluster.partition(2, "t").log_end_offset == 20)
