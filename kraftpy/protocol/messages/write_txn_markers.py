"""WriteTxnMarkers (api key 27), versions 0-1: the transaction coordinator asks a partition leader to
append the COMMIT or ABORT marker of a producer's transaction to the named partitions
(``transaction_result`` false is ABORT, true COMMIT)."""

from kraftpy.protocol.schema import F, message

WriteTxnMarkersRequest = message(
    "WriteTxnMarkersRequest", api_key=27, kind="request", versions="0-1", flexible="1+", fields=[
        F("markers", "[]WritableTxnMarker", "0+", [
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("transaction_result", "bool"),
            F("topics", "[]WritableTxnMarkerTopic", "0+", [
                F("name", "string"),
                F("partition_indexes", "[]int32"),
            ]),
            F("coordinator_epoch", "int32"),
        ]),
    ],
)

WriteTxnMarkersResponse = message(
    "WriteTxnMarkersResponse", api_key=27, kind="response", versions="0-1", flexible="1+", fields=[
        F("markers", "[]WritableTxnMarkerResult", "0+", [
            F("producer_id", "int64"),
            F("topics", "[]WritableTxnMarkerTopicResult", "0+", [
                F("name", "string"),
                F("partitions", "[]WritableTxnMarkerPartitionResult", "0+", [
                    F("partition_index", "int32"),
                    F("error_code", "int16"),
                ]),
            ]),
        ]),
    ],
)
