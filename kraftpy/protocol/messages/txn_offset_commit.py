"""TxnOffsetCommit (api key 28), versions 0-4: a transactional producer commits a consumer group's
offsets as part of its transaction (sent to the group coordinator; visible only once the transaction
commits). Version 3 adds the member's generation and ids, so the group coordinator can fence a zombie
consumer (KIP-447)."""

from kraftpy.protocol.schema import F, message

TxnOffsetCommitRequest = message(
    "TxnOffsetCommitRequest", api_key=28, kind="request", versions="0-4", flexible="3+", fields=[
        F("transactional_id", "string"),
        F("group_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("generation_id", "int32", "3+", default=-1),
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("topics", "[]TxnOffsetCommitRequestTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]TxnOffsetCommitRequestPartition", "0+", [
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "2+", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
)

TxnOffsetCommitResponse = message(
    "TxnOffsetCommitResponse", api_key=28, kind="response", versions="0-4", flexible="3+", fields=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]TxnOffsetCommitResponseTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]TxnOffsetCommitResponsePartition", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)
