"""Consumer groups on the wire: FindCoordinator, and the group APIs the group coordinator answers.

FindCoordinator (v0-3 one key, v4 a batch of keys, KIP-699) names the broker leading partition
``abs(hash(group_id)) % N`` of ``__consumer_offsets`` (Java's String.hashCode, as Kafka computes it,
so a group maps to the same partition number as on a Kafka cluster). When that topic does not exist
yet, the first FindCoordinator of a group creates it through the controller, as Kafka's
AutoTopicCreationManager does: offsets.topic.num.partitions partitions, compacted, compression.type
producer, segment.bytes offsets.topic.segment.bytes, replication factor
offsets.topic.replication.factor lowered (with a warning) to the brokers alive. Until a partition has
a leader the key is answered COORDINATOR_NOT_AVAILABLE, and the client asks again. Transactional ids
(key type 1) are answered COORDINATOR_NOT_AVAILABLE: transactions are not served yet.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, ListGroups,
DescribeGroups and DeleteGroups go to the `GroupCoordinator` as they were decoded, with a
`RequestContext` (client id and host, version); the coordinator answers every group and partition
they name, NOT_COORDINATOR for groups this broker does not coordinate.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio

from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.settings import BrokerSettings
from kraftpy.coordinator.group_coordinator import GroupCoordinator, RequestContext, partition_for
from kraftpy.metadata import messages as m
from kraftpy.metadata.records import NO_LEADER
from kraftpy.metadata.topic_names import GROUP_METADATA_TOPIC_NAME
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FindCoordinatorResponse
from kraftpy.rpc.kafka_server import Connection

_logger = structlog.get_logger(__name__)

#: FindCoordinator key types (Kafka's CoordinatorType).
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
#: Kafka's Node.noNode(): what an error answer names.
_NO_NODE = (-1, "", -1)

_TRANSACTIONS_NOT_SERVED = "transactions are not served by this cluster yet: no transaction coordinator"


def offsets_topic_configs(settings: BrokerSettings) -> dict[str, str]:
    """The topic configs ``__consumer_offsets`` is created with (Kafka's GroupCoordinator.offsetsTopicConfigs)."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(settings.offsets_topic_segment_bytes),
    }


def request_context(header: Any, conn: Connection) -> RequestContext:
    """Who sent a request: its client id, the client's address as Kafka shows it (``/host``), the version."""
    host = conn.peer.rpartition(":")[0] if ":" in conn.peer else conn.peer
    return RequestContext(client_id=header.client_id or "", client_host=f"/{host.strip('[]')}",
                          api_version=header.request_api_version)


class GroupsApi:
    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, channel: ControllerChannel,
                 settings: BrokerSettings) -> None:
        self.coordinator = coordinator
        self.metadata = metadata
        self.channel = channel
        self.settings = settings
        self._log = _logger.bind(node_id=settings.node_id)
        #: Set while this broker asks the controller for __consumer_offsets.
        self._creating: trio.Event | None = None

    def handlers(self) -> dict[ApiKey, Any]:
        c = self.coordinator

        def relay(method):
            async def handle(header: Any, request: Any, conn: Connection) -> Any:
                return await method(request_context(header, conn), request)
            handle.__name__ = f"handle_{method.__name__}"
            return handle

        return {
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.JOIN_GROUP: relay(c.join_group),
            ApiKey.SYNC_GROUP: relay(c.sync_group),
            ApiKey.HEARTBEAT: relay(c.heartbeat),
            ApiKey.LEAVE_GROUP: relay(c.leave_group),
            ApiKey.OFFSET_COMMIT: relay(c.offset_commit),
            ApiKey.OFFSET_FETCH: relay(c.offset_fetch),
            ApiKey.OFFSET_DELETE: relay(c.offset_delete),
            ApiKey.LIST_GROUPS: relay(c.list_groups),
            ApiKey.DESCRIBE_GROUPS: relay(c.describe_groups),
            ApiKey.DELETE_GROUPS: relay(c.delete_groups),
        }

    # -- FindCoordinator ----------------------------------------------------------------------------

    async def handle_find_coordinator(self, header: Any, request: Any, conn: Connection) -> FindCoordinatorResponse:
        version = header.request_api_version
        keys = [request.key] if version < 4 else list(request.coordinator_keys)
        answers = await self.find_coordinators(request.key_type, keys, conn.listener)
        if version < 4:
            error, message, (node_id, host, port) = answers[0]
            return FindCoordinatorResponse(
                throttle_time_ms=0, error_code=error,
                error_message=message if message is not None or error == ErrorCode.NONE else _default_message(error),
                node_id=node_id, host=host, port=port)
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            FindCoordinatorResponse.Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=error,
                                                error_message=message)
            for key, (error, message, (node_id, host, port)) in zip(keys, answers, strict=True)
        ])

    async def find_coordinators(self, key_type: int, keys: list[str], listener: str
                                ) -> list[tuple[ErrorCode, str | None, tuple[int, str, int]]]:
        """(error, message, (node id, host, port)) for each key, in order."""
        if key_type == TRANSACTION_KEY_TYPE:
            return [(ErrorCode.COORDINATOR_NOT_AVAILABLE, _TRANSACTIONS_NOT_SERVED, _NO_NODE) for _ in keys]
        if key_type != GROUP_KEY_TYPE:
            message = f"Unknown coordinator type received: {key_type}"
            return [(ErrorCode.INVALID_REQUEST, message, _NO_NODE) for _ in keys]
        if not keys:
            return []
        if self.metadata.image.topics.get_by_name(GROUP_METADATA_TOPIC_NAME) is None:
            if self._creating is None:
                # One creation at a time: the FindCoordinators of a starting fleet wait for it together.
                self._creating = trio.Event()
                try:
                    await self.create_offsets_topic()
                finally:
                    self._creating.set()
                    self._creating = None
            else:
                await self._creating.wait()
        image = self.metadata.image
        topic = image.topics.get_by_name(GROUP_METADATA_TOPIC_NAME)
        if topic is None or not topic.partitions:
            return [(ErrorCode.COORDINATOR_NOT_AVAILABLE, None, _NO_NODE) for _ in keys]
        endpoints = {broker_id: (broker_id, host, port)
                     for broker_id, host, port, _ in self.metadata.alive_brokers(listener)}
        count = len(topic.partitions)
        out = []
        for key in keys:
            reg = topic.partitions.get(partition_for(key, count))
            node = endpoints.get(reg.leader) if reg is not None and reg.leader != NO_LEADER else None
            if node is None:
                out.append((ErrorCode.COORDINATOR_NOT_AVAILABLE, None, _NO_NODE))
            else:
                out.append((ErrorCode.NONE, None, node))
        return out

    async def create_offsets_topic(self) -> None:
        """Ask the controller for ``__consumer_offsets`` and wait (briefly) for it to reach this broker."""
        settings = self.settings
        alive = sum(1 for reg in self.metadata.image.cluster.brokers.values() if not reg.fenced)
        if alive == 0:
            return
        replication_factor = min(settings.offsets_topic_replication_factor, alive)
        if replication_factor < settings.offsets_topic_replication_factor:
            self._log.warning("__consumer_offsets gets fewer replicas than offsets.topic.replication.factor: "
                              "not enough brokers are alive", replication_factor=replication_factor,
                              configured=settings.offsets_topic_replication_factor, alive_brokers=alive)
        configs = tuple(m.CreatableTopicConfig(k, v) for k, v in offsets_topic_configs(settings).items())
        request = m.CreateTopicsRequest((m.CreatableTopic(GROUP_METADATA_TOPIC_NAME,
                                                          settings.offsets_topic_num_partitions,
                                                          replication_factor, configs=configs),))
        try:
            response = await self.channel.create_topics(request)
        except ControllerUnavailable as exc:
            self._log.warning("cannot create __consumer_offsets: no controller", error=str(exc))
            return
        result = response.topics[0] if response.topics else None
        if result is None or result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            error = ErrorCode(result.error_code).name if result is not None else "no answer"
            self._log.warning("cannot create __consumer_offsets", error=error,
                              message=result.error_message if result is not None else None)
            return
        if result.error_code == ErrorCode.NONE:
            self._log.info("created __consumer_offsets", partitions=settings.offsets_topic_num_partitions,
                           replication_factor=replication_factor)
        await await_propagation(self.metadata,
                                lambda image: image.topics.get_by_name(GROUP_METADATA_TOPIC_NAME) is not None)


def _default_message(error: ErrorCode) -> str:
    """Kafka's message for an error (its ``Errors.message``), for the answers that carry one."""
    return {
        ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
        ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client "
                                   "library or the message was sent to an incompatible broker. See the broker "
                                   "logs for more details.",
    }.get(error, error.name)
