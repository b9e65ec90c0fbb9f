"""OffsetDelete (api key 47), version 0: remove a group's committed offsets of some partitions (KIP-496)."""

from kraftpy.protocol.schema import F, message

OffsetDeleteRequest = message(
    "OffsetDeleteRequest", api_key=47, kind="request", versions="0", flexible="none", fields=[
        F("group_id", "string"),
        F("topics", "[]OffsetDeleteRequestTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]OffsetDeleteRequestPartition", "0+", [
                F("partition_index", "int32"),
            ]),
        ]),
    ],
)

OffsetDeleteResponse = message(
    "OffsetDeleteResponse", api_key=47, kind="response", versions="0", flexible="none", fields=[
        F("error_code", "int16"),
        F("throttle_time_ms", "int32"),
        F("topics", "[]OffsetDeleteResponseTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]OffsetDeleteResponsePartition", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)
