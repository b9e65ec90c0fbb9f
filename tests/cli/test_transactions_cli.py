"""`kraftpy transactions list | describe | describe-producers | abort | find-hanging`.

The pure parts (tables, Kafka's hanging rule, argument checks) are tested directly. The commands run
as subprocesses against real in-process brokers (`tests.helpers.cluster.open_cluster`): a *hanging*
transaction is made honestly, as one arises when a coordinator has lost track of it: a transactional
batch of a producer id no transaction coordinator holds is appended by the partition's leader, so no
coordinator will ever write its marker and the partition's last stable offset stays at its first
offset until the tool aborts it.
"""

from __future__ import annotations

import json
import time

import pytest
import trio

from kraftpy.broker.partition import Partition
from kraftpy.cli.main import app
from kraftpy.cli.transactions import (
    DESCRIBE_HEADERS,
    HANGING_HEADERS,
    LIST_HEADERS,
    PRODUCERS_HEADERS,
    OpenTransaction,
    ProducerState,
    TransactionDescription,
    describe_row,
    filter_hanging,
    hanging_rows,
    producer_rows,
)
from kraftpy.coordinator.group_coordinator import partition_for
from kraftpy.coordinator.txn_state import TxnConfig
from kraftpy.protocol.batch_header import read_header
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import SimpleRecord, build_batch
from kraftpy.storage.txn_index import AbortedTxn
from tests.helpers import forkserver
from tests.helpers.cli_runner import CliRunner
from tests.helpers.cluster import open_cluster

ck = pytest.importorskip("confluent_kafka")

HANGING = 4242  # a producer id no transaction coordinator knows


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def table(stdout: str) -> list[dict[str, str]]:
    lines = stdout.splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]


async def kraftpy(*args: object) -> trio.CompletedProcess:
    return await forkserver.run_async(args)


async def transactions(cluster, *args: object) -> trio.CompletedProcess:
    return await kraftpy("transactions", *args, "--bootstrap-server", cluster.bootstrap)


async def append(part: Partition, data: bytes) -> int:
    appended = await part.append_as_leader(data, read_header(data), acks=-1, now=part.clock())
    assert appended.error == ErrorCode.NONE, appended
    return appended.base_offset


def txn_batch(producer_id: int, sequence: int, value: bytes, *, epoch: int = 0, timestamp: int | None = None) -> bytes:
    return build_batch([SimpleRecord(b"k", value, timestamp=now_ms() if timestamp is None else timestamp)],
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, is_transactional=True)


def plain_batch(value: bytes) -> bytes:
    return build_batch([SimpleRecord(b"k", value, timestamp=now_ms())])


# -- pure ------------------------------------------------------------------------------------------


def producer(pid: int, start: int, *, last_timestamp: int = 0, coordinator_epoch: int = -1) -> ProducerState:
    return ProducerState(pid, 3, coordinator_epoch, 7, last_timestamp, start)


def test_rows_print_none_where_kafka_does():
    open_txn = TransactionDescription(1, "app", 5, 2, "Ongoing", 60000, 1_000, (("a", 0), ("b", 1)))
    row = describe_row(open_txn, now=4_000)
    assert dict(zip(DESCRIBE_HEADERS, row, strict=True)) == {
        "CoordinatorId": 1, "TransactionalId": "app", "ProducerId": 5, "ProducerEpoch": 2,
        "TransactionState": "Ongoing", "TransactionTimeoutMs": 60000, "CurrentTransactionStartTimeMs": "1000",
        "TransactionDurationMs": "3000", "TopicPartitions": "a-0,b-1"}
    idle = TransactionDescription(1, "app", 5, 2, "CompleteCommit", 60000, -1, ())
    assert describe_row(idle, now=4_000)[6:] == ("None", "None", "")
    assert producer_rows([producer(9, -1), producer(10, 42, coordinator_epoch=4)]) == [
        (9, 3, -1, 7, 0, "None"), (10, 3, 4, 7, 0, "42")]
    hanging = [OpenTransaction("t", 2, producer(9, 42, last_timestamp=60_000, coordinator_epoch=1))]
    assert dict(zip(HANGING_HEADERS, hanging_rows(hanging, now=60_000 + 31 * 60_000 + 59_000)[0], strict=True)) == {
        "Topic": "t", "Partition": 2, "ProducerId": 9, "ProducerEpoch": 3, "CoordinatorEpoch": 1,
        "StartOffset": 42, "LastTimestamp": 60_000, "Duration(min)": 31}


def test_hanging_is_what_no_coordinator_will_end():
    unknown = OpenTransaction("t", 0, producer(1, 10))       # no transactional id lists producer 1
    not_found = OpenTransaction("t", 0, producer(2, 11))     # its id's coordinator does not know the id
    elsewhere = OpenTransaction("t", 0, producer(3, 12))     # its transaction no longer counts t-0
    live = OpenTransaction("t", 0, producer(4, 13))          # Ongoing with t-0: the coordinator will end it
    ids = {2: "two", 3: "three", 4: "four"}
    descriptions = {
        "two": None,
        "three": TransactionDescription(1, "three", 3, 0, "Ongoing", 1000, 5, (("t", 1),)),
        "four": TransactionDescription(1, "four", 4, 0, "Ongoing", 1000, 5, (("t", 0),)),
    }
    assert filter_hanging([unknown, not_found, elsewhere, live], ids, descriptions) == [unknown, not_found, elsewhere]


def test_usage_errors_exit_2():
    runner = CliRunner()
    for args, message in [
        (["abort", "--topic", "t", "--partition", "0"], "named by --start-offset"),
        (["abort", "--topic", "t", "--partition", "0", "--start-offset", "3", "--producer-id", "1"], "cannot be combined"),
        (["abort", "--topic", "t", "--partition", "0", "--producer-id", "1", "--coordinator-epoch", "0"],
         "--producer-epoch is required"),
        (["abort", "--topic", "t", "--partition", "0", "--producer-id", "1", "--producer-epoch", "40000",
          "--coordinator-epoch", "0"], "an epoch of 0-32767"),
        (["abort", "--topic", "t", "--partition", "-1", "--start-offset", "0"], "--partition=-1"),
        (["abort", "--topic", "t", "--partition", "0", "--start-offset", "-4"], "--start-offset=-4"),
        (["find-hanging"], "--broker-id or --topic"),
        (["find-hanging", "--broker-id", "1", "--partition", "0"], "--partition needs --topic"),
        (["find-hanging", "--topic", "t", "--max-transaction-timeout", "-1"], "--max-transaction-timeout=-1"),
        (["list", "--state", "Sleeping"], "--state=Sleeping: not a transaction state"),
        (["list", "--duration-filter", "-5"], "--duration-filter=-5"),
        (["list"], "--bootstrap-server is required"),
    ]:
        result = runner.invoke(app, ["transactions", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)


async def test_unreachable_brokers_exit_3():
    result = await kraftpy("transactions", "list", "--bootstrap-server", "127.0.0.1:1")
    assert result.returncode == 3
    assert result.stderr.decode().startswith("kraftpy: ") and len(result.stderr.decode().splitlines()) == 1


# -- against brokers -------------------------------------------------------------------------------


async def test_abort_by_producer_ends_a_hanging_transaction(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("orders")
        part = cluster.partition(1, "orders")
        assert await append(part, plain_batch(b"before")) == 0
        assert await append(part, txn_batch(HANGING, 0, b"stuck", epoch=2)) == 1
        assert await append(part, plain_batch(b"after")) == 2
        assert part.last_stable_offset == 1  # read_committed consumers stop at the hanging transaction

        # An older epoch than the partition has seen is refused, in one line, exit 1.
        old = await transactions(cluster, "abort", "--topic", "orders", "--partition", 0, "--producer-id", HANGING,
                                 "--producer-epoch", 1, "--coordinator-epoch", -1)
        assert old.returncode == 1, old
        assert old.stderr.decode().splitlines() == [
            "kraftpy: orders-0: INVALID_PRODUCER_EPOCH: the partition has seen a newer epoch of this producer"]
        assert part.last_stable_offset == 1

        result = await transactions(cluster, "abort", "--topic", "orders", "--partition", 0, "--producer-id", HANGING,
                                    "--producer-epoch", 2, "--coordinator-epoch", -1, "--json")
        assert result.returncode == 0, result
        assert json.loads(result.stdout)["producer_id"] == HANGING
        assert json.loads(result.stdout)["coordinator_epoch"] == 0  # -1 (never ended) is sent as 0, as Kafka does
        assert part.last_stable_offset == part.high_watermark == 4
        assert [t for s in part.log.segments for t in s.txn_index.entries] == [AbortedTxn(HANGING, 1, 3, 4)]

        unknown = await transactions(cluster, "abort", "--topic", "nope", "--partition", 0, "--producer-id", 1,
                                     "--producer-epoch", 0, "--coordinator-epoch", 0)
        assert unknown.returncode == 1
        assert unknown.stderr.decode() == "kraftpy: topic nope: UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist\n"


# -- with a transactional producer -----------------------------------------------------------------

TXN_CONFIG = TxnConfig(state_log_num_partitions=4, state_log_replication_factor=1, state_log_min_isr=1,
                       abort_timed_out_transaction_cleanup_interval_ms=500)


def transactional_producer(bootstrap: str, transactional_id: str) -> ck.Producer:
    return ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                        "transaction.timeout.ms": 30000, "log_level": 0})


async def test_the_commands_follow_a_live_transaction_and_repair_a_hanging_one(tmp_path):
    async with open_cluster(tmp_path, brokers=1, transaction=TXN_CONFIG) as cluster:
        await cluster.create_topic("a", partitions=2)
        await cluster.create_topic("b")
        await cluster.create_topic("c")
        nothing = await transactions(cluster, "list")  # before any transactional id: no __transaction_state yet
        assert (nothing.returncode, nothing.stdout.decode()) == (0, "\t".join(LIST_HEADERS) + "\n"), nothing
        producer = transactional_producer(cluster.bootstrap, "app-1")

        def open_transaction() -> None:
            producer.init_transactions(30)
            producer.begin_transaction()
            for topic, partition in (("a", 0), ("a", 1), ("b", 0)):
                producer.produce(topic, value=f"{topic}{partition}".encode(), partition=partition)
            assert producer.flush(30) == 0

        await trio.to_thread.run_sync(open_transaction)

        described = await transactions(cluster, "describe", "--transactional-id", "app-1")
        assert described.returncode == 0, described
        (row,) = table(described.stdout.decode())
        producer_id = int(row.pop("ProducerId"))
        start = int(row.pop("CurrentTransactionStartTimeMs"))
        int(row.pop("TransactionDurationMs"))  # a number of milliseconds (the tool's clock minus the start)
        assert row == {"CoordinatorId": "1", "TransactionalId": "app-1", "ProducerEpoch": "0",
                       "TransactionState": "Ongoing", "TransactionTimeoutMs": "30000", "TopicPartitions": "a-0,a-1,b-0"}
        assert start > 0, "an open transaction has a start time"
        listed = await transactions(cluster, "list")
        assert listed.returncode == 0, listed
        assert table(listed.stdout.decode()) == [{"TransactionalId": "app-1", "Coordinator": "1",
                                                  "ProducerId": str(producer_id), "TransactionState": "Ongoing"}]
        listed = await transactions(cluster, "list", "--producer-id", producer_id, "--state", "ongoing", "--json")
        assert json.loads(listed.stdout)["transactions"] == [
            {"transactional_id": "app-1", "coordinator": 1, "producer_id": producer_id, "state": "Ongoing"}]
        assert table((await transactions(cluster, "list", "--state", "CompleteCommit")).stdout.decode()) == []

        producers = await transactions(cluster, "describe-producers", "--topic", "a", "--partition", 1)
        assert producers.returncode == 0, producers
        assert [(r["ProducerId"], r["ProducerEpoch"], r["CurrentTransactionStartOffset"])
                for r in table(producers.stdout.decode())] == [(str(producer_id), "0", "0")]

        # A transaction no coordinator knows, in c-0: the leader appended it, nobody will end it.
        part = cluster.partition(1, "c")
        assert await append(part, plain_batch(b"before")) == 0
        assert await append(part, txn_batch(HANGING, 0, b"stuck")) == 1
        assert await append(part, plain_batch(b"after")) == 2
        assert part.last_stable_offset == 1

        # Both transactions are open, only c-0's hangs; with the default 15 minutes, neither is old enough.
        hanging = await transactions(cluster, "find-hanging", "--broker-id", 1, "--max-transaction-timeout", 0)
        assert hanging.returncode == 0, hanging
        assert [(r["Topic"], r["Partition"], r["ProducerId"], r["StartOffset"])
                for r in table(hanging.stdout.decode())] == [("c", "0", str(HANGING), "1")]
        assert table((await transactions(cluster, "find-hanging", "--broker-id", 1)).stdout.decode()) == []
        assert table((await transactions(cluster, "find-hanging", "--topic", "a", "--max-transaction-timeout",
                                         0)).stdout.decode()) == []

        missing = await transactions(cluster, "abort", "--topic", "c", "--partition", 0, "--start-offset", 2)
        assert missing.returncode == 1
        assert missing.stderr.decode() == "kraftpy: c-0: no open transaction starts at offset 2 " \
                                          "(describe-producers lists the open ones)\n"
        aborted = await transactions(cluster, "abort", "--topic", "c", "--partition", 0, "--start-offset", 1)
        assert aborted.returncode == 0, aborted
        assert aborted.stdout.decode() == f"Aborted the transaction of producer {HANGING} (epoch 0, coordinator " \
                                          f"epoch 0) in c-0.\n"
        assert part.last_stable_offset == part.high_watermark == 4
        assert table((await transactions(cluster, "find-hanging", "--broker-id", 1, "--max-transaction-timeout",
                                         0)).stdout.decode()) == []

        await trio.to_thread.run_sync(lambda: producer.commit_transaction(30))
        done = await transactions(cluster, "describe", "--transactional-id", "app-1", "--json")
        document = json.loads(done.stdout)
        assert (document["state"], document["partitions"]) == ("CompleteCommit", [])
        unknown = await transactions(cluster, "describe", "--transactional-id", "nobody")
        assert unknown.returncode == 1
        assert unknown.stderr.decode() == ("kraftpy: transactional id nobody: TRANSACTIONAL_ID_NOT_FOUND: "
                                           "no coordinator knows this transactional id\n")

        # The coordinator's own log, decoded: the id's last state is CompleteCommit, its transaction's
        # partitions in the Ongoing and PrepareCommit records before it; a-0 holds the COMMIT marker.
        coordinator_dirs = [d for d in (tmp_path / "broker-1").iterdir() if d.name.startswith("__transaction_state-")]
        out = (await kraftpy("dump-log", "--deep", *coordinator_dirs)).stdout.decode()
        states = [line for line in out.splitlines() if "transactionalId: 'app-1'" in line]
        assert f"producerId: {producer_id} producerEpoch: 0 transactionTimeoutMs: 30000 state: Ongoing " \
               "partitions: ['a'-0, 'a'-1, 'b'-0]" in "\n".join(states)
        assert "state: PrepareCommit partitions: ['a'-0, 'a'-1, 'b'-0]" in "\n".join(states)
        assert "state: CompleteCommit partitions: []" in states[-1]
        a0 = (await kraftpy("dump-log", tmp_path / "broker-1" / "a-0")).stdout.decode()
        assert f"producerId: {producer_id} producerEpoch: 0 baseSequence: -1 isTransactional: true isControl: true" \
               in a0
        assert "endTxnMarker: COMMIT coordinatorEpoch: " in a0


async def test_list_merges_every_coordinators_ids_and_producers_are_asked_of_leaders(tmp_path):
    # One transactional id in each __transaction_state partition; the partitions' leaders spread over
    # three brokers, so the ids have at least two coordinators and list must ask every broker.
    ids: dict[int, str] = {}
    n = 0
    while len(ids) < TXN_CONFIG.state_log_num_partitions:
        ids.setdefault(partition_for(f"app-{n}", TXN_CONFIG.state_log_num_partitions), f"app-{n}")
        n += 1
    async with open_cluster(tmp_path, brokers=3, transaction=TXN_CONFIG) as cluster:
        def init_all() -> None:
            for transactional_id in ids.values():
                transactional_producer(cluster.bootstrap, transactional_id).init_transactions(30)

        await trio.to_thread.run_sync(init_all)
        leaders = {cluster.leader("__transaction_state", p) for p in ids}
        assert len(leaders) >= 2

        listed = await transactions(cluster, "list", "--json")
        assert listed.returncode == 0, listed
        rows = json.loads(listed.stdout)["transactions"]
        assert [r["transactional_id"] for r in rows] == sorted(ids.values())
        assert {r["state"] for r in rows} == {"Empty"}
        for partition, transactional_id in ids.items():
            (row,) = [r for r in rows if r["transactional_id"] == transactional_id]
            assert row["coordinator"] == cluster.leader("__transaction_state", partition)
        one = rows[0]
        described = await transactions(cluster, "describe", "--transactional-id", one["transactional_id"], "--json")
        document = json.loads(described.stdout)
        assert (document["coordinator"], document["producer_id"], document["state"], document["partitions"]) == (
            one["coordinator"], one["producer_id"], "Empty", [])

        # describe-producers asks the leader, or the broker named: a follower says it does not lead (at once).
        await cluster.create_topic("r", replication_factor=3)
        leader = cluster.leader("r")
        follower = next(b for b in (1, 2, 3) if b != leader)
        asked = await transactions(cluster, "describe-producers", "--topic", "r", "--partition", 0, "--broker-id", leader)
        assert (asked.returncode, asked.stdout.decode()) == (0, "\t".join(PRODUCERS_HEADERS) + "\n"), asked
        refused = await transactions(cluster, "describe-producers", "--topic", "r", "--partition", 0,
                                     "--broker-id", follower)
        assert refused.returncode == 1
        assert refused.stderr.decode() == (f"kraftpy: r-0: NOT_LEADER_OR_FOLLOWER: broker {follower} does not lead it "
                                           f"(leaders answer for their partitions)\n")
        wrong = await transactions(cluster, "describe-producers", "--topic", "r", "--partition", 5)
        assert wrong.returncode == 1
        assert wrong.stderr.decode() == "kraftpy: r-5: UNKNOWN_TOPIC_OR_PARTITION: the topic has partitions 0-0\n"
