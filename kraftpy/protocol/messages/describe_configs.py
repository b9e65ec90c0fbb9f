"""DescribeConfigs (api key 32), versions 1-4: read broker and topic configuration."""

from kraftpy.protocol.schema import F, message

DescribeConfigsRequest = message(
    "DescribeConfigsRequest", api_key=32, kind="request", versions="1-4", flexible="4+", fields=[
        F("resources", "[]DescribeConfigsResource", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configuration_keys", "[]string", nullable="0+"),
        ]),
        F("include_synonyms", "bool", "1+", default=False),
        F("include_documentation", "bool", "3+", default=False),
    ],
)

DescribeConfigsResponse = message(
    "DescribeConfigsResponse", api_key=32, kind="response", versions="1-4", flexible="4+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", "[]DescribeConfigsResult", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]DescribeConfigsResourceResult", "0+", [
                F("name", "string"),
                F("value", "string", nullable="0+"),
                F("read_only", "bool"),
                F("config_source", "int8", "1+", default=-1),
                F("is_sensitive", "bool"),
                F("synonyms", "[]DescribeConfigsSynonym", "1+", [
                    F("name", "string", "1+"),
                    F("value", "string", "1+", nullable="0+"),
                    F("source", "int8", "1+"),
                ]),
                F("config_type", "int8", "3+", default=0),
                F("documentation", "string", "3+", nullable="0+"),
            ]),
        ]),
    ],
)
