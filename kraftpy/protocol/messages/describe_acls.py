"""DescribeAcls (api key 29), versions 0-3: the ACLs matching one filter, grouped by resource pattern."""

from kraftpy.protocol.schema import F, message

DescribeAclsRequest = message(
    "DescribeAclsRequest", api_key=29, kind="request", versions="0-3", flexible="2+", fields=[
        F("resource_type_filter", "int8"),
        F("resource_name_filter", "string", nullable="0+"),
        F("pattern_type_filter", "int8", "1+", default=3),
        F("principal_filter", "string", nullable="0+"),
        F("host_filter", "string", nullable="0+"),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ],
)

DescribeAclsResponse = message(
    "DescribeAclsResponse", api_key=29, kind="response", versions="0-3", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resources", "[]DescribeAclsResource", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=3),
            F("acls", "[]AclDescription", "0+", [
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)
