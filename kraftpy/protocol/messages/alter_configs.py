"""AlterConfigs (api key 33), versions 0-2: replace the dynamic configuration of each resource with the one given."""

from kraftpy.protocol.schema import F, message

AlterConfigsRequest = message(
    "AlterConfigsRequest", api_key=33, kind="request", versions="0-2", flexible="2+", fields=[
        F("resources", "[]AlterConfigsResource", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]AlterableConfig", "0+", [
                F("name", "string"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
)

AlterConfigsResponse = message(
    "AlterConfigsResponse", api_key=33, kind="response", versions="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("responses", "[]AlterConfigsResourceResponse", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)
