"""JoinGroup (api key 11), versions 0-9: join a consumer group, the first step of a rebalance."""

from kraftpy.protocol.schema import F, message

JoinGroupRequest = message(
    "JoinGroupRequest", api_key=11, kind="request", versions="0-9", flexible="6+", fields=[
        F("group_id", "string"),
        F("session_timeout_ms", "int32"),
        F("rebalance_timeout_ms", "int32", "1+", default=-1),
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", nullable="5+", default=None),
        F("protocol_type", "string"),
        F("protocols", "[]JoinGroupRequestProtocol", "0+", [
            F("name", "string"),
            F("metadata", "bytes"),
        ]),
        F("reason", "string", "8+", nullable="8+", default=None),
    ],
)

JoinGroupResponse = message(
    "JoinGroupResponse", api_key=11, kind="response", versions="0-9", flexible="6+", fields=[
        F("throttle_time_ms", "int32", "2+"),
        F("error_code", "int16"),
        F("generation_id", "int32", default=-1),
        F("protocol_type", "string", "7+", nullable="7+", default=None),
        F("protocol_name", "string", nullable="7+"),
        F("leader", "string"),
        F("skip_assignment", "bool", "9+", default=False),
        F("member_id", "string"),
        F("members", "[]JoinGroupResponseMember", "0+", [
            F("member_id", "string"),
            F("group_instance_id", "string", "5+", nullable="5+", default=None),
            F("metadata", "bytes"),
        ]),
    ],
)
