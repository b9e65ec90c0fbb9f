"""CreatePartitions (api key 37), versions 0-3: add partitions to topics."""

from kraftpy.protocol.schema import F, message

CreatePartitionsRequest = message(
    "CreatePartitionsRequest", api_key=37, kind="request", versions="0-3", flexible="2+", fields=[
        F("topics", "[]CreatePartitionsTopic", "0+", [
            F("name", "string"),
            F("count", "int32"),
            F("assignments", "[]CreatePartitionsAssignment", "0+", [
                F("broker_ids", "[]int32"),
            ], nullable="0+"),
        ]),
        F("timeout_ms", "int32"),
        F("validate_only", "bool"),
    ],
)

CreatePartitionsResponse = message(
    "CreatePartitionsResponse", api_key=37, kind="response", versions="0-3", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", "[]CreatePartitionsTopicResult", "0+", [
            F("name", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)
