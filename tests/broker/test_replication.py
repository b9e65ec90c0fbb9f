"""Replication across three real brokers: ISR, high watermark, acks=all, leader changes, truncation."""

from __future__ import annotations

import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.broker.fetcher import ReplicaFetcher
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import CreatableTopic, CreateTopicsRequest
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.frames import decode_response
from tests.helpers.cluster import open_cluster
from tests.helpers.metadata import WallClock
from tests.helpers.protocol import batch, fetch, produce, produce_request, values_of

MIN_ISR = {"min.insync.replicas": "2"}


async def connect(cluster, broker_id: int) -> KafkaConnection:
    return await KafkaConnection.connect("127.0.0.1", cluster.ports[broker_id])


def logs_agree(cluster, topic: str, end: int) -> bool:
    """Every replica holds offsets [0, end) and the same bytes for them."""
    contents = set()
    for broker_id in cluster.registration(topic, 0).replicas:
        part = cluster.partition(broker_id, topic)
        if part is None or part.log_end_offset != end:
            return False
        contents.add(part.log.read_bytes(0, 1 << 30, max_offset=end))
    return len(contents) == 1


async def test_acks_all_waits_for_every_isr_member_and_followers_learn_the_high_watermark(tmp_path):
    async with open_cluster(tmp_path, brokers=3, static_configs=MIN_ISR) as cluster:
        await cluster.create_topic("orders", partitions=1, replication_factor=3)
        leader = cluster.leader("orders")
        async with await connect(cluster, leader) as conn:
            for i in range(5):
                result = await produce(conn, "orders", 0, batch(b"v%d" % i), acks=-1)
                assert result.error_code == ErrorCode.NONE
                assert result.base_offset == i
                # acks=all answered: every ISR member holds the batch, so the HW is past it.
                assert cluster.partition(leader, "orders").high_watermark == i + 1
                for broker_id in cluster.registration("orders", 0).isr:
                    assert cluster.partition(broker_id, "orders").log_end_offset >= i + 1
            data = await fetch(conn, "orders", 0, 0)
            assert values_of(data.records) == [b"v%d" % i for i in range(5)]
        await cluster.wait_for(lambda: all(
            cluster.partition(b, "orders").high_watermark == 5 for b in cluster.brokers))
        assert logs_agree(cluster, "orders", 5)


async def test_paused_follower_leaves_the_isr_and_acks_all_is_refused_below_min_isr(tmp_path):
    """Follower lag is measured on the brokers' wall clock, which this test moves by hand (the ISR
    expiry check is called, not waited for): a follower leaves the ISR when it has not caught up
    for replica.lag.time.max.ms of that clock, whatever the real time. Records carry that clock's
    time too (the broker refuses timestamps more than an hour after its own)."""
    clock = WallClock()
    lag_ms = 10_000
    async with open_cluster(tmp_path, brokers=3, static_configs=MIN_ISR, replica_lag_time_max_ms=lag_ms,
                            clock=clock) as cluster:
        await cluster.create_topic("orders", partitions=1, replication_factor=3)
        leader = cluster.leader("orders")
        followers = [b for b in cluster.registration("orders", 0).replicas if b != leader]
        replicas = cluster.brokers[leader].replicas

        async def expire_after_rounds(fetching: list[int]) -> None:
            """Move the clock past the lag, let the fetching followers fetch at the new time, check."""
            clock.now += lag_ms + 1
            for follower in fetching:
                await cluster.fetch_rounds(follower, 2)  # the second was sent after the clock moved
            await replicas.maybe_shrink_isrs()

        async with await connect(cluster, leader) as conn:
            assert (await produce(conn, "orders", 0, batch(b"before", timestamp=clock()))).error_code == ErrorCode.NONE

            cluster.brokers[followers[0]].fetchers.pause()
            await replicas.maybe_shrink_isrs()
            assert len(cluster.registration("orders", 0).isr) == 3  # no time has passed: nobody lags
            await expire_after_rounds([followers[1]])
            await cluster.wait_for(lambda: cluster.registration("orders", 0).isr == (leader, followers[1])
                                   or cluster.registration("orders", 0).isr == (followers[1], leader))
            # Two of three in sync: min.insync.replicas=2 still holds.
            result = await produce(conn, "orders", 0, batch(b"two in sync", timestamp=clock()))
            assert result.error_code == ErrorCode.NONE

            cluster.brokers[followers[1]].fetchers.pause()
            await expire_after_rounds([])
            await cluster.wait_for(lambda: cluster.registration("orders", 0).isr == (leader,))
            result = await produce(conn, "orders", 0, batch(b"refused", timestamp=clock()))
            assert result.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
            # acks=1 does not care about the ISR's size.
            result = await produce(conn, "orders", 0, batch(b"acks one", timestamp=clock()), acks=1)
            assert result.error_code == ErrorCode.NONE

            for follower in followers:
                cluster.brokers[follower].fetchers.resume()
            await cluster.wait_for(lambda: set(cluster.registration("orders", 0).isr) == {leader, *followers})
            result = await produce(conn, "orders", 0, batch(b"after", timestamp=clock()))
            assert result.error_code == ErrorCode.NONE
            data = await fetch(conn, "orders", 0, 0)
            assert values_of(data.records) == [b"before", b"two in sync", b"acks one", b"after"]
        await cluster.wait_for(lambda: logs_agree(cluster, "orders", 4))


async def test_acks_all_times_out_when_the_isr_cannot_catch_up(tmp_path):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic("orders", partitions=1, replication_factor=2)
        leader = cluster.leader("orders")
        follower = next(b for b in cluster.brokers if b != leader)
        cluster.brokers[follower].fetchers.pause()
        async with await connect(cluster, leader) as conn:
            result = await produce(conn, "orders", 0, batch(b"x"), timeout_ms=200)
            assert result.error_code == ErrorCode.REQUEST_TIMED_OUT
            assert cluster.partition(leader, "orders").high_watermark == 0
        cluster.brokers[follower].fetchers.resume()
        await cluster.wait_for(lambda: cluster.partition(leader, "orders").high_watermark == 1)


async def test_acks_all_produces_of_one_connection_are_appended_while_the_earlier_wait(tmp_path):
    """A producer's pipelined acks=all requests: the second is appended while the first waits for
    the follower, so one fetch of the follower replicates both; the answers keep their order."""
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic("orders", partitions=1, replication_factor=2)
        leader = cluster.leader("orders")
        follower = next(b for b in cluster.brokers if b != leader)
        part = cluster.partition(leader, "orders")
        cluster.brokers[follower].fetchers.pause()
        async with await connect(cluster, leader) as conn:
            for value in (b"first", b"second"):
                await conn.send_only(ApiKey.PRODUCE, 9, produce_request("orders", 0, batch(value), acks=-1))
            # Both appended, neither committed: the first did not hold the second back.
            await cluster.wait_for(lambda: part.log_end_offset == 2)
            assert part.high_watermark == 0
            cluster.brokers[follower].fetchers.resume()
            answers = [decode_response(ApiKey.PRODUCE, 9, await conn.receive_frame()) for _ in range(2)]
            assert [header.correlation_id for header, _ in answers] == sorted(h.correlation_id for h, _ in answers)
            results = [body.responses[0].partition_responses[0] for _, body in answers]
            assert [(r.error_code, r.base_offset) for r in results] == [(ErrorCode.NONE, 0), (ErrorCode.NONE, 1)]
            assert part.high_watermark == 2


async def test_leader_change_truncates_the_old_leaders_unacknowledged_tail(tmp_path):
    async with open_cluster(tmp_path, brokers=3, static_configs=MIN_ISR, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic("orders", partitions=1, replication_factor=3)
        old_leader = cluster.leader("orders")
        followers = [b for b in cluster.registration("orders", 0).replicas if b != old_leader]
        acked = []
        async with await connect(cluster, old_leader) as conn:
            for i in range(3):
                result = await produce(conn, "orders", 0, batch(b"acked-%d" % i))
                assert result.error_code == ErrorCode.NONE
                acked.append(b"acked-%d" % i)
            for follower in followers:
                cluster.brokers[follower].fetchers.pause()
            # Written to the old leader only, never acknowledged with acks=all.
            for i in range(2):
                result = await produce(conn, "orders", 0, batch(b"lost-%d" % i), acks=1)
                assert result.error_code == ErrorCode.NONE
        assert cluster.partition(old_leader, "orders").log_end_offset == 5

        old_epoch = cluster.registration("orders", 0).leader_epoch
        await cluster.fence(old_leader)
        new_leader = cluster.leader("orders")
        assert new_leader in followers
        assert cluster.registration("orders", 0).leader_epoch == old_epoch + 1
        for follower in followers:
            cluster.brokers[follower].fetchers.resume()

        async with await connect(cluster, new_leader) as conn:
            result = await produce(conn, "orders", 0, batch(b"new-leader"))
            assert result.error_code == ErrorCode.NONE
            assert result.base_offset == 3
            # The old leader answers clients no more.
            async with await connect(cluster, old_leader) as stale:
                refused = await produce(stale, "orders", 0, batch(b"to the old leader"))
                assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

            await cluster.unfence(old_leader)
            await cluster.wait_for(lambda: logs_agree(cluster, "orders", 4))
            data = await fetch(conn, "orders", 0, 0)
            assert values_of(data.records) == [*acked, b"new-leader"]
        epochs = cluster.partition(old_leader, "orders").log.leader_epoch_cache.entries
        assert [e.epoch for e in epochs][-1] == old_epoch + 1
        await cluster.wait_for(lambda: old_leader in cluster.registration("orders", 0).isr)


async def test_fetch_from_a_follower_is_refused_and_a_new_leader_records_its_epoch_start(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        await cluster.create_topic("orders", partitions=1, replication_factor=2)
        leader = cluster.leader("orders")
        follower = next(b for b in cluster.brokers if b != leader)
        async with await connect(cluster, leader) as conn:
            await produce(conn, "orders", 0, batch(b"a", b"b"))
        async with await connect(cluster, follower) as conn:
            data = await fetch(conn, "orders", 0, 0)
            assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        epoch = cluster.registration("orders", 0).leader_epoch
        await cluster.fence(leader)
        assert cluster.leader("orders") == follower
        cache = cluster.partition(follower, "orders").log.leader_epoch_cache
        assert cache.latest_entry.epoch == epoch + 1 and cache.latest_entry.start_offset == 2
        async with await connect(cluster, follower) as conn:
            data = await fetch(conn, "orders", 0, 0, current_leader_epoch=epoch)
            assert data.error_code == ErrorCode.FENCED_LEADER_EPOCH
            data = await fetch(conn, "orders", 0, 0, current_leader_epoch=epoch + 5)
            assert data.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
            data = await fetch(conn, "orders", 0, 0, current_leader_epoch=epoch + 1)
            assert values_of(data.records) == [b"a", b"b"]
        await trio.lowlevel.checkpoint()


async def test_follower_retries_a_leader_that_has_not_applied_the_new_topic_yet(tmp_path, monkeypatch):
    """A follower can learn of a new partition before its leader does: the leader then answers its
    fetches with UNKNOWN_TOPIC_ID. No newer metadata is coming for the follower, so it must retry
    rather than wait for one; otherwise acks=all never completes on that partition."""
    refused = trio.Event()
    process = ReplicaFetcher._process

    def spy(self, part, generation, fetch_offset, data):
        if data.error_code == ErrorCode.UNKNOWN_TOPIC_ID:
            refused.set()
        return process(self, part, generation, fetch_offset, data)

    monkeypatch.setattr(ReplicaFetcher, "_process", spy)
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        held = {}
        for broker_id, broker in cluster.brokers.items():  # no broker applies new metadata for now
            broker.publish = lambda image, delta, b=broker_id: held.__setitem__(b, (image, delta))
        response = await cluster.controller.create_topics(CreateTopicsRequest((CreatableTopic("orders", 1, 2),)))
        assert response.result("orders").error_code == Errors.NONE
        for broker in cluster.brokers.values():
            del broker.publish
        leader = cluster.leader("orders")
        follower = next(b for b in cluster.brokers if b != leader)
        cluster.brokers[follower].publish(*held[follower])
        await refused.wait()
        cluster.brokers[leader].publish(*held[leader])
        await cluster.brokers[leader].caught_up()
        async with await connect(cluster, leader) as conn:
            result = await produce(conn, "orders", 0, batch(b"x"), timeout_ms=5000)
            assert result.error_code == ErrorCode.NONE
        await cluster.wait_for(lambda: logs_agree(cluster, "orders", 1))
