"""LeaveGroup (api key 13), versions 0-5: leave a consumer group."""

from kraftpy.protocol.schema import F, message

LeaveGroupRequest = message(
    "LeaveGroupRequest", api_key=13, kind="request", versions="0-5", flexible="4+", fields=[
        F("group_id", "string"),
        F("member_id", "string", "0-2"),
        F("members", "[]MemberIdentity", "3+", [
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", nullable="3+", default=None),
            F("reason", "string", "5+", nullable="5+", default=None),
        ]),
    ],
)

LeaveGroupResponse = message(
    "LeaveGroupResponse", api_key=13, kind="response", versions="0-5", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("members", "[]MemberResponse", "3+", [
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", nullable="3+"),
            F("error_code", "int16", "3+"),
        ]),
    ],
)
