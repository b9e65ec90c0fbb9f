"""Every message the data plane speaks, one module per API, declared with the DSL of ``schema.py``.

A message registered here is known (it parses and encodes) but served only when ``API_VERSIONS`` in
:mod:`kraftpy.protocol.api_keys` lists it.

``REQUESTS[api_key]`` and ``RESPONSES[api_key]`` map an api key to its generated message class;
``cls.SCHEMA`` holds the versions and the compiled codecs.
"""

from kraftpy.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from kraftpy.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from kraftpy.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from kraftpy.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from kraftpy.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from kraftpy.protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
)
from kraftpy.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from kraftpy.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kraftpy.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from kraftpy.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from kraftpy.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from kraftpy.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from kraftpy.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kraftpy.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from kraftpy.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from kraftpy.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from kraftpy.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from kraftpy.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from kraftpy.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kraftpy.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from kraftpy.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from kraftpy.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from kraftpy.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from kraftpy.protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from kraftpy.protocol.messages.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse
from kraftpy.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from kraftpy.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from kraftpy.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kraftpy.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kraftpy.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from kraftpy.protocol.messages.fetch import FetchRequest, FetchResponse
from kraftpy.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kraftpy.protocol.messages.headers import RequestHeader, ResponseHeader
from kraftpy.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from kraftpy.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kraftpy.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from kraftpy.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from kraftpy.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from kraftpy.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from kraftpy.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from kraftpy.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kraftpy.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from kraftpy.protocol.messages.metadata import MetadataRequest, MetadataResponse
from kraftpy.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from kraftpy.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from kraftpy.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from kraftpy.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kraftpy.protocol.messages.produce import ProduceRequest, ProduceResponse
from kraftpy.protocol.messages.raft_voters import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
)
from kraftpy.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from kraftpy.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from kraftpy.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from kraftpy.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from kraftpy.protocol.messages.unregister_broker import UnregisterBrokerRequest, UnregisterBrokerResponse
from kraftpy.protocol.messages.update_features import UpdateFeaturesRequest, UpdateFeaturesResponse
from kraftpy.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse

_PAIRS = [
    (ProduceRequest, ProduceResponse),
    (FetchRequest, FetchResponse),
    (ListOffsetsRequest, ListOffsetsResponse),
    (MetadataRequest, MetadataResponse),
    (OffsetCommitRequest, OffsetCommitResponse),
    (OffsetFetchRequest, OffsetFetchResponse),
    (FindCoordinatorRequest, FindCoordinatorResponse),
    (JoinGroupRequest, JoinGroupResponse),
    (HeartbeatRequest, HeartbeatResponse),
    (LeaveGroupRequest, LeaveGroupResponse),
    (SyncGroupRequest, SyncGroupResponse),
    (DescribeGroupsRequest, DescribeGroupsResponse),
    (ListGroupsRequest, ListGroupsResponse),
    (ApiVersionsRequest, ApiVersionsResponse),
    (CreateTopicsRequest, CreateTopicsResponse),
    (DeleteTopicsRequest, DeleteTopicsResponse),
    (DeleteRecordsRequest, DeleteRecordsResponse),
    (InitProducerIdRequest, InitProducerIdResponse),
    (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    (EndTxnRequest, EndTxnResponse),
    (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    (DescribeAclsRequest, DescribeAclsResponse),
    (CreateAclsRequest, CreateAclsResponse),
    (DeleteAclsRequest, DeleteAclsResponse),
    (DescribeConfigsRequest, DescribeConfigsResponse),
    (AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse),
    (DescribeLogDirsRequest, DescribeLogDirsResponse),
    (CreatePartitionsRequest, CreatePartitionsResponse),
    (DeleteGroupsRequest, DeleteGroupsResponse),
    (ElectLeadersRequest, ElectLeadersResponse),
    (AlterConfigsRequest, AlterConfigsResponse),
    (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse),
    (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse),
    (OffsetDeleteRequest, OffsetDeleteResponse),
    (DescribeClientQuotasRequest, DescribeClientQuotasResponse),
    (AlterClientQuotasRequest, AlterClientQuotasResponse),
    (DescribeQuorumRequest, DescribeQuorumResponse),
    (DescribeClusterRequest, DescribeClusterResponse),
    (DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse),
    (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse),
    (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse),
    (DescribeProducersRequest, DescribeProducersResponse),
    (UnregisterBrokerRequest, UnregisterBrokerResponse),
    (UpdateFeaturesRequest, UpdateFeaturesResponse),
    (DescribeTransactionsRequest, DescribeTransactionsResponse),
    (ListTransactionsRequest, ListTransactionsResponse),
    (SaslHandshakeRequest, SaslHandshakeResponse),
    (SaslAuthenticateRequest, SaslAuthenticateResponse),
    (DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse),
    (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
    (AddRaftVoterRequest, AddRaftVoterResponse),
    (RemoveRaftVoterRequest, RemoveRaftVoterResponse),
]

#: api key -> request class
REQUESTS: dict[int, type] = {req.SCHEMA.api_key: req for req, _ in _PAIRS}
#: api key -> response class
RESPONSES: dict[int, type] = {resp.SCHEMA.api_key: resp for _, resp in _PAIRS}

__all__ = [
    "REQUESTS",
    "RESPONSES",
    "RequestHeader",
    "ResponseHeader",
    *sorted(cls.__name__ for pair in _PAIRS for cls in pair),
]
