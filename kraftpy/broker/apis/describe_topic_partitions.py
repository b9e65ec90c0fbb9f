"""DescribeTopicPartitions (KIP-966): topics and their partitions, a page at a time.

What Kafka 3.8+'s admin client asks instead of Metadata when it describes topics. The request names
topics (none: every topic the caller may describe), ``response_partition_limit`` and an optional
cursor (a topic and the partition to start at). Topics are answered in name order from the cursor's
topic; partitions are added until the budget — the request's limit, at most the broker's
``max.request.partition.size.limit``, at least 1 — is spent, and then ``next_cursor`` says where the
next page starts (a topic cut in the middle is continued at its next partition; a topic that did not
start is continued at partition 0). No cursor in the answer: that was the last page.

As in Kafka (DescribeTopicPartitionsRequestHandler, KRaftMetadataCache):

- a named topic the caller may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED with no id, after
  the others, whether it exists or not; when every topic is asked for, such topics are left out;
- a named topic that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION
  for an illegal name); when every topic is asked for, there is none;
- a partition whose leader is not serving has ``leader_id`` -1 and no error; ``offline_replicas``
  are the replicas on brokers that are not serving (and this broker's own when its log failed);
  eligible leader replicas are empty (kraftpy has no ELR, KIP-966's other half);
- a cursor naming a topic the request does not name, or a negative partition, is an invalid request:
  every named topic is answered INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from kraftpy.broker.apis.common import to_wire_uuid
from kraftpy.broker.apis.pacing import Pacer
from kraftpy.broker.authorization import DESCRIBE, NO_AUTHORIZATION, TOPIC, BrokerAuthorizer
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata.image import MetadataImage, TopicImage
from kraftpy.metadata.records import NO_LEADER
from kraftpy.metadata.topic_names import is_internal_topic, topic_name_error
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeTopicPartitionsResponse
from kraftpy.protocol.types import ZERO_UUID
from kraftpy.rpc.kafka_server import Connection

Response = DescribeTopicPartitionsResponse
Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition
Cursor = DescribeTopicPartitionsResponse.Cursor


class InvalidCursor(ValueError):
    pass


def partitions_page(image: MetadataImage, topic: TopicImage, start: int, budget: int,
                    offline_here: Callable[[str, int], bool] | None, node_id: int) -> tuple[list[Any], int]:
    """Up to ``budget`` partitions of ``topic`` from index ``start``; and the index of the next one
    (-1 when none is left)."""
    count = len(topic.partitions)
    upper = min(count, start + budget)
    out = []
    for pid in range(start, upper):
        reg = topic.partitions.get(pid)
        if reg is None:
            continue
        offline = [r for r in reg.replicas if not image.cluster.is_active(r)
                   or (r == node_id and offline_here is not None and offline_here(topic.name, pid))]
        leader = reg.leader if reg.leader != NO_LEADER and image.cluster.is_active(reg.leader) else NO_LEADER
        out.append(Partition(error_code=ErrorCode.NONE, partition_index=pid, leader_id=leader,
                             leader_epoch=reg.leader_epoch, replica_nodes=list(reg.replicas),
                             isr_nodes=list(reg.isr), eligible_leader_replicas=[], last_known_elr=[],
                             offline_replicas=offline))
    return out, (upper if upper < count else -1)


class DescribeTopicPartitionsApi:
    #: Set by the broker: DESCRIBE on each topic.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, metadata: MetadataCache, *, partition_limit: int = 2000, node_id: int = -1,
                 offline_here: Callable[[str, int], bool] | None = None) -> None:
        """``partition_limit``: max.request.partition.size.limit."""
        self.metadata = metadata
        self.partition_limit = partition_limit
        self.node_id = node_id
        self.offline_here = offline_here

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.DESCRIBE_TOPIC_PARTITIONS: self.handle_describe_topic_partitions}

    async def handle_describe_topic_partitions(self, header: Any, request: Any, conn: Connection) -> Response:
        try:
            return await self._describe(request, conn)
        except InvalidCursor:
            return Response(throttle_time_ms=0, topics=[
                Topic(error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=ZERO_UUID, is_internal=False)
                for t in request.topics])

    async def _describe(self, request: Any, conn: Connection) -> Response:
        image = self.metadata.image
        cursor = request.cursor
        first = cursor.topic_name if cursor is not None else ""
        every = not request.topics
        if every:
            names = [name for name in image.topics.by_name if name >= first]
        else:
            names = list({t.name for t in request.topics if t.name is not None and t.name >= first})
            if cursor is not None and cursor.topic_name not in names:
                raise InvalidCursor(f"the topics asked for do not include the cursor's topic {cursor.topic_name!r}")
        if cursor is not None and cursor.partition_index < 0:
            raise InvalidCursor(f"the cursor's partition {cursor.partition_index} is not a partition")
        names.sort()
        pace = Pacer()
        refused: list[Any] = []
        if self.authz.enabled:
            allowed = []
            for name in names:
                if self.authz.allows(conn, DESCRIBE, TOPIC, name, log_denied=not every):
                    allowed.append(name)
                elif not every:
                    # Whether it exists is not disclosed: no id.
                    refused.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name,
                                         topic_id=ZERO_UUID, is_internal=False))
                if pace.due():
                    await trio.lowlevel.checkpoint()
            names = allowed
        remaining = max(min(self.partition_limit, request.response_partition_limit), 1)
        topics: list[Any] = []
        next_cursor = None
        for name in names:
            if remaining == 0:
                # Every partition of the topics before is answered: the next page starts with this one.
                next_cursor = Cursor(topic_name=name, partition_index=0)
                break
            topic = image.topics.get_by_name(name)
            if topic is None:
                if not every:
                    error = ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_error(name) else \
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    topics.append(Topic(error_code=error, name=name, topic_id=ZERO_UUID,
                                        is_internal=is_internal_topic(name)))
                continue
            start = cursor.partition_index if cursor is not None and name == first else 0
            partitions, following = partitions_page(image, topic, start, remaining, self.offline_here, self.node_id)
            topics.append(Topic(error_code=ErrorCode.NONE, name=name, topic_id=to_wire_uuid(topic.id),
                                is_internal=is_internal_topic(name), partitions=partitions))
            if following != -1:
                next_cursor = Cursor(topic_name=name, partition_index=following)
                break
            remaining -= len(partitions)
            if pace.due(1 + len(partitions)):
                await trio.lowlevel.checkpoint()
        for topic in topics:
            topic.topic_authorized_operations = self.authz.authorized_operations(conn, TOPIC, topic.name)
        return Response(throttle_time_ms=0, topics=topics + refused, next_cursor=next_cursor)
