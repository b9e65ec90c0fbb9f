"""`kraftpy topics create|list|describe|alter|delete`, in the shape of Kafka's kafka-topics.sh.

Every subcommand talks the Kafka protocol to ``--bootstrap-server`` (CreateTopics, Metadata,
DescribeConfigs, CreatePartitions, DeleteTopics; the broker forwards writes to the active controller).
A request the cluster refuses ends the command with exit 1 and one line naming Kafka's error code
(``kraftpy: topic t: TOPIC_ALREADY_EXISTS: Topic 't' already exists.``); a wrong command line with 2.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kraftpy.admin.client import AdminClient, KafkaError, check
from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    die,
    emit_json,
    emit_table,
    parse_key_values,
    run_admin,
)
from kraftpy.ids import Uuid
from kraftpy.metadata.records import ConfigResourceType
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    REQUESTS,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
)
from kraftpy.protocol.types import ZERO_UUID

app = typer.Typer(help="Create, list, describe, alter and delete topics (kafka-topics.sh).", no_args_is_help=True)

TopicOption = Annotated[str, typer.Option("--topic", help="The topic's name.", show_default=False)]
ReplicaAssignmentOption = Annotated[str | None, typer.Option(
    "--replica-assignment", show_default=False,
    help="Replicas of each partition as broker ids, partitions separated by ',' and replicas by ':' "
         "(\"4:5,5:6\": partition 0 on 4 and 5, partition 1 on 5 and 6); the first is the preferred leader.")]

#: Kafka's DescribeConfigs source 5: a key at its default, left out of `describe`'s Configs column.
_DEFAULT_CONFIG = 5
_NO_LEADER = -1
#: ListPartitionReassignments: asked when the cluster serves it, for the Adding/Removing columns.
_LIST_PARTITION_REASSIGNMENTS = 46


def parse_replica_assignment(text: str) -> list[list[int]]:
    """Kafka's ``--replica-assignment`` form; a usage error names what is wrong."""
    partitions: list[list[int]] = []
    for index, item in enumerate(text.split(",")):
        replicas = []
        for part in item.split(":"):
            part = part.strip()
            if not part.isdigit():
                die(f"--replica-assignment {text}: partition {index}: {part!r} is not a broker id", EXIT_USAGE)
            replicas.append(int(part))
        if len(set(replicas)) != len(replicas):
            die(f"--replica-assignment {text}: partition {index} names a broker more than once", EXIT_USAGE)
        if partitions and len(replicas) != len(partitions[0]):
            die(f"--replica-assignment {text}: partition {index} has {len(replicas)} replicas, partition 0 "
                f"has {len(partitions[0])}", EXIT_USAGE)
        partitions.append(replicas)
    return partitions


def _topic_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        die(f"--topic {text!r}: no topic named", EXIT_USAGE)
    return names


def _error_line(code: int, message: str | None, subject: str) -> str:
    if message == ErrorCode.for_code(code).name:
        message = None
    return str(KafkaError(code, message, subject=subject))


# -- create ------------------------------------------------------------------------------------------


@app.command("create")
def create(
    topic: TopicOption,
    partitions: Annotated[int | None, typer.Option(
        "--partitions", help="Number of partitions.", show_default="the broker's num.partitions")] = None,
    replication_factor: Annotated[int | None, typer.Option(
        "--replication-factor", help="Replicas of each partition.",
        show_default="the broker's default.replication.factor")] = None,
    replica_assignment: ReplicaAssignmentOption = None,
    config: Annotated[list[str] | None, typer.Option(
        "--config", help="A topic config as key=value (repeatable).", show_default=False)] = None,
    if_not_exists: Annotated[bool, typer.Option(
        "--if-not-exists", help="Succeed without doing anything when the topic exists.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a topic."""
    configs = parse_key_values(config, "--config")
    assignment = None
    if replica_assignment is not None:
        if partitions is not None or replication_factor is not None:
            die("--replica-assignment gives the partitions and their replicas: leave out --partitions and "
                "--replication-factor", EXIT_USAGE)
        assignment = parse_replica_assignment(replica_assignment)
    if partitions is not None and partitions < 1:
        die(f"--partitions {partitions}: must be at least 1", EXIT_USAGE)
    if replication_factor is not None and not 1 <= replication_factor <= 32767:
        die(f"--replication-factor {replication_factor}: must be between 1 and 32767", EXIT_USAGE)

    async def body(admin: AdminClient) -> Any:
        Topic = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(
            topics=[Topic(
                name=topic,
                num_partitions=-1 if assignment else (partitions or -1),
                replication_factor=-1 if assignment else (replication_factor or -1),
                assignments=[CreateTopicsRequest.CreatableReplicaAssignment(partition_index=i, broker_ids=replicas)
                             for i, replicas in enumerate(assignment or [])],
                configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )],
            timeout_ms=int(admin.config.request_timeout_s * 1000))
        response = await admin.request(ApiKey.CREATE_TOPICS, request)
        return response.topics[0]

    result = run_admin(bootstrap_server, command_config, body)
    if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and if_not_exists:
        if as_json:
            emit_json({"topic": topic, "created": False})
        return
    if result.error_code != ErrorCode.NONE:
        die(_error_line(result.error_code, result.error_message, f"topic {topic}"), EXIT_FAILED)
    if as_json:
        emit_json({"topic": topic, "created": True, "topic_id": _wire_uuid_str(result.topic_id),
                   "partitions": result.num_partitions, "replication_factor": result.replication_factor})
    else:
        typer.echo(f"Created topic {topic}.")


# -- list --------------------------------------------------------------------------------------------


@app.command("list")
def list_topics(
    exclude_internal: Annotated[bool, typer.Option(
        "--exclude-internal", help="Leave out internal topics (__consumer_offsets).")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the topics' names, one a line."""

    async def body(admin: AdminClient) -> list[str]:
        response = await admin.metadata(None)
        return sorted(t.name for t in response.topics
                      if t.error_code == ErrorCode.NONE and not (exclude_internal and t.is_internal))

    names = run_admin(bootstrap_server, command_config, body)
    if as_json:
        emit_json(names)
    else:
        for name in names:
            typer.echo(name)


# -- describe ----------------------------------------------------------------------------------------


def _wire_uuid_str(value: Any) -> str:
    """A topic id as Kafka prints it (base64); "" for none."""
    return "" if value is None or value == ZERO_UUID else str(Uuid(value.bytes))


async def describe_topics(admin: AdminClient, names: list[str] | None) -> tuple[list[dict[str, Any]], set[int]]:
    """Every named topic (all when None) as a dict, and the live brokers' ids. An unknown topic named
    raises `KafkaError` UNKNOWN_TOPIC_OR_PARTITION."""
    response = await admin.metadata(names)
    live = {b.node_id for b in response.brokers}
    topics = []
    for t in response.topics:
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise KafkaError(t.error_code, f"Topic '{t.name}' does not exist.", subject=f"topic {t.name}")
        check(t.error_code, subject=f"topic {t.name}")
        topics.append({
            "name": t.name,
            "id": _wire_uuid_str(t.topic_id),
            "internal": t.is_internal,
            "partition_count": len(t.partitions),
            "replication_factor": len(t.partitions[0].replica_nodes) if t.partitions else 0,
            "configs": {},
            "min_insync_replicas": 1,
            "partitions": [{
                "partition": p.partition_index,
                "leader": p.leader_id,
                "replicas": list(p.replica_nodes),
                "isr": list(p.isr_nodes),
                "offline": list(p.offline_replicas),
                "adding": [],
                "removing": [],
            } for p in sorted(t.partitions, key=lambda p: p.partition_index)],
        })
    topics.sort(key=lambda t: t["name"])
    if topics:
        Resource = DescribeConfigsRequest.DescribeConfigsResource
        configs = await admin.request(ApiKey.DESCRIBE_CONFIGS, DescribeConfigsRequest(resources=[
            Resource(resource_type=ConfigResourceType.TOPIC, resource_name=t["name"], configuration_keys=None)
            for t in topics]))
        for topic, result in zip(topics, configs.results, strict=True):
            check(result.error_code, result.error_message, subject=f"topic {topic['name']}")
            for entry in result.configs:
                if entry.name == "min.insync.replicas" and entry.value is not None:
                    topic["min_insync_replicas"] = int(entry.value)
                if entry.config_source != _DEFAULT_CONFIG:
                    topic["configs"][entry.name] = entry.value
        await _add_reassignments(admin, topics)
    return topics, live


async def _add_reassignments(admin: AdminClient, topics: list[dict[str, Any]]) -> None:
    """Fill the adding/removing replicas of partitions being reassigned, when the cluster says."""
    request_type = REQUESTS.get(_LIST_PARTITION_REASSIGNMENTS)
    if request_type is None:
        return
    try:
        admin.version_for(_LIST_PARTITION_REASSIGNMENTS)
    except KafkaError:
        return
    response = await admin.request(_LIST_PARTITION_REASSIGNMENTS, request_type(
        topics=None, timeout_ms=int(admin.config.request_timeout_s * 1000)))
    if response.error_code != ErrorCode.NONE:
        return
    by_name = {t["name"]: t for t in topics}
    for t in response.topics:
        topic = by_name.get(t.name)
        if topic is None:
            continue
        by_index = {p["partition"]: p for p in topic["partitions"]}
        for p in t.partitions:
            if p.partition_index in by_index:
                by_index[p.partition_index]["adding"] = list(p.adding_replicas)
                by_index[p.partition_index]["removing"] = list(p.removing_replicas)


def _partition_filter(under_replicated: bool, unavailable: bool, under_min_isr: bool, at_min_isr: bool,
                      live: set[int]):
    def wanted(topic: dict[str, Any], p: dict[str, Any]) -> bool:
        if under_replicated and not len(p["isr"]) < len(p["replicas"]):
            return False
        if unavailable and not (p["leader"] == _NO_LEADER or p["leader"] not in live):
            return False
        if under_min_isr and not len(p["isr"]) < topic["min_insync_replicas"]:
            return False
        if at_min_isr and not len(p["isr"]) == topic["min_insync_replicas"]:
            return False
        return True

    return wanted


def _ids(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


@app.command("describe")
def describe(
    topic: Annotated[str | None, typer.Option(
        "--topic", help="Topics to describe (comma-separated).", show_default="every topic")] = None,
    under_replicated_partitions: Annotated[bool, typer.Option(
        "--under-replicated-partitions", help="Only partitions whose ISR is smaller than their replicas.")] = False,
    unavailable_partitions: Annotated[bool, typer.Option(
        "--unavailable-partitions", help="Only partitions without a live leader.")] = False,
    under_min_isr_partitions: Annotated[bool, typer.Option(
        "--under-min-isr-partitions", help="Only partitions whose ISR is below min.insync.replicas.")] = False,
    at_min_isr_partitions: Annotated[bool, typer.Option(
        "--at-min-isr-partitions", help="Only partitions whose ISR is exactly min.insync.replicas.")] = False,
    exclude_internal: Annotated[bool, typer.Option(
        "--exclude-internal", help="Leave out internal topics (__consumer_offsets).")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Describe topics: id, partitions, replication factor, non-default configs, and each partition's
    leader, replicas, ISR and offline replicas (and adding/removing ones during a reassignment)."""
    names = None if topic is None else _topic_names(topic)
    filtered = under_replicated_partitions or unavailable_partitions or under_min_isr_partitions \
        or at_min_isr_partitions

    async def body(admin: AdminClient) -> tuple[list[dict[str, Any]], set[int]]:
        return await describe_topics(admin, names)

    topics, live = run_admin(bootstrap_server, command_config, body)
    if exclude_internal:
        topics = [t for t in topics if not t["internal"]]
    wanted = _partition_filter(under_replicated_partitions, unavailable_partitions, under_min_isr_partitions,
                               at_min_isr_partitions, live)
    for t in topics:
        t["partitions"] = [p for p in t["partitions"] if wanted(t, p)]
    if filtered:
        topics = [t for t in topics if t["partitions"]]
    if as_json:
        for t in topics:
            del t["min_insync_replicas"]
        emit_json({"topics": topics})
        return
    if not filtered:
        emit_table(["Topic", "TopicId", "PartitionCount", "ReplicationFactor", "Configs"],
                   [[t["name"], t["id"], t["partition_count"], t["replication_factor"],
                     ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))] for t in topics],
                   title="Topics")
    reassigning = any(p["adding"] or p["removing"] for t in topics for p in t["partitions"])
    columns = ["Topic", "Partition", "Leader", "Replicas", "Isr", "Offline"]
    if reassigning:
        columns += ["Adding", "Removing"]
    rows = []
    for t in topics:
        for p in t["partitions"]:
            row = [t["name"], p["partition"], "none" if p["leader"] == _NO_LEADER else p["leader"],
                   _ids(p["replicas"]), _ids(p["isr"]), _ids(p["offline"])]
            if reassigning:
                row += [_ids(p["adding"]), _ids(p["removing"])]
            rows.append(row)
    emit_table(columns, rows, title="Partitions")


# -- alter -------------------------------------------------------------------------------------------


@app.command("alter")
def alter(
    topic: TopicOption,
    partitions: Annotated[int, typer.Option(
        "--partitions", help="The new number of partitions (only ever more).", show_default=False)],
    replica_assignment: ReplicaAssignmentOption = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add partitions to a topic (CreatePartitions). --replica-assignment places the new ones: either
    only the new partitions, or every partition as kafka-topics.sh takes it (the existing ones first)."""
    assignment = None if replica_assignment is None else parse_replica_assignment(replica_assignment)

    async def body(admin: AdminClient) -> Any:
        new = assignment
        if new is not None:
            response = await admin.metadata([topic])
            t = response.topics[0]
            check(t.error_code, subject=f"topic {topic}")
            existing = len(t.partitions)
            if len(new) == partitions:
                new = new[existing:]
            if len(new) != partitions - existing:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"--replica-assignment places {len(new)} partitions; going from {existing} to "
                                 f"{partitions} adds {partitions - existing}", subject=f"topic {topic}")
        Topic = CreatePartitionsRequest.CreatePartitionsTopic
        request = CreatePartitionsRequest(
            topics=[Topic(name=topic, count=partitions,
                          assignments=None if new is None else
                          [CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=replicas) for replicas in new])],
            timeout_ms=int(admin.config.request_timeout_s * 1000), validate_only=False)
        response = await admin.request(ApiKey.CREATE_PARTITIONS, request)
        result = response.results[0]
        check(result.error_code, result.error_message, subject=f"topic {topic}")

    run_admin(bootstrap_server, command_config, body)
    if as_json:
        emit_json({"topic": topic, "partitions": partitions})
    else:
        typer.echo(f"Topic {topic} has {partitions} partitions.")


# -- delete ------------------------------------------------------------------------------------------


@app.command("delete")
def delete(
    topic: Annotated[str, typer.Option("--topic", help="Topics to delete (comma-separated).", show_default=False)],
    if_exists: Annotated[bool, typer.Option(
        "--if-exists", help="Succeed without doing anything for topics that do not exist.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete topics."""
    names = _topic_names(topic)

    async def body(admin: AdminClient) -> list[tuple[str, int, str | None]]:
        version = admin.version_for(ApiKey.DELETE_TOPICS)
        timeout_ms = int(admin.config.request_timeout_s * 1000)
        if version >= 6:
            request = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
                                          timeout_ms=timeout_ms)
        else:
            request = DeleteTopicsRequest(topic_names=names, timeout_ms=timeout_ms)
        response = await admin.request(ApiKey.DELETE_TOPICS, request, version=version)
        return [(r.name, r.error_code, r.error_message) for r in response.responses]

    results = run_admin(bootstrap_server, command_config, body)
    failed = False
    outcome = []
    for name, code, message in results:
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and if_exists:
            outcome.append({"topic": name, "deleted": False})
            continue
        if code != ErrorCode.NONE:
            failed = True
            outcome.append({"topic": name, "deleted": False, "error": ErrorCode.for_code(code).name,
                            "message": message})
            typer.echo(f"kraftpy: {_error_line(code, message, f'topic {name}')}", err=True)
            continue
        outcome.append({"topic": name, "deleted": True})
        if not as_json:
            typer.echo(f"Deleted topic {name}.")
    if as_json:
        emit_json(outcome)
    if failed:
        raise typer.Exit(EXIT_FAILED)
