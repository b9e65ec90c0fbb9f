"""CreateTopics (api key 19), versions 2-7: create topics."""

from kraftpy.protocol.schema import F, message

CreateTopicsRequest = message(
    "CreateTopicsRequest", api_key=19, kind="request", versions="2-7", flexible="5+", fields=[
        F("topics", "[]CreatableTopic", "0+", [
            F("name", "string"),
            F("num_partitions", "int32"),
            F("replication_factor", "int16"),
            F("assignments", "[]CreatableReplicaAssignment", "0+", [
                F("partition_index", "int32"),
                F("broker_ids", "[]int32"),
            ]),
            F("configs", "[]CreatableTopicConfig", "0+", [
                F("name", "string"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("timeout_ms", "int32", default=60000),
        F("validate_only", "bool", "1+", default=False),
    ],
)

CreateTopicsResponse = message(
    "CreateTopicsResponse", api_key=19, kind="response", versions="2-7", flexible="5+", fields=[
        F("throttle_time_ms", "int32", "2+"),
        F("topics", "[]CreatableTopicResult", "0+", [
            F("name", "string"),
            F("topic_id", "uuid", "7+"),
            F("error_code", "int16"),
            F("error_message", "string", "1+", nullable="0+"),
            F("topic_config_error_code", "int16", "5+", tag=0),
            F("num_partitions", "int32", "5+", default=-1),
            F("replication_factor", "int16", "5+", default=-1),
            F("configs", "[]CreatableTopicConfigs", "5+", [
                F("name", "string", "5+"),
                F("value", "string", "5+", nullable="5+"),
                F("read_only", "bool", "5+"),
                F("config_source", "int8", "5+", default=-1),
                F("is_sensitive", "bool", "5+"),
            ], nullable="5+"),
        ]),
    ],
)
