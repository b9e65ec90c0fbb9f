"""EndTxn (api key 26), versions 0-5: a transactional producer asks its coordinator to commit or abort.

Version 5 (KIP-890 part 2, marked unstable in Kafka's definition) answers with the producer id and
epoch the producer is to use next."""

from kraftpy.protocol.schema import F, message

EndTxnRequest = message(
    "EndTxnRequest", api_key=26, kind="request", versions="0-5", flexible="3+", fields=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("committed", "bool"),
    ],
)

EndTxnResponse = message(
    "EndTxnResponse", api_key=26, kind="response", versions="0-5", flexible="3+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", "5+", default=-1),
        F("producer_epoch", "int16", "5+", default=-1),
    ],
)
