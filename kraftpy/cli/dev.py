"""`kraftpy dev`: a one-process cluster (one controller voter and one broker) for trying things out.

The directory (a new temporary one, or ``--dir``) holds ``server.properties`` and the data; it is
formatted the first time, and a later run on the same directory keeps the topics and records.

``server.properties`` is the user's as much as kraftpy's: it is written in full only when it does not
exist. On a later run the keys dev needs and the file lacks are appended, and every line the user
added or changed is kept. What wins, from weakest to strongest: the file, then ``--port`` and
``--controller-port`` when given (they set the listeners and the voter), then ``--override key=value``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import trio
import typer

from kraftpy.cli.common import (
    LogFormatOption,
    LogLevelOption,
    OverrideOption,
    fail,
    load_config_or_exit,
    setup_logging,
)
from kraftpy.cli.process import run_or_exit, serve_until_signal
from kraftpy.config.properties import PropertiesSyntaxError, format_properties, load_properties
from kraftpy.ids import random_uuid_str
from kraftpy.storage.dir_lock import hold_for_process
from kraftpy.storage.formatter import FormatError, ensure_formatted, format_dirs
from kraftpy.storage.meta_properties import read_meta_properties

DEFAULT_PORT = 9092
HEADER = "kraftpy dev: one controller and one broker in one process"
ADDED = "Added by kraftpy dev, which needs these keys; change them here, they are kept."


def port_properties(port: int, controller_port: int) -> dict[str, str]:
    """The keys ``--port`` and ``--controller-port`` decide."""
    return {
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
    }


def dev_properties(directory: Path, port: int, controller_port: int) -> dict[str, str]:
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        **port_properties(port, controller_port),
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(directory / "data"),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        # One broker, no one to wait for: a group's first rebalance completes at once.
        "group.initial.rebalance.delay.ms": "0",
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "9000",
        "controller.quorum.election.timeout.ms": "300",
    }


def write_or_complete(config_path: Path, needed: dict[str, str]) -> None:
    """Write ``server.properties`` when it does not exist; otherwise append only the needed keys it
    lacks, keeping the user's lines and comments as they are."""
    if not config_path.exists():
        config_path.write_text(format_properties(needed, header=HEADER))
        return
    try:
        present = {entry.key for entry in load_properties(config_path)}
    except PropertiesSyntaxError as exc:
        fail(f"configuration error: {exc}")
    missing = {key: value for key, value in needed.items() if key not in present}
    if missing:
        text = config_path.read_text(errors="replace")
        if text and not text.endswith("\n"):
            text += "\n"
        config_path.write_text(text + format_properties(missing, header=ADDED))


def bootstrap_address(config) -> str:
    listener = config.advertised_listeners[0]
    host = listener.host or "127.0.0.1"
    return f"{host}:{listener.port}"


def dev(
    directory: Annotated[Path | None, typer.Option(
        "--dir", help="Directory for the configuration and data (kept between runs).",
        show_default="a new temporary directory")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", help="The broker's port (PLAINTEXT listener); when given, wins over server.properties.",
        show_default=str(DEFAULT_PORT))] = None,
    controller_port: Annotated[int | None, typer.Option(
        "--controller-port", help="The controller's port; when given, wins over server.properties.",
        show_default="port + 1")] = None,
    override: OverrideOption = None,
    log_level: LogLevelOption = "info",
    log_format: LogFormatOption = "auto",
) -> None:
    """Run a one-process cluster and print its bootstrap address; Ctrl-C stops it cleanly.

    DIR/server.properties is written the first time and kept afterwards: keys added or changed there take effect on the next run. --override key=value (repeatable) wins over the file.
    """
    ports_given = port is not None or controller_port is not None
    port = DEFAULT_PORT if port is None else port
    if not 1 <= port <= 65535:
        fail(f"--port={port}: not a port between 1 and 65535")
    controller_port = port + 1 if controller_port is None else controller_port
    if not 1 <= controller_port <= 65535 or controller_port == port:
        fail(f"--controller-port={controller_port}: needs a port between 1 and 65535 other than --port")
    directory = Path(tempfile.mkdtemp(prefix="kraftpy-dev-")) if directory is None else directory
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / "server.properties"
    write_or_complete(config_path, dev_properties(directory, port, controller_port))
    from_flags = [f"{k}={v}" for k, v in port_properties(port, controller_port).items()] if ports_given else []
    config = load_config_or_exit(config_path, [*from_flags, *(override or ())])
    setup_logging(log_level, log_format, config.node_id, config.role_name)
    bootstrap = bootstrap_address(config)
    data = config.log_dirs[0]
    existing = read_meta_properties(data) if data.exists() else None
    try:
        if existing is None:
            format_dirs(config.all_dirs, random_uuid_str(), config.node_id)
        cluster_id = ensure_formatted(config.all_dirs, config.node_id)
        hold_for_process(config.all_dirs)
    except FormatError as exc:
        fail(str(exc))

    async def main() -> None:
        from kraftpy.node import KraftNode

        node = KraftNode(config, cluster_id, freeze_gc_when_ready=True)

        async def serve(task_status=trio.TASK_STATUS_IGNORED) -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(node.run)
                task_status.started()
                await node.ready.wait()
                typer.echo(f"kraftpy dev is running: bootstrap.servers={bootstrap} "
                           f"(cluster {cluster_id}, data in {directory}); Ctrl-C stops it")

        await serve_until_signal(serve, node.stop_gracefully)
        typer.echo("kraftpy dev stopped")

    run_or_exit(main)
