"""Heartbeat (api key 12), versions 0-4: keep a group membership alive."""

from kraftpy.protocol.schema import F, message

HeartbeatRequest = message(
    "HeartbeatRequest", api_key=12, kind="request", versions="0-4", flexible="4+", fields=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
    ],
)

HeartbeatResponse = message(
    "HeartbeatResponse", api_key=12, kind="response", versions="0-4", flexible="4+", fields=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
    ],
)
