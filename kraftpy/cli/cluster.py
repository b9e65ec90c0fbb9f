"""`kraftpy cluster describe`: the cluster id, the controller and every broker with its state;
`kraftpy cluster unregister`: forget a broker that is gone for good (kafka-cluster.sh unregister).

With ``--bootstrap-server`` it asks a broker (DescribeCluster v2, fenced brokers included): brokers are
Running or Fenced as that broker's metadata shows them. With ``--bootstrap-controller`` it asks the
active controller (the control-plane request kraftpy.metadata.rpc.CLUSTER_DESCRIBE_API), whose image
also knows the brokers in controlled shutdown (Stopping) and each broker's epoch.

``unregister --id N`` sends UnregisterBroker (api key 64) to a broker, which forwards it to the active
controller: the broker is fenced if it is not yet, leaves every ISR and leadership, and its
registration is removed. An id the cluster does not know fails with BROKER_ID_NOT_REGISTERED.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import trio
import typer

from kraftpy.admin.client import AdminClient, AdminConnectionError, AdminError, check, parse_addresses
from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    BootstrapControllerOption,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    client_config,
    die,
    emit_json,
    emit_table,
    run_admin,
    run_trio,
)
from kraftpy.metadata.rpc import API_OF, CLUSTER_DESCRIBE_API, CONTROLLER_APIS, NOT_CONTROLLER, WIRE
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import DescribeClusterRequest, UnregisterBrokerRequest
from kraftpy.rpc.control import AuthenticationFailed, ControlClient, RpcError
from kraftpy.rpc.wire import WireError

app = typer.Typer(help="Describe the cluster (its id, controller and brokers); unregister a broker.",
                  no_args_is_help=True)


#: Answers after which the request goes to the next controller, or again after a pause.
_ASKED_AGAIN = frozenset({NOT_CONTROLLER, "NETWORK_EXCEPTION", "REQUEST_TIMED_OUT"})


async def ask_active_controller(addresses: list[tuple[str, int]], timeout: float, tls: Any = None,
                                sasl: Any = None, api: str = CLUSTER_DESCRIBE_API,
                                body: dict[str, Any] | None = None) -> dict[str, Any]:
    """The active controller's answer to control-plane request ``api`` (DescribeClusterState unless
    told). Controllers that are not active point at the leader (``id@host:port``; a pointer naming only
    the id is resolved by asking that controller DescribeClusterState); while none is active yet (an
    election), ask again until ``timeout``."""
    errors: list[str] = []
    #: A refused login: asking again will not help.
    refused: str | None = None
    #: The active controller's own error answer (INVALID_REQUEST, an ACL's refusal): final too.
    denied: RpcError | None = None
    async with trio.open_nursery() as nursery:
        clients: dict[tuple[str, int], ControlClient] = {}

        def client(address: tuple[str, int]) -> ControlClient:
            if address not in clients:
                clients[address] = ControlClient(nursery, *address, request_timeout=timeout,
                                                 connect_timeout=timeout, tls=tls, sasl=sasl)
            return clients[address]

        try:
            with trio.move_on_after(timeout):
                while refused is None and denied is None:
                    queue = list(addresses)
                    seen: set[tuple[str, int]] = set()
                    while queue:
                        address = queue.pop(0)
                        if address in seen:
                            continue
                        seen.add(address)
                        try:
                            return await client(address).request(api, body or {})
                        except AuthenticationFailed as exc:
                            refused = exc.message
                            break
                        except RpcError as exc:
                            if api != CLUSTER_DESCRIBE_API and exc.code not in _ASKED_AGAIN:
                                denied = exc
                                break
                            errors.append(f"{address[0]}:{address[1]}: {exc}")
                            pointer = exc.message if exc.code == NOT_CONTROLLER else ""
                            if pointer.isdigit() and api != CLUSTER_DESCRIBE_API:
                                pointer = await _leader_address(client(address))
                            if "@" in pointer:
                                queue.insert(0, parse_addresses(pointer)[0])
                    if refused is None and denied is None:
                        await trio.sleep(0.1)
        finally:
            for c in clients.values():
                await c.aclose()
            nursery.cancel_scope.cancel()
    if refused is not None:
        raise AdminConnectionError(refused)
    if denied is not None:
        raise denied
    raise AdminConnectionError("no active controller answered: " + "; ".join(dict.fromkeys(errors)))


async def _leader_address(client: ControlClient) -> str:
    """``id@host:port`` of the active controller as a controller that is not it knows it, or ""."""
    try:
        await client.request(CLUSTER_DESCRIBE_API, {})
    except RpcError as exc:
        return exc.message if exc.code == NOT_CONTROLLER else ""
    return ""


def controller_state(bootstrap_controller: str, command_config: Path | None, api: str = CLUSTER_DESCRIBE_API,
                     body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run `ask_active_controller` for a command; its failure ends the process with one line."""
    try:
        addresses = parse_addresses(bootstrap_controller)
    except ValueError as exc:
        die(f"--bootstrap-controller={bootstrap_controller}: {exc}", EXIT_USAGE)
    config = client_config(command_config)
    try:
        return run_trio(ask_active_controller, addresses, config.request_timeout_s, config.tls, config.sasl,
                        api, body)
    except AdminError as exc:
        die(str(exc), exc.exit_code)
    except RpcError as exc:
        die(f"{api}: {exc}", EXIT_FAILED)


def controller_call(bootstrap_controller: str, command_config: Path | None, request: Any) -> Any:
    """Send ``request`` (a kraftpy.metadata.messages request of `CONTROLLER_APIS`, the control plane that
    brokers forward admin requests to) to the active controller and return its decoded response."""
    api = API_OF[type(request)]
    _, response_type = CONTROLLER_APIS[api]
    answer = controller_state(bootstrap_controller, command_config, api, {"request": WIRE.encode(request)})
    try:
        return WIRE.decode_as(answer["response"], response_type)
    except (KeyError, TypeError, WireError) as exc:
        die(f"{api}: malformed answer from the controller: {exc}", EXIT_FAILED)


def one_source(bootstrap_server: str | None, bootstrap_controller: str | None) -> None:
    if bool(bootstrap_server) == bool(bootstrap_controller):
        die("give exactly one of --bootstrap-server and --bootstrap-controller", EXIT_USAGE)


async def _from_broker(admin: AdminClient) -> dict[str, Any]:
    version = admin.version_for(ApiKey.DESCRIBE_CLUSTER)
    response = await admin.request(ApiKey.DESCRIBE_CLUSTER, DescribeClusterRequest(
        include_cluster_authorized_operations=False, include_fenced_brokers=True), version=version)
    check(response.error_code, response.error_message, subject="cluster")
    return {
        "cluster_id": response.cluster_id,
        "controller_id": response.controller_id,
        "brokers": [{"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack,
                     "state": "Fenced" if b.is_fenced else "Running", "epoch": None}
                    for b in sorted(response.brokers, key=lambda b: b.broker_id)],
    }


def _from_controller(state: dict[str, Any]) -> dict[str, Any]:
    brokers = []
    for b in state["brokers"]:
        first = b["listeners"][0] if b["listeners"] else {"host": "", "port": -1}
        brokers.append({"id": b["id"], "host": first["host"], "port": first["port"], "rack": b["rack"],
                        "state": b["state"], "epoch": b["epoch"], "listeners": b["listeners"]})
    return {"cluster_id": state["cluster_id"], "controller_id": state["controller_id"],
            "controller_epoch": state["controller_epoch"], "metadata_offset": state["metadata_offset"],
            "controllers": state["controllers"], "brokers": brokers}


@app.command("describe")
def describe(
    bootstrap_server: BootstrapServerOption = None,
    bootstrap_controller: BootstrapControllerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the cluster id, the controller and every broker: id, host:port, rack, state (Running, Fenced,
    and with --bootstrap-controller Stopping) and, with --bootstrap-controller, its epoch."""
    one_source(bootstrap_server, bootstrap_controller)
    if bootstrap_controller:
        cluster = _from_controller(controller_state(bootstrap_controller, command_config))
    else:
        cluster = run_admin(bootstrap_server, command_config, _from_broker)
    if as_json:
        emit_json(cluster)
        return
    emit_table(["BrokerId", "Address", "Rack", "State", "Epoch"],
               [[b["id"], f"{b['host']}:{b['port']}", b["rack"] or "", b["state"],
                 "" if b["epoch"] is None else b["epoch"]] for b in cluster["brokers"]],
               title=f"ClusterId: {cluster['cluster_id']}  ControllerId: {cluster['controller_id']}")


@app.command("unregister")
def unregister(
    broker_id: Annotated[int, typer.Option("--id", help="The id of the broker to unregister.")],
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove a broker's registration from the cluster (decommissioning: move its replicas away and stop it
    first). The controller fences it, takes it out of every ISR and leadership, and forgets it."""
    async def send(admin: AdminClient) -> None:
        response = await admin.request(ApiKey.UNREGISTER_BROKER, UnregisterBrokerRequest(broker_id=broker_id))
        check(response.error_code, response.error_message, subject=f"broker {broker_id}")

    run_admin(bootstrap_server, command_config, send)
    if as_json:
        emit_json({"broker_id": broker_id, "unregistered": True})
    else:
        typer.echo(f"Broker {broker_id} is no longer registered.")
