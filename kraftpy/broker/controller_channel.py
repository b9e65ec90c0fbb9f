"""The broker's way to the active controller: every metadata write a Kafka API needs.

The broker never changes metadata itself. CreateTopics, DeleteTopics, CreatePartitions,
IncrementalAlterConfigs, ElectLeaders, the partition reassignments and UnregisterBroker from
clients, the leader's ISR changes (AlterPartition), producer-id blocks (AllocateProducerIds) and the
log directories of its replicas (AssignReplicasToDirs) all go through a `ControllerChannel`. Each method
returns once the controller's records for the request are committed to the metadata log (the
broker learns the new state a little later, when the committed records reach it through
``BrokerServer.publish``), and raises `ControllerUnavailable` when no controller answers.

The requests and responses are the controller's own classes (``kraftpy.metadata.messages``), so
an implementation is a transport: the control plane in production, an in-process
``QuorumController`` in the tests.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from kraftpy.metadata.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from kraftpy.metadata.quota_control import AlterClientQuotasRequest, AlterClientQuotasResponse
from kraftpy.metadata.rpc import ControllerUnavailable


@runtime_checkable
class ControllerChannel(Protocol):
    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse: ...

    async def delete_topics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse: ...

    async def create_partitions(self, request: CreatePartitionsRequest) -> CreatePartitionsResponse: ...

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse: ...

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse: ...

    async def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse: ...

    async def assign_replicas_to_dirs(
        self, request: AssignReplicasToDirsRequest
    ) -> AssignReplicasToDirsResponse: ...

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse: ...

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse: ...

    async def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse: ...

    async def unregister_broker(self, request: UnregisterBrokerRequest) -> UnregisterBrokerResponse: ...

    async def update_features(self, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse: ...

    async def quorum_status(self, timeout: float = 10.0) -> dict[str, Any]: ...

    async def change_voters(self, api: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]: ...

    async def create_acls(self, request: CreateAclsRequest) -> CreateAclsResponse: ...

    async def delete_acls(self, request: DeleteAclsRequest) -> DeleteAclsResponse: ...

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse: ...

    async def alter_client_quotas(self, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse: ...


__all__ = ["ControllerChannel", "ControllerUnavailable"]
