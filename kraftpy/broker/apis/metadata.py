"""Metadata and DescribeCluster, answered from the broker's metadata cache; topic auto-creation.

A Metadata request for topics that do not exist creates them when ``auto.create.topics.enable``
and the request allow it, with *this broker's* ``num.partitions`` and
``default.replication.factor`` (as Kafka's AutoTopicCreationManager sends them: a broker
configured for four partitions auto-creates four, whatever the controller's own file says). The
topics are answered with LEADER_NOT_AVAILABLE while their creation is on its way; the client asks
again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from kraftpy.broker.apis.common import from_wire_uuid, to_wire_uuid
from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.settings import BrokerSettings
from kraftpy.metadata import messages as m
from kraftpy.metadata.image import MetadataImage, TopicImage
from kraftpy.metadata.records import NO_LEADER
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeClusterResponse, MetadataResponse
from kraftpy.rpc.kafka_server import Connection

_logger = structlog.get_logger(__name__)


def topic_metadata(image: MetadataImage, topic_image: TopicImage,
                   offline_here: Callable[[str, int], bool] | None = None, node_id: int = -1) -> Any:
    """One topic's metadata. Offline replicas: those on brokers that are not active, and this broker's
    own (``node_id``) whose log failed here (``offline_here``)."""
    Topic = MetadataResponse.MetadataResponseTopic
    out = Topic(error_code=ErrorCode.NONE, name=topic_image.name, topic_id=to_wire_uuid(topic_image.id),
                is_internal=topic_image.name.startswith("__"))
    for pid, reg in sorted(topic_image.partitions.items()):
        offline = [r for r in reg.replicas if not image.cluster.is_active(r)
                   or (r == node_id and offline_here is not None and offline_here(topic_image.name, pid))]
        out.partitions.append(MetadataResponse.MetadataResponsePartition(
            error_code=ErrorCode.LEADER_NOT_AVAILABLE if reg.leader == NO_LEADER else ErrorCode.NONE,
            partition_index=pid,
            leader_id=reg.leader,
            leader_epoch=reg.leader_epoch,
            replica_nodes=list(reg.replicas),
            isr_nodes=list(reg.isr),
            offline_replicas=offline,
        ))
    return out


class MetadataApi:
    def __init__(self, metadata: MetadataCache, channel: ControllerChannel, settings: BrokerSettings,
                 offline_here: Callable[[str, int], bool] | None = None) -> None:
        """``offline_here(topic, partition)``: whether this broker's replica is offline (its log failed)."""
        self.metadata = metadata
        self.channel = channel
        self.settings = settings
        self.offline_here = offline_here
        self._log = _logger.bind(node_id=settings.node_id)

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.METADATA: self.handle_metadata, ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster}

    async def handle_metadata(self, header: Any, request: Any, conn: Connection) -> MetadataResponse:
        version = header.request_api_version
        image = self.metadata.image
        if request.topics is None or (version == 0 and not request.topics):
            wanted = [(name, None) for name in sorted(image.topics.by_name)]
            may_create = False
        else:
            wanted = []
            for t in request.topics:
                topic_id = from_wire_uuid(t.topic_id) if version >= 10 else None
                wanted.append((t.name, topic_id))
            may_create = self.settings.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
        missing = [name for name, topic_id in wanted
                   if topic_id is None and name is not None and image.topics.get_by_name(name) is None]
        create_errors: dict[str, ErrorCode] = {}
        if may_create and missing:
            create_errors = await self._auto_create(missing)
        image = self.metadata.image
        brokers = self.metadata.alive_brokers(conn.listener)
        Topic = MetadataResponse.MetadataResponseTopic
        topics = []
        for name, topic_id in wanted:
            topic_image = image.topics.get_by_id(topic_id) if topic_id is not None else image.topics.get_by_name(name)
            if topic_image is None:
                if topic_id is not None:
                    error = ErrorCode.UNKNOWN_TOPIC_ID
                elif name in create_errors:
                    error = create_errors[name]
                else:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(Topic(error_code=error, name=name, topic_id=to_wire_uuid(topic_id)))
                continue
            topics.append(topic_metadata(image, topic_image, self.offline_here, self.settings.node_id))
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=b, host=h, port=p, rack=r) for b, h, p, r in brokers],
            cluster_id=self.settings.cluster_id,
            controller_id=brokers[0][0] if brokers else -1,
            topics=topics,
        )

    async def _auto_create(self, names: list[str]) -> dict[str, ErrorCode]:
        """Create unknown topics with this broker's defaults; their errors (LEADER_NOT_AVAILABLE while in flight)."""
        settings = self.settings
        request = m.CreateTopicsRequest(tuple(
            m.CreatableTopic(name, settings.num_partitions, settings.default_replication_factor) for name in names))
        errors: dict[str, ErrorCode] = {}
        try:
            response = await self.channel.create_topics(request)
        except ControllerUnavailable:
            return {name: ErrorCode.LEADER_NOT_AVAILABLE for name in names}
        created = []
        for result in response.topics:
            if result.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                errors[result.name] = ErrorCode.LEADER_NOT_AVAILABLE
                created.append(result.name)
            else:
                errors[result.name] = ErrorCode(result.error_code)
        if created:
            self._log.info("auto-created topics", topics=created, partitions=settings.num_partitions,
                           replication_factor=settings.default_replication_factor)
            await await_propagation(self.metadata, lambda image: all(image.topics.get_by_name(n) is not None
                                                                     for n in created))
        return errors

    async def handle_describe_cluster(self, header: Any, request: Any, conn: Connection) -> DescribeClusterResponse:
        if header.request_api_version >= 1 and request.endpoint_type != 1:
            return DescribeClusterResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                           error_message="only broker endpoints are described",
                                           endpoint_type=request.endpoint_type, cluster_id=self.settings.cluster_id)
        brokers = self.metadata.alive_brokers(conn.listener)
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            cluster_id=self.settings.cluster_id,
            controller_id=brokers[0][0] if brokers else -1,
            brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=b, host=h, port=p, rack=r)
                     for b, h, p, r in brokers],
        )
