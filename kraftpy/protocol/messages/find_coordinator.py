"""FindCoordinator (api key 10), versions 0-6: which broker coordinates a consumer group or transactional id.

v5 (KIP-890: the client may be answered TRANSACTION_ABORTABLE) and v6 (KIP-932: key type 2, a share
group) are v4 on the wire."""

from kraftpy.protocol.schema import F, message

FindCoordinatorRequest = message(
    "FindCoordinatorRequest", api_key=10, kind="request", versions="0-6", flexible="3+", fields=[
        F("key", "string", "0-3"),
        F("key_type", "int8", "1+", default=0),
        F("coordinator_keys", "[]string", "4+"),
    ],
)

FindCoordinatorResponse = message(
    "FindCoordinatorResponse", api_key=10, kind="response", versions="0-6", flexible="3+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0-3"),
        F("error_message", "string", "1-3", nullable="1-3"),
        F("node_id", "int32", "0-3"),
        F("host", "string", "0-3"),
        F("port", "int32", "0-3"),
        F("coordinators", "[]Coordinator", "4+", [
            F("key", "string", "4+"),
            F("node_id", "int32", "4+"),
            F("host", "string", "4+"),
            F("port", "int32", "4+"),
            F("error_code", "int16", "4+"),
            F("error_message", "string", "4+", nullable="4+"),
        ]),
    ],
)
