"""CreateAcls (api key 30), versions 0-3: add ACLs (decided by the controller)."""

from kraftpy.protocol.schema import F, message

CreateAclsRequest = message(
    "CreateAclsRequest", api_key=30, kind="request", versions="0-3", flexible="2+", fields=[
        F("creations", "[]AclCreation", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("resource_pattern_type", "int8", "1+", default=3),
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
)

CreateAclsResponse = message(
    "CreateAclsResponse", api_key=30, kind="response", versions="0-3", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AclCreationResult", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ],
)
