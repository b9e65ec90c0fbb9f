"""UnregisterBroker (api key 64), version 0: forget a broker that is gone for good (KIP-631).

An administrator sends it to any broker, which forwards it to the active controller (Kafka's
``kafka-cluster.sh unregister``); an id that is not registered is refused with BROKER_ID_NOT_REGISTERED.
"""

from kraftpy.protocol.schema import F, message

UnregisterBrokerRequest = message(
    "UnregisterBrokerRequest", api_key=64, kind="request", versions="0", flexible="0+", fields=[
        F("broker_id", "int32"),
    ],
)

UnregisterBrokerResponse = message(
    "UnregisterBrokerResponse", api_key=64, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ],
)
