"""`kraftpy controller`, `kraftpy broker` and `kraftpy server`: the server processes."""

from __future__ import annotations

from kraftpy.cli.common import (
    ConfigOption,
    LogFormatOption,
    LogLevelOption,
    OverrideOption,
    fail,
    load_config_or_exit,
    setup_logging,
)
from kraftpy.cli.process import cluster_id_or_exit, run_or_exit, serve_until_signal


def run_node(config, override, log_level: str, log_format: str, roles: set[str] | None, command: str) -> None:
    from kraftpy.node import KraftNode

    cfg = load_config_or_exit(config, override)
    if roles is not None and cfg.roles != roles:
        fail(f"{config}: process.roles={','.join(sorted(cfg.roles))}: `kraftpy {command}` runs "
             f"process.roles={','.join(sorted(roles))} (`kraftpy server` runs any roles)")
    setup_logging(log_level, log_format, cfg.node_id, cfg.role_name)
    cluster_id = cluster_id_or_exit(cfg)

    async def main() -> None:
        node = KraftNode(cfg, cluster_id, freeze_gc_when_ready=True)
        await serve_until_signal(node.run, node.stop_gracefully)

    run_or_exit(main)


def controller(config: ConfigOption, override: OverrideOption = None, log_level: LogLevelOption = "info",
               log_format: LogFormatOption = "auto") -> None:
    """Run a controller: a voter of the metadata quorum (process.roles=controller)."""
    run_node(config, override, log_level, log_format, {"controller"}, "controller")


def broker(config: ConfigOption, override: OverrideOption = None, log_level: LogLevelOption = "info",
           log_format: LogFormatOption = "auto") -> None:
    """Run a broker (process.roles=broker); SIGTERM moves its leaderships away before it stops."""
    run_node(config, override, log_level, log_format, {"broker"}, "broker")


def server(config: ConfigOption, override: OverrideOption = None, log_level: LogLevelOption = "info",
           log_format: LogFormatOption = "auto") -> None:
    """Run whatever process.roles names: broker, controller, or both in one process."""
    run_node(config, override, log_level, log_format, None, "server")
