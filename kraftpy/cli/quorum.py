"""`kraftpy quorum status`: the metadata quorum as its leader sees it (kafka-metadata-quorum.sh).

Ask the controllers (``--bootstrap-controller``: their control plane, following a voter's pointer to the
Raft leader) or any broker (``--bootstrap-server``: DescribeQuorum, which the broker forwards to the
leader, as kafka-metadata-quorum.sh does). Both print the same table, or with ``--json`` the same
document. Exit codes are the admin commands': 1 the quorum answered with an error (no leader), 2 a
bad flag, 3 nothing could be reached.
"""

from __future__ import annotations

import json
import time
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
from kraftpy.config.schema import parse_list
from kraftpy.metadata.rpc import QUORUM_STATUS_API
from kraftpy.metadata.topic_names import CLUSTER_METADATA_TOPIC_NAME
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import DescribeQuorumRequest
from kraftpy.rpc.control import ControlClient, RpcError

#: The codes of a controller that could not be reached or did not answer in time.
UNREACHED = ("NETWORK_EXCEPTION", "REQUEST_TIMED_OUT")

app = typer.Typer(help="Inspect the metadata quorum.", no_args_is_help=True)



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
    errors = []
    reached = False
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
                return await client.request(QUORUM_STATUS_API, {})
            except RpcError as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
                reached = reached or exc.code not in UNREACHED
                if exc.code == "NOT_LEADER_OR_FOLLOWER" and "@" in exc.message:
                    queue.insert(0, parse_addresses(exc.message)[0])
            finally:
                await client.aclose()
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

        return {"id": state.replica_id, "log_end_offset": state.log_end_offset,
                "lag": max(0, hw - state.log_end_offset), "last_fetch_ms_ago": ago(state.last_fetch_timestamp),
                "last_caught_up_ms_ago": ago(state.last_caught_up_timestamp)}

    return {"cluster_id": admin.cluster_id, "leader_id": partition.leader_id, "leader_epoch": partition.leader_epoch,
            "high_watermark": hw, "voters": [replica(v) for v in partition.current_voters],
            "observers": [replica(o) for o in partition.observers]}


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


@app.command("status")
def status(
    bootstrap_controller: Annotated[str | None, typer.Option(
        "--bootstrap-controller", help="Controllers to ask, as host:port[,host:port...].", show_default=False)] = None,
    bootstrap_server: BootstrapServerOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each controller.")] = 5.0,
    command_config: CommandConfigOption = None,
) -> None:
    """Print the leader, epoch, high watermark, and every voter's and observer's progress (ask the
    controllers with --bootstrap-controller, or any broker with --bootstrap-server)."""
    if (bootstrap_controller is None) == (bootstrap_server is None):
        die("give exactly one of --bootstrap-controller and --bootstrap-server", EXIT_USAGE)
    if bootstrap_server is not None:
        result = run_admin(bootstrap_server, command_config, describe_quorum)
    else:
        assert bootstrap_controller is not None
        try:
            addresses = parse_addresses(bootstrap_controller)
        except ValueError as exc:
            die(f"--bootstrap-controller={bootstrap_controller}: {exc}", EXIT_USAGE)
        config = client_config(command_config)
        try:
            result = run_trio(fetch_status, addresses, timeout, config.tls, config.sasl)
        except RpcError as exc:
            die(exc.message or str(exc), EXIT_UNREACHABLE if exc.code in UNREACHED else EXIT_FAILED)
    typer.echo(json.dumps(result, indent=2, sort_keys=True) if as_json else render(result))
