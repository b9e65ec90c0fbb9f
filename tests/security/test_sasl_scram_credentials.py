"""SCRAM credentials in the metadata log: the controller's AlterUserScramCredentials rules, replay into
the image, and snapshots."""

from __future__ import annotations

from kraftpy.metadata.delta import replay_records
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import EMPTY_IMAGE
from kraftpy.metadata.messages import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kraftpy.metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from kraftpy.metadata.scram_control import alter_user_scram_credentials
from kraftpy.metadata.snapshot import decode_snapshot, encode_snapshot
from kraftpy.security.sasl import Authenticated
from kraftpy.security.scram import ScramClient, ScramCredential, ScramServer, salted_password

SHA256, SHA512 = 1, 2


def upsert(name: str, password: str, mechanism: int = SHA512, iterations: int = 4096) -> ScramCredentialUpsertion:
    salt = b"salt-" + name.encode()
    algo = "SCRAM-SHA-512" if mechanism == SHA512 else "SCRAM-SHA-256"
    return ScramCredentialUpsertion(name, mechanism, iterations, salt, salted_password(algo, password, salt, iterations))


def apply(image, request):
    result = alter_user_scram_credentials(image, request)
    return replay_records(image, list(result.records)), result.response


def test_upserted_credential_authenticates_with_the_password_only():
    image, response = apply(EMPTY_IMAGE, AlterUserScramCredentialsRequest(upsertions=(upsert("alice", "s3cret"),)))
    assert [(r.user, r.error_code) for r in response.results] == [("alice", Errors.NONE)]
    record = image.scram.credential("alice", SHA512)
    credential = ScramCredential("SCRAM-SHA-512", record.salt, record.iterations, record.stored_key, record.server_key)
    for password, ok in (("s3cret", True), ("wrong", False)):
        server = ScramServer("SCRAM-SHA-512", {"alice": credential}.get)
        client = ScramClient("SCRAM-SHA-512", "alice", password)
        first = server.respond(client.first_message())
        outcome = server.respond(client.final_message(first.data))
        assert isinstance(outcome, Authenticated) is ok
    assert "stored_key" not in repr(record) and "salted_password" not in repr(upsert("a", "b"))


def test_refusals_use_kafka_errors_and_write_nothing_for_that_user():
    image, _ = apply(EMPTY_IMAGE, AlterUserScramCredentialsRequest(upsertions=(upsert("bob", "x"),)))
    request = AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion("carol", SHA512), ScramCredentialDeletion("bob", 7)),
        upsertions=(upsert("dave", "x", iterations=100), upsert("", "x"), upsert("erin", "x"), upsert("erin", "y"),
                    upsert("frank", "x", iterations=20000)),
    )
    result = alter_user_scram_credentials(image, request)
    errors = {r.user: (r.error_code, r.error_message) for r in result.response.results}
    assert errors == {
        "carol": (Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "bob": (Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "dave": (Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "": (Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "erin": (Errors.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        "frank": (Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
    }
    assert result.records == ()


def test_delete_removes_one_mechanism_and_snapshot_keeps_the_rest():
    image, _ = apply(EMPTY_IMAGE, AlterUserScramCredentialsRequest(
        upsertions=(upsert("alice", "a"), upsert("alice", "a", SHA256), upsert("bob", "b"))))
    image, response = apply(image, AlterUserScramCredentialsRequest(deletions=(ScramCredentialDeletion("alice", SHA512),)))
    assert response.results[0].error_code == Errors.NONE
    assert image.scram.credential("alice", SHA512) is None
    assert image.scram.credential("alice", SHA256) is not None
    image, _ = apply(image, AlterUserScramCredentialsRequest(deletions=(ScramCredentialDeletion("alice", SHA256),)))
    assert "alice" not in image.scram.users and set(image.scram.users) == {"bob"}
    reloaded = decode_snapshot(encode_snapshot(image), image.provenance)
    assert reloaded.scram == image.scram


def test_replay_of_record_types():
    record = UserScramCredentialRecord("u", SHA256, b"s", b"k" * 32, b"v" * 32, 4096)
    image = replay_records(EMPTY_IMAGE, [record])
    assert image.scram.credential("u", SHA256) == record
    image = replay_records(image, [RemoveUserScramCredentialRecord("u", SHA256)])
    assert image.scram.users == {}


def test_add_scram_syntax_and_bootstrap_file(tmp_path):
    import base64

    import pytest

    from kraftpy.metadata.bootstrap import BootstrapError, parse_add_scram, read_bootstrap, write_bootstrap
    from kraftpy.metadata.controller import QuorumController
    from kraftpy.metadata.controller_config import ControllerConfig

    by_password = parse_add_scram("SCRAM-SHA-512=[name=admin,password=admin-secret]")
    assert (by_password.name, by_password.mechanism, by_password.iterations) == ("admin", SHA512, 4096)
    salt = b"0123456789abcdef"
    salted = salted_password("SCRAM-SHA-256", "pw", salt, 8192)
    by_salted = parse_add_scram(
        f'SCRAM-SHA-256=[name="alice",salt="{base64.b64encode(salt).decode()}",'
        f'saltedpassword="{base64.b64encode(salted).decode()}",iterations=8192]')
    assert by_salted == parse_add_scram(
        f"SCRAM-SHA-256=[name=alice,password=pw,salt={base64.b64encode(salt).decode()},iterations=8192]")
    for bad in ("SCRAM-SHA-1=[name=a,password=b]", "SCRAM-SHA-512=[password=b]", "SCRAM-SHA-512=[name=a]",
                "SCRAM-SHA-512=[name=a,password=b,iterations=10]"):
        with pytest.raises(BootstrapError) as info:
            parse_add_scram(bad)
        assert "\n" not in str(info.value) and "password=b" not in str(info.value)
    assert read_bootstrap(tmp_path) == ()
    write_bootstrap(tmp_path, [by_password, by_salted])
    assert read_bootstrap(tmp_path) == (by_password, by_salted)
    # The first active controller writes them after metadata.version.
    controller = QuorumController(ControllerConfig("c", bootstrap_records=read_bootstrap(tmp_path)),
                                  rng=__import__("random").Random(0))
    records = controller.activate(0.0).records
    assert records[-2:] == (by_password, by_salted)
    data = (tmp_path / "bootstrap.checkpoint").read_bytes()
    (tmp_path / "bootstrap.checkpoint").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(BootstrapError, match="damaged"):
        read_bootstrap(tmp_path)
