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

AddRaftVoter and RemoveRaftVoter (v0, KIP-853) are forwarded too, as Kafka's brokers forward them, so
``kafka-metadata-quorum.sh --bootstrap-server <broker> add-controller`` and ``remove-controller`` work
as they do with ``--bootstrap-controller``: the broker checks ALTER on the cluster and the cluster id,
then sends the change to the Raft leader over the control plane (what `kraftpy quorum add-controller`
sends) and answers with the leader's error (DUPLICATE_VOTER, VOTER_NOT_FOUND, INVALID_REQUEST, ...).
No leader answering in time: REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.authorization import ALTER, DESCRIBE, NO_AUTHORIZATION, BrokerAuthorizer, cluster_refusal
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.metadata import quorum_membership as membership
from kraftpy.metadata.quorum_describe import (
    describe_quorum_response,
    names_the_metadata_partition,
    partition_errors,
    unknown_partitions,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import AddRaftVoterResponse, DescribeQuorumResponse, RemoveRaftVoterResponse
from kraftpy.rpc.control import RpcError

Response = DescribeQuorumResponse


class QuorumApi:
    #: Set by the broker: DESCRIBE on the cluster.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, channel: ControllerChannel, *, cluster_id: str | None = None) -> None:
        self.channel = channel
        self.cluster_id = cluster_id

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.DESCRIBE_QUORUM: self.handle_describe_quorum,
                ApiKey.ADD_RAFT_VOTER: self.handle_change_voters,
                ApiKey.REMOVE_RAFT_VOTER: self.handle_change_voters}

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

    async def handle_change_voters(self, header: Any, request: Any, conn: Any) -> Any:
        """AddRaftVoter / RemoveRaftVoter, forwarded to the quorum's Raft leader."""
        api_key = header.request_api_key
        adding = api_key == ApiKey.ADD_RAFT_VOTER
        Response = AddRaftVoterResponse if adding else RemoveRaftVoterResponse

        def answer(error: ErrorCode, message: str | None = None) -> Any:
            return Response(throttle_time_ms=0, error_code=error, error_message=message)

        if (refused := cluster_refusal(self.authz, conn, ALTER, api_key)) is not None:
            return refused
        if request.cluster_id is not None and self.cluster_id is not None and request.cluster_id != self.cluster_id:
            return answer(ErrorCode.INCONSISTENT_CLUSTER_ID, f"this is cluster {self.cluster_id}")
        api, body = membership.from_kafka_request(request, adding)
        timeout_ms = getattr(request, "timeout_ms", None)
        try:
            await self.channel.change_voters(api, body, timeout=(timeout_ms or 30_000) / 1000)
        except ControllerUnavailable as exc:
            return answer(ErrorCode.REQUEST_TIMED_OUT, str(exc))
        except RpcError as exc:
            try:
                return answer(ErrorCode[exc.code], exc.message or exc.code)
            except KeyError:
                return answer(ErrorCode.UNKNOWN_SERVER_ERROR, f"{exc.code}: {exc.message}")
        return answer(ErrorCode.NONE)
