"""InitProducerId (api key 22), versions 0-4: a producer id and epoch for idempotent and transactional producers."""

from kraftpy.protocol.schema import F, message

InitProducerIdRequest = message(
    "InitProducerIdRequest", api_key=22, kind="request", versions="0-4", flexible="2+", fields=[
        F("transactional_id", "string", nullable="0+"),
        F("transaction_timeout_ms", "int32"),
        F("producer_id", "int64", "3+", default=-1),
        F("producer_epoch", "int16", "3+", default=-1),
    ],
)

InitProducerIdResponse = message(
    "InitProducerIdResponse", api_key=22, kind="response", versions="0-4", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", default=-1),
        F("producer_epoch", "int16"),
    ],
)
