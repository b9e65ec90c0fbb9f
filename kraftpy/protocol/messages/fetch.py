"""Fetch (api key 1), versions 4-17: read record batches from partition logs (consumers and follower
replicas); v13 names topics by id. v15 (KIP-903) moves a follower's id into ReplicaState beside its
broker epoch; v16 (KIP-951) answers NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH with the current
leader and its endpoint; v17 (KIP-853) names the follower's log directory."""

from kraftpy.protocol.schema import F, message

FetchRequest = message(
    "FetchRequest", api_key=1, kind="request", versions="4-17", flexible="12+", fields=[
        F("cluster_id", "string", "12+", nullable="12+", default=None, tag=0),
        F("replica_id", "int32", "0-14", default=-1),
        F("replica_state", "ReplicaState", "15+", [
            F("replica_id", "int32", "15+", default=-1),
            F("replica_epoch", "int64", "15+", default=-1),
        ], tag=1),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=2147483647),
        F("isolation_level", "int8", "4+", default=0),
        F("session_id", "int32", "7+", default=0),
        F("session_epoch", "int32", "7+", default=-1),
        F("topics", "[]FetchTopic", "0+", [
            F("topic", "string", "0-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", "[]FetchPartition", "0+", [
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "9+", default=-1),
                F("fetch_offset", "int64"),
                F("last_fetched_epoch", "int32", "12+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("partition_max_bytes", "int32"),
                F("replica_directory_id", "uuid", "17+", tag=0),
            ]),
        ]),
        F("forgotten_topics_data", "[]ForgottenTopic", "7+", [
            F("topic", "string", "7-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", "[]int32", "7+"),
        ]),
        F("rack_id", "string", "11+", default=""),
    ],
)

FetchResponse = message(
    "FetchResponse", api_key=1, kind="response", versions="4-17", flexible="12+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "7+"),
        F("session_id", "int32", "7+", default=0),
        F("responses", "[]FetchableTopicResponse", "0+", [
            F("topic", "string", "0-12"),
            F("topic_id", "uuid", "13+"),
            F("partitions", "[]PartitionData", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("high_watermark", "int64"),
                F("last_stable_offset", "int64", "4+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("diverging_epoch", "EpochEndOffset", "12+", [
                    F("epoch", "int32", "12+", default=-1),
                    F("end_offset", "int64", "12+", default=-1),
                ], tag=0),
                F("current_leader", "LeaderIdAndEpoch", "12+", [
                    F("leader_id", "int32", "12+", default=-1),
                    F("leader_epoch", "int32", "12+", default=-1),
                ], tag=1),
                F("snapshot_id", "SnapshotId", "12+", [
                    F("end_offset", "int64", default=-1),
                    F("epoch", "int32", default=-1),
                ], tag=2),
                F("aborted_transactions", "[]AbortedTransaction", "4+", [
                    F("producer_id", "int64", "4+"),
                    F("first_offset", "int64", "4+"),
                ], nullable="4+"),
                F("preferred_read_replica", "int32", "11+", default=-1),
                F("records", "records", nullable="0+"),
            ]),
        ]),
        F("node_endpoints", "[]NodeEndpoint", "16+", [
            F("node_id", "int32", "16+"),
            F("host", "string", "16+"),
            F("port", "int32", "16+"),
            F("rack", "string", "16+", nullable="16+", default=None),
        ], tag=0),
    ],
)
