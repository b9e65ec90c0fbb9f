"""UpdateFeatures: forwarded to the controller (kafka-features.sh upgrade, downgrade and disable).

The controller decides (kraftpy.metadata.feature_control): every level within what it and every
registered broker support, metadata.version never lowered, a lower level only with a downgrade type,
all or nothing. Version 0's ``allow_downgrade`` is a safe downgrade, as Kafka reads it. Once a change
committed, the handler waits until this broker's metadata holds the new levels, so a client that
upgrades and then asks ApiVersions sees them. Versions 0 and 1 answer each feature; version 2 only
the request's error (Kafka 3.9's shape). The caller needs ALTER on the cluster.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.authorization import ALTER, NO_AUTHORIZATION, BrokerAuthorizer, cluster_refusal
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata import messages as m
from kraftpy.metadata.feature_control import feature_upgrade_type
from kraftpy.metadata.image import MetadataImage
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import UpdateFeaturesResponse
from kraftpy.rpc.kafka_server import Connection


class FeaturesApi:
    #: Set by the broker: ALTER on the cluster.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, metadata: MetadataCache, channel: ControllerChannel) -> None:
        self.metadata = metadata
        self.channel = channel

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.UPDATE_FEATURES: self.handle_update_features}

    async def handle_update_features(self, header: Any, request: Any, conn: Connection) -> UpdateFeaturesResponse:
        if (refused := cluster_refusal(self.authz, conn, ALTER, ApiKey.UPDATE_FEATURES)) is not None:
            return refused
        version = header.request_api_version
        updates = []
        for u in request.feature_updates:
            kind = feature_upgrade_type(u, version)
            if kind is None:
                return UpdateFeaturesResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                              error_message=f"{u.feature}: unknown upgrade type {u.upgrade_type}")
            updates.append(m.FeatureUpdateKey(u.feature, u.max_version_level, kind))
        if not updates:
            return UpdateFeaturesResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                          error_message="No feature updates were given.")
        validate_only = version >= 1 and request.validate_only
        answer = await self.channel.update_features(m.UpdateFeaturesRequest(tuple(updates), validate_only))
        if answer.error_code == ErrorCode.NONE and not validate_only:
            wanted = {u.feature: u.max_version_level for u in updates}

            def applied(image: MetadataImage) -> bool:
                return all(image.finalized_features.get(name, 0) == level for name, level in wanted.items())

            await await_propagation(self.metadata, applied, request.timeout_ms)
        Result = UpdateFeaturesResponse.UpdatableFeatureResult
        return UpdateFeaturesResponse(
            throttle_time_ms=0, error_code=answer.error_code, error_message=answer.error_message,
            results=[Result(feature=r.feature, error_code=r.error_code, error_message=r.error_message)
                     for r in answer.results])
