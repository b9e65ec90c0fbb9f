"""DescribeGroups (api key 15), versions 0-5: groups' state, protocol and members."""

from kraftpy.protocol.schema import F, message

DescribeGroupsRequest = message(
    "DescribeGroupsRequest", api_key=15, kind="request", versions="0-5", flexible="5+", fields=[
        F("groups", "[]string"),
        F("include_authorized_operations", "bool", "3+"),
    ],
)

DescribeGroupsResponse = message(
    "DescribeGroupsResponse", api_key=15, kind="response", versions="0-5", flexible="5+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("groups", "[]DescribedGroup", "0+", [
            F("error_code", "int16"),
            F("group_id", "string"),
            F("group_state", "string"),
            F("protocol_type", "string"),
            F("protocol_data", "string"),
            F("members", "[]DescribedGroupMember", "0+", [
                F("member_id", "string"),
                F("group_instance_id", "string", "4+", nullable="4+", default=None),
                F("client_id", "string"),
                F("client_host", "string"),
                F("member_metadata", "bytes"),
                F("member_assignment", "bytes"),
            ]),
            F("authorized_operations", "int32", "3+", default=-2147483648),
        ]),
    ],
)
