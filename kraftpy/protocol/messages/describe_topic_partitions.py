"""DescribeTopicPartitions (api key 75), version 0 (KIP-966): topics and their partitions, paged.

The request names topics (none: every topic), a partition budget and an optional cursor (a topic and
the partition to start at); the response carries as many partitions as the budget allows and, when
some are left, the cursor to ask with next."""

from kraftpy.protocol.schema import F, message

DescribeTopicPartitionsRequest = message(
    "DescribeTopicPartitionsRequest", api_key=75, kind="request", versions="0", flexible="0+", fields=[
        F("topics", "[]TopicRequest", "0+", [
            F("name", "string"),
        ]),
        F("response_partition_limit", "int32", default=2000),
        F("cursor", "Cursor", "0+", [
            F("topic_name", "string"),
            F("partition_index", "int32"),
        ], nullable="0+", default=None),
    ],
)

DescribeTopicPartitionsResponse = message(
    "DescribeTopicPartitionsResponse", api_key=75, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]DescribeTopicPartitionsResponseTopic", "0+", [
            F("error_code", "int16"),
            F("name", "string", nullable="0+"),
            F("topic_id", "uuid"),
            F("is_internal", "bool", default=False),
            F("partitions", "[]DescribeTopicPartitionsResponsePartition", "0+", [
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", default=-1),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("eligible_leader_replicas", "[]int32", nullable="0+", default=None),
                F("last_known_elr", "[]int32", nullable="0+", default=None),
                F("offline_replicas", "[]int32"),
            ]),
            F("topic_authorized_operations", "int32", default=-2147483648),
        ]),
        F("next_cursor", "Cursor", "0+", [
            F("topic_name", "string"),
            F("partition_index", "int32"),
        ], nullable="0+", default=None),
    ],
)
