"""Writes that fail for real (ENOSPC on a small tmpfs): they say which file, leave nothing half-made,
and lose nothing that was written before. The metadata log stops at its first failed write."""

from __future__ import annotations

import errno

import pytest

from kraftpy.fatal import FatalError
from kraftpy.raft.file_log import CLEAN_SHUTDOWN_FILE, METADATA_LOG_DIR_NAME, FileRaftLog
from kraftpy.storage.fsutil import write_atomic
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.log_manager import CLEAN_SHUTDOWN_FILE as LOG_DIR_MARKER
from kraftpy.storage.log_manager import LogManager
from tests.helpers.filesystems import fill, small_filesystem
from tests.helpers.protocol import batch


def test_write_atomic_names_the_file_and_leaves_no_temporary_file(tmp_path):
    with small_filesystem(tmp_path / "fs", "64k") as fs:
        write_atomic(fs / "state", b"old")
        fill(fs)
        with pytest.raises(OSError) as info:
            write_atomic(fs / "state", b"x" * 8192)
        assert info.value.errno == errno.ENOSPC and info.value.filename == str(fs / "state")
        assert (fs / "state").read_bytes() == b"old"
        assert not (fs / "state.tmp").exists()


def test_the_metadata_log_stops_at_its_first_failed_write_and_keeps_what_it_flushed(tmp_path):
    with small_filesystem(tmp_path / "fs", "256k") as fs:
        log = FileRaftLog.open(fs)
        log.append_as_leader([b"record-0000" + bytes(500)], 1)
        log.flush(log.end_offset)  # the segment has a page, partly free, where the next flushes go
        flushed = [log.end_offset]
        filler = fill(fs)
        with pytest.raises(FatalError) as info:
            for i in range(1, 1000):
                log.append_as_leader([b"record-%04d" % i + bytes(500)], 1)
                log.flush(log.end_offset)
                flushed.append(log.end_offset)
        directory = fs / METADATA_LOG_DIR_NAME
        assert str(info.value) == f"cannot write the metadata log in {directory}: No space left on device (ENOSPC)"
        with pytest.raises(FatalError):  # it refuses every later flush, space or not
            log.flush(log.end_offset)
        log.close()  # as a crash would leave it
        assert not (directory / CLEAN_SHUTDOWN_FILE).exists()

        filler.unlink()
        reopened = FileRaftLog.open(fs)
        assert len(flushed) > 2 and reopened.end_offset >= flushed[-1]
        values = [record for b in reopened.read(0, 1 << 30) for record in b.records]
        assert values[:flushed[-1]] == [b"record-%04d" % i + bytes(500) for i in range(flushed[-1])]
        reopened.close()


def test_a_clean_shutdown_on_a_full_disk_closes_every_log_and_leaves_no_marker(tmp_path):
    """The checkpoints cannot be written: the logs are closed all the same, and without the marker
    the next start recovers them from their files."""
    with small_filesystem(tmp_path / "fs", "256k") as fs:
        manager = LogManager([fs / "data"])
        manager.load()
        logs = [manager.open_log(fs / "data" / f"t-{i}", _config()) for i in range(3)]
        for log in logs:
            log.append_as_leader(batch(b"v"), 0)
        filler = fill(fs)
        failed = manager.close_all(logs)
        assert all(log.closed for log in logs)
        assert failed and failed[-1][0] is None and failed[-1][1].errno == errno.ENOSPC
        assert not (fs / "data" / LOG_DIR_MARKER).exists()
        filler.unlink()
        again = LogManager([fs / "data"])
        again.load()
        assert not again.dirs[fs / "data"].clean_shutdown
        for i in range(3):
            reopened = again.open_log(fs / "data" / f"t-{i}", _config())
            assert reopened.log_end_offset == 1
            reopened.close()


def test_a_log_dir_that_cannot_be_loaded_is_offline_and_the_others_load(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    bad.write_bytes(b"a file where a directory should be")
    manager = LogManager([good, bad])
    manager.load()
    assert manager.online_dirs == [good]
    assert list(manager.offline_dirs) == [bad] and "(EEXIST)" in manager.offline_dirs[bad]
    log = manager.open_log(good / "t-0", _config())
    manager.checkpoint([log])  # nothing is written to the offline directory
    assert bad.read_bytes() == b"a file where a directory should be"
    assert manager.close_all([log]) == []


def _config() -> LogConfig:
    return LogConfig()
