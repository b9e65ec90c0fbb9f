"""`kraftpy configs describe|alter`, in the shape of Kafka's kafka-configs.sh.

Entities: ``topics``, ``brokers`` (one broker by id, or ``--entity-default``: the dynamic default of
every broker, resource name ``""``), ``groups`` (a consumer group's configs, KIP-848), ``users`` (SCRAM
credentials, kraftpy.cli.configs_users, and client quotas) and ``clients`` (client quotas by client id,
kraftpy.cli.configs_quotas; ``--entity-default`` for the default user or client id). ``describe``
lists each entity's own dynamic overrides, or with ``--all`` every key with its value and source;
``alter`` sends one IncrementalAlterConfigs with ``--add-config`` (SET) and ``--delete-config``
(DELETE), all of it or none of it applied, validated only with ``--dry-run``.

With ``--bootstrap-controller`` instead of ``--bootstrap-server`` (KIP-919), topics and brokers are
described and altered by the active controller itself, over the control plane brokers forward these
requests to (DescribeConfigs and IncrementalAlterConfigs of kraftpy.metadata.rpc.CONTROLLER_APIS): it
knows every dynamic config and the defaults, but not a broker's own properties file, so a broker's
static values are the controller's. Topics need ``--entity-name`` there (controllers do not list
topics); groups, users and clients are described and altered through a broker only.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import typer

from kraftpy.admin.client import AdminClient, KafkaError, check
from kraftpy.cli.admin_common import (
    EXIT_USAGE,
    BootstrapControllerOption,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    die,
    emit_json,
    emit_table,
    run_admin,
)
from kraftpy.cli.cluster import controller_call, controller_state, one_source
from kraftpy.cli.configs_quotas import alter_quotas, describe_clients, describe_users_and_quotas, is_quota_key
from kraftpy.cli.configs_users import alter_users, describe_users
from kraftpy.metadata import messages as control
from kraftpy.metadata.records import ConfigResourceType
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DescribeConfigsRequest, IncrementalAlterConfigsRequest

app = typer.Typer(help="Describe and change topic, broker and group configs (kafka-configs.sh).",
                  no_args_is_help=True)


class EntityType(enum.StrEnum):
    topics = "topics"
    brokers = "brokers"
    groups = "groups"
    users = "users"
    clients = "clients"


_RESOURCE_TYPE = {
    EntityType.topics: ConfigResourceType.TOPIC,
    EntityType.brokers: ConfigResourceType.BROKER,
    EntityType.groups: ConfigResourceType.GROUP,
}

#: DescribeConfigs' config sources, named as Kafka's Admin API (ConfigEntry.ConfigSource) names them.
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}

EntityTypeOption = Annotated[EntityType, typer.Option("--entity-type", help="topics, brokers, groups, users or clients.",
                                                      show_default=False, case_sensitive=False)]
EntityNameOption = Annotated[str | None, typer.Option(
    "--entity-name", help="The topic, broker id or group.", show_default=False)]
EntityDefaultOption = Annotated[bool, typer.Option(
    "--entity-default", help="brokers: the dynamic default of every broker; users, clients: the default quotas.")]

_SET, _DELETE = 0, 1


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's ``--add-config`` syntax: ``k1=v1,k2=[v1,v2]`` (a list value in brackets)."""
    out: dict[str, str] = {}
    items, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                die(f"--add-config {text}: ']' without '['", EXIT_USAGE)
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    if depth:
        die(f"--add-config {text}: '[' without ']'", EXIT_USAGE)
    items.append(current)
    for item in items:
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            die(f"--add-config {text}: {item!r} is not key=value", EXIT_USAGE)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    if not out:
        die(f"--add-config {text!r}: no key=value given", EXIT_USAGE)
    return out


def _entity(entity_type: EntityType, name: str | None, default: bool, *, required: bool) -> str | None:
    if default and name is not None:
        die("--entity-name and --entity-default are exclusive", EXIT_USAGE)
    if default:
        if entity_type not in (EntityType.brokers, EntityType.users, EntityType.clients):
            die(f"--entity-default is for --entity-type brokers, users or clients, not {entity_type.value}",
                EXIT_USAGE)
        return ""
    if name is None:
        if required or entity_type is EntityType.groups:
            die(f"--entity-type {entity_type.value} needs --entity-name"
                + (" or --entity-default" if entity_type in (EntityType.brokers, EntityType.users, EntityType.clients)
                   else ""), EXIT_USAGE)
        return None
    if entity_type is EntityType.brokers and not (name.isdigit() and name.isascii()):
        die(f"--entity-name {name}: a broker is named by its id", EXIT_USAGE)
    if not name:
        die("--entity-name is empty", EXIT_USAGE)
    return name


def _label(entity_type: EntityType, name: str) -> str:
    if entity_type is EntityType.brokers:
        return "default broker" if name == "" else f"broker {name}"
    return f"{entity_type.value[:-1]} {name}"


#: The source of an entity's own dynamic overrides: what `describe` without --all shows.
def _own_source(entity_type: EntityType, name: str) -> int:
    if entity_type is EntityType.topics:
        return 1
    if entity_type is EntityType.groups:
        return 8
    return 3 if name == "" else 2


@app.command("describe")
def describe(
    entity_type: EntityTypeOption,
    entity_name: EntityNameOption = None,
    entity_default: EntityDefaultOption = False,
    all_configs: Annotated[bool, typer.Option(
        "--all", help="Every config with its value and source, not only the entity's own overrides.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    bootstrap_controller: BootstrapControllerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Describe an entity's configs (every topic's or broker's when no --entity-name is given)."""
    one_source(bootstrap_server, bootstrap_controller)
    name = _entity(entity_type, entity_name, entity_default, required=False)
    if bootstrap_controller:
        _controller_only(entity_type)
    if entity_type is EntityType.clients:
        describe_clients(name or None, entity_default, bootstrap_server, command_config, as_json)
        return
    if entity_type is EntityType.users:
        describe_users_and_quotas(name or None, entity_default, bootstrap_server, command_config, as_json,
                                  describe_scram=describe_users)
        return
    resource_type = _RESOURCE_TYPE[entity_type]

    async def body(admin: AdminClient) -> list[tuple[str, list[Any]]]:
        if name is not None:
            names = [name]
        elif entity_type is EntityType.topics:
            names = sorted(t.name for t in (await admin.metadata(None)).topics if t.error_code == ErrorCode.NONE)
        else:
            names = [str(b) for b in sorted(admin.brokers)]
        out = []
        for entity in names:
            # A broker describes itself (its own view of its overrides), as in Kafka; others any broker.
            node = int(entity) if entity_type is EntityType.brokers and entity and int(entity) in admin.brokers \
                else None
            response = await admin.request(ApiKey.DESCRIBE_CONFIGS, DescribeConfigsRequest(resources=[
                DescribeConfigsRequest.DescribeConfigsResource(resource_type=resource_type, resource_name=entity,
                                                               configuration_keys=None)]), node_id=node)
            result = response.results[0]
            check(result.error_code, result.error_message, subject=_label(entity_type, entity))
            out.append((entity, list(result.configs)))
        return out

    if bootstrap_controller:
        described = _describe_by_controller(bootstrap_controller, command_config, entity_type, name)
    else:
        described = run_admin(bootstrap_server, command_config, body)
    documents = []
    for entity, entries in described:
        own = _own_source(entity_type, entity)
        shown = [e for e in entries if all_configs or e.config_source == own]
        documents.append({
            "entity_type": entity_type.value, "entity_name": entity,
            "configs": [{"name": e.name, "value": None if e.is_sensitive else e.value,
                         "source": SOURCE_NAMES.get(e.config_source, str(e.config_source)),
                         "sensitive": e.is_sensitive, "read_only": e.read_only} for e in shown],
        })
    if as_json:
        emit_json(documents if name is None else documents[0])
        return
    for doc in documents:
        title = ("All configs" if all_configs else "Dynamic configs") + " for " + \
            _label(entity_type, doc["entity_name"])
        emit_table(["Name", "Value", "Source", "Sensitive", "ReadOnly"],
                   [[c["name"], c["value"], c["source"], str(c["sensitive"]).lower(), str(c["read_only"]).lower()]
                    for c in doc["configs"]], title=title)


@app.command("alter")
def alter(
    entity_type: EntityTypeOption,
    entity_name: EntityNameOption = None,
    entity_default: EntityDefaultOption = False,
    add_config: Annotated[str | None, typer.Option(
        "--add-config", help="Configs to set: k1=v1,k2=[v1,v2] (brackets around a list value).",
        show_default=False)] = None,
    delete_config: Annotated[str | None, typer.Option(
        "--delete-config", help="Configs to remove (back to their default): k1,k2.", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Validate the change without applying it.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    bootstrap_controller: BootstrapControllerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set and delete an entity's configs (IncrementalAlterConfigs): all of them, or none."""
    one_source(bootstrap_server, bootstrap_controller)
    name = _entity(entity_type, entity_name, entity_default, required=True)
    if bootstrap_controller:
        _controller_only(entity_type)
    assert name is not None
    added = parse_add_config(add_config) if add_config is not None else {}
    deleted = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    if not added and not deleted:
        die("nothing to do: give --add-config and/or --delete-config", EXIT_USAGE)
    both = sorted(set(added) & set(deleted))
    if both:
        die(f"{', '.join(both)}: both in --add-config and --delete-config", EXIT_USAGE)
    if entity_type is EntityType.clients:
        alter_quotas("clients", name or None, added, deleted, dry_run, bootstrap_server, command_config, as_json)
        return
    if entity_type is EntityType.users:
        quota_added = {k: v for k, v in added.items() if is_quota_key(k)}
        quota_deleted = [k for k in deleted if is_quota_key(k)]
        scram_added = {k: v for k, v in added.items() if not is_quota_key(k)}
        scram_deleted = [k for k in deleted if not is_quota_key(k)]
        if entity_default and (scram_added or scram_deleted):
            die("--entity-default: the default user has quotas only, no SCRAM credentials", EXIT_USAGE)
        if quota_added or quota_deleted:
            alter_quotas("users", name or None, quota_added, quota_deleted, dry_run, bootstrap_server,
                         command_config, as_json, quiet=bool(scram_added or scram_deleted))
        if scram_added or scram_deleted:
            alter_users(name, scram_added, scram_deleted, bootstrap_server, command_config, as_json)
        return
    label = _label(entity_type, name)

    async def body(admin: AdminClient) -> None:
        Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
        Config = IncrementalAlterConfigsRequest.AlterableConfig
        request = IncrementalAlterConfigsRequest(resources=[Resource(
            resource_type=_RESOURCE_TYPE[entity_type], resource_name=name,
            configs=[*(Config(name=k, config_operation=_SET, value=v) for k, v in added.items()),
                     *(Config(name=k, config_operation=_DELETE, value=None) for k in deleted)])],
            validate_only=dry_run)
        response = await admin.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, request)
        result = response.responses[0]
        if result.error_code != ErrorCode.NONE:
            raise KafkaError(result.error_code, result.error_message, subject=label)

    if bootstrap_controller:
        _alter_by_controller(bootstrap_controller, command_config, entity_type, name, added, deleted, dry_run)
    else:
        run_admin(bootstrap_server, command_config, body)
    if as_json:
        emit_json({"entity_type": entity_type.value, "entity_name": name, "set": added, "deleted": deleted,
                   "dry_run": dry_run})
    elif dry_run:
        typer.echo(f"Validated updating config for {label} (nothing changed).")
    else:
        typer.echo(f"Completed updating config for {label}.")


# -- --bootstrap-controller: the active controller's own view ---------------------------------------


def _controller_only(entity_type: EntityType) -> None:
    """Controllers decide topic and broker configs here; the rest is a broker's (one line, exit 2)."""
    if entity_type not in (EntityType.topics, EntityType.brokers):
        die(f"--entity-type {entity_type.value} is described and altered through a broker: use "
            "--bootstrap-server (--bootstrap-controller takes topics and brokers)", EXIT_USAGE)


def _fail(code: int, message: str | None, label: str) -> None:
    if code != ErrorCode.NONE:
        error = KafkaError(code, message, subject=label)
        die(str(error), error.exit_code)


def _describe_by_controller(bootstrap_controller: str, command_config: Any, entity_type: EntityType,
                            name: str | None) -> list[tuple[str, list[Any]]]:
    """DescribeConfigs answered from the active controller's image, one entity per request."""
    if name is not None:
        names = [name]
    elif entity_type is EntityType.topics:
        die("--bootstrap-controller: name the topic (--entity-name); controllers do not list topics", EXIT_USAGE)
    else:
        names = [str(b["id"]) for b in controller_state(bootstrap_controller, command_config)["brokers"]]
    out = []
    for entity in names:
        response = controller_call(bootstrap_controller, command_config, control.DescribeConfigsRequest(
            resources=(control.DescribeConfigsResource(_RESOURCE_TYPE[entity_type], entity),)))
        [result] = response.results
        _fail(result.error_code, result.error_message, _label(entity_type, entity))
        out.append((entity, list(result.configs)))
    return out


def _alter_by_controller(bootstrap_controller: str, command_config: Any, entity_type: EntityType, name: str,
                         added: dict[str, str], deleted: list[str], dry_run: bool) -> None:
    """IncrementalAlterConfigs applied (or with ``dry_run`` validated) by the active controller."""
    Op = control.AlterConfigOp
    request = control.IncrementalAlterConfigsRequest(resources=(control.AlterConfigsResource(
        _RESOURCE_TYPE[entity_type], name,
        (*(control.AlterableConfig(k, Op.SET, v) for k, v in added.items()),
         *(control.AlterableConfig(k, Op.DELETE, None) for k in deleted))),), validate_only=dry_run)
    response = controller_call(bootstrap_controller, command_config, request)
    [result] = response.responses
    _fail(result.error_code, result.error_message, _label(entity_type, name))
