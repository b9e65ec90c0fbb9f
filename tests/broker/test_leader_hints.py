"""Where a partition moved, told in the refusal (KIP-951), and the follower's broker epoch (KIP-903).

Produce v10+ answers a partition this broker does not lead NOT_LEADER_OR_FOLLOWER with the leader and
leader epoch its metadata has, and the answer lists that leader's endpoint on the listener the request
came in on; Fetch v16+ does the same. The versions
before carry neither. A follower's Fetch v15+ names its broker epoch: one under an epoch that is not its
registration's brings it into no ISR.
"""

from __future__ import annotations

import uuid

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FetchRequest, ProduceRequest
from kraftpy.protocol.records import SimpleRecord, build_batch
from tests.helpers.cluster import open_cluster

TOPIC = "moved"


def produce(partition: int = 0) -> ProduceRequest:
    return ProduceRequest(acks=1, timeout_ms=5_000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(
            index=partition, records=build_batch([SimpleRecord(b"k", b"v")]))])])


def fetch(topic_id, *, current_leader_epoch: int = -1, replica: tuple[int, int] | None = None) -> FetchRequest:
    request = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
        topic=TOPIC, topic_id=topic_id, partitions=[FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=current_leader_epoch, fetch_offset=0, partition_max_bytes=1 << 20)])])
    if replica is not None:
        request.replica_id = replica[0]
        request.replica_state.replica_id, request.replica_state.replica_epoch = replica
    return request


async def test_produce_and_fetch_refusals_name_the_leader_and_its_endpoint_from_v10_and_v16(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        topic_id = uuid.UUID(bytes=(await cluster.create_topic(TOPIC)).raw)
        leader = cluster.leader(TOPIC)
        other = 3 - leader
        epoch = cluster.registration(TOPIC, 0).leader_epoch
        endpoint = (leader, "127.0.0.1", cluster.ports[leader], None)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[other], client_id="hints") as conn:
            answer = await conn.request(ApiKey.PRODUCE, 10, produce())
            part = answer.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, epoch)
            assert [(n.node_id, n.host, n.port, n.rack) for n in answer.node_endpoints] == [endpoint]
            # Produce v9 knows neither field: the same refusal without them.
            old = await conn.request(ApiKey.PRODUCE, 9, produce())
            assert old.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert old.responses[0].partition_responses[0].current_leader.leader_id == -1
            assert old.node_endpoints == []

            answer = await conn.request(ApiKey.FETCH, 16, fetch(topic_id))
            data = answer.responses[0].partitions[0]
            assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (data.current_leader.leader_id, data.current_leader.leader_epoch) == (leader, epoch)
            assert [(n.node_id, n.host, n.port, n.rack) for n in answer.node_endpoints] == [endpoint]
            old = await conn.request(ApiKey.FETCH, 15, fetch(topic_id))
            assert old.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert old.responses[0].partitions[0].current_leader.leader_id == -1

        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader], client_id="hints") as conn:
            # The leader itself answers records, no hints.
            produced = await conn.request(ApiKey.PRODUCE, 11, produce())
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            assert produced.node_endpoints == []
            answer = await conn.request(ApiKey.FETCH, 17, fetch(topic_id, current_leader_epoch=epoch))
            assert answer.responses[0].partitions[0].error_code == ErrorCode.NONE
            assert answer.responses[0].partitions[0].high_watermark == 1
            assert answer.node_endpoints == []


async def test_a_follower_fetching_under_a_stale_broker_epoch_joins_no_isr(tmp_path):
    """The leader takes a follower back into the ISR only from a fetch under the follower's current broker
    epoch (Fetch v15+, KIP-903); the fetch itself is answered either way."""
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=1_000) as cluster:
        topic_id = uuid.UUID(bytes=(await cluster.create_topic(TOPIC, replication_factor=2)).raw)
        leader = cluster.leader(TOPIC)
        follower = 3 - leader
        cluster.brokers[follower].fetchers.pause()
        # Once replica.lag.time.max.ms passed without a fetch, the leader shrinks the ISR.
        await cluster.wait_for(lambda: follower not in cluster.registration(TOPIC, 0).isr)
        part = cluster.partition(leader, TOPIC)
        current = cluster.image.cluster.broker(follower).epoch
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader], client_id="hints") as conn:
            stale = await conn.request(ApiKey.FETCH, 15, fetch(topic_id, replica=(follower, current + 1)))
            assert stale.responses[0].partitions[0].error_code == ErrorCode.NONE
            assert part.pending_isr is None and follower not in part.isr
            fresh = await conn.request(ApiKey.FETCH, 15, fetch(topic_id, replica=(follower, current)))
            assert fresh.responses[0].partitions[0].error_code == ErrorCode.NONE
            await cluster.wait_for(lambda: follower in cluster.registration(TOPIC, 0).isr)
