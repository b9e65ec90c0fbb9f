"""`kraftpy log-dirs describe | alter`: kafka-log-dirs.sh --describe, on DescribeLogDirs, and moving
replicas between the log directories of their brokers, on AlterReplicaLogDirs.

Asks every broker (or those of ``--broker-list``) for its log directories and the partitions in each
(all of them, or those of the topics in ``--topic-list``), with each partition's size in bytes and
offset lag, and each directory's volume sizes. ``--json`` prints Kafka's document
(``{"version": 1, "brokers": [{"broker": 1, "logDirs": [{"logDir": ..., "error": null,
"partitions": [{"partition": "t-0", "size": 0, "offsetLag": 0, "isFuture": false}]}]}]}``); without
it, one row per partition (a directory with no partition listed is one row too). A directory that
is offline is reported with its error and makes the command exit 1; so does a broker that cannot be
asked. A replica being moved shows twice: in its directory, and as the future log (``isFuture``) in
the target.

``alter --reassignment-json-file F`` reads Kafka's reassignment file, as kafka-reassign-partitions.sh
does: each entry's ``log_dirs`` names, for the replica at the same place in ``replicas``, the absolute
path of the directory it should be in on its broker (``"any"``: leave it where it is). Each broker
gets one AlterReplicaLogDirs for its replicas; a replica a reassignment is still creating
(REPLICA_NOT_AVAILABLE) is asked again for a few seconds. ``--wait`` then waits until every replica is
in its directory and no future log is left. ``kraftpy reassign execute`` does the same for the file's
``log_dirs`` after starting the reassignment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import trio
import typer

from kraftpy.admin.client import AdminClient, KafkaError
from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    die,
    emit_json,
    emit_table,
    run_admin,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import AlterReplicaLogDirsRequest, DescribeLogDirsRequest

#: (topic, partition, broker, absolute directory path): one replica to put in one directory.
LogDirMove = tuple[str, int, int, str]
#: How long a replica not created yet (REPLICA_NOT_AVAILABLE) is asked again, in seconds.
_UNAVAILABLE_RETRY_S = 15.0
_POLL_S = 0.5

app = typer.Typer(help="Describe the brokers' log directories (kafka-log-dirs.sh).", no_args_is_help=True)


def _csv(value: str | None, flag: str, *, numbers: bool = False) -> list[Any] | None:
    if value is None:
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        die(f"{flag}: name at least one", EXIT_USAGE)
    if numbers:
        try:
            return [int(item) for item in items]
        except ValueError:
            die(f"{flag}={value}: expected broker ids separated by commas", EXIT_USAGE)
    return items


@app.command("describe")
def describe(
    broker_list: Annotated[str | None, typer.Option(
        "--broker-list", help="Broker ids to ask, separated by commas (default: every broker).",
        show_default=False)] = None,
    topic_list: Annotated[str | None, typer.Option(
        "--topic-list", help="Topics to list, separated by commas (default: every topic).", show_default=False)] = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Describe the log directories of the brokers and the partitions in them."""
    brokers_wanted = _csv(broker_list, "--broker-list", numbers=True)
    topics = _csv(topic_list, "--topic-list")

    async def body(admin: AdminClient) -> list[tuple[int, Any]]:
        meta = await admin.metadata(topics)
        request = DescribeLogDirsRequest(topics=None)
        if topics is not None:
            partitions = {t.name: [p.partition_index for p in t.partitions] for t in meta.topics
                          if t.error_code == ErrorCode.NONE}
            missing = sorted(set(topics) - set(partitions))
            if missing:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, subject=", ".join(missing))
            request = DescribeLogDirsRequest(topics=[
                DescribeLogDirsRequest.DescribableLogDirTopic(topic=name, partitions=parts)
                for name, parts in sorted(partitions.items())])
        ids = sorted(admin.brokers) if brokers_wanted is None else brokers_wanted
        unknown = sorted(set(ids) - set(admin.brokers))
        if unknown:
            die(f"--broker-list: no broker {', '.join(map(str, unknown))} in the cluster", EXIT_USAGE)
        out = []
        for broker in ids:
            try:
                out.append((broker, await admin.request(ApiKey.DESCRIBE_LOG_DIRS, request, node_id=broker)))
            except KafkaError as exc:
                out.append((broker, exc))
        return out

    answers = run_admin(bootstrap_server, command_config, body)
    failed = False
    document: dict[str, Any] = {"version": 1, "brokers": []}
    rows = []
    for broker, response in answers:
        if isinstance(response, Exception):
            failed = True
            typer.echo(f"kraftpy: broker {broker}: {response}", err=True)
            continue
        if response.error_code != ErrorCode.NONE:
            failed = True
            typer.echo(f"kraftpy: broker {broker}: {KafkaError(response.error_code)}", err=True)
            continue
        dirs = []
        for result in response.results:
            error = None if result.error_code == ErrorCode.NONE else ErrorCode.for_code(result.error_code).name
            failed = failed or error is not None
            partitions = [{"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                           "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                          for t in result.topics for p in t.partitions]
            dirs.append({"logDir": result.log_dir, "error": error, "partitions": partitions,
                         "totalBytes": result.total_bytes, "usableBytes": result.usable_bytes})
            for p in partitions or [{"partition": "", "size": "", "offsetLag": ""}]:
                rows.append([broker, result.log_dir, error or "", p["partition"], p["size"], p["offsetLag"]])
        document["brokers"].append({"broker": broker, "logDirs": dirs})
    if as_json:
        emit_json(document)
    else:
        emit_table(["Broker", "LogDir", "Error", "Partition", "Size", "OffsetLag"], rows)
    if failed:
        raise typer.Exit(EXIT_FAILED)


# -- moving replicas between log directories --------------------------------------------------------


def log_dir_moves(doc: Any, where: str) -> list[LogDirMove]:
    """The replicas a reassignment document (Kafka's) puts in named directories: each entry's
    ``log_dirs`` beside its ``replicas`` (``"any"`` entries and missing ``log_dirs`` ask nothing)."""
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        die(f"{where}: expected {{\"version\": 1, \"partitions\": [...]}}", EXIT_USAGE)
    moves: list[LogDirMove] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "log_dirs" not in entry:
            continue
        replicas, dirs = entry.get("replicas"), entry.get("log_dirs")
        if not (isinstance(entry.get("topic"), str) and isinstance(entry.get("partition"), int)
                and isinstance(replicas, list) and isinstance(dirs, list) and len(dirs) == len(replicas)
                and all(isinstance(d, str) for d in dirs) and all(isinstance(r, int) for r in replicas)):
            die(f"{where}: partitions[{i}]: \"log_dirs\" must list one directory (or \"any\") per replica",
                EXIT_USAGE)
        for broker, directory in zip(replicas, dirs, strict=True):
            if directory == "any":
                continue
            if not os.path.isabs(directory):
                die(f"{where}: partitions[{i}]: log directory {directory!r} is not an absolute path", EXIT_USAGE)
            moves.append((entry["topic"], entry["partition"], broker, directory))
    return moves


async def alter_log_dirs(admin: AdminClient, moves: list[LogDirMove]) -> list[tuple[LogDirMove, str]]:
    """Send each broker one AlterReplicaLogDirs for its moves; the moves that failed, with the error's
    name (REPLICA_NOT_AVAILABLE is asked again for a while: a reassignment may still be creating it)."""
    pending = list(moves)
    failed: list[tuple[LogDirMove, str]] = []
    with trio.move_on_after(_UNAVAILABLE_RETRY_S):
        while pending:
            unavailable = []
            by_broker: dict[int, list[LogDirMove]] = {}
            for move in pending:
                by_broker.setdefault(move[2], []).append(move)
            for broker, own in sorted(by_broker.items()):
                dirs: dict[str, dict[str, list[int]]] = {}
                for topic, partition, _, path in own:
                    dirs.setdefault(path, {}).setdefault(topic, []).append(partition)
                request = AlterReplicaLogDirsRequest(dirs=[
                    AlterReplicaLogDirsRequest.AlterReplicaLogDir(path=path, topics=[
                        AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=t, partitions=ps)
                        for t, ps in topics.items()]) for path, topics in dirs.items()])
                try:
                    response = await admin.request(ApiKey.ALTER_REPLICA_LOG_DIRS, request, node_id=broker)
                except KafkaError as exc:
                    failed += [(move, str(exc)) for move in own]
                    continue
                codes = {(t.topic_name, p.partition_index): p.error_code
                         for t in response.results for p in t.partitions}
                for move in own:
                    code = codes.get((move[0], move[1]), ErrorCode.UNKNOWN_SERVER_ERROR)
                    if code == ErrorCode.REPLICA_NOT_AVAILABLE:
                        unavailable.append(move)
                    elif code != ErrorCode.NONE:
                        failed.append((move, ErrorCode.for_code(code).name))
            pending = unavailable
            if pending:
                await trio.sleep(_POLL_S)
    failed += [(move, ErrorCode.REPLICA_NOT_AVAILABLE.name) for move in pending]
    return failed


async def log_dir_moves_done(admin: AdminClient, moves: list[LogDirMove]) -> bool:
    """Whether every replica of ``moves`` is in its directory with no future log left."""
    for broker in sorted({m[2] for m in moves}):
        own = [m for m in moves if m[2] == broker]
        topics: dict[str, list[int]] = {}
        for topic, partition, _, _ in own:
            topics.setdefault(topic, []).append(partition)
        response = await admin.request(ApiKey.DESCRIBE_LOG_DIRS, DescribeLogDirsRequest(topics=[
            DescribeLogDirsRequest.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in topics.items()]),
            node_id=broker)
        where = {(t.name, p.partition_index, p.is_future_key): os.path.abspath(r.log_dir)
                 for r in response.results for t in r.topics for p in t.partitions}
        for topic, partition, _, path in own:
            if (topic, partition, True) in where or where.get((topic, partition, False)) != os.path.abspath(path):
                return False
    return True


async def wait_for_log_dir_moves(admin: AdminClient, moves: list[LogDirMove]) -> None:
    while not await log_dir_moves_done(admin, moves):
        await trio.sleep(_POLL_S)


@app.command("alter")
def alter(
    reassignment_json_file: Annotated[Path, typer.Option(
        "--reassignment-json-file", help="Kafka's reassignment JSON file; its log_dirs say where each replica goes.",
        show_default=False)],
    wait: Annotated[bool, typer.Option("--wait", help="Wait until every replica is in its directory.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move replicas to other log directories of their brokers (the file's log_dirs)."""
    flag = f"--reassignment-json-file={reassignment_json_file}"
    try:
        doc = json.loads(reassignment_json_file.read_text())
    except OSError as exc:
        die(f"{flag}: {exc.strerror or exc}", EXIT_USAGE)
    except ValueError as exc:
        die(f"{flag}: not JSON: {exc}", EXIT_USAGE)
    moves = log_dir_moves(doc, flag)
    if not moves:
        die(f"{flag}: no replica has a log directory other than \"any\"", EXIT_USAGE)

    async def body(admin: AdminClient) -> list[tuple[LogDirMove, str]]:
        failed = await alter_log_dirs(admin, moves)
        if wait and not failed:
            await wait_for_log_dir_moves(admin, moves)
        return failed

    failed = run_admin(bootstrap_server, command_config, body)
    if as_json:
        emit_json({"moves": [{"topic": t, "partition": p, "broker": b, "logDir": d,
                              "error": dict(((m[0], m[1], m[2]), e) for m, e in failed).get((t, p, b))}
                             for t, p, b, d in moves], "done": wait and not failed})
    else:
        for (t, p, b, d), error in failed:
            typer.echo(f"kraftpy: cannot move {t}-{p} on broker {b} to {d}: {error}", err=True)
        started = [m for m in moves if m not in {f[0] for f in failed}]
        if started:
            typer.echo(("Moved" if wait and not failed else "Started moving") + " the replicas "
                       + ", ".join(f"{t}-{p} (broker {b}) to {d}" for t, p, b, d in started))
    if failed:
        raise typer.Exit(EXIT_FAILED)
