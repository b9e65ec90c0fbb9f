"""A broker holds more partitions than log.open.segments.max allows descriptors: its logs are opened
in chunks by num.recovery.threads.per.data.dir threads per directory, placed evenly across the
directories, and each chunk's descriptors are closed again on the event loop's thread; every
partition is still written and read, before and after a restart."""

from __future__ import annotations

from collections import Counter

import pytest

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.errors import ErrorCode
from kraftpy.storage.descriptors import DESCRIPTORS
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, fetch, produce, values_of

PARTITIONS = 600
CAP = 16


@pytest.fixture
def restore_capacity():
    saved = DESCRIPTORS.capacity
    yield
    DESCRIPTORS.capacity = saved


def open_segments(cluster) -> int:
    return sum(1 for b in cluster.brokers.values() for part in b.replicas.partitions.values()
               for segment in part.log.segments if segment._fd >= 0)


async def test_more_partitions_than_open_segment_files(tmp_path, restore_capacity):
    async with open_cluster(tmp_path, brokers=1, log_dirs_per_broker=2, log_open_segments_max=CAP,
                            recovery_threads_per_data_dir=2) as cluster:
        await cluster.create_topic("t", partitions=PARTITIONS)
        broker = cluster.brokers[1]
        assert DESCRIPTORS.capacity == CAP
        assert len(broker.replicas.partitions) == PARTITIONS
        # Chunks opened on several threads at once still place the replicas evenly.
        per_dir = Counter(part.log.directory.parent for part in broker.replicas.partitions.values())
        assert sorted(per_dir.values()) == [PARTITIONS // 2, PARTITIONS // 2]
        assert open_segments(cluster) <= CAP

        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for p in range(0, PARTITIONS, 7):
                assert (await produce(conn, "t", p, batch(b"v%d" % p), acks=1)).error_code == ErrorCode.NONE
            DESCRIPTORS.trim()
            assert open_segments(cluster) <= CAP
            for p in range(0, PARTITIONS, 7):
                assert values_of((await fetch(conn, "t", p, 0)).records) == [b"v%d" % p]

        await cluster.stop_broker(1)
        await cluster.restart_broker(1)
        broker = cluster.brokers[1]
        await cluster.wait_for(lambda: len(broker.replicas.partitions) == PARTITIONS
                               and all(part.is_leader for part in broker.replicas.partitions.values()))
        assert open_segments(cluster) <= CAP
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for p in range(0, PARTITIONS, 7):
                assert values_of((await fetch(conn, "t", p, 0)).records) == [b"v%d" % p]


async def test_a_clean_stop_writes_producer_snapshots_only_where_the_log_end_moved(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("s", partitions=3)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            assert (await produce(conn, "s", 0, batch(b"a"), acks=1)).error_code == ErrorCode.NONE
        directories = {p: cluster.partition(1, "s", p).log.directory for p in range(3)}

        def snapshots() -> dict[str, int]:
            return {f"{p}/{f.name}": f.stat().st_mtime_ns for p, d in directories.items()
                    for f in d.iterdir() if f.name.endswith(".snapshot")}

        await cluster.stop_broker(1)
        first = snapshots()
        assert sorted(first) == ["0/00000000000000000001.snapshot"]  # the empty logs need none
        await cluster.restart_broker(1)
        await cluster.wait_for(lambda: len(cluster.brokers[1].replicas.partitions) == 3)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            assert (await produce(conn, "s", 1, batch(b"b"), acks=1)).error_code == ErrorCode.NONE
        await cluster.stop_broker(1)
        second = snapshots()
        # Only partition 1 moved: its new end has a snapshot; the others' files were left as they were.
        assert {k: v for k, v in second.items() if k in first} == first
        assert sorted(set(second) - set(first)) == ["1/00000000000000000001.snapshot"]
        await cluster.restart_broker(1)


async def test_the_timer_closes_the_descriptors_beyond_the_bound_in_a_worker_thread(
        tmp_path, restore_capacity, autojump_clock, monkeypatch):
    import threading

    import trio

    from kraftpy.broker import replica_manager
    from kraftpy.storage.descriptors import close_descriptors
    from kraftpy.storage.log import Log
    from kraftpy.storage.log_config import LogConfig

    DESCRIPTORS.capacity = 4
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    for i in range(30):
        log.append_as_leader(batch(b"v%d" % i), leader_epoch=0)
    assert sum(1 for s in log.segments if s._fd >= 0) > 4
    closers = []

    def closing(fds):
        closers.append(threading.current_thread())
        close_descriptors(fds)

    monkeypatch.setattr(replica_manager, "close_descriptors", closing)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(replica_manager.ReplicaManager._run_descriptor_trim)
        for _ in range(50):  # five virtual seconds: the trim runs every second
            if closers:
                break
            await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    assert closers, "no descriptor closed through close_descriptors"
    assert sum(1 for s in log.segments if s._fd >= 0) <= 4
    assert threading.main_thread() not in closers
    log.close()
