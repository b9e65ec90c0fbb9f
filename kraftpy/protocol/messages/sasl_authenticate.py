"""SaslAuthenticate (api key 36), versions 0-2: one SASL token each way (KIP-152).

v1 adds ``session_lifetime_ms``: how long the session the exchange opened lasts before the client
must re-authenticate on the same connection (KIP-368, ``connections.max.reauth.ms``; 0: no limit).
"""

from kraftpy.protocol.schema import F, message

SaslAuthenticateRequest = message(
    "SaslAuthenticateRequest", api_key=36, kind="request", versions="0-2", flexible="2+", fields=[
        F("auth_bytes", "bytes"),
    ],
)

SaslAuthenticateResponse = message(
    "SaslAuthenticateResponse", api_key=36, kind="response", versions="0-2", flexible="2+", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("auth_bytes", "bytes"),
        F("session_lifetime_ms", "int64", "1+"),
    ],
)
