"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer runs them.

Theory of operation. SCRAM is three messages and an answer; the server keeps only a
`ScramCredential` per user (salt, iterations, StoredKey, ServerKey), never the password::

    client-first   C: n,[a=<authzid>],n=<saslname>,r=<cnonce>[,<ext>=<value>]*
    server-first   S: r=<cnonce><snonce>,s=<base64 salt>,i=<iterations>
    client-final   C: c=<base64 gs2 header>,r=<cnonce><snonce>[,<ext>=<value>]*,p=<base64 proof>
    server-final   S: v=<base64 ServerSignature>

    SaltedPassword  = PBKDF2-HMAC-H(UTF-8 password, salt, iterations)   (no SASLprep, as Kafka)
    ClientKey       = HMAC(SaltedPassword, "Client Key");  StoredKey = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The server recovers ClientKey from the proof, hashes it and compares the result with StoredKey
(`hmac.compare_digest`). `ScramServer` is a state machine with no I/O::

    AWAIT_CLIENT_FIRST --client-first ok--> AWAIT_CLIENT_FINAL --proof ok--> DONE (Authenticated)
            |                                      |
            +------------ anything wrong ----------+--------------------------> DONE (Failed)

Rules kept from Kafka: the gs2 header must be "n" (no channel binding); an authzid, when given,
must equal the username; `tokenauth=true` (delegation tokens) is refused, other extensions are
ignored; stored credentials below 4096 iterations are refused; an unknown user fails at the first
message with "Authentication failed: Invalid user credentials" in the log. Stricter than Kafka:
non-ASCII UTF-8 usernames are accepted (RFC 5802 allows them), the reserved `m=` attribute is
refused (RFC 5802 §5.1), and the client-final `c=` must be the client's own gs2 header.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable

import attrs

from kraftpy.security.sasl import (
    MAX_TOKEN_BYTES,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    Authenticated,
    Challenge,
    Failed,
    Outcome,
    invalid_credentials,
)

# Kafka's ScramMechanism bounds: credentials are created with 4096..16384 iterations, and
# a server refuses a stored credential below the minimum.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISMS = frozenset(_HASHES)

#: Kafka's ScramMechanism wire codes (AlterUserScramCredentials, UserScramCredentialRecord).
MECHANISM_CODES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}

AUTHZID_MISMATCH = "Authentication failed: Client requested an authorization id that is different from username"
INVALID_NONCE = "Invalid client nonce in the final client message."
UNKNOWN_USER = "Authentication failed: Invalid user credentials"


class ScramError(ValueError):
    """Raised by the client side (and by credential creation) on bad input; one line, no secret."""


class _Malformed(Exception):
    """Internal: a message does not follow the grammar; caught inside `ScramServer.respond`."""


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ScramError(f"unsupported SCRAM mechanism {mechanism!r} (supported: SCRAM-SHA-256, SCRAM-SHA-512)") from None


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def _salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations): what a client sends in
    AlterUserScramCredentials."""
    return _salted_password(_hash_name(mechanism), password, salt, iterations)


def new_nonce() -> str:
    """A fresh nonce: 32 printable characters from [A-Za-z0-9_-] (never ',')."""
    return secrets.token_urlsafe(24)


@attrs.frozen(repr=False)
class ScramCredential:
    """What a server stores for one user and mechanism (Kafka's ScramCredential)."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # keys are password equivalents for a server: keep them out of logs
        return f"ScramCredential(mechanism={self.mechanism!r}, iterations={self.iterations})"

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, salt: bytes | None = None, iterations: int = MIN_ITERATIONS
    ) -> ScramCredential:
        hash_name = _hash_name(mechanism)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(
                f"iterations={iterations} is outside {MIN_ITERATIONS}..{MAX_ITERATIONS} for {mechanism}"
            )
        if salt is None:
            salt = secrets.token_bytes(32)
        if not salt:
            raise ScramError("salt must not be empty")
        return cls.from_salted_password(mechanism, salt, _salted_password(hash_name, password, salt, iterations),
                                        iterations)

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of a SaltedPassword the client computed (AlterUserScramCredentials carries
        only the salt and SaltedPassword, never the password)."""
        hash_name = _hash_name(mechanism)
        salted = salted_password
        client_key = _hmac(hash_name, salted, b"Client Key")
        return cls(
            mechanism=mechanism,
            salt=salt,
            iterations=iterations,
            stored_key=hashlib.new(hash_name, client_key).digest(),
            server_key=_hmac(hash_name, salted, b"Server Key"),
        )


# --- grammar -------------------------------------------------------------------------------------


def escape_saslname(name: str) -> str:
    """RFC 5802 saslname: ',' becomes '=2C' and '=' becomes '=3D' (the '=' first)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(value: str) -> str:
    """Inverse of `escape_saslname`; raises _Malformed on an empty name, NUL or a bare '='."""
    if not value:
        raise _Malformed("empty saslname")
    out = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "=":
            code = value[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise _Malformed("'=' in a saslname not followed by 2C or 3D")
            i += 3
        elif ch == "\x00":
            raise _Malformed("NUL in a saslname")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _attr(part: str, name: str) -> str:
    if not part.startswith(name + "="):
        raise _Malformed(f"expected attribute {name}= but got {part[:2]!r}")
    return part[len(name) + 1 :]


def _printable(value: str, what: str) -> str:
    if not value or any(not 0x21 <= ord(c) <= 0x7E for c in value):  # ',' is excluded by the split
        raise _Malformed(f"{what} is empty or not printable ASCII")
    return value


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _Malformed(f"{what} is not valid base64") from None


def _extensions(parts: list[str]) -> dict[str, str]:
    """Kafka's extensions: ,<ALPHA+>=<value of %x01-7F>, names unique."""
    out: dict[str, str] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key.isascii() or not key.isalpha():
            raise _Malformed("extension is not <letters>=<value>")
        if not value or any(not 0x01 <= ord(c) <= 0x7F for c in value):
            raise _Malformed(f"extension {key} has an empty or non-ASCII value")
        if key in out:
            raise _Malformed(f"extension {key} given twice")
        out[key] = value
    return out


def _decode(token: bytes, what: str) -> str:
    if len(token) > MAX_TOKEN_BYTES:
        raise _Malformed(f"{what} of {len(token)} bytes exceeds the limit of {MAX_TOKEN_BYTES}")
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed(f"{what} is not UTF-8") from None


@attrs.frozen
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=<saslname>,", echoed base64 in the client-final c=
    authzid: str  # "" when not given
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # everything after the gs2 header: the first part of AuthMessage


def parse_client_first(text: str) -> ClientFirst:
    parts = text.split(",")
    if len(parts) < 4:
        raise _Malformed("client-first message has too few fields")
    flag, authz = parts[0], parts[1]
    if flag != "n":
        if flag == "y" or flag.startswith("p="):
            raise _Malformed("channel binding is not supported (gs2 header must start with 'n')")
        raise _Malformed("gs2 header must start with 'n'")
    authzid = unescape_saslname(_attr(authz, "a")) if authz else ""
    if parts[2].startswith("m="):
        raise _Malformed("mandatory extension m= is not supported")
    username = unescape_saslname(_attr(parts[2], "n"))
    nonce = _printable(_attr(parts[3], "r"), "client nonce")
    return ClientFirst(
        gs2_header=f"{flag},{authz},",
        authzid=authzid,
        username=username,
        nonce=nonce,
        extensions=_extensions(parts[4:]),
        bare=text[len(flag) + len(authz) + 2 :],
    )


@attrs.frozen
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str


def parse_client_final(text: str) -> ClientFinal:
    parts = text.split(",")
    if len(parts) < 3:
        raise _Malformed("client-final message has too few fields")
    channel_binding = _b64(_attr(parts[0], "c"), "channel binding")
    nonce = _printable(_attr(parts[1], "r"), "nonce")
    _extensions(parts[2:-1])
    proof = _b64(_attr(parts[-1], "p"), "proof")
    return ClientFinal(channel_binding, nonce, proof, text[: len(text) - len(parts[-1]) - 1])


# --- server --------------------------------------------------------------------------------------


class ScramServer:
    """One SCRAM exchange on the server side. Feed `respond` each client token; see module doc.

    `lookup(username)` returns the user's credential for this mechanism, or None for an unknown
    user (a `dict.get` will do). `server_nonce` is for reproducing fixed examples in tests.
    """

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        *,
        reauthentication: bool = False,
        server_nonce: Callable[[], str] = new_nonce,
    ) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._digest_size = hashlib.new(self._hash).digest_size
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._generic = invalid_credentials(mechanism, reauthentication=reauthentication)
        # Invariant: _client_first, _server_first and _credential are all set exactly while
        # waiting for the client-final message.
        self._client_first: ClientFirst | None = None
        self._server_first: str | None = None
        self._credential: ScramCredential | None = None
        self._done = False
        # The name the client gave, once its first message parsed (for logging a failure).
        self.username: str | None = None

    @property
    def done(self) -> bool:
        return self._done

    def respond(self, token: bytes) -> Outcome:
        if self._done:
            return self._fail(self._generic, "SCRAM exchange already finished")
        try:
            if self._client_first is None:
                return self._handle_client_first(_decode(token, "client-first message"))
            return self._handle_client_final(_decode(token, "client-final message"))
        except _Malformed as e:
            return self._fail(self._generic, f"Invalid SCRAM message: {e}")

    def _fail(self, message: str, reason: str) -> Failed:
        self._done = True
        self._client_first = self._server_first = self._credential = None
        return Failed(message, reason)

    def _handle_client_first(self, text: str) -> Outcome:
        first = parse_client_first(text)
        self.username = first.username
        if first.extensions.get("tokenauth", "").lower() == "true":
            return self._fail(self._generic, "delegation token authentication (tokenauth) is not supported")
        try:
            credential = self._lookup(first.username)
        except Exception:  # a broken credential store must not take the connection's task down
            return self._fail(self._generic, "Authentication failed: Credentials could not be obtained")
        if credential is None or credential.mechanism != self.mechanism:
            return self._fail(self._generic, UNKNOWN_USER)
        if first.authzid and first.authzid != first.username:
            return self._fail(AUTHZID_MISMATCH, AUTHZID_MISMATCH)
        if credential.iterations < MIN_ITERATIONS:
            return self._fail(
                self._generic,
                f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} for {self.mechanism}",
            )
        if len(credential.stored_key) != self._digest_size or not credential.salt:
            return self._fail(self._generic, f"stored credential is not a {self.mechanism} credential")
        nonce = first.nonce + self._server_nonce()
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={nonce},s={salt},i={credential.iterations}"
        self._client_first = first
        self._credential = credential
        return Challenge(self._server_first.encode("ascii"))

    def _handle_client_final(self, text: str) -> Outcome:
        first, server_first, credential = self._client_first, self._server_first, self._credential
        assert first is not None and server_first is not None and credential is not None
        final = parse_client_final(text)
        if final.nonce != server_first[2 : server_first.index(",")]:
            return self._fail(INVALID_NONCE, INVALID_NONCE)
        if final.channel_binding != first.gs2_header.encode("utf-8"):
            return self._fail(self._generic, "channel binding data does not match the gs2 header")
        if len(final.proof) != self._digest_size:
            return self._fail(self._generic, "Invalid client credentials")
        auth_message = f"{first.bare},{server_first},{final.without_proof}".encode()
        client_signature = _hmac(self._hash, credential.stored_key, auth_message)
        client_key = _xor(final.proof, client_signature)
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            return self._fail(self._generic, "Invalid client credentials")
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        self._done = True
        self._client_first = self._server_first = self._credential = None
        return Authenticated(first.username, b"v=" + base64.b64encode(server_signature))


# --- client --------------------------------------------------------------------------------------


class ScramClient:
    """The client side of one exchange: `first_message()`, `final_message(server_first)`,
    then `verify_server_final(server_final)`. Raises ScramError on anything wrong."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        authzid: str = "",
        nonce: str | None = None,
        extensions: dict[str, str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._password = password
        self._nonce = nonce if nonce is not None else new_nonce()
        gs2 = f"n,a={escape_saslname(authzid)}," if authzid else "n,,"
        ext = "".join(f",{k}={v}" for k, v in (extensions or {}).items())
        self._gs2_header = gs2
        self._bare = f"n={escape_saslname(username)},r={self._nonce}{ext}"
        self._server_signature: bytes | None = None

    def first_message(self) -> bytes:
        return (self._gs2_header + self._bare).encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        try:
            text = _decode(server_first, "server-first message")
            parts = text.split(",")
            if len(parts) < 3:
                raise _Malformed("server-first message has too few fields")
            if parts[0].startswith("m="):
                raise _Malformed("mandatory extension m= is not supported")
            nonce = _printable(_attr(parts[0], "r"), "nonce")
            salt = _b64(_attr(parts[1], "s"), "salt")
            iterations_text = _attr(parts[2], "i")
            if not iterations_text.isascii() or not iterations_text.isdigit() or len(iterations_text) > 9:
                raise _Malformed("iteration count is not a number")
        except _Malformed as e:
            raise ScramError(f"invalid SCRAM server-first message: {e}") from None
        iterations = int(iterations_text)
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("invalid SCRAM server-first message: nonce does not extend the client nonce")
        if not salt:
            raise ScramError("invalid SCRAM server-first message: empty salt")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(f"server asked for {iterations} iterations, outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        salted = _salted_password(self._hash, self._password, salt, iterations)
        client_key = _hmac(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        channel = base64.b64encode(self._gs2_header.encode("utf-8")).decode("ascii")
        without_proof = f"c={channel},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = _xor(client_key, _hmac(self._hash, stored_key, auth_message))
        self._server_signature = _hmac(self._hash, _hmac(self._hash, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("ascii")

    def verify_server_final(self, server_final: bytes) -> None:
        if self._server_signature is None:
            raise ScramError("server-final message before the client-final message")
        try:
            text = _decode(server_final, "server-final message")
            first = text.split(",")[0]
            if first.startswith("e="):
                raise ScramError(f"server refused SCRAM authentication: {first[2:]}")
            signature = _b64(_attr(first, "v"), "server signature")
        except _Malformed as e:
            raise ScramError(f"invalid SCRAM server-final message: {e}") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise ScramError("invalid SCRAM server signature: the server does not know the credential")
