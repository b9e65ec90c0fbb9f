"""DescribeQuorum on the Kafka port (what kafka-metadata-quorum.sh --bootstrap-server asks): answered by a
`kraftpy dev` process from its quorum; the one partition it describes; no quorum leader reachable."""

from __future__ import annotations

import time

import trio

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeQuorumRequest
from tests.helpers.cluster import open_cluster
from tests.helpers.deployments import DevDeployment

Request = DescribeQuorumRequest


def request(topic: str = "__cluster_metadata", *partitions: int) -> Request:
    return Request(topics=[Request.TopicData(topic_name=topic, partitions=[
        Request.PartitionData(partition_index=p) for p in (partitions or (0,))])])


def test_a_dev_process_describes_its_quorum(tmp_path):
    with DevDeployment(tmp_path / "dev") as dev:
        async def ask():
            async with AdminClient(parse_addresses(dev.bootstrap)) as admin:
                return [await admin.request(ApiKey.DESCRIBE_QUORUM, request(), version=v) for v in (0, 2)]

        v0, v2 = trio.run(ask)
    now_ms = time.time() * 1000
    for response in (v0, v2):
        assert response.error_code == ErrorCode.NONE
        (topic,) = response.topics
        (partition,) = topic.partitions
        assert (topic.topic_name, partition.partition_index, partition.error_code) == (
            "__cluster_metadata", 0, ErrorCode.NONE)
        assert partition.leader_id == 1 and partition.leader_epoch >= 1 and partition.high_watermark > 0
        assert [v.replica_id for v in partition.current_voters] == [1]
        assert partition.current_voters[0].log_end_offset >= partition.high_watermark
    caught_up = v2.topics[0].partitions[0].current_voters[0].last_caught_up_timestamp
    assert abs(caught_up - now_ms) < 60_000  # a wall-clock time, not a monotonic one
    assert [(n.node_id, [(listener.name, listener.host) for listener in n.listeners]) for n in v2.nodes] == [
        (1, [("CONTROLLER", "127.0.0.1")])]


async def test_only_the_metadata_partition_is_described_and_no_leader_is_an_error(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            other = await admin.request(ApiKey.DESCRIBE_QUORUM, request("orders", 0, 1), version=2)
            assert [(p.partition_index, p.error_code) for p in other.topics[0].partitions] == [
                (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
            # The in-process controller runs no Raft quorum: no leader answers.
            lost = await admin.request(ApiKey.DESCRIBE_QUORUM, request(), version=2)
            assert lost.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
