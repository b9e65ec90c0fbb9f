"""What a SASL server mechanism says after each client message (sans-IO).

A mechanism server (`kraftpy.security.scram.ScramServer`, `kraftpy.security.plain.PlainServer`) is
fed the client's tokens one at a time, as the bytes of SaslAuthenticate requests, and answers each
with exactly one of:

- `Challenge(data)`: send `data` back and wait for the client's next token;
- `Authenticated(username, data)`: the exchange is over and the client is `User:<username>`;
  `data` (possibly empty) goes back in the final SaslAuthenticate response;
- `Failed(message, reason)`: the exchange is over and the client is refused. `message` is the one
  line Kafka puts in the SaslAuthenticate response's error_message (SASL_AUTHENTICATION_FAILED);
  `reason` is the server-side detail for the log. Neither ever holds a secret.

After `Authenticated` or `Failed` every further token is answered `Failed`. A mechanism never raises
on client input and does bounded work per token (`MAX_TOKEN_BYTES`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
PLAIN = "PLAIN"

# Longest client token a mechanism here will parse. Kafka bounds a SASL receive at 512 KiB
# (SASL_SERVER_MAX_RECEIVE_SIZE); PLAIN and SCRAM tokens are a few hundred bytes, so anything
# larger is refused before it is decoded.
MAX_TOKEN_BYTES = 8192


@attrs.frozen
class Challenge:
    data: bytes


@attrs.frozen
class Authenticated:
    username: str
    data: bytes = b""


@attrs.frozen
class Failed:
    message: str
    reason: str


Outcome = Challenge | Authenticated | Failed


def invalid_credentials(mechanism: str, *, reauthentication: bool = False) -> str:
    """The message Kafka's SaslServerAuthenticator sends for a mechanism's generic failure."""
    during = "re-authentication" if reauthentication else "authentication"
    return f"Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism}"


@attrs.frozen(repr=False)
class SaslLogin:
    """Who a client authenticates as (a broker to the other brokers or to the controllers, a
    controller to the other controllers, a tool)."""

    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:  # never the password
        return f"SaslLogin({self.mechanism!r}, {self.username!r})"


async def authenticate_client(login: SaslLogin, step: Callable[[bytes], Awaitable[bytes]]) -> None:
    """The client side of a PLAIN or SCRAM exchange over any transport: ``step(token)`` sends one
    client token and returns the server's answer (raising when the server refuses). A SCRAM server
    whose final message does not prove it knows the credential raises
    `kraftpy.security.scram.ScramError`."""
    from kraftpy.security.plain import plain_message
    from kraftpy.security.scram import ScramClient

    if login.mechanism == PLAIN:
        await step(plain_message(login.username, login.password))
        return
    client = ScramClient(login.mechanism, login.username, login.password)
    server_first = await step(client.first_message())
    client.verify_server_final(await step(client.final_message(server_first)))
