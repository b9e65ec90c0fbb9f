"""The `kraftpy` command: one typer app, with each command group in its own module.

A command imports only its own module: `kraftpy topics --list` needs the admin client, not the Raft
log, the metadata loader and the broker, and a process that starts a node imports the node's modules
once, not every command's first. `kraftpy --help` (or an unknown command) builds the whole app.
`app`, the whole app, is built when first asked for (tests run it in-process).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

#: Command name -> (module, attribute, whether it is a group of commands (a Typer) or one command).
ENTRIES: dict[str, tuple[str, str, bool]] = {
    "storage": ("kraftpy.cli.storage", "app", True),
    "config": ("kraftpy.cli.config_cmd", "app", True),
    "quorum": ("kraftpy.cli.quorum", "app", True),
    "metadata": ("kraftpy.cli.metadata_cmd", "app", True),
    "perf": ("kraftpy.cli.perf", "app", True),
    "topics": ("kraftpy.cli.topics", "app", True),
    "configs": ("kraftpy.cli.configs", "app", True),
    "cluster": ("kraftpy.cli.cluster", "app", True),
    "features": ("kraftpy.cli.features", "app", True),
    "groups": ("kraftpy.cli.groups", "app", True),
    "console": ("kraftpy.cli.console", "app", True),
    "reassign": ("kraftpy.cli.reassign", "app", True),
    "leaders": ("kraftpy.cli.leaders", "app", True),
    "transactions": ("kraftpy.cli.transactions", "app", True),
    "acls": ("kraftpy.cli.acls", "app", True),
    "log-dirs": ("kraftpy.cli.log_dirs", "app", True),
    "controller": ("kraftpy.cli.servers", "controller", False),
    "broker": ("kraftpy.cli.servers", "broker", False),
    "server": ("kraftpy.cli.servers", "server", False),
    "dev": ("kraftpy.cli.dev", "dev", False),
    "dump-log": ("kraftpy.cli.dump_log", "dump_log", False),
}


def _root() -> typer.Typer:
    root = typer.Typer(
        name="kraftpy",
        help="kraftpy: a Kafka-compatible, self-managed distributed commit log.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @root.callback()
    def _group() -> None:
        # A group even when it holds one command: `kraftpy dev ...` names its command whatever else is loaded.
        pass

    return root


def build_app(names: list[str] | None = None) -> typer.Typer:
    """The `kraftpy` app with the commands ``names`` (all when None), each imported now."""
    root = _root()
    for name, (module, attribute, group) in ENTRIES.items():
        if names is not None and name not in names:
            continue
        target = getattr(importlib.import_module(module), attribute)
        if group:
            root.add_typer(target, name=name)
        else:
            root.command(name)(target)
    return root


_app: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    if name == "app":
        global _app
        if _app is None:
            _app = build_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def app_for(args: list[str]) -> typer.Typer:
    """The app `kraftpy ARGS` runs: the named command's alone, the whole app for anything else."""
    command = args[0] if args else None
    if command in ENTRIES:
        return build_app([command])
    return __getattr__("app")


def main() -> None:
    app_for(sys.argv[1:])()


if __name__ == "__main__":
    main()
