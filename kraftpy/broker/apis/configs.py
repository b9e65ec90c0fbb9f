"""DescribeConfigs (answered from the metadata cache) and IncrementalAlterConfigs (forwarded)."""

from __future__ import annotations

from typing import Any

from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.settings import BrokerSettings
from kraftpy.metadata import config_control
from kraftpy.metadata import messages as m
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import DescribeConfigsResponse, IncrementalAlterConfigsResponse
from kraftpy.rpc.kafka_server import Connection


class ConfigsApi:
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
        }

    async def handle_describe_configs(self, header: Any, request: Any, conn: Connection) -> DescribeConfigsResponse:
        mreq = m.DescribeConfigsRequest(tuple(
            m.DescribeConfigsResource(
                r.resource_type, r.resource_name,
                None if r.configuration_keys is None else tuple(r.configuration_keys),
            )
            for r in request.resources
        ))
        mresp = config_control.describe_configs(self.metadata.image, mreq, self._describe_config)
        Result = DescribeConfigsResponse.DescribeConfigsResult
        Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
        return DescribeConfigsResponse(throttle_time_ms=0, results=[
            Result(error_code=r.error_code, error_message=r.error_message, resource_type=r.resource_type,
                   resource_name=r.resource_name,
                   configs=[Entry(name=c.name, value=c.value, read_only=c.read_only,
                                  config_source=int(c.config_source), is_sensitive=c.is_sensitive)
                            for c in r.configs])
            for r in mresp.results
        ])

    async def handle_incremental_alter_configs(self, header: Any, request: Any,
                                               conn: Connection) -> IncrementalAlterConfigsResponse:
        mreq = m.IncrementalAlterConfigsRequest(
            tuple(
                m.AlterConfigsResource(
                    r.resource_type, r.resource_name,
                    tuple(m.AlterableConfig(c.name, c.config_operation, c.value) for c in r.configs),
                )
                for r in request.resources
            ),
            validate_only=request.validate_only,
        )
        mresp = await self.channel.incremental_alter_configs(mreq)
        Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
            Result(error_code=r.error_code, error_message=r.error_message, resource_type=r.resource_type,
                   resource_name=r.resource_name)
            for r in mresp.responses
        ])
