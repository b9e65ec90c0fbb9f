"""A consumer's incremental fetch costs the leader what changed, not the size of its session: it looks at
the partitions the fetch names and those that changed since; a parked fetch wakes on any of them; and what
decided the others (the ACLs, the isolation level) changing makes the next fetch look at all of them."""

from __future__ import annotations

import uuid

import trio
import trio.testing

from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.broker.client import KafkaConnection
from kraftpy.metadata.messages import AclCreation, CreateAclsRequest, DeleteAclsFilter, DeleteAclsRequest
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FetchRequest
from kraftpy.security.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, produce, values_of

PARTITIONS = 100
ANONYMOUS = "User:ANONYMOUS"


def fetch_api(cluster, broker_id: int = 1):
    return cluster.brokers[broker_id].apis.handlers[ApiKey.FETCH].__self__


def request(topic_id: uuid.UUID, offsets: dict[int, int], *, session_id: int, epoch: int, max_wait_ms: int = 0,
            isolation_level: int = 0) -> FetchRequest:
    req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                       isolation_level=isolation_level, session_id=session_id, session_epoch=epoch)
    if offsets:
        req.topics.append(FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in offsets.items()]))
    return req


def answered(response) -> dict[int, object]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


class Consumer:
    """A raw consumer of every partition of one topic through a fetch session; counts what each of its
    fetches made the leader look at."""

    def __init__(self, cluster, conn: KafkaConnection, topic: str, broker_id: int = 1) -> None:
        self.api = fetch_api(cluster, broker_id)
        self.conn = conn
        self.topic_id = uuid.UUID(bytes=cluster.image.topics.get_by_name(topic).id.raw)
        self.session_id = 0
        self.epoch = 0

    async def fetch(self, offsets: dict[int, int], **kwargs) -> tuple[object, int]:
        """One fetch of the session (the first a full one); the answer and the partitions looked at."""
        before = self.api.consumer_partitions_looked_at
        answer = await self.conn.request(ApiKey.FETCH, 13, request(
            self.topic_id, offsets, session_id=self.session_id, epoch=self.epoch, **kwargs))
        assert answer.error_code == ErrorCode.NONE, answer
        self.session_id = answer.session_id
        self.epoch += 1
        return answer, self.api.consumer_partitions_looked_at - before


async def test_a_consumers_fetch_looks_at_what_changed_and_a_parked_one_wakes_on_it(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("c", partitions=PARTITIONS)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn, \
                await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as producer:
            consumer = Consumer(cluster, conn, "c")
            full, looked = await consumer.fetch(dict.fromkeys(range(PARTITIONS), 0))
            assert consumer.session_id != 0 and len(answered(full)) == PARTITIONS and looked == PARTITIONS

            # Nothing changed, nothing named: nothing looked at (every one was, on every fetch, before).
            nothing, looked = await consumer.fetch({})
            assert answered(nothing) == {} and looked == 0

            # A record on partition 7: that one is looked at and answered, the others are not looked at.
            assert (await produce(producer, "c", 7, batch(b"seven"))).error_code == ErrorCode.NONE
            one, looked = await consumer.fetch({})
            assert list(answered(one)) == [7] and values_of(answered(one)[7].records) == [b"seven"]
            assert looked == 1
            # The consumer names its new offset there: that one is looked at, and has nothing to say.
            after, looked = await consumer.fetch({7: 1})
            assert answered(after) == {} and looked == 1
            assert (await consumer.fetch({}))[1] == 0

            # A fetch with nothing to read parks on the session; a record on any of its partitions wakes it.
            async with trio.open_nursery() as nursery:
                got = {}

                async def long_poll() -> None:
                    got["answer"], got["looked"] = await consumer.fetch({}, max_wait_ms=30_000)

                nursery.start_soon(long_poll)
                session = consumer.api.sessions.get(consumer.session_id)
                with trio.fail_after(30):
                    while session.wake is None:  # the fetch is parked once it set its wake-up
                        await trio.testing.wait_all_tasks_blocked()
                assert (await produce(producer, "c", 42, batch(b"forty-two"))).error_code == ErrorCode.NONE
            assert list(answered(got["answer"])) == [42]
            assert values_of(answered(got["answer"])[42].records) == [b"forty-two"]
            assert got["looked"] <= 2  # the one that changed (before it parked and when it woke)

            # Another isolation level decides the others again: every partition is looked at once.
            _, looked = await consumer.fetch({42: 1}, isolation_level=1)
            assert looked == PARTITIONS
            assert (await consumer.fetch({}, isolation_level=1))[1] == 0


async def test_a_parked_consumer_wakes_when_the_high_watermark_moves_not_at_each_append_before_it(tmp_path):
    """With followers, the leader's append moves only its log end: nothing a consumer may read yet (it
    reads up to the high watermark). A consumer's parked fetch sleeps through it and wakes once, when the
    followers' next fetches move the high watermark; the followers' sessions are told of the append."""
    async with open_cluster(tmp_path, brokers=3) as cluster:
        await cluster.create_topic("r", partitions=1, replication_factor=3)
        await cluster.caught_up()
        leader = cluster.leader("r")
        port = cluster.ports[leader]
        async with await KafkaConnection.connect("127.0.0.1", port) as conn, \
                await KafkaConnection.connect("127.0.0.1", port) as producer:
            consumer = Consumer(cluster, conn, "r", leader)
            await consumer.fetch({0: 0})
            assert (await consumer.fetch({}))[1] == 0
            session = consumer.api.sessions.get(consumer.session_id)
            wakes = []
            async with trio.open_nursery() as nursery:
                got = {}

                async def long_poll() -> None:
                    got["answer"], got["looked"] = await consumer.fetch({}, max_wait_ms=30_000)

                nursery.start_soon(long_poll)
                with trio.fail_after(30):
                    while session.wake is None:
                        await trio.testing.wait_all_tasks_blocked()
                wake = session.wake
                session.wake = lambda: (wakes.append(cluster.partition(leader, "r", 0).high_watermark), wake())
                assert (await produce(producer, "r", 0, batch(b"replicated"))).error_code == ErrorCode.NONE
            assert values_of(answered(got["answer"])[0].records) == [b"replicated"]
            # Woken once, by the high watermark (1); never by the append alone (its high watermark still 0).
            assert wakes == [1] and got["looked"] == 1


def read_acl(topic: str) -> AclCreation:
    return AclCreation(int(ResourceType.TOPIC), topic, int(PatternType.LITERAL), ANONYMOUS, "*",
                       int(AclOperation.READ), int(AclPermissionType.ALLOW))


async def test_acls_changed_make_a_consumers_session_look_at_every_partition_again(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        await cluster.create_topic("c", partitions=PARTITIONS)
        assert all(r.error_code == 0 for r in (await cluster.controller.create_acls(
            CreateAclsRequest((read_acl("c"),)))).results)
        await cluster.caught_up()
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            consumer = Consumer(cluster, conn, "c")
            full, _ = await consumer.fetch(dict.fromkeys(range(PARTITIONS), 0))
            assert all(p.error_code == ErrorCode.NONE for p in answered(full).values())
            assert (await consumer.fetch({}))[1] == 0

            # READ taken away: the next fetch, naming nothing, looks at every partition and is refused
            # on each (none of them changed).
            deleted = await cluster.controller.delete_acls(DeleteAclsRequest((DeleteAclsFilter(
                int(ResourceType.TOPIC), "c", int(PatternType.LITERAL), ANONYMOUS, "*", int(AclOperation.READ),
                int(AclPermissionType.ALLOW)),)))
            assert deleted.filter_results[0].error_code == 0 and deleted.filter_results[0].matching_acls
            await cluster.caught_up()
            refused, looked = await consumer.fetch({})
            assert looked == PARTITIONS
            assert len(answered(refused)) == PARTITIONS
            assert {p.error_code for p in answered(refused).values()} == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
            # A refused partition has something to say: looked at on every fetch until it is allowed again.
            assert (await consumer.fetch({}))[1] == PARTITIONS
