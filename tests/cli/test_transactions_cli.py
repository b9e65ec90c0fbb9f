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
import sys
import time

import trio
from typer.testing import CliRunner

from kraftpy.broker.partition import Partition
from kraftpy.cli.main import app
from kraftpy.cli.transactions import (
    DESCRIBE_HEADERS,
    HANGING_HEADERS,
    OpenTransaction,
    ProducerState,
    TransactionDescription,
    describe_row,
    filter_hanging,
    hanging_rows,
    producer_rows,
)
from kraftpy.protocol.batch_header import read_header
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import SimpleRecord, build_batch
from kraftpy.storage.txn_index import AbortedTxn
from tests.helpers.cluster import open_cluster

HANGING = 4242  # a producer id no transaction coordinator knows


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def table(stdout: str) -> list[dict[str, str]]:
    lines = stdout.splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]


async def kraftpy(*args: object) -> trio.CompletedProcess:
    return await trio.run_process([sys.executable, "-m", "kraftpy", *(str(a) for a in args)], capture_stdout=True,
                                  capture_stderr=True, check=False, stdin=b"")


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
