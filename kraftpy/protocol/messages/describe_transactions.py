"""DescribeTransactions (api key 65), version 0: a transaction coordinator's state of each named
transactional id (KIP-664). ``transaction_state`` is the state's name as Kafka spells it (``Ongoing``,
``PrepareCommit``, ...)."""

from kraftpy.protocol.schema import F, message

DescribeTransactionsRequest = message(
    "DescribeTransactionsRequest", api_key=65, kind="request", versions="0", flexible="0+", fields=[
        F("transactional_ids", "[]string"),
    ],
)

DescribeTransactionsResponse = message(
    "DescribeTransactionsResponse", api_key=65, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("transaction_states", "[]TransactionState", "0+", [
            F("error_code", "int16"),
            F("transactional_id", "string"),
            F("transaction_state", "string"),
            F("transaction_timeout_ms", "int32"),
            F("transaction_start_time_ms", "int64"),
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("topics", "[]TopicData", "0+", [
                F("topic", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ],
)
