"""SASL/OAUTHBEARER (RFC 7628) as Kafka's OAuthBearerSaslServer runs it, with its two token validators.

The client's one message is ``n,[a=<authzid>],`` ^A ``auth=Bearer <token>`` ^A (``key=value`` ^A)* ^A
(^A is 0x01). The token is a JWS in compact form (``header.payload.signature``, base64url); its
subject claim names the principal (``User:<sub>``), its ``exp`` bounds the session. A token that does
not validate is answered with a JSON challenge (``{"status":"invalid_token"}``); the client answers
^A and the exchange fails with that JSON as the message, as in Kafka.

Validators (chosen per listener):

* `UnsecuredValidator` (Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, for development): the
  token must be unsigned (``alg`` ``none``, empty signature); ``exp`` is required, ``iat`` (when
  present) must not be in the future; options from the listener's JAAS config:
  ``unsecuredValidatorPrincipalClaimName`` (sub), ``unsecuredValidatorScopeClaimName`` (scope),
  ``unsecuredValidatorRequiredScope`` (space-separated), ``unsecuredValidatorAllowableClockSkewMs`` (0).
* `JwksValidator` (Kafka's OAuthBearerValidatorCallbackHandler): the signature (RS256/384/512,
  ES256/384/512) must verify with the key of the token's ``kid`` in the JSON Web Key Set of
  ``sasl.oauthbearer.jwks.endpoint.url`` (a ``file:`` URL here); ``exp`` and ``iat`` are required,
  ``sasl.oauthbearer.expected.audience`` / ``expected.issuer`` are checked when set, with
  ``sasl.oauthbearer.clock.skew.seconds`` of tolerance.

The key set is a `RefreshingJwks` (Kafka's RefreshingHttpsJwks): re-read every
``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and at once when a token names a kid it does not hold
(that token is refused; the client's next attempt finds the rotated key). A kid asked for in vain is not
asked for again within a minute. A read that fails keeps the keys held and is retried after
``sasl.oauthbearer.jwks.endpoint.retry.backoff.ms``, doubling up to ``...retry.backoff.max.ms``.

The server never raises on client input and never logs the token.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import attrs
import trio

from kraftpy.security.sasl import MAX_TOKEN_BYTES, Authenticated, Challenge, Failed, Outcome

OAUTHBEARER = "OAUTHBEARER"
_KVSEP = "\x01"


class InvalidToken(ValueError):
    """A token that does not validate; the message is one line for the log (never the token)."""


@attrs.frozen
class ValidToken:
    principal: str
    #: Expiry, in seconds since the epoch.
    expires_at: float
    scope: tuple[str, ...] = ()


def _b64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("token part is not base64url") from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _json_part(text: str, what: str) -> dict[str, Any]:
    # NaN and Infinity are Python's extensions, not JSON (Kafka's parser refuses them): a token with
    # exp NaN or Infinity would never expire. Nesting deeper than the parser's recursion is refused too.
    try:
        value = json.loads(_b64url(text), parse_constant=_not_json)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidToken(f"token {what} is not JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"token {what} is not a JSON object")
    return value


def _number(claims: Mapping[str, Any], name: str, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"required claim {name} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidToken(f"claim {name} is not a number")
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        raise InvalidToken(f"claim {name} is out of range") from None
    if not math.isfinite(number):  # 1e999 parses as infinity
        raise InvalidToken(f"claim {name} is not a finite number")
    return number


def _scope(claims: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = claims.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise InvalidToken(f"claim {name} is not a string or a list of strings")


def _check_times(claims: Mapping[str, Any], now: float, skew: float, *, require_iat: bool) -> float:
    exp = _number(claims, "exp", True)
    assert exp is not None
    if now - skew >= exp:
        raise InvalidToken("the token has expired")
    iat = _number(claims, "iat", require_iat)
    if iat is not None and iat - skew > now:
        raise InvalidToken("the token is issued in the future")
    nbf = _number(claims, "nbf", False)
    if nbf is not None and nbf - skew > now:
        raise InvalidToken("the token is not valid yet")
    return exp


def _subject(claims: Mapping[str, Any], name: str) -> str:
    sub = claims.get(name)
    if not isinstance(sub, str) or not sub.strip():
        raise InvalidToken(f"the principal claim {name} is missing or empty")
    return sub


@attrs.frozen
class UnsecuredValidator:
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_jaas_options(cls, options: Mapping[str, str]) -> UnsecuredValidator:
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "0")
        if not skew.isdigit():
            raise ValueError(f"unsecuredValidatorAllowableClockSkewMs={skew} is not a number of milliseconds")
        return cls(options.get("unsecuredValidatorPrincipalClaimName", "sub"),
                   options.get("unsecuredValidatorScopeClaimName", "scope"),
                   tuple(options.get("unsecuredValidatorRequiredScope", "").split()), int(skew))

    def validate(self, token: str, now: float) -> ValidToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("the token is not a JWS in compact form (3 parts)")
        header = _json_part(parts[0], "header")
        if header.get("alg") != "none" or parts[2]:
            raise InvalidToken("an unsecured token must have alg none and no signature")
        claims = _json_part(parts[1], "payload")
        exp = _check_times(claims, now, self.clock_skew_ms / 1000, require_iat=False)
        scope = _scope(claims, self.scope_claim)
        missing = [s for s in self.required_scope if s not in scope]
        if missing:
            raise InvalidToken(f"the token lacks the required scope {' '.join(missing)}")
        return ValidToken(_subject(claims, self.principal_claim), exp, scope)


# -- JWKS ------------------------------------------------------------------------------------------

_RSA_HASHES = {"RS256": "SHA256", "RS384": "SHA384", "RS512": "SHA512"}
_EC_ALGS = {"ES256": ("SHA256", "P-256", 32), "ES384": ("SHA384", "P-384", 48), "ES512": ("SHA512", "P-521", 66)}


def _int(value: str) -> int:
    return int.from_bytes(_b64url(value), "big")


def _public_key(jwk: Mapping[str, Any]) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    kty = jwk.get("kty")
    if kty == "RSA":
        return rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
    if kty == "EC":
        curve = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}[jwk["crv"]]
        return ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve).public_key()
    raise ValueError(f"key type {kty!r} is not supported (RSA, EC)")


def load_jwks(url: str) -> dict[str, tuple[str, Any]]:
    """The keys of a JSON Web Key Set at a ``file:`` URL, by kid: (kty, public key). ValueError (one line)
    for anything else."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise ValueError(f"only file: URLs are read here, not {parsed.scheme or 'a bare path'}")
    path = Path(unquote(parsed.path))
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise ValueError(f"{path} is not JSON") from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise ValueError(f"{path} is not a JSON Web Key Set (no keys list)")
    out = {}
    for jwk in keys:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        try:
            out[str(jwk.get("kid", ""))] = (jwk["kty"], _public_key(jwk))
        except (KeyError, ValueError, InvalidToken) as exc:
            raise ValueError(f"{path}: key {jwk.get('kid')!r} cannot be used: {exc}") from None
    return out


#: A kid a token named in vain does not trigger another read for this long (Kafka's
#: MISSING_KEY_ID_CACHE_IN_FLIGHT_MS), and at most this many such kids are remembered.
MISSING_KID_QUIET_S = 60.0
MISSING_KID_MAX = 16


class RefreshingJwks:
    """The keys of a JWKS file, kept fresh by `run` (see the module doc). Reads like the mapping
    `load_jwks` returns; `key_missing` is the validator's word that a token named an unknown kid."""

    def __init__(self, url: str, keys: Mapping[str, tuple[str, Any]], *, refresh_ms: int = 3_600_000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 10_000,
                 clock: Callable[[], float] = trio.current_time,
                 read: Callable[[], Awaitable[dict[str, tuple[str, Any]]]] | None = None) -> None:
        """``read`` reads the set (`load_jwks` of ``url`` in a worker thread when None)."""
        self.url = url
        self._read = read or functools.partial(trio.to_thread.run_sync, load_jwks, url)
        self._keys = dict(keys)
        self.refresh_ms = refresh_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._clock = clock
        #: kid -> when a token last named it in vain (trio clock), oldest first.
        self._missing: dict[str, float] = {}
        self._wake = trio.Event()
        #: Successful reads since start; `loaded` is set (and replaced) after each.
        self.reads = 0
        self.loaded = trio.Event()

    def get(self, kid: str, default: Any = None) -> Any:
        return self._keys.get(kid, default)

    def values(self) -> Any:
        return self._keys.values()

    def __len__(self) -> int:
        return len(self._keys)

    def key_missing(self, kid: str) -> None:
        """A token named ``kid`` and no key has it: read the set again soon, unless that kid was asked
        for in vain within the last minute."""
        now = self._clock()
        last = self._missing.get(kid)
        if last is not None and now - last < MISSING_KID_QUIET_S:
            return
        self._missing.pop(kid, None)
        while len(self._missing) >= MISSING_KID_MAX:
            del self._missing[next(iter(self._missing))]
        self._missing[kid] = now
        self._wake.set()

    async def refresh(self, log: Any) -> bool:
        """Read the set again; on success hold its keys (False, keys kept, when it cannot be read)."""
        try:
            keys = await self._read()
        except ValueError as exc:
            log.warning("JWKS not refreshed: keeping the keys held", url=self.url, error=str(exc),
                        kids=sorted(self._keys))
            return False
        if keys != self._keys:
            log.info("JWKS refreshed", url=self.url, kids=sorted(keys), added=sorted(set(keys) - set(self._keys)),
                     removed=sorted(set(self._keys) - set(keys)))
        self._keys = keys
        for kid in [k for k in self._missing if k in keys]:
            del self._missing[kid]
        self.reads += 1
        self.loaded.set()
        self.loaded = trio.Event()
        return True

    async def run(self, log: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Refresh every ``refresh_ms`` and when a kid is missing, until cancelled."""
        task_status.started()
        while True:
            with trio.move_on_after(self.refresh_ms / 1000):
                await self._wake.wait()
            self._wake = trio.Event()
            backoff = self.retry_backoff_ms
            while not await self.refresh(log):
                await trio.sleep(backoff / 1000)
                backoff = min(2 * backoff, self.retry_backoff_max_ms)


@attrs.frozen
class JwksValidator:
    #: kid -> (kty, public key): the mapping load_jwks gives, or a RefreshingJwks.
    keys: Mapping[str, tuple[str, Any]] | RefreshingJwks
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30

    def validate(self, token: str, now: float) -> ValidToken:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

        parts = token.split(".")
        if len(parts) != 3 or not parts[2]:
            raise InvalidToken("the token is not a signed JWS in compact form")
        header = _json_part(parts[0], "header")
        alg, kid = header.get("alg"), str(header.get("kid", ""))
        found = self.keys.get(kid) or (next(iter(self.keys.values())) if len(self.keys) == 1 and not kid else None)
        if found is None:
            if isinstance(self.keys, RefreshingJwks):
                self.keys.key_missing(kid)
            raise InvalidToken(f"no key with kid {kid!r} in the JWKS")
        kty, key = found
        signed, signature = f"{parts[0]}.{parts[1]}".encode("ascii"), _b64url(parts[2])
        try:
            if alg in _RSA_HASHES and kty == "RSA":
                key.verify(signature, signed, padding.PKCS1v15(), getattr(hashes, _RSA_HASHES[alg])())
            elif alg in _EC_ALGS and kty == "EC":
                hash_name, _curve, size = _EC_ALGS[alg]
                if len(signature) != 2 * size:
                    raise InvalidToken("the signature has the wrong length")
                der = encode_dss_signature(int.from_bytes(signature[:size], "big"),
                                           int.from_bytes(signature[size:], "big"))
                key.verify(der, signed, ec.ECDSA(getattr(hashes, hash_name)()))
            else:
                raise InvalidToken(f"algorithm {alg!r} is not accepted for a {kty} key")
        except InvalidSignature:
            raise InvalidToken("the token's signature does not verify") from None
        claims = _json_part(parts[1], "payload")
        exp = _check_times(claims, now, self.clock_skew_s, require_iat=True)
        if self.expected_issuer is not None and claims.get("iss") != self.expected_issuer:
            raise InvalidToken("the token's issuer is not the expected one")
        if self.expected_audience:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not set(auds) & set(self.expected_audience):
                raise InvalidToken("the token's audience is not an expected one")
        return ValidToken(_subject(claims, self.sub_claim), exp, _scope(claims, self.scope_claim))


# -- the server ------------------------------------------------------------------------------------


def client_message(token: str, authzid: str = "", extensions: Mapping[str, str] | None = None) -> bytes:
    """The client's one message (for tests and kraftpy's own clients)."""
    ext = "".join(f"{k}={v}{_KVSEP}" for k, v in (extensions or {}).items())
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}{_KVSEP}auth=Bearer {token}{_KVSEP}{ext}{_KVSEP}".encode()


class OAuthBearerServer:
    """One OAUTHBEARER exchange. ``validator`` has ``validate(token, now) -> ValidToken``. After
    `Authenticated`, ``expires_at`` is the token's expiry (seconds since the epoch)."""

    def __init__(self, validator: Any, *, clock: Callable[[], float] = time.time) -> None:
        self._validator = validator
        self._clock = clock
        self._error: str | None = None
        self._done = False
        self.username: str | None = None
        self.expires_at: float | None = None

    @property
    def done(self) -> bool:
        return self._done

    def respond(self, token: bytes) -> Outcome:
        if self._done:
            return Failed("Authentication failed: exchange already finished", "OAUTHBEARER exchange already finished")
        if self._error is not None:  # the client's answer to the error challenge ends the exchange
            self._done = True
            return Failed(self._error, self._reason)
        if len(token) > MAX_TOKEN_BYTES:
            return self._finish_failed(f"OAUTHBEARER message of {len(token)} bytes exceeds the limit")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            return self._finish_failed("OAUTHBEARER message is not UTF-8")
        if not text.startswith("n,") or _KVSEP not in text:
            return self._finish_failed("Invalid OAUTHBEARER client first message")
        gs2, _, rest = text.partition(_KVSEP)
        pieces = gs2.split(",")
        if len(pieces) != 3 or pieces[2] or (pieces[1] and not pieces[1].startswith("a=")):
            return self._finish_failed("Invalid OAUTHBEARER gs2 header")
        authzid = pieces[1][2:]
        if not rest.endswith(_KVSEP + _KVSEP) and rest != _KVSEP:
            return self._finish_failed("Invalid OAUTHBEARER client first message")
        pairs = {}
        for item in rest.split(_KVSEP):
            if item:
                key, sep, value = item.partition("=")
                if not sep:
                    return self._finish_failed("Invalid OAUTHBEARER key/value pair")
                pairs[key] = value
        auth = pairs.pop("auth", "")
        scheme, _, bearer = auth.partition(" ")
        if scheme.lower() != "bearer" or not bearer.strip():
            return self._finish_failed("Invalid OAUTHBEARER auth value: no Bearer token")
        try:
            valid = self._validator.validate(bearer.strip(), self._clock())
        except InvalidToken as exc:
            self._error = json.dumps({"status": "invalid_token"}, separators=(",", ":"))
            self._reason = f"invalid token: {exc}"
            return Challenge(self._error.encode())
        except Exception:  # a broken validator must not take the connection's task down
            self._error = json.dumps({"status": "invalid_token"}, separators=(",", ":"))
            self._reason = "the token could not be validated"
            return Challenge(self._error.encode())
        self.username = valid.principal
        if authzid and authzid != valid.principal:
            return self._finish_failed(f"Authentication failed: Client requested an authorization id ({authzid}) "
                                       f"that is different from the token's principal name ({valid.principal})")
        self._done = True
        self.expires_at = valid.expires_at
        return Authenticated(valid.principal)

    def _finish_failed(self, message: str) -> Failed:
        self._done = True
        return Failed(message, message)
