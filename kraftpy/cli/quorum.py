"""`kraftpy quorum status`: the metadata quorum as its leader sees it (kafka-metadata-quorum.sh)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import trio
import typer

from kraftpy.cli.admin_common import CommandConfigOption, client_config
from kraftpy.cli.common import fail
from kraftpy.config.schema import parse_list
from kraftpy.metadata.rpc import QUORUM_STATUS_API
from kraftpy.rpc.control import ControlClient, RpcError

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
                if exc.code == "NOT_LEADER_OR_FOLLOWER" and "@" in exc.message:
                    queue.insert(0, parse_addresses(exc.message)[0])
            finally:
                await client.aclose()
    raise RpcError("UNAVAILABLE", "no leader answered: " + "; ".join(errors))


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
    bootstrap_controller: Annotated[str, typer.Option(
        "--bootstrap-controller", help="Controllers to ask, as host:port[,host:port...].", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each controller.")] = 5.0,
    command_config: CommandConfigOption = None,
) -> None:
    """Print the leader, epoch, high watermark, and every voter's and observer's progress."""
    try:
        addresses = parse_addresses(bootstrap_controller)
    except ValueError as exc:
        fail(f"--bootstrap-controller={bootstrap_controller}: {exc}")
    config = client_config(command_config)
    try:
        result = trio.run(fetch_status, addresses, timeout, config.tls, config.sasl)
    except RpcError as exc:
        fail(exc.message or str(exc))
    typer.echo(json.dumps(result, indent=2, sort_keys=True) if as_json else render(result))
