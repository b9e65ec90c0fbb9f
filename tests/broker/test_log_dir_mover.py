"""copy_step: a future log follows the current one as a follower would — the leader's bytes at their
offsets, truncations, a log start offset moved up, a failure of its own files told apart."""

from __future__ import annotations

import errno

import pytest

from kraftpy.broker.log_dir_mover import FutureLogError, copy_step
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from tests.helpers.protocol import batch

CONFIG = LogConfig(segment_bytes=1024)


def make_logs(tmp_path) -> tuple[Log, Log]:
    return Log.open(tmp_path / "t-0", CONFIG), Log.open(tmp_path / "t-0.abc-future", CONFIG)


def fill(log: Log, n: int, epoch: int = 3) -> None:
    for i in range(n):
        log.append_as_leader(batch(b"value-%04d" % i + bytes(100)), epoch)


def copy_all(current: Log, future: Log) -> None:
    for _ in range(1000):
        if copy_step(current, future, max_bytes=600) == 0:
            return
    raise AssertionError("the copy did not converge")


def test_the_future_log_gets_the_current_logs_bytes_at_their_offsets(tmp_path):
    current, future = make_logs(tmp_path)
    fill(current, 40)
    current.update_high_watermark(30)
    assert copy_step(current, future, max_bytes=600) > 0  # one step copies at most max_bytes
    copy_all(current, future)
    assert future.log_end_offset == current.log_end_offset == 40
    assert future.read_bytes(0, 1 << 20, whole_batches=True) == current.read_bytes(0, 1 << 20, whole_batches=True)
    assert len(future.segments) > 1 and future.high_watermark == 30
    assert future.latest_epoch == 3


def test_the_future_log_follows_a_truncation_and_a_new_log_start(tmp_path):
    current, future = make_logs(tmp_path)
    fill(current, 20)
    copy_all(current, future)
    current.truncate_to(12)  # a follower's divergence
    fill(current, 5, epoch=4)
    copy_all(current, future)
    assert future.log_end_offset == 17
    assert future.read_bytes(0, 1 << 20, whole_batches=True) == current.read_bytes(0, 1 << 20, whole_batches=True)
    current.update_high_watermark(17)
    current.delete_records_before(15)  # DeleteRecords
    copy_all(current, future)
    assert future.log_start_offset == 15
    current.truncate_fully_and_start_at(100)  # far behind a leader's start
    fill(current, 2)
    copy_all(current, future)
    assert (future.log_start_offset, future.log_end_offset) == (100, 102)


def test_a_failure_of_the_future_logs_files_is_told_apart(tmp_path):
    current, future = make_logs(tmp_path)
    fill(current, 3)

    def failing(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    future.append_as_follower = failing
    with pytest.raises(FutureLogError) as caught:
        copy_step(current, future)
    assert caught.value.cause.errno == errno.EIO
    current.read_bytes = failing
    with pytest.raises(OSError):
        copy_step(current, future)
