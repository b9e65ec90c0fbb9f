"""`kraftpy configs describe|alter --entity-type users|clients`: client quotas, as kafka-configs.sh.

    kraftpy configs alter --entity-type clients --entity-name app \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    kraftpy configs alter --entity-type users --entity-default --add-config request_percentage=50
    kraftpy configs alter --entity-type users --entity-name alice --delete-config producer_byte_rate
    kraftpy configs describe --entity-type clients [--entity-name app | --entity-default]

``describe`` without a name lists every entity of that type alone (Kafka's strict filter:
``/users/alice``, not ``/users/alice/clients/app``); quotas of user and client-id together are set and
read with the admin client (`AdminClient.alter_client_quotas`). A user's SCRAM credentials are in the
same command (kraftpy.cli.configs_users): ``describe --entity-type users`` shows both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from kraftpy.admin.client import AdminClient, KafkaError
from kraftpy.cli.admin_common import EXIT_USAGE, die, emit_json, run_admin
from kraftpy.metadata.quota_control import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, QUOTA_KEYS
from kraftpy.protocol.errors import ErrorCode

#: --entity-type → Kafka's quota entity type.
QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id"}
_NOUN = {"users": "user-principal", "clients": "client-id"}


def is_quota_key(key: str) -> bool:
    return key in QUOTA_KEYS


def _label(entity_type: str, name: str | None) -> str:
    noun = "user" if entity_type == "users" else "client"
    return f"default {noun}" if name is None else f"{noun} {name}"


def _quota_value(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        die(f"--add-config {key}={text}: not a number", EXIT_USAGE)
    return value


def alter_quotas(entity_type: str, name: str | None, added: dict[str, str], deleted: list[str], dry_run: bool,
                 bootstrap_server: str | None, command_config: Path | None, as_json: bool, *,
                 quiet: bool = False) -> None:
    """Set (``added``) and remove (``deleted``) quotas of one entity; ``name`` None is the default."""
    unknown = sorted(k for k in [*added, *deleted] if not is_quota_key(k))
    if unknown:
        die(f"--entity-type {entity_type}: {unknown[0]} is not a client quota "
            f"({', '.join(QUOTA_KEYS)})", EXIT_USAGE)
    ops: dict[str, float | None] = {k: _quota_value(k, v) for k, v in added.items()}
    ops.update((k, None) for k in deleted)
    entity = {QUOTA_ENTITY_TYPES[entity_type]: name}
    label = _label(entity_type, name)

    async def body(admin: AdminClient) -> None:
        [(code, message)] = await admin.alter_client_quotas([(entity, ops)], validate_only=dry_run)
        if code != ErrorCode.NONE:
            raise KafkaError(code, message, subject=label)

    run_admin(bootstrap_server, command_config, body)
    if quiet:
        return
    if as_json:
        emit_json({"entity_type": entity_type, "entity_name": name, "set": {k: ops[k] for k in added},
                   "deleted": deleted, "dry_run": dry_run})
    elif dry_run:
        typer.echo(f"Validated updating config for {label} (nothing changed).")
    else:
        typer.echo(f"Completed updating config for {label}.")


def _components(entity_type: str, name: str | None, default: bool) -> list[tuple[str, int, str | None]]:
    kind = QUOTA_ENTITY_TYPES[entity_type]
    if default:
        return [(kind, MATCH_DEFAULT, None)]
    if name is not None:
        return [(kind, MATCH_EXACT, name)]
    return [(kind, MATCH_SPECIFIED, None)]


async def quota_documents(admin: AdminClient, entity_type: str, name: str | None, default: bool) -> list[dict]:
    """One document per entity of ``entity_type`` alone (all, one by name, or the default) with quotas."""
    kind = QUOTA_ENTITY_TYPES[entity_type]
    found = await admin.describe_client_quotas(_components(entity_type, name, default), strict=True)
    documents = [{"entity_type": entity_type, "entity_name": entity[kind], "quotas": dict(sorted(values.items()))}
                 for entity, values in found]
    return sorted(documents, key=lambda d: (d["entity_name"] is not None, d["entity_name"] or ""))


def print_quotas(entity_type: str, documents: list[dict], name: str | None, default: bool) -> None:
    """Kafka's lines: ``Quota configs for client-id 'app' are producer_byte_rate=1024.0``."""
    if not documents and (name is not None or default):
        shown = "the default" if default else f"'{name}'"
        typer.echo(f"No quota configs for {_NOUN[entity_type]} {shown}")
    for doc in documents:
        who = "the default " + _NOUN[entity_type] if doc["entity_name"] is None else \
            f"{_NOUN[entity_type]} '{doc['entity_name']}'"
        values = ", ".join(f"{k}={_number(v)}" for k, v in doc["quotas"].items())
        typer.echo(f"Quota configs for {who} are {values}")


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def describe_clients(name: str | None, default: bool, bootstrap_server: str | None, command_config: Path | None,
                     as_json: bool) -> None:
    async def body(admin: AdminClient) -> list[dict]:
        return await quota_documents(admin, "clients", name, default)

    documents = run_admin(bootstrap_server, command_config, body)
    if as_json:
        emit_json(documents if name is None and not default else (documents[0] if documents else {}))
        return
    print_quotas("clients", documents, name, default)


def describe_users_and_quotas(name: str | None, default: bool, bootstrap_server: str | None,
                              command_config: Path | None, as_json: bool, *,
                              describe_scram: Callable[[str | None, str | None, Path | None, bool], None]) -> None:
    """Users' quotas and SCRAM credentials (``describe_scram`` prints the latter; with ``--json`` both are
    in one document per user: ``quotas`` and ``scram_credentials``)."""
    async def body(admin: AdminClient) -> Any:
        quotas = await quota_documents(admin, "users", name, default)
        if not as_json or default:
            return quotas, []
        return quotas, await admin.describe_user_scram_credentials(None if name is None else [name])

    quotas, scram = run_admin(bootstrap_server, command_config, body)
    if not as_json:
        print_quotas("users", quotas, name, default)
        if not default:
            describe_scram(name, bootstrap_server, command_config, False)
        return
    documents: dict[str | None, dict] = {}
    for doc in quotas:
        documents[doc["entity_name"]] = {**doc, "scram_credentials": []}
    for user, code, message, credentials in scram:
        if code not in (ErrorCode.NONE, ErrorCode.RESOURCE_NOT_FOUND):
            die(str(KafkaError(code, message, subject=f"user {user}")))
        doc = documents.setdefault(user, {"entity_type": "users", "entity_name": user, "quotas": {},
                                          "scram_credentials": []})
        doc["scram_credentials"] = [{"mechanism": m, "iterations": i} for m, i in credentials]
    merged = sorted(documents.values(), key=lambda d: (d["entity_name"] is not None, d["entity_name"] or ""))
    if name is None and not default:
        emit_json(merged)
    else:
        emit_json(merged[0] if merged else {"entity_type": "users", "entity_name": name, "quotas": {},
                                            "scram_credentials": []})
