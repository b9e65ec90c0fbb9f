"""`kraftpy dump-log` on transactional logs: markers, the transactional bit, ``.txnindex`` files, and the
records of ``__transaction_state`` and ``__consumer_offsets`` decoded.

The partition logs are written by a real in-process broker (transactional batches appended as leader,
COMMIT/ABORT markers through WriteTxnMarkers on the wire, the ``.txnindex`` by the partition); the
internal topics' records are the coordinators' own encodings appended to a log of that topic's name.
"""

from __future__ import annotations

import time
from pathlib import Path

from kraftpy.broker.client import KafkaConnection
from kraftpy.broker.partition import Partition
from kraftpy.cli.main import app
from kraftpy.coordinator.records import offset_commit_key, offset_commit_value
from kraftpy.coordinator.txn_records import (
    TransactionLogEntry,
    TransactionStatus,
    transaction_log_key,
    transaction_log_value,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.batch_header import read_header
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import WriteTxnMarkersRequest
from kraftpy.protocol.records import SimpleRecord, build_batch
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from tests.helpers.cli_runner import CliRunner
from tests.helpers.cluster import open_cluster

runner = CliRunner()
A, B, C = 1000, 2000, 3000  # transactional producers


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def txn_batch(producer_id: int, sequence: int, value: bytes) -> bytes:
    return build_batch([SimpleRecord(b"k", value, timestamp=now_ms())], producer_id=producer_id,
                       producer_epoch=0, base_sequence=sequence, is_transactional=True)


async def append(part: Partition, data: bytes) -> int:
    appended = await part.append_as_leader(data, read_header(data), acks=-1, now=part.clock())
    assert appended.error == ErrorCode.NONE, appended
    return appended.base_offset


async def end_txn(conn: KafkaConnection, producer_id: int, committed: bool, coordinator_epoch: int) -> None:
    request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=0, transaction_result=committed, coordinator_epoch=coordinator_epoch,
        topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="tx", partition_indexes=[0])])])
    response = await conn.request(ApiKey.WRITE_TXN_MARKERS, 1, request)
    assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.NONE


def dump(*args: object) -> tuple[int, list[str]]:
    result = runner.invoke(app, ["dump-log", *(str(a) for a in args)])
    return result.exit_code, result.output.splitlines()


async def test_markers_transactional_batches_and_the_txnindex_are_shown(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("tx")
        part = cluster.partition(1, "tx")
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            assert await append(part, txn_batch(A, 0, b"a1")) == 0
            assert await append(part, txn_batch(B, 0, b"b1")) == 1
            await end_txn(conn, A, committed=True, coordinator_epoch=3)   # marker at 2
            await end_txn(conn, B, committed=False, coordinator_epoch=4)  # marker at 3
            assert await append(part, txn_batch(C, 0, b"c1")) == 4  # still open when the broker stops
        directory = Path(part.log.directory)

    code, lines = dump(directory)
    assert code == 0, lines
    batches = [line for line in lines if line.startswith("baseOffset")]
    assert len(batches) == 5
    for line, producer in zip(batches[:2], (A, B), strict=True):
        assert f"producerId: {producer} producerEpoch: 0" in line
        assert "isTransactional: true isControl: false" in line
        assert "endTxnMarker" not in line
    assert "baseOffset: 2 lastOffset: 2" in batches[2]
    assert f"producerId: {A} producerEpoch: 0 baseSequence: -1 isTransactional: true isControl: true" in batches[2]
    assert batches[2].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3")
    assert f"producerId: {B}" in batches[3] and batches[3].endswith("endTxnMarker: ABORT coordinatorEpoch: 4")
    assert "isTransactional: true isControl: false" in batches[4] and "endTxnMarker" not in batches[4]
    # The directory's .txnindex follows its segment: B's transaction, 1 to its marker at 3, aborted.
    index = lines.index(f"Dumping {directory / '00000000000000000000.txnindex'}")
    assert lines[index + 1] == f"version: 0 producerId: {B} firstOffset: 1 lastOffset: 3 lastStableOffset: 4"
    # Then the producer state snapshot the clean shutdown wrote: C's transaction is still open from 4.
    assert lines[index + 2] == f"Dumping {directory / '00000000000000000005.snapshot'}"
    producers = [line.split(" lastSequence")[0] for line in lines[index + 3:]]
    assert producers == [f"producerId: {A} producerEpoch: 0 coordinatorEpoch: 3 currentTxnFirstOffset: -1",
                         f"producerId: {B} producerEpoch: 0 coordinatorEpoch: 4 currentTxnFirstOffset: -1",
                         f"producerId: {C} producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: 4"]

    code, lines = dump("--deep", directory / "00000000000000000000.log")
    assert code == 0, lines
    records = [line for line in lines if line.startswith("| offset")]
    assert records[0].startswith("| offset: 0 ") and "value: b'a1'" in records[0]
    assert records[2].startswith("| offset: 2 ") and records[2].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3")
    assert records[3].endswith("endTxnMarker: ABORT coordinatorEpoch: 4")
    assert "key: " not in records[2] + records[3]  # a marker's bytes are decoded, not printed raw


def test_a_corrupt_producer_snapshot_exits_1(tmp_path):
    path = tmp_path / "00000000000000000005.snapshot"
    path.write_bytes((1).to_bytes(2, "big") + b"\x00" * 8)
    code, lines = dump(path)
    assert code == 1
    assert lines[-1].startswith("Corrupt snapshot: snapshot CRC mismatch")


def test_a_torn_txnindex_exits_1(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    entry = (0).to_bytes(2, "big") + b"".join(v.to_bytes(8, "big") for v in (A, 0, 5, 6))
    path.write_bytes(entry + entry[:10])
    code, lines = dump(path)
    assert code == 1
    assert f"version: 0 producerId: {A} firstOffset: 0 lastOffset: 5 lastStableOffset: 6" in lines
    assert "Corrupt index: 10 trailing bytes at byte position 34" in lines
    path.write_bytes((7).to_bytes(2, "big") + entry[2:])
    code, lines = dump(path)
    assert code == 1 and "Corrupt index: an aborted transaction of unknown version 7 at byte position 0" in lines


def write_log(directory: Path, records: list[SimpleRecord]) -> Path:
    directory.mkdir()
    log = Log.open(directory, LogConfig())
    log.append_as_leader(build_batch(records), 0)
    log.close()
    return directory / "00000000000000000000.log"


def test_transaction_state_records_are_decoded(tmp_path):
    ongoing = TransactionLogEntry(producer_id=7, producer_epoch=2, transaction_timeout_ms=60_000,
                                  status=TransactionStatus.ONGOING, partitions=[("orders", 1), ("orders", 0), ("b", 3)],
                                  last_update_timestamp_ms=1_700_000_000_500, start_timestamp_ms=1_700_000_000_000)
    empty = TransactionLogEntry(producer_id=8, producer_epoch=0, transaction_timeout_ms=1000,
                                status=TransactionStatus.EMPTY, partitions=[], last_update_timestamp_ms=5,
                                start_timestamp_ms=-1)
    path = write_log(tmp_path / "__transaction_state-3", [
        SimpleRecord(transaction_log_key("app-1"), transaction_log_value(ongoing), timestamp=1),
        SimpleRecord(transaction_log_key("app-\x1b2"), transaction_log_value(empty, version=1), timestamp=2),
        SimpleRecord(transaction_log_key("gone"), None, timestamp=3),
        SimpleRecord(b"\x00", b"junk", timestamp=4),
    ])
    code, lines = dump("--deep", path)  # under a __transaction_state-N directory: decoded without a flag
    assert code == 0, lines
    records = [line for line in lines if line.startswith("| offset")]
    assert records[0] == ("| offset: 0 timestamp: 1 transactionalId: 'app-1' producerId: 7 producerEpoch: 2 "
                          "transactionTimeoutMs: 60000 state: Ongoing partitions: ['b'-3, 'orders'-0, 'orders'-1] "
                          "lastUpdateTimestampMs: 1700000000500 startTimestampMs: 1700000000000")
    assert records[1].startswith(r"| offset: 1 timestamp: 2 transactionalId: 'app-\x1b2' producerId: 8 ")
    assert "state: Empty partitions: []" in records[1]
    assert records[2] == "| offset: 2 timestamp: 3 transactionalId: 'gone' tombstone: the transactional id expired"
    assert records[3].startswith("| offset: 3 timestamp: 4 key: b'\\x00' value: b'junk' (undecodable: ")
    assert "\x1b" not in "\n".join(lines)

    # Elsewhere the flag asks for it; without it the bytes are printed raw.
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / path.name).write_bytes(path.read_bytes())
    code, lines = dump("--deep", copy / path.name)
    assert "transactionalId" not in "\n".join(lines)
    code, lines = dump("--transaction-log-decoder", copy / path.name)
    assert code == 0 and sum("transactionalId: 'app-1'" in line for line in lines) == 1
    code, lines = dump("--transaction-log-decoder", "--offsets-decoder", copy / path.name)
    assert code == 2


def test_consumer_offsets_records_are_decoded(tmp_path):
    path = write_log(tmp_path / "__consumer_offsets-0", [
        SimpleRecord(offset_commit_key("g", "orders", 2), offset_commit_value(42, 5, "meta", 1234), timestamp=1),
        SimpleRecord(offset_commit_key("g", "orders", 3), None, timestamp=2),
    ])
    code, lines = dump("--deep", path)
    assert code == 0, lines
    records = [line for line in lines if line.startswith("| offset")]
    assert records == [
        "| offset: 0 timestamp: 1 offsetCommit group: 'g' topic: 'orders' partition: 2 offset: 42 leaderEpoch: 5 "
        "metadata: 'meta' commitTimestamp: 1234",
        "| offset: 1 timestamp: 2 offsetCommit group: 'g' topic: 'orders' partition: 3 tombstone: the offset was deleted",
    ]
