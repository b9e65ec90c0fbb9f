"""SaslHandshake (api key 17), versions 0-1: the client names the SASL mechanism it will use.

v0 (deprecated): the SASL tokens that follow are raw size-prefixed frames, without a request header.
v1: the tokens follow in SaslAuthenticate requests (KIP-152). The answer lists the mechanisms the
listener enables; a mechanism outside them is refused with UNSUPPORTED_SASL_MECHANISM.
"""

from kraftpy.protocol.schema import F, message

SaslHandshakeRequest = message(
    "SaslHandshakeRequest", api_key=17, kind="request", versions="0-1", flexible="none", fields=[
        F("mechanism", "string"),
    ],
)

SaslHandshakeResponse = message(
    "SaslHandshakeResponse", api_key=17, kind="response", versions="0-1", flexible="none", fields=[
        F("error_code", "int16"),
        F("mechanisms", "[]string"),
    ],
)
