"""`kraftpy quorum status | describe | add-controller | remove-controller`: the metadata quorum
(kafka-metadata-quorum.sh).

``status`` (also ``describe --status``, Kafka's spelling) prints the leader, epoch, high watermark and
every replica's progress; ``describe --replication`` one line per replica with its directory id, as
Kafka's tool does. Ask the controllers (``--bootstrap-controller``: their control plane, following a
voter's pointer to the Raft leader) or any broker (``--bootstrap-server``: DescribeQuorum, which the
broker forwards to the leader, as kafka-metadata-quorum.sh does). Both print the same, or with ``--json``
the same document.

A dynamic quorum (KIP-853) changes with ``add-controller`` (the controller of ``--config``, running and
caught up as an observer, becomes a voter: its node.id, the directory id of its metadata.log.dir and its
controller listener) and ``remove-controller --controller-id N --controller-directory-id D``, asked of
the controllers (``--bootstrap-controller``), answered once the leader committed the change.

Exit codes are the admin commands': 1 the quorum answered with an error (no leader, a refused change), 2
a bad flag, 3 nothing could be reached.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import trio
import typer

from kraftpy.admin.client import AdminClient, check
from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    BootstrapServerOption,
    CommandConfigOption,
    client_config,
    die,
    run_admin,
    run_trio,
)
from kraftpy.config import ConfigError, load_config
from kraftpy.config.schema import parse_list
from kraftpy.ids import Uuid
from kraftpy.metadata import quorum_membership as membership
from kraftpy.metadata.rpc import QUORUM_STATUS_API
from kraftpy.metadata.topic_names import CLUSTER_METADATA_TOPIC_NAME
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import DescribeQuorumRequest
from kraftpy.raft.voters import Endpoint, ReplicaKey
from kraftpy.rpc.control import ControlClient, RpcError
from kraftpy.storage.meta_properties import MetaPropertiesError, read_meta_properties

#: The codes of a controller that could not be reached or did not answer in time.
UNREACHED = ("NETWORK_EXCEPTION", "REQUEST_TIMED_OUT")

app = typer.Typer(help="Inspect and change the metadata quorum.", no_args_is_help=True)



def parse_addresses(text: str) -> list[tuple[str, int]]:
    out = []
    for item in parse_list(text):
        item = item.split("@", 1)[-1]  # accept id@host:port as in controller.quorum.voters
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"{item!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise ValueError("no controller given")
    return out


async def fetch_status(addresses: list[tuple[str, int]], timeout: float = 5.0, tls: Any = None,
                       sasl: Any = None) -> dict[str, Any]:
    """Ask the bootstrap controllers, following a non-leader's pointer to the leader (``tls`` and ``sasl``:
    the --command-config's `ClientTls` and `SaslLogin` for a controller listener over TLS or SASL)."""
    return await ask_leader(addresses, QUORUM_STATUS_API, {}, timeout, tls, sasl)


async def ask_leader(addresses: list[tuple[str, int]], api: str, body: dict[str, Any], timeout: float = 5.0,
                     tls: Any = None, sasl: Any = None) -> dict[str, Any]:
    """Send a control-plane request the quorum's leader answers: to the bootstrap controllers in turn,
    following a NOT_LEADER_OR_FOLLOWER's ``id@host:port`` to the leader. An error the leader answers
    with is raised as it is."""
    errors = []
    reached = False
    answered: RpcError | None = None
    queue = list(addresses)
    seen: set[tuple[str, int]] = set()
    async with trio.open_nursery() as nursery:
        while queue:
            address = queue.pop(0)
            if address in seen:
                continue
            seen.add(address)
            client = ControlClient(nursery, *address, request_timeout=timeout, connect_timeout=timeout, tls=tls,
                                   sasl=sasl)
            try:
                return await client.request(api, body)
            except RpcError as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
                reached = reached or exc.code not in UNREACHED
                if exc.code == "NOT_LEADER_OR_FOLLOWER" and "@" in exc.message:
                    queue.insert(0, parse_addresses(exc.message)[0])
                elif api != QUORUM_STATUS_API and exc.code not in UNREACHED and exc.code != "NOT_LEADER_OR_FOLLOWER":
                    answered = exc  # the leader's refusal of a change: no other controller would say otherwise
                    break
            finally:
                await client.aclose()
    if answered is not None:
        raise answered
    raise RpcError("UNAVAILABLE" if reached else "NETWORK_EXCEPTION", "no leader answered: " + "; ".join(errors))


async def describe_quorum(admin: AdminClient) -> dict[str, Any]:
    """DescribeQuorum through a broker, as the dict `fetch_status` returns (the lag of each replica
    from the high watermark, times as milliseconds ago)."""
    Request = DescribeQuorumRequest
    response = await admin.request(ApiKey.DESCRIBE_QUORUM, Request(topics=[Request.TopicData(
        topic_name=CLUSTER_METADATA_TOPIC_NAME, partitions=[Request.PartitionData(partition_index=0)])]))
    check(response.error_code, response.error_message, subject="DescribeQuorum")
    partition = response.topics[0].partitions[0]
    check(partition.error_code, partition.error_message, subject=f"{CLUSTER_METADATA_TOPIC_NAME}-0")
    if admin.cluster_id is None:
        await admin.refresh_metadata()
    now_ms = int(time.time() * 1000)
    hw = partition.high_watermark

    def replica(state: Any) -> dict[str, Any]:
        def ago(at: int) -> int | None:
            return None if at < 0 else max(0, now_ms - at)

        directory = state.replica_directory_id
        return {"id": state.replica_id,
                "directory_id": Uuid(directory.bytes).to_base64() if directory is not None and directory.int else None,
                "log_end_offset": state.log_end_offset,
                "lag": max(0, hw - state.log_end_offset), "last_fetch_ms_ago": ago(state.last_fetch_timestamp),
                "last_caught_up_ms_ago": ago(state.last_caught_up_timestamp)}

    return {"cluster_id": admin.cluster_id, "leader_id": partition.leader_id, "leader_epoch": partition.leader_epoch,
            "high_watermark": hw, "voters": [replica(v) for v in partition.current_voters],
            "observers": [replica(o) for o in partition.observers],
            "endpoints": {str(n.node_id): [{"name": li.name, "host": li.host, "port": li.port} for li in n.listeners]
                          for n in response.nodes or ()}}


def render(status: dict[str, Any]) -> str:
    voters = status["voters"]
    observers = status["observers"]
    followers = [v for v in voters if v["id"] != status["leader_id"]]
    max_lag = max((v["lag"] for v in followers), default=0)
    lines = [
        f"ClusterId:              {status['cluster_id']}",
        f"LeaderId:               {status['leader_id']}",
        f"LeaderEpoch:            {status['leader_epoch']}",
        f"HighWatermark:          {status['high_watermark']}",
        f"MaxFollowerLag:         {max_lag}",
        f"CurrentVoters:          {[v['id'] for v in voters]}",
        f"CurrentObservers:       {[o['id'] for o in observers]}",
        "",
        f"{'NodeId':<8}{'LogEndOffset':>14}{'Lag':>8}{'LastFetchMsAgo':>16}{'LastCaughtUpMsAgo':>19}  Status",
    ]
    for kind, replicas in (("Leader", [v for v in voters if v["id"] == status["leader_id"]]),
                           ("Follower", followers), ("Observer", observers)):
        for r in replicas:
            fetched = "-" if r["last_fetch_ms_ago"] is None else str(r["last_fetch_ms_ago"])
            caught = "-" if r["last_caught_up_ms_ago"] is None else str(r["last_caught_up_ms_ago"])
            lines.append(f"{r['id']:<8}{r['log_end_offset']:>14}{r['lag']:>8}{fetched:>16}{caught:>19}  {kind}")
    return "\n".join(lines)


def render_replication(status: dict[str, Any]) -> str:
    """One line per replica, as kafka-metadata-quorum.sh describe --replication prints them."""
    rows = [["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
             "Status"]]
    leader = status["leader_id"]
    ordered = ([("Leader", v) for v in status["voters"] if v["id"] == leader]
               + [("Follower", v) for v in status["voters"] if v["id"] != leader]
               + [("Observer", o) for o in status["observers"]])
    for kind, r in ordered:
        rows.append([str(r["id"]), r.get("directory_id") or "-", str(r["log_end_offset"]), str(r["lag"]),
                     "-" if r["last_fetch_ms_ago"] is None else f"{r['last_fetch_ms_ago']} ms ago",
                     "-" if r["last_caught_up_ms_ago"] is None else f"{r['last_caught_up_ms_ago']} ms ago", kind])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


BootstrapControllerFlag = Annotated[str | None, typer.Option(
    "--bootstrap-controller", help="Controllers to ask, as host:port[,host:port...].", show_default=False)]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
TimeoutFlag = Annotated[float, typer.Option("--timeout", help="Seconds to wait for each controller.")]


def _status(bootstrap_controller: str | None, bootstrap_server: str | None, timeout: float,
            command_config: Any) -> dict[str, Any]:
    if (bootstrap_controller is None) == (bootstrap_server is None):
        die("give exactly one of --bootstrap-controller and --bootstrap-server", EXIT_USAGE)
    if bootstrap_server is not None:
        return run_admin(bootstrap_server, command_config, describe_quorum)
    assert bootstrap_controller is not None
    addresses = _addresses_or_exit(bootstrap_controller)
    config = client_config(command_config)
    try:
        return run_trio(fetch_status, addresses, timeout, config.tls, config.sasl)
    except RpcError as exc:
        die(exc.message or str(exc), EXIT_UNREACHABLE if exc.code in UNREACHED else EXIT_FAILED)


def _addresses_or_exit(bootstrap_controller: str) -> list[tuple[str, int]]:
    try:
        return parse_addresses(bootstrap_controller)
    except ValueError as exc:
        die(f"--bootstrap-controller={bootstrap_controller}: {exc}", EXIT_USAGE)


@app.command("status")
def status(
    bootstrap_controller: BootstrapControllerFlag = None,
    bootstrap_server: BootstrapServerOption = None,
    as_json: JsonFlag = False,
    timeout: TimeoutFlag = 5.0,
    command_config: CommandConfigOption = None,
) -> None:
    """Print the leader, epoch, high watermark, and every voter's and observer's progress (ask the
    controllers with --bootstrap-controller, or any broker with --bootstrap-server)."""
    result = _status(bootstrap_controller, bootstrap_server, timeout, command_config)
    typer.echo(json.dumps(result, indent=2, sort_keys=True) if as_json else render(result))


@app.command("describe")
def describe(
    show_status: Annotated[bool, typer.Option("--status", help="The quorum's state (as `kraftpy quorum status`).")]
    = False,
    replication: Annotated[bool, typer.Option(
        "--replication", help="One line per replica: directory id, log end offset, lag, last fetch and last "
        "caught up, and whether it leads, follows or observes.")] = False,
    bootstrap_controller: BootstrapControllerFlag = None,
    bootstrap_server: BootstrapServerOption = None,
    as_json: JsonFlag = False,
    timeout: TimeoutFlag = 5.0,
    command_config: CommandConfigOption = None,
) -> None:
    """Describe the quorum (kafka-metadata-quorum.sh describe): --status or --replication."""
    if show_status == replication:
        die("give exactly one of --status and --replication", EXIT_USAGE)
    result = _status(bootstrap_controller, bootstrap_server, timeout, command_config)
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        typer.echo(render(result) if show_status else render_replication(result))


def _change(bootstrap_controller: str | None, api: str, body: dict[str, Any], timeout: float,
            command_config: Any) -> None:
    if bootstrap_controller is None:
        die(f"{api} is asked of the controllers: give --bootstrap-controller", EXIT_USAGE)
    addresses = _addresses_or_exit(bootstrap_controller)
    config = client_config(command_config)
    try:
        run_trio(ask_leader, addresses, api, body, timeout, config.tls, config.sasl)
    except RpcError as exc:
        die(f"{exc.code}: {exc.message}" if exc.message else str(exc),
            EXIT_UNREACHABLE if exc.code in UNREACHED else EXIT_FAILED)


@app.command("add-controller")
def add_controller(
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="The properties file of the controller to add (its node.id, controller listener "
        "and metadata.log.dir, whose meta.properties holds its directory id); --command-config when not given, "
        "as kafka-metadata-quorum.sh reads it.", show_default=False)] = None,
    bootstrap_controller: BootstrapControllerFlag = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the change to commit.")] = 60.0,
    command_config: CommandConfigOption = None,
) -> None:
    """Make a running controller, caught up as an observer, a voter of the dynamic quorum."""
    path = config or command_config
    if path is None:
        die("name the controller to add: --config (its properties file)", EXIT_USAGE)
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        die(str(exc), EXIT_USAGE)
    if not cfg.is_controller:
        die(f"{path}: process.roles={','.join(sorted(cfg.roles))} is not a controller", EXIT_USAGE)
    try:
        meta = read_meta_properties(cfg.metadata_log_dir)
    except (OSError, MetaPropertiesError) as exc:
        die(f"{cfg.metadata_log_dir}: {exc}", EXIT_USAGE)
    if meta is None:
        die(f"{cfg.metadata_log_dir} is not formatted: format it with kraftpy storage format "
            "--no-initial-controllers and start the controller first", EXIT_USAGE)
    listener = cfg.advertised_controller_listener
    assert listener is not None
    key = ReplicaKey(cfg.node_id, Uuid.from_base64(meta.directory_id))
    body = membership.add_request(key, (Endpoint(listener.name, listener.host, listener.port),))
    _change(bootstrap_controller, membership.ADD_RAFT_VOTER_API, body, timeout,
            command_config if config is not None else None)
    typer.echo(f"Added controller {key.id} with directory id {key.directory_id} and endpoint {listener}.")


@app.command("remove-controller")
def remove_controller(
    controller_id: Annotated[int, typer.Option("--controller-id", help="The node id of the controller to remove.",
                                               show_default=False)],
    controller_directory_id: Annotated[str, typer.Option(
        "--controller-directory-id", help="The directory id of its metadata log (describe --replication shows it).",
        show_default=False)],
    bootstrap_controller: BootstrapControllerFlag = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the change to commit.")] = 60.0,
    command_config: CommandConfigOption = None,
) -> None:
    """Remove a voter (the leader too: it hands over once the removal is committed)."""
    try:
        key = ReplicaKey(controller_id, Uuid.from_base64(controller_directory_id))
    except ValueError as exc:
        die(f"--controller-directory-id={controller_directory_id}: {exc}", EXIT_USAGE)
    if controller_id < 0:
        die(f"--controller-id={controller_id}: not a node id", EXIT_USAGE)
    _change(bootstrap_controller, membership.REMOVE_RAFT_VOTER_API, membership.remove_request(key), timeout,
            command_config)
    typer.echo(f"Removed controller {controller_id} with directory id {controller_directory_id}.")
