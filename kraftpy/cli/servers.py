"""`kraftpy controller` and `kraftpy broker`: the two server processes."""

from __future__ import annotations

import trio
import typer

from kraftpy.cli.common import (
    ConfigOption,
    LogFormatOption,
    LogLevelOption,
    OverrideOption,
    fail,
    load_config_or_exit,
    setup_logging,
)
from kraftpy.cli.process import cluster_id_or_exit, serve_until_signal


def controller(
    config: ConfigOption,
    override: OverrideOption = None,
    log_level: LogLevelOption = "info",
    log_format: LogFormatOption = "auto",
) -> None:
    """Run a controller: a voter of the metadata quorum (process.roles=controller)."""
    from kraftpy.metadata.controller_server import ControllerServer

    cfg = load_config_or_exit(config, override)
    if cfg.roles != {"controller"}:
        fail(f"{config}: process.roles={','.join(sorted(cfg.roles))}: `kraftpy controller` runs "
             "process.roles=controller (use `kraftpy broker` for brokers)")
    setup_logging(log_level, log_format, cfg.node_id, "controller")
    cluster_id = cluster_id_or_exit(cfg)

    async def main() -> None:
        server = ControllerServer(cfg, cluster_id)
        await serve_until_signal(server.run, server.resign)

    trio.run(main)


def register(app: typer.Typer) -> None:
    app.command("controller")(controller)
