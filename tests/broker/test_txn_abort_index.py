"""An aborted transaction is named to read_committed fetches before the LSO passes its records.

Found by the fault harness's txn workload (seed 13, kill faults): a read_committed consumer returned
two records of a transaction its producer had aborted. The partition took the transaction as ended
when its ABORT marker was appended, so the LSO (and, with the high watermark, a read_committed
fetch) could pass the marker while the `.txnindex` entry was still being written in a worker thread;
a fetch in that window carried no aborted transaction for the records, and the client kept them."""

from __future__ import annotations

import threading

import trio

from tests.broker.test_groups_writer import COMPACT, OFFSETS, writer_for
from tests.helpers.cluster import open_cluster

PID = 7100
NOW = 1_700_000_000_000


async def test_the_lso_stays_below_an_aborted_transaction_until_its_index_entry_is_readable(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic(OFFSETS, partitions=1, replication_factor=1, configs=COMPACT)
        _, part, writer = writer_for(cluster)
        txn = dict(producer_id=PID, producer_epoch=2, transactional=True)
        assert await writer.append([(b"plain", b"p")]) == 0
        assert await writer.append([(b"a", b"1"), (b"b", b"2")], **txn) == 2
        assert part.last_stable_offset == 1

        # The index write is held in its worker thread (as a slow disk would hold it).
        index = part.log.active_segment.txn_index
        append_all = index.append_all
        release = threading.Event()

        def slow_append_all(entries):
            release.wait(30)
            append_all(entries)

        index.append_all = slow_append_all
        async with trio.open_nursery() as nursery:
            results = []

            async def abort() -> None:
                results.append(await part.append_txn_marker(PID, 2, 0, False, now=NOW,
                                                            leader_epoch=part.leader_epoch))

            nursery.start_soon(abort)
            await cluster.wait_for(lambda: part.log_end_offset == 4 and part.high_watermark == 4)
            # The marker is in the log and replicated; its index entry is not written yet.
            lso = part.last_stable_offset
            named = [t.first_offset for t in part.log.collect_aborted_transactions(0, lso)]
            assert lso <= 1 or named == [1], (lso, named)
            release.set()
        assert results[0].next_offset == 4
        assert part.last_stable_offset == 4
        assert [(t.producer_id, t.first_offset, t.last_offset)
                for t in part.log.collect_aborted_transactions(0, 4)] == [(PID, 1, 3)]
