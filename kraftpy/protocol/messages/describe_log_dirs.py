"""DescribeLogDirs (api key 35), versions 1-4: a broker's log directories, the partitions in each with
their size and lag, and (from version 4) the volume's total and usable bytes. ``topics`` null asks for
every partition. Version 0 is declared but not served (Kafka 4.0 removed it, KIP-896)."""

from kraftpy.protocol.schema import F, message

DescribeLogDirsRequest = message(
    "DescribeLogDirsRequest", api_key=35, kind="request", versions="0-4", flexible="2+", fields=[
        F("topics", "[]DescribableLogDirTopic", "0+", [
            F("topic", "string"),
            F("partitions", "[]int32"),
        ], nullable="0+", default=None),
    ],
)

DescribeLogDirsResponse = message(
    "DescribeLogDirsResponse", api_key=35, kind="response", versions="0-4", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "3+"),
        F("results", "[]DescribeLogDirsResult", "0+", [
            F("error_code", "int16"),
            F("log_dir", "string"),
            F("topics", "[]DescribeLogDirsTopic", "0+", [
                F("name", "string"),
                F("partitions", "[]DescribeLogDirsPartition", "0+", [
                    F("partition_index", "int32"),
                    F("partition_size", "int64"),
                    F("offset_lag", "int64"),
                    F("is_future_key", "bool"),
                ]),
            ]),
            F("total_bytes", "int64", "4+", default=-1),
            F("usable_bytes", "int64", "4+", default=-1),
        ]),
    ],
)
