"""`kraftpy storage format` for a dynamic controller quorum (KIP-853): --standalone,
--initial-controllers and --no-initial-controllers, the bootstrap snapshot they leave, and every flag
combination that cannot be, refused with one line before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftpy.cli.main import app
from kraftpy.ids import Uuid, random_uuid_str
from kraftpy.raft.bootstrap_voters import bootstrap_snapshot_path
from kraftpy.raft.memory_log import MemoryRaftLog
from kraftpy.raft.snapshot_control import BOOTSTRAP_SNAPSHOT_ID, split_snapshot
from kraftpy.raft.voter_history import VoterHistory
from kraftpy.raft.voters import Endpoint, ReplicaKey
from tests.helpers.cli_runner import CliRunner

runner = CliRunner()
CLUSTER = random_uuid_str()


def config(tmp_path: Path, *, node_id: int = 1, roles: str = "controller", quorum: str | None = None,
           listener: str = "CONTROLLER://127.0.0.1:9093", extra: str = "") -> Path:
    path = tmp_path / f"node-{node_id}.properties"
    quorum = quorum or "controller.quorum.bootstrap.servers=127.0.0.1:9093"
    listeners = listener if roles == "controller" else "PLAINTEXT://127.0.0.1:9092"
    path.write_text(f"process.roles={roles}\nnode.id={node_id}\n{quorum}\nlisteners={listeners}\n"
                    f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path}/data-{node_id}\n{extra}")
    return path


def run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def meta_directory_id(tmp_path: Path, node_id: int = 1) -> str:
    text = (tmp_path / f"data-{node_id}" / "meta.properties").read_text()
    return next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("directory.id="))


def bootstrap_voters(tmp_path: Path, node_id: int = 1):
    data = bootstrap_snapshot_path(tmp_path / f"data-{node_id}").read_bytes()
    control, rest = split_snapshot(data)
    assert control is not None and rest == b""
    return control


def test_standalone_formats_a_quorum_of_this_controller(tmp_path):
    result = run("storage", "format", "-c", config(tmp_path), "-t", CLUSTER, "--standalone")
    assert result.exit_code == 0, result.output
    control = bootstrap_voters(tmp_path)
    directory = Uuid.from_base64(meta_directory_id(tmp_path))
    assert control.kraft_version == 1
    assert control.voters.keys() == (ReplicaKey(1, directory),)
    assert control.voters.node(1).endpoints == (Endpoint("CONTROLLER", "127.0.0.1", 9093),)
    assert "Bootstrap voters" in result.stdout
    # What a node starting on it reads: the log's voter history begins with that set.
    log = MemoryRaftLog()
    log.create_snapshot(BOOTSTRAP_SNAPSHOT_ID, bootstrap_snapshot_path(tmp_path / "data-1").read_bytes())
    history = VoterHistory(static=None)
    history.load(log)
    assert history.voters == control.voters and history.latest_offset == -1 and history.kraft_version == 1


def test_initial_controllers_give_this_node_the_directory_id_they_name(tmp_path):
    ids = [random_uuid_str() for _ in range(3)]
    voters = ",".join(f"{i}@127.0.0.1:{9092 + i}:{d}" for i, d in zip((1, 2, 3), ids, strict=True))
    result = run("storage", "format", "-c", config(tmp_path, node_id=2), "-t", CLUSTER, "--initial-controllers", voters)
    assert result.exit_code == 0, result.output
    assert meta_directory_id(tmp_path, 2) == ids[1]
    control = bootstrap_voters(tmp_path, 2)
    assert [str(k) for k in control.voters.keys()] == [f"{i}:{d}" for i, d in zip((1, 2, 3), ids, strict=True)]


def test_no_initial_controllers_writes_no_voters(tmp_path):
    result = run("storage", "format", "-c", config(tmp_path), "-t", CLUSTER, "--no-initial-controllers")
    assert result.exit_code == 0, result.output
    assert not bootstrap_snapshot_path(tmp_path / "data-1").exists()
    broker = run("storage", "format", "-c", config(tmp_path, node_id=4, roles="broker"), "-t", CLUSTER)
    assert broker.exit_code == 0, broker.output


@pytest.mark.parametrize(("case", "flags", "message"), [
    ("two flags", ["--standalone", "--no-initial-controllers"], "give at most one of"),
    ("none", [], "give --standalone, --initial-controllers or --no-initial-controllers"),
    ("static voters", ["--standalone"], "controller.quorum.voters makes this one static"),
    ("broker", ["--no-initial-controllers"], "has none"),
    ("wildcard", ["--standalone"], "names no host others can reach"),
    ("not named", ["--initial-controllers", "2@127.0.0.1:9094:" + random_uuid_str()], "node.id=1 is not one of"),
    ("bad entry", ["--initial-controllers", "1@127.0.0.1:9093"], "is not id@host:port:directory-id"),
    ("bad id", ["--initial-controllers", "1@127.0.0.1:9093:nope"], "directory id"),
    ("twice", ["--initial-controllers", f"1@h:1:{random_uuid_str()},1@h:2:{random_uuid_str()}"], "twice"),
])
def test_what_cannot_be_a_dynamic_quorum_is_refused_before_anything_is_written(tmp_path, case, flags, message):
    kwargs: dict = {}
    if case == "static voters":
        kwargs["quorum"] = "controller.quorum.voters=1@127.0.0.1:9093"
    elif case == "broker":
        kwargs["roles"] = "broker"
    elif case == "wildcard":
        kwargs["listener"] = "CONTROLLER://0.0.0.0:9093"
    result = run("storage", "format", "-c", config(tmp_path, **kwargs), "-t", CLUSTER, *flags)
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "data-1" / "meta.properties").exists()
    assert not (tmp_path / "data-4" / "meta.properties").exists()


def test_a_wildcard_listener_can_be_advertised(tmp_path):
    cfg = config(tmp_path, listener="CONTROLLER://0.0.0.0:9093",
                 extra="advertised.listeners=CONTROLLER://c1.example:9093\n")
    result = run("storage", "format", "-c", cfg, "-t", CLUSTER, "--standalone")
    assert result.exit_code == 0, result.output
    assert bootstrap_voters(tmp_path).voters.node(1).endpoints == (Endpoint("CONTROLLER", "c1.example", 9093),)
