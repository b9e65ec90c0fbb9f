"""The log cleaner under Kafka's transaction rules: aborted records never shadow a committed value and go,
an open transaction stays dirty, committed transactional records are compacted like any, a marker stays
while its transaction has a batch left and until its delete horizon, and a read_committed reader of the
cleaned log sees what it saw before."""

from __future__ import annotations

import pytest

from kraftpy.protocol.batch_header import iter_batches
from kraftpy.protocol.control_records import build_end_txn_marker, read_end_txn_marker
from kraftpy.protocol.records import SimpleRecord, build_batch, decode_batch
from kraftpy.storage import offset_map
from kraftpy.storage.cleaner import DELETE_HORIZON_BIT, Cleaner, CleanerConfig, log_to_clean
from kraftpy.storage.cleaner_txn import CleanedTransactions, MarkerFate
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.txn_index import AbortedTxn

from ._support import ManualClock

DAY = 86_400_000
P, Q = 7, 8  # transactional producers


@pytest.fixture(params=["c", "python"] if offset_map.ACCELERATED else ["python"])
def accelerated(request) -> bool:
    return request.param == "c"


class TxnLog:
    """A compacted log written as a partition leader writes it: data, transactional batches, markers, and the
    aborted transactions indexed in the segment of their marker."""

    def __init__(self, path, segment_bytes: int = 100_000) -> None:
        self.clock = ManualClock()
        self.log = Log.open(path, LogConfig(segment_bytes=segment_bytes, compact=True, delete=False,
                                            delete_retention_ms=DAY), clock=self.clock)
        self.sequences: dict[int, int] = {}
        self.open: dict[int, int] = {}
        #: Producer id → the last offset of its last data batch (what the producer state gives the cleaner).
        self.producers: dict[int, int] = {}

    def put(self, *pairs: tuple[bytes, bytes | None], txn: int | None = None) -> int:
        fields = {}
        if txn is not None:
            sequence = self.sequences.get(txn, 0)
            self.sequences[txn] = sequence + len(pairs)
            fields = dict(producer_id=txn, producer_epoch=0, base_sequence=sequence, is_transactional=True)
        data = build_batch([SimpleRecord(k, v, timestamp=self.clock()) for k, v in pairs], **fields)
        info = self.log.append_as_leader(data, 0)
        if txn is not None:
            self.open.setdefault(txn, info.first_offset)
            self.producers[txn] = info.last_offset
        self.clock.advance(1)
        return info.first_offset

    def end(self, producer_id: int, committed: bool) -> int:
        marker = build_end_txn_marker(producer_id=producer_id, producer_epoch=0, committed=committed,
                                      coordinator_epoch=1, timestamp=self.clock())
        offset = self.log.append_as_leader(marker, 0).first_offset
        first = self.open.pop(producer_id)
        if not committed:
            lso = min(self.open.values(), default=offset + 1)
            self.log.active_segment.txn_index.append(AbortedTxn(producer_id, first, offset, lso))
        self.clock.advance(1)
        return offset

    def roll(self) -> None:
        self.log.roll()

    def close_tail(self) -> None:
        """A last segment with one record, the high watermark at the log end: everything before is cleanable."""
        self.roll()
        self.put((b"tail", b"1"))
        self.log.update_high_watermark(self.log.log_end_offset)

    def clean(self, accelerated: bool, *, lso: int | None = None, checkpoint: int | None = None):
        cleaner = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 20), accelerated=accelerated)
        to_clean = log_to_clean(self.log, checkpoint, self.clock(), last_stable_offset=lso)
        result = cleaner.clean(self.log, to_clean, self.clock(), self.producers)
        result.swap_in(self.log)
        return to_clean, result

    def batches(self) -> list[tuple]:
        """(base offset, producer id, is control, marker committed or records as (offset, key, value),
        delete horizon, last offset) of every batch."""
        out = []
        for segment in self.log.segments:
            data = segment.path.read_bytes()
            for position, header in iter_batches(data):
                horizon = header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None
                if header.is_control and header.record_count:
                    content = read_end_txn_marker(data, position).committed
                else:
                    batch = decode_batch(data[position:position + header.size])
                    content = [(r.offset, r.key, r.value) for r in batch.records]
                out.append((header.base_offset, header.producer_id, header.is_control, content, horizon,
                            header.last_offset))
        return out

    def markers(self) -> list[tuple[int, bool, int | None]]:
        return [(b[0], b[3], b[4]) for b in self.batches() if b[2]]

    def txn_index(self) -> list[AbortedTxn]:
        return [txn for segment in self.log.segments for txn in segment.txn_index.entries]

    def read_committed(self) -> dict[bytes, bytes]:
        """Key → value as a read_committed consumer of the whole log ends with (Kafka's consumer: a producer's
        transactional batches are skipped from its aborted transaction's first offset to its ABORT marker)."""
        aborted = sorted((t.first_offset, t.producer_id)
                         for t in self.log.collect_aborted_transactions(0, self.log.log_end_offset))
        skipping: set[int] = set()
        state: dict[bytes, bytes] = {}
        for _, producer_id, control, content, _, last_offset in self.batches():
            while aborted and aborted[0][0] <= last_offset:
                skipping.add(aborted.pop(0)[1])
            if control:
                if content is False:
                    skipping.discard(producer_id)
                continue
            if producer_id in skipping:
                continue
            for _, key, value in content:
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
        return state

    def values(self) -> list[tuple[bytes, bytes | None]]:
        return [(k, v) for b in self.batches() if not b[2] for _, k, v in b[3]]


def test_an_aborted_transactions_records_never_shadow_a_committed_value_and_go(tmp_path, accelerated):
    t = TxnLog(tmp_path)
    t.put((b"a", b"1"), (b"b", b"1"))
    t.put((b"a", b"bad"), (b"c", b"bad"), txn=P)
    t.put((b"b", b"2"))
    t.put((b"b", b"bad"), txn=P)
    t.end(P, committed=False)
    t.close_tail()
    before = t.read_committed()
    assert before == {b"a": b"1", b"b": b"2", b"tail": b"1"}

    t.producers.clear()  # P expired from the producer state: no batch of it need stay for it
    _, result = t.clean(accelerated)
    assert t.read_committed() == before
    # a's committed value survived the aborted a=bad after it; every aborted record is gone.
    assert t.values() == [(b"a", b"1"), (b"b", b"2"), (b"tail", b"1")]
    assert result.stats.aborted_dropped == 3
    # The pass read the transaction's batches: its marker and index entry stay one pass more (a fetch that
    # read the batches from a replaced segment still learns they were aborted), and the log is due at once.
    (entry,) = t.txn_index()
    assert (entry.producer_id, entry.first_offset) == (P, 2)
    assert [m[1:] for m in t.markers()] == [(False, None)]
    assert result.earliest_horizon == t.clock()
    assert log_to_clean(t.log, result.next_dirty_offset, t.clock(), earliest_horizon=t.clock()).due(0.99)
    # The next pass finds no batch of it: the entry goes, the marker gets its delete horizon.
    _, result = t.clean(accelerated)
    assert t.txn_index() == []
    assert [m[1:] for m in t.markers()] == [(False, t.clock() + DAY)]
    assert result.earliest_horizon == t.clock() + DAY
    assert t.read_committed() == before


def test_an_open_transaction_and_everything_after_it_stay_dirty(tmp_path, accelerated):
    t = TxnLog(tmp_path, segment_bytes=250)
    t.put((b"a", b"1"), (b"b", b"1"))
    t.roll()
    first_open = t.put((b"a", b"open"), txn=P)
    t.roll()
    t.put((b"a", b"2"), (b"b", b"2"))
    t.close_tail()
    before = t.batches()

    to_clean = log_to_clean(t.log, None, t.clock(), last_stable_offset=first_open)
    assert to_clean.first_uncleanable_offset == first_open  # the open transaction's segment
    unbounded = log_to_clean(t.log, None, t.clock())
    assert unbounded.first_uncleanable_offset > first_open
    _, result = t.clean(accelerated, lso=first_open)
    assert result.next_dirty_offset == first_open
    # Nothing from the open transaction on was mapped or rewritten: a=1 and b=1 below it stay too.
    assert t.batches() == before


def test_committed_transactional_records_are_compacted_like_any(tmp_path, accelerated):
    t = TxnLog(tmp_path)
    t.put((b"c", b"0"))
    t.put((b"a", b"t1"), (b"b", b"t1"), (b"c", b"t1"), txn=P)
    commit = t.end(P, committed=True)
    t.put((b"a", b"2"))
    t.close_tail()
    before = t.read_committed()

    _, result = t.clean(accelerated)
    assert t.read_committed() == before == {b"a": b"2", b"b": b"t1", b"c": b"t1", b"tail": b"1"}
    # c=0 is shadowed by the committed c=t1; a=t1 by a=2; the transaction keeps b and c, and its marker.
    assert t.values() == [(b"b", b"t1"), (b"c", b"t1"), (b"a", b"2"), (b"tail", b"1")]
    assert t.markers() == [(commit, True, None)]
    assert result.stats.aborted_dropped == 0


def test_a_marker_stays_while_its_transaction_has_a_batch_then_until_its_horizon(tmp_path, accelerated):
    t = TxnLog(tmp_path)
    t.put((b"a", b"t"), txn=P)
    commit = t.end(P, committed=True)
    t.put((b"x", b"q"), txn=Q)  # Q's last data batch: it stays, empty, for the producer state
    abort = t.end(Q, committed=False)
    t.put((b"a", b"2"))
    t.close_tail()
    before = t.read_committed()
    t.producers.pop(P)  # P expired from the producer state; Q did not

    # Pass 1: a=t goes (a=2 is newer); Q's aborted batch stays as an empty batch, so its marker and its
    # index entry stay; pass 2 reads no batch of P's transaction: P's marker gets its delete horizon.
    t.clean(accelerated)
    assert t.markers() == [(commit, True, None), (abort, False, None)]
    t.clean(accelerated)
    horizon = t.clock() + DAY
    assert t.markers() == [(commit, True, horizon), (abort, False, None)]
    assert [b[:4] for b in t.batches() if b[1] == Q and not b[2]] == [(abort - 1, Q, False, [])]
    assert t.txn_index() == [AbortedTxn(Q, abort - 1, abort, abort + 1)]
    assert t.read_committed() == before

    # Before the horizon the marker stays; at it, it goes.
    t.clock.advance(DAY - 1)
    t.clean(accelerated)
    assert t.markers() == [(commit, True, horizon), (abort, False, None)]
    t.clock.advance(1)
    _, result = t.clean(accelerated)
    assert t.markers() == [(abort, False, None)]
    assert result.stats.markers_dropped == 1
    assert t.read_committed() == before

    # Q leaves the producer state: its empty batch goes, then its index entry and marker (horizon, then removal).
    t.producers.pop(Q)
    t.clean(accelerated)
    assert t.markers() == [(abort, False, None)] and len(t.txn_index()) == 1
    t.clean(accelerated)
    assert t.txn_index() == []
    assert t.markers() == [(abort, False, t.clock() + DAY)]
    t.clock.advance(DAY)
    t.clean(accelerated)
    assert t.markers() == []
    assert [b for b in t.batches() if b[1] != -1] == []
    assert t.read_committed() == before
    t.log.close()
    reopened = Log.open(tmp_path, t.log.config, clock=t.clock)
    assert [txn for segment in reopened.segments for txn in segment.txn_index.entries] == []
    reopened.close()


def random_txn_log(path, seed: int) -> TxnLog:
    """Interleaved transactions of two producers, committed and aborted, over segments, with plain records
    and tombstones; every transaction ended."""
    import random

    rng = random.Random(seed)
    t = TxnLog(path, segment_bytes=600)
    keys = [b"k%d" % i for i in range(6)]
    for step in range(120):
        choice = rng.random()
        open_ = [p for p in (P, Q) if p in t.open]
        if choice < 0.3:
            t.put((rng.choice(keys), None if rng.random() < 0.1 else b"plain%d" % step))
        elif choice < 0.75:
            producer = rng.choice((P, Q))
            t.put(*[(rng.choice(keys), b"%d-%d" % (producer, step)) for _ in range(rng.randint(1, 3))], txn=producer)
        elif open_:
            t.end(rng.choice(open_), committed=rng.random() < 0.5)
    for producer in list(t.open):
        t.end(producer, committed=False)
    t.close_tail()
    return t


def test_a_read_committed_reader_sees_the_same_keys_after_cleaning(tmp_path, accelerated):
    t = random_txn_log(tmp_path, 16)
    before = t.read_committed()
    dropped = 0
    for _ in range(4):
        _, result = t.clean(accelerated)
        dropped += result.stats.aborted_dropped
        assert t.read_committed() == before
        t.clock.advance(DAY)
    assert dropped > 0
    # Every aborted record is gone; every key's committed value is there.
    assert all(not v.startswith(b"%d-" % p) or (k, v) in before.items() for k, v in t.values() for p in (P, Q))


@pytest.mark.skipif(not offset_map.ACCELERATED, reason="the C record loops are not compiled")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_c_and_python_copies_write_the_same_files_with_transactions(tmp_path, seed):
    logs = {a: random_txn_log(tmp_path / str(a), seed) for a in (True, False)}
    for advance in (0, 0, DAY, DAY):
        files = {}
        for accelerated, t in logs.items():
            t.clock.advance(advance)
            t.clean(accelerated)
            files[accelerated] = {p.name: p.read_bytes() for p in sorted(t.log.directory.iterdir())
                                  if p.suffix in (".log", ".txnindex")}
        assert files[True] == files[False]


def test_the_transaction_walk_decides_as_kafkas():
    from kraftpy.protocol.batch_header import read_header
    from kraftpy.protocol.records import ControlRecordType

    def header(offset: int, producer: int, *, control: bool = False):
        data = build_batch([SimpleRecord(b"k", b"v", timestamp=0)], base_offset=offset, producer_id=producer,
                           producer_epoch=0, base_sequence=0, is_transactional=True, is_control=control)
        return read_header(data)

    walk = CleanedTransactions([AbortedTxn(P, 5, 9, 10), AbortedTxn(P, 20, 21, 22)])
    # P's committed transaction before its aborted one: its batch read and dropped, the marker stays a pass.
    assert walk.on_data_batch(header(3, P)) is False
    assert walk.on_marker(header(4, P, control=True), ControlRecordType.COMMIT) == MarkerFate(False, revisit=True)
    assert walk.on_data_batch(header(5, P)) is True
    walk.on_data_kept(header(5, P))  # kept (empty) as a live producer's last
    assert walk.on_data_batch(header(6, Q)) is False
    walk.on_data_kept(header(6, Q))
    assert walk.on_marker(header(7, Q, control=True), ControlRecordType.COMMIT) == MarkerFate(False)
    assert walk.on_marker(header(9, P, control=True), ControlRecordType.ABORT) == MarkerFate(False)
    assert walk.on_marker(header(10, Q, control=True), ControlRecordType.COMMIT) == MarkerFate(True)  # none read
    # An aborted transaction with no batch read: its marker may go, its entry goes.
    assert walk.on_marker(header(21, P, control=True), ControlRecordType.ABORT) == MarkerFate(True)
    assert walk.retained_index == [AbortedTxn(P, 5, 9, 10)]
    # An ABORT marker the index does not know keeps what it cannot account for.
    assert walk.on_data_batch(header(30, Q)) is False
    walk.on_data_kept(header(30, Q))
    assert walk.on_marker(header(31, Q, control=True), ControlRecordType.ABORT) == MarkerFate(False)
    assert walk.on_marker(header(32, Q, control=True), None) == MarkerFate(False)  # unreadable: kept
