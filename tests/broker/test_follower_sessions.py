"""A follower's incremental fetch costs the leader what changed, not the size of its session: it looks at
the partitions the fetch names and those that changed since, and each fetch of the session still counts
as catching up for the partitions the follower has all of."""

from __future__ import annotations

from kraftpy.broker.client import KafkaConnection
from kraftpy.broker.fetch_sessions import FetchSession, FetchSessionCache
from kraftpy.broker.partition import FollowerState
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DeleteRecordsRequest
from tests.helpers.cluster import open_cluster
from tests.helpers.metadata import WallClock
from tests.helpers.protocol import batch, produce

PARTITIONS = 80
LAG_MS = 10_000
RECORDS = 20


def fetch_api(cluster, broker_id: int):
    return cluster.brokers[broker_id].apis.handlers[ApiKey.FETCH].__self__


async def test_a_followers_fetch_looks_at_what_changed_and_idle_partitions_stay_in_sync(tmp_path):
    clock = WallClock()
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=LAG_MS, clock=clock) as cluster:
        await cluster.create_topic("w", partitions=PARTITIONS, replication_factor=2)
        await cluster.wait_for(lambda: all(len(cluster.registration("w", p).isr) == 2 for p in range(PARTITIONS)))
        await cluster.caught_up()  # no metadata left to apply: it would rebuild the fetchers' states
        await cluster.fetch_rounds(1, 3)
        await cluster.fetch_rounds(2, 3)
        led = {b: [p for p in range(PARTITIONS) if cluster.leader("w", p) == b] for b in (1, 2)}
        leader = max(led, key=lambda b: len(led[b]))
        follower = 3 - leader
        assert len(led[leader]) >= PARTITIONS // 4
        api = fetch_api(cluster, leader)
        fetchers = cluster.brokers[follower].fetchers
        target = led[leader][0]
        # A retry time that came is spent once: as a start-up race leaves them (the follower learned of a
        # leadership before its leader did, and was refused), every partition's retry time has passed.
        fetcher = next(iter(cluster.partition(follower, "w", target).sessions))
        for p in led[leader]:
            fetcher._retry_at[cluster.partition(follower, "w", p).tp] = 0.0
        fetches, looked_at = api.follower_fetches, api.follower_partitions_looked_at
        rounds, taken, rebuilds = fetchers.rounds, fetchers.states_taken, fetchers.full_rebuilds
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader]) as conn:
            for i in range(RECORDS):
                response = await produce(conn, "w", target, batch(b"r%d" % i, timestamp=clock()))
                assert response.error_code == ErrorCode.NONE
                await cluster.wait_for(lambda n=i + 1: cluster.partition(follower, "w", target).log_end_offset == n
                                       and cluster.partition(leader, "w", target).high_watermark == n)
        fetches = api.follower_fetches - fetches
        looked_at = api.follower_partitions_looked_at - looked_at
        # Each record takes the follower a fetch that brings it and one that says it has it; each of
        # those fetches looks at that one partition (the one the follower names, or the one that moved),
        # not at the other partitions of its session, which a fetch looked at all of before. (A metadata
        # update that reaches the brokers meanwhile tells every partition it touches: those are looked
        # at once more, so the bound leaves room for a few.)
        shared = len(led[leader])
        assert fetches >= RECORDS
        assert looked_at * 2 <= fetches * shared, (looked_at, fetches, shared)
        # The follower's side: each round takes again the fetch state of what its last answer changed (and,
        # once, those whose retry time came), and builds them all again only when metadata moved replicas or
        # assignments (none did here but by chance: a late metadata update).
        rounds, taken = fetchers.rounds - rounds, fetchers.states_taken - taken
        rebuilds = fetchers.full_rebuilds - rebuilds
        assert rounds >= RECORDS
        assert taken * 2 <= rounds * shared + 2 * shared and rebuilds <= 2, (taken, rebuilds, rounds, shared)
        assert not fetcher._retry_at

        # Past replica.lag.time.max.ms, the follower's fetches, which looked at none of the idle
        # partitions, still keep it in sync on every one of them.
        clock.now += LAG_MS + 1
        await cluster.fetch_rounds(follower, 2)  # the second was sent after the clock moved
        for p in led[leader]:
            assert cluster.partition(leader, "w", p).isr_to_shrink(LAG_MS) is None

        # A follower that stops fetching is out of sync one lag later, its idle partitions as well.
        cluster.brokers[follower].fetchers.pause()
        clock.now += LAG_MS + 1
        for p in led[leader]:
            assert cluster.partition(leader, "w", p).isr_to_shrink(LAG_MS) == (leader,)


async def test_a_new_log_start_offset_reaches_the_follower_of_an_idle_partition(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        await cluster.create_topic("d", partitions=1, replication_factor=2)
        await cluster.wait_for(lambda: len(cluster.registration("d", 0).isr) == 2)
        leader = cluster.leader("d")
        follower = 3 - leader
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader]) as conn:
            for i in range(3):
                assert (await produce(conn, "d", 0, batch(b"%d" % i))).error_code == ErrorCode.NONE
            await cluster.wait_for(lambda: cluster.partition(follower, "d").log_end_offset == 3)
            await cluster.fetch_rounds(follower, 3)  # idle: the session's fetches look at nothing
            delete = DeleteRecordsRequest(timeout_ms=1000, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
                name="d", partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=2)])])
            answer = await conn.request(ApiKey.DELETE_RECORDS, 2, delete)
            assert answer.topics[0].partitions[0].low_watermark == 2
        # The leader's new log start offset wakes the follower's parked fetch, which takes it over (no
        # watcher is told of a log start offset: the follower's fetch rounds are what is waited on).
        for _ in range(20):
            if cluster.partition(follower, "d").log_start_offset == 2:
                break
            await cluster.fetch_rounds(follower, 1)
        assert cluster.partition(follower, "d").log_start_offset == 2


def test_a_session_counts_as_catching_up_only_while_it_holds_the_partition_and_the_follower_has_all():
    cache = FetchSessionCache(10)
    session_id = cache.maybe_create_session(0, True, {}, True)
    session: FetchSession = cache.get(session_id)
    key = ("topic-id", 0)
    state = FollowerState(log_end_offset=5, last_caught_up_ms=100, last_fetch_ms=100)
    state.session, state.session_key = session, key
    session.last_fetch_ms = 900
    assert state.caught_up_ms(5) == 100  # the session does not hold the partition
    session.partitions[key] = object()
    assert state.caught_up_ms(5) == 900
    assert state.caught_up_ms(6) == 100  # the leader has more than the follower
    cache.remove(session_id)
    assert state.caught_up_ms(5) == 100  # the session is gone


async def test_retention_on_the_leader_of_an_idle_partition_reaches_its_follower(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        await cluster.create_topic("r", partitions=1, replication_factor=2,
                                   configs={"segment.bytes": "200", "retention.bytes": "1"})
        await cluster.wait_for(lambda: len(cluster.registration("r", 0).isr) == 2)
        leader = cluster.leader("r")
        follower = 3 - leader
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader]) as conn:
            for i in range(6):
                assert (await produce(conn, "r", 0, batch(b"x" * 80 + b"%d" % i))).error_code == ErrorCode.NONE
        await cluster.wait_for(lambda: cluster.partition(follower, "r").log_end_offset == 6)
        await cluster.fetch_rounds(follower, 3)  # idle: the session's fetches look at nothing
        part = cluster.partition(leader, "r")
        assert len(part.log.segments) >= 3
        await part.run_housekeeping()  # retention: every segment but the active one goes
        start = part.log_start_offset
        assert start > 0
        # The leader's new log start offset wakes the follower's parked fetch, which takes it over.
        for _ in range(20):
            if cluster.partition(follower, "r").log_start_offset == start:
                break
            await cluster.fetch_rounds(follower, 1)
        assert cluster.partition(follower, "r").log_start_offset == start
