"""The broker's log cleaner on a compacted partition with transactions: batches appended as leader, COMMIT
and ABORT markers appended as WriteTxnMarkers appends them (with their ``.txnindex`` entries), and the
cleaner's passes bounded by the partition's last stable offset."""

from __future__ import annotations

import trio

from kraftpy.broker.log_cleaner import LogCleaner
from kraftpy.protocol.batch_header import iter_batches, read_header
from kraftpy.protocol.control_records import read_end_txn_marker
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import SimpleRecord, build_batch, decode_batch
from kraftpy.storage.cleaner import Cleaner, CleanerConfig
from tests.helpers.cluster import broker_settings

NOW = 1_700_000_000_000
P, Q = 1000, 2000  # transactional producers


def compacted_leader(tmp_path):
    from kraftpy.broker.partition import Partition, TopicPartition
    from kraftpy.broker.producer_state import ProducerStateManager
    from kraftpy.ids import Uuid
    from kraftpy.metadata.image import PartitionRegistration
    from kraftpy.storage.log import Log
    from kraftpy.storage.log_config import LogConfig

    clock = lambda: NOW  # noqa: E731
    config = LogConfig(segment_bytes=300, compact=True, delete=False, min_cleanable_ratio=0.01, delete_retention_ms=0)
    log = Log.open(tmp_path / "broker-1" / "table-0", config, clock=clock)
    part = Partition(TopicPartition("table", 0), Uuid(bytes(15) + b"\x01"), log, 1, clock, ProducerStateManager())
    part.make_leader(PartitionRegistration(replicas=(1,), isr=(1,), leader=1, leader_epoch=1, partition_epoch=1))
    return part


class Writer:
    def __init__(self, part) -> None:
        self.part = part
        self.sequences: dict[int, int] = {}

    async def put(self, key: bytes, value: bytes, txn: int | None = None) -> int:
        fields = {}
        if txn is not None:
            sequence = self.sequences.get(txn, 0)
            self.sequences[txn] = sequence + 1
            fields = dict(producer_id=txn, producer_epoch=0, base_sequence=sequence, is_transactional=True)
        data = build_batch([SimpleRecord(key, value, timestamp=NOW)], **fields)
        appended = await self.part.append_as_leader(data, read_header(data), acks=1, now=NOW)
        assert appended.error == ErrorCode.NONE, appended
        return appended.base_offset

    async def end(self, producer_id: int, committed: bool) -> int:
        appended = await self.part.append_txn_marker(producer_id, 0, 3, committed, now=NOW)
        assert appended.error == ErrorCode.NONE, appended
        return appended.base_offset


def read_committed(part) -> dict[bytes, bytes]:
    """Key → value as a read_committed consumer of the log up to the LSO ends with."""
    log = part.log
    end = part.last_stable_offset
    aborted = sorted((t.first_offset, t.producer_id) for t in log.collect_aborted_transactions(0, end))
    skipping: set[int] = set()
    state = {}
    for segment in log.segments:
        data = segment.path.read_bytes()
        for position, header in iter_batches(data):
            if header.base_offset >= end:
                return state
            while aborted and aborted[0][0] <= header.last_offset:
                skipping.add(aborted.pop(0)[1])
            if header.is_control:
                if header.record_count and not read_end_txn_marker(data, position).committed:
                    skipping.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in skipping:
                continue
            for record in decode_batch(data[position:position + header.size]).records:
                state[record.key] = record.value
    return state


def records(part) -> list[tuple[int, bytes, bytes]]:
    out = []
    for segment in part.log.segments:
        data = segment.path.read_bytes()
        for position, header in iter_batches(data):
            if not header.is_control:
                out += [(r.offset, r.key, r.value) for r in decode_batch(data[position:position + header.size]).records]
    return out


async def run_pass(cleaner: LogCleaner, part):
    picked = await cleaner.grab_filthiest_log()
    assert picked is not None
    _, to_clean = picked
    try:
        result = await cleaner.clean(Cleaner(cleaner.config), part, to_clean)
    finally:
        cleaner.in_progress.discard(part.tp)
    assert result is not None
    return to_clean, result


async def test_the_broker_cleaner_stops_at_an_open_transaction_and_drops_aborted_records(tmp_path):
    part = compacted_leader(tmp_path)
    cleaner = LogCleaner(broker_settings(tmp_path, 1), lambda: [part], lambda: NOW)
    cleaner.config = CleanerConfig(dedupe_buffer_size=1 << 16)
    w = Writer(part)
    for i in range(3):
        await w.put(b"a", b"a%d" % i)
        await w.put(b"b", b"b%d" % i)
    await w.put(b"a", b"bad", txn=P)
    await w.put(b"c", b"bad", txn=P)
    await w.end(P, committed=False)
    first_open = await w.put(b"b", b"open", txn=Q)
    for i in range(3, 9):
        await w.put(b"a", b"a%d" % i)
    assert part.last_stable_offset == first_open
    assert len(part.log.segments) > 3
    before = read_committed(part)
    assert before == {b"a": b"a2", b"b": b"b2"}
    untouched = [r for r in records(part) if r[0] >= first_open]

    # The pass ends at the open transaction: nothing from it on is mapped or rewritten.
    to_clean, result = await run_pass(cleaner, part)
    assert to_clean.first_uncleanable_offset <= first_open
    assert result.next_dirty_offset <= first_open
    assert [r for r in records(part) if r[0] >= first_open] == untouched
    # Below it the aborted records are gone, and a=bad did not shadow a=a2.
    below = [r for r in records(part) if r[0] < first_open]
    assert [(k, v) for _, k, v in below] == [(b"a", b"a2"), (b"b", b"b2")]
    assert read_committed(part) == before

    # Q commits: b=open is committed, shadows b=b2, and the next pass compacts up to the new LSO.
    await w.end(Q, committed=True)
    for i in range(9, 15):
        await w.put(b"a", b"a%d" % i)
    assert part.last_stable_offset == part.log.log_end_offset
    before = read_committed(part)
    assert before[b"b"] == b"open"
    with trio.fail_after(30):
        _, result = await run_pass(cleaner, part)
    assert result.next_dirty_offset > first_open
    assert read_committed(part) == before
    assert [v for _, k, v in records(part) if k == b"b"] == [b"open"]
    assert not [v for _, _, v in records(part) if v == b"bad"]
