"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: the authentication gate, SaslHandshake and
SaslAuthenticate (KIP-152), and re-authentication (KIP-368).

Theory of operation. Each connection of a SASL listener has a `SaslSession`; the gate (`admit`) sees
every frame before it is parsed::

    HANDSHAKE --SaslHandshake v1 (mechanism enabled)--> AUTHENTICATE --token ok, done--> AUTHENTICATED
        |     --SaslHandshake v0 ---------------------> RAW (tokens are bare frames) --/
        |                                                   |  (failed: answer after the delay, close)
        +-- anything but ApiVersions / SaslHandshake / SaslAuthenticate: close, one log line

    AUTHENTICATED --SaslHandshake v1 (re-authentication)--> REAUTHENTICATING --ok--> AUTHENTICATED
                  --a request but SaslHandshake after the session expired (connections.max.reauth.ms)--> close
    REAUTHENTICATING --anything but SaslAuthenticate--> close, one log line

Re-authentication (KIP-368) is Kafka's: it is only possible where sessions expire
(``connections.max.reauth.ms`` above 0) and at most once a second; a SaslHandshake on an authenticated
connection otherwise is answered ILLEGAL_SASL_STATE and the connection stays as it was. While a
re-authentication is under way (``SaslSession.reauthenticating``) only SaslAuthenticate is served: any
other request closes the connection, as Kafka's authenticator does ("Unexpected Kafka request of type X
during SASL re-authentication.").

As Kafka's SaslServerAuthenticator: before authentication only ApiVersions, SaslHandshake and
SaslAuthenticate are served ("Unexpected Kafka request of type X during SASL handshake."); a mechanism
the listener does not enable (``sasl.enabled.mechanisms``) is answered UNSUPPORTED_SASL_MECHANISM and
the connection closed; a failed exchange is answered SASL_AUTHENTICATION_FAILED with Kafka's message
after ``connection.failed.authentication.delay.ms``, then the connection is closed, with one log line
naming the mechanism, the principal the client claimed and the peer (never a secret). Success sets
``Connection.principal`` to ``User:<name>``. A re-authentication must keep the mechanism and the
principal. A v0 handshake (kafka-python's legacy path) is followed by raw size-prefixed tokens, answered
the same way; a failure there closes the connection without an answer, as Kafka does.

Mechanisms: PLAIN checks the users of the listener's JAAS config (`kraftpy.security.jaas.plain_users`);
SCRAM-SHA-256/512 look the user up in the metadata image (UserScramCredentialRecord), so a credential
created with AlterUserScramCredentials works on a broker as soon as its metadata has it.
"""

from __future__ import annotations

import enum
import time
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs
import structlog
import trio

from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.frames import encode_response
from kraftpy.protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse
from kraftpy.rpc.kafka_server import BadRequest, Connection, send_parts
from kraftpy.security.jaas import JaasConfigError, parse_listener_jaas_config
from kraftpy.security.listener_sasl import (
    fail_hidden,
    jaas_key,
    jaas_login,
    listener_plain_users,
    mechanism_server,
)
from kraftpy.security.oauthbearer import (
    OAUTHBEARER,
    JwksValidator,
    OAuthBearerServer,
    RefreshingJwks,
    UnsecuredValidator,
    load_jwks,
)
from kraftpy.security.plain import PlainServer
from kraftpy.security.sasl import PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, Authenticated, Challenge, Failed
from kraftpy.security.scram import ScramServer

_logger = structlog.get_logger(__name__)

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)

#: What an unauthenticated connection may send.
_BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: A connection re-authenticates at most once in this many seconds (Kafka's MIN_REAUTH_INTERVAL_ONE_SECOND).
MIN_REAUTH_INTERVAL_S = 1.0


@attrs.frozen(repr=False)
class SaslListener:
    """What one SASL listener offers."""

    mechanisms: tuple[str, ...]
    #: PLAIN's {username: password}, from the listener's JAAS config.
    plain_users: Mapping[str, str] = attrs.field(factory=dict, converter=lambda v: MappingProxyType(dict(v)))
    #: connections.max.reauth.ms (0: sessions never expire).
    max_reauth_ms: int = 0
    #: OAUTHBEARER's token validator (kraftpy.security.oauthbearer), when the listener enables it.
    oauth_validator: Any = attrs.field(default=None, eq=False)

    def __repr__(self) -> str:  # plain_users holds passwords
        return f"SaslListener({self.mechanisms}, users={sorted(self.plain_users)}, max_reauth_ms={self.max_reauth_ms})"


@attrs.frozen
class SaslSettings:
    #: By listener name (upper case); only SASL_PLAINTEXT and SASL_SSL listeners.
    listeners: Mapping[str, SaslListener] = attrs.field(factory=dict)
    #: connection.failed.authentication.delay.ms
    failed_authentication_delay_ms: int = 100

    @classmethod
    def from_config(cls, config: Any) -> SaslSettings:
        listeners = {}
        for listener in config.broker_listeners:
            if config.security_protocol(listener.name) not in SASL_PROTOCOLS:
                continue
            listeners[listener.name] = SaslListener(
                tuple(config.listener_value(listener.name, "sasl.enabled.mechanisms")),
                plain_users=listener_plain_users(config, listener.name),
                max_reauth_ms=config.listener_value(listener.name, "connections.max.reauth.ms"),
                oauth_validator=_oauth_validator(config, listener.name),
            )
        return cls(listeners, config["connection.failed.authentication.delay.ms"])


def _oauth_validator(config: Any, listener: str) -> Any:
    """OAUTHBEARER's validator of a listener that enables it: JWKS signature validation when
    sasl.oauthbearer.jwks.endpoint.url is set, else Kafka's unsecured validator (development only)."""
    if OAUTHBEARER not in config.listener_value(listener, "sasl.enabled.mechanisms"):
        return None
    url = config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.url")
    if url:
        try:
            keys = load_jwks(url)
        except ValueError as exc:
            raise config.fail(config.listener_key(listener, "sasl.oauthbearer.jwks.endpoint.url"), str(exc)) from None
        issuer = config.listener_value(listener, "sasl.oauthbearer.expected.issuer")
        keys = RefreshingJwks(
            url, keys, refresh_ms=config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.refresh.ms"),
            retry_backoff_ms=config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"),
            retry_backoff_max_ms=config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"))
        return JwksValidator(keys, tuple(config.listener_value(listener, "sasl.oauthbearer.expected.audience")),
                             issuer or None, config.listener_value(listener, "sasl.oauthbearer.sub.claim.name"),
                             config.listener_value(listener, "sasl.oauthbearer.scope.claim.name"),
                             config.listener_value(listener, "sasl.oauthbearer.clock.skew.seconds"))
    key = jaas_key(config, listener, OAUTHBEARER)
    options: dict[str, str] = {}
    if key is not None:
        try:
            options = parse_listener_jaas_config(config.values[key]).options
            return UnsecuredValidator.from_jaas_options(options)
        except (JaasConfigError, ValueError) as exc:
            raise fail_hidden(config, key, str(exc)) from None
    return UnsecuredValidator()


def inter_broker_login(config: Any) -> Any:
    """What this broker authenticates with on the other brokers' inter-broker listener when it is a SASL
    one: sasl.mechanism.inter.broker.protocol and the username/password of that listener's JAAS config
    for it; None on a listener without SASL. A SASL listener without them stops the process."""
    from kraftpy.broker.client import SaslLogin

    inter = config.inter_broker_listener_name
    if config.security_protocol(inter) not in SASL_PROTOCOLS:
        return None
    mechanism = config["sasl.mechanism.inter.broker.protocol"]
    login = jaas_login(config, inter, mechanism)
    if login is None:
        key = f"listener.name.{inter.lower()}.{mechanism.lower()}.sasl.jaas.config"
        raise fail_hidden(config, key, f"the inter-broker listener {inter} is {config.security_protocol(inter)}: "
                                       f"its JAAS config for {mechanism} needs username and password for this broker")
    return SaslLogin(mechanism, *login)


class _State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW = "raw"
    AUTHENTICATED = "authenticated"


class SaslSession:
    """One connection's SASL state (see the module doc)."""

    def __init__(self) -> None:
        self.state = _State.HANDSHAKE
        self.mechanism: str | None = None
        self.server: PlainServer | ScramServer | None = None
        #: Set once authenticated: ``User:<name>``.
        self.principal: str | None = None
        #: trio clock time the session ends (None: never).
        self.expires_at: float | None = None
        #: Whether the exchange under way is a re-authentication.
        self.reauthenticating = False
        #: trio clock time the last re-authentication began (Kafka allows one a second).
        self.reauthentication_began: float | None = None


def _is_sasl(conn: Connection) -> bool:
    # A connection-like object without a protocol (an embedding's or a test's) is a plaintext one.
    return getattr(conn, "security_protocol", "PLAINTEXT") in SASL_PROTOCOLS


def _request_name(api_key: int) -> str:
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"api key {api_key}"


class SaslApi:
    """The gate and the SASL handlers of a broker. ``lookup_scram(name, mechanism_code)`` gives the
    image's UserScramCredentialRecord or None."""

    def __init__(self, settings: SaslSettings, lookup_scram: Callable[[str, int], Any], *, node_id: int = -1,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self.settings = settings
        self._lookup_scram = lookup_scram
        self._clock = clock
        self._log = _logger.bind(node_id=node_id)
        self._sessions: weakref.WeakKeyDictionary[Connection, SaslSession] = weakref.WeakKeyDictionary()

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.SASL_HANDSHAKE: self.handle_sasl_handshake,
                ApiKey.SASL_AUTHENTICATE: self.handle_sasl_authenticate}

    def session(self, conn: Connection) -> SaslSession:
        session = self._sessions.get(conn)
        if session is None:
            session = self._sessions[conn] = SaslSession()
        return session

    def _listener(self, conn: Connection) -> SaslListener | None:
        if not _is_sasl(conn):
            return None
        return self.settings.listeners.get(conn.listener.upper()) or SaslListener(SUPPORTED_MECHANISMS)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Keep every listener's OAUTHBEARER key set fresh (kraftpy.security.oauthbearer.RefreshingJwks)
        until cancelled; returns at once when no listener has one."""
        async with trio.open_nursery() as nursery:
            for name, listener in sorted(self.settings.listeners.items()):
                keys = getattr(listener.oauth_validator, "keys", None)
                if isinstance(keys, RefreshingJwks):
                    await nursery.start(keys.run, self._log.bind(listener=name))
            task_status.started()

    # -- the gate ---------------------------------------------------------------------------------

    async def admit(self, frame: bytes | memoryview, conn: Connection) -> list | None:
        """Called with every frame before it is parsed: None to serve it, the parts to send instead (a
        raw token's answer), or `BadRequest` to close the connection."""
        if not _is_sasl(conn):
            return None
        session = self.session(conn)
        if session.state is _State.RAW:
            return await self._raw_token(bytes(frame), conn, session)
        api_key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
        if session.state is _State.AUTHENTICATED:
            if session.reauthenticating:
                if api_key == ApiKey.SASL_AUTHENTICATE:
                    return None
                raise BadRequest(f"Unexpected Kafka request of type {_request_name(api_key)} during SASL "
                                 f"re-authentication.")
            if (session.expires_at is not None and self._clock() >= session.expires_at
                    and api_key != ApiKey.SASL_HANDSHAKE):
                raise BadRequest(f"SASL session of {session.principal} expired (connections.max.reauth.ms) "
                                 f"without re-authentication; {_request_name(api_key)} refused")
            return None
        if api_key in _BEFORE_AUTHENTICATION:
            return None
        raise BadRequest(f"Unexpected Kafka request of type {_request_name(api_key)} during SASL handshake.")

    # -- SaslHandshake ----------------------------------------------------------------------------

    async def handle_sasl_handshake(self, header: Any, request: Any, conn: Connection) -> SaslHandshakeResponse:
        listener = self._listener(conn)
        if listener is None:
            return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
        session = self.session(conn)
        mechanisms = list(listener.mechanisms)
        reauthenticating = session.state is _State.AUTHENTICATED
        if reauthenticating:
            now = self._clock()
            if session.expires_at is None or (session.reauthentication_began is not None
                                              and now - session.reauthentication_began < MIN_REAUTH_INTERVAL_S):
                # No re-authentication here (sessions do not expire) or not yet again: Kafka answers the
                # handshake as a request like any other, refused, and the session goes on as it was.
                return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechanisms)
            session.reauthentication_began = now
        if session.state in (_State.AUTHENTICATE, _State.RAW) or (reauthenticating and header.request_api_version < 1):
            await self._answer_and_close(header, conn, SaslHandshakeResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechanisms),
                f"SaslHandshake received in SASL state {session.state.value}")
        mechanism = request.mechanism
        if mechanism not in listener.mechanisms:
            await self._answer_and_close(header, conn, SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms),
                f"Unsupported SASL mechanism {mechanism!r} (enabled: {', '.join(mechanisms)})")
        if reauthenticating and mechanism != session.mechanism:
            await self._answer_and_close(header, conn, SaslHandshakeResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechanisms),
                f"SASL mechanism changed from {session.mechanism} to {mechanism} during re-authentication")
        session.mechanism = mechanism
        session.reauthenticating = reauthenticating
        session.server = self._mechanism_server(mechanism, listener, reauthenticating)
        if not reauthenticating:
            session.state = _State.AUTHENTICATE if header.request_api_version >= 1 else _State.RAW
        return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=mechanisms)

    def _mechanism_server(self, mechanism: str, listener: SaslListener, reauthentication: bool) -> Any:
        if mechanism == OAUTHBEARER:
            return OAuthBearerServer(listener.oauth_validator or UnsecuredValidator())
        return mechanism_server(mechanism, listener.plain_users, self._lookup_scram, reauthentication=reauthentication)

    # -- SaslAuthenticate -------------------------------------------------------------------------

    async def handle_sasl_authenticate(self, header: Any, request: Any, conn: Connection) -> SaslAuthenticateResponse:
        session = self.session(conn)
        listener = self._listener(conn)
        exchanging = session.server is not None and (
            session.state is _State.AUTHENTICATE or (session.state is _State.AUTHENTICATED and session.reauthenticating))
        if listener is None or not exchanging:
            await self._answer_and_close(header, conn, SaslAuthenticateResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message="Unexpected SaslAuthenticate request",
                auth_bytes=b""), "SaslAuthenticate without a SaslHandshake before it")
        assert session.server is not None and listener is not None
        outcome = session.server.respond(bytes(request.auth_bytes))
        if isinstance(outcome, Challenge):
            return SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None, auth_bytes=outcome.data)
        if isinstance(outcome, Authenticated):
            principal = f"User:{outcome.username}"
            if session.reauthenticating and principal != session.principal:
                outcome = Failed(f"Cannot change principals during re-authentication from {session.principal}: "
                                 f"{principal}", "principal changed during re-authentication")
            else:
                lifetime_ms = self._open_session(session, conn, principal, listener)
                response = SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None,
                                                    auth_bytes=outcome.data)
                if header.request_api_version >= 1:
                    response.session_lifetime_ms = lifetime_ms
                return response
        assert isinstance(outcome, Failed)
        await self._fail(header, conn, session, outcome)
        raise AssertionError("unreachable")  # _fail closes the connection

    def _open_session(self, session: SaslSession, conn: Connection, principal: str, listener: SaslListener) -> int:
        reauthenticated = session.reauthenticating
        token_expires_at = getattr(session.server, "expires_at", None)
        session.state = _State.AUTHENTICATED
        session.principal = conn.principal = principal
        authenticated = getattr(conn, "on_authenticated", None)
        if authenticated is not None:
            conn.on_authenticated = None
            authenticated()  # frames of up to socket.request.max.bytes from now on
        session.reauthenticating = False
        session.server = None
        lifetime_ms = listener.max_reauth_ms
        if lifetime_ms > 0 and token_expires_at is not None:  # an OAUTHBEARER session ends with its token
            lifetime_ms = max(0, min(lifetime_ms, int((token_expires_at - time.time()) * 1000)))
        # (A token at its end makes a session of 0 ms: expired at once, not one that never ends.)
        session.expires_at = self._clock() + lifetime_ms / 1000 if listener.max_reauth_ms > 0 else None
        self._log.debug("SASL re-authenticated" if reauthenticated else "SASL authenticated",
                        mechanism=session.mechanism, principal=principal, peer=conn.peer, listener=conn.listener)
        return lifetime_ms

    async def _fail(self, header: Any, conn: Connection, session: SaslSession, outcome: Failed) -> None:
        await trio.sleep(self.settings.failed_authentication_delay_ms / 1000)
        claimed = getattr(session.server, "username", None)
        response = SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                            error_message=outcome.message, auth_bytes=b"")
        await self._answer_and_close(header, conn, response, _failure_line(session, claimed, outcome))

    async def _raw_token(self, token: bytes, conn: Connection, session: SaslSession) -> list:
        """A bare SASL token after a v0 SaslHandshake: answered as a bare size-prefixed token."""
        listener = self._listener(conn)
        assert session.server is not None and listener is not None
        outcome = session.server.respond(token)
        if isinstance(outcome, Failed):
            await trio.sleep(self.settings.failed_authentication_delay_ms / 1000)
            raise BadRequest(_failure_line(session, getattr(session.server, "username", None), outcome))
        if isinstance(outcome, Authenticated):
            self._open_session(session, conn, f"User:{outcome.username}", listener)
        return [len(outcome.data).to_bytes(4, "big"), outcome.data]

    async def _answer_and_close(self, header: Any, conn: Connection, response: Any, reason: str) -> None:
        """Send ``response`` now, then close the connection (`BadRequest`, logged once with ``reason``)."""
        parts = encode_response(header.correlation_id, header.request_api_key, header.request_api_version, response)
        try:
            await send_parts(conn.stream, parts)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        raise BadRequest(reason)


def _failure_line(session: SaslSession, claimed: str | None, outcome: Failed) -> str:
    during = "re-authentication" if session.reauthenticating else "authentication"
    who = f"User:{claimed}" if claimed else "an unnamed user"
    return f"SASL {during} failed: mechanism {session.mechanism}, principal {who}: {outcome.reason}"
