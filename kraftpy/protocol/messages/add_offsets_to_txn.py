"""AddOffsetsToTxn (api key 25), versions 0-4: a transactional producer tells its coordinator that the
transaction will commit offsets of a consumer group (the group's ``__consumer_offsets`` partition joins
the transaction)."""

from kraftpy.protocol.schema import F, message

AddOffsetsToTxnRequest = message(
    "AddOffsetsToTxnRequest", api_key=25, kind="request", versions="0-4", flexible="3+", fields=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("group_id", "string"),
    ],
)

AddOffsetsToTxnResponse = message(
    "AddOffsetsToTxnResponse", api_key=25, kind="response", versions="0-4", flexible="3+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
    ],
)
