"""Produce (api key 0), versions 0-11: append record batches; the broker accepts v3+ (message format v2).
v10 (KIP-951) answers a NOT_LEADER_OR_FOLLOWER partition with its current leader and that leader's
endpoint, so the producer moves without a metadata round trip; v11 (KIP-890) lets the answer carry
TRANSACTION_ABORTABLE."""

from kraftpy.protocol.schema import F, message

ProduceRequest = message(
    "ProduceRequest", api_key=0, kind="request", versions="0-11", flexible="9+", fields=[
        F("transactional_id", "string", "3+", nullable="3+", default=None),
        F("acks", "int16"),
        F("timeout_ms", "int32"),
        F("topic_data", "[]TopicProduceData", "0+", [
            F("name", "string"),
            F("partition_data", "[]PartitionProduceData", "0+", [
                F("index", "int32"),
                F("records", "records", nullable="0+"),
            ]),
        ]),
    ],
)

ProduceResponse = message(
    "ProduceResponse", api_key=0, kind="response", versions="0-11", flexible="9+", fields=[
        F("responses", "[]TopicProduceResponse", "0+", [
            F("name", "string"),
            F("partition_responses", "[]PartitionProduceResponse", "0+", [
                F("index", "int32"),
                F("error_code", "int16"),
                F("base_offset", "int64"),
                F("log_append_time_ms", "int64", "2+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("record_errors", "[]BatchIndexAndErrorMessage", "8+", [
                    F("batch_index", "int32", "8+"),
                    F("batch_index_error_message", "string", "8+", nullable="8+", default=None),
                ]),
                F("error_message", "string", "8+", nullable="8+", default=None),
                F("current_leader", "LeaderIdAndEpoch", "10+", [
                    F("leader_id", "int32", "10+", default=-1),
                    F("leader_epoch", "int32", "10+", default=-1),
                ], tag=0),
            ]),
        ]),
        F("throttle_time_ms", "int32", "1+", default=0),
        F("node_endpoints", "[]NodeEndpoint", "10+", [
            F("node_id", "int32", "10+"),
            F("host", "string", "10+"),
            F("port", "int32", "10+"),
            F("rack", "string", "10+", nullable="10+", default=None),
        ], tag=0),
    ],
)
