"""AlterReplicaLogDirs (api key 34), versions 0-2 (KIP-113): move replicas of the broker asked to
another of its log directories, named by absolute path. Version 0 is declared but not served (Kafka
deprecates it); version 2 is flexible."""

from kraftpy.protocol.schema import F, message

AlterReplicaLogDirsRequest = message(
    "AlterReplicaLogDirsRequest", api_key=34, kind="request", versions="0-2", flexible="2+", fields=[
        F("dirs", "[]AlterReplicaLogDir", "0+", [
            F("path", "string"),
            F("topics", "[]AlterReplicaLogDirTopic", "0+", [
                F("name", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ],
)

AlterReplicaLogDirsResponse = message(
    "AlterReplicaLogDirsResponse", api_key=34, kind="response", versions="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AlterReplicaLogDirTopicResult", "0+", [
            F("topic_name", "string"),
            F("partitions", "[]AlterReplicaLogDirPartitionResult", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)
