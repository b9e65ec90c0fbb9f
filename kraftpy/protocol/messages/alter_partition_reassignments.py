"""AlterPartitionReassignments (api key 45), version 0: move partitions to new replicas, or cancel a move
(KIP-455)."""

from kraftpy.protocol.schema import F, message

AlterPartitionReassignmentsRequest = message(
    "AlterPartitionReassignmentsRequest", api_key=45, kind="request", versions="0", flexible="0+", fields=[
        F("timeout_ms", "int32", default=60000),
        F("topics", "[]ReassignableTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]ReassignablePartition", "0+", [
                F("partition_index", "int32"),
                F("replicas", "[]int32", nullable="0+", default=None),
            ]),
        ]),
    ],
)

AlterPartitionReassignmentsResponse = message(
    "AlterPartitionReassignmentsResponse", api_key=45, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("responses", "[]ReassignableTopicResponse", "0+", [
            F("name", "string"),
            F("partitions", "[]ReassignablePartitionResponse", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
            ]),
        ]),
    ],
)
