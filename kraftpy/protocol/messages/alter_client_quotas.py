"""AlterClientQuotas (api key 49), versions 0-1: set or remove client quotas (forwarded to the controller)."""

from kraftpy.protocol.schema import F, message

AlterClientQuotasRequest = message(
    "AlterClientQuotasRequest", api_key=49, kind="request", versions="0-1", flexible="1+", fields=[
        F("entries", "[]EntryData", "0+", [
            F("entity", "[]EntityData", "0+", [
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+"),
            ]),
            F("ops", "[]OpData", "0+", [
                F("key", "string"),
                F("value", "float64"),
                F("remove", "bool"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
)

AlterClientQuotasResponse = message(
    "AlterClientQuotasResponse", api_key=49, kind="response", versions="0-1", flexible="1+", fields=[
        F("throttle_time_ms", "int32"),
        F("entries", "[]EntryData", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("entity", "[]EntityData", "0+", [
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+"),
            ]),
        ]),
    ],
)
