"""Consumer groups on the wire: FindCoordinator, and the group APIs the group coordinator answers.

FindCoordinator (v0-3 one key, v4-6 a batch of keys, KIP-699) names the broker leading partition
``abs(hash(group_id)) % N`` of ``__consumer_offsets`` (Java's String.hashCode, as Kafka computes it,
so a group maps to the same partition number as on a Kafka cluster). When that topic does not exist
yet, the first FindCoordinator of a group creates it through the controller, as Kafka's
AutoTopicCreationManager does: offsets.topic.num.partitions partitions, compacted, compression.type
producer, segment.bytes offsets.topic.segment.bytes, replication factor
offsets.topic.replication.factor lowered (with a warning) to the brokers alive. Until a partition has
a leader the key is answered COORDINATOR_NOT_AVAILABLE, and the client asks again. Transactional ids
(key type 1) are placed the same way on ``__transaction_state``, created on the first ask with
transaction.state.log.num.partitions partitions, compacted, uncompressed, no unclean election,
segment.bytes transaction.state.log.segment.bytes, replication factor
transaction.state.log.replication.factor and min.insync.replicas transaction.state.log.min.isr, each
lowered (with a warning) to what the live brokers allow.

ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) are served, and advertised, only when
group.coordinator.rebalance.protocols includes ``consumer``; the coordinator looks the subscribed
topics up in this broker's metadata image through them.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, ListGroups,
DescribeGroups, DeleteGroups and TxnOffsetCommit go to the `GroupCoordinator` as they were decoded, with a
`RequestContext` (client id and host, version); the coordinator answers every group and partition
they name, NOT_COORDINATOR for groups this broker does not coordinate.
"""

from __future__ import annotations

from typing import Any

import attrs
import structlog
import trio

from kraftpy.broker.apis.common import from_wire_uuid, to_wire_uuid
from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.apis.group_acls import authorized_call
from kraftpy.broker.authorization import (
    CLUSTER_ACTION,
    DESCRIBE,
    GROUP,
    NO_AUTHORIZATION,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    BrokerAuthorizer,
)
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.settings import BrokerSettings
from kraftpy.coordinator.consumer_protocol import match_topics
from kraftpy.coordinator.group_coordinator import GroupCoordinator, RequestContext, partition_for
from kraftpy.metadata import messages as m
from kraftpy.metadata.image import ConfigResource
from kraftpy.metadata.records import NO_LEADER, ConfigResourceType
from kraftpy.metadata.topic_names import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    FindCoordinatorResponse,
)
from kraftpy.rpc.kafka_server import Connection

_logger = structlog.get_logger(__name__)

#: FindCoordinator key types (Kafka's CoordinatorType).
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
#: The first FindCoordinator version that may ask for a share group's coordinator (KIP-932).
SHARE_KEY_MIN_VERSION = 6
#: Kafka's Node.noNode(): what an error answer names.
_NO_NODE = (-1, "", -1)


def transaction_topic_configs(settings: BrokerSettings) -> dict[str, str]:
    """The topic configs ``__transaction_state`` is created with (Kafka's TransactionLog configs;
    min.insync.replicas is added by the creation, capped at the replicas)."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "segment.bytes": str(settings.transaction.state_log_segment_bytes),
    }


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
    #: Set by the broker: the group APIs' rules (kraftpy.broker.apis.group_acls), DESCRIBE for FindCoordinator.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, coordinator: GroupCoordinator, metadata: MetadataCache, channel: ControllerChannel,
                 settings: BrokerSettings) -> None:
        self.coordinator = coordinator
        self.metadata = metadata
        self.channel = channel
        self.settings = settings
        self._log = _logger.bind(node_id=settings.node_id)
        #: regex -> the topic names it matches in ``_regex_topics`` (the image's topic map they were matched in).
        self._regex_cache: dict[str, frozenset[str]] = {}
        self._regex_topics: Any = None
        #: Set while this broker asks the controller for an internal topic, by name.
        self._creating: dict[str, trio.Event] = {}
        # The classic members of a consumer group subscribe by topic name: the coordinator looks them up here.
        coordinator.topic_lookup = self._lookup_topic

    def handlers(self) -> dict[ApiKey, Any]:
        c = self.coordinator

        def relay(method):
            async def handle(header: Any, request: Any, conn: Connection) -> Any:
                async def call(checked: Any) -> Any:
                    return await method(request_context(header, conn), checked)
                return await authorized_call(self.authz, header.request_api_key, header, request, conn, call)
            handle.__name__ = f"handle_{method.__name__}"
            return handle

        handlers = {
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
            ApiKey.TXN_OFFSET_COMMIT: relay(c.txn_offset_commit),
        }
        if "consumer" in self.settings.group_coordinator_rebalance_protocols:
            handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT] = self.handle_consumer_group_heartbeat
            handlers[ApiKey.CONSUMER_GROUP_DESCRIBE] = self.handle_consumer_group_describe
        return handlers

    # -- KIP-848 consumer groups ------------------------------------------------------------------

    def _lookup_topic(self, name: str):
        topic = self.metadata.image.topics.get_by_name(name)
        if topic is None or not topic.partitions:
            return None
        return to_wire_uuid(topic.id), len(topic.partitions)

    def _match_topics(self, regex: str) -> frozenset[str]:
        """The topics a subscribed regex matches; evaluated once per regex and metadata image."""
        names = self.metadata.image.topics.by_name
        if names is not self._regex_topics or len(self._regex_cache) > 256:
            self._regex_topics, self._regex_cache = names, {}
        cached = self._regex_cache.get(regex)
        if cached is None:
            cached = self._regex_cache[regex] = match_topics(regex, names.keys())
        return cached

    def _group_timeouts(self, group_id: str) -> tuple[int | None, int | None]:
        """The group's consumer.session.timeout.ms and consumer.heartbeat.interval.ms, when set on it."""
        configs = self.metadata.image.configs.config(ConfigResource(ConfigResourceType.GROUP, group_id))
        session, interval = configs.get("consumer.session.timeout.ms"), configs.get("consumer.heartbeat.interval.ms")
        return (int(session) if session is not None else None, int(interval) if interval is not None else None)

    def _topic_name(self, topic_id) -> str | None:
        topic_uuid = from_wire_uuid(topic_id)
        topic = self.metadata.image.topics.get_by_id(topic_uuid) if topic_uuid is not None else None
        return topic.name if topic is not None else None

    async def handle_consumer_group_heartbeat(self, header: Any, request: Any, conn: Connection
                                              ) -> ConsumerGroupHeartbeatResponse:
        """READ on the group, and DESCRIBE on each subscribed topic (Kafka's KafkaApis)."""
        if not self.authz.allows(conn, READ, GROUP, request.group_id):
            return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, member_epoch=-1)
        names = request.subscribed_topic_names or ()
        denied = self.authz.denied(conn, DESCRIBE, TOPIC, names)
        if denied:
            return ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, member_epoch=-1,
                error_message=f"The client is not authorized to describe topics: {', '.join(sorted(denied))}.")
        return await self.coordinator.consumer_group_heartbeat(request_context(header, conn), request,
                                                               self._lookup_topic, self._match_topics,
                                                               self._group_timeouts)

    async def handle_consumer_group_describe(self, header: Any, request: Any, conn: Connection
                                             ) -> ConsumerGroupDescribeResponse:
        """DESCRIBE on each group: refused ones are answered GROUP_AUTHORIZATION_FAILED."""
        asked = list(request.group_ids)
        denied = self.authz.denied(conn, DESCRIBE, GROUP, asked)
        allowed = [g for g in asked if g not in denied]
        request.group_ids = allowed
        response = await self.coordinator.consumer_group_describe(
            request_context(header, conn), request, self._topic_name,
            lambda group_id: self.authz.authorized_operations(conn, GROUP, group_id))
        by_id = {g.group_id: g for g in response.groups}
        cls = ConsumerGroupDescribeResponse.DescribedGroup
        response.groups = [by_id[g] if g in by_id else cls(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=g)
                           for g in asked]
        return response

    # -- FindCoordinator ----------------------------------------------------------------------------

    async def handle_find_coordinator(self, header: Any, request: Any, conn: Connection) -> FindCoordinatorResponse:
        version = header.request_api_version
        keys = [request.key] if version < 4 else list(request.coordinator_keys)
        # DESCRIBE on the group or transactional id each key names.
        resource, denied_error = ((TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                                  if request.key_type == TRANSACTION_KEY_TYPE else
                                  (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED))
        if request.key_type == SHARE_KEY_TYPE:
            answers = [self._share_coordinator(version, conn)] * len(keys)
        else:
            denied = self.authz.denied(conn, DESCRIBE, resource, keys) if request.key_type in (
                GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE) else set()
            allowed = [k for k in keys if k not in denied]
            found = iter(await self.find_coordinators(request.key_type, allowed, conn.listener) if allowed else [])
            answers = [(denied_error, "Authorization failed.", _NO_NODE) if k in denied else next(found)
                       for k in keys]
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

    def _share_coordinator(self, version: int, conn: Connection) -> tuple[ErrorCode, str | None, tuple[int, str, int]]:
        """The answer to a share group's key (type 2), as Kafka 3.9 gives it: INVALID_REQUEST before v6,
        CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION on the cluster, else COORDINATOR_NOT_AVAILABLE
        (share groups, KIP-932, are not served)."""
        if version < SHARE_KEY_MIN_VERSION:
            return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type received: {SHARE_KEY_TYPE}", _NO_NODE
        if not self.authz.allows_cluster(conn, CLUSTER_ACTION):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, _NO_NODE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, _NO_NODE

    async def find_coordinators(self, key_type: int, keys: list[str], listener: str
                                ) -> list[tuple[ErrorCode, str | None, tuple[int, str, int]]]:
        """(error, message, (node id, host, port)) for each key, in order."""
        if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
            message = f"Unknown coordinator type received: {key_type}"
            return [(ErrorCode.INVALID_REQUEST, message, _NO_NODE) for _ in keys]
        if not keys:
            return []
        spec = self._internal_topic(key_type)
        if self.metadata.image.topics.get_by_name(spec.name) is None:
            creating = self._creating.get(spec.name)
            if creating is None:
                # One creation at a time: the FindCoordinators of a starting fleet wait for it together.
                creating = self._creating[spec.name] = trio.Event()
                try:
                    await self.create_internal_topic(spec)
                finally:
                    creating.set()
                    del self._creating[spec.name]
            else:
                await creating.wait()
        image = self.metadata.image
        topic = image.topics.get_by_name(spec.name)
        if topic is None or not topic.partitions:
            return [(ErrorCode.COORDINATOR_NOT_AVAILABLE, None, _NO_NODE) for _ in keys]
        endpoints = {broker_id: (broker_id, host, port)
                     for broker_id, host, port, _ in self.metadata.alive_brokers(listener)}
        count = len(topic.partitions)
        out = []
        for key in keys:
            if key_type == TRANSACTION_KEY_TYPE and not key:
                out.append((ErrorCode.INVALID_REQUEST, "the transactional id is empty", _NO_NODE))
                continue
            reg = topic.partitions.get(partition_for(key, count))
            node = endpoints.get(reg.leader) if reg is not None and reg.leader != NO_LEADER else None
            if node is None:
                out.append((ErrorCode.COORDINATOR_NOT_AVAILABLE, None, _NO_NODE))
            else:
                out.append((ErrorCode.NONE, None, node))
        return out

    def _internal_topic(self, key_type: int) -> InternalTopic:
        settings = self.settings
        if key_type == GROUP_KEY_TYPE:
            return InternalTopic(GROUP_METADATA_TOPIC_NAME, settings.offsets_topic_num_partitions,
                                 settings.offsets_topic_replication_factor, "offsets.topic.replication.factor",
                                 offsets_topic_configs(settings))
        txn = settings.transaction
        return InternalTopic(TRANSACTION_STATE_TOPIC_NAME, txn.state_log_num_partitions,
                             txn.state_log_replication_factor, "transaction.state.log.replication.factor",
                             transaction_topic_configs(settings), min_isr=txn.state_log_min_isr)

    async def create_offsets_topic(self) -> None:
        """Ask the controller for ``__consumer_offsets`` and wait (briefly) for it to reach this broker."""
        await self.create_internal_topic(self._internal_topic(GROUP_KEY_TYPE))

    async def create_internal_topic(self, spec: InternalTopic) -> None:
        """Ask the controller for an internal topic and wait (briefly) for it to reach this broker."""
        alive = sum(1 for reg in self.metadata.image.cluster.brokers.values() if not reg.fenced)
        if alive == 0:
            return
        replication_factor = min(spec.replication_factor, alive)
        if replication_factor < spec.replication_factor:
            self._log.warning(f"{spec.name} gets fewer replicas than {spec.replication_key}: "
                              "not enough brokers are alive", replication_factor=replication_factor,
                              configured=spec.replication_factor, alive_brokers=alive)
        configs = dict(spec.configs)
        if spec.min_isr is not None:
            # min.insync.replicas above the replicas would refuse every write: Kafka keeps it and a
            # one-broker cluster can never commit a transaction; kraftpy caps it, and says so.
            min_isr = min(spec.min_isr, replication_factor)
            if min_isr < spec.min_isr:
                self._log.warning(f"{spec.name} gets min.insync.replicas {min_isr}, below "
                                  "transaction.state.log.min.isr: it has only that many replicas",
                                  configured=spec.min_isr)
            configs["min.insync.replicas"] = str(min_isr)
        request = m.CreateTopicsRequest((m.CreatableTopic(
            spec.name, spec.partitions, replication_factor,
            configs=tuple(m.CreatableTopicConfig(k, v) for k, v in configs.items())),))
        try:
            response = await self.channel.create_topics(request)
        except ControllerUnavailable as exc:
            self._log.warning(f"cannot create {spec.name}: no controller", error=str(exc))
            return
        result = response.topics[0] if response.topics else None
        if result is None or result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            error = ErrorCode(result.error_code).name if result is not None else "no answer"
            self._log.warning(f"cannot create {spec.name}", error=error,
                              message=result.error_message if result is not None else None)
            return
        if result.error_code == ErrorCode.NONE:
            self._log.info(f"created {spec.name}", partitions=spec.partitions,
                           replication_factor=replication_factor)
        await await_propagation(self.metadata, lambda image: image.topics.get_by_name(spec.name) is not None)


@attrs.frozen
class InternalTopic:
    """An internal topic a coordinator lives on, as FindCoordinator creates it."""

    name: str
    partitions: int
    replication_factor: int
    #: The key the replication factor comes from (named when it is lowered).
    replication_key: str
    configs: dict[str, str]
    #: min.insync.replicas to set, capped at the replication factor (None: the cluster's).
    min_isr: int | None = None


def _default_message(error: ErrorCode) -> str:
    """Kafka's message for an error (its ``Errors.message``), for the answers that carry one."""
    return {
        ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
        ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client "
                                   "library or the message was sent to an incompatible broker. See the broker "
                                   "logs for more details.",
    }.get(error, error.name)
