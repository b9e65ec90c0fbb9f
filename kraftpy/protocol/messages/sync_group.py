"""SyncGroup (api key 14), versions 0-5: hand out (leader) and receive (every member) partition assignments."""

from kraftpy.protocol.schema import F, message

SyncGroupRequest = message(
    "SyncGroupRequest", api_key=14, kind="request", versions="0-5", flexible="4+", fields=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("protocol_type", "string", "5+", nullable="5+", default=None),
        F("protocol_name", "string", "5+", nullable="5+", default=None),
        F("assignments", "[]SyncGroupRequestAssignment", "0+", [
            F("member_id", "string"),
            F("assignment", "bytes"),
        ]),
    ],
)

SyncGroupResponse = message(
    "SyncGroupResponse", api_key=14, kind="response", versions="0-5", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("protocol_type", "string", "5+", nullable="5+", default=None),
        F("protocol_name", "string", "5+", nullable="5+", default=None),
        F("assignment", "bytes"),
    ],
)
