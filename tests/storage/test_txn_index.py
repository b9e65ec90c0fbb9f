"""The aborted-transaction index (``.txnindex``): Kafka's format, its search, and how it follows its
segment through recovery, retention, truncation and a cleaner swap."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    control_key,
    end_txn_marker_value,
)
from kraftpy.storage.checkpoint import LogOffsets
from kraftpy.storage.cleaner import Cleaner, CleanerConfig, log_to_clean
from kraftpy.storage.index import CorruptIndexError
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

from ._support import ManualClock

TS = 1_700_000_000_000


def data(pid: int, count: int = 1, *, transactional: bool = True, key: bytes = b"k") -> bytes:
    return build_batch([SimpleRecord(key + b"%d" % i, b"v", timestamp=TS) for i in range(count)],
                       producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=transactional)


def marker(pid: int, kind: ControlRecordType) -> bytes:
    return build_batch([SimpleRecord(control_key(kind), end_txn_marker_value(3), timestamp=TS)],
                       producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True)


def txn_files(log: Log) -> list[str]:
    return sorted(name for name in os.listdir(log.directory) if ".txnindex" in name)


def all_entries(log: Log) -> list[AbortedTxn]:
    return [txn for segment in log.segments for txn in segment.txn_index.entries]


def reopen(log: Log, config: LogConfig, **kwargs) -> Log:
    log.abandon()
    return Log.open(log.directory, config, clock=ManualClock(), **kwargs)


# -- the format --------------------------------------------------------------------------------


def test_an_entry_is_kafkas_34_bytes_big_endian(tmp_path):
    hand_built = (
        b"\x00\x00"  # version 0
        + bytes.fromhex("0000000000000007")  # producer id 7
        + bytes.fromhex("0000000000000064")  # first offset 100
        + bytes.fromhex("00000000000000c8")  # last offset 200
        + bytes.fromhex("00000000000000c9")  # last stable offset 201
    )
    assert len(hand_built) == 34
    txn = AbortedTxn(7, 100, 200, 201)
    assert txn.pack() == hand_built
    assert AbortedTxn.unpack(hand_built) == txn
    index = TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100)
    index.append(txn)
    index.append(AbortedTxn(-2, 150, 2**40, 2**40 + 1))
    raw = index.path.read_bytes()
    assert raw[:34] == hand_built
    assert struct.unpack(">hqqqq", raw[34:]) == (0, -2, 150, 2**40, 2**40 + 1)


def test_the_file_is_created_by_the_first_append_only(tmp_path):
    index = TransactionIndex(tmp_path / "x.txnindex", 0)
    index.append_all([])
    index.truncate_to(0)
    assert index.flush() is False
    assert not index.path.exists()
    index.append(AbortedTxn(1, 0, 5, 6))
    assert index.path.exists()
    assert index.flush() is True  # new: the directory must be fsynced too
    assert index.flush() is False


# -- append, collect, truncate -------------------------------------------------------------------


def test_appends_go_in_last_offset_order(tmp_path):
    index = TransactionIndex(tmp_path / "x.txnindex", 10)
    index.append(AbortedTxn(1, 10, 20, 21))
    for bad in (AbortedTxn(2, 10, 20, 21), AbortedTxn(2, 10, 19, 21), AbortedTxn(2, 30, 25, 31)):
        with pytest.raises(ValueError):
            index.append(bad)
    with pytest.raises(ValueError, match="below segment"):
        TransactionIndex(tmp_path / "y.txnindex", 10).append(AbortedTxn(1, 0, 9, 10))
    assert index.entries == (AbortedTxn(1, 10, 20, 21),)
    assert len(index.path.read_bytes()) == 34


def test_collect_returns_the_overlapping_ones_and_stops_at_a_stable_offset_past_the_bound(tmp_path):
    index = TransactionIndex(tmp_path / "x.txnindex", 0)
    a, b, c = AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 25, 30, 31)
    index.append_all([a, b, c])
    assert index.collect_aborted(11, 100) == TxnIndexSearchResult((b, c), False)
    assert index.collect_aborted(0, 10) == TxnIndexSearchResult((a, b), True)  # b's LSO 21 >= 10
    assert index.collect_aborted(21, 25) == TxnIndexSearchResult((), True)  # c starts at the bound: out
    assert index.collect_aborted(0, 5) == TxnIndexSearchResult((a,), True)  # a's LSO 5 >= 5


def test_truncate_drops_entries_whose_marker_is_at_or_after_the_offset(tmp_path):
    index = TransactionIndex(tmp_path / "x.txnindex", 0)
    index.append_all([AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 25, 30, 31)])
    index.truncate_to(21)
    assert [t.producer_id for t in index.entries] == [1, 2]
    index.truncate_to(20)
    assert [t.producer_id for t in index.entries] == [1]
    assert len(index.path.read_bytes()) == 34
    index.append(AbortedTxn(4, 12, 15, 16))  # appends after a truncation go where it cut
    again = TransactionIndex(index.path, 0)
    again.load()
    assert again.entries == (AbortedTxn(1, 0, 10, 11), AbortedTxn(4, 12, 15, 16))


def test_a_torn_last_entry_is_cut_on_load(tmp_path):
    path = tmp_path / "x.txnindex"
    whole = AbortedTxn(1, 0, 10, 11).pack() + AbortedTxn(2, 3, 12, 13).pack()
    path.write_bytes(whole + AbortedTxn(3, 13, 14, 15).pack()[:20])
    index = TransactionIndex(path, 0)
    assert index.load() == 20
    assert index.entries == (AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 3, 12, 13))
    assert path.read_bytes() == whole


@pytest.mark.parametrize("damage", ["version", "order"])
def test_a_damaged_file_is_refused(tmp_path, damage):
    path = tmp_path / "x.txnindex"
    if damage == "version":
        path.write_bytes(b"\x00\x01" + AbortedTxn(1, 0, 10, 11).pack()[2:])
    else:
        path.write_bytes(AbortedTxn(1, 0, 10, 11).pack() + AbortedTxn(2, 0, 10, 11).pack())
    index = TransactionIndex(path, 0)
    with pytest.raises(CorruptIndexError):
        index.load()
    assert index.entries == ()


# -- recovery rebuilds it ------------------------------------------------------------------------

# A step of a scripted log: ("data", pid) a transactional batch, ("plain", pid) a non-transactional
# one, ("abort"/"commit", pid) a marker, ("leader", 0) a KRaft control batch (not a marker).
steps_strategy = st.lists(
    st.tuples(st.sampled_from(["data", "data", "plain", "abort", "commit", "leader"]), st.integers(1, 4)),
    min_size=1, max_size=40,
)


def write_steps(log: Log, steps) -> list[tuple[str, int, int]]:
    """Append the steps; (kind, pid, base offset) of each."""
    out = []
    for kind, pid in steps:
        if kind in ("data", "plain"):
            raw = data(pid, 1 + pid % 3, transactional=kind == "data")
        elif kind == "leader":
            raw = build_batch([SimpleRecord(control_key(ControlRecordType.LEADER_CHANGE), b"\x00\x00", timestamp=TS)],
                              is_control=True)
        else:
            raw = marker(pid, ControlRecordType.ABORT if kind == "abort" else ControlRecordType.COMMIT)
        out.append((kind, pid, log.append_as_leader(raw, 0).first_offset))
    return out


def model(events: list[tuple[str, int, int]]) -> list[AbortedTxn]:
    """The aborted transactions, from the whole history: each transaction is the interval from a
    producer's first transactional batch after its last marker to its next marker."""
    txns = []  # [pid, first, end marker or None]
    for kind, pid, offset in events:
        open_ = next((t for t in txns if t[0] == pid and t[2] is None), None)
        if kind == "data" and open_ is None:
            txns.append([pid, offset, None])
        elif kind in ("abort", "commit"):
            if open_ is None:
                open_ = [pid, offset, None]
                txns.append(open_)
            open_[2] = (kind, offset)
    aborted = []
    for pid, first, end in txns:
        if end is None or end[0] != "abort":
            continue
        marker_offset = end[1]
        open_then = [f for p, f, e in txns if p != pid and f < marker_offset and (e is None or e[1] > marker_offset)]
        aborted.append(AbortedTxn(pid, first, marker_offset, min(open_then, default=marker_offset + 1)))
    return sorted(aborted, key=lambda t: t.last_offset)


def check_placement(log: Log) -> None:
    for segment in log.segments:
        for txn in segment.txn_index.entries:
            assert segment.base_offset <= txn.last_offset < segment.next_offset


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps_strategy, middle=st.integers(0, 100))
def test_recovery_rebuilds_the_index_as_a_model_of_the_history_says(tmp_path_factory, steps, middle):
    directory = tmp_path_factory.mktemp("log")
    config = LogConfig(segment_bytes=400)
    log = Log.open(directory, config, clock=ManualClock())
    events = write_steps(log, steps)
    expected = model(events)

    log = reopen(log, config)  # unclean, nothing recorded: every segment is recovered
    assert all_entries(log) == expected
    check_placement(log)
    everything = log.collect_aborted_transactions(0, log.log_end_offset)
    assert everything == expected
    log.close()

    log = Log.open(directory, config, clock=ManualClock(), offsets=log.offsets, clean_shutdown=True)
    assert all_entries(log) == expected  # loaded from the files
    # Unclean, recovery point in the middle: segments before it primed the open transactions.
    bases = [segment.base_offset for segment in log.segments]
    point = bases[middle % len(bases)]
    log = reopen(log, config, offsets=LogOffsets(0, point, 0))
    assert all_entries(log) == expected
    log.close()


def test_a_transaction_spanning_segments_is_indexed_where_its_marker_is(tmp_path):
    config = LogConfig(segment_bytes=300)
    log = Log.open(tmp_path, config, clock=ManualClock())
    first = log.append_as_leader(data(7), 0).first_offset
    log.append_as_leader(data(8), 0)
    for _ in range(6):
        log.append_as_leader(data(9, transactional=False), 0)
    abort = log.append_as_leader(marker(7, ControlRecordType.ABORT), 0).first_offset
    assert len(log.segments) > 2
    log = reopen(log, config, offsets=LogOffsets(0, log.segments[-1].base_offset, 0))
    assert all_entries(log) == [AbortedTxn(7, first, abort, first + 1)]  # producer 8 still open
    assert log.segments[-1].txn_index.entries == (AbortedTxn(7, first, abort, first + 1),)
    assert txn_files(log) == [f"{log.segments[-1].base_offset:020d}.txnindex"]
    assert log.collect_aborted_transactions(abort + 1, log.log_end_offset) == []
    assert log.collect_aborted_transactions(first, abort) == [AbortedTxn(7, first, abort, first + 1)]
    log.close()


def test_a_damaged_index_has_its_segment_recovered(tmp_path):
    config = LogConfig(segment_bytes=300)
    log = Log.open(tmp_path, config, clock=ManualClock())
    log.append_as_leader(data(7), 0)
    abort = log.append_as_leader(marker(7, ControlRecordType.ABORT), 0).first_offset
    for _ in range(6):
        log.append_as_leader(data(9, transactional=False), 0)
    log = reopen(log, config)
    expected = all_entries(log)
    assert expected == [AbortedTxn(7, 0, abort, abort + 1)]
    log.close()
    path = log.directory / txn_files(log)[0]
    path.write_bytes(b"\x00\x05" + path.read_bytes()[2:])
    log = Log.open(tmp_path, config, clock=ManualClock(), offsets=log.offsets, clean_shutdown=True)
    assert all_entries(log) == expected
    log.close()


# -- the file follows its segment ----------------------------------------------------------------


def aborted_log(directory, config: LogConfig, rounds: int = 4) -> Log:
    """A log with an aborted transaction in each of several segments, its indexes built by recovery."""
    log = Log.open(directory, config, clock=ManualClock())
    for i in range(rounds):
        log.append_as_leader(data(7, key=b"a%d-" % i), 0)
        log.append_as_leader(marker(7, ControlRecordType.ABORT), 0)
        log.append_as_leader(data(8, 3, transactional=False, key=b"p%d-" % i), 0)
        log.roll()
    log = reopen(log, config)
    log.update_high_watermark(log.log_end_offset)
    return log


def test_retention_renames_then_removes_it_with_its_segment(tmp_path):
    log = aborted_log(tmp_path, LogConfig(segment_bytes=10_000))
    before = txn_files(log)
    assert len(before) == 4
    log.delete_records_before(log.segments[2].base_offset)
    assert log.delete_old_segments() == 0  # already detached by delete_records_before
    assert txn_files(log) == sorted(before[2:] + [name + ".deleted" for name in before[:2]])
    log.delete_detached_segments()
    assert txn_files(log) == before[2:]
    assert all_entries(log) == [txn for txn in all_entries(log) if txn.last_offset >= log.segments[0].base_offset]
    log.close()


def test_truncation_drops_the_entries_after_the_new_end(tmp_path):
    config = LogConfig(segment_bytes=10_000)
    log = aborted_log(tmp_path, config)
    entries = all_entries(log)
    cut = entries[1].last_offset  # the second marker goes, and everything after it
    log.truncate_to(cut)
    assert all_entries(log) == entries[:1]
    log.delete_detached_segments()
    kept = log.segments[-1]
    assert kept.txn_index.entries == ()
    assert not kept.txn_index.path.exists() or kept.txn_index.path.read_bytes() == b""
    log.close()
    log = Log.open(tmp_path, config, clock=ManualClock(), offsets=log.offsets, clean_shutdown=True)
    assert all_entries(log) == entries[:1]
    log.close()


@pytest.mark.parametrize("crash_after", [None, "cleaned txnindex renamed .swap", "cleaned log renamed .swap",
                                         "old segments durable as .deleted"])
def test_a_cleaner_swap_carries_the_index_into_the_cleaned_segment(tmp_path, crash_after):
    config = LogConfig(segment_bytes=10_000, compact=True, delete=False)
    log = aborted_log(tmp_path, config)
    for _ in range(2):  # dirty the log: a later value of each key of producer 8
        log.append_as_leader(data(8, 3, transactional=False, key=b"p0-"), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    entries = all_entries(log)
    clock = ManualClock()
    # The pass reads a batch of every aborted transaction (and drops it): every entry is carried, to go
    # with a later pass.
    result = Cleaner(CleanerConfig(dedupe_buffer_size=1 << 20)).clean(log, log_to_clean(log, None, clock()),
                                                                         clock(), {})
    assert any(old.txn_index.entries for swap in result.swaps for old in swap.replaces)

    class Crash(Exception):
        pass

    def crash_point(step: str) -> None:
        if step == crash_after:
            raise Crash(step)

    try:
        result.swap_in(log, crash_point)
    except Crash:
        log = reopen(log, config, offsets=log.offsets, clean_shutdown=True)  # indexes trusted, not rebuilt
    else:
        log.delete_detached_segments()
    assert all_entries(log) == entries
    check_placement(log)
    assert not [name for name in txn_files(log) if not name.endswith(".txnindex")]
    log.close()
