"""DescribeQuorum on the Kafka port: the metadata quorum as its Raft leader sees it, for
kafka-metadata-quorum.sh --bootstrap-server and admin clients' describeMetadataQuorum.

As Kafka's brokers do, the broker forwards the question: it asks the controllers (over the control
plane, following a voter's pointer to the Raft leader) for what `kraftpy quorum status` prints, and
answers in DescribeQuorum's shape — the leader, its epoch, the high watermark, and for every voter and
observer its log end offset and (from version 1) when it last fetched and was last caught up, as wall
clock times; from version 2 each replica's directory id and the voters' endpoints on the controller listener
(kraftpy.metadata.quorum_describe). The request must name the one partition
``__cluster_metadata-0``; any other is answered UNKNOWN_TOPIC_OR_PARTITION for each partition named. No
quorum leader answering in time: NOT_LEADER_OR_FOLLOWER on the partition. The caller needs DESCRIBE on
the cluster.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.authorization import DESCRIBE, NO_AUTHORIZATION, BrokerAuthorizer, cluster_refusal
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.metadata.quorum_describe import (
    describe_quorum_response,
    names_the_metadata_partition,
    partition_errors,
    unknown_partitions,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeQuorumResponse

Response = DescribeQuorumResponse


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
        if not names_the_metadata_partition(request):
            return unknown_partitions(request)
        try:
            status = await self.channel.quorum_status()
        except ControllerUnavailable as exc:
            return partition_errors(request, ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc))
        return describe_quorum_response(status, getattr(self.channel, "voters", {}),
                                        getattr(self.channel, "listener_name", "CONTROLLER"))
