"""`kraftpy groups list | describe | delete | reset-offsets`: kafka-consumer-groups.sh's work.

Every broker is asked for the groups it coordinates (ListGroups); a group's own coordinator is asked
for its members and state (DescribeGroups), its committed offsets (OffsetFetch), to delete it
(DeleteGroups) or some of its offsets (OffsetDelete), and to store reset offsets (OffsetCommit as an
admin: generation -1, no member id). End offsets and offsets by time come from each partition's
leader (ListOffsets). A member's partitions are read from its assignment bytes (the consumer
protocol, `kraftpy.protocol.consumer_protocol`).

reset-offsets only prints its plan unless ``--execute`` is given, and refuses a group with members
(only an Empty or Dead group's offsets may be reset, as Kafka's tool and coordinator insist).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any

import trio
import typer

from kraftpy.admin.client import AdminClient, AdminError, KafkaError, check
from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    die,
    emit_json,
    emit_table,
    retrying,
    run_admin,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.consumer_protocol import AssignmentError, decode_assignment
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)

app = typer.Typer(help="List, describe and delete consumer groups, and reset their offsets.",
                  no_args_is_help=True)

#: A classic group's states, as Kafka names them (ListGroups v4's states filter takes these).
GROUP_STATES = ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead")
#: States in which a group's offsets may be reset (no member could be consuming).
INACTIVE_STATES = ("Empty", "Dead")
EARLIEST, LATEST = -2, -1
#: Partitions per OffsetCommit when resetting (each request is stored as one batch, atomically).
COMMIT_CHUNK = 1000
#: From how many partitions a reset shows a progress bar (on a terminal only).
PROGRESS_FROM = 100

TopicPartition = tuple[str, int]


def _na(value: Any) -> Any:
    return "-" if value is None else value


# -- requests --------------------------------------------------------------------------------------


async def list_groups(admin: AdminClient, states: list[str]) -> list[tuple[str, str, str]]:
    """(group, protocol type, state) of every group, asked of every broker."""
    await admin.refresh_metadata()
    found: dict[str, tuple[str, str, str]] = {}
    for node_id in sorted(admin.brokers):
        async def ask(node_id: int = node_id) -> Any:
            response = await admin.request(ApiKey.LIST_GROUPS, ListGroupsRequest(states_filter=states),
                                           node_id=node_id)
            check(response.error_code, subject=f"broker {node_id}")
            return response

        response = await retrying(admin, "ListGroups", ask)
        wanted = {s.lower() for s in states}
        for g in response.groups:
            state = g.group_state or ""
            if wanted and state and state.lower() not in wanted:
                continue  # a broker older than ListGroups v4 does not filter
            found[g.group_id] = (g.group_id, g.protocol_type, state)
    return [found[g] for g in sorted(found)]


async def describe_group(admin: AdminClient, group: str) -> tuple[Any, int]:
    """(DescribeGroups' entry for ``group``, its coordinator's node id)."""
    async def ask() -> tuple[Any, int]:
        node_id = await admin.find_coordinator(group)
        response = await admin.request(ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=[group]),
                                       node_id=node_id)
        entry = response.groups[0]
        check(entry.error_code, subject=f"group {group}")
        return entry, node_id

    return await retrying(admin, "DescribeGroups", ask)


async def fetch_committed(admin: AdminClient, group: str) -> dict[TopicPartition, int]:
    """The group's committed offsets (OffsetFetch for every partition)."""
    async def ask() -> dict[TopicPartition, int]:
        node_id = await admin.find_coordinator(group)
        version = admin.version_for(ApiKey.OFFSET_FETCH, node_id)
        if version >= 8:
            request = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group,
                                                                                           topics=None)])
        else:
            request = OffsetFetchRequest(group_id=group, topics=None)
        response = await admin.request(ApiKey.OFFSET_FETCH, request, node_id=node_id, version=version)
        if version >= 8:
            error, topics = response.groups[0].error_code, response.groups[0].topics
        else:
            error, topics = response.error_code, response.topics
        check(error, subject=f"group {group}")
        out = {}
        for topic in topics:
            for p in topic.partitions:
                check(p.error_code, subject=f"group {group} {topic.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out[(topic.name, p.partition_index)] = p.committed_offset
        return out

    return await retrying(admin, "OffsetFetch", ask)


async def topic_partitions(admin: AdminClient, topics: list[str], *, strict: bool
                           ) -> dict[str, dict[int, int]]:
    """``{topic: {partition: leader id}}``; an unknown topic raises when ``strict``, else is left out."""
    response = await admin.metadata(sorted(set(topics)))
    out: dict[str, dict[int, int]] = {}
    for t in response.topics:
        if t.error_code != ErrorCode.NONE:
            if strict:
                check(t.error_code, "the topic does not exist" if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                      else None, subject=f"topic {t.name}")
            continue
        out[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
    return out


async def list_offsets(admin: AdminClient, specs: dict[TopicPartition, int], *, strict: bool = True,
                       on_progress: Callable[[int], None] | None = None) -> dict[TopicPartition, int | None]:
    """Each partition's offset for its timestamp spec (EARLIEST, LATEST or a time in ms), asked of its
    leader; a time after every record gives the log end offset (as Kafka's tool does). Not strict:
    a partition that cannot answer gets None instead of an error."""
    out: dict[TopicPartition, int | None] = {}
    pending = dict(specs)
    last: KafkaError | None = None
    with trio.move_on_after(admin.config.api_timeout_s):
        while pending:
            leaders = await topic_partitions(admin, [t for t, _ in pending], strict=False)
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in list(pending):
                leader = leaders.get(tp[0], {}).get(tp[1])
                if leader is None:
                    error = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition",
                                       subject=f"{tp[0]}-{tp[1]}")
                    if strict:
                        raise error
                    out[tp] = None
                    del pending[tp]
                elif leader < 0:
                    last = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, subject=f"{tp[0]}-{tp[1]}")
                else:
                    by_leader.setdefault(leader, []).append(tp)
            for leader, tps in sorted(by_leader.items()):
                topics: dict[str, list[Any]] = {}
                for topic, partition in tps:
                    topics.setdefault(topic, []).append(ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=partition, timestamp=pending[(topic, partition)]))
                request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                    ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])
                response = await admin.request(ApiKey.LIST_OFFSETS, request, node_id=leader)
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = (topic.name, p.partition_index)
                        if tp not in pending:
                            continue
                        code = ErrorCode.for_code(p.error_code)
                        if code == ErrorCode.NONE:
                            if p.offset < 0 and pending[tp] >= 0:
                                pending[tp] = LATEST  # no record at or after the time: the end
                                continue
                            out[tp] = p.offset
                        elif code.retriable:
                            last = KafkaError(code, subject=f"{tp[0]}-{tp[1]}")
                            continue
                        elif strict:
                            raise KafkaError(code, subject=f"{tp[0]}-{tp[1]}")
                        else:
                            out[tp] = None
                        del pending[tp]
                        if on_progress is not None:
                            on_progress(1)
            if pending:
                await trio.sleep(0.1)
    if pending:
        if not strict:
            out.update(dict.fromkeys(pending))
            return out
        raise KafkaError(last.code if last is not None else ErrorCode.REQUEST_TIMED_OUT,
                         "offsets not listed within default.api.timeout.ms",
                         subject=last.subject if last is not None else None)
    return out


# -- list ------------------------------------------------------------------------------------------


def _parse_states(text: str | None) -> list[str]:
    if not text:
        return []
    by_lower = {s.lower(): s for s in GROUP_STATES}
    states = []
    for item in text.split(","):
        name = by_lower.get(item.strip().lower())
        if name is None:
            die(f"--state={text}: {item.strip()!r} is not one of {', '.join(GROUP_STATES)}", EXIT_USAGE)
        states.append(name)
    return states


@app.command("list")
def list_command(
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    state: Annotated[str | None, typer.Option(
        "--state", help=f"Only groups in these states (comma-separated: {', '.join(GROUP_STATES)}).",
        show_default=False)] = None,
    as_json: JsonOption = False,
) -> None:
    """List the consumer groups of every broker, with their state."""
    states = _parse_states(state)
    groups = run_admin(bootstrap_server, command_config, lambda admin: list_groups(admin, states))
    if as_json:
        emit_json({"groups": [{"group": g, "protocol_type": p, "state": s} for g, p, s in groups]})
        return
    emit_table(["GROUP", "STATE"], [(g, s) for g, _, s in groups])


# -- describe --------------------------------------------------------------------------------------


def _assignment(protocol_type: str, member: Any) -> dict[str, list[int]]:
    if protocol_type != "consumer":
        return {}
    try:
        return decode_assignment(member.member_assignment)
    except AssignmentError:
        return {}


async def describe_consumer_group(admin: AdminClient, group: str) -> tuple[Any, int] | None:
    """(ConsumerGroupDescribe's entry for ``group``, its coordinator) when it is a KIP-848 consumer group;
    None when it is none or the brokers do not serve that API."""
    async def ask() -> tuple[Any, int] | None:
        node_id = await admin.find_coordinator(group)
        try:
            admin.version_for(ApiKey.CONSUMER_GROUP_DESCRIBE, node_id)
        except KafkaError:
            return None
        response = await admin.request(ApiKey.CONSUMER_GROUP_DESCRIBE,
                                       ConsumerGroupDescribeRequest(group_ids=[group]), node_id=node_id)
        entry = response.groups[0]
        if entry.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        check(entry.error_code, entry.error_message, subject=f"group {group}")
        return entry, node_id

    return await retrying(admin, "ConsumerGroupDescribe", ask)


async def _describe_one(admin: AdminClient, group: str, with_offsets: bool) -> dict[str, Any]:
    try:
        entry, coordinator = await describe_group(admin, group)
        classic = entry.group_state != "Dead"
    except KafkaError as exc:
        if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise
        classic = False
    members = []
    if classic:
        for m in entry.members:
            members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id, "host": m.client_host,
                            "assignment": _assignment(entry.protocol_type, m)})
        state, protocol_type, strategy = entry.group_state, entry.protocol_type, entry.protocol_data
    else:
        # Not a classic group: a KIP-848 consumer group answers ConsumerGroupDescribe.
        found = await describe_consumer_group(admin, group)
        if found is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group '{group}' does not exist",
                             subject=f"group {group}")
        consumer, coordinator = found
        for m in consumer.members:
            assignment = {tp.topic_name: sorted(tp.partitions) for tp in m.assignment.topic_partitions}
            members.append({"member_id": m.member_id, "group_instance_id": m.instance_id,
                            "client_id": m.client_id, "host": m.client_host, "assignment": assignment})
        state, protocol_type, strategy = consumer.group_state, "consumer", consumer.assignor_name
    broker = admin.brokers.get(coordinator)
    doc: dict[str, Any] = {
        "group": group, "state": state, "protocol_type": protocol_type,
        "assignment_strategy": strategy,
        "coordinator": {"id": coordinator, "host": broker.host if broker else None,
                        "port": broker.port if broker else None},
        "members": members,
    }
    if not classic:
        doc["group_protocol"] = "consumer"
    if with_offsets:
        committed = await fetch_committed(admin, group)
        owner: dict[TopicPartition, dict[str, Any]] = {}
        for m in members:
            for topic, parts in m["assignment"].items():
                for p in parts:
                    owner[(topic, p)] = m
        partitions = sorted(set(committed) | set(owner))
        ends = await list_offsets(admin, dict.fromkeys(partitions, LATEST), strict=False) if partitions else {}
        rows = []
        for tp in partitions:
            current, end = committed.get(tp), ends.get(tp)
            m = owner.get(tp)
            rows.append({"topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end,
                         "lag": end - current if current is not None and end is not None else None,
                         "consumer_id": m["member_id"] if m else None, "host": m["host"] if m else None,
                         "client_id": m["client_id"] if m else None})
        # A member holding no partition still gets a line (as Kafka's tool shows it).
        for m in members:
            if not m["assignment"]:
                rows.append({"topic": None, "partition": None, "current_offset": None, "log_end_offset": None,
                             "lag": None, "consumer_id": m["member_id"], "host": m["host"],
                             "client_id": m["client_id"]})
        doc["offsets"] = rows
    return doc


async def _describe(admin: AdminClient, groups: list[str], all_groups: bool, with_offsets: bool
                    ) -> list[dict[str, Any]]:
    if all_groups:
        groups = [g for g, _, _ in await list_groups(admin, [])]
    return [await _describe_one(admin, g, with_offsets) for g in groups]


@app.command("describe")
def describe_command(
    group: Annotated[list[str] | None, typer.Option(
        "--group", help="The group to describe; may be repeated.", show_default=False)] = None,
    all_groups: Annotated[bool, typer.Option("--all-groups", help="Describe every group.")] = False,
    offsets: Annotated[bool, typer.Option(
        "--offsets", help="Per partition: committed offset, log end offset, lag and owner (the default).")] = False,
    members: Annotated[bool, typer.Option("--members", help="Per member: host, client id, partitions.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="With --members: each member's partitions.")] = False,
    state: Annotated[bool, typer.Option(
        "--state", help="Per group: coordinator, assignment strategy, state, members.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Describe groups: offsets and lag per partition (default), members (--members) or state (--state)."""
    if not group and not all_groups:
        die("one of --group or --all-groups is required", EXIT_USAGE)
    if group and all_groups:
        die("--group and --all-groups cannot be used together", EXIT_USAGE)
    if offsets + members + state > 1:
        die("choose one of --offsets, --members and --state", EXIT_USAGE)
    if verbose and not members:
        die("--verbose goes with --members", EXIT_USAGE)
    with_offsets = not (members or state)
    docs = run_admin(bootstrap_server, command_config,
                     lambda admin: _describe(admin, list(group or []), all_groups, with_offsets))
    if as_json:
        emit_json({"groups": docs})
        return
    for doc in docs:
        if doc["state"] == "Empty":
            typer.echo(f"Consumer group '{doc['group']}' has no active members.", err=True)
        elif doc["state"] in ("PreparingRebalance", "CompletingRebalance"):
            typer.echo(f"Warning: consumer group '{doc['group']}' is rebalancing.", err=True)
    if state:
        rows = []
        for doc in docs:
            c = doc["coordinator"]
            rows.append((doc["group"], f"{c['host']}:{c['port']} ({c['id']})", doc["assignment_strategy"] or "",
                         doc["state"], len(doc["members"])))
        emit_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], rows)
    elif members:
        columns = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        if verbose:
            columns.append("ASSIGNMENT")
        rows = []
        for doc in docs:
            for m in doc["members"]:
                row = [doc["group"], m["member_id"], _na(m["group_instance_id"]), m["host"], m["client_id"],
                       sum(len(p) for p in m["assignment"].values())]
                if verbose:
                    row.append(",".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(m["assignment"].items()))
                               or "-")
                rows.append(row)
        emit_table(columns, rows)
    else:
        rows = []
        for doc in docs:
            for r in doc["offsets"]:
                rows.append((doc["group"], _na(r["topic"]), _na(r["partition"]), _na(r["current_offset"]),
                             _na(r["log_end_offset"]), _na(r["lag"]), _na(r["consumer_id"]), _na(r["host"]),
                             _na(r["client_id"])))
        emit_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                    "HOST", "CLIENT-ID"], rows)


# -- delete ----------------------------------------------------------------------------------------


async def _delete_groups(admin: AdminClient, groups: list[str]) -> dict[str, ErrorCode]:
    results: dict[str, ErrorCode] = {}
    for group in groups:
        async def ask(group: str = group) -> ErrorCode:
            response = await admin.coordinator_request(group, ApiKey.DELETE_GROUPS,
                                                       DeleteGroupsRequest(groups_names=[group]))
            code = ErrorCode.for_code(response.results[0].error_code)
            if code.retriable:
                raise KafkaError(code, subject=f"group {group}")
            return code

        results[group] = await retrying(admin, "DeleteGroups", ask)
    return results


async def _delete_offsets(admin: AdminClient, group: str, topics: list[str]
                          ) -> list[tuple[str, int, ErrorCode]]:
    partitions = await topic_partitions(admin, topics, strict=True)
    request = OffsetDeleteRequest(group_id=group, topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name=t, partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p) for p in sorted(ps)])
        for t, ps in sorted(partitions.items())])

    async def ask() -> Any:
        response = await admin.coordinator_request(group, ApiKey.OFFSET_DELETE, request)
        check(response.error_code, _GROUP_MESSAGES.get(response.error_code), subject=f"group {group}")
        return response

    response = await retrying(admin, "OffsetDelete", ask)
    return [(t.name, p.partition_index, ErrorCode.for_code(p.error_code))
            for t in response.topics for p in t.partitions]


_GROUP_MESSAGES = {
    ErrorCode.NON_EMPTY_GROUP: "the group has active members",
    ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "the group's members are subscribed to the topic",
}


@app.command("delete")
def delete_command(
    group: Annotated[list[str], typer.Option("--group", help="The group to delete; may be repeated.",
                                             show_default=False)],
    topic: Annotated[list[str] | None, typer.Option(
        "--topic", help="Delete only the group's offsets of this topic (OffsetDelete); may be repeated.",
        show_default=False)] = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete empty groups with their offsets, or (with --topic) a group's offsets of some topics."""
    if topic:
        if len(group) != 1:
            die("--topic deletes the offsets of one --group", EXIT_USAGE)
        rows = run_admin(bootstrap_server, command_config, lambda admin: _delete_offsets(admin, group[0], topic))
        failed = [(t, p, e) for t, p, e in rows if e != ErrorCode.NONE]
        if as_json:
            emit_json({"group": group[0], "partitions": [{"topic": t, "partition": p, "error": e.name if e else None}
                                                         for t, p, e in rows]})
        else:
            emit_table(["TOPIC", "PARTITION", "STATUS"],
                       [(t, p, "Successful" if e == ErrorCode.NONE else f"Error: {e.name}") for t, p, e in rows])
        for t, p, e in failed:
            typer.echo(f"kraftpy: group {group[0]} {t}-{p}: {e.name}: {_GROUP_MESSAGES.get(e, '')}".rstrip(": "),
                       err=True)
        if failed:
            raise typer.Exit(EXIT_FAILED)
        return
    results = run_admin(bootstrap_server, command_config, lambda admin: _delete_groups(admin, list(group)))
    done = [g for g, e in results.items() if e == ErrorCode.NONE]
    if as_json:
        emit_json({"groups": [{"group": g, "error": None if e == ErrorCode.NONE else e.name}
                              for g, e in results.items()]})
    elif done:
        typer.echo("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in done)
                   + ") was successful.")
    failed = False
    for g, e in results.items():
        if e != ErrorCode.NONE:
            failed = True
            typer.echo(f"kraftpy: group {g}: {e.name}: {_GROUP_MESSAGES.get(e, 'could not be deleted')}", err=True)
    if failed:
        raise typer.Exit(EXIT_FAILED)


# -- reset-offsets ---------------------------------------------------------------------------------

_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:?\d{2})?$")


def parse_datetime(text: str) -> int:
    """``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``, ``+01:00``); without one, the local
    time zone, as Kafka's tool reads it. Milliseconds since the epoch."""
    if not _DATETIME.match(text):
        raise ValueError("expected YYYY-MM-DDTHH:mm:SS.sss, optionally followed by Z or +HH:MM")
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.astimezone()  # the local zone
    return int(value.timestamp() * 1000)


def parse_topic_spec(text: str) -> tuple[str, list[int] | None]:
    """``topic`` or ``topic:0,1,2``."""
    name, sep, parts = text.partition(":")
    if not name:
        raise ValueError("expected TOPIC or TOPIC:PARTITION[,PARTITION...]")
    if not sep:
        return name, None
    try:
        partitions = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise ValueError("partitions must be numbers: TOPIC:0,1,2") from None
    if not partitions or partitions[0] < 0:
        raise ValueError("expected TOPIC:PARTITION[,PARTITION...] with partitions of at least 0")
    return name, partitions


@contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr when it is a terminal and the work is large; else nothing."""
    if total < PROGRESS_FROM or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n: progress.advance(task, n)


class ResetPlan:
    """What reset-offsets was asked: the partitions' scope and how to compute their new offsets."""

    def __init__(self, mode: str, value: int | None) -> None:
        self.mode = mode
        self.value = value


def _clamp(offset: int, earliest: int, latest: int) -> int:
    return max(earliest, min(offset, latest))


async def _reset(admin: AdminClient, group: str, topics: list[tuple[str, list[int] | None]], all_topics: bool,
                 plan: ResetPlan, execute: bool) -> dict[TopicPartition, int]:
    entry, _ = await describe_group(admin, group)
    if entry.group_state not in INACTIVE_STATES:
        raise AdminError(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                         f"state is {entry.group_state}.")
    committed = await fetch_committed(admin, group)
    if all_topics:
        partitions = sorted(committed)
    else:
        known = await topic_partitions(admin, [t for t, _ in topics], strict=True)
        wanted: set[TopicPartition] = set()
        for name, parts in topics:
            missing = [p for p in parts or () if p not in known[name]]
            if missing:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"the topic has partitions "
                                 f"0-{len(known[name]) - 1}, not {','.join(map(str, missing))}", subject=f"topic {name}")
            wanted.update((name, p) for p in (parts if parts is not None else known[name]))
        partitions = sorted(wanted)
    if not partitions:
        return {}
    steps = len(partitions) * 2 + (len(partitions) if execute else 0)
    with _progress(steps, f"reset {group}") as advance:
        earliest = await list_offsets(admin, dict.fromkeys(partitions, EARLIEST), on_progress=advance)
        if plan.mode == "to-datetime":
            assert plan.value is not None
            # The first offset at or after the time, where the new offsets are taken from.
            latest = await list_offsets(admin, dict.fromkeys(partitions, plan.value), on_progress=advance)
        else:
            latest = await list_offsets(admin, dict.fromkeys(partitions, LATEST), on_progress=advance)
        new: dict[TopicPartition, int] = {}
        for tp in partitions:
            lo, hi = earliest[tp], latest[tp]
            assert lo is not None and hi is not None
            if plan.mode == "to-earliest":
                new[tp] = lo
            elif plan.mode in ("to-latest", "to-datetime"):
                new[tp] = hi
            elif plan.mode == "to-offset":
                assert plan.value is not None
                new[tp] = _clamp(plan.value, lo, hi)
            elif plan.mode == "shift-by":
                assert plan.value is not None
                if tp not in committed:
                    raise AdminError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no "
                                     f"current committed offset")
                new[tp] = _clamp(committed[tp] + plan.value, lo, hi)
            else:  # to-current: the committed offset, or the log end where there is none
                new[tp] = committed.get(tp, hi)
        if execute:
            await _commit(admin, group, new, advance)
    return new


async def _commit(admin: AdminClient, group: str, offsets: dict[TopicPartition, int],
                  advance: Callable[[int], None] | None) -> None:
    items = sorted(offsets.items())
    for start in range(0, len(items), COMMIT_CHUNK):
        chunk = items[start:start + COMMIT_CHUNK]
        topics: dict[str, list[Any]] = {}
        for (topic, partition), offset in chunk:
            topics.setdefault(topic, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=""))
        # An admin's commit: no generation, no member; the coordinator takes it only for an empty group.
        request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None, topics=[
                                          OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                                          for t, ps in topics.items()])

        async def ask(request: Any = request) -> None:
            response = await admin.coordinator_request(group, ApiKey.OFFSET_COMMIT, request)
            for t in response.topics:
                for p in t.partitions:
                    code = ErrorCode.for_code(p.error_code)
                    if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                                ErrorCode.REBALANCE_IN_PROGRESS):
                        # A member joined since the state was checked.
                        entry, _ = await describe_group(admin, group)
                        raise AdminError(f"Assignments can only be reset if the group '{group}' is inactive, but "
                                         f"the current state is {entry.group_state}.")
                    check(code, subject=f"group {group} {t.name}-{p.partition_index}")

        await retrying(admin, "OffsetCommit", ask)
        if advance is not None:
            advance(len(chunk))


@app.command("reset-offsets")
def reset_offsets_command(
    group: Annotated[str, typer.Option("--group", help="The group whose offsets to reset.", show_default=False)],
    topic: Annotated[list[str] | None, typer.Option(
        "--topic", help="TOPIC or TOPIC:PARTITION[,PARTITION...]; may be repeated.", show_default=False)] = None,
    all_topics: Annotated[bool, typer.Option(
        "--all-topics", help="Every topic the group has committed offsets for.")] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Reset to the earliest offset.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Reset to the log end offset.")] = False,
    to_current: Annotated[bool, typer.Option(
        "--to-current", help="Reset to the committed offset (the log end where there is none).")] = False,
    to_datetime: Annotated[str | None, typer.Option(
        "--to-datetime", help="Reset to the first record at or after YYYY-MM-DDTHH:mm:SS.sss[Z|+HH:MM].",
        show_default=False)] = None,
    to_offset: Annotated[int | None, typer.Option(
        "--to-offset", help="Reset to this offset (kept within earliest and latest).", show_default=False)] = None,
    shift_by: Annotated[int | None, typer.Option(
        "--shift-by", help="Move the committed offset by N, negative or positive (kept within earliest and "
        "latest).", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only print the new offsets (the default).")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Commit the new offsets.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Reset an inactive group's committed offsets; prints the plan only, unless --execute."""
    modes = {"to-earliest": to_earliest, "to-latest": to_latest, "to-current": to_current,
             "to-datetime": to_datetime is not None, "to-offset": to_offset is not None,
             "shift-by": shift_by is not None}
    chosen = [m for m, on in modes.items() if on]
    if len(chosen) != 1:
        die("choose one of --to-earliest, --to-latest, --to-current, --to-datetime, --to-offset, --shift-by",
            EXIT_USAGE)
    if dry_run and execute:
        die("--dry-run and --execute cannot be used together", EXIT_USAGE)
    if bool(topic) == all_topics:
        die("choose either --topic or --all-topics", EXIT_USAGE)
    value: int | None = to_offset if to_offset is not None else shift_by
    if to_datetime is not None:
        try:
            value = parse_datetime(to_datetime)
        except ValueError as exc:
            die(f"--to-datetime={to_datetime}: {exc}", EXIT_USAGE)
    specs = []
    for item in topic or ():
        try:
            specs.append(parse_topic_spec(item))
        except ValueError as exc:
            die(f"--topic={item}: {exc}", EXIT_USAGE)
    plan = ResetPlan(chosen[0], value)
    new = run_admin(bootstrap_server, command_config,
                    lambda admin: _reset(admin, group, specs, all_topics, plan, execute))
    if as_json:
        emit_json({"group": group, "executed": execute, "offsets": [
            {"topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(new.items())]})
    else:
        emit_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [(group, t, p, o) for (t, p), o in sorted(new.items())])
    if not execute:
        typer.echo("Dry run: nothing was committed; --execute commits these offsets.", err=True)
