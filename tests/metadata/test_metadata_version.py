"""metadata.version levels: Kafka's release names, what `--release-version` accepts, the SCRAM gate of
3.5-IV2 in the controller, and `storage format --release-version` writing the level a new cluster starts
at (the online upgrade itself: tests/integration/test_metadata_version_upgrade.py)."""

from __future__ import annotations

import subprocess

import pytest

from kraftpy.metadata import metadata_version
from kraftpy.metadata.bootstrap import read_bootstrap
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES
from kraftpy.metadata.delta import replay_records
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import EMPTY_IMAGE
from kraftpy.metadata.messages import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kraftpy.metadata.records import FeatureLevelRecord, UserScramCredentialRecord
from kraftpy.metadata.scram_control import alter_user_scram_credentials
from tests.helpers import forkserver


@pytest.mark.parametrize(("text", "level"), [("3.9", 21), ("3.9-IV0", 21), ("3.7", 19), ("3.7-IV2", 17),
                                             ("3.3-IV3", 7), ("3.5-IV2", 11), (" 3.4 ", 8)])
def test_release_versions_name_kafkas_levels(text, level):
    assert metadata_version.parse_release_version(text) == level


@pytest.mark.parametrize("text", ["3.2", "3.3-IV0", "4.0", "3.9-IV1", "latest", "21", ""])
def test_a_release_kraftpy_cannot_run_at_is_one_line(text):
    with pytest.raises(metadata_version.ReleaseVersionError) as refused:
        metadata_version.parse_release_version(text)
    assert "\n" not in str(refused.value)


def test_the_supported_range_is_3_3_iv3_to_3_9_iv0():
    assert DEFAULT_SUPPORTED_FEATURES["metadata.version"] == (7, 21)
    assert (metadata_version.name(7), metadata_version.name(21)) == ("3.3-IV3", "3.9-IV0")


def _at(level: int):
    return replay_records(EMPTY_IMAGE, [FeatureLevelRecord("metadata.version", level)])


def _upsert(name: str = "alice") -> AlterUserScramCredentialsRequest:
    return AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion("bob", 2),),
        upsertions=(ScramCredentialUpsertion(name, 2, 8192, b"salt", b"s" * 64),))


def test_scram_alterations_need_3_5_iv2():
    below = alter_user_scram_credentials(_at(10), _upsert())
    assert below.records == ()
    assert [(r.user, r.error_code, r.error_message) for r in below.response.results] == [
        ("bob", Errors.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM"),
        ("alice", Errors.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM")]
    at = alter_user_scram_credentials(_at(11), AlterUserScramCredentialsRequest(
        deletions=(), upsertions=_upsert().upsertions))
    assert [type(r) for r in at.records] == [UserScramCredentialRecord]
    assert at.response.results[0].error_code == Errors.NONE


def kraftpy(*args) -> subprocess.CompletedProcess:
    return forkserver.run([*map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)


def _config(tmp_path):
    cfg = tmp_path / "server.properties"
    cfg.write_text("process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
                   "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
                   f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path}/logs\nmetadata.log.dir={tmp_path}/meta\n")
    return cfg


def test_storage_format_release_version_writes_the_starting_level(tmp_path):
    cfg = _config(tmp_path)
    done = kraftpy("storage", "format", "-c", cfg, "-t", "MkU3OEVBNTcwNTJENDM2Qg", "--release-version", "3.6",
                   "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]")
    assert done.returncode == 0, done.stderr
    assert f"Bootstrap metadata in {tmp_path}/meta: metadata.version 3.6-IV2 (14)." in done.stdout.splitlines()
    records = read_bootstrap(tmp_path / "meta")
    assert records[0] == FeatureLevelRecord("metadata.version", 14)
    assert [r.name for r in records[1:]] == ["admin"]


@pytest.mark.parametrize(("args", "message"), [
    (["--release-version", "3.4", "--add-scram", "SCRAM-SHA-512=[name=admin,password=x]"],
     "kraftpy: --add-scram: SCRAM is only supported in metadata.version 3.5-IV2 or later, not 3.4-IV0 "
     "(--release-version)"),
    (["--release-version", "2.8"],
     "kraftpy: --release-version: release version 2.8 is not one kraftpy can run at: 3.3-IV3 to 3.9-IV0"),
])
def test_storage_format_refuses_in_one_line_and_formats_nothing(tmp_path, args, message):
    refused = kraftpy("storage", "format", "-c", _config(tmp_path), "-t", "MkU3OEVBNTcwNTJENDM2Qg", *args)
    assert refused.returncode == 1 and refused.stderr.splitlines() == [message]
    assert not (tmp_path / "meta").exists()
