"""`kraftpy log-dirs describe`: kafka-log-dirs.sh --describe, on DescribeLogDirs.

Asks every broker (or those of ``--broker-list``) for its log directories and the partitions in each
(all of them, or those of the topics in ``--topic-list``), with each partition's size in bytes and
offset lag, and each directory's volume sizes. ``--json`` prints Kafka's document
(``{"version": 1, "brokers": [{"broker": 1, "logDirs": [{"logDir": ..., "error": null,
"partitions": [{"partition": "t-0", "size": 0, "offsetLag": 0, "isFuture": false}]}]}]}``); without
it, one row per partition (a directory with no partition listed is one row too). A directory that
is offline is reported with its error and makes the command exit 1; so does a broker that cannot be
asked.
"""

from __future__ import annotations

from typing import Annotated, Any

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
from kraftpy.protocol.messages import DescribeLogDirsRequest

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
