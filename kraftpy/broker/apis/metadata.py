"""Metadata and DescribeCluster, answered from the broker's metadata cache; topic auto-creation.

DescribeCluster lists the unfenced brokers; from version 2 (KIP-1073) a request may ask for the fenced
ones too, each marked ``is_fenced``. Like Kafka's brokers, the controller id it names is a live broker's
(clients send controller requests there to be forwarded); the active controller itself is what
``kraftpy cluster describe --bootstrap-controller`` asks for.

A Metadata request for topics that do not exist creates them when ``auto.create.topics.enable``
and the request allow it, with *this broker's* ``num.partitions`` and
``default.replication.factor`` (as Kafka's AutoTopicCreationManager sends them: a broker
configured for four partitions auto-creates four, whatever the controller's own file says). The
topics are answered with LEADER_NOT_AVAILABLE while their creation is on its way; the client asks
again. A name that is not a legal topic name is answered INVALID_TOPIC_EXCEPTION and never created.
Kafka's internal topics are never auto-created here: ``__consumer_offsets`` is made by the first
FindCoordinator of a group, with its own partition count and configs (kraftpy.broker.apis.groups).

A request may name a million topics: each is answered once however often it is named, the work is
done in turns (kraftpy.broker.apis.pacing) so that other connections and the heartbeats go on, and
auto-creation adds at most `MAX_AUTO_CREATE_PARTITIONS` partitions per request — Kafka's controller
refuses a larger creation as one operation, so a request naming more unknown topics than that
creates none of them (they are answered UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
import trio

from kraftpy.broker.apis.common import from_wire_uuid, to_wire_uuid
from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.apis.pacing import Pacer
from kraftpy.broker.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER,
    CREATE,
    DESCRIBE,
    NO_AUTHORIZATION,
    TOPIC,
    BrokerAuthorizer,
)
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.settings import BrokerSettings
from kraftpy.ids import Uuid
from kraftpy.metadata import messages as m
from kraftpy.metadata.image import MetadataImage, TopicImage
from kraftpy.metadata.records import NO_LEADER
from kraftpy.metadata.topic_names import is_internal_topic, reserved_topic_error, topic_name_error
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeClusterResponse, MetadataResponse
from kraftpy.rpc.kafka_server import BadRequest, Connection
from kraftpy.security.authorizer import CLUSTER_NAME

_logger = structlog.get_logger(__name__)

#: Partitions one Metadata request may auto-create (Kafka's controller creates at most this many in
#: one operation).
MAX_AUTO_CREATE_PARTITIONS = 10_000
#: The partitions of every topic answered with an error: one list, never changed, instead of one each.
_NONE: list = []


def topic_metadata(image: MetadataImage, topic_image: TopicImage,
                   offline_here: Callable[[str, int], bool] | None = None, node_id: int = -1) -> Any:
    """One topic's metadata. Offline replicas: those on brokers that are not active, and this broker's
    own (``node_id``) whose log failed here (``offline_here``)."""
    Topic = MetadataResponse.MetadataResponseTopic
    out = Topic(error_code=ErrorCode.NONE, name=topic_image.name, topic_id=to_wire_uuid(topic_image.id),
                is_internal=is_internal_topic(topic_image.name))
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
    #: Set by the broker: DESCRIBE on each topic (others hidden or refused), CREATE to auto-create.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

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
        pace = Pacer()
        if request.topics is None or (version == 0 and not request.topics):
            wanted = [(name, None) for name in sorted(image.topics.by_name)]
            if self.authz.enabled:  # every topic the caller may describe; the others are not mentioned
                wanted = [(n, i) for n, i in wanted if self.authz.allows(conn, DESCRIBE, TOPIC, n, log_denied=False)]
            may_create = False
        else:
            # Each topic once, however often the request names it: Kafka answers a set of topics.
            by_key: dict[Any, tuple[str | None, Uuid | None]] = {}
            for t in request.topics:
                topic_id = from_wire_uuid(t.topic_id) if version >= 10 else None
                if version < 12 and (t.name is None or topic_id is not None):
                    # Topics are named by id from v12 on; before that the answer cannot even carry them.
                    raise BadRequest(f"Topic IDs are not supported in requests for version {version}")
                by_key.setdefault(t.name if topic_id is None else topic_id, (t.name, topic_id))
                if pace.due():
                    await trio.lowlevel.checkpoint()
            wanted = list(by_key.values())
            del by_key
            may_create = self.settings.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
        #: Why an unknown topic named by name is not there (UNKNOWN_TOPIC_OR_PARTITION when absent).
        errors: dict[str, ErrorCode] = {}
        #: Named topics the caller may not describe (or not create), by name or id.
        unauthorized: set[Any] = set()
        if self.authz.enabled and request.topics:
            may_create_any = may_create and self.authz.allows_cluster(conn, CREATE, log_denied=False)
            for name, topic_id in wanted:
                known = image.topics.get_by_id(topic_id) if topic_id is not None else image.topics.get_by_name(name)
                if known is not None:
                    if not self.authz.allows(conn, DESCRIBE, TOPIC, known.name):
                        unauthorized.add(topic_id if topic_id is not None else name)
                elif topic_id is None and not self.authz.allows(conn, DESCRIBE, TOPIC, name):
                    unauthorized.add(name)
                elif (topic_id is None and may_create and not may_create_any
                      and not self.authz.allows(conn, CREATE, TOPIC, name)):
                    unauthorized.add(name)
        creatable = []
        for name, topic_id in wanted:
            if unauthorized and (topic_id if topic_id is not None else name) in unauthorized:
                continue
            if topic_id is None and name is not None and image.topics.get_by_name(name) is None:
                if topic_name_error(name) is not None:
                    errors[name] = ErrorCode.INVALID_TOPIC_EXCEPTION
                elif may_create and reserved_topic_error(name) is None and not is_internal_topic(name):
                    creatable.append(name)
            if pace.due():
                await trio.lowlevel.checkpoint()
        if creatable:
            errors.update(await self._auto_create(creatable))
        del creatable
        image = self.metadata.image
        brokers = self.metadata.alive_brokers(conn.listener)
        Topic = MetadataResponse.MetadataResponseTopic
        topics = []
        for name, topic_id in wanted:
            if unauthorized and (topic_id if topic_id is not None else name) in unauthorized:
                topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name,
                                    topic_id=to_wire_uuid(topic_id), partitions=_NONE))
                continue
            topic_image = image.topics.get_by_id(topic_id) if topic_id is not None else image.topics.get_by_name(name)
            if topic_image is None:
                if topic_id is not None:
                    error = ErrorCode.UNKNOWN_TOPIC_ID
                else:
                    error = errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                topics.append(Topic(error_code=error, name=name, topic_id=to_wire_uuid(topic_id), partitions=_NONE))
                work = 1
            else:
                topics.append(topic_metadata(image, topic_image, self.offline_here, self.settings.node_id))
                work = 1 + len(topic_image.partitions)
            if pace.due(work):
                await trio.lowlevel.checkpoint()
        if version >= 8 and request.include_topic_authorized_operations:
            # Every topic answered, refused ones too (Kafka sets it on the complete topic list).
            for topic in topics:
                if topic.name is not None:
                    topic.topic_authorized_operations = self.authz.authorized_operations(conn, TOPIC, topic.name)
                if pace.due(8):
                    await trio.lowlevel.checkpoint()
        cluster_operations = AUTHORIZED_OPERATIONS_OMITTED
        if 8 <= version <= 10 and request.include_cluster_authorized_operations:
            cluster_operations = self._cluster_authorized_operations(conn)
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=b, host=h, port=p, rack=r) for b, h, p, r in brokers],
            cluster_id=self.settings.cluster_id,
            controller_id=brokers[0][0] if brokers else -1,
            topics=topics,
            cluster_authorized_operations=cluster_operations,
        )

    def _cluster_authorized_operations(self, conn: Connection) -> int:
        """What the caller may do on the cluster; 0 when it may not even describe it (Kafka's AuthHelper)."""
        if not self.authz.allows_cluster(conn, DESCRIBE, log_denied=False):
            return 0
        return self.authz.authorized_operations(conn, CLUSTER, CLUSTER_NAME)

    async def _auto_create(self, names: list[str]) -> dict[str, ErrorCode]:
        """Create unknown topics with this broker's defaults; their errors (LEADER_NOT_AVAILABLE while in
        flight). None is created when they would add more than `MAX_AUTO_CREATE_PARTITIONS` partitions."""
        settings = self.settings
        partitions = len(names) * max(settings.num_partitions, 1)
        if partitions > MAX_AUTO_CREATE_PARTITIONS:
            self._log.warning("not auto-creating topics: too many partitions for one request", topics=len(names),
                              partitions=partitions, limit=MAX_AUTO_CREATE_PARTITIONS)
            return {}
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
            self._log.info("auto-created topics", count=len(created), topics=created[:10],
                           partitions=settings.num_partitions, replication_factor=settings.default_replication_factor)
            await await_propagation(self.metadata, lambda image: all(image.topics.get_by_name(n) is not None
                                                                     for n in created))
        return errors

    async def handle_describe_cluster(self, header: Any, request: Any, conn: Connection) -> DescribeClusterResponse:
        # Anyone may describe the cluster, as in Kafka (like Metadata's broker list); only what the caller
        # may do on it depends on DESCRIBE there (_cluster_authorized_operations).
        if header.request_api_version >= 1 and request.endpoint_type != 1:
            return DescribeClusterResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                           error_message="only broker endpoints are described",
                                           endpoint_type=request.endpoint_type, cluster_id=self.settings.cluster_id)
        brokers = self.metadata.alive_brokers(conn.listener)
        controller_id = brokers[0][0] if brokers else -1
        Broker = DescribeClusterResponse.DescribeClusterBroker
        if header.request_api_version >= 2 and request.include_fenced_brokers:
            # KIP-1073: fenced brokers too, each saying whether it is.
            described = []
            for broker_id, reg in sorted(self.metadata.image.cluster.brokers.items()):
                for endpoint in reg.listeners:
                    if endpoint.name == conn.listener:
                        described.append(Broker(broker_id=broker_id, host=endpoint.host, port=endpoint.port,
                                                rack=reg.rack, is_fenced=reg.fenced))
                        break
        else:
            described = [Broker(broker_id=b, host=h, port=p, rack=r) for b, h, p, r in brokers]
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            cluster_id=self.settings.cluster_id,
            controller_id=controller_id,
            brokers=described,
            cluster_authorized_operations=(self._cluster_authorized_operations(conn)
                                           if request.include_cluster_authorized_operations
                                           else AUTHORIZED_OPERATIONS_OMITTED),
        )
