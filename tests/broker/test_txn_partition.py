"""The partition side of transactions, against real in-process brokers: transactional batches appended as
leader, COMMIT/ABORT markers written through WriteTxnMarkers, the last stable offset, the ``.txnindex``,
Fetch and ListOffsets under read_committed, and a follower replicating all of it."""

from __future__ import annotations

import time

import pytest
import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.broker.partition import Partition
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.batch_header import iter_batches, read_header
from kraftpy.protocol.control_records import build_end_txn_marker, read_end_txn_marker
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FetchRequest, ListOffsetsRequest, WriteTxnMarkersRequest
from kraftpy.protocol.records import SimpleRecord, build_batch, decode_batch
from kraftpy.storage.txn_index import AbortedTxn
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import fetch_request

A, B = 1000, 2000  # two transactional producers
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def now_ms() -> int:
    return time.time_ns() // 1_000_000  # the brokers' clock: no segment roll for the batches' age


def txn_batch(producer_id: int, sequence: int, value: bytes, *, epoch: int = 0) -> bytes:
    return build_batch([SimpleRecord(b"k", value, timestamp=now_ms())], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence, is_transactional=True)


def plain_batch(value: bytes) -> bytes:
    return build_batch([SimpleRecord(b"k", value, timestamp=now_ms())])


async def append(part: Partition, data: bytes) -> int:
    """Append as leader as an internal caller does; the batch's offset."""
    appended = await part.append_as_leader(data, read_header(data), acks=-1, now=part.clock())
    assert appended.error == ErrorCode.NONE, appended
    return appended.base_offset


async def write_markers(conn: KafkaConnection, *markers: tuple, version: int = 1) -> list[tuple[str, int, int]]:
    """markers: (producer id, epoch, committed, coordinator epoch, {topic: [partitions]}); the
    (topic, partition, error) of every partition answered, in order."""
    request = WriteTxnMarkersRequest(markers=[
        WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=committed, coordinator_epoch=coordinator,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()])
        for pid, epoch, committed, coordinator, topics in markers])
    response = await conn.request(ApiKey.WRITE_TXN_MARKERS, version, request)
    return [(t.name, p.partition_index, p.error_code)
            for m in response.markers for t in m.topics for p in t.partitions]


async def fetch(conn: KafkaConnection, topic: str, offset: int, isolation_level: int):
    request: FetchRequest = fetch_request(topic, 0, offset)
    request.isolation_level = isolation_level
    response = await conn.request(ApiKey.FETCH, 12, request)
    return response.responses[0].partitions[0]


async def latest(conn: KafkaConnection, topic: str, isolation_level: int) -> int:
    request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    response = await conn.request(ApiKey.LIST_OFFSETS, 7, request)
    return response.topics[0].partitions[0].offset


def batches(records) -> list[tuple]:
    """(base offset, last offset, producer id, is control, values) of each whole batch."""
    data = bytes(records or b"")
    out = []
    for position, header in iter_batches(data):
        values = [r.value for r in decode_batch(data[position:position + header.size]).records]
        out.append((header.base_offset, header.last_offset, header.producer_id, header.is_control, values))
    return out


def consumed(data) -> list[bytes]:
    """What a read_committed consumer makes of a fetch answer (Kafka's consumer: a producer's
    transactional batches are skipped from its aborted transaction's first offset until its ABORT
    marker; control batches are never shown)."""
    aborted = sorted((t.first_offset, t.producer_id) for t in data.aborted_transactions)
    skipping: set[int] = set()
    values = []
    raw = bytes(data.records or b"")
    for position, header in iter_batches(raw):
        while aborted and aborted[0][0] <= header.last_offset:
            skipping.add(aborted.pop(0)[1])
        if header.is_control:
            if not read_end_txn_marker(raw, position).committed:
                skipping.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in skipping:
            continue
        values += [r.value for r in decode_batch(raw[position:position + header.size]).records]
    return values


def txn_index(part: Partition) -> list[AbortedTxn]:
    return [txn for segment in part.log.segments for txn in segment.txn_index.entries]


async def test_read_committed_sees_committed_records_below_the_lso_and_the_aborted_list(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("tx")
        part = cluster.partition(1, "tx")
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            assert await append(part, plain_batch(b"p0")) == 0
            assert await append(part, txn_batch(A, 0, b"a1")) == 1
            assert await append(part, txn_batch(B, 0, b"b1")) == 2
            assert await append(part, txn_batch(A, 1, b"a2")) == 3
            assert (part.high_watermark, part.last_stable_offset) == (4, 1)

            # Open transactions: read_committed stops at the LSO, read_uncommitted reads them.
            committed = await fetch(conn, "tx", 0, READ_COMMITTED)
            assert (committed.high_watermark, committed.last_stable_offset) == (4, 1)
            assert [b[0] for b in batches(committed.records)] == [0]
            assert committed.aborted_transactions == []
            uncommitted = await fetch(conn, "tx", 0, READ_UNCOMMITTED)
            assert [b[4] for b in batches(uncommitted.records)] == [[b"p0"], [b"a1"], [b"b1"], [b"a2"]]
            assert uncommitted.last_stable_offset == 1
            assert (await fetch(conn, "tx", 1, READ_COMMITTED)).records in (b"", None)
            assert await latest(conn, "tx", READ_COMMITTED) == 1
            assert await latest(conn, "tx", READ_UNCOMMITTED) == 4

            # A is aborted by the coordinator (epoch 5): its marker at 4, B still open from 2.
            assert await write_markers(conn, (A, 0, False, 5, {"tx": [0]})) == [("tx", 0, ErrorCode.NONE)]
            assert part.last_stable_offset == 2
            assert txn_index(part) == [AbortedTxn(A, first_offset=1, last_offset=4, last_stable_offset=2)]
            assert await append(part, plain_batch(b"p5")) == 5
            assert await write_markers(conn, (B, 0, True, 5, {"tx": [0]})) == [("tx", 0, ErrorCode.NONE)]
            assert (part.high_watermark, part.last_stable_offset) == (7, 7)
            assert txn_index(part) == [AbortedTxn(A, 1, 4, 2)]  # a commit leaves no entry

            committed = await fetch(conn, "tx", 0, READ_COMMITTED)
            assert committed.last_stable_offset == 7
            assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(A, 1)]
            assert [b[:4] for b in batches(committed.records)][-2:] == [(5, 5, -1, False), (6, 6, B, True)]
            assert consumed(committed) == [b"p0", b"b1", b"p5"]
            later = await fetch(conn, "tx", 5, READ_COMMITTED)
            assert later.aborted_transactions == []  # A's abort lies below the fetch
            assert consumed(later) == [b"p5"]
            assert await latest(conn, "tx", READ_COMMITTED) == 7

            # Reloading the producer state from the log reads the markers back: same state.
            await trio.to_thread.run_sync(part.reload_producer_state)
            assert part.producer_state.open_transactions() == []
            assert part.last_stable_offset == 7
            assert part.producer_state.entry(A).coordinator_epoch == 5


async def test_write_txn_markers_errors(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        await cluster.create_topic("tx")
        here = cluster.leader("tx")
        other = next(b for b in cluster.brokers if b != here)
        part = cluster.partition(here, "tx")
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[here]) as conn:
            await append(part, txn_batch(A, 0, b"a1"))
            assert await write_markers(conn, (A, 0, True, 3, {"tx": [0]})) == [("tx", 0, ErrorCode.NONE)]
            await append(part, txn_batch(A, 0, b"a2", epoch=1))  # A's next transaction, in epoch 1
            answers = await write_markers(
                conn,
                (A, 0, False, 3, {"tx": [0]}),  # a zombie's epoch
                (A, 1, False, 2, {"tx": [0]}),  # an older coordinator
                (A, 1, False, 3, {"nope": [0], "tx": [7]}),
                version=0,
            )
            assert answers == [
                ("tx", 0, ErrorCode.INVALID_PRODUCER_EPOCH),
                ("tx", 0, ErrorCode.TRANSACTION_COORDINATOR_FENCED),
                ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                ("tx", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ]
            assert part.producer_state.open_transactions() == [(2, A)]  # none of them closed it
            async with await KafkaConnection.connect("127.0.0.1", cluster.ports[other]) as elsewhere:
                assert await write_markers(elsewhere, (A, 1, False, 3, {"tx": [0]})) == [
                    ("tx", 0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
            # A resend of a marker already written is accepted and closes nothing more.
            assert await write_markers(conn, (A, 1, False, 3, {"tx": [0]})) == [("tx", 0, ErrorCode.NONE)]
            assert await write_markers(conn, (A, 1, False, 3, {"tx": [0]})) == [("tx", 0, ErrorCode.NONE)]
            assert txn_index(part) == [AbortedTxn(A, 2, 3, 4)]
            assert part.producer_state.open_transactions() == [] and part.last_stable_offset == 5


@pytest.mark.parametrize("restart", [False, True], ids=["live", "restarted"])
async def test_a_follower_has_the_same_txnindex_and_lso(tmp_path, restart):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic("rep", replication_factor=2)
        leader_id = cluster.leader("rep")
        follower_id = next(b for b in cluster.brokers if b != leader_id)
        leader = cluster.partition(leader_id, "rep")
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader_id]) as conn:
            await append(leader, txn_batch(A, 0, b"a1"))
            await append(leader, txn_batch(B, 0, b"b1"))
            await append(leader, txn_batch(A, 1, b"a2"))
            assert await write_markers(conn, (A, 0, False, 1, {"rep": [0]})) == [("rep", 0, ErrorCode.NONE)]
            await append(leader, txn_batch(B, 1, b"b2"))
            await append(leader, txn_batch(A, 0, b"a3", epoch=1))  # A's next transaction stays open
            expected_index = [AbortedTxn(A, 0, 3, 1)]
            assert txn_index(leader) == expected_index
            assert leader.last_stable_offset == 1
            assert await write_markers(conn, (B, 0, True, 1, {"rep": [0]})) == [("rep", 0, ErrorCode.NONE)]
            assert leader.last_stable_offset == 5

        if restart:
            await cluster.stop_broker(follower_id)
            await cluster.restart_broker(follower_id)
        await cluster.wait_for(lambda: (f := cluster.partition(follower_id, "rep")) is not None
                               and f.log_end_offset == leader.log_end_offset
                               and f.high_watermark == leader.high_watermark)
        follower = cluster.partition(follower_id, "rep")
        assert txn_index(follower) == expected_index
        assert follower.last_stable_offset == leader.last_stable_offset == 5
        assert follower.producer_state.open_transactions() == leader.producer_state.open_transactions() == [(5, A)]
        assert follower.producer_state.entry(A).coordinator_epoch == 1


async def test_a_marker_batch_appended_as_leader_closes_and_indexes_its_transaction(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("tx")
        part = cluster.partition(1, "tx")
        await append(part, txn_batch(A, 0, b"a1"))
        await append(part, txn_batch(B, 0, b"b1"))
        assert part.producer_state.open_transactions() == [(0, A), (1, B)]
        marker = build_end_txn_marker(producer_id=A, producer_epoch=0, committed=False, coordinator_epoch=2,
                                      timestamp=now_ms())
        assert await append(part, marker) == 2
        assert txn_index(part) == [AbortedTxn(A, 0, 2, 1)]
        assert part.producer_state.entry(A).coordinator_epoch == 2
        assert part.last_stable_offset == 1
