"""Transactional appends of the `__consumer_offsets` writer (TxnOffsetCommit's records) on a real
partition: the producer's transactional batches, fenced by epoch, and replayed with their marker."""

from __future__ import annotations

import pytest

from kraftpy.coordinator.runtime import CoordinatorWriteError, TxnMarker, TxnRecord
from kraftpy.protocol.batch_header import iter_batches
from kraftpy.protocol.errors import ErrorCode
from tests.broker.test_groups_writer import COMPACT, OFFSETS, writer_for
from tests.helpers.cluster import open_cluster

PID = 7000
NOW = 1_700_000_000_000


async def test_transactional_appends_open_the_producers_transaction_and_load_sees_the_marker(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic(OFFSETS, partitions=1, replication_factor=1, configs=COMPACT)
        _, part, writer = writer_for(cluster)
        txn = dict(producer_id=PID, producer_epoch=2, transactional=True)
        assert await writer.append([(b"plain", b"p")]) == 0
        assert await writer.append([(b"a", b"1"), (b"b", b"2")], **txn) == 2
        assert await writer.append([(b"c", b"3")], **txn) == 3

        data = part.log.read_bytes(0, 1 << 20)
        headers = [h for _, h in iter_batches(data)]
        assert [(h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) for h in headers] == [
            (-1, -1, -1, False), (PID, 2, 0, True), (PID, 2, 2, True)]
        # The partition's producer state holds the transaction open: the LSO stays at its first record.
        assert part.high_watermark == 4 and part.last_stable_offset == 1

        # A zombie of an older epoch is fenced by the partition itself.
        with pytest.raises(CoordinatorWriteError) as fenced:
            await writer.append([(b"z", b"0")], producer_id=PID, producer_epoch=1, transactional=True)
        assert fenced.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH

        marker = await part.append_txn_marker(PID, 2, 0, True, now=NOW, leader_epoch=part.leader_epoch)
        assert marker.error == ErrorCode.NONE
        await cluster.wait_for(lambda: part.high_watermark >= marker.next_offset)
        assert part.last_stable_offset == 5

        assert [item async for item in writer.read_committed()] == [
            (0, b"plain", b"p"), TxnRecord(1, b"a", b"1", PID, 2), TxnRecord(2, b"b", b"2", PID, 2),
            TxnRecord(3, b"c", b"3", PID, 2), TxnMarker(4, PID, 2, True)]

        # The producer's next transaction goes on in sequence; a new epoch starts again at 0.
        assert await writer.append([(b"d", b"4")], **txn) == 5
        assert await writer.append([(b"e", b"5")], producer_id=PID, producer_epoch=3, transactional=True) == 6
        data = part.log.read_bytes(5, 1 << 20)
        assert [(h.producer_epoch, h.base_sequence) for _, h in iter_batches(data)] == [(2, 3), (3, 0)]
