"""``QuorumController``: the active controller's decisions, with every effect returned as records.

Theory of operation. The controller holds the ``MetadataImage`` it has replayed so far, the broker
sessions (in memory only: ``BrokerHeartbeatManager``), the static config and an injected
``random.Random``. Each ``handle_*`` entry point is a call into a pure manager function::

    (image, request, now) -> ControllerResult(records, response)

and changes nothing in the image. Its caller (the driver that owns the Raft log) appends the records as
one batch and, before handling the next request, feeds them back through ``replay`` — the same
``MetadataDelta.replay`` the standby controllers and the brokers use, so no one can drift. The response
is sent once the batch is committed.

The only state outside the records is the session table: a successful registration or heartbeat
refreshes the broker's session; ``tick(now)`` fences brokers whose session ran out and, when
auto.leader.rebalance.enable is on and the check interval has passed, moves leaderships back to
preferred replicas. ``next_deadline()`` says when ``tick`` next has something to do.

Time is the caller's clock, in seconds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from kraftpy.metadata import (
    acl_control,
    cluster_control,
    config_control,
    directory_control,
    feature_control,
    producer_id_control,
    quota_control,
    reassignment,
    replication_control,
)
from kraftpy.metadata.cluster_control import BrokerHeartbeatManager
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.delta import replay_records
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import EMPTY_IMAGE, METADATA_VERSION, MetadataImage
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
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
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
    DescribeConfigsRequest,
    DescribeConfigsResponse,
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
from kraftpy.metadata.records import MetadataRecord, UnregisterBrokerRecord
from kraftpy.metadata.result import ControllerResult
from kraftpy.metadata.scram_control import alter_user_scram_credentials


class QuorumController:
    def __init__(
        self, config: ControllerConfig, *, rng: random.Random, image: MetadataImage = EMPTY_IMAGE
    ) -> None:
        self.config = config
        self.rng = rng
        #: Everything replayed so far. Only ``replay`` changes it.
        self.image = image
        self.heartbeats = BrokerHeartbeatManager(config.broker_session_timeout)
        self._next_rebalance: float | None = None

    # -- life cycle -----------------------------------------------------------------------------

    def activate(self, now: float) -> ControllerResult[None]:
        """Become the active controller at ``now``: every registered broker gets a fresh session (they
        were kept by the previous active controller), and a log without metadata.version gets the
        bootstrap records.

        Except the broker of this same process (``local_broker_id``): it registers or heartbeats into a
        session of its own, and a registration older than that is of a process that died (kill -9), so
        its next incarnation need not wait out broker.session.timeout.ms."""
        for broker_id in self.image.cluster.brokers:
            if broker_id != self.config.local_broker_id:
                self.heartbeats.touch(broker_id, now)
        self._next_rebalance = now + self.config.leader_imbalance_check_interval_seconds
        if METADATA_VERSION not in self.image.features.levels:
            return ControllerResult(feature_control.bootstrap_records(self.config.bootstrap_records), None)
        # Partitions left without a leader that an active replica can lead: what an unfencing whose
        # elections were cut short by the previous controller's end would otherwise leave offline.
        return ControllerResult(replication_control.elect_leaderless_partitions(self.image, self.config), None,
                                atomic=False)

    def replay(
        self, records: Sequence[MetadataRecord], *, last_offset: int | None = None, epoch: int | None = None
    ) -> MetadataImage:
        """Apply records written to the log (``last_offset`` being the offset of the last one)."""
        self.image = replay_records(self.image, records, last_offset, epoch)
        for record in records:
            if isinstance(record, UnregisterBrokerRecord):
                self.heartbeats.remove(record.broker_id)
        return self.image

    # -- brokers ----------------------------------------------------------------------------------

    def handle_broker_registration(
        self, request: BrokerRegistrationRequest, now: float, next_offset: int
    ) -> ControllerResult[BrokerRegistrationResponse]:
        """``next_offset`` is the offset the first record of the result will take in the metadata log:
        it becomes the broker epoch."""
        # As in Kafka's BrokerHeartbeatManager, a fenced broker has no live session: after a
        # controlled shutdown (which fences it) or a fencing, a new incarnation registers at once.
        current = self.image.cluster.broker(request.broker_id)
        session_alive = (current is not None and not current.fenced
                         and self.heartbeats.has_valid_session(request.broker_id, now))
        result = cluster_control.register_broker(
            self.image, request, self.config, next_offset=next_offset, session_alive=session_alive,
        )
        if result.response.error_code == Errors.NONE:
            self.heartbeats.touch(request.broker_id, now)
        return result

    def handle_broker_heartbeat(
        self, request: BrokerHeartbeatRequest, now: float
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        result = cluster_control.process_heartbeat(self.image, request, self.config)
        if result.response.error_code == Errors.NONE:
            self.heartbeats.touch(request.broker_id, now)
        return result

    def handle_unregister_broker(self, request: UnregisterBrokerRequest) -> ControllerResult[UnregisterBrokerResponse]:
        return cluster_control.unregister_broker(self.image, request, self.config)

    def handle_alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> ControllerResult[AlterUserScramCredentialsResponse]:
        return alter_user_scram_credentials(self.image, request)

    def fence_stale_brokers(self, now: float) -> ControllerResult[tuple[int, ...]]:
        """Fence every broker whose session ran out; the response lists the brokers fenced. An expired
        session is closed either way: a broker that comes back heartbeats into a new one."""
        expired = self.heartbeats.expired(now)
        for broker_id in expired:
            self.heartbeats.remove(broker_id)
        to_fence = tuple(b for b in expired if (reg := self.image.cluster.broker(b)) is not None and not reg.fenced)
        return ControllerResult(cluster_control.fence_brokers(self.image, to_fence, self.config), to_fence,
                                atomic=False)

    def maybe_balance_partition_leaders(self, now: float, image: MetadataImage | None = None) -> ControllerResult[int]:
        """When auto.leader.rebalance.enable is on and the check interval has passed, move leaderships back
        to preferred replicas; the response counts the partitions moved."""
        if not self._rebalance_due(now):
            return ControllerResult([], 0)
        self._next_rebalance = now + self.config.leader_imbalance_check_interval_seconds
        changes = replication_control.preferred_leader_changes(self.image if image is None else image, self.config)
        return ControllerResult(changes, len(changes), atomic=False)

    def _rebalance_due(self, now: float) -> bool:
        if not self.config.auto_leader_rebalance_enable:
            return False
        if self._next_rebalance is None:
            self._next_rebalance = now + self.config.leader_imbalance_check_interval_seconds
        return now >= self._next_rebalance

    def tick(self, now: float) -> ControllerResult[tuple[int, ...]]:
        """Periodic work at ``now``: fence stale brokers, then maybe rebalance leaders (on the image as the
        fencing leaves it). The response lists the brokers fenced."""
        fenced = self.fence_stale_brokers(now)
        after = self.image
        if fenced.records and self._rebalance_due(now):  # replaying a large fencing costs: only when needed
            after = replay_records(self.image, fenced.records)
        balanced = self.maybe_balance_partition_leaders(now, after)
        return ControllerResult(fenced.records + balanced.records, fenced.response, atomic=False)

    def next_deadline(self) -> float | None:
        """The earliest time at which ``tick`` has something to do, or None."""
        deadlines = [d for d in (self.heartbeats.next_expiry(), self._next_rebalance) if d is not None]
        if not self.config.auto_leader_rebalance_enable and self._next_rebalance in deadlines:
            deadlines.remove(self._next_rebalance)
        return min(deadlines, default=None)

    # -- topics, partitions, ISRs ---------------------------------------------------------------

    def handle_create_topics(self, request: CreateTopicsRequest) -> ControllerResult[CreateTopicsResponse]:
        return replication_control.create_topics(self.image, request, self.config, self.rng)

    def handle_delete_topics(self, request: DeleteTopicsRequest) -> ControllerResult[DeleteTopicsResponse]:
        return replication_control.delete_topics(self.image, request, self.config)

    def handle_create_partitions(
        self, request: CreatePartitionsRequest
    ) -> ControllerResult[CreatePartitionsResponse]:
        return replication_control.create_partitions(self.image, request, self.config, self.rng)

    def handle_alter_partition(self, request: AlterPartitionRequest) -> ControllerResult[AlterPartitionResponse]:
        return replication_control.alter_partition(self.image, request, self.config)

    def handle_assign_replicas_to_dirs(
        self, request: AssignReplicasToDirsRequest
    ) -> ControllerResult[AssignReplicasToDirsResponse]:
        return directory_control.assign_replicas_to_dirs(self.image, request, self.config)

    def handle_elect_leaders(self, request: ElectLeadersRequest) -> ControllerResult[ElectLeadersResponse]:
        return replication_control.elect_leaders(self.image, request, self.config)

    def handle_alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> ControllerResult[AlterPartitionReassignmentsResponse]:
        return reassignment.alter_partition_reassignments(self.image, request, self.config)

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        """A read: answered from the image, no records."""
        return reassignment.list_partition_reassignments(self.image, request)

    # -- configs, producer ids, features ----------------------------------------------------------

    def describe_configs(self, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
        """A read: answered from the image, no records."""
        return config_control.describe_configs(self.image, request, self.config)

    def handle_incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> ControllerResult[IncrementalAlterConfigsResponse]:
        return config_control.incremental_alter_configs(self.image, request, self.config)

    def handle_allocate_producer_ids(
        self, request: AllocateProducerIdsRequest
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        return producer_id_control.allocate_producer_ids(self.image, request)

    def handle_update_features(self, request: UpdateFeaturesRequest) -> ControllerResult[UpdateFeaturesResponse]:
        return feature_control.update_features(self.image, request, self.config)

    # -- ACLs --------------------------------------------------------------------------------------

    def handle_create_acls(self, request: CreateAclsRequest) -> ControllerResult[CreateAclsResponse]:
        return acl_control.create_acls(self.image, request, self.rng)

    def handle_delete_acls(self, request: DeleteAclsRequest) -> ControllerResult[DeleteAclsResponse]:
        return acl_control.delete_acls(self.image, request)

    def handle_alter_client_quotas(
        self, request: quota_control.AlterClientQuotasRequest
    ) -> ControllerResult[quota_control.AlterClientQuotasResponse]:
        return quota_control.alter_client_quotas(self.image, request)
