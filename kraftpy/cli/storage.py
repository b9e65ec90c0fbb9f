"""`kraftpy storage random-uuid | format | info`, with kafka-storage.sh's flags.

A controller of a dynamic quorum (KIP-853: no controller.quorum.voters, the voters live in the metadata
log) is formatted with exactly one of Kafka's three flags: ``--standalone`` (a quorum of this controller
alone, to grow later), ``--initial-controllers id@host:port:directory-id,...`` (several, this node among
them: its metadata log directory gets the directory id named for it), or ``--no-initial-controllers``
(it joins a running quorum as an observer, to be added with `kraftpy quorum add-controller`). The
first two write the bootstrap snapshot holding kraft.version 1 and those voters
(kraftpy.raft.bootstrap_voters). None of them goes with controller.quorum.voters or a broker-only process.
"""

from __future__ import annotations

from typing import Annotated

import typer

from kraftpy.cli.common import ConfigOption, OverrideOption, fail, load_config_or_exit
from kraftpy.ids import Uuid, random_uuid_str
from kraftpy.metadata import metadata_version
from kraftpy.metadata.bootstrap import BootstrapError, parse_add_scram, write_bootstrap
from kraftpy.metadata.records import FeatureLevelRecord
from kraftpy.raft.bootstrap_voters import (
    InitialControllersError,
    parse_initial_controllers,
    write_bootstrap_snapshot,
)
from kraftpy.raft.voters import Endpoint, ReplicaKey, VoterNode, VoterSet
from kraftpy.storage.formatter import FormatError, format_dirs, inspect_dirs
from kraftpy.storage.meta_properties import read_meta_properties

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
    standalone: Annotated[bool, typer.Option(
        "--standalone", "-s", help="A dynamic quorum of this controller alone (add more with 'kraftpy quorum "
        "add-controller').")] = False,
    initial_controllers: Annotated[str | None, typer.Option(
        "--initial-controllers", "-I", help="The voters a dynamic quorum starts with, as "
        "id@host:port:directory-id,... (directory ids from 'kraftpy storage random-uuid'); this node is one.",
        show_default=False)] = None,
    no_initial_controllers: Annotated[bool, typer.Option(
        "--no-initial-controllers", "-N", help="A controller that joins a running dynamic quorum (as an observer "
        "until added with 'kraftpy quorum add-controller').")] = False,
) -> None:
    """Write meta.properties into every log directory and the metadata log directory."""
    cfg = load_config_or_exit(config, override)
    voters, directory_ids = _initial_voters(cfg, standalone, initial_controllers, no_initial_controllers)
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
        result = format_dirs(cfg.all_dirs, cluster_id, cfg.node_id, ignore_formatted, directory_ids)
    except FormatError as exc:
        fail(str(exc))
    if voters is not None:
        if cfg.metadata_log_dir in result.formatted:
            path = write_bootstrap_snapshot(cfg.metadata_log_dir, voters)
            typer.echo(f"Bootstrap voters in {path}: kraft.version 1, {voters}.")
        else:
            meta = read_meta_properties(cfg.metadata_log_dir)
            wanted = directory_ids.get(cfg.metadata_log_dir)
            if meta is not None and wanted is not None and meta.directory_id != wanted:
                fail(f"{cfg.metadata_log_dir} is formatted with directory id {meta.directory_id}, not the "
                     f"{wanted} the voters name for node {cfg.node_id}")
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


def _initial_voters(cfg, standalone: bool, initial_controllers: str | None,
                    no_initial_controllers: bool) -> tuple[VoterSet | None, dict]:
    """The voters a dynamic quorum is formatted with (None: none, a static quorum or a joining
    controller) and the directory id they name for this node's metadata log directory."""
    given = [flag for flag, on in (("--standalone", standalone), ("--initial-controllers", initial_controllers),
                                    ("--no-initial-controllers", no_initial_controllers)) if on]
    if len(given) > 1:
        fail(f"give at most one of --standalone, --initial-controllers and --no-initial-controllers, not "
             f"{' and '.join(given)}")
    if given and not cfg.is_controller:
        fail(f"{given[0]} formats a controller; process.roles={','.join(sorted(cfg.roles))} has none")
    if given and not cfg.is_dynamic_quorum:
        fail(f"{given[0]} is for a dynamic quorum; controller.quorum.voters makes this one static (use "
             "controller.quorum.bootstrap.servers instead)")
    if cfg.is_controller and cfg.is_dynamic_quorum and not given:
        fail("controller.quorum.voters is not set, so the voters are in the metadata log: give --standalone, "
             "--initial-controllers or --no-initial-controllers")
    if standalone:
        listener = cfg.advertised_controller_listener
        assert listener is not None
        if listener.host in ("", "0.0.0.0", "::"):
            fail(f"--standalone: the controller listener {listener} names no host others can reach; set "
                 "advertised.listeners for it")
        directory = random_uuid_str()
        node = VoterNode(ReplicaKey(cfg.node_id, Uuid.from_base64(directory)),
                         (Endpoint(listener.name, listener.host, listener.port),))
        return VoterSet((node,)), {cfg.metadata_log_dir: directory}
    if initial_controllers is not None:
        try:
            voters = parse_initial_controllers(initial_controllers, cfg.controller_listener_names[0])
        except InitialControllersError as exc:
            fail(f"--initial-controllers: {exc}")
        key = voters.key_of(cfg.node_id)
        if key is None or key.directory_id is None:
            fail(f"--initial-controllers: node.id={cfg.node_id} is not one of {voters}")
        return voters, {cfg.metadata_log_dir: key.directory_id.to_base64()}
    return None, {}


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
