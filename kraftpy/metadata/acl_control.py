"""CreateAcls and DeleteAcls as the controller decides them (Kafka's ``AclControlManager``). Pure.

``create_acls`` validates each creation with Kafka's rules (``AclBinding.validate``: a refused one is
answered INVALID_REQUEST with Kafka's message, the others still go ahead), gives each new ACL a fresh
id and returns one AccessControlEntryRecord per ACL not already present (an ACL equal to an existing
one, or to one earlier in the same request, is answered success and written once). ``delete_acls``
matches every filter against the image's ACLs and returns one RemoveAccessControlEntryRecord per
matched id (an ACL matched by several filters is removed once and listed under each). The records
of one request are written as one batch, so a request's ACLs appear together or not at all.
"""

from __future__ import annotations

import random

from kraftpy.ids import Uuid
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.messages import (
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from kraftpy.metadata.records import AccessControlEntryRecord, MetadataRecord, RemoveAccessControlEntryRecord
from kraftpy.metadata.result import ControllerResult
from kraftpy.protocol.errors import ErrorCode
from kraftpy.security.authorizer import (
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
    binding_from_codes,
)


def acl_record(acl_id: Uuid, binding: AclBinding) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        acl_id, int(binding.resource_type), binding.resource_name, int(binding.pattern_type), binding.principal,
        binding.host, int(binding.operation), int(binding.permission))


def create_acls(image: MetadataImage, request: CreateAclsRequest, rng: random.Random
                ) -> ControllerResult[CreateAclsResponse]:
    existing = set(image.acls.by_id.values())
    taken = set(image.acls.by_id)
    records: list[MetadataRecord] = []
    results = []
    for creation in request.creations:
        binding = binding_from_codes(
            creation.resource_type, creation.resource_name, creation.resource_pattern_type, creation.principal,
            creation.host, creation.operation, creation.permission_type)
        try:
            binding.validate()
        except InvalidAclError as exc:
            results.append(AclCreationResult(int(exc.error_code), str(exc)))
            continue
        if binding not in existing:
            acl_id = Uuid.random(rng)
            while acl_id in taken:
                acl_id = Uuid.random(rng)
            taken.add(acl_id)
            existing.add(binding)
            records.append(acl_record(acl_id, binding))
        results.append(AclCreationResult(int(ErrorCode.NONE)))
    return ControllerResult(records, CreateAclsResponse(tuple(results)))


def filter_from_codes(resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
                      host: str | None, operation: int, permission: int) -> AclBindingFilter:
    """A filter from wire codes; a code Kafka does not define becomes UNKNOWN (refused by validate())."""
    def known(kind, code):
        try:
            return kind(code)
        except ValueError:
            return kind.UNKNOWN

    return AclBindingFilter(
        resource_type=known(ResourceType, resource_type), resource_name=resource_name,
        pattern_type=known(PatternType, pattern_type), principal=principal, host=host,
        operation=known(AclOperation, operation), permission=known(AclPermissionType, permission))


def _index_of(image: MetadataImage) -> AclIndex:
    index = AclIndex()
    for acl_id, binding in image.acls.by_id.items():
        index.add(acl_id, binding)
    return index


def delete_acls(image: MetadataImage, request: DeleteAclsRequest) -> ControllerResult[DeleteAclsResponse]:
    index = _index_of(image)
    records: list[MetadataRecord] = []
    removed: set[Uuid] = set()
    results = []
    for f in request.filters:
        acl_filter = filter_from_codes(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                       f.principal_filter, f.host_filter, f.operation, f.permission_type)
        try:
            (matches,) = index.to_delete([acl_filter])
        except InvalidAclError as exc:
            results.append(DeleteAclsFilterResult(int(exc.error_code), str(exc)))
            continue
        for acl_id, _ in matches:
            if acl_id not in removed:
                removed.add(acl_id)
                records.append(RemoveAccessControlEntryRecord(acl_id))
        results.append(DeleteAclsFilterResult(int(ErrorCode.NONE), None, tuple(
            DeleteAclsMatchingAcl(int(ErrorCode.NONE), None, int(b.resource_type), b.resource_name,
                                  int(b.pattern_type), b.principal, b.host, int(b.operation), int(b.permission))
            for _, b in matches)))
    return ControllerResult(records, DeleteAclsResponse(tuple(results)))
