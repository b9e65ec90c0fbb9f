"""DeleteRecords (api key 21), versions 0-2: move partitions' log start offsets forward."""

from kraftpy.protocol.schema import F, message

DeleteRecordsRequest = message(
    "DeleteRecordsRequest", api_key=21, kind="request", versions="0-2", flexible="2+", fields=[
        F("topics", "[]DeleteRecordsTopic", "0+", [
            F("name", "string"),
            F("partitions", "[]DeleteRecordsPartition", "0+", [
                F("partition_index", "int32"),
                F("offset", "int64"),
            ]),
        ]),
        F("timeout_ms", "int32"),
    ],
)

DeleteRecordsResponse = message(
    "DeleteRecordsResponse", api_key=21, kind="response", versions="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]DeleteRecordsTopicResult", "0+", [
            F("name", "string"),
            F("partitions", "[]DeleteRecordsPartitionResult", "0+", [
                F("partition_index", "int32"),
                F("low_watermark", "int64"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)
