"""`kraftpy metadata show` lists the ACLs, the SCRAM users (names, mechanisms, iterations: never a salt or
a key) and the client quotas of a metadata log; `metadata dump --json` redacts the SCRAM secrets."""

from __future__ import annotations

import json
import random

from kraftpy.cli.main import app
from kraftpy.ids import Uuid
from kraftpy.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    UserScramCredentialRecord,
    encode_record,
)
from kraftpy.metadata.records import ClientQuotaEntityData as E
from kraftpy.raft.file_log import FileRaftLog
from kraftpy.security.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from kraftpy.security.scram import ScramCredential
from tests.helpers.cli_runner import CliRunner

SALT = b"salt-that-must-not-show"


def scram(name: str, mechanism: str, code: int, iterations: int) -> UserScramCredentialRecord:
    cred = ScramCredential.from_password(mechanism, "secret", salt=SALT, iterations=iterations)
    return UserScramCredentialRecord(name, code, cred.salt, cred.stored_key, cred.server_key, cred.iterations)


def test_show_lists_acls_scram_users_and_quotas_without_secrets(tmp_path):
    rng = random.Random(3)
    alice_512 = scram("alice", "SCRAM-SHA-512", 2, 8192)
    records = [
        AccessControlEntryRecord(Uuid.random(rng), int(ResourceType.TOPIC), "orders", int(PatternType.LITERAL),
                                 "User:alice", "*", int(AclOperation.READ), int(AclPermissionType.ALLOW)),
        AccessControlEntryRecord(Uuid.random(rng), int(ResourceType.GROUP), "app-", int(PatternType.PREFIXED),
                                 "User:bob", "10.0.0.7", int(AclOperation.ALL), int(AclPermissionType.DENY)),
        scram("alice", "SCRAM-SHA-256", 1, 4096),
        alice_512,
        scram("admin", "SCRAM-SHA-512", 2, 4096),
        ClientQuotaRecord((E("user", "alice"),), "consumer_byte_rate", 2048),
    ]
    log = FileRaftLog.open(tmp_path)
    log.append_as_leader([encode_record(r) for r in records], 1)
    log.flush(log.end_offset)
    log.close()

    shown = CliRunner().invoke(app, ["metadata", "show", "--log", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    start = lines.index("acls:")
    assert lines[start:] == [
        "acls:",
        "  GROUP:app- (PREFIXED): DENY User:bob ALL from host 10.0.0.7",
        "  TOPIC:orders (LITERAL): ALLOW User:alice READ from host *",
        "scram users:",
        "  admin: SCRAM-SHA-512 (iterations 4096)",
        "  alice: SCRAM-SHA-256 (iterations 4096), SCRAM-SHA-512 (iterations 8192)",
        "client quotas:",
        "  /users/alice: {'consumer_byte_rate': 2048.0}",
    ]

    dumped = CliRunner().invoke(app, ["metadata", "dump", "--log", str(tmp_path), "--json"])
    assert dumped.exit_code == 0, dumped.output
    for output in (shown.stdout, dumped.stdout):
        for secret in (SALT, alice_512.stored_key, alice_512.server_key):
            assert secret.hex() not in output and repr(secret) not in output
    rows = [json.loads(line)["record"] for line in dumped.stdout.splitlines()]
    credential = next(r for r in rows if r["type"] == "UserScramCredentialRecord" and r["mechanism"] == 2
                      and r["name"] == "alice")
    assert credential["salt"] == credential["stored_key"] == credential["server_key"] == "(redacted)"
    assert credential["iterations"] == 8192
