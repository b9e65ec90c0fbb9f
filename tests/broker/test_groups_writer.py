"""The broker's side of the coordinator contract: the `__consumer_offsets` partition writer and the
leadership hooks, against real brokers replicating over TCP (kraftpy.broker.group_support)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from kraftpy.broker.group_support import OffsetsLeadership, OffsetsPartitionWriter
from kraftpy.coordinator.runtime import CoordinatorWriteError, NotLeaderError
from kraftpy.protocol.batch_header import iter_batches
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import decode_batch
from tests.helpers.cluster import open_cluster

OFFSETS = "__consumer_offsets"
COMPACT = {"cleanup.policy": "compact"}


def writer_for(cluster, partition: int = 0, *, timeout_ms: int = 30_000, buffer: int = 1 << 20):
    leader = cluster.leader(OFFSETS, partition)
    part = cluster.partition(leader, OFFSETS, partition)
    return leader, part, OffsetsPartitionWriter(part, commit_timeout_ms=timeout_ms, clock=lambda: 1_700_000_000_000,
                                                load_buffer_bytes=buffer)


async def test_append_writes_one_uncompressed_batch_and_returns_only_once_the_isr_has_it(tmp_path):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic(OFFSETS, partitions=1, replication_factor=2, configs=COMPACT)
        leader, part, writer = writer_for(cluster)
        follower = next(b for b in cluster.brokers if b != leader)
        assert (writer.partition, writer.leader_epoch) == (0, part.leader_epoch)

        cluster.brokers[follower].fetchers.pause()
        done: list[int] = []

        async def commit() -> None:
            done.append(await writer.append([(b"k1", b"v1"), (b"k2", None)]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(commit)
            await cluster.wait_for(lambda: part.log_end_offset == 2)
            # Written on the leader, not on the follower: not committed, not acknowledged.
            assert done == [] and part.high_watermark == 0
            cluster.brokers[follower].fetchers.resume()
        assert done == [1]
        assert part.high_watermark >= 2
        assert cluster.partition(follower, OFFSETS).log_end_offset >= 2

        data = part.log.read_bytes(0, 1 << 20)
        batches = [decode_batch(data, pos) for pos, _ in iter_batches(data)]
        assert len(batches) == 1
        header = batches[0].header
        assert header.attributes & 0x07 == 0  # uncompressed
        assert header.partition_leader_epoch == part.leader_epoch
        assert [(r.offset, r.key, r.value, r.timestamp) for r in batches[0].records] == [
            (0, b"k1", b"v1", 1_700_000_000_000), (1, b"k2", None, 1_700_000_000_000)]


async def test_append_times_out_when_the_isr_does_not_catch_up(tmp_path):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic(OFFSETS, partitions=1, replication_factor=2, configs=COMPACT)
        leader, part, writer = writer_for(cluster, timeout_ms=200)
        follower = next(b for b in cluster.brokers if b != leader)
        cluster.brokers[follower].fetchers.pause()
        with pytest.raises(CoordinatorWriteError) as failed:
            await writer.append([(b"k", b"v")])
        assert failed.value.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert part.high_watermark == 0


async def test_append_refused_below_min_insync_replicas(tmp_path):
    async with open_cluster(tmp_path, brokers=1, static_configs={"min.insync.replicas": "2"}) as cluster:
        await cluster.create_topic(OFFSETS, partitions=1, replication_factor=1, configs=COMPACT)
        _, part, writer = writer_for(cluster)
        with pytest.raises(CoordinatorWriteError) as failed:
            await writer.append([(b"k", b"v")])
        assert failed.value.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert part.log_end_offset == 0


async def test_writer_of_an_old_leader_epoch_raises_not_leader_even_mid_wait(tmp_path):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic(OFFSETS, partitions=1, replication_factor=2, configs=COMPACT)
        leader, part, writer = writer_for(cluster)
        follower = next(b for b in cluster.brokers if b != leader)
        cluster.brokers[follower].fetchers.pause()
        outcome: list[BaseException] = []

        async def commit() -> None:
            try:
                await writer.append([(b"k", b"v")])
            except NotLeaderError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(commit)
            await cluster.wait_for(lambda: part.log_end_offset == 1)
            await cluster.fence(leader)  # leadership moves while the append waits for the follower
        assert len(outcome) == 1
        assert cluster.leader(OFFSETS) == follower
        with pytest.raises(NotLeaderError):
            await writer.append([(b"k", b"v")])
        with pytest.raises(NotLeaderError):
            async for _ in writer.read_committed():
                pass
        # Led here again, in a newer epoch: the old writer still refuses.
        await cluster.unfence(leader)
        await cluster.wait_for(lambda: leader in cluster.registration(OFFSETS, 0).isr)
        await cluster.fence(follower)
        assert cluster.leader(OFFSETS) == leader
        assert part.leader_epoch > writer.leader_epoch
        with pytest.raises(NotLeaderError):
            await writer.append([(b"k", b"v")])


async def test_read_committed_replays_everything_below_the_high_watermark_in_buffers(tmp_path):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic(OFFSETS, partitions=1, replication_factor=2, configs=COMPACT)
        leader, part, writer = writer_for(cluster, buffer=64)  # smaller than a batch: one batch a read
        follower = next(b for b in cluster.brokers if b != leader)
        expected = []
        for i in range(20):
            records = [(b"key-%d" % i, b"value-%d" % i), (b"gone-%d" % i, None)]
            last = await writer.append(records)
            expected += [(last - 1 + j, key, value) for j, (key, value) in enumerate(records)]
        cluster.brokers[follower].fetchers.pause()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.append, [(b"uncommitted", b"x")])
            await cluster.wait_for(lambda: part.log_end_offset == 41)
            got = [record async for record in writer.read_committed()]
            assert got == expected  # the record past the high watermark is not replayed
            cluster.brokers[follower].fetchers.resume()
        got = [record async for record in writer.read_committed()]
        assert got == [*expected, (40, b"uncommitted", b"x")]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []
        self.writers: dict[int, OffsetsPartitionWriter] = {}

    def on_elected(self, writer) -> None:
        self.calls.append(("elected", writer.partition, writer.leader_epoch))
        self.writers[writer.partition] = writer

    def on_resigned(self, partition: int, leader_epoch: int) -> None:
        self.calls.append(("resigned", partition, leader_epoch))


async def test_leadership_tells_elections_and_resignations_once_each(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        broker = cluster.brokers[1]
        recorder = Recorder()
        leadership = OffsetsLeadership(broker.replicas, recorder, broker.settings, broker.clock)
        leadership.sync(broker.replicas.image)
        assert recorder.calls == []  # no offsets topic yet

        await cluster.create_topic(OFFSETS, partitions=4, replication_factor=2, configs=COMPACT)
        await cluster.create_topic("other", partitions=4, replication_factor=2)
        leadership.sync(broker.replicas.image)
        led = sorted(p for p in range(4) if cluster.leader(OFFSETS, p) == 1)
        assert led and sorted(p for _, p, _ in recorder.calls) == led
        assert all(kind == "elected" for kind, _, _ in recorder.calls)
        assert {p: w.leader_epoch for p, w in recorder.writers.items()} == {
            p: cluster.registration(OFFSETS, p).leader_epoch for p in led}
        recorder.calls.clear()
        leadership.sync(broker.replicas.image)
        assert recorder.calls == []  # nothing changed: nothing told

        epochs = {p: cluster.registration(OFFSETS, p).leader_epoch for p in led}
        await cluster.fence(1)
        leadership.sync(broker.replicas.image)
        assert sorted(recorder.calls) == sorted(("resigned", p, epochs[p]) for p in led)

        recorder.calls.clear()
        await cluster.unfence(1)
        await cluster.wait_for(lambda: all(1 in cluster.registration(OFFSETS, p).isr for p in range(4)))
        await cluster.fence(2)  # every partition comes to broker 1, in new epochs
        leadership.sync(broker.replicas.image)
        assert sorted(recorder.calls) == [("elected", p, cluster.registration(OFFSETS, p).leader_epoch)
                                          for p in range(4)]
        assert all(cluster.registration(OFFSETS, p).leader_epoch > epochs.get(p, -1) for p in range(4))


async def test_a_new_leader_replays_what_the_old_one_acknowledged_even_before_its_high_watermark_knows(tmp_path):
    """A new leader's high watermark comes from its followers' fetches in its epoch; until then it may
    sit below records the previous leader acknowledged. The replay waits for it rather than miss them."""
    async with open_cluster(tmp_path, brokers=3, replica_lag_time_max_ms=60_000,
                            replica_fetch_wait_max_ms=10_000) as cluster:  # followers learn the HW late
        await cluster.create_topic(OFFSETS, partitions=1, replication_factor=3, configs=COMPACT)
        old, _, writer = writer_for(cluster)
        assert await writer.append([(b"group", b"committed under the old leader")]) == 0
        followers = [b for b in cluster.brokers if b != old]
        for b in followers:  # nobody fetches from the next leader yet
            cluster.brokers[b].fetchers.pause()
        await cluster.fence(old)
        new = cluster.leader(OFFSETS)
        other = next(b for b in followers if b != new)
        _, part, new_writer = writer_for(cluster)
        assert part.log_end_offset == 1 and part.high_watermark == 0  # acknowledged, and not yet known so
        replayed: list = []

        async def replay() -> None:
            replayed.append([record async for record in new_writer.read_committed()])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(replay)
            await trio.testing.wait_all_tasks_blocked()
            assert replayed == []  # waiting, not answering "nothing"
            cluster.brokers[other].fetchers.resume()
        assert replayed == [[(0, b"group", b"committed under the old leader")]]
