"""ListTransactions (api key 66), versions 0-1: the transactional ids a coordinator knows, filtered by
state and producer id (KIP-664) and, from version 1, by how long they have been running (KIP-994).
States the coordinator does not know come back in ``unknown_state_filters``."""

from kraftpy.protocol.schema import F, message

ListTransactionsRequest = message(
    "ListTransactionsRequest", api_key=66, kind="request", versions="0-1", flexible="0+", fields=[
        F("state_filters", "[]string"),
        F("producer_id_filters", "[]int64"),
        F("duration_filter", "int64", "1+", default=-1),
    ],
)

ListTransactionsResponse = message(
    "ListTransactionsResponse", api_key=66, kind="response", versions="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("unknown_state_filters", "[]string"),
        F("transaction_states", "[]TransactionState", "0+", [
            F("transactional_id", "string"),
            F("producer_id", "int64"),
            F("transaction_state", "string"),
        ]),
    ],
)
