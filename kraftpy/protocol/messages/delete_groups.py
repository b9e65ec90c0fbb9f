"""DeleteGroups (api key 42), versions 0-2: delete empty consumer groups."""

from kraftpy.protocol.schema import F, message

DeleteGroupsRequest = message(
    "DeleteGroupsRequest", api_key=42, kind="request", versions="0-2", flexible="2+", fields=[
        F("groups_names", "[]string"),
    ],
)

DeleteGroupsResponse = message(
    "DeleteGroupsResponse", api_key=42, kind="response", versions="0-2", flexible="2+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", "[]DeletableGroupResult", "0+", [
            F("group_id", "string"),
            F("error_code", "int16"),
        ]),
    ],
)
