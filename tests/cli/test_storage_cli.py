"""The storage and config commands through typer's test runner."""

import json

import pytest

from kraftpy.cli.main import app
from kraftpy.ids import uuid_from_str
from tests.helpers.cli_runner import CliRunner

runner = CliRunner()


def props(tmp_path, extra="", name="server.properties"):
    path = tmp_path / name
    path.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path}/logs1,{tmp_path}/logs2\n"
        f"metadata.log.dir={tmp_path}/meta\n" + extra)
    return path


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_random_uuid():
    result = run("storage", "random-uuid")
    assert result.exit_code == 0
    assert len(uuid_from_str(result.stdout.strip())) == 16


def test_format_then_info(tmp_path):
    cfg = props(tmp_path)
    cluster = run("storage", "random-uuid").stdout.strip()
    result = run("storage", "format", "-c", cfg, "-t", cluster)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("Formatted") == 3
    for d in ("logs1", "logs2", "meta"):
        assert f"cluster.id={cluster}" in (tmp_path / d / "meta.properties").read_text()
    info = run("storage", "info", "-c", cfg)
    assert info.exit_code == 0, info.output
    assert info.stdout.count(": formatted") == 3
    assert "(metadata log)" in info.stdout


def test_format_twice_fails_then_ignore_formatted_is_idempotent(tmp_path):
    cfg = props(tmp_path)
    cluster = run("storage", "random-uuid").stdout.strip()
    assert run("storage", "format", "--config", cfg, "--cluster-id", cluster).exit_code == 0
    again = run("storage", "format", "--config", cfg, "--cluster-id", cluster)
    assert again.exit_code == 1
    assert "already formatted" in again.stderr and "Traceback" not in again.output
    ok = run("storage", "format", "-c", cfg, "-t", cluster, "-g")
    assert ok.exit_code == 0 and ok.stdout.count("Skipped") == 3


def test_format_refuses_other_cluster(tmp_path):
    cfg = props(tmp_path)
    run("storage", "format", "-c", cfg, "-t", run("storage", "random-uuid").stdout.strip())
    other = run("storage", "random-uuid").stdout.strip()
    result = run("storage", "format", "-c", cfg, "-t", other, "-g")
    assert result.exit_code == 1 and "formatted for cluster" in result.stderr


def test_format_with_bad_config_prints_one_line(tmp_path):
    cfg = props(tmp_path, "num.partitions=lots\n")
    result = run("storage", "format", "-c", cfg, "-t", "MkU3OEVBNTcwNTJENDM2Qg")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"kraftpy: configuration error: {cfg}:8: num.partitions=lots: not an integer"
    assert not (tmp_path / "logs1").exists()


def test_override_on_the_command_line(tmp_path):
    cfg = props(tmp_path)
    cluster = "MkU3OEVBNTcwNTJENDM2Qg"
    result = run("storage", "format", "-c", cfg, "-t", cluster, "--override", "node.id=1",
                 "--override", f"log.dirs={tmp_path}/other")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "other" / "meta.properties").exists()
    assert not (tmp_path / "logs1").exists()


def test_unknown_key_is_a_warning(tmp_path):
    cfg = props(tmp_path, "mystery.key=1\n")
    result = run("config", "check", "-c", cfg)
    assert result.exit_code == 0
    assert f"warning: {cfg}:8: unknown configuration key mystery.key" in result.stderr


def test_info_reports_mismatched_node(tmp_path):
    cfg = props(tmp_path)
    run("storage", "format", "-c", cfg, "-t", "MkU3OEVBNTcwNTJENDM2Qg")
    result = run("storage", "info", "-c", cfg, "--override", "node.id=1",
                 "--override", "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9094")
    assert result.exit_code == 0
    other = props(tmp_path, name="other.properties").read_text().replace("node.id=1", "node.id=2")
    (tmp_path / "other.properties").write_text(other.replace("1@127.0.0.1:9093", "2@127.0.0.1:9093"))
    bad = run("storage", "info", "-c", tmp_path / "other.properties")
    assert bad.exit_code == 1
    assert "formatted for node 1" in bad.stdout


def test_info_on_unformatted(tmp_path):
    result = run("storage", "info", "-c", props(tmp_path))
    assert result.exit_code == 1
    assert "missing" in result.stdout


def test_missing_config_file(tmp_path):
    result = run("storage", "info", "-c", tmp_path / "nope.properties")
    assert result.exit_code == 1
    assert "cannot read" in result.stderr


def test_config_docs_prints_the_reference():
    result = run("config", "docs")
    assert result.exit_code == 0 and "`log.segment.bytes`" in result.stdout


@pytest.mark.parametrize("fmt", ["json"])
def test_logging_lines_carry_node_id_and_role(fmt, capsys):
    import io

    from kraftpy.logs import bind_process, configure_logging, get_logger

    stream = io.StringIO()
    configure_logging("info", fmt, stream=stream)
    bind_process(7, "broker")
    get_logger("test").info("hello", x=1)
    get_logger("test").debug("hidden")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 1
    assert lines[0]["node_id"] == 7 and lines[0]["role"] == "broker" and lines[0]["event"] == "hello"


@pytest.mark.parametrize("name", ["controller-1", "controller-2", "controller-3", "broker-1", "broker-2", "broker-3"])
def test_storage_format_accepts_the_local_deploy_configs(tmp_path, name):
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "deploy" / "local" / f"{name}.properties"
    cluster = "MkU3OEVBNTcwNTJENDM2Qg"
    result = run("storage", "format", "-c", config, "-t", cluster, "--override", f"log.dirs={tmp_path / name}")
    assert result.exit_code == 0, result.output
    assert f"cluster.id={cluster}" in (tmp_path / name / "meta.properties").read_text()
