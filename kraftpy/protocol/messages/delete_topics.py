"""DeleteTopics (api key 20), versions 1-6: delete topics."""

from kraftpy.protocol.schema import F, message

DeleteTopicsRequest = message(
    "DeleteTopicsRequest", api_key=20, kind="request", versions="1-6", flexible="4+", fields=[
        F("topics", "[]DeleteTopicState", "6+", [
            F("name", "string", "6+", nullable="6+", default=None),
            F("topic_id", "uuid", "6+"),
        ]),
        F("topic_names", "[]string", "0-5"),
        F("timeout_ms", "int32"),
    ],
)

DeleteTopicsResponse = message(
    "DeleteTopicsResponse", api_key=20, kind="response", versions="1-6", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("responses", "[]DeletableTopicResult", "0+", [
            F("name", "string", nullable="6+"),
            F("topic_id", "uuid", "6+"),
            F("error_code", "int16"),
            F("error_message", "string", "5+", nullable="5+", default=None),
        ]),
    ],
)
