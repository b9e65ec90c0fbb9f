"""ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments: forwarded to the controller.

Where partitions live and who leads them is the controller's decision (see forwarding). Each handler
turns the wire request into the controller's message, awaits the committed result and, for the two
writes, waits until the change reached this broker's metadata (so a client that elects a leader, or
starts a move, and then asks for metadata or for the moves in progress sees it), then answers in the
request's version. ElectLeaders v0 has no election type: it asks for preferred elections.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.authorization import ALTER, DESCRIBE, NO_AUTHORIZATION, BrokerAuthorizer, cluster_refusal
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata import messages as m
from kraftpy.metadata.image import MetadataImage, PartitionRegistration
from kraftpy.metadata.records import NO_LEADER
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    AlterPartitionReassignmentsResponse,
    ElectLeadersResponse,
    ListPartitionReassignmentsResponse,
)
from kraftpy.rpc.kafka_server import Connection


def _partition(image: MetadataImage, topic: str, pid: int) -> PartitionRegistration | None:
    ti = image.topics.get_by_name(topic)
    return None if ti is None else ti.partitions.get(pid)


class ReassignmentsApi:
    #: Set by the broker: ALTER on the cluster (DESCRIBE to list reassignments).
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, metadata: MetadataCache, channel: ControllerChannel) -> None:
        self.metadata = metadata
        self.channel = channel

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.ELECT_LEADERS: self.handle_elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.handle_list_partition_reassignments,
        }

    # -- ElectLeaders ---------------------------------------------------------------------------

    async def handle_elect_leaders(self, header: Any, request: Any, conn: Connection) -> ElectLeadersResponse:
        if (refused := cluster_refusal(self.authz, conn, ALTER, ApiKey.ELECT_LEADERS)) is not None:
            return refused
        version = header.request_api_version
        kind = request.election_type if version >= 1 else 0
        if kind not in {e.value for e in m.ElectionType}:
            return ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST)
        election = m.ElectionType(kind)
        topics = None if request.topic_partitions is None else tuple(
            m.TopicPartitions(tp.topic, tuple(tp.partitions)) for tp in request.topic_partitions)
        mresp = await self.channel.elect_leaders(m.ElectLeadersRequest(election, topics))
        elected = [(r.topic, p.partition_id) for r in mresp.replica_election_results for p in r.partition_result
                   if p.error_code == ErrorCode.NONE]

        def done(image: MetadataImage) -> bool:
            for topic, pid in elected:
                part = _partition(image, topic, pid)
                if part is None:
                    continue
                if election is m.ElectionType.PREFERRED and part.leader != part.preferred_leader:
                    return False
                if election is m.ElectionType.UNCLEAN and part.leader == NO_LEADER:
                    return False
            return True

        if elected:
            await await_propagation(self.metadata, done, request.timeout_ms)
        Result = ElectLeadersResponse.ReplicaElectionResult
        Partition = ElectLeadersResponse.PartitionResult
        return ElectLeadersResponse(throttle_time_ms=0, error_code=mresp.error_code, replica_election_results=[
            Result(topic=r.topic, partition_result=[
                Partition(partition_id=p.partition_id, error_code=p.error_code, error_message=p.error_message)
                for p in r.partition_result])
            for r in mresp.replica_election_results
        ])

    # -- AlterPartitionReassignments ------------------------------------------------------------

    async def handle_alter_partition_reassignments(
        self, header: Any, request: Any, conn: Connection
    ) -> AlterPartitionReassignmentsResponse:
        if (refused := cluster_refusal(self.authz, conn, ALTER, ApiKey.ALTER_PARTITION_REASSIGNMENTS)) is not None:
            return refused
        mreq = m.AlterPartitionReassignmentsRequest(tuple(
            m.ReassignableTopic(t.name, tuple(
                m.ReassignablePartition(p.partition_index, None if p.replicas is None else tuple(p.replicas))
                for p in t.partitions))
            for t in request.topics))
        mresp = await self.channel.alter_partition_reassignments(mreq)
        wanted = {(t.name, p.partition_index): p.replicas for t in mreq.topics for p in t.partitions}
        accepted = [(r.name, p.partition_index) for r in mresp.responses for p in r.partitions
                    if p.error_code == ErrorCode.NONE]

        def done(image: MetadataImage) -> bool:
            for topic, pid in accepted:
                part = _partition(image, topic, pid)
                if part is None:
                    continue
                target = wanted.get((topic, pid))
                moving = bool(part.adding_replicas or part.removing_replicas)
                if target is None and moving:
                    return False
                if target is not None and tuple(r for r in part.replicas if r not in part.removing_replicas) != target:
                    return False
            return True

        if accepted:
            await await_propagation(self.metadata, done, request.timeout_ms)
        Topic = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
        Partition = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=mresp.error_code, error_message=mresp.error_message, responses=[
                Topic(name=r.name, partitions=[
                    Partition(partition_index=p.partition_index, error_code=p.error_code,
                              error_message=p.error_message)
                    for p in r.partitions])
                for r in mresp.responses
            ])

    # -- ListPartitionReassignments -------------------------------------------------------------

    async def handle_list_partition_reassignments(
        self, header: Any, request: Any, conn: Connection
    ) -> ListPartitionReassignmentsResponse:
        if (refused := cluster_refusal(self.authz, conn, DESCRIBE, ApiKey.LIST_PARTITION_REASSIGNMENTS)) is not None:
            return refused
        topics = None if request.topics is None else tuple(
            m.ListPartitionReassignmentsTopics(t.name, tuple(t.partition_indexes)) for t in request.topics)
        mresp = await self.channel.list_partition_reassignments(m.ListPartitionReassignmentsRequest(topics))
        Topic = ListPartitionReassignmentsResponse.OngoingTopicReassignment
        Partition = ListPartitionReassignmentsResponse.OngoingPartitionReassignment
        return ListPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=mresp.error_code, error_message=mresp.error_message, topics=[
                Topic(name=t.name, partitions=[
                    Partition(partition_index=p.partition_index, replicas=list(p.replicas),
                              adding_replicas=list(p.adding_replicas), removing_replicas=list(p.removing_replicas))
                    for p in t.partitions])
                for t in mresp.topics
            ])
