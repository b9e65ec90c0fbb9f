"""Fetch sessions (KIP-227) on running brokers: a raw client's full and incremental fetches, kafka-python
consuming through a session, and followers replicating through theirs."""

from __future__ import annotations

import random
import uuid

import pytest
import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.metrics import REGISTRY
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DeleteRecordsRequest, FetchRequest
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, produce, values_of

PARTITIONS = 4


def fetch_api(cluster, broker_id: int = 1):
    return cluster.brokers[broker_id].apis.handlers[ApiKey.FETCH].__self__


def gauge(name: str, broker_id: int = 1) -> float | None:
    return REGISTRY.get_sample_value(name, {"node_id": str(broker_id)})


def request(topic_id: uuid.UUID, offsets: dict[int, int], *, session_id: int, epoch: int,
            forgotten: list[int] = ()) -> FetchRequest:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=session_id, session_epoch=epoch)
    if offsets:
        req.topics.append(FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in offsets.items()]))
    if forgotten:
        req.forgotten_topics_data.append(FetchRequest.ForgottenTopic(topic_id=topic_id, partitions=list(forgotten)))
    return req


def answered(response) -> dict[int, object]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as c:
        await c.create_topic("t", partitions=PARTITIONS)
        yield c


async def test_incremental_fetches_answer_only_changed_partitions_and_session_errors(cluster):
    topic_id = uuid.UUID(bytes=cluster.image.topics.get_by_name("t").id.raw)
    async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
        for p in range(PARTITIONS):
            assert (await produce(conn, "t", p, batch(b"first-%d" % p))).error_code == ErrorCode.NONE

        async def fetch(req):
            return await conn.request(ApiKey.FETCH, 13, req)

        # Full fetch (epoch 0): every partition, and a new session.
        full = await fetch(request(topic_id, dict.fromkeys(range(PARTITIONS), 0), session_id=0, epoch=0))
        assert full.error_code == ErrorCode.NONE and full.session_id != 0
        assert sorted(answered(full)) == list(range(PARTITIONS))
        session_id = full.session_id
        assert gauge("kraftpy_fetch_sessions") == 1
        assert gauge("kraftpy_fetch_session_partitions") == PARTITIONS

        # Incremental (epoch 1): the new offsets of what was read; nothing is new, so nothing is answered.
        nothing = await fetch(request(topic_id, dict.fromkeys(range(PARTITIONS), 1), session_id=session_id, epoch=1))
        assert (nothing.error_code, nothing.session_id, answered(nothing)) == (ErrorCode.NONE, session_id, {})

        # A record on partition 2: only partition 2 is answered, though the request names no partition.
        await produce(conn, "t", 2, batch(b"second"))
        one = await fetch(request(topic_id, {}, session_id=session_id, epoch=2))
        assert list(answered(one)) == [2]
        assert values_of(answered(one)[2].records) == [b"second"]
        assert answered(one)[2].high_watermark == 2

        # Partition 0 leaves the session: a record there is not answered; partition 3 still is.
        await produce(conn, "t", 0, batch(b"unseen"))
        await produce(conn, "t", 3, batch(b"third"))
        some = await fetch(request(topic_id, {2: 2}, session_id=session_id, epoch=3, forgotten=[0]))
        assert list(answered(some)) == [3]
        assert gauge("kraftpy_fetch_session_partitions") == PARTITIONS - 1

        # Wrong epoch, unknown session: errors of the whole response, and the session is untouched.
        stale = await fetch(request(topic_id, {}, session_id=session_id, epoch=3))
        assert (stale.error_code, answered(stale)) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, {})
        unknown = await fetch(request(topic_id, {}, session_id=session_id ^ 1, epoch=1))
        assert (unknown.error_code, answered(unknown)) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, {})
        going = await fetch(request(topic_id, {3: 2}, session_id=session_id, epoch=4))
        assert going.error_code == ErrorCode.NONE and answered(going) == {}

        # A new log start offset (DeleteRecords) is news too, with no records to read.
        delete = DeleteRecordsRequest(timeout_ms=1000, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
            name="t", partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=3, offset=1)])])
        assert (await conn.request(ApiKey.DELETE_RECORDS, 2, delete)).topics[0].partitions[0].low_watermark == 1
        moved = await fetch(request(topic_id, {}, session_id=session_id, epoch=5))
        assert list(answered(moved)) == [3] and answered(moved)[3].log_start_offset == 1
        assert not answered(moved)[3].records

        # Epoch -1 closes the session and makes none.
        closed = await fetch(request(topic_id, {0: 0}, session_id=session_id, epoch=-1))
        assert (closed.session_id, list(answered(closed))) == (0, [0])
        assert values_of(answered(closed)[0].records) == [b"first-0", b"unseen"]
        assert gauge("kraftpy_fetch_sessions") == 0
        after = await fetch(request(topic_id, {}, session_id=session_id, epoch=6))
        assert after.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


async def test_full_cache_answers_full_fetches_without_a_session(tmp_path):
    async with open_cluster(tmp_path, brokers=1, max_incremental_fetch_session_cache_slots=1) as cluster:
        await cluster.create_topic("t", partitions=1)
        topic_id = uuid.UUID(bytes=cluster.image.topics.get_by_name("t").id.raw)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            first = await conn.request(ApiKey.FETCH, 13, request(topic_id, {0: 0}, session_id=0, epoch=0))
            second = await conn.request(ApiKey.FETCH, 13, request(topic_id, {0: 0}, session_id=0, epoch=0))
            assert first.session_id != 0 and second.session_id == 0
            assert list(answered(second)) == [0]
            assert fetch_api(cluster).sessions.evictions == 0


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, per_partition: int):
    """Read every partition with kafka-python; returns (records by partition, the sessions' epochs)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=100, max_partition_fetch_bytes=256)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        for _ in range(200):
            if sum(map(len, got.values())) >= partitions * per_partition:
                break
            for tp, records in consumer.poll(timeout_ms=5_000).items():
                got[tp.partition] += [r.value for r in records]
        handlers = consumer._fetcher._session_handlers
        epochs = [h.next_metadata.epoch for h in handlers.values()]
    finally:
        consumer.close()
    return got, epochs


async def test_kafka_python_consumes_many_partitions_through_a_session(tmp_path):
    partitions, per_partition = 24, 12
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("many", partitions=partitions)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for i in range(per_partition):
                for p in range(partitions):
                    await produce(conn, "many", p, batch(b"%d-%d" % (p, i)))
        with trio.fail_after(90):
            got, epochs = await trio.to_thread.run_sync(
                consume_kafka_python, cluster.bootstrap, "many", partitions, per_partition)
        assert got == {p: [b"%d-%d" % (p, i) for i in range(per_partition)] for p in range(partitions)}
        # kafka-python kept one session and moved its epoch on with each incremental fetch.
        assert epochs and max(epochs) > 2
        sessions = fetch_api(cluster).sessions
        assert any(not s.privileged and len(s.partitions) == partitions for s in sessions.sessions.values())


async def test_followers_replicate_through_incremental_sessions(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        await cluster.create_topic("r", partitions=6, replication_factor=2)
        await cluster.caught_up()
        leaders = {p: cluster.leader("r", p) for p in range(6)}
        conns = {b: await KafkaConnection.connect("127.0.0.1", cluster.ports[b]) for b in (1, 2)}

        async def produce_round(round_: int) -> None:
            for p, leader in leaders.items():
                response = await produce(conns[leader], "r", p, batch(b"%d-%d" % (p, round_)))
                assert response.error_code == ErrorCode.NONE

        def replicated(count: int):
            return lambda: all(cluster.partition(b, "r", p).log_end_offset == count
                               and cluster.partition(b, "r", p).high_watermark == count
                               for p in range(6) for b in (1, 2))

        try:
            for round_ in range(5):
                await produce_round(round_)
            await cluster.wait_for(replicated(5))
            for broker_id in (1, 2):
                fetchers = cluster.brokers[broker_id].fetchers
                # A session per leader, then incremental fetches.
                assert fetchers.requests > fetchers.full_requests > 0
                sessions = fetch_api(cluster, broker_id).sessions
                assert any(s.privileged for s in sessions.sessions.values())

            # The leaders forget every session (as a restarted broker would): each follower is told
            # FETCH_SESSION_ID_NOT_FOUND, fetches in full once, and replicates on.
            full_before = {b: cluster.brokers[b].fetchers.full_requests for b in (1, 2)}
            for broker_id in (1, 2):
                sessions = fetch_api(cluster, broker_id).sessions
                for session_id in list(sessions.sessions):
                    sessions.remove(session_id)
            for round_ in range(5, 8):
                await produce_round(round_)
            await cluster.wait_for(replicated(8))
            for broker_id in (1, 2):
                assert cluster.brokers[broker_id].fetchers.full_requests > full_before[broker_id]
                assert fetch_api(cluster, broker_id).sessions.sessions
        finally:
            for c in conns.values():
                await c.aclose()


async def test_the_incremental_reader_leaves_out_only_what_the_answer_would_leave_out(tmp_path):
    """`FetchApi._read` skips building an answer for a session partition with nothing new: checked
    against the answer it builds otherwise, over random session states of real partitions."""
    from kraftpy.broker.apis.fetch import FetchApi
    from kraftpy.broker.fetch_sessions import CachedPartition

    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("s", partitions=3)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for p in range(3):
                for i in range(p + 1):
                    await produce(conn, "s", p, batch(b"%d" % i))
        parts = [cluster.partition(1, "s", p) for p in range(3)]
        rng = random.Random(5)
        skipped = 0
        for _ in range(400):
            items = []
            for part in parts:
                hw, lso, start, end = (part.high_watermark, part.last_stable_offset, part.log_start_offset,
                                       part.log_end_offset)
                cached = CachedPartition("s", None, part.tp.partition, rng.choice((0, hw, end, end + 1, lso)), 1 << 20,
                                         high_watermark=rng.choice((hw, hw, -1, hw - 1)),
                                         last_stable_offset=rng.choice((lso, lso, -1)),
                                         local_log_start_offset=rng.choice((start, start, -1)))
                items.append((("s", part.tp.partition), cached, part, ErrorCode.NONE))
            is_replica, read_committed = rng.choice(((True, False), (False, False), (False, True)))
            _, quick, _ = FetchApi._read(items, 1 << 20, is_replica, {}, read_committed=read_committed,
                                         incremental=True)
            _, built, _ = FetchApi._read(items, 1 << 20, is_replica, {}, read_committed=read_committed)
            for (_, cached, _, _), fast, data in zip(items, quick, built, strict=True):
                size = len(data.records) if isinstance(data.records, bytes) else data.records.length
                if fast is None:
                    skipped += 1
                    assert not cached.maybe_update_response_data(data, size, update=False)
        assert skipped > 50
