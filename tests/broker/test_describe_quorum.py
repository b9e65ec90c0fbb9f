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


async def test_add_and_remove_raft_voter_are_forwarded_to_the_quorum_leader(tmp_path):
    """AddRaftVoter and RemoveRaftVoter on a broker (kafka-metadata-quorum.sh --bootstrap-server add-controller
    and remove-controller): forwarded as the control plane's membership requests; another cluster's id is
    refused by the broker itself; no quorum leader answering is REQUEST_TIMED_OUT."""
    import uuid

    from kraftpy.ids import Uuid
    from kraftpy.protocol.messages import AddRaftVoterRequest, RemoveRaftVoterRequest

    directory = uuid.UUID(int=7)
    add = AddRaftVoterRequest(cluster_id=None, timeout_ms=1000, voter_id=3001, voter_directory_id=directory,
                              listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="127.0.0.1", port=9093)])
    remove = RemoveRaftVoterRequest(cluster_id=None, voter_id=3002, voter_directory_id=directory)
    async with open_cluster(tmp_path, brokers=1) as cluster:
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            added = await admin.request(ApiKey.ADD_RAFT_VOTER, add, version=0)
            removed = await admin.request(ApiKey.REMOVE_RAFT_VOTER, remove, version=0)
            remove.cluster_id = "another-cluster"
            elsewhere = await admin.request(ApiKey.REMOVE_RAFT_VOTER, remove, version=0)
    # The in-process controller runs no Raft quorum: what was forwarded, and the answer to no leader.
    assert (added.error_code, removed.error_code) == (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REQUEST_TIMED_OUT)
    base64 = Uuid(directory.bytes).to_base64()
    assert [body for name, body in cluster.controller.requests if name == "change_voters"] == [
        ("AddRaftVoter", {"voter_id": 3001, "voter_directory_id": base64,
                          "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": 9093}]}),
        ("RemoveRaftVoter", {"voter_id": 3002, "voter_directory_id": base64}),
    ]
    assert elsewhere.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
