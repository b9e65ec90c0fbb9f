"""DescribeClientQuotas (answered from this broker's metadata) and AlterClientQuotas (forwarded).

AlterClientQuotas goes to the controller, which validates each entity and writes ClientQuotaRecords
(kraftpy.metadata.quota_control); the answer waits, bounded like topic creation, until this broker's
image holds what was accepted, so the client's next DescribeClientQuotas here sees it and its next
request is held to it.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.authorization import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    NO_AUTHORIZATION,
    BrokerAuthorizer,
    cluster_refusal,
)
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata import quota_control as q
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import MetadataImage, quota_entity
from kraftpy.metadata.records import ClientQuotaEntityData
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import AlterClientQuotasResponse, DescribeClientQuotasResponse
from kraftpy.rpc.kafka_server import Connection


class QuotasApi:
    #: Set by the broker: DESCRIBE_CONFIGS (describe) and ALTER_CONFIGS (alter) on the cluster.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, metadata: MetadataCache, channel: ControllerChannel) -> None:
        self.metadata = metadata
        self.channel = channel

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.handle_describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.handle_alter_client_quotas,
        }

    async def handle_describe_client_quotas(self, header: Any, request: Any,
                                            conn: Connection) -> DescribeClientQuotasResponse:
        if (refused := cluster_refusal(self.authz, conn, DESCRIBE_CONFIGS, ApiKey.DESCRIBE_CLIENT_QUOTAS)) is not None:
            return refused
        components = [q.QuotaFilterComponent(c.entity_type, c.match_type, c.match) for c in request.components]
        try:
            found = q.describe_client_quotas(self.metadata.image, components, request.strict)
        except q.QuotaRequestError as exc:
            return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=exc.code, error_message=str(exc),
                                                entries=None)
        Entry = DescribeClientQuotasResponse.EntryData
        Entity = DescribeClientQuotasResponse.EntityData
        Value = DescribeClientQuotasResponse.ValueData
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=Errors.NONE, error_message=None, entries=[
            Entry(entity=[Entity(entity_type=t, entity_name=n) for t, n in entity],
                  values=[Value(key=k, value=v) for k, v in sorted(quotas.items())])
            for entity, quotas in found])

    async def handle_alter_client_quotas(self, header: Any, request: Any,
                                         conn: Connection) -> AlterClientQuotasResponse:
        if not self.authz.allows_cluster(conn, ALTER_CONFIGS):
            return AlterClientQuotasResponse(throttle_time_ms=0, entries=[AlterClientQuotasResponse.EntryData(
                error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                entity=[AlterClientQuotasResponse.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                        for e in entry.entity]) for entry in request.entries])
        mreq = q.AlterClientQuotasRequest(
            tuple(q.ClientQuotaAlteration(
                tuple(ClientQuotaEntityData(e.entity_type, e.entity_name) for e in entry.entity),
                tuple(q.ClientQuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops))
                for entry in request.entries),
            validate_only=request.validate_only)
        mresp = await self.channel.alter_client_quotas(mreq)
        if not request.validate_only:
            await self._await_applied(mreq, mresp)
        Result = AlterClientQuotasResponse.EntryData
        Entity = AlterClientQuotasResponse.EntityData
        return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
            Result(error_code=r.error_code, error_message=r.error_message,
                   entity=[Entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in r.entity])
            for r in mresp.entries])

    async def _await_applied(self, mreq: q.AlterClientQuotasRequest, mresp: q.AlterClientQuotasResponse) -> None:
        expected = []
        for entry, result in zip(mreq.entries, mresp.entries, strict=True):
            if result.error_code != Errors.NONE:
                continue
            entity = quota_entity((e.entity_type, e.entity_name) for e in entry.entity)
            expected += [(entity, op.key, None if op.remove else op.value) for op in entry.ops]

        def applied(image: MetadataImage) -> bool:
            return all(image.client_quotas.quotas(entity).get(key) == value for entity, key, value in expected)

        if expected:
            await await_propagation(self.metadata, applied)
