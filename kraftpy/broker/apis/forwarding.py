"""Requests the broker forwards to the active controller, and what it answers when none answers.

A broker never changes metadata itself: CreateTopics, DeleteTopics, CreatePartitions,
IncrementalAlterConfigs (and AlterConfigs, run as one), ElectLeaders, Alter/ListPartitionReassignments, UnregisterBroker, UpdateFeatures (and InitProducerId, for a block of producer ids) go to the controller
through the `ControllerChannel`, which raises `ControllerUnavailable` when no controller answers in
time. Handlers do not catch it: the dispatcher does, and answers with `error_response` — the
request's own shape with every item failed (REQUEST_TIMED_OUT, or COORDINATOR_NOT_AVAILABLE for
InitProducerId), as Kafka's ``AbstractRequest.getErrorResponse`` does for a forwarding failure.

After a write commits, the handler waits (`await_propagation`) until the change reached this
broker's metadata, up to the request's timeout and at most `METADATA_PROPAGATION_WAIT_S`, so a
client that creates a topic and then asks for its metadata finds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kraftpy.broker.apis.common import to_wire_uuid
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata.image import MetadataImage
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    CreateAclsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteTopicsResponse,
    ElectLeadersResponse,
    IncrementalAlterConfigsResponse,
    InitProducerIdResponse,
    ListPartitionReassignmentsResponse,
    UnregisterBrokerResponse,
    UpdateFeaturesResponse,
)

#: How long an admin request waits for its committed change to reach this broker's metadata.
METADATA_PROPAGATION_WAIT_S = 5.0


async def await_propagation(metadata: MetadataCache, done: Callable[[MetadataImage], bool],
                            timeout_ms: int | None = None) -> bool:
    timeout = METADATA_PROPAGATION_WAIT_S if timeout_ms is None else min(timeout_ms / 1000, METADATA_PROPAGATION_WAIT_S)
    return await metadata.wait_for(done, max(timeout, 0))


def _create_topics(request: Any, version: int, message: str) -> CreateTopicsResponse:
    Result = CreateTopicsResponse.CreatableTopicResult
    return CreateTopicsResponse(throttle_time_ms=0, topics=[
        Result(name=t.name, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message) for t in request.topics])


def _delete_topics(request: Any, version: int, message: str) -> DeleteTopicsResponse:
    Result = DeleteTopicsResponse.DeletableTopicResult
    if version >= 6:
        items = [(t.name, t.topic_id) for t in request.topics]
    else:
        items = [(name, to_wire_uuid(None)) for name in request.topic_names]
    return DeleteTopicsResponse(throttle_time_ms=0, responses=[
        Result(name=name, topic_id=topic_id, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message)
        for name, topic_id in items])


def _create_partitions(request: Any, version: int, message: str) -> CreatePartitionsResponse:
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    return CreatePartitionsResponse(throttle_time_ms=0, results=[
        Result(name=t.name, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message) for t in request.topics])


def _incremental_alter_configs(request: Any, version: int, message: str) -> IncrementalAlterConfigsResponse:
    Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        Result(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message, resource_type=r.resource_type,
               resource_name=r.resource_name)
        for r in request.resources])


def _alter_configs(request: Any, version: int, message: str) -> AlterConfigsResponse:
    Result = AlterConfigsResponse.AlterConfigsResourceResponse
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        Result(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message, resource_type=r.resource_type,
               resource_name=r.resource_name)
        for r in request.resources])


def _init_producer_id(request: Any, version: int, message: str) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  producer_id=-1, producer_epoch=-1)


def _elect_leaders(request: Any, version: int, message: str) -> ElectLeadersResponse:
    Result = ElectLeadersResponse.ReplicaElectionResult
    Partition = ElectLeadersResponse.PartitionResult
    return ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.REQUEST_TIMED_OUT, replica_election_results=[
        Result(topic=tp.topic, partition_result=[
            Partition(partition_id=p, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message)
            for p in tp.partitions])
        for tp in request.topic_partitions or ()])


def _alter_partition_reassignments(request: Any, version: int, message: str) -> AlterPartitionReassignmentsResponse:
    return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.REQUEST_TIMED_OUT,
                                               error_message=message)


def _list_partition_reassignments(request: Any, version: int, message: str) -> ListPartitionReassignmentsResponse:
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=ErrorCode.REQUEST_TIMED_OUT,
                                              error_message=message)


def _unregister_broker(request: Any, version: int, message: str) -> UnregisterBrokerResponse:
    return UnregisterBrokerResponse(throttle_time_ms=0, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message)


def _update_features(request: Any, version: int, message: str) -> UpdateFeaturesResponse:
    return UpdateFeaturesResponse(throttle_time_ms=0, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message)


def _alter_client_quotas(request: Any, version: int, message: str) -> AlterClientQuotasResponse:
    Entity = AlterClientQuotasResponse.EntityData
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        AlterClientQuotasResponse.EntryData(
            error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message,
            entity=[Entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry in request.entries])


def _create_acls(request: Any, version: int, message: str) -> CreateAclsResponse:
    return CreateAclsResponse(throttle_time_ms=0, results=[
        CreateAclsResponse.AclCreationResult(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message)
        for _ in request.creations])


def _delete_acls(request: Any, version: int, message: str) -> DeleteAclsResponse:
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message,
                                                  matching_acls=[])
        for _ in request.filters])


_ERROR_RESPONSES: dict[int, Callable[[Any, int, str], Any]] = {
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
    ApiKey.ALTER_CLIENT_QUOTAS: _alter_client_quotas,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _incremental_alter_configs,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _list_partition_reassignments,
    ApiKey.UNREGISTER_BROKER: _unregister_broker,
    ApiKey.UPDATE_FEATURES: _update_features,
}


def error_response(api_key: int, version: int, request: Any, message: str) -> Any | None:
    """The answer to a forwarded request no controller took, or None for an API that forwards nothing."""
    build = _ERROR_RESPONSES.get(api_key)
    return None if build is None else build(request, version, message)
