"""ListGroups (api key 16), versions 0-5: the groups a broker coordinates (v5, KIP-848: and their type)."""

from kraftpy.protocol.schema import F, message

ListGroupsRequest = message(
    "ListGroupsRequest", api_key=16, kind="request", versions="0-5", flexible="3+", fields=[
        F("states_filter", "[]string", "4+"),
        F("types_filter", "[]string", "5+"),
    ],
)

ListGroupsResponse = message(
    "ListGroupsResponse", api_key=16, kind="response", versions="0-5", flexible="3+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("groups", "[]ListedGroup", "0+", [
            F("group_id", "string"),
            F("protocol_type", "string"),
            F("group_state", "string", "4+"),
            F("group_type", "string", "5+"),
        ]),
    ],
)
