"""AddPartitionsToTxn (api key 24), versions 0-5: add partitions to a producer's ongoing transaction.

Versions 0-3 come from the transactional producer and name one transaction (the ``v3_and_below_*``
fields). Version 4 (KIP-890 part 1) is broker to coordinator only: a partition leader batches the
transactions it is about to append for, and with ``verify_only`` asks whether each partition is
already in its transaction instead of adding it. The answer is keyed the same way: one topic list for
versions 0-3, one per transactional id from version 4, plus a top-level error code.

The topic struct (and, in the response, the topic and partition results) are Kafka's common structs:
declared once here, used at both places.
"""

from kraftpy.protocol.schema import F, message


def _topics(name: str, versions: str):
    return F(name, "[]AddPartitionsToTxnTopic", versions, [
        F("name", "string"),
        F("partitions", "[]int32"),
    ])


def _topic_results(name: str, versions: str):
    return F(name, "[]AddPartitionsToTxnTopicResult", versions, [
        F("name", "string"),
        F("results_by_partition", "[]AddPartitionsToTxnPartitionResult", "0+", [
            F("partition_index", "int32"),
            F("partition_error_code", "int16"),
        ]),
    ])


AddPartitionsToTxnRequest = message(
    "AddPartitionsToTxnRequest", api_key=24, kind="request", versions="0-5", flexible="3+", fields=[
        F("transactions", "[]AddPartitionsToTxnTransaction", "4+", [
            F("transactional_id", "string", "4+"),
            F("producer_id", "int64", "4+"),
            F("producer_epoch", "int16", "4+"),
            F("verify_only", "bool", "4+", default=False),
            _topics("topics", "4+"),
        ]),
        F("v3_and_below_transactional_id", "string", "0-3"),
        F("v3_and_below_producer_id", "int64", "0-3"),
        F("v3_and_below_producer_epoch", "int16", "0-3"),
        _topics("v3_and_below_topics", "0-3"),
    ],
)

AddPartitionsToTxnResponse = message(
    "AddPartitionsToTxnResponse", api_key=24, kind="response", versions="0-5", flexible="3+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "4+"),
        F("results_by_transaction", "[]AddPartitionsToTxnResult", "4+", [
            F("transactional_id", "string", "4+"),
            _topic_results("topic_results", "4+"),
        ]),
        _topic_results("results_by_topic_v3_and_below", "0-3"),
    ],
)
