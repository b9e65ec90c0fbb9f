"""Log directories: one set of offset checkpoints for all their partitions, and a clean-shutdown marker."""

from __future__ import annotations

import os

import pytest

from kraftpy.storage import log_manager as log_manager_module
from kraftpy.storage import segment as segment_module
from kraftpy.storage.checkpoint import LEGACY_OFFSETS_FILE, LogOffsets
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_CHECKPOINT_FILE,
    LogManager,
)

from ._support import ManualClock, batch, read_all

CONFIG = LogConfig(segment_bytes=400)


def manager(*dirs):
    m = LogManager(list(dirs), clock=ManualClock())
    m.load()
    return m


def fill(m, directory, batches=10):
    log = m.open_log(directory, CONFIG)
    for i in range(batches):
        log.append_as_leader(batch(2, tag=i), leader_epoch=1)
    log.update_high_watermark(log.log_end_offset - 4)
    return log


def test_three_files_hold_every_partition_of_a_directory(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    logs = [fill(m, a / "orders-0"), fill(m, a / "orders-1", 3), fill(m, b / "audit-7", 5)]
    logs[0].flush(6)
    logs[0].delete_records_before(2)
    m.checkpoint(logs)
    assert sorted(p.name for p in a.iterdir()) == [
        LOG_START_CHECKPOINT_FILE, "orders-0", "orders-1", RECOVERY_POINT_CHECKPOINT_FILE,
        REPLICATION_CHECKPOINT_FILE]
    assert (a / REPLICATION_CHECKPOINT_FILE).read_text() == "0\n2\norders 0 16\norders 1 2\n"
    assert (a / LOG_START_CHECKPOINT_FILE).read_text() == "0\n2\norders 0 2\norders 1 0\n"
    assert (b / REPLICATION_CHECKPOINT_FILE).read_text() == "0\n1\naudit 7 6\n"
    recovery = (a / RECOVERY_POINT_CHECKPOINT_FILE).read_text().splitlines()
    assert recovery[:2] == ["0", "2"] and recovery[2].startswith("orders 0 ")
    # What a restart reads back.
    again = manager(a, b)
    assert again.dirs[a].recorded[("orders", 0)] == logs[0].offsets
    assert again.dirs[b].recorded[("audit", 7)] == LogOffsets(0, logs[2].recovery_point, 6)
    assert not again.dirs[a].clean_shutdown


def test_a_checkpoint_file_that_did_not_change_is_not_written_again(tmp_path):
    a = tmp_path / "a"
    m = manager(a)
    log = fill(m, a / "orders-0")
    m.checkpoint([log])
    inodes = {p.name: p.stat().st_ino for p in a.iterdir() if p.is_file()}
    m.checkpoint([log])  # nothing moved: no file is replaced
    assert {p.name: p.stat().st_ino for p in a.iterdir() if p.is_file()} == inodes
    log.update_high_watermark(log.log_end_offset)
    m.checkpoint([log])  # only the high watermarks moved
    after = {p.name: p.stat().st_ino for p in a.iterdir() if p.is_file()}
    assert after[REPLICATION_CHECKPOINT_FILE] != inodes[REPLICATION_CHECKPOINT_FILE]
    assert after[LOG_START_CHECKPOINT_FILE] == inodes[LOG_START_CHECKPOINT_FILE]
    assert (a / REPLICATION_CHECKPOINT_FILE).read_text() == f"0\n1\norders 0 {log.log_end_offset}\n"


def test_partitions_that_come_and_go_between_checkpoints_are_written_in_order(tmp_path):
    m = manager(tmp_path)
    logs = {name: fill(m, tmp_path / name, 2) for name in ("b-0", "d-0")}
    m.checkpoint(logs.values())
    logs["c-0"] = fill(m, tmp_path / "c-0", 2)  # sorts between the two already written
    m.checkpoint(logs.values())
    assert (tmp_path / REPLICATION_CHECKPOINT_FILE).read_text() == "0\n3\nb 0 0\nc 0 0\nd 0 0\n"
    logs.pop("b-0").close()
    m.forget(tmp_path / "b-0")
    logs["a-0"] = fill(m, tmp_path / "a-0", 2)  # as many partitions as before, not the same ones
    m.checkpoint(logs.values())
    assert (tmp_path / REPLICATION_CHECKPOINT_FILE).read_text() == "0\n3\na 0 0\nc 0 0\nd 0 0\n"
    for log in logs.values():
        log.close()


def test_a_checkpoint_keeps_no_new_object_for_a_partition_whose_offsets_did_not_change(tmp_path):
    # Objects kept from one checkpoint to the next live long enough to reach the oldest generation of
    # the garbage collector: one per partition at every checkpoint brought full collections.
    m = manager(tmp_path)
    logs = [fill(m, tmp_path / f"t-{p}", 2) for p in range(4)]
    m.checkpoint(logs)
    recorded = m.dirs[tmp_path].recorded
    before = {key: id(offsets) for key, offsets in recorded.items()}
    logs[2].update_high_watermark(logs[2].log_end_offset)
    m.checkpoint(logs)
    assert {key for key, offsets in recorded.items() if id(offsets) != before[key]} == {("t", 2)}
    assert recorded[("t", 2)] == logs[2].offsets
    for log in logs:
        log.close()


def test_clean_shutdown_is_trusted_once(tmp_path, monkeypatch):
    m = manager(tmp_path)
    logs = [fill(m, tmp_path / f"t-{p}") for p in range(3)]
    expected = [read_all(log) for log in logs]
    fsyncs, syncs = [], []
    real_fsync, real_sync = os.fsync, log_manager_module.sync_filesystem
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real_fsync(fd))
    monkeypatch.setattr(log_manager_module, "sync_filesystem", lambda p: syncs.append(p) or real_sync(p))
    assert m.close_all(logs) == []
    # One syncfs for the file system, then only the checkpoints and the marker are fsynced: the
    # cost of a clean stop does not grow with the number of logs.
    assert syncs == [tmp_path] and len(fsyncs) <= 8
    monkeypatch.undo()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert all(not (tmp_path / f"t-{p}" / CLEAN_SHUTDOWN_FILE).exists() for p in range(3))

    def no_recovery(self, on_batch=None):
        raise AssertionError("a clean restart must not scan CRCs")

    monkeypatch.setattr(segment_module.LogSegment, "recover", no_recovery)
    again = manager(tmp_path)
    assert again.dirs[tmp_path].clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is not clean
    reopened = [again.open_log(tmp_path / f"t-{p}", CONFIG) for p in range(3)]
    assert [read_all(log) for log in reopened] == expected
    assert [log.high_watermark for log in reopened] == [16, 16, 16]
    for log in reopened:
        log.abandon()
    monkeypatch.undo()
    # No marker this time: the logs are recovered from their recovery points.
    recovered = manager(tmp_path)
    assert not recovered.dirs[tmp_path].clean_shutdown
    log = recovered.open_log(tmp_path / "t-0", CONFIG)
    assert read_all(log) == expected[0] and log.high_watermark == 16
    log.close()


def test_a_checkpoint_keeps_partitions_not_open_yet_until_forgotten(tmp_path):
    m = manager(tmp_path)
    one, two = fill(m, tmp_path / "t-1"), fill(m, tmp_path / "t-2")
    two.update_high_watermark(20)
    two.delete_records_before(10)
    assert m.close_all([one, two]) == []
    again = manager(tmp_path)
    reopened = again.open_log(tmp_path / "t-1", CONFIG)
    again.checkpoint([reopened])  # t-2 is not open (yet): its offsets must not be lost
    assert "t 2 10" in (tmp_path / LOG_START_CHECKPOINT_FILE).read_text()
    again.forget(tmp_path / "t-2")
    again.checkpoint([reopened])
    assert "t 2" not in (tmp_path / LOG_START_CHECKPOINT_FILE).read_text()
    reopened.close()


def test_the_offsets_file_of_earlier_versions_is_read_then_replaced(tmp_path):
    m = manager(tmp_path)
    log = fill(m, tmp_path / "old-0")
    log.update_high_watermark(20)
    log.delete_records_before(8)
    offsets = log.offsets
    log.close()
    for name in (RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_CHECKPOINT_FILE, LOG_START_CHECKPOINT_FILE):
        (tmp_path / name).unlink(missing_ok=True)
    (tmp_path / "old-0" / LEGACY_OFFSETS_FILE).write_text(
        f"0\n3\nlog-start-offset {offsets.log_start_offset}\nrecovery-point {offsets.recovery_point}\n"
        f"high-watermark {offsets.high_watermark}\n")
    again = manager(tmp_path)
    reopened = again.open_log(tmp_path / "old-0", CONFIG)
    assert (reopened.log_start_offset, reopened.high_watermark) == (8, 20)  # (recovered: no marker)
    again.checkpoint([reopened])
    assert not (tmp_path / "old-0" / LEGACY_OFFSETS_FILE).exists()
    assert "old 0 8" in (tmp_path / LOG_START_CHECKPOINT_FILE).read_text()
    reopened.close()


def test_damaged_checkpoints_mean_recovering_everything(tmp_path):
    m = manager(tmp_path)
    log = fill(m, tmp_path / "t-0")
    expected = read_all(log)
    m.close_all([log])
    (tmp_path / RECOVERY_POINT_CHECKPOINT_FILE).write_text("0\n5\nnonsense\n")
    again = manager(tmp_path)
    assert not again.dirs[tmp_path].clean_shutdown and again.dirs[tmp_path].recorded == {}
    reopened = again.open_log(tmp_path / "t-0", CONFIG)
    assert read_all(reopened) == expected
    reopened.close()


def test_partition_directories_are_found_and_checked(tmp_path):
    m = manager(tmp_path)
    for name in ("orders-0", "orders-12", "my-topic-3", "gone-1.0123-delete", "__cluster_metadata-0", "junk"):
        (tmp_path / name).mkdir()
    assert [p.name for p in m.existing_partition_dirs()] == ["my-topic-3", "orders-0", "orders-12"]
    with pytest.raises(ValueError, match="not a partition directory"):
        m.open_log(tmp_path / "junk", CONFIG)
    with pytest.raises(ValueError, match="not in a log directory"):
        m.open_log(tmp_path / "elsewhere" / "t-0", CONFIG)


def test_an_offset_checkpoint_holding_an_impossible_value_is_not_trusted(tmp_path):
    """A damaged replication-offset-checkpoint (a negative high watermark) after a clean stop: the
    directory is recovered from its logs instead, and every record is still there."""
    m = manager(tmp_path)
    logs = [fill(m, tmp_path / f"t-{p}") for p in range(2)]
    expected = [read_all(log) for log in logs]
    assert m.close_all(logs) == []
    (tmp_path / REPLICATION_CHECKPOINT_FILE).write_text("0\n2\nt 0 -7\nt 1 16\n")
    again = manager(tmp_path)
    assert again.dirs[tmp_path].recorded == {} and not again.dirs[tmp_path].clean_shutdown
    reopened = [again.open_log(tmp_path / f"t-{p}", CONFIG) for p in range(2)]
    assert [read_all(log) for log in reopened] == expected
    assert all(log.high_watermark >= 0 for log in reopened)
