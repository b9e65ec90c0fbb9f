"""DescribeProducers (api key 61), version 0: the producers a partition leader tracks for each partition
(KIP-664), with the start offset of each one's open transaction, if any."""

from kraftpy.protocol.schema import F, message

DescribeProducersRequest = message(
    "DescribeProducersRequest", api_key=61, kind="request", versions="0", flexible="0+", fields=[
        F("topics", "[]TopicRequest", "0+", [
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ]),
    ],
)

DescribeProducersResponse = message(
    "DescribeProducersResponse", api_key=61, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]TopicResponse", "0+", [
            F("name", "string"),
            F("partitions", "[]PartitionResponse", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("active_producers", "[]ProducerState", "0+", [
                    F("producer_id", "int64"),
                    F("producer_epoch", "int32"),
                    F("last_sequence", "int32", default=-1),
                    F("last_timestamp", "int64", default=-1),
                    F("coordinator_epoch", "int32"),
                    F("current_txn_start_offset", "int64", default=-1),
                ]),
            ]),
        ]),
    ],
)
