"""DescribeConfigs (answered from the metadata cache), IncrementalAlterConfigs (forwarded) and AlterConfigs.

IncrementalAlterConfigs answers once this broker's metadata shows what the controller accepted (as
CreateTopics does), so a client's next request to the same broker already runs with it.

A topic is described as this broker runs it: its own dynamic override of a broker key (say
``log.retention.ms`` set for this broker id) is the topic's value here, with source DYNAMIC_BROKER_CONFIG.

AlterConfigs, the legacy form older clients send (confluent-kafka before incremental_alter_configs,
kafka-python 2.x, aiokafka), makes a topic's or broker's dynamic configuration exactly the entries it
names, as Kafka does: it runs as an IncrementalAlterConfigs that SETs each entry named (DELETEs one named
with a null value) and DELETEs every other override the resource has in this broker's metadata. An
override another client adds between that read and the controller's write survives it (Kafka's
controller replaces the set at once). Other resource types are INVALID_REQUEST, as in Kafka.

DescribeConfigs describes each distinct resource once (a resource named twice gets the same answer
twice) and in turns of `RESOURCES_PER_TURN` (kraftpy.broker.apis.pacing): a request naming a million
topics does not hold up other connections. Every resource is described from the same image.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.apis.pacing import Pacer, first_seen
from kraftpy.broker.authorization import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    NO_AUTHORIZATION,
    BrokerAuthorizer,
    config_resource_denied,
)
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.settings import BrokerSettings
from kraftpy.metadata import config_control
from kraftpy.metadata import messages as m
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.image import ConfigResource
from kraftpy.metadata.records import ConfigResourceType
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)
from kraftpy.rpc.kafka_server import Connection

#: Resources described between two turns of the other tasks (each lists up to a few dozen entries).
RESOURCES_PER_TURN = 50
#: What AlterConfigs alters (Kafka's legacy AlterConfigs takes no other type).
LEGACY_ALTER_TYPES = (ConfigResourceType.TOPIC, ConfigResourceType.BROKER)


class ConfigsApi:
    #: Set by the broker: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the cluster (brokers) or the group.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, metadata: MetadataCache, channel: ControllerChannel, settings: BrokerSettings) -> None:
        self.metadata = metadata
        self.channel = channel
        self.settings = settings
        #: Describing configs is the controller's pure function over this broker's image and its own
        #: static (properties-file) defaults.
        self._describe_config = ControllerConfig(cluster_id=settings.cluster_id,
                                                 static_broker_configs=dict(settings.static_broker_configs))

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            ApiKey.ALTER_CONFIGS: self.handle_alter_configs,
        }

    async def handle_describe_configs(self, header: Any, request: Any, conn: Connection) -> DescribeConfigsResponse:
        image = self.metadata.image
        pace = Pacer()
        named = []
        answers: dict[m.DescribeConfigsResource, Any] = {}
        for r in request.resources:
            keys = r.configuration_keys
            resource = m.DescribeConfigsResource(r.resource_type, r.resource_name,
                                                 None if keys is None else tuple(first_seen(keys)))
            named.append(resource)
            answers[resource] = None
            if pace.due(1 + len(keys or ())):
                await trio.lowlevel.checkpoint()
        distinct = list(answers)
        Result = DescribeConfigsResponse.DescribeConfigsResult
        Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
        for start in range(0, len(distinct), RESOURCES_PER_TURN):
            chunk = distinct[start:start + RESOURCES_PER_TURN]
            mresp = config_control.describe_configs(image, m.DescribeConfigsRequest(tuple(chunk)),
                                                    self._describe_config, self.settings.node_id)
            for resource, r in zip(chunk, mresp.results, strict=True):
                answers[resource] = Result(
                    error_code=r.error_code, error_message=r.error_message, resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configs=[Entry(name=c.name, value=c.value, read_only=c.read_only,
                                   config_source=int(c.config_source), is_sensitive=c.is_sensitive)
                             for c in r.configs])
            await trio.lowlevel.checkpoint()
        results = [answers[resource] for resource in named]
        if self.authz.enabled:
            for i, resource in enumerate(named):
                error = config_resource_denied(self.authz, conn, resource.resource_type, resource.resource_name,
                                               DESCRIBE_CONFIGS)
                if error is not None:
                    results[i] = Result(error_code=error, error_message="Authorization failed.",
                                        resource_type=resource.resource_type, resource_name=resource.resource_name,
                                        configs=[])
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    async def _await_applied(self, request: Any, mresp: m.IncrementalAlterConfigsResponse) -> None:
        """Wait (bounded, like topic creation) until this broker runs with what the controller accepted,
        so that the client's next request here sees it: each SET or DELETE of a resource that succeeded is
        in this broker's image, and so in its logs' settings (applied before the image is published)."""
        expected: list[tuple[ConfigResource, str, str | None]] = []
        for r, answer in zip(request.resources, mresp.responses, strict=True):
            if answer.error_code != 0:
                continue
            try:
                resource = ConfigResource(r.resource_type, r.resource_name)
            except ValueError:
                continue
            for c in r.configs:
                if c.config_operation in (int(m.AlterConfigOp.SET), int(m.AlterConfigOp.DELETE)):
                    value = c.value if c.config_operation == int(m.AlterConfigOp.SET) else None
                    expected.append((resource, c.name, value))
        if expected:
            await await_propagation(self.metadata, lambda image: all(
                image.configs.config(resource).get(name) == value for resource, name, value in expected))

    async def handle_incremental_alter_configs(self, header: Any, request: Any,
                                               conn: Connection) -> IncrementalAlterConfigsResponse:
        denied = {i: error for i, r in enumerate(request.resources)
                  if (error := config_resource_denied(self.authz, conn, r.resource_type, r.resource_name,
                                                      ALTER_CONFIGS)) is not None}
        kept = [r for i, r in enumerate(request.resources) if i not in denied]
        mreq = m.IncrementalAlterConfigsRequest(
            tuple(
                m.AlterConfigsResource(
                    r.resource_type, r.resource_name,
                    tuple(m.AlterableConfig(c.name, c.config_operation, c.value) for c in r.configs),
                )
                for r in kept
            ),
            validate_only=request.validate_only,
        )
        if denied and not kept:
            mresp = m.IncrementalAlterConfigsResponse(())
        else:
            mresp = await self.channel.incremental_alter_configs(mreq)
        if not request.validate_only and kept:
            await self._await_applied(SimpleNamespace(resources=kept), mresp)
        Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        answers = iter(mresp.responses)
        responses = []
        for i, r in enumerate(request.resources):
            if i in denied:
                responses.append(Result(error_code=denied[i], error_message="Authorization failed.",
                                        resource_type=r.resource_type, resource_name=r.resource_name))
            else:
                a = next(answers)
                responses.append(Result(error_code=a.error_code, error_message=a.error_message,
                                        resource_type=a.resource_type, resource_name=a.resource_name))
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)

    async def handle_alter_configs(self, header: Any, request: Any, conn: Connection) -> AlterConfigsResponse:
        image = self.metadata.image
        Result = AlterConfigsResponse.AlterConfigsResourceResponse
        answers: dict[int, Any] = {}
        incremental: list[tuple[int, SimpleNamespace]] = []
        for i, r in enumerate(request.resources):
            if r.resource_type not in LEGACY_ALTER_TYPES:
                answers[i] = Result(error_code=ErrorCode.INVALID_REQUEST, resource_type=r.resource_type,
                                    resource_name=r.resource_name,
                                    error_message=f"AlterConfigs does not support resource type {r.resource_type}: "
                                                  "use IncrementalAlterConfigs")
                continue
            named = {c.name for c in r.configs}
            ops = [SimpleNamespace(name=c.name, value=c.value, config_operation=int(
                m.AlterConfigOp.SET if c.value is not None else m.AlterConfigOp.DELETE)) for c in r.configs]
            current = image.configs.config(ConfigResource(r.resource_type, r.resource_name))
            ops += [SimpleNamespace(name=key, value=None, config_operation=int(m.AlterConfigOp.DELETE))
                    for key in sorted(current) if key not in named]
            incremental.append((i, SimpleNamespace(resource_type=r.resource_type, resource_name=r.resource_name,
                                                   configs=ops)))
        if incremental:
            done = await self.handle_incremental_alter_configs(
                header, SimpleNamespace(resources=[r for _, r in incremental], validate_only=request.validate_only),
                conn)
            for (i, _), a in zip(incremental, done.responses, strict=True):
                answers[i] = Result(error_code=a.error_code, error_message=a.error_message,
                                    resource_type=a.resource_type, resource_name=a.resource_name)
        return AlterConfigsResponse(throttle_time_ms=0, responses=[answers[i] for i in range(len(request.resources))])
