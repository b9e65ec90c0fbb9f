"""`kraftpy leaders elect`: kafka-leader-election.sh's work, on ElectLeaders.

``--preferred`` moves leadership back to each partition's first replica when it is alive and in the
ISR; ``--unclean`` gives a leader to partitions that have none, from outside the ISR if it must (the
records the old ISR held beyond the new leader's log are lost). The partitions are one
(``--topic`` and ``--partition``), every partition (``--all-topic-partitions``), or those of a file
``{"partitions": [{"topic": "t", "partition": 0}]}`` (``--path-to-json-file``).

A partition whose leader is already the right one is reported and is no failure (ELECTION_NOT_NEEDED);
any other error is, and the command exits 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kraftpy.admin.client import AdminClient, check
from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    die,
    emit_json,
    run_admin,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import ElectLeadersRequest

app = typer.Typer(help="Elect partition leaders: the preferred replica, or any live one (unclean).",
                  no_args_is_help=True)

PREFERRED, UNCLEAN = 0, 1


def _partitions_from_file(path: Path) -> list[tuple[str, int]]:
    flag = "--path-to-json-file"
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        die(f"{flag}={path}: {exc.strerror or exc}", EXIT_USAGE)
    except ValueError as exc:
        die(f"{flag}={path}: not JSON: {exc}", EXIT_USAGE)
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
            for e in entries):
        die(f"{flag}={path}: expected {{\"partitions\": [{{\"topic\": \"t\", \"partition\": 0}}]}}", EXIT_USAGE)
    out = [(e["topic"], e["partition"]) for e in entries]
    if len(set(out)) != len(out):
        die(f"{flag}={path}: a partition appears more than once", EXIT_USAGE)
    return out


@app.command("elect")
def elect(
    preferred: Annotated[bool, typer.Option("--preferred", help="Elect each partition's preferred replica.")] = False,
    unclean: Annotated[bool, typer.Option("--unclean", help="Elect any live replica where no ISR member can lead "
                                          "(may lose records).")] = False,
    topic: Annotated[str | None, typer.Option("--topic", help="The topic (with --partition).",
                                              show_default=False)] = None,
    partition: Annotated[int | None, typer.Option("--partition", help="The partition (with --topic).",
                                                  show_default=False)] = None,
    all_topic_partitions: Annotated[bool, typer.Option("--all-topic-partitions",
                                                       help="Every partition of every topic.")] = False,
    path_to_json_file: Annotated[Path | None, typer.Option("--path-to-json-file", help="A file naming the "
                                                           "partitions: {\"partitions\": [{\"topic\": \"t\", "
                                                           "\"partition\": 0}]}.", show_default=False)] = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Elect leaders for the given partitions."""
    if preferred == unclean:
        die("give exactly one of --preferred and --unclean", EXIT_USAGE)
    chosen = sum([topic is not None or partition is not None, all_topic_partitions, path_to_json_file is not None])
    if chosen != 1:
        die("give exactly one of --topic/--partition, --all-topic-partitions and --path-to-json-file", EXIT_USAGE)
    if (topic is None) != (partition is None):
        die("--topic and --partition go together", EXIT_USAGE)
    wanted: list[tuple[str, int]] | None
    if all_topic_partitions:
        wanted = None
    elif path_to_json_file is not None:
        wanted = _partitions_from_file(path_to_json_file)
    else:
        assert topic is not None and partition is not None
        wanted = [(topic, partition)]
    election = PREFERRED if preferred else UNCLEAN
    name = "PREFERRED" if preferred else "UNCLEAN"

    async def body(admin: AdminClient) -> list[tuple[str, int, int, str | None]]:
        topics = None
        if wanted is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in wanted:
                by_topic.setdefault(t, []).append(p)
            TopicPartitions = ElectLeadersRequest.TopicPartitions
            topics = [TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]
        version = admin.version_for(ApiKey.ELECT_LEADERS)
        if version < 1 and election != PREFERRED:
            die("the broker's ElectLeaders (v0) only elects preferred replicas", EXIT_FAILED)
        response = await admin.request(ApiKey.ELECT_LEADERS, ElectLeadersRequest(
            election_type=election, topic_partitions=topics, timeout_ms=int(admin.config.request_timeout_s * 1000)),
            version=version)
        check(response.error_code, subject="ElectLeaders")
        return [(r.topic, p.partition_id, p.error_code, p.error_message)
                for r in response.replica_election_results for p in r.partition_result]

    results = run_admin(bootstrap_server, command_config, body)
    elected = [f"{t}-{p}" for t, p, c, _ in results if c == ErrorCode.NONE]
    not_needed = [f"{t}-{p}" for t, p, c, _ in results if c == ErrorCode.ELECTION_NOT_NEEDED]
    failed = [(t, p, c, m) for t, p, c, m in results if c not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)]
    if json_output:
        emit_json({"election": name, "partitions": [
            {"topic": t, "partition": p, "error": ErrorCode.for_code(c).name, "message": m} for t, p, c, m in results]})
    else:
        if elected:
            typer.echo(f"Successfully completed leader election ({name}) for partitions {', '.join(elected)}")
        if not_needed:
            typer.echo(f"Valid replica already elected for partitions {', '.join(not_needed)}")
        if not results:
            typer.echo(f"No partition needed a leader election ({name}).")
    for t, p, c, m in failed:
        typer.echo(f"kraftpy: leader election ({name}) for {t}-{p}: {ErrorCode.for_code(c).name}"
                   + (f": {m}" if m else ""), err=True)
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)
