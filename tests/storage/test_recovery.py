"""Recovery after an unclean stop: torn and corrupt tails are cut, indexes are rebuilt, not trusted."""

from __future__ import annotations

import os

import pytest

from kraftpy.storage.checkpoint import LogOffsets
from kraftpy.storage.index import OFFSET_ENTRY, TIME_ENTRY
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig

from ._support import ManualClock, batch, read_all

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=64)


def fill(directory, batches=30, close=True):
    log = Log.open(directory, CONFIG, clock=ManualClock())
    for i in range(batches):
        log.append_as_leader(batch(2, timestamp=1000 + 10 * i, tag=i), leader_epoch=i // 10)
    expected = read_all(log)
    if close:
        log.close()
    return log, expected


def segment_files(directory, suffix=".log"):
    return sorted(directory.glob(f"*{suffix}"))


def reopen(directory, offsets: LogOffsets | None = None, *, clean: bool = False):
    """Open the log again as its owner would: with the offsets it recorded, and whether the
    last close was clean (a log directory's marker)."""
    return Log.open(directory, CONFIG, clock=ManualClock(), offsets=offsets, clean_shutdown=clean)


def test_clean_restart_skips_the_scan(tmp_path, monkeypatch):
    closed, expected = fill(tmp_path)
    from kraftpy.storage import segment as segment_module

    def no_recovery(self, on_batch=None):
        raise AssertionError("a clean restart must not scan CRCs")

    monkeypatch.setattr(segment_module.LogSegment, "recover", no_recovery)
    log = reopen(tmp_path, closed.offsets, clean=True)
    assert read_all(log) == expected
    log.close()


def test_unclean_restart_recovers_from_the_recovery_point(tmp_path):
    log, expected = fill(tmp_path, close=False)
    log.flush(20)
    recorded = log.offsets  # what the owner checkpointed
    log.append_as_leader(batch(1, tag=99), 3)
    expected = read_all(log)
    log.abandon()
    again = reopen(tmp_path, recorded)
    assert read_all(again) == expected
    assert again.recovery_point == again.log_end_offset
    again.close()


@pytest.mark.parametrize("damage", ["torn", "crc", "magic", "length"])
def test_corrupt_tail_is_cut_and_later_segments_deleted(tmp_path, damage):
    log, expected = fill(tmp_path, close=False)
    log.abandon()  # nothing was flushed: the whole log is checked
    victim = segment_files(tmp_path)[1]
    base = int(victim.name[:20])
    data = victim.read_bytes()
    position = 12 + int.from_bytes(data[8:12], "big")  # where the segment's second batch starts
    assert position < len(data)
    if damage == "torn":
        victim.write_bytes(data[: position + 30])
    else:
        mutable = bytearray(data)
        mutable[position + {"crc": 40, "magic": 16, "length": 9}[damage]] ^= 0x55
        victim.write_bytes(bytes(mutable))
    again = reopen(tmp_path)
    kept = [b for b in expected if b[0] <= base]
    assert read_all(again) == kept
    assert again.log_end_offset == base + 2
    assert [p.name for p in segment_files(tmp_path)][-1] == victim.name
    for entry in again.leader_epoch_cache.entries:
        assert entry.start_offset < again.log_end_offset
    again.close()


def test_garbage_after_the_last_batch_is_cut(tmp_path):
    log, expected = fill(tmp_path, close=False)
    log.abandon()
    last = segment_files(tmp_path)[-1]
    with open(last, "ab") as f:
        f.write(b"\x00" * 100)
    again = reopen(tmp_path)
    assert read_all(again) == expected
    assert os.path.getsize(last) == again.active_segment.size
    again.close()


@pytest.mark.parametrize("how", ["delete", "truncate", "garbage", "zeros", "shuffle", "stale"])
def test_indexes_are_rebuilt_when_missing_or_wrong(tmp_path, how):
    closed, expected = fill(tmp_path)
    probe = reopen(tmp_path, closed.offsets, clean=True)
    timestamps = {t: probe.offset_for_timestamp(t) for t in range(995, 1300, 7)}
    positions = {o: (r.offset, r.length) for o in range(0, 60, 3) if (r := probe.read(o, 150))}
    probe.close()
    for path in segment_files(tmp_path, ".index") + segment_files(tmp_path, ".timeindex"):
        data = path.read_bytes()
        if how == "delete":
            path.unlink()
        elif how == "truncate":
            path.write_bytes(data[: len(data) // 2 + 1])
        elif how == "garbage":
            path.write_bytes(os.urandom(len(data)))
        elif how == "zeros":
            path.write_bytes(b"\x00" * len(data))
        elif how == "shuffle":
            size = 12 if path.suffix == ".timeindex" else 8
            entries = [data[i : i + size] for i in range(0, len(data), size)]
            path.write_bytes(b"".join(reversed(entries)))
        elif how == "stale":
            # plausible-looking but wrong entries: every position or timestamp shifted
            if path.suffix == ".index":
                entries = [OFFSET_ENTRY.pack(rel, pos + 7) for rel, pos in OFFSET_ENTRY.iter_unpack(data)]
            else:
                entries = [TIME_ENTRY.pack(ts - 5, rel) for ts, rel in TIME_ENTRY.iter_unpack(data)]
            path.write_bytes(b"".join(entries))
    log = reopen(tmp_path, closed.offsets, clean=True)  # a clean start still never trusts an index blindly
    assert read_all(log) == expected
    assert {t: log.offset_for_timestamp(t) for t in timestamps} == timestamps
    assert {o: (r.offset, r.length) for o in positions if (r := log.read(o, 150))} == positions
    log.close()
    # the rebuilt indexes were saved on close and load cleanly
    again = reopen(tmp_path, log.offsets, clean=True)
    assert {t: again.offset_for_timestamp(t) for t in timestamps} == timestamps
    again.close()


def test_leftovers_are_removed_on_open(tmp_path):
    fill(tmp_path)
    (tmp_path / "00000000000000000000.log.deleted").write_bytes(b"x")
    (tmp_path / "leader-epoch-checkpoint.tmp").write_bytes(b"x")
    (tmp_path / "00000000000099999999.index").write_bytes(b"")
    log = reopen(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert "00000000000000000000.log.deleted" not in names
    assert "leader-epoch-checkpoint.tmp" not in names
    assert "00000000000099999999.index" not in names
    log.close()


def test_damaged_leader_epoch_checkpoint_is_rebuilt_from_the_log(tmp_path):
    log, _ = fill(tmp_path)
    (tmp_path / "leader-epoch-checkpoint").write_text("garbage")
    again = reopen(tmp_path, log.offsets, clean=True)
    assert [(e.epoch, e.start_offset) for e in again.leader_epoch_cache.entries] == [(0, 0), (1, 20), (2, 40)]
    again.close()


def test_the_epoch_checkpoint_is_written_when_the_log_is_flushed(tmp_path):
    log = Log.open(tmp_path, CONFIG, clock=ManualClock())
    log.append_as_leader(batch(2), leader_epoch=3)
    assert not (tmp_path / "leader-epoch-checkpoint").exists()  # an append never writes a file of its own
    log.flush()
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n1\n3 0\n"
    log.append_as_leader(batch(2), leader_epoch=5)
    log.abandon()
    again = reopen(tmp_path, LogOffsets(0, 2, 2))  # recovered above the recovery point: epoch 5 re-read
    assert [(e.epoch, e.start_offset) for e in again.leader_epoch_cache.entries] == [(3, 0), (5, 2)]
    again.close()


def test_epochs_written_after_the_checkpoint_are_recovered(tmp_path):
    log, _ = fill(tmp_path, close=False)
    log.abandon()
    # as if the process died between the log write and the epoch checkpoint write
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    again = reopen(tmp_path)
    assert [(e.epoch, e.start_offset) for e in again.leader_epoch_cache.entries] == [(0, 0), (1, 20), (2, 40)]
    again.close()
