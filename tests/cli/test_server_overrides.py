"""`kraftpy server`, `broker` and `controller` take `--override key=value` (repeatable, Kafka's flag),
validated like a line of the file: a bad value or a malformed override stops the command before it
starts anything, with one line naming the override, the key and the value; an unknown key is a warning.

The checks run in-process: each command fails while it loads its configuration, before any port opens.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftpy.cli.main import app
from tests.helpers.cli_runner import CliRunner

runner = CliRunner()
COMMANDS = ("server", "broker", "controller")


@pytest.fixture
def combined(tmp_path: Path) -> Path:
    """A valid combined (broker and controller) configuration; no process is started from it."""
    path = tmp_path / "server.properties"
    path.write_text("process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:1\n"
                    "listeners=PLAINTEXT://127.0.0.1:2,CONTROLLER://127.0.0.1:1\n"
                    "controller.listener.names=CONTROLLER\n"
                    f"log.dirs={tmp_path / 'data'}\n")
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_override_value_is_one_line_naming_it(command: str, combined: Path) -> None:
    result = runner.invoke(app, [command, "-c", str(combined), "--override", "num.partitions=2",
                                 "--override", "num.partitions=zero"])
    assert result.exit_code == 1, result.output
    assert result.stderr == "kraftpy: configuration error: --override: num.partitions=zero: not an integer\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_an_override_without_a_value_is_one_line(command: str, combined: Path) -> None:
    result = runner.invoke(app, [command, "-c", str(combined), "--override", "num.partitions"])
    assert result.exit_code == 1, result.output
    assert result.stderr == ("kraftpy: configuration error: --override: num.partitions: an override is written "
                             "key=value\n")


def test_overrides_are_what_the_role_check_sees(combined: Path) -> None:
    """An override changes the configuration that is validated: an unknown key is warned about, and with
    process.roles=broker the file's controller listener is refused as a broker-only process's would be."""
    refused = runner.invoke(app, ["broker", "-c", str(combined), "--override", "no.such.key=1"])
    assert refused.exit_code == 1
    lines = refused.stderr.splitlines()
    assert lines[0] == "kraftpy: warning: --override: unknown configuration key no.such.key (ignored)"
    assert lines[1].endswith("process.roles=broker,controller: `kraftpy broker` runs process.roles=broker "
                             "(`kraftpy server` runs any roles)")
    as_broker = runner.invoke(app, ["broker", "-c", str(combined), "--override", "process.roles=broker"])
    assert as_broker.exit_code == 1
    assert as_broker.stderr == (f"kraftpy: configuration error: {combined}:4: listeners=PLAINTEXT://127.0.0.1:2,"
                                "CONTROLLER://127.0.0.1:1: a broker-only process must not listen on controller "
                                "listener CONTROLLER\n")
