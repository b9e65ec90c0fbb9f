"""ListOffsets (api key 2), versions 1-10: offsets by timestamp: earliest, latest, max timestamp (v7), local log
start (v8, KIP-405), last tiered offset (v9, KIP-1005); v10 adds TimeoutMs (KIP-1075)."""

from kraftpy.protocol.schema import F, message

ListOffsetsRequest = message(
    "ListOffsetsRequest", api_key=2, kind="request", versions="1-10", flexible="6+", fields=[
        F("replica_id", "int32"),
        F("isolation_level", "int8", "2+"),
        F("topics", "[]ListOffsetsTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]ListOffsetsPartition", "0+", [
                F("partition_index", "int32"),
                F("current_leader_epoch", "int32", "4+", default=-1),
                F("timestamp", "int64"),
            ]),
        ]),
        F("timeout_ms", "int32", "10+"),
    ],
)

ListOffsetsResponse = message(
    "ListOffsetsResponse", api_key=2, kind="response", versions="1-10", flexible="6+", fields=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", "[]ListOffsetsTopicResponse", "0+", [
            F("name", "string"),
            F("partitions", "[]ListOffsetsPartitionResponse", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("timestamp", "int64", "1+", default=-1),
                F("offset", "int64", "1+", default=-1),
                F("leader_epoch", "int32", "4+", default=-1),
            ]),
        ]),
    ],
)
