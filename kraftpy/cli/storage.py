"""`kraftpy storage random-uuid | format | info`, with kafka-storage.sh's flags."""

from __future__ import annotations

from typing import Annotated

import typer

from kraftpy.cli.common import ConfigOption, OverrideOption, fail, load_config_or_exit
from kraftpy.ids import random_uuid_str
from kraftpy.metadata import metadata_version
from kraftpy.metadata.bootstrap import BootstrapError, parse_add_scram, write_bootstrap
from kraftpy.metadata.records import FeatureLevelRecord
from kraftpy.storage.formatter import FormatError, format_dirs, inspect_dirs

app = typer.Typer(help="Format log directories and show their state.", no_args_is_help=True)


@app.command("random-uuid")
def random_uuid() -> None:
    """Print a new random id (22 characters of URL-safe base64), for --cluster-id."""
    typer.echo(random_uuid_str())


@app.command("format")
def format_(
    config: ConfigOption,
    cluster_id: Annotated[str, typer.Option("--cluster-id", "-t", help="The cluster id.", show_default=False)],
    ignore_formatted: Annotated[
        bool, typer.Option("--ignore-formatted", "-g", help="Skip directories that are already formatted.")
    ] = False,
    override: OverrideOption = None,
    add_scram: Annotated[list[str] | None, typer.Option(
        "--add-scram", "-S", help="A SCRAM credential the new cluster starts with, as Kafka's "
        "'SCRAM-SHA-512=[name=admin,password=admin-secret]' (also iterations=, salt=, saltedpassword=).",
        show_default=False)] = None,
    release_version: Annotated[str | None, typer.Option(
        "--release-version", "-r", help="The metadata.version the new cluster starts at, as a Kafka release "
        f"({metadata_version.NAMES[metadata_version.MINIMUM]} to {metadata_version.NAMES[metadata_version.LATEST]}; "
        "3.7 means 3.7-IV4); the newest by default. Raise it later with 'kraftpy features upgrade'.",
        show_default=False)] = None,
) -> None:
    """Write meta.properties into every log directory and the metadata log directory."""
    cfg = load_config_or_exit(config, override)
    bootstrap: list = []
    level = metadata_version.LATEST
    if release_version is not None:
        try:
            level = metadata_version.parse_release_version(release_version)
        except metadata_version.ReleaseVersionError as exc:
            fail(f"--release-version: {exc}")
        bootstrap.append(FeatureLevelRecord("metadata.version", level))
    try:
        scram = [parse_add_scram(text) for text in add_scram or ()]
    except BootstrapError as exc:
        fail(str(exc))
    if scram and not metadata_version.scram_supported(level):
        fail(f"--add-scram: SCRAM is only supported in metadata.version {metadata_version.NAMES[metadata_version.SCRAM_LEVEL]}"
             f" or later, not {metadata_version.name(level)} (--release-version)")
    bootstrap += scram
    try:
        result = format_dirs(cfg.all_dirs, cluster_id, cfg.node_id, ignore_formatted)
    except FormatError as exc:
        fail(str(exc))
    if bootstrap and cfg.metadata_log_dir in result.formatted:
        write_bootstrap(cfg.metadata_log_dir, bootstrap)
        if release_version is not None:
            typer.echo(f"Bootstrap metadata in {cfg.metadata_log_dir}: metadata.version {metadata_version.name(level)} "
                       f"({level}).")
        if scram:
            typer.echo(f"Bootstrap metadata in {cfg.metadata_log_dir}: SCRAM credentials for "
                       f"{', '.join(sorted({r.name for r in scram}))}.")
    for d in result.formatted:
        typer.echo(f"Formatted {d} for cluster {cluster_id}, node {cfg.node_id}.")
    for d in result.skipped:
        typer.echo(f"Skipped {d}: already formatted for cluster {cluster_id}, node {cfg.node_id}.")
    if scram and cfg.metadata_log_dir in result.skipped:
        # Bootstrap records are only read when a cluster starts from an empty metadata log.
        typer.echo(f"SCRAM credentials for {', '.join(sorted({r.name for r in scram}))} not added: "
                   f"{cfg.metadata_log_dir} was already formatted (add them with 'kraftpy configs alter "
                   "--entity-type users').", err=True)


@app.command("info")
def info(config: ConfigOption, override: OverrideOption = None) -> None:
    """Show each directory's state and ids, and what is wrong with any of them."""
    cfg = load_config_or_exit(config, override)
    infos = inspect_dirs(cfg.all_dirs, cfg.node_id)
    bad = False
    for item in infos:
        role = " (metadata log)" if item.path == cfg.metadata_log_dir else ""
        typer.echo(f"{item.path}{role}: {item.state}")
        if item.meta is not None:
            typer.echo(f"  cluster.id={item.meta.cluster_id} node.id={item.meta.node_id} "
                       f"directory.id={item.meta.directory_id} version={item.meta.version}")
        for problem in item.problems:
            bad = True
            typer.echo(f"  problem: {problem}")
    if bad:
        raise typer.Exit(1)
