"""DeleteAcls (api key 31), versions 0-3: remove the ACLs matching filters (decided by the controller)."""

from kraftpy.protocol.schema import F, message

DeleteAclsRequest = message(
    "DeleteAclsRequest", api_key=31, kind="request", versions="0-3", flexible="2+", fields=[
        F("filters", "[]DeleteAclsFilter", "0+", [
            F("resource_type_filter", "int8"),
            F("resource_name_filter", "string", nullable="0+"),
            F("pattern_type_filter", "int8", "1+", default=3),
            F("principal_filter", "string", nullable="0+"),
            F("host_filter", "string", nullable="0+"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
)

DeleteAclsResponse = message(
    "DeleteAclsResponse", api_key=31, kind="response", versions="0-3", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("filter_results", "[]DeleteAclsFilterResult", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("matching_acls", "[]DeleteAclsMatchingAcl", "0+", [
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("pattern_type", "int8", "1+", default=3),
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)
