"""ListPartitionReassignments (api key 46), version 0: the partition moves in progress (KIP-455)."""

from kraftpy.protocol.schema import F, message

ListPartitionReassignmentsRequest = message(
    "ListPartitionReassignmentsRequest", api_key=46, kind="request", versions="0", flexible="0+", fields=[
        F("timeout_ms", "int32", default=60000),
        F("topics", "[]ListPartitionReassignmentsTopics", "0+", [
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ], nullable="0+", default=None),
    ],
)

ListPartitionReassignmentsResponse = message(
    "ListPartitionReassignmentsResponse", api_key=46, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("topics", "[]OngoingTopicReassignment", "0+", [
            F("name", "string"),
            F("partitions", "[]OngoingPartitionReassignment", "0+", [
                F("partition_index", "int32"),
                F("replicas", "[]int32"),
                F("adding_replicas", "[]int32"),
                F("removing_replicas", "[]int32"),
            ]),
        ]),
    ],
)
