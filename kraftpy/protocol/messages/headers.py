"""Request header v1-v2 and response header v0-v1.

Which one applies follows the message's flexible versions (see ``api_keys.py``). Request header v0 (only
ControlledShutdown v0 used it) is not supported. The client id keeps its int16 length even in v2 so that
any broker can read the header of any ApiVersions request.
"""

from kraftpy.protocol.schema import F, message

RequestHeader = message(
    "RequestHeader", kind="header", versions="1-2", flexible="2+", fields=[
        F("request_api_key", "int16"),
        F("request_api_version", "int16"),
        F("correlation_id", "int32"),
        F("client_id", "string", "1+", nullable="1+", flexible="none"),
    ],
)

ResponseHeader = message(
    "ResponseHeader", kind="header", versions="0-1", flexible="1+", fields=[
        F("correlation_id", "int32"),
    ],
)
