"""OffsetForLeaderEpoch (api key 23), versions 2-4: the end offset of a leader epoch, for truncation after a leader change."""

from kraftpy.protocol.schema import F, message

OffsetForLeaderEpochRequest = message(
    "OffsetForLeaderEpochRequest", api_key=23, kind="request", versions="2-4", flexible="4+", fields=[
        F("replica_id", "int32", "3+", default=-2),
        F("topics", "[]OffsetForLeaderTopic", "0+", [
            F("topic", "string"),
            F("partitions", "[]OffsetForLeaderPartition", "0+", [
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "2+", default=-1),
                F("leader_epoch", "int32"),
            ]),
        ]),
    ],
)

OffsetForLeaderEpochResponse = message(
    "OffsetForLeaderEpochResponse", api_key=23, kind="response", versions="2-4", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", "[]OffsetForLeaderTopicResult", "0+", [
            F("topic", "string"),
            F("partitions", "[]EpochEndOffset", "0+", [
                F("error_code", "int16"),
                F("partition", "int32"),
                F("leader_epoch", "int32", "1+", default=-1),
                F("end_offset", "int64", default=-1),
            ]),
        ]),
    ],
)
