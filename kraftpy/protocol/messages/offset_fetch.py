"""OffsetFetch (api key 9), versions 0-9: read a group's committed offsets.

Version 9 names the member and its member epoch (KIP-848), which a consumer-protocol group checks."""

from kraftpy.protocol.schema import F, message

OffsetFetchRequest = message(
    "OffsetFetchRequest", api_key=9, kind="request", versions="0-9", flexible="6+", fields=[
        F("group_id", "string", "0-7"),
        F("topics", "[]OffsetFetchRequestTopic", "0-7", [
            F("name", "string", "0-7"),
            F("partition_indexes", "[]int32", "0-7"),
        ], nullable="2-7"),
        F("groups", "[]OffsetFetchRequestGroup", "8+", [
            F("group_id", "string", "8+"),
            F("member_id", "string", "9+", nullable="9+", default=None),
            F("member_epoch", "int32", "9+", default=-1),
            F("topics", "[]OffsetFetchRequestTopics", "8+", [
                F("name", "string", "8+"),
                F("partition_indexes", "[]int32", "8+"),
            ], nullable="8+"),
        ]),
        F("require_stable", "bool", "7+", default=False),
    ],
)

OffsetFetchResponse = message(
    "OffsetFetchResponse", api_key=9, kind="response", versions="0-9", flexible="6+", fields=[
        F("throttle_time_ms", "int32", "3+"),
        F("topics", "[]OffsetFetchResponseTopic", "0-7", [
            F("name", "string", "0-7"),
            F("partitions", "[]OffsetFetchResponsePartition", "0-7", [
                F("partition_index", "int32", "0-7"),
                F("committed_offset", "int64", "0-7"),
                F("committed_leader_epoch", "int32", "5-7", default=-1),
                F("metadata", "string", "0-7", nullable="0-7"),
                F("error_code", "int16", "0-7"),
            ]),
        ]),
        F("error_code", "int16", "2-7", default=0),
        F("groups", "[]OffsetFetchResponseGroup", "8+", [
            F("group_id", "string", "8+"),
            F("topics", "[]OffsetFetchResponseTopics", "8+", [
                F("name", "string", "8+"),
                F("partitions", "[]OffsetFetchResponsePartitions", "8+", [
                    F("partition_index", "int32", "8+"),
                    F("committed_offset", "int64", "8+"),
                    F("committed_leader_epoch", "int32", "8+", default=-1),
                    F("metadata", "string", "8+", nullable="8+"),
                    F("error_code", "int16", "8+"),
                ]),
            ]),
            F("error_code", "int16", "8+", default=0),
        ]),
    ],
)
