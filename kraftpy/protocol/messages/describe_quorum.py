"""DescribeQuorum (api key 55), versions 0-2: the metadata quorum as its leader sees it — what
kafka-metadata-quorum.sh --bootstrap-server asks. Version 1 adds each replica's last fetch and
caught-up times; version 2 (KIP-853) error messages, directory ids and the voters' endpoints."""

from kraftpy.protocol.schema import F, message

DescribeQuorumRequest = message(
    "DescribeQuorumRequest", api_key=55, kind="request", versions="0-2", flexible="0+", fields=[
        F("topics", "[]TopicData", "0+", [
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", "0+", [
                F("partition_index", "int32"),
            ]),
        ]),
    ],
)

_REPLICA = [
    F("replica_id", "int32"),
    F("replica_directory_id", "uuid", "2+"),
    F("log_end_offset", "int64"),
    F("last_fetch_timestamp", "int64", "1+", default=-1),
    F("last_caught_up_timestamp", "int64", "1+", default=-1),
]

DescribeQuorumResponse = message(
    "DescribeQuorumResponse", api_key=55, kind="response", versions="0-2", flexible="0+", fields=[
        F("error_code", "int16"),
        F("error_message", "string", "2+", nullable="2+"),
        F("topics", "[]TopicData", "0+", [
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", "2+", nullable="2+"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                F("high_watermark", "int64"),
                F("current_voters", "[]ReplicaState", "0+", _REPLICA),
                F("observers", "[]ReplicaState", "0+", _REPLICA),
            ]),
        ]),
        F("nodes", "[]Node", "2+", [
            F("node_id", "int32"),
            F("listeners", "[]Listener", "2+", [
                F("name", "string"),
                F("host", "string"),
                F("port", "uint16"),
            ]),
        ]),
    ],
)
