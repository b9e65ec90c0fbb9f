"""DescribeQuorum's answer, made from what the quorum's Raft leader reports (`ControllerServer.quorum_status`,
the dict `kraftpy quorum status` prints): shared by brokers, which ask the leader over the control plane,
and controllers, which answer on their own listener (kraftpy.metadata.controller_kafka).

The request must name the one partition ``__cluster_metadata-0``; any other is answered
UNKNOWN_TOPIC_OR_PARTITION for each partition it names. The answer carries the leader, its epoch, the high
watermark and, for every voter and observer, its log end offset and (from version 1) when it last fetched and
was last caught up, as wall-clock times; from version 2 each replica's directory id (for a voter of a
static quorum, the one it fetched with; zero until it has) and the voters' endpoints: those the voter set in the metadata log
records for a dynamic quorum (KIP-853), else controller.quorum.voters' on the controller listener.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from kraftpy.ids import Uuid
from kraftpy.metadata.topic_names import CLUSTER_METADATA_TOPIC_NAME
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeQuorumResponse

Response = DescribeQuorumResponse
ZERO = uuid.UUID(int=0)


def names_the_metadata_partition(request: Any) -> bool:
    topics = request.topics
    return (len(topics) == 1 and topics[0].topic_name == CLUSTER_METADATA_TOPIC_NAME
            and len(topics[0].partitions) == 1 and topics[0].partitions[0].partition_index == 0)


def partition_errors(request: Any, error: ErrorCode, message: str) -> Response:
    """Every partition the request names answered ``error``."""
    return Response(error_code=ErrorCode.NONE, topics=[
        Response.TopicData(topic_name=t.topic_name, partitions=[
            Response.PartitionData(partition_index=p.partition_index, error_code=error, error_message=message,
                                   leader_id=-1, leader_epoch=-1, high_watermark=-1)
            for p in t.partitions]) for t in request.topics])


def unknown_partitions(request: Any) -> Response:
    return partition_errors(request, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"Only {CLUSTER_METADATA_TOPIC_NAME}-0 is described.")


def _replica(state: Mapping[str, Any], now_ms: int) -> Any:
    def at(ago: int | None) -> int:
        return -1 if ago is None else now_ms - ago

    directory = state.get("directory_id")
    return Response.ReplicaState(replica_id=state["id"],
                                 replica_directory_id=uuid.UUID(bytes=Uuid.from_base64(directory).raw) if directory
                                 else ZERO,
                                 log_end_offset=state["log_end_offset"],
                                 last_fetch_timestamp=at(state["last_fetch_ms_ago"]),
                                 last_caught_up_timestamp=at(state["last_caught_up_ms_ago"]))


def describe_quorum_response(status: Mapping[str, Any], voters: Mapping[int, tuple[str, int]],
                             listener: str) -> Response:
    """The answer for ``__cluster_metadata-0`` from the leader's ``status``; ``voters`` and ``listener``
    name the voters' endpoints (version 2)."""
    now_ms = int(time.time() * 1000)
    partition = Response.PartitionData(
        partition_index=0, error_code=ErrorCode.NONE, leader_id=status["leader_id"],
        leader_epoch=status["leader_epoch"], high_watermark=status["high_watermark"],
        current_voters=[_replica(v, now_ms) for v in status["voters"]],
        observers=[_replica(o, now_ms) for o in status["observers"]])
    recorded = status.get("endpoints")
    if recorded:
        nodes = [Response.Node(node_id=int(node_id), listeners=[
            Response.Listener(name=e["name"], host=e["host"], port=e["port"]) for e in endpoints])
            for node_id, endpoints in sorted(recorded.items(), key=lambda item: int(item[0]))]
    else:
        nodes = [Response.Node(node_id=node_id, listeners=[Response.Listener(name=listener, host=host, port=port)])
                 for node_id, (host, port) in sorted(voters.items())]
    return Response(error_code=ErrorCode.NONE, topics=[
        Response.TopicData(topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[partition])], nodes=nodes)
