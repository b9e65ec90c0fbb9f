"""`kraftpy transactions list | describe | describe-producers | abort | find-hanging`: kafka-transactions.sh's work.

What each command asks (KIP-664), and of whom:

    list                 ListTransactions to every broker (each answers for the transactional ids it
                         coordinates), merged into one table; --state, --producer-id and --duration-filter
                         are passed to the brokers as filters
    describe             FindCoordinator (key type 1) for the transactional id, then DescribeTransactions
                         to that coordinator: its state, producer id and epoch, timeout, start time and
                         the partitions of its open transaction
    describe-producers   DescribeProducers to the partition's leader (or to --broker-id): the producers
                         it tracks, and where each one's open transaction starts
    abort                ends a *hanging* transaction in one partition, as Kafka's Admin.abortTransaction
                         does: the producer is found by the first offset of its open transaction
                         (DescribeProducers), or named with its id and epochs, and the partition's leader
                         is sent an ABORT marker for it (WriteTxnMarkers)
    find-hanging         producers whose open transaction in a partition (DescribeProducers) is older than
                         --max-transaction-timeout and that no coordinator still counts the partition in
                         (ListTransactions filtered by producer id, then DescribeTransactions): transactions
                         no coordinator will ever end, which hold the partition's last stable offset back

A hanging transaction is one whose coordinator lost track of it (a bug, or a partition the coordinator
never learned of): read_committed consumers stop at its first offset until it is aborted. Aborting a
transaction its coordinator still tracks is never needed (the coordinator aborts it once
transaction.timeout.ms has passed) and is refused by nothing: find-hanging says which ones are safe.

Tables use the column names of Kafka's tool, so scripts written for it read kraftpy's output; the exit
codes and flags are those of every kraftpy admin command (`kraftpy.cli.admin_common`).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import attrs
import typer

from kraftpy.admin.client import KEY_TYPE_TRANSACTION, AdminClient, AdminError, KafkaError, check
from kraftpy.cli.admin_common import (
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
from kraftpy.protocol.errors import ErrorCode

app = typer.Typer(help="List, describe and abort transactions; find hanging ones.", no_args_is_help=True)

#: The states a transactional id may be in, as ListTransactions and DescribeTransactions name them.
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                      "Dead", "PrepareEpochFence")
#: Kafka's default for find-hanging's --max-transaction-timeout (minutes): transaction.max.timeout.ms.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
#: Partitions per DescribeProducers request when searching (Kafka's tool sends 500 at a time).
DESCRIBE_PRODUCERS_BATCH = 500

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- what the brokers answered ---------------------------------------------------------------------


@attrs.frozen
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@attrs.frozen
class TransactionDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    #: -1 when no transaction is open.
    start_time_ms: int
    partitions: tuple[TopicPartition, ...]


@attrs.frozen
class ProducerState:
    producer_id: int
    producer_epoch: int
    #: -1 when the producer has had no marker written yet.
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    #: -1 when the producer has no open transaction in the partition.
    current_txn_start_offset: int


@attrs.frozen
class OpenTransaction:
    """A producer's open transaction in one partition (a find-hanging candidate)."""

    topic: str
    partition: int
    producer: ProducerState


# -- formatting (pure) -----------------------------------------------------------------------------


def _none(value: int) -> str:
    """Kafka's tool prints ``None`` where the answer has no value (-1)."""
    return "None" if value < 0 else str(value)


def format_partitions(partitions: tuple[TopicPartition, ...] | list[TopicPartition]) -> str:
    return ",".join(f"{t}-{p}" for t, p in partitions)


def list_rows(listings: list[TransactionListing]) -> list[tuple[Any, ...]]:
    return [(x.transactional_id, x.coordinator, x.producer_id, x.state) for x in listings]


def describe_row(d: TransactionDescription, now: int) -> tuple[Any, ...]:
    duration = _none(now - d.start_time_ms) if d.start_time_ms >= 0 else "None"
    return (d.coordinator, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
            _none(d.start_time_ms), duration, format_partitions(d.partitions))


def producer_rows(producers: list[ProducerState]) -> list[tuple[Any, ...]]:
    return [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
             _none(p.current_txn_start_offset)) for p in producers]


def hanging_rows(hanging: list[OpenTransaction], now: int) -> list[tuple[Any, ...]]:
    return [(h.topic, h.partition, h.producer.producer_id, h.producer.producer_epoch, h.producer.coordinator_epoch,
             h.producer.current_txn_start_offset, h.producer.last_timestamp,
             max(0, now - h.producer.last_timestamp) // 60_000) for h in hanging]


def description_json(d: TransactionDescription, now: int) -> dict[str, Any]:
    return {"coordinator": d.coordinator, "transactional_id": d.transactional_id, "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch, "state": d.state, "transaction_timeout_ms": d.timeout_ms,
            "transaction_start_time_ms": d.start_time_ms if d.start_time_ms >= 0 else None,
            "transaction_duration_ms": now - d.start_time_ms if d.start_time_ms >= 0 else None,
            "partitions": [{"topic": t, "partition": p} for t, p in d.partitions]}


def producer_json(p: ProducerState) -> dict[str, Any]:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "coordinator_epoch": p.coordinator_epoch if p.coordinator_epoch >= 0 else None,
            "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
            "current_transaction_start_offset": p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None}


def filter_hanging(candidates: list[OpenTransaction], transactional_ids: dict[int, str],
                   descriptions: dict[str, TransactionDescription | None]) -> list[OpenTransaction]:
    """Kafka's rule: an open transaction is hanging unless the coordinator of its producer's
    transactional id still lists the partition in that id's transaction (then it will write the
    marker: the transaction is Ongoing, or Prepare* with the marker not yet written there)."""
    hanging = []
    for open_txn in candidates:
        transactional_id = transactional_ids.get(open_txn.producer.producer_id)
        description = descriptions.get(transactional_id) if transactional_id is not None else None
        if description is None or (open_txn.topic, open_txn.partition) not in description.partitions:
            hanging.append(open_txn)
    return hanging


# -- requests --------------------------------------------------------------------------------------


def final(code: int, message: str | None = None, *, subject: str) -> AdminError:
    """An error worth no retry though its code is retriable (an unknown topic or partition, a
    broker named on the command line that does not lead the partition)."""
    return AdminError(str(KafkaError(code, message, subject=subject)))


def _check_states(states: list[str]) -> list[str]:
    by_lower = {s.lower(): s for s in TRANSACTION_STATES}
    out = []
    for state in states:
        if state.lower() not in by_lower:
            die(f"--state={state}: not a transaction state (one of {', '.join(TRANSACTION_STATES)})", EXIT_USAGE)
        out.append(by_lower[state.lower()])
    return out


async def list_transactions(admin: AdminClient, *, states: list[str] | None = None,
                            producer_ids: list[int] | None = None, duration_ms: int = -1
                            ) -> tuple[list[TransactionListing], list[str]]:
    """Every broker's transactional ids (ListTransactions), sorted by id; and the state filters some
    broker did not know."""
    await admin.refresh_metadata()
    listings: list[TransactionListing] = []
    unknown: set[str] = set()
    for node_id in sorted(admin.brokers):
        async def ask(node_id: int = node_id) -> Any:
            response = await admin.list_transactions(node_id, states=states, producer_ids=producer_ids,
                                                     duration_ms=duration_ms)
            if response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                # Its coordinator is shutting down: its ids cannot be listed (Kafka's admin client fails too).
                raise final(response.error_code, "the broker's transaction coordinator is shutting down",
                            subject=f"broker {node_id}")
            check(response.error_code, subject=f"broker {node_id}")
            return response

        response = await retrying(admin, "ListTransactions", ask)
        unknown.update(response.unknown_state_filters)
        listings.extend(TransactionListing(t.transactional_id, node_id, t.producer_id, t.transaction_state)
                        for t in response.transaction_states)
    listings.sort(key=lambda x: (x.transactional_id, x.coordinator))
    return listings, sorted(unknown)


_TXN_MESSAGES = {
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "no coordinator knows this transactional id",
}


async def describe_transactions(admin: AdminClient, transactional_ids: list[str], *, missing_ok: bool = False
                                ) -> dict[str, TransactionDescription | None]:
    """Each id's description from its coordinator; None for an id its coordinator does not know
    (TRANSACTIONAL_ID_NOT_FOUND) when ``missing_ok``, else that raises."""
    out: dict[str, TransactionDescription | None] = {}
    for transactional_id in transactional_ids:
        async def ask(transactional_id: str = transactional_id) -> TransactionDescription | None:
            node_id = await admin.find_coordinator(transactional_id, key_type=KEY_TYPE_TRANSACTION)
            response = await admin.describe_transactions([transactional_id], node_id=node_id)
            entry = response.transaction_states[0]
            if entry.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND and missing_ok:
                return None
            check(entry.error_code, _TXN_MESSAGES.get(entry.error_code), subject=f"transactional id {transactional_id}")
            return TransactionDescription(
                coordinator=node_id, transactional_id=entry.transactional_id, producer_id=entry.producer_id,
                producer_epoch=entry.producer_epoch, state=entry.transaction_state,
                timeout_ms=entry.transaction_timeout_ms, start_time_ms=entry.transaction_start_time_ms,
                partitions=tuple(sorted((t.topic, p) for t in entry.topics for p in t.partitions)))

        out[transactional_id] = await retrying(admin, "DescribeTransactions", ask)
    return out


async def _leaders(admin: AdminClient, topics: list[str]) -> dict[str, Any]:
    """``{topic: Metadata's topic entry}`` (an unknown topic raises)."""
    response = await admin.metadata(sorted(set(topics)))
    out = {}
    for t in response.topics:
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise final(t.error_code, "the topic does not exist", subject=f"topic {t.name}")
        check(t.error_code, subject=f"topic {t.name}")
        out[t.name] = t
    return out


def _partition_entry(topics: dict[str, Any], topic: str, partition: int) -> Any:
    entry = next((p for p in topics[topic].partitions if p.partition_index == partition), None)
    if entry is None:
        raise final(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"the topic has partitions 0-"
                    f"{len(topics[topic].partitions) - 1}", subject=f"{topic}-{partition}")
    return entry


async def describe_producers(admin: AdminClient, partitions: list[TopicPartition], *,
                             broker_id: int | None = None) -> dict[TopicPartition, list[ProducerState]]:
    """Each partition's producers as its leader (or ``broker_id``) tracks them, asked in batches of
    partitions per broker; a partition whose leader moved is asked again of the new one."""
    out: dict[TopicPartition, list[ProducerState]] = {}
    pending = sorted(set(partitions))

    async def ask() -> dict[TopicPartition, list[ProducerState]]:
        nonlocal pending
        topics = await _leaders(admin, [t for t, _ in pending])
        by_node: dict[int, list[TopicPartition]] = {}
        for topic, partition in pending:
            entry = _partition_entry(topics, topic, partition)
            node = broker_id if broker_id is not None else entry.leader_id
            if node < 0:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, subject=f"{topic}-{partition}")
            by_node.setdefault(node, []).append((topic, partition))
        retry: list[TopicPartition] = []
        last: KafkaError | None = None
        for node, tps in sorted(by_node.items()):
            for start in range(0, len(tps), DESCRIBE_PRODUCERS_BATCH):
                chunk = tps[start:start + DESCRIBE_PRODUCERS_BATCH]
                request: dict[str, list[int]] = {}
                for topic, partition in chunk:
                    request.setdefault(topic, []).append(partition)
                response = await admin.describe_producers(request, node_id=node)
                for t in response.topics:
                    for p in t.partitions:
                        code = ErrorCode.for_code(p.error_code)
                        if code.retriable and broker_id is None:
                            retry.append((t.name, p.partition_index))
                            last = KafkaError(code, p.error_message, subject=f"{t.name}-{p.partition_index}")
                            continue
                        if code != ErrorCode.NONE:
                            message = p.error_message
                            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and broker_id is not None:
                                message = f"broker {broker_id} does not lead it (leaders answer for their partitions)"
                            raise final(code, message, subject=f"{t.name}-{p.partition_index}")
                        out[(t.name, p.partition_index)] = [
                            ProducerState(s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence,
                                          s.last_timestamp, s.current_txn_start_offset) for s in p.active_producers]
        pending = retry
        if last is not None:
            raise last
        return out

    return await retrying(admin, "DescribeProducers", ask)


_ABORT_MESSAGES = {
    ErrorCode.INVALID_PRODUCER_EPOCH: "the partition has seen a newer epoch of this producer",
    ErrorCode.PRODUCER_FENCED: "the partition has seen a newer epoch of this producer",
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: "the partition has seen a marker of a newer coordinator epoch "
                                              "for this producer (--coordinator-epoch is too old)",
}


@attrs.frozen
class AbortSpec:
    """Kafka's AbortTransactionSpec: which producer's transaction to abort in which partition."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


async def abort_spec_for_offset(admin: AdminClient, topic: str, partition: int, start_offset: int) -> AbortSpec:
    """The producer whose open transaction in the partition starts at ``start_offset`` (DescribeProducers)."""
    producers = (await describe_producers(admin, [(topic, partition)]))[(topic, partition)]
    found = next((p for p in producers if p.current_txn_start_offset == start_offset), None)
    if found is None:
        raise AdminError(f"{topic}-{partition}: no open transaction starts at offset {start_offset}"
                         f" (describe-producers lists the open ones)")
    # A producer that never had a marker written reports coordinator epoch -1; 0 is at most any
    # coordinator's epoch, so the marker is accepted (Kafka's tool does the same).
    return AbortSpec(topic, partition, found.producer_id, found.producer_epoch, max(0, found.coordinator_epoch))


async def abort_transaction(admin: AdminClient, spec: AbortSpec) -> None:
    """An ABORT marker for ``spec``'s producer, appended by the partition's leader (WriteTxnMarkers)."""
    subject = f"{spec.topic}-{spec.partition}"

    async def ask() -> None:
        topics = await _leaders(admin, [spec.topic])
        entry = _partition_entry(topics, spec.topic, spec.partition)
        if entry.leader_id < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, subject=subject)
        response = await admin.write_txn_markers(spec.producer_id, spec.producer_epoch, spec.coordinator_epoch,
                                                 committed=False, partitions={spec.topic: [spec.partition]},
                                                 node_id=entry.leader_id)
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    check(p.error_code, _ABORT_MESSAGES.get(p.error_code), subject=subject)

    await retrying(admin, "WriteTxnMarkers", ask)


async def find_hanging(admin: AdminClient, *, broker_id: int | None, topic: str | None, partition: int | None,
                       max_timeout_ms: int, now: int | None = None) -> list[OpenTransaction]:
    """Open transactions older than ``max_timeout_ms`` that no coordinator will end (see
    `filter_hanging`), in the partitions of ``topic`` (or every topic) that ``broker_id`` replicates."""
    if topic is not None and partition is not None:
        partitions = [(topic, partition)]
        await _leaders(admin, [topic])  # an unknown topic is an error, as for the other commands
    else:
        response = await admin.metadata([topic] if topic is not None else None)
        partitions = []
        for t in response.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise final(t.error_code, "the topic does not exist", subject=f"topic {t.name}")
            for p in t.partitions:
                if broker_id is None or broker_id in p.replica_nodes:
                    partitions.append((t.name, p.partition_index))
    if broker_id is not None and broker_id not in admin.brokers:
        raise AdminError(f"broker {broker_id} is not in the cluster's metadata")
    producers = await describe_producers(admin, partitions) if partitions else {}
    now = now_ms() if now is None else now
    candidates = [OpenTransaction(t, p, state) for (t, p), states in sorted(producers.items()) for state in states
                  if state.current_txn_start_offset >= 0 and now - state.last_timestamp > max_timeout_ms]
    if not candidates:
        return []
    listings, _ = await list_transactions(admin, producer_ids=sorted({c.producer.producer_id for c in candidates}))
    transactional_ids = {x.producer_id: x.transactional_id for x in listings}
    descriptions = await describe_transactions(admin, sorted(set(transactional_ids.values())), missing_ok=True)
    return filter_hanging(candidates, transactional_ids, descriptions)


# -- commands --------------------------------------------------------------------------------------


@app.command("list")
def list_command(
    state: Annotated[list[str] | None, typer.Option(
        "--state", help=f"Only transactions in this state ({', '.join(TRANSACTION_STATES)}); may be repeated.",
        show_default=False)] = None,
    producer_id: Annotated[list[int] | None, typer.Option(
        "--producer-id", help="Only transactions of this producer id; may be repeated.", show_default=False)] = None,
    duration_filter: Annotated[int | None, typer.Option(
        "--duration-filter", help="Only transactions running for longer than this many milliseconds.",
        show_default=False)] = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the transactional ids every coordinator knows, with their producer id and state."""
    states = _check_states(list(state or ()))
    if duration_filter is not None and duration_filter < 0:
        die(f"--duration-filter={duration_filter}: must be at least 0", EXIT_USAGE)
    listings, unknown = run_admin(bootstrap_server, command_config, lambda admin: list_transactions(
        admin, states=states, producer_ids=list(producer_id or ()),
        duration_ms=-1 if duration_filter is None else duration_filter))
    if as_json:
        emit_json({"transactions": [{"transactional_id": x.transactional_id, "coordinator": x.coordinator,
                                     "producer_id": x.producer_id, "state": x.state} for x in listings]})
    else:
        emit_table(LIST_HEADERS, list_rows(listings))
    for name in unknown:
        typer.echo(f"kraftpy: a broker does not know the state {name}", err=True)


@app.command("describe")
def describe_command(
    transactional_id: Annotated[str, typer.Option("--transactional-id", help="The transactional id to describe.",
                                                  show_default=False)],
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Describe a transactional id as its coordinator holds it: producer, state, open transaction."""
    result = run_admin(bootstrap_server, command_config,
                       lambda admin: describe_transactions(admin, [transactional_id]))
    description = result[transactional_id]
    assert description is not None
    now = now_ms()
    if as_json:
        emit_json(description_json(description, now))
    else:
        emit_table(DESCRIBE_HEADERS, [describe_row(description, now)])


def _check_partition(partition: int) -> None:
    if partition < 0:
        die(f"--partition={partition}: must be at least 0", EXIT_USAGE)


@app.command("describe-producers")
def describe_producers_command(
    topic: Annotated[str, typer.Option("--topic", help="The topic.", show_default=False)],
    partition: Annotated[int, typer.Option("--partition", help="The partition.", show_default=False)],
    broker_id: Annotated[int | None, typer.Option(
        "--broker-id", help="Ask this broker rather than the partition's leader (it answers if it leads it).",
        show_default=False)] = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Describe the producers a partition's leader tracks, and where their open transactions start."""
    _check_partition(partition)
    result = run_admin(bootstrap_server, command_config,
                       lambda admin: describe_producers(admin, [(topic, partition)], broker_id=broker_id))
    producers = result[(topic, partition)]
    if as_json:
        emit_json({"topic": topic, "partition": partition, "producers": [producer_json(p) for p in producers]})
    else:
        emit_table(PRODUCERS_HEADERS, producer_rows(producers))


@app.command("abort")
def abort_command(
    topic: Annotated[str, typer.Option("--topic", help="The topic.", show_default=False)],
    partition: Annotated[int, typer.Option("--partition", help="The partition.", show_default=False)],
    start_offset: Annotated[int | None, typer.Option(
        "--start-offset", help="The first offset of the transaction to abort (describe-producers shows it).",
        show_default=False)] = None,
    producer_id: Annotated[int | None, typer.Option(
        "--producer-id", help="The producer of the transaction (instead of --start-offset).",
        show_default=False)] = None,
    producer_epoch: Annotated[int | None, typer.Option(
        "--producer-epoch", help="Its producer epoch (with --producer-id).", show_default=False)] = None,
    coordinator_epoch: Annotated[int | None, typer.Option(
        "--coordinator-epoch", help="Its latest coordinator epoch (with --producer-id; -1 reads as 0).",
        show_default=False)] = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Abort a hanging transaction in one partition (the leader writes an ABORT marker for it)."""
    _check_partition(partition)
    named = producer_id is not None or producer_epoch is not None or coordinator_epoch is not None
    if start_offset is None and not named:
        die("the transaction to abort is named by --start-offset, or by --producer-id, --producer-epoch and "
            "--coordinator-epoch", EXIT_USAGE)
    if start_offset is not None and named:
        die("--start-offset cannot be combined with --producer-id, --producer-epoch or --coordinator-epoch",
            EXIT_USAGE)
    if start_offset is None:
        for flag, value in (("--producer-id", producer_id), ("--producer-epoch", producer_epoch),
                            ("--coordinator-epoch", coordinator_epoch)):
            if value is None:
                die(f"{flag} is required with --producer-id, --producer-epoch and --coordinator-epoch", EXIT_USAGE)
        assert producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
        if producer_id < 0 or not 0 <= producer_epoch <= 32767:
            die(f"--producer-id={producer_id} --producer-epoch={producer_epoch}: a producer id of at least 0 and "
                f"an epoch of 0-32767", EXIT_USAGE)
    elif start_offset < 0:
        die(f"--start-offset={start_offset}: must be at least 0", EXIT_USAGE)

    async def body(admin: AdminClient) -> AbortSpec:
        if start_offset is not None:
            spec = await abort_spec_for_offset(admin, topic, partition, start_offset)
        else:
            assert producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
            spec = AbortSpec(topic, partition, producer_id, producer_epoch, max(0, coordinator_epoch))
        await abort_transaction(admin, spec)
        return spec

    spec = run_admin(bootstrap_server, command_config, body)
    if as_json:
        emit_json({"topic": spec.topic, "partition": spec.partition, "producer_id": spec.producer_id,
                   "producer_epoch": spec.producer_epoch, "coordinator_epoch": spec.coordinator_epoch,
                   "start_offset": start_offset, "aborted": True})
    else:
        typer.echo(f"Aborted the transaction of producer {spec.producer_id} (epoch {spec.producer_epoch}, "
                   f"coordinator epoch {spec.coordinator_epoch}) in {spec.topic}-{spec.partition}.")


@app.command("find-hanging")
def find_hanging_command(
    broker_id: Annotated[int | None, typer.Option(
        "--broker-id", help="Search the partitions this broker holds a replica of.", show_default=False)] = None,
    topic: Annotated[str | None, typer.Option("--topic", help="Search only this topic.", show_default=False)] = None,
    partition: Annotated[int | None, typer.Option(
        "--partition", help="Search only this partition of --topic.", show_default=False)] = None,
    max_transaction_timeout: Annotated[int, typer.Option(
        "--max-transaction-timeout", help="Minutes: only transactions idle for longer than this are reported "
        "(the cluster's transaction.max.timeout.ms).")] = DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Find open transactions no coordinator will end (they hold read_committed consumers back)."""
    if broker_id is None and topic is None:
        die("find-hanging needs --broker-id or --topic to limit the search", EXIT_USAGE)
    if partition is not None and topic is None:
        die("--partition needs --topic", EXIT_USAGE)
    if partition is not None:
        _check_partition(partition)
    if max_transaction_timeout < 0:
        die(f"--max-transaction-timeout={max_transaction_timeout}: must be at least 0 minutes", EXIT_USAGE)
    hanging = run_admin(bootstrap_server, command_config, lambda admin: find_hanging(
        admin, broker_id=broker_id, topic=topic, partition=partition, max_timeout_ms=max_transaction_timeout * 60_000))
    now = now_ms()
    if as_json:
        emit_json({"hanging": [{"topic": h.topic, "partition": h.partition, **producer_json(h.producer),
                                "duration_ms": max(0, now - h.producer.last_timestamp)} for h in hanging]})
    else:
        emit_table(HANGING_HEADERS, hanging_rows(hanging, now))
