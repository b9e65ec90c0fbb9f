"""The controller's static configuration (Kafka's key names in the comments) and supported features."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from kraftpy.metadata import metadata_version

#: metadata.version levels this build can run at: Kafka's 3.3-IV3 to 3.9-IV0 (kraftpy.metadata.metadata_version
#: says what each turns on). kraftpy records log directories (KIP-858: RegisterBrokerRecord v3 LogDirs,
#: PartitionRecord and PartitionChangeRecord v1 Directories) at every level, where Kafka waits for 3.7-IV2:
#: kraftpy's metadata log is read by kraftpy only, and every kraftpy that writes these versions reads the
#: earlier ones too.
MINIMUM_METADATA_VERSION = metadata_version.MINIMUM
LATEST_METADATA_VERSION = metadata_version.LATEST

#: kraft.version 0 is a static quorum (controller.quorum.voters), 1 a dynamic one (KIP-853): a Raft level,
#: raised through the Raft leader (kraftpy.raft.leader), reported with the others.
DEFAULT_SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = MappingProxyType(
    {"metadata.version": (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION), "kraft.version": (0, 1)}
)

#: Producer ids are handed out in blocks of this many (Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE).
PRODUCER_ID_BLOCK_SIZE = 1000


def _frozen(value: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(value))


@attrs.frozen
class ControllerConfig:
    #: The cluster id written by ``storage format``; registrations from other clusters are refused.
    cluster_id: str
    #: broker.session.timeout.ms: a broker silent for longer is fenced.
    broker_session_timeout_ms: int = 9000
    #: num.partitions: partitions of a topic created with NumPartitions -1.
    num_partitions: int = 1
    #: default.replication.factor: replicas of a topic created with ReplicationFactor -1.
    default_replication_factor: int = 1
    #: delete.topic.enable
    delete_topic_enable: bool = True
    #: auto.leader.rebalance.enable: move leadership back to preferred replicas periodically.
    auto_leader_rebalance_enable: bool = True
    #: leader.imbalance.check.interval.seconds
    leader_imbalance_check_interval_seconds: int = 300
    #: Broker configs from the properties file that topics inherit (e.g. unclean.leader.election.enable,
    #: min.insync.replicas, log.retention.ms), reported with source STATIC_BROKER_CONFIG.
    static_broker_configs: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen)
    #: In a combined process (process.roles=broker,controller): the node id of the broker in the same
    #: process. That broker lives exactly as long as this controller, so when the controller becomes
    #: active, a registration of that id from before is of a process that is gone.
    local_broker_id: int | None = None
    #: Records `storage format` left for a new cluster's log (kraftpy.metadata.bootstrap: --add-scram's
    #: credentials), written by the first active controller after metadata.version.
    bootstrap_records: tuple = ()
    #: Features and the level ranges this controller supports.
    supported_features: Mapping[str, tuple[int, int]] = attrs.field(
        default=DEFAULT_SUPPORTED_FEATURES, converter=_frozen
    )

    @property
    def broker_session_timeout(self) -> float:
        """The session timeout in seconds, the unit of the controller's clock."""
        return self.broker_session_timeout_ms / 1000.0
