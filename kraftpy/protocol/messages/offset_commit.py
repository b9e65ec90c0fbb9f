"""OffsetCommit (api key 8), versions 0-9: commit a group's consumed offsets.

Version 9 is version 8 with one more meaning: a member of a consumer-protocol group (KIP-848) sends its
member epoch in ``generation_id_or_member_epoch``."""

from kraftpy.protocol.schema import F, message

OffsetCommitRequest = message(
    "OffsetCommitRequest", api_key=8, kind="request", versions="0-9", flexible="8+", fields=[
        F("group_id", "string"),
        F("generation_id_or_member_epoch", "int32", "1+", default=-1),
        F("member_id", "string", "1+"),
        F("group_instance_id", "string", "7+", nullable="7+", default=None),
        F("retention_time_ms", "int64", "2-4", default=-1),
        F("topics", "[]OffsetCommitRequestTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]OffsetCommitRequestPartition", "0+", [
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "6+", default=-1),
                F("commit_timestamp", "int64", "1", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
)

OffsetCommitResponse = message(
    "OffsetCommitResponse", api_key=8, kind="response", versions="0-9", flexible="8+", fields=[
        F("throttle_time_ms", "int32", "3+"),
        F("topics", "[]OffsetCommitResponseTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]OffsetCommitResponsePartition", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)
