"""CreateTopics, DeleteTopics, CreatePartitions: forwarded to the controller (see forwarding).

Each handler turns the wire request into the controller's own message, awaits the committed
result, waits until the change reached this broker's metadata cache (so the client's next
Metadata request sees it), and turns the result back into the wire response. Kafka's internal topics
(``__consumer_offsets``) are never deleted: DeleteTopics answers INVALID_REQUEST for them.

Each topic's partitions count against its client's controller_mutation_rate before it is forwarded
(kraftpy.broker.quotas.MutationQuota): a topic refused for it is answered THROTTLING_QUOTA_EXCEEDED.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.apis.common import from_wire_uuid, to_wire_uuid
from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.authorization import ALTER, CREATE, DELETE, NO_AUTHORIZATION, TOPIC, BrokerAuthorizer
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.settings import BrokerSettings
from kraftpy.metadata import configs as config_defs
from kraftpy.metadata import messages as m
from kraftpy.metadata.topic_names import is_internal_topic
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import CreatePartitionsResponse, CreateTopicsResponse, DeleteTopicsResponse
from kraftpy.rpc.kafka_server import Connection

#: Kafka's message for a topic refused for its client's controller_mutation_rate.
THROTTLED = "The throttling quota has been exceeded."


class TopicsApi:
    #: Set by the broker: CREATE on the cluster or each topic, DELETE / ALTER on each topic.
    authz: BrokerAuthorizer = NO_AUTHORIZATION
    #: Set by the broker: its client quotas (kraftpy.broker.quotas.ClientQuotas), for controller_mutation_rate.
    quotas: Any = None

    def __init__(self, metadata: MetadataCache, channel: ControllerChannel, settings: BrokerSettings) -> None:
        self.metadata = metadata
        self.channel = channel
        self.settings = settings

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
        }

    async def handle_create_topics(self, header: Any, request: Any, conn: Connection) -> CreateTopicsResponse:
        version = header.request_api_version
        # CREATE on the cluster allows every topic; otherwise CREATE on each topic (Kafka's rule).
        unauthorized: set[str] = set()
        if self.authz.enabled and not self.authz.allows_cluster(conn, CREATE, log_denied=False):
            unauthorized = self.authz.denied(conn, CREATE, TOPIC, (t.name for t in request.topics))
        throttled = self._over_mutation_quota(header, conn, request.validate_only, [
            (t.name, len(t.assignments) if t.assignments else
             (t.num_partitions if t.num_partitions > 0 else self.settings.num_partitions))
            for t in request.topics if t.name not in unauthorized])
        mreq = m.CreateTopicsRequest(
            tuple(
                m.CreatableTopic(
                    t.name, t.num_partitions, t.replication_factor,
                    tuple(m.CreatableReplicaAssignment(a.partition_index, tuple(a.broker_ids)) for a in t.assignments),
                    tuple(m.CreatableTopicConfig(c.name, c.value) for c in t.configs),
                )
                for t in request.topics if t.name not in unauthorized and t.name not in throttled
            ),
            validate_only=request.validate_only,
        )
        skipped = unauthorized or throttled
        mresp = await self.channel.create_topics(mreq) if mreq.topics or not skipped else m.CreateTopicsResponse(())
        created = [r.name for r in mresp.topics if r.error_code == ErrorCode.NONE]
        if created and not request.validate_only:
            await await_propagation(self.metadata, lambda image: all(image.topics.get_by_name(n) is not None
                                                                     for n in created), request.timeout_ms)
        by_name = {t.name: t for t in request.topics}
        Result = CreateTopicsResponse.CreatableTopicResult
        topics = []
        for r in mresp.topics:
            out = Result(name=r.name, topic_id=to_wire_uuid(r.topic_id), error_code=r.error_code,
                         error_message=r.error_message, num_partitions=r.num_partitions,
                         replication_factor=r.replication_factor)
            if version >= 5 and r.error_code == ErrorCode.NONE:
                out.configs = self._created_topic_configs(r.name, by_name.get(r.name))
            topics.append(out)
        topics += [Result(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          error_message="Authorization failed.", num_partitions=-1, replication_factor=-1)
                   for name in sorted(unauthorized)]
        topics += [Result(name=name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED,
                          num_partitions=-1, replication_factor=-1) for name in throttled]
        return CreateTopicsResponse(throttle_time_ms=0, topics=topics)

    def _over_mutation_quota(self, header: Any, conn: Connection, validate_only: bool,
                             topics: list[tuple[str | None, int]]) -> list[str | None]:
        """The topics (in request order) refused for their client's controller_mutation_rate; the others'
        partitions are counted (KIP-599). Validate-only requests count nothing."""
        if self.quotas is None or validate_only:
            return []
        quota = self.quotas.mutations(header, conn)
        return [name for name, partitions in topics if not quota.admit(partitions)]

    def _created_topic_configs(self, name: str, requested: Any) -> list:
        given = {c.name: c.value for c in requested.configs} if requested is not None else {}
        Config = CreateTopicsResponse.CreatableTopicConfigs
        out = []
        for key in sorted(config_defs.TOPIC_CONFIGS):
            if key in given:
                value, source = given[key], m.ConfigSource.TOPIC_CONFIG
            else:
                value, source = config_defs.effective_topic_config(
                    self.metadata.image, dict(self.settings.static_broker_configs), name, key)
            out.append(Config(name=key, value=value, read_only=False, config_source=int(source), is_sensitive=False))
        return out

    async def handle_delete_topics(self, header: Any, request: Any, conn: Connection) -> DeleteTopicsResponse:
        if header.request_api_version >= 6:
            states = tuple(m.DeleteTopicState(t.name, from_wire_uuid(t.topic_id)) for t in request.topics)
        else:
            states = tuple(m.DeleteTopicState(name) for name in request.topic_names)
        Result = DeleteTopicsResponse.DeletableTopicResult
        responses = []
        forwarded = []
        quota = self.quotas.mutations(header, conn) if self.quotas is not None else None
        for state in states:
            name = state.name if state.name is not None else self._name_of(state.topic_id)
            if self.authz.enabled and name is not None and not self.authz.allows(conn, DELETE, TOPIC, name):
                responses.append(Result(name=state.name, topic_id=to_wire_uuid(state.topic_id),
                                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                        error_message="Authorization failed."))
            elif name is not None and is_internal_topic(name):
                # Kafka leaves this to its command-line tool; a client deleting the offsets topic would
                # lose every group's commits, so the broker refuses it for every client.
                responses.append(Result(name=name, topic_id=to_wire_uuid(state.topic_id),
                                        error_code=ErrorCode.INVALID_REQUEST,
                                        error_message=f"Topic {name} is an internal topic and may not be deleted"))
            elif quota is not None and not quota.admit(self._partitions_of(name)):
                responses.append(Result(name=state.name, topic_id=to_wire_uuid(state.topic_id),
                                        error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED))
            else:
                forwarded.append(state)
        if forwarded or not responses:
            mresp = await self.channel.delete_topics(m.DeleteTopicsRequest(tuple(forwarded)))
            deleted = [r.topic_id for r in mresp.responses if r.error_code == ErrorCode.NONE and r.topic_id is not None]
            if deleted:
                await await_propagation(self.metadata, lambda image: all(image.topics.get_by_id(t) is None
                                                                         for t in deleted), request.timeout_ms)
            responses += [Result(name=r.name, topic_id=to_wire_uuid(r.topic_id), error_code=r.error_code,
                                 error_message=r.error_message)
                          for r in mresp.responses]
        return DeleteTopicsResponse(throttle_time_ms=0, responses=responses)

    def _partitions_of(self, name: str | None) -> int:
        topic = self.metadata.image.topics.get_by_name(name) if name is not None else None
        return len(topic.partitions) if topic is not None else 0

    def _name_of(self, topic_id: Any) -> str | None:
        topic = self.metadata.image.topics.get_by_id(topic_id) if topic_id is not None else None
        return topic.name if topic is not None else None

    async def handle_create_partitions(self, header: Any, request: Any, conn: Connection) -> CreatePartitionsResponse:
        unauthorized = self.authz.denied(conn, ALTER, TOPIC, (t.name for t in request.topics))
        throttled = self._over_mutation_quota(header, conn, request.validate_only, [
            (t.name, t.count - self._partitions_of(t.name)) for t in request.topics if t.name not in unauthorized])
        skipped = unauthorized | set(throttled)
        mreq = m.CreatePartitionsRequest(
            tuple(
                m.CreatePartitionsTopic(
                    t.name, t.count,
                    None if t.assignments is None else tuple(tuple(a.broker_ids) for a in t.assignments),
                )
                for t in request.topics if t.name not in skipped
            ),
            validate_only=request.validate_only,
        )
        if skipped and not mreq.topics:
            mresp = m.CreatePartitionsResponse(())
        else:
            mresp = await self.channel.create_partitions(mreq)
        kept = [t for t in request.topics if t.name not in skipped]
        grown = {r.name: t.count for r, t in zip(mresp.results, kept, strict=False)
                 if r.error_code == ErrorCode.NONE and r.name == t.name}
        if grown and not request.validate_only:
            await await_propagation(
                self.metadata,
                lambda image: all((ti := image.topics.get_by_name(n)) is not None and len(ti.partitions) >= c
                                  for n, c in grown.items()),
                request.timeout_ms)
        Result = CreatePartitionsResponse.CreatePartitionsTopicResult
        return CreatePartitionsResponse(throttle_time_ms=0, results=[
            Result(name=r.name, error_code=r.error_code, error_message=r.error_message) for r in mresp.results
        ] + [Result(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.")
             for name in sorted(unauthorized)]
          + [Result(name=name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED)
             for name in throttled])
