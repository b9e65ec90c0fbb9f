"""What every command shares: loading the configuration, reporting errors in one line, logging."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from kraftpy.config import ConfigError, KraftConfig, load_config
from kraftpy.logs import FORMATS, LEVELS, bind_process, configure_logging

ConfigOption = Annotated[
    Path, typer.Option("--config", "-c", help="The .properties configuration file.", show_default=False)
]
OverrideOption = Annotated[
    list[str] | None,
    typer.Option("--override", metavar="KEY=VALUE",
                 help="A configuration key=value that wins over the file, validated like it; may be repeated.",
                 show_default=False),
]
LogLevelOption = Annotated[str, typer.Option("--log-level", help=f"One of {', '.join(LEVELS)}.")]
LogFormatOption = Annotated[
    str, typer.Option("--log-format", help="auto (console on a terminal, JSON otherwise), console or json.")
]


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"kraftpy: {message}", err=True)
    raise typer.Exit(code)


def load_config_or_exit(path: Path | None, overrides: list[str] | None) -> KraftConfig:
    """Load and validate; a problem prints one line (key, value, file, line) and exits 1."""
    try:
        config = load_config(path, overrides or ())
    except ConfigError as exc:
        fail(f"configuration error: {exc}")
    for entry in config.unknown:
        where = f"{entry.source}:{entry.line}" if entry.line else entry.source
        typer.echo(f"kraftpy: warning: {where}: unknown configuration key {entry.key} (ignored)", err=True)
    return config


def setup_logging(level: str, fmt: str, node_id: int | None, role: str | None) -> None:
    if level not in LEVELS:
        fail(f"--log-level={level}: not one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        fail(f"--log-format={fmt}: not one of {', '.join(FORMATS)}")
    configure_logging(level, fmt)
    bind_process(node_id, role)
