"""ElectLeaders (api key 43), versions 0-2: elect the preferred replica, or any live one (unclean)."""

from kraftpy.protocol.schema import F, message

ElectLeadersRequest = message(
    "ElectLeadersRequest", api_key=43, kind="request", versions="0-2", flexible="2+", fields=[
        F("election_type", "int8", "1+"),
        F("topic_partitions", "[]TopicPartitions", "0+", [
            F("topic", "string"),
            F("partitions", "[]int32"),
        ], nullable="0+"),
        F("timeout_ms", "int32", default=60000),
    ],
)

ElectLeadersResponse = message(
    "ElectLeadersResponse", api_key=43, kind="response", versions="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "1+"),
        F("replica_election_results", "[]ReplicaElectionResult", "0+", [
            F("topic", "string"),
            F("partition_result", "[]PartitionResult", "0+", [
                F("partition_id", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
            ]),
        ]),
    ],
)
