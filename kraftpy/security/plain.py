"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer runs it.

One client token, "authzid NUL authcid NUL passwd" in UTF-8, and one answer. Kafka's rules: the
username and password must be non-empty, the authzid must be empty or equal to the username, and
the password is checked by a callback (Kafka's PlainServerCallbackHandler compares it in constant
time with the `user_<name>` option of the listener's JAAS config; see `kraftpy.security.jaas`).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

from kraftpy.security.sasl import MAX_TOKEN_BYTES, PLAIN, Authenticated, Failed, Outcome, invalid_credentials

AUTHZID_MISMATCH = "Authentication failed: Client requested an authorization id that is different from username"
INVALID_USER_OR_PASSWORD = "Authentication failed: Invalid username or password"

PasswordCheck = Callable[[str, str], bool]


def users_check(users: Mapping[str, str]) -> PasswordCheck:
    """A password check against a {username: password} table, compared in constant time."""

    def check(username: str, password: str) -> bool:
        expected = users.get(username)
        if expected is None:
            return False
        return hmac.compare_digest(expected.encode("utf-8"), password.encode("utf-8"))

    return check


def plain_message(username: str, password: str, authzid: str = "") -> bytes:
    """The client's one token (for tests and the admin tool)."""
    return f"{authzid}\x00{username}\x00{password}".encode()


class PlainServer:
    """One PLAIN exchange. `users` is a {username: password} table or a `(username, password) ->
    bool` check. Feed the client's token to `respond`; see `kraftpy.security.sasl` for outcomes."""

    def __init__(self, users: Mapping[str, str] | PasswordCheck, *, reauthentication: bool = False) -> None:
        self._check: PasswordCheck = users_check(users) if isinstance(users, Mapping) else users
        self._generic = invalid_credentials(PLAIN, reauthentication=reauthentication)
        self._done = False
        # The name the client gave, once its token parsed (for logging a failure).
        self.username: str | None = None

    @property
    def done(self) -> bool:
        return self._done

    def respond(self, token: bytes) -> Outcome:
        if self._done:
            return Failed(self._generic, "PLAIN exchange already finished")
        self._done = True
        if len(token) > MAX_TOKEN_BYTES:
            return Failed(self._generic, f"PLAIN message of {len(token)} bytes exceeds the limit of {MAX_TOKEN_BYTES}")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            return Failed(self._generic, "Invalid SASL/PLAIN response: not UTF-8")
        tokens = text.split("\x00")
        if len(tokens) != 3:
            message = f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(tokens), 4)}"
            return Failed(message, message)
        authzid, username, password = tokens
        self.username = username or None
        if not username:
            return Failed("Authentication failed: username not specified", "username not specified")
        if not password:
            return Failed("Authentication failed: password not specified", f"password not specified for {username!r}")
        try:
            ok = self._check(username, password)
        except Exception:  # a broken user store must not take the connection's task down
            message = "Authentication failed: credentials for user could not be verified"
            return Failed(message, f"{message} ({username!r})")
        if not ok:
            return Failed(INVALID_USER_OR_PASSWORD, f"{INVALID_USER_OR_PASSWORD} ({username!r})")
        if authzid and authzid != username:
            return Failed(AUTHZID_MISMATCH, f"{AUTHZID_MISMATCH} ({username!r} asked for {authzid!r})")
        return Authenticated(username)
