"""Handshake attempts: SASL exchanges and TLS handshakes with one thing wrong, as scripts over one connection.

A frame of the Kafka-port fuzzing is bytes sent at once; a handshake is a conversation (the SCRAM
client-final depends on the server's nonce), so an `Attempt` is a script run against a fresh `Wire`.
Attempt *i* of seed *s* makes every choice from its own random source (``kraftpy-fuzz-handshake:s:i``)
before it connects, so it can be made again alone. Each says what must come of it:

* ``served``: a legitimate login (or mutual-TLS connection); a Metadata request after it must be answered;
* ``refused``: the exchange is wrong; the connection must end without serving a request after it;
* ``closed``: the connection must be closed (a TLS handshake never finished, a close_notify);
* ``any``: only that it ends (answered or closed) within the bound.

Classes (``Attempt.klass``) and what each sends are in docs/fuzzing.md ("Handshakes").
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import InvalidResponseError
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from kraftpy.security.oauthbearer import client_message as oauth_message
from kraftpy.security.plain import plain_message
from kraftpy.security.sasl import MAX_TOKEN_BYTES
from kraftpy.security.scram import ScramClient, escape_saslname
from tests.fuzz.frames import LyingBytes, LyingStr
from tests.fuzz.secure_target import OTHER_PASSWORD, OTHER_USER, PLAIN_USERS, SCRAM_PASSWORD, SCRAM_USERS
from tests.fuzz.wire import Wire, WrongCorrelation

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's socket.request.max.bytes default: the largest frame the target reads.
FRAME_LIMIT = 104857600


class Unexpected(Exception):
    """The broker answered something the attempt could not go on from (it is judged, not a failure)."""


@attrs.define
class Attempt:
    index: int
    #: The listener: SASL_SSL, SASL_PLAINTEXT or MTLS (report key "port").
    port: str
    #: The mechanism, or "TLS".
    api: str
    klass: str
    detail: str
    expect: str  # served | refused | closed | any
    script: Callable[[Ctx], Awaitable[str]] = attrs.field(repr=False)
    #: TLS client: None (plain TCP), "trusted", "client" (certificate of the target's CA), "stranger"
    #: (certificate of another CA), "tls12"; and bytes per write (None: whole writes).
    tls: str | None = None
    chunk: int | None = None
    #: Waits for the broker's TLS handshake timeout (its bound is longer).
    stall: bool = False
    data: bytes = b""
    half_close: bool = False
    tags: frozenset[str] = frozenset()


class Ctx:
    """What a script works with: the wire, the served versions, and the problems it noticed."""

    def __init__(self, wire: Wire, served: dict[int, tuple[int, int]], rng: random.Random) -> None:
        self.wire = wire
        self.served = served
        self.rng = rng
        #: (finding kind, message) for answers that are wrong in themselves.
        self.problems: list[tuple[str, str]] = []
        self.answers = 0

    def version(self, api_key: int, wanted: int | None = None) -> int:
        low, high = self.served.get(api_key, (0, 0))
        return high if wanted is None else max(low, min(high, wanted))

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        try:
            _, response = await self.wire.request(api_key, version, body)
        except InvalidResponseError as exc:
            self.problems.append(("malformed-response", f"{ApiKey(api_key).name} v{version}: {exc}"))
            raise Unexpected(str(exc)) from None
        except WrongCorrelation as exc:
            self.problems.append(("wrong-correlation-id", str(exc)))
            raise Unexpected(str(exc)) from None
        self.answers += 1
        if getattr(response, "error_code", 0) == -1:
            self.problems.append(("unknown-server-error", f"{ApiKey(api_key).name} answered UNKNOWN_SERVER_ERROR"))
        return response

    async def handshake(self, mechanism: Any, version: int | None = None) -> Any:
        return await self.request(ApiKey.SASL_HANDSHAKE, self.version(ApiKey.SASL_HANDSHAKE, version),
                                  SaslHandshakeRequest(mechanism=mechanism))

    async def authenticate(self, token: bytes, version: int | None = None) -> Any:
        return await self.request(ApiKey.SASL_AUTHENTICATE, self.version(ApiKey.SASL_AUTHENTICATE, version),
                                  SaslAuthenticateRequest(auth_bytes=token))

    async def raw_token(self, token: bytes) -> bytes:
        """A bare size-prefixed token (after a v0 SaslHandshake) and the bare answer."""
        await self.wire.send(len(token).to_bytes(4, "big") + token)
        return await self.wire.receive_frame()

    async def served_check(self) -> str:
        """Ask for metadata: ``served`` when answered (`Closed` propagates when refused)."""
        await self.request(ApiKey.METADATA, self.version(ApiKey.METADATA, 9),
                           MetadataRequest(topics=[], allow_auto_topic_creation=False))
        return "served"

    async def wait_closed(self, raw: bool = False) -> str:
        """Read until the broker closes (`Closed`). ``raw``: read the socket's bytes, not through TLS (a
        handshake the client must not finish)."""
        while True:
            if raw:
                await self.wire._receive_raw()
            else:
                await self.wire.receive_some()


# -- building blocks -------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _jws(header: Any, claims: Any, signature: str = "") -> str:
    def part(value: Any) -> str:
        return _b64url(value if isinstance(value, bytes) else json.dumps(value).encode())
    return f"{part(header)}.{part(claims)}.{signature}"


def _unsecured(sub: str = "fuzz-oauth", **claims: Any) -> str:
    return _jws({"alg": "none"}, {"sub": sub, "exp": time.time() + 3600, "iat": time.time() - 10, **claims})


def _nonce(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(24))


def _bad_utf8(rng: random.Random) -> bytes:
    return rng.choice([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"a\x80b"])


async def _login(ctx: Ctx, mechanism: str, user: str | None = None, version: int | None = None) -> None:
    """A legitimate login; raises Unexpected when refused."""
    answer = await ctx.handshake(mechanism, 1)
    if answer.error_code != 0:
        raise Unexpected(f"SaslHandshake {mechanism}: error {answer.error_code}")
    if mechanism == "PLAIN":
        user = user or "fuzz-plain"
        reply = await ctx.authenticate(plain_message(user, PLAIN_USERS[user]), version)
    elif mechanism == "OAUTHBEARER":
        reply = await ctx.authenticate(oauth_message(_unsecured(user or "fuzz-oauth")), version)
    else:
        user = user or SCRAM_USERS[0]
        password = OTHER_PASSWORD if user == OTHER_USER else SCRAM_PASSWORD
        client = ScramClient(mechanism, user, password, nonce=_nonce(ctx.rng))
        first = await ctx.authenticate(client.first_message(), version)
        if first.error_code != 0:
            raise Unexpected(f"SCRAM client-first refused: {first.error_message}")
        reply = await ctx.authenticate(client.final_message(bytes(first.auth_bytes)), version)
    if reply.error_code != 0:
        raise Unexpected(f"{mechanism} login as {user} refused: {reply.error_message}")


def _refused(reply: Any) -> bool:
    return getattr(reply, "error_code", 0) != 0


# -- SASL ------------------------------------------------------------------------------------------


def _scram_first_variants(rng: random.Random, user: str, cnonce: str) -> list[tuple[str, bytes, str]]:
    """(name, client-first, expectation) with one thing wrong (or, for a few, right in an unusual way)."""
    n = escape_saslname(user)
    huge = MAX_TOKEN_BYTES + rng.choice([1, 100, 60_000])
    return [
        ("gs2-y", f"y,,n={n},r={cnonce}".encode(), "refused"),
        ("gs2-p", f"p=tls-unique,,n={n},r={cnonce}".encode(), "refused"),
        ("gs2-empty", f",,n={n},r={cnonce}".encode(), "refused"),
        ("gs2-upper", f"N,,n={n},r={cnonce}".encode(), "refused"),
        ("gs2-missing", f"n={n},r={cnonce}".encode(), "refused"),
        ("gs2-extra-comma", f"n,,,n={n},r={cnonce}".encode(), "refused"),
        ("authzid-mismatch", f"n,a=someone-else,n={n},r={cnonce}".encode(), "refused"),
        ("authzid-bad-escape", f"n,a=x=2Xy,n={n},r={cnonce}".encode(), "refused"),
        ("authzid-empty", f"n,a=,n={n},r={cnonce}".encode(), "refused"),
        ("missing-n", f"n,,r={cnonce}".encode(), "refused"),
        ("missing-r", f"n,,n={n}".encode(), "refused"),
        ("duplicate-n", f"n,,n={n},n={n},r={cnonce}".encode(), "refused"),
        ("duplicate-r", f"n,,n={n},r={cnonce},r={cnonce}x".encode(), "refused"),
        ("unknown-attribute", f"n,,n={n},r={cnonce},x=1".encode(), "refused"),
        ("reserved-m", f"n,,m=ext,n={n},r={cnonce}".encode(), "refused"),
        ("iterations", f"n,,n={n},r={cnonce},i={rng.choice([0, 1, 2**31 - 1, 10**30])}".encode(), "refused"),
        ("escape-2X", f"n,,n=fuzz=2Xodd,r={cnonce}".encode(), "refused"),
        ("escape-lowercase", f"n,,n=fuzz=2codd=3dname,r={cnonce}".encode(), "refused"),
        ("escape-trailing", f"n,,n=fuzz=,r={cnonce}".encode(), "refused"),
        ("unescaped-comma", b"n,,n=fuzz,odd=name,r=" + cnonce.encode(), "refused"),
        ("unescaped-equals", f"n,,n=fuzz=2Codd=name,r={cnonce}".encode(), "refused"),
        ("user-bad-utf8", b"n,,n=" + _bad_utf8(rng) + b",r=" + cnonce.encode(), "refused"),
        ("user-nul", f"n,,n=fuzz\x00scram,r={cnonce}".encode(), "refused"),
        ("user-unknown", f"n,,n=nobody-{rng.randrange(10**6)},r={cnonce}".encode(), "refused"),
        ("user-empty", f"n,,n=,r={cnonce}".encode(), "refused"),
        ("nonce-empty", f"n,,n={n},r=".encode(), "refused"),
        ("nonce-unprintable", f"n,,n={n},r=ab\x7fcd".encode(), "refused"),
        ("nonce-space", f"n,,n={n},r=ab cd".encode(), "refused"),
        ("tokenauth", f"n,,n={n},r={cnonce},tokenauth=true".encode(), "refused"),
        ("extension-bad-name", f"n,,n={n},r={cnonce},1x=2".encode(), "refused"),
        ("extension-empty", f"n,,n={n},r={cnonce},ext=".encode(), "refused"),
        ("extension-twice", f"n,,n={n},r={cnonce},ext=1,ext=2".encode(), "refused"),
        ("extension-non-ascii", f"n,,n={n},r={cnonce},ext=\u00e9".encode(), "refused"),
        ("empty", b"", "refused"),
        ("random", rng.randbytes(rng.randrange(1, 300)), "refused"),
        ("oversized", f"n,,n={n},r=".encode() + b"x" * huge, "refused"),
        ("final-as-first", f"c=biws,r={cnonce},p={_b64(b'x' * 32)}".encode(), "refused"),
    ]


def _scram_final_variants(rng: random.Random, good: str, gs2: str, nonce: str, digest: int) -> list[tuple[str, str | bytes]]:
    """Client-final messages with one thing wrong, from the good one."""
    without_proof, _, proof = good.rpartition(",p=")
    channel = _b64(gs2.encode())
    raw_proof = base64.b64decode(proof)
    flipped = bytearray(raw_proof)
    flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
    return [
        ("wrong-nonce", good.replace(f"r={nonce}", f"r={nonce[:-1]}{'A' if nonce[-1] != 'A' else 'B'}")),
        ("nonce-client-only", good.replace(f"r={nonce}", f"r={nonce[:24]}")),
        ("nonce-extended", good.replace(f"r={nonce}", f"r={nonce}x")),
        ("missing-c", good.replace(f"c={channel},", "")),
        ("missing-r", good.replace(f"r={nonce},", "")),
        ("missing-p", without_proof),
        ("duplicate-r", good.replace(f"r={nonce},", f"r={nonce},r={nonce},")),
        ("duplicate-p", f"{good},p={proof}"),
        ("duplicate-c", f"c={channel},{good}"),
        ("bad-base64-c", good.replace(f"c={channel}", "c=bi!ws")),
        ("bad-base64-p", f"{without_proof},p={proof[:-2]}!"),
        ("channel-binding-y", good.replace(f"c={channel}", f"c={_b64(b'y,,')}")),
        ("channel-binding-authzid", good.replace(f"c={channel}", f"c={_b64(b'n,a=someone,')}")),
        ("channel-binding-data", good.replace(f"c={channel}", f"c={_b64(gs2.encode() + b'extra')}")),
        ("proof-short", f"{without_proof},p={_b64(raw_proof[:-1])}"),
        ("proof-long", f"{without_proof},p={_b64(raw_proof + b'x')}"),
        ("proof-empty", f"{without_proof},p="),
        ("proof-other-digest", f"{without_proof},p={_b64(raw_proof[:32] if digest == 64 else raw_proof * 2)}"),
        ("proof-flipped", f"{without_proof},p={_b64(bytes(flipped))}"),
        ("unknown-attribute", f"{without_proof},x=1,p={proof}"),
        ("iterations", f"{without_proof},i={rng.choice([1, 2**31 - 1, 10**40])},p={proof}"),
        ("reordered", f"p={proof},{without_proof}"),
        ("non-utf8", without_proof.encode() + b",p=" + _bad_utf8(rng)),
        ("oversized", f"{without_proof},p=".encode() + b"A" * (MAX_TOKEN_BYTES + rng.choice([1, 4, 50_000]))),
        ("empty", b""),
        ("first-again", f"n,,n=fuzz-scram,r={nonce[:24]}"),
        ("random", rng.randbytes(rng.randrange(1, 200))),
    ]


def scram_attempt(rng: random.Random) -> tuple[str, str, str, Callable[[Ctx], Awaitable[str]]]:
    mechanism = rng.choice(SCRAM)
    user = rng.choice(SCRAM_USERS)
    cnonce = _nonce(rng)
    if rng.random() < 0.5:
        name, token, expect = rng.choice(_scram_first_variants(rng, user, cnonce))

        async def first(ctx: Ctx) -> str:
            answer = await ctx.handshake(mechanism, 1)
            if _refused(answer):
                raise Unexpected("mechanism refused")
            reply = await ctx.authenticate(token)
            if not _refused(reply):  # accepted as a first message: the good client's final must not fit it
                client = ScramClient(mechanism, user, SCRAM_PASSWORD, nonce=cnonce)
                client.first_message()
                try:
                    final = client.final_message(bytes(reply.auth_bytes))
                except Exception:
                    final = b"c=biws,r=" + cnonce.encode() + b",p=AAAA"
                if _refused(await ctx.authenticate(final)):
                    return "refused"
            return await ctx.served_check()

        return f"scram:client-first:{name}", mechanism, f"{mechanism} client-first {name} as {user!r}", first
    variants = [name for name, _ in _scram_final_variants(random.Random(0), "c=biws,r=x,p=AAAA", "n,,", "x", 32)]
    name = rng.choice(variants)
    local = random.Random(rng.random())

    async def final(ctx: Ctx) -> str:
        answer = await ctx.handshake(mechanism, 1)
        if _refused(answer):
            raise Unexpected("mechanism refused")
        client = ScramClient(mechanism, user, SCRAM_PASSWORD, nonce=cnonce)
        reply = await ctx.authenticate(client.first_message())
        if _refused(reply):
            raise Unexpected(f"client-first refused: {reply.error_message}")
        server_first = bytes(reply.auth_bytes)
        good = client.final_message(server_first).decode()
        nonce = server_first.decode().split(",")[0][2:]
        digest = 32 if mechanism == "SCRAM-SHA-256" else 64
        token = dict(_scram_final_variants(local, good, "n,,", nonce, digest))[name]
        reply = await ctx.authenticate(token if isinstance(token, bytes) else token.encode())
        if _refused(reply):
            return "refused"
        return await ctx.served_check()

    return f"scram:client-final:{name}", mechanism, f"{mechanism} client-final {name} as {user!r}", final


def plain_attempt(rng: random.Random) -> tuple[str, str, str, str, Callable[[Ctx], Awaitable[str]]]:
    user = "fuzz-plain"
    password = PLAIN_USERS[user]
    variants = [
        ("valid", plain_message(user, password), "served"),
        ("authzid-same", plain_message(user, password, authzid=user), "served"),
        ("authzid-mismatch", plain_message(user, password, authzid="fuzz-plain-2"), "refused"),
        ("wrong-password", plain_message(user, password + "x"), "refused"),
        ("other-users-password", plain_message(user, PLAIN_USERS["fuzz-plain-2"]), "refused"),
        ("unknown-user", plain_message("nobody", password), "refused"),
        ("missing-nul", f"{user}\x00{password}".encode(), "refused"),
        ("no-nul", f"{user}{password}".encode(), "refused"),
        ("extra-nul", f"\x00{user}\x00{password}\x00".encode(), "refused"),
        ("extra-nul-inside", f"\x00{user}\x00pass\x00word".encode(), "refused"),
        ("only-nuls", b"\x00" * rng.randrange(1, 6), "refused"),
        ("empty-user", f"\x00\x00{password}".encode(), "refused"),
        ("empty-password", f"\x00{user}\x00".encode(), "refused"),
        ("bad-utf8", b"\x00" + _bad_utf8(rng) + b"\x00" + password.encode(), "refused"),
        ("empty", b"", "refused"),
        ("oversized", b"\x00" + user.encode() + b"\x00" + b"p" * (MAX_TOKEN_BYTES + rng.choice([1, 70_000])),
         "refused"),
        ("random", rng.randbytes(rng.randrange(1, 200)), "refused"),
    ]
    name, token, expect = rng.choice(variants)

    async def script(ctx: Ctx) -> str:
        answer = await ctx.handshake("PLAIN", 1)
        if _refused(answer):
            raise Unexpected("mechanism refused")
        if _refused(await ctx.authenticate(token)):
            return "refused"
        return await ctx.served_check()

    return f"plain:{name}", "PLAIN", f"PLAIN {name}", expect, script


def oauth_attempt(rng: random.Random) -> tuple[str, str, str, Callable[[Ctx], Awaitable[str]]]:
    good = _unsecured()
    header, claims, _ = good.split(".")
    now = time.time()
    tokens = {
        "valid": (oauth_message(good), "served"),
        "gs2-y": (b"y,," + oauth_message(good)[3:], "refused"),
        "gs2-p": (b"p=tls-unique,," + oauth_message(good)[3:], "refused"),
        "gs2-missing": (oauth_message(good)[3:], "refused"),
        "gs2-extra-field": (b"n,,x," + oauth_message(good)[3:], "refused"),
        "authzid-mismatch": (oauth_message(good, authzid="someone-else"), "refused"),
        "no-kvsep": (f"n,,auth=Bearer {good}".encode(), "refused"),
        "no-final-kvsep": (f"n,,\x01auth=Bearer {good}\x01".encode(), "refused"),
        "pair-without-equals": (f"n,,\x01auth=Bearer {good}\x01junk\x01\x01".encode(), "refused"),
        "no-auth": (b"n,,\x01host=x\x01\x01", "refused"),
        "basic-scheme": (f"n,,\x01auth=Basic {good}\x01\x01".encode(), "refused"),
        "empty-bearer": (b"n,,\x01auth=Bearer \x01\x01", "refused"),
        "two-parts": (oauth_message(f"{header}.{claims}"), "refused"),
        "four-parts": (oauth_message(f"{good}.x"), "refused"),
        "not-base64": (oauth_message(f"{header}.!!!$$$.", ), "refused"),
        "header-not-json": (oauth_message(_jws(b"{not json", {"sub": "x", "exp": now + 60})), "refused"),
        "claims-not-json": (oauth_message(_jws({"alg": "none"}, b"\xff\xfe")), "refused"),
        "claims-array": (oauth_message(_jws({"alg": "none"}, [1, 2, 3])), "refused"),
        "signed-rs256": (oauth_message(_jws({"alg": "RS256"}, {"sub": "x", "exp": now + 60}, "c2lnbmF0dXJl")),
                         "refused"),
        "none-with-signature": (oauth_message(good + "c2ln"), "refused"),
        "exp-missing": (oauth_message(_jws({"alg": "none"}, {"sub": "x"})), "refused"),
        "exp-past": (oauth_message(_jws({"alg": "none"}, {"sub": "x", "exp": now - 3600})), "refused"),
        "exp-string": (oauth_message(_jws({"alg": "none"}, {"sub": "x", "exp": "tomorrow"})), "refused"),
        "exp-huge": (oauth_message(_jws({"alg": "none"}, {"sub": "x", "exp": 1e300})), "any"),
        "exp-infinity": (oauth_message(_jws({"alg": "none"}, b'{"sub":"x","exp":Infinity}')), "refused"),
        "exp-nan": (oauth_message(_jws({"alg": "none"}, b'{"sub":"x","exp":NaN}')), "refused"),
        "exp-overflow": (oauth_message(_jws({"alg": "none"}, b'{"sub":"x","exp":1e999}')), "refused"),
        "iat-nan": (oauth_message(_jws({"alg": "none"}, b'{"sub":"x","exp":%d,"iat":NaN}' % (now + 60))), "refused"),
        "iat-future": (oauth_message(_jws({"alg": "none"}, {"sub": "x", "exp": now + 7200, "iat": now + 3600})),
                       "refused"),
        "sub-missing": (oauth_message(_jws({"alg": "none"}, {"exp": now + 60})), "refused"),
        "sub-empty": (oauth_message(_jws({"alg": "none"}, {"sub": " ", "exp": now + 60})), "refused"),
        "sub-number": (oauth_message(_jws({"alg": "none"}, {"sub": 7, "exp": now + 60})), "refused"),
        "deep-json": (oauth_message(_jws({"alg": "none"}, b'{"sub":"x","exp":%d,"n":%s}' % (
            now + 60, b"[" * 2000 + b"]" * 2000))), "any"),
        "not-utf8": (b"n,,\x01auth=Bearer " + _bad_utf8(rng) + b"\x01\x01", "refused"),
        "oversized": (oauth_message("a" * (MAX_TOKEN_BYTES + rng.choice([1, 30_000]))), "refused"),
        "random": (rng.randbytes(rng.randrange(1, 200)), "refused"),
        "empty": (b"", "refused"),
    }
    name = rng.choice(sorted(tokens))
    token, expect = tokens[name]
    answer_to_challenge = rng.choice([b"\x01", b"", b"garbage", oauth_message(good)])

    async def script(ctx: Ctx) -> str:
        if _refused(await ctx.handshake("OAUTHBEARER", 1)):
            raise Unexpected("mechanism refused")
        reply = await ctx.authenticate(token)
        if _refused(reply):
            return "refused"
        if bytes(reply.auth_bytes).startswith(b"{"):  # the invalid_token challenge: the client answers
            if _refused(await ctx.authenticate(answer_to_challenge)):
                return "refused"
        return await ctx.served_check()

    return f"oauth:{name}", "OAUTHBEARER", f"OAUTHBEARER {name}", expect, script


def mechanism_attempt(rng: random.Random) -> tuple[str, str, str, str, Callable[[Ctx], Awaitable[str]]]:
    choices = {
        "unknown": rng.choice(["GSSAPI", "SCRAM-SHA-1", "DIGEST-MD5", "CRAM-MD5", "NTLM", "X"]),
        "lowercase": rng.choice(["plain", "scram-sha-256", "oauthbearer"]),
        "padded": rng.choice([" PLAIN", "PLAIN ", "PLAIN\x00", "SCRAM-SHA-256\n"]),
        "long": "M" * rng.choice([256, 32_767]),
        "bad-utf8": LyingStr(b"PLAIN" + _bad_utf8(rng)),
        "empty": "",
        "null": "",  # written below with length -1
        "length-lie": LyingStr(b"PLAIN", rng.choice([6, 100, 32_767])),
    }
    name = rng.choice(sorted(choices))
    mechanism = choices[name]
    version = rng.choice([0, 1])

    async def script(ctx: Ctx) -> str:
        if name == "null":  # a null string where none is allowed: the broker cannot parse the request
            _, frame = ctx.wire.frame(ApiKey.SASL_HANDSHAKE, version, SaslHandshakeRequest(mechanism=""))
            await ctx.wire.send(frame[:-2] + b"\xff\xff")
            await ctx.wire.receive_frame()
            return await ctx.served_check()
        answer = await ctx.handshake(mechanism, version)
        if not _refused(answer):
            return "answered"
        return await ctx.served_check()

    return f"handshake:mechanism-{name}", "SaslHandshake", f"SaslHandshake v{version} mechanism {name}", \
        "refused", script


def state_attempt(rng: random.Random) -> tuple[str, str, str, str, Callable[[Ctx], Awaitable[str]]]:
    mechanism = rng.choice(["PLAIN", *SCRAM, "OAUTHBEARER"])
    name = rng.choice(["authenticate-first", "handshake-twice", "authenticate-after-success", "request-first",
                       "api-versions-first", "handshake-after-success-v0", "reauth-bad-token",
                       "reauth-valid", "reauth-other-user", "reauth-other-mechanism", "reauth-abandoned"])
    expect = {"api-versions-first": "served", "reauth-valid": "served", "authenticate-after-success": "any",
              "reauth-abandoned": "any"}.get(name, "refused")
    bad = rng.choice([b"", b"\x00x\x00y", b"n,,n=fuzz-scram,r=", rng.randbytes(40)])
    version = rng.choice([0, 1, 2])
    other_index = rng.randrange(3)

    async def script(ctx: Ctx) -> str:
        if name == "authenticate-first":
            if _refused(await ctx.authenticate(bad or b"x", version)):
                return "refused"
            return await ctx.served_check()
        if name == "request-first":
            return await ctx.served_check()
        if name == "api-versions-first":
            await ctx.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="fuzz",
                                                                         client_software_version="1"))
            await _login(ctx, mechanism, version=version)
            return await ctx.served_check()
        if name == "handshake-twice":
            await ctx.handshake(mechanism, 1)
            if _refused(await ctx.handshake(mechanism, 1)):
                return "refused"
            return await ctx.served_check()
        await _login(ctx, mechanism, version=version)
        if name == "authenticate-after-success":
            await ctx.authenticate(bad, version)
            return await ctx.served_check()
        if name == "handshake-after-success-v0":
            if _refused(await ctx.handshake(mechanism, 0)):
                return "refused"
            return await ctx.served_check()
        if name == "reauth-other-mechanism":
            other = [m for m in ("PLAIN", *SCRAM, "OAUTHBEARER") if m != mechanism][other_index]
            if _refused(await ctx.handshake(other, 1)):
                return "refused"
            return await ctx.served_check()
        if name == "reauth-valid":
            await _login(ctx, mechanism, version=version)
            return await ctx.served_check()
        if name == "reauth-other-user":
            other_user = {"PLAIN": "fuzz-plain-2", "OAUTHBEARER": "another-subject"}.get(mechanism, OTHER_USER)
            try:
                await _login(ctx, mechanism, other_user, version=version)
            except Unexpected:
                return "refused"
            return await ctx.served_check()
        if name == "reauth-abandoned":  # a handshake, then ordinary requests: the old session still serves
            await ctx.handshake(mechanism, 1)
            return await ctx.served_check()
        await ctx.handshake(mechanism, 1)  # reauth-bad-token
        if _refused(await ctx.authenticate(bad, version)):
            return "refused"
        return await ctx.served_check()

    return f"state:{name}", mechanism, f"{name} with {mechanism}, SaslAuthenticate v{version}", expect, script


def legacy_attempt(rng: random.Random) -> tuple[str, str, str, str, Callable[[Ctx], Awaitable[str]]]:
    """SaslHandshake v0, then tokens without Kafka framing (kafka-python's old path)."""
    mechanism = rng.choice(["PLAIN", *SCRAM])
    name = rng.choice(["valid", "valid", "bad-token", "kafka-framed", "oversized", "empty", "scram-bad-final"])
    if name == "scram-bad-final" and mechanism == "PLAIN":
        name = "bad-token"
    expect = "served" if name == "valid" else "refused"
    bad = rng.choice([b"\x00fuzz-plain\x00nope", b"n,,n=nobody,r=abc", rng.randbytes(30), b"\x00\x00"])

    async def script(ctx: Ctx) -> str:
        if _refused(await ctx.handshake(mechanism, 0)):
            raise Unexpected("mechanism refused")
        if name == "kafka-framed":
            _, frame = ctx.wire.frame(ApiKey.SASL_AUTHENTICATE, 0, SaslAuthenticateRequest(
                auth_bytes=plain_message("fuzz-plain", PLAIN_USERS["fuzz-plain"])))
            await ctx.wire.send(frame)
            await ctx.wire.receive_frame()
            return "answered"
        if name in ("bad-token", "empty", "oversized"):
            token = {"bad-token": bad, "empty": b"", "oversized": b"\x00" * (MAX_TOKEN_BYTES + 1)}[name]
            await ctx.raw_token(token)
            return await ctx.served_check()
        if mechanism == "PLAIN":
            await ctx.raw_token(plain_message("fuzz-plain", PLAIN_USERS["fuzz-plain"]))
        else:
            client = ScramClient(mechanism, SCRAM_USERS[0], SCRAM_PASSWORD, nonce=_nonce(ctx.rng))
            server_first = await ctx.raw_token(client.first_message())
            final = client.final_message(server_first)
            if name == "scram-bad-final":
                final = final[:-6] + b"AAAA=="
            await ctx.raw_token(final)
        return await ctx.served_check()

    return f"legacy-v0:{name}", mechanism, f"SaslHandshake v0 {mechanism} then raw {name}", expect, script


def frame_attempt(rng: random.Random) -> tuple[str, str, str, str, Callable[[Ctx], Awaitable[str]], bool]:
    """SASL requests damaged at the Kafka level: lengths that lie, cut frames, huge tokens, unknown versions."""
    name = rng.choice(["auth-bytes-lie", "truncated", "oversized-token", "frame-over-limit", "version-unsupported",
                       "size-short", "trailing-bytes"])
    size = rng.choice([MAX_TOKEN_BYTES + 1, 65_536, 512 * 1024 + 1, 1 << 20, 4 << 20])
    if rng.random() < 0.02:
        size = FRAME_LIMIT - 64  # the largest frame the broker reads
    mechanism = rng.choice(["PLAIN", *SCRAM, "OAUTHBEARER"])
    half_close = name in ("truncated", "size-short")
    bad_version = rng.choice([2, 3, 9, 32767, -1])
    over_limit = rng.choice([1, 1000, 2**31 - 1 - FRAME_LIMIT])
    claimed = rng.choice([10, 2**31 - 1, MAX_TOKEN_BYTES * 4])
    cut, short, trailing = rng.random(), rng.randrange(1, 8), rng.randbytes(rng.randrange(1, 64))

    async def script(ctx: Ctx) -> str:
        if name == "version-unsupported":  # a v1 body under a version the broker does not serve
            _, frame = ctx.wire.frame(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
            await ctx.wire.send(frame[:6] + bad_version.to_bytes(2, "big", signed=True) + frame[8:])
            await ctx.wire.receive_frame()
            return await ctx.served_check()
        if name == "frame-over-limit":
            await ctx.wire.send((FRAME_LIMIT + over_limit).to_bytes(4, "big")
                                + b"\x00\x24\x00\x01")
            return await ctx.wait_closed()
        if _refused(await ctx.handshake(mechanism, 1)):
            raise Unexpected("mechanism refused")
        version = ctx.version(ApiKey.SASL_AUTHENTICATE)
        if name == "oversized-token":
            if _refused(await ctx.authenticate(b"n,,n=" + b"x" * size)):
                return "refused"
            return await ctx.served_check()
        if name == "auth-bytes-lie":
            token = LyingBytes(b"\x00fuzz-plain\x00" + PLAIN_USERS["fuzz-plain"].encode(), claimed)
            _, frame = ctx.wire.frame(ApiKey.SASL_AUTHENTICATE, version, SaslAuthenticateRequest(auth_bytes=token))
        else:
            _, frame = ctx.wire.frame(ApiKey.SASL_AUTHENTICATE, version,
                                      SaslAuthenticateRequest(auth_bytes=b"\x00fuzz-plain\x00wrong"))
        if name == "truncated":
            frame = frame[:4 + int(cut * (len(frame) - 4))]
        elif name == "size-short":
            frame = (len(frame) - 4 - short).to_bytes(4, "big", signed=True) + frame[4:]
        elif name == "trailing-bytes":
            body = frame[4:] + trailing
            frame = len(body).to_bytes(4, "big") + body
        await ctx.wire.send(frame)
        if half_close:
            await ctx.wire.eof()
        await ctx.wire.receive_frame()
        return await ctx.served_check()

    expect = "any" if name in ("version-unsupported", "trailing-bytes") else "refused"
    return f"frame:{name}", mechanism, f"SASL frame {name} ({mechanism})", expect, script, half_close


def valid_attempt(rng: random.Random) -> tuple[str, str, str, str, Callable[[Ctx], Awaitable[str]]]:
    mechanism = rng.choice(["PLAIN", *SCRAM, *SCRAM, "OAUTHBEARER"])
    user = rng.choice(SCRAM_USERS) if mechanism in SCRAM else None
    version = rng.choice([0, 1, 2])

    async def script(ctx: Ctx) -> str:
        await _login(ctx, mechanism, user, version=version)
        return await ctx.served_check()

    return "valid", mechanism, f"{mechanism} login{f' as {user!r}' if user else ''}, SaslAuthenticate v{version}", \
        "served", script


# -- TLS -------------------------------------------------------------------------------------------


def tls_attempt(rng: random.Random, stall: bool) -> Attempt:
    """A TLS handshake with something wrong, on the SASL_SSL or the mutual-TLS listener."""
    listener = rng.choice(["SASL_SSL", "MTLS"])
    names = ["hello-garbage", "hello-mutated", "hello-truncated", "plaintext-kafka", "one-byte-writes",
             "close-notify", "bad-record", "injected-hello", "tls12", "unknown-ca", "no-client-cert",
             "untrusting-client", "valid"]
    name = "stall" if stall else rng.choice(names)
    if name in ("unknown-ca", "no-client-cert"):
        listener = "MTLS"
    tls = {"tls12": "tls12", "unknown-ca": "stranger", "no-client-cert": "trusted",
           "untrusting-client": "untrusting"}.get(name, "client" if listener == "MTLS" else "trusted")
    expect = {"one-byte-writes": "served", "tls12": "served", "valid": "served", "untrusting-client": "served",
              "stall": "closed", "close-notify": "closed"}.get(name, "refused")
    chunk = 1 if name == "one-byte-writes" else None
    garbage = rng.randbytes(rng.randrange(1, 2000))
    if rng.random() < 0.3:
        garbage = b"\x16\x03" + bytes([rng.randrange(5)]) + garbage  # looks like a handshake record
    cut = rng.random()
    flips = [(rng.random(), rng.randrange(8)) for _ in range(rng.randrange(1, 4))]
    close_point = rng.choice(["after-handshake", "mid-frame", "after-sasl-handshake"])
    mechanism = rng.choice(SCRAM)
    # Without an EOF, a ClientHello whose lengths now claim more waits out the broker's handshake timeout.
    eof = rng.random() < 0.9

    async def script(ctx: Ctx) -> str:
        wire = ctx.wire
        if name == "hello-garbage":
            await wire.raw(garbage)
            if eof:
                await wire.eof()
            return await ctx.wait_closed(raw=True)
        if name in ("hello-mutated", "hello-truncated", "stall"):
            hello = bytearray(wire.client_hello())
            if name == "hello-mutated":
                for where, bit in flips:
                    hello[int(where * len(hello))] ^= 1 << bit
            elif name == "hello-truncated":
                hello = hello[:max(1, int(cut * len(hello)))]
            else:  # stall: part of the ClientHello, or all of it and then nothing more
                hello = hello[:max(1, int(cut * len(hello)))] if cut < 0.5 else hello
                await wire.raw(bytes(hello))
                return await ctx.wait_closed(raw=True)
            await wire.raw(bytes(hello))
            if name == "hello-truncated" or eof:
                await wire.eof()
            return await ctx.wait_closed(raw=True)
        if name == "plaintext-kafka":
            _, frame = wire.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="fuzz",
                                                                            client_software_version="1"))
            await wire.raw(frame)
            return await ctx.wait_closed(raw=True)
        await wire.handshake()
        if name == "close-notify":
            if close_point == "mid-frame":
                _, frame = wire.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="fuzz",
                                                                                client_software_version="1"))
                await wire.send(frame[:len(frame) // 2])
            elif close_point == "after-sasl-handshake" and listener == "SASL_SSL":
                await ctx.handshake(mechanism, 1)
            await wire.close_notify()
            return await ctx.wait_closed(raw=True)
        if name == "bad-record":
            _, frame = wire.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="fuzz",
                                                                            client_software_version="1"))
            record = bytearray(wire.encrypt(frame))
            where = 5 + int(cut * (len(record) - 5))
            record[min(where, len(record) - 1)] ^= 0x40
            await wire.raw(bytes(record))
            return await ctx.wait_closed(raw=True)
        if name == "injected-hello":
            await wire.raw(plaintext_hello())
            return await ctx.wait_closed(raw=True)
        # valid, tls12, one-byte-writes, untrusting-client, and the refused client certificates: the
        # handshake looked done to the client; a request shows whether the broker serves it.
        if listener == "SASL_SSL":
            await _login(ctx, mechanism)
        return await ctx.served_check()

    return Attempt(0, listener, "TLS", f"tls:{name}", f"TLS {name} on {listener}", expect, script, tls=tls,
                   chunk=chunk, stall=name == "stall" or (name in ("hello-garbage", "hello-mutated") and not eof))


def plaintext_hello() -> bytes:
    """A fresh ClientHello, in plaintext (sent inside an established TLS connection)."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    obj = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO())
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


# -- choosing --------------------------------------------------------------------------------------

#: Share of each family of attempts (the rest are TLS); stalls are rarer (each waits out the broker's
#: TLS handshake timeout).
SHARES = (("valid", 0.08), ("scram", 0.30), ("plain", 0.08), ("oauth", 0.10), ("mechanism", 0.05),
          ("state", 0.08), ("legacy", 0.05), ("frame", 0.04), ("split", 0.04))
STALL_SHARE = 0.003


def handshake_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"kraftpy-fuzz-handshake:{seed}:{index}")


def make_attempt(seed: int, index: int) -> Attempt:
    rng = handshake_rng(seed, index)
    draw = rng.random()
    if draw < STALL_SHARE:
        attempt = tls_attempt(rng, stall=True)
        attempt.index = index
        return attempt
    family = "tls"
    for name, share in SHARES:
        if draw < share:
            family = name
            break
        draw -= share
    if family == "tls":
        attempt = tls_attempt(rng, stall=False)
        attempt.index = index
        return attempt
    listener = rng.choice(["SASL_SSL", "SASL_PLAINTEXT"])
    chunk = None
    half_close = False
    if family in ("valid", "split"):
        klass, api, detail, expect, script = valid_attempt(rng)
        if family == "split":
            chunk = rng.choice([1, 1, 2, 3, 7])
            klass, detail = f"split:{chunk}-byte-writes", f"{detail}, {chunk} byte(s) per write"
    elif family == "scram":
        klass, api, detail, script = scram_attempt(rng)
        expect = "served" if klass.endswith(":valid") else "refused"
    elif family == "plain":
        klass, api, detail, expect, script = plain_attempt(rng)
    elif family == "oauth":
        klass, api, detail, expect, script = oauth_attempt(rng)
    elif family == "mechanism":
        klass, api, detail, expect, script = mechanism_attempt(rng)
    elif family == "state":
        klass, api, detail, expect, script = state_attempt(rng)
    elif family == "legacy":
        klass, api, detail, expect, script = legacy_attempt(rng)
    else:
        klass, api, detail, expect, script, half_close = frame_attempt(rng)
    return Attempt(index, listener, api, klass, f"{detail} on {listener}", expect, script,
                   tls="trusted" if listener == "SASL_SSL" else None, chunk=chunk, half_close=half_close)
