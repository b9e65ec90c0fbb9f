"""DescribeAcls, CreateAcls and DeleteAcls.

DescribeAcls is answered from this broker's image (DESCRIBE on the cluster). CreateAcls and DeleteAcls
(ALTER on the cluster) go to the controller, which validates them, gives each new ACL an id and writes
the records; the handler then waits until the change reached this broker's metadata (at most
``METADATA_PROPAGATION_WAIT_S``), so the client's next DescribeAcls through this broker sees it.

As in Kafka, a broker without an authorizer (``authorizer.class.name`` empty) answers all three with
SECURITY_DISABLED: ACLs are only managed where they are enforced.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.authorization import ALTER, DESCRIBE, NO_AUTHORIZATION, BrokerAuthorizer
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata import messages as m
from kraftpy.metadata.acl_control import filter_from_codes
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse
from kraftpy.rpc.kafka_server import Connection
from kraftpy.security.authorizer import InvalidAclError, binding_from_codes

_NO_AUTHORIZER = "No Authorizer is configured."


class AclsApi:
    def __init__(self, metadata: MetadataCache, channel: ControllerChannel,
                 authz: BrokerAuthorizer = NO_AUTHORIZATION) -> None:
        self.metadata = metadata
        self.channel = channel
        self.authz = authz

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.DESCRIBE_ACLS: self.handle_describe_acls,
            ApiKey.CREATE_ACLS: self.handle_create_acls,
            ApiKey.DELETE_ACLS: self.handle_delete_acls,
        }

    # -- DescribeAcls ---------------------------------------------------------------------------------

    async def handle_describe_acls(self, header: Any, request: Any, conn: Connection) -> DescribeAclsResponse:
        def failed(error: ErrorCode, message: str) -> DescribeAclsResponse:
            return DescribeAclsResponse(throttle_time_ms=0, error_code=error, error_message=message, resources=[])

        if not self.authz.enabled:
            return failed(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
        if not self.authz.allows_cluster(conn, DESCRIBE):
            return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        acl_filter = filter_from_codes(
            request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
            request.principal_filter, request.host_filter, request.operation, request.permission_type)
        try:
            acl_filter.validate()
        except InvalidAclError as exc:
            return failed(ErrorCode.INVALID_REQUEST, str(exc))
        groups: dict[tuple[int, str, int], list] = {}
        for binding in self.metadata.image.acls.by_id.values():
            if acl_filter.matches(binding):
                key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type))
                groups.setdefault(key, []).append(DescribeAclsResponse.AclDescription(
                    principal=binding.principal, host=binding.host, operation=int(binding.operation),
                    permission_type=int(binding.permission)))
        resources = [
            DescribeAclsResponse.DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=ptype,
                                                      acls=acls)
            for (rtype, name, ptype), acls in sorted(groups.items())]
        return DescribeAclsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                    resources=resources)

    # -- CreateAcls / DeleteAcls ----------------------------------------------------------------------

    async def handle_create_acls(self, header: Any, request: Any, conn: Connection) -> CreateAclsResponse:
        Result = CreateAclsResponse.AclCreationResult

        def all_failed(error: ErrorCode, message: str) -> CreateAclsResponse:
            return CreateAclsResponse(throttle_time_ms=0, results=[
                Result(error_code=error, error_message=message) for _ in request.creations])

        if not self.authz.enabled:
            return all_failed(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
        if not self.authz.allows_cluster(conn, ALTER):
            return all_failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        creations = tuple(m.AclCreation(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                                        c.host, c.operation, c.permission_type) for c in request.creations)
        response = await self.channel.create_acls(m.CreateAclsRequest(creations))
        created = {binding_from_codes(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                                      c.host, c.operation, c.permission_type)
                   for c, r in zip(creations, response.results, strict=True) if r.error_code == ErrorCode.NONE}
        if created:
            await await_propagation(self.metadata, lambda image: created <= set(image.acls.by_id.values()))
        return CreateAclsResponse(throttle_time_ms=0, results=[
            Result(error_code=r.error_code, error_message=r.error_message) for r in response.results])

    async def handle_delete_acls(self, header: Any, request: Any, conn: Connection) -> DeleteAclsResponse:
        FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
        Matching = DeleteAclsResponse.DeleteAclsMatchingAcl

        def all_failed(error: ErrorCode, message: str) -> DeleteAclsResponse:
            return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
                FilterResult(error_code=error, error_message=message, matching_acls=[]) for _ in request.filters])

        if not self.authz.enabled:
            return all_failed(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
        if not self.authz.allows_cluster(conn, ALTER):
            return all_failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        filters = tuple(m.DeleteAclsFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                           f.principal_filter, f.host_filter, f.operation, f.permission_type)
                        for f in request.filters)
        response = await self.channel.delete_acls(m.DeleteAclsRequest(filters))
        removed = {binding_from_codes(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                                      a.operation, a.permission_type)
                   for r in response.filter_results for a in r.matching_acls}
        if removed:
            await await_propagation(self.metadata, lambda image: not removed & set(image.acls.by_id.values()))
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            FilterResult(error_code=r.error_code, error_message=r.error_message, matching_acls=[
                Matching(error_code=a.error_code, error_message=a.error_message, resource_type=a.resource_type,
                         resource_name=a.resource_name, pattern_type=a.pattern_type, principal=a.principal,
                         host=a.host, operation=a.operation, permission_type=a.permission_type)
                for a in r.matching_acls])
            for r in response.filter_results])
