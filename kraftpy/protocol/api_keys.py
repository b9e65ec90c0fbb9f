"""The Kafka APIs the data plane serves and, in one table, the versions of each it advertises.

``API_VERSIONS`` is what an ApiVersions response lists. ``min_accepted`` is the lowest version the
broker actually serves when that differs from what it advertises: like Kafka 4, kraftpy advertises
Produce from v0 (librdkafka refuses a broker whose Produce range does not start at 0) yet rejects
Produce below v3, the first version of message format v2, with UNSUPPORTED_VERSION.

Every range here lies within the versions the message schemas declare (checked by the tests).
``ApiKey`` names every API whose messages are declared; an API missing from ``API_VERSIONS`` would be
known but answered as an unknown api key.
"""

from __future__ import annotations

import enum

import attrs


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81


@attrs.frozen
class VersionRange:
    """Advertised ``min_version..max_version``; requests below ``min_accepted`` are refused."""

    min_version: int
    max_version: int
    min_accepted: int = attrs.field()

    @min_accepted.default
    def _min_accepted_default(self) -> int:
        return self.min_version

    def accepts(self, version: int) -> bool:
        return self.min_accepted <= version <= self.max_version


# fmt: off
API_VERSIONS: dict[ApiKey, VersionRange] = {
    ApiKey.PRODUCE:                   VersionRange(0, 11, min_accepted=3),
    ApiKey.FETCH:                     VersionRange(4, 17),
    ApiKey.LIST_OFFSETS:              VersionRange(1, 10),
    ApiKey.METADATA:                  VersionRange(0, 12),
    ApiKey.OFFSET_COMMIT:             VersionRange(0, 9),
    ApiKey.OFFSET_FETCH:              VersionRange(0, 9),
    ApiKey.FIND_COORDINATOR:          VersionRange(0, 6),
    ApiKey.JOIN_GROUP:                VersionRange(0, 9),
    ApiKey.HEARTBEAT:                 VersionRange(0, 4),
    ApiKey.LEAVE_GROUP:               VersionRange(0, 5),
    ApiKey.SYNC_GROUP:                VersionRange(0, 5),
    ApiKey.DESCRIBE_GROUPS:           VersionRange(0, 5),
    ApiKey.LIST_GROUPS:               VersionRange(0, 5),
    # KIP-848's consumer groups: advertised only when group.coordinator.rebalance.protocols has "consumer"
    # (the broker registers their handlers then).
    ApiKey.CONSUMER_GROUP_HEARTBEAT:  VersionRange(0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE:   VersionRange(0, 0),
    ApiKey.API_VERSIONS:              VersionRange(0, 4),
    ApiKey.CREATE_TOPICS:             VersionRange(2, 7),
    ApiKey.DELETE_TOPICS:             VersionRange(1, 6),
    ApiKey.DELETE_RECORDS:            VersionRange(0, 2),
    ApiKey.INIT_PRODUCER_ID:          VersionRange(0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH:   VersionRange(2, 4),
    ApiKey.DESCRIBE_CONFIGS:          VersionRange(1, 4),
    ApiKey.DESCRIBE_LOG_DIRS:         VersionRange(1, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS:    VersionRange(1, 2),
    ApiKey.CREATE_PARTITIONS:         VersionRange(0, 3),
    ApiKey.DELETE_GROUPS:             VersionRange(0, 2),
    ApiKey.ELECT_LEADERS:             VersionRange(0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    # The legacy whole-resource form, for clients without IncrementalAlterConfigs (kraftpy.broker.apis.configs).
    ApiKey.ALTER_CONFIGS:             VersionRange(0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: VersionRange(0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: VersionRange(0, 0),
    ApiKey.OFFSET_DELETE:             VersionRange(0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS:    VersionRange(0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS:       VersionRange(0, 1),
    ApiKey.DESCRIBE_CLUSTER:          VersionRange(0, 2),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: VersionRange(0, 0),
    # ACLs (kraftpy.broker.apis.acls): DescribeAcls from the broker's image, Create/DeleteAcls forwarded.
    ApiKey.DESCRIBE_ACLS:             VersionRange(0, 3),
    ApiKey.CREATE_ACLS:               VersionRange(0, 3),
    ApiKey.DELETE_ACLS:               VersionRange(0, 3),
    ApiKey.UNREGISTER_BROKER:         VersionRange(0, 0),
    ApiKey.UPDATE_FEATURES:           VersionRange(0, 2),
    ApiKey.DESCRIBE_QUORUM:           VersionRange(0, 2),
    # Forwarded to the quorum's Raft leader (kraftpy.broker.apis.quorum), as Kafka's brokers do.
    ApiKey.ADD_RAFT_VOTER:            VersionRange(0, 0),
    ApiKey.REMOVE_RAFT_VOTER:         VersionRange(0, 0),
    ApiKey.WRITE_TXN_MARKERS:         VersionRange(0, 1),
    # Transactions. EndTxn v5 is KIP-890 part 2 (an epoch bump with every transaction), which
    # kraftpy does not run, and unstable in Kafka; AddPartitionsToTxn v5 only lets the broker answer
    # TRANSACTION_ABORTABLE, which kraftpy's answers never carry, so v4 is the newest advertised.
    ApiKey.ADD_PARTITIONS_TO_TXN:     VersionRange(0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN:        VersionRange(0, 4),
    ApiKey.END_TXN:                   VersionRange(0, 4),
    ApiKey.TXN_OFFSET_COMMIT:         VersionRange(0, 4),
    ApiKey.DESCRIBE_PRODUCERS:        VersionRange(0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS:     VersionRange(0, 0),
    ApiKey.LIST_TRANSACTIONS:         VersionRange(0, 1),
    # SASL (served on SASL_PLAINTEXT and SASL_SSL listeners; kraftpy.broker.apis.sasl).
    ApiKey.SASL_HANDSHAKE:            VersionRange(0, 1),
    ApiKey.SASL_AUTHENTICATE:         VersionRange(0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
}
# fmt: on
