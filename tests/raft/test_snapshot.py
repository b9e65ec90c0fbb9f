from __future__ import annotations

import pytest

from kraftpy.raft.log import SnapshotId
from kraftpy.raft.snapshot import parse_snapshot_file_name, partial_snapshot_file_name, snapshot_file_name


def test_file_name_layout() -> None:
    assert snapshot_file_name(SnapshotId(1234, 5)) == "00000000000000001234-0000000005.checkpoint"


def test_parse_round_trips() -> None:
    sid = SnapshotId(2**40, 77)
    assert parse_snapshot_file_name(snapshot_file_name(sid)) == (sid, False)
    assert parse_snapshot_file_name(partial_snapshot_file_name(sid)) == (sid, True)


@pytest.mark.parametrize("name", ["00000000000000001234-0000000005.log", "1234-5.checkpoint", "quorum-state"])
def test_other_names_are_not_snapshots(name: str) -> None:
    assert parse_snapshot_file_name(name) is None


def test_negative_ids_are_refused() -> None:
    with pytest.raises(ValueError):
        snapshot_file_name(SnapshotId(-1, 0))


def test_snapshot_ids_order_by_end_offset_then_epoch() -> None:
    assert SnapshotId(10, 3) < SnapshotId(11, 1) < SnapshotId(11, 2)
