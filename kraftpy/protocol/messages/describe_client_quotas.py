"""DescribeClientQuotas (api key 48), versions 0-1: the client quotas matching a filter, answered by a broker."""

from kraftpy.protocol.schema import F, message

DescribeClientQuotasRequest = message(
    "DescribeClientQuotasRequest", api_key=48, kind="request", versions="0-1", flexible="1+", fields=[
        F("components", "[]ComponentData", "0+", [
            F("entity_type", "string"),
            F("match_type", "int8"),
            F("match", "string", nullable="0+"),
        ]),
        F("strict", "bool"),
    ],
)

DescribeClientQuotasResponse = message(
    "DescribeClientQuotasResponse", api_key=48, kind="response", versions="0-1", flexible="1+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("entries", "[]EntryData", "0+", [
            F("entity", "[]EntityData", "0+", [
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+"),
            ]),
            F("values", "[]ValueData", "0+", [
                F("key", "string"),
                F("value", "float64"),
            ]),
        ], nullable="0+"),
    ],
)
