"""DescribeQuorum on the Kafka port: the metadata quorum as its Raft leader sees it, for
kafka-metadata-quorum.sh --bootstrap-server and admin clients' describeMetadataQuorum.

As Kafka's brokers do, the broker forwards the question: it asks the controllers (over the control
plane, following a voter's pointer to the Raft leader) for what `kraftpy quorum status` prints, and
answers in DescribeQuorum's shape — the leader, its epoch, the high watermark, and for every voter and
observer its log end offset and (from version 1) when it last fetched and was last caught up, as wall
clock times; from version 2 the voters' endpoints on the controller listener (directory ids are zero:
the quorum is static until KIP-853's dynamic quorum). The request must name the one partition
``__cluster_metadata-0``; any other is answered UNKNOWN_TOPIC_OR_PARTITION for each partition named. No
quorum leader answering in time: NOT_LEADER_OR_FOLLOWER on the partition. The caller needs DESCRIBE on
the cluster.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kraftpy.broker.authorization import DESCRIBE, NO_AUTHORIZATION, BrokerAuthorizer, cluster_refusal
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.metadata.topic_names import CLUSTER_METADATA_TOPIC_NAME as METADATA_TOPIC_NAME
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeQuorumResponse

Response = DescribeQuorumResponse
ZERO = uuid.UUID(int=0)


def _partition_errors(request: Any, error: ErrorCode, message: str) -> Response:
    return Response(error_code=ErrorCode.NONE, topics=[
        Response.TopicData(topic_name=t.topic_name, partitions=[
            Response.PartitionData(partition_index=p.partition_index, error_code=error, error_message=message,
                                   leader_id=-1, leader_epoch=-1, high_watermark=-1)
            for p in t.partitions]) for t in request.topics])


def _replica(state: dict[str, Any], now_ms: int) -> Any:
    def at(ago: int | None) -> int:
        return -1 if ago is None else now_ms - ago

    return Response.ReplicaState(replica_id=state["id"], replica_directory_id=ZERO,
                                 log_end_offset=state["log_end_offset"],
                                 last_fetch_timestamp=at(state["last_fetch_ms_ago"]),
                                 last_caught_up_timestamp=at(state["last_caught_up_ms_ago"]))


class QuorumApi:
    #: Set by the broker: DESCRIBE on the cluster.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, channel: ControllerChannel) -> None:
        self.channel = channel

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.DESCRIBE_QUORUM: self.handle_describe_quorum}

    async def handle_describe_quorum(self, header: Any, request: Any, conn: Any) -> Response:
        if (refused := cluster_refusal(self.authz, conn, DESCRIBE, ApiKey.DESCRIBE_QUORUM)) is not None:
            return refused
        topics = request.topics
        if not (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC_NAME and len(topics[0].partitions) == 1
                and topics[0].partitions[0].partition_index == 0):
            return _partition_errors(request, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"Only {METADATA_TOPIC_NAME}-0 is described.")
        try:
            status = await self.channel.quorum_status()
        except ControllerUnavailable as exc:
            return _partition_errors(request, ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc))
        now_ms = int(time.time() * 1000)
        partition = Response.PartitionData(
            partition_index=0, error_code=ErrorCode.NONE, leader_id=status["leader_id"],
            leader_epoch=status["leader_epoch"], high_watermark=status["high_watermark"],
            current_voters=[_replica(v, now_ms) for v in status["voters"]],
            observers=[_replica(o, now_ms) for o in status["observers"]])
        voters = getattr(self.channel, "voters", {})
        listener = getattr(self.channel, "listener_name", "CONTROLLER")
        nodes = [Response.Node(node_id=node_id, listeners=[Response.Listener(name=listener, host=host, port=port)])
                 for node_id, (host, port) in sorted(voters.items())]
        return Response(error_code=ErrorCode.NONE, topics=[
            Response.TopicData(topic_name=METADATA_TOPIC_NAME, partitions=[partition])], nodes=nodes)
