"""`kraftpy configs describe|alter --entity-type users`: users' SCRAM credentials, as kafka-configs.sh.

    kraftpy configs alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-512=[password=alice-secret],SCRAM-SHA-256=[iterations=8192,password=s]'
    kraftpy configs alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-256
    kraftpy configs describe --entity-type users [--entity-name alice]

The password is salted and hashed by the admin client (AlterUserScramCredentials carries the salt and
the SaltedPassword, never the password); ``describe`` shows mechanisms and iteration counts only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kraftpy.admin.client import AdminClient, KafkaError
from kraftpy.cli.admin_common import EXIT_USAGE, die, emit_json, run_admin
from kraftpy.protocol.errors import ErrorCode
from kraftpy.security.scram import MECHANISMS, MIN_ITERATIONS


def _credential_options(mechanism: str, text: str) -> tuple[str, int]:
    options: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            die(f"--add-config {mechanism}=[...]: {key.strip()!r} is not key=value", EXIT_USAGE)
        options[key.strip().lower()] = value.strip()
    unknown = sorted(set(options) - {"password", "iterations"})
    if unknown:
        die(f"--add-config {mechanism}: unknown option {unknown[0]} (password=, iterations=)", EXIT_USAGE)
    if not options.get("password"):
        die(f"--add-config {mechanism} needs [password=...]", EXIT_USAGE)
    iterations = options.get("iterations", str(MIN_ITERATIONS))
    if not iterations.isdigit():
        die(f"--add-config {mechanism}: iterations={iterations} is not a number", EXIT_USAGE)
    return options["password"], int(iterations)


def _only_scram(keys: list[str]) -> None:
    other = sorted(k for k in keys if k not in MECHANISMS)
    if other:
        die(f"--entity-type users: {other[0]} is not a SCRAM mechanism (SCRAM-SHA-256, SCRAM-SHA-512)", EXIT_USAGE)


def alter_users(name: str, added: dict[str, str], deleted: list[str], bootstrap_server: str | None,
                command_config: Path | None, as_json: bool) -> None:
    _only_scram([*added, *deleted])
    upsertions = [(name, mechanism, *_credential_options(mechanism, text)) for mechanism, text in added.items()]
    deletions = [(name, mechanism) for mechanism in deleted]

    async def body(admin: AdminClient) -> None:
        for user, code, message in await admin.alter_user_scram_credentials(upsertions, deletions):
            if code != ErrorCode.NONE:
                raise KafkaError(code, message, subject=f"user {user}")

    run_admin(bootstrap_server, command_config, body)
    if as_json:
        emit_json({"entity_type": "users", "entity_name": name, "set": sorted(added), "deleted": deleted})
    else:
        typer.echo(f"Completed updating config for user {name}.")


def describe_users(name: str | None, bootstrap_server: str | None, command_config: Path | None,
                   as_json: bool) -> None:
    async def body(admin: AdminClient) -> list[Any]:
        return await admin.describe_user_scram_credentials(None if name is None else [name])

    results = run_admin(bootstrap_server, command_config, body)
    documents = []
    for user, code, message, credentials in results:
        if code == ErrorCode.RESOURCE_NOT_FOUND:
            credentials = []
        elif code != ErrorCode.NONE:
            die(str(KafkaError(code, message, subject=f"user {user}")))
        documents.append({"entity_type": "users", "entity_name": user,
                          "scram_credentials": [{"mechanism": m, "iterations": i} for m, i in credentials]})
    if as_json:
        emit_json(documents if name is None else (documents[0] if documents else {}))
        return
    for doc in documents:
        if doc["scram_credentials"]:
            shown = ",".join(f"{c['mechanism']}=iterations={c['iterations']}" for c in doc["scram_credentials"])
            typer.echo(f"SCRAM credential configs for user-principal '{doc['entity_name']}' are {shown}")
        else:
            typer.echo(f"No SCRAM credentials for user-principal '{doc['entity_name']}'")
