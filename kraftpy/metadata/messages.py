"""Requests the controller handles and the responses it gives, with Kafka's names and fields.

These are the controller's own value classes; the control-plane and Kafka-protocol layers translate
their wire forms to and from them. Fields follow Kafka's message definitions (snake_case); version-only
and throttling fields (ThrottleTimeMs, timeouts) belong to the wire layer and are not repeated here.

Integer fields carry their Kafka type as an annotation (``Int32``, ``Int64``, ...): the control plane
refuses a request whose field is of another type or out of that range before it is built
(kraftpy.rpc.wire_schema), and kraftpy.metadata.validation checks what the types cannot say. The
requests only brokers send (registration, heartbeats, AlterPartition, producer ids) also say
``NonNegativeInt32`` where only a non-negative value means anything (node ids, partition indices);
the ones a broker forwards for Kafka clients keep Kafka's plain types, so that what a client may
encode reaches the controller's handlers and is answered per topic or partition, as Kafka does.
"""

from __future__ import annotations

import enum

import attrs

from kraftpy.ids import Uuid
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature, LeaderRecoveryState
from kraftpy.rpc.wire_schema import Int8, Int16, Int32, Int64, NonNegativeInt32


def _tuple(value: object) -> tuple:
    return tuple(value)  # type: ignore[arg-type]


def _seq() -> tuple:
    return attrs.field(factory=tuple, converter=_tuple)


# -- broker lifecycle -------------------------------------------------------------------------------


@attrs.frozen
class BrokerRegistrationRequest:
    broker_id: NonNegativeInt32
    cluster_id: str
    incarnation_id: Uuid
    listeners: tuple[BrokerEndpoint, ...] = _seq()
    features: tuple[BrokerFeature, ...] = _seq()
    rack: str | None = None
    #: Kafka's LogDirs (KIP-858): the ``directory.id`` of each online log directory of the broker.
    log_dirs: tuple[Uuid, ...] = _seq()


@attrs.frozen
class BrokerRegistrationResponse:
    error_code: Int16
    broker_epoch: Int64 = -1
    error_message: str | None = None


@attrs.frozen
class OfflineReplicaTopic:
    """Replicas of one topic that a broker holds but cannot serve: their logs could not be opened or
    their files failed (see `BrokerHeartbeatRequest.offline_replicas`)."""

    topic_id: Uuid
    partitions: tuple[NonNegativeInt32, ...] = attrs.field(converter=_tuple)


@attrs.frozen
class BrokerHeartbeatRequest:
    broker_id: NonNegativeInt32
    broker_epoch: Int64
    current_metadata_offset: Int64
    want_fence: bool = False
    want_shut_down: bool = False
    #: Every replica of this broker that is offline, in each heartbeat: the controller moves their
    #: leadership and ISR places away. It covers what the directory ids cannot name: a replica whose
    #: log failed to open before any directory was assigned to it.
    offline_replicas: tuple[OfflineReplicaTopic, ...] = _seq()
    #: Kafka's OfflineLogDirs (KIP-858): the ids of the broker's log directories that are offline;
    #: the controller moves leadership and ISR places off every replica assigned to one of them.
    offline_log_dirs: tuple[Uuid, ...] = _seq()


@attrs.frozen
class BrokerHeartbeatResponse:
    error_code: Int16
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


@attrs.frozen
class AssignReplicasToDirsPartition:
    partition_index: NonNegativeInt32


@attrs.frozen
class AssignReplicasToDirsTopic:
    topic_id: Uuid
    partitions: tuple[AssignReplicasToDirsPartition, ...] = _seq()


@attrs.frozen
class AssignReplicasToDirsDirectory:
    id: Uuid
    topics: tuple[AssignReplicasToDirsTopic, ...] = _seq()


@attrs.frozen
class AssignReplicasToDirsRequest:
    """Kafka's AssignReplicasToDirs (KIP-858): the log directory in which a broker placed (or moved)
    each of its replicas, for the controller to record in the partitions' ``directories``."""

    broker_id: NonNegativeInt32
    broker_epoch: Int64
    directories: tuple[AssignReplicasToDirsDirectory, ...] = _seq()


@attrs.frozen
class AssignReplicasToDirsPartitionResult:
    partition_index: Int32
    error_code: Int16


@attrs.frozen
class AssignReplicasToDirsTopicResult:
    topic_id: Uuid
    partitions: tuple[AssignReplicasToDirsPartitionResult, ...] = _seq()


@attrs.frozen
class AssignReplicasToDirsDirectoryResult:
    id: Uuid
    topics: tuple[AssignReplicasToDirsTopicResult, ...] = _seq()


@attrs.frozen
class AssignReplicasToDirsResponse:
    error_code: Int16
    directories: tuple[AssignReplicasToDirsDirectoryResult, ...] = _seq()


@attrs.frozen
class UnregisterBrokerRequest:
    broker_id: Int32


@attrs.frozen
class UnregisterBrokerResponse:
    error_code: Int16
    error_message: str | None = None


# -- topics ----------------------------------------------------------------------------------------


@attrs.frozen
class CreatableReplicaAssignment:
    partition_index: Int32
    broker_ids: tuple[Int32, ...] = attrs.field(converter=_tuple)


@attrs.frozen
class CreatableTopicConfig:
    name: str
    value: str | None


@attrs.frozen
class CreatableTopic:
    name: str
    num_partitions: Int32 = -1
    replication_factor: Int16 = -1
    assignments: tuple[CreatableReplicaAssignment, ...] = _seq()
    configs: tuple[CreatableTopicConfig, ...] = _seq()


@attrs.frozen
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...] = _seq()
    validate_only: bool = False


@attrs.frozen
class CreatableTopicResult:
    name: str
    error_code: Int16
    error_message: str | None = None
    topic_id: Uuid | None = None
    num_partitions: Int32 = -1
    replication_factor: Int16 = -1


@attrs.frozen
class CreateTopicsResponse:
    topics: tuple[CreatableTopicResult, ...] = _seq()

    def result(self, name: str) -> CreatableTopicResult:
        return next(t for t in self.topics if t.name == name)


@attrs.frozen
class DeleteTopicState:
    """A topic to delete, by name or (name None) by id."""

    name: str | None = None
    topic_id: Uuid | None = None


@attrs.frozen
class DeleteTopicsRequest:
    topics: tuple[DeleteTopicState, ...] = _seq()


@attrs.frozen
class DeletableTopicResult:
    name: str | None
    topic_id: Uuid | None
    error_code: Int16
    error_message: str | None = None


@attrs.frozen
class DeleteTopicsResponse:
    responses: tuple[DeletableTopicResult, ...] = _seq()


@attrs.frozen
class CreatePartitionsTopic:
    name: str
    count: Int32
    #: Replicas of each new partition, or None to place them.
    assignments: tuple[tuple[Int32, ...], ...] | None = None


@attrs.frozen
class CreatePartitionsRequest:
    topics: tuple[CreatePartitionsTopic, ...] = _seq()
    validate_only: bool = False


@attrs.frozen
class CreatePartitionsTopicResult:
    name: str
    error_code: Int16
    error_message: str | None = None


@attrs.frozen
class CreatePartitionsResponse:
    results: tuple[CreatePartitionsTopicResult, ...] = _seq()


# -- ISR changes and elections ---------------------------------------------------------------------


@attrs.frozen
class BrokerState:
    broker_id: NonNegativeInt32
    #: -1 when the sender does not know the epoch (then it is not checked).
    broker_epoch: Int64 = -1


@attrs.frozen
class AlterPartitionPartitionData:
    partition_index: NonNegativeInt32
    leader_epoch: Int32
    new_isr_with_epochs: tuple[BrokerState, ...] = attrs.field(converter=_tuple)
    partition_epoch: Int32 = 0
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED


@attrs.frozen
class AlterPartitionTopicData:
    topic_id: Uuid
    partitions: tuple[AlterPartitionPartitionData, ...] = _seq()


@attrs.frozen
class AlterPartitionRequest:
    broker_id: NonNegativeInt32
    broker_epoch: Int64
    topics: tuple[AlterPartitionTopicData, ...] = _seq()


@attrs.frozen
class AlterPartitionPartitionResult:
    partition_index: Int32
    error_code: Int16
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1
    isr: tuple[Int32, ...] = _seq()
    leader_recovery_state: Int8 = 0
    partition_epoch: Int32 = -1


@attrs.frozen
class AlterPartitionTopicResult:
    topic_id: Uuid
    partitions: tuple[AlterPartitionPartitionResult, ...] = _seq()


@attrs.frozen
class AlterPartitionResponse:
    error_code: Int16
    topics: tuple[AlterPartitionTopicResult, ...] = _seq()

    def partition(self, topic_id: Uuid, index: int) -> AlterPartitionPartitionResult:
        topic = next(t for t in self.topics if t.topic_id == topic_id)
        return next(p for p in topic.partitions if p.partition_index == index)


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


@attrs.frozen
class TopicPartitions:
    topic: str
    partitions: tuple[Int32, ...] = attrs.field(converter=_tuple)


@attrs.frozen
class ElectLeadersRequest:
    election_type: ElectionType = ElectionType.PREFERRED
    #: None means every partition.
    topic_partitions: tuple[TopicPartitions, ...] | None = None


@attrs.frozen
class PartitionResult:
    partition_id: Int32
    error_code: Int16
    error_message: str | None = None


@attrs.frozen
class ReplicaElectionResult:
    topic: str
    partition_result: tuple[PartitionResult, ...] = _seq()


@attrs.frozen
class ElectLeadersResponse:
    error_code: Int16
    replica_election_results: tuple[ReplicaElectionResult, ...] = _seq()

    def partition(self, topic: str, index: int) -> PartitionResult:
        result = next(r for r in self.replica_election_results if r.topic == topic)
        return next(p for p in result.partition_result if p.partition_id == index)


# -- configs ---------------------------------------------------------------------------------------


class ConfigSource(enum.IntEnum):
    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    #: A consumer group's own override (KIP-848).
    GROUP_CONFIG = 8


@attrs.frozen
class DescribeConfigsResource:
    resource_type: Int8
    resource_name: str
    #: None means every key.
    configuration_keys: tuple[str, ...] | None = None


@attrs.frozen
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...] = _seq()


@attrs.frozen
class DescribeConfigsResourceResult:
    name: str
    value: str | None
    read_only: bool
    config_source: ConfigSource
    is_sensitive: bool = False


@attrs.frozen
class DescribeConfigsResult:
    error_code: Int16
    error_message: str | None
    resource_type: Int8
    resource_name: str
    configs: tuple[DescribeConfigsResourceResult, ...] = _seq()

    def value(self, name: str) -> str | None:
        return next(c.value for c in self.configs if c.name == name)

    def entry(self, name: str) -> DescribeConfigsResourceResult:
        return next(c for c in self.configs if c.name == name)


@attrs.frozen
class DescribeConfigsResponse:
    results: tuple[DescribeConfigsResult, ...] = _seq()


class AlterConfigOp(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@attrs.frozen
class AlterableConfig:
    name: str
    config_operation: Int8
    value: str | None = None


@attrs.frozen
class AlterConfigsResource:
    resource_type: Int8
    resource_name: str
    configs: tuple[AlterableConfig, ...] = _seq()


@attrs.frozen
class IncrementalAlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...] = _seq()
    validate_only: bool = False


@attrs.frozen
class AlterConfigsResourceResponse:
    error_code: Int16
    error_message: str | None
    resource_type: Int8
    resource_name: str


@attrs.frozen
class IncrementalAlterConfigsResponse:
    responses: tuple[AlterConfigsResourceResponse, ...] = _seq()


# -- producer ids and features ---------------------------------------------------------------------


@attrs.frozen
class AllocateProducerIdsRequest:
    broker_id: NonNegativeInt32
    broker_epoch: Int64


@attrs.frozen
class AllocateProducerIdsResponse:
    error_code: Int16
    producer_id_start: Int64 = -1
    producer_id_len: Int32 = 0


class FeatureUpgradeType(enum.IntEnum):
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@attrs.frozen
class FeatureUpdateKey:
    feature: str
    max_version_level: Int16
    upgrade_type: FeatureUpgradeType = FeatureUpgradeType.UPGRADE


@attrs.frozen
class UpdateFeaturesRequest:
    feature_updates: tuple[FeatureUpdateKey, ...] = _seq()
    validate_only: bool = False


@attrs.frozen
class UpdatableFeatureResult:
    feature: str
    error_code: Int16
    error_message: str | None = None


@attrs.frozen
class UpdateFeaturesResponse:
    error_code: Int16
    error_message: str | None = None
    results: tuple[UpdatableFeatureResult, ...] = _seq()


# -- partition reassignments (KIP-455) --------------------------------------------------------------


@attrs.frozen
class ReassignablePartition:
    partition_index: Int32
    #: The target replicas, or None to cancel the partition's reassignment.
    replicas: tuple[Int32, ...] | None = None


@attrs.frozen
class ReassignableTopic:
    name: str
    partitions: tuple[ReassignablePartition, ...] = _seq()


@attrs.frozen
class AlterPartitionReassignmentsRequest:
    topics: tuple[ReassignableTopic, ...] = _seq()


@attrs.frozen
class ReassignablePartitionResponse:
    partition_index: Int32
    error_code: Int16
    error_message: str | None = None


@attrs.frozen
class ReassignableTopicResponse:
    name: str
    partitions: tuple[ReassignablePartitionResponse, ...] = _seq()


@attrs.frozen
class AlterPartitionReassignmentsResponse:
    error_code: Int16
    error_message: str | None = None
    responses: tuple[ReassignableTopicResponse, ...] = _seq()


@attrs.frozen
class ListPartitionReassignmentsTopics:
    name: str
    partition_indexes: tuple[Int32, ...] = _seq()


@attrs.frozen
class ListPartitionReassignmentsRequest:
    #: None lists every reassignment in progress.
    topics: tuple[ListPartitionReassignmentsTopics, ...] | None = None


@attrs.frozen
class OngoingPartitionReassignment:
    partition_index: Int32
    replicas: tuple[Int32, ...] = _seq()
    adding_replicas: tuple[Int32, ...] = _seq()
    removing_replicas: tuple[Int32, ...] = _seq()


@attrs.frozen
class OngoingTopicReassignment:
    name: str
    partitions: tuple[OngoingPartitionReassignment, ...] = _seq()


@attrs.frozen
class ListPartitionReassignmentsResponse:
    error_code: Int16
    error_message: str | None = None
    topics: tuple[OngoingTopicReassignment, ...] = _seq()


# -- ACLs (CreateAcls, DeleteAcls) ------------------------------------------------------------------


@attrs.frozen
class AclCreation:
    """One ACL to create; the enums carry Kafka's wire codes (kraftpy.security.authorizer)."""

    resource_type: Int8
    resource_name: str
    resource_pattern_type: Int8
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@attrs.frozen
class CreateAclsRequest:
    creations: tuple[AclCreation, ...] = _seq()


@attrs.frozen
class AclCreationResult:
    error_code: Int16
    error_message: str | None = None


@attrs.frozen
class CreateAclsResponse:
    results: tuple[AclCreationResult, ...] = _seq()


@attrs.frozen
class DeleteAclsFilter:
    """None fields and the ANY codes match everything."""

    resource_type_filter: Int8
    resource_name_filter: str | None
    pattern_type_filter: Int8
    principal_filter: str | None
    host_filter: str | None
    operation: Int8
    permission_type: Int8


@attrs.frozen
class DeleteAclsRequest:
    filters: tuple[DeleteAclsFilter, ...] = _seq()


@attrs.frozen
class DeleteAclsMatchingAcl:
    error_code: Int16
    error_message: str | None
    resource_type: Int8
    resource_name: str
    pattern_type: Int8
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@attrs.frozen
class DeleteAclsFilterResult:
    error_code: Int16
    error_message: str | None = None
    matching_acls: tuple[DeleteAclsMatchingAcl, ...] = _seq()


@attrs.frozen
class DeleteAclsResponse:
    filter_results: tuple[DeleteAclsFilterResult, ...] = _seq()


# -- SCRAM credentials (KIP-554) ------------------------------------------------------------------


@attrs.frozen
class ScramCredentialDeletion:
    name: str
    mechanism: Int8


@attrs.frozen(repr=False)
class ScramCredentialUpsertion:
    name: str
    mechanism: Int8
    iterations: Int32
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:  # the salted password is a password equivalent
        return f"ScramCredentialUpsertion(name={self.name!r}, mechanism={self.mechanism}, iterations={self.iterations})"


@attrs.frozen
class AlterUserScramCredentialsRequest:
    deletions: tuple[ScramCredentialDeletion, ...] = _seq()
    upsertions: tuple[ScramCredentialUpsertion, ...] = _seq()


@attrs.frozen
class AlterUserScramCredentialsResult:
    user: str
    error_code: Int16
    error_message: str | None = None


@attrs.frozen
class AlterUserScramCredentialsResponse:
    results: tuple[AlterUserScramCredentialsResult, ...] = _seq()
