"""`kraftpy storage format --add-scram` on a directory already formatted: refused without
--ignore-formatted (as Kafka's format), and with it the one line saying the credentials were not added."""

import subprocess

from kraftpy.metadata.bootstrap import BOOTSTRAP_FILE
from tests.helpers import forkserver

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
SCRAM = "SCRAM-SHA-512=[name=admin,password=admin-secret]"


def kraftpy(*args) -> subprocess.CompletedProcess:
    return forkserver.run([*map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)


def test_add_scram_on_a_formatted_directory_says_it_was_not_added(tmp_path):
    cfg = tmp_path / "server.properties"
    cfg.write_text("process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
                   "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
                   f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path}/logs\nmetadata.log.dir={tmp_path}/meta\n")
    first = kraftpy("storage", "format", "-c", cfg, "-t", CLUSTER)
    assert first.returncode == 0, first.stderr
    assert not (tmp_path / "meta" / BOOTSTRAP_FILE).exists()

    refused = kraftpy("storage", "format", "-c", cfg, "-t", CLUSTER, "--add-scram", SCRAM)
    assert refused.returncode == 1 and "already formatted; use --ignore-formatted" in refused.stderr
    assert "Traceback" not in refused.stderr

    skipped = kraftpy("storage", "format", "-c", cfg, "-t", CLUSTER, "--ignore-formatted", "--add-scram", SCRAM,
                      "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]")
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stderr.splitlines() == [
        f"SCRAM credentials for admin, alice not added: {tmp_path}/meta was already formatted "
        "(add them with 'kraftpy configs alter --entity-type users')."]
    assert not (tmp_path / "meta" / BOOTSTRAP_FILE).exists()
