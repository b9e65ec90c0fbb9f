"""The OAUTHBEARER key set is re-read (Kafka's RefreshingHttpsJwks, for file: URLs): every
sasl.oauthbearer.jwks.endpoint.refresh.ms, at once when a token names a kid the broker does not hold (a
rotated key is accepted on the client's next attempt), and a set that cannot be read keeps the keys held
and is retried with backoff. trio's virtual clock; the tokens' own times are fixed."""

from __future__ import annotations

import json

import structlog
import trio
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from kraftpy.broker.apis.sasl import SaslSettings
from kraftpy.config.loader import load_config
from kraftpy.security.oauthbearer import InvalidToken, JwksValidator, RefreshingJwks, load_jwks
from tests.security.test_sasl_oauthbearer import NOW, _int, b64, part

LOG = structlog.get_logger("test")
CLAIMS = {"sub": "svc", "exp": NOW + 300, "iat": NOW}


def new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def write_jwks(path, keys: dict) -> None:
    jwks = []
    for kid, key in keys.items():
        pub = key.public_key().public_numbers()
        jwks.append({"kty": "RSA", "kid": kid, "n": _int(pub.n), "e": _int(pub.e)})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"keys": jwks}))
    tmp.replace(path)


def token(kid: str, key) -> str:
    signed = f"{part({'alg': 'RS256', 'kid': kid})}.{part(CLAIMS)}"
    return f"{signed}.{b64(key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256()))}"


def refreshing(path, **settings) -> RefreshingJwks:
    """The key set of ``path``, read in this thread (a worker thread would let the virtual clock jump)."""
    async def read():
        return load_jwks(path.as_uri())

    return RefreshingJwks(path.as_uri(), load_jwks(path.as_uri()), read=read, **settings)


def accepted(validator: JwksValidator, kid: str, key) -> bool:
    try:
        return validator.validate(token(kid, key), NOW).principal == "svc"
    except InvalidToken:
        return False


async def test_an_unknown_kid_makes_the_set_read_at_once_and_a_rotated_key_is_accepted(tmp_path):
    """On the real clock, with the set read in a worker thread as a broker does."""
    old, new = new_key(), new_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, {"old": old})
    keys = RefreshingJwks(path.as_uri(), load_jwks(path.as_uri()))
    validator = JwksValidator(keys)
    async with trio.open_nursery() as nursery:
        await nursery.start(keys.run, LOG)
        assert accepted(validator, "old", old)
        write_jwks(path, {"old": old, "new": new})  # the identity provider rotates
        loaded = keys.loaded
        assert not accepted(validator, "new", new)  # refused now, and the set is read again at once
        with trio.fail_after(10):
            await loaded.wait()
        assert accepted(validator, "new", new) and accepted(validator, "old", old)
        nursery.cancel_scope.cancel()


async def test_a_kid_nobody_has_makes_one_read_a_minute(tmp_path, autojump_clock):
    key = new_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, {"old": key})
    keys = refreshing(path)
    validator = JwksValidator(keys)
    async with trio.open_nursery() as nursery:
        await nursery.start(keys.run, LOG)
        # A kid nobody has does not make the set read again and again: once a minute at most.
        for _ in range(5):
            assert not accepted(validator, "nobody", key)
            await trio.sleep(1)
        assert keys.reads == 1
        await trio.sleep(60)
        assert not accepted(validator, "nobody", key)
        await trio.sleep(1)
        assert keys.reads == 2
        nursery.cancel_scope.cancel()


async def test_the_set_is_read_every_refresh_interval(tmp_path, autojump_clock):
    old, new = new_key(), new_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, {"old": old})
    keys = refreshing(path, refresh_ms=60_000)
    validator = JwksValidator(keys)
    async with trio.open_nursery() as nursery:
        await nursery.start(keys.run, LOG)
        write_jwks(path, {"new": new})  # the old key is withdrawn
        await trio.sleep(59)
        assert keys.reads == 0 and accepted(validator, "old", old)
        with trio.fail_after(2):
            await keys.loaded.wait()
        assert not accepted(validator, "old", old) and accepted(validator, "new", new)
        nursery.cancel_scope.cancel()


async def test_a_set_that_cannot_be_read_keeps_the_keys_and_is_retried_with_backoff(tmp_path, autojump_clock):
    old, new = new_key(), new_key()
    path = tmp_path / "jwks.json"
    write_jwks(path, {"old": old})
    keys = refreshing(path, refresh_ms=10_000, retry_backoff_ms=100, retry_backoff_max_ms=400)
    validator = JwksValidator(keys)
    async with trio.open_nursery() as nursery:
        await nursery.start(keys.run, LOG)
        path.write_text("{not json")
        await trio.sleep(30)
        assert keys.reads == 0 and accepted(validator, "old", old)
        write_jwks(path, {"new": new})
        with trio.fail_after(0.5):  # the next retry, at most retry.backoff.max.ms away
            await keys.loaded.wait()
        assert accepted(validator, "new", new)
        nursery.cancel_scope.cancel()


def test_a_listener_with_a_jwks_url_keeps_it_fresh_with_its_settings(tmp_path):
    path = tmp_path / "jwks.json"
    write_jwks(path, {"k": new_key()})
    properties = tmp_path / "server.properties"
    properties.write_text(
        "process.roles=broker\nnode.id=1\ncontroller.quorum.voters=9@127.0.0.1:9093\n"
        "controller.listener.names=CONTROLLER\nlisteners=PLAINTEXT://127.0.0.1:9092,IDP://127.0.0.1:9094\n"
        "listener.security.protocol.map=IDP:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
        "inter.broker.listener.name=PLAINTEXT\nsasl.enabled.mechanisms=OAUTHBEARER\n"
        f"listener.name.idp.sasl.oauthbearer.jwks.endpoint.url={path.as_uri()}\n"
        "sasl.oauthbearer.jwks.endpoint.refresh.ms=5000\n"
        "listener.name.idp.sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms=2000\n"
        f"log.dirs={tmp_path}/data\n")
    keys = SaslSettings.from_config(load_config(properties)).listeners["IDP"].oauth_validator.keys
    assert isinstance(keys, RefreshingJwks)
    assert (keys.refresh_ms, keys.retry_backoff_ms, keys.retry_backoff_max_ms) == (5000, 100, 2000)
    assert keys.get("k") is not None and len(keys) == 1
