"""IncrementalAlterConfigs (api key 44), versions 0-1: set, delete, append to or subtract from configuration entries."""

from kraftpy.protocol.schema import F, message

IncrementalAlterConfigsRequest = message(
    "IncrementalAlterConfigsRequest", api_key=44, kind="request", versions="0-1", flexible="1+", fields=[
        F("resources", "[]AlterConfigsResource", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configs", "[]AlterableConfig", "0+", [
                F("name", "string"),
                F("config_operation", "int8"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
)

IncrementalAlterConfigsResponse = message(
    "IncrementalAlterConfigsResponse", api_key=44, kind="response", versions="0-1", flexible="1+", fields=[
        F("throttle_time_ms", "int32"),
        F("responses", "[]AlterConfigsResourceResponse", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)
