"""`kraftpy config docs | check`: the configuration reference and a dry validation."""

from __future__ import annotations

import typer

from kraftpy.cli.common import ConfigOption, OverrideOption, load_config_or_exit
from kraftpy.config.docgen import render

app = typer.Typer(help="The configuration reference and checks.", no_args_is_help=True)


@app.command("docs")
def docs() -> None:
    """Print docs/configuration.md, generated from the schema."""
    typer.echo(render(), nl=False)


@app.command("check")
def check(config: ConfigOption, override: OverrideOption = None) -> None:
    """Validate a configuration file as a process would at start, and print what it resolves to."""
    cfg = load_config_or_exit(config, override)
    typer.echo(f"{config}: valid ({cfg.role_name}, node.id={cfg.node_id})")
    typer.echo(f"  listeners: {', '.join(str(listener) for listener in cfg.listeners)}")
    typer.echo(f"  log dirs: {', '.join(str(d) for d in cfg.log_dirs)}; metadata: {cfg.metadata_log_dir}")
