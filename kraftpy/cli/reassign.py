"""`kraftpy reassign generate | execute | verify | cancel`: kafka-reassign-partitions.sh's work.

The files are Kafka's: a topics-to-move file ``{"version": 1, "topics": [{"topic": "t"}]}`` and a
reassignment file ``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3],
"log_dirs": ["any", "any"]}]}`` (``log_dirs`` names, per replica, the log directory it should be in on
its broker, or ``"any"``: see ``kraftpy log-dirs alter``).

* ``generate`` prints the current assignment of the topics and a proposal spreading them over
  ``--broker-list`` (the controller's own placement: rack-aware round robin from a random start).
* ``execute`` prints the current assignment (keep it: it is the file that rolls the move back) and
  starts the moves (AlterPartitionReassignments). With ``--throttle BYTES`` it first sets
  ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` on every broker
  the moves involve, and the topics' ``leader.replication.throttled.replicas`` (the current replicas
  of the moving partitions) and ``follower.replication.throttled.replicas`` (their new replicas), as
  Kafka's tool does. Replicas the file's ``log_dirs`` place in a directory are then moved there
  (AlterReplicaLogDirs, as kafka-reassign-partitions.sh does). ``--wait`` waits until every move is
  done (a progress bar on a terminal).
* ``verify`` says of each partition whether its move is done, still in progress, or off target; once
  all are done it removes the throttles. Exit 0 only when every partition is where the file says.
* ``cancel`` cancels the moves of the file's partitions (their replicas go back to what they were).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import trio
import typer

from kraftpy.admin.client import AdminClient, KafkaError, check
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
from kraftpy.cli.log_dirs import alter_log_dirs, log_dir_moves, wait_for_log_dir_moves
from kraftpy.metadata.placement import PlacementBroker, PlacementError, assign_replicas
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
)

app = typer.Typer(help="Move partitions between brokers (generate, execute, verify, cancel a reassignment).",
                  no_args_is_help=True)

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
_TOPIC, _BROKER = 2, 4
_SET, _DELETE = 0, 1
#: How often ``execute --wait`` asks which moves are still in progress.
POLL_INTERVAL_S = 0.5

ReassignmentFile = Annotated[Path, typer.Option("--reassignment-json-file", help="Kafka's reassignment JSON file.",
                                                show_default=False)]

Move = tuple[str, int, tuple[int, ...]]


# -- files ------------------------------------------------------------------------------------------


def _load(path: Path, flag: str) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        die(f"{flag}={path}: {exc.strerror or exc}", EXIT_USAGE)
    except ValueError as exc:
        die(f"{flag}={path}: not JSON: {exc}", EXIT_USAGE)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_reassignment(path: Path) -> list[Move]:
    """The (topic, partition, replicas) of a reassignment file, in file order; a malformed file ends the
    command with one line naming what is wrong."""
    flag = "--reassignment-json-file"
    doc = _load(path, flag)
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        die(f"{flag}={path}: expected {{\"version\": 1, \"partitions\": [...]}} with at least one partition",
            EXIT_USAGE)
    moves: list[Move] = []
    seen: set[tuple[str, int]] = set()
    for i, entry in enumerate(entries):
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str) and _is_int(entry.get("partition"))
                and isinstance(entry.get("replicas"), list) and all(_is_int(r) for r in entry["replicas"])):
            die(f"{flag}={path}: partitions[{i}] needs \"topic\" (a string), \"partition\" (an integer) and "
                "\"replicas\" (a list of broker ids)", EXIT_USAGE)
        key = (entry["topic"], entry["partition"])
        if key in seen:
            die(f"{flag}={path}: partition {key[0]}-{key[1]} appears more than once", EXIT_USAGE)
        seen.add(key)
        moves.append((entry["topic"], entry["partition"], tuple(entry["replicas"])))
    return moves


def assignment_json(assignment: Iterable[Move]) -> dict[str, Any]:
    return {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)} for t, p, r in assignment]}


def _dump(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"))


# -- cluster reads -----------------------------------------------------------------------------------


async def current_assignment(admin: AdminClient, topics: list[str]) -> dict[tuple[str, int], tuple[int, ...]]:
    """(topic, partition) -> replicas, for the named topics; an unknown topic is an error."""
    response = await admin.metadata(sorted(set(topics)))
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for topic in response.topics:
        check(topic.error_code, subject=f"topic {topic.name}")
        for part in topic.partitions:
            out[(topic.name, part.partition_index)] = tuple(part.replica_nodes)
    return dict(sorted(out.items()))


async def ongoing(admin: AdminClient, moves: list[Move] | None = None) -> dict[tuple[str, int], Any]:
    """The moves in progress (among ``moves`` when given): (topic, partition) -> its listing."""
    if moves is None:
        topics = None
    else:
        by_topic: dict[str, list[int]] = {}
        for t, p, _ in moves:
            by_topic.setdefault(t, []).append(p)
        Topic = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
        topics = [Topic(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
    response = await admin.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, ListPartitionReassignmentsRequest(
        timeout_ms=int(admin.config.request_timeout_s * 1000), topics=topics))
    check(response.error_code, response.error_message, subject="ListPartitionReassignments")
    return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


async def _alter_configs(admin: AdminClient, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]) -> None:
    Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    Config = IncrementalAlterConfigsRequest.AlterableConfig
    request = IncrementalAlterConfigsRequest(validate_only=False, resources=[
        Resource(resource_type=kind, resource_name=name,
                 configs=[Config(name=k, config_operation=op, value=v) for k, op, v in configs])
        for kind, name, configs in resources])
    response = await admin.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, request)
    for r in response.responses:
        what = "broker" if r.resource_type == _BROKER else "topic"
        check(r.error_code, r.error_message, subject=f"{what} {r.resource_name or '(cluster default)'}")


def throttle_configs(current: dict[tuple[str, int], tuple[int, ...]], moves: list[Move]
                     ) -> tuple[dict[str, tuple[str, str]], set[int]]:
    """Kafka's throttles for ``moves``: per topic (leader throttled replicas, follower throttled
    replicas) as ``partition:broker`` lists, and the brokers whose rates are set."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for topic, pid, target in moves:
        existing = current.get((topic, pid), ())
        if set(existing) == set(target):
            continue  # a reorder moves no data
        leaders.setdefault(topic, []).extend(f"{pid}:{b}" for b in existing)
        followers.setdefault(topic, []).extend(f"{pid}:{b}" for b in target if b not in existing)
        brokers.update(existing)
        brokers.update(target)
    return {t: (",".join(leaders[t]), ",".join(followers.get(t, []))) for t in leaders}, brokers


async def set_throttles(admin: AdminClient, rate: int, current: dict[tuple[str, int], tuple[int, ...]],
                        moves: list[Move]) -> set[int]:
    topics, brokers = throttle_configs(current, moves)
    resources: list[tuple[int, str, list[tuple[str, int, str | None]]]] = []
    for topic, (leader, follower) in sorted(topics.items()):
        resources.append((_TOPIC, topic, [(LEADER_REPLICAS, _SET, leader), (FOLLOWER_REPLICAS, _SET, follower)]))
    for broker in sorted(brokers):
        resources.append((_BROKER, str(broker), [(LEADER_RATE, _SET, str(rate)), (FOLLOWER_RATE, _SET, str(rate))]))
    if resources:
        await _alter_configs(admin, resources)
    return brokers


async def clear_throttles(admin: AdminClient, topics: Iterable[str]) -> None:
    """Remove the throttled-replicas configs of ``topics`` and the rates of every broker."""
    await admin.refresh_metadata()
    resources: list[tuple[int, str, list[tuple[str, int, str | None]]]] = [
        (_TOPIC, t, [(LEADER_REPLICAS, _DELETE, None), (FOLLOWER_REPLICAS, _DELETE, None)]) for t in sorted(set(topics))]
    resources += [(_BROKER, str(b), [(LEADER_RATE, _DELETE, None), (FOLLOWER_RATE, _DELETE, None)])
                  for b in sorted(admin.brokers)]
    await _alter_configs(admin, resources)


# -- generate ---------------------------------------------------------------------------------------


def _parse_broker_list(text: str) -> list[int]:
    try:
        ids = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        die(f"--broker-list {text}: expected broker ids separated by commas", EXIT_USAGE)
    if not ids or len(set(ids)) != len(ids):
        die(f"--broker-list {text}: expected distinct broker ids separated by commas", EXIT_USAGE)
    return ids


def propose(current: dict[tuple[str, int], tuple[int, ...]], brokers: list[PlacementBroker],
            rng: random.Random) -> list[Move]:
    """Each topic's partitions placed anew over ``brokers``, keeping its replication factor."""
    by_topic: dict[str, dict[int, int]] = {}
    for (topic, pid), replicas in current.items():
        by_topic.setdefault(topic, {})[pid] = len(replicas)
    out: list[Move] = []
    for topic, parts in sorted(by_topic.items()):
        rf = max(parts.values())
        placed = assign_replicas(brokers, max(parts) + 1, rf, rng)
        out += [(topic, pid, tuple(placed[pid])) for pid in sorted(parts)]
    return out


@app.command("generate")
def generate(
    topics_to_move_json_file: Annotated[Path, typer.Option("--topics-to-move-json-file",
                                                           help="{\"version\":1,\"topics\":[{\"topic\":\"t\"}]}",
                                                           show_default=False)],
    broker_list: Annotated[str, typer.Option("--broker-list", help="The brokers to spread the topics over: 1,2,3.",
                                             show_default=False)],
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Print the topics' current assignment and a proposal spreading them over --broker-list."""
    flag = "--topics-to-move-json-file"
    doc = _load(topics_to_move_json_file, flag)
    entries = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("topic"), str) for e in entries):
        die(f"{flag}={topics_to_move_json_file}: expected {{\"version\": 1, \"topics\": [{{\"topic\": \"name\"}}]}}",
            EXIT_USAGE)
    topics = [e["topic"] for e in entries]
    ids = _parse_broker_list(broker_list)

    async def body(admin: AdminClient) -> tuple[dict, list[Move]]:
        current = await current_assignment(admin, topics)
        unknown = [b for b in ids if b not in admin.brokers]
        if unknown:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"broker(s) {','.join(map(str, unknown))} are not in the cluster", subject="--broker-list")
        brokers = [PlacementBroker(b, admin.brokers[b].rack) for b in ids]
        try:
            proposal = propose(current, brokers, random.Random())
        except PlacementError as exc:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc), subject="--broker-list") from None
        return current, proposal

    current, proposal = run_admin(bootstrap_server, command_config, body)
    current_doc = assignment_json((t, p, r) for (t, p), r in current.items())
    proposed_doc = assignment_json(proposal)
    if json_output:
        emit_json({"current": current_doc, "proposed": proposed_doc})
        return
    typer.echo("Current partition replica assignment")
    typer.echo(_dump(current_doc))
    typer.echo("")
    typer.echo("Proposed partition reassignment configuration")
    typer.echo(_dump(proposed_doc))


# -- execute ----------------------------------------------------------------------------------------


def _progress_bar(total: int):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("moving partitions"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


async def wait_until_done(admin: AdminClient, moves: list[Move]) -> None:
    """Poll the moves in progress until none of ``moves`` is; a progress bar on a terminal."""
    total = len(moves)
    bar = _progress_bar(total) if sys.stderr.isatty() else None
    task = bar.add_task("moving", total=total) if bar is not None else None
    if bar is not None:
        bar.start()
    try:
        while True:
            left = await ongoing(admin, moves)
            if bar is not None and task is not None:
                bar.update(task, completed=total - len(left))
            if not left:
                return
            await trio.sleep(POLL_INTERVAL_S)
    finally:
        if bar is not None:
            bar.stop()


def _alter_request(moves: Iterable[tuple[str, int, tuple[int, ...] | None]], timeout_ms: int
                   ) -> AlterPartitionReassignmentsRequest:
    Topic = AlterPartitionReassignmentsRequest.ReassignableTopic
    Partition = AlterPartitionReassignmentsRequest.ReassignablePartition
    by_topic: dict[str, list] = {}
    for topic, pid, replicas in moves:
        by_topic.setdefault(topic, []).append(
            Partition(partition_index=pid, replicas=None if replicas is None else list(replicas)))
    return AlterPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=[
        Topic(name=t, partitions=ps) for t, ps in by_topic.items()])


async def alter(admin: AdminClient, moves: Iterable[tuple[str, int, tuple[int, ...] | None]]
                ) -> list[tuple[str, int, int, str | None]]:
    """Send the moves; returns (topic, partition, error code, message) per partition."""
    response = await admin.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                                   _alter_request(moves, int(admin.config.request_timeout_s * 1000)))
    check(response.error_code, response.error_message, subject="AlterPartitionReassignments")
    return [(t.name, p.partition_index, p.error_code, p.error_message) for t in response.responses
            for p in t.partitions]


def _report_failures(results: list[tuple[str, int, int, str | None]], what: str) -> list[str]:
    lines = []
    for topic, pid, code, message in results:
        if code != ErrorCode.NONE:
            name = ErrorCode.for_code(code).name
            lines.append(f"{what} {topic}-{pid}: {name}" + (f": {message}" if message else ""))
    return lines


@app.command("execute")
def execute(
    reassignment_json_file: ReassignmentFile,
    throttle: Annotated[int | None, typer.Option("--throttle", help="Cap the replication traffic of the moves at "
                                                 "this many bytes per second, per broker.", min=1,
                                                 show_default=False)] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until every move is done.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Start the moves of a reassignment file (print the current assignment first: it rolls them back)."""
    moves = read_reassignment(reassignment_json_file)

    async def body(admin: AdminClient) -> tuple[dict, list, bool]:
        current = await current_assignment(admin, [t for t, _, _ in moves])
        missing = [f"{t}-{p}" for t, p, _ in moves if (t, p) not in current]
        if missing:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition(s): " + ", ".join(missing),
                             subject=str(reassignment_json_file))
        if not json_output:
            rollback = assignment_json((t, p, current[(t, p)]) for t, p, _ in moves)
            typer.echo("Current partition replica assignment\n")
            typer.echo(_dump(rollback))
            typer.echo("\nSave this to use as the --reassignment-json-file option during rollback")
        if throttle is not None:
            await set_throttles(admin, throttle, current, moves)
        results = await alter(admin, moves)
        ok = all(code == ErrorCode.NONE for *_, code, _ in results)
        dir_moves = log_dir_moves(_load(reassignment_json_file, "--reassignment-json-file"),
                                  f"--reassignment-json-file={reassignment_json_file}")
        if ok and dir_moves:
            for (t, p, b, d), error in await alter_log_dirs(admin, dir_moves):
                ok = False
                results.append((t, p, ErrorCode[error] if error in ErrorCode.__members__ else
                                ErrorCode.UNKNOWN_SERVER_ERROR, f"log directory {d} on broker {b}"))
        if ok and wait:
            await wait_until_done(admin, moves)
            if dir_moves:
                await wait_for_log_dir_moves(admin, dir_moves)
        return current, results, ok

    current, results, ok = run_admin(bootstrap_server, command_config, body)
    failures = _report_failures(results, "cannot move")
    if json_output:
        emit_json({
            "current": assignment_json((t, p, current[(t, p)]) for t, p, _ in moves),
            "results": [{"topic": t, "partition": p, "error": ErrorCode.for_code(c).name, "message": m}
                        for t, p, c, m in results],
            "done": ok and wait,
        })
    elif ok:
        typer.echo("Successfully started partition reassignment" + ("s" if len(moves) > 1 else "") + " for "
                   + ",".join(f"{t}-{p}" for t, p, _ in moves))
        if wait:
            typer.echo("Every partition is on its new replicas.")
    for line in failures:
        typer.echo(f"kraftpy: {line}", err=True)
    raise typer.Exit(EXIT_OK if ok else EXIT_FAILED)


# -- verify -----------------------------------------------------------------------------------------


@app.command("verify")
def verify(
    reassignment_json_file: ReassignmentFile,
    preserve_throttles: Annotated[bool, typer.Option("--preserve-throttles",
                                                     help="Keep the throttles even when every move is done.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Say whether each move of a reassignment file is done; once all are, remove the throttles. Exits 0
    only when every partition is on its target replicas."""
    moves = read_reassignment(reassignment_json_file)

    async def body(admin: AdminClient) -> list[tuple[str, int, str, tuple[int, ...]]]:
        in_progress = await ongoing(admin, moves)
        current = await current_assignment(admin, [t for t, _, _ in moves])
        states = []
        for topic, pid, target in moves:
            replicas = current.get((topic, pid))
            if replicas is None:
                states.append((topic, pid, "missing", ()))
            elif (topic, pid) in in_progress:
                states.append((topic, pid, "in progress", replicas))
            elif replicas == target:
                states.append((topic, pid, "complete", replicas))
            else:
                states.append((topic, pid, "different", replicas))
        if all(s == "complete" for _, _, s, _ in states) and not preserve_throttles:
            await clear_throttles(admin, [t for t, _, _ in moves])
        return states

    states = run_admin(bootstrap_server, command_config, body)
    complete = all(s == "complete" for _, _, s, _ in states)
    if json_output:
        emit_json({"complete": complete, "partitions": [
            {"topic": t, "partition": p, "state": s, "replicas": list(r)} for t, p, s, r in states]})
    else:
        typer.echo("Status of partition reassignment:")
        for (topic, pid, state, replicas), (_, _, target) in zip(states, moves, strict=True):
            if state == "complete":
                typer.echo(f"Reassignment of partition {topic}-{pid} is completed.")
            elif state == "in progress":
                typer.echo(f"Reassignment of partition {topic}-{pid} is still in progress.")
            elif state == "missing":
                typer.echo(f"There is no partition {topic}-{pid}.")
            else:
                typer.echo(f"There is no active reassignment of partition {topic}-{pid}, but its replicas "
                           f"{list(replicas)} are not the target {list(target)}.")
        if complete and not preserve_throttles:
            typer.echo("Clearing broker-level throttles and topic-level throttles.")
    raise typer.Exit(EXIT_OK if complete else EXIT_FAILED)


# -- cancel -----------------------------------------------------------------------------------------


@app.command("cancel")
def cancel(
    reassignment_json_file: ReassignmentFile,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Cancel the moves of a reassignment file: their partitions go back to their replicas before it."""
    moves = read_reassignment(reassignment_json_file)

    async def body(admin: AdminClient) -> list[tuple[str, int, int, str | None]]:
        return await alter(admin, ((t, p, None) for t, p, _ in moves))

    results = run_admin(bootstrap_server, command_config, body)
    ok = all(code == ErrorCode.NONE for *_, code, _ in results)
    if json_output:
        emit_json({"results": [{"topic": t, "partition": p, "error": ErrorCode.for_code(c).name, "message": m}
                               for t, p, c, m in results]})
    else:
        cancelled = [f"{t}-{p}" for t, p, c, _ in results if c == ErrorCode.NONE]
        if cancelled:
            typer.echo("Successfully cancelled partition reassignment(s) for " + ",".join(cancelled))
    for line in _report_failures(results, "cannot cancel the move of"):
        typer.echo(f"kraftpy: {line}", err=True)
    raise typer.Exit(EXIT_OK if ok else EXIT_FAILED)
