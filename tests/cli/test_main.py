"""`kraftpy COMMAND` imports its own command's module and not the others'; the whole app is the same."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer

from kraftpy.cli import main as cli_main

# Runs main() for argv and prints which kraftpy modules were loaded when it exited.
PROBE = """
import json, sys
sys.argv = ["kraftpy", *json.loads(sys.argv[1])]
from kraftpy.cli.main import main
try:
    main()
finally:
    sys.stdout.flush()
    sys.stderr.write("\\nMODULES " + json.dumps(sorted(m for m in sys.modules if m.startswith("kraftpy"))) + "\\n")
"""


def _probe(*args: str) -> tuple[int, str, set[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    line = [x for x in done.stderr.splitlines() if x.startswith("MODULES ")][-1]
    return done.returncode, done.stdout, set(json.loads(line.removeprefix("MODULES ")))


def test_the_whole_app_has_every_entry_and_nothing_else():
    commands = typer.main.get_command(cli_main.app).commands
    assert sorted(commands) == sorted(cli_main.ENTRIES)
    groups = {name for name, (_, _, group) in cli_main.ENTRIES.items() if group}
    assert {name for name, c in commands.items() if getattr(c, "commands", None)} == groups


def test_a_command_imports_its_own_module_only():
    code, out, modules = _probe("topics", "--help")
    assert code == 0 and "Usage: kraftpy topics" in out
    assert "kraftpy.cli.topics" in modules
    assert not modules & {"kraftpy.cli.metadata_cmd", "kraftpy.cli.storage", "kraftpy.raft.driver", "kraftpy.node",
                          "kraftpy.cli.dev"}, sorted(modules)
    # It reads one enum of kraftpy.metadata.records: the package does not load its controller with it.
    assert "kraftpy.metadata.records" in modules
    assert not modules & {"kraftpy.metadata.controller", "kraftpy.metadata.snapshot"}, sorted(modules)


def test_the_metadata_package_exports_its_names_and_submodules_when_asked():
    code = ("import sys, kraftpy.metadata as m\n"
            "assert 'kraftpy.metadata.controller' not in sys.modules\n"
            "from kraftpy.metadata import EMPTY_IMAGE, QuorumController, Uuid, load_snapshot\n"
            "from kraftpy.metadata.controller import QuorumController as Q\n"
            "from kraftpy.ids import Uuid as U\n"
            "assert QuorumController is Q and Uuid is U and m.MetadataImage is type(EMPTY_IMAGE)\n"
            "assert m.snapshot.load_snapshot is load_snapshot and 'QuorumController' in dir(m)\n"
            "assert set(m.__all__) <= set(dir(m))\n"
            "try:\n    m.no_such_name\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit('no error')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("args", [("dev", "--help"), ("dump-log", "--help"), ("broker", "--help")])
def test_a_single_command_is_still_a_subcommand(args):
    code, out, modules = _probe(*args)
    assert code == 0 and f"Usage: kraftpy {args[0]}" in out, out
    assert "kraftpy.cli.topics" not in modules


def test_help_and_an_unknown_command_load_every_command():
    code, out, modules = _probe("--help")
    assert code == 0
    for name in cli_main.ENTRIES:
        assert name in out
    assert {module for module, _, _ in cli_main.ENTRIES.values()} <= modules
    code, _, _ = _probe("no-such-command")
    assert code == 2


def test_app_for_builds_what_main_runs():
    only = typer.main.get_command(cli_main.app_for(["topics", "--list"])).commands
    assert list(only) == ["topics"]
    assert cli_main.app_for([]) is cli_main.app
    assert cli_main.app_for(["--help"]) is cli_main.app
    assert cli_main.app_for(["no-such-command"]) is cli_main.app
